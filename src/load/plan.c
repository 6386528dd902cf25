/* plan.c — the job-wide plan, computed identically on every rank: gather every rank's pieces
 * (file ranges and where they go), merge their ranges into the union of needed bytes (sort +
 * sweep: O(P log P) in the number of pieces, never pieces x chunks), and cut that union into
 * one contiguous, byte-balanced share per rank: the bytes it reads.  Ranks usually hand in
 * their pieces in file order already (one request's rows come in order): then nothing is
 * sorted, and the sweep merges the ranks' ordered streams of piece starts and ends without
 * storing them (O(n log R) for n pieces of R ranks). */
#include "load/load_i.h"
#include "util/error.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static int by_owner_file_off(const void *a, const void *b) {
    const gpiece *x = a, *y = b;
    if (x->owner != y->owner) return x->owner < y->owner ? -1 : 1;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->len < y->len ? -1 : x->len > y->len;
}

/* Whether pieces [a, b) (one owner's) are in by_owner_file_off order already. */
static bool in_order(const gpiece *g, size_t a, size_t b) {
    for (size_t i = a + 1; i < b; i++)
        if (by_owner_file_off(&g[i - 1], &g[i]) > 0) return false;
    return true;
}

/* Whether an owner's ordered pieces [a, b) overlap nowhere: then its starts and ends,
 * alternating, are already in (file, position) order (zero-length pieces make no events). */
static bool disjoint(const gpiece *g, size_t a, size_t b) {
    const gpiece *prev = NULL;
    for (size_t i = a; i < b; i++) {
        if (!g[i].len) continue;
        if (prev && prev->file == g[i].file && prev->off + prev->len > g[i].off) return false;
        prev = &g[i];
    }
    return true;
}

/* A piece's start or end, for the coverage sweep. */
typedef struct ev {
    int32_t file;
    uint64_t pos;
    int kind; /* 0 end, 1 start: ends first at equal positions */
    size_t piece;
} ev;
static int by_event(const void *a, const void *b) {
    const ev *x = a, *y = b;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    if (x->pos != y->pos) return x->pos < y->pos ? -1 : 1;
    return x->kind - y->kind;
}

/* One owner's next event in the merge (cur): piece `at` of its range, its start or its end. */
typedef struct stream {
    ev cur;
    size_t at, end;
} stream;

static void stream_load(const gpiece *g, stream *t, int kind) {
    const gpiece *q = &g[t->at];
    t->cur = (ev){q->file, kind ? q->off : q->off + q->len, kind, t->at};
}

/* Moves to the stream's next event; false at its end (zero-length pieces are skipped). */
static bool stream_next(const gpiece *g, stream *t) {
    if (t->cur.kind) {
        stream_load(g, t, 0);
        return true;
    }
    for (t->at++; t->at < t->end && !g[t->at].len; t->at++) {
    }
    if (t->at == t->end) return false;
    stream_load(g, t, 1);
    return true;
}

static void sift_down(stream *h, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l < n && by_event(&h[l].cur, &h[m].cur) < 0) m = l;
        if (l + 1 < n && by_event(&h[l + 1].cur, &h[m].cur) < 0) m = l + 1;
        if (m == i) return;
        stream t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* The coverage sweep over events in (file, position) order: between two positions, the
 * pieces covering the bytes are known by their number and the sum of their indices (which
 * names the piece when there is one). */
