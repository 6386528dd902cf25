/* mcore_flat.c — Megatron's "N-D flattened reformulation" (megatron-core 0.8 – 0.15, the
 * distributed optimizer's `flattened_range` states; dcp-format.md §12.3), undone at index time.
 *
 * Such a tensor of global shape [X, Y, Z], sharded in blocks [x, y, z], is stored as
 * [X/x, Y/y, Z/z, x·y·z]: one grid cell per block, each block flattened in C order and its
 * element range split across data-parallel ranks.  Every stored chunk is a piece
 * [1, 1, 1, n] at (i, j, k, s): elements [s, s+n) of block (i, j, k).  `mcore_data[key]
 * ['nd_reformulated_orig_global_shape']` keeps [X, Y, Z].
 *
 * The entry gets the original shape back: each piece becomes the boxes that tile its element
 * range (at most 2·ndim−1, each one contiguous in the piece), placed in the original
 * coordinates, with the piece's storage and the element where the box starts in it
 * (ck_flat_src, used by chunk_resolve.c).  Every front end then reads the tensor Megatron
 * saved, in the shape Megatron loads it, with no change of its own. */
#include "index/mcore_flat.h"

#include "index/builder.h"

#include "util/error.h"

#include <stdlib.h>
#include <string.h>

/* The original shape mcore_data gives one entry (ckpt_entry.mcore), noted per metadata file
 * and applied by mcore_reformulate (the DCP format's finish).  One per entry: a key repeated in one
 * file keeps its last value, as Python's dict does; files that disagree make the entry a problem.
 */
struct ck_mcore_shape {
    const char *file;
    int ndim; /* -1: not a tuple of ints */
    int cap;
    bool disagree; /* another metadata file gave another shape */
    int64_t shape[];
};

static bool same_shape(const ck_mcore_shape *m, const int64_t *shape, int n) {
    return m->ndim == n && (n <= 0 || memcmp(m->shape, shape, (size_t)n * sizeof *shape) == 0);
}

ckpt_status mcore_note(ckpt_reader *r, const char *file, const pk_value *root, ckpt_error *err) {
    const pk_value *md = pk_get(root, "mcore_data");
    if (!md || md->type != PK_DICT) return CKPT_OK; /* None or absent: nothing reformulated */
    const char *fname = NULL;
    for (size_t i = 0; i < md->u.dict.len; i++) {
        const char *key = pk_as_str(md->u.dict.keys[i]);
        const pk_value *orig = pk_get(md->u.dict.vals[i], "nd_reformulated_orig_global_shape");
        if (!key || !orig) continue; /* other per-tensor data: nothing to undo */
        ckpt_entry *e = index_find(r, key);
        if (!e || e->kind != CKPT_ENTRY_TENSOR) continue; /* not in this checkpoint */
        int64_t shape[CKPT_MAX_NDIM];
        size_t n = 0;
        int nd = pk_as_int_seq(orig, shape, CKPT_MAX_NDIM, &n) ? (int)n : -1;
        if (!fname && !(fname = ck_arena_strndup(r->arena, file, strlen(file))))
            return index_nomem(err);
        ck_mcore_shape *m = e->mcore;
        if (m && m->file != fname) { /* noted by an earlier file */
            if (!same_shape(m, shape, nd)) m->disagree = true;
            continue;
        }
        if (!m || m->cap < nd) {
            int cap = nd > 0 ? nd : 0;
            m = ck_arena_alloc(r->arena, sizeof *m + (size_t)cap * sizeof m->shape[0]);
            if (!m) return index_nomem(err);
            m->cap = cap;
            e->mcore = m;
        }
        m->file = fname;
        m->ndim = nd;
        if (nd > 0) memcpy(m->shape, shape, (size_t)nd * sizeof shape[0]);
    }
    return CKPT_OK;
}

/* ---------------------------------------------------------------- element ranges as boxes */

