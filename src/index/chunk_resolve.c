/* chunk_resolve.c — the first access to a chunk: open its torch.save item (or safetensors
 * entry), check it against the metadata (dtype, box size, bounds) and remember where its
 * storage bytes are, so later reads go straight to the data.  I/O happens outside the
 * reader lock; the result is published under it. */
#include "index/reader_i.h"

#include "torchsave/safetensors.h"
#include "util/error.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

typedef struct resolved {
    chunk_storage_kind kind;
    bool big_endian;
    bool contiguous;
    uint64_t elem0;
    int64_t stride[CKPT_MAX_NDIM];
    ts_item *item;
} resolved;

/* The shape the stored item must have: the chunk's box, or for a box of a Megatron
 * flattened tensor the whole piece [1, ..., 1, n] it lies in (mcore_flat.c). */
typedef struct stored_shape {
    int ndim;
    int64_t shape[CKPT_MAX_NDIM];
    uint64_t numel;
    const ck_flat_src *flat;
} stored_shape;

static void stored_shape_of(const ckpt_entry *e, const ck_chunk *c, stored_shape *s) {
    s->flat = e->flat ? &e->flat[c - e->chunks] : NULL;
    if (!s->flat) {
        s->ndim = e->ndim;
        memcpy(s->shape, c->sizes, (size_t)e->ndim * sizeof s->shape[0]);
        s->numel = c->numel;
        return;
    }
    s->ndim = e->ndim + 1;
    for (int d = 0; d < e->ndim; d++)
        s->shape[d] = 1;
    s->shape[e->ndim] = (int64_t)s->flat->stored_numel;
    s->numel = s->flat->stored_numel;
}

/* Points a resolved piece at the box inside it: `skip` elements on along the piece (element
 * stride `step`), the box's own C-order strides scaled by it. */
static void narrow_to_box(const ckpt_entry *e, const ck_chunk *c, const stored_shape *ss,
                          int64_t step, resolved *out) {
    out->elem0 += ss->flat->skip * (uint64_t)step * ckpt_dtype_itemsize(e->dtype);
    int64_t acc = step;
    for (int d = e->ndim - 1; d >= 0; d--) {
        out->stride[d] = acc;
        acc *= c->sizes[d];
    }
    out->contiguous = step == 1;
}

static ckpt_status resolve_zip(ckpt_reader *r, const ckpt_entry *e, const ck_chunk *c,
                               const ck_source *src, resolved *out, ckpt_error *err) {
    stored_shape ss;
    stored_shape_of(e, c, &ss);
    ts_open_options o = {.transforms = c->loc.transforms,
                         .max_decoded_bytes =
                             c->loc.transforms
                                 ? (e->nbytes / (e->numel ? e->numel : 1)) * ss.numel + (64u << 20)
                                 : 0};
    (void)r;
    ts_item *it = NULL;
    CK_TRY(ts_item_open(src, &o, &it, err));
    ts_tensor_view v;
    ckpt_status s = CKPT_OK;
    const pk_value *root = ts_item_root(it);
    if (!ts_is_tensor_node(root)) {
        const char *cls = pk_class_name(root);
        s = ck_fail(err, CKPT_E_FORMAT, "%s: item at offset %llu holds '%s', not a tensor",
                    src->name, (unsigned long long)src->base, cls ? cls : "a plain value");
        goto fail;
    }
    CK_TRY_GOTO(s, ts_tensor_view_of(it, root, &v, err), fail);
    if (v.dtype != e->dtype) {
        s = ck_fail(err, CKPT_E_FORMAT, "%s: item at offset %llu stores %s, metadata says %s",
                    src->name, (unsigned long long)src->base, ckpt_dtype_name(v.dtype),
                    ckpt_dtype_name(e->dtype));
        goto fail;
    }
    if (v.ndim != ss.ndim || (ss.ndim && memcmp(v.shape, ss.shape, (size_t)ss.ndim * 8) != 0)) {
        s = ck_fail(err, CKPT_E_FORMAT,
                    "%s: item at offset %llu has a different shape than its chunk box", src->name,
                    (unsigned long long)src->base);
        goto fail;
    }
    size_t isz = ckpt_dtype_itemsize(v.dtype);
    out->big_endian = ts_item_big_endian(it);
    out->elem0 = v.record->data_offset + (uint64_t)v.storage_offset * isz;
    memcpy(out->stride, v.stride, sizeof v.stride);
    int64_t acc = 1;
    out->contiguous = true;
    for (int d = e->ndim - 1; d >= 0 && !ss.flat; d--) {
        if (v.shape[d] != 1 && v.stride[d] != acc) out->contiguous = false;
        acc *= v.shape[d];
    }
    if (ss.flat) narrow_to_box(e, c, &ss, v.stride[e->ndim], out);
    if (ts_item_is_decoded(it)) {
        out->kind = CHUNK_IN_MEMORY;
        out->item = it;
    } else {
        out->kind = CHUNK_IN_FILE;
        out->elem0 += src->base;
        ts_item_free(it);
    }
    return CKPT_OK;
fail:
    ts_item_free(it);
    return s;
}

