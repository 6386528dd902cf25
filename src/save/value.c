/* value.c — the non-tensor value builder (ckpt_save_value_*) and its pickling with the
 * opcodes CPython's protocol-2 pickler chooses, which torch.save uses for data.pkl and
 * torch.load(weights_only=True) accepts. */
#include "save/save_i.h"

#include <stdlib.h>
#include <string.h>

typedef enum { V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_TUPLE, V_DICT } vkind;

struct ckpt_save_value {
    vkind kind;
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            char *s;
            size_t len;
        } str;
        struct {
            ckpt_save_value **items;
            char **keys; /* V_DICT only */
            size_t n, cap;
        } seq;
    } u;
};

static ckpt_save_value *mk(vkind k) {
    ckpt_save_value *v = calloc(1, sizeof *v);
    if (v) v->kind = k;
    return v;
}

ckpt_save_value *ckpt_save_value_none(void) { return mk(V_NONE); }
ckpt_save_value *ckpt_save_value_bool(bool b) {
    ckpt_save_value *v = mk(V_BOOL);
    if (v) v->u.b = b;
    return v;
}
ckpt_save_value *ckpt_save_value_int(int64_t i) {
    ckpt_save_value *v = mk(V_INT);
    if (v) v->u.i = i;
    return v;
}
ckpt_save_value *ckpt_save_value_float(double f) {
    ckpt_save_value *v = mk(V_FLOAT);
    if (v) v->u.f = f;
    return v;
}
ckpt_save_value *ckpt_save_value_string(const char *s) {
    if (!s || !save_utf8_valid(s, strlen(s))) return NULL;
    ckpt_save_value *v = mk(V_STR);
    if (!v) return NULL;
    v->u.str.len = strlen(s);
    v->u.str.s = strdup(s);
    if (!v->u.str.s) {
        free(v);
        return NULL;
    }
    return v;
}
ckpt_save_value *ckpt_save_value_list(void) { return mk(V_LIST); }
ckpt_save_value *ckpt_save_value_tuple(void) { return mk(V_TUPLE); }
ckpt_save_value *ckpt_save_value_dict(void) { return mk(V_DICT); }

void ckpt_save_value_free(ckpt_save_value *v) {
    if (!v) return;
    if (v->kind == V_STR) free(v->u.str.s);
    if (v->kind == V_LIST || v->kind == V_TUPLE || v->kind == V_DICT) {
        for (size_t i = 0; i < v->u.seq.n; i++) {
            ckpt_save_value_free(v->u.seq.items[i]);
            if (v->u.seq.keys) free(v->u.seq.keys[i]);
        }
        free(v->u.seq.items);
        free(v->u.seq.keys);
    }
    free(v);
}

static ckpt_status push(ckpt_save_value *c, ckpt_save_value *item, char *key) {
    if (c->u.seq.n == c->u.seq.cap) {
        size_t nc = c->u.seq.cap ? c->u.seq.cap * 2 : 4;
        ckpt_save_value **m = realloc(c->u.seq.items, nc * sizeof *m);
        if (!m) return CKPT_E_NOMEM;
        c->u.seq.items = m;
        if (c->kind == V_DICT) {
            char **k = realloc(c->u.seq.keys, nc * sizeof *k);
            if (!k) return CKPT_E_NOMEM;
            c->u.seq.keys = k;
        }
        c->u.seq.cap = nc;
    }
    c->u.seq.items[c->u.seq.n] = item;
    if (c->kind == V_DICT) c->u.seq.keys[c->u.seq.n] = key;
    c->u.seq.n++;
    return CKPT_OK;
}

ckpt_status ckpt_save_value_append(ckpt_save_value *seq, ckpt_save_value *item) {
    if (!item) return CKPT_E_NOMEM;
    if (item == seq) return CKPT_E_INVAL; /* would be a cycle; ownership stays */
    if (!seq || (seq->kind != V_LIST && seq->kind != V_TUPLE)) {
        ckpt_save_value_free(item);
        return CKPT_E_INVAL;
    }
    ckpt_status s = push(seq, item, NULL);
    if (s != CKPT_OK) ckpt_save_value_free(item);
    return s;
}

ckpt_status ckpt_save_value_set(ckpt_save_value *dict, const char *key, ckpt_save_value *item) {
    if (!item) return CKPT_E_NOMEM;
    if (item == dict) return CKPT_E_INVAL; /* would be a cycle; ownership stays */
    if (!dict || dict->kind != V_DICT || !key || !save_utf8_valid(key, strlen(key))) {
        ckpt_save_value_free(item);
        return CKPT_E_INVAL;
    }
    for (size_t i = 0; i < dict->u.seq.n; i++)
        if (strcmp(dict->u.seq.keys[i], key) == 0) {
            ckpt_save_value_free(item);
            return CKPT_E_INVAL;
        }
    char *k = strdup(key);
    ckpt_status s = k ? push(dict, item, k) : CKPT_E_NOMEM;
    if (s != CKPT_OK) {
        free(k);
        ckpt_save_value_free(item);
    }
    return s;
}

void save_value_pickle(pkw *w, const ckpt_save_value *v) {
    switch (v->kind) {
    case V_NONE: pkw_none(w); break;
    case V_BOOL: pkw_bool(w, v->u.b); break;
    case V_INT: pkw_int(w, v->u.i); break;
    case V_FLOAT: pkw_float(w, v->u.f); break;
    case V_STR:
        pkw_str(w, v->u.str.s, v->u.str.len, false);
        pkw_memoize(w);
        break;
    case V_TUPLE: {
        size_t n = v->u.seq.n;
        if (n == 0) {
            pkw_op(w, PKO_EMPTY_TUPLE);
            break;
        }
        pkw_tuple_begin(w, n);
        for (size_t i = 0; i < n; i++)
            save_value_pickle(w, v->u.seq.items[i]);
        pkw_tuple_end(w, n);
        pkw_memoize(w);
        break;
    }
    case V_LIST:
    case V_DICT: {
        bool dict = v->kind == V_DICT;
        size_t n = v->u.seq.n;
        pkw_op(w, dict ? PKO_EMPTY_DICT : PKO_EMPTY_LIST);
        pkw_memoize(w);
        for (size_t i = 0; i < n; i++) {
            pkw_batch_item_begin(w, i, n);
            if (dict) {
                pkw_str(w, v->u.seq.keys[i], strlen(v->u.seq.keys[i]), false);
                pkw_memoize(w);
            }
            save_value_pickle(w, v->u.seq.items[i]);
            pkw_batch_item_end(w, i, n, dict);
        }
        break;
    }
    }
}
