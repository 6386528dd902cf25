/* linear.h — a window of a C-order box's bytes as sub-boxes.  Bytes [off, off + len) of a box
 * (origin, extent) of a tensor with itemsize bytes per element, laid out in C order, are at
 * most 2·ndim − 1 boxes of whole elements, plus a part of one element at either end.  The
 * mount's entry files (tree/read.c) and the torch.save view's tensor records
 * (save/torchfile.c) serve ranges of tensors this way. */
#ifndef CK_SLICE_LINEAR_H
#define CK_SLICE_LINEAR_H

#include "ckpt.h"

#include <stddef.h>
#include <stdint.h>

typedef struct slice_linear_ops {
    /* The elements count[] at start[] (the tensor's own coordinates; both NULL for a 0-d
     * tensor), in C order, to byte `dst` of the window's destination. */
    ckpt_status (*box)(void *ctx, const int64_t *start, const int64_t *count, uint64_t dst,
                       ckpt_error *err);
    /* Bytes [skip, skip + n) of the one element at start[] to `dst`; count[] is all ones
     * (both NULL for a 0-d tensor), so the element is the box (start, count). */
    ckpt_status (*part)(void *ctx, const int64_t *start, const int64_t *count, size_t skip,
                        size_t n, uint64_t dst, ckpt_error *err);
} slice_linear_ops;

/* Calls ops for bytes [off, off + len) of the box, in order of dst (0 = the window's first
 * byte).  origin NULL: zeros; the caller has checked that the window lies inside the box. */
ckpt_status slice_linear(int ndim, const int64_t *origin, const int64_t *extent, size_t itemsize,
                         uint64_t off, uint64_t len, const slice_linear_ops *ops, void *ctx,
                         ckpt_error *err);

#endif
