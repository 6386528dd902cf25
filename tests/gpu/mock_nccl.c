/* mock_nccl.c — a stand-in NCCL for testing the loader's NCCL transport on machines without
 * GPUs (test builds only, linked with mock_cudart.c; never installed).  It implements the
 * NCCL calls the loader makes over MPI point-to-point on its own communicator, strictly
 * enough to catch what real NCCL would punish:
 *   - a communicator needs a unique id from ncclGetUniqueId, the same on every rank and made
 *     by the process that becomes rank 0 (else: abort, naming the mistake); ranks must be
 *     distinct and nranks the number of callers;
 *   - ncclSend/ncclRecv buffers must be device memory of the stand-in runtime (a host
 *     pointer aborts), peers in range, types known;
 *   - inside ncclGroupStart/End nothing happens until ncclGroupEnd, which only queues the
 *     group on its stream: the transfers run when the stream is synchronized, in order with
 *     the stream's deferred copies (so packing copies queued before the group are done, and
 *     reading a receive buffer before the stream is synchronized shows stale bytes);
 *   - matching sends and receives must have equal byte counts (a mismatch aborts), and a
 *     group whose peer never posts the matching group aborts after CKPT_MOCK_NCCL_TIMEOUT
 *     seconds (default 60) instead of hanging;
 *   - destroying a communicator with groups still queued aborts (ncclCommAbort drops them).
 * Faults for tests: CKPT_MOCK_NCCL_FAIL=init:R makes ncclCommInitRank fail on rank R (after
 * taking part), =group:R makes rank R's first non-empty ncclGroupEnd fail (its operations
 * dropped, the peers' queued: only ncclCommAbort lets them go).
 * Limits: MPI must be initialized and ncclCommInitRank called by every process of
 * MPI_COMM_WORLD (the communicator is an MPI_Comm_split of it); a group holds one
 * communicator and one stream.  CKPT_MOCK_NCCL_LOG=1 prints each rank's bytes sent and
 * received per communicator on stderr when it is destroyed.
 * Library state (the calling thread's open group) is per thread, as in NCCL. */
#include "mock_cudart.h"

#include <cuda_runtime_api.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#include <mpi.h>

/* nccl.h declares these without a prototype */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ID_MAGIC "ckpt-mock-nccl"

typedef struct mock_id {
    char magic[16];
    int64_t pid;     /* of the process that made it */
    uint64_t host;   /* hash of its host name */
    uint64_t serial; /* ids made by that process */
    uint64_t nonce;
} mock_id;
_Static_assert(sizeof(mock_id) <= sizeof(ncclUniqueId), "mock id fits");

struct ncclComm {
    MPI_Comm mpi;
    int rank, size;
    unsigned *seq;    /* groups with each peer so far: the MPI tag of the next */
    int queued;       /* groups queued on streams, not yet run */
    int aborted;      /* ncclCommAbort: queued groups are dropped, freed by the last */
    int failed_group; /* CKPT_MOCK_NCCL_FAIL=group:R done */
    uint64_t sent, received, groups;
};

typedef struct mop {
    int send;
    void *bytes; /* host address of the device buffer (mock_cuda_device_bytes) */
    size_t n;
    int peer;
} mop;

typedef struct mgroup {
    struct ncclComm *comm;
    mop *ops;
    size_t n;
    unsigned *tags; /* per op */
} mgroup;

/* The calling thread's open group. */
static _Thread_local int depth;
static _Thread_local mop *pending_ops;
static _Thread_local size_t npending, cap_pending;
static _Thread_local struct ncclComm *pending_comm;
static _Thread_local cudaStream_t pending_stream;
static _Thread_local int have_stream;

/* CKPT_MOCK_NCCL_FAIL=what:R: whether `what` fails on rank R. */
static int fault(const char *what, int rank) {
    const char *f = getenv("CKPT_MOCK_NCCL_FAIL");
    size_t n = strlen(what);
    return f && strncmp(f, what, n) == 0 && f[n] == ':' && atoi(f + n + 1) == rank;
}

static void die(const char *fmt, const char *what, long a, long b) {
    fprintf(stderr, "mock_nccl: ");
    fprintf(stderr, fmt, what, a, b);
    fputc('\n', stderr);
    abort();
}

static uint64_t fnv(const void *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
    return h;
}

