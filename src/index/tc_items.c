/* tc_items.c — torch-checkpointing item files other than torch.save (tc.h), in the formats an
 * ItemSpec's LayoutInfo chooses (checkpoint_layout.py, written by checkpoint_writer.py
 * CheckpointWriter._write_key):
 *
 *   SafetensorsSerialization  safetensors.torch.save of the item's tensors, keys flattened with
 *                             '.' (prepare_tensors_for_save), a DTensor reduced to its local
 *                             tensor: named by metadata.pkl, each record a rank's local shard
 *                             (tc_shard.c); else one entry per record, its flat key under the
 *                             item, as the release's load returns the file.  Chunks point at
 *                             the records' bytes.
 *   JsonSerialization         json.dumps(value, sort_keys=True, indent=4): converted to the
 *                             values a pickle would give (dicts, lists, str, int, float, bool,
 *                             None; an int beyond 64 bits exact, as json.loads gives it) and
 *                             walked as a torch.save file's state dict is.
 *   RawSerialization          the bytes given: one 1-D uint8 tensor entry of the file's size,
 *                             its one chunk the file itself (a region read reads those bytes
 *                             only; the mount's file is the bytes). */
#include "index/metadata_files.h"
#include "index/tc.h"

#include "torchsave/safetensors.h"
#include "util/error.h"
#include "util/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TC_JSON_DEPTH 64 /* the walker's depth */

/* Opens item file `name` of r->dir: *id its data file, *fd, *size, *path (for messages, in
 * r's arena). */
static ckpt_status open_item_file(ckpt_reader *r, const char *name, int32_t *id, int *fd,
                                  uint64_t *size, const char **path, ckpt_error *err) {
    const char *problem = NULL;
    *id = ck_files_intern(r, name, &problem);
    if (*id < 0)
        return problem ? ck_fail(err, CKPT_E_FORMAT, "%s/%s: %s", r->dir, name, problem)
                       : index_nomem(err);
    *fd = ck_files_fd(r, (uint32_t)*id, err);
    if (*fd < 0) return err && err->code ? err->code : CKPT_E_IO;
    size_t plen = strlen(r->dir) + strlen(name) + 2;
    char *p = ck_arena_alloc(r->arena, plen);
    if (!p) return index_nomem(err);
    snprintf(p, plen, "%s/%s", r->dir, name);
    struct stat st;
    if (fstat(*fd, &st) != 0) return ck_fail(err, CKPT_E_IO, "%s: %s", p, strerror(errno));
    *size = (uint64_t)st.st_size;
    *path = p;
    return CKPT_OK;
}

/* A tensor entry `key` (path: the item, then `sub`) of one chunk at `offset` of file_id, C
 * order, little endian. */
static ckpt_status whole_tensor(tc *w, const char *key, const char *sub, size_t sublen,
                                ckpt_dtype dtype, int ndim, const int64_t *shape, uint64_t offset,
                                ckpt_error *err) {
    ckpt_reader *r = w->r;
    ckpt_entry *e = index_new_entry(r, key);
    if (!e) return index_nomem(err);
    index_elem elems[2] = {{w->item, strlen(w->item), false, false}, {sub, sublen, false, false}};
    CK_TRY(index_set_path(r, e, elems, sub ? 2 : 1, err));
    size_t nd = (size_t)(ndim ? ndim : 1);
    int64_t *sh = ck_arena_alloc(r->arena, 2 * nd * sizeof *sh);
    ck_chunk *c = ck_arena_alloc(r->arena, sizeof *c);
    if (!sh || !c) return index_nomem(err);
    memcpy(sh, shape, (size_t)ndim * sizeof *sh);
    memset(sh + nd, 0, nd * sizeof *sh);
    e->kind = CKPT_ENTRY_TENSOR;
    e->dtype = dtype;
    e->ndim = ndim;
    e->shape = sh;
    const char *bad = NULL;
    e->numel = index_numel(r->arena, sh, ndim, &bad);
    e->nbytes = index_nbytes(dtype, e->numel);
    e->problem = bad;
    memset(c, 0, sizeof *c);
    c->offsets = sh + nd;
    c->sizes = sh;
    c->numel = e->numel;
    c->loc.file_id = e->numel ? w->file_id : -1;
    c->loc.raw = true;
    c->loc.offset = offset;
    c->loc.length = e->nbytes;
    e->chunks = c;
    e->nchunks = 1;
    if (!bad && e->numel) r->info.stored_bytes += e->nbytes;
    return CKPT_OK;
}

