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
