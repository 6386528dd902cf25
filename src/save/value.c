/* value.c — the non-tensor value builder (ckpt_save_value_*) and its pickling with the
 * opcodes CPython's protocol-2 pickler chooses, which torch.save uses for data.pkl and
 * torch.load(weights_only=True) accepts: scalars, str, bytes (`_codecs.encode(s, 'latin1')`
 * or `bytes()` through REDUCE), ints of any size (LONG1/LONG4), list, tuple, set and
 * frozenset (`set([...])` through REDUCE), dicts with keys of any hashable kind. */
#include "save/save_i.h"

#include "util/utf8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    V_NONE,
    V_BOOL,
    V_INT,
    V_BIGINT, /* beyond int64: minimal little-endian two's complement bytes in u.str */
    V_FLOAT,
    V_STR,
    V_BYTES,
    V_LIST,
    V_TUPLE,
    V_SET,
    V_FROZENSET,
    V_DICT
} vkind;

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
            ckpt_save_value **keys; /* V_DICT only */
            size_t n, cap;
        } seq;
    } u;
};

static bool is_seq(vkind k) {
    return k == V_LIST || k == V_TUPLE || k == V_SET || k == V_FROZENSET || k == V_DICT;
}

static ckpt_save_value *mk(vkind k) {
    ckpt_save_value *v = calloc(1, sizeof *v);
    if (v) v->kind = k;
    return v;
}

static ckpt_save_value *mk_bytes(vkind k, const void *p, size_t len) {
    ckpt_save_value *v = mk(k);
    if (!v) return NULL;
    v->u.str.len = len;
    v->u.str.s = malloc(len + 1);
    if (!v->u.str.s) {
        free(v);
        return NULL;
    }
    if (len) memcpy(v->u.str.s, p, len);
    v->u.str.s[len] = 0;
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
    if (!s || !utf8_valid(s, strlen(s))) return NULL;
    return mk_bytes(V_STR, s, strlen(s));
}
ckpt_save_value *ckpt_save_value_bytes(const void *data, size_t len) {
    if (!data && len) return NULL;
    return mk_bytes(V_BYTES, data, len);
}

ckpt_save_value *ckpt_save_value_bigint(const char *dec) {
    if (!dec) return NULL;
    bool neg = *dec == '-';
    const char *d = dec + (neg || *dec == '+');
    size_t nd = strlen(d);
    if (!nd || strspn(d, "0123456789") != nd) return NULL;
    /* magnitude, little-endian base 256: fewer than nd / 2 + 2 bytes */
    size_t cap = nd / 2 + 2, n = 1;
    unsigned char *m = calloc(cap + 1, 1);
    if (!m) return NULL;
    for (size_t k = 0; k < nd; k++) {
        unsigned carry = (unsigned)(d[k] - '0');
        for (size_t j = 0; j < n; j++) {
            unsigned x = m[j] * 10u + carry;
            m[j] = (unsigned char)x;
            carry = x >> 8;
        }
        if (carry) m[n++] = (unsigned char)carry;
    }
    n++;       /* room for the sign bit */
    if (neg) { /* two's complement: invert, add one */
        unsigned carry = 1;
        for (size_t j = 0; j < n; j++) {
            unsigned x = (unsigned)(unsigned char)~m[j] + carry;
            m[j] = (unsigned char)x;
            carry = x >> 8;
        }
    }
    while (n > 1 &&
           ((m[n - 1] == 0x00 && !(m[n - 2] & 0x80)) || (m[n - 1] == 0xff && (m[n - 2] & 0x80))))
        n--;
    ckpt_save_value *v;
    if (n <= 8) { /* fits int64: an ordinary int */
        uint64_t u = (m[n - 1] & 0x80) ? UINT64_MAX : 0;
        for (size_t j = 0; j < n; j++)
            u = (u & ~((uint64_t)0xff << (8 * j))) | ((uint64_t)m[j] << (8 * j));
        v = ckpt_save_value_int((int64_t)u);
    } else {
        v = mk_bytes(V_BIGINT, m, n);
    }
    free(m);
    return v;
}

