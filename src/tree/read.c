/* read.c — the read engine behind every file of the namespace: turns a byte window of a
 * tensor (or of a box of it) into a reply made of fd segments (contiguous runs of a shard
 * file, for splicing) and memory segments (everything else, assembled in the caller's
 * scratch buffer).  A linear byte window of a C-order box is at most 2·ndim−1 sub-boxes
 * (slice/linear.h); each goes through the slicer, which yields one strided intersection per
 * stored chunk. */
#include "slice/linear.h"
#include "slice/region.h"
#include "tensor/strided.h"
#include "tree/tree_i.h"
#include "util/error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct ckpt_tree_piece {
    uint64_t dst;
    uint64_t pos;
    uint64_t len;
    int fd;
    const char *name; /* the file, for messages */
    bool checked;     /* already checked against the file's current size */
};

void ckpt_tree_scratch_release(ckpt_tree_scratch *s) {
    if (!s) return;
    free(s->buf);
    free(s->slab);
    free(s->segs);
    free(s->pieces);
    memset(s, 0, sizeof *s);
}

ckpt_status tree_read_mem(tree_read *x, uint64_t dst, const void *src, size_t len,
                          ckpt_error *err) {
    if (dst + len > x->len) return ck_fail(err, CKPT_E_INVAL, "read outside the reply");
    memcpy(x->s->buf + dst, src, len);
    return CKPT_OK;
}

static ckpt_status pread_all(int fd, uint64_t pos, uint8_t *dst, uint64_t len, ckpt_error *err) {
    while (len) {
        ssize_t n = pread(fd, dst, len, (off_t)pos);
        if (n < 0) {
            if (errno == EINTR) continue;
            return ck_fail(err, CKPT_E_IO, "pread at offset %llu: %s", (unsigned long long)pos,
                           strerror(errno));
        }
        if (n == 0)
            return ck_fail(err, CKPT_E_RANGE, "offset %llu: unexpected end of file",
                           (unsigned long long)pos);
        dst += n;
        pos += (uint64_t)n;
        len -= (uint64_t)n;
    }
    return CKPT_OK;
}

/* Over the fd budget: gather every recorded piece into the buffer from now on. */
static ckpt_status go_mem_only(tree_read *x, ckpt_error *err) {
    x->mem_only = true;
    for (size_t i = 0; i < x->npieces; i++) {
        struct ckpt_tree_piece *p = &x->s->pieces[i];
        ckpt_status s = pread_all(p->fd, p->pos, x->s->buf + p->dst, p->len, err);
        if (s != CKPT_OK) {
            if (err && p->name) ck_error_prefix(err, "%s/%s: ", x->c->dir, p->name);
            return s;
        }
    }
    x->npieces = 0;
    return CKPT_OK;
}

static ckpt_status add_piece(tree_read *x, uint64_t dst, int fd, const char *name, bool checked,
                             uint64_t pos, uint64_t len, ckpt_error *err) {
    if (x->npieces) { /* extend the previous piece when both sides continue */
        struct ckpt_tree_piece *l = &x->s->pieces[x->npieces - 1];
        if (l->fd == fd && l->pos + l->len == pos && l->dst + l->len == dst &&
            l->checked == checked) {
            l->len += len;
            return CKPT_OK;
        }
    }
    if (x->npieces == x->s->pieces_cap) {
        size_t cap = x->s->pieces_cap ? x->s->pieces_cap * 2 : 64;
        struct ckpt_tree_piece *n = realloc(x->s->pieces, cap * sizeof *n);
        if (!n) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
        x->s->pieces = n;
        x->s->pieces_cap = cap;
    }
    x->s->pieces[x->npieces++] = (struct ckpt_tree_piece){dst, pos, len, fd, name, checked};
    return CKPT_OK;
}

ckpt_status tree_read_fd(tree_read *x, uint64_t dst, int fd, const char *name, uint64_t pos,
                         uint64_t len, ckpt_error *err) {
    if (dst + len > x->len) return ck_fail(err, CKPT_E_INVAL, "read outside the reply");
    if (x->mem_only || len < x->min_run || x->npieces >= x->max_segs) {
        ckpt_status s = pread_all(fd, pos, x->s->buf + dst, len, err);
        if (s != CKPT_OK && err) ck_error_prefix(err, "%s/%s: ", x->c->dir, name);
        return s;
    }
    return add_piece(x, dst, fd, name, false, pos, len, err);
}

/* ------------------------------------------------------------------ one box */

typedef struct box_ctx {
    tree_read *x;
    const ckpt_entry *e;
    uint64_t dst; /* reply offset of the box's C-order buffer */
} box_ctx;

