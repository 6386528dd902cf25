/* builder.c — the index builder (builder.h): entries by key and by path, sizes, defects, and
 * the completion every format's index ends with. */
#include "index/builder.h"

#include "util/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool key_eq(const void *ctx, uint64_t v) {
    const void *const *c = ctx;
    const ckpt_reader *r = c[0];
    return strcmp(r->entries[v].key, (const char *)c[1]) == 0;
}

uint64_t index_key_hash(const char *key) { return ck_hash_bytes(key, strlen(key), 0); }

ckpt_entry *index_find_hashed(ckpt_reader *r, const char *key, uint64_t h) {
    const void *ctx[2] = {r, key};
    uint64_t v;
    if (ck_htab_find(&r->by_key, h, key_eq, ctx, &v)) return &r->entries[v];
    return NULL;
}

ckpt_entry *index_find(ckpt_reader *r, const char *key) {
    return index_find_hashed(r, key, index_key_hash(key));
}

ckpt_entry *index_find_near(ckpt_reader *r, const char *key, size_t guess) {
    if (guess < r->nentries && strcmp(r->entries[guess].key, key) == 0) return &r->entries[guess];
    return index_find(r, key);
}

ckpt_entry *index_new_entry(ckpt_reader *r, const char *key) {
    return index_new_entry_hashed(r, key, index_key_hash(key));
}

ckpt_entry *index_new_entry_hashed(ckpt_reader *r, const char *key, uint64_t h) {
    if (r->nentries == r->entries_cap) {
        size_t cap = r->entries_cap ? r->entries_cap * 2 : 256;
        ckpt_entry *n = realloc(r->entries, cap * sizeof *n);
        if (!n) return NULL;
        r->entries = n;
        r->entries_cap = cap;
    }
    ckpt_entry *e = &r->entries[r->nentries];
    memset(e, 0, sizeof *e);
    e->key = ck_arena_strndup(r->arena, key, strlen(key));
    e->index = r->nentries;
    e->loc.file_id = -1;
    if (!e->key || !ck_htab_insert(&r->by_key, h, e->index)) return NULL;
    r->nentries++;
    return e;
}

uint64_t index_numel(ck_arena *a, const int64_t *shape, int ndim, const char **problem) {
    uint64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) {
            *problem = index_problemf(a, "negative dimension %lld", (long long)shape[d]);
            return 0;
        }
        if (shape[d] && numel > (UINT64_C(1) << 62) / (uint64_t)shape[d]) {
            *problem = index_problemf(a, "tensor has too many elements");
            return 0;
        }
        numel *= (uint64_t)shape[d];
    }
    return numel;
}

uint64_t index_nbytes(ckpt_dtype dt, uint64_t numel) {
    size_t isz = ckpt_dtype_itemsize(dt);
    return isz && numel <= (UINT64_C(1) << 62) / isz ? numel * isz : 0;
}

ckpt_status index_nomem(ckpt_error *err) {
    return ck_fail(err, CKPT_E_NOMEM, "out of memory while indexing the metadata");
}

const char *index_problemf(ck_arena *a, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    const char *p = ck_arena_strndup(a, buf, strlen(buf));
    return p ? p : "(out of memory describing a problem)"; /* never lose the problem */
}

