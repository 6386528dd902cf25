/* exchange.c — the rounds of a collective load.  In round r, reader k reads bytes
 * [r*B, (r+1)*B) of its share (large preads into a staging buffer); every rank then knows,
 * from the shared plan, which parts of every reader's window each rank needs, so counts need
 * no extra messages: senders pack the overlaps of each requester's pieces in (file, offset)
 * order, one all-to-all of the transport (ckpt_transport.h) moves them, and receivers unpack in the
 * same order straight into the destination buffers.  Device to device (l->dx: every destination
 * is device memory) the same round uploads the window to the device, packs and places with
 * device-to-device copies (devstage.c) and moves the packs with one ncclSend/ncclRecv group
 * (nccl.c) or one all-to-all of the transport's device hooks (transport.c).  Failures (a
 * missing file, a short read) are agreed on before the exchange, so every rank stops
 * together. */
#include "load/load_i.h"
#include "util/error.h"
#include "util/bigbuf.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A window sub-range and where its bytes sit in the reader's staging buffer. */
typedef struct wpart {
    frange r;
    uint64_t stage;
} wpart;

/* The sub-ranges of bytes [from, from+len) of reader k's share. */
static size_t window(const load_plan *p, int k, uint64_t from, uint64_t len, wpart *out,
                     size_t cap) {
    size_t n = 0;
    uint64_t at = 0, stage = 0;
    for (size_t i = 0; i < p->nshares[k] && len && n < cap; i++) {
        const frange *s = &p->shares[k][i];
        if (at + s->len <= from) {
            at += s->len;
            continue;
        }
        uint64_t skip = from > at ? from - at : 0, take = s->len - skip;
        if (take > len) take = len;
        out[n++] = (wpart){{s->file, s->off + skip, take}, stage};
        stage += take;
        len -= take;
        from += take;
        at += s->len;
    }
    return n;
}

static bool before(int32_t f1, uint64_t o1, int32_t f2, uint64_t o2) {
    return f1 < f2 || (f1 == f2 && o1 < o2);
}

/* Walks the overlaps of requester j's pieces with a window, in the canonical order (pieces in
 * (file, lo) order, then the window's parts, then the piece's rows); calls
 * fn(ctx, piece, part, lo, n, dst) for each (`dst`: the byte of the request it goes to);
 * returns the bytes.  Only the rows that meet the window are walked. */
typedef void (*overlap_fn)(void *ctx, const gpiece *q, const wpart *w, uint64_t lo, uint64_t n,
                           uint64_t dst);
typedef struct overlap_walk {
    overlap_fn fn;
    void *ctx;
    const wpart *w;
    uint64_t total;
} overlap_walk;
static void overlap_row(void *ctx, const gpiece *q, uint64_t lo, uint64_t n, uint64_t dst) {
    overlap_walk *x = ctx;
    if (x->fn) x->fn(x->ctx, q, x->w, lo, n, dst);
    x->total += n;
}
static uint64_t overlaps(const load_plan *p, int j, const wpart *w, size_t nw, overlap_fn fn,
                         void *ctx) {
    if (!nw) return 0;
    const wpart *last = &w[nw - 1];
    overlap_walk x = {fn, ctx, NULL, 0};
    for (size_t i = p->owner_first[j]; i < p->owner_first[j + 1]; i++) {
        const gpiece *q = &p->pieces[i];
        if (!before(q->file, q->lo, last->r.file, last->r.off + last->r.len)) break;
        for (size_t k = 0; k < nw; k++) {
            if (w[k].r.file != q->file) continue;
            x.w = &w[k];
            gpiece_rows(q, w[k].r.off, w[k].r.off + w[k].r.len, overlap_row, &x);
        }
    }
    return x.total;
}

typedef struct pack_ctx {
    const uint8_t *stage;
    uint8_t *out;
} pack_ctx;
static void pack(void *ctx, const gpiece *q, const wpart *w, uint64_t lo, uint64_t n,
                 uint64_t dst) {
    (void)q;
    (void)dst;
    pack_ctx *c = ctx;
    memcpy(c->out, c->stage + w->stage + (lo - w->r.off), n);
    c->out += n;
}

