/* metadata_walk.c — turns a decoded `.metadata` pickle (Metadata / MCoreMetadata, any torch
 * version) into the reader's index: entries, chunk boxes and their storage locations.
 * Nothing from the pickle is trusted: every field is type-checked, and defects of a single
 * entry are recorded on it (readable later as an error) instead of failing the whole open. */
#include "index/builder.h"

#include "index/metadata_files.h"
#include "index/metadata_walk.h"

#include "pickle/pickle.h"
#include "util/error.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FILE_CACHE_BITS 6

struct ck_walk {
    ckpt_reader *r;
    const char *file;
    ck_arena *arena;     /* where walk_tensor allocates: r->arena, or a worker's own */
    ck_htab chunk_index; /* (entry, offsets) -> entry<<32 | chunk, built on first miss */
    bool chunk_index_built;
    /* relative_path string node -> file id: the decoder shares equal strings, so the few
     * file names of a checkpoint are mostly the same few nodes (a miss just interns again) */
    struct {
        const char *rel;
        int32_t id;
    } file_cache[1u << FILE_CACHE_BITS];
    /* the fields read from every tensor, chunk, storage index and storage info */
    struct {
        pk_key_cache size, properties, chunks;                      /* TensorStorageMetadata */
        pk_key_cache offsets, sizes;                                /* ChunkStorageMetadata */
        pk_key_cache fqn, offset, index;                            /* MetadataIndex */
        pk_key_cache relative_path, item_offset, length, transform; /* _StorageInfo */
    } keys;
    /* state_dict_metadata items of entries made before them, for ck_walk_sdm_end */
    struct deferred_item {
        const char *key;
        const pk_value *val;
    } * deferred;
    size_t ndeferred, deferred_cap;
    size_t pd_guess; /* planner_data: the entry after the last one found */
    /* storage_data: the last fqn string node, its entry, the entry after it */
    const char *sd_last_fqn;
    ckpt_entry *sd_last_e;
    size_t sd_next;
};
typedef struct ck_walk walk;

static char *astr(ckpt_reader *r, const char *s) {
    return ck_arena_strndup(r->arena, s, strlen(s));
}

static const char *dtype_name_of(const pk_value *props) {
    const pk_value *st = props && props->type == PK_OBJECT ? props->u.obj.state : NULL;
    const pk_value *dt = NULL;
    if (st && (st->type == PK_TUPLE || st->type == PK_LIST))
        dt = pk_item(st, 0);
    else if (st && st->type == PK_DICT)
        dt = pk_get(st, "dtype");
    if (!dt && props && props->type == PK_OBJECT) dt = pk_item(props->u.obj.args, 0);
    return dt && dt->type == PK_GLOBAL ? dt->u.global.name : NULL;
}

static bool boxes_equal(const int64_t *a, const int64_t *b, int ndim) {
    return ndim == 0 || memcmp(a, b, (size_t)ndim * sizeof *a) == 0;
}

/* Fills the tensor description of a TensorStorageMetadata node into `e` (new entry) or
 * appends its chunks (entry seen in an earlier rank-local metadata file). */
