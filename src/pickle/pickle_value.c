/* pickle_value.c — the decoded document and its values: arena-backed construction with value
 * counting and nesting-depth accounting (used by the VM), UTF-8 validation, and the read-only
 * helpers consumers use to walk a tree (pk_get, pk_as_int_seq, ...). */
#include "pickle/pickle_i.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- document */

const pk_value *pk_doc_root(const pk_doc *doc) { return doc ? doc->root : NULL; }

uint64_t pk_doc_bytes_used(const pk_doc *doc) {
    return doc && doc->arena ? ck_arena_used(doc->arena) : 0;
}

void pk_doc_free(pk_doc *doc) {
    if (!doc) return;
    ck_arena_free(doc->arena);
    free(doc);
}

/* ---------------------------------------------------------------- construction */

static bool fail(pk_builder *b, ckpt_status st, const char *why, uint64_t limit) {
    b->status = st;
    b->why = why;
    b->limit = limit;
    return false;
}

void *pkb_alloc(pk_builder *b, size_t size) {
    void *p = ck_arena_alloc(b->arena, size);
    if (!p) {
        if (ck_arena_over_budget(b->arena))
            fail(b, CKPT_E_LIMIT, "decoded values exceed the memory budget", b->max_bytes);
        else
            fail(b, CKPT_E_NOMEM, "out of memory", 0);
    }
    return p;
}

bool pkb_is_container(pk_type t) {
    switch (t) {
    case PK_TUPLE:
    case PK_LIST:
    case PK_SET:
    case PK_FROZENSET:
    case PK_DICT:
    case PK_OBJECT:
    case PK_PERSID: return true;
    default: return false;
    }
}

/* Bytes a value of type t needs: the header and its union member only. */
static size_t variant_size(pk_type t) {
    pk_value *v = NULL;
    size_t head = offsetof(pk_value, u);
    switch (t) {
    case PK_NONE:
    case PK_BOOL:
    case PK_INT:
    case PK_FLOAT: return head + sizeof v->u.i;
    case PK_BIGINT:
    case PK_STR:
    case PK_BYTES: return head + sizeof v->u.str;
    case PK_TUPLE:
    case PK_LIST:
    case PK_SET:
    case PK_FROZENSET: return head + sizeof v->u.seq;
    case PK_DICT: return head + sizeof v->u.dict;
    case PK_GLOBAL: return head + sizeof v->u.global;
    case PK_OBJECT: return head + sizeof v->u.obj;
    case PK_PERSID: return head + sizeof v->u.persid;
    }
    return sizeof *v;
}

static bool count_item(pk_builder *b) {
    if (b->items >= b->max_items) return fail(b, CKPT_E_LIMIT, "too many values", b->max_items);
    b->items++;
    return true;
}

pk_value *pkb_scalar(pk_builder *b, pk_type t) {
    if (!count_item(b)) return NULL;
    pk_value *v = pkb_alloc(b, variant_size(t));
    if (v) v->type = t;
    return v;
}

pk_value *pkb_container(pk_builder *b, pk_type t) {
    pk_value *v = pkb_scalar(b, t);
    if (v) v->depth = 1;
    return v;
}

bool pkb_nest(pk_builder *b, pk_value *c, uint32_t child_depth) {
    if (child_depth >= c->depth) {
        if (child_depth >= b->max_depth)
            return fail(b, CKPT_E_LIMIT, "containers nested too deeply", b->max_depth);
        c->depth = child_depth + 1;
    }
    return true;
}

pk_value *pkb_string_alloc(pk_builder *b, pk_type t, size_t n, char **bytes) {
    size_t head = variant_size(t);
    if (n > SIZE_MAX - head - 16) {
        fail(b, CKPT_E_LIMIT, "string too long", 0);
        return NULL;
    }
    if (!count_item(b)) return NULL;
    pk_value *v = pkb_alloc(b, head + n + 1);
    if (!v) return NULL;
    v->type = t;
    char *p = (char *)v + head;
    p[n] = '\0';
    v->u.str.ptr = p;
    v->u.str.len = n;
    *bytes = p;
    return v;
}

void pkb_string_trim(pk_value *v, size_t n) {
    ((char *)v->u.str.ptr)[n] = '\0';
    v->u.str.len = n;
}

pk_value *pkb_string(pk_builder *b, pk_type t, const uint8_t *p, size_t n) {
    char *s;
    pk_value *v = pkb_string_alloc(b, t, n, &s);
    if (v && n) memcpy(s, p, n);
    return v;
}

static uint32_t max_depth_of(pk_value *const *items, size_t n) {
    uint32_t d = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t di = pkb_depth(items[i]);
        if (di > d) d = di;
    }
    return d;
}

