/* exchange.c — the rounds of a collective load.  In round r, reader k reads bytes
 * [r*B, (r+1)*B) of its share (large preads into a staging buffer); every rank then knows,
 * from the shared plan, which parts of every reader's window each rank needs, so counts need
 * no extra messages: senders pack the overlaps of each requester's pieces in (file, offset)
 * order, one MPI_Alltoallv moves them, and receivers unpack in the same order straight into
 * the destination buffers.  Failures (a missing file, a short read) are agreed on before the
 * exchange, so every rank stops together. */
#include "load/load_i.h"
#include "util/error.h"

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

/* Walks the overlaps of requester j's pieces with a window, in the canonical order; calls
 * fn(ctx, piece, part, lo, n) for each; returns the bytes. */
typedef void (*overlap_fn)(void *ctx, const gpiece *q, const wpart *w, uint64_t lo, uint64_t n);
static uint64_t overlaps(const load_plan *p, int j, const wpart *w, size_t nw, overlap_fn fn,
                         void *ctx) {
    if (!nw) return 0;
    const wpart *last = &w[nw - 1];
    uint64_t total = 0;
    for (size_t i = p->owner_first[j]; i < p->owner_first[j + 1]; i++) {
        const gpiece *q = &p->pieces[i];
        if (!before(q->file, q->off, last->r.file, last->r.off + last->r.len)) break;
        for (size_t k = 0; k < nw; k++) {
            if (w[k].r.file != q->file) continue;
            uint64_t lo = q->off > w[k].r.off ? q->off : w[k].r.off;
            uint64_t qe = q->off + q->len, we = w[k].r.off + w[k].r.len;
            uint64_t hi = qe < we ? qe : we;
            if (lo >= hi) continue;
            if (fn) fn(ctx, q, &w[k], lo, hi - lo);
            total += hi - lo;
        }
    }
    return total;
}

typedef struct pack_ctx {
    const uint8_t *stage;
    uint8_t *out;
} pack_ctx;
static void pack(void *ctx, const gpiece *q, const wpart *w, uint64_t lo, uint64_t n) {
    (void)q;
    pack_ctx *c = ctx;
    memcpy(c->out, c->stage + w->stage + (lo - w->r.off), n);
    c->out += n;
}

typedef struct unpack_ctx {
    ckpt_load *l;
    const uint8_t *in;
    ckpt_status s; /* of the first failed device copy */
    ckpt_error *err;
} unpack_ctx;
static void unpack(void *ctx, const gpiece *q, const wpart *w, uint64_t lo, uint64_t n) {
    (void)w;
    unpack_ctx *c = ctx;
    const lreq *r = &c->l->reqs[q->req];
    uint8_t *dst = r->dst + q->dst + (lo - q->off);
    if (!r->device) {
        memcpy(dst, c->in, n);
    } else if (c->s == CKPT_OK) {
        c->s = dev_sink_put(c->l->dev, dst, c->in, n, c->err);
        c->l->stats.bytes_device += n;
    }
    c->in += n;
}

static ckpt_status read_window(ckpt_load *l, const wpart *w, size_t nw, uint8_t *stage,
                               ckpt_error *err) {
    io_job *jobs = malloc((nw ? nw : 1) * sizeof *jobs);
    if (!jobs) return ckpt_fail(err, CKPT_E_NOMEM, "out of memory");
    for (size_t i = 0; i < nw; i++) {
        jobs[i] = (io_job){w[i].r.file, w[i].r.off, w[i].r.len, stage + w[i].stage};
        l->stats.bytes_read += w[i].r.len;
    }
    ckpt_status s = io_pool_read(l->io, l->r, jobs, nw, l->io_piece, err);
    free(jobs);
    return s;
}

/* This rank's direct ranges: bytes only one of its pieces needs, read straight into place
 * (host destinations) or through the device sink (device ones). */
static ckpt_status read_direct(ckpt_load *l, const load_plan *p, ckpt_error *err) {
    io_job *jobs = malloc((p->ndirect ? p->ndirect : 1) * sizeof *jobs);
    if (!jobs) return ckpt_fail(err, CKPT_E_NOMEM, "out of memory");
    size_t nhost = 0, ndev = 0; /* host jobs from the front, device jobs from the back */
    for (size_t i = 0; i < p->ndirect; i++) {
        const frange *d = &p->direct[i];
        const gpiece *q = &p->pieces[p->direct_piece[i]];
        const lreq *r = &l->reqs[q->req];
        io_job j = {d->file, d->off, d->len, r->dst + q->dst + (d->off - q->off)};
        if (r->device)
            jobs[p->ndirect - ++ndev] = j;
        else
            jobs[nhost++] = j;
        l->stats.bytes_read += d->len;
    }
    ckpt_status s = io_pool_read(l->io, l->r, jobs, nhost, l->io_piece, err);
    if (s == CKPT_OK && ndev) s = load_read_to_device(l, jobs + nhost, ndev, err);
    free(jobs);
    return s;
}