static ckpt_status walk_tensor(walk *w, ckpt_entry *e, bool merging, const pk_value *v,
                               ckpt_error *err) {
    int64_t shape[CKPT_MAX_NDIM];
    size_t ndim = 0;
    if (!pk_as_int_seq(pk_get_cached(v, "size", &w->keys.size), shape, CKPT_MAX_NDIM, &ndim)) {
        e->problem = index_problemf(w->arena, "tensor size is missing or malformed");
        return CKPT_OK;
    }
    if (!merging) {
        e->kind = CKPT_ENTRY_TENSOR;
        const char *dn = dtype_name_of(pk_get_cached(v, "properties", &w->keys.properties));
        e->dtype = ckpt_dtype_from_name(dn);
        if (e->dtype == CKPT_DTYPE_INVALID)
            e->problem = index_problemf(w->arena, "unknown or missing dtype '%s'", dn ? dn : "?");
        e->ndim = (int)ndim;
        int64_t *s = ck_arena_alloc(w->arena, (ndim ? ndim : 1) * sizeof *s);
        if (!s) return index_nomem(err);
        memcpy(s, shape, ndim * sizeof *s);
        e->shape = ndim ? s : NULL;
        const char *bad = NULL;
        e->numel = index_numel(w->arena, shape, (int)ndim, &bad);
        if (bad) e->problem = bad;
        e->nbytes = index_nbytes(e->dtype, e->numel);
    } else if ((int)ndim != e->ndim || memcmp(shape, e->shape, ndim * sizeof *shape) != 0) {
        e->problem = index_problemf(w->arena, "rank-local metadata files disagree on the shape");
        return CKPT_OK;
    }

    const pk_value *chunks = pk_get_cached(v, "chunks", &w->keys.chunks);
    if (!chunks || (chunks->type != PK_LIST && chunks->type != PK_TUPLE)) {
        e->problem = index_problemf(w->arena, "tensor has no chunk list");
        return CKPT_OK;
    }
    size_t n = pk_len(chunks);
    size_t old = e->nchunks;
    ck_chunk *arr =
        ck_arena_grow(w->arena, e->chunks, old * sizeof *arr, (old + n + 1) * sizeof *arr);
    if (!arr) return index_nomem(err);
    e->chunks = arr;
    int64_t *pool = ck_arena_alloc(w->arena, (n * 2 * ndim + 1) * sizeof *pool);
    if (!pool) return index_nomem(err);
    for (size_t i = 0; i < n; i++) {
        const pk_value *c = pk_item(chunks, i);
        int64_t *off = pool + i * 2 * ndim, *sz = off + ndim;
        size_t n1 = 0, n2 = 0;
        if (!pk_as_int_seq(pk_get_cached(c, "offsets", &w->keys.offsets), off, ndim ? ndim : 1,
                           &n1) ||
            !pk_as_int_seq(pk_get_cached(c, "sizes", &w->keys.sizes), sz, ndim ? ndim : 1, &n2) ||
            n1 != ndim || n2 != ndim) {
            e->problem = index_problemf(
                w->arena, "chunk %zu: offsets/sizes missing or not of rank %zu", i, ndim);
            continue;
        }
        uint64_t numel = 1;
        bool inside = true;
        for (size_t d = 0; d < ndim; d++) {
            if (off[d] < 0 || sz[d] < 0 || off[d] > shape[d] || sz[d] > shape[d] - off[d])
                inside = false;
            numel *= (uint64_t)(sz[d] < 0 ? 0 : sz[d]);
        }
        if (!inside) {
            e->problem = index_problemf(w->arena, "chunk %zu lies outside the tensor's shape", i);
            continue;
        }
        if (merging) { /* rank-local merge: drop boxes already present */
            bool dup = false;
            for (size_t k = 0; k < e->nchunks && !dup; k++)
                dup = boxes_equal(e->chunks[k].offsets, off, e->ndim);
            if (dup) continue;
        }
        ck_chunk *ch = &e->chunks[e->nchunks++];
        memset(ch, 0, sizeof *ch);
        ch->offsets = off;
        ch->sizes = sz;
        ch->numel = numel;
        ch->loc.file_id = -1;
        ch->loc.problem = numel ? "no storage_data entry for this chunk" : NULL;
    }
    if (w->chunk_index_built) { /* keep the lazily built index complete */
        for (size_t k = old; k < e->nchunks; k++) {
            uint64_t h = ck_hash_bytes(e->chunks[k].offsets, (size_t)e->ndim * 8, e->index);
            if (!ck_htab_insert(&w->chunk_index, h, ((uint64_t)e->index << 32) | k))
                return index_nomem(err);
        }
    }
    return CKPT_OK;
}

/* Tensors of a big state_dict_metadata are walked by several threads: the entries are made
 * first (in order, on this thread), then workers take blocks of new tensor entries, each
 * allocating from an arena of its own that the reader's arena adopts afterwards.  Items that
 * touch an entry made earlier (rank-local merges, repeated keys) are walked after them, in
 * order, on this thread, so the index is the same as a walk in order on one thread. */
#define PARALLEL_MIN 4096u /* fewer new tensors are walked on this thread */
#define PARALLEL_BLOCK 256u
#define PARALLEL_MAX 16u

typedef struct sdm_job {
    const walk *base;
    const pk_value *const *val; /* the TensorStorageMetadata of each new tensor... */
    const size_t *entry;        /* ...and its entry */
    size_t n;
    _Atomic size_t next; /* first item of the next block to take */
    atomic_bool failed;  /* a worker failed: the others stop */
} sdm_job;

