/* torchsave_file.c — a single torch.save file (`model.pt`, `pytorch_model.bin`, a full
 * checkpoint of model and optimizer): the zip archive torch.save has written since torch 1.6.
 * Its data.pkl is decoded with the data-only decoder (nothing is imported or called) and
 * walked as torch's flatten_state_dict traverses a state dict (dicts and OrderedDicts always,
 * lists holding tensors or dicts, tuples never), each tensor becomes an entry whose one chunk is
 * its bytes in the archive (torch stores records uncompressed), and every other leaf a value entry
 * converted from the decoded pickle.  Keys are the path elements joined with '.', as torch's
 * flatten_state_dict writes them; paths keep the elements.  A tensor may be any strided view of its
 * storage (a transposed weight, a slice of a fused one): its chunk carries the view's strides, and
 * reads gather its elements in C order. */
#include "index/builder.h"
#include "index/formats.h"
#include "index/hf_storage.h"
#include "index/metadata_files.h"
#include "index/torchsave_walk.h"

#include "torchsave/item.h"
#include "util/error.h"
#include "util/json.h"
#include "util/strbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_ELEMS 64 /* nesting of the state dict walked */

typedef struct walk {
    ckpt_reader *r;
    ts_item *it;
    int32_t file_id;
    index_ts_leaf_fn leaf; /* NULL: index_ts_add_leaf */
    void *ctx;
    index_elem elems[MAX_ELEMS];
    char nums[MAX_ELEMS][24];
    size_t depth;
    ck_strbuf key;
} walk;

static bool is_dict(const pk_value *v) {
    return v->type == PK_DICT ||
           (v->type == PK_OBJECT && pk_obj_dictitems(v) && pk_obj_dictitems(v)->type == PK_DICT);
}

static const pk_value *dict_of(const pk_value *v) {
    return v->type == PK_DICT ? v : pk_obj_dictitems(v);
}

static ckpt_status add_leaf(walk *w, const pk_value *v, ckpt_error *err);

static ckpt_status leaf(walk *w, const pk_value *v, ckpt_error *err) {
    if (!w->leaf) return add_leaf(w, v, err);
    return w->leaf(w->ctx, w->elems, w->depth, v, err);
}

/* torch's flatten_state_dict (_traverse.py): a mapping is always traversed, a tuple never; a
 * list only when something in it is a tensor, a mapping or such a list. */
static bool is_terminal(const pk_value *v, unsigned depth) {
    if (is_dict(v)) return false;
    if (v->type != PK_LIST || depth > MAX_ELEMS) return true;
    for (size_t i = 0; i < v->u.seq.len; i++) {
        const pk_value *x = v->u.seq.items[i];
        if (ts_is_tensor_node(x) || ts_dtensor_local(x, NULL) ||
            ((is_dict(x) || x->type == PK_LIST) && !is_terminal(x, depth + 1)))
            return false;
    }
    return true;
}

static ckpt_status walk_value(walk *w, const pk_value *v, ckpt_error *err) {
    const pk_value *d = is_dict(v) ? dict_of(v) : NULL;
    if (!d && (is_terminal(v, 0) || w->depth == MAX_ELEMS))
        return w->depth ? leaf(w, v, err) : CKPT_OK;
    size_t n = d ? d->u.dict.len : v->u.seq.len;
    for (size_t i = 0; i < n && w->depth < MAX_ELEMS; i++) {
        const pk_value *k = d ? d->u.dict.keys[i] : NULL;
        index_elem *el = &w->elems[w->depth];
        if (k && k->type == PK_STR) {
            *el = (index_elem){k->u.str.ptr, k->u.str.len, false, false};
        } else if (!k || k->type == PK_INT) { /* torch: str(key) for a dict, the index in a list */
            long long idx = k ? (long long)k->u.i : (long long)i;
            int len = snprintf(w->nums[w->depth], sizeof w->nums[0], "%lld", idx);
            *el = (index_elem){w->nums[w->depth], (size_t)len, !k, k != NULL};
        } else {
            continue; /* a key that is neither str nor int names no file */
        }
        w->depth++;
        ckpt_status s = walk_value(w, d ? d->u.dict.vals[i] : v->u.seq.items[i], err);
        w->depth--;
        CK_TRY(s);
    }
    return CKPT_OK;
}

bool index_ts_c_order(const ts_tensor_view *t) {
    int64_t want = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->stride[d] != want) return false;
        want *= t->shape[d];
    }
    return true;
}

