/* torch_checkpointing.c — checkpoints written by torch-checkpointing (meta-pytorch's
 * torch_checkpointing, 0.1.x; docs/dcp-support.md "torch-checkpointing"; the walker's other
 * files: tc.h): one file per top-level item and rank, `<item>_<rank>.pt` written by
 * torch.save by default or the file an ItemSpec's LayoutInfo names in one of the release's
 * four SerializationFormats (torch.save, safetensors, JSON, raw bytes), and, when an item
 * declares a resharder, a `metadata.pkl` that rank 0 writes last: a pickle of plain dicts,
 * lists, tuples, strings and ints (DistributedMetadata.to_dict, version "2.0")
 *
 *   {"metadata": {item: {"nested_path_to_metadata": {json path: [group, ...]},
 *                        "rank_to_layout_info": {rank: None | layout}}},
 *    "world_size": N, "version": "2.0"}
 *   group  = {"sharding_metadata": {"type": "DTensorShardingMetadata", "data": {"global_shape",
 *             "dtype", "stride", "mesh_spec": {"mesh_shape", "mesh_data", ...}, "placements":
 *             [{"type": "Shard", "dim"} | {"type": "Replicate"} | {"type": "StridedShard",
 *             "dim", "split_factor"}]}}, "ranks": (r, ...)}
 *   layout = {"file_path": name, "serialization_format": {"type": "TorchSerialization" |
 *             "SafetensorsSerialization" (+ "metadata") | "JsonSerialization" (+ "cls") |
 *             "RawSerialization"}}
 *
 * decoded with the data-only decoder (nothing is called).  Each tensor the metadata names is
 * one entry of its global shape, its chunks from every rank's file (tc_shard.c).  Everything
 * else of an item — values, tensors the metadata does not name — is read from the first rank's
 * file, as a load on one rank sees it.  Items the metadata does not name (no resharder: JSON
 * and raw items never hold a tensor, so they never are) and checkpoints without metadata.pkl
 * are read from their rank-0 files, found by name: `<item>_0.pt` (torch.save),
 * `<item>_0.safetensors`, `<item>_0.json`, `<item>_0` with any other extension or none (raw
 * bytes). */
#include "index/formats.h"
#include "index/metadata_files.h"
#include "index/tc.h"

#include "util/error.h"
#include "util/source.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* `<item>_<rank>[.<ext>]`: the rank (-1: not such a name), *item_len the item key's length,
 * *fmt the format its extension says. */
