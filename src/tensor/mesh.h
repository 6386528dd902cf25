/* mesh.h — a layout's local shard as a product of runs, for the collective loader: along each
 * dim the shard holds its global indices as a few runs of consecutive ones (one run per
 * piece of a _StridedShard), so the shard is the product of those runs: one box per choice of
 * a run on every dim, each sitting in the local tensor (C order) at the local positions where
 * its runs begin, with the local tensor's strides.  There are at most as many run boxes as
 * ckpt_layout_shard_num_boxes gives (usually far fewer: `4x2:S1s2,R` on a [4096, 4096] weight
 * is 2 run boxes, 8192 boxes), and their number never depends on the tensor's rows. */
#ifndef CK_TENSOR_MESH_H
#define CK_TENSOR_MESH_H

#include "ckpt.h"

/* How many run boxes the shard has (>= 1; 1 for an empty shard: its one empty box). */
uint64_t slice_shard_num_run_boxes(const ckpt_layout_shard *s);
/* Run box i (< slice_shard_num_run_boxes, C order over the dims' runs): its global start and
 * count per dim, and `local` (may be NULL) its first local position per dim. */
void slice_shard_run_box(const ckpt_layout_shard *s, uint64_t i, int64_t *start, int64_t *count,
                         int64_t *local);

#endif
