/* st_view.c — virtual safetensors files (`.safetensors/<top>.safetensors`, `@all`, `@root`): the
 * header computed from the metadata (tensors ordered by item size, largest first, so every
 * tensor is aligned to its item size; the JSON padded with spaces to a multiple of 8), and the
 * table mapping data offsets back to tensors.  Tensors of dtypes safetensors cannot name
 * (complex128, float8_e8m0fnu) are left out and listed in `__metadata__`. */
#include "tree/tree_i.h"
#include "util/error.h"
#include "util/json.h"
#include "util/strbuf.h"

#include <stdlib.h>
#include <string.h>

typedef struct collect {
    const tree_ckpt *c;
    const ckpt_entry **v;
    size_t n, cap;
    ck_strbuf skipped; /* JSON array text of left-out paths */
} collect;

static bool push(collect *k, const ckpt_entry *e) {
    if (k->n == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 64;
        const ckpt_entry **m = realloc(k->v, cap * sizeof *m);
        if (!m) return false;
        k->v = m;
        k->cap = cap;
    }
    k->v[k->n++] = e;
    return true;
}

/* Tensors under node `at`, depth first in name order (`files_only`: the files directly in
 * `at`, no subdirectory). */
static bool walk(collect *k, uint32_t at, bool files_only) {
    const tnode *n = &k->c->nodes[at];
    if (n->e) {
        if (ckpt_entry_kind_of(n->e) != CKPT_ENTRY_TENSOR) return true;
        if (ckpt_dtype_safetensors_name(ckpt_entry_dtype(n->e)) && !ckpt_entry_problem(n->e))
            return push(k, n->e);
        ck_strbuf_addc(&k->skipped, k->skipped.len ? ',' : '[');
        ck_json_escape(&k->skipped, ckpt_entry_path(n->e), strlen(ckpt_entry_path(n->e)));
        return true;
    }
    for (uint32_t i = 0; i < n->nkids; i++) {
        uint32_t kid = k->c->kid_ids[n->kids + i];
        if (files_only && !k->c->nodes[kid].e) continue;
        if (!walk(k, kid, false)) return false;
    }
    return true;
}

static ckpt_status build(tree_ckpt *c, st_file *f, ckpt_error *err) {
    collect k = {.c = c};
    if (!walk(&k, f->top, f->root_only)) {
        free(k.v);
        ck_strbuf_release(&k.skipped);
        return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    }
    /* stable partition by item size, 16 down to 1: the walk order is kept within a size */
    const ckpt_entry **sorted = malloc((k.n ? k.n : 1) * sizeof *sorted);
    size_t m = 0;
    for (size_t size = 16; sorted && size >= 1; size /= 2)
        for (size_t i = 0; i < k.n; i++)
            if (ckpt_dtype_itemsize(ckpt_entry_dtype(k.v[i])) == size) sorted[m++] = k.v[i];
    free(k.v);
    if (!sorted) {
        ck_strbuf_release(&k.skipped);
        return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    }
    f->tensors = sorted;
    f->ntensors = (uint32_t)m;
    f->begin = malloc((m ? m : 1) * sizeof *f->begin);
    if (!f->begin) {
        ck_strbuf_release(&k.skipped);
        return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    }

    size_t prefix = f->top ? strlen(c->nodes[f->top].name) + 1 : 0;
    ck_strbuf sb = CK_STRBUF_INIT;
    ck_strbuf_add(&sb, "\0\0\0\0\0\0\0\0", 8);
    ck_strbuf_adds(&sb, "{\"__metadata__\":{\"format\":\"pt\",\"ckptfs.source\":");
    ck_json_escape(&sb, c->dir, strlen(c->dir));
    if (k.skipped.len) {
        ck_strbuf_addc(&k.skipped, ']');
        ck_strbuf_adds(&sb, ",\"ckptfs.skipped\":");
        ck_json_escape(&sb, ck_strbuf_cstr(&k.skipped), k.skipped.len);
    }
    ck_strbuf_release(&k.skipped);
    ck_strbuf_addc(&sb, '}');
    uint64_t at = 0;
    for (size_t i = 0; i < m; i++) {
        const ckpt_entry *e = sorted[i];
        const char *path = ckpt_entry_path(e) + prefix;
        ck_strbuf_addc(&sb, ',');
        ck_json_escape(&sb, path, strlen(path));
        ck_strbuf_addf(&sb, ":{\"dtype\":\"%s\",\"shape\":[",
                       ckpt_dtype_safetensors_name(ckpt_entry_dtype(e)));
        for (int d = 0; d < ckpt_entry_ndim(e); d++)
            ck_strbuf_addf(&sb, "%s%lld", d ? "," : "", (long long)ckpt_entry_shape(e)[d]);
        uint64_t nb = ckpt_entry_nbytes(e);
        ck_strbuf_addf(&sb, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                       (unsigned long long)(at + nb));
        f->begin[i] = at;
        at += nb;
    }
    ck_strbuf_addc(&sb, '}');
    while (sb.len % 8)
        ck_strbuf_addc(&sb, ' ');
    CK_TRY(ck_strbuf_status(&sb, "safetensors header", err));
    size_t len = 0;
    f->header = ck_strbuf_detach(&sb, &len);
    if (!f->header) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    uint64_t hl = len - 8;
    for (int i = 0; i < 8; i++)
        f->header[i] = (char)((hl >> (8 * i)) & 0xFF);
    f->header_len = len;
    for (size_t i = 0; i < m; i++)
        f->begin[i] += len;
    f->size = len + at;
    return CKPT_OK;
}

/* Builds f once (under the checkpoint's open lock); a failure is remembered. */
ckpt_status tree_st_build(tree_ckpt *c, st_file *f, ckpt_error *err) {
    pthread_mutex_lock(&c->open_lock);
    ckpt_status s;
    if (f->header) {
        s = CKPT_OK;
    } else if (f->status != CKPT_OK) {
        s = ck_fail(err, f->status, "%s/.safetensors/%s could not be built", c->dir, f->name);
    } else {
        s = build(c, f, err);
        if (s != CKPT_OK) {
            f->status = s;
            free(f->tensors);
            free(f->begin);
            f->tensors = NULL;
            f->begin = NULL;
        }
    }
    pthread_mutex_unlock(&c->open_lock);
    return s;
}
