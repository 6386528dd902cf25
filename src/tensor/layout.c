/* layout.c — the box a rank holds under a new layout: DTensor Shard(dim) over N ranks with
 * torch.chunk semantics (chunk = ceil(size / N); rank r holds [r*chunk, min((r+1)*chunk, size)),
 * possibly empty; ranks past the end hold zero rows).  A tensor with dim >= ndim is
 * replicated: every rank holds it whole.  Shared by the mount's `.layout/` view and the
 * collective loader so both agree byte for byte with torch. */
#include "ckpt.h"

#include <string.h>

ckpt_status ckpt_shard_box(int ndim, const int64_t *shape, int dim, uint32_t nranks, uint32_t rank,
                           int64_t *start, int64_t *count) {
    if (ndim < 0 || ndim > CKPT_MAX_NDIM || dim < 0 || nranks == 0 || rank >= nranks ||
        (ndim > 0 && (!shape || !start || !count)))
        return CKPT_E_INVAL;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return CKPT_E_INVAL;
        start[i] = 0;
        count[i] = shape[i];
    }
    if (dim >= ndim) return CKPT_OK; /* replicated */
    int64_t size = shape[dim];
    int64_t chunk = size / (int64_t)nranks + (size % (int64_t)nranks != 0);
    int64_t lo = chunk * (int64_t)rank;
    int64_t hi = lo + chunk;
    if (lo > size) lo = size;
    if (hi > size) hi = size;
    start[dim] = lo;
    count[dim] = hi - lo;
    return CKPT_OK;
}
