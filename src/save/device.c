/* device.c — the saver's CUDA device sources (compiled with the cuda feature; nodevice.c is
 * the twin without it): device pointers are told apart with cudaPointerGetAttributes, and
 * their bytes come to the host through two halves of a bounded pinned staging buffer
 * (ck_cuda_stage) with cudaMemcpyAsync on the pipeline's own stream.  While the host CRCs
 * and writes one half, the GPU copies the next block into the other (double buffering); a half is
 * read only after the event recorded behind its copy completed, and refilled only after the host is
 * done with it.  Only the CUDA runtime API is used (no kernels). */
#include "save/device.h"

#include "util/cuda_util.h"
#include "util/error.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

struct save_dev {
    ck_cuda_stage st; /* the halves, the stream, an event per half */
};

bool save_dev_supported(void) { return true; }

bool save_dev_is_device(const void *p) { return ck_cuda_is_device_ptr(p); }

ckpt_status save_dev_create(uint64_t staging_bytes, save_dev **out, ckpt_error *err) {
    *out = NULL;
    save_dev *d = calloc(1, sizeof *d);
    if (!d) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    if (staging_bytes < SAVE_DEV_STAGING_MIN) staging_bytes = SAVE_DEV_STAGING_MIN;
    if (staging_bytes > ((uint64_t)1 << 40)) staging_bytes = (uint64_t)1 << 40;
    /* a blocking stream: its copies wait for work queued on the legacy default stream */
    const char *what;
    cudaError_t e =
        ck_cuda_stage_init(&d->st, (size_t)(staging_bytes / 2), cudaStreamDefault, &what);
    if (e != cudaSuccess) {
        free(d);
        return ck_cuda_fail(err, e, what);
    }
    *out = d;
    return CKPT_OK;
}

void save_dev_free(save_dev *d) {
    if (!d) return;
    ck_cuda_stage_free(&d->st);
    free(d);
}

/* Queues the copy of block `i` (of `n` bytes from `src`) into half i % 2 and its event. */
static ckpt_status issue(save_dev *d, const uint8_t *src, uint64_t n, uint64_t i, ckpt_error *err) {
    uint64_t at = i * d->st.half_bytes;
    size_t k = n - at < d->st.half_bytes ? (size_t)(n - at) : d->st.half_bytes;
    cudaError_t e =
        cudaMemcpyAsync(d->st.half[i & 1], src + at, k, cudaMemcpyDeviceToHost, d->st.stream);
    if (e == cudaSuccess) e = cudaEventRecord(d->st.done[i & 1], d->st.stream);
    return e == cudaSuccess ? CKPT_OK : ck_cuda_fail(err, e, "device-to-host copy");
}

ckpt_status save_dev_stream(save_dev *d, const void *src, uint64_t n, save_dev_emit emit, void *ctx,
                            ckpt_error *err) {
    if (!n) return CKPT_OK;
    const uint8_t *p = src;
    uint64_t blocks = (n + d->st.half_bytes - 1) / d->st.half_bytes;
    ckpt_status s = issue(d, p, n, 0, err);
    for (uint64_t i = 0; s == CKPT_OK && i < blocks; i++) {
        /* the other half was consumed (block i - 1): the GPU fills it while we use this one */
        if (i + 1 < blocks) s = issue(d, p, n, i + 1, err);
        if (s != CKPT_OK) break;
        cudaError_t e = cudaEventSynchronize(d->st.done[i & 1]);
        if (e != cudaSuccess) {
            s = ck_cuda_fail(err, e, "device-to-host copy");
            break;
        }
        uint64_t at = i * d->st.half_bytes;
        size_t k = n - at < d->st.half_bytes ? (size_t)(n - at) : d->st.half_bytes;
        s = emit(ctx, d->st.half[i & 1], k, err);
    }
    cudaError_t e = cudaStreamSynchronize(d->st.stream); /* nothing left in flight */
    if (s == CKPT_OK && e != cudaSuccess) s = ck_cuda_fail(err, e, "device-to-host copy");
    return s;
}
