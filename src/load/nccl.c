/* nccl.c — the NCCL transport of the collective loader's exchange (compiled with the cuda and
 * nccl features; nonccl.c otherwise): the link (an NCCL communicator made from the handle's
 * MPI communicator, one non-blocking stream, the staging of an execute) and the operations a
 * round queues on its stream — the reader's window uploaded from pinned host memory to a
 * device window, device-to-device packing of what each rank needs, one ncclSend/ncclRecv
 * group, device-to-device placement of what arrived.  Copies that continue the previous one
 * in both source and destination buffer (consecutive rows of a shard, say) are merged into one,
 * issued before anything else is queued or waited for.  The round logic is exchange.c's;
 * this file owns every CUDA and NCCL call of the transport. */
#include "load/load_i.h"
#include "util/cuda_util.h"
#include "util/error.h"

#include <cuda_runtime_api.h>
/* nccl.h declares some functions without prototypes (f() for f(void)) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include <stdlib.h>
#include <string.h>

struct nccl_link {
    ncclComm_t comm;
    int rank, size; /* in comm: the handle's */
    int device;     /* current when the communicator was made */
    cudaStream_t stream;
    ck_pinned hostmem;   /* the pinned window */
    uint8_t *host, *win; /* pinned window and its device twin, win_bytes each */
    uint64_t win_bytes;
    uint8_t *send, *recv; /* device */
    uint64_t send_bytes, recv_bytes;
    copy_run run; /* copies not yet queued, all of run_kind */
    enum cudaMemcpyKind run_kind;
};

/* Queues the run of copies. */
static ckpt_status flush(nccl_link *x, ckpt_error *err) {
    if (!x->run.len) return CKPT_OK;
    cudaError_t e =
        cudaMemcpyAsync(x->run.dst, x->run.src, (size_t)x->run.len, x->run_kind, x->stream);
    x->run.len = 0;
    return e == cudaSuccess
               ? CKPT_OK
               : ck_cuda_fail(err, e,
                              x->run_kind == cudaMemcpyHostToDevice ? "window upload"
                                                                    : "device-to-device copy");
}

static ckpt_status nccl_fail(ckpt_error *err, ncclResult_t e, const char *what) {
    return ck_fail(err, CKPT_E_IO, "NCCL %s: %s", what, ncclGetErrorString(e));
}

bool nccl_supported(void) { return true; }

/* The stream and the device, before any rank enters ncclCommInitRank. */
static ckpt_status link_create(nccl_link **out, ckpt_error *err) {
    nccl_link *x = calloc(1, sizeof *x);
    if (!x) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    cudaError_t e = cudaGetDevice(&x->device);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        free(x);
        return ck_cuda_fail(err, e, "NCCL transport stream");
    }
    *out = x;
    return CKPT_OK;
}

ckpt_status nccl_link_open(ckpt_load *l, ckpt_error *err) {
    if (l->nccl) {
        int dev = -1;
        cudaError_t e = cudaGetDevice(&dev);
        ckpt_status s = e != cudaSuccess ? ck_cuda_fail(err, e, "current device")
                        : dev != l->nccl->device
                            ? ck_fail(err, CKPT_E_INVAL,
                                      "NCCL transport: the communicator was made on device %d, "
                                      "the current device is %d",
                                      l->nccl->device, dev)
                            : CKPT_OK;
        return load_agree(l, s, err);
    }
    nccl_link *x = NULL;
    ckpt_status s = load_agree(l, link_create(&x, err), err);
    if (s != CKPT_OK) {
        nccl_link_free(x);
        return s;
    }
    x->rank = l->rank;
    x->size = l->size;
    /* rank 0 makes the unique id; every rank learns it, or that rank 0 failed */
    struct {
        int ok;
        ncclUniqueId id;
    } msg;
    memset(&msg, 0, sizeof msg);
    if (l->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&msg.id);
        msg.ok = r == ncclSuccess;
        if (!msg.ok) s = nccl_fail(err, r, "unique id");
    }
    ckpt_status bs =
        load_bcast(l, &msg, sizeof msg, 0, "broadcast (NCCL unique id)", s == CKPT_OK ? err : NULL);
    if (bs != CKPT_OK) { /* the id is not known here: no init; agreed below */
        msg.ok = 0;
        if (s == CKPT_OK) s = bs;
    }
    if (msg.ok) {
        ncclResult_t r = ncclCommInitRank(&x->comm, l->size, msg.id, l->rank);
        if (r != ncclSuccess) {
            x->comm = NULL;
            s = nccl_fail(err, r, "communicator");
        }
    }
    s = load_agree(l, s, err);
    if (s != CKPT_OK) { /* the ranks whose init succeeded abort (destroying may wait for all) */
        nccl_link_abort(x);
        return s;
    }
    l->nccl = x;
    return CKPT_OK;
}

void nccl_link_release(nccl_link *x) {
    if (!x) return;
    flush(x, NULL);
    cudaStreamSynchronize(x->stream);
    ck_cuda_pinned_free(&x->hostmem);
    cudaFree(x->win);
    cudaFree(x->send);
    cudaFree(x->recv);
    x->host = x->win = x->send = x->recv = NULL;
    x->win_bytes = x->send_bytes = x->recv_bytes = 0;
}

void nccl_link_free(nccl_link *x) {
    if (!x) return;
    nccl_link_release(x);
    if (x->comm) ncclCommDestroy(x->comm);
    cudaStreamDestroy(x->stream);
    free(x);
}

