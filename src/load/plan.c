/* plan.c — the job-wide plan, computed identically on every rank: gather every rank's
 * transfers (a stored chunk's region intersected with a request's box, in strided form: one
 * entry per (request, chunk), never one per row), compute the union of the needed bytes from
 * their extents, and cut that union into one contiguous, byte-balanced share per rank: the
 * bytes it reads.  A strided transfer counts as one range when the job's transfers with the
 * same row pattern (file, row stride, rows) cover every byte between its rows: a band, as
 * when ranks split a tensor's columns.  Only a job that leaves holes between a chunk's rows
 * lists its rows, to keep reading exactly the needed bytes.  So planning grows with the
 * transfers (tensors x ranks x chunks), not with rows; rows are walked while bytes move
 * (gpiece_rows, exchange.c). */
#include "load/load_i.h"
#include "util/error.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

void gpiece_extent(gpiece *g) {
    g->lo = g->off;
    g->hi = g->off + g->len;
    for (uint32_t d = 0; d < g->ndim; d++) {
        if (!g->count[d]) {
            g->hi = g->lo;
            return;
        }
        g->hi += (uint64_t)(g->count[d] - 1) * (uint64_t)g->sstride[d];
    }
}

void gpiece_rows(const gpiece *q, uint64_t a, uint64_t b, row_fn fn, void *ctx) {
    if (!q->len || a >= b || q->hi <= a || q->lo >= b || q->hi <= q->lo) return;
    int n = (int)q->ndim;
    if (n == 0) {
        uint64_t lo = a > q->off ? a : q->off, e = q->off + q->len, hi = b < e ? b : e;
        fn(ctx, q, lo, hi - lo, q->dst + (lo - q->off));
        return;
    }
    /* the rows of outer index i0 lie in [off + i0 * s0, off + i0 * s0 + inner): only the
     * i0 whose block meets [a, b) are walked */
    uint64_t inner = q->len, s0 = (uint64_t)q->sstride[0];
    for (int d = 1; d < n; d++)
        inner += (uint64_t)(q->count[d] - 1) * (uint64_t)q->sstride[d];
    int64_t i0_lo = 0, i0_hi = q->count[0];
    if (s0) {
        if (a >= q->off + inner) i0_lo = (int64_t)((a - q->off - inner) / s0) + 1;
        uint64_t lim = b > q->off ? (b - q->off + s0 - 1) / s0 : 0;
        if (lim < (uint64_t)i0_hi) i0_hi = (int64_t)lim;
    }
    if (i0_lo >= i0_hi) return;
    int64_t idx[GPIECE_DIMS] = {0};
    idx[0] = i0_lo;
    for (;;) {
        uint64_t s = q->off, t = q->dst;
        for (int d = 0; d < n; d++) {
            s += (uint64_t)(idx[d] * q->sstride[d]);
            t += (uint64_t)(idx[d] * q->dstride[d]);
        }
        uint64_t lo = s > a ? s : a, e = s + q->len, hi = e < b ? e : b;
        if (lo < hi) fn(ctx, q, lo, hi - lo, t + (lo - s));
        int d = n - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < (d ? q->count[d] : i0_hi)) break;
            idx[d] = 0;
        }
        if (d < 0) return;
    }
}

static int by_owner_file_off(const void *a, const void *b) {
    const gpiece *x = a, *y = b;
    if (x->owner != y->owner) return x->owner < y->owner ? -1 : 1;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
    if (x->hi != y->hi) return x->hi < y->hi ? -1 : 1;
    return x->dst < y->dst ? -1 : x->dst > y->dst;
}

/* Whether pieces [a, b) (one owner's) are in by_owner_file_off order already. */
static bool in_order(const gpiece *g, size_t a, size_t b) {
    for (size_t i = a + 1; i < b; i++)
        if (by_owner_file_off(&g[i - 1], &g[i]) > 0) return false;
    return true;
}

/* A range of needed bytes the union is computed from: a contiguous piece's run (`piece` its
 * index: it may be read in place), a band, or a listed row (piece SIZE_MAX). */
typedef struct citem {
    int32_t file;
    uint64_t off, len;
    size_t piece;
} citem;

