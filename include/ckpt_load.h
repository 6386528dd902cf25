/* ckpt_load.h — the collective loader: the ranks of a job, in any layout, load their parts of
 * a checkpoint with every needed stored byte read from storage exactly once across the job.
 * Each rank describes what it wants (a region of a tensor, a list of boxes, the local shard of
 * a DTensor layout (device mesh and placements), a Shard(d)-of-N slice with torch.chunk
 * semantics, or the whole tensor) and where it goes; one collective call plans who reads what
 * (the union of all requests split into contiguous, byte-balanced ranges of the shard files),
 * reads it with large preads, and moves every piece to the ranks that need it over the
 * handle's transport (or, between device buffers, over the transport's device hooks or, in
 * builds with NCCL, over NCCL), in rounds bounded by a staging budget.
 *
 * The ranks talk through a transport (ckpt_transport.h): the caller's, with
 * ckpt_load_open_transport (no MPI needed: this header does not include mpi.h), or MPI's, with
 * ckpt_load_open in ckpt_load_mpi.h.
 *
 * Conventions as in ckpt.h.  Every call taking the handle after the open is made by one
 * thread per rank; the open and ckpt_load_execute are collective and return the same status
 * (and message) on every rank: an error anywhere fails the call everywhere, without hanging
 * (under the transport's contract, ckpt_transport.h). */
#ifndef CKPT_LOAD_H
#define CKPT_LOAD_H

#include "ckpt.h"
#include "ckpt_transport.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ckpt_load ckpt_load;

typedef enum ckpt_load_mode {
    CKPT_LOAD_COLLECTIVE = 0,  /* each stored byte read once, redistributed between ranks */
    CKPT_LOAD_INDEPENDENT = 1, /* every rank reads its own overlaps (the baseline) */
} ckpt_load_mode;

/* How exchanged bytes travel between ranks. */
typedef enum ckpt_load_transport {
    CKPT_LOAD_TRANSPORT_AUTO = 0, /* device to device when every rank has device destinations
                                     only (at least one): over the transport's device hooks
                                     when every rank's transport has them (DEVICE), else over
                                     NCCL when the build has it; HOST otherwise, and when the
                                     hooks' stage or the NCCL communicator cannot be made */
    CKPT_LOAD_TRANSPORT_HOST = 1, /* the handle's transport (ckpt_transport.h: MPI's
                                     MPI_Alltoallv, or the caller's) through host memory */
    CKPT_LOAD_TRANSPORT_MPI = CKPT_LOAD_TRANSPORT_HOST, /* (its name before transports) */
    CKPT_LOAD_TRANSPORT_NCCL = 2,   /* ncclSend/ncclRecv device to device over the loader's own
                                       NCCL communicator: every destination of every rank must
                                       be device memory (a rank with no requests uses its
                                       current device); CKPT_E_UNSUPPORTED without the nccl
                                       feature */
    CKPT_LOAD_TRANSPORT_DEVICE = 3, /* device to device over the transport's device hooks
                                       (ckpt_transport.device), as NCCL's rounds but one hooks'
                                       alltoallv per round: every destination device memory,
                                       every rank's transport with hooks, their device the
                                       current one (CKPT_E_UNSUPPORTED without the cuda
                                       feature or without hooks on some rank) */
} ckpt_load_transport;

typedef struct ckpt_load_options {
    ckpt_load_mode mode;
    /* memory a rank may use for staging (default 256 MiB); when any rank has device
     * destinations, a quarter of it (at most 32 MiB) is the pinned device staging */
    uint64_t staging_bytes;
    /* Runs of at least this many bytes that only one request needs are read by that rank
     * straight into place instead of through the exchange (default 4 KiB; UINT64_MAX:
     * never).  Every byte is still read once. */
    uint64_t direct_min_bytes;
    /* Threads reading a rank's ranges in parallel, the calling thread included (1: the
     * caller alone).  They never call the transport.  Default: the CPUs this rank may run on
     * (sched_getaffinity) divided among the ranks of its node that may run on the same
     * CPUs, from 2 to 16 (so an unbound rank per GPU uses the node's cores, and a rank that
     * mpirun bound to one core gets 2). */
    unsigned io_threads;
    /* Ranges longer than two pieces are read in pieces of this many bytes spread over the
     * threads (default 4 MiB; smaller values are for tests). */
    uint64_t io_piece_bytes;
    /* Between ranks: the handle's transport, its device hooks or NCCL (default auto).  The
     * hooks' stream and staging are made by the first execute that uses them, kept until
     * ckpt_load_free (the buffers are freed after each execute).  The NCCL communicator is
     * made by the first execute that uses it (collective: rank 0's ncclGetUniqueId goes to
     * every rank over the handle's transport) and kept until ckpt_load_free; it belongs to the
     * device current then. */
    ckpt_load_transport transport;
} ckpt_load_options;