static long long name_rank(const char *name, size_t *item_len, tc_fmt *fmt) {
    size_t n = strlen(name);
    if (!n || name[0] == '.') return -1;
    const char *dot = strrchr(name, '.');
    size_t end = dot ? (size_t)(dot - name) : n, i = end;
    const char *ext = dot ? dot + 1 : "";
    while (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9')
        i--;
    if (i == end || i < 2 || name[i - 1] != '_' || end - i > 9) return -1; /* an item key */
    if (name[i] == '0' && end - i > 1) return -1;
    if (item_len) *item_len = i - 1;
    if (fmt)
        *fmt = strcmp(ext, "pt") == 0            ? TC_TORCH
               : strcmp(ext, "safetensors") == 0 ? TC_SAFETENSORS
               : strcmp(ext, "json") == 0        ? TC_JSON
                                                 : TC_RAW;
    return strtoll(name + i, NULL, 10);
}

static long long tc_file_rank(const char *name) { return name_rank(name, NULL, NULL); }

/* ------------------------------------------------------------------ whose metadata.pkl */

/* Whether dir's metadata.pkl is torch-checkpointing's: a regular file whose pickle starts as
 * pickle.dumps(DistributedMetadata.to_dict()) does in protocols 2-5 — a dict whose first key
 * is "metadata" (PROTO, FRAME, EMPTY_DICT, a memo store, MARK, the key).  Another tool's
 * metadata.pkl beside HuggingFace safetensors files (or anything else) leaves the directory
 * to the other formats (docs/dcp-support.md "Which format a directory is in").  *st (may be
 * NULL): the file's attributes when it is ours. */
static bool tc_metadata_ours(const char *dir, struct stat *st) {
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/%s", dir, TC_METADATA);
    if (n < 0 || (size_t)n >= sizeof path) return false;
    struct stat fst;
    int fd = ck_open_regular(path, &fst);
    if (fd < 0) return false;
    uint8_t b[64];
    ssize_t got = pread(fd, b, sizeof b, 0);
    close(fd);
    size_t len = got > 0 ? (size_t)got : 0, i = 0;
    if (i + 2 <= len && b[i] == 0x80 && b[i + 1] >= 2 && b[i + 1] <= 5) i += 2; /* PROTO */
    if (i + 9 <= len && b[i] == 0x95) i += 9;                                   /* FRAME */
    if (i >= len || b[i++] != '}') return false;                                /* EMPTY_DICT */
    if (i < len && b[i] == 0x94)
        i += 1; /* MEMOIZE */
    else if (i < len && b[i] == 'q')
        i += 2; /* BINPUT */
    else if (i < len && b[i] == 'r')
        i += 5;                                  /* LONG_BINPUT */
    if (i >= len || b[i++] != '(') return false; /* MARK */
    static const char key[] = "metadata";
    size_t klen = sizeof key - 1;
    if (i + 2 + klen <= len && b[i] == 0x8c && b[i + 1] == klen) /* SHORT_BINUNICODE */
        i += 2;
    else if (i + 5 + klen <= len && b[i] == 'X' && b[i + 1] == klen && !b[i + 2] && !b[i + 3] &&
             !b[i + 4]) /* BINUNICODE */
        i += 5;
    else
        return false;
    if (memcmp(b + i, key, klen) != 0) return false;
    if (st) *st = fst;
    return true;
}

/* ------------------------------------------------------------------ torch.save files */

static ckpt_status tc_leaf(void *ctx, const index_elem *elems, size_t n, const pk_value *v,
                           ckpt_error *err) {
    tc *w = ctx;
    ckpt_reader *r = w->r;
    ck_strbuf_reset(&w->key);
    for (size_t i = 0; i < n; i++) {
        if (i) ck_strbuf_addc(&w->key, '.');
        ck_strbuf_add(&w->key, elems[i].s, elems[i].len);
    }
    if (ck_strbuf_status(&w->key, "a key", err) != CKPT_OK) return CKPT_E_NOMEM;
    const ckpt_entry *e = index_find(r, ck_strbuf_cstr(&w->key));
    const pk_value *global = NULL, *local = ts_is_tensor_node(v) ? v : ts_dtensor_local(v, &global);
    tc_pending *p = e && local ? tc_pending_of(w, e->key) : NULL;
    if (p) {
        ckpt_entry *pe = &r->entries[p->entry];
        ts_tensor_view t;
        ckpt_error terr = {0};
        if (pe->problem) return CKPT_OK;
        if (ts_tensor_view_of(w->it, local, &t, &terr) != CKPT_OK) {
            if (terr.code == CKPT_E_NOMEM) return index_nomem(err);
            pe->problem = index_problemf(r->arena, "%s", terr.message);
            return CKPT_OK;
        }
        tc_local l = {.dtype = t.dtype, .ndim = t.ndim, .shape = t.shape, .it = w->it, .view = &t};
        return tc_add_shard(w, p, &l, err);
    }
    if (e || !w->first_file) return CKPT_OK;
    if (local && local != v) { /* a DTensor the metadata does not name: whole, or not read */
        ts_tensor_view t;
        int64_t g[CKPT_MAX_NDIM];
        size_t gn = 0;
        bool whole = pk_as_int_seq(global, g, CKPT_MAX_NDIM, &gn) &&
                     ts_tensor_view_of(w->it, local, &t, NULL) == CKPT_OK && gn == (size_t)t.ndim;
        for (size_t d = 0; whole && d < gn; d++)
            whole = g[d] == t.shape[d];
        if (whole) v = local; /* else: a shard without metadata, reported as unreadable */
    }
    return index_ts_add_leaf(r, w->it, w->file_id, elems, n, v, &w->key, err);
}

/* Walks torch.save file `name` (rank w->rank of w->item) below the item key. */
static ckpt_status walk_torch(tc *w, const char *name, ckpt_error *err) {
    CK_TRY(index_ts_open(w->r, name, &w->it, &w->file_id, &w->file_path, err));
    index_elem top = {w->item, strlen(w->item), false, false};
    return index_ts_walk(w->r, w->it, w->file_id, &top, 1, w->pend ? tc_leaf : NULL, w, err);
}

/* Rank `rank`'s file `name` of w->item in format fmt: every rank's for the formats that hold
 * tensors, rank 0's alone for JSON and raw bytes (what a load on one rank reads). */
static ckpt_status walk_rank_file(tc *w, const char *name, tc_fmt fmt, long long rank,
                                  ckpt_error *err) {
    w->rank = rank;
    w->first_file = rank == 0;
    switch (fmt) {
    case TC_TORCH: return walk_torch(w, name, err);
    case TC_SAFETENSORS: return tc_walk_safetensors(w, name, err);
    case TC_JSON: return rank == 0 ? tc_add_json(w, name, err) : CKPT_OK;
    case TC_RAW: return rank == 0 ? tc_add_raw(w, name, err) : CKPT_OK;
    }
    return CKPT_OK;
}

/* ------------------------------------------------------------------ items metadata.pkl names */

/* The file rank `rank` of an item wrote and its format: its layout's file_path and
 * serialization_format, or the default `<item>_<rank>.pt`.  NULL with err set when the
 * layout cannot be read. */
static const char *rank_file(tc *w, const pk_value *layouts, long long rank, char *buf, size_t size,
                             tc_fmt *fmt, ckpt_error *err) {
    const pk_value *lay = NULL;
    int64_t k;
    *fmt = TC_TORCH;
    if (layouts && layouts->type == PK_DICT && (size_t)rank < layouts->u.dict.len &&
        pk_as_int(layouts->u.dict.keys[rank], &k) && k == rank) /* the usual order */
        lay = layouts->u.dict.vals[rank];
    else
        for (size_t i = 0; layouts && layouts->type == PK_DICT && i < layouts->u.dict.len; i++)
            if (pk_as_int(layouts->u.dict.keys[i], &k) && k == rank) lay = layouts->u.dict.vals[i];
    if (!lay || lay->type == PK_NONE) {
        int n = snprintf(buf, size, "%s_%lld.pt", w->item, rank);
        if (n < 0 || (size_t)n >= size) {
            ck_fail(err, CKPT_E_FORMAT, "%s: item '%.200s': file name too long", w->md_path,
                    w->item);
            return NULL;
        }
        return buf;
    }
    const char *file = pk_as_str(pk_get(lay, "file_path"));
    const char *type = pk_as_str(pk_get(pk_get(lay, "serialization_format"), "type"));
    if (!file) {
        ck_fail(err, CKPT_E_FORMAT, "%s: item '%.200s' rank %lld: layout without file_path",
                w->md_path, w->item, rank);
        return NULL;
    }
    static const struct {
        const char *type;
        tc_fmt fmt;
    } types[] = {{"TorchSerialization", TC_TORCH},
                 {"SafetensorsSerialization", TC_SAFETENSORS},
                 {"JsonSerialization", TC_JSON},
                 {"RawSerialization", TC_RAW}};
    for (size_t i = 0; type && i < sizeof types / sizeof types[0]; i++)
        if (strcmp(type, types[i].type) == 0) {
            *fmt = types[i].fmt;
            return file;
        }
    ck_fail(err, CKPT_E_UNSUPPORTED,
            "%s: item '%.200s' rank %lld: %.200s stored as '%.60s', which torch-checkpointing "
            "0.1 does not write: not read",
            w->md_path, w->item, rank, file, type ? type : "(no type)");
    return NULL;
}

/* The file names named items claim (so that no `<item>_0` scan takes one for an item of its
 * own): a malloc'ed vector of malloc'ed names, sorted once complete. */
typedef struct claimed {
    char **v;
    size_t n, cap;
} claimed;

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static ckpt_status claim(claimed *c, const char *name, ckpt_error *err) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        char **m = realloc(c->v, cap * sizeof *m);
        if (!m) return index_nomem(err);
        c->v = m;
        c->cap = cap;
    }
    if (!(c->v[c->n] = strdup(name))) return index_nomem(err);
    c->n++;
    return CKPT_OK;
}

