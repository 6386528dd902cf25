/* reader.c — opening a checkpoint directory: finding and reading the metadata file(s),
 * building the index, and the public accessors of readers and entries. */
#include "index/reader_i.h"

#include "index/hf_storage.h"
#include "index/metadata_files.h"
#include "index/metadata_overlap.h"

#include "util/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Whether the index of the next metadata file may be walked while it is decoded: with a
 * second thread allowed, into an index still empty (what the walk finds then does not
 * depend on earlier files). */
static bool may_overlap(const ckpt_reader *r) {
    return r->limits.index_threads > 1 && r->nentries == 0 && r->nfiles == 0;
}

/* Decodes a metadata pickle (from the file `path`, or buf[0, len) when buf is set) and adds
 * it to the index, walking it while it is decoded when may_overlap. */
static ckpt_status add_metadata(ckpt_reader *r, const char *path, const uint8_t *buf, size_t len,
                                bool only_file, bool lockstep, ckpt_error *err) {
    ckpt_overlap *ov = may_overlap(r) ? ckpt_overlap_new(r, path, only_file, lockstep) : NULL;
    const pk_watch *watch = ov ? ckpt_overlap_watch(ov) : NULL;
    pk_doc *doc = NULL;
    ckpt_status s;
    if (buf) {
        pk_limits lim = ckpt_metadata_pk_limits(&r->limits, len);
        pk_input in = {.buf = buf, .len = len};
        s = pk_decode_watched(&in, &lim, watch, &doc, err);
        if (s != CKPT_OK) ckpt_error_prefix(err, "%s: ", path);
    } else {
        s = ckpt_metadata_decode_file_watched(path, &r->limits, watch, &doc, &len, err);
    }
    bool complete = false;
    r->index_overlapped = false;
    r->index_split_batches = 0;
    if (ov) {
        ckpt_error ov_err;
        ckpt_status os = ckpt_overlap_finish(ov, doc, &complete, &ov_err);
        if (s == CKPT_OK && os != CKPT_OK) {
            s = os;
            if (err) *err = ov_err;
        }
    }
    if (s == CKPT_OK) {
        r->info.metadata_bytes += len;
        r->info.num_metadata_files++;
        if (!complete) s = ckpt_index_add_metadata(r, path, doc, err);
        if (s == CKPT_OK) s = ckpt_mcore_note(r, path, pk_doc_root(doc), err);
        r->index_overlapped = complete;
    }
    pk_doc_free(doc);
    return s;
}

/* only_file: no other metadata file will be added. */
static ckpt_status add_file(ckpt_reader *r, const char *name, bool only_file, ckpt_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", r->dir, name);
    return add_metadata(r, path, NULL, 0, only_file, false, err);
}

/* Rank-local metadata: `__<rank>.metadata` files, merged in rank order; without any, the
 * headers of HuggingFace safetensors storage. */
static ckpt_status add_rank_local(ckpt_reader *r, ckpt_error *err) {
    long long *ranks = NULL;
    size_t n = 0;
    CKPT_TRY(ckpt_metadata_list_ranks(r->dir, &ranks, &n, err));
    ckpt_status s = CKPT_OK;
    if (!n) {
        free(ranks);
        return ckpt_index_add_hf(r, err);
    }
    for (size_t i = 0; i < n && s == CKPT_OK; i++) {
        char name[64];
        snprintf(name, sizeof name, "__%lld.metadata", ranks[i]);
        s = add_file(r, name, n == 1, err);
    }
    free(ranks);
    r->info.rank_local_metadata = n > 0;
    return s;
}

static ckpt_status reader_new(const char *dir, const ckpt_limits *limits, ckpt_reader **out,
                              ckpt_error *err) {
    ckpt_reader *r = calloc(1, sizeof *r);
    *out = r;
    if (!r) return ckpt_fail(err, CKPT_E_NOMEM, "out of memory");
    pthread_mutex_init(&r->lock, NULL);
    ckpt_limits_resolve(&r->limits, limits);
    r->dir = strdup(dir);
    r->arena = ckpt_arena_new(0);
    if (!r->dir || !r->arena || !ckpt_htab_init(&r->by_key, 1024) ||
        !ckpt_htab_init(&r->file_by_name, 64))
        return ckpt_fail(err, CKPT_E_NOMEM, "out of memory");
    return CKPT_OK;
}

