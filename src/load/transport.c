/* transport.c — the loader's side of ckpt_transport.h: checking a caller's transport, the
 * operations it may leave out (bcast and the minimum, made from allgatherv), the device hooks'
 * calls, a failing callback turned into a ckpt_status naming the operation, and the error
 * agreement every phase ends with (the lowest failing rank's status and message on every
 * rank). */
#include "load/load_i.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ckpt_status load_transport_check(const ckpt_transport *t, ckpt_error *err) {
    if (!t) return ck_fail(err, CKPT_E_INVAL, "transport: NULL");
    if (t->version != CKPT_TRANSPORT_VERSION)
        return ck_fail(err, CKPT_E_UNSUPPORTED,
                       "transport: version %u, this loader knows version %u", t->version,
                       (unsigned)CKPT_TRANSPORT_VERSION);
    if (t->size < 1 || t->rank < 0 || t->rank >= t->size)
        return ck_fail(err, CKPT_E_INVAL, "transport: rank %d of %d ranks", t->rank, t->size);
    if (!t->allgatherv || !t->alltoallv)
        return ck_fail(err, CKPT_E_INVAL, "transport: no %s callback",
                       t->allgatherv ? "alltoallv" : "allgatherv");
    if (t->device && (!t->device->alltoallv || !t->device->sync))
        return ck_fail(err, CKPT_E_INVAL, "transport: device hooks with no %s callback",
                       t->device->alltoallv ? "sync" : "alltoallv");
    if (t->device && t->device->device < 0)
        return ck_fail(err, CKPT_E_INVAL, "transport: device hooks on device %d",
                       t->device->device);
    return CKPT_OK;
}

ckpt_status load_transport_init(ckpt_load *l, ckpt_error *err) {
    size_t P = (size_t)l->size;
    l->tcounts = calloc(P, sizeof *l->tcounts);
    l->tdispls = calloc(P, sizeof *l->tdispls);
    /* (the gathered values of a minimum made from allgatherv) */
    l->tmin = l->t.allreduce_min_u64 ? NULL : calloc(P * LOAD_MIN_MAX, sizeof *l->tmin);
    if (!l->tcounts || !l->tdispls || (!l->t.allreduce_min_u64 && !l->tmin))
        return ck_fail(err, CKPT_E_NOMEM, "out of memory (transport scratch of %zu ranks)", P);
    return CKPT_OK;
}

void load_transport_fini(ckpt_load *l) {
    free(l->tcounts);
    free(l->tdispls);
    free(l->tmin);
    if (l->t.destroy) l->t.destroy(l->t.ctx);
    l->t.destroy = NULL;
}

/* The status of a failed callback: CKPT_E_TRANSPORT naming the operation and the code. */
static ckpt_status failed(ckpt_load *l, const char *what, int code, ckpt_error *err) {
    const char *text = l->t.strerror ? l->t.strerror(l->t.ctx, code) : NULL;
    if (text && *text) return ck_fail(err, CKPT_E_TRANSPORT, "transport %s failed: %s", what, text);
    return ck_fail(err, CKPT_E_TRANSPORT, "transport %s failed: error %d", what, code);
}

/* The handle can no longer agree: remember the error, every later collective returns it. */
static ckpt_status broken(ckpt_load *l, ckpt_status s, ckpt_error *err) {
    if (!l->broken) {
        l->broken = s;
        l->broken_err = *err;
    }
    return s;
}

static ckpt_status still_broken(const ckpt_load *l, ckpt_error *err) {
    if (l->broken && err) *err = l->broken_err;
    return l->broken;
}

ckpt_status load_allgatherv(ckpt_load *l, const void *send, size_t n, void *recv,
                            const size_t *counts, const size_t *displs, const char *what,
                            ckpt_error *err) {
    if (l->broken) return still_broken(l, err);
    int rc = l->t.allgatherv(l->t.ctx, send, n, recv, counts, displs);
    return rc ? failed(l, what, rc, err) : CKPT_OK;
}

ckpt_status load_allgather(ckpt_load *l, const void *mine, size_t n, void *all, const char *what,
                           ckpt_error *err) {
    for (int k = 0; k < l->size; k++) {
        l->tcounts[k] = n;
        l->tdispls[k] = (size_t)k * n;
    }
    return load_allgatherv(l, mine, n, all, l->tcounts, l->tdispls, what, err);
}

ckpt_status load_alltoallv(ckpt_load *l, const void *send, const size_t *sc, const size_t *sd,
                           void *recv, const size_t *rc, const size_t *rd, const char *what,
                           ckpt_error *err) {
    if (l->broken) return still_broken(l, err);
    int code = l->t.alltoallv(l->t.ctx, send, sc, sd, recv, rc, rd);
    return code ? failed(l, what, code, err) : CKPT_OK;
}

