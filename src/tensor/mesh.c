/* mesh.c — the local shard a mesh coordinate holds under a layout (ckpt.h "layouts"), with
 * DTensor's semantics (torch/distributed/tensor/_utils.py compute_local_shape_and_global_offset,
 * placement_types.py Shard and _StridedShard):
 *
 *   - placements apply left to right over the mesh dims; each one on tensor dim d splits the
 *     indices the coordinate holds so far along d;
 *   - Shard over N: torch.chunk — chunk = ceil(L / N), coordinate c keeps positions
 *     [min(c*chunk, L), min((c+1)*chunk, L));
 *   - _StridedShard(split_factor k) over N: torch.chunk into k pieces, each piece chunked into
 *     N, and coordinate c keeps its chunk of every piece, in piece order.
 *
 * Along each dim the held global indices are increasing; they are kept as runs of consecutive
 * indices.  The local tensor is the product of the dims' index lists in C order, so with j the
 * last dim held as several runs, its boxes are: each index tuple of dims < j (count 1 each), for
 * each run of dim j, the whole of dims > j.  Boxes are computed from their number. */
#include "tensor/mesh.h"

#include "ckpt.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

#define MESH_MAX_RUNS (1u << 20)

typedef struct run {
    int64_t start; /* global index */
    int64_t count;
} run;

typedef struct runs {
    run *v;
    uint64_t *pos; /* local position where run i begins; pos[n] = the total */
    uint32_t n, cap;
} runs;

struct ckpt_layout_shard {
    int ndim;
    int split;                     /* the last dim held as several runs, -1: none */
    uint64_t numel, nboxes, inner; /* inner: elements of the dims after `split` */
    int64_t local[CKPT_MAX_NDIM], offset[CKPT_MAX_NDIM];
    runs r[CKPT_MAX_NDIM];
};

static int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

/* min(c * chunk, len) without overflow. */
static int64_t chunk_start(int64_t chunk, int64_t c, int64_t len) {
    if (chunk == 0 || c > len / chunk) return len;
    int64_t v = c * chunk;
    return v < len ? v : len;
}

static ckpt_status runs_push(runs *r, int64_t start, int64_t count, ckpt_error *err) {
    if (count <= 0) return CKPT_OK;
    if (r->n && r->v[r->n - 1].start + r->v[r->n - 1].count == start) {
        r->v[r->n - 1].count += count;
        return CKPT_OK;
    }
    if (r->n == MESH_MAX_RUNS)
        return ck_fail(err, CKPT_E_LIMIT, "layout: a dim is held as more than %u runs",
                       MESH_MAX_RUNS);
    if (r->n == r->cap) {
        uint32_t cap = r->cap ? r->cap * 2 : 4;
        run *v = realloc(r->v, cap * sizeof *v);
        if (!v) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
        r->v = v;
        r->cap = cap;
    }
    r->v[r->n++] = (run){start, count};
    return CKPT_OK;
}

static ckpt_status runs_index(runs *r, ckpt_error *err) {
    free(r->pos);
    r->pos = malloc(((size_t)r->n + 1) * sizeof *r->pos);
    if (!r->pos) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    uint64_t p = 0;
    for (uint32_t i = 0; i < r->n; i++) {
        r->pos[i] = p;
        p += (uint64_t)r->v[i].count;
    }
    r->pos[r->n] = p;
    return CKPT_OK;
}

/* The run holding local position `p` (< total). */
static uint32_t runs_find(const runs *r, uint64_t p) {
    uint32_t lo = 0, hi = r->n - 1;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo + 1) / 2;
        if (r->pos[mid] <= p)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Appends local positions [a, b) of `in` to `out`. */
