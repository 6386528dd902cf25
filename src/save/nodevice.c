/* nodevice.c — the saver's device sources in builds without the cuda feature: the CUDA
 * runtime is not there to ask, so no pointer is taken for a device pointer (a buffer passed
 * with CKPT_SAVE_MEM_AUTO is read as host memory) and a pipeline cannot be made (buffers
 * marked CKPT_SAVE_MEM_CUDA fail with CKPT_E_UNSUPPORTED before any of these is reached). */
#include "save/device.h"

#include "util/error.h"

bool save_dev_supported(void) { return false; }

bool save_dev_is_device(const void *p) {
    (void)p;
    return false;
}

ckpt_status save_dev_create(uint64_t staging_bytes, save_dev **out, ckpt_error *err) {
    (void)staging_bytes;
    *out = NULL;
    return ck_fail(err, CKPT_E_UNSUPPORTED, "this build has no CUDA support");
}

void save_dev_free(save_dev *d) { (void)d; }

ckpt_status save_dev_stream(save_dev *d, const void *src, uint64_t n, save_dev_emit emit, void *ctx,
                            ckpt_error *err) {
    (void)d, (void)src, (void)n, (void)emit, (void)ctx;
    return ck_fail(err, CKPT_E_UNSUPPORTED, "this build has no CUDA support");
}