static size_t runs_of(const int64_t *cnt, int n) {
    uint64_t k = 1;
    for (int d = 0; d < n; d++) {
        k *= (uint64_t)cnt[d];
        if (k > SIZE_MAX / 2) return SIZE_MAX / 2;
    }
    return (size_t)k;
}

static ckpt_status one_box(void *ctx, const slice_box *b, ckpt_error *err) {
    box_ctx *bx = ctx;
    tree_read *x = bx->x;
    const ck_chunk *c = b->c;
    CK_TRY(tree_verify_item(x->c, &c->loc, err));
    if (!x->mem_only && c->res->kind == CHUNK_IN_FILE &&
        (!c->res->big_endian || b->itemsize == 1)) {
        int64_t ds[CKPT_MAX_NDIM], ss[CKPT_MAX_NDIM], cnt[CKPT_MAX_NDIM], run;
        memcpy(ds, b->dst_stride, sizeof(int64_t) * (size_t)b->ndim);
        memcpy(ss, b->src_stride, sizeof(int64_t) * (size_t)b->ndim);
        memcpy(cnt, b->count, sizeof(int64_t) * (size_t)b->ndim);
        int n = ck_merge_dims(ds, ss, cnt, b->ndim, b->itemsize, &run);
        size_t runs = runs_of(cnt, n);
        if ((uint64_t)run >= x->min_run && x->npieces + runs > x->max_segs)
            CK_TRY(go_mem_only(x, err));
        else if ((uint64_t)run >= x->min_run) {
            /* opens the file and checks the item against its current size, as the copying
             * path does: a shard truncated since it was mounted fails here, not in a short
             * splice */
            ck_source src;
            CK_TRY(ck_loc_source(x->r, &c->loc, ckpt_entry_key(bx->e), &src, err));
            int fd = src.fd;
            int64_t idx[CKPT_MAX_NDIM] = {0};
            for (;;) {
                uint64_t soff = b->src0, doff = bx->dst + b->dst0;
                for (int d = 0; d < n; d++) {
                    soff += (uint64_t)(idx[d] * ss[d]);
                    doff += (uint64_t)(idx[d] * ds[d]);
                }
                CK_TRY(add_piece(x, doff, fd, ckpt_reader_file_name(x->r, (uint32_t)c->loc.file_id),
                                 true, soff, (uint64_t)run, err));
                int d = n - 1;
                for (; d >= 0; d--) {
                    if (++idx[d] < cnt[d]) break;
                    idx[d] = 0;
                }
                if (d < 0) return CKPT_OK;
            }
        }
    }
    slice_reader rd = {.r = x->r,
                       .e = bx->e,
                       .dst = x->s->buf + bx->dst,
                       .slab = x->s->slab,
                       .slab_cap = x->s->slab_cap};
    ckpt_status s = slice_read_box(&rd, b, err);
    x->s->slab = rd.slab;
    x->s->slab_cap = rd.slab_cap;
    return s;
}

/* ------------------------------------------------------------------ linear windows */

typedef struct lin_ctx {
    tree_read *x;
    const ckpt_entry *e;
    uint64_t dst; /* the window's first byte in the reply */
} lin_ctx;

static ckpt_status lin_box(void *ctx, const int64_t *start, const int64_t *count, uint64_t dst,
                           ckpt_error *err) {
    lin_ctx *l = ctx;
    box_ctx bx = {l->x, l->e, l->dst + dst};
    return slice_for_each_box(l->x->r, l->e, start, count, one_box, &bx, NULL, err);
}

typedef struct elem_ctx {
    tree_read *x;
    slice_reader rd;
} elem_ctx;

static ckpt_status elem_box(void *ctx, const slice_box *b, ckpt_error *err) {
    elem_ctx *ec = ctx;
    CK_TRY(tree_verify_item(ec->x->c, &b->c->loc, err));
    return slice_read_box(&ec->rd, b, err);
}

/* Part of one element: read whole into tmp, then copied into the reply. */
static ckpt_status lin_part(void *ctx, const int64_t *start, const int64_t *count, size_t skip,
                            size_t n, uint64_t dst, ckpt_error *err) {
    lin_ctx *l = ctx;
    uint8_t tmp[16];
    elem_ctx ec = {.x = l->x, .rd = {.r = l->x->r, .e = l->e, .dst = tmp}};
    ckpt_status s = slice_for_each_box(l->x->r, l->e, start, count, elem_box, &ec, NULL, err);
    free(ec.rd.slab);
    if (s == CKPT_OK) memcpy(l->x->s->buf + l->dst + dst, tmp + skip, n);
    return s;
}

