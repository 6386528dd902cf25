/* metadata_writer.c — merging all ranks' descriptions into DCP's `.metadata` pickle
 * (ckpt_save_write_metadata): Metadata(state_dict_metadata, planner_data, storage_data,
 * storage_meta, version="1.0.0") with torch 2.15's class names, field order and opcode
 * choices (protocol 4, STACK_GLOBAL, MEMOIZE, 1000-item batches, 64 KiB frames). */
#include "save/save_i.h"

#include "util/error.h"
#include "util/htab.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define MD_MODULE "torch.distributed.checkpoint.metadata"
#define FS_MODULE "torch.distributed.checkpoint.filesystem"
#define DCP_VERSION "1.0.0"

typedef struct chunk {
    const save_item *it;  /* the copy whose bytes are referenced (NULL: none stored yet) */
    const save_item *box; /* any holder: for offsets/sizes */
    const char *file;
} chunk;

typedef struct entry {
    const save_item *def; /* first occurrence: kind, dtype, shape, path */
    chunk *chunks;
    size_t n, cap;
} entry;

typedef struct merge {
    entry *ents;
    size_t n, cap;
    ck_htab idx;
} merge;

static bool key_eq(const void *ctx, uint64_t v) {
    const void *const *c = ctx;
    const merge *m = c[0];
    return strcmp(m->ents[v].def->key, (const char *)c[1]) == 0;
}

static void merge_release(merge *m) {
    for (size_t i = 0; i < m->n; i++)
        free(m->ents[i].chunks);
    free(m->ents);
    ck_htab_release(&m->idx);
}

static bool same_path(const save_item *a, const save_item *b) {
    if (a->npath != b->npath) return false;
    for (size_t i = 0; i < a->npath; i++) {
        const save_elem *x = &a->path[i], *y = &b->path[i];
        if (!x->name != !y->name) return false;
        if (x->name ? strcmp(x->name, y->name) != 0 : x->index != y->index) return false;
    }
    return true;
}

/* Equal `n` dims; dims may be NULL for 0-d tensors. */
static bool dims_eq(const int64_t *a, size_t ai, const int64_t *b, size_t bi, int n) {
    return n == 0 || memcmp(a + ai, b + bi, (size_t)n * sizeof *a) == 0;
}

static ckpt_status add_item(merge *m, const save_item *it, const char *file, uint32_t rank,
                            ckpt_error *err) {
    uint64_t h = ck_hash_bytes(it->key, strlen(it->key), 0xd1c7);
    const void *ctx[2] = {m, it->key};
    uint64_t pos;
    entry *e;
    if (ck_htab_find(&m->idx, h, key_eq, ctx, &pos)) {
        e = &m->ents[pos];
        const save_item *d = e->def;
        if (d->kind != it->kind)
            return ck_fail(err, CKPT_E_INVAL, "key '%s': a tensor on one rank, a value on rank %u",
                           it->key, rank);
        if (!same_path(d, it))
            return ck_fail(err, CKPT_E_INVAL, "key '%s': rank %u gives another path", it->key,
                           rank);
        if (it->kind == SAVE_ITEM_TENSOR && (d->dtype != it->dtype || d->ndim != it->ndim ||
                                             !dims_eq(d->dims, 0, it->dims, 0, d->ndim)))
            return ck_fail(err, CKPT_E_INVAL,
                           "key '%s': rank %u disagrees on dtype or global shape", it->key, rank);
    } else {
        if (m->n == m->cap) {
            size_t c = m->cap ? m->cap * 2 : 64;
            entry *ne = realloc(m->ents, c * sizeof *ne);
            if (!ne) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
            m->ents = ne;
            m->cap = c;
        }
        if (!ck_htab_insert(&m->idx, h, m->n)) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
        e = &m->ents[m->n++];
        memset(e, 0, sizeof *e);
        e->def = it;
    }
    int nd = it->ndim;
    for (size_t i = 0; i < e->n; i++) {
        chunk *c = &e->chunks[i];
        if (it->kind == SAVE_ITEM_TENSOR &&
            !dims_eq(c->box->dims, (size_t)nd, it->dims, (size_t)nd, nd))
            continue;
        if (it->kind == SAVE_ITEM_TENSOR &&
            !dims_eq(c->box->dims, 2 * (size_t)nd, it->dims, 2 * (size_t)nd, nd))
            return ck_fail(err, CKPT_E_INVAL,
                           "key '%s': rank %u holds a box at the same offsets with other sizes",
                           it->key, rank);
        if (!c->it && it->stored) {
            c->it = it;
            c->file = file;
        }
        return CKPT_OK;
    }
    if (e->n == e->cap) {
        size_t c = e->cap ? e->cap * 2 : 4;
        chunk *nc = realloc(e->chunks, c * sizeof *nc);
        if (!nc) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
        e->chunks = nc;
        e->cap = c;
    }
    e->chunks[e->n++] = (chunk){it->stored ? it : NULL, it, it->stored ? file : NULL};
    return CKPT_OK;
}