static ckpt_status runs_select(const runs *in, int64_t a, int64_t b, runs *out, ckpt_error *err) {
    if (a >= b) return CKPT_OK;
    for (uint32_t i = runs_find(in, (uint64_t)a); i < in->n && (int64_t)in->pos[i] < b; i++) {
        int64_t lo = (int64_t)in->pos[i], hi = lo + in->v[i].count;
        int64_t s = a > lo ? a : lo, e = b < hi ? b : hi;
        CK_TRY(runs_push(out, in->v[i].start + (s - lo), e - s, err));
    }
    return CKPT_OK;
}

static void runs_free(runs *r) {
    free(r->v);
    free(r->pos);
    memset(r, 0, sizeof *r);
}

/* One placement on a dim: `cur` (indexed) becomes the positions coordinate c keeps. */
static ckpt_status apply(const ckpt_placement *p, uint32_t n, uint32_t c, runs *cur,
                         ckpt_error *err) {
    runs out = {0};
    int64_t len = (int64_t)cur->pos[cur->n];
    ckpt_status s = CKPT_OK;
    if (p->kind == CKPT_PLACEMENT_SHARD) {
        int64_t chunk = ceil_div(len, n), a = chunk_start(chunk, c, len);
        int64_t b = len - a < chunk ? len : a + chunk;
        s = runs_select(cur, a, b, &out, err);
    } else {
        int64_t first = ceil_div(len, p->split_factor);
        for (uint32_t k = 0; s == CKPT_OK && k < p->split_factor; k++) {
            int64_t pa = chunk_start(first, k, len);
            int64_t pb = len - pa < first ? len : pa + first;
            int64_t plen = pb - pa, chunk = ceil_div(plen, n), a = chunk_start(chunk, c, plen);
            int64_t b = plen - a < chunk ? plen : a + chunk;
            s = runs_select(cur, pa + a, pa + b, &out, err);
        }
    }
    if (s == CKPT_OK) s = runs_index(&out, err);
    if (s != CKPT_OK) {
        runs_free(&out);
        return s;
    }
    runs_free(cur);
    *cur = out;
    return CKPT_OK;
}

static ckpt_status check_layout(const ckpt_layout *l, const uint32_t *coord, ckpt_error *err) {
    if (l->mesh_ndim < 1 || l->mesh_ndim > CKPT_LAYOUT_MAX_MESH_NDIM || ckpt_layout_nranks(l) == 0)
        return ck_fail(err, CKPT_E_INVAL, "layout: %d mesh dims or %u ranks out of range",
                       l->mesh_ndim, ckpt_layout_nranks(l));
    for (int i = 0; i < l->mesh_ndim; i++) {
        const ckpt_placement *p = &l->placements[i];
        if (p->kind != CKPT_PLACEMENT_REPLICATE &&
            (p->dim < 0 || p->split_factor < 1 || p->split_factor > CKPT_LAYOUT_MAX_SPLIT_FACTOR ||
             (p->kind != CKPT_PLACEMENT_SHARD && p->kind != CKPT_PLACEMENT_STRIDED_SHARD)))
            return ck_fail(err, CKPT_E_INVAL, "layout: placement %d is invalid", i);
        if (!coord || coord[i] >= l->mesh[i])
            return ck_fail(err, CKPT_E_INVAL, "layout: coordinate %u along mesh dim %d of size %u",
                           coord ? coord[i] : 0, i, l->mesh[i]);
    }
    return CKPT_OK;
}

void ckpt_layout_shard_free(ckpt_layout_shard *s) {
    if (!s) return;
    for (int d = 0; d < s->ndim; d++)
        runs_free(&s->r[d]);
    free(s);
}

