/* hf_storage.c — the index of a HuggingFace safetensors storage directory (dcp-format.md
 * §11.2; see hf_storage.h), built the way torch's HuggingFaceStorageReader.read_metadata
 * builds its Metadata: each tensor of a file one chunk at the offsets its file's
 * DCP_SHARDING_INFO gives (zeros without), a tensor's size the largest extent of its chunks.
 * The files are those model.safetensors.index.json names when there is one (as transformers
 * loads them), else every `*.safetensors` file of the directory (as torch's reader does),
 * sorted by name so the order is stable.  A chunk's bytes are used where they lie
 * (ck_loc.raw): C order, little endian.
 *
 * The headers are untrusted: each is parsed by the bounded safetensors reader, together with
 * the index they may hold at most limits.max_metadata_bytes (a file cut short in its data
 * section still lists its tensors: reads check each chunk's range, so only the cut ones
 * fail, and ckpt_reader_check_ranges names them), DCP_SHARDING_INFO and the index are strict
 * JSON, and a tensor whose files disagree (dtype, rank, missing offsets) gets a problem
 * instead of failing the open.  The index must name only plain `.safetensors` file names
 * beside it that exist and hold the tensors mapped to them, so a missing shard file is
 * reported (torch's reader ignores the index and silently loses those tensors).  Also here:
 * telling such a directory complete (ck_hf_dir_probe) and dumping its headers. */
#include "index/hf_storage.h"

#include "index/formats.h"
#include "index/metadata_files.h"
#include "torchsave/safetensors.h"
#include "util/error.h"
#include "util/source.h"
#include "util/json.h"
#include "util/strbuf.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SUFFIX ".safetensors"

static ckpt_status nomem(ckpt_error *err) {
    return ck_fail(err, CKPT_E_NOMEM, "out of memory while indexing safetensors headers");
}

static bool ends_with(const char *name, const char *suffix) {
    size_t n = strlen(name), k = strlen(suffix);
    return n > k && strcmp(name + n - k, suffix) == 0;
}

static bool has_suffix(const char *name) { return ends_with(name, SUFFIX); }

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void ck_hf_names_free(char **names, size_t count) {
    for (size_t i = 0; i < count; i++)
        free(names[i]);
    free(names);
}

ckpt_status ck_hf_list(const char *dir, char ***names, size_t *count, struct timespec *newest,
                       ckpt_error *err) {
    *names = NULL;
    *count = 0;
    if (newest) *newest = (struct timespec){0};
    DIR *d = opendir(dir);
    if (!d) return ck_fail(err, CKPT_E_IO, "%s: cannot list: %s", dir, strerror(errno));
    char **v = NULL;
    size_t n = 0, cap = 0;
    ckpt_status s = CKPT_OK;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!has_suffix(de->d_name) || !ck_safe_file_name(de->d_name)) continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, 0) != 0 || !S_ISREG(st.st_mode)) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nv = realloc(v, cap * sizeof *nv);
            if (!nv) {
                s = ck_fail(err, CKPT_E_NOMEM, "out of memory listing %s", dir);
                break;
            }
            v = nv;
        }
        if (!(v[n] = strdup(de->d_name))) {
            s = ck_fail(err, CKPT_E_NOMEM, "out of memory listing %s", dir);
            break;
        }
        n++;
        if (newest &&
            (st.st_mtim.tv_sec > newest->tv_sec ||
             (st.st_mtim.tv_sec == newest->tv_sec && st.st_mtim.tv_nsec > newest->tv_nsec)))
            *newest = st.st_mtim;
    }
    closedir(d);
    if (s != CKPT_OK) {
        ck_hf_names_free(v, n);
        return s;
    }
    if (n) qsort(v, n, sizeof *v, cmp_name);
    *names = v;
    *count = n;
    return CKPT_OK;
}