typedef struct ckpt_load_stats {
    uint64_t bytes_requested; /* bytes of this rank's destination buffers */
    /* bytes the preads of shard files returned on this rank during the execute, whatever
     * read them: the plan's in-place runs and windows, the reader library for decoded (zstd)
     * or byte-swapped chunks and in the independent mode (a strided slice read through
     * slabs counts the slabs), the container headers read when a chunk is first used (zip
     * records of torch.save items).  The change of the reader's counter over the execute
     * (ckpt_reader_get_stats), so reads by other threads through the same reader meanwhile
     * count too.  Metadata files are not in it: bytes_read_metadata. */
    uint64_t bytes_read;
    uint64_t bytes_sent;     /* to other ranks */
    uint64_t bytes_received; /* from other ranks */
    uint64_t bytes_local;    /* read and decoded locally (transformed or byte-swapped chunks) */
    uint64_t union_bytes;    /* the job's needed stored bytes, counted once (same everywhere) */
    uint32_t rounds;
    /* setup: the device staging, the I/O threads and the NCCL communicator, when made; then
     * planning, reading (in-place runs and windows), moving and placing; total: all */
    double seconds_plan, seconds_read, seconds_exchange, seconds_total;
    uint64_t bytes_device;         /* placed in CUDA destinations: host-to-device through the pinned
                                      staging, or device-to-device from a device exchange */
    ckpt_load_transport transport; /* what the exchange used: HOST (MPI's or the caller's
                                      transport), NCCL or DEVICE (the transport's hooks) */
    uint64_t bytes_sent_nccl;      /* of bytes_sent, sent with ncclSend */
    uint64_t bytes_received_nccl;  /* of bytes_received, received with ncclRecv */
    double seconds_nccl_init;      /* making the NCCL communicator (0 when cached) */
    unsigned io_threads;           /* the I/O threads the execute used */
    double seconds_setup;          /* see above (seconds_nccl_init is part of it) */
    uint64_t preads;               /* the pread calls counted in bytes_read */
    /* of bytes_read, the collective plan's reads (in-place runs and this rank's windows), as
     * planned: summed over ranks, union_bytes (each needed stored byte read once); 0 in the
     * independent mode */
    uint64_t bytes_read_plan;
    /* bytes the preads of metadata files (`.metadata`, index json, safetensors headers)
     * returned on this rank since ckpt_load_open (in the open: DCP metadata on rank 0 only,
     * other formats' on every rank) */
    uint64_t bytes_read_metadata;
    /* the collective plan's size (same on every rank but plan_memory): the job's transfers
     * (one per request and stored chunk it meets, in strided form: never one per row), the
     * ranges the union of needed bytes was computed from (runs, bands of rows), of them the
     * rows listed one by one (only where the job's requests leave holes between a stored
     * chunk's rows), and the peak bytes of this rank's plan tables; 0 in the independent mode */
    uint64_t plan_transfers;
    uint64_t plan_ranges;
    uint64_t plan_rows;
    uint64_t plan_memory;
    /* DCP metadata is read by rank 0 alone and broadcast (docs/loader.md "Read once"): the
     * metadata bytes this rank received over the transport instead of reading them (0 on rank
     * 0, in one-rank jobs and for formats without `.metadata`); summed over the job,
     * bytes_read_metadata is one copy of the metadata files */
    uint64_t bytes_received_metadata;
    /* stored chunks whose container headers (torch.save zip records) another rank read for
     * this one in this execute (each chunk several ranks need is resolved by one of them) */
    uint64_t chunks_adopted;
    /* New fields are only ever appended here (ckpt_load_get_stats). */
} ckpt_load_stats;

/* Where a destination buffer lives. */
typedef enum ckpt_load_memory {
    CKPT_LOAD_MEM_AUTO = 0, /* CUDA builds ask the CUDA runtime (cudaPointerGetAttributes);
                               builds without CUDA take host memory */
    CKPT_LOAD_MEM_HOST = 1,
    CKPT_LOAD_MEM_CUDA = 2, /* CUDA device memory (CKPT_E_UNSUPPORTED without the cuda feature) */
} ckpt_load_memory;

/* Whether this build can load into CUDA device memory. */
bool ckpt_load_has_cuda(void);
/* Whether this build can move exchanged bytes over NCCL (CKPT_LOAD_TRANSPORT_NCCL). */
bool ckpt_load_has_nccl(void);

