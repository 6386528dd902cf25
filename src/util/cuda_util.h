/* cuda_util.h — what the CUDA runtime's users share (the saver's device sources, the loader's
 * device sink and its NCCL transport): a failed call as a ckpt error, and telling device
 * pointers from host ones.  Compiled only with the cuda feature (their no-CUDA twins need
 * neither). */
#ifndef CKPT_UTIL_CUDA_UTIL_H
#define CKPT_UTIL_CUDA_UTIL_H

#include "ckpt.h"

#include <cuda_runtime_api.h>
#include <stdbool.h>

/* CKPT_E_IO "CUDA <what>: <the runtime's message>", after clearing a sticky non-fatal error. */
ckpt_status ckpt_cuda_fail(ckpt_error *err, cudaError_t e, const char *what);
/* True for device memory; false for host memory, or when there is no driver or device (the
 * runtime's error is cleared). */
bool ckpt_cuda_is_device_ptr(const void *p);

#endif
