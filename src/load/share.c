/* share.c — what one rank reads for the whole job (docs/loader.md "Read once: metadata and
 * headers"): the checkpoint's metadata at the open (rank 0 reads the DCP metadata files, the
 * others index the checkpoint from the bytes it broadcasts), and the container headers of the
 * stored chunks before a collective plan (a chunk several ranks need is resolved by one of
 * them; the others adopt where its bytes are without reading its zip records). */
#include "index/image.h"
#include "index/reader_i.h"
#include "load/load_i.h"
#include "util/error.h"
#include "util/iotap.h"

#include <stdlib.h>
#include <string.h>

/* The broadcast of the metadata goes in pieces of at most this many bytes (MPI counts are
 * ints), each agreed on before the next. */
#define LOAD_BCAST_PIECE ((size_t)256 << 20)
/* Sharing the chunks' headers is skipped when the job's lists of needed chunks (8 bytes per
 * chunk and rank needing it) would exceed this: each rank then reads its own, as before. */
#define LOAD_SHARE_MAX_BYTES ((uint64_t)64 << 20)

/* What rank 0 broadcasts at the open (hdr[0]): nothing (one rank), a DCP metadata image
 * (index/image.h), or the metadata reads of another format's open (util/iotap.h). */
enum { META_NONE = 0, META_IMAGE = 1, META_TAP = 2 };

ckpt_status load_open_reader(ckpt_load *l, const char *dir, const ckpt_open_options *opts,
                             bool *shared, ckpt_error *err) {
    *shared = false;
    if (l->size == 1) return load_agree(l, ckpt_reader_open(dir, opts, &l->r, err), err);
    uint8_t *blob = NULL;
    size_t len = 0;
    ckpt_reader_stats read = {0};
    uint64_t hdr[2] = {META_NONE, 0}; /* what follows; its length */
    ckpt_status s = CKPT_OK;
    if (l->rank == 0) {
        ckpt_error e = {0};
        s = index_image_read(dir, opts ? opts->limits : NULL, &blob, &len, &read, &e);
        if (s == CKPT_OK) {
            hdr[0] = META_IMAGE;
        } else if (s == CKPT_E_NOTFOUND && !e.message[0]) {
            /* not DCP metadata: rank 0 opens the checkpoint, keeping what its metadata reads
             * returned (a HuggingFace index json and headers, torch.save zip directories and
             * pickles), and the others open it from those bytes */
            ck_io_tap *tap = ck_io_tap_recorder();
            s = tap ? index_reader_open_tapped(dir, opts, tap, &l->r, &e)
                    : ck_fail(&e, CKPT_E_NOMEM, "out of memory");
            if (s == CKPT_OK) s = ck_io_tap_blob(tap, &blob, &len, &e);
            ck_io_tap_free(tap);
            hdr[0] = META_TAP;
        }
        hdr[1] = len;
        if (s != CKPT_OK && err) *err = e;
    }
    s = load_agree(l, s, err); /* rank 0's read error, everywhere */
    if (s == CKPT_OK) {
        s = load_bcast(l, hdr, sizeof hdr, 0, "broadcast (metadata size)", err);
        if (s == CKPT_OK && l->rank != 0 && hdr[0] != META_NONE) {
            len = (size_t)hdr[1];
            blob = hdr[1] <= SIZE_MAX ? malloc(len ? len : 1) : NULL;
            if (!blob)
                s = ck_fail(err, CKPT_E_NOMEM, "out of memory (the metadata: %llu bytes)",
                            (unsigned long long)hdr[1]);
        }
        s = load_agree(l, s, err);
    }
    for (size_t at = 0; s == CKPT_OK && hdr[0] != META_NONE && at < len; at += LOAD_BCAST_PIECE) {
        size_t n = len - at < LOAD_BCAST_PIECE ? len - at : LOAD_BCAST_PIECE;
        s = load_agree(l, load_bcast(l, blob + at, n, 0, "broadcast (metadata)", err), err);
    }
    if (s == CKPT_OK) {
        ckpt_status os = CKPT_OK;
        if (hdr[0] == META_IMAGE) {
            os = index_reader_open_image(dir, opts, blob, len, l->rank == 0 ? &read : NULL, &l->r,
                                         err);
        } else if (hdr[0] == META_TAP && l->rank != 0) { /* (rank 0 has opened it) */
            ck_io_tap *tap = NULL;
            os = ck_io_tap_replayer(blob, len, &tap, err);
            if (os == CKPT_OK) os = index_reader_open_tapped(dir, opts, tap, &l->r, err);
            ck_io_tap_free(tap);
        } else if (hdr[0] == META_NONE) {
            os = ckpt_reader_open(dir, opts, &l->r, err);
        }
        s = load_agree(l, os, err);
    }
    if (s == CKPT_OK && hdr[0] != META_NONE) {
        *shared = hdr[0] == META_IMAGE;
        if (l->rank != 0) l->meta_received = len;
    }
    free(blob);
    return s;
}