/* Reads a whole small file (at most `max` bytes) into malloc'ed memory. */
static ckpt_status slurp(const char *path, uint64_t max, ck_io_count *count, char **text,
                         size_t *len, ckpt_error *err) {
    *text = NULL;
    *len = 0;
    int fd = ck_open_regular(path, NULL);
    if (fd < 0)
        return ck_fail(err, errno == ENOENT ? CKPT_E_NOTFOUND : CKPT_E_IO, "%s: %s", path,
                       ck_open_strerror(errno));
    struct stat st;
    ckpt_status s = CKPT_OK;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        s = ck_fail(err, CKPT_E_IO, "%s: not a readable file", path);
    else if ((uint64_t)st.st_size > max)
        s = ck_fail(err, CKPT_E_LIMIT, "%s: %lld bytes exceed the metadata limit", path,
                    (long long)st.st_size);
    else if (!(*text = malloc((size_t)st.st_size + 1)))
        s = nomem(err);
    else {
        ck_source src = {.fd = fd, .len = (uint64_t)st.st_size, .name = path, .count = count};
        s = ck_source_read(&src, 0, *text, (uint64_t)st.st_size, err);
        *len = (size_t)st.st_size;
    }
    close(fd);
    if (s != CKPT_OK) {
        free(*text);
        *text = NULL;
    }
    return s;
}

/* The index json (text[0, len), read from `path`), parsed into `a`: its weight_map (an
 * object whose values are plain file names ending with `suffix`), else an error naming the
 * file. */
static ckpt_status parse_weight_map(const char *path, const char *text, size_t len,
                                    const char *suffix, ck_arena *a, const ck_json **map,
                                    ckpt_error *err) {
    const ck_json *doc = NULL, *m = NULL;
    *map = NULL;
    ckpt_status s = ck_json_parse(a, text, len, 0, &doc, err);
    if (s != CKPT_OK) {
        ck_error_prefix(err, "%s: ", path);
        return s;
    }
    if (!(m = ck_json_get(doc, "weight_map")) || m->type != CK_JSON_OBJECT)
        return ck_fail(err, CKPT_E_FORMAT, "%s: no \"weight_map\" object", path);
    for (size_t i = 0; i < m->len; i++) {
        const ck_json *v = &m->u.members[i].value;
        if (v->type != CK_JSON_STRING || strlen(v->u.str) != v->len ||
            !ck_safe_file_name(v->u.str) || !ends_with(v->u.str, suffix))
            return ck_fail(err, CKPT_E_FORMAT,
                           "%s: weight_map[\"%.200s\"] = \"%.200s\" is not the name of a "
                           "%s file beside it (path traversal refused)",
                           path, m->u.members[i].key, suffix,
                           v->type == CK_JSON_STRING ? v->u.str : "(not a string)");
    }
    *map = m;
    return CKPT_OK;
}

/* parse_weight_map of the file at path (at most max bytes); *bytes (may be NULL): its size.
 * CKPT_E_NOTFOUND when there is none. */
static ckpt_status read_weight_map(const char *path, const char *suffix, uint64_t max,
                                   ck_io_count *count, ck_arena *a, const ck_json **map,
                                   uint64_t *bytes, ckpt_error *err) {
    char *text = NULL;
    size_t len = 0;
    *map = NULL;
    CK_TRY(slurp(path, max, count, &text, &len, err));
    if (bytes) *bytes = len;
    ckpt_status s = parse_weight_map(path, text, len, suffix, a, map, err);
    free(text);
    return s;
}

/* The distinct files a weight_map names, sorted (malloc'ed array of pointers into it). */
static ckpt_status map_files(const ck_json *map, const char ***out, size_t *count,
                             ckpt_error *err) {
    const char **v = malloc((map->len ? map->len : 1) * sizeof *v);
    if (!v) return nomem(err);
    size_t n = 0;
    for (size_t i = 0; i < map->len; i++)
        v[n++] = map->u.members[i].value.u.str;
    qsort(v, n, sizeof *v, cmp_name);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!k || strcmp(v[k - 1], v[i]) != 0) v[k++] = v[i];
    *out = v;
    *count = k;
    return CKPT_OK;
}