void nccl_link_abort(nccl_link *x) {
    if (!x) return;
    if (x->comm) ncclCommAbort(x->comm); /* what the stream still waits for is dropped */
    x->comm = NULL;
    x->run.len = 0;
    nccl_link_free(x);
}

/* A device buffer of at least `want` bytes in *p (of *have); the stream is idle. */
static ckpt_status grow(uint8_t **p, uint64_t *have, uint64_t want, const char *what,
                        ckpt_error *err) {
    if (*have >= want) return CKPT_OK;
    cudaFree(*p);
    *p = NULL;
    *have = 0;
    cudaError_t e = cudaMalloc((void **)p, (size_t)want);
    if (e != cudaSuccess) {
        *p = NULL;
        return ck_cuda_fail(err, e, what);
    }
    *have = want;
    return CKPT_OK;
}

ckpt_status nccl_link_stage(nccl_link *x, uint64_t bytes, uint8_t **host, ckpt_error *err) {
    *host = NULL;
    CK_TRY(flush(x, err));
    cudaError_t e = cudaStreamSynchronize(x->stream);
    if (e != cudaSuccess) return ck_cuda_fail(err, e, "NCCL transport stream");
    if (x->win_bytes < bytes) {
        ck_cuda_pinned_free(&x->hostmem);
        x->host = NULL;
        cudaFree(x->win);
        x->win = NULL;
        x->win_bytes = 0;
        e = ck_cuda_pinned_alloc(&x->hostmem, (size_t)bytes);
        if (e != cudaSuccess) return ck_cuda_fail(err, e, "pinned window");
        x->host = x->hostmem.p;
        uint64_t have = 0;
        CK_TRY(grow(&x->win, &have, bytes, "device window", err));
        x->win_bytes = bytes;
    }
    *host = x->host;
    return CKPT_OK;
}

ckpt_status nccl_link_reserve(nccl_link *x, uint64_t send, uint64_t recv, ckpt_error *err) {
    CK_TRY(flush(x, err));
    if (x->send_bytes < send || x->recv_bytes < recv) {
        cudaError_t e = cudaStreamSynchronize(x->stream);
        if (e != cudaSuccess) return ck_cuda_fail(err, e, "NCCL transport stream");
    }
    CK_TRY(grow(&x->send, &x->send_bytes, send, "device send buffer", err));
    return grow(&x->recv, &x->recv_bytes, recv, "device receive buffer", err);
}

/* dst lies in the device buffer starting at buf (one allocation). */
static ckpt_status copy(nccl_link *x, const uint8_t *buf, uint8_t *dst, const uint8_t *src,
                        uint64_t n, enum cudaMemcpyKind kind, ckpt_error *err) {
    if (!n) return CKPT_OK;
    if (x->run_kind == kind && copy_run_extend(&x->run, buf, dst, src, n)) return CKPT_OK;
    ckpt_status s = flush(x, err);
    x->run = (copy_run){buf, dst, src, n};
    x->run_kind = kind;
    return s;
}

ckpt_status nccl_link_upload(nccl_link *x, uint64_t n, ckpt_error *err) {
    return copy(x, x->win, x->win, x->host, n, cudaMemcpyHostToDevice, err);
}

ckpt_status nccl_link_pack(nccl_link *x, uint64_t to, uint64_t from, uint64_t n, ckpt_error *err) {
    return copy(x, x->send, x->send + to, x->win + from, n, cudaMemcpyDeviceToDevice, err);
}

ckpt_status nccl_link_place(nccl_link *x, const uint8_t *buf, uint8_t *dst, uint64_t from,
                            uint64_t n, ckpt_error *err) {
    return copy(x, buf, dst, x->win + from, n, cudaMemcpyDeviceToDevice, err);
}

ckpt_status nccl_link_deliver(nccl_link *x, const uint8_t *buf, uint8_t *dst, uint64_t from,
                              uint64_t n, ckpt_error *err) {
    return copy(x, buf, dst, x->recv + from, n, cudaMemcpyDeviceToDevice, err);
}

ckpt_status nccl_link_exchange(nccl_link *x, const int *sc, const int *sd, const int *rc,
                               const int *rd, ckpt_error *err) {
    CK_TRY(flush(x, err));
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) return nccl_fail(err, r, "group start");
    ncclResult_t first = ncclSuccess;
    for (int j = 0; first == ncclSuccess && j < x->size; j++) {
        if (j == x->rank) continue;
        if (sc[j])
            first = ncclSend(x->send + sd[j], (size_t)sc[j], ncclUint8, j, x->comm, x->stream);
        if (first == ncclSuccess && rc[j])
            first = ncclRecv(x->recv + rd[j], (size_t)rc[j], ncclUint8, j, x->comm, x->stream);
    }
    r = ncclGroupEnd(); /* always: a started group must end */
    if (first != ncclSuccess) return nccl_fail(err, first, "send/receive");
    return r == ncclSuccess ? CKPT_OK : nccl_fail(err, r, "group");
}

ckpt_status nccl_link_sync(nccl_link *x, ckpt_error *err) {
    ckpt_status fs = flush(x, err);
    cudaError_t e = cudaStreamSynchronize(x->stream);
    if (fs != CKPT_OK) return fs;
    if (e != cudaSuccess) return ck_cuda_fail(err, e, "NCCL transport stream");
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(x->comm, &async);
    if (r == ncclSuccess) r = async;
    return r == ncclSuccess ? CKPT_OK : nccl_fail(err, r, "transfer");
}