/* ------------------------------------------------------------------ chunk headers */

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* (chunk id, rank) pairs, by id then rank */
static int cmp_pair(const void *a, const void *b) {
    const uint64_t *x = a, *y = b;
    return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : (x[1] < y[1] ? -1 : x[1] > y[1]);
}

/* The chunk of global id `id` (first[i]: the id of entry i's chunk 0). */
static bool chunk_of(const ckpt_reader *r, const uint64_t *first, uint64_t id, const ckpt_entry **e,
                     ck_chunk **c) {
    size_t lo = 0, hi = r->nentries; /* the last entry i with first[i] <= id */
    if (id >= first[r->nentries]) return false;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (first[mid] <= id)
            lo = mid;
        else
            hi = mid;
    }
    while (lo + 1 < r->nentries && first[lo + 1] <= id) /* (entries without chunks) */
        lo++;
    if (id - first[lo] >= r->entries[lo].nchunks) return false;
    *e = &r->entries[lo];
    *c = &r->entries[lo].chunks[id - first[lo]];
    return true;
}

/* The unresolved chunks this rank's requests meet whose resolution reads a container header
 * (not raw bytes, not a later box of a Megatron piece: its first box stands for it), as
 * sorted unique ids. */
static ckpt_status my_needs(ckpt_load *l, const uint64_t *first, uint64_t **out, size_t *nout,
                            ckpt_error *err) {
    ckpt_reader *r = l->r;
    uint64_t *v = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < l->nreqs; i++) {
        const lreq *q = &l->reqs[i];
        const ckpt_entry *e = q->e;
        if (e->problem || e->kind != CKPT_ENTRY_TENSOR) continue;
        bool empty = false;
        for (int d = 0; d < e->ndim; d++)
            empty |= q->count[d] == 0;
        for (size_t k = 0; !empty && k < e->nchunks; k++) {
            const ck_chunk *c = &e->chunks[k];
            bool meets = c->numel > 0;
            for (int d = 0; meets && d < e->ndim; d++)
                meets = c->offsets[d] < q->start[d] + q->count[d] &&
                        q->start[d] < c->offsets[d] + c->sizes[d];
            if (!meets) continue;
            size_t f = k;
            while (e->flat && f > 0 && e->flat[f].skip)
                f--;
            const ck_chunk *fc = &e->chunks[f];
            if (atomic_load_explicit(&fc->state, memory_order_acquire) != CHUNK_UNRESOLVED ||
                fc->loc.raw || fc->loc.file_id < 0 || fc->loc.problem)
                continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 256;
                uint64_t *m = realloc(v, cap * sizeof *m);
                if (!m) {
                    free(v);
                    return ck_fail(err, CKPT_E_NOMEM, "out of memory");
                }
                v = m;
            }
            v[n++] = first[e - r->entries] + f;
        }
    }
    if (n) qsort(v, n, sizeof *v, cmp_u64);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        if (!u || v[u - 1] != v[i]) v[u++] = v[i];
    *out = v;
    *nout = u;
    return CKPT_OK;
}

/* One resolution on the wire: id, flags (1 big-endian, 2 contiguous), ndim, elem0, then ndim
 * strides. */
#define REC_HEAD 24

/* All-gathers variable blocks: counts first, then the bytes, each agreed; *all and *displs
 * malloc'ed (displs: size + 1 entries).  When the blocks add up to more than `max` bytes,
 * nothing more is sent and *all is NULL (the same on every rank). */
static ckpt_status gather_blocks(ckpt_load *l, ckpt_status s, const void *mine, uint64_t n,
                                 uint64_t max, uint8_t **all, size_t **displs,
                                 const char *what_counts, const char *what, ckpt_error *err) {
    size_t P = (size_t)l->size;
    *all = NULL;
    *displs = NULL;
    uint64_t *counts = malloc(P * sizeof *counts);
    if (s == CKPT_OK && !counts) s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
    s = load_agree(l, s, err);
    if (s == CKPT_OK)
        s = load_agree(l, load_allgather(l, &n, sizeof n, counts, what_counts, err), err);
    uint64_t total = 0;
    for (size_t k = 0; s == CKPT_OK && k < P; k++)
        total += counts[k];
    size_t *cnt = NULL;
    if (s == CKPT_OK && total <= max) {
        *displs = malloc((P + 1) * sizeof **displs);
        cnt = malloc(P * sizeof *cnt);
        *all = malloc(total ? (size_t)total : 1);
        if (!*displs || !cnt || !*all) s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
        for (size_t k = 0, at = 0; s == CKPT_OK && k <= P; k++) {
            (*displs)[k] = at;
            if (k < P) at += (cnt[k] = (size_t)counts[k]);
        }
        s = load_agree(l, s, err);
        if (s == CKPT_OK)
            s = load_agree(l, load_allgatherv(l, mine, (size_t)n, *all, cnt, *displs, what, err),
                           err);
    }
    free(cnt);
    free(counts);
    if (s != CKPT_OK || total > max) {
        free(*all);
        free(*displs);
        *all = NULL;
        *displs = NULL;
    }
    return s;
}