typedef struct sdm_worker {
    sdm_job *job;
    pthread_t thread;
    bool started;
    ck_arena *arena;
    ckpt_status status;
    size_t failed_at; /* item index of the failure (the lowest one is reported) */
    ckpt_error err;
} sdm_worker;

static void *sdm_worker_main(void *arg) {
    sdm_worker *wk = arg;
    sdm_job *job = wk->job;
    walk lw = {.r = job->base->r, .file = job->base->file, .arena = wk->arena};
    ckpt_reader *r = lw.r;
    for (;;) {
        size_t b = atomic_fetch_add_explicit(&job->next, PARALLEL_BLOCK, memory_order_relaxed);
        if (b >= job->n || atomic_load_explicit(&job->failed, memory_order_relaxed)) break;
        size_t end = job->n - b < PARALLEL_BLOCK ? job->n : b + PARALLEL_BLOCK;
        for (size_t i = b; i < end; i++) {
            ckpt_status st =
                walk_tensor(&lw, &r->entries[job->entry[i]], false, job->val[i], &wk->err);
            if (st != CKPT_OK) {
                wk->status = st;
                wk->failed_at = i;
                atomic_store(&job->failed, true);
                return NULL;
            }
        }
    }
    return NULL;
}

/* Walks the new tensors val[i] -> entry[i] on `threads` threads (this one included). */
static ckpt_status walk_tensors_parallel(walk *w, const pk_value *const *val, const size_t *entry,
                                         size_t n, unsigned threads, ckpt_error *err) {
    sdm_job job = {.base = w, .val = val, .entry = entry, .n = n};
    sdm_worker wk[PARALLEL_MAX];
    memset(wk, 0, sizeof wk);
    if (threads > PARALLEL_MAX) threads = PARALLEL_MAX;
    for (unsigned t = 0; t < threads; t++) {
        wk[t].job = &job;
        wk[t].arena = ck_arena_new(0);
        if (!wk[t].arena) {
            threads = t; /* go on with the workers there are */
            break;
        }
        ck_arena_max_block(wk[t].arena, (size_t)8 << 20);
    }
    for (unsigned t = 1; t < threads; t++)
        wk[t].started = pthread_create(&wk[t].thread, NULL, sdm_worker_main, &wk[t]) == 0;
    if (threads) sdm_worker_main(&wk[0]);
    ckpt_status st = threads ? CKPT_OK : index_nomem(err);
    size_t failed_at = SIZE_MAX;
    for (unsigned t = 0; t < threads; t++) {
        if (wk[t].started) pthread_join(wk[t].thread, NULL);
        if (wk[t].status != CKPT_OK && wk[t].failed_at < failed_at) {
            failed_at = wk[t].failed_at;
            st = wk[t].status;
            if (err) *err = wk[t].err;
        }
    }
    for (unsigned t = 0; t < PARALLEL_MAX; t++)
        if (wk[t].arena) ck_arena_adopt(w->r->arena, wk[t].arena);
    return st;
}

/* What a state_dict_metadata value describes (its class name in *cls, NULL if none). */
typedef enum sdm_kind { SDM_TENSOR, SDM_BYTES, SDM_UNKNOWN } sdm_kind;

static sdm_kind sdm_kind_of(const pk_value *v, const char **cls) {
    *cls = pk_class_name(v);
    if ((*cls && strcmp(*cls, "TensorStorageMetadata") == 0) || (!*cls && pk_get(v, "chunks")))
        return SDM_TENSOR;
    if (*cls && strcmp(*cls, "BytesStorageMetadata") == 0) return SDM_BYTES;
    return SDM_UNKNOWN;
}

static ckpt_status defer(walk *w, const char *key, const pk_value *v, ckpt_error *err) {
    if (w->ndeferred == w->deferred_cap) {
        size_t cap = w->deferred_cap ? 2 * w->deferred_cap : 64;
        struct deferred_item *d = realloc(w->deferred, cap * sizeof *d);
        if (!d) return index_nomem(err);
        w->deferred = d;
        w->deferred_cap = cap;
    }
    w->deferred[w->ndeferred++] = (struct deferred_item){key, v};
    return CKPT_OK;
}