static void contiguous_strides(const ckpt_entry *e, const ck_chunk *c, resolved *out) {
    int64_t acc = 1;
    for (int d = e->ndim - 1; d >= 0; d--) {
        out->stride[d] = acc;
        acc *= c->sizes[d];
    }
    out->contiguous = true;
}

/* SerializationFormat.SAFETENSORS (torch >= 2.8): the item's offset is the start of one
 * safetensors blob holding every tensor item of the file, keyed by fqn; `length` is the
 * tensor's byte size, not the blob's, so the window runs to the end of the file. */
static ckpt_status resolve_safetensors(const ckpt_entry *e, const ck_chunk *c,
                                       const ck_source *item, resolved *out, ckpt_error *err) {
    struct stat st;
    if (fstat(item->fd, &st) < 0 || (uint64_t)st.st_size < item->base)
        return ck_fail(err, CKPT_E_RANGE, "%s: item offset %llu is past the end of the file",
                       item->name, (unsigned long long)item->base);
    ck_source win = *item;
    win.len = (uint64_t)st.st_size - item->base;
    ts_safetensors *sf = NULL;
    CK_TRY(ts_safetensors_open(&win, 0, 0, &sf, err));
    ckpt_status s = CKPT_OK;
    const ts_st_tensor *t = ts_safetensors_find(sf, e->key);
    uint64_t isz = ckpt_dtype_itemsize(e->dtype);
    stored_shape ss;
    stored_shape_of(e, c, &ss);
    if (!t)
        s = ck_fail(err, CKPT_E_FORMAT, "%s: safetensors blob at offset %llu has no tensor '%s'",
                    item->name, (unsigned long long)item->base, e->key);
    else if (t->dtype != e->dtype || t->ndim != ss.ndim ||
             (ss.ndim && memcmp(t->shape, ss.shape, (size_t)ss.ndim * 8) != 0) ||
             t->size != ss.numel * isz || t->size != item->len)
        s = ck_fail(err, CKPT_E_FORMAT,
                    "%s: safetensors entry '%s' (%s) does not match its chunk in the metadata",
                    item->name, e->key, t->dtype_name);
    if (s == CKPT_OK) {
        out->kind = CHUNK_IN_FILE;
        out->elem0 = item->base + t->data_offset;
        contiguous_strides(e, c, out);
        if (ss.flat) narrow_to_box(e, c, &ss, 1, out);
    }
    ts_safetensors_free(sf);
    return s;
}

static ckpt_status resolve_item(ckpt_reader *r, const ckpt_entry *e, const ck_chunk *c,
                                const ck_source *src, resolved *out, ckpt_error *err) {
    if (c->loc.raw) { /* HuggingFace storage: the bytes themselves (hf_storage.c) */
        out->kind = CHUNK_IN_FILE;
        out->elem0 = src->base;
        out->big_endian = c->loc.big_endian;
        contiguous_strides(e, c, out);
        if (c->loc.raw_stride) { /* a strided view (torchsave_file.c) */
            for (int d = 0; d < e->ndim; d++)
                if (c->sizes[d] > 1 && c->loc.raw_stride[d] != out->stride[d])
                    out->contiguous = false;
            memcpy(out->stride, c->loc.raw_stride, (size_t)e->ndim * sizeof *out->stride);
        }
        stored_shape ss;
        stored_shape_of(e, c, &ss);
        if (ss.flat) narrow_to_box(e, c, &ss, 1, out);
        return CKPT_OK;
    }
    if (!c->loc.transforms && src->len >= 4) {
        uint8_t magic[4];
        CK_TRY(ck_source_read(src, 0, magic, 4, err));
        if (memcmp(magic, "PK\x03\x04", 4) != 0) {
            /* a safetensors blob starts with its u64 header length, then '{' */
            uint8_t head[9];
            struct stat st;
            bool plausible = fstat(src->fd, &st) == 0 && (uint64_t)st.st_size >= src->base + 9 &&
                             ck_source_read(&(ck_source){.fd = src->fd,
                                                         .base = src->base,
                                                         .len = 9,
                                                         .name = src->name,
                                                         .count = src->count},
                                            0, head, 9, NULL) == CKPT_OK;
            if (!plausible || head[8] != '{' ||
                ts_safetensors_len_prefix(head) > (uint64_t)st.st_size - src->base - 8)
                return ck_fail(err, CKPT_E_FORMAT,
                               "%s: the item at offset %llu is neither a torch.save zip nor a "
                               "safetensors blob",
                               src->name, (unsigned long long)src->base);
            return resolve_safetensors(e, c, src, out, err);
        }
    }
    return resolve_zip(r, e, c, src, out, err);
}