/* Makes room for `extra` more slots in an arena array of `len` used / `*cap` slots. */
static bool reserve(pk_builder *b, pk_value ***arr, size_t len, size_t *cap, size_t extra) {
    if (extra > SIZE_MAX / sizeof(pk_value *) - len)
        return fail(b, CKPT_E_LIMIT, "container too large", 0);
    size_t need = len + extra;
    if (need <= *cap) return true;
    size_t ncap = *cap ? *cap : need; /* the first batch exactly, then doubling */
    while (ncap < need)
        ncap = ncap > SIZE_MAX / 2 / sizeof(pk_value *) ? need : ncap * 2;
    pk_value **p =
        ck_arena_grow(b->arena, *arr, len * sizeof(pk_value *), ncap * sizeof(pk_value *));
    if (!p) {
        if (ck_arena_over_budget(b->arena))
            fail(b, CKPT_E_LIMIT, "decoded values exceed the memory budget", b->max_bytes);
        else
            fail(b, CKPT_E_NOMEM, "out of memory", 0);
        return false;
    }
    *arr = p;
    *cap = ncap;
    return true;
}

pk_value *pkb_seq(pk_builder *b, pk_type t, pk_value *const *items, size_t n) {
    pk_value *v = pkb_container(b, t);
    if (!v) return NULL;
    if (n) {
        if (!reserve(b, &v->u.seq.items, 0, &v->u.seq.cap, n)) return NULL;
        memcpy(v->u.seq.items, items, n * sizeof *items);
        v->u.seq.len = n;
        if (!pkb_nest(b, v, max_depth_of(items, n))) return NULL;
    }
    return v;
}

bool pkb_seq_extend(pk_builder *b, pk_value *seq, pk_value *const *items, size_t n) {
    if (!n) return true;
    /* Depth first: the items may include seq itself (a list appended into itself). */
    if (!pkb_nest(b, seq, max_depth_of(items, n))) return false;
    if (!reserve(b, &seq->u.seq.items, seq->u.seq.len, &seq->u.seq.cap, n)) return false;
    memcpy(seq->u.seq.items + seq->u.seq.len, items, n * sizeof *items);
    seq->u.seq.len += n;
    return true;
}

/* An array built earlier holding exactly the keys kv[0], kv[2], ... (npairs of them), or NULL;
 * *slot tells where to remember the array about to be built for them instead. */
static pk_value **shared_keys(pk_builder *b, pk_value *const *kv, size_t npairs,
                              pkb_keys_slot **slot) {
    uint64_t h = npairs;
    for (size_t i = 0; i < npairs; i++)
        h = (h ^ (uintptr_t)kv[2 * i]) * 0x100000001b3ull;
    h ^= h >> 29;
    *slot = &b->keys_cache[(h * 0x9E3779B97F4A7C15ull) >> (64 - b->keys_bits)];
    pk_value **keys = (*slot)->keys;
    if (!keys || (*slot)->hash != h || (*slot)->len != npairs) {
        **slot = (pkb_keys_slot){h, NULL, npairs};
        return NULL;
    }
    for (size_t i = 0; i < npairs; i++)
        if (keys[i] != kv[2 * i]) return NULL;
    return keys;
}

bool pkb_dict_extend(pk_builder *b, pk_value *dict, pk_value *const *kv, size_t npairs) {
    if (!npairs) return true;
    if (!pkb_nest(b, dict, max_depth_of(kv, 2 * npairs))) return false;
    size_t len = dict->u.dict.len, cap = dict->u.dict.cap;
    bool shared = false;
    if (len + npairs > cap) {
        size_t kcap = cap, vcap = cap;
        pkb_keys_slot *slot = NULL;
        pk_value **keys = cap || !b->keys_cache ? NULL : shared_keys(b, kv, npairs, &slot);
        if (keys) { /* the first batch has the keys of an earlier dict */
            dict->u.dict.keys = keys;
            kcap = npairs;
            shared = true;
        } else if (!reserve(b, &dict->u.dict.keys, len, &kcap, npairs)) {
            return false;
        } else if (slot) {
            slot->keys = dict->u.dict.keys; /* filled below */
        }
        if (!reserve(b, &dict->u.dict.vals, len, &vcap, npairs)) return false;
        dict->u.dict.cap = kcap; /* both grow by the same rule */
    }
    for (size_t i = 0; i < npairs; i++) {
        if (!shared) dict->u.dict.keys[len + i] = kv[2 * i];
        dict->u.dict.vals[len + i] = kv[2 * i + 1];
    }
    dict->u.dict.len = len + npairs;
    return true;
}

/* ---------------------------------------------------------------- consumer helpers */

const char *pk_type_name(pk_type t) {
    switch (t) {
    case PK_NONE: return "None";
    case PK_BOOL: return "bool";
    case PK_INT: return "int";
    case PK_BIGINT: return "bigint";
    case PK_FLOAT: return "float";
    case PK_STR: return "str";
    case PK_BYTES: return "bytes";
    case PK_TUPLE: return "tuple";
    case PK_LIST: return "list";
    case PK_SET: return "set";
    case PK_FROZENSET: return "frozenset";
    case PK_DICT: return "dict";
    case PK_GLOBAL: return "global";
    case PK_OBJECT: return "object";
    case PK_PERSID: return "persistent id";
    }
    return "?";
}

