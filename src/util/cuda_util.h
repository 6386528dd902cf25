/* cuda_util.h — what the CUDA runtime's users share (the saver's device sources, the loader's
 * device sink and its NCCL transport): a failed call as a ckpt error, telling device
 * pointers from host ones, and pinned host memory.  Compiled only with the cuda feature
 * (their no-CUDA twins need none of it). */
#ifndef CK_UTIL_CUDA_UTIL_H
#define CK_UTIL_CUDA_UTIL_H

#include "ckpt.h"

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>

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

/* Double-buffered staging between host and device, as the loader's device sink and the
 * saver's device sources use it: a pinned buffer in two halves, one stream for the copies and
 * an event per half, recorded behind the copies that use that half, so one half is filled or
 * read while the other is in flight. */
typedef struct ck_cuda_stage {
    ck_pinned mem; /* both halves */
    uint8_t *half[2];
    size_t half_bytes;
    cudaStream_t stream;
    cudaEvent_t done[2];
} ck_cuda_stage;
/* Two halves of half_bytes each, a stream made with stream_flags (cudaStreamNonBlocking, or
 * cudaStreamDefault to wait for the legacy default stream's work) and two events; *s is
 * zeroed first and holds nothing on failure (the runtime's error; `*what` names the failed
 * part: "stream", "pinned staging buffer"). */
cudaError_t ck_cuda_stage_init(ck_cuda_stage *s, size_t half_bytes, unsigned stream_flags,
                               const char **what);
/* Waits for the stream, frees everything *s holds and zeroes it (nothing when it holds
 * nothing). */
void ck_cuda_stage_free(ck_cuda_stage *s);

#endif
