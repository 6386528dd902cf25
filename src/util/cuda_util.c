/* cuda_util.c — CUDA runtime helpers shared by the device paths (see cuda_util.h). */
#include "util/cuda_util.h"

#include "util/error.h"

#include <string.h>
#include <sys/mman.h>

ckpt_status ck_cuda_fail(ckpt_error *err, cudaError_t e, const char *what) {
    cudaGetLastError(); /* clear a sticky non-fatal error */
    return ck_fail(err, CKPT_E_IO, "CUDA %s: %s", what, cudaGetErrorString(e));
}

bool ck_cuda_is_device_ptr(const void *p) {
    struct cudaPointerAttributes a;
    memset(&a, 0, sizeof a);
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* no driver, no device, or an unknown pointer: host memory */
        return false;
    }
    return a.type == cudaMemoryTypeDevice;
}

cudaError_t ck_cuda_pinned_alloc(ck_pinned *m, size_t n) {
    memset(m, 0, sizeof *m);
    const size_t huge = (size_t)2 << 20;
    size_t len = n / huge * huge + (n % huge ? huge : 0);
    void *p = len ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                  : MAP_FAILED;
    if (p != MAP_FAILED) {
        (void)madvise(p, len, MADV_HUGEPAGE); /* a hint: fails where THP is off */
        if (cudaHostRegister(p, len, cudaHostRegisterDefault) == cudaSuccess) {
            *m = (ck_pinned){p, len, true};
            return cudaSuccess;
        }
        cudaGetLastError(); /* clear it: cudaHostAlloc decides */
        munmap(p, len);
    }
    void *q = NULL;
    cudaError_t e = cudaHostAlloc(&q, n ? n : 1, cudaHostAllocDefault);
    if (e == cudaSuccess) *m = (ck_pinned){q, n ? n : 1, false};
    return e;
}

void ck_cuda_pinned_free(ck_pinned *m) {
    if (m->p && m->registered) {
        cudaHostUnregister(m->p);
        munmap(m->p, m->n);
    } else if (m->p) {
        cudaFreeHost(m->p);
    }
    memset(m, 0, sizeof *m);
}

cudaError_t ck_cuda_stage_init(ck_cuda_stage *s, size_t half_bytes, unsigned stream_flags,
                               const char **what) {
    memset(s, 0, sizeof *s);
    *what = "stream";
    cudaError_t e = cudaStreamCreateWithFlags(&s->stream, stream_flags);
    if (e != cudaSuccess) {
        s->stream = NULL;
        return e;
    }
    for (int i = 0; i < 2 && e == cudaSuccess; i++)
        e = cudaEventCreateWithFlags(&s->done[i], cudaEventDisableTiming);
    if (e == cudaSuccess) e = ck_cuda_pinned_alloc(&s->mem, 2 * half_bytes);
    if (e != cudaSuccess) {
        *what = "pinned staging buffer";
        ck_cuda_stage_free(s);
        return e;
    }
    s->half_bytes = half_bytes;
    s->half[0] = s->mem.p;
    s->half[1] = s->half[0] + half_bytes;
    return cudaSuccess;
}

void ck_cuda_stage_free(ck_cuda_stage *s) {
    if (s->stream) cudaStreamSynchronize(s->stream);
    ck_cuda_pinned_free(&s->mem);
    for (int i = 0; i < 2; i++)
        if (s->done[i]) cudaEventDestroy(s->done[i]);
    if (s->stream) cudaStreamDestroy(s->stream);
    memset(s, 0, sizeof *s);
}