static ckpt_status add_leaf(walk *w, const pk_value *v, ckpt_error *err) {
    return index_ts_add_leaf(w->r, w->it, w->file_id, w->elems, w->depth, v, &w->key, err);
}

ckpt_status index_ts_add_leaf(ckpt_reader *r, ts_item *it, int32_t file_id, const index_elem *elems,
                              size_t n, const pk_value *v, ck_strbuf *keybuf, ckpt_error *err) {
    ck_strbuf_reset(keybuf);
    for (size_t i = 0; i < n; i++) {
        if (i) ck_strbuf_addc(keybuf, '.');
        ck_strbuf_add(keybuf, elems[i].s, elems[i].len);
    }
    if (ck_strbuf_status(keybuf, "a key", err) != CKPT_OK) return CKPT_E_NOMEM;
    const char *key = ck_strbuf_cstr(keybuf);
    if (index_find(r, key)) return CKPT_OK; /* "a.b" twice ({"a.b": x, "a": {"b": y}}): first */
    ckpt_entry *e = index_new_entry(r, key);
    if (!e) return index_nomem(err);
    CK_TRY(index_set_path(r, e, elems, n, err));
    if (!ts_is_tensor_node(v)) {
        e->kind = CKPT_ENTRY_OBJECT;
        e->value = v;             /* converted when loaded (object_load.c) */
        e->loc.file_id = file_id; /* its source, for who may read it (no byte range) */
        return CKPT_OK;
    }
    e->kind = CKPT_ENTRY_TENSOR;
    ts_tensor_view t;
    ckpt_error terr = {0};
    if (ts_tensor_view_of(it, v, &t, &terr) != CKPT_OK) {
        if (terr.code == CKPT_E_NOMEM) return index_nomem(err);
        e->problem = index_problemf(r->arena, "%s", terr.message);
        return CKPT_OK;
    }
    /* the shape, then the chunk's offsets (all 0); the one chunk's sizes are the shape */
    size_t nd = (size_t)(t.ndim ? t.ndim : 1);
    int64_t *shape = ck_arena_alloc(r->arena, nd * 2 * sizeof *shape);
    ck_chunk *c = ck_arena_alloc(r->arena, sizeof *c);
    if (!shape || !c) return index_nomem(err);
    memcpy(shape, t.shape, (size_t)t.ndim * sizeof *shape);
    int64_t *offsets = shape + nd;
    memset(offsets, 0, (size_t)t.ndim * sizeof *offsets);
    e->dtype = t.dtype;
    e->ndim = t.ndim;
    e->shape = shape;
    const char *bad = NULL;
    e->numel = index_numel(r->arena, shape, t.ndim, &bad);
    e->nbytes = index_nbytes(t.dtype, e->numel);
    if (bad) e->problem = bad;
    e->chunks = c;
    e->nchunks = 1;
    CK_TRY(index_ts_chunk(r, it, file_id, &t, 0, offsets, shape, e->numel, c, err));
    if (!e->problem && e->numel && c->loc.file_id >= 0) r->info.stored_bytes += e->nbytes;
    return CKPT_OK;
}

ckpt_status index_ts_chunk(ckpt_reader *r, const ts_item *it, int32_t file_id,
                           const ts_tensor_view *t, uint64_t elem_offset, const int64_t *offsets,
                           const int64_t *sizes, uint64_t numel, ck_chunk *c, ckpt_error *err) {
    memset(c, 0, sizeof *c);
    c->offsets = offsets;
    c->sizes = sizes;
    c->numel = numel;
    c->loc.file_id = -1;
    if (!numel) return CKPT_OK;
    size_t isz = ckpt_dtype_itemsize(t->dtype);
    uint64_t span = 1; /* elements from the first to the last one the view addresses */
    for (int d = 0; d < t->ndim; d++)
        span += (uint64_t)(t->shape[d] - 1) * (uint64_t)t->stride[d];
    c->loc.file_id = file_id;
    c->loc.raw = true;
    c->loc.big_endian = ts_item_big_endian(it);
    c->loc.offset = t->record->data_offset + ((uint64_t)t->storage_offset + elem_offset) * isz;
    if (elem_offset) { /* a box of a C-order view: numel elements from elem_offset */
        c->loc.length = numel * isz;
        return CKPT_OK;
    }
    c->loc.length = span * isz; /* inside the record: ts_tensor_view_of checked it */
    if (!index_ts_c_order(t)) {
        int64_t *stride = ck_arena_alloc(r->arena, (size_t)t->ndim * sizeof *stride);
        if (!stride) return index_nomem(err);
        memcpy(stride, t->stride, (size_t)t->ndim * sizeof *stride);
        c->loc.raw_stride = stride;
    }
    return CKPT_OK;
}