ckpt_status ckpt_reader_reset_index(ckpt_reader *r, ckpt_error *err) {
    r->nentries = 0;
    r->nfiles = 0;
    r->paths_done = 0;
    ckpt_htab_release(&r->by_path);
    ckpt_htab_release(&r->by_key);
    ckpt_htab_release(&r->file_by_name);
    r->info.stored_bytes = 0;
    r->info.has_planner_data = false;
    r->unmatched_storage = 0;
    if (!ckpt_htab_init(&r->by_key, 1024) || !ckpt_htab_init(&r->file_by_name, 64))
        return ckpt_fail(err, CKPT_E_NOMEM, "out of memory");
    return CKPT_OK;
}

ckpt_status ckpt_reader_open_buffer(const char *dir, const uint8_t *buf, size_t len,
                                    const ckpt_limits *limits, unsigned flags, ckpt_reader **out,
                                    ckpt_error *err) {
    ckpt_reader *r = NULL;
    *out = NULL;
    ckpt_status s = reader_new(dir, limits, &r, err);
    if (s == CKPT_OK)
        s = add_metadata(r, "(metadata buffer)", buf, len, true, flags & CKPT_OPEN_LOCKSTEP, err);
    if (s == CKPT_OK) s = ckpt_index_finish(r, err);
    if (s != CKPT_OK) {
        ckpt_reader_free(r);
        return s;
    }
    *out = r;
    return CKPT_OK;
}

ckpt_status ckpt_reader_open(const char *dir, const ckpt_open_options *opts, ckpt_reader **out,
                             ckpt_error *err) {
    *out = NULL;
    if (!dir) return ckpt_fail(err, CKPT_E_INVAL, "no checkpoint directory given");
    struct stat st;
    if (stat(dir, &st) < 0)
        return ckpt_fail(err, errno == ENOENT ? CKPT_E_NOTFOUND : CKPT_E_IO, "%s: %s", dir,
                         strerror(errno));
    if (!S_ISDIR(st.st_mode)) return ckpt_fail(err, CKPT_E_INVAL, "%s: not a directory", dir);
    ckpt_reader *r = NULL;
    ckpt_status s = reader_new(dir, opts ? opts->limits : NULL, &r, err);
    if (s != CKPT_OK) goto fail;
    s = add_file(r, ".metadata", true, err);
    if (s == CKPT_E_NOTFOUND) s = add_rank_local(r, err);
    if (s != CKPT_OK) goto fail;
    CKPT_TRY_GOTO(s, ckpt_index_finish(r, err), fail);
    *out = r;
    return CKPT_OK;
fail:
    ckpt_reader_free(r);
    return s;
}

void ckpt_reader_free(ckpt_reader *r) {
    if (!r) return;
    for (ckpt_chunk *c = r->lru_head; c; c = c->res->lru_next) /* every decoded item */
        ts_item_free(c->res->item);
    ckpt_files_close_all(r);
    ckpt_htab_release(&r->by_key);
    ckpt_htab_release(&r->by_path);
    ckpt_htab_release(&r->file_by_name);
    pthread_mutex_destroy(&r->lock);
    ckpt_arena_free(r->arena);
    free(r->entries);
    free(r->files);
    free(r->dir);
    free(r);
}

const char *ckpt_reader_dir(const ckpt_reader *r) { return r->dir; }

void ckpt_reader_get_info(const ckpt_reader *r, ckpt_reader_info *info) { *info = r->info; }

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
    uint64_t h = ckpt_hash_bytes(key, strlen(key), 0), v;
    const void *ctx[2] = {r, key};
    return ckpt_htab_find(&r->by_key, h, by_key_eq, ctx, &v) ? &r->entries[v] : NULL;
}

const ckpt_entry *ckpt_reader_find_path(const ckpt_reader *r, const char *path) {
    if (!r || !path) return NULL;
    uint64_t h = ckpt_hash_bytes(path, strlen(path), 0), v;
    const void *ctx[2] = {r, path};
    return ckpt_htab_find(&r->by_path, h, by_path_eq, ctx, &v) ? &r->entries[v] : NULL;
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
    return i < e->nelems && e->elem_int && e->elem_int[i];
}
ckpt_entry_kind ckpt_entry_kind_of(const ckpt_entry *e) { return e->kind; }
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

static void loc_to_info(const ckpt_loc *loc, ckpt_chunk_info *out) {
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
    const ckpt_chunk *c = &e->chunks[i];
    out->offsets = c->offsets;
    out->sizes = c->sizes;
    out->numel = c->numel;
    loc_to_info(&c->loc, out);
    return CKPT_OK;
}