ckpt_status ck_hf_index_files(const char *path, const char *suffix, uint64_t max,
                              ck_io_count *count, ck_arena *a, const ck_json **map,
                              const char ***files, size_t *n, ckpt_error *err) {
    *files = NULL;
    *n = 0;
    CK_TRY(read_weight_map(path, suffix, max, count, a, map, NULL, err));
    return map_files(*map, files, n, err);
}

/* The files a HuggingFace checkpoint in dir consists of: those its index json's weight_map
 * names (as transformers loads them: a hub folder may hold other *.safetensors, fp16
 * variants or a consolidated copy), else every *.safetensors file (as torch's reader takes
 * them).  CKPT_E_NOTFOUND when there is neither. */
typedef struct hf_files {
    char *index; /* the index json as read (index_len bytes), or NULL */
    size_t index_len;
    const ck_json *map;  /* its weight_map (parsed into the caller's arena), or NULL */
    char **listed;       /* without an index: the directory's *.safetensors, sorted */
    const char **mapped; /* with one: the files it names, sorted, distinct */
    size_t n;
} hf_files;

static const char *hf_file_name(const hf_files *h, size_t i) {
    return h->listed ? h->listed[i] : h->mapped[i];
}

static void hf_files_release(hf_files *h) {
    free(h->index);
    ck_hf_names_free(h->listed, h->listed ? h->n : 0);
    free(h->mapped);
    memset(h, 0, sizeof *h);
}

/* index_path: dir's index json; its size counts against max. */
static ckpt_status hf_files_find(const char *dir, const char *index_path, uint64_t max,
                                 ck_io_count *count, ck_arena *a, hf_files *h, ckpt_error *err) {
    memset(h, 0, sizeof *h);
    ckpt_error ierr = {0};
    ckpt_status s = slurp(index_path, max, count, &h->index, &h->index_len, &ierr);
    if (s == CKPT_E_NOTFOUND) {
        s = ck_hf_list(dir, &h->listed, &h->n, NULL, err);
    } else if (s == CKPT_OK) {
        s = parse_weight_map(index_path, h->index, h->index_len, SUFFIX, a, &h->map, err);
        if (s == CKPT_OK) s = map_files(h->map, &h->mapped, &h->n, err);
    } else if (err) {
        *err = ierr;
    }
    if (s == CKPT_OK && !h->n)
        s = ck_fail(err, CKPT_E_NOTFOUND,
                    "%s: no .metadata file and no *.safetensors file (not a checkpoint, or an "
                    "incomplete one)",
                    dir);
    if (s != CKPT_OK) hf_files_release(h);
    return s;
}

ck_dir_kind ck_hf_dir_probe(const char *dir, struct timespec *mtime) {
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/%s", dir, CK_HF_INDEX_JSON);
    if (n < 0 || (size_t)n >= sizeof path) return CK_DIR_NONE;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
        /* complete once the index parses (torch writes it last, in place) and every file it
         * names exists */
        ck_arena *a = ck_arena_new(64u << 20);
        const ck_json *map = NULL;
        const char **files = NULL;
        size_t nf = 0;
        bool complete =
            a && read_weight_map(path, SUFFIX, 16u << 20, NULL, a, &map, NULL, NULL) == CKPT_OK &&
            map_files(map, &files, &nf, NULL) == CKPT_OK;
        for (size_t i = 0; complete && i < nf; i++) {
            struct stat fst;
            n = snprintf(path, sizeof path, "%s/%s", dir, files[i]);
            complete =
                n > 0 && (size_t)n < sizeof path && stat(path, &fst) == 0 && S_ISREG(fst.st_mode);
        }
        free(files);
        ck_arena_free(a);
        if (complete && mtime) *mtime = st.st_mtim;
        return complete ? CK_DIR_MARKED : CK_DIR_NONE;
    }
    char **names = NULL;
    size_t count = 0;
    struct timespec newest;
    if (ck_hf_list(dir, &names, &count, &newest, NULL) != CKPT_OK) return CK_DIR_NONE;
    ck_hf_names_free(names, count);
    if (count && mtime) *mtime = newest;
    return count ? CK_DIR_UNMARKED : CK_DIR_NONE;
}