ckpt_status index_ts_open(ckpt_reader *r, const char *name, ts_item **out, int32_t *file_id,
                          const char **path_out, ckpt_error *err) {
    *out = NULL;
    const char *problem = NULL;
    int32_t id = ck_files_intern(r, name, &problem);
    if (id < 0)
        return ck_fail(err, CKPT_E_INVAL, "%s: %s", name, problem ? problem : "bad file name");
    int fd = ck_files_fd(r, (uint32_t)id, err);
    if (fd < 0) return err && err->code ? err->code : CKPT_E_IO;
    size_t plen = strlen(r->dir) + strlen(name) + 2;
    char *path = ck_arena_alloc(r->arena, plen); /* named by messages while the reader lives */
    if (!path) return index_nomem(err);
    snprintf(path, plen, "%s/%s", r->dir, name);
    struct stat st;
    if (fstat(fd, &st) != 0) return ck_fail(err, CKPT_E_IO, "%s: fstat failed", path);
    /* data.pkl and the zip directory count as metadata; tensors are read as data later */
    ck_source src = {
        .fd = fd, .base = 0, .len = (uint64_t)st.st_size, .name = path, .count = &r->io_meta};
    pk_limits lim = ck_metadata_pk_limits(&r->limits, (size_t)st.st_size);
    ts_open_options o = {.max_pickle_bytes = r->limits.max_metadata_bytes, .pickle_limits = &lim};
    ts_item *it = NULL;
    ckpt_status os = ts_item_open(&src, &o, &it, err);
    uint8_t head[2] = {0, 0}; /* legacy torch.save: a pickle protocol 2 magic number first */
    if (os == CKPT_E_FORMAT && ck_source_read(&src, 0, head, 2, NULL) == CKPT_OK &&
        head[0] == 0x80 && head[1] == 2)
        return ck_fail(err, CKPT_E_UNSUPPORTED,
                       "%s: a legacy torch.save file (torch < 1.6, or "
                       "_use_new_zipfile_serialization=False): not read; save it again with "
                       "torch.save",
                       path);
    CK_TRY(os);
    ts_item **m = realloc(r->owned_items, (r->nowned + 1) * sizeof *m);
    if (!m) {
        ts_item_free(it);
        return index_nomem(err);
    }
    r->owned_items = m;
    r->owned_items[r->nowned++] = it; /* value entries point into its pickle */
    r->info.metadata_bytes += (uint64_t)st.st_size;
    *out = it;
    *file_id = id;
    if (path_out) *path_out = path;
    return CKPT_OK;
}

ckpt_status index_ts_walk(ckpt_reader *r, ts_item *it, int32_t file_id, const index_elem *prefix,
                          size_t nprefix, index_ts_leaf_fn fn, void *ctx, ckpt_error *err) {
    if (nprefix >= MAX_ELEMS) return ck_fail(err, CKPT_E_LIMIT, "path prefix too deep");
    walk w = {.r = r, .it = it, .file_id = file_id, .leaf = fn, .ctx = ctx, .depth = nprefix};
    for (size_t i = 0; i < nprefix; i++)
        w.elems[i] = prefix[i];
    ck_strbuf_init(&w.key, 0);
    ckpt_status s = walk_value(&w, ts_item_root(it), err);
    ck_strbuf_release(&w.key);
    return s;
}

ckpt_status index_ts_walk_value(ckpt_reader *r, const pk_value *root, int32_t file_id,
                                const index_elem *prefix, size_t nprefix, ckpt_error *err) {
    if (nprefix >= MAX_ELEMS) return ck_fail(err, CKPT_E_LIMIT, "path prefix too deep");
    walk w = {.r = r, .file_id = file_id, .depth = nprefix};
    for (size_t i = 0; i < nprefix; i++)
        w.elems[i] = prefix[i];
    ck_strbuf_init(&w.key, 0);
    ckpt_status s = walk_value(&w, root, err);
    ck_strbuf_release(&w.key);
    return s;
}

/* Indexes torch.save file `name` of r->dir (its entries added to what is there). */
static ckpt_status add_one(ckpt_reader *r, const char *name, ckpt_error *err) {
    ts_item *it;
    int32_t id;
    const char *path;
    CK_TRY(index_ts_open(r, name, &it, &id, &path, err));
    size_t before = r->nentries;
    ckpt_status s = index_ts_walk(r, it, id, NULL, 0, NULL, NULL, err);
    if (s == CKPT_OK && r->nentries == before)
        s = ck_fail(err, CKPT_E_FORMAT, "%s: holds no dict or list of values", path);
    return s;
}