ckpt_save_value *ckpt_save_value_list(void) { return mk(V_LIST); }
ckpt_save_value *ckpt_save_value_tuple(void) { return mk(V_TUPLE); }
ckpt_save_value *ckpt_save_value_dict(void) { return mk(V_DICT); }
ckpt_save_value *ckpt_save_value_pyset(bool frozen) { return mk(frozen ? V_FROZENSET : V_SET); }

void ckpt_save_value_free(ckpt_save_value *v) {
    if (!v) return;
    if (v->kind == V_STR || v->kind == V_BYTES || v->kind == V_BIGINT) free(v->u.str.s);
    if (is_seq(v->kind)) {
        for (size_t i = 0; i < v->u.seq.n; i++) {
            ckpt_save_value_free(v->u.seq.items[i]);
            if (v->u.seq.keys) ckpt_save_value_free(v->u.seq.keys[i]);
        }
        free(v->u.seq.items);
        free(v->u.seq.keys);
    }
    free(v);
}

/* Python's hashability: no list, dict or set anywhere in it. */
static bool hashable(const ckpt_save_value *v) {
    if (v->kind == V_LIST || v->kind == V_DICT || v->kind == V_SET) return false;
    if (v->kind == V_TUPLE || v->kind == V_FROZENSET)
        for (size_t i = 0; i < v->u.seq.n; i++)
            if (!hashable(v->u.seq.items[i])) return false;
    return true;
}

static bool numeric(const ckpt_save_value *v, int64_t *i, double *f, bool *is_float) {
    switch (v->kind) {
    case V_BOOL: *i = v->u.b, *is_float = false; return true;
    case V_INT: *i = v->u.i, *is_float = false; return true;
    case V_FLOAT: *f = v->u.f, *is_float = true; return true;
    default: return false;
    }
}

static bool value_eq(const ckpt_save_value *a, const ckpt_save_value *b);

/* Every item of a is equal to some item of b (sets hold distinct items). */
static bool items_in(const ckpt_save_value *a, const ckpt_save_value *b) {
    for (size_t i = 0; i < a->u.seq.n; i++) {
        bool found = false;
        for (size_t j = 0; !found && j < b->u.seq.n; j++)
            found = value_eq(a->u.seq.items[i], b->u.seq.items[j]);
        if (!found) return false;
    }
    return true;
}

/* Python's == for the hashable values used as dict keys (True == 1 == 1.0). */
static bool value_eq(const ckpt_save_value *a, const ckpt_save_value *b) {
    int64_t ia = 0, ib = 0;
    double fa = 0, fb = 0;
    bool fla, flb;
    if (numeric(a, &ia, &fa, &fla) && numeric(b, &ib, &fb, &flb)) {
        if (fla && flb) return fa == fb;
        if (!fla && !flb) return ia == ib;
        double f = fla ? fa : fb;
        int64_t i = fla ? ib : ia;
        return f == trunc(f) && f >= -0x1p63 && f < 0x1p63 && (int64_t)f == i;
    }
    if ((a->kind == V_SET || a->kind == V_FROZENSET) &&
        (b->kind == V_SET || b->kind == V_FROZENSET))
        return a->u.seq.n == b->u.seq.n && items_in(a, b);
    if (a->kind != b->kind) return false;
    switch (a->kind) {
    case V_NONE: return true;
    case V_STR:
    case V_BYTES:
    case V_BIGINT:
        return a->u.str.len == b->u.str.len && !memcmp(a->u.str.s, b->u.str.s, a->u.str.len);
    case V_TUPLE:
        if (a->u.seq.n != b->u.seq.n) return false;
        for (size_t i = 0; i < a->u.seq.n; i++)
            if (!value_eq(a->u.seq.items[i], b->u.seq.items[i])) return false;
        return true;
    default: return false;
    }
}

