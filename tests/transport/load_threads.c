/* load_threads.c — the collective loader driven by a caller-supplied transport that is not
 * MPI (ckpt_load_open_transport): N threads of one process are the ranks, and their
 * collectives meet in shared memory behind a barrier with a timeout.  Every rank loads its
 * local shard of every tensor under a layout spec and dumps it (OUTDIR/rank<k>/<path>, as
 * `ckpt load --dump`); faults can be injected into one rank's transport or storage.
 *
 *   load_threads DIR SPEC OUTDIR [--mode collective|independent] [--direct-min N]
 *                [--budget N] [--derived] [--timeout-ms N] [--dir-of K:DIR]
 *                [--fault K:OP:N:KIND] [--transport auto|host|nccl|device]
 *                [--device] [--hooks] [--hooks-device N] [--corrupt-hooks]
 *   load_threads --check-open DIR
 *
 * --derived leaves bcast and allreduce_min_u64 NULL (the loader builds them from allgatherv).
 * --dir-of: rank K opens DIR instead (a copy with damaged or missing shard files).
 * Built with LOAD_THREADS_CUDA (tests/gpu: against the stand-in CUDA runtime, mock_cudart.c),
 * --device requests every shard into device memory (copied back to be dumped), --hooks gives
 * the transport device hooks (ckpt_transport.device: dalltoallv copies device to device
 * between the threads' buffers, cudaMemcpyAsync on the loader's stream; dsync waits for the
 * stream, then for every rank's; --hooks-device: the device they name, default 0, the
 * stand-in's current device), and --corrupt-hooks makes each block the hooks receive
 * start with its second byte (a planted bug the comparison must catch).
 * --fault: rank K's N-th call (1-based) of OP (allgatherv, alltoallv, bcast, min, and the
 * device hooks' dalltoallv and dsync) fails:
 *   lone  the call completes but returns an error on rank K alone (allowed for data calls);
 *   op    that call fails on every rank (rank K's failure is seen by all), the transport
 *         stays usable;
 *   down  rank K's call fails and the transport is down for good: every rank's pending and
 *         later calls fail (a torch.distributed group after a timeout).
 * The barrier's timeout (default 20 s) turns a rank that never arrives into an error on the
 * others: a loader bug that skips a collective on one rank shows up as a failure, not a hang.
 *
 * Prints one line per rank: "rank\tK\tSTATUS\tMESSAGE" then
 * "stats\tK\tREAD\tUNION\tCALLS\tMETA\tMETA_RECV\tDATA\tADOPTED\tSENT\tTRANSPORT\tDEVICE\tDCALLS"
 * (READ: the plan's reads; CALLS: the transport calls the rank made; META: bytes_read_metadata;
 * META_RECV: bytes_received_metadata; DATA: bytes_read; ADOPTED: chunks_adopted; SENT:
 * bytes_sent; TRANSPORT: the stats' transport; DEVICE: bytes_device; DCALLS: device
 * all-to-alls); exits 0 when every rank loaded, 1 otherwise. */
#include "ckpt_load.h"

#ifdef LOAD_THREADS_CUDA
#include <cuda_runtime_api.h>
#endif

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

enum { OP_ALLGATHERV, OP_ALLTOALLV, OP_BCAST, OP_MIN, OP_DALLTOALLV, OP_DSYNC, OP_COUNT };
static const char *const op_names[OP_COUNT] = {"allgatherv", "alltoallv",  "bcast",
                                               "min",        "dalltoallv", "dsync"};
enum { KIND_LONE, KIND_OP, KIND_DOWN };
/* the transport's error codes */
enum {
    E_FAULT = 101,
    E_PEER_FAULT = 102,
    E_DOWN = 103,
    E_TIMEOUT = 104,
    E_MISMATCH = 105,
    E_LONE = 106,
    E_CUDA = 107
};

/* What a rank posts for the current collective (read by the others between the barriers). */
typedef struct slot {
    int op;
    const void *send;
    size_t send_bytes;
    const size_t *counts, *displs; /* alltoallv: send counts and displacements */
    uint64_t *values;              /* min */
    size_t n;                      /* min: values; bcast: bytes */
    int root;
    void *stream; /* dalltoallv: the caller's stream */
} slot;