static size_t type_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
    }
}

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error (mock)";
    case ncclInvalidArgument: return "invalid argument (mock)";
    case ncclInvalidUsage: return "invalid usage (mock)";
    case ncclSystemError: return "system error (mock)";
    default: return "error (mock)";
    }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *out) {
    static _Thread_local uint64_t serial;
    mock_id id;
    memset(&id, 0, sizeof id);
    memcpy(id.magic, ID_MAGIC, sizeof ID_MAGIC);
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    id.pid = (int64_t)getpid();
    id.host = fnv(host, strlen(host));
    id.serial = ++serial;
    id.nonce = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
    memset(out, 0, sizeof *out);
    memcpy(out->internal, &id, sizeof id);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId uid, int rank) {
    mock_id id;
    memcpy(&id, uid.internal, sizeof id);
    if (memcmp(id.magic, ID_MAGIC, sizeof ID_MAGIC) != 0)
        die("%s (rank %ld of %ld)", "ncclCommInitRank: the id was not made by ncclGetUniqueId",
            rank, nranks);
    if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) die("%s (rank %ld of %ld)", "ncclCommInitRank before MPI_Init", rank, nranks);
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    /* every process of MPI_COMM_WORLD calls this; those with the same id form the comm */
    int color = (int)(fnv(&uid, sizeof uid) & 0x7fffffff);
    MPI_Comm_split(MPI_COMM_WORLD, color, rank, &c->mpi);
    MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
    MPI_Comm_size(c->mpi, &c->size);
    if (c->size != nranks)
        die("%s: %ld callers share this id, nranks is %ld",
            "ncclCommInitRank: ranks passed different unique ids (not one id broadcast from rank "
            "0?) or a wrong nranks",
            c->size, nranks);
    int *ranks = calloc((size_t)nranks, sizeof *ranks);
    int64_t *pids = calloc((size_t)nranks, sizeof *pids);
    uint64_t *hosts = calloc((size_t)nranks, sizeof *hosts);
    if (!ranks || !pids || !hosts) die("%s", "out of memory", 0, 0);
    int64_t pid = (int64_t)getpid();
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    uint64_t hh = fnv(host, strlen(host));
    MPI_Allgather(&rank, 1, MPI_INT, ranks, 1, MPI_INT, c->mpi);
    MPI_Allgather(&pid, 1, MPI_INT64_T, pids, 1, MPI_INT64_T, c->mpi);
    MPI_Allgather(&hh, 1, MPI_UINT64_T, hosts, 1, MPI_UINT64_T, c->mpi);
    for (int k = 0; k < nranks; k++)
        if (ranks[k] != k)
            die("%s (rank %ld given twice, or rank %ld missing)",
                "ncclCommInitRank: ranks are not 0..nranks-1", ranks[k], k);
    if (pids[0] != id.pid || hosts[0] != id.host)
        die("%s (rank %ld; id made by process %ld)",
            "ncclCommInitRank: the unique id was not made by rank 0", rank, (long)id.pid);
    free(ranks);
    free(pids);
    free(hosts);
    MPI_Comm_rank(c->mpi, &c->rank);
    c->seq = calloc((size_t)nranks, sizeof *c->seq);
    if (!c->seq) die("%s", "out of memory", 0, 0);
    if (fault("init", rank)) {
        MPI_Comm_free(&c->mpi);
        free(c->seq);
        free(c);
        return ncclSystemError;
    }
    *out = c;
    return ncclSuccess;
}

static void comm_release(struct ncclComm *c) {
    MPI_Comm_free(&c->mpi);
    free(c->seq);
    free(c);
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
    if (!c) return ncclInvalidArgument;
    if (c->queued)
        die("%s (%ld groups on rank %ld)",
            "ncclCommDestroy with groups queued on a stream never synchronized", c->queued,
            c->rank);
    const char *log = getenv("CKPT_MOCK_NCCL_LOG");
    if (log && *log && *log != '0')
        fprintf(stderr, "mock_nccl rank %d/%d: sent %llu B, received %llu B in %llu groups\n",
                c->rank, c->size, (unsigned long long)c->sent, (unsigned long long)c->received,
                (unsigned long long)c->groups);
    comm_release(c);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c) {
    if (!c) return ncclInvalidArgument;
    c->aborted = 1;
    if (!c->queued) comm_release(c);
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r) {
    if (!c || !r) return ncclInvalidArgument;
    *r = ncclSuccess;
    return ncclSuccess;
}

/* A queued group, run when its stream is synchronized: every receive and send posted at
 * once (no ordering deadlock), then waited for with a deadline. */