typedef struct sweep {
    load_plan *p;
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
        const gpiece *only = w->count == 1 ? &p->pieces[w->idsum] : NULL;
        if (only && seg.len >= w->direct_min) {
            if (only->owner == w->rank) {
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
                p->direct_piece[p->ndirect++] = w->idsum;
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
        w->idsum += e->piece;
    } else {
        w->count--;
        w->idsum -= e->piece;
    }
    w->prev = *e;
    w->started = true;
    return CKPT_OK;
}

/* Sweeps the events of every owner's disjoint, ordered pieces in (file, position) order,
 * merged from the owners' streams with a heap, without storing them.  (Events at one
 * position may come in any order: the sweep only cuts where the position moves.)  h holds
 * `size` slots. */
static ckpt_status merge_events(const load_plan *p, int size, stream *h, sweep *w) {
    size_t n = 0;
    for (int k = 0; k < size; k++) {
        stream t = {.at = p->owner_first[k], .end = p->owner_first[k + 1]};
        while (t.at < t.end && !p->pieces[t.at].len)
            t.at++;
        if (t.at == t.end) continue;
        stream_load(p->pieces, &t, 1);
        h[n++] = t;
    }
    for (size_t i = n; i-- > 0;)
        sift_down(h, n, i);
    while (n) {
        CKPT_TRY(sweep_step(w, &h[0].cur));
        if (!stream_next(p->pieces, &h[0])) h[0] = h[--n];
        if (n > 1) sift_down(h, n, 0);
    }
    return CKPT_OK;
}

static void put(uint8_t *p, const gpiece *g) {
    memcpy(p, &g->file, 4);
    memcpy(p + 4, &g->req, 4);
    memcpy(p + 8, &g->off, 8);
    memcpy(p + 16, &g->len, 8);
    memcpy(p + 24, &g->dst, 8);
}
static void get(const uint8_t *p, gpiece *g) {
    memcpy(&g->file, p, 4);
    memcpy(&g->req, p + 4, 4);
    memcpy(&g->off, p + 8, 8);
    memcpy(&g->len, p + 16, 8);
    memcpy(&g->dst, p + 24, 8);
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
        counts && bytes && displs && send ? CKPT_OK : ckpt_fail(err, CKPT_E_NOMEM, "out of memory");
    if (s == CKPT_OK && nmine > (size_t)(INT32_MAX / GPIECE_WIRE))
        s = ckpt_fail(err, CKPT_E_LIMIT, "too many read pieces on one rank (%zu)", nmine);
    s = load_agree(l, s, err);
    if (s != CKPT_OK) goto out_free;
    s = load_agree(l, load_allgather(l, &n, sizeof n, counts, "all-gather (piece counts)", err),
                   err);
    if (s != CKPT_OK) goto out_free;
    long long total = 0;
    for (int k = 0; k < P; k++) /* (the same data on every rank: the same decision) */
        if (counts[k] < 0 || counts[k] > INT32_MAX / GPIECE_WIRE) {
            s = ckpt_fail(err, CKPT_E_TRANSPORT,
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
        s = ckpt_fail(err, CKPT_E_LIMIT, "too many read pieces in the job (%lld)", total);
        goto out_free; /* same decision on every rank */
    }
    uint8_t *all = malloc((size_t)total * GPIECE_WIRE + 1);
    p->pieces = malloc(((size_t)total + 1) * sizeof *p->pieces);
    p->owner_first = calloc((size_t)P + 1, sizeof *p->owner_first);
    s = all && p->pieces && p->owner_first ? CKPT_OK
                                           : ckpt_fail(err, CKPT_E_NOMEM, "out of memory");
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
    for (int k = 0; k < P; k++)
        for (long long i = 0; i < counts[k]; i++, at++) {
            get(all + at * GPIECE_WIRE, &p->pieces[at]);
            p->pieces[at].owner = (uint32_t)k;
        }
    free(all);
    p->npieces = at;
    /* the gather put the owners in order; each owner's pieces are sorted unless they came in
     * order (every rank decides alike: the same data) */
    bool all_disjoint = true;
    for (size_t k = 0, i = 0; k <= (size_t)P; k++) {
        p->owner_first[k] = i;
        if (k < (size_t)P) i += (size_t)counts[k];
    }
    for (int k = 0; k < P; k++) {
        size_t a = p->owner_first[k], b = p->owner_first[k + 1];
        if (!in_order(p->pieces, a, b))
            qsort(p->pieces + a, b - a, sizeof *p->pieces, by_owner_file_off);
        all_disjoint = all_disjoint && disjoint(p->pieces, a, b);
    }

    /* 2. coverage sweep: bytes needed by exactly one piece, in long runs, are read by their
     * owner straight into place ("direct"); the rest, the shared union, is split below */
    sweep w = {.p = p, .rank = (uint32_t)l->rank, .direct_min = direct_min, .dcap = 16};
    w.u = malloc((2 * p->npieces + 1) * sizeof *w.u);
    p->direct = malloc(w.dcap * sizeof *p->direct);
    p->direct_piece = malloc(w.dcap * sizeof *p->direct_piece);
    stream *h = all_disjoint ? malloc(((size_t)P + 1) * sizeof *h) : NULL;
    ev *evs = all_disjoint ? NULL : malloc((2 * p->npieces + 1) * sizeof *evs);
    if (!w.u || !p->direct || !p->direct_piece || (all_disjoint ? !h : !evs)) {
        s = CKPT_E_NOMEM;
    } else if (all_disjoint) {
        s = merge_events(p, P, h, &w);
    } else {
        size_t ne = 0;
        for (size_t i = 0; i < p->npieces; i++) {
            if (!p->pieces[i].len) continue;
            evs[ne++] = (ev){p->pieces[i].file, p->pieces[i].off, 1, i};
            evs[ne++] = (ev){p->pieces[i].file, p->pieces[i].off + p->pieces[i].len, 0, i};
        }
        qsort(evs, ne, sizeof *evs, by_event);
        for (size_t i = 0; s == CKPT_OK && i < ne; i++)
            s = sweep_step(&w, &evs[i]);
    }
    free(h);
    free(evs);
    frange *u = w.u;
    size_t nu = w.nu;
    if (s != CKPT_OK) {
        free(u);
        s = ckpt_fail(err, CKPT_E_NOMEM, "out of memory");
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
        s = ckpt_fail(err, CKPT_E_NOMEM, "out of memory");
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
            s = ckpt_fail(err, CKPT_E_NOMEM, "out of memory");
            break;
        }
        while (want && i < nu) {
            uint64_t left = u[i].len - used, take = left < want ? left : want;
            if (p->nshares[k] == cap) {
                cap *= 2;
                frange *m = realloc(p->shares[k], cap * sizeof *m);
                if (!m) {
                    s = ckpt_fail(err, CKPT_E_NOMEM, "out of memory");
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