ckpt_status ck_walk_sdm(walk *w, ck_pairs p, size_t base, unsigned threads, ckpt_error *err) {
    ckpt_reader *r = w->r;
    size_t n = p.n;
    /* pass 1: entries, in order; new tensors are listed (value, entry), the rest deferred */
    const pk_value **val = malloc((n ? n : 1) * sizeof *val);
    size_t *entry = malloc((n ? n : 1) * sizeof *entry);
    ckpt_status st = CKPT_OK;
    size_t ntensors = 0;
    if (!val || !entry) {
        st = index_nomem(err);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const char *key = pk_as_str(p.k[i * p.stride]);
        const pk_value *v = p.v[i * p.stride];
        if (!key) {
            st = ck_fail(err, CKPT_E_FORMAT, "%s: state_dict_metadata key #%zu is not a string",
                         w->file, base + i);
            goto done;
        }
        if (strlen(key) != p.k[i * p.stride]->u.str.len) { /* two such keys would be one */
            st = ck_fail(err, CKPT_E_FORMAT,
                         "%s: state_dict_metadata key #%zu ('%s...') holds a NUL byte", w->file,
                         base + i, key);
            goto done;
        }
        uint64_t h = index_key_hash(key);
        ckpt_entry *e = index_find_hashed(r, key, h);
        if (e) { /* made earlier: walked after the new ones, in order */
            CK_TRY_GOTO(st, defer(w, key, v, err), done);
            continue;
        }
        if (!(e = index_new_entry_hashed(r, key, h))) {
            st = index_nomem(err);
            goto done;
        }
        const char *cls;
        sdm_kind kind = sdm_kind_of(v, &cls);
        if (kind == SDM_TENSOR) {
            val[ntensors] = v;
            entry[ntensors++] = e->index;
        } else if (kind == SDM_BYTES) {
            e->kind = CKPT_ENTRY_OBJECT;
            e->loc.problem = "no storage_data entry for this object";
        } else {
            e->kind = CKPT_ENTRY_OBJECT;
            e->problem =
                index_problemf(r->arena, "unknown storage metadata class '%s'", cls ? cls : "?");
        }
    }
    /* pass 2: the new tensors (the lazily built chunk index is not thread-safe) */
    if (ntensors >= PARALLEL_MIN && threads > 1 && !w->chunk_index_built) {
        st = walk_tensors_parallel(w, val, entry, ntensors, threads, err);
    } else {
        /* a big walk on this thread fills the reader's arena: map it ahead (the workers'
         * arenas above fill in parallel instead); settled by index_finish */
        if (ntensors >= PARALLEL_MIN) ck_arena_map_ahead(r->arena);
        for (size_t k = 0; k < ntensors && st == CKPT_OK; k++)
            st = walk_tensor(w, &r->entries[entry[k]], false, val[k], err);
    }
done:
    free(val);
    free(entry);
    return st;
}

ckpt_status ck_walk_sdm_end(walk *w, ckpt_error *err) {
    /* pass 3: items of entries made before them */
    ckpt_status st = CKPT_OK;
    for (size_t i = 0; i < w->ndeferred && st == CKPT_OK; i++) {
        const pk_value *v = w->deferred[i].val;
        ckpt_entry *e = index_find(w->r, w->deferred[i].key);
        const char *cls;
        sdm_kind kind = sdm_kind_of(v, &cls);
        if (kind == SDM_TENSOR) {
            if (e->kind == CKPT_ENTRY_TENSOR) st = walk_tensor(w, e, true, v, err);
        } else if (kind == SDM_BYTES) {
            e->kind = CKPT_ENTRY_OBJECT;
        }
    }
    w->ndeferred = 0;
    return st;
}

static ck_pairs dict_pairs(const pk_value *d) {
    return (ck_pairs){.k = d->u.dict.keys, .v = d->u.dict.vals, .stride = 1, .n = d->u.dict.len};
}

static ckpt_status walk_state_dict_metadata(walk *w, const pk_value *sdm, ckpt_error *err) {
    if (!sdm || sdm->type != PK_DICT)
        return ck_fail(err, CKPT_E_FORMAT, "%s: state_dict_metadata is missing or not a dict",
                       w->file);
    CK_TRY(ck_walk_sdm(w, dict_pairs(sdm), 0, w->r->limits.index_threads, err));
    return ck_walk_sdm_end(w, err);
}

