/* plan.c — region plans: the list of (file, offset, length, destination) pieces a region is
 * made of, for front ends that move bytes themselves (splice in the mount, reads scheduled
 * across ranks in the collective loader), and their execution. */
#include "slice/region.h"
#include "tensor/strided.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

struct ckpt_plan {
    ckpt_piece *pieces;
    size_t len;
    size_t cap;
    uint64_t bytes;
};

static ckpt_status push(ckpt_plan *p, const ckpt_piece *pc, ckpt_error *err) {
    if (p->len) { /* extend the previous piece when both sides continue */
        ckpt_piece *last = &p->pieces[p->len - 1];
        if (last->file_id == pc->file_id && last->chunk == pc->chunk &&
            last->swap_unit == pc->swap_unit &&
            last->file_offset + last->length == pc->file_offset &&
            last->dst_offset + last->length == pc->dst_offset) {
            last->length += pc->length;
            return CKPT_OK;
        }
    }
    if (p->len == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        ckpt_piece *n = realloc(p->pieces, cap * sizeof *n);
        if (!n) return ck_fail(err, CKPT_E_NOMEM, "out of memory building a read plan");
        p->pieces = n;
        p->cap = cap;
    }
    p->pieces[p->len++] = *pc;
    return CKPT_OK;
}

typedef struct plan_ctx {
    ckpt_plan *p;
    ckpt_dtype dtype;
} plan_ctx;

static ckpt_status plan_box(void *ctx, const slice_box *b, ckpt_error *err) {
    plan_ctx *x = ctx;
    int64_t ds[CKPT_MAX_NDIM], ss[CKPT_MAX_NDIM], cnt[CKPT_MAX_NDIM], idx[CKPT_MAX_NDIM] = {0}, run;
    memcpy(ds, b->dst_stride, sizeof(int64_t) * (size_t)b->ndim);
    memcpy(ss, b->src_stride, sizeof(int64_t) * (size_t)b->ndim);
    memcpy(cnt, b->count, sizeof(int64_t) * (size_t)b->ndim);
    int n = ck_merge_dims(ds, ss, cnt, b->ndim, b->itemsize, &run);
    bool cplx = x->dtype == CKPT_DTYPE_COMPLEX64 || x->dtype == CKPT_DTYPE_COMPLEX128;
    ckpt_piece pc = {
        .file_id = b->c->res->kind == CHUNK_IN_MEMORY ? CKPT_PIECE_DECODED : b->c->loc.file_id,
        .swap_unit = (uint16_t)(b->c->res->big_endian && b->itemsize > 1
                                    ? (cplx ? b->itemsize / 2 : b->itemsize)
                                    : 0),
        .chunk = b->chunk,
        .length = (uint64_t)run,
    };
    for (;;) {
        pc.file_offset = b->src0;
        pc.dst_offset = b->dst0;
        for (int d = 0; d < n; d++) {
            pc.file_offset += (uint64_t)(idx[d] * ss[d]);
            pc.dst_offset += (uint64_t)(idx[d] * ds[d]);
        }
        CK_TRY(push(x->p, &pc, err));
        int d = n - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < cnt[d]) break;
            idx[d] = 0;
        }
        if (d < 0) return CKPT_OK;
    }
}

static int by_dst(const void *a, const void *b) {
    uint64_t x = ((const ckpt_piece *)a)->dst_offset, y = ((const ckpt_piece *)b)->dst_offset;
    return x < y ? -1 : x > y;
}

ckpt_status ckpt_plan_region(ckpt_reader *r, const ckpt_entry *e, const int64_t *start,
                             const int64_t *count, ckpt_plan **out, ckpt_error *err) {
    CK_ERR_OR_LOCAL(err);
    *out = NULL;
    ckpt_plan *p = calloc(1, sizeof *p);
    if (!p) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    plan_ctx x = {.p = p, .dtype = e->dtype};
    ckpt_status s = slice_for_each_box(r, e, start, count, plan_box, &x, &p->bytes, err);
    if (s != CKPT_OK) {
        ckpt_plan_free(p);
        return s;
    }
    if (p->len) qsort(p->pieces, p->len, sizeof *p->pieces, by_dst);
    *out = p;
    return CKPT_OK;
}

size_t ckpt_plan_num_pieces(const ckpt_plan *p) { return p->len; }
const ckpt_piece *ckpt_plan_pieces(const ckpt_plan *p) { return p->pieces; }
uint64_t ckpt_plan_bytes(const ckpt_plan *p) { return p->bytes; }

void ckpt_plan_free(ckpt_plan *p) {
    if (!p) return;
    free(p->pieces);
    free(p);
}

ckpt_status ckpt_plan_execute(ckpt_reader *r, const ckpt_entry *e, const ckpt_plan *p, void *dst,
                              size_t dst_size, ckpt_error *err) {
    CK_ERR_OR_LOCAL(err);
    if (dst_size < p->bytes)
        return ck_fail(err, CKPT_E_INVAL, "buffer of %zu bytes, plan needs %llu", dst_size,
                       (unsigned long long)p->bytes);
    uint8_t *out = dst;
    struct {
        int32_t file_id;
        ck_source src;
    } file = {.file_id = CKPT_PIECE_DECODED};
    for (size_t i = 0; i < p->len; i++) {
        const ckpt_piece *pc = &p->pieces[i];
        if (pc->chunk >= e->nchunks || pc->dst_offset + pc->length > p->bytes)
            return ck_fail(err, CKPT_E_INVAL, "plan does not belong to '%s'", e->key);
        ck_chunk *c = &e->chunks[pc->chunk];
        CK_TRY(ck_chunk_resolve(r, e, c, err));
        if (pc->file_id == CKPT_PIECE_DECODED) {
            if (c->res->kind != CHUNK_IN_MEMORY)
                return ck_fail(err, CKPT_E_INVAL, "plan piece %zu is out of range", i);
            const ck_source *src;
            CK_TRY(ck_chunk_pin(r, e, c, &src, err));
            bool inside = pc->file_offset + pc->length <= src->len;
            if (inside) memcpy(out + pc->dst_offset, src->mem + pc->file_offset, pc->length);
            ck_chunk_unpin(r, c);
            if (!inside) return ck_fail(err, CKPT_E_INVAL, "plan piece %zu is out of range", i);
        } else {
            if (pc->file_id != file.file_id) { /* consecutive pieces mostly share a file */
                int fd = ck_files_fd(r, (uint32_t)pc->file_id, err);
                if (fd < 0) return err ? err->code : CKPT_E_IO;
                file.file_id = pc->file_id;
                file.src = (ck_source){.fd = fd,
                                       .len = UINT64_MAX / 2,
                                       .name = r->files[pc->file_id].name,
                                       .count = &r->io_data};
            }
            CK_TRY(
                ck_source_read(&file.src, pc->file_offset, out + pc->dst_offset, pc->length, err));
        }
        if (pc->swap_unit)
            ck_bswap_elems(out + pc->dst_offset, pc->length / pc->swap_unit, pc->swap_unit);
    }
    return CKPT_OK;
}