/* Bytes of request `req` arriving from host memory (`src`, n) at its offset `to`: a host
 * destination is copied into, a device one goes through the device sink (the first failed
 * device copy kept in *s; later pieces then skipped). */
static void deliver(ckpt_load *l, uint32_t req, uint64_t to, const uint8_t *src, uint64_t n,
                    ckpt_status *s, ckpt_error *err) {
    const lreq *r = &l->reqs[req];
    if (!r->device) {
        memcpy(r->dst + to, src, n);
    } else if (*s == CKPT_OK) {
        *s = dev_sink_put(l->dev, r->dst, r->dst + to, src, n, err);
        l->stats.bytes_device += n;
    }
}

typedef struct unpack_ctx {
    ckpt_load *l;
    const uint8_t *in;
    ckpt_status s; /* of the first failed device copy */
    ckpt_error *err;
} unpack_ctx;
static void unpack(void *ctx, const gpiece *q, const wpart *w, uint64_t lo, uint64_t n,
                   uint64_t to) {
    (void)w;
    (void)lo;
    unpack_ctx *c = ctx;
    deliver(c->l, q->req, to, c->in, n, &c->s, c->err);
    c->in += n;
}

/* Host: this rank's own pieces of its window, straight into its destinations (not through
 * the send buffer, the transport's self block and the receive buffer). */
typedef struct own_ctx {
    ckpt_load *l;
    const uint8_t *stage;
    ckpt_status s; /* of the first failed device copy */
    ckpt_error *err;
} own_ctx;
static void place_own(void *ctx, const gpiece *q, const wpart *w, uint64_t lo, uint64_t n,
                      uint64_t to) {
    own_ctx *c = ctx;
    deliver(c->l, q->req, to, c->stage + w->stage + (lo - w->r.off), n, &c->s, c->err);
}

/* Device exchange: the overlaps of one requester's pieces with this rank's window, copied device
 * to device from the device window into the send buffer (from `to` on), or straight into this
 * rank's own destinations. */
typedef struct dpack_ctx {
    ckpt_load *l;
    uint64_t to;
    bool self;
    ckpt_status s;
    ckpt_error *err;
} dpack_ctx;
static void dpack(void *ctx, const gpiece *q, const wpart *w, uint64_t lo, uint64_t n,
                  uint64_t dst) {
    dpack_ctx *c = ctx;
    uint64_t from = w->stage + (lo - w->r.off);
    if (c->s != CKPT_OK) return;
    if (c->self) {
        const lreq *r = &c->l->reqs[q->req];
        c->s = dev_stage_place(c->l->dx, r->dst, r->dst + dst, from, n, c->err);
        c->l->stats.bytes_device += n;
    } else {
        c->s = dev_stage_pack(c->l->dx, c->to, from, n, c->err);
        c->to += n;
    }
}

/* Device exchange: what arrived from one reader (from `from` in the receive buffer), device to
 * device into the destinations, in the order it was packed. */
typedef struct ddeliver_ctx {
    ckpt_load *l;
    uint64_t from;
    ckpt_status s;
    ckpt_error *err;
} ddeliver_ctx;
static void ddeliver(void *ctx, const gpiece *q, const wpart *w, uint64_t lo, uint64_t n,
                     uint64_t dst) {
    (void)w;
    (void)lo;
    ddeliver_ctx *c = ctx;
    const lreq *r = &c->l->reqs[q->req];
    if (c->s == CKPT_OK)
        c->s = dev_stage_deliver(c->l->dx, r->dst, r->dst + dst, c->from, n, c->err);
    c->l->stats.bytes_device += n;
    c->from += n;
}