/* A planner_data path (a non-empty tuple or list of str and int) as the entry's tree path;
 * anything else leaves the flat key. */
static ckpt_status set_path(ckpt_reader *r, ckpt_entry *e, const pk_value *path, ckpt_error *err) {
    size_t n = path ? pk_len(path) : 0;
    bool usable = path && (path->type == PK_TUPLE || path->type == PK_LIST) && n > 0;
    for (size_t i = 0; usable && i < n; i++) {
        const pk_value *el = pk_item(path, i);
        usable = el->type == PK_STR || el->type == PK_INT;
    }
    if (!usable) return index_set_path(r, e, NULL, 0, err);
    index_elem *elems = malloc(n * sizeof *elems);
    char(*nums)[24] = malloc(n * sizeof *nums);
    ckpt_status st = elems && nums ? CKPT_OK : index_nomem(err);
    for (size_t i = 0; st == CKPT_OK && i < n; i++) {
        const pk_value *el = pk_item(path, i);
        if (el->type == PK_STR) {
            elems[i] = (index_elem){el->u.str.ptr, el->u.str.len, false, false};
        } else {
            int len = snprintf(nums[i], sizeof nums[i], "%lld", (long long)el->u.i);
            elems[i] = (index_elem){nums[i], (size_t)len, true, false};
        }
    }
    if (st == CKPT_OK) st = index_set_path(r, e, elems, n, err);
    free(elems);
    free(nums);
    return st;
}

ckpt_status ck_walk_planner(walk *w, ck_pairs p, ckpt_error *err) {
    ckpt_reader *r = w->r;
    if (p.n) r->info.has_planner_data = true;
    for (size_t i = 0; i < p.n; i++) {
        const char *key = pk_as_str(p.k[i * p.stride]);
        ckpt_entry *e = key ? index_find_near(r, key, w->pd_guess) : NULL;
        if (!e) continue;
        w->pd_guess = e->index + 1;
        if (!e->path) CK_TRY(set_path(r, e, p.v[i * p.stride], err));
    }
    return CKPT_OK;
}

static ckpt_status walk_planner_data(walk *w, const pk_value *pd, ckpt_error *err) {
    if (!pd || pd->type != PK_DICT) return CKPT_OK;
    return ck_walk_planner(w, dict_pairs(pd), err);
}

static bool chunk_eq(const void *ctx, uint64_t v) {
    const void *const *c = ctx;
    const ckpt_reader *r = c[0];
    const int64_t *off = c[1];
    const ckpt_entry *e = &r->entries[v >> 32];
    return (v >> 32) == *(const uint64_t *)c[2] &&
           boxes_equal(e->chunks[v & 0xffffffffu].offsets, off, e->ndim);
}

static ckpt_status build_chunk_index(walk *w, ckpt_error *err) {
    ckpt_reader *r = w->r;
    size_t total = 0;
    for (size_t i = 0; i < r->nentries; i++)
        total += r->entries[i].nchunks;
    if (!ck_htab_init(&w->chunk_index, total)) return index_nomem(err);
    for (size_t i = 0; i < r->nentries; i++) {
        const ckpt_entry *e = &r->entries[i];
        for (size_t k = 0; k < e->nchunks; k++) {
            uint64_t h = ck_hash_bytes(e->chunks[k].offsets, (size_t)e->ndim * 8, i);
            if (!ck_htab_insert(&w->chunk_index, h, ((uint64_t)i << 32) | k))
                return index_nomem(err);
        }
    }
    w->chunk_index_built = true;
    return CKPT_OK;
}

