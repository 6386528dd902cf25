/* ckpt_save_mpi.h — the collective saver (built when MPI is found): the ranks of an MPI job
 * write one PyTorch Distributed Checkpoint together, each its own `__<rank>_0.distcp`, with
 * rank 0 writing `.metadata` last and publishing the step with one rename.
 *
 *   ckpt_save_mpi_begin(comm, "/ckpt/step-100", &opts, &mopts, &s, &err);   collective
 *   ckpt_save_mpi_add_tensor(s, &key, &piece, &err);                          local, deferred
 *   ckpt_save_mpi_add_value(s, &key, value, &err);                            local, deferred
 *   ckpt_save_mpi_flush(s, &err);           collective, optional: writes what was added so far
 *   ckpt_save_mpi_commit(s, &err);          collective: flush, gather, .metadata, rename,
 *                                           `latest`, retention
 *   ckpt_save_mpi_free(s);
 *
 * Pieces are written at the next flush or commit, not when added, so that the job can decide
 * who stores what: a piece several ranks hold with the same box (a replicated tensor, a value
 * every rank passes) is written once, by the lowest rank holding it, and recorded as a
 * replica elsewhere (replica_id is ignored).  Data buffers must therefore stay valid and
 * unchanged until the next flush / commit returns.  Replicas are matched within one flush:
 * every holder must add a piece before the same flush.
 *
 * Errors: adds fail locally (and poison the handle); the collective calls return the same
 * status and message on every rank — the first failing rank's, prefixed "rank K: " — so one
 * rank's failure (a full disk, an inconsistent shape) fails the save everywhere, never hangs,
 * and leaves no visible step.  After a failure every call returns that error; free the handle.
 * A rank that dies (SIGKILL) mid-write leaves a hidden staging directory and no step.
 *
 * Conventions as in ckpt.h; one thread per rank uses the handle. */
#ifndef CKPT_SAVE_MPI_H
#define CKPT_SAVE_MPI_H

#include "ckpt_save.h"

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ckpt_save_mpi ckpt_save_mpi;

typedef struct ckpt_save_mpi_options {
    /* After the commit, rank 0 points `<parent>/latest` at the new step ... */
    bool set_latest;
    /* ... and keeps only the newest `keep` complete steps of the parent (0: keep all). */
    size_t keep;
    /* Called on each rank after each piece it stores during a flush / commit (bytes of
     * tensor data stored so far by this rank, and in this flush).  May be NULL. */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
} ckpt_save_mpi_options;

typedef struct ckpt_save_mpi_stats {
    uint64_t bytes_added;  /* tensor bytes this rank added */
    uint64_t bytes_stored; /* tensor bytes this rank wrote (replicas held elsewhere excluded) */
    uint64_t file_bytes;   /* size of this rank's data file */
    uint64_t bytes_device; /* tensor bytes stored from CUDA device memory (pinned staging) */
    double seconds_write, seconds_commit, seconds_total;
} ckpt_save_mpi_stats;

/* Collective over `comm` (duplicated internally): rank 0 creates the hidden staging directory
 * beside `dir` (which must not exist), every rank opens its data file in it.  `opts` and
 * `mopts` may be NULL; only rank 0's `dir` and options are used for the directory, every
 * rank's `opts->no_fsync` for its own file. */
ckpt_status ckpt_save_mpi_begin(MPI_Comm comm, const char *dir, const ckpt_save_options *opts,
                                const ckpt_save_mpi_options *mopts, ckpt_save_mpi **out,
                                ckpt_error *err);

/* A piece of a tensor (see ckpt_save_tensor; replica_id is ignored).  The key and shape
 * arrays are copied; `data` (host or, in CUDA builds, device memory: `memory`) is only
 * pointed to and read at the next flush / commit, so it must stay valid and unchanged until
 * then.  An invalid dtype, shape, key or `memory` fails here (CKPT_E_UNSUPPORTED for
 * CKPT_SAVE_MEM_CUDA in a build without CUDA). */
ckpt_status ckpt_save_mpi_add_tensor(ckpt_save_mpi *s, const ckpt_save_key *key,
                                     const ckpt_save_tensor *t, ckpt_error *err);
/* A non-tensor value; takes ownership of `v` in every case (NULL: CKPT_E_NOMEM). */
ckpt_status ckpt_save_mpi_add_value(ckpt_save_mpi *s, const ckpt_save_key *key, ckpt_save_value *v,
                                    ckpt_error *err);

/* A non-tensor value given as its torch.save archive (see ckpt_save_file_add_value_archive),
 * written unchanged; the bytes are copied. */
ckpt_status ckpt_save_mpi_add_value_archive(ckpt_save_mpi *s, const ckpt_save_key *key,
                                            const void *archive, size_t len, ckpt_error *err);

/* Collective: decides who stores each piece added since the last flush and writes them; the
 * buffers may be reused afterwards. */
ckpt_status ckpt_save_mpi_flush(ckpt_save_mpi *s, ckpt_error *err);

/* Collective: flush, close and fsync every file, gather the ranks' descriptions on rank 0
 * (decoded and checked as untrusted input), write `.metadata` last, rename the staging
 * directory to `dir`, then (options) `latest` and retention. */
ckpt_status ckpt_save_mpi_commit(ckpt_save_mpi *s, ckpt_error *err);

/* This rank's counters. */
void ckpt_save_mpi_get_stats(const ckpt_save_mpi *s, ckpt_save_mpi_stats *out);

/* Local.  On rank 0 an uncommitted save is aborted (the staging directory removed), so free
 * after the collective calls returned on every rank (they agree, so an error return is such
 * a point). */
void ckpt_save_mpi_free(ckpt_save_mpi *s);

#ifdef __cplusplus
}
#endif
#endif /* CKPT_SAVE_MPI_H */