static ckpt_status read_window(ckpt_load *l, const wpart *w, size_t nw, uint8_t *stage,
                               ckpt_error *err) {
    io_job *jobs = malloc((nw ? nw : 1) * sizeof *jobs);
    if (!jobs) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    for (size_t i = 0; i < nw; i++) {
        jobs[i] = (io_job){w[i].r.file, w[i].r.off, w[i].r.len, stage + w[i].stage, stage};
        l->stats.bytes_read_plan += w[i].r.len;
    }
    ckpt_status s = io_pool_read(l->io, l->r, jobs, nw, l->io_piece, err);
    free(jobs);
    return s;
}

/* This rank's direct ranges: bytes only one of its pieces needs, read straight into place
 * (host destinations) or through the device sink (device ones). */
static ckpt_status read_direct(ckpt_load *l, const load_plan *p, ckpt_error *err) {
    io_job *jobs = malloc((p->ndirect ? p->ndirect : 1) * sizeof *jobs);
    if (!jobs) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    size_t nhost = 0, ndev = 0; /* host jobs from the front, device jobs from the back */
    for (size_t i = 0; i < p->ndirect; i++) {
        const frange *d = &p->direct[i];
        const gpiece *q = &p->pieces[p->direct_piece[i]];
        const lreq *r = &l->reqs[q->req];
        io_job j = {d->file, d->off, d->len, r->dst + q->dst + (d->off - q->off), r->dst};
        if (r->device)
            jobs[p->ndirect - ++ndev] = j;
        else
            jobs[nhost++] = j;
        l->stats.bytes_read_plan += d->len;
    }
    /* the device jobs back in plan order, so that consecutive runs merge into one copy */
    for (size_t a = nhost, b = p->ndirect; a + 1 < b; a++, b--) {
        io_job t = jobs[a];
        jobs[a] = jobs[b - 1];
        jobs[b - 1] = t;
    }
    ckpt_status s = io_pool_read(l->io, l->r, jobs, nhost, l->io_piece, err);
    if (s == CKPT_OK && ndev) s = load_read_to_device(l, jobs + nhost, ndev, err);
    free(jobs);
    return s;
}

/* The state of the rounds. */
typedef struct rounds {
    ckpt_load *l;
    const load_plan *p;
    uint64_t B;
    size_t wcap;
    wpart *mine, *theirs;
    size_t nmine;
    uint8_t *stage; /* the window as read: host memory, pinned for a device exchange */
    int *sc, *sd, *rc, *rd;
    size_t *zsc, *zsd, *zrc, *zrd; /* the same as size_t, for the transport */
    uint64_t stot, rtot;
    uint8_t *sbuf, *rbuf; /* host: what is sent and received, kept over the rounds */
    uint64_t scap, rcap;
} rounds;

/* Counts of round r, both ways, from the plan alone; CKPT_E_LIMIT over int counts
 * (MPI's, and the NCCL link's). */
static ckpt_status count(rounds *x, uint64_t r, ckpt_error *err) {
    const load_plan *p = x->p;
    int me = x->l->rank;
    ckpt_status s = CKPT_OK;
    x->stot = x->rtot = 0;
    for (int j = 0; j < x->l->size; j++) {
        uint64_t n = overlaps(p, j, x->mine, x->nmine, NULL, NULL);
        size_t nt = window(p, j, r * x->B, x->B, x->theirs, x->wcap);
        uint64_t m = overlaps(p, me, x->theirs, nt, NULL, NULL);
        if (n > INT_MAX || m > INT_MAX || x->stot + n > INT_MAX || x->rtot + m > INT_MAX) {
            if (s == CKPT_OK) s = ck_fail(err, CKPT_E_LIMIT, "a round exchanges more than 2 GiB");
            n = m = 0;
        }
        x->sc[j] = (int)n;
        x->sd[j] = (int)x->stot;
        x->rc[j] = (int)m;
        x->rd[j] = (int)x->rtot;
        x->stot += n;
        x->rtot += m;
    }
    return s;
}

/* The round's counts as the transport takes them, this rank's own block left out (it goes
 * straight into place). */
static void zcounts(rounds *x) {
    for (int j = 0; j < x->l->size; j++) {
        bool me = j == x->l->rank;
        x->zsc[j] = me ? 0 : (size_t)x->sc[j];
        x->zsd[j] = (size_t)x->sd[j];
        x->zrc[j] = me ? 0 : (size_t)x->rc[j];
        x->zrd[j] = (size_t)x->rd[j];
    }
}