ckpt_status ckpt_layout_shard_new(const ckpt_layout *l, int ndim, const int64_t *shape,
                                  const uint32_t *coord, ckpt_layout_shard **out, ckpt_error *err) {
    if (!out) return ck_fail(err, CKPT_E_INVAL, "layout: NULL argument");
    *out = NULL;
    if (!l || ndim < 0 || ndim > CKPT_MAX_NDIM || (ndim > 0 && !shape))
        return ck_fail(err, CKPT_E_INVAL, "layout: invalid tensor shape (%d dims)", ndim);
    CK_TRY(check_layout(l, coord, err));
    uint64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return ck_fail(err, CKPT_E_INVAL, "layout: negative size of dim %d", d);
        if (shape[d] && __builtin_mul_overflow(numel, (uint64_t)shape[d], &numel))
            return ck_fail(err, CKPT_E_LIMIT, "layout: the tensor's element count overflows");
    }
    ckpt_layout_shard *s = calloc(1, sizeof *s);
    if (!s) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    s->ndim = ndim;
    ckpt_status st = CKPT_OK;
    for (int d = 0; d < ndim && st == CKPT_OK; d++) {
        st = runs_push(&s->r[d], 0, shape[d], err);
        if (st == CKPT_OK) st = runs_index(&s->r[d], err);
        bool sharded = false;
        for (int i = 0; i < l->mesh_ndim && st == CKPT_OK; i++) {
            const ckpt_placement *p = &l->placements[i];
            if (p->kind == CKPT_PLACEMENT_REPLICATE || p->dim != d) continue;
            sharded = true;
            st = apply(p, l->mesh[i], coord[i], &s->r[d], err);
        }
        if (st != CKPT_OK) break;
        s->local[d] = (int64_t)s->r[d].pos[s->r[d].n];
        /* torch: the first index held; the dim's size when none is; 0 when not sharded */
        s->offset[d] = !sharded ? 0 : s->local[d] ? s->r[d].v[0].start : shape[d];
    }
    if (st != CKPT_OK) {
        ckpt_layout_shard_free(s);
        return st;
    }
    s->numel = 1;
    s->split = -1;
    for (int d = 0; d < ndim; d++) {
        s->numel *= (uint64_t)s->local[d];
        if (s->r[d].n > 1) s->split = d;
    }
    s->nboxes = 1;
    s->inner = 1;
    if (s->numel && s->split >= 0) {
        for (int d = 0; d < s->split; d++)
            s->nboxes *= (uint64_t)s->local[d];
        s->nboxes *= s->r[s->split].n;
        for (int d = s->split + 1; d < ndim; d++)
            s->inner *= (uint64_t)s->local[d];
    } else {
        s->split = -1;
    }
    *out = s;
    return CKPT_OK;
}

int ckpt_layout_shard_ndim(const ckpt_layout_shard *s) { return s->ndim; }
const int64_t *ckpt_layout_shard_local_shape(const ckpt_layout_shard *s) { return s->local; }
const int64_t *ckpt_layout_shard_global_offset(const ckpt_layout_shard *s) { return s->offset; }
uint64_t ckpt_layout_shard_numel(const ckpt_layout_shard *s) { return s->numel; }
uint64_t ckpt_layout_shard_num_boxes(const ckpt_layout_shard *s) { return s->nboxes; }

void ckpt_layout_shard_box(const ckpt_layout_shard *s, uint64_t i, int64_t *start, int64_t *count,
                           uint64_t *elem_offset) {
    int j = s->split;
    if (j < 0) { /* one box: every dim is one run (or the shard is empty) */
        for (int d = 0; d < s->ndim; d++) {
            start[d] = s->numel ? s->r[d].v[0].start : s->offset[d];
            count[d] = s->local[d];
        }
        if (elem_offset) *elem_offset = 0;
        return;
    }
    const runs *rj = &s->r[j];
    uint64_t k = i % rj->n, outer = i / rj->n, o = outer;
    for (int d = j - 1; d >= 0; d--) {
        uint64_t idx = o % (uint64_t)s->local[d];
        o /= (uint64_t)s->local[d];
        const runs *r = &s->r[d];
        uint32_t ri = runs_find(r, idx);
        start[d] = r->v[ri].start + (int64_t)(idx - r->pos[ri]);
        count[d] = 1;
    }
    start[j] = rj->v[k].start;
    count[j] = rj->v[k].count;
    for (int d = j + 1; d < s->ndim; d++) {
        start[d] = s->r[d].v[0].start;
        count[d] = s->local[d];
    }
    if (elem_offset) *elem_offset = (outer * (uint64_t)s->local[j] + rj->pos[k]) * s->inner;
}