static ckpt_status fill_loc(walk *w, ck_loc *loc, const pk_value *info, ckpt_error *err) {
    ckpt_reader *r = w->r;
    const char *rel = pk_as_str(pk_get_cached(info, "relative_path", &w->keys.relative_path));
    int64_t off = -1, len = -1;
    pk_as_int(pk_get_cached(info, "offset", &w->keys.item_offset), &off);
    pk_as_int(pk_get_cached(info, "length", &w->keys.length), &len);
    memset(loc, 0, sizeof *loc);
    loc->file_id = -1;
    if (!rel || off < 0 || len < 0) {
        loc->problem = "storage_data entry lacks relative_path/offset/length";
        return CKPT_OK;
    }
    const pk_value *relv = pk_get_cached(info, "relative_path", &w->keys.relative_path);
    if (strlen(rel) != relv->u.str.len) { /* "__0_0.distcp\0x" would name __0_0.distcp */
        loc->problem = "relative_path holds a NUL byte";
        return CKPT_OK;
    }
    loc->offset = (uint64_t)off;
    loc->length = (uint64_t)len;
    const pk_value *td = pk_get_cached(info, "transform_descriptors", &w->keys.transform);
    if (td && pk_len(td)) {
        size_t total = 0, n = pk_len(td);
        for (size_t i = 0; i < n; i++) {
            const char *s = pk_as_str(pk_item(td, i));
            if (!s || strchr(s, ',')) {
                loc->problem = "transform_descriptors holds a non-string or a ','";
                return CKPT_OK;
            }
            total += strlen(s) + 1;
        }
        char *t = ck_arena_alloc(r->arena, total + 1);
        if (!t) return index_nomem(err);
        for (size_t i = 0; i < n; i++) {
            if (i) strcat(t, ",");
            strcat(t, pk_as_str(pk_item(td, i)));
        }
        loc->transforms = t;
    }
    size_t slot = (size_t)(((uintptr_t)rel * 0x9E3779B97F4A7C15ull) >> (64 - FILE_CACHE_BITS));
    if (w->file_cache[slot].rel == rel) {
        loc->file_id = w->file_cache[slot].id;
    } else {
        const char *problem = NULL;
        loc->file_id = ck_files_intern(r, rel, &problem);
        if (loc->file_id < 0)
            loc->problem = problem ? problem : "out of memory";
        else
            w->file_cache[slot].rel = rel, w->file_cache[slot].id = loc->file_id;
    }
    r->info.stored_bytes += loc->length;
    return CKPT_OK;
}

ckpt_status ck_walk_storage(walk *w, ck_pairs p, ckpt_error *err) {
    ckpt_reader *r = w->r;
    /* A tensor's chunks come in a row, usually naming it with one (shared) string node. */
    for (size_t i = 0; i < p.n; i++) {
        const pk_value *mi = p.k[i * p.stride];
        const pk_value *info = p.v[i * p.stride];
        const char *fqn = pk_as_str(pk_get_cached(mi, "fqn", &w->keys.fqn));
        ckpt_entry *e = NULL;
        if (fqn && fqn == w->sd_last_fqn)
            e = w->sd_last_e;
        else if (fqn)
            e = index_find_near(r, fqn, w->sd_next);
        w->sd_last_fqn = fqn;
        w->sd_last_e = e;
        if (e) w->sd_next = e->index + 1;
        if (!e) {
            r->unmatched_storage++;
            continue;
        }
        const pk_value *offv = pk_get_cached(mi, "offset", &w->keys.offset);
        if (!offv || offv->type == PK_NONE) {
            /* the first location wins (rank-local metadata: lowest rank) */
            if (e->kind == CKPT_ENTRY_OBJECT && e->loc.file_id < 0)
                CK_TRY(fill_loc(w, &e->loc, info, err));
            else
                r->unmatched_storage++;
            continue;
        }
        int64_t off[CKPT_MAX_NDIM];
        size_t n = 0;
        if (e->kind != CKPT_ENTRY_TENSOR || !pk_as_int_seq(offv, off, CKPT_MAX_NDIM, &n) ||
            (int)n != e->ndim) {
            r->unmatched_storage++;
            continue;
        }
        ck_chunk *match = NULL;
        int64_t hint = -1;
        pk_as_int(pk_get_cached(mi, "index", &w->keys.index), &hint);
        if (hint >= 0 && (uint64_t)hint < e->nchunks &&
            boxes_equal(e->chunks[hint].offsets, off, e->ndim))
            match = &e->chunks[hint];
        if (!match) {
            if (!w->chunk_index_built) CK_TRY(build_chunk_index(w, err));
            uint64_t eidx = e->index, v;
            const void *ctx[3] = {r, off, &eidx};
            if (ck_htab_find(&w->chunk_index, ck_hash_bytes(off, n * 8, e->index), chunk_eq, ctx,
                             &v))
                match = &e->chunks[v & 0xffffffffu];
        }
        if (!match || match->loc.file_id >= 0 || !match->numel) {
            r->unmatched_storage++; /* unknown box, duplicate, or a zero-size chunk */
            continue;
        }
        CK_TRY(fill_loc(w, &match->loc, info, err));
    }
    return CKPT_OK;
}