/* A citem's start or end, for the coverage sweep. */
typedef struct ev {
    int32_t file;
    uint64_t pos;
    int kind; /* 0 end, 1 start: ends first at equal positions */
    size_t item;
} ev;
static int by_event(const void *a, const void *b) {
    const ev *x = a, *y = b;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    if (x->pos != y->pos) return x->pos < y->pos ? -1 : 1;
    return x->kind - y->kind;
}

/* The coverage sweep over events in (file, position) order: between two positions, the
 * ranges covering the bytes are known by their number and the sum of their indices (which
 * names the range when there is one). */
typedef struct sweep {
    load_plan *p;
    const citem *items;
    uint32_t rank;
    uint64_t direct_min;
    uint64_t count, idsum;
    ev prev;
    bool started;
    frange *u; /* the shared union, in order (room for every segment) */
    size_t nu, dcap;
} sweep;

static ckpt_status sweep_step(sweep *w, const ev *e) {
    load_plan *p = w->p;
    if (w->started && w->count && e->file == w->prev.file && e->pos > w->prev.pos) {
        frange seg = {e->file, w->prev.pos, e->pos - w->prev.pos};
        p->union_bytes += seg.len;
        const citem *only = w->count == 1 ? &w->items[w->idsum] : NULL;
        if (only && only->piece != SIZE_MAX && seg.len >= w->direct_min) {
            if (p->pieces[only->piece].owner == w->rank) {
                if (p->ndirect == w->dcap) {
                    size_t cap = 2 * w->dcap;
                    frange *m1 = realloc(p->direct, cap * sizeof *m1);
                    if (m1) p->direct = m1;
                    size_t *m2 = m1 ? realloc(p->direct_piece, cap * sizeof *m2) : NULL;
                    if (m2) p->direct_piece = m2;
                    if (!m1 || !m2) return CKPT_E_NOMEM;
                    w->dcap = cap;
                }
                p->direct[p->ndirect] = seg;
                p->direct_piece[p->ndirect++] = only->piece;
                p->direct_bytes += seg.len;
            }
        } else if (w->nu && w->u[w->nu - 1].file == seg.file &&
                   w->u[w->nu - 1].off + w->u[w->nu - 1].len == seg.off) {
            w->u[w->nu - 1].len += seg.len;
        } else {
            w->u[w->nu++] = seg;
        }
    }
    if (e->kind) {
        w->count++;
        w->idsum += e->item;
    } else {
        w->count--;
        w->idsum -= e->item;
    }
    w->prev = *e;
    w->started = true;
    return CKPT_OK;
}

/* The list of citems, grown on demand. */
typedef struct clist {
    citem *v;
    size_t n, cap;
} clist;
static bool cpush(clist *c, int32_t file, uint64_t off, uint64_t len, size_t piece) {
    if (!len) return true;
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        citem *m = realloc(c->v, cap * sizeof *m);
        if (!m) return false;
        c->v = m;
        c->cap = cap;
    }
    c->v[c->n++] = (citem){file, off, len, piece};
    return true;
}

typedef struct row_push {
    clist *c;
    bool ok;
    uint64_t rows;
} row_push;
static void push_row(void *ctx, const gpiece *q, uint64_t lo, uint64_t n, uint64_t dst) {
    (void)dst;
    row_push *x = ctx;
    x->ok = x->ok && cpush(x->c, q->file, lo, n, SIZE_MAX);
    x->rows++;
}

/* A strided piece's band key (a copy, so that qsort needs no context). */
typedef struct bkey {
    int32_t file;
    int64_t stride, rows;
    uint64_t off, len;
    size_t piece;
} bkey;
/* Band order: (file, row stride, rows, offset). */
static int by_band(const void *a, const void *b) {
    const bkey *x = a, *y = b;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    if (x->stride != y->stride) return x->stride < y->stride ? -1 : 1;
    if (x->rows != y->rows) return x->rows < y->rows ? -1 : 1;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->piece < y->piece ? -1 : x->piece > y->piece;
}

/* The ranges the union is computed from: contiguous pieces as they are, strided pieces as
 * bands where the job covers their row pattern whole, else as rows. */
