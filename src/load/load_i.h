/* load_i.h — private state of the collective loader: the rank's requests, the job-wide piece
 * table every rank computes identically, and the helpers of each phase. */
#ifndef CK_LOAD_LOAD_I_H
#define CK_LOAD_LOAD_I_H

#include "ckpt_load.h"
#include "ckpt_transport.h"

/* One request of this rank: a box of a tensor, its destination laid out with dstride (bytes
 * per dim: C order of the box, or, `strided`, the strides of a larger buffer the box sits in,
 * as one run box of a _StridedShard local shard sits in the local tensor: tensor/mesh.h). */
typedef struct lreq {
    const ckpt_entry *e;
    int64_t start[CKPT_MAX_NDIM];
    int64_t count[CKPT_MAX_NDIM];
    int64_t dstride[CKPT_MAX_NDIM];
    uint8_t *dst;
    size_t size;  /* the box's bytes */
    bool strided; /* dstride is not the C order of the box */
    bool local;   /* served by this rank alone (decoded or byte-swapped chunks) */
    bool device;  /* dst is CUDA device memory */
} lreq;

/* A transfer of some rank's request: one stored chunk's region intersected with the
 * request's box, in strided form (never one entry per row: rows are walked only while bytes
 * move).  Row i (a multi-index over the `ndim` outer dims) is `len` bytes of data file `file`
 * at off + sum(i[d] * sstride[d]), going to byte dst + sum(i[d] * dstride[d]) of request
 * `req` of rank `owner`; ndim 0 is one contiguous run.  Strides are positive.  lo and hi
 * bound its bytes in the file (derived).  The wire format is GPIECE_WIRE bytes. */
#define GPIECE_DIMS 4
typedef struct gpiece {
    int32_t file;
    uint32_t req;
    uint64_t off;
    uint64_t len;
    uint64_t dst;
    uint32_t ndim;
    int64_t count[GPIECE_DIMS];
    int64_t sstride[GPIECE_DIMS];
    int64_t dstride[GPIECE_DIMS];
    uint64_t lo, hi; /* derived: the file extent [lo, hi) */
    uint32_t owner;  /* filled after the gather */
} gpiece;
#define GPIECE_WIRE (36 + 24 * GPIECE_DIMS)
/* Fills lo and hi from the other fields. */
void gpiece_extent(gpiece *g);
/* Calls fn for every row of piece q that meets bytes [a, b) of its file, in row order, with
 * the part that does: file offset `lo`, `n` bytes, going to byte `dst` of the request. */
typedef void (*row_fn)(void *ctx, const gpiece *q, uint64_t lo, uint64_t n, uint64_t dst);
void gpiece_rows(const gpiece *q, uint64_t a, uint64_t b, row_fn fn, void *ctx);

/* A byte range of a data file. */
typedef struct frange {
    int32_t file;
    uint64_t off;
    uint64_t len;
} frange;

/* io.c: parallel large preads on a small per-rank thread pool. */
typedef struct io_job {
    int32_t file;
    uint64_t off, len;
    uint8_t *dst;
    const uint8_t *buf; /* the destination buffer dst lies in (device copies: copy_run) */
} io_job;
typedef struct io_pool io_pool;
/* Default of ckpt_load_options.io_piece_bytes (io_threads: auto_io_threads in load.c). */
#define LOAD_IO_PIECE ((uint64_t)4 << 20)
/* nthreads in all, the caller included (1: no extra thread). */
ckpt_status io_pool_create(unsigned nthreads, io_pool **out, ckpt_error *err);
void io_pool_free(io_pool *p);
unsigned io_pool_threads(const io_pool *p);
/* Reads every job (jobs longer than 2*piece split into pieces of `piece` bytes, or of an even
 * share of the batch per thread when that is smaller, at least 256 KiB) with the
 * pool's threads and the caller's; the error is the first failing job's, in job order. */
ckpt_status io_pool_read(io_pool *p, ckpt_reader *r, const io_job *jobs, size_t njobs,
                         uint64_t piece, ckpt_error *err);

/* A run of copies not yet issued (device.c, nccl.c): a copy into the same destination
 * buffer `buf` that continues the run in both destination and source extends it (true);
 * otherwise the caller issues the run and starts a new one.  Copies into different buffers
 * never merge, however adjacent their addresses: separate cudaMalloc blocks are often
 * adjacent, and CUDA refuses one copy spanning two allocations ("invalid argument"). */