static bool overlap(const int64_t *a, const int64_t *b, int nd) {
    for (int d = 0; d < nd; d++) {
        int64_t ao = a[nd + d], az = a[2 * nd + d], bo = b[nd + d], bz = b[2 * nd + d];
        if (az == 0 || bz == 0 || ao + az <= bo || bo + bz <= ao) return false;
    }
    return true;
}

static ckpt_status check_entry(const entry *e, ckpt_error *err) {
    const save_item *d = e->def;
    for (size_t i = 0; i < e->n; i++)
        if (!e->chunks[i].it)
            return ck_fail(err, CKPT_E_INVAL,
                           "key '%s': a piece was passed only as a replica (replica_id != 0); "
                           "no rank stored it",
                           d->key);
    if (d->kind != SAVE_ITEM_TENSOR) return CKPT_OK;
    int nd = d->ndim;
    unsigned __int128 total = 1, sum = 0;
    for (int k = 0; k < nd; k++)
        total *= (uint64_t)d->dims[k];
    for (size_t i = 0; i < e->n; i++) {
        unsigned __int128 v = 1;
        for (int k = 0; k < nd; k++)
            v *= (uint64_t)e->chunks[i].box->dims[2 * nd + k];
        sum += v;
    }
    if (e->n <= 4096)
        for (size_t i = 0; i < e->n; i++)
            for (size_t j = i + 1; j < e->n; j++)
                if (overlap(e->chunks[i].box->dims, e->chunks[j].box->dims, nd))
                    return ck_fail(err, CKPT_E_INVAL, "key '%s': pieces %zu and %zu overlap",
                                   d->key, i, j);
    if (sum != total)
        return ck_fail(err, CKPT_E_INVAL,
                       "key '%s': the pieces hold %llu of %llu elements (missing or overlapping)",
                       d->key, (unsigned long long)sum, (unsigned long long)total);
    return CKPT_OK;
}

/* ---------------------------------------------------------------- pickling */

static void size_obj(pkw *w, const int64_t *v, int n) {
    pkw_global(w, "torch", "Size");
    pkw_tuple_begin(w, (size_t)n);
    for (int i = 0; i < n; i++)
        pkw_int(w, v[i]);
    pkw_tuple_end(w, (size_t)n);
    if (n) pkw_memoize(w);
    pkw_tuple_end(w, 1);
    pkw_memoize(w);
    pkw_op(w, PKO_REDUCE);
    pkw_memoize(w);
}

static void attr(pkw *w, const char *name) { pkw_str(w, name, strlen(name), true); }

static void new_obj(pkw *w, const char *module, const char *cls) {
    pkw_global(w, module, cls);
    pkw_op(w, PKO_EMPTY_TUPLE);
    pkw_op(w, PKO_NEWOBJ);
    pkw_memoize(w);
}

static void tensor_properties(pkw *w, const save_item *d, bool legacy) {
    new_obj(w, MD_MODULE, "TensorProperties");
    pkw_op(w, PKO_MARK);
    pkw_global(w, "torch", ckpt_dtype_name(d->dtype));
    if (!pkw_memo_begin(w, "layout:strided")) {
        pkw_global(w, "torch.serialization", "_get_layout");
        pkw_str(w, "torch.strided", 13, true);
        pkw_tuple_end(w, 1);
        pkw_memoize(w);
        pkw_op(w, PKO_REDUCE);
        pkw_memo_end(w, "layout:strided");
    }
    pkw_bool(w, false); /* requires_grad */
    if (!pkw_memo_begin(w, "memfmt:contiguous")) {
        pkw_global(w, MD_MODULE, "_MEM_FORMAT_ENCODING");
        pkw_int(w, 0);
        pkw_tuple_end(w, 1);
        pkw_memoize(w);
        pkw_op(w, PKO_REDUCE);
        pkw_memo_end(w, "memfmt:contiguous");
    }
    pkw_bool(w, false); /* pin_memory */
    if (!legacy) {      /* strides of the contiguous global tensor (torch >= 2.15) */
        int nd = d->ndim;
        int64_t st[CKPT_MAX_NDIM];
        int64_t s = 1;
        for (int k = nd - 1; k >= 0; k--) {
            st[k] = s;
            s *= d->dims[k] ? d->dims[k] : 1;
        }
        pkw_tuple_begin(w, (size_t)nd);
        for (int k = 0; k < nd; k++)
            pkw_int(w, st[k]);
        pkw_tuple_end(w, (size_t)nd);
        if (nd) pkw_memoize(w);
    }
    pkw_op(w, PKO_TUPLE);
    pkw_memoize(w);
    pkw_op(w, PKO_BUILD);
}

