/* key.c — turning a ckpt_save_key into the flat key and planner_data path of an entry, and
 * the checks of its names. */
#include "save/save_i.h"

#include "util/error.h"
#include "util/strbuf.h"
#include "util/utf8.h"

#include <stdlib.h>
#include <string.h>

void save_item_release(save_item *it) {
    free(it->key);
    for (size_t i = 0; i < it->npath; i++)
        free(it->path[i].name);
    free(it->path);
    free(it->dims);
    memset(it, 0, sizeof *it);
}

save_item *save_desc_push(ckpt_save_desc *d) {
    if (d->n == d->cap) {
        size_t c = d->cap ? d->cap * 2 : 16;
        save_item *m = realloc(d->items, c * sizeof *m);
        if (!m) return NULL;
        d->items = m;
        d->cap = c;
    }
    save_item *it = &d->items[d->n++];
    memset(it, 0, sizeof *it);
    return it;
}

static bool all_digits(const char *s, size_t n) {
    if (n == 0 || n > 18) return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return false;
    return true;
}

static ckpt_status add_elem(save_item *it, const char *name, size_t len, bool is_index,
                            int64_t index, ckpt_error *err) {
    save_elem *m = realloc(it->path, (it->npath + 1) * sizeof *m);
    if (!m) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    it->path = m;
    save_elem *e = &it->path[it->npath];
    e->name = NULL;
    e->index = index;
    if (!is_index) {
        if (!utf8_valid(name, len))
            return ck_fail(err, CKPT_E_INVAL, "key element is not valid UTF-8");
        e->name = strndup(name, len);
        if (!e->name) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    } else if (index < 0) {
        return ck_fail(err, CKPT_E_INVAL, "negative list position in key path");
    }
    it->npath++;
    return CKPT_OK;
}

ckpt_status save_key_resolve(const ckpt_save_key *k, save_item *it, ckpt_error *err) {
    if (!k) return ck_fail(err, CKPT_E_INVAL, "no key");
    if (k->nelems) {
        if (!k->elems) return ck_fail(err, CKPT_E_INVAL, "key: nelems without elems");
        for (size_t i = 0; i < k->nelems; i++) {
            const ckpt_save_elem *e = &k->elems[i];
            CK_TRY(add_elem(it, e->name, e->name ? strlen(e->name) : 0, !e->name, e->index, err));
        }
    } else if (k->path && *k->path) {
        const char *p = k->path;
        for (;;) {
            const char *slash = strchr(p, '/');
            size_t n = slash ? (size_t)(slash - p) : strlen(p);
            if (all_digits(p, n))
                CK_TRY(add_elem(it, NULL, 0, true, strtoll(p, NULL, 10), err));
            else
                CK_TRY(add_elem(it, p, n, false, 0, err));
            if (!slash) break;
            p = slash + 1;
        }
    } else if (k->flat && *k->flat) {
        CK_TRY(add_elem(it, k->flat, strlen(k->flat), false, 0, err));
    } else {
        return ck_fail(err, CKPT_E_INVAL, "empty key");
    }
    if (k->flat) {
        if (!*k->flat) return ck_fail(err, CKPT_E_INVAL, "empty flat key");
        if (!utf8_valid(k->flat, strlen(k->flat)))
            return ck_fail(err, CKPT_E_INVAL, "flat key is not valid UTF-8");
        it->key = strdup(k->flat);
        if (!it->key) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
        return CKPT_OK;
    }
    ck_strbuf sb = CK_STRBUF_INIT;
    for (size_t i = 0; i < it->npath; i++) {
        if (i) ck_strbuf_addc(&sb, '.');
        if (it->path[i].name)
            ck_strbuf_adds(&sb, it->path[i].name);
        else
            ck_strbuf_addf(&sb, "%lld", (long long)it->path[i].index);
    }
    ckpt_status st = ck_strbuf_status(&sb, "key", err);
    if (st != CKPT_OK) {
        ck_strbuf_release(&sb);
        return st;
    }
    it->key = ck_strbuf_detach(&sb, NULL);
    if (!it->key) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    return CKPT_OK;
}