ckpt_status load_share_chunks(ckpt_load *l, ckpt_error *err) {
    ckpt_reader *r = l->r;
    size_t P = (size_t)l->size;
    if (P == 1) return CKPT_OK;
    uint64_t *first = malloc((r->nentries + 1) * sizeof *first), *need = NULL;
    size_t nneed = 0, *displs = NULL;
    uint8_t *all = NULL, *res = NULL;
    uint64_t *pairs = NULL;
    ckpt_status s = first ? CKPT_OK : ck_fail(err, CKPT_E_NOMEM, "out of memory");
    for (size_t i = 0; s == CKPT_OK && i <= r->nentries; i++)
        first[i] = i ? first[i - 1] + r->entries[i - 1].nchunks : 0;
    if (s == CKPT_OK) s = my_needs(l, first, &need, &nneed, err);
    s = gather_blocks(l, s, need, nneed * sizeof *need, LOAD_SHARE_MAX_BYTES, &all, &displs,
                      "all-gather (chunk need counts)", "all-gather (chunk needs)", err);
    if (s != CKPT_OK || !all) goto out;
    uint64_t total = displs[P] / 8;
    /* who resolves what: among the ranks needing a chunk (two or more), the (id mod their
     * number)-th; a chunk one rank needs is that rank's own business, as before */
    pairs = malloc(2 * (total ? total : 1) * sizeof *pairs);
    size_t rcap = 0, rlen = 0;
    if (!pairs) s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
    for (size_t k = 0, m = 0; s == CKPT_OK && k < P; k++)
        for (size_t j = 0; j < (displs[k + 1] - displs[k]) / 8; j++, m++) {
            memcpy(&pairs[2 * m], all + displs[k] + 8 * j, 8);
            pairs[2 * m + 1] = k;
        }
    if (s == CKPT_OK && total) qsort(pairs, (size_t)total, 2 * sizeof *pairs, cmp_pair);
    for (size_t i = 0; s == CKPT_OK && i < total;) {
        size_t j = i;
        while (j < total && pairs[2 * j] == pairs[2 * i])
            j++;
        uint64_t id = pairs[2 * i];
        const ckpt_entry *e;
        ck_chunk *c;
        if (j - i >= 2 && pairs[2 * (i + id % (j - i)) + 1] == (uint64_t)l->rank &&
            chunk_of(r, first, id, &e, &c)) {
            ckpt_error ignored = {0}; /* a failure is reported by each rank that needs it */
            if (ck_chunk_resolve(r, e, c, &ignored) == CKPT_OK && c->res->kind == CHUNK_IN_FILE) {
                size_t rec = REC_HEAD + (size_t)e->ndim * 8;
                if (rlen + rec > rcap) {
                    size_t cap = rcap ? 2 * rcap : 4096;
                    while (cap < rlen + rec)
                        cap *= 2;
                    uint8_t *m = realloc(res, cap);
                    if (!m) {
                        s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
                        break;
                    }
                    res = m;
                    rcap = cap;
                }
                uint32_t flags = (c->res->big_endian ? 1u : 0u) | (c->res->contiguous ? 2u : 0u),
                         nd = (uint32_t)e->ndim;
                memcpy(res + rlen, &id, 8);
                memcpy(res + rlen + 8, &flags, 4);
                memcpy(res + rlen + 12, &nd, 4);
                memcpy(res + rlen + 16, &c->res->elem0, 8);
                memcpy(res + rlen + REC_HEAD, c->res->stride, (size_t)nd * 8);
                rlen += rec;
            }
        }
        i = j;
    }
    free(all);
    free(displs);
    s = gather_blocks(l, s, res, rlen, SIZE_MAX, &all, &displs, "all-gather (chunk header counts)",
                      "all-gather (chunk headers)", err);
    /* adopt the others' results for the chunks this rank needs */
    for (size_t k = 0; s == CKPT_OK && all && k < P; k++) {
        if (k == (size_t)l->rank) continue;
        for (size_t at = displs[k]; at + REC_HEAD <= displs[k + 1];) {
            uint64_t id, elem0;
            uint32_t flags, nd;
            memcpy(&id, all + at, 8);
            memcpy(&flags, all + at + 8, 4);
            memcpy(&nd, all + at + 12, 4);
            memcpy(&elem0, all + at + 16, 8);
            if (nd > CKPT_MAX_NDIM || displs[k + 1] - at - REC_HEAD < (size_t)nd * 8) break;
            int64_t stride[CKPT_MAX_NDIM];
            memcpy(stride, all + at + REC_HEAD, (size_t)nd * 8);
            at += REC_HEAD + (size_t)nd * 8;
            const ckpt_entry *e;
            ck_chunk *c;
            if (!nneed || !bsearch(&id, need, nneed, sizeof *need, cmp_u64) ||
                !chunk_of(r, first, id, &e, &c) || (uint32_t)e->ndim != nd)
                continue;
            if (index_chunk_adopt(r, e, c, flags & 1, flags & 2, elem0, stride))
                l->stats.chunks_adopted++;
        }
    }
out:
    free(first);
    free(need);
    free(all);
    free(displs);
    free(pairs);
    free(res);
    return s;
}