static void run_group(void *arg) {
    mgroup *g = arg;
    struct ncclComm *c = g->comm;
    c->queued--;
    if (c->aborted) {
        if (!c->queued) comm_release(c);
        goto out;
    }
    MPI_Request *req = calloc(g->n ? g->n : 1, sizeof *req);
    MPI_Status *st = calloc(g->n ? g->n : 1, sizeof *st);
    if (!req || !st) die("%s", "out of memory", 0, 0);
    for (size_t i = 0; i < g->n; i++) { /* receives first, then sends */
        const mop *o = &g->ops[i];
        if (!o->send)
            MPI_Irecv(o->bytes, (int)o->n, MPI_BYTE, o->peer, (int)g->tags[i], c->mpi, &req[i]);
    }
    for (size_t i = 0; i < g->n; i++) {
        const mop *o = &g->ops[i];
        if (o->send)
            MPI_Isend(o->bytes, (int)o->n, MPI_BYTE, o->peer, (int)g->tags[i], c->mpi, &req[i]);
    }
    const char *t = getenv("CKPT_MOCK_NCCL_TIMEOUT");
    double limit = t ? atof(t) : 60.0;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int done = 0;
        int rc = MPI_Testall((int)g->n, req, &done, st);
        if (rc != MPI_SUCCESS) {
            for (size_t i = 0; i < g->n; i++)
                if (st[i].MPI_ERROR != MPI_SUCCESS && st[i].MPI_ERROR != MPI_ERR_PENDING)
                    die("%s (rank %ld, peer %ld)",
                        "ncclRecv of fewer bytes than the matching ncclSend", c->rank,
                        g->ops[i].peer);
            die("%s (rank %ld)", "transfer failed", c->rank, 0);
        }
        if (done) break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec) > limit)
            die("%s (rank %ld, %ld operations): a peer never ran the matching group",
                "send/receive group unmatched", c->rank, (long)g->n);
        struct timespec nap = {0, 200000};
        nanosleep(&nap, NULL);
    }
    for (size_t i = 0; i < g->n; i++) {
        const mop *o = &g->ops[i];
        if (o->send) {
            c->sent += o->n;
            continue;
        }
        int got = 0;
        MPI_Get_count(&st[i], MPI_BYTE, &got);
        if ((size_t)got != o->n)
            die("%s (rank %ld from peer %ld)", "ncclRecv of more bytes than the matching ncclSend",
                c->rank, o->peer);
        c->received += o->n;
    }
    c->groups++;
    free(req);
    free(st);
out:
    free(g->ops);
    free(g->tags);
    free(g);
}

ncclResult_t ncclGroupStart(void) {
    depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    if (depth <= 0) return ncclInvalidUsage;
    if (--depth > 0) return ncclSuccess;
    if (!npending) {
        have_stream = 0;
        pending_comm = NULL;
        return ncclSuccess;
    }
    struct ncclComm *c = pending_comm;
    if (fault("group", c->rank) && !c->groups && !c->failed_group) {
        c->failed_group = 1;
        free(pending_ops);
        pending_ops = NULL;
        npending = cap_pending = 0;
        pending_comm = NULL;
        have_stream = 0;
        return ncclSystemError;
    }
    mgroup *g = calloc(1, sizeof *g);
    unsigned *tags = calloc(npending, sizeof *tags);
    if (!g || !tags) die("%s", "out of memory", 0, 0);
    /* each peer's groups are matched in order: the tag is this group's number with it */
    for (size_t i = 0; i < npending; i++)
        tags[i] = c->seq[pending_ops[i].peer] & 0x7fff;
    for (size_t i = 0; i < npending; i++) {
        int p = pending_ops[i].peer, first = 1;
        for (size_t k = 0; k < i; k++)
            if (pending_ops[k].peer == p) first = 0;
        if (first) c->seq[p]++;
    }
    g->comm = c;
    g->ops = pending_ops;
    g->n = npending;
    g->tags = tags;
    pending_ops = NULL;
    npending = cap_pending = 0;
    pending_comm = NULL;
    have_stream = 0;
    c->queued++;
    mock_cuda_stream_defer(pending_stream, run_group, g);
    return ncclSuccess;
}

static ncclResult_t add(int send, const void *buf, size_t count, ncclDataType_t type, int peer,
                        ncclComm_t c, cudaStream_t stream) {
    const char *what = send ? "ncclSend" : "ncclRecv";
    if (!c || !c->seq || c->aborted) return ncclInvalidArgument;
    size_t item = type_size(type);
    if (!item) return ncclInvalidArgument;
    if (peer < 0 || peer >= c->size) return ncclInvalidArgument;
    if (!stream) die("%s on the legacy stream (rank %ld, peer %ld)", what, c->rank, peer);
    void *bytes = NULL;
    if (count && !buf) return ncclInvalidArgument; /* as NCCL's argument check */
    if (count) {
        bytes = mock_cuda_device_bytes(buf, count * item);
        if (!bytes)
            die("%s of a buffer that is not device memory (rank %ld, peer %ld)", what, c->rank,
                peer);
    }
    if (npending && (pending_comm != c || (have_stream && pending_stream != stream)))
        die("%s: one group, one communicator and one stream in this stand-in (rank %ld, peer %ld)",
            what, c->rank, peer);
    if (npending == cap_pending) {
        cap_pending = cap_pending ? 2 * cap_pending : 16;
        mop *m = realloc(pending_ops, cap_pending * sizeof *m);
        if (!m) die("%s", "out of memory", 0, 0);
        pending_ops = m;
    }
    pending_ops[npending++] = (mop){send, bytes, count * item, peer};
    pending_comm = c;
    pending_stream = stream;
    have_stream = 1;
    if (depth == 0) { /* outside a group: a group of one */
        depth = 1;
        return ncclGroupEnd();
    }
    return ncclSuccess;
}

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t c,
                      cudaStream_t stream) {
    return add(1, buf, count, type, peer, c, stream);
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t c,
                      cudaStream_t stream) {
    return add(0, buf, count, type, peer, c, stream);
}