/* ------------------------------------------------------------------ the index */

/* The file being read: its parsed header lives only while its tensors are taken. */
typedef struct hf_file {
    const char *name;
    int32_t file_id;
    ts_safetensors *st;
    ck_arena *scratch;       /* DCP_SHARDING_INFO's parse */
    const ck_json *sharding; /* DCP_SHARDING_INFO (an object), or NULL */
    const ck_json **info;    /* with it: sharding[name of tensor i] for each tensor i, or NULL
                                  (found once per member: a member lookup is a linear scan) */
} hf_file;

/* A tensor of a file, kept once its header is freed: what its chunk needs. */
typedef struct hf_rec {
    uint32_t entry;
    int32_t file_id;
    const int64_t *box; /* offsets, then sizes (ndim each), in the reader's arena */
    uint64_t numel, offset, length;
} hf_rec;

typedef struct hf_build {
    ckpt_reader *r;
    hf_rec *recs;
    size_t nrecs, recs_cap;
    uint64_t budget; /* header and index bytes still allowed */
    bool sharded;    /* some file has DCP_SHARDING_INFO */
} hf_build;

static void close_file(hf_file *f) {
    ts_safetensors_free(f->st);
    ck_arena_free(f->scratch);
    f->st = NULL;
    f->scratch = NULL;
    f->sharding = NULL;
    f->info = NULL;
}

/* Opens and checks one file's header. */
static ckpt_status open_file(hf_build *b, hf_file *f, ckpt_error *err) {
    ckpt_reader *r = b->r;
    const char *problem = NULL;
    f->file_id = ck_files_intern(r, f->name, &problem);
    if (f->file_id < 0)
        return problem ? ck_fail(err, CKPT_E_FORMAT, "%s/%s: %s", r->dir, f->name, problem)
                       : nomem(err);
    ckpt_error ferr = {0};
    int fd = ck_files_fd(r, (uint32_t)f->file_id, &ferr);
    if (fd < 0) {
        if (err) *err = ferr;
        return ferr.code;
    }
    struct stat st;
    if (fstat(fd, &st) != 0)
        return ck_fail(err, CKPT_E_IO, "%s/%s: %s", r->dir, f->name, strerror(errno));
    ck_source src = {
        .fd = fd, .base = 0, .len = (uint64_t)st.st_size, .name = f->name, .count = &r->io_meta};
    uint64_t max = b->budget < TS_SAFETENSORS_MAX_HEADER ? b->budget : TS_SAFETENSORS_MAX_HEADER;
    ckpt_status s = ts_safetensors_open_header(&src, 0, max ? max : 1, &f->st, err);
    if (s != CKPT_OK) {
        ck_error_prefix(err, "%s/%s: ", r->dir, f->name);
        return s;
    }
    b->budget -= ts_safetensors_header_len(f->st);
    r->info.metadata_bytes += 8 + ts_safetensors_header_len(f->st);
    size_t nt = ts_safetensors_num_tensors(f->st);
    for (size_t i = 0; i < nt; i++) {
        const ts_st_tensor *t = ts_safetensors_tensor(f->st, i);
        if (strlen(t->name) != t->name_len)
            return ck_fail(err, CKPT_E_FORMAT, "%s/%s: a tensor name holds a NUL character", r->dir,
                           f->name);
    }
    const char *info = ts_safetensors_metadata(f->st, "DCP_SHARDING_INFO");
    if (!info) return CKPT_OK;
    b->sharded = true;
    /* bounded like the header it comes from: a parsed node per 2 bytes at most */
    if (!(f->scratch = ck_arena_new(64 * (uint64_t)strlen(info) + (1u << 20)))) return nomem(err);
    s = ck_json_parse(f->scratch, info, strlen(info), 0, &f->sharding, err);
    if (s == CKPT_OK && f->sharding->type != CK_JSON_OBJECT)
        s = ck_fail(err, CKPT_E_FORMAT, "not a JSON object");
    if (s != CKPT_OK) {
        ck_error_prefix(err, "%s/%s: __metadata__.DCP_SHARDING_INFO: ", r->dir, f->name);
        return s;
    }
    f->info = ck_arena_alloc(f->scratch, (nt ? nt : 1) * sizeof *f->info);
    if (!f->info) return nomem(err);
    memset(f->info, 0, (nt ? nt : 1) * sizeof *f->info);
    const ts_st_tensor *t0 = ts_safetensors_tensor(f->st, 0);
    for (size_t i = 0; i < f->sharding->len; i++) { /* the last of equal names wins */
        const ck_json_member *m = &f->sharding->u.members[i];
        const ts_st_tensor *t =
            strlen(m->key) == m->key_len ? ts_safetensors_find(f->st, m->key) : NULL;
        if (t) f->info[t - t0] = &m->value;
    }
    return CKPT_OK;
}