/* One round's movement over the handle's transport (host memory); `rs` is this rank's status so far
 * (agreed here).  A failed device copy is left in *us. */
static ckpt_status move_host(rounds *x, uint64_t r, ckpt_status rs, ckpt_status *us,
                             ckpt_error *err) {
    ckpt_load *l = x->l;
    const load_plan *p = x->p;
    ckpt_status s = load_agree(l, rs, err);
    if (s != CKPT_OK) return s;
    /* the send and receive buffers are kept over the rounds (grown when a round needs more):
     * fresh large blocks every round cost their page faults again; on huge pages where the
     * kernel has them (a first touch of 4 KiB pages was a third of a 2-rank exchange) */
    bool ok = true;
    if (x->stot + 1 > x->scap) {
        free(x->sbuf);
        x->scap = x->stot + 1;
        ok = (x->sbuf = ck_big_alloc(x->scap)) != NULL;
        if (!ok) x->scap = 0;
    }
    if (ok && x->rtot + 1 > x->rcap) {
        free(x->rbuf);
        x->rcap = x->rtot + 1;
        ok = (x->rbuf = ck_big_alloc(x->rcap)) != NULL;
        if (!ok) x->rcap = 0;
    }
    uint8_t *sbuf = x->sbuf, *rbuf = x->rbuf;
    s = load_agree(l, ok ? CKPT_OK : ck_fail(err, CKPT_E_NOMEM, "out of memory"), err);
    if (s == CKPT_OK) {
        int me = l->rank;
        for (int j = 0; j < l->size; j++) {
            if (j == me) continue;
            pack_ctx pc = {x->stage, sbuf + x->sd[j]};
            overlaps(p, j, x->mine, x->nmine, pack, &pc);
        }
        /* this rank's own bytes go from the window straight into place (two copies fewer
         * of each: no pack, self block or unpack; as move_device does) */
        own_ctx oc = {l, x->stage, CKPT_OK, err};
        overlaps(p, me, x->mine, x->nmine, place_own, &oc);
        if (oc.s != CKPT_OK && *us == CKPT_OK) *us = oc.s;
        zcounts(x);
        /* a failed all-to-all fails the next agreement (the next round's, or the one after
         * the rounds): what it left in rbuf is copied into the caller's buffers but the load
         * fails on every rank */
        ckpt_status ts = load_alltoallv(l, sbuf, x->zsc, x->zsd, rbuf, x->zrc, x->zrd, "all-to-all",
                                        *us == CKPT_OK ? err : NULL);
        if (ts != CKPT_OK && *us == CKPT_OK) *us = ts;
        for (int k = 0; k < l->size; k++) {
            if (k == me) continue;
            size_t nt = window(p, k, r * x->B, x->B, x->theirs, x->wcap);
            unpack_ctx uc = {l, rbuf + x->rd[k], CKPT_OK, err};
            overlaps(p, l->rank, x->theirs, nt, unpack, &uc);
            if (uc.s != CKPT_OK && *us == CKPT_OK) *us = uc.s;
        }
        l->stats.bytes_sent += x->stot - (uint64_t)x->sc[l->rank];
        l->stats.bytes_received += x->rtot - (uint64_t)x->rc[l->rank];
    }
    return s;
}

/* The device hooks' transfer of a round: one device all-to-all of the packs on the stage's
 * stream, deliveries queued behind it, the hooks' sync (after a failed all-to-all too: it
 * waits for whatever was queued), then a wait for the stream.  Every rank makes both calls,
 * whatever failed here (the peers are in them); this rank's status goes to *us, agreed at
 * the next round's start or after the rounds, as a host all-to-all's. */
