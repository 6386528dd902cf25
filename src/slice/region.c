/* region.c — intersecting a region with a tensor's chunk boxes (see region.h). */
#include "slice/region.h"

#include "util/error.h"

#include <string.h>

ckpt_status slice_for_each_box(ckpt_reader *r, const ckpt_entry *e, const int64_t *start,
                               const int64_t *count, slice_box_fn fn, void *ctx,
                               uint64_t *region_bytes, ckpt_error *err) {
    return slice_for_each_box_dst(r, e, start, count, NULL, fn, ctx, region_bytes, err);
}

ckpt_status slice_for_each_box_dst(ckpt_reader *r, const ckpt_entry *e, const int64_t *start,
                                   const int64_t *count, const int64_t *dst_stride, slice_box_fn fn,
                                   void *ctx, uint64_t *region_bytes, ckpt_error *err) {
    if (e->kind != CKPT_ENTRY_TENSOR)
        return ck_fail(err, CKPT_E_INVAL, "'%s' is not a tensor", e->key);
    if (e->problem) return ck_fail(err, CKPT_E_FORMAT, "'%s': %s", e->key, e->problem);
    int nd = e->ndim;
    size_t isz = ckpt_dtype_itemsize(e->dtype);
    int64_t st[CKPT_MAX_NDIM], cn[CKPT_MAX_NDIM], rstride[CKPT_MAX_NDIM];
    uint64_t numel = 1;
    for (int d = 0; d < nd; d++) {
        st[d] = start ? start[d] : 0;
        cn[d] = count ? count[d] : e->shape[d];
        if (st[d] < 0 || cn[d] < 0 || st[d] > e->shape[d] || cn[d] > e->shape[d] - st[d])
            return ck_fail(err, CKPT_E_RANGE,
                           "'%s': region [%lld, %lld) of dim %d is outside the shape %lld", e->key,
                           (long long)st[d], (long long)(st[d] + cn[d]), d, (long long)e->shape[d]);
        numel *= (uint64_t)cn[d];
    }
    int64_t acc = (int64_t)isz;
    for (int d = nd - 1; d >= 0; d--) {
        rstride[d] = dst_stride ? dst_stride[d] : acc;
        acc *= cn[d];
    }
    if (region_bytes) *region_bytes = numel * isz;
    if (numel == 0) return CKPT_OK;

    uint64_t covered = 0;
    for (size_t k = 0; k < e->nchunks; k++) {
        ck_chunk *c = &e->chunks[k];
        if (!c->numel) continue;
        slice_box b;
        b.ndim = nd;
        b.itemsize = isz;
        uint64_t n = 1;
        for (int d = 0; d < nd && n; d++) {
            int64_t lo = st[d] > c->offsets[d] ? st[d] : c->offsets[d];
            int64_t hi_r = st[d] + cn[d], hi_c = c->offsets[d] + c->sizes[d];
            int64_t hi = hi_r < hi_c ? hi_r : hi_c;
            if (hi <= lo)
                n = 0;
            else {
                b.count[d] = hi - lo;
                b.dst_stride[d] = lo - st[d]; /* temporarily: local offsets */
                b.src_stride[d] = lo - c->offsets[d];
                n *= (uint64_t)(hi - lo);
            }
        }
        if (!n) continue;
        CK_TRY(ck_chunk_resolve(r, e, c, err));
        uint64_t src0 = c->res->elem0, dst0 = 0;
        for (int d = 0; d < nd; d++) {
            src0 += (uint64_t)(b.src_stride[d] * c->res->stride[d]) * isz;
            dst0 += (uint64_t)(b.dst_stride[d] * rstride[d]);
            b.src_stride[d] = c->res->stride[d] * (int64_t)isz;
            b.dst_stride[d] = rstride[d];
        }
        b.chunk = (uint32_t)k;
        b.c = c;
        b.src0 = src0;
        b.dst0 = dst0;
        covered += n;
        CK_TRY(fn(ctx, &b, err));
    }
    if (covered != numel)
        return ck_fail(err, CKPT_E_FORMAT,
                       "'%s': stored chunks cover %llu of the %llu elements requested "
                       "(gap or overlap in the chunk layout)",
                       e->key, (unsigned long long)covered, (unsigned long long)numel);
    return CKPT_OK;
}