uint64_t ckpt_layout_shard_find_box(const ckpt_layout_shard *s, uint64_t elem) {
    int j = s->split;
    if (j < 0 || elem >= s->numel) return 0;
    const runs *rj = &s->r[j];
    uint64_t group = (uint64_t)s->local[j] * s->inner;
    return elem / group * rj->n + runs_find(rj, elem % group / s->inner);
}

ckpt_status ckpt_layout_boxes(const ckpt_layout *l, int ndim, const int64_t *shape, uint32_t rank,
                              int64_t *starts, int64_t *counts, size_t cap, size_t *nboxes,
                              int64_t *local_shape, int64_t *global_offset, ckpt_error *err) {
    uint32_t coord[CKPT_LAYOUT_MAX_MESH_NDIM];
    if (!l || ckpt_layout_coord(l, rank, coord) != CKPT_OK)
        return ck_fail(err, CKPT_E_INVAL, "layout: rank %u outside the mesh (%u ranks)", rank,
                       l ? ckpt_layout_nranks(l) : 0);
    ckpt_layout_shard *s;
    CK_TRY(ckpt_layout_shard_new(l, ndim, shape, coord, &s, err));
    ckpt_status st = CKPT_OK;
    uint64_t n = s->nboxes;
    if (nboxes) *nboxes = (size_t)n;
    if (local_shape && ndim) memcpy(local_shape, s->local, (size_t)ndim * sizeof *local_shape);
    if (global_offset && ndim)
        memcpy(global_offset, s->offset, (size_t)ndim * sizeof *global_offset);
    if (n > cap) {
        st = ck_fail(err, CKPT_E_LIMIT, "layout: %llu boxes, room for %zu", (unsigned long long)n,
                     cap);
    } else if (ndim) {
        if (!starts || !counts) st = ck_fail(err, CKPT_E_INVAL, "layout: NULL box arrays");
        for (uint64_t i = 0; st == CKPT_OK && i < n; i++)
            ckpt_layout_shard_box(s, i, starts + i * (size_t)ndim, counts + i * (size_t)ndim, NULL);
    }
    ckpt_layout_shard_free(s);
    return st;
}

uint64_t slice_shard_num_run_boxes(const ckpt_layout_shard *s) {
    if (!s->numel) return 1;
    uint64_t n = 1;
    for (int d = 0; d < s->ndim; d++)
        n *= s->r[d].n;
    return n;
}

void slice_shard_run_box(const ckpt_layout_shard *s, uint64_t i, int64_t *start, int64_t *count,
                         int64_t *local) {
    if (!s->numel) { /* the one empty box of ckpt_layout_shard_box */
        ckpt_layout_shard_box(s, 0, start, count, NULL);
        for (int d = 0; local && d < s->ndim; d++)
            local[d] = 0;
        return;
    }
    for (int d = s->ndim - 1; d >= 0; d--) {
        const runs *r = &s->r[d];
        uint32_t k = (uint32_t)(i % r->n);
        i /= r->n;
        start[d] = r->v[k].start;
        count[d] = r->v[k].count;
        if (local) local[d] = (int64_t)r->pos[k];
    }
}

uint64_t ckpt_layout_shard_num_run_boxes(const ckpt_layout_shard *s) {
    return slice_shard_num_run_boxes(s);
}

void ckpt_layout_shard_run_box(const ckpt_layout_shard *s, uint64_t i, int64_t *start,
                               int64_t *count, int64_t *local) {
    slice_shard_run_box(s, i, start, count, local);
}
