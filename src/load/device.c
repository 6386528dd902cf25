/* device.c — CUDA device destinations of the collective loader (compiled with the cuda
 * feature): telling device pointers from host ones, and the device sink, which moves bytes
 * to device memory through two halves of a pinned staging buffer (ck_cuda_stage) with
 * cudaMemcpyAsync on one stream.  While the GPU copies one half, the rank fills the other
 * (double buffering); a half is reused only after the event recorded behind its copies has
 * completed.  Fills that continue the previous one in both the half and the destination
 * buffer (consecutive rows of a shard, say) are merged into one copy, issued when the run
 * breaks; fills of different destination buffers never merge (copy_run, load_i.h).
 * Only the CUDA runtime API is used (no kernels). */
#include "load/load_i.h"
#include "util/cuda_util.h"
#include "util/error.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

struct dev_sink {
    ck_cuda_stage st; /* the halves, the stream, an event per half */
    uint64_t half_bytes;
    int cur;         /* the half being filled */
    uint64_t used;   /* bytes of it handed out */
    bool pending[2]; /* copies were issued from that half since its event was recorded */
    copy_run run;    /* fills not yet issued (from the current half) */
};

bool dev_supported(void) { return true; }

bool dev_pointer_is_device(const void *p) { return ck_cuda_is_device_ptr(p); }

int dev_current(void) {
    int d = -1;
    if (cudaGetDevice(&d) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return d;
}

ckpt_status dev_sink_create(uint64_t bytes, dev_sink **out, ckpt_error *err) {
    *out = NULL;
    dev_sink *s = calloc(1, sizeof *s);
    if (!s) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    s->half_bytes = bytes / 2 < 256 ? 256 : bytes / 2;
    const char *what;
    cudaError_t e = ck_cuda_stage_init(&s->st, (size_t)s->half_bytes, cudaStreamNonBlocking, &what);
    if (e != cudaSuccess) {
        free(s);
        return ck_cuda_fail(err, e, what);
    }
    *out = s;
    return CKPT_OK;
}

void dev_sink_free(dev_sink *s) {
    if (!s) return;
    ck_cuda_stage_free(&s->st);
    free(s);
}

uint64_t dev_sink_bytes(const dev_sink *s) { return 2 * s->half_bytes; }

/* Issues the run of fills. */
static ckpt_status flush(dev_sink *s, ckpt_error *err) {
    if (!s->run.len) return CKPT_OK;
    cudaError_t e = cudaMemcpyAsync(s->run.dst, s->run.src, (size_t)s->run.len,
                                    cudaMemcpyHostToDevice, s->st.stream);
    s->run.len = 0;
    if (e != cudaSuccess) return ck_cuda_fail(err, e, "host-to-device copy");
    s->pending[s->cur] = true;
    return CKPT_OK;
}

/* Ends the current half (its copies are behind an event) and waits until the other half's
 * copies are done, then fills that one. */
static ckpt_status flip(dev_sink *s, ckpt_error *err) {
    CK_TRY(flush(s, err));
    cudaError_t e = cudaSuccess;
    if (s->pending[s->cur]) e = cudaEventRecord(s->st.done[s->cur], s->st.stream);
    if (e != cudaSuccess) return ck_cuda_fail(err, e, "event record");
    s->cur ^= 1;
    s->used = 0;
    if (s->pending[s->cur]) {
        e = cudaEventSynchronize(s->st.done[s->cur]);
        if (e != cudaSuccess) return ck_cuda_fail(err, e, "host-to-device copy");
        s->pending[s->cur] = false;
    }
    return CKPT_OK;
}

uint8_t *dev_sink_room(dev_sink *s, uint64_t want, uint64_t *avail, ckpt_error *err) {
    if (s->used && s->half_bytes - s->used < want && flip(s, err) != CKPT_OK) return NULL;
    *avail = s->half_bytes - s->used;
    return s->st.half[s->cur] + s->used;
}

ckpt_status dev_sink_fill(dev_sink *s, const uint8_t *buf, uint8_t *dst, uint64_t n,
                          ckpt_error *err) {
    if (!n) return CKPT_OK;
    const uint8_t *src = s->st.half[s->cur] + s->used;
    s->used += n;
    if (copy_run_extend(&s->run, buf, dst, src, n)) return CKPT_OK;
    ckpt_status st = flush(s, err);
    s->run = (copy_run){buf, dst, src, n};
    return st;
}

ckpt_status dev_sink_put(dev_sink *s, const uint8_t *buf, uint8_t *dst, const uint8_t *src,
                         uint64_t n, ckpt_error *err) {
    while (n) {
        uint64_t avail;
        uint8_t *room = dev_sink_room(s, n < s->half_bytes ? n : s->half_bytes, &avail, err);
        if (!room) return err && err->code ? err->code : CKPT_E_IO;
        uint64_t k = n < avail ? n : avail;
        memcpy(room, src, (size_t)k);
        CK_TRY(dev_sink_fill(s, buf, dst, k, err));
        dst += k;
        src += k;
        n -= k;
    }
    return CKPT_OK;
}

ckpt_status dev_sink_finish(dev_sink *s, ckpt_error *err) {
    ckpt_status st = flush(s, err);
    cudaError_t e = cudaStreamSynchronize(s->st.stream);
    s->pending[0] = s->pending[1] = false;
    s->used = 0;
    if (st != CKPT_OK) return st;
    if (e != cudaSuccess) return ck_cuda_fail(err, e, "host-to-device copy");
    return CKPT_OK;
}
