/* reader.c — opening a checkpoint directory (its format's walker builds the index:
 * formats.c), and the public accessors of readers and entries. */
#include "index/reader_i.h"

#include "index/dcp.h"
#include "index/formats.h"
#include "index/image.h"
#include "index/metadata_files.h"

#include "util/error.h"
#include "util/iotap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static ckpt_status reader_new(const char *dir, const ckpt_limits *limits, ckpt_reader **out,
                              ckpt_error *err) {
    ckpt_reader *r = calloc(1, sizeof *r);
    *out = r;
    if (!r) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    pthread_mutex_init(&r->lock, NULL);
    ck_limits_resolve(&r->limits, limits);
    r->dir = strdup(dir);
    r->arena = ck_arena_new(0);
    if (!r->dir || !r->arena || !ck_htab_init(&r->by_key, 1024) ||
        !ck_htab_init(&r->file_by_name, 64))
        return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    return CKPT_OK;
}

ckpt_status ck_reader_open_buffer(const char *dir, const uint8_t *buf, size_t len,
                                  const ckpt_limits *limits, unsigned flags, ckpt_reader **out,
                                  ckpt_error *err) {
    ckpt_reader *r = NULL;
    *out = NULL;
    ckpt_status s = reader_new(dir, limits, &r, err);
    if (s == CKPT_OK)
        s = dcp_add_buffer(r, "(metadata buffer)", buf, len, flags & CKPT_OPEN_LOCKSTEP, err);
    if (s == CKPT_OK) s = index_complete(r, &index_format_dcp, err);
    if (s != CKPT_OK) {
        ckpt_reader_free(r);
        return s;
    }
    *out = r;
    return CKPT_OK;
}

/* ckpt_reader_open, with the metadata reads of the index build through `tap` (or not). */
static ckpt_status reader_open(const char *dir, const ckpt_open_options *opts, ck_io_tap *tap,
                               ckpt_reader **out, ckpt_error *err) {
    *out = NULL;
    if (!dir) return ck_fail(err, CKPT_E_INVAL, "no checkpoint directory given");
    struct stat st;
    if (stat(dir, &st) < 0)
        return ck_fail(err, errno == ENOENT ? CKPT_E_NOTFOUND : CKPT_E_IO, "%s: %s", dir,
                       strerror(errno));
    bool file = S_ISREG(st.st_mode);
    if (!S_ISDIR(st.st_mode) && !file)
        return ck_fail(err, CKPT_E_INVAL, "%s: not a directory or a torch.save file", dir);
    char *parent = NULL;
    const char *base = NULL;
    if (file) { /* a torch.save file: its directory holds it */
        const char *slash = strrchr(dir, '/');
        base = slash ? slash + 1 : dir;
        parent = slash ? strndup(dir, slash == dir ? 1 : (size_t)(slash - dir)) : strdup(".");
        if (!parent) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    }
    ckpt_reader *r = NULL;
    ckpt_status s = reader_new(file ? parent : dir, opts ? opts->limits : NULL, &r, err);
    free(parent);
    if (s != CKPT_OK) goto fail;
    if (file && !(r->single_file = strdup(base))) {
        s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
        goto fail;
    }
    r->io_meta.tap = tap; /* (sources copied into kept items see it cleared after the build) */
    s = file ? index_build_file(r, err) : index_build(r, err);
    r->io_meta.tap = NULL;
    if (s != CKPT_OK) goto fail;
    *out = r;
    return CKPT_OK;
fail:
    ckpt_reader_free(r);
    return s;
}

ckpt_status ckpt_reader_open(const char *dir, const ckpt_open_options *opts, ckpt_reader **out,
                             ckpt_error *err) {
    return reader_open(dir, opts, NULL, out, err);
}

ckpt_status index_reader_open_tapped(const char *dir, const ckpt_open_options *opts, ck_io_tap *tap,
                                     ckpt_reader **out, ckpt_error *err) {
    return reader_open(dir, opts, tap, out, err);
}