static ckpt_status push(ckpt_save_value *c, ckpt_save_value *item, ckpt_save_value *key) {
    if (c->u.seq.n == c->u.seq.cap) {
        size_t nc = c->u.seq.cap ? c->u.seq.cap * 2 : 4;
        ckpt_save_value **m = realloc(c->u.seq.items, nc * sizeof *m);
        if (!m) return CKPT_E_NOMEM;
        c->u.seq.items = m;
        if (c->kind == V_DICT) {
            ckpt_save_value **k = realloc(c->u.seq.keys, nc * sizeof *k);
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
    bool set = seq && (seq->kind == V_SET || seq->kind == V_FROZENSET);
    if (!seq || (seq->kind != V_LIST && seq->kind != V_TUPLE && !set) || (set && !hashable(item))) {
        ckpt_save_value_free(item);
        return CKPT_E_INVAL;
    }
    ckpt_status s = push(seq, item, NULL);
    if (s != CKPT_OK) ckpt_save_value_free(item);
    return s;
}

ckpt_status ckpt_save_value_set_item(ckpt_save_value *dict, ckpt_save_value *key,
                                     ckpt_save_value *item) {
    if (!key || !item || key == item || item == dict || key == dict) {
        if (key != dict) ckpt_save_value_free(key);
        if (item != key && item != dict) ckpt_save_value_free(item);
        return !key || !item ? CKPT_E_NOMEM : CKPT_E_INVAL;
    }
    ckpt_status s = CKPT_OK;
    if (!dict || dict->kind != V_DICT || !hashable(key)) s = CKPT_E_INVAL;
    for (size_t i = 0; s == CKPT_OK && i < dict->u.seq.n; i++)
        if (value_eq(dict->u.seq.keys[i], key)) s = CKPT_E_INVAL;
    if (s == CKPT_OK) s = push(dict, item, key);
    if (s != CKPT_OK) {
        ckpt_save_value_free(key);
        ckpt_save_value_free(item);
    }
    return s;
}

ckpt_status ckpt_save_value_set(ckpt_save_value *dict, const char *key, ckpt_save_value *item) {
    if (!item) return CKPT_E_NOMEM;
    if (item == dict) return CKPT_E_INVAL; /* would be a cycle; ownership stays */
    if (!key || !utf8_valid(key, strlen(key))) {
        ckpt_save_value_free(item);
        return CKPT_E_INVAL;
    }
    return ckpt_save_value_set_item(dict, ckpt_save_value_string(key), item);
}

/* bytes under protocol 2, as CPython: bytes() for b"", else
 * _codecs.encode(<the bytes decoded as latin-1>, 'latin1'); the function, the class and the
 * interned 'latin1' are memoised (BINGET on reuse), the rest BINPUT once each. */
static void pickle_bytes(pkw *w, const ckpt_save_value *v) {
    size_t n = v->u.str.len;
    if (!n) {
        pkw_global(w, "__builtin__", "bytes");
        pkw_op(w, PKO_EMPTY_TUPLE);
        pkw_op(w, PKO_REDUCE);
        pkw_memoize(w);
        return;
    }
    pkw_global(w, "_codecs", "encode");
    const unsigned char *b = (const unsigned char *)v->u.str.s;
    size_t extra = 0;
    for (size_t i = 0; i < n; i++)
        extra += b[i] >= 0x80;
    char *u = malloc(n + extra + 1);
    if (!u) {
        w->nomem = true;
        return;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (b[i] < 0x80) {
            u[k++] = (char)b[i];
        } else { /* U+0080..U+00FF in UTF-8 */
            u[k++] = (char)(0xc0 | (b[i] >> 6));
            u[k++] = (char)(0x80 | (b[i] & 0x3f));
        }
    }
    pkw_tuple_begin(w, 2);
    pkw_str(w, u, k, false);
    pkw_memoize(w);
    pkw_str(w, "latin1", 6, true);
    pkw_tuple_end(w, 2);
    pkw_memoize(w);
    pkw_op(w, PKO_REDUCE);
    pkw_memoize(w);
    free(u);
}

static void pickle_items(pkw *w, const ckpt_save_value *v, bool dict);

void save_value_pickle(pkw *w, const ckpt_save_value *v) {
    switch (v->kind) {
    case V_NONE: pkw_none(w); break;
    case V_BOOL: pkw_bool(w, v->u.b); break;
    case V_INT: pkw_int(w, v->u.i); break;
    case V_BIGINT: pkw_long_bytes(w, (const unsigned char *)v->u.str.s, v->u.str.len); break;
    case V_FLOAT: pkw_float(w, v->u.f); break;
    case V_STR:
        pkw_str(w, v->u.str.s, v->u.str.len, false);
        pkw_memoize(w);
        break;
    case V_BYTES: pickle_bytes(w, v); break;
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
    case V_SET:
    case V_FROZENSET: /* protocol < 4: set([items]) / frozenset([items]) through REDUCE */
        pkw_global(w, "__builtin__", v->kind == V_SET ? "set" : "frozenset");
        pkw_tuple_begin(w, 1);
        pkw_op(w, PKO_EMPTY_LIST);
        pkw_memoize(w);
        pickle_items(w, v, false);
        pkw_tuple_end(w, 1);
        pkw_memoize(w);
        pkw_op(w, PKO_REDUCE);
        pkw_memoize(w);
        break;
    case V_LIST:
    case V_DICT:
        pkw_op(w, v->kind == V_DICT ? PKO_EMPTY_DICT : PKO_EMPTY_LIST);
        pkw_memoize(w);
        pickle_items(w, v, v->kind == V_DICT);
        break;
    }
}

/* APPENDS / SETITEMS in Python's batches. */
static void pickle_items(pkw *w, const ckpt_save_value *v, bool dict) {
    size_t n = v->u.seq.n;
    for (size_t i = 0; i < n; i++) {
        pkw_batch_item_begin(w, i, n);
        if (dict) save_value_pickle(w, v->u.seq.keys[i]);
        save_value_pickle(w, v->u.seq.items[i]);
        pkw_batch_item_end(w, i, n, dict);
    }
}

/* ------------------------------------------------------------------ from the reader */

ckpt_save_value *ckpt_save_value_from(const ckpt_value *v, const char **why) {
    size_t len = 0;
    switch (ckpt_value_type_of(v)) {
    case CKPT_VALUE_NONE: return ckpt_save_value_none();
    case CKPT_VALUE_BOOL: return ckpt_save_value_bool(ckpt_value_bool(v));
    case CKPT_VALUE_INT: return ckpt_save_value_int(ckpt_value_int(v));
    case CKPT_VALUE_BIGINT: return ckpt_save_value_bigint(ckpt_value_str(v, NULL));
    case CKPT_VALUE_FLOAT: return ckpt_save_value_float(ckpt_value_float(v));
    case CKPT_VALUE_STRING: return ckpt_save_value_string(ckpt_value_str(v, NULL));
    case CKPT_VALUE_BYTES: {
        const char *b = ckpt_value_str(v, &len);
        return ckpt_save_value_bytes(b, len);
    }
    case CKPT_VALUE_LIST:
    case CKPT_VALUE_TUPLE:
    case CKPT_VALUE_SET: {
        ckpt_value_type t = ckpt_value_type_of(v);
        ckpt_save_value *seq = t == CKPT_VALUE_LIST ? ckpt_save_value_list()
                               : t == CKPT_VALUE_TUPLE
                                   ? ckpt_save_value_tuple()
                                   : ckpt_save_value_pyset(ckpt_value_set_frozen(v));
        for (size_t i = 0; seq && i < ckpt_value_len(v); i++) {
            ckpt_save_value *item = ckpt_save_value_from(ckpt_value_item(v, i), why);
            if (!item || ckpt_save_value_append(seq, item) != CKPT_OK) {
                ckpt_save_value_free(seq);
                return NULL;
            }
        }
        return seq;
    }
    case CKPT_VALUE_DICT: {
        ckpt_save_value *d = ckpt_save_value_dict();
        for (size_t i = 0; d && i < ckpt_value_len(v); i++) {
            ckpt_save_value *k = ckpt_save_value_from(ckpt_value_dict_key(v, i), why);
            ckpt_save_value *item = k ? ckpt_save_value_from(ckpt_value_dict_val(v, i), why) : NULL;
            if (!k || !item || ckpt_save_value_set_item(d, k, item) != CKPT_OK) {
                if (!item) ckpt_save_value_free(k);
                ckpt_save_value_free(d);
                return NULL;
            }
        }
        return d;
    }
    case CKPT_VALUE_TENSOR: *why = "an embedded tensor"; return NULL;
    case CKPT_VALUE_OBJECT: *why = "an object of another class"; return NULL;
    }
    *why = "an unknown kind of value";
    return NULL;
}
