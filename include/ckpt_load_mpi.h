/* ckpt_load_mpi.h — the collective loader (ckpt_load.h) over MPI, for MPI programs: the
 * entry point ckpt_load_open took before transports, and the MPI transport itself.  Built
 * when MPI is found; in libckpt_mpi (pkg-config ckpt-load).
 *
 * The MPI transport keeps ckpt_transport.h's contract the way MPI does: collective calls on a
 * duplicate of the caller's communicator; an MPI error fails the call (MPI's default error
 * handler, MPI_ERRORS_ARE_FATAL, aborts the job instead: nobody hangs either way); counts
 * above INT_MAX fail with the code MPI_ERR_COUNT. */
#ifndef CKPT_LOAD_MPI_H
#define CKPT_LOAD_MPI_H

#include "ckpt_load.h"

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Collective over `comm` (duplicated internally): every rank opens and indexes `dir`;
 * ckpt_load_open_transport over ckpt_transport_mpi_new(comm). */
ckpt_status ckpt_load_open(MPI_Comm comm, const char *dir, const ckpt_open_options *opts,
                           ckpt_load **out, ckpt_error *err);

/* Fills *out with the MPI transport over a duplicate of `comm` (collective: MPI_Comm_dup).
 * Its destroy frees the duplicate; hand it to ckpt_load_open_transport, which calls it.  Also
 * a working example of a transport (src/load/transport_mpi.c).  CKPT_E_NOMEM, or
 * CKPT_E_TRANSPORT when MPI fails. */
ckpt_status ckpt_transport_mpi_new(MPI_Comm comm, ckpt_transport *out, ckpt_error *err);

#ifdef __cplusplus
}
#endif
#endif /* CKPT_LOAD_MPI_H */