static bool is_claimed(const claimed *c, const char *name) {
    return c && c->n && bsearch(&name, c->v, c->n, sizeof *c->v, cmp_str);
}

static void claimed_free(claimed *c) {
    for (size_t i = 0; i < c->n; i++)
        free(c->v[i]);
    free(c->v);
}

/* An item metadata.pkl names: its entries, then every rank's file. */
static ckpt_status add_named_item(tc *w, const pk_value *md, long long world, ck_arena *tmp,
                                  claimed *cl, ckpt_error *err) {
    ckpt_status s = tc_named_entries(w, pk_get(md, "nested_path_to_metadata"), tmp, err);
    const pk_value *layouts = pk_get(md, "rank_to_layout_info");
    if (s == CKPT_OK &&
        (!layouts || layouts->type != PK_DICT || layouts->u.dict.len != (size_t)world))
        s = ck_fail(err, CKPT_E_FORMAT,
                    "%s: item '%.200s': rank_to_layout_info does not give all %lld ranks",
                    w->md_path, w->item, world);
    for (long long rank = 0; s == CKPT_OK && rank < world; rank++) {
        char buf[512];
        tc_fmt fmt;
        const char *name = rank_file(w, layouts, rank, buf, sizeof buf, &fmt, err);
        s = name ? claim(cl, name, err) : (err && err->code ? err->code : CKPT_E_FORMAT);
        if (s == CKPT_OK && strchr(name, '/') && ck_safe_rel_path(name)) {
            /* a file in a subdirectory (a LayoutInfo file_path such as "rank_0/model.pt": the
             * writer makes the directories); a path leaving the directory is refused when it
             * is opened (ck_files_intern: path traversal) */
            const char *problem = NULL;
            if (ck_files_intern_sub(w->r, name, &problem) < 0)
                s = problem ? ck_fail(err, CKPT_E_FORMAT, "%s/%s: %s", w->r->dir, name, problem)
                            : index_nomem(err);
        }
        if (s == CKPT_OK) s = walk_rank_file(w, name, fmt, rank, err);
    }
    if (s == CKPT_OK) s = tc_settle(w, err);
    tc_drop_pending(w);
    return s;
}