static ckpt_status add_torchsave_file(ckpt_reader *r, ckpt_error *err) {
    if (!r->single_file) return ck_fail(err, CKPT_E_NOTFOUND, "%s: not a single file", r->dir);
    r->info.format_hint = "torch.save file (zip archive)";
    return add_one(r, r->single_file, err);
}

const index_format index_format_torchsave_file = {.name = "torch.save", .add = add_torchsave_file};

/* ------------------------------------------------------------------ HuggingFace .bin */

#define BIN_INDEX "pytorch_model.bin.index.json"
#define BIN_ONE "pytorch_model.bin"

/* The files of a directory in HuggingFace's torch.save layout: those the index json's
 * weight_map names (*map, in arena a), else the lone pytorch_model.bin.  CKPT_E_NOTFOUND:
 * neither. */
static ckpt_status bin_files(const char *dir, uint64_t max, ck_io_count *count, ck_arena *a,
                             const ck_json **map, const char ***files, size_t *n, ckpt_error *err) {
    char path[4096];
    struct stat st;
    *map = NULL;
    *files = NULL;
    *n = 0;
    snprintf(path, sizeof path, "%s/%s", dir, BIN_INDEX);
    if (stat(path, &st) == 0)
        return ck_hf_index_files(path, ".bin", max, count, a, map, files, n, err);
    snprintf(path, sizeof path, "%s/%s", dir, BIN_ONE);
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return CKPT_E_NOTFOUND; /* not this format: nothing to say (formats.c) */
    static const char *const one[] = {BIN_ONE};
    *files = malloc(sizeof *files[0]);
    if (!*files) return index_nomem(err);
    (*files)[0] = one[0];
    *n = 1;
    return CKPT_OK;
}

ck_dir_kind torch_bin_dir_probe(const char *dir, struct timespec *mtime) {
    ck_arena *a = ck_arena_new(64u << 20);
    const ck_json *map;
    const char **files = NULL;
    size_t n = 0;
    bool complete = a && bin_files(dir, 16u << 20, NULL, a, &map, &files, &n, NULL) == CKPT_OK && n;
    struct timespec newest = {0, 0};
    for (size_t i = 0; complete && i < n; i++) {
        char path[4096];
        struct stat st;
        int k = snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        complete = k > 0 && (size_t)k < sizeof path && stat(path, &st) == 0 && S_ISREG(st.st_mode);
        if (complete &&
            (st.st_mtim.tv_sec > newest.tv_sec ||
             (st.st_mtim.tv_sec == newest.tv_sec && st.st_mtim.tv_nsec > newest.tv_nsec)))
            newest = st.st_mtim;
    }
    free(files);
    ck_arena_free(a);
    if (complete && mtime) *mtime = newest;
    return complete ? CK_DIR_MARKED : CK_DIR_NONE;
}

static ckpt_status add_bin_dir(ckpt_reader *r, ckpt_error *err) {
    ck_arena *a = ck_arena_new(r->limits.max_metadata_bytes);
    if (!a) return index_nomem(err);
    const ck_json *map = NULL;
    const char **files = NULL;
    size_t n = 0;
    ckpt_status s =
        bin_files(r->dir, r->limits.max_metadata_bytes, &r->io_meta, a, &map, &files, &n, err);
    for (size_t i = 0; s == CKPT_OK && i < n; i++)
        s = add_one(r, files[i], err);
    /* every tensor the weight_map names is in the file it names (transformers fails else) */
    for (size_t i = 0; s == CKPT_OK && map && i < map->len; i++) {
        const ck_json_member *m = &map->u.members[i];
        const ckpt_entry *e = index_find(r, m->key);
        if (!e || strlen(m->key) != m->key_len)
            s = ck_fail(err, CKPT_E_FORMAT, "%s/%s: weight_map names '%.200s', which %s holds not",
                        r->dir, BIN_INDEX, m->key, m->value.u.str);
    }
    if (s == CKPT_OK) r->info.format_hint = "HuggingFace torch.save shards (pytorch_model*.bin)";
    free(files);
    ck_arena_free(a);
    return s;
}

const index_format index_format_torch_bin = {
    .name = "hf-torch-bin", .add = add_bin_dir, .probe = torch_bin_dir_probe};