/* ------------------------------------------------------------------ safetensors */

ckpt_status tc_walk_safetensors(tc *w, const char *name, ckpt_error *err) {
    ckpt_reader *r = w->r;
    int fd = -1;
    uint64_t size = 0;
    CK_TRY(open_item_file(r, name, &w->file_id, &fd, &size, &w->file_path, err));
    ck_source src = {.fd = fd, .len = size, .name = w->file_path, .count = &r->io_meta};
    uint64_t max = r->limits.max_metadata_bytes < TS_SAFETENSORS_MAX_HEADER
                       ? r->limits.max_metadata_bytes
                       : TS_SAFETENSORS_MAX_HEADER;
    ts_safetensors *st = NULL;
    ckpt_status s = ts_safetensors_open(&src, 0, max ? max : 1, &st, err);
    if (s != CKPT_OK) {
        ck_error_prefix(err, "%s: ", w->file_path);
        return s;
    }
    r->info.metadata_bytes += 8 + ts_safetensors_header_len(st);
    size_t nt = ts_safetensors_num_tensors(st);
    for (size_t i = 0; i < nt && s == CKPT_OK; i++) {
        const ts_st_tensor *t = ts_safetensors_tensor(st, i);
        if (strlen(t->name) != t->name_len) {
            s = ck_fail(err, CKPT_E_FORMAT, "%s: a tensor name holds a NUL character",
                        w->file_path);
            break;
        }
        ck_strbuf_reset(&w->key);
        ck_strbuf_add(&w->key, w->item, strlen(w->item));
        ck_strbuf_addc(&w->key, '.');
        ck_strbuf_add(&w->key, t->name, t->name_len);
        if ((s = ck_strbuf_status(&w->key, "a key", err)) != CKPT_OK) break;
        const char *key = ck_strbuf_cstr(&w->key);
        tc_pending *p = w->pend ? tc_pending_of(w, key) : NULL;
        if (p) { /* a rank's local tensor of a DTensor metadata.pkl names */
            tc_local l = {.dtype = t->dtype,
                          .ndim = t->ndim,
                          .shape = t->shape,
                          .data_offset = t->data_offset};
            if (t->dtype == CKPT_DTYPE_INVALID && !r->entries[p->entry].problem)
                r->entries[p->entry].problem = index_problemf(
                    r->arena, "%s: '%s': dtype %s is not read", w->file_path, key, t->dtype_name);
            else
                s = tc_add_shard(w, p, &l, err);
        } else if (w->first_file && !index_find(r, key)) {
            s = whole_tensor(w, key, t->name, t->name_len, t->dtype, t->ndim, t->shape,
                             t->data_offset, err);
            if (s == CKPT_OK && t->dtype == CKPT_DTYPE_INVALID)
                r->entries[r->nentries - 1].problem = index_problemf(
                    r->arena, "%s: '%s': dtype %s is not read", w->file_path, key, t->dtype_name);
        }
    }
    ts_safetensors_free(st);
    return s;
}

/* ------------------------------------------------------------------ JSON */