ckpt_status index_reader_open_image(const char *dir, const ckpt_open_options *opts,
                                    const uint8_t *blob, size_t len, const ckpt_reader_stats *read,
                                    ckpt_reader **out, ckpt_error *err) {
    *out = NULL;
    if (!dir) return ck_fail(err, CKPT_E_INVAL, "no checkpoint directory given");
    struct stat st;
    if (stat(dir, &st) < 0)
        return ck_fail(err, errno == ENOENT ? CKPT_E_NOTFOUND : CKPT_E_IO, "%s: %s", dir,
                       strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return ck_fail(err, CKPT_E_INVAL,
                       "%s: not a directory (the metadata read elsewhere is "
                       "a directory's)",
                       dir);
    index_image img;
    CK_TRY(index_image_parse(blob, len, &img, err));
    ckpt_reader *r = NULL;
    ckpt_status s = reader_new(dir, opts ? opts->limits : NULL, &r, err);
    /* the same checkpoint here: every file of the image, with its size (a stat, not a read) */
    for (size_t i = 0; s == CKPT_OK && i < img.n; i++) {
        char path[4096];
        int n = snprintf(path, sizeof path, "%s/%.*s", dir, (int)img.files[i].name_len,
                         img.files[i].name);
        if (n < 0 || (size_t)n >= sizeof path)
            s = ck_fail(err, CKPT_E_INVAL, "%s: path too long", dir);
        else if (stat(path, &st) < 0)
            s = ck_fail(err, errno == ENOENT ? CKPT_E_NOTFOUND : CKPT_E_IO, "%s: cannot open: %s",
                        path, strerror(errno));
        else if ((uint64_t)st.st_size != img.files[i].len)
            s = ck_fail(err, CKPT_E_INVAL,
                        "%s: %lld bytes here, %llu in the metadata read by another process: "
                        "ranks see different checkpoint metadata",
                        path, (long long)st.st_size, (unsigned long long)img.files[i].len);
        else if (img.files[i].len > r->limits.max_metadata_bytes)
            s = ck_fail(err, CKPT_E_LIMIT, "%s: %llu bytes exceed the metadata size limit of %llu",
                        path, (unsigned long long)img.files[i].len,
                        (unsigned long long)r->limits.max_metadata_bytes);
    }
    if (s == CKPT_OK) {
        r->image = &img;
        s = index_build(r, err);
        r->image = NULL;
    }
    free(img.files);
    if (s != CKPT_OK) {
        ckpt_reader_free(r);
        return s;
    }
    if (read) {
        atomic_fetch_add(&r->io_meta.bytes, read->bytes_read_metadata);
        atomic_fetch_add(&r->io_meta.calls, read->preads_metadata);
    }
    *out = r;
    return CKPT_OK;
}

void ckpt_reader_free(ckpt_reader *r) {
    if (!r) return;
    for (ck_chunk *c = r->lru_head; c; c = c->res->lru_next) /* every decoded item */
        ts_item_free(c->res->item);
    for (size_t i = 0; i < r->nowned; i++)
        ts_item_free(r->owned_items[i]);
    free(r->owned_items);
    ck_files_close_all(r);
    ck_htab_release(&r->by_key);
    ck_htab_release(&r->by_path);
    ck_htab_release(&r->file_by_name);
    pthread_mutex_destroy(&r->lock);
    ck_arena_free(r->arena);
    free(r->entries);
    free(r->files);
    free(r->dir);
    free(r->single_file);
    free(r);
}

const char *ckpt_reader_dir(const ckpt_reader *r) { return r->dir; }

void ckpt_reader_get_info(const ckpt_reader *r, ckpt_reader_info *info) { *info = r->info; }

void ckpt_reader_get_stats(const ckpt_reader *r, ckpt_reader_stats *stats) {
    ckpt_reader *w = (ckpt_reader *)r; /* atomic loads only */
    *stats = (ckpt_reader_stats){
        .bytes_read = atomic_load_explicit(&w->io_data.bytes, memory_order_relaxed),
        .preads = atomic_load_explicit(&w->io_data.calls, memory_order_relaxed),
        .bytes_read_metadata = atomic_load_explicit(&w->io_meta.bytes, memory_order_relaxed),
        .preads_metadata = atomic_load_explicit(&w->io_meta.calls, memory_order_relaxed),
    };
}

void ckpt_reader_add_read(ckpt_reader *r, uint64_t bytes) {
    if (r && bytes) ck_io_count_add(&r->io_data, bytes);
}

size_t ckpt_reader_num_entries(const ckpt_reader *r) { return r->nentries; }

const ckpt_entry *ckpt_reader_entry(const ckpt_reader *r, size_t index) {
    return index < r->nentries ? &r->entries[index] : NULL;
}

static bool by_key_eq(const void *ctx, uint64_t v) {
    const void *const *c = ctx;
    return strcmp(((const ckpt_reader *)c[0])->entries[v].key, (const char *)c[1]) == 0;
}

static bool by_path_eq(const void *ctx, uint64_t v) {
    const void *const *c = ctx;
    return strcmp(((const ckpt_reader *)c[0])->entries[v].path, (const char *)c[1]) == 0;
}

const ckpt_entry *ckpt_reader_find_key(const ckpt_reader *r, const char *key) {
    if (!r || !key) return NULL;
    uint64_t h = ck_hash_bytes(key, strlen(key), 0), v;
    const void *ctx[2] = {r, key};
    return ck_htab_find(&r->by_key, h, by_key_eq, ctx, &v) ? &r->entries[v] : NULL;
}

const ckpt_entry *ckpt_reader_find_path(const ckpt_reader *r, const char *path) {
    if (!r || !path) return NULL;
    uint64_t h = ck_hash_bytes(path, strlen(path), 0), v;
    const void *ctx[2] = {r, path};
    return ck_htab_find(&r->by_path, h, by_path_eq, ctx, &v) ? &r->entries[v] : NULL;
}

const ckpt_entry *ckpt_reader_find(const ckpt_reader *r, const char *key_or_path) {
    const ckpt_entry *e = ckpt_reader_find_key(r, key_or_path);
    return e ? e : ckpt_reader_find_path(r, key_or_path);
}

const char *ckpt_entry_key(const ckpt_entry *e) { return e->key; }
const char *ckpt_entry_path(const ckpt_entry *e) { return e->path; }
size_t ckpt_entry_path_len(const ckpt_entry *e) { return e->nelems; }
const char *ckpt_entry_path_elem(const ckpt_entry *e, size_t i) {
    return i < e->nelems ? e->elems[i] : NULL;
}
bool ckpt_entry_path_elem_is_int(const ckpt_entry *e, size_t i) {
    return i < e->nelems && e->elem_int && e->elem_int[i] == 1;
}
bool ckpt_entry_path_elem_is_int_key(const ckpt_entry *e, size_t i) {
    return i < e->nelems && e->elem_int && e->elem_int[i] == 2;
}
ckpt_entry_kind ckpt_entry_kind_of(const ckpt_entry *e) { return e->kind; }

const char *ckpt_entry_under(const ckpt_entry *e, const char *prefix) {
    size_t n = prefix ? strlen(prefix) : 0;
    while (n && prefix[n - 1] == '/')
        n--;
    if (n == 0) return e->path;
    if (strncmp(e->path, prefix, n) != 0) return NULL;
    if (e->path[n] == '/') return e->path + n + 1;
    return e->path[n] == '\0' ? e->path + n : NULL;
}

bool ckpt_entry_matches(const ckpt_entry *e, const char *prefix) {
    size_t n = prefix ? strlen(prefix) : 0;
    while (n && prefix[n - 1] == '/')
        n--;
    if (n == 0) return false;
    if (ckpt_entry_under(e, prefix)) return true;
    n = strlen(prefix);
    return strncmp(e->key, prefix, n) == 0 && (e->key[n] == '\0' || e->key[n] == '.');
}

bool ckpt_entry_at_root(const ckpt_entry *e) { return e->nelems <= 1; }
size_t ckpt_entry_index(const ckpt_entry *e) { return e->index; }
ckpt_dtype ckpt_entry_dtype(const ckpt_entry *e) { return e->dtype; }
int ckpt_entry_ndim(const ckpt_entry *e) { return e->ndim; }
const int64_t *ckpt_entry_shape(const ckpt_entry *e) { return e->shape; }
uint64_t ckpt_entry_numel(const ckpt_entry *e) {
    return e->kind == CKPT_ENTRY_TENSOR ? e->numel : 0;
}
uint64_t ckpt_entry_nbytes(const ckpt_entry *e) { return e->nbytes; }
size_t ckpt_entry_num_chunks(const ckpt_entry *e) { return e->nchunks; }
const char *ckpt_entry_problem(const ckpt_entry *e) { return e->problem; }

static void loc_to_info(const ck_loc *loc, ckpt_chunk_info *out) {
    out->file_id = loc->file_id;
    out->file_offset = loc->offset;
    out->length = loc->length;
    out->transforms = loc->transforms;
    out->problem = loc->problem;
}

ckpt_status ckpt_entry_chunk(const ckpt_entry *e, size_t i, ckpt_chunk_info *out) {
    memset(out, 0, sizeof *out);
    if (e->kind == CKPT_ENTRY_OBJECT) {
        if (i != 0) return CKPT_E_INVAL;
        loc_to_info(&e->loc, out);
        return CKPT_OK;
    }
    if (i >= e->nchunks) return CKPT_E_INVAL;
    const ck_chunk *c = &e->chunks[i];
    out->offsets = c->offsets;
    out->sizes = c->sizes;
    out->numel = c->numel;
    loc_to_info(&c->loc, out);
    return CKPT_OK;
}