/* ------------------------------------------------------------------ decoded-chunk cache
 * Decoded items (CHUNK_IN_MEMORY) are kept in an LRU list bounded by limits.max_decoded_cache;
 * unpinned ones beyond it are freed and decoded again on their next use.  All under r->lock. */

static uint64_t item_bytes(const ck_chunk *c) {
    return c->res->item ? ts_item_source(c->res->item)->len : 0;
}

static void lru_unlink(ckpt_reader *r, ck_chunk *c) {
    ck_chunk_res *x = c->res;
    if (x->lru_prev)
        x->lru_prev->res->lru_next = x->lru_next;
    else if (r->lru_head == c)
        r->lru_head = x->lru_next;
    if (x->lru_next)
        x->lru_next->res->lru_prev = x->lru_prev;
    else if (r->lru_tail == c)
        r->lru_tail = x->lru_prev;
    x->lru_prev = x->lru_next = NULL;
}

static void lru_insert(ckpt_reader *r, ck_chunk *c) {
    c->res->lru_prev = NULL;
    c->res->lru_next = r->lru_head;
    if (r->lru_head) r->lru_head->res->lru_prev = c;
    r->lru_head = c;
    if (!r->lru_tail) r->lru_tail = c;
    r->decoded_bytes += item_bytes(c);
}

/* Frees least recently used unpinned items (never `keep`) until under budget. */
static void lru_evict(ckpt_reader *r, const ck_chunk *keep) {
    ck_chunk *c = r->lru_tail;
    while (c && r->decoded_bytes > r->limits.max_decoded_cache) {
        ck_chunk *prev = c->res->lru_prev;
        if (c != keep && c->res->pins == 0) {
            r->decoded_bytes -= item_bytes(c);
            lru_unlink(r, c);
            ts_item_free(c->res->item);
            c->res->item = NULL;
        }
        c = prev;
    }
}

ckpt_status ck_chunk_pin(ckpt_reader *r, const ckpt_entry *e, ck_chunk *c,
                         const ck_source **decoded, ckpt_error *err) {
    CK_TRY(ck_chunk_resolve(r, e, c, err));
    ck_chunk_res *x = c->res;
    if (x->kind != CHUNK_IN_MEMORY)
        return ck_fail(err, CKPT_E_INVAL, "'%s': chunk is not decoded in memory", e->key);
    pthread_mutex_lock(&r->lock);
    if (x->item) {
        x->pins++;
        lru_unlink(r, c);
        r->decoded_bytes -= item_bytes(c);
        lru_insert(r, c);
        *decoded = ts_item_source(x->item);
        pthread_mutex_unlock(&r->lock);
        return CKPT_OK;
    }
    pthread_mutex_unlock(&r->lock);
    /* evicted: decode again, outside the lock */
    ck_source src;
    resolved res;
    memset(&res, 0, sizeof res);
    ckpt_status s = ck_loc_source(r, &c->loc, e->key, &src, err);
    if (s == CKPT_OK) s = resolve_item(r, e, c, &src, &res, err);
    if (s == CKPT_OK && !res.item)
        s = ck_fail(err, CKPT_E_FORMAT, "'%s': chunk no longer decodes to memory", e->key);
    if (s != CKPT_OK) {
        ts_item_free(res.item);
        return s;
    }
    pthread_mutex_lock(&r->lock);
    if (!x->item) {
        x->item = res.item;
        res.item = NULL;
        lru_insert(r, c);
    }
    x->pins++;
    lru_evict(r, c);
    *decoded = ts_item_source(x->item);
    pthread_mutex_unlock(&r->lock);
    ts_item_free(res.item);
    return CKPT_OK;
}

void ck_chunk_unpin(ckpt_reader *r, ck_chunk *c) {
    pthread_mutex_lock(&r->lock);
    if (c->res->pins) c->res->pins--;
    lru_evict(r, NULL);
    pthread_mutex_unlock(&r->lock);
}