bool pk_is_global(const pk_value *v, const char *module, const char *name) {
    if (!v || v->type != PK_GLOBAL || !name) return false;
    if (strcmp(v->u.global.name, name) != 0) return false;
    return !module || strcmp(v->u.global.module, module) == 0;
}

static const pk_value *class_of(const pk_value *v) {
    if (!v) return NULL;
    if (v->type == PK_OBJECT) v = v->u.obj.cls;
    return v && v->type == PK_GLOBAL ? v : NULL;
}

const char *pk_class_name(const pk_value *v) {
    const pk_value *g = class_of(v);
    return g ? g->u.global.name : NULL;
}

const char *pk_class_module(const pk_value *v) {
    const pk_value *g = class_of(v);
    return g ? g->u.global.module : NULL;
}

/* Index of the last occurrence of key in d (a repeated key's last value wins, as in Python),
 * or SIZE_MAX.  Keys are usually short and differ early: the first byte is checked before
 * the call to memcmp. */
static size_t dict_find(const pk_value *d, const char *key) {
    size_t klen = strlen(key);
    for (size_t i = d->u.dict.len; i-- > 0;) {
        const pk_value *k = d->u.dict.keys[i];
        if (k->type == PK_STR && k->u.str.len == klen && k->u.str.ptr[0] == key[0] &&
            memcmp(k->u.str.ptr, key, klen) == 0)
            return i;
    }
    return SIZE_MAX;
}

/* The dict pk_get looks in. */
static const pk_value *fields_of(const pk_value *v) {
    if (!v) return NULL;
    if (v->type == PK_DICT) return v;
    if (v->type != PK_OBJECT) return NULL;
    const pk_value *st = v->u.obj.state;
    if (st && st->type == PK_DICT) return st;
    const pk_value *di = pk_obj_dictitems(v);
    if (di && di->type == PK_DICT) return di;
    return NULL;
}

const pk_value *pk_get(const pk_value *v, const char *key) {
    const pk_value *d = key ? fields_of(v) : NULL;
    size_t i = d ? dict_find(d, key) : SIZE_MAX;
    return i == SIZE_MAX ? NULL : d->u.dict.vals[i];
}

const pk_value *pk_get_cached(const pk_value *v, const char *key, pk_key_cache *cache) {
    const pk_value *d = key && cache ? fields_of(v) : NULL;
    if (!d || !d->u.dict.len) return NULL;
    /* The keys below len of an array never change (arrays are only appended to), so the
     * array and length tell the keys. */
    if (d->u.dict.keys != cache->keys || d->u.dict.len != cache->len) {
        cache->keys = d->u.dict.keys;
        cache->len = d->u.dict.len;
        cache->pos = dict_find(d, key);
    }
    return cache->pos == SIZE_MAX ? NULL : d->u.dict.vals[cache->pos];
}

static bool is_seq(const pk_value *v) {
    return v && (v->type == PK_TUPLE || v->type == PK_LIST || v->type == PK_SET ||
                 v->type == PK_FROZENSET);
}

size_t pk_len(const pk_value *v) {
    if (is_seq(v)) return v->u.seq.len;
    if (v && v->type == PK_DICT) return v->u.dict.len;
    return 0;
}

const pk_value *pk_item(const pk_value *v, size_t i) {
    if (!is_seq(v) || i >= v->u.seq.len) return NULL;
    return v->u.seq.items[i];
}

static inline bool int_of(const pk_value *v, int64_t *out) {
    if (v->type == PK_INT)
        *out = v->u.i;
    else if (v->type == PK_BOOL)
        *out = v->u.b ? 1 : 0;
    else
        return false;
    return true;
}

bool pk_as_int(const pk_value *v, int64_t *out) {
    int64_t x;
    if (!v || !int_of(v, &x)) return false;
    if (out) *out = x;
    return true;
}

/* strcmp(a, b) == 0 for the short names compared here, inlined. */
static inline bool name_is(const char *a, const char *b) {
    while (*a && *a == *b)
        a++, b++;
    return *a == *b;
}

bool pk_as_int_seq(const pk_value *v, int64_t *out, size_t cap, size_t *n) {
    if (!v) return false;
    if (v->type == PK_OBJECT) {
        const char *name = pk_class_name(v);
        const pk_value *a = v->u.obj.args;
        if (!name || !name_is(name, "Size")) return false;
        if (!a || a->type != PK_TUPLE || a->u.seq.len != 1) return false;
        v = a->u.seq.items[0];
    }
    if (v->type != PK_TUPLE && v->type != PK_LIST) return false;
    size_t len = v->u.seq.len;
    if (len > cap) return false;
    for (size_t i = 0; i < len; i++) {
        int64_t x;
        if (!int_of(v->u.seq.items[i], &x)) return false;
        if (out) out[i] = x;
    }
    if (n) *n = len;
    return true;
}

const char *pk_as_str(const pk_value *v) { return v && v->type == PK_STR ? v->u.str.ptr : NULL; }