static ckpt_status walk_storage_data(walk *w, const pk_value *sd, ckpt_error *err) {
    if (!sd || sd->type == PK_NONE) return CKPT_OK;
    if (sd->type != PK_DICT)
        return ck_fail(err, CKPT_E_FORMAT, "%s: storage_data is not a dict", w->file);
    return ck_walk_storage(w, dict_pairs(sd), err);
}

void ck_walk_note_root(ckpt_reader *r, const pk_value *root, const pk_value *sdm) {
    ckpt_reader_info *in = &r->info;
    const char *mod = pk_class_module(root), *cls = pk_class_name(root);
    if (!in->root_class && mod && cls) {
        char buf[512];
        snprintf(buf, sizeof buf, "%s.%s", mod, cls);
        in->root_class = astr(r, buf);
    }
    const pk_value *ver = pk_get(root, "version");
    if (ver && ver->type == PK_STR && !in->version) in->version = astr(r, ver->u.str.ptr);
    const pk_value *sm = pk_get(root, "storage_meta");
    if (sm && sm->type != PK_NONE) in->has_storage_meta = true;
    if ((cls && strcmp(cls, "MCoreMetadata") == 0) || pk_get(root, "mcore_data") ||
        pk_get(root, "all_local_plans"))
        in->has_mcore_data = true;
    /* TensorProperties' module tells torch 2.0-2.2 from >= 2.3 */
    if (!in->format_hint) {
        const char *hint;
        const char *pmod = NULL;
        for (size_t i = 0; sdm && sdm->type == PK_DICT && i < sdm->u.dict.len && !pmod; i++)
            pmod = pk_class_module(pk_get(sdm->u.dict.vals[i], "properties"));
        if (in->has_mcore_data)
            hint = "megatron-core torch_dist";
        else if (mod && strstr(mod, "_shard.checkpoint"))
            hint = "torch 1.13 (torch.distributed._shard.checkpoint)";
        else if (in->version)
            hint = "torch >= 2.9 (DCP version recorded)";
        else if (in->has_storage_meta)
            hint = "torch 2.4 - 2.8 (storage_meta, no version)";
        else if (pmod && strstr(pmod, "checkpoint.metadata"))
            hint = "torch 2.3";
        else
            hint = "torch 2.0 - 2.2";
        in->format_hint = hint;
    }
}

ck_walk *ck_walk_new(ckpt_reader *r, const char *file) {
    walk *w = calloc(1, sizeof *w);
    if (w) *w = (walk){.r = r, .file = file, .arena = r->arena};
    return w;
}

void ck_walk_free(walk *w) {
    if (!w) return;
    if (w->chunk_index_built) ck_htab_release(&w->chunk_index);
    free(w->deferred);
    free(w);
}

ckpt_status ck_walk_doc(ckpt_reader *r, const char *file, const pk_doc *doc, ckpt_error *err) {
    ckpt_status st = CKPT_OK;
    const pk_value *root = pk_doc_root(doc);
    const pk_value *sdm = pk_get(root, "state_dict_metadata");
    if (!root || root->type != PK_OBJECT || !sdm) {
        const char *cls = pk_class_name(root);
        return ck_fail(err, CKPT_E_FORMAT,
                       "%s: not a DCP Metadata pickle (root is %s, no state_dict_metadata)", file,
                       cls ? cls : "not an object");
    }
    walk *w = ck_walk_new(r, file);
    if (!w) return index_nomem(err);
    ck_walk_note_root(r, root, sdm);
    CK_TRY_GOTO(st, walk_state_dict_metadata(w, sdm, err), done);
    CK_TRY_GOTO(st, walk_planner_data(w, pk_get(root, "planner_data"), err), done);
    CK_TRY_GOTO(st, walk_storage_data(w, pk_get(root, "storage_data"), err), done);
done:
    ck_walk_free(w);
    return st;
}