/* The chunk offsets of tensor t of file f: DCP_SHARDING_INFO[name].saved_offsets, or zeros.
 * Returns false when they are missing or malformed. */
static bool chunk_offsets(const hf_file *f, const ts_st_tensor *t, int64_t *off) {
    memset(off, 0, sizeof(int64_t) * (size_t)(t->ndim ? t->ndim : 1));
    if (!f->sharding) return true;
    const ts_st_tensor *t0 = ts_safetensors_tensor(f->st, 0);
    const ck_json *so = ck_json_get(f->info[t - t0], "saved_offsets");
    if (!so || so->type != CK_JSON_ARRAY || so->len != (size_t)t->ndim) return false;
    for (int d = 0; d < t->ndim; d++) {
        const ck_json *x = &so->u.items[d];
        if (x->type != CK_JSON_NUMBER || !x->is_int || x->u.num.i < 0 ||
            x->u.num.i > INT64_MAX - t->shape[d])
            return false;
        off[d] = x->u.num.i;
    }
    return true;
}

/* Takes every tensor of the open file f: its entry (made on first sight, in file order, then
 * header order), and a record for its chunk unless the tensor disagrees with its entry. */
static ckpt_status take_tensors(hf_build *b, const hf_file *f, ckpt_error *err) {
    ckpt_reader *r = b->r;
    for (size_t k = 0; k < ts_safetensors_num_tensors(f->st); k++) {
        const ts_st_tensor *t = ts_safetensors_tensor(f->st, k);
        ckpt_entry *e = index_find(r, t->name);
        if (!e) {
            if (!(e = index_new_entry(r, t->name))) return nomem(err);
            e->kind = CKPT_ENTRY_TENSOR;
            e->dtype = t->dtype;
            e->ndim = t->ndim;
            if (t->dtype == CKPT_DTYPE_INVALID)
                e->problem = index_problemf(r->arena, "safetensors dtype '%s' is not supported",
                                            t->dtype_name);
        }
        if (t->ndim != e->ndim || t->dtype != e->dtype) {
            if (!e->problem)
                e->problem = index_problemf(
                    r->arena, "%s stores it as %s of rank %d, another file as %s of rank %d",
                    f->name, t->dtype_name, t->ndim, ckpt_dtype_name(e->dtype), e->ndim);
            r->unmatched_storage++;
            continue;
        }
        int64_t *box =
            ck_arena_alloc(r->arena, sizeof(int64_t) * 2 * (size_t)(e->ndim ? e->ndim : 1));
        if (!box) return nomem(err);
        if (!chunk_offsets(f, t, box)) {
            if (!e->problem)
                e->problem = index_problemf(r->arena,
                                            "%s: __metadata__.DCP_SHARDING_INFO gives no valid "
                                            "saved_offsets for it",
                                            f->name);
            r->unmatched_storage++;
            continue;
        }
        if (e->ndim) memcpy(box + e->ndim, t->shape, sizeof(int64_t) * (size_t)e->ndim);
        if (b->nrecs == b->recs_cap) {
            size_t cap = b->recs_cap ? b->recs_cap * 2 : 1024;
            hf_rec *m = realloc(b->recs, cap * sizeof *m);
            if (!m) return nomem(err);
            b->recs = m;
            b->recs_cap = cap;
        }
        b->recs[b->nrecs++] = (hf_rec){.entry = (uint32_t)e->index,
                                       .file_id = f->file_id,
                                       .box = box,
                                       .numel = t->numel,
                                       .offset = t->data_offset,
                                       .length = t->size};
        e->nchunks++; /* counted here, filled by add_chunks */
    }
    return CKPT_OK;
}