typedef struct copy_run {
    const uint8_t *buf;
    uint8_t *dst;
    const uint8_t *src;
    uint64_t len;
} copy_run;
static inline bool copy_run_extend(copy_run *r, const uint8_t *buf, uint8_t *dst,
                                   const uint8_t *src, uint64_t n) {
    if (!r->len || r->buf != buf || r->dst + r->len != dst || r->src + r->len != src) return false;
    r->len += n;
    return true;
}

/* device.c (cuda builds) or nodevice.c: device destinations and the device sink, which
 * copies bytes to device memory through two pinned halves of `bytes` in all. */
typedef struct dev_sink dev_sink;
bool dev_supported(void);
bool dev_pointer_is_device(const void *p);
ckpt_status dev_sink_create(uint64_t bytes, dev_sink **out, ckpt_error *err);
void dev_sink_free(dev_sink *s);
uint64_t dev_sink_bytes(const dev_sink *s);
/* Free room in the half being filled; when fewer than `want` bytes are free and the half is
 * not empty, moves to the other half first (waiting for its earlier copies).  NULL on error. */
uint8_t *dev_sink_room(dev_sink *s, uint64_t want, uint64_t *avail, ckpt_error *err);
/* The next n bytes of the room (filled by the caller) are copied to device address dst,
 * which lies in the destination buffer (one allocation) starting at buf. */
ckpt_status dev_sink_fill(dev_sink *s, const uint8_t *buf, uint8_t *dst, uint64_t n,
                          ckpt_error *err);
/* Copies n host bytes to device address dst (in buffer buf) through the sink. */
ckpt_status dev_sink_put(dev_sink *s, const uint8_t *buf, uint8_t *dst, const uint8_t *src,
                         uint64_t n, ckpt_error *err);
/* Waits for every copy issued. */
ckpt_status dev_sink_finish(dev_sink *s, ckpt_error *err);

/* devstage.c (cuda builds) or nodevice.c: the device side of a device-to-device exchange,
 * shared by the NCCL link and the transport's device hooks.  A stage holds one non-blocking
 * stream and the staging of an execute: a pinned host window (what a reader preads), its
 * device copy, and device send and receive buffers.  Copies are queued on the stream in
 * order (runs merged as copy_run says); dev_stage_wait waits for all of them. */
typedef struct dev_stage dev_stage;
ckpt_status dev_stage_create(dev_stage **out, ckpt_error *err);
/* Waits for the stream, frees the staging and buffers; keeps the stream. */
void dev_stage_release(dev_stage *x);
/* Forgets the copies not yet queued (after an aborted transfer). */
void dev_stage_drop(dev_stage *x);
void dev_stage_free(dev_stage *x);
void *dev_stage_stream(dev_stage *x); /* a cudaStream_t */
uint8_t *dev_stage_send(dev_stage *x);
uint8_t *dev_stage_recv(dev_stage *x);
/* The pinned host window of at least `bytes` (and its device twin); waits for the stream. */
ckpt_status dev_stage_window(dev_stage *x, uint64_t bytes, uint8_t **host, ckpt_error *err);
/* Device send and receive buffers of at least these sizes (call between rounds). */
ckpt_status dev_stage_reserve(dev_stage *x, uint64_t send, uint64_t recv, ckpt_error *err);
/* Queued: the first n bytes of the host window to its device twin. */
ckpt_status dev_stage_upload(dev_stage *x, uint64_t n, ckpt_error *err);
/* Queued device-to-device copies of n bytes: window[from] to send[to]; window[from] to dst;
 * recv[from] to dst (dst in the destination buffer starting at buf). */
ckpt_status dev_stage_pack(dev_stage *x, uint64_t to, uint64_t from, uint64_t n, ckpt_error *err);
ckpt_status dev_stage_place(dev_stage *x, const uint8_t *buf, uint8_t *dst, uint64_t from,
                            uint64_t n, ckpt_error *err);
ckpt_status dev_stage_deliver(dev_stage *x, const uint8_t *buf, uint8_t *dst, uint64_t from,
                              uint64_t n, ckpt_error *err);
