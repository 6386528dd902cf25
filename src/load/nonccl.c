/* nonccl.c — the NCCL transport in builds without the nccl feature (or without cuda): it is
 * never chosen (ckpt_load_execute fails a forced CKPT_LOAD_TRANSPORT_NCCL with
 * CKPT_E_UNSUPPORTED first); these keep the internal API identical in every build. */
#include "load/load_i.h"
#include "util/error.h"

static ckpt_status unsupported(ckpt_error *err) {
    return ck_fail(err, CKPT_E_UNSUPPORTED, "this build has no NCCL support");
}

bool nccl_supported(void) { return false; }

ckpt_status nccl_link_open(ckpt_load *l, ckpt_error *err) {
    return load_agree(l, unsupported(err), err);
}

void nccl_link_free(nccl_link *x) { (void)x; }
void nccl_link_release(nccl_link *x) { (void)x; }
void nccl_link_abort(nccl_link *x) { (void)x; }

dev_stage *nccl_link_staging(nccl_link *x) {
    (void)x;
    return NULL;
}

ckpt_status nccl_link_exchange(nccl_link *x, const int *sc, const int *sd, const int *rc,
                               const int *rd, ckpt_error *err) {
    (void)x;
    (void)sc;
    (void)sd;
    (void)rc;
    (void)rd;
    return unsupported(err);
}

ckpt_status nccl_link_sync(nccl_link *x, ckpt_error *err) {
    (void)x;
    (void)err;
    return CKPT_OK;
}