typedef struct hub {
    int size;
    int timeout_ms;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
    uint64_t gen;
    bool down;
    char down_why[200]; /* protected by mu */
    slot *slots;        /* written by their rank before the first barrier of a call */
    /* fault */
    int f_rank, f_op, f_nth, f_kind;
    long poison_seq; /* the collective (by sequence) that fails everywhere (KIND_OP), or -1 */
    char poison_why[200];
    bool corrupt; /* --corrupt-hooks */
} hub;

/* One rank's transport context. */
typedef struct rank_ctx {
    hub *h;
    int rank;
    long seq;            /* collectives entered */
    int calls[OP_COUNT]; /* per op */
    char lone_why[200];
    char text[300];
} rank_ctx;

/* 0 once every rank arrived; an error code when the transport is down or the wait timed out
 * (then the transport is down for everyone). */
static int barrier(hub *h) {
    pthread_mutex_lock(&h->mu);
    if (h->down) {
        pthread_mutex_unlock(&h->mu);
        return E_DOWN;
    }
    uint64_t g = h->gen;
    if (++h->arrived == h->size) {
        h->arrived = 0;
        h->gen++;
        pthread_cond_broadcast(&h->cv);
        pthread_mutex_unlock(&h->mu);
        return 0;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += h->timeout_ms / 1000;
    until.tv_nsec += (long)(h->timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    int rc = 0;
    while (h->gen == g && !h->down && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&h->cv, &h->mu, &until);
    int out = 0;
    if (h->gen == g) {
        if (!h->down) {
            h->down = true;
            snprintf(h->down_why, sizeof h->down_why, "a barrier timed out after %d ms",
                     h->timeout_ms);
            pthread_cond_broadcast(&h->cv);
            out = E_TIMEOUT;
        } else {
            out = E_DOWN;
        }
    }
    pthread_mutex_unlock(&h->mu);
    return out;
}

/* The start of a collective: counts the call, applies an injected fault.  Returns 0 to go on,
 * or the code to return at once (KIND_DOWN); *lone says to fail after completing. */
static int enter(rank_ctx *c, int op, const slot *mine, bool *lone) {
    hub *h = c->h;
    *lone = false;
    c->seq++;
    int nth = ++c->calls[op];
    h->slots[c->rank] = *mine;
    if (c->rank != h->f_rank || op != h->f_op || nth != h->f_nth) return 0;
    pthread_mutex_lock(&h->mu);
    int rc = 0;
    if (h->f_kind == KIND_LONE) {
        *lone = true;
        snprintf(c->lone_why, sizeof c->lone_why,
                 "injected fault: rank %d's call %d of %s failed here alone", c->rank, nth,
                 op_names[op]);
    } else if (h->f_kind == KIND_OP) {
        h->poison_seq = c->seq;
        snprintf(h->poison_why, sizeof h->poison_why,
                 "injected fault: rank %d's call %d of %s failed", c->rank, nth, op_names[op]);
    } else {
        h->down = true;
        snprintf(h->down_why, sizeof h->down_why,
                 "injected fault: rank %d's call %d of %s failed, the transport is down", c->rank,
                 nth, op_names[op]);
        pthread_cond_broadcast(&h->cv);
        rc = E_FAULT;
    }
    pthread_mutex_unlock(&h->mu);
    return rc;
}

/* Between the barriers: whether this collective was poisoned (KIND_OP). */
static int poisoned(rank_ctx *c) {
    pthread_mutex_lock(&c->h->mu);
    int p = c->h->poison_seq == c->seq;
    pthread_mutex_unlock(&c->h->mu);
    return p ? (c->rank == c->h->f_rank ? E_FAULT : E_PEER_FAULT) : 0;
}

/* The end of a collective: the second barrier (no rank reuses its buffers before the others
 * have read them), then the outcome. */
static int leave(rank_ctx *c, int rc, bool lone) {
    int b = barrier(c->h);
    if (rc) return rc;
    if (b) return b;
    return lone ? E_LONE : 0;
}

static int mismatch(rank_ctx *c, const char *what, int peer) {
    hub *h = c->h;
    pthread_mutex_lock(&h->mu);
    if (!h->down) {
        h->down = true;
        snprintf(h->down_why, sizeof h->down_why, "rank %d: %s disagrees with rank %d's", c->rank,
                 what, peer);
        pthread_cond_broadcast(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
    return E_MISMATCH;
}

static int t_allgatherv(void *ctx, const void *send, size_t send_bytes, void *recv,
                        const size_t *recv_bytes, const size_t *recv_displs) {
    rank_ctx *c = ctx;
    hub *h = c->h;
    bool lone;
    int rc = enter(c, OP_ALLGATHERV,
                   &(slot){.op = OP_ALLGATHERV, .send = send, .send_bytes = send_bytes}, &lone);
    if (rc) return rc;
    if ((rc = barrier(h))) return rc;
    rc = poisoned(c);
    for (int j = 0; !rc && j < h->size; j++) {
        const slot *s = &h->slots[j];
        if (s->op != OP_ALLGATHERV)
            rc = mismatch(c, "the operation", j);
        else if (s->send_bytes != recv_bytes[j])
            rc = mismatch(c, "a count", j);
        else if (s->send_bytes && (uint8_t *)recv + recv_displs[j] != s->send)
            memcpy((uint8_t *)recv + recv_displs[j], s->send, s->send_bytes);
    }
    return leave(c, rc, lone);
}

static int t_alltoallv(void *ctx, const void *send, const size_t *send_bytes,
                       const size_t *send_displs, void *recv, const size_t *recv_bytes,
                       const size_t *recv_displs) {
    rank_ctx *c = ctx;
    hub *h = c->h;
    bool lone;
    int rc = enter(
        c, OP_ALLTOALLV,
        &(slot){.op = OP_ALLTOALLV, .send = send, .counts = send_bytes, .displs = send_displs},
        &lone);
    if (rc) return rc;
    if ((rc = barrier(h))) return rc;
    rc = poisoned(c);
    for (int j = 0; !rc && j < h->size; j++) {
        const slot *s = &h->slots[j];
        if (s->op != OP_ALLTOALLV)
            rc = mismatch(c, "the operation", j);
        else if (s->counts[c->rank] != recv_bytes[j])
            rc = mismatch(c, "a count", j);
        else if (recv_bytes[j])
            memcpy((uint8_t *)recv + recv_displs[j], (const uint8_t *)s->send + s->displs[c->rank],
                   recv_bytes[j]);
    }
    return leave(c, rc, lone);
}

static int t_bcast(void *ctx, void *buf, size_t bytes, int root) {
    rank_ctx *c = ctx;
    hub *h = c->h;
    bool lone;
    int rc =
        enter(c, OP_BCAST, &(slot){.op = OP_BCAST, .send = buf, .n = bytes, .root = root}, &lone);
    if (rc) return rc;
    if ((rc = barrier(h))) return rc;
    rc = poisoned(c);
    for (int j = 0; !rc && j < h->size; j++)
        if (h->slots[j].op != OP_BCAST || h->slots[j].n != bytes || h->slots[j].root != root)
            rc = mismatch(c, "a broadcast", j);
    if (!rc && c->rank != root && bytes) memcpy(buf, h->slots[root].send, bytes);
    return leave(c, rc, lone);
}

static int t_min(void *ctx, uint64_t *values, size_t n) {
    rank_ctx *c = ctx;
    hub *h = c->h;
    bool lone;
    int rc = enter(c, OP_MIN, &(slot){.op = OP_MIN, .values = values, .n = n}, &lone);
    if (rc) return rc;
    if ((rc = barrier(h))) return rc;
    rc = poisoned(c);
    uint64_t m[16];
    if (!rc && n > 16) rc = mismatch(c, "a minimum's length", c->rank);
    for (size_t i = 0; !rc && i < n; i++) {
        m[i] = UINT64_MAX;
        for (int j = 0; !rc && j < h->size; j++) {
            if (h->slots[j].op != OP_MIN || h->slots[j].n != n)
                rc = mismatch(c, "a minimum", j);
            else if (h->slots[j].values[i] < m[i])
                m[i] = h->slots[j].values[i];
        }
    }
    rc = leave(c, rc, lone); /* nobody reads values any more */
    if (!rc) memcpy(values, m, n * sizeof *values);
    return rc;
}

#ifdef LOAD_THREADS_CUDA
/* The device hooks: every rank copies its blocks from the peers' send buffers into its
 * receive buffer with cudaMemcpyAsync device to device on its own stream (all ranks are
 * threads of one process, one device), after the work queued before the call (the packs):
 * the stream is synchronized first, as a collective kernel would wait for it. */
static int t_dev_alltoallv(void *ctx, const void *send, const size_t *send_bytes,
                           const size_t *send_displs, void *recv, const size_t *recv_bytes,
                           const size_t *recv_displs, void *stream) {
    rank_ctx *c = ctx;
    hub *h = c->h;
    bool lone;
    int rc = enter(c, OP_DALLTOALLV,
                   &(slot){.op = OP_DALLTOALLV,
                           .send = send,
                           .counts = send_bytes,
                           .displs = send_displs,
                           .stream = stream},
                   &lone);
    if (rc) return rc;
    int cuda = cudaStreamSynchronize(stream) != cudaSuccess ? E_CUDA : 0;
    if ((rc = barrier(h))) return rc;
    rc = cuda ? cuda : poisoned(c);
    for (int j = 0; !rc && j < h->size; j++) {
        const slot *s = &h->slots[j];
        uint8_t *to = (uint8_t *)recv + recv_displs[j];
        if (s->op != OP_DALLTOALLV)
            rc = mismatch(c, "the operation", j);
        else if (s->counts[c->rank] != recv_bytes[j])
            rc = mismatch(c, "a count", j);
        else if (recv_bytes[j] &&
                 cudaMemcpyAsync(to, (const uint8_t *)s->send + s->displs[c->rank], recv_bytes[j],
                                 cudaMemcpyDeviceToDevice, stream) != cudaSuccess)
            rc = E_CUDA;
        else if (h->corrupt && recv_bytes[j] >= 2 &&
                 cudaMemcpyAsync(to, to + 1, 1, cudaMemcpyDeviceToDevice, stream) != cudaSuccess)
            rc = E_CUDA;
    }
    return leave(c, rc, lone);
}

/* Waits for this rank's copies, then for every rank's (the peers' send buffers are read
 * until then), then reports: an injected fault is an error learnt after the wait (so the
 * stream holds nothing of the transfer whatever sync returns, and no rank frees a buffer a
 * peer's copy still reads). */
static int t_dev_sync(void *ctx, void *stream) {
    rank_ctx *c = ctx;
    int cuda = cudaStreamSynchronize(stream) != cudaSuccess ? E_CUDA : 0;
    int rc = barrier(c->h);
    bool lone;
    int frc = enter(c, OP_DSYNC, &(slot){.op = OP_DSYNC, .stream = stream}, &lone);
    if (frc) return frc;
    if (rc) return rc;
    if ((rc = barrier(c->h))) return rc;
    rc = cuda ? cuda : poisoned(c);
    for (int j = 0; !rc && j < c->h->size; j++)
        if (c->h->slots[j].op != OP_DSYNC) rc = mismatch(c, "the operation", j);
    return leave(c, rc, lone);
}
#endif

static const char *t_strerror(void *ctx, int code) {
    rank_ctx *c = ctx;
    hub *h = c->h;
    pthread_mutex_lock(&h->mu);
    if (code == E_LONE)
        snprintf(c->text, sizeof c->text, "%s", c->lone_why);
    else if (h->down) /* the same text on every rank */
        snprintf(c->text, sizeof c->text, "transport down: %s", h->down_why);
    else if (code == E_FAULT || code == E_PEER_FAULT)
        snprintf(c->text, sizeof c->text, "%s", h->poison_why);
    else if (code == E_CUDA)
        snprintf(c->text, sizeof c->text, "a CUDA call of the device hooks failed");
    else
        snprintf(c->text, sizeof c->text, "code %d", code);
    pthread_mutex_unlock(&h->mu);
    return c->text;
}

typedef struct args {
    const char *dir, *spec, *out;
    ckpt_load_options o;
    bool derived;
    bool device, hooks; /* device destinations; device hooks (LOAD_THREADS_CUDA builds) */
    int hooks_device;   /* the hooks' device (--hooks-device; the stand-in's current: 0) */
    int dir_of_rank;
    const char *dir_of;
} args;

typedef struct rank_run {
    const args *a;
    hub *h;
    rank_ctx ctx;
    ckpt_status status;
    ckpt_error err;
    ckpt_load_stats stats;
    int calls;
} rank_run;

static int mkdirs(char *path) { /* the directories above path */
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        int rc = mkdir(path, 0755);
        *p = '/';
        if (rc != 0 && errno != EEXIST) return -1;
    }
    return 0;
}

typedef struct dbuf {
    const ckpt_entry *e;
    uint8_t *data;
    size_t size;
    void *dev; /* --device: the destination (copied back into data) */
} dbuf;

/* --device: a device buffer for a shard, and the copy back after the load. */
static void *dev_alloc(size_t bytes) {
#ifdef LOAD_THREADS_CUDA
    void *p = NULL;
    return cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
#else
    (void)bytes;
    return NULL;
#endif
}

static int dev_copy_back(dbuf *b) {
#ifdef LOAD_THREADS_CUDA
    return b->size && cudaMemcpy(b->data, b->dev, b->size, cudaMemcpyDeviceToHost) != cudaSuccess;
#else
    (void)b;
    return 1;
#endif
}

static void dev_release(void *p) {
#ifdef LOAD_THREADS_CUDA
    cudaFree(p);
#else
    (void)p;
#endif
}

static void *rank_main(void *p) {
    rank_run *rr = p;
    const args *a = rr->a;
    int rank = rr->ctx.rank;
    ckpt_transport t = {
        .version = CKPT_TRANSPORT_VERSION,
        .rank = rank,
        .size = rr->h->size,
        .ctx = &rr->ctx,
        .allgatherv = t_allgatherv,
        .alltoallv = t_alltoallv,
        .bcast = a->derived ? NULL : t_bcast,
        .allreduce_min_u64 = a->derived ? NULL : t_min,
        .strerror = t_strerror,
    };
#ifdef LOAD_THREADS_CUDA
    const ckpt_transport_device hooks = {
        .device = a->hooks_device, .alltoallv = t_dev_alltoallv, .sync = t_dev_sync};
    if (a->hooks) t.device = &hooks;
#endif
    ckpt_layout lay;
    ckpt_load *l = NULL;
    const char *dir = rank == a->dir_of_rank ? a->dir_of : a->dir;
    rr->status = ckpt_layout_parse(a->spec, &lay, &rr->err);
    if (rr->status == CKPT_OK) rr->status = ckpt_load_open_transport(&t, dir, NULL, &l, &rr->err);
    if (rr->status != CKPT_OK) goto out;
    ckpt_reader *r = ckpt_load_reader(l);
    size_t n = ckpt_reader_num_entries(r), nb = 0;
    dbuf *bufs = calloc(n ? n : 1, sizeof *bufs);
    uint32_t coord[CKPT_LAYOUT_MAX_MESH_NDIM];
    ckpt_layout_coord(&lay, (uint32_t)rank, coord);
    for (size_t i = 0; bufs && i < n; i++) {
        const ckpt_entry *e = ckpt_reader_entry(r, i);
        if (ckpt_entry_kind_of(e) != CKPT_ENTRY_TENSOR) continue;
        ckpt_layout_shard *sh = NULL;
        if (ckpt_layout_shard_new(&lay, ckpt_entry_ndim(e), ckpt_entry_shape(e), coord, &sh,
                                  &rr->err) != CKPT_OK) {
            fprintf(stderr, "rank %d: %s: %s\n", rank, ckpt_entry_key(e), rr->err.message);
            abort(); /* a driver bug, not what the test checks */
        }
        size_t bytes = ckpt_dtype_itemsize(ckpt_entry_dtype(e)) * ckpt_layout_shard_numel(sh);
        ckpt_layout_shard_free(sh);
        bufs[nb] = (dbuf){e, malloc(bytes ? bytes : 1), bytes, a->device ? dev_alloc(bytes) : NULL};
        if (!bufs[nb].data || (a->device && !bufs[nb].dev) ||
            ckpt_load_request_layout(
                l, ckpt_entry_key(e), &lay, coord, a->device ? bufs[nb].dev : bufs[nb].data, bytes,
                a->device ? CKPT_LOAD_MEM_CUDA : CKPT_LOAD_MEM_HOST, &rr->err) != CKPT_OK) {
            fprintf(stderr, "rank %d: request %s: %s\n", rank, ckpt_entry_key(e), rr->err.message);
            abort();
        }
        nb++;
    }
    if (!bufs) abort();
    rr->status = ckpt_load_execute(l, &a->o, &rr->err);
    ckpt_load_get_stats(l, &rr->stats, sizeof rr->stats);
    for (size_t i = 0; rr->status == CKPT_OK && i < nb; i++) {
        char path[8192];
        snprintf(path, sizeof path, "%s/rank%d/%s", a->out, rank, ckpt_entry_path(bufs[i].e));
        if (a->device && dev_copy_back(&bufs[i])) {
            fprintf(stderr, "rank %d: %s: the copy back from device memory failed\n", rank, path);
            abort();
        }
        FILE *f = mkdirs(path) == 0 ? fopen(path, "wb") : NULL;
        if (!f || fwrite(bufs[i].data, 1, bufs[i].size, f) != bufs[i].size) {
            fprintf(stderr, "rank %d: %s: %s\n", rank, path, strerror(errno));
            abort();
        }
        fclose(f);
    }
    for (size_t i = 0; i < nb; i++) {
        free(bufs[i].data);
        dev_release(bufs[i].dev);
    }
    free(bufs);
out:
    ckpt_load_free(l);
    for (int k = 0; k < OP_COUNT; k++)
        rr->calls += rr->ctx.calls[k];
    return NULL;
}

/* --check-open DIR: ckpt_load_open_transport refuses bad transports on the calling rank,
 * before any callback, and calls destroy exactly once, also on failure.  Prints
 * "open\tCASE\tSTATUS\tDESTROYED\tCALLS\tMESSAGE" per case. */
static int g_calls; /* (this mode only: one thread) */
static int count_gatherv(void *ctx, const void *send, size_t n, void *recv, const size_t *rb,
                         const size_t *rd) {
    (void)ctx;
    g_calls++;
    if (n != rb[0]) return 1;
    if (n && (uint8_t *)recv + rd[0] != send) memcpy((uint8_t *)recv + rd[0], send, n);
    return 0;
}
static int count_alltoallv(void *ctx, const void *send, const size_t *sb, const size_t *sd,
                           void *recv, const size_t *rb, const size_t *rd) {
    (void)ctx;
    g_calls++;
    if (sb[0] != rb[0]) return 1;
    if (sb[0]) memcpy((uint8_t *)recv + rd[0], (const uint8_t *)send + sd[0], sb[0]);
    return 0;
}
static void count_destroy(void *ctx) { ++*(int *)ctx; }
static int count_dev_alltoallv(void *ctx, const void *send, const size_t *sb, const size_t *sd,
                               void *recv, const size_t *rb, const size_t *rd, void *stream) {
    (void)ctx, (void)send, (void)sb, (void)sd, (void)recv, (void)rb, (void)rd, (void)stream;
    g_calls++;
    return 1;
}
static int count_dev_sync(void *ctx, void *stream) {
    (void)ctx, (void)stream;
    g_calls++;
    return 1;
}

static int check_open(const char *dir) {
    static const ckpt_transport_device dev = {0};
    static const ckpt_transport_device nosync = {.alltoallv = count_dev_alltoallv};
    static const ckpt_transport_device hooks = {.alltoallv = count_dev_alltoallv,
                                                .sync = count_dev_sync};
    const char *cases[] = {
        "ok",           "version", "rank",           "size",         "no-allgatherv",
        "no-alltoallv", "device",  "device-no-sync", "device-hooks", "missing-dir"};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int destroyed = 0;
        ckpt_transport t = {.version = CKPT_TRANSPORT_VERSION,
                            .rank = 0,
                            .size = 1,
                            .ctx = &destroyed,
                            .allgatherv = count_gatherv,
                            .alltoallv = count_alltoallv,
                            .destroy = count_destroy};
        const char *c = cases[i], *d = dir;
        if (!strcmp(c, "version")) t.version = CKPT_TRANSPORT_VERSION + 1;
        if (!strcmp(c, "rank")) t.rank = 1;
        if (!strcmp(c, "size")) t.size = 0;
        if (!strcmp(c, "no-allgatherv")) t.allgatherv = NULL;
        if (!strcmp(c, "no-alltoallv")) t.alltoallv = NULL;
        if (!strcmp(c, "device")) t.device = &dev;
        if (!strcmp(c, "device-no-sync")) t.device = &nosync;
        if (!strcmp(c, "device-hooks")) t.device = &hooks; /* accepted; the open calls neither */
        if (!strcmp(c, "missing-dir")) d = "/nonexistent/ckpt";
        ckpt_load *l = NULL;
        ckpt_error err = {0};
        g_calls = 0;
        ckpt_status s = ckpt_load_open_transport(&t, d, NULL, &l, &err);
        int after_open = destroyed, calls = g_calls;
        if ((s == CKPT_OK) != (l != NULL)) return 1;
        if (l && !strcmp(c, "ok")) { /* ckpt_load_get_stats writes no more than asked */
            ckpt_load_stats two[2];
            size_t older = offsetof(ckpt_load_stats, bytes_received_metadata), bad = 0;
            memset(two, 0xAB, sizeof two);
            size_t lib = ckpt_load_get_stats(l, &two[0], older);
            for (size_t b = older; b < sizeof two; b++)
                bad += ((const unsigned char *)two)[b] != 0xAB;
            size_t none = ckpt_load_get_stats(l, NULL, 0);
            memset(two, 0xAB, sizeof two);
            ckpt_load_get_stats(l, &two[0], sizeof two[0]);
            for (size_t b = sizeof two[0]; b < sizeof two; b++)
                bad += ((const unsigned char *)two)[b] != 0xAB;
            printf("stats-abi\t%zu\t%zu\t%zu\t%zu\t%llu\n", lib, none, sizeof two[0], bad,
                   (unsigned long long)two[0].bytes_requested);
        }
        ckpt_load_free(l);
        printf("open\t%s\t%d\t%d/%d\t%d\t%s\n", c, (int)s, after_open, destroyed, calls,
               s ? err.message : "");
    }
    return 0;
}

static int usage(void) {
    fprintf(stderr, "usage: load_threads DIR SPEC OUTDIR [--mode collective|independent] "
                    "[--direct-min N] [--budget N] [--derived] [--timeout-ms N] "
                    "[--dir-of K:DIR] [--fault K:OP:N:lone|op|down] "
                    "[--transport auto|host|nccl|device] [--device] [--hooks] [--hooks-device N] "
                    "[--corrupt-hooks]\n");
    return 2;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--check-open")) return check_open(argv[2]);
    if (argc < 4) return usage();
    args a = {.dir = argv[1], .spec = argv[2], .out = argv[3], .dir_of_rank = -1};
    a.o.io_threads = 2;
    hub h = {.timeout_ms = 20000, .f_rank = -1, .poison_seq = -1};
    for (int i = 4; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--derived") || !strcmp(argv[i], "--device") ||
            !strcmp(argv[i], "--hooks") || !strcmp(argv[i], "--corrupt-hooks")) {
#ifndef LOAD_THREADS_CUDA
            if (strcmp(argv[i], "--derived")) {
                fprintf(stderr, "load_threads: %s needs a LOAD_THREADS_CUDA build\n", argv[i]);
                return 2;
            }
#endif
            a.derived |= !strcmp(argv[i], "--derived");
            a.device |= !strcmp(argv[i], "--device");
            a.hooks |= !strcmp(argv[i], "--hooks");
            h.corrupt |= !strcmp(argv[i], "--corrupt-hooks");
            continue;
        }
        if (!v) return usage();
        i++;
        if (!strcmp(argv[i - 1], "--mode")) {
            a.o.mode = !strcmp(v, "independent") ? CKPT_LOAD_INDEPENDENT : CKPT_LOAD_COLLECTIVE;
        } else if (!strcmp(argv[i - 1], "--direct-min")) {
            a.o.direct_min_bytes = strtoull(v, NULL, 10);
        } else if (!strcmp(argv[i - 1], "--budget")) {
            a.o.staging_bytes = strtoull(v, NULL, 10);
        } else if (!strcmp(argv[i - 1], "--transport")) {
            a.o.transport = !strcmp(v, "host")     ? CKPT_LOAD_TRANSPORT_HOST
                            : !strcmp(v, "nccl")   ? CKPT_LOAD_TRANSPORT_NCCL
                            : !strcmp(v, "device") ? CKPT_LOAD_TRANSPORT_DEVICE
                                                   : CKPT_LOAD_TRANSPORT_AUTO;
        } else if (!strcmp(argv[i - 1], "--hooks-device")) {
            a.hooks_device = atoi(v);
        } else if (!strcmp(argv[i - 1], "--timeout-ms")) {
            h.timeout_ms = atoi(v);
        } else if (!strcmp(argv[i - 1], "--dir-of")) {
            a.dir_of_rank = atoi(v);
            a.dir_of = strchr(v, ':');
            if (!a.dir_of++) return usage();
        } else if (!strcmp(argv[i - 1], "--fault")) {
            char op[32], kind[16];
            if (sscanf(v, "%d:%31[a-z]:%d:%15s", &h.f_rank, op, &h.f_nth, kind) != 4)
                return usage();
            h.f_op = -1;
            for (int k = 0; k < OP_COUNT; k++)
                if (!strcmp(op, op_names[k])) h.f_op = k;
            h.f_kind = !strcmp(kind, "lone")   ? KIND_LONE
                       : !strcmp(kind, "op")   ? KIND_OP
                       : !strcmp(kind, "down") ? KIND_DOWN
                                               : -1;
            if (h.f_op < 0 || h.f_kind < 0) return usage();
        } else {
            return usage();
        }
    }
    ckpt_layout lay;
    ckpt_error err;
    if (ckpt_layout_parse(a.spec, &lay, &err) != CKPT_OK) {
        fprintf(stderr, "load_threads: %s\n", err.message);
        return 2;
    }
    h.size = (int)ckpt_layout_nranks(&lay);
    pthread_mutex_init(&h.mu, NULL);
    pthread_cond_init(&h.cv, NULL);
    h.slots = calloc((size_t)h.size, sizeof *h.slots);
    rank_run *runs = calloc((size_t)h.size, sizeof *runs);
    pthread_t *tids = calloc((size_t)h.size, sizeof *tids);
    if (!h.slots || !runs || !tids) return 1;
    for (int k = 0; k < h.size; k++) {
        runs[k] = (rank_run){.a = &a, .h = &h, .ctx = {.h = &h, .rank = k}};
        if (pthread_create(&tids[k], NULL, rank_main, &runs[k]) != 0) return 1;
    }
    int rc = 0;
    for (int k = 0; k < h.size; k++)
        pthread_join(tids[k], NULL);
    for (int k = 0; k < h.size; k++) {
        printf("rank\t%d\t%d\t%s\n", k, (int)runs[k].status,
               runs[k].status ? runs[k].err.message : "");
        rc |= runs[k].status != CKPT_OK;
    }
    for (int k = 0; k < h.size; k++)
        printf("stats\t%d\t%llu\t%llu\t%d\t%llu\t%llu\t%llu\t%llu\t%llu\t%d\t%llu\t%d\n", k,
               (unsigned long long)runs[k].stats.bytes_read_plan,
               (unsigned long long)runs[k].stats.union_bytes, runs[k].calls,
               (unsigned long long)runs[k].stats.bytes_read_metadata,
               (unsigned long long)runs[k].stats.bytes_received_metadata,
               (unsigned long long)runs[k].stats.bytes_read,
               (unsigned long long)runs[k].stats.chunks_adopted,
               (unsigned long long)runs[k].stats.bytes_sent, (int)runs[k].stats.transport,
               (unsigned long long)runs[k].stats.bytes_device, runs[k].ctx.calls[OP_DALLTOALLV]);
    free(h.slots);
    free(runs);
    free(tids);
    pthread_mutex_destroy(&h.mu);
    pthread_cond_destroy(&h.cv);
    return rc;
}