static bool box_eq(const void *ctx, uint64_t v) {
    const void *const *c = ctx;
    const ckpt_reader *r = c[0];
    const ckpt_entry *e = &r->entries[v >> 32];
    return (v >> 32) == *(const uint64_t *)c[2] &&
           (e->ndim == 0 || memcmp(e->chunks[v & 0xffffffffu].offsets, c[1],
                                   (size_t)e->ndim * sizeof(int64_t)) == 0);
}

/* The entries' chunks from the records, in order; a box seen before is dropped (the first
 * file wins). */
static ckpt_status add_chunks(hf_build *b, ckpt_error *err) {
    ckpt_reader *r = b->r;
    for (size_t i = 0; i < r->nentries; i++) {
        ckpt_entry *e = &r->entries[i];
        e->chunks = ck_arena_alloc(r->arena, (e->nchunks ? e->nchunks : 1) * sizeof *e->chunks);
        int64_t *shape =
            ck_arena_alloc(r->arena, sizeof(int64_t) * (size_t)(e->ndim ? e->ndim : 1));
        if (!e->chunks || !shape) return nomem(err);
        e->shape = e->ndim ? shape : NULL;
        e->nchunks = 0;
    }
    ck_htab boxes;
    if (!ck_htab_init(&boxes, b->nrecs)) return nomem(err);
    ckpt_status s = CKPT_OK;
    for (size_t i = 0; i < b->nrecs && s == CKPT_OK; i++) {
        const hf_rec *x = &b->recs[i];
        ckpt_entry *e = &r->entries[x->entry];
        uint64_t eidx = e->index, v;
        uint64_t h = ck_hash_bytes(x->box, sizeof(int64_t) * (size_t)e->ndim, eidx);
        const void *ctx[3] = {r, x->box, &eidx};
        if (ck_htab_find(&boxes, h, box_eq, ctx, &v)) {
            r->unmatched_storage++;
            continue;
        }
        ck_chunk *c = &e->chunks[e->nchunks];
        memset(c, 0, sizeof *c);
        c->offsets = x->box;
        c->sizes = x->box + e->ndim;
        c->numel = x->numel;
        c->loc.file_id = -1;
        if (x->numel) {
            c->loc.file_id = x->file_id;
            c->loc.raw = true;
            c->loc.offset = x->offset;
            c->loc.length = x->length;
            r->info.stored_bytes += x->length;
        }
        if (!ck_htab_insert(&boxes, h, (eidx << 32) | e->nchunks))
            s = nomem(err);
        else
            e->nchunks++;
    }
    ck_htab_release(&boxes);
    return s;
}

/* A tensor's size: the largest extent of its chunks (as torch's reader computes it). */
static void settle_shape(ckpt_reader *r, ckpt_entry *e) {
    int64_t *shape = (int64_t *)e->shape;
    for (int d = 0; d < e->ndim; d++) {
        shape[d] = 0;
        for (size_t k = 0; k < e->nchunks; k++)
            if (e->chunks[k].offsets[d] + e->chunks[k].sizes[d] > shape[d])
                shape[d] = e->chunks[k].offsets[d] + e->chunks[k].sizes[d];
    }
    const char *bad = NULL;
    e->numel = index_numel(r->arena, shape, e->ndim, &bad);
    if (bad && !e->problem) e->problem = bad; /* the first defect found stays */
    e->nbytes = index_nbytes(e->dtype, e->numel);
}

static int cmp_member_file(const void *a, const void *b) {
    const ck_json_member *x = *(const ck_json_member *const *)a;
    const ck_json_member *y = *(const ck_json_member *const *)b;
    return strcmp(x->value.u.str, y->value.u.str);
}