/* ------------------------------------------------------------------ items found by name */

typedef struct unnamed {
    char *name;
    tc_fmt fmt;
} unnamed;

static int cmp_unnamed(const void *a, const void *b) {
    return strcmp(((const unnamed *)a)->name, ((const unnamed *)b)->name);
}

/* The `<item>_0[.ext]` files of dir (only_torch: `<item>_0.pt` only) whose item `md_items`
 * (may be NULL) does not name and that `cl` (may be NULL) does not claim, sorted (malloc'ed
 * names). */
static ckpt_status unnamed_files(const char *dir, const pk_value *md_items, const claimed *cl,
                                 bool only_torch, unnamed **out, size_t *n, ckpt_error *err) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return ck_fail(err, CKPT_E_IO, "%s: cannot list: %s", dir, strerror(errno));
    unnamed *v = NULL;
    size_t cap = 0;
    ckpt_status s = CKPT_OK;
    struct dirent *de;
    while (s == CKPT_OK && (de = readdir(d))) {
        size_t ilen;
        tc_fmt fmt;
        if (name_rank(de->d_name, &ilen, &fmt) != 0 || (only_torch && fmt != TC_TORCH)) continue;
        if (strcmp(de->d_name, TC_METADATA) == 0 || is_claimed(cl, de->d_name)) continue;
        struct stat st; /* a directory named like an item file (`rank_0/`) is none */
        if (de->d_type == DT_DIR ||
            ((de->d_type == DT_UNKNOWN || de->d_type == DT_LNK) &&
             fstatat(dirfd(d), de->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode)))
            continue;
        char item[256];
        if (ilen >= sizeof item) continue;
        memcpy(item, de->d_name, ilen);
        item[ilen] = 0;
        if (md_items && pk_get(md_items, item)) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            unnamed *m = realloc(v, cap * sizeof *m);
            if (!m) {
                s = index_nomem(err);
                break;
            }
            v = m;
        }
        if (!(v[*n].name = strdup(de->d_name)))
            s = index_nomem(err);
        else
            v[(*n)++].fmt = fmt;
    }
    closedir(d);
    if (*n) qsort(v, *n, sizeof *v, cmp_unnamed);
    *out = v;
    return s;
}

static void unnamed_free(unnamed *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(v[i].name);
    free(v);
}

