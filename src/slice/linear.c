/* linear.c — a window of a C-order box's bytes as sub-boxes (linear.h). */
#include "slice/linear.h"

#include "util/error.h"

typedef struct lin {
    int ndim;
    const int64_t *origin;
    const int64_t *extent;
    size_t itemsize;
    const slice_linear_ops *ops;
    void *ctx;
    int64_t start[CKPT_MAX_NDIM];
    int64_t count[CKPT_MAX_NDIM];
    int64_t ones[CKPT_MAX_NDIM];
} lin;

static ckpt_status emit(lin *l, uint64_t dst, ckpt_error *err) {
    return l->ops->box(l->ctx, l->ndim ? l->start : NULL, l->ndim ? l->count : NULL, dst, err);
}

/* Elements [a, b) (a < b) of the sub-box whose dims < d are fixed in l->start/count. */
static ckpt_status range(lin *l, int d, uint64_t a, uint64_t b, uint64_t dst, ckpt_error *err) {
    if (d == l->ndim) return emit(l, dst, err);
    uint64_t inner = 1;
    for (int k = d + 1; k < l->ndim; k++)
        inner *= (uint64_t)l->extent[k];
    uint64_t ra = a / inner, rb = b / inner;
    if (ra == (b - 1) / inner) { /* inside one row of dim d */
        l->start[d] = l->origin[d] + (int64_t)ra;
        l->count[d] = 1;
        return range(l, d + 1, a - ra * inner, b - ra * inner, dst, err);
    }
    if (a % inner) { /* the end of row ra */
        l->start[d] = l->origin[d] + (int64_t)ra;
        l->count[d] = 1;
        CK_TRY(range(l, d + 1, a % inner, inner, dst, err));
        dst += (inner - a % inner) * l->itemsize;
        ra++;
    }
    if (rb > ra) { /* whole rows */
        l->start[d] = l->origin[d] + (int64_t)ra;
        l->count[d] = (int64_t)(rb - ra);
        for (int k = d + 1; k < l->ndim; k++) {
            l->start[k] = l->origin[k];
            l->count[k] = l->extent[k];
        }
        CK_TRY(emit(l, dst, err));
        dst += (rb - ra) * inner * l->itemsize;
    }
    if (b % inner) { /* the start of row rb */
        l->start[d] = l->origin[d] + (int64_t)rb;
        l->count[d] = 1;
        CK_TRY(range(l, d + 1, 0, b % inner, dst, err));
    }
    return CKPT_OK;
}

/* Bytes [skip, skip + n) of element i (linear index in the box) to dst. */
static ckpt_status part(lin *l, uint64_t i, size_t skip, size_t n, uint64_t dst, ckpt_error *err) {
    for (int d = l->ndim - 1; d >= 0; d--) {
        uint64_t ext = (uint64_t)l->extent[d];
        l->start[d] = l->origin[d] + (int64_t)(i % ext);
        l->ones[d] = 1;
        i /= ext;
    }
    return l->ops->part(l->ctx, l->ndim ? l->start : NULL, l->ndim ? l->ones : NULL, skip, n, dst,
                        err);
}

ckpt_status slice_linear(int ndim, const int64_t *origin, const int64_t *extent, size_t itemsize,
                         uint64_t off, uint64_t len, const slice_linear_ops *ops, void *ctx,
                         ckpt_error *err) {
    if (!len) return CKPT_OK;
    static const int64_t zeros[CKPT_MAX_NDIM];
    lin l = {.ndim = ndim,
             .origin = origin ? origin : zeros,
             .extent = extent,
             .itemsize = itemsize,
             .ops = ops,
             .ctx = ctx};
    uint64_t is = itemsize, dst = 0;
    uint64_t head = off % is;
    if (head) { /* a partial first element */
        uint64_t n = is - head < len ? is - head : len;
        CK_TRY(part(&l, off / is, (size_t)head, (size_t)n, dst, err));
        off += n;
        len -= n;
        dst += n;
    }
    uint64_t tail = len % is, whole = len - tail;
    if (whole) CK_TRY(range(&l, 0, off / is, (off + whole) / is, dst, err));
    if (tail) /* a partial last element */
        CK_TRY(part(&l, (off + whole) / is, 0, (size_t)tail, dst + whole, err));
    return CKPT_OK;
}