static ckpt_status coverage(load_plan *p, clist *c, bkey **keys_out) {
    size_t ns = 0;
    bkey *st = malloc((p->npieces + 1) * sizeof *st);
    *keys_out = st;
    if (!st) return CKPT_E_NOMEM;
    for (size_t i = 0; i < p->npieces; i++) {
        const gpiece *q = &p->pieces[i];
        if (q->hi <= q->lo) continue;
        if (q->ndim == 0) {
            if (!cpush(c, q->file, q->off, q->len, i)) return CKPT_E_NOMEM;
        } else {
            st[ns++] = (bkey){q->file, q->sstride[0], q->count[0], q->off, q->len, i};
        }
    }
    if (ns) qsort(st, ns, sizeof *st, by_band);
    row_push rp = {c, true, 0};
    for (size_t a = 0; a < ns;) {
        const gpiece *g = &p->pieces[st[a].piece];
        uint64_t S = (uint64_t)g->sstride[0];
        if (g->ndim != 1 || g->len > S) { /* not a band's row pattern: its rows */
            gpiece_rows(g, 0, UINT64_MAX, push_row, &rp);
            a++;
            continue;
        }
        /* the group: same file, stride, rows, offsets within [base, base + S) */
        uint64_t base = g->off, covered = 0, end = base; /* in-row union, swept in order */
        size_t b = a;
        for (; b < ns; b++) {
            const gpiece *h = &p->pieces[st[b].piece];
            if (h->file != g->file || h->ndim != 1 || (uint64_t)h->sstride[0] != S ||
                h->count[0] != g->count[0] || h->off >= base + S || h->off + h->len > base + S)
                break;
            uint64_t lo = h->off > end ? h->off : end, hi = h->off + h->len;
            if (hi > lo) covered += hi - lo;
            if (hi > end) end = hi;
        }
        if (b == a) b = a + 1; /* (cannot happen: g itself belongs) */
        if (covered == S) {
            if (!cpush(c, g->file, base, S * (uint64_t)g->count[0], SIZE_MAX)) return CKPT_E_NOMEM;
        } else {
            for (size_t k = a; k < b; k++)
                gpiece_rows(&p->pieces[st[k].piece], 0, UINT64_MAX, push_row, &rp);
        }
        a = b;
    }
    p->nrows = rp.rows;
    return rp.ok ? CKPT_OK : CKPT_E_NOMEM;
}

static void put(uint8_t *b, const gpiece *g) {
    memcpy(b, &g->file, 4);
    memcpy(b + 4, &g->req, 4);
    memcpy(b + 8, &g->off, 8);
    memcpy(b + 16, &g->len, 8);
    memcpy(b + 24, &g->dst, 8);
    memcpy(b + 32, &g->ndim, 4);
    for (int d = 0; d < GPIECE_DIMS; d++) {
        memcpy(b + 36 + 24 * d, &g->count[d], 8);
        memcpy(b + 44 + 24 * d, &g->sstride[d], 8);
        memcpy(b + 52 + 24 * d, &g->dstride[d], 8);
    }
}
static void get(const uint8_t *b, gpiece *g) {
    memset(g, 0, sizeof *g);
    memcpy(&g->file, b, 4);
    memcpy(&g->req, b + 4, 4);
    memcpy(&g->off, b + 8, 8);
    memcpy(&g->len, b + 16, 8);
    memcpy(&g->dst, b + 24, 8);
    memcpy(&g->ndim, b + 32, 4);
    for (int d = 0; d < GPIECE_DIMS; d++) {
        memcpy(&g->count[d], b + 36 + 24 * d, 8);
        memcpy(&g->sstride[d], b + 44 + 24 * d, 8);
        memcpy(&g->dstride[d], b + 52 + 24 * d, 8);
    }
}

/* Whether a gathered piece is well formed (the same data on every rank: the same decision). */
static bool piece_ok(const gpiece *g) {
    if (g->ndim > GPIECE_DIMS) return false;
    for (uint32_t d = 0; d < g->ndim; d++)
        if (g->count[d] < 0 || g->sstride[d] < 0 || g->dstride[d] < 0) return false;
    return true;
}

