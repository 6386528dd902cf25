/* nodevice.c — device destinations in builds without the cuda feature: no pointer is a
 * device pointer and a device sink cannot be made (requests for CUDA memory fail with
 * CKPT_E_UNSUPPORTED before any of these is reached). */
#include "load/load_i.h"
#include "util/error.h"

bool dev_supported(void) { return false; }

bool dev_pointer_is_device(const void *p) {
    (void)p;
    return false;
}

ckpt_status dev_sink_create(uint64_t bytes, dev_sink **out, ckpt_error *err) {
    (void)bytes;
    *out = NULL;
    return ck_fail(err, CKPT_E_UNSUPPORTED, "this build has no CUDA support");
}

void dev_sink_free(dev_sink *s) { (void)s; }

uint64_t dev_sink_bytes(const dev_sink *s) {
    (void)s;
    return 0;
}

uint8_t *dev_sink_room(dev_sink *s, uint64_t want, uint64_t *avail, ckpt_error *err) {
    (void)s;
    (void)want;
    *avail = 0;
    ck_fail(err, CKPT_E_UNSUPPORTED, "this build has no CUDA support");
    return NULL;
}

ckpt_status dev_sink_fill(dev_sink *s, const uint8_t *buf, uint8_t *dst, uint64_t n,
                          ckpt_error *err) {
    (void)s;
    (void)buf;
    (void)dst;
    (void)n;
    return ck_fail(err, CKPT_E_UNSUPPORTED, "this build has no CUDA support");
}

ckpt_status dev_sink_put(dev_sink *s, const uint8_t *buf, uint8_t *dst, const uint8_t *src,
                         uint64_t n, ckpt_error *err) {
    (void)src;
    return dev_sink_fill(s, buf, dst, n, err);
}

ckpt_status dev_sink_finish(dev_sink *s, ckpt_error *err) {
    (void)s;
    (void)err;
    return CKPT_OK;
}