ckpt_status ck_chunk_resolve(ckpt_reader *r, const ckpt_entry *e, ck_chunk *c, ckpt_error *err) {
    int state = atomic_load_explicit(&c->state, memory_order_acquire);
    if (state == CHUNK_RESOLVED) return CKPT_OK;
    if (state == CHUNK_FAILED) return ck_fail(err, c->res->fail_code, "%s", c->res->fail_msg);
    if (e->problem) return ck_fail(err, CKPT_E_FORMAT, "'%s': %s", e->key, e->problem);

    resolved res;
    memset(&res, 0, sizeof res);
    ck_source src;
    ckpt_error local;
    ckpt_error *er = err ? err : &local;
    ckpt_status s;
    const ck_chunk *first = NULL;
    if (e->flat && e->flat[c - e->chunks].skip) {
        /* a later box of a Megatron flat piece: its item was opened and checked for the
         * piece's first box (skip 0, just before it); point into it from there */
        ck_chunk *f = c;
        while (e->flat[f - e->chunks].skip)
            f--;
        CK_TRY(ck_chunk_resolve(r, e, f, err));
        if (f->res->kind == CHUNK_IN_FILE) first = f;
    }
    if (first) {
        stored_shape ss;
        stored_shape_of(e, c, &ss);
        res.kind = CHUNK_IN_FILE;
        res.big_endian = first->res->big_endian;
        res.elem0 = first->res->elem0; /* the piece's first element */
        narrow_to_box(e, c, &ss, first->res->stride[e->ndim - 1], &res);
        s = CKPT_OK;
    } else {
        s = ck_loc_source(r, &c->loc, e->key, &src, er);
        if (s == CKPT_OK) s = resolve_item(r, e, c, &src, &res, er);
    }
    if (s != CKPT_OK && s != CKPT_E_NOMEM)
        ck_error_suffix(er, " (key '%s', chunk at offset %lld)", e->key,
                        (long long)(e->ndim ? c->offsets[0] : 0));

    pthread_mutex_lock(&r->lock);
    state = atomic_load_explicit(&c->state, memory_order_relaxed);
    if (state == CHUNK_UNRESOLVED) {
        if (s == CKPT_OK) {
            ck_chunk_res *x =
                ck_arena_alloc(r->arena, sizeof *x + (size_t)e->ndim * sizeof x->stride[0]);
            if (x) {
                memcpy(x->stride, res.stride, (size_t)e->ndim * sizeof x->stride[0]);
                x->kind = res.kind;
                x->big_endian = res.big_endian;
                x->contiguous = res.contiguous;
                x->elem0 = res.elem0;
                c->res = x;
                if (res.item) {
                    x->item = res.item;
                    res.item = NULL;
                    lru_insert(r, c);
                    lru_evict(r, c);
                }
                atomic_store_explicit(&c->state, CHUNK_RESOLVED, memory_order_release);
            } else {
                s = ck_fail(er, CKPT_E_NOMEM, "out of memory");
            }
        } else if (s != CKPT_E_NOMEM && s != CKPT_E_IO) { /* remember permanent defects */
            ck_chunk_res *x = ck_arena_alloc(r->arena, sizeof *x);
            if (x) {
                x->fail_code = s;
                x->fail_msg = ck_arena_strndup(r->arena, er->message, strlen(er->message));
            }
            if (x && x->fail_msg) {
                c->res = x;
                atomic_store_explicit(&c->state, CHUNK_FAILED, memory_order_release);
            }
        }
    } else if (state == CHUNK_FAILED) {
        s = ck_fail(er, c->res->fail_code, "%s", c->res->fail_msg);
    } else {
        s = CKPT_OK; /* another thread won the race */
    }
    pthread_mutex_unlock(&r->lock);
    ts_item_free(res.item);
    return s;
}

bool index_chunk_adopt(ckpt_reader *r, const ckpt_entry *e, ck_chunk *c, bool big_endian,
                       bool contiguous, uint64_t elem0, const int64_t *stride) {
    bool done = false;
    pthread_mutex_lock(&r->lock);
    if (atomic_load_explicit(&c->state, memory_order_relaxed) == CHUNK_UNRESOLVED) {
        ck_chunk_res *x =
            ck_arena_alloc(r->arena, sizeof *x + (size_t)e->ndim * sizeof x->stride[0]);
        if (x) {
            memset(x, 0, sizeof *x);
            memcpy(x->stride, stride, (size_t)e->ndim * sizeof x->stride[0]);
            x->kind = CHUNK_IN_FILE;
            x->big_endian = big_endian;
            x->contiguous = contiguous;
            x->elem0 = elem0;
            c->res = x;
            atomic_store_explicit(&c->state, CHUNK_RESOLVED, memory_order_release);
            done = true;
        }
    }
    pthread_mutex_unlock(&r->lock);
    return done;
}