void load_plan_release(load_plan *p, int size) {
    free(p->pieces);
    free(p->direct);
    free(p->direct_piece);
    free(p->owner_first);
    if (p->shares)
        for (int k = 0; k < size; k++)
            free(p->shares[k]);
    free(p->shares);
    free(p->nshares);
    free(p->share_bytes);
    memset(p, 0, sizeof *p);
}

ckpt_status load_plan_build(ckpt_load *l, const gpiece *mine, size_t nmine, uint64_t direct_min,
                            load_plan *p, ckpt_error *err) {
    memset(p, 0, sizeof *p);
    int P = l->size;
    /* 1. gather (counts first; the agreement after each call: a failed gather's data are
     * never used) */
    long long n = (long long)nmine, *counts = calloc((size_t)P, sizeof *counts);
    size_t *bytes = calloc((size_t)P, sizeof *bytes), *displs = calloc((size_t)P, sizeof *displs);
    uint8_t *send = malloc(nmine * GPIECE_WIRE + 1);
    ckpt_status s =
        counts && bytes && displs && send ? CKPT_OK : ck_fail(err, CKPT_E_NOMEM, "out of memory");
    if (s == CKPT_OK && nmine > (size_t)(INT32_MAX / GPIECE_WIRE))
        s = ck_fail(err, CKPT_E_LIMIT, "too many read pieces on one rank (%zu)", nmine);
    s = load_agree(l, s, err);
    if (s != CKPT_OK) goto out_free;
    s = load_agree(l, load_allgather(l, &n, sizeof n, counts, "all-gather (piece counts)", err),
                   err);
    if (s != CKPT_OK) goto out_free;
    long long total = 0;
    for (int k = 0; k < P; k++) /* (the same data on every rank: the same decision) */
        if (counts[k] < 0 || counts[k] > INT32_MAX / GPIECE_WIRE) {
            s = ck_fail(err, CKPT_E_TRANSPORT,
                        "transport all-gather (piece counts) delivered %lld from rank %d",
                        counts[k], k);
            goto out_free;
        }
    for (int k = 0; k < P; k++) {
        displs[k] = (size_t)total * GPIECE_WIRE;
        total += counts[k];
        bytes[k] = (size_t)counts[k] * GPIECE_WIRE;
    }
    if (total > INT32_MAX / GPIECE_WIRE) {
        s = ck_fail(err, CKPT_E_LIMIT, "too many read pieces in the job (%lld)", total);
        goto out_free; /* same decision on every rank */
    }
    uint8_t *all = malloc((size_t)total * GPIECE_WIRE + 1);
    p->pieces = malloc(((size_t)total + 1) * sizeof *p->pieces);
    p->owner_first = calloc((size_t)P + 1, sizeof *p->owner_first);
    s = all && p->pieces && p->owner_first ? CKPT_OK : ck_fail(err, CKPT_E_NOMEM, "out of memory");
    s = load_agree(l, s, err);
    if (s != CKPT_OK) {
        free(all);
        goto out_free;
    }
    for (size_t i = 0; i < nmine; i++)
        put(send + i * GPIECE_WIRE, &mine[i]);
    s = load_agree(l,
                   load_allgatherv(l, send, nmine * GPIECE_WIRE, all, bytes, displs,
                                   "all-gather (pieces)", err),
                   err);
    if (s != CKPT_OK) {
        free(all);
        goto out_free;
    }
    size_t at = 0;
    bool well_formed = true;
    for (int k = 0; k < P; k++)
        for (long long i = 0; i < counts[k]; i++, at++) {
            get(all + at * GPIECE_WIRE, &p->pieces[at]);
            well_formed = well_formed && piece_ok(&p->pieces[at]);
            gpiece_extent(&p->pieces[at]);
            p->pieces[at].owner = (uint32_t)k;
        }
    free(all);
    p->npieces = at;
    p->memory = (uint64_t)total * (GPIECE_WIRE + sizeof *p->pieces) + nmine * GPIECE_WIRE;
    if (!well_formed) {
        s = ck_fail(err, CKPT_E_TRANSPORT, "transport all-gather (pieces) delivered a bad piece");
        goto out_free; /* same decision on every rank */
    }
    /* the gather put the owners in order; each owner's pieces are sorted unless they came in
     * order (every rank decides alike: the same data) */
    for (size_t k = 0, i = 0; k <= (size_t)P; k++) {
        p->owner_first[k] = i;
        if (k < (size_t)P) i += (size_t)counts[k];
    }
    for (int k = 0; k < P; k++) {
        size_t a = p->owner_first[k], b = p->owner_first[k + 1];
        if (!in_order(p->pieces, a, b))
            qsort(p->pieces + a, b - a, sizeof *p->pieces, by_owner_file_off);
    }

    /* 2. coverage sweep over the ranges (runs, bands, listed rows): bytes needed by exactly
     * one contiguous piece, in long runs, are read by their owner straight into place
     * ("direct"); the rest, the shared union, is split below */
    clist c = {0};
    bkey *keys = NULL;
    s = coverage(p, &c, &keys);
    free(keys);
    p->nranges = c.n;
    sweep w = {
        .p = p, .items = c.v, .rank = (uint32_t)l->rank, .direct_min = direct_min, .dcap = 16};
    w.u = s == CKPT_OK ? malloc((2 * c.n + 1) * sizeof *w.u) : NULL;
    p->direct = malloc(w.dcap * sizeof *p->direct);
    p->direct_piece = malloc(w.dcap * sizeof *p->direct_piece);
    ev *evs = s == CKPT_OK ? malloc((2 * c.n + 1) * sizeof *evs) : NULL;
    p->memory += (uint64_t)c.cap * sizeof *c.v +
                 (uint64_t)(2 * c.n + 1) * (sizeof *w.u + sizeof *evs) +
                 (uint64_t)(p->npieces + 1) * sizeof(bkey);
    if (s != CKPT_OK || !w.u || !p->direct || !p->direct_piece || !evs) {
        s = CKPT_E_NOMEM;
    } else {
        size_t ne = 0;
        for (size_t i = 0; i < c.n; i++) {
            evs[ne++] = (ev){c.v[i].file, c.v[i].off, 1, i};
            evs[ne++] = (ev){c.v[i].file, c.v[i].off + c.v[i].len, 0, i};
        }
        qsort(evs, ne, sizeof *evs, by_event);
        for (size_t i = 0; s == CKPT_OK && i < ne; i++)
            s = sweep_step(&w, &evs[i]);
    }
    free(evs);
    free(c.v);
    frange *u = w.u;
    size_t nu = w.nu;
    if (s != CKPT_OK) {
        free(u);
        s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
        goto agree_out;
    }
    uint64_t shared = 0;
    for (size_t i = 0; i < nu; i++)
        shared += u[i].len;

    /* 3. contiguous shares of about union/P bytes each */
    p->shares = calloc((size_t)P, sizeof *p->shares);
    p->nshares = calloc((size_t)P, sizeof *p->nshares);
    p->share_bytes = calloc((size_t)P, sizeof *p->share_bytes);
    if (!p->shares || !p->nshares || !p->share_bytes) {
        free(u);
        s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
        goto agree_out;
    }
    uint64_t target = (shared + (uint64_t)P - 1) / (uint64_t)P;
    size_t i = 0;
    uint64_t used = 0; /* bytes of u[i] already given out */
    for (int k = 0; k < P && s == CKPT_OK; k++) {
        uint64_t want = k == P - 1 ? UINT64_MAX : target;
        size_t cap = 4;
        p->shares[k] = malloc(cap * sizeof(frange));
        if (!p->shares[k]) {
            s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
            break;
        }
        while (want && i < nu) {
            uint64_t left = u[i].len - used, take = left < want ? left : want;
            if (p->nshares[k] == cap) {
                cap *= 2;
                frange *m = realloc(p->shares[k], cap * sizeof *m);
                if (!m) {
                    s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
                    break;
                }
                p->shares[k] = m;
            }
            p->shares[k][p->nshares[k]++] = (frange){u[i].file, u[i].off + used, take};
            p->share_bytes[k] += take;
            want -= take;
            used += take;
            if (used == u[i].len) {
                i++;
                used = 0;
            }
        }
    }
    free(u);
agree_out:
    s = load_agree(l, s, err);
out_free:
    free(counts);
    free(bytes);
    free(displs);
    free(send);
    if (s != CKPT_OK) load_plan_release(p, P);
    return s;
}
