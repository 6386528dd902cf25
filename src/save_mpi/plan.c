/* plan.c — who stores each piece of a flush: every rank publishes the identity (kind, flat
 * key, box) of its pending pieces with one MPI_Allgatherv; a piece that a lower rank also
 * holds is recorded as a replica, so each distinct piece is written once, by its lowest
 * holder (torch's dedup_save_to_lowest_rank).  Computed locally on every rank from the same
 * gathered bytes, which are parsed with bounds checks. */
#include "save_mpi/save_mpi_i.h"

#include "util/error.h"
#include "util/htab.h"
#include "util/strbuf.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* identity bytes: u8 kind, key bytes, NUL, u32 ndim, i64 offsets[ndim], i64 sizes[ndim] */
static void identity(ck_strbuf *b, const save_item *it) {
    ck_strbuf_add_le(b, it->kind, 1);
    ck_strbuf_add(b, it->key, strlen(it->key) + 1);
    ck_strbuf_add_le(b, (uint64_t)it->ndim, 4);
    for (int k = it->ndim; k < 3 * it->ndim; k++)
        ck_strbuf_add_le(b, (uint64_t)it->dims[k], 8);
}

typedef struct rec {
    const unsigned char *p;
    size_t n;
} rec;

typedef struct probe {
    const rec *recs;
    const unsigned char *p;
    size_t n;
} probe;

static bool same(const void *ctx, uint64_t v) {
    const probe *q = ctx;
    return q->recs[v].n == q->n && memcmp(q->recs[v].p, q->p, q->n) == 0;
}

ckpt_status smpi_plan_writers(ckpt_save_mpi *s, bool *writer, ckpt_error *err) {
    /* this rank's records: u32 length + identity bytes each */
    ck_strbuf b = CK_STRBUF_INIT, one = CK_STRBUF_INIT;
    for (size_t i = 0; i < s->npending; i++) {
        ck_strbuf_reset(&one);
        identity(&one, &s->pending[i].id);
        ck_strbuf_add_le(&b, one.len, 4);
        ck_strbuf_add(&b, one.buf, one.len);
    }
    ckpt_status st = ck_strbuf_status(&one, "replica plan", err);
    if (st == CKPT_OK) st = ck_strbuf_status(&b, "replica plan", err);
    uint64_t mine = st == CKPT_OK ? b.len : UINT64_MAX;
    uint64_t *lens = calloc((size_t)s->size, sizeof *lens);
    int *counts = calloc((size_t)s->size, sizeof *counts);
    int *displs = calloc((size_t)s->size, sizeof *displs);
    int ok = lens && counts && displs && st == CKPT_OK, allok = 0;
    MPI_Allreduce(&ok, &allok, 1, MPI_INT, MPI_MIN, s->comm);
    unsigned char *all = NULL;
    rec *recs = NULL;
    if (!allok) {
        if (st == CKPT_OK) st = ck_fail(err, CKPT_E_NOMEM, "replica plan: out of memory");
        goto out;
    }
    MPI_Allgather(&mine, 1, MPI_UINT64_T, lens, 1, MPI_UINT64_T, s->comm);
    uint64_t total = 0;
    for (int r = 0; r < s->size; r++) {
        if (lens[r] > (uint64_t)INT_MAX - total) { /* same verdict on every rank */
            st = ck_fail(err, CKPT_E_LIMIT, "replica plan: over 2 GiB of piece descriptions");
            goto out;
        }
        displs[r] = (int)total;
        counts[r] = (int)lens[r];
        total += lens[r];
    }
    all = malloc(total ? total : 1);
    ok = all != NULL;
    MPI_Allreduce(&ok, &allok, 1, MPI_INT, MPI_MIN, s->comm);
    if (!allok) {
        st = ck_fail(err, CKPT_E_NOMEM, "replica plan: out of memory");
        goto out;
    }
    MPI_Allgatherv(b.buf ? b.buf : "", (int)b.len, MPI_BYTE, all, counts, displs, MPI_BYTE,
                   s->comm);
    /* index the records of the lower ranks */
    size_t lower = (size_t)displs[s->rank], nrec = 0, cap = 0;
    ck_htab h = {0};
    if (!ck_htab_init(&h, 64)) {
        st = ck_fail(err, CKPT_E_NOMEM, "replica plan: out of memory");
        goto out;
    }
    for (size_t pos = 0; pos < lower && st == CKPT_OK;) {
        if (lower - pos < 4) {
            st = ck_fail(err, CKPT_E_FORMAT, "replica plan: record at offset %zu truncated", pos);
            break;
        }
        size_t n = (size_t)all[pos] | (size_t)all[pos + 1] << 8 | (size_t)all[pos + 2] << 16 |
                   (size_t)all[pos + 3] << 24;
        if (n > lower - pos - 4) {
            st = ck_fail(err, CKPT_E_FORMAT,
                         "replica plan: record at offset %zu: length %zu beyond the data", pos, n);
            break;
        }
        if (nrec == cap) {
            size_t nc = cap ? 2 * cap : 64;
            rec *t = realloc(recs, nc * sizeof *t);
            if (!t) {
                st = ck_fail(err, CKPT_E_NOMEM, "replica plan: out of memory");
                break;
            }
            recs = t, cap = nc;
        }
        recs[nrec] = (rec){all + pos + 4, n};
        probe q = {recs, recs[nrec].p, n};
        uint64_t found;
        if (!ck_htab_find(&h, ck_hash_bytes(q.p, n, 0), same, &q, &found) &&
            !ck_htab_insert(&h, ck_hash_bytes(q.p, n, 0), nrec))
            st = ck_fail(err, CKPT_E_NOMEM, "replica plan: out of memory");
        nrec++;
        pos += 4 + n;
    }
    /* this rank's pieces, in its own records */
    for (size_t i = 0, pos = lower; st == CKPT_OK && i < s->npending; i++) {
        size_t n = (size_t)all[pos] | (size_t)all[pos + 1] << 8 | (size_t)all[pos + 2] << 16 |
                   (size_t)all[pos + 3] << 24;
        probe q = {recs, all + pos + 4, n};
        uint64_t found;
        writer[i] = !ck_htab_find(&h, ck_hash_bytes(q.p, n, 0), same, &q, &found);
        pos += 4 + n;
    }
    ck_htab_release(&h);
out:
    free(recs);
    free(all);
    free(lens);
    free(counts);
    free(displs);
    ck_strbuf_release(&b);
    ck_strbuf_release(&one);
    return st;
}