static ckpt_status hf_index_add(ckpt_reader *r, ckpt_error *err) {
    hf_build b = {.r = r, .budget = r->limits.max_metadata_bytes};
    hf_files h;
    const ck_json_member **by_file = NULL; /* the weight_map's members, sorted by file */
    size_t next_member = 0;
    hf_file f = {0};
    char index_path[4096];
    snprintf(index_path, sizeof index_path, "%s/%s", r->dir, CK_HF_INDEX_JSON);
    ck_arena *scratch = ck_arena_new(b.budget); /* the index json's parse */
    if (!scratch) return nomem(err);
    ckpt_status s = hf_files_find(r->dir, index_path, b.budget, &r->io_meta, scratch, &h, err);
    const ck_json *map = h.map;
    if (s == CKPT_OK && map) {
        b.budget -= h.index_len;
        r->info.metadata_bytes += h.index_len;
        if (!(by_file = malloc((map->len ? map->len : 1) * sizeof *by_file))) s = nomem(err);
        for (size_t i = 0; s == CKPT_OK && i < map->len; i++)
            by_file[i] = &map->u.members[i];
        if (s == CKPT_OK) qsort(by_file, map->len, sizeof *by_file, cmp_member_file);
    }
    /* one file at a time: only its header is held, the rest becomes records */
    for (size_t i = 0; s == CKPT_OK && i < h.n; i++) {
        f = (hf_file){.name = hf_file_name(&h, i)};
        s = open_file(&b, &f, err);
        if (s == CKPT_E_NOTFOUND && map)
            ck_fail(err, s, "%s: weight_map names %s, which is missing (an incomplete checkpoint)",
                    index_path, f.name);
        if (s == CKPT_OK) s = take_tensors(&b, &f, err);
        /* the weight_map's tensors of this file are in it (files and members are sorted) */
        while (s == CKPT_OK && map && next_member < map->len &&
               strcmp(by_file[next_member]->value.u.str, f.name) == 0) {
            const ck_json_member *m = by_file[next_member++];
            if (strlen(m->key) != m->key_len || !ts_safetensors_find(f.st, m->key))
                s = ck_fail(err, CKPT_E_FORMAT,
                            "%s: weight_map puts '%.200s' in %.200s, which does not hold it",
                            index_path, m->key, f.name);
        }
        close_file(&f);
    }
    if (s == CKPT_OK) s = add_chunks(&b, err);
    if (s == CKPT_OK) {
        for (size_t i = 0; i < r->nentries; i++)
            settle_shape(r, &r->entries[i]);
        r->info.hf_storage = true;
        r->info.format_hint = map ? "HuggingFace safetensors storage (model.safetensors.index.json)"
                              : b.sharded
                                  ? "HuggingFace safetensors storage, sharded (DCP_SHARDING_INFO)"
                                  : "HuggingFace safetensors storage";
    }
    close_file(&f);
    free(b.recs);
    free(by_file);
    hf_files_release(&h);
    ck_arena_free(scratch);
    return s;
}

/* ------------------------------------------------------------------ dump */

/* Reads the header of the safetensors file at path (8 + N bytes, N <= max) into *buf and
 * checks it with the safetensors reader: the bytes checked are the bytes shown. */