static void tensor_md(pkw *w, const entry *e, bool legacy) {
    const save_item *d = e->def;
    int nd = d->ndim;
    new_obj(w, MD_MODULE, "TensorStorageMetadata");
    pkw_op(w, PKO_EMPTY_DICT);
    pkw_memoize(w);
    pkw_op(w, PKO_MARK);
    attr(w, "properties");
    tensor_properties(w, d, legacy);
    attr(w, "size");
    size_obj(w, d->dims, nd);
    attr(w, "chunks");
    pkw_op(w, PKO_EMPTY_LIST);
    pkw_memoize(w);
    for (size_t i = 0; i < e->n; i++) {
        const save_item *b = e->chunks[i].box;
        pkw_batch_item_begin(w, i, e->n);
        new_obj(w, MD_MODULE, "ChunkStorageMetadata");
        pkw_op(w, PKO_EMPTY_DICT);
        pkw_memoize(w);
        pkw_op(w, PKO_MARK);
        attr(w, "offsets");
        size_obj(w, nd ? b->dims + nd : NULL, nd);
        attr(w, "sizes");
        size_obj(w, nd ? b->dims + 2 * nd : NULL, nd);
        pkw_op(w, PKO_SETITEMS);
        pkw_op(w, PKO_BUILD);
        pkw_batch_item_end(w, i, e->n, false);
    }
    pkw_op(w, PKO_SETITEMS);
    pkw_op(w, PKO_BUILD);
}

static void key_str(pkw *w, const char *k) { pkw_str(w, k, strlen(k), true); }

static void storage_entry(pkw *w, const entry *e, size_t ci) {
    const chunk *c = &e->chunks[ci];
    const save_item *it = c->it;
    new_obj(w, MD_MODULE, "MetadataIndex");
    pkw_op(w, PKO_EMPTY_DICT);
    pkw_memoize(w);
    pkw_op(w, PKO_MARK);
    attr(w, "fqn");
    key_str(w, it->key);
    attr(w, "index");
    if (it->kind == SAVE_ITEM_TENSOR) {
        pkw_int(w, (int64_t)ci);
        attr(w, "offset");
        size_obj(w, it->ndim ? c->box->dims + it->ndim : NULL, it->ndim);
    } else {
        pkw_none(w);
    }
    pkw_op(w, PKO_SETITEMS);
    pkw_op(w, PKO_BUILD);
    new_obj(w, FS_MODULE, "_StorageInfo");
    pkw_op(w, PKO_EMPTY_DICT);
    pkw_memoize(w);
    pkw_op(w, PKO_MARK);
    attr(w, "relative_path");
    key_str(w, c->file);
    attr(w, "offset");
    pkw_int(w, (int64_t)it->offset);
    attr(w, "length");
    pkw_int(w, (int64_t)it->length);
    pkw_op(w, PKO_SETITEMS);
    pkw_op(w, PKO_BUILD);
}

static void uuid4(char out[37]) {
    unsigned char b[16];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        /* The id is informational; fall back to time and pid. */
        uint64_t x = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)out;
        for (int i = 0; i < 16; i++)
            b[i] = (unsigned char)(x >> (8 * (i % 8)));
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    static const char hex[] = "0123456789abcdef";
    int o = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) out[o++] = '-';
        out[o++] = hex[b[i] >> 4];
        out[o++] = hex[b[i] & 15];
    }
    out[o] = 0;
}

typedef struct stor_ref {
    size_t ent, chunk;
} stor_ref;