static void hooks_transfer(rounds *x, uint64_t r, ckpt_status *us, ckpt_error *err) {
    ckpt_load *l = x->l;
    dev_stage *st = l->dx;
    void *stream = dev_stage_stream(st);
    zcounts(x);
    ckpt_status ts = dev_stage_flush(st, err); /* the packs, before the transfer reads them */
    ckpt_status as = load_dev_alltoallv(l, dev_stage_send(st), x->zsc, x->zsd, dev_stage_recv(st),
                                        x->zrc, x->zrd, stream, ts == CKPT_OK ? err : NULL);
    if (ts == CKPT_OK) ts = as;
    for (int k = 0; ts == CKPT_OK && k < l->size; k++) {
        if (k == l->rank) continue;
        size_t nt = window(x->p, k, r * x->B, x->B, x->theirs, x->wcap);
        ddeliver_ctx dc = {l, (uint64_t)x->rd[k], CKPT_OK, err};
        overlaps(x->p, l->rank, x->theirs, nt, ddeliver, &dc);
        ts = dc.s;
    }
    ckpt_status fs = dev_stage_flush(st, ts == CKPT_OK ? err : NULL);
    if (ts == CKPT_OK) ts = fs;
    ckpt_status ws = load_dev_sync(l, stream, ts == CKPT_OK ? err : NULL);
    if (ts == CKPT_OK) ts = ws;
    ws = dev_stage_wait(st, ts == CKPT_OK ? err : NULL);
    if (ts == CKPT_OK) ts = ws;
    if (ts != CKPT_OK && *us == CKPT_OK) *us = ts;
}

/* One round's movement device to device: the window up to the device, packs and this rank's
 * own bytes by device-to-device copies, one transfer, deliveries, then a wait for the stream
 * (the host window is reread next round).  Agreed before the transfer (no rank enters it
 * alone).  Over NCCL, agreed after the group too (a failed group aborts the communicator
 * everywhere); over the device hooks, as a host all-to-all (hooks_transfer). */
static ckpt_status move_device(rounds *x, uint64_t r, ckpt_status rs, ckpt_status *us,
                               ckpt_error *err) {
    ckpt_load *l = x->l;
    const load_plan *p = x->p;
    int me = l->rank;
    if (rs == CKPT_OK) {
        uint64_t n = 0;
        for (size_t i = 0; i < x->nmine; i++)
            n += x->mine[i].r.len;
        rs = dev_stage_upload(l->dx, n, err);
    }
    if (rs == CKPT_OK) rs = dev_stage_reserve(l->dx, x->stot, x->rtot, err);
    for (int j = 0; rs == CKPT_OK && j < l->size; j++) {
        dpack_ctx pc = {l, (uint64_t)x->sd[j], j == me, CKPT_OK, err};
        overlaps(p, j, x->mine, x->nmine, dpack, &pc);
        rs = pc.s;
    }
    ckpt_status s = load_agree(l, rs, err);
    if (s != CKPT_OK) return s;
    uint64_t sent = x->stot - (uint64_t)x->sc[me], received = x->rtot - (uint64_t)x->rc[me];
    if (l->use_hooks) {
        hooks_transfer(x, r, us, err);
        l->stats.bytes_sent += sent;
        l->stats.bytes_received += received;
        return CKPT_OK;
    }
    s = load_agree(l, nccl_link_exchange(l->nccl, x->sc, x->sd, x->rc, x->rd, err), err);
    if (s != CKPT_OK) {
        nccl_link_abort(l->nccl);
        l->nccl = NULL;
        l->dx = NULL;
        return s;
    }
    ckpt_status ds = CKPT_OK;
    for (int k = 0; k < l->size; k++) {
        if (k == me) continue;
        size_t nt = window(p, k, r * x->B, x->B, x->theirs, x->wcap);
        ddeliver_ctx dc = {l, (uint64_t)x->rd[k], CKPT_OK, err};
        overlaps(p, me, x->theirs, nt, ddeliver, &dc);
        if (dc.s != CKPT_OK && ds == CKPT_OK) ds = dc.s;
    }
    ckpt_status ws = nccl_link_sync(l->nccl, ds == CKPT_OK ? err : NULL);
    if (ds == CKPT_OK) ds = ws;
    if (ds != CKPT_OK && *us == CKPT_OK) *us = ds;
    l->stats.bytes_sent += sent;
    l->stats.bytes_received += received;
    l->stats.bytes_sent_nccl += sent;
    l->stats.bytes_received_nccl += received;
    return CKPT_OK;
}

