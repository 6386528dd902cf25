/* desc.c — the byte encoding of a rank's description (ckpt_save_desc_encode / _decode), for
 * gathering descriptions across processes.  Layout (little-endian):
 *
 *   "CKSD" u32 version=1 u32 rank str file u64 nitems, then per item:
 *   u8 kind(1 tensor, 2 value) u8 stored str key u32 npath
 *     per element: u8 is_index (i64 index | str name)
 *   tensor: str dtype-name u32 ndim i64[3*ndim] (global shape, offsets, sizes)
 *   u64 offset u64 length
 *
 * where str = u32 length + bytes (no NUL).  Decoding checks every length against the
 * buffer and every value against its domain. */
#include "save/save_i.h"

#include "util/error.h"
#include "util/utf8.h"
#include "util/strbuf.h"

#include <stdlib.h>
#include <string.h>

#define DESC_MAGIC "CKSD"
#define DESC_VERSION 1u

static void str(ck_strbuf *b, const char *s) {
    size_t n = strlen(s);
    ck_strbuf_add_le(b, n, 4);
    ck_strbuf_add(b, s, n);
}

ckpt_status ckpt_save_desc_encode(const ckpt_save_desc *d, void **buf, size_t *len,
                                  ckpt_error *err) {
    ck_strbuf b = CK_STRBUF_INIT;
    ck_strbuf_add(&b, DESC_MAGIC, 4);
    ck_strbuf_add_le(&b, DESC_VERSION, 4);
    ck_strbuf_add_le(&b, d->rank, 4);
    str(&b, d->file);
    ck_strbuf_add_le(&b, d->n, 8);
    for (size_t i = 0; i < d->n; i++) {
        const save_item *it = &d->items[i];
        ck_strbuf_add_le(&b, it->kind, 1);
        ck_strbuf_add_le(&b, it->stored, 1);
        str(&b, it->key);
        ck_strbuf_add_le(&b, it->npath, 4);
        for (size_t k = 0; k < it->npath; k++) {
            ck_strbuf_add_le(&b, it->path[k].name ? 0 : 1, 1);
            if (it->path[k].name)
                str(&b, it->path[k].name);
            else
                ck_strbuf_add_le(&b, (uint64_t)it->path[k].index, 8);
        }
        if (it->kind == SAVE_ITEM_TENSOR) {
            str(&b, ckpt_dtype_name(it->dtype));
            ck_strbuf_add_le(&b, (uint64_t)it->ndim, 4);
            for (int k = 0; k < 3 * it->ndim; k++)
                ck_strbuf_add_le(&b, (uint64_t)it->dims[k], 8);
        }
        ck_strbuf_add_le(&b, it->offset, 8);
        ck_strbuf_add_le(&b, it->length, 8);
    }
    ckpt_status s = ck_strbuf_status(&b, "description", err);
    if (s != CKPT_OK) {
        ck_strbuf_release(&b);
        return s;
    }
    *buf = ck_strbuf_detach(&b, len);
    return *buf ? CKPT_OK : ck_fail(err, CKPT_E_NOMEM, "out of memory");
}

typedef struct rd {
    const unsigned char *p;
    size_t len, pos;
    bool bad;
} rd;

static uint64_t get(rd *r, int n) {
    if (r->bad || r->len - r->pos < (size_t)n) {
        r->bad = true;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)r->p[r->pos + (size_t)i] << (8 * i);
    r->pos += (size_t)n;
    return v;
}

static char *getstr(rd *r) {
    uint64_t n = get(r, 4);
    if (r->bad || r->len - r->pos < n) {
        r->bad = true;
        return NULL;
    }
    const char *s = (const char *)r->p + r->pos;
    if (memchr(s, 0, (size_t)n) || !utf8_valid(s, (size_t)n)) {
        r->bad = true;
        return NULL;
    }
    char *c = strndup(s, (size_t)n);
    if (!c) r->bad = true;
    r->pos += (size_t)n;
    return c;
}

