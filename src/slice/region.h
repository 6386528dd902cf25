/* region.h — the slicer's core: intersect a region of a tensor with its chunks and describe
 * each intersection as a strided box (source bytes in the chunk's storage, destination bytes
 * in the region's C-order buffer). */
#ifndef CK_SLICE_REGION_H
#define CK_SLICE_REGION_H

#include "index/reader_i.h"

typedef struct slice_box {
    uint32_t chunk; /* index in the entry */
    const ck_chunk *c;
    int ndim;
    size_t itemsize;
    int64_t count[CKPT_MAX_NDIM];      /* elements per dim */
    int64_t src_stride[CKPT_MAX_NDIM]; /* bytes */
    int64_t dst_stride[CKPT_MAX_NDIM]; /* bytes */
    uint64_t src0;                     /* file offset (IN_FILE) or decoded-buffer offset */
    uint64_t dst0;                     /* offset in the region buffer */
} slice_box;

typedef ckpt_status (*slice_box_fn)(void *ctx, const slice_box *box, ckpt_error *err);

/* Validates the region (start/count may be NULL: whole tensor), resolves every chunk that
 * intersects it and calls fn once per non-empty intersection.  *region_bytes receives the
 * region's size.  Fails if the chunks do not cover the region (a gap), since the result would
 * contain unwritten bytes. */
ckpt_status slice_for_each_box(ckpt_reader *r, const ckpt_entry *e, const int64_t *start,
                               const int64_t *count, slice_box_fn fn, void *ctx,
                               uint64_t *region_bytes, ckpt_error *err);
/* The same with the region's destination laid out with `dst_stride` (bytes per dim, positive;
 * NULL: C order of the region): a box of the region that sits inside a larger buffer, as one
 * run-product box of a _StridedShard local shard sits inside the local tensor. */
ckpt_status slice_for_each_box_dst(ckpt_reader *r, const ckpt_entry *e, const int64_t *start,
                                   const int64_t *count, const int64_t *dst_stride, slice_box_fn fn,
                                   void *ctx, uint64_t *region_bytes, ckpt_error *err);

/* Reads one box into its destination: the state of a region read (read.c).  `dst` is the
 * region buffer (box->dst0 is relative to it); `slab` is staging for finely strided chunks,
 * grown on demand and owned by the caller (free() it).  Usable as a slice_box_fn. */
typedef struct slice_reader {
    ckpt_reader *r;
    const ckpt_entry *e;
    uint8_t *dst;
    uint8_t *slab;
    size_t slab_cap;
} slice_reader;
ckpt_status slice_read_box(void *slice_reader_ctx, const slice_box *b, ckpt_error *err);
/* ckpt_read_region into a destination laid out with dst_stride (bytes per dim; NULL: C
 * order): the caller guarantees dst covers every byte those strides address. */
ckpt_status slice_read_region_dst(ckpt_reader *r, const ckpt_entry *e, const int64_t *start,
                                  const int64_t *count, const int64_t *dst_stride, void *dst,
                                  ckpt_error *err);

#endif