ckpt_status load_exchange(ckpt_load *l, const load_plan *p, uint64_t staging_bytes,
                          ckpt_error *err) {
    int P = l->size, me = l->rank;
    dev_stage *dx = l->dx; /* (an aborted NCCL link clears l->dx, freeing the window) */
    double td = now();
    ckpt_status ds = load_agree(l, read_direct(l, p, err), err);
    l->stats.seconds_read += now() - td;
    if (ds != CKPT_OK) return ds;
    /* host: staging B + what is sent (up to P copies) + what is received: B*(1+2P) <= budget;
     * device to device: the pinned window and its device twin, then the device send and
     * receive buffers: B*(2+2P) */
    uint64_t B = staging_bytes / ((dx ? 2 : 1) + 2 * (uint64_t)P);
    if (B > (uint64_t)INT_MAX / (uint64_t)P) B = (uint64_t)INT_MAX / (uint64_t)P;
    if (B < 256) B = 256; /* tiny budgets: many rounds (tests) */
    uint64_t most = 0;
    for (int k = 0; k < P; k++)
        if (p->share_bytes[k] > most) most = p->share_bytes[k];
    uint64_t nrounds = (most + B - 1) / B;
    l->stats.rounds = (uint32_t)nrounds;
    rounds x = {.l = l, .p = p, .B = B};
    for (int k = 0; k < P; k++)
        if (p->nshares[k] > x.wcap) x.wcap = p->nshares[k];
    x.wcap += 1;
    x.mine = malloc(x.wcap * sizeof *x.mine);
    x.theirs = malloc(x.wcap * sizeof *x.theirs);
    x.sc = calloc((size_t)P, sizeof *x.sc);
    x.sd = calloc((size_t)P, sizeof *x.sd);
    x.rc = calloc((size_t)P, sizeof *x.rc);
    x.rd = calloc((size_t)P, sizeof *x.rd);
    x.zsc = calloc((size_t)P * 4, sizeof *x.zsc);
    if (x.zsc) {
        x.zsd = x.zsc + P;
        x.zrc = x.zsd + P;
        x.zrd = x.zrc + P;
    }
    ckpt_status s = x.mine && x.theirs && x.sc && x.sd && x.rc && x.rd && x.zsc
                        ? CKPT_OK
                        : ck_fail(err, CKPT_E_NOMEM, "out of memory");
    if (s == CKPT_OK && dx)
        s = dev_stage_window(dx, B, &x.stage, err);
    else if (s == CKPT_OK && !(x.stage = ck_big_alloc(B)))
        s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
    s = load_agree(l, s, err);
    ckpt_status us = CKPT_OK; /* placing into device memory */
    for (uint64_t r = 0; s == CKPT_OK && r < nrounds; r++) {
        double t0 = now();
        x.nmine = window(p, me, r * B, B, x.mine, x.wcap);
        /* a device copy that failed in the last round fails this one, on every rank */
        ckpt_status rs = us != CKPT_OK ? us : read_window(l, x.mine, x.nmine, x.stage, err);
        double t1 = now();
        l->stats.seconds_read += t1 - t0;
        ckpt_status cs = count(&x, r, rs == CKPT_OK ? err : NULL);
        if (rs == CKPT_OK) rs = cs;
        s = dx ? move_device(&x, r, rs, &us, err) : move_host(&x, r, rs, &us, err);
        l->stats.seconds_exchange += now() - t1;
    }
    if (s == CKPT_OK) s = load_agree(l, us, err);
    free(x.mine);
    free(x.theirs);
    free(x.sbuf);
    free(x.rbuf);
    if (!dx) free(x.stage); /* a device exchange's window is freed with its stage */
    free(x.sc);
    free(x.sd);
    free(x.rc);
    free(x.rd);
    free(x.zsc);
    return s;
}