static int by_rank(const void *a, const void *b) {
    const ckpt_save_desc *x = *(const ckpt_save_desc *const *)a;
    const ckpt_save_desc *y = *(const ckpt_save_desc *const *)b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

static ckpt_status build_pickle(const ckpt_save_desc *const *descs, size_t nd,
                                const ckpt_save_options *opts, const char *ckpt_id, char **out,
                                size_t *out_len, ckpt_error *err) {
    ckpt_status s = CKPT_OK;
    merge m = {0};
    stor_ref *refs = NULL;
    size_t nrefs = 0, refs_cap = 0;
    const ckpt_save_desc **sorted = malloc((nd ? nd : 1) * sizeof *sorted);
    if (!sorted || !ck_htab_init(&m.idx, 256)) {
        free(sorted);
        ck_htab_release(&m.idx);
        return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    }
    if (nd) memcpy(sorted, descs, nd * sizeof *sorted);
    qsort(sorted, nd, sizeof *sorted, by_rank);
    for (size_t r = 0; r < nd && s == CKPT_OK; r++) {
        if (r && sorted[r]->rank == sorted[r - 1]->rank)
            s = ck_fail(err, CKPT_E_INVAL, "two descriptions for rank %u", sorted[r]->rank);
        for (size_t i = 0; s == CKPT_OK && i < sorted[r]->n; i++)
            s = add_item(&m, &sorted[r]->items[i], sorted[r]->file, sorted[r]->rank, err);
    }
    if (s == CKPT_OK && m.n == 0) s = ck_fail(err, CKPT_E_INVAL, "no entries to save");
    for (size_t i = 0; s == CKPT_OK && i < m.n; i++)
        s = check_entry(&m.ents[i], err);
    /* storage_data order: by rank, then in the order each rank wrote its items. */
    for (size_t r = 0; s == CKPT_OK && r < nd; r++) {
        for (size_t i = 0; s == CKPT_OK && i < sorted[r]->n; i++) {
            const save_item *it = &sorted[r]->items[i];
            if (!it->stored) continue;
            uint64_t h = ck_hash_bytes(it->key, strlen(it->key), 0xd1c7);
            const void *ctx[2] = {&m, it->key};
            uint64_t pos;
            if (!ck_htab_find(&m.idx, h, key_eq, ctx, &pos)) continue;
            const entry *e = &m.ents[pos];
            for (size_t c = 0; c < e->n; c++) {
                if (e->chunks[c].it != it) continue;
                if (nrefs == refs_cap) {
                    size_t nc = refs_cap ? refs_cap * 2 : 256;
                    stor_ref *nr = realloc(refs, nc * sizeof *nr);
                    if (!nr) {
                        s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
                        break;
                    }
                    refs = nr;
                    refs_cap = nc;
                }
                refs[nrefs++] = (stor_ref){(size_t)pos, c};
            }
        }
    }
    if (s != CKPT_OK) goto done;

    /* the 5-tuple unless the 6th field is asked for (ckpt_save_options) */
    bool legacy = !(opts && opts->tensor_properties_strides);
    pkw w;
    pkw_init(&w, opts && opts->metadata_protocol == 5 ? 5 : 4);
    new_obj(&w, MD_MODULE, "Metadata");
    pkw_op(&w, PKO_EMPTY_DICT);
    pkw_memoize(&w);
    pkw_op(&w, PKO_MARK);
    attr(&w, "state_dict_metadata");
    pkw_op(&w, PKO_EMPTY_DICT);
    pkw_memoize(&w);
    for (size_t i = 0; i < m.n; i++) {
        const entry *e = &m.ents[i];
        pkw_batch_item_begin(&w, i, m.n);
        key_str(&w, e->def->key);
        if (e->def->kind == SAVE_ITEM_TENSOR)
            tensor_md(&w, e, legacy);
        else
            new_obj(&w, MD_MODULE, "BytesStorageMetadata");
        pkw_batch_item_end(&w, i, m.n, true);
        pkw_maybe_frame(&w);
    }
    attr(&w, "planner_data");
    pkw_op(&w, PKO_EMPTY_DICT);
    pkw_memoize(&w);
    for (size_t i = 0; i < m.n; i++) {
        const save_item *d = m.ents[i].def;
        pkw_batch_item_begin(&w, i, m.n);
        key_str(&w, d->key);
        pkw_tuple_begin(&w, d->npath);
        for (size_t k = 0; k < d->npath; k++) {
            if (d->path[k].name)
                key_str(&w, d->path[k].name);
            else
                pkw_int(&w, d->path[k].index);
        }
        pkw_tuple_end(&w, d->npath);
        pkw_memoize(&w);
        pkw_batch_item_end(&w, i, m.n, true);
        pkw_maybe_frame(&w);
    }
    attr(&w, "storage_data");
    pkw_op(&w, PKO_EMPTY_DICT);
    pkw_memoize(&w);
    for (size_t i = 0; i < nrefs; i++) {
        pkw_batch_item_begin(&w, i, nrefs);
        storage_entry(&w, &m.ents[refs[i].ent], refs[i].chunk);
        pkw_batch_item_end(&w, i, nrefs, true);
        pkw_maybe_frame(&w);
    }
    attr(&w, "storage_meta");
    new_obj(&w, MD_MODULE, "StorageMeta");
    pkw_op(&w, PKO_EMPTY_DICT);
    pkw_memoize(&w);
    pkw_op(&w, PKO_MARK);
    attr(&w, "checkpoint_id");
    pkw_global(&w, "pathlib", "PosixPath");
    key_str(&w, ckpt_id);
    pkw_tuple_end(&w, 1);
    pkw_memoize(&w);
    pkw_op(&w, PKO_REDUCE);
    pkw_memoize(&w);
    attr(&w, "save_id");
    char id[37];
    uuid4(id);
    key_str(&w, id);
    attr(&w, "load_id");
    pkw_none(&w);
    attr(&w, "modules");
    pkw_op(&w, PKO_EMPTY_LIST);
    pkw_memoize(&w);
    pkw_op(&w, PKO_SETITEMS);
    pkw_op(&w, PKO_BUILD);
    attr(&w, "version");
    key_str(&w, DCP_VERSION);
    pkw_op(&w, PKO_SETITEMS);
    pkw_op(&w, PKO_BUILD);
    s = pkw_finish(&w, out, out_len, err);
done:
    free(refs);
    free(sorted);
    merge_release(&m);
    return s;
}

static ckpt_status write_file(const char *path, const char *data, size_t len, bool sync,
                              ckpt_error *err) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ck_fail(err, CKPT_E_IO, "%s: %s", path, strerror(errno));
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, data + done, len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            ckpt_status s = ck_fail(err, CKPT_E_IO, "%s: write: %s", path,
                                    n < 0 ? strerror(errno) : "no progress");
            close(fd);
            return s;
        }
        done += (size_t)n;
    }
    if (sync && fsync(fd) != 0) {
        ckpt_status s = ck_fail(err, CKPT_E_IO, "%s: fsync: %s", path, strerror(errno));
        close(fd);
        return s;
    }
    if (close(fd) != 0) return ck_fail(err, CKPT_E_IO, "%s: close: %s", path, strerror(errno));
    return CKPT_OK;
}

