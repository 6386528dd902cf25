/* read.c — region reads: copying each chunk intersection straight from the shard file into
 * the caller's buffer (one pread per contiguous run), or, for finely strided layouts, through
 * a bounded slab buffer so that tiny runs do not become millions of system calls. */
#include "slice/region.h"
#include "tensor/strided.h"
#include "util/error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DIRECT_RUN_MIN (64u * 1024u)    /* runs this long are read straight into place */
#define SPARSE_RUN_MIN (4u * 1024u)     /* ... and these when a slab would read twice as much */
#define SLAB_BYTES (8u * 1024u * 1024u) /* staging buffer for strided layouts */

/* The whole data file of a chunk as a source (absolute offsets); its fd is looked up once per
 * box, not per run. */
static ckpt_status file_source(ckpt_reader *r, const ck_chunk *c, ck_source *src, ckpt_error *err) {
    int fd = ck_files_fd(r, (uint32_t)c->loc.file_id, err);
    if (fd < 0) return err ? err->code : CKPT_E_IO;
    *src = (ck_source){.fd = fd,
                       .len = UINT64_MAX / 2,
                       .name = r->files[c->loc.file_id].name,
                       .count = &r->io_data};
    return CKPT_OK;
}

static size_t swap_unit_of(const slice_box *b, ckpt_dtype dt) {
    if (!b->c->res->big_endian || b->itemsize == 1) return 0;
    return (dt == CKPT_DTYPE_COMPLEX64 || dt == CKPT_DTYPE_COMPLEX128) ? b->itemsize / 2
                                                                       : b->itemsize;
}

/* Path A: one pread per run (after merging contiguous dims). */
static ckpt_status read_runs(slice_reader *x, const slice_box *b, const ck_source *src, int n,
                             const int64_t *ds, const int64_t *ss, const int64_t *cnt, int64_t run,
                             ckpt_error *err) {
    int64_t idx[CKPT_MAX_NDIM] = {0};
    for (;;) {
        uint64_t soff = b->src0, doff = b->dst0;
        for (int d = 0; d < n; d++) {
            soff += (uint64_t)(idx[d] * ss[d]);
            doff += (uint64_t)(idx[d] * ds[d]);
        }
        CK_TRY(ck_source_read(src, soff, x->dst + doff, (uint64_t)run, err));
        int d = n - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < cnt[d]) break;
            idx[d] = 0;
        }
        if (d < 0) return CKPT_OK;
    }
}

/* Path B: slabs along the dim with the largest source stride, each read in one pread. */
static ckpt_status read_slabs(slice_reader *x, const slice_box *b, const ck_source *src,
                              ckpt_error *err) {
    int nd = b->ndim, big = -1;
    for (int d = 0; d < nd; d++)
        if (b->count[d] > 1 && (big < 0 || b->src_stride[d] > b->src_stride[big])) big = d;
    int64_t per = big >= 0 && b->src_stride[big] > 0 ? (int64_t)SLAB_BYTES / b->src_stride[big] : 1;
    if (per < 1) per = 1;
    int64_t total = big >= 0 ? b->count[big] : 1;
    int64_t cnt[CKPT_MAX_NDIM];
    memcpy(cnt, b->count, sizeof(int64_t) * (size_t)nd);
    for (int64_t at = 0; at < total; at += per) {
        if (big >= 0) cnt[big] = total - at < per ? total - at : per;
        uint64_t span = b->itemsize;
        for (int d = 0; d < nd; d++)
            span += (uint64_t)((cnt[d] - 1) * b->src_stride[d]);
        if (span > x->slab_cap) {
            uint8_t *n = realloc(x->slab, span);
            if (!n)
                return ck_fail(err, CKPT_E_NOMEM, "out of memory for a %llu-byte slab",
                               (unsigned long long)span);
            x->slab = n;
            x->slab_cap = span;
        }
        uint64_t soff = b->src0 + (big >= 0 ? (uint64_t)(at * b->src_stride[big]) : 0);
        uint64_t doff = b->dst0 + (big >= 0 ? (uint64_t)(at * b->dst_stride[big]) : 0);
        CK_TRY(ck_source_read(src, soff, x->slab, span, err));
        ck_strided_copy(x->dst + doff, b->dst_stride, x->slab, b->src_stride, cnt, nd, b->itemsize);
    }
    return CKPT_OK;
}

