/* save_mpi_i.h — internals of the collective saver (ckpt_save_mpi.h): the handle, the pieces
 * waiting for the next flush, error agreement and the replica plan. */
#ifndef CK_SAVE_MPI_SAVE_MPI_I_H
#define CK_SAVE_MPI_SAVE_MPI_I_H

#include "ckpt_save_mpi.h"
#include "save/save_i.h"

/* A piece added and not yet written: its resolved key and box (in `id`: kind, key, path,
 * dtype, ndim, dims = global shape, offsets, sizes), the caller's buffer or the value. */
typedef struct smpi_piece {
    save_item id;
    const void *data; /* the caller's buffer (host or device), read at the flush */
    size_t data_size;
    ckpt_save_memory memory;
    ckpt_save_value *value; /* owned */
    void *archive;          /* owned: a value's ready torch.save archive (else NULL) */
    size_t archive_len;
} smpi_piece;

struct ckpt_save_mpi {
    MPI_Comm comm;
    int rank, size;
    ckpt_save_options opts;
    ckpt_save_mpi_options mopts;
    char *dir;          /* final directory (rank 0) */
    ckpt_save_txn *txn; /* rank 0 */
    ckpt_save_file *file;
    smpi_piece *pending;
    size_t npending, cap;
    ckpt_status failed; /* sticky: a local add's error, or the agreed error of a collective */
    ckpt_error ferr;
    bool agreed; /* `failed` is known to every rank (no agreement needed any more) */
    bool committed;
    ckpt_save_mpi_stats stats;
    double t0;
};

/* Every rank passes its status `s` (and its message in err); all return the first failing
 * rank's status with its message prefixed "rank K: ", or CKPT_OK.  A failure becomes the
 * handle's agreed, sticky error on every rank. */
ckpt_status smpi_agree(ckpt_save_mpi *s, ckpt_status st, ckpt_error *err);

/* Collective: for each pending piece of this rank, writer[i] = true when no lower rank added a
 * piece with the same kind, key and box in this flush.  Fails (identically everywhere) only
 * when the plan exceeds MPI's int counts; a malformed record from another rank fails locally. */
ckpt_status smpi_plan_writers(ckpt_save_mpi *s, bool *writer, ckpt_error *err);

double smpi_now(void);

#endif
