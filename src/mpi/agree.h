/* agree.h — error agreement for the collective saver over MPI (the loader agrees over its
 * transport the same way: src/load/transport.c):
 * after each phase of a collective call every rank learns whether any rank failed and returns
 * the first failing rank's status and message, so no rank goes on to a collective operation
 * the others skip (no hangs) and all report the same error. */
#ifndef CK_MPI_AGREE_H
#define CK_MPI_AGREE_H

#include "ckpt.h"

#include <mpi.h>

/* Collective over `comm` (this process is `rank`): `st` is this rank's status and `err` its
 * error (may be NULL).  Returns CKPT_OK when every rank passed CKPT_OK; else the status of
 * the lowest failing rank, and *err (when given) holds "rank R: <its message>" on every
 * rank. */
ckpt_status ck_mpi_agree(MPI_Comm comm, int rank, ckpt_status st, ckpt_error *err);

#endif