static ckpt_status read_header(const char *path, uint64_t max, uint8_t **buf, uint64_t *n,
                               ckpt_error *err) {
    *buf = NULL;
    int fd = ck_open_regular(path, NULL);
    if (fd < 0) return ck_fail(err, CKPT_E_IO, "%s: %s", path, ck_open_strerror(errno));
    struct stat st;
    uint8_t head[8];
    ckpt_status s = CKPT_OK;
    ck_source src = {.fd = fd, .name = path};
    if (fstat(fd, &st) != 0)
        s = ck_fail(err, CKPT_E_IO, "%s: %s", path, strerror(errno));
    else if ((src.len = (uint64_t)st.st_size) < 8)
        s = ck_fail(err, CKPT_E_RANGE, "%s: %llu bytes: no room for a safetensors header", path,
                    (unsigned long long)src.len);
    else
        s = ck_source_read(&src, 0, head, 8, err);
    *n = s == CKPT_OK ? ts_safetensors_len_prefix(head) : 0;
    if (s == CKPT_OK && *n > max)
        s = ck_fail(err, CKPT_E_LIMIT,
                    "%s: not a safetensors file (its 8-byte header length exceeds the limit)",
                    path);
    if (s == CKPT_OK && !(*buf = malloc((size_t)*n + 8))) s = nomem(err);
    if (s == CKPT_OK) s = ck_source_read(&src, 0, *buf, *n + 8, err);
    close(fd);
    if (s == CKPT_OK) {
        ck_source mem = {.fd = -1, .mem = *buf, .len = *n + 8, .name = path};
        ts_safetensors *sf = NULL;
        s = ts_safetensors_open_header(&mem, 0, max, &sf, err);
        if (s != CKPT_OK) ck_error_prefix(err, "%s: ", path);
        ts_safetensors_free(sf);
    }
    if (s != CKPT_OK) {
        free(*buf);
        *buf = NULL;
    }
    return s;
}

static void add_trimmed(ck_strbuf *sb, const char *text, size_t len) {
    while (len && (text[len - 1] == ' ' || text[len - 1] == '\n' || text[len - 1] == '\r' ||
                   text[len - 1] == '\t'))
        len--;
    ck_strbuf_add(sb, text, len);
}

ckpt_status ck_hf_dump_json(const char *dir, const ckpt_limits *l, char **out, ckpt_error *err) {
    *out = NULL;
    uint64_t budget = l->max_metadata_bytes;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, CK_HF_INDEX_JSON);
    ck_strbuf sb = CK_STRBUF_INIT;
    ck_arena *scratch = ck_arena_new(budget);
    if (!scratch) return nomem(err);
    hf_files h; /* the files hf_index_add reads */
    ckpt_status s = hf_files_find(dir, path, budget, NULL, scratch, &h, err);
    budget -= h.index_len;
    ck_strbuf_addc(&sb, '{');
    for (size_t i = 0; s == CKPT_OK && i < h.n; i++) {
        const char *name = hf_file_name(&h, i);
        char fpath[4096];
        snprintf(fpath, sizeof fpath, "%s/%s", dir, name);
        uint8_t *hdr = NULL;
        uint64_t hl = 0;
        uint64_t max = budget < TS_SAFETENSORS_MAX_HEADER ? budget : TS_SAFETENSORS_MAX_HEADER;
        s = read_header(fpath, max, &hdr, &hl, err);
        if (s != CKPT_OK) break;
        budget -= hl;
        if (i) ck_strbuf_addc(&sb, ',');
        ck_json_escape(&sb, name, strlen(name));
        ck_strbuf_addc(&sb, ':');
        add_trimmed(&sb, (const char *)hdr + 8, (size_t)hl);
        free(hdr);
    }
    if (s == CKPT_OK && h.index) {
        ck_strbuf_addf(&sb, ",\"%s\":", CK_HF_INDEX_JSON);
        add_trimmed(&sb, h.index, h.index_len);
    }
    ck_strbuf_addc(&sb, '}');
    if (s == CKPT_OK) s = ck_strbuf_status(&sb, "metadata dump", err);
    if (s == CKPT_OK && !(*out = ck_strbuf_detach(&sb, NULL))) s = nomem(err);
    if (s != CKPT_OK) ck_strbuf_release(&sb);
    hf_files_release(&h);
    ck_arena_free(scratch);
    return s;
}

/* Data files "shard-<rank>-model-<i>-of-<n>.safetensors" (torch's sharded HF storage). */
static long long hf_file_rank(const char *name) {
    if (strncmp(name, "shard-", 6) != 0 || name[6] < '0' || name[6] > '9') return -1;
    char *end;
    long long rank = strtoll(name + 6, &end, 10);
    return *end == '-' ? rank : -1;
}

const index_format index_format_hf = {.name = "hf-safetensors",
                                      .add = hf_index_add,
                                      .file_rank = hf_file_rank,
                                      .probe = ck_hf_dir_probe};
