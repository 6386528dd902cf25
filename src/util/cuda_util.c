/* cuda_util.c — CUDA runtime helpers shared by the device paths (see cuda_util.h). */
#include "util/cuda_util.h"

#include "util/error.h"

#include <string.h>

ckpt_status ckpt_cuda_fail(ckpt_error *err, cudaError_t e, const char *what) {
    cudaGetLastError(); /* clear a sticky non-fatal error */
    return ckpt_fail(err, CKPT_E_IO, "CUDA %s: %s", what, cudaGetErrorString(e));
}

bool ckpt_cuda_is_device_ptr(const void *p) {
    struct cudaPointerAttributes a;
    memset(&a, 0, sizeof a);
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* no driver, no device, or an unknown pointer: host memory */
        return false;
    }
    return a.type == cudaMemoryTypeDevice;
}