ckpt_status index_set_path(ckpt_reader *r, ckpt_entry *e, const index_elem *elems, size_t n,
                           ckpt_error *err) {
    index_elem flat = {e->key, strlen(e->key), false, false};
    if (!n) { /* no path from the format: the flat key is a single element */
        elems = &flat;
        n = 1;
    }
    e->elems = ck_arena_alloc(r->arena, n * sizeof *e->elems);
    if (!e->elems) return index_nomem(err);
    for (size_t i = 0; i < n; i++) {
        e->elems[i] =
            elems == &flat ? e->key : ck_arena_strndup(r->arena, elems[i].s, elems[i].len);
        if (!e->elems[i]) return index_nomem(err);
    }
    e->nelems = n;
    uint8_t *is_int = NULL; /* only for a path with an int element: 1 an int, 2 an int key */
    for (size_t i = 0; elems != &flat && i < n; i++) {
        if (!elems[i].is_int && !elems[i].int_key) continue;
        if (!is_int) {
            if (!(is_int = ck_arena_alloc(r->arena, n))) return index_nomem(err);
            memset(is_int, 0, n);
        }
        is_int[i] = elems[i].is_int ? 1 : 2;
    }
    e->elem_int = is_int;
    /* joined, escaped path, from each element's own bytes: a NUL inside one is escaped */
    size_t total = 0;
    char **esc = malloc(n * sizeof *esc);
    if (!esc) return index_nomem(err);
    for (size_t i = 0; i < n; i++) {
        esc[i] = ck_path_escape_elem(r->arena, elems[i].s, elems[i].len);
        if (!esc[i]) {
            free(esc);
            return index_nomem(err);
        }
        total += strlen(esc[i]) + 1;
    }
    char *p = ck_arena_alloc(r->arena, total + 1);
    if (!p) {
        free(esc);
        return index_nomem(err);
    }
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (i) p[at++] = '/';
        size_t l = strlen(esc[i]);
        memcpy(p + at, esc[i], l);
        at += l;
    }
    p[at] = '\0';
    e->path = p;
    free(esc);
    return CKPT_OK;
}

static bool path_eq(const void *ctx, uint64_t v) {
    const void *const *c = ctx;
    const ckpt_reader *r = c[0];
    return strcmp(r->entries[v].path, (const char *)c[1]) == 0;
}

ckpt_status index_paths(ckpt_reader *r, ckpt_error *err) {
    if (!r->by_path.cap && !ck_htab_init(&r->by_path, r->nentries)) return index_nomem(err);
    for (size_t i = r->paths_done; i < r->nentries; i++) {
        ckpt_entry *e = &r->entries[i];
        if (!e->path) CK_TRY(index_set_path(r, e, NULL, 0, err));
        const void *ctx[2] = {r, e->path};
        uint64_t dummy;
        uint64_t h = ck_hash_bytes(e->path, strlen(e->path), 0);
        if (!ck_htab_find(&r->by_path, h, path_eq, ctx, &dummy) &&
            !ck_htab_insert(&r->by_path, h, i))
            return index_nomem(err);
        r->paths_done = i + 1;
    }
    return CKPT_OK;
}

ckpt_status index_finish(ckpt_reader *r, index_file_rank_fn file_rank, ckpt_error *err) {
    CK_TRY(index_paths(r, err));
    ckpt_reader_info *in = &r->info;
    for (size_t i = 0; i < r->nentries; i++) {
        ckpt_entry *e = &r->entries[i];
        in->num_entries++;
        if (e->kind == CKPT_ENTRY_TENSOR) {
            in->num_tensors++;
            in->tensor_bytes += e->nbytes;
            in->dtype_counts[e->dtype]++;
            for (size_t k = 0; k < e->nchunks; k++) {
                if (e->chunks[k].numel)
                    in->num_chunks++;
                else
                    in->num_empty_chunks++;
            }
        } else {
            in->num_objects++;
        }
    }
    ck_arena_settle(r->arena); /* the index is built: no helper thread outlives the open */
    in->num_files = (uint32_t)r->nfiles;
    uint32_t ranks = 0;
    long long *seen = calloc(r->nfiles + 1, sizeof *seen);
    if (!seen) return index_nomem(err);
    for (size_t f = 0; file_rank && f < r->nfiles; f++) {
        long long rank = file_rank(r->files[f].name);
        bool dup = rank < 0;
        for (uint32_t k = 0; k < ranks && !dup; k++)
            dup = seen[k] == rank;
        if (!dup) seen[ranks++] = rank;
    }
    free(seen);
    in->num_ranks = ranks;
    return CKPT_OK;
}

ckpt_status index_reset(ckpt_reader *r, ckpt_error *err) {
    r->nentries = 0;
    r->nfiles = 0;
    r->paths_done = 0;
    ck_htab_release(&r->by_path);
    ck_htab_release(&r->by_key);
    ck_htab_release(&r->file_by_name);
    r->info.stored_bytes = 0;
    r->info.has_planner_data = false;
    r->unmatched_storage = 0;
    if (!ck_htab_init(&r->by_key, 1024) || !ck_htab_init(&r->file_by_name, 64))
        return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    return CKPT_OK;
}