ckpt_status load_exchange(ckpt_load *l, const load_plan *p, uint64_t staging_bytes,
                          ckpt_error *err) {
    int P = l->size, me = l->rank;
    double td = now();
    ckpt_status ds = load_agree(l, read_direct(l, p, err), err);
    l->stats.seconds_read += now() - td;
    if (ds != CKPT_OK) return ds;
    /* staging B + what is sent (up to P copies) + what is received: B*(1+2P) <= budget */
    uint64_t B = staging_bytes / (1 + 2 * (uint64_t)P);
    if (B > (uint64_t)INT_MAX / (uint64_t)P) B = (uint64_t)INT_MAX / (uint64_t)P;
    if (B < 256) B = 256; /* tiny budgets: many rounds (tests) */
    uint64_t most = 0;
    for (int k = 0; k < P; k++)
        if (p->share_bytes[k] > most) most = p->share_bytes[k];
    uint64_t rounds = (most + B - 1) / B;
    l->stats.rounds = (uint32_t)rounds;
    size_t wcap = 0;
    for (int k = 0; k < P; k++)
        if (p->nshares[k] > wcap) wcap = p->nshares[k];
    wcap += 1;
    wpart *mine = malloc(wcap * sizeof *mine), *theirs = malloc(wcap * sizeof *theirs);
    uint8_t *stage = malloc(B);
    int *sc = calloc((size_t)P, sizeof *sc), *sd = calloc((size_t)P, sizeof *sd);
    int *rc = calloc((size_t)P, sizeof *rc), *rd = calloc((size_t)P, sizeof *rd);
    ckpt_status s = mine && theirs && stage && sc && sd && rc && rd
                        ? CKPT_OK
                        : ckpt_fail(err, CKPT_E_NOMEM, "out of memory");
    s = load_agree(l, s, err);
    ckpt_status us = CKPT_OK; /* unpacking into device memory */
    for (uint64_t r = 0; s == CKPT_OK && r < rounds; r++) {
        double t0 = now();
        size_t nmine = window(p, me, r * B, B, mine, wcap);
        /* a device copy that failed in the last round fails this one, on every rank */
        ckpt_status rs = us != CKPT_OK ? us : read_window(l, mine, nmine, stage, err);
        double t1 = now();
        l->stats.seconds_read += t1 - t0;
        /* counts, both ways, from the plan alone */
        uint64_t stot = 0, rtot = 0;
        for (int j = 0; j < P; j++) {
            uint64_t n = overlaps(p, j, mine, nmine, NULL, NULL);
            size_t nt = window(p, j, r * B, B, theirs, wcap);
            uint64_t m = overlaps(p, me, theirs, nt, NULL, NULL);
            if (n > INT_MAX || m > INT_MAX || stot + n > INT_MAX || rtot + m > INT_MAX) {
                if (rs == CKPT_OK)
                    rs = ckpt_fail(err, CKPT_E_LIMIT, "a round exchanges more than 2 GiB");
                n = m = 0;
            }
            sc[j] = (int)n;
            sd[j] = (int)stot;
            rc[j] = (int)m;
            rd[j] = (int)rtot;
            stot += n;
            rtot += m;
        }
        s = load_agree(l, rs, err);
        if (s != CKPT_OK) break;
        uint8_t *sbuf = malloc(stot + 1), *rbuf = malloc(rtot + 1);
        s = load_agree(l, sbuf && rbuf ? CKPT_OK : ckpt_fail(err, CKPT_E_NOMEM, "out of memory"),
                       err);
        if (s == CKPT_OK) {
            for (int j = 0; j < P; j++) {
                pack_ctx pc = {stage, sbuf + sd[j]};
                overlaps(p, j, mine, nmine, pack, &pc);
            }
            MPI_Alltoallv(sbuf, sc, sd, MPI_BYTE, rbuf, rc, rd, MPI_BYTE, l->comm);
            for (int k = 0; k < P; k++) {
                size_t nt = window(p, k, r * B, B, theirs, wcap);
                unpack_ctx uc = {l, rbuf + rd[k], CKPT_OK, err};
                overlaps(p, me, theirs, nt, unpack, &uc);
                if (uc.s != CKPT_OK && us == CKPT_OK) us = uc.s;
            }
            l->stats.bytes_sent += stot - (uint64_t)sc[me];
            l->stats.bytes_received += rtot - (uint64_t)rc[me];
        }
        free(sbuf);
        free(rbuf);
        l->stats.seconds_exchange += now() - t1;
    }
    if (s == CKPT_OK) s = load_agree(l, us, err);
    free(mine);
    free(theirs);
    free(stage);
    free(sc);
    free(sd);
    free(rc);
    free(rd);
    return s;
}