typedef struct box_sink {
    const int64_t *block; /* the grid cell's shape */
    int nd;
    int64_t piece_start; /* first element of the piece in the block */
    /* output: when `chunks` is NULL only counted */
    size_t n;
    ck_chunk *chunks;
    ck_flat_src *flat;
    const ck_chunk *piece;
    const int64_t *cell_origin; /* grid cell index × block, per dim */
    ck_arena *arena;
} box_sink;

static bool emit(box_sink *s, const int64_t *fixed, int d, int64_t a, int64_t b,
                 uint64_t flat_start) {
    if (s->chunks) {
        int64_t *off = ck_arena_alloc(s->arena, 2 * (size_t)s->nd * sizeof *off);
        if (!off) return false;
        int64_t *sz = off + s->nd;
        uint64_t numel = 1;
        for (int k = 0; k < s->nd; k++) {
            int64_t o = k < d ? fixed[k] : k == d ? a : 0;
            sz[k] = k < d ? 1 : k == d ? b - a : s->block[k];
            off[k] = s->cell_origin[k] + o;
            numel *= (uint64_t)sz[k];
        }
        ck_chunk *c = &s->chunks[s->n];
        memset(c, 0, sizeof *c);
        c->offsets = off;
        c->sizes = sz;
        c->numel = numel;
        c->loc = s->piece->loc;
        s->flat[s->n] = (ck_flat_src){.skip = flat_start - (uint64_t)s->piece_start,
                                      .stored_numel = s->piece->numel};
    }
    s->n++;
    return true;
}

/* The boxes tiling elements [lo, hi) of the sub-block below fixed[0..d) (C order), in
 * element order: the rest of a partial slice of dim d, whole slices [a, b), the start of a
 * partial one.  `base` is the block element at the sub-block's start. */
static bool boxes(box_sink *s, int64_t *fixed, int d, int64_t lo, int64_t hi, uint64_t base) {
    if (lo >= hi) return true;
    int64_t inner = 1;
    for (int k = d + 1; k < s->nd; k++)
        inner *= s->block[k];
    int64_t a = (lo + inner - 1) / inner, b = hi / inner;
    if (a > b) { /* inside one slice */
        int64_t i = lo / inner;
        fixed[d] = i;
        return boxes(s, fixed, d + 1, lo - i * inner, hi - i * inner, base + (uint64_t)(i * inner));
    }
    if (lo < a * inner) {
        fixed[d] = a - 1;
        if (!boxes(s, fixed, d + 1, lo - (a - 1) * inner, inner,
                   base + (uint64_t)((a - 1) * inner)))
            return false;
    }
    if (b > a && !emit(s, fixed, d, a, b, base + (uint64_t)(a * inner))) return false;
    if (hi > b * inner) {
        fixed[d] = b;
        return boxes(s, fixed, d + 1, 0, hi - b * inner, base + (uint64_t)(b * inner));
    }
    return true;
}

/* ------------------------------------------------------------------------ one entry */

/* The grid cell's shape from stored [grid..., n] and original shapes, or a problem.  *empty:
 * the stored grid has no cells (and the original shape no elements). */
