/* strided.h — N-d strided memory copies and byte swapping: the inner loops of region reads.
 * Strides are in bytes and non-negative; dimensions whose strides are contiguous in both
 * source and destination are merged so the innermost copy is one memcpy per run. */
#ifndef CK_TENSOR_STRIDED_H
#define CK_TENSOR_STRIDED_H

#include <stddef.h>
#include <stdint.h>

/* Merges adjacent dims that are contiguous in both layouts and drops size-1 dims, in place.
 * Returns the number of remaining outer dims; *run receives the byte length of the innermost
 * contiguous run (the merged contiguous tail, or one element).  No count may be 0. */
int ck_merge_dims(int64_t *dst_stride, int64_t *src_stride, int64_t *count, int ndim,
                  size_t itemsize, int64_t *run);
/* Copies the box of `count[0..ndim)` elements of `itemsize` bytes. */
void ck_strided_copy(void *dst, const int64_t *dst_stride, const void *src,
                     const int64_t *src_stride, const int64_t *count, int ndim, size_t itemsize);
/* Reverses the bytes of every `swap_unit`-sized part of every element of the box in place
 * (big-endian storages; swap_unit is the itemsize, or half of it for complex dtypes). */
void ck_strided_bswap(void *buf, const int64_t *stride, const int64_t *count, int ndim,
                      size_t itemsize, size_t swap_unit);
/* Reverses bytes of `n` consecutive elements. For complex dtypes pass the component size. */
void ck_bswap_elems(void *buf, uint64_t n, size_t elem_size);

#endif