ckpt_status ckpt_save_desc_decode(const void *buf, size_t len, ckpt_save_desc **out,
                                  ckpt_error *err) {
    *out = NULL;
    rd r = {buf, len, 0, false};
    if (len < 8 || memcmp(buf, DESC_MAGIC, 4) != 0)
        return ck_fail(err, CKPT_E_FORMAT, "description: bad magic");
    r.pos = 4;
    if (get(&r, 4) != DESC_VERSION)
        return ck_fail(err, CKPT_E_UNSUPPORTED, "description: unknown version");
    ckpt_save_desc *d = calloc(1, sizeof *d);
    if (!d) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    d->rank = (uint32_t)get(&r, 4);
    d->file = getstr(&r);
    uint64_t n = get(&r, 8);
    const char *why = NULL;
    if (!r.bad && (!d->file || strchr(d->file, '/') || !*d->file)) why = "bad file name";
    if (!r.bad && n > len / 16) why = "item count exceeds the buffer";
    for (uint64_t i = 0; !r.bad && !why && i < n; i++) {
        save_item *it = save_desc_push(d);
        if (!it) {
            ckpt_save_desc_free(d);
            return ck_fail(err, CKPT_E_NOMEM, "out of memory");
        }
        it->kind = (uint8_t)get(&r, 1);
        uint64_t stored = get(&r, 1);
        it->stored = stored == 1;
        it->key = getstr(&r);
        uint64_t np = get(&r, 4);
        if (r.bad) break;
        if ((it->kind != SAVE_ITEM_TENSOR && it->kind != SAVE_ITEM_VALUE) || stored > 1) {
            why = "bad item kind";
            break;
        }
        if (np == 0 || np > (len - r.pos) / 5) {
            why = "bad path length";
            break;
        }
        it->path = calloc((size_t)np, sizeof *it->path);
        if (!it->path) {
            ckpt_save_desc_free(d);
            return ck_fail(err, CKPT_E_NOMEM, "out of memory");
        }
        it->npath = (size_t)np;
        for (size_t k = 0; k < np && !r.bad; k++) {
            uint64_t is_index = get(&r, 1);
            if (is_index > 1) why = "bad path element";
            if (is_index == 1) {
                it->path[k].index = (int64_t)get(&r, 8);
                if (it->path[k].index < 0) why = "negative list position";
            } else {
                it->path[k].name = getstr(&r);
            }
        }
        if (r.bad || why) break;
        if (it->kind == SAVE_ITEM_TENSOR) {
            char *dt = getstr(&r);
            it->dtype = dt ? ckpt_dtype_from_name(dt) : CKPT_DTYPE_INVALID;
            free(dt);
            uint64_t nd = get(&r, 4);
            if (r.bad) break;
            if (it->dtype == CKPT_DTYPE_INVALID || nd > CKPT_MAX_NDIM) {
                why = "bad dtype or ndim";
                break;
            }
            it->ndim = (int)nd;
            if (nd) {
                it->dims = malloc(3 * (size_t)nd * sizeof *it->dims);
                if (!it->dims) {
                    ckpt_save_desc_free(d);
                    return ck_fail(err, CKPT_E_NOMEM, "out of memory");
                }
            }
            for (size_t k = 0; k < 3 * nd; k++)
                it->dims[k] = (int64_t)get(&r, 8);
            for (size_t k = 0; k < nd && !r.bad; k++) {
                int64_t g = it->dims[k], o = it->dims[nd + k], z = it->dims[2 * nd + k];
                if (g < 0 || o < 0 || z < 0 || o > g || z > g - o) why = "box outside the shape";
            }
        }
        it->offset = get(&r, 8);
        it->length = get(&r, 8);
    }
    if (!r.bad && !why && r.pos != len) why = "trailing bytes";
    if (r.bad || why) {
        ckpt_save_desc_free(d);
        return ck_fail(err, CKPT_E_FORMAT, "description: %s at byte %zu",
                       why ? why : "truncated or invalid string", r.pos);
    }
    *out = d;
    return CKPT_OK;
}