/* Collective over the transport `t` (ckpt_transport.h; copied, its ctx kept until
 * ckpt_load_free, which calls t->destroy when set): every rank opens and indexes `dir`, and
 * the ranks check they see the same data files.  A bad transport (wrong version, rank out of
 * range, a required callback NULL, device hooks without alltoallv or sync) fails with
 * CKPT_E_INVAL or CKPT_E_UNSUPPORTED on this rank alone, before any callback is made;
 * t->destroy is called before any failure returns.  MPI programs: ckpt_load_open (ckpt_load_mpi.h).
 */
ckpt_status ckpt_load_open_transport(const ckpt_transport *t, const char *dir,
                                     const ckpt_open_options *opts, ckpt_load **out,
                                     ckpt_error *err);
/* Frees the handle (and its NCCL communicator, if an execute made one: then every rank should
 * call it, as destroying an NCCL communicator may wait for its peers). */
void ckpt_load_free(ckpt_load *l);
/* The rank's reader (for listing entries, shapes, non-tensor values). */
ckpt_reader *ckpt_load_reader(ckpt_load *l);

/* Requests: the region [start, start+count) of tensor `key` (flat key or tree path; start and
 * count NULL for the whole tensor) into `dst` (C order, dst_size >= its bytes; host memory,
 * or in CUDA builds device memory, told apart by the CUDA runtime).  Buffers must stay valid
 * until ckpt_load_execute returns.  Device destinations are filled from pinned staging
 * buffers (within the staging budget) with asynchronous copies on the loader's own stream,
 * all complete when ckpt_load_execute returns; the caller's current device should be the
 * buffers' device. */
ckpt_status ckpt_load_request(ckpt_load *l, const char *key, const int64_t *start,
                              const int64_t *count, void *dst, size_t dst_size, ckpt_error *err);
/* The same, saying where dst lives. */
ckpt_status ckpt_load_request_mem(ckpt_load *l, const char *key, const int64_t *start,
                                  const int64_t *count, void *dst, size_t dst_size,
                                  ckpt_load_memory mem, ckpt_error *err);
/* The slice rank `rank` of `nranks` holds under Shard(dim) (see ckpt_shard_box). */
ckpt_status ckpt_load_request_shard(ckpt_load *l, const char *key, int dim, uint32_t nranks,
                                    uint32_t rank, void *dst, size_t dst_size, ckpt_error *err);
/* Boxes of one tensor into one buffer: box i (starts/counts: ndim values each, at [i * ndim])
 * goes right after box i-1, in C order; dst_size >= the sum of their bytes.  Made as one
 * request per box (on failure none is kept). */
ckpt_status ckpt_load_request_boxes(ckpt_load *l, const char *key, size_t nboxes,
                                    const int64_t *starts, const int64_t *counts, void *dst,
                                    size_t dst_size, ckpt_load_memory mem, ckpt_error *err);
/* The local shard mesh coordinate `coord` holds under `layout` (ckpt.h "layouts": DTensor's
 * to_local() of distribute_tensor(full, mesh, placements, src_data_rank=None)), in torch's
 * order; dst_size >= its bytes.  One request per box of ckpt_layout_shard_box (a
 * _StridedShard may make several; on failure none is kept). */
ckpt_status ckpt_load_request_layout(ckpt_load *l, const char *key, const ckpt_layout *layout,
                                     const uint32_t *coord, void *dst, size_t dst_size,
                                     ckpt_load_memory mem, ckpt_error *err);

/* Collective: fills every requested buffer of every rank (a rank with no requests takes part
 * all the same), then forgets the requests.  `opts` may be NULL. */
ckpt_status ckpt_load_execute(ckpt_load *l, const ckpt_load_options *opts, ckpt_error *err);

/* Counters of the last ckpt_load_execute on this rank, into the caller's struct of
 * `out_size` bytes (pass sizeof(ckpt_load_stats) as the caller was compiled with it): the
 * first min(out_size, sizeof(ckpt_load_stats)) bytes are written, never more, so a caller
 * built against an older header (a shorter struct: fields are only appended) is safe with a
 * newer library, and a newer caller's fields the library does not know are left as they were
 * (zero them first).  Returns the library's sizeof(ckpt_load_stats): when it is smaller than
 * out_size, the trailing fields were not filled. */
size_t ckpt_load_get_stats(const ckpt_load *l, ckpt_load_stats *out, size_t out_size);

#ifdef __cplusplus
}
#endif
#endif /* CKPT_LOAD_H */