static const char *block_shape(ck_arena *a, const ckpt_entry *e, const ck_mcore_shape *m,
                               int64_t *block, bool *empty) {
    *empty = false;
    if (m->ndim < 1 || m->ndim + 1 != e->ndim)
        return index_problemf(a,
                              "megatron mcore_data (in %s) gives an original shape of %d "
                              "dimensions for a stored tensor of %d; a flattened tensor "
                              "is stored with one more",
                              m->file, m->ndim, e->ndim);
    uint64_t per_cell = 1;
    for (int d = 0; d < m->ndim; d++) {
        int64_t g = e->shape[d], o = m->shape[d];
        if (g == 0 || o == 0) { /* an empty tensor: no cells to undo */
            *empty = true;
            continue;
        }
        if (o < 0 || o % g != 0)
            return index_problemf(a,
                                  "megatron mcore_data (in %s): original dimension %d (%lld) "
                                  "is not a multiple of the stored grid's (%lld)",
                                  m->file, d, (long long)o, (long long)g);
        block[d] = o / g;
        if (per_cell > (UINT64_C(1) << 62) / (uint64_t)block[d])
            return index_problemf(a, "megatron mcore_data (in %s): original shape too large",
                                  m->file);
        per_cell *= (uint64_t)block[d];
    }
    if (*empty) {
        for (int d = 0; d < m->ndim; d++)
            if (m->shape[d] < 0)
                return index_problemf(a,
                                      "megatron mcore_data (in %s): "
                                      "negative original dimension",
                                      m->file);
        if (e->numel != 0 || index_numel(a, m->shape, m->ndim, &(const char *){NULL}) != 0)
            return index_problemf(a,
                                  "megatron mcore_data (in %s): the stored tensor and the "
                                  "original shape do not agree on being empty",
                                  m->file);
        return NULL;
    }
    if (per_cell != (uint64_t)e->shape[m->ndim])
        return index_problemf(a,
                              "megatron mcore_data (in %s): a grid cell of the original "
                              "shape holds %llu elements, the stored tensor's last "
                              "dimension %lld",
                              m->file, (unsigned long long)per_cell, (long long)e->shape[m->ndim]);
    return NULL;
}

/* A stored chunk must be one piece [1, ..., 1, n] of one grid cell. */
static bool is_piece(const ckpt_entry *e, const ck_chunk *c) {
    for (int d = 0; d + 1 < e->ndim; d++)
        if (c->sizes[d] != 1) return false;
    return true; /* inside the stored shape: checked when the chunk was indexed */
}

typedef struct piece_ref {
    uint64_t cell; /* C-order index of the grid cell */
    int64_t start, len;
    size_t index;
} piece_ref;

