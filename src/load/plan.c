/* plan.c — the job-wide plan, computed identically on every rank: gather every rank's pieces
 * (file ranges and where they go), merge their ranges into the union of needed bytes (sort +
 * sweep: O(P log P) in the number of pieces, never pieces x chunks), and cut that union into
 * one contiguous, byte-balanced share per rank: the bytes it reads. */
#include "load/load_i.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

static int by_owner_file_off(const void *a, const void *b) {
    const gpiece *x = a, *y = b;
    if (x->owner != y->owner) return x->owner < y->owner ? -1 : 1;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->len < y->len ? -1 : x->len > y->len;
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
    /* 1. gather (counts first; bytes must fit MPI's int counts) */
    long long n = (long long)nmine, *counts = calloc((size_t)P, sizeof *counts);
    int *bytes = calloc((size_t)P, sizeof *bytes), *displs = calloc((size_t)P, sizeof *displs);
    uint8_t *send = malloc(nmine * GPIECE_WIRE + 1);
    ckpt_status s =
        counts && bytes && displs && send ? CKPT_OK : ckpt_fail(err, CKPT_E_NOMEM, "out of memory");
    if (s == CKPT_OK && nmine > (size_t)(INT32_MAX / GPIECE_WIRE))
        s = ckpt_fail(err, CKPT_E_LIMIT, "too many read pieces on one rank (%zu)", nmine);
    s = load_agree(l, s, err);
    if (s != CKPT_OK) goto out_free;
    MPI_Allgather(&n, 1, MPI_LONG_LONG, counts, 1, MPI_LONG_LONG, l->comm);
    long long total = 0;
    for (int k = 0; k < P; k++) {
        displs[k] = (int)(total * GPIECE_WIRE);
        total += counts[k];
        bytes[k] = (int)(counts[k] * GPIECE_WIRE);
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
    MPI_Allgatherv(send, (int)(nmine * GPIECE_WIRE), MPI_BYTE, all, bytes, displs, MPI_BYTE,
                   l->comm);
    size_t at = 0;
    for (int k = 0; k < P; k++)
        for (long long i = 0; i < counts[k]; i++, at++) {
            get(all + at * GPIECE_WIRE, &p->pieces[at]);
            p->pieces[at].owner = (uint32_t)k;
        }
    free(all);
    p->npieces = at;
    qsort(p->pieces, p->npieces, sizeof *p->pieces, by_owner_file_off);
    for (size_t i = 0, k = 0; k <= (size_t)P; k++) {
        while (i < p->npieces && p->pieces[i].owner < k)
            i++;
        p->owner_first[k] = i;
    }

    /* 2. coverage sweep: bytes needed by exactly one piece, in long runs, are read by their
     * owner straight into place ("direct"); the rest, the shared union, is split below */
    size_t ne = 0;
    ev *evs = malloc((2 * p->npieces + 1) * sizeof *evs);
    frange *u = malloc((2 * p->npieces + 1) * sizeof *u);
    size_t nu = 0, dcap = 16;
    p->direct = malloc(dcap * sizeof *p->direct);
    p->direct_piece = malloc(dcap * sizeof *p->direct_piece);
    if (!evs || !u || !p->direct || !p->direct_piece) {
        free(evs);
        free(u);
        s = ckpt_fail(err, CKPT_E_NOMEM, "out of memory");
        goto agree_out;
    }
    for (size_t i = 0; i < p->npieces; i++) {
        if (!p->pieces[i].len) continue;
        evs[ne++] = (ev){p->pieces[i].file, p->pieces[i].off, 1, i};
        evs[ne++] = (ev){p->pieces[i].file, p->pieces[i].off + p->pieces[i].len, 0, i};
    }
    qsort(evs, ne, sizeof *evs, by_event);
    uint64_t count = 0, idsum = 0;
    for (size_t i = 0; i < ne; i++) {
        if (i && count && evs[i].file == evs[i - 1].file && evs[i].pos > evs[i - 1].pos) {
            frange seg = {evs[i].file, evs[i - 1].pos, evs[i].pos - evs[i - 1].pos};
            p->union_bytes += seg.len;
            const gpiece *only = count == 1 ? &p->pieces[idsum] : NULL;
            if (only && seg.len >= direct_min) {
                if (only->owner == (uint32_t)l->rank) {
                    if (p->ndirect == dcap) {
                        dcap *= 2;
                        frange *m1 = realloc(p->direct, dcap * sizeof *m1);
                        size_t *m2 = m1 ? realloc(p->direct_piece, dcap * sizeof *m2) : NULL;
                        if (m1) p->direct = m1;
                        if (m2) p->direct_piece = m2;
                        if (!m1 || !m2) {
                            s = ckpt_fail(err, CKPT_E_NOMEM, "out of memory");
                            break;
                        }
                    }
                    p->direct[p->ndirect] = seg;
                    p->direct_piece[p->ndirect++] = idsum;
                    p->direct_bytes += seg.len;
                }
            } else if (nu && u[nu - 1].file == seg.file &&
                       u[nu - 1].off + u[nu - 1].len == seg.off) {
                u[nu - 1].len += seg.len;
            } else {
                u[nu++] = seg;
            }
        }
        if (evs[i].kind) {
            count++;
            idsum += evs[i].piece;
        } else {
            count--;
            idsum -= evs[i].piece;
        }
    }
    free(evs);
    if (s != CKPT_OK) {
        free(u);
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