/* Items without metadata: rank 0's file of each, as a load on one rank reads it. */
static ckpt_status add_unnamed(tc *w, const pk_value *md_items, const claimed *cl,
                               ckpt_error *err) {
    unnamed *v;
    size_t n;
    ckpt_status s = unnamed_files(w->r->dir, md_items, cl, false, &v, &n, err);
    char item[256];
    for (size_t i = 0; s == CKPT_OK && i < n; i++) {
        size_t len;
        name_rank(v[i].name, &len, NULL);
        memcpy(item, v[i].name, len);
        item[len] = 0;
        w->item = item;
        s = walk_rank_file(w, v[i].name, v[i].fmt, 0, err);
    }
    unnamed_free(v, n);
    return s;
}

ck_dir_kind tc_dir_probe(const char *dir, struct timespec *mtime) {
    char path[4096];
    struct stat st;
    if (tc_metadata_ours(dir, &st)) {
        if (mtime) *mtime = st.st_mtim;
        return CK_DIR_MARKED;
    }
    /* another tool's metadata.pkl beside `<item>_0.pt` files: not an unmarked save (a broken
     * one, which opening reports) */
    int n = snprintf(path, sizeof path, "%s/%s", dir, TC_METADATA);
    if (n < 0 || (size_t)n >= sizeof path || stat(path, &st) == 0) return CK_DIR_NONE;
    /* without metadata.pkl (no resharder declared) nothing marks a save as complete: its
     * `<item>_0.pt` files make it an unmarked one, dated by the newest of them */
    unnamed *v;
    size_t count;
    ck_dir_kind k = CK_DIR_NONE;
    if (unnamed_files(dir, NULL, NULL, true, &v, &count, NULL) != CKPT_OK) count = 0;
    for (size_t i = 0; i < count; i++) {
        n = snprintf(path, sizeof path, "%s/%s", dir, v[i].name);
        if (n > 0 && (size_t)n < sizeof path && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (mtime &&
                (k == CK_DIR_NONE || st.st_mtim.tv_sec > mtime->tv_sec ||
                 (st.st_mtim.tv_sec == mtime->tv_sec && st.st_mtim.tv_nsec > mtime->tv_nsec)))
                *mtime = st.st_mtim;
            k = CK_DIR_UNMARKED;
        }
    }
    unnamed_free(v, count);
    return k;
}

/* ------------------------------------------------------------------ the two formats */

/* Without metadata.pkl (no resharder declared): `<item>_0.pt` files make it one; the items
 * in the other formats are read beside them.  (A directory of safetensors files alone is
 * HuggingFace storage's, which comes first.) */
static ckpt_status tc_add_unmarked(ckpt_reader *r, ckpt_error *err) {
    char path[4096];
    struct stat st;
    int pn = snprintf(path, sizeof path, "%s/%s", r->dir, TC_METADATA);
    if (pn < 0 || (size_t)pn >= sizeof path || stat(path, &st) == 0) return CKPT_E_NOTFOUND;
    unnamed *v;
    size_t n;
    ckpt_status s = unnamed_files(r->dir, NULL, NULL, true, &v, &n, NULL);
    unnamed_free(v, n);
    if (s != CKPT_OK || n == 0) return CKPT_E_NOTFOUND;
    tc w = {.r = r};
    ck_strbuf_init(&w.key, 0);
    r->info.format_hint = "torch-checkpointing (no metadata.pkl: rank 0's files)";
    s = add_unnamed(&w, NULL, NULL, err);
    ck_strbuf_release(&w.key);
    return s;
}