ckpt_status save_write_metadata_id(const char *dir, const ckpt_save_desc *const *descs,
                                   size_t ndescs, const ckpt_save_options *opts,
                                   const char *default_id, ckpt_error *err) {
    if (!dir || (ndescs && !descs))
        return ck_fail(err, CKPT_E_INVAL, "no directory or descriptions");
    for (size_t i = 0; i < ndescs; i++)
        if (!descs[i]) return ck_fail(err, CKPT_E_INVAL, "description %zu is NULL", i);
    if (opts && opts->metadata_protocol != 0 && opts->metadata_protocol != 4 &&
        opts->metadata_protocol != 5)
        return ck_fail(err, CKPT_E_INVAL, "metadata pickle protocol %d (4 or 5)",
                       opts->metadata_protocol);
    CK_TRY(save_options_check(opts, err));
    for (size_t i = 0; opts && opts->torch_target && i < ndescs; i++)
        for (size_t j = 0; j < descs[i]->n; j++)
            if (descs[i]->items[j].kind == SAVE_ITEM_TENSOR)
                CK_TRY(save_dtype_check(opts->torch_target, descs[i]->items[j].dtype,
                                        descs[i]->items[j].key, err));
    const char *id = opts && opts->checkpoint_id ? opts->checkpoint_id : default_id;
    char *pk = NULL;
    size_t pk_len = 0;
    CK_TRY(build_pickle(descs, ndescs, opts, id ? id : dir, &pk, &pk_len, err));
    char *tmp = NULL, *fin = NULL;
    ckpt_status s = CKPT_OK;
    tmp = save_path_join(dir, ".metadata.tmp");
    fin = save_path_join(dir, ".metadata");
    if (!tmp || !fin) {
        s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
        goto out;
    }
    bool sync = !(opts && opts->no_fsync);
    s = write_file(tmp, pk, pk_len, sync, err);
    if (s == CKPT_OK && rename(tmp, fin) != 0)
        s = ck_fail(err, CKPT_E_IO, "rename %s -> %s: %s", tmp, fin, strerror(errno));
    if (s != CKPT_OK) unlink(tmp);
    if (s == CKPT_OK && sync) s = save_fsync_dir(dir, err);
out:
    free(tmp);
    free(fin);
    free(pk);
    return s;
}

ckpt_status ckpt_save_write_metadata(const char *dir, const ckpt_save_desc *const *descs,
                                     size_t ndescs, const ckpt_save_options *opts,
                                     ckpt_error *err) {
    return save_write_metadata_id(dir, descs, ndescs, opts, NULL, err);
}