static int by_cell_then_start(const void *a, const void *b) {
    const piece_ref *x = a, *y = b;
    if (x->cell != y->cell) return x->cell < y->cell ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* Pieces must not repeat or overlap (a hostile pickle repeats one piece for a few bytes each
 * time; its boxes would not).  NULL, or the problem. */
static const char *pieces_overlap(ck_arena *a, const ckpt_entry *e, int nd, bool *nomem) {
    *nomem = false;
    piece_ref *p = malloc((e->nchunks + 1) * sizeof *p);
    if (!p) {
        *nomem = true;
        return NULL;
    }
    size_t n = 0;
    for (size_t k = 0; k < e->nchunks; k++) {
        const ck_chunk *c = &e->chunks[k];
        if (!c->numel) continue;
        uint64_t cell = 0;
        for (int d = 0; d < nd; d++)
            cell = cell * (uint64_t)e->shape[d] + (uint64_t)c->offsets[d];
        p[n++] = (piece_ref){cell, c->offsets[nd], c->sizes[nd], k};
    }
    qsort(p, n, sizeof *p, by_cell_then_start);
    const char *problem = NULL;
    for (size_t i = 1; i < n && !problem; i++)
        if (p[i].cell == p[i - 1].cell && p[i - 1].start + p[i - 1].len > p[i].start)
            problem = index_problemf(a,
                                     "megatron flattened tensor: stored chunks %zu and %zu "
                                     "overlap",
                                     p[i - 1].index < p[i].index ? p[i - 1].index : p[i].index,
                                     p[i - 1].index < p[i].index ? p[i].index : p[i - 1].index);
    free(p);
    return problem;
}

static ckpt_status reformulate(ckpt_reader *r, ckpt_entry *e, const ck_mcore_shape *m,
                               uint64_t *budget, ckpt_error *err) {
    int64_t block[CKPT_MAX_NDIM], fixed[CKPT_MAX_NDIM], origin[CKPT_MAX_NDIM];
    bool empty = false, oom = false;
    const char *problem = m->disagree
                              ? index_problemf(r->arena, "megatron mcore_data: metadata files "
                                                         "disagree on the original shape")
                              : block_shape(r->arena, e, m, block, &empty);
    int nd = m->ndim;
    for (size_t k = 0; !problem && !empty && k < e->nchunks; k++)
        if (e->chunks[k].numel && !is_piece(e, &e->chunks[k]))
            problem = index_problemf(r->arena,
                                     "megatron flattened tensor: stored chunk %zu is not "
                                     "a flat piece of one grid cell",
                                     k);
    if (!problem && !empty) problem = pieces_overlap(r->arena, e, nd, &oom);
    if (oom) return index_nomem(err);
    if (problem) {
        e->problem = problem;
        return CKPT_OK;
    }
    box_sink s = {.block = block, .nd = nd, .cell_origin = origin, .arena = r->arena};
    for (size_t k = 0; !empty && k < e->nchunks; k++) { /* count */
        const ck_chunk *c = &e->chunks[k];
        if (!c->numel) continue;
        boxes(&s, fixed, 0, c->offsets[nd], c->offsets[nd] + c->sizes[nd], 0);
    }
    size_t total = s.n;
    /* what the boxes take, against what the metadata may make the index hold */
    uint64_t need = (uint64_t)total *
                    (sizeof(ck_chunk) + sizeof(ck_flat_src) + 2 * (uint64_t)nd * sizeof(int64_t));
    if (need > *budget) {
        e->problem = index_problemf(r->arena,
                                    "megatron flattened tensor: its %zu boxes would take "
                                    "%llu bytes, more than the metadata's size allows",
                                    total, (unsigned long long)need);
        return CKPT_OK;
    }
    *budget -= need;
    ck_chunk *chunks = ck_arena_alloc(r->arena, (total + 1) * sizeof *chunks);
    ck_flat_src *flat = ck_arena_alloc(r->arena, (total + 1) * sizeof *flat);
    int64_t *shape = ck_arena_alloc(r->arena, (size_t)nd * sizeof *shape);
    if (!chunks || !flat || !shape) return index_nomem(err);
    s.chunks = chunks;
    s.flat = flat;
    s.n = 0;
    for (size_t k = 0; !empty && k < e->nchunks; k++) {
        const ck_chunk *c = &e->chunks[k];
        if (!c->numel) continue;
        for (int d = 0; d < nd; d++)
            origin[d] = c->offsets[d] * block[d];
        s.piece = c;
        s.piece_start = c->offsets[nd];
        if (!boxes(&s, fixed, 0, c->offsets[nd], c->offsets[nd] + c->sizes[nd], 0))
            return index_nomem(err);
    }
    memcpy(shape, m->shape, (size_t)nd * sizeof *shape);
    e->ndim = nd;
    e->shape = shape; /* same numel: the grid times the cell */
    e->chunks = chunks;
    e->nchunks = total;
    e->flat = flat;
    r->info.num_mcore_flattened++;
    return CKPT_OK;
}

ckpt_status mcore_reformulate(ckpt_reader *r, ckpt_error *err) {
    /* boxes may take up to 8 bytes of index per byte of metadata, and 64 MiB more: a real
     * checkpoint's pieces make at most 2·ndim−1 boxes each (ndim <= 4 or so), while a hostile
     * one could ask for many per byte of pickle */
    uint64_t budget = (64u << 20) + 8 * r->info.metadata_bytes;
    for (size_t i = 0; i < r->nentries; i++) {
        ckpt_entry *e = &r->entries[i];
        const ck_mcore_shape *m = e->mcore;
        if (!m || e->flat || e->problem) continue;
        if (m->ndim < 0) {
            e->problem = index_problemf(r->arena,
                                        "megatron mcore_data (in %s): "
                                        "nd_reformulated_orig_global_shape is not a tuple "
                                        "of ints",
                                        m->file);
            continue;
        }
        CK_TRY(reformulate(r, e, m, &budget, err));
    }
    return CKPT_OK;
}
