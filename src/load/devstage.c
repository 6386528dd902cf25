/* devstage.c — the device side of a device-to-device exchange round (compiled with the cuda
 * feature; nodevice.c otherwise), shared by the loader's NCCL transport (nccl.c) and the
 * caller's device hooks (ckpt_transport.device): one non-blocking stream and the staging of
 * an execute — a pinned host window (what a reader preads), its device twin, device send and
 * receive buffers — and the copies a round queues on the stream: the window uploaded,
 * device-to-device packing of what each rank needs, device-to-device placement of this rank's
 * own bytes and of what arrived.  Copies that continue the previous one in both source and
 * destination buffer (consecutive rows of a shard, say) are merged into one (copy_run: never
 * across two destination allocations), issued before anything else is queued or waited for.
 * What moves the send buffer to the peers' receive buffers is the link's (nccl.c) or the
 * transport's (transport.c); the round logic is exchange.c's. */
#include "load/load_i.h"
#include "util/cuda_util.h"
#include "util/error.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>

struct dev_stage {
    cudaStream_t stream;
    ck_pinned hostmem;   /* the pinned window */
    uint8_t *host, *win; /* pinned window and its device twin, win_bytes each */
    uint64_t win_bytes;
    uint8_t *send, *recv; /* device */
    uint64_t send_bytes, recv_bytes;
    copy_run run; /* copies not yet queued, all of run_kind */
    enum cudaMemcpyKind run_kind;
};

ckpt_status dev_stage_flush(dev_stage *x, ckpt_error *err) {
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

ckpt_status dev_stage_create(dev_stage **out, ckpt_error *err) {
    *out = NULL;
    dev_stage *x = calloc(1, sizeof *x);
    if (!x) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    cudaError_t e = cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        free(x);
        return ck_cuda_fail(err, e, "device exchange stream");
    }
    *out = x;
    return CKPT_OK;
}

void dev_stage_release(dev_stage *x) {
    if (!x) return;
    dev_stage_flush(x, NULL);
    cudaStreamSynchronize(x->stream);
    ck_cuda_pinned_free(&x->hostmem);
    cudaFree(x->win);
    cudaFree(x->send);
    cudaFree(x->recv);
    x->host = x->win = x->send = x->recv = NULL;
    x->win_bytes = x->send_bytes = x->recv_bytes = 0;
}

void dev_stage_drop(dev_stage *x) {
    if (x) x->run.len = 0;
}

void dev_stage_free(dev_stage *x) {
    if (!x) return;
    dev_stage_release(x);
    cudaStreamDestroy(x->stream);
    free(x);
}

void *dev_stage_stream(dev_stage *x) { return x->stream; }
uint8_t *dev_stage_send(dev_stage *x) { return x->send; }
uint8_t *dev_stage_recv(dev_stage *x) { return x->recv; }

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

ckpt_status dev_stage_wait(dev_stage *x, ckpt_error *err) {
    ckpt_status fs = dev_stage_flush(x, err);
    cudaError_t e = cudaStreamSynchronize(x->stream);
    if (fs != CKPT_OK) return fs;
    return e == cudaSuccess ? CKPT_OK : ck_cuda_fail(err, e, "device exchange stream");
}

ckpt_status dev_stage_window(dev_stage *x, uint64_t bytes, uint8_t **host, ckpt_error *err) {
    *host = NULL;
    CK_TRY(dev_stage_wait(x, err));
    if (x->win_bytes < bytes) {
        ck_cuda_pinned_free(&x->hostmem);
        x->host = NULL;
        cudaFree(x->win);
        x->win = NULL;
        x->win_bytes = 0;
        cudaError_t e = ck_cuda_pinned_alloc(&x->hostmem, (size_t)bytes);
        if (e != cudaSuccess) return ck_cuda_fail(err, e, "pinned window");
        x->host = x->hostmem.p;
        uint64_t have = 0;
        CK_TRY(grow(&x->win, &have, bytes, "device window", err));
        x->win_bytes = bytes;
    }
    *host = x->host;
    return CKPT_OK;
}

ckpt_status dev_stage_reserve(dev_stage *x, uint64_t send, uint64_t recv, ckpt_error *err) {
    if (x->send_bytes < send || x->recv_bytes < recv) CK_TRY(dev_stage_wait(x, err));
    CK_TRY(dev_stage_flush(x, err));
    CK_TRY(grow(&x->send, &x->send_bytes, send, "device send buffer", err));
    return grow(&x->recv, &x->recv_bytes, recv, "device receive buffer", err);
}

/* dst lies in the device buffer starting at buf (one allocation). */
static ckpt_status copy(dev_stage *x, const uint8_t *buf, uint8_t *dst, const uint8_t *src,
                        uint64_t n, enum cudaMemcpyKind kind, ckpt_error *err) {
    if (!n) return CKPT_OK;
    if (x->run_kind == kind && copy_run_extend(&x->run, buf, dst, src, n)) return CKPT_OK;
    ckpt_status s = dev_stage_flush(x, err);
    x->run = (copy_run){buf, dst, src, n};
    x->run_kind = kind;
    return s;
}

ckpt_status dev_stage_upload(dev_stage *x, uint64_t n, ckpt_error *err) {
    return copy(x, x->win, x->win, x->host, n, cudaMemcpyHostToDevice, err);
}

ckpt_status dev_stage_pack(dev_stage *x, uint64_t to, uint64_t from, uint64_t n, ckpt_error *err) {
    return copy(x, x->send, x->send + to, x->win + from, n, cudaMemcpyDeviceToDevice, err);
}

ckpt_status dev_stage_place(dev_stage *x, const uint8_t *buf, uint8_t *dst, uint64_t from,
                            uint64_t n, ckpt_error *err) {
    return copy(x, buf, dst, x->win + from, n, cudaMemcpyDeviceToDevice, err);
}

ckpt_status dev_stage_deliver(dev_stage *x, const uint8_t *buf, uint8_t *dst, uint64_t from,
                              uint64_t n, ckpt_error *err) {
    return copy(x, buf, dst, x->recv + from, n, cudaMemcpyDeviceToDevice, err);
}