ckpt_status slice_read_box(void *ctx, const slice_box *b, ckpt_error *err) {
    slice_reader *x = ctx;
    const ck_chunk *c = b->c;
    if (c->res->kind == CHUNK_IN_MEMORY) { /* decoded bytes: pinned while copied */
        const ck_source *dec;
        CK_TRY(ck_chunk_pin(x->r, x->e, (ck_chunk *)c, &dec, err));
        ck_strided_copy(x->dst + b->dst0, b->dst_stride, dec->mem + b->src0, b->src_stride,
                        b->count, b->ndim, b->itemsize);
        ck_chunk_unpin(x->r, (ck_chunk *)c);
    } else {
        ck_source src;
        CK_TRY(file_source(x->r, c, &src, err));
        int64_t ds[CKPT_MAX_NDIM], ss[CKPT_MAX_NDIM], cnt[CKPT_MAX_NDIM], run;
        memcpy(ds, b->dst_stride, sizeof(int64_t) * (size_t)b->ndim);
        memcpy(ss, b->src_stride, sizeof(int64_t) * (size_t)b->ndim);
        memcpy(cnt, b->count, sizeof(int64_t) * (size_t)b->ndim);
        int n = ck_merge_dims(ds, ss, cnt, b->ndim, b->itemsize, &run);
        /* runs in ascending file order with big gaps are read one by one, as are long runs,
         * and page-sized runs that make up less than half of their span (a column slice of a
         * row-major chunk: a slab would read the other columns too) */
        bool ascending = true;
        for (int d = 0; d < n; d++)
            if (ss[d] < (d + 1 < n ? ss[d + 1] * cnt[d + 1] : run)) ascending = false;
        int64_t gap = n ? ss[n - 1] - run : 0;
        if (n == 0 || run >= (int64_t)DIRECT_RUN_MIN ||
            (ascending && gap >= (int64_t)DIRECT_RUN_MIN) ||
            (ascending && run >= (int64_t)SPARSE_RUN_MIN && gap >= run))
            CK_TRY(read_runs(x, b, &src, n, ds, ss, cnt, run, err));
        else
            CK_TRY(read_slabs(x, b, &src, err));
    }
    size_t unit = swap_unit_of(b, x->e->dtype);
    if (unit)
        ck_strided_bswap(x->dst + b->dst0, b->dst_stride, b->count, b->ndim, b->itemsize, unit);
    return CKPT_OK;
}

static uint64_t region_size(const ckpt_entry *e, const int64_t *count) {
    uint64_t n = ckpt_dtype_itemsize(e->dtype);
    for (int d = 0; d < e->ndim; d++)
        n *= (uint64_t)(count ? count[d] : e->shape[d]);
    return n;
}

ckpt_status ckpt_read_region(ckpt_reader *r, const ckpt_entry *e, const int64_t *start,
                             const int64_t *count, void *dst, size_t dst_size, ckpt_error *err) {
    CK_ERR_OR_LOCAL(err);
    if (!r || !e || (!dst && dst_size))
        return ck_fail(err, CKPT_E_INVAL, "ckpt_read_region: NULL argument");
    if (e->kind == CKPT_ENTRY_TENSOR && !e->problem) {
        for (int d = 0; d < e->ndim && count; d++)
            if (count[d] < 0) return ck_fail(err, CKPT_E_RANGE, "'%s': negative count", e->key);
        if (dst_size < region_size(e, count))
            return ck_fail(err, CKPT_E_INVAL, "'%s': buffer of %zu bytes, region needs %llu",
                           e->key, dst_size, (unsigned long long)region_size(e, count));
    }
    slice_reader x = {.r = r, .e = e, .dst = dst};
    ckpt_status s = slice_for_each_box(r, e, start, count, slice_read_box, &x, NULL, err);
    free(x.slab);
    return s;
}

ckpt_status slice_read_region_dst(ckpt_reader *r, const ckpt_entry *e, const int64_t *start,
                                  const int64_t *count, const int64_t *dst_stride, void *dst,
                                  ckpt_error *err) {
    slice_reader x = {.r = r, .e = e, .dst = dst};
    ckpt_status s =
        slice_for_each_box_dst(r, e, start, count, dst_stride, slice_read_box, &x, NULL, err);
    free(x.slab);
    return s;
}

ckpt_status ckpt_read_tensor(ckpt_reader *r, const ckpt_entry *e, void *dst, size_t dst_size,
                             ckpt_error *err) {
    CK_ERR_OR_LOCAL(err);
    return ckpt_read_region(r, e, NULL, NULL, dst, dst_size, err);
}