/* Queues the copies not yet queued (before anything else uses the stream). */
ckpt_status dev_stage_flush(dev_stage *x, ckpt_error *err);
/* Queues them and waits for everything queued. */
ckpt_status dev_stage_wait(dev_stage *x, ckpt_error *err);
/* The device the caller runs on (cudaGetDevice), -1 when there is none. */
int dev_current(void);

/* nccl.c (cuda + nccl builds) or nonccl.c: the NCCL transport of the exchange.  A link holds
 * the NCCL communicator (made over the handle's transport) and a device stage, whose stream
 * its groups are queued on; nccl_link_sync waits for all of it. */
typedef struct nccl_link nccl_link;
bool nccl_supported(void);
/* Collective: makes l->nccl when there is none (rank 0's ncclGetUniqueId, load_bcast,
 * ncclCommInitRank); the agreed status.  A kept link whose device is not the current one
 * fails. */
ckpt_status nccl_link_open(ckpt_load *l, ckpt_error *err);
void nccl_link_free(nccl_link *x);
/* The link's stage (the window, the buffers, the stream). */
dev_stage *nccl_link_staging(nccl_link *x);
/* One ncclGroupStart/End: to every other rank j, sc[j] bytes of send from sd[j]; from it,
 * rc[j] bytes into recv at rd[j]. */
ckpt_status nccl_link_exchange(nccl_link *x, const int *sc, const int *sd, const int *rc,
                               const int *rd, ckpt_error *err);
/* Waits for everything queued, then asks the communicator for an asynchronous error. */
ckpt_status nccl_link_sync(nccl_link *x, ckpt_error *err);
/* After an execute: frees the staging and buffers (waiting first), keeps the communicator. */
void nccl_link_release(nccl_link *x);
/* After a failed group (agreed on every rank): ncclCommAbort, then frees the link. */
void nccl_link_abort(nccl_link *x);

struct ckpt_load {
    ckpt_transport t;           /* the caller's (a copy); t.ctx is destroyed by ckpt_load_free */
    ckpt_transport_device tdev; /* a copy of *t.device, which then points here */
    int rank, size;
    /* transport.c's scratch: counts and displacements (size each), the gathered minimum
     * (size * LOAD_MIN_MAX, when the transport has no allreduce_min_u64) */
    size_t *tcounts, *tdispls;
    uint64_t *tmin;
    ckpt_status broken; /* an agreement failed (ckpt_transport.h T2): every collective fails */
    ckpt_error broken_err;
    ckpt_reader *r;
    io_pool *io;              /* created by the first execute, kept while io_threads stays */
    unsigned auto_io_threads; /* the default of io_threads, found at open (collective) */
    uint64_t io_piece;        /* of the current execute */
    dev_sink *dev;            /* made by an execute with device destinations, kept while it fits */
    nccl_link *nccl;          /* made by the first execute over NCCL, kept until ckpt_load_free */
    dev_stage *hooks;         /* made by the first execute over the device hooks, kept */
    bool use_nccl;  /* the current execute's exchange goes over NCCL (same on every rank) */
    bool use_hooks; /* ... over the transport's device hooks (same on every rank) */
    dev_stage *dx;  /* the stage of the current execute's device exchange (NCCL's or hooks),
                       NULL when the exchange goes through host memory */
    lreq *reqs;
    size_t nreqs, reqs_cap;
    ckpt_load_stats stats;
    uint64_t meta_received; /* metadata bytes the open received instead of reading them */
};

/* transport.c: the loader's use of its transport.  The data calls return this rank's status
 * (CKPT_E_TRANSPORT naming `what` when the callback failed), to be agreed before the data are
 * used; a broken handle fails them at once. */
#define LOAD_MIN_MAX 8 /* values per load_min_u64 */
ckpt_status load_transport_check(const ckpt_transport *t, ckpt_error *err);
ckpt_status load_transport_init(ckpt_load *l, ckpt_error *err);
void load_transport_fini(ckpt_load *l); /* frees the scratch, destroys t.ctx */
ckpt_status load_allgatherv(ckpt_load *l, const void *send, size_t n, void *recv,
                            const size_t *counts, const size_t *displs, const char *what,
                            ckpt_error *err);
/* n bytes from every rank: rank k's at all + k * n. */
ckpt_status load_allgather(ckpt_load *l, const void *mine, size_t n, void *all, const char *what,
                           ckpt_error *err);