/* The values a pickle of the decoded JSON would hold, in arena a. */
static pk_value *from_json(ck_arena *a, const ck_json *j) {
    pk_value *v = ck_arena_alloc(a, sizeof *v);
    if (!v) return NULL;
    memset(v, 0, sizeof *v);
    switch (j->type) {
    case CK_JSON_NULL: v->type = PK_NONE; break;
    case CK_JSON_BOOL:
        v->type = PK_BOOL;
        v->u.b = j->boolean;
        break;
    case CK_JSON_NUMBER:
        if (j->is_int) {
            v->type = PK_INT;
            v->u.i = j->u.num.i;
        } else if (j->u.num.big) { /* beyond int64: a Python int all the same */
            uint8_t *b = ck_arena_alloc(a, j->len / 2 + 9);
            if (!b) return NULL;
            size_t n = pk_decimal_to_bigint(j->u.num.big, j->len, b);
            b[n] = 0;
            v->type = PK_BIGINT;
            v->u.str.ptr = (const char *)b;
            v->u.str.len = n;
        } else {
            v->type = PK_FLOAT;
            v->u.f = j->u.num.d;
        }
        break;
    case CK_JSON_STRING:
        v->type = PK_STR;
        if (!(v->u.str.ptr = ck_arena_strndup(a, j->u.str, j->len))) return NULL;
        v->u.str.len = j->len;
        break;
    case CK_JSON_ARRAY:
        v->type = PK_LIST;
        v->u.seq.items = ck_arena_alloc(a, (j->len ? j->len : 1) * sizeof *v->u.seq.items);
        if (!v->u.seq.items) return NULL;
        for (size_t i = 0; i < j->len; i++) {
            if (!(v->u.seq.items[i] = from_json(a, &j->u.items[i]))) return NULL;
            if (v->u.seq.items[i]->depth + 1 > v->depth) v->depth = v->u.seq.items[i]->depth + 1;
        }
        v->u.seq.len = v->u.seq.cap = j->len;
        break;
    case CK_JSON_OBJECT:
        v->type = PK_DICT;
        v->u.dict.keys = ck_arena_alloc(a, (j->len ? j->len : 1) * sizeof *v->u.dict.keys);
        v->u.dict.vals = ck_arena_alloc(a, (j->len ? j->len : 1) * sizeof *v->u.dict.vals);
        if (!v->u.dict.keys || !v->u.dict.vals) return NULL;
        for (size_t i = 0; i < j->len; i++) {
            const ck_json_member *m = &j->u.members[i];
            ck_json k = {.type = CK_JSON_STRING, .len = m->key_len, .u.str = m->key};
            if (!(v->u.dict.keys[i] = from_json(a, &k))) return NULL;
            if (!(v->u.dict.vals[i] = from_json(a, &m->value))) return NULL;
            if (v->u.dict.vals[i]->depth + 1 > v->depth) v->depth = v->u.dict.vals[i]->depth + 1;
        }
        v->u.dict.len = v->u.dict.cap = j->len;
        break;
    }
    return v;
}

ckpt_status tc_add_json(tc *w, const char *name, ckpt_error *err) {
    ckpt_reader *r = w->r;
    int fd = -1;
    uint64_t size = 0;
    CK_TRY(open_item_file(r, name, &w->file_id, &fd, &size, &w->file_path, err));
    if (size > r->limits.max_metadata_bytes)
        return ck_fail(err, CKPT_E_LIMIT, "%s: JSON item of %llu bytes exceeds the metadata limit",
                       w->file_path, (unsigned long long)size);
    char *text = malloc(size ? size : 1);
    ck_arena *a = ck_arena_new(r->limits.max_metadata_bytes);
    if (!text || !a) {
        free(text);
        ck_arena_free(a);
        return index_nomem(err);
    }
    ck_source src = {.fd = fd, .len = size, .name = w->file_path, .count = &r->io_meta};
    ckpt_status s = ck_source_read(&src, 0, text, size, err);
    const ck_json *doc = NULL;
    if (s == CKPT_OK) {
        r->info.metadata_bytes += size;
        ckpt_error jerr = {0};
        if (ck_json_parse_python(a, text, size, TC_JSON_DEPTH, &doc, &jerr) != CKPT_OK) {
            if (jerr.code == CKPT_E_NOMEM) {
                s = index_nomem(err);
            } else { /* the item alone is unreadable: an entry saying why */
                ckpt_entry *e = index_find(r, w->item) ? NULL : index_new_entry(r, w->item);
                index_elem top = {w->item, strlen(w->item), false, false};
                if (e) {
                    e->kind = CKPT_ENTRY_OBJECT;
                    e->loc.file_id = w->file_id;
                    e->problem =
                        index_problemf(r->arena, "%s: not JSON: %s", w->file_path, jerr.message);
                    s = index_set_path(r, e, &top, 1, err);
                }
            }
            doc = NULL;
        }
    }
    if (s == CKPT_OK && doc) {
        pk_value *root = from_json(r->arena, doc);
        index_elem top = {w->item, strlen(w->item), false, false};
        s = root ? index_ts_walk_value(r, root, w->file_id, &top, 1, err) : index_nomem(err);
    }
    free(text);
    ck_arena_free(a);
    return s;
}

/* ------------------------------------------------------------------ raw bytes */

ckpt_status tc_add_raw(tc *w, const char *name, ckpt_error *err) {
    ckpt_reader *r = w->r;
    int fd = -1;
    uint64_t size = 0;
    CK_TRY(open_item_file(r, name, &w->file_id, &fd, &size, &w->file_path, err));
    if (index_find(r, w->item)) return CKPT_OK;
    if (size > INT64_MAX) return ck_fail(err, CKPT_E_RANGE, "%s: too large", w->file_path);
    int64_t shape[1] = {(int64_t)size};
    return whole_tensor(w, w->item, NULL, 0, CKPT_DTYPE_UINT8, 1, shape, 0, err);
}
