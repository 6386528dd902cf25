/* nodevice.c — device destinations in builds without the cuda feature: no pointer is a
 * device pointer, a device sink or a device stage cannot be made (requests for CUDA memory
 * fail with CKPT_E_UNSUPPORTED before any of these is reached). */
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

int dev_current(void) { return -1; }

static ckpt_status no_cuda(ckpt_error *err) {
    return ck_fail(err, CKPT_E_UNSUPPORTED, "this build has no CUDA support");
}

ckpt_status dev_stage_create(dev_stage **out, ckpt_error *err) {
    *out = NULL;
    return no_cuda(err);
}

void dev_stage_release(dev_stage *x) { (void)x; }
void dev_stage_drop(dev_stage *x) { (void)x; }
void dev_stage_free(dev_stage *x) { (void)x; }

void *dev_stage_stream(dev_stage *x) {
    (void)x;
    return NULL;
}

uint8_t *dev_stage_send(dev_stage *x) {
    (void)x;
    return NULL;
}

uint8_t *dev_stage_recv(dev_stage *x) {
    (void)x;
    return NULL;
}

ckpt_status dev_stage_window(dev_stage *x, uint64_t bytes, uint8_t **host, ckpt_error *err) {
    (void)x;
    (void)bytes;
    *host = NULL;
    return no_cuda(err);
}

ckpt_status dev_stage_reserve(dev_stage *x, uint64_t send, uint64_t recv, ckpt_error *err) {
    (void)x;
    (void)send;
    (void)recv;
    return no_cuda(err);
}

ckpt_status dev_stage_upload(dev_stage *x, uint64_t n, ckpt_error *err) {
    (void)x;
    (void)n;
    return no_cuda(err);
}

ckpt_status dev_stage_pack(dev_stage *x, uint64_t to, uint64_t from, uint64_t n, ckpt_error *err) {
    (void)x;
    (void)to;
    (void)from;
    (void)n;
    return no_cuda(err);
}

ckpt_status dev_stage_place(dev_stage *x, const uint8_t *buf, uint8_t *dst, uint64_t from,
                            uint64_t n, ckpt_error *err) {
    (void)x;
    (void)buf;
    (void)dst;
    (void)from;
    (void)n;
    return no_cuda(err);
}

ckpt_status dev_stage_deliver(dev_stage *x, const uint8_t *buf, uint8_t *dst, uint64_t from,
                              uint64_t n, ckpt_error *err) {
    return dev_stage_place(x, buf, dst, from, n, err);
}

ckpt_status dev_stage_flush(dev_stage *x, ckpt_error *err) {
    (void)x;
    (void)err;
    return CKPT_OK;
}

ckpt_status dev_stage_wait(dev_stage *x, ckpt_error *err) {
    (void)x;
    (void)err;
    return CKPT_OK;
}
