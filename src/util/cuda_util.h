/* cuda_util.h — what the CUDA runtime's users share (the saver's device sources, the loader's
 * device sink and its NCCL transport): a failed call as a ckpt error, telling device
 * pointers from host ones, and pinned host memory.  Compiled only with the cuda feature
 * (their no-CUDA twins need none of it). */
#ifndef CK_UTIL_CUDA_UTIL_H
#define CK_UTIL_CUDA_UTIL_H

#include "ckpt.h"

#include <cuda_runtime_api.h>
#include <stdbool.h>

/* CKPT_E_IO "CUDA <what>: <the runtime's message>", after clearing a sticky non-fatal error. */
ckpt_status ck_cuda_fail(ckpt_error *err, cudaError_t e, const char *what);
/* True for device memory; false for host memory, or when there is no driver or device (the
 * runtime's error is cleared). */
bool ck_cuda_is_device_ptr(const void *p);

/* Pinned host memory: anonymous memory advised to use transparent huge pages and registered
 * with cudaHostRegister, which pinned 8-256 MiB in 0.44-0.57x the time of cudaHostAlloc on
 * an H200 machine at the same copy rate (tools/bench/bench_pinned); cudaHostAlloc where
 * registering fails.  Pinning is part of every load and save that uses device memory. */
typedef struct ck_pinned {
    void *p;
    size_t n;        /* bytes mapped (registered) or allocated */
    bool registered; /* mmap + cudaHostRegister, else cudaHostAlloc */
} ck_pinned;
/* At least n bytes in *m (zeroed on failure); the runtime's error of cudaHostAlloc. */
cudaError_t ck_cuda_pinned_alloc(ck_pinned *m, size_t n);
/* Frees *m (nothing when it holds nothing) and zeroes it. */
void ck_cuda_pinned_free(ck_pinned *m);

#endif