ckpt_status load_alltoallv(ckpt_load *l, const void *send, const size_t *sc, const size_t *sd,
                           void *recv, const size_t *rc, const size_t *rd, const char *what,
                           ckpt_error *err);
ckpt_status load_bcast(ckpt_load *l, void *buf, size_t n, int root, const char *what,
                       ckpt_error *err);
/* The device hooks (t.device): an all-to-all of device buffers queued on `stream`, and the wait
 * for it (called after every device all-to-all, also a failed one); this rank's status, to be
 * agreed, as load_alltoallv's. */
ckpt_status load_dev_alltoallv(ckpt_load *l, const void *send, const size_t *sc, const size_t *sd,
                               void *recv, const size_t *rc, const size_t *rd, void *stream,
                               ckpt_error *err);
ckpt_status load_dev_sync(ckpt_load *l, void *stream, ckpt_error *err);
/* Element-wise minimum over the ranks, in place (n <= LOAD_MIN_MAX); all-or-nothing: a failure
 * breaks the handle. */
ckpt_status load_min_u64(ckpt_load *l, uint64_t *v, size_t n, const char *what, ckpt_error *err);
/* The same status and message on every rank: the lowest failing rank's, "rank K: ..."; a
 * broken handle returns its error. */
ckpt_status load_agree(ckpt_load *l, ckpt_status s, ckpt_error *err);

/* plan.c: every rank's transfers, sorted by (owner, file, lo); the union of their bytes
 * split into `size` contiguous byte-balanced shares (reader k reads shares[k]).  The union is
 * computed from the transfers' extents: a strided transfer's rows count as one range when the
 * job's transfers with the same row pattern cover every byte between its rows (a band);
 * otherwise (a job that leaves holes between a chunk's rows) its rows are listed (nrows). */
typedef struct load_plan {
    gpiece *pieces;
    size_t npieces;
    size_t *owner_first; /* size + 1 entries: pieces of owner j are [first[j], first[j+1]) */
    frange **shares;
    size_t *nshares;
    uint64_t *share_bytes;
    uint64_t union_bytes; /* every needed byte, once */
    /* this rank's direct ranges: needed by one contiguous piece only, read straight into place */
    frange *direct;
    size_t *direct_piece; /* index in pieces */
    size_t ndirect;
    uint64_t direct_bytes;
    uint64_t nranges; /* ranges the union was computed from (bands, runs, listed rows) */
    uint64_t nrows;   /* of them, rows listed one by one (holes between a chunk's rows) */
    uint64_t memory;  /* peak bytes of the plan's tables on this rank */
} load_plan;
/* Default of ckpt_load_options.direct_min_bytes. */
#define LOAD_DIRECT_MIN ((uint64_t)4 << 10)
ckpt_status load_plan_build(ckpt_load *l, const gpiece *mine, size_t nmine, uint64_t direct_min,
                            load_plan *p, ckpt_error *err);
void load_plan_release(load_plan *p, int size);

/* share.c: what one rank reads for the job.  load_open_reader: l->r for `dir` (collective,
 * agreed): rank 0 reads DCP metadata files whole and broadcasts them, every rank indexes the
 * checkpoint from those bytes (*shared true); other formats: rank 0 opens the checkpoint with
 * its metadata reads recorded (util/iotap.h) and broadcasts them, the others open it
 * answering the same reads from them (*shared false: the data files' names are compared);
 * one rank opens it as ckpt_reader_open.  load_share_chunks (collective, agreed): the unresolved
 * stored chunks this rank's requests meet are resolved once across the job, each by one of the
 * ranks that need it, the others adopting the result (stats.chunks_adopted). */
ckpt_status load_open_reader(ckpt_load *l, const char *dir, const ckpt_open_options *opts,
                             bool *shared, ckpt_error *err);
ckpt_status load_share_chunks(ckpt_load *l, ckpt_error *err);

/* exchange.c: the rounds of reading and redistribution. */
ckpt_status load_exchange(ckpt_load *l, const load_plan *p, uint64_t staging_bytes,
                          ckpt_error *err);

/* todevice.c: reads into device destinations through l->dev. */
ckpt_status load_read_to_device(ckpt_load *l, const io_job *jobs, size_t njobs, ckpt_error *err);
ckpt_status load_region_to_device(ckpt_load *l, const lreq *q, ckpt_error *err);

#endif