ckpt_status load_dev_alltoallv(ckpt_load *l, const void *send, const size_t *sc, const size_t *sd,
                               void *recv, const size_t *rc, const size_t *rd, void *stream,
                               ckpt_error *err) {
    if (l->broken) return still_broken(l, err);
    int code = l->t.device->alltoallv(l->t.ctx, send, sc, sd, recv, rc, rd, stream);
    return code ? failed(l, "device all-to-all", code, err) : CKPT_OK;
}

ckpt_status load_dev_sync(ckpt_load *l, void *stream, ckpt_error *err) {
    if (l->broken) return still_broken(l, err);
    int code = l->t.device->sync(l->t.ctx, stream);
    return code ? failed(l, "device sync", code, err) : CKPT_OK;
}

ckpt_status load_bcast(ckpt_load *l, void *buf, size_t n, int root, const char *what,
                       ckpt_error *err) {
    if (l->broken) return still_broken(l, err);
    if (l->t.bcast) {
        int rc = l->t.bcast(l->t.ctx, buf, n, root);
        return rc ? failed(l, what, rc, err) : CKPT_OK;
    }
    /* root sends its bytes, the others nothing; everyone receives them in place */
    for (int k = 0; k < l->size; k++) {
        l->tcounts[k] = k == root ? n : 0;
        l->tdispls[k] = 0;
    }
    int rc = l->t.allgatherv(l->t.ctx, l->rank == root ? buf : NULL, l->rank == root ? n : 0, buf,
                             l->tcounts, l->tdispls);
    return rc ? failed(l, what, rc, err) : CKPT_OK;
}

ckpt_status load_min_u64(ckpt_load *l, uint64_t *v, size_t n, const char *what, ckpt_error *err) {
    if (l->broken) return still_broken(l, err);
    if (n > LOAD_MIN_MAX) return ck_fail(err, CKPT_E_INVAL, "internal: minimum of %zu", n);
    int rc;
    if (l->t.allreduce_min_u64) {
        rc = l->t.allreduce_min_u64(l->t.ctx, v, n);
    } else {
        uint64_t mine[LOAD_MIN_MAX];
        memcpy(mine, v, n * sizeof *v);
        for (int k = 0; k < l->size; k++) {
            l->tcounts[k] = n * sizeof *v;
            l->tdispls[k] = (size_t)k * n * sizeof *v;
        }
        rc = l->t.allgatherv(l->t.ctx, mine, n * sizeof *v, l->tmin, l->tcounts, l->tdispls);
        for (size_t i = 0; !rc && i < n; i++) {
            v[i] = UINT64_MAX;
            for (int k = 0; k < l->size; k++)
                if (l->tmin[(size_t)k * n + i] < v[i]) v[i] = l->tmin[(size_t)k * n + i];
        }
    }
    /* all-or-nothing (ckpt_transport.h T2): a failed minimum leaves nothing to agree with */
    return rc ? broken(l, failed(l, what, rc, err), err) : CKPT_OK;
}

ckpt_status load_agree(ckpt_load *l, ckpt_status st, ckpt_error *err) {
    ckpt_error local = {0};
    if (!err) err = &local;
    if (l->broken) return still_broken(l, err);
    uint64_t first = st != CKPT_OK ? (uint64_t)l->rank : UINT64_MAX;
    ckpt_error mine = *err;
    ckpt_status s = load_min_u64(l, &first, 1, "agreement (minimum)", err);
    if (s != CKPT_OK) return s;
    if (first == UINT64_MAX) {
        *err = mine;
        return CKPT_OK;
    }
    ckpt_error e = {0};
    if ((uint64_t)l->rank == first) {
        e = mine;
        e.code = st;
        e.message[sizeof e.message - 1] = '\0';
        if (!e.message[0]) snprintf(e.message, sizeof e.message, "%s", ckpt_strerror(st));
    }
    ckpt_error berr = {0};
    s = load_bcast(l, &e, sizeof e, (int)first, "agreement (broadcast)", &berr);
    /* a broadcast that failed on some ranks (allowed, T2) is agreed with the minimum, which
     * is all-or-nothing; its text stays on the rank that saw it */
    uint64_t bad = s != CKPT_OK ? (uint64_t)l->rank : UINT64_MAX;
    s = load_min_u64(l, &bad, 1, "agreement (minimum)", err);
    if (s != CKPT_OK) return s;
    if (bad != UINT64_MAX) {
        ck_fail(err, CKPT_E_TRANSPORT,
                "rank %d: transport agreement (broadcast) failed, sending rank %d's error",
                (int)bad, (int)first);
        return CKPT_E_TRANSPORT;
    }
    ckpt_error out = {.code = e.code};
    e.message[sizeof e.message - 1] = '\0';
    int n = snprintf(out.message, sizeof out.message, "rank %d: ", (int)first);
    if (n > 0 && (size_t)n < sizeof out.message)
        memcpy(out.message + n, e.message, strnlen(e.message, sizeof out.message - (size_t)n - 1));
    out.message[sizeof out.message - 1] = '\0';
    *err = out;
    return e.code;
}