static ckpt_status tc_add(ckpt_reader *r, ckpt_error *err) {
    char path[4096];
    struct stat st;
    int pn = snprintf(path, sizeof path, "%s/%s", r->dir, TC_METADATA);
    if (pn < 0 || (size_t)pn >= sizeof path || stat(path, &st) != 0) return CKPT_E_NOTFOUND;
    if (!tc_metadata_ours(r->dir, NULL)) { /* another tool's file beside another format's */
        if (index_format_hf.probe(r->dir, NULL) != CK_DIR_NONE ||
            index_format_torch_bin.probe(r->dir, NULL) != CK_DIR_NONE)
            return CKPT_E_NOTFOUND;
        return ck_fail(err, CKPT_E_FORMAT,
                       "%s: not torch-checkpointing's metadata (a pickled dict whose first key "
                       "is 'metadata'), and no other format's files are beside it",
                       path);
    }
    tc w = {.r = r};
    ck_strbuf_init(&w.key, 0);
    char *md_path = ck_arena_strndup(r->arena, path, (size_t)pn);
    if (!md_path) return index_nomem(err);
    w.md_path = md_path;
    pk_doc *doc = NULL;
    size_t len = 0;
    ckpt_status s =
        ck_metadata_decode_file_watched(path, &r->limits, NULL, &r->io_meta, &doc, &len, err);
    ck_arena *tmp = s == CKPT_OK ? ck_arena_new(r->limits.max_metadata_bytes) : NULL;
    if (s == CKPT_OK && !tmp) s = index_nomem(err);
    const pk_value *root = doc ? pk_doc_root(doc) : NULL;
    const pk_value *items = NULL;
    int64_t world = 0;
    if (s == CKPT_OK) {
        r->info.metadata_bytes += len;
        const char *version = pk_as_str(pk_get(root, "version"));
        items = pk_get(root, "metadata");
        if (!root || root->type != PK_DICT)
            s = ck_fail(err, CKPT_E_FORMAT, "%s: not a torch-checkpointing metadata dict (a %s)",
                        md_path, root ? pk_type_name((pk_type)root->type) : "nothing");
        else if (!version || strcmp(version, "2.0") != 0)
            s = ck_fail(err, CKPT_E_UNSUPPORTED,
                        "%s: metadata version '%.40s' is not read (only \"2.0\", which "
                        "torch-checkpointing 0.1.0 and 0.1.1 write)",
                        md_path, version ? version : "1.0");
        else if (!pk_as_int(pk_get(root, "world_size"), &world) || world < 1 ||
                 world > TC_MAX_WORLD)
            s = ck_fail(err, CKPT_E_FORMAT, "%s: world_size is not an int in 1..%u", md_path,
                        TC_MAX_WORLD);
        else if (!items || items->type != PK_DICT)
            s = ck_fail(err, CKPT_E_FORMAT, "%s: 'metadata' is not a dict of items", md_path);
    }
    if (s == CKPT_OK) {
        r->info.format_hint = "torch-checkpointing (metadata.pkl)";
        r->info.num_metadata_files = 1;
    }
    claimed cl = {0};
    for (size_t i = 0; s == CKPT_OK && i < items->u.dict.len; i++) {
        w.item = pk_as_str(items->u.dict.keys[i]);
        if (!w.item || !*w.item || strlen(w.item) != items->u.dict.keys[i]->u.str.len)
            s = ck_fail(err, CKPT_E_FORMAT, "%s: item %zu's key is not a string", md_path, i);
        else
            s = add_named_item(&w, items->u.dict.vals[i], world, tmp, &cl, err);
    }
    if (cl.n) qsort(cl.v, cl.n, sizeof *cl.v, cmp_str);
    if (s == CKPT_OK) s = add_unnamed(&w, items, &cl, err);
    if (s == CKPT_E_NOTFOUND) { /* a file metadata.pkl names is missing: this format's, broken
                                   (not "another format's": formats.c would go on) */
        s = CKPT_E_IO;
        if (err) err->code = s;
    }
    claimed_free(&cl);
    tc_drop_pending(&w);
    ck_strbuf_release(&w.key);
    ck_arena_free(tmp);
    pk_doc_free(doc);
    return s;
}

/* The probes of the two formats: metadata.pkl (before HuggingFace storage's), `<item>_0.pt`
 * files without it (after the others). */
static ck_dir_kind tc_probe_marked(const char *dir, struct timespec *mtime) {
    return tc_metadata_ours(dir, NULL) ? tc_dir_probe(dir, mtime) : CK_DIR_NONE;
}

static ck_dir_kind tc_probe_unmarked(const char *dir, struct timespec *mtime) {
    struct timespec t;
    ck_dir_kind k = tc_dir_probe(dir, &t);
    if (k != CK_DIR_UNMARKED) return CK_DIR_NONE;
    if (mtime) *mtime = t;
    return k;
}

const index_format index_format_torch_checkpointing = {.name = "torch-checkpointing",
                                                       .add = tc_add,
                                                       .file_rank = tc_file_rank,
                                                       .probe = tc_probe_marked};
const index_format index_format_torch_checkpointing_unmarked = {.name = "torch-checkpointing",
                                                                .add = tc_add_unmarked,
                                                                .file_rank = tc_file_rank,
                                                                .probe = tc_probe_unmarked};