ckpt_status tree_read_tensor(tree_read *x, const ckpt_entry *e, const int64_t *origin,
                             const int64_t *extent, uint64_t off, uint64_t len, uint64_t dst,
                             ckpt_error *err) {
    if (!len) return CKPT_OK;
    if (ckpt_entry_problem(e))
        return ck_fail(err, CKPT_E_FORMAT, "'%s': %s", ckpt_entry_key(e), ckpt_entry_problem(e));
    if (dst + len > x->len) return ck_fail(err, CKPT_E_INVAL, "read outside the reply");
    static const slice_linear_ops ops = {.box = lin_box, .part = lin_part};
    lin_ctx l = {x, e, dst};
    return slice_linear(ckpt_entry_ndim(e), origin, extent ? extent : ckpt_entry_shape(e),
                        ckpt_dtype_itemsize(ckpt_entry_dtype(e)), off, len, &ops, &l, err);
}

/* ------------------------------------------------------------------ the reply */

static int by_dst(const void *a, const void *b) {
    uint64_t x = ((const struct ckpt_tree_piece *)a)->dst,
             y = ((const struct ckpt_tree_piece *)b)->dst;
    return x < y ? -1 : x > y;
}

static ckpt_status push_seg(ckpt_tree_scratch *s, size_t *n, ckpt_tree_seg seg, ckpt_error *err) {
    if (*n == s->segs_cap) {
        size_t cap = s->segs_cap ? s->segs_cap * 2 : 16;
        ckpt_tree_seg *m = realloc(s->segs, cap * sizeof *m);
        if (!m) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
        s->segs = m;
        s->segs_cap = cap;
    }
    s->segs[(*n)++] = seg;
    return CKPT_OK;
}

/* A file that shrank after it was mounted would splice short: every fd piece that was not
 * checked when it was added (whole-file windows of `.raw`) must lie inside its file's current
 * size (one fstat per file and reply). */
static ckpt_status check_sizes(tree_read *x, ckpt_error *err) {
    int last_fd = -1;
    uint64_t size = 0;
    for (size_t i = 0; i < x->npieces; i++) {
        const struct ckpt_tree_piece *p = &x->s->pieces[i];
        if (p->checked) continue;
        if (p->fd != last_fd) {
            struct stat st;
            if (fstat(p->fd, &st) != 0)
                return ck_fail(err, CKPT_E_IO, "%s/%s: %s", x->c->dir, p->name, strerror(errno));
            last_fd = p->fd;
            size = (uint64_t)st.st_size;
        }
        if (p->pos + p->len > size)
            return ck_fail(err, CKPT_E_RANGE,
                           "%s/%s: bytes [%llu, %llu) are past the end of the file (%llu bytes; "
                           "truncated since it was mounted?)",
                           x->c->dir, p->name, (unsigned long long)p->pos,
                           (unsigned long long)(p->pos + p->len), (unsigned long long)size);
    }
    return CKPT_OK;
}

/* Segments of the reply: the fd pieces (sorted) and the gaps around them. */
static size_t count_segs(const tree_read *x) {
    size_t n = 0;
    uint64_t at = 0;
    for (size_t i = 0; i < x->npieces; i++) {
        n += 1 + (x->s->pieces[i].dst > at);
        at = x->s->pieces[i].dst + x->s->pieces[i].len;
    }
    return n + (at < x->len);
}

/* The reply: fd pieces in order, the gaps between them from the buffer; all from the buffer
 * when that would be more segments than allowed. */
ckpt_status tree_read_finish(tree_read *x, size_t *nsegs, ckpt_error *err) {
    *nsegs = 0;
    ckpt_tree_scratch *s = x->s;
    CK_TRY(check_sizes(x, err));
    if (x->npieces > 1) qsort(s->pieces, x->npieces, sizeof *s->pieces, by_dst);
    if (x->npieces && count_segs(x) > x->max_segs) CK_TRY(go_mem_only(x, err));
    uint64_t at = 0;
    for (size_t i = 0; i < x->npieces; i++) {
        const struct ckpt_tree_piece *p = &s->pieces[i];
        if (p->dst > at)
            CK_TRY(push_seg(s, nsegs, (ckpt_tree_seg){-1, 0, p->dst - at, s->buf + at}, err));
        CK_TRY(push_seg(s, nsegs, (ckpt_tree_seg){p->fd, p->pos, p->len, NULL}, err));
        at = p->dst + p->len;
    }
    if (at < x->len)
        CK_TRY(push_seg(s, nsegs, (ckpt_tree_seg){-1, 0, x->len - at, s->buf + at}, err));
    return CKPT_OK;
}
