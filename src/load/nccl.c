/* nccl.c — the NCCL transport of the collective loader's exchange (compiled with the cuda and
 * nccl features; nonccl.c otherwise): the link (an NCCL communicator made over the handle's
 * transport, and the device staging of devstage.c, whose stream its groups are queued on) and
 * the one thing a round needs of NCCL — one ncclSend/ncclRecv group moving the packed send
 * buffer to the peers' receive buffers.  The round logic is exchange.c's; the uploads, packs
 * and placements are devstage.c's; this file owns every NCCL call of the transport. */
#include "load/load_i.h"
#include "util/cuda_util.h"
#include "util/error.h"

#include <cuda_runtime_api.h>
/* nccl.h declares some functions without prototypes (f() for f(void)) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include <stdlib.h>
#include <string.h>

struct nccl_link {
    ncclComm_t comm;
    int rank, size; /* in comm: the handle's */
    int device;     /* current when the communicator was made */
    dev_stage *st;  /* the stream and the staging */
};

static ckpt_status nccl_fail(ckpt_error *err, ncclResult_t e, const char *what) {
    return ck_fail(err, CKPT_E_IO, "NCCL %s: %s", what, ncclGetErrorString(e));
}

bool nccl_supported(void) { return true; }

/* The stream and the device, before any rank enters ncclCommInitRank. */
static ckpt_status link_create(nccl_link **out, ckpt_error *err) {
    nccl_link *x = calloc(1, sizeof *x);
    if (!x) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    cudaError_t e = cudaGetDevice(&x->device);
    if (e != cudaSuccess) {
        free(x);
        return ck_cuda_fail(err, e, "NCCL transport stream");
    }
    ckpt_status s = dev_stage_create(&x->st, err);
    if (s != CKPT_OK) {
        free(x);
        return s;
    }
    *out = x;
    return CKPT_OK;
}

ckpt_status nccl_link_open(ckpt_load *l, ckpt_error *err) {
    if (l->nccl) {
        int dev = -1;
        cudaError_t e = cudaGetDevice(&dev);
        ckpt_status s = e != cudaSuccess ? ck_cuda_fail(err, e, "current device")
                        : dev != l->nccl->device
                            ? ck_fail(err, CKPT_E_INVAL,
                                      "NCCL transport: the communicator was made on device %d, "
                                      "the current device is %d",
                                      l->nccl->device, dev)
                            : CKPT_OK;
        return load_agree(l, s, err);
    }
    nccl_link *x = NULL;
    ckpt_status s = load_agree(l, link_create(&x, err), err);
    if (s != CKPT_OK) {
        nccl_link_free(x);
        return s;
    }
    x->rank = l->rank;
    x->size = l->size;
    /* rank 0 makes the unique id; every rank learns it, or that rank 0 failed */
    struct {
        int ok;
        ncclUniqueId id;
    } msg;
    memset(&msg, 0, sizeof msg);
    if (l->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&msg.id);
        msg.ok = r == ncclSuccess;
        if (!msg.ok) s = nccl_fail(err, r, "unique id");
    }
    ckpt_status bs =
        load_bcast(l, &msg, sizeof msg, 0, "broadcast (NCCL unique id)", s == CKPT_OK ? err : NULL);
    if (bs != CKPT_OK) { /* the id is not known here: no init; agreed below */
        msg.ok = 0;
        if (s == CKPT_OK) s = bs;
    }
    if (msg.ok) {
        ncclResult_t r = ncclCommInitRank(&x->comm, l->size, msg.id, l->rank);
        if (r != ncclSuccess) {
            x->comm = NULL;
            s = nccl_fail(err, r, "communicator");
        }
    }
    s = load_agree(l, s, err);
    if (s != CKPT_OK) { /* the ranks whose init succeeded abort (destroying may wait for all) */
        nccl_link_abort(x);
        return s;
    }
    l->nccl = x;
    return CKPT_OK;
}

dev_stage *nccl_link_staging(nccl_link *x) { return x->st; }

void nccl_link_release(nccl_link *x) {
    if (x) dev_stage_release(x->st);
}

void nccl_link_free(nccl_link *x) {
    if (!x) return;
    dev_stage_release(x->st);
    if (x->comm) ncclCommDestroy(x->comm);
    dev_stage_free(x->st);
    free(x);
}

void nccl_link_abort(nccl_link *x) {
    if (!x) return;
    if (x->comm) ncclCommAbort(x->comm); /* what the stream still waits for is dropped */
    x->comm = NULL;
    dev_stage_drop(x->st);
    nccl_link_free(x);
}

ckpt_status nccl_link_exchange(nccl_link *x, const int *sc, const int *sd, const int *rc,
                               const int *rd, ckpt_error *err) {
    CK_TRY(dev_stage_flush(x->st, err));
    cudaStream_t stream = dev_stage_stream(x->st);
    uint8_t *send = dev_stage_send(x->st), *recv = dev_stage_recv(x->st);
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) return nccl_fail(err, r, "group start");
    ncclResult_t first = ncclSuccess;
    for (int j = 0; first == ncclSuccess && j < x->size; j++) {
        if (j == x->rank) continue;
        if (sc[j]) first = ncclSend(send + sd[j], (size_t)sc[j], ncclUint8, j, x->comm, stream);
        if (first == ncclSuccess && rc[j])
            first = ncclRecv(recv + rd[j], (size_t)rc[j], ncclUint8, j, x->comm, stream);
    }
    r = ncclGroupEnd(); /* always: a started group must end */
    if (first != ncclSuccess) return nccl_fail(err, first, "send/receive");
    return r == ncclSuccess ? CKPT_OK : nccl_fail(err, r, "group");
}

ckpt_status nccl_link_sync(nccl_link *x, ckpt_error *err) {
    CK_TRY(dev_stage_wait(x->st, err));
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(x->comm, &async);
    if (r == ncclSuccess) r = async;
    return r == ncclSuccess ? CKPT_OK : nccl_fail(err, r, "transfer");
}
