/* check.c — integrity checks behind `ckpt verify`: that a tensor's chunks tile it exactly,
 * that every chunk decodes and matches its metadata, and that every stored range lies
 * inside its data file. */
#include "index/reader_i.h"

#include "util/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct box_ref {
    const int64_t *off;
    const int64_t *sz;
    size_t index;
} box_ref;

static int by_first_dim(const void *a, const void *b) {
    const box_ref *x = a, *y = b;
    return x->off[0] < y->off[0] ? -1 : x->off[0] > y->off[0];
}

static bool overlap(const box_ref *a, const box_ref *b, int nd) {
    for (int d = 0; d < nd; d++)
        if (a->off[d] + a->sz[d] <= b->off[d] || b->off[d] + b->sz[d] <= a->off[d]) return false;
    return true;
}

ckpt_status ckpt_entry_check_layout(const ckpt_entry *e, ckpt_error *err) {
    if (e->kind != CKPT_ENTRY_TENSOR) return CKPT_OK;
    if (e->problem) return ck_fail(err, CKPT_E_FORMAT, "'%s': %s", e->key, e->problem);
    int nd = e->ndim;
    uint64_t sum = 0;
    size_t n = 0;
    box_ref *refs = malloc((e->nchunks + 1) * sizeof *refs);
    if (!refs) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    for (size_t k = 0; k < e->nchunks; k++) {
        const ck_chunk *c = &e->chunks[k];
        if (!c->numel) continue;
        sum += c->numel;
        refs[n++] = (box_ref){c->offsets, c->sizes, k};
    }
    ckpt_status s = CKPT_OK;
    if (nd == 0) {
        if (n != 1)
            s = ck_fail(err, CKPT_E_FORMAT, "'%s': 0-d tensor has %zu stored chunks", e->key, n);
        free(refs);
        return s;
    }
    qsort(refs, n, sizeof *refs, by_first_dim);
    for (size_t i = 0; i < n && s == CKPT_OK; i++) {
        for (size_t j = i + 1; j < n && refs[j].off[0] < refs[i].off[0] + refs[i].sz[0]; j++) {
            if (overlap(&refs[i], &refs[j], nd)) {
                s = ck_fail(err, CKPT_E_FORMAT, "'%s': chunks %zu and %zu overlap", e->key,
                            refs[i].index, refs[j].index);
                break;
            }
        }
    }
    if (s == CKPT_OK && sum != e->numel)
        s = ck_fail(err, CKPT_E_FORMAT,
                    "'%s': chunks hold %llu elements but the tensor has %llu (gap in the layout)",
                    e->key, (unsigned long long)sum, (unsigned long long)e->numel);
    free(refs);
    return s;
}

ckpt_status ckpt_entry_check_chunk(ckpt_reader *r, const ckpt_entry *e, size_t i, ckpt_error *err) {
    if (e->kind != CKPT_ENTRY_TENSOR || i >= e->nchunks)
        return ck_fail(err, CKPT_E_INVAL, "'%s' has no chunk %zu", e->key, i);
    ck_chunk *c = &e->chunks[i];
    if (!c->numel) return CKPT_OK;
    return ck_chunk_resolve(r, e, c, err);
}

static ckpt_status check_range(ckpt_reader *r, const ck_loc *loc, const char *key,
                               const uint64_t *sizes, ckpt_error *err) {
    if (loc->file_id < 0)
        return ck_fail(err, CKPT_E_FORMAT, "'%s': %s", key,
                       loc->problem ? loc->problem : "no storage location");
    uint64_t fsz = sizes[loc->file_id];
    if (fsz == UINT64_MAX)
        return ck_fail(err, CKPT_E_NOTFOUND, "'%s': data file %s is missing", key,
                       r->files[loc->file_id].name);
    if (loc->offset > fsz || loc->length > fsz - loc->offset)
        return ck_fail(
            err, CKPT_E_RANGE, "'%s': bytes [%llu, %llu) of %s lie past its end (%llu bytes)", key,
            (unsigned long long)loc->offset, (unsigned long long)(loc->offset + loc->length),
            r->files[loc->file_id].name, (unsigned long long)fsz);
    return CKPT_OK;
}

ckpt_status ckpt_reader_check_ranges(ckpt_reader *r, ckpt_check_fn report, void *ctx,
                                     uint64_t *failures) {
    uint64_t *sizes = malloc((r->nfiles + 1) * sizeof *sizes);
    if (!sizes) return CKPT_E_NOMEM;
    uint64_t bad = 0;
    ckpt_error e;
    for (size_t f = 0; f < r->nfiles; f++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", r->dir, r->files[f].name);
        sizes[f] = stat(path, &st) == 0 && S_ISREG(st.st_mode) ? (uint64_t)st.st_size : UINT64_MAX;
        if (sizes[f] == UINT64_MAX) {
            ck_fail(&e, CKPT_E_NOTFOUND, "data file %s is missing or not a regular file",
                    r->files[f].name);
            bad++;
            if (report) report(ctx, NULL, &e);
        }
    }
    for (size_t i = 0; i < r->nentries; i++) {
        const ckpt_entry *en = &r->entries[i];
        if (en->kind == CKPT_ENTRY_OBJECT) {
            if (en->value) continue; /* inside a torch.save file's pickle: no range of its own */
            if (check_range(r, &en->loc, en->key, sizes, &e) != CKPT_OK) {
                bad++;
                if (report) report(ctx, en, &e);
            }
            continue;
        }
        for (size_t k = 0; k < en->nchunks; k++) {
            const ck_chunk *c = &en->chunks[k];
            if (!c->numel) continue;
            if (en->flat && en->flat[k].skip)
                continue; /* a later box of a Megatron flat piece: one item, one report */
            if (check_range(r, &c->loc, en->key, sizes, &e) != CKPT_OK) {
                bad++;
                if (report) report(ctx, en, &e);
            }
        }
    }
    free(sizes);
    if (failures) *failures = bad;
    return bad ? CKPT_E_FORMAT : CKPT_OK;
}
