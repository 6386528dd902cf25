/* convert.c — turning a decoded pickle (pk_value tree) into the public ckpt_value tree of a
 * ckpt_object, recognising the idioms torch.save (pickle protocol 2) and CPython use to spell
 * plain values:
 *   _codecs.encode(str, 'latin1')                 -> BYTES (latin-1 encoded)
 *   builtins.bytes()                              -> BYTES (empty)
 *   builtins.set / frozenset (list)               -> SET (a frozenset marked frozen)
 *   collections.OrderedDict / defaultdict         -> DICT (args pairs, then SETITEMs; a
 *                                                    defaultdict's factory is dropped)
 *   torch.Size((...))                             -> TUPLE
 *   torch._utils._rebuild_tensor_v2/_v3,
 *   torch._utils._rebuild_parameter               -> TENSOR (only inside a torch.save item)
 *   numpy.(_)core.multiarray.scalar(dtype, bytes) -> BOOL / INT / FLOAT for b1 i1-8 u1-8 f2-8
 *   builtins.getattr(Class, 'NAME') (enum member) -> reference "module.Class.NAME"
 *   a bare global (class, function, torch dtype)  -> reference "module.name" (args NULL)
 *   a persistent id outside a tensor              -> OBJECT "persistent_load" with args (pid,)
 *   anything else                                 -> OBJECT "module.name" + args/state/...
 * Module names are reported as Python 3 spells them (`__builtin__` -> `builtins`,
 * `copy_reg` -> `copyreg`, `__builtin__.xrange` -> `builtins.range`: pickle's fix_imports).  Shared
 * pickle nodes are converted once (a pointer map), so the result is a DAG the size of the pickle;
 * cycles and paths longer than CK_VALUE_MAX_DEPTH (memoized subtrees counted with their height)
 * fail with CKPT_E_LIMIT. */
#include "value/value.h"

#include "util/error.h"
#include "value/bigint.h"
#include "value/value_i.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct memo_slot {
    const pk_value *key;
    ckpt_value *val; /* NULL while the node is being converted */
    unsigned height; /* longest path down from val, counted in values */
} memo_slot;

typedef struct conv_ctx {
    ck_arena *arena;
    uint64_t max_bytes;  /* the arena and the memo slots together; 0: unbounded */
    const ts_item *item; /* NULL: tensor nodes stay objects */
    bool borrow;         /* strings may point into the pickle (the item keeps it alive) */
    memo_slot *slots;    /* open addressing, cap a power of two, at most half full */
    size_t cap;
    size_t len;
    ckpt_error *err;
} conv_ctx;

/* ------------------------------------------------------------------ memo */

static size_t memo_index(const pk_value *key, size_t cap) {
    uint64_t h = (uint64_t)(uintptr_t)key * UINT64_C(0x9E3779B97F4A7C15);
    return (size_t)(h ^ (h >> 29)) & (cap - 1);
}

static memo_slot *memo_find(const conv_ctx *c, const pk_value *key) {
    if (!c->cap) return NULL;
    for (size_t i = memo_index(key, c->cap);; i = (i + 1) & (c->cap - 1)) {
        if (c->slots[i].key == key) return &c->slots[i];
        if (!c->slots[i].key) return NULL;
    }
}

static ckpt_status over_budget(conv_ctx *c) {
    return ck_fail(c->err, CKPT_E_LIMIT,
                   "the value's tree exceeds what its memory budget leaves it (%llu bytes)",
                   (unsigned long long)c->max_bytes);
}

static ckpt_status memo_grow(conv_ctx *c) {
    size_t cap = c->cap ? c->cap * 2 : 256;
    if (c->max_bytes) { /* the slots count against the budget beside the arena */
        uint64_t bytes = (uint64_t)cap * sizeof(memo_slot);
        if (bytes + ck_arena_used(c->arena) >= c->max_bytes) return over_budget(c);
        ck_arena_set_budget(c->arena, c->max_bytes - bytes);
    }
    memo_slot *slots = calloc(cap, sizeof *slots);
    if (!slots) return ck_fail(c->err, CKPT_E_NOMEM, "out of memory converting a value");
    for (size_t i = 0; i < c->cap; i++) {
        if (!c->slots[i].key) continue;
        size_t j = memo_index(c->slots[i].key, cap);
        while (slots[j].key)
            j = (j + 1) & (cap - 1);
        slots[j] = c->slots[i];
    }
    free(c->slots);
    c->slots = slots;
    c->cap = cap;
    return CKPT_OK;
}

/* Inserts key (not present yet) as "in progress". */
static ckpt_status memo_start(conv_ctx *c, const pk_value *key) {
    if ((c->len + 1) * 2 > c->cap) CK_TRY(memo_grow(c));
    size_t i = memo_index(key, c->cap);
    while (c->slots[i].key)
        i = (i + 1) & (c->cap - 1);
    c->slots[i] = (memo_slot){.key = key};
    c->len++;
    return CKPT_OK;
}

/* ------------------------------------------------------------------ allocation */

static ckpt_status oom(conv_ctx *c) {
    if (ck_arena_over_budget(c->arena)) return over_budget(c);
    return ck_fail(c->err, CKPT_E_NOMEM, "out of memory converting a value");
}

static ckpt_value *new_value(conv_ctx *c, ckpt_value_type type) {
    ckpt_value *v = ck_arena_alloc(c->arena, sizeof *v);
    if (v) v->type = type;
    return v;
}

static ckpt_value **new_array(conv_ctx *c, size_t n) {
    if (n > SIZE_MAX / sizeof(ckpt_value *)) return NULL;
    return ck_arena_alloc(c->arena, n ? n * sizeof(ckpt_value *) : 1);
}

static ckpt_status new_str(conv_ctx *c, ckpt_value_type type, const char *p, size_t len, bool copy,
                           ckpt_value **out) {
    ckpt_value *v = new_value(c, type);
    if (!v) return oom(c);
    if (copy) {
        p = ck_arena_strndup(c->arena, p, len);
        if (!p) return oom(c);
    }
    v->u.str.ptr = p;
    v->u.str.len = len;
    *out = v;
    return CKPT_OK;
}

/* ------------------------------------------------------------------ small predicates */

/* Python 3 spelling of a pickled module name (pickle's fix_imports, for the modules that
 * matter here). */
static const char *py3_module(const char *m) {
    if (!m) return "";
    if (strcmp(m, "__builtin__") == 0) return "builtins";
    if (strcmp(m, "copy_reg") == 0) return "copyreg";
    return m;
}

/* Python 3 spelling of a pickled global (module, name): pickle's fix_imports NAME_MAPPING for
 * the builtins Python 2 named differently (protocol 2 writes `__builtin__.xrange` for range). */
static void py3_global(const char *module, const char *name, const char **m3, const char **n3) {
    static const char *const map[][3] = {
        {"xrange", "builtins", "range"},   {"unicode", "builtins", "str"},
        {"basestring", "builtins", "str"}, {"long", "builtins", "int"},
        {"unichr", "builtins", "chr"},     {"raw_input", "builtins", "input"},
        {"reduce", "functools", "reduce"}, {"intern", "sys", "intern"},
    };
    *m3 = py3_module(module);
    *n3 = name;
    if (!module || strcmp(module, "__builtin__") != 0 || !name) return;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(name, map[i][0]) == 0) {
            *m3 = map[i][1];
            *n3 = map[i][2];
            return;
        }
}

static bool global_is(const pk_value *g, const char *module, const char *name) {
    return g && g->type == PK_GLOBAL && g->u.global.name && strcmp(g->u.global.name, name) == 0 &&
           strcmp(py3_module(g->u.global.module), module) == 0;
}

static bool is_seq(const pk_value *v) { return v && (v->type == PK_TUPLE || v->type == PK_LIST); }

static bool no_state(const pk_value *state) {
    return !state || state->type == PK_NONE || (state->type == PK_DICT && state->u.dict.len == 0);
}

static bool is_latin1_name(const char *s) {
    static const char *const names[] = {"latin1",    "latin-1",    "latin_1", "iso-8859-1",
                                        "iso8859-1", "iso_8859_1", "l1"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(s, names[i]) == 0) return true;
    return false;
}

/* Latin-1 encoding of UTF-8 `s` into dst (room for len bytes); false when a code point is
 * above U+00FF or the UTF-8 is malformed. */
static bool latin1_encode(const char *s, size_t len, uint8_t *dst, size_t *out_len) {
    const uint8_t *p = (const uint8_t *)s, *end = p + len;
    size_t n = 0;
    while (p < end) {
        if (*p < 0x80) {
            dst[n++] = *p++;
        } else if ((*p == 0xC2 || *p == 0xC3) && end - p >= 2 && (p[1] & 0xC0) == 0x80) {
            dst[n++] = (uint8_t)(((p[0] & 0x03) << 6) | (p[1] & 0x3F));
            p += 2;
        } else {
            return false;
        }
    }
    *out_len = n;
    return true;
}

/* `_codecs.encode(str, 'latin1')` object node -> its bytes; false if v is not one. */
static bool codecs_encode_args(const pk_value *v, const pk_value **str) {
    if (!v || v->type != PK_OBJECT || !global_is(v->u.obj.cls, "_codecs", "encode")) return false;
    const pk_value *a = v->u.obj.args;
    if (!a || a->type != PK_TUPLE || a->u.seq.len != 2) return false;
    const pk_value *s = a->u.seq.items[0], *enc = a->u.seq.items[1];
    if (!s || s->type != PK_STR || !enc || enc->type != PK_STR) return false;
    if (!is_latin1_name(enc->u.str.ptr)) return false;
    *str = s;
    return true;
}

/* ------------------------------------------------------------------ recursion */

static ckpt_status conv(conv_ctx *c, const pk_value *v, unsigned depth, ckpt_value **out,
                        unsigned *height);

static ckpt_status too_deep(conv_ctx *c) {
    return ck_fail(c->err, CKPT_E_LIMIT, "value nested deeper than %d levels", CK_VALUE_MAX_DEPTH);
}

/* Converts a child `levels` below a node at `depth`, folding its height into *h. */
static ckpt_status child(conv_ctx *c, const pk_value *v, unsigned depth, unsigned levels,
                         ckpt_value **out, unsigned *h) {
    unsigned ch = 0;
    CK_TRY(conv(c, v, depth + levels, out, &ch));
    if (ch + levels > *h) *h = ch + levels;
    return CKPT_OK;
}

static ckpt_status conv_items(conv_ctx *c, pk_value *const *items, size_t n, unsigned depth,
                              unsigned levels, ckpt_value ***out, unsigned *h) {
    ckpt_value **arr = new_array(c, n);
    if (!arr) return oom(c);
    for (size_t i = 0; i < n; i++)
        CK_TRY(child(c, items[i], depth, levels, &arr[i], h));
    *out = arr;
    return CKPT_OK;
}

static ckpt_status conv_seq(conv_ctx *c, ckpt_value_type type, pk_value *const *items, size_t n,
                            unsigned depth, ckpt_value **out, unsigned *h) {
    ckpt_value *r = new_value(c, type);
    if (!r) return oom(c);
    CK_TRY(conv_items(c, items, n, depth, 1, &r->u.seq.items, h));
    r->u.seq.len = n;
    *out = r;
    return CKPT_OK;
}

/* A reference to a named thing: OBJECT with only a name. */
static ckpt_status new_ref(conv_ctx *c, const char *module, const char *name, const char *attr,
                           ckpt_value **out) {
    ckpt_value *r = new_value(c, CKPT_VALUE_OBJECT);
    if (!r) return oom(c);
    size_t ml = strlen(module), nl = name ? strlen(name) : 0, al = attr ? strlen(attr) : 0;
    size_t len = ml + (ml ? 1 : 0) + nl + (attr ? al + 1 : 0);
    char *s = ck_arena_alloc(c->arena, len + 1);
    if (!s) return oom(c);
    char *p = s;
    if (ml) {
        memcpy(p, module, ml);
        p += ml;
        *p++ = '.';
    }
    if (nl) memcpy(p, name, nl);
    p += nl;
    if (attr) {
        *p++ = '.';
        memcpy(p, attr, al);
        p += al;
    }
    *p = '\0';
    r->u.obj.name = s;
    r->u.obj.name_len = len;
    *out = r;
    return CKPT_OK;
}

/* ------------------------------------------------------------------ special objects */

/* OrderedDict(pairs) / defaultdict(factory) plus SETITEMs -> DICT; *out stays NULL when the
 * node does not have that shape. */
static ckpt_status conv_dict_like(conv_ctx *c, const pk_value *v, bool args_are_pairs,
                                  unsigned depth, ckpt_value **out, unsigned *h) {
    const pk_value *args = v->u.obj.args, *items = pk_obj_dictitems(v);
    const pk_value *pairs = NULL;
    if (args_are_pairs && args->u.seq.len == 1) {
        pairs = args->u.seq.items[0];
        if (!is_seq(pairs)) return CKPT_OK;
        for (size_t i = 0; i < pairs->u.seq.len; i++)
            if (!is_seq(pairs->u.seq.items[i]) || pairs->u.seq.items[i]->u.seq.len != 2)
                return CKPT_OK;
    } else if (args_are_pairs && args->u.seq.len != 0) {
        return CKPT_OK;
    }
    size_t np = pairs ? pairs->u.seq.len : 0, ni = items ? items->u.dict.len : 0;
    ckpt_value *r = new_value(c, CKPT_VALUE_DICT);
    ckpt_value **keys = new_array(c, np + ni), **vals = new_array(c, np + ni);
    if (!r || !keys || !vals) return oom(c);
    for (size_t i = 0; i < np; i++) {
        pk_value *const *kv = pairs->u.seq.items[i]->u.seq.items;
        CK_TRY(child(c, kv[0], depth, 1, &keys[i], h));
        CK_TRY(child(c, kv[1], depth, 1, &vals[i], h));
    }
    for (size_t i = 0; i < ni; i++) {
        CK_TRY(child(c, items->u.dict.keys[i], depth, 1, &keys[np + i], h));
        CK_TRY(child(c, items->u.dict.vals[i], depth, 1, &vals[np + i], h));
    }
    r->u.dict.keys = keys;
    r->u.dict.vals = vals;
    r->u.dict.len = np + ni;
    *out = r;
    return CKPT_OK;
}

static uint64_t load_le(const uint8_t *p, size_t n, bool big_endian) {
    uint64_t u = 0;
    for (size_t i = 0; i < n; i++)
        u |= (uint64_t)p[big_endian ? n - 1 - i : i] << (8 * i);
    return u;
}

static double half_to_double(unsigned h) {
    int e = (int)((h >> 10) & 0x1f);
    double m = h & 0x3ff;
    double d = e == 0    ? m * 0x1p-24
               : e == 31 ? (m ? NAN : INFINITY)
                         : (1.0 + m / 1024.0) * ((double)(1u << e) * 0x1p-15);
    return (h & 0x8000) ? -d : d;
}

/* numpy.core.multiarray.scalar(numpy.dtype(descr, ...), raw) for simple dtypes; *out stays
 * NULL otherwise. */
static ckpt_status conv_numpy_scalar(conv_ctx *c, const pk_value *args, ckpt_value **out) {
    if (args->u.seq.len != 2) return CKPT_OK;
    const pk_value *dt = args->u.seq.items[0], *raw = args->u.seq.items[1];
    if (!dt || dt->type != PK_OBJECT || !dt->u.obj.cls || dt->u.obj.cls->type != PK_GLOBAL ||
        !dt->u.obj.cls->u.global.name || strcmp(dt->u.obj.cls->u.global.name, "dtype") != 0 ||
        !dt->u.obj.cls->u.global.module || strncmp(dt->u.obj.cls->u.global.module, "numpy", 5) != 0)
        return CKPT_OK;
    const pk_value *descr = pk_item(dt->u.obj.args, 0);
    if (!descr || descr->type != PK_STR) return CKPT_OK;
    const char *d = descr->u.str.ptr;
    char order = '|';
    const pk_value *st = dt->u.obj.state;
    if (st && st->type == PK_TUPLE && st->u.seq.len >= 2 && st->u.seq.items[1]->type == PK_STR)
        order = st->u.seq.items[1]->u.str.ptr[0];
    if (*d && strchr("<>|=", *d)) order = *d++;
    char kind = *d;
    if (!kind || !strchr("biuf", kind) || !d[1] || d[2]) return CKPT_OK;
    size_t size = (size_t)(d[1] - '0');
    if (size != 1 && size != 2 && size != 4 && size != 8) return CKPT_OK;

    uint8_t buf[16]; /* latin-1 never encodes to more bytes than its UTF-8 */
    const uint8_t *bytes = buf;
    size_t n;
    const pk_value *s;
    if (raw && raw->type == PK_BYTES) {
        bytes = (const uint8_t *)raw->u.str.ptr;
        n = raw->u.str.len;
    } else if (!codecs_encode_args(raw, &s) || s->u.str.len > sizeof buf ||
               !latin1_encode(s->u.str.ptr, s->u.str.len, buf, &n)) {
        return CKPT_OK;
    }
    if (n != size) return CKPT_OK;
    uint64_t u = load_le(bytes, n, order == '>');
    ckpt_value *r = NULL;
    switch (kind) {
    case 'b':
        if (size != 1) return CKPT_OK;
        if (!(r = new_value(c, CKPT_VALUE_BOOL))) return oom(c);
        r->u.b = u != 0;
        break;
    case 'i':
        if (!(r = new_value(c, CKPT_VALUE_INT))) return oom(c);
        if (size < 8 && (u >> (8 * size - 1)) & 1) u |= UINT64_MAX << (8 * size);
        memcpy(&r->u.i, &u, sizeof u);
        break;
    case 'u':
        if (u > INT64_MAX) {
            uint8_t le[9];
            for (size_t i = 0; i < 8; i++)
                le[i] = (uint8_t)(u >> (8 * i));
            le[8] = 0;
            char dec[32];
            size_t len = bigint_to_decimal(le, sizeof le, dec, sizeof dec);
            return new_str(c, CKPT_VALUE_BIGINT, dec, len, true, out);
        }
        if (!(r = new_value(c, CKPT_VALUE_INT))) return oom(c);
        r->u.i = (int64_t)u;
        break;
    default: /* 'f' */
        if (size == 1) return CKPT_OK;
        if (!(r = new_value(c, CKPT_VALUE_FLOAT))) return oom(c);
        if (size == 2) {
            r->u.f = half_to_double((unsigned)u);
        } else if (size == 4) {
            uint32_t w = (uint32_t)u;
            float f;
            memcpy(&f, &w, sizeof f);
            r->u.f = f;
        } else {
            memcpy(&r->u.f, &u, sizeof u);
        }
        break;
    }
    *out = r;
    return CKPT_OK;
}

static ckpt_status conv_tensor(conv_ctx *c, const pk_value *v, ckpt_value **out) {
    ckpt_value *r = new_value(c, CKPT_VALUE_TENSOR);
    ts_tensor_view *view = ck_arena_alloc(c->arena, sizeof *view);
    if (!r || !view) return oom(c);
    CK_TRY(ts_tensor_view_of(c->item, v, view, c->err));
    r->u.tensor.item = c->item;
    r->u.tensor.view = view;
    *out = r;
    return CKPT_OK;
}

/* Recognised spellings of plain values; *out stays NULL for anything else. */
static ckpt_status conv_idiom(conv_ctx *c, const pk_value *v, unsigned depth, ckpt_value **out,
                              unsigned *h) {
    const pk_value *cls = v->u.obj.cls, *args = v->u.obj.args;
    if (!cls || cls->type != PK_GLOBAL || !args || args->type != PK_TUPLE) return CKPT_OK;
    if (pk_obj_kwargs(v) || pk_obj_listitems(v)) return CKPT_OK;
    size_t n = args->u.seq.len;
    pk_value *const *a = args->u.seq.items;

    if (global_is(cls, "collections", "OrderedDict") && no_state(v->u.obj.state))
        return conv_dict_like(c, v, true, depth, out, h);
    if (global_is(cls, "collections", "defaultdict") && no_state(v->u.obj.state) && n <= 1)
        return conv_dict_like(c, v, false, depth, out, h);
    if (pk_obj_dictitems(v) || !no_state(v->u.obj.state)) return CKPT_OK;

    const pk_value *s;
    if (codecs_encode_args(v, &s)) {
        uint8_t *dst = ck_arena_alloc(c->arena, s->u.str.len + 1);
        size_t len;
        if (!dst) return oom(c);
        if (!latin1_encode(s->u.str.ptr, s->u.str.len, dst, &len)) return CKPT_OK;
        return new_str(c, CKPT_VALUE_BYTES, (const char *)dst, len, false, out);
    }
    if (global_is(cls, "builtins", "bytes") && n == 0)
        return new_str(c, CKPT_VALUE_BYTES, "", 0, false, out);
    bool frozen = global_is(cls, "builtins", "frozenset");
    if ((frozen || global_is(cls, "builtins", "set")) && (n == 0 || (n == 1 && is_seq(a[0])))) {
        CK_TRY(conv_seq(c, CKPT_VALUE_SET, n ? a[0]->u.seq.items : NULL, n ? a[0]->u.seq.len : 0,
                        depth, out, h));
        (*out)->u.seq.frozen = frozen;
        return CKPT_OK;
    }
    if (global_is(cls, "torch", "Size") && n == 1 && is_seq(a[0]))
        return conv_seq(c, CKPT_VALUE_TUPLE, a[0]->u.seq.items, a[0]->u.seq.len, depth, out, h);
    if (global_is(cls, "builtins", "getattr") && n == 2 && a[0]->type == PK_GLOBAL &&
        a[1]->type == PK_STR)
        return new_ref(c, py3_module(a[0]->u.global.module), a[0]->u.global.name, a[1]->u.str.ptr,
                       out);
    if (global_is(cls, "numpy.core.multiarray", "scalar") ||
        global_is(cls, "numpy._core.multiarray", "scalar"))
        return conv_numpy_scalar(c, args, out);
    return CKPT_OK;
}

static ckpt_status conv_object(conv_ctx *c, const pk_value *v, unsigned depth, ckpt_value **out,
                               unsigned *h) {
    if (c->item && ts_is_tensor_node(v)) return conv_tensor(c, v, out);
    CK_TRY(conv_idiom(c, v, depth, out, h));
    if (*out) return CKPT_OK;

    ckpt_value *r = new_value(c, CKPT_VALUE_OBJECT);
    if (!r) return oom(c);
    ckpt_value *callee = NULL;
    unsigned hc = 0;
    CK_TRY(child(c, v->u.obj.cls, depth, 1, &callee, &hc));
    CK_TRY(child(c, v->u.obj.args, depth, 1, &r->u.obj.args, h));
    if (callee->type == CKPT_VALUE_OBJECT && !callee->u.obj.args) {
        r->u.obj.name = callee->u.obj.name;
        r->u.obj.name_len = callee->u.obj.name_len;
    } else {
        /* Something other than a named callable was called: keep it as the first argument
         * of a "__call__" object, one level deeper than it was converted. */
        if (depth + hc > CK_VALUE_MAX_DEPTH) return too_deep(c);
        r->u.obj.name = "__call__";
        r->u.obj.name_len = strlen("__call__");
        if (hc + 1 > *h) *h = hc + 1;
        ckpt_value *old = r->u.obj.args, *args = new_value(c, CKPT_VALUE_TUPLE);
        size_t n = old->type == CKPT_VALUE_TUPLE ? old->u.seq.len : 0;
        ckpt_value **items = new_array(c, n + 1);
        if (!args || !items) return oom(c);
        items[0] = callee;
        if (n) memcpy(items + 1, old->u.seq.items, n * sizeof *items);
        args->u.seq.items = items;
        args->u.seq.len = n + 1;
        r->u.obj.args = args;
    }
    if (pk_obj_kwargs(v)) CK_TRY(child(c, pk_obj_kwargs(v), depth, 1, &r->u.obj.kwargs, h));
    if (v->u.obj.state) CK_TRY(child(c, v->u.obj.state, depth, 1, &r->u.obj.state, h));
    if (pk_obj_listitems(v))
        CK_TRY(child(c, pk_obj_listitems(v), depth, 1, &r->u.obj.listitems, h));
    if (pk_obj_dictitems(v))
        CK_TRY(child(c, pk_obj_dictitems(v), depth, 1, &r->u.obj.dictitems, h));
    *out = r;
    return CKPT_OK;
}

/* Converts a node that may be shared (anything but None/bool/int/float). */
static ckpt_status conv_node(conv_ctx *c, const pk_value *v, unsigned depth, ckpt_value **out,
                             unsigned *h) {
    ckpt_value *r;
    switch (v->type) {
    case PK_BIGINT: {
        const uint8_t *le = (const uint8_t *)v->u.str.ptr;
        int64_t i;
        if (bigint_to_i64(le, v->u.str.len, &i)) {
            if (!(r = new_value(c, CKPT_VALUE_INT))) return oom(c);
            r->u.i = i;
            *out = r;
            return CKPT_OK;
        }
        if (v->u.str.len > BIGINT_MAX_BYTES)
            return ck_fail(c->err, CKPT_E_LIMIT, "integer of %zu bytes is too large to convert",
                           v->u.str.len);
        size_t cap = bigint_decimal_cap(v->u.str.len) + 1;
        char *dec = ck_arena_alloc(c->arena, cap);
        if (!dec) return oom(c);
        size_t len = bigint_to_decimal(le, v->u.str.len, dec, cap);
        if (!len) return oom(c);
        return new_str(c, CKPT_VALUE_BIGINT, dec, len, false, out);
    }
    case PK_STR: return new_str(c, CKPT_VALUE_STRING, v->u.str.ptr, v->u.str.len, !c->borrow, out);
    case PK_BYTES: return new_str(c, CKPT_VALUE_BYTES, v->u.str.ptr, v->u.str.len, !c->borrow, out);
    case PK_TUPLE:
        return conv_seq(c, CKPT_VALUE_TUPLE, v->u.seq.items, v->u.seq.len, depth, out, h);
    case PK_LIST: return conv_seq(c, CKPT_VALUE_LIST, v->u.seq.items, v->u.seq.len, depth, out, h);
    case PK_SET:
    case PK_FROZENSET:
        CK_TRY(conv_seq(c, CKPT_VALUE_SET, v->u.seq.items, v->u.seq.len, depth, out, h));
        (*out)->u.seq.frozen = v->type == PK_FROZENSET;
        return CKPT_OK;
    case PK_DICT:
        if (!(r = new_value(c, CKPT_VALUE_DICT))) return oom(c);
        CK_TRY(conv_items(c, v->u.dict.keys, v->u.dict.len, depth, 1, &r->u.dict.keys, h));
        CK_TRY(conv_items(c, v->u.dict.vals, v->u.dict.len, depth, 1, &r->u.dict.vals, h));
        r->u.dict.len = v->u.dict.len;
        *out = r;
        return CKPT_OK;
    case PK_GLOBAL: {
        const char *m3, *n3;
        py3_global(v->u.global.module, v->u.global.name, &m3, &n3);
        return new_ref(c, m3, n3, NULL, out);
    }
    case PK_OBJECT: return conv_object(c, v, depth, out, h);
    case PK_PERSID: {
        /* What an unpickler would do with it: call persistent_load(pid). */
        ckpt_value *args = new_value(c, CKPT_VALUE_TUPLE);
        r = new_value(c, CKPT_VALUE_OBJECT);
        if (!r || !args) return oom(c);
        CK_TRY(conv_items(c, &v->u.persid.pid, 1, depth, 2, &args->u.seq.items, h));
        args->u.seq.len = 1;
        r->u.obj.name = "persistent_load";
        r->u.obj.name_len = strlen("persistent_load");
        r->u.obj.args = args;
        *out = r;
        return CKPT_OK;
    }
    default: return ck_fail(c->err, CKPT_E_FORMAT, "unknown pickle value type %d", (int)v->type);
    }
}

static ckpt_status conv(conv_ctx *c, const pk_value *v, unsigned depth, ckpt_value **out,
                        unsigned *height) {
    if (depth > CK_VALUE_MAX_DEPTH) return too_deep(c);
    if (!v) return ck_fail(c->err, CKPT_E_FORMAT, "missing value in pickle");
    ckpt_value *r;
    *height = 1;
    switch (v->type) {
    case PK_NONE:
        if (!(r = new_value(c, CKPT_VALUE_NONE))) return oom(c);
        break;
    case PK_BOOL:
        if (!(r = new_value(c, CKPT_VALUE_BOOL))) return oom(c);
        r->u.b = v->u.b;
        break;
    case PK_INT:
        if (!(r = new_value(c, CKPT_VALUE_INT))) return oom(c);
        r->u.i = v->u.i;
        break;
    case PK_FLOAT:
        if (!(r = new_value(c, CKPT_VALUE_FLOAT))) return oom(c);
        r->u.f = v->u.f;
        break;
    default: {
        memo_slot *s = memo_find(c, v);
        if (s) {
            if (!s->val)
                return ck_fail(c->err, CKPT_E_LIMIT, "pickled value contains itself (a cycle)");
            if (depth - 1 + s->height > CK_VALUE_MAX_DEPTH) return too_deep(c);
            *out = s->val;
            *height = s->height;
            return CKPT_OK;
        }
        CK_TRY(memo_start(c, v));
        r = NULL;
        CK_TRY(conv_node(c, v, depth, &r, height));
        s = memo_find(c, v); /* the table may have grown meanwhile */
        s->val = r;
        s->height = *height;
        break;
    }
    }
    *out = r;
    return CKPT_OK;
}

/* ------------------------------------------------------------------ entry points */

static ckpt_status build(const pk_value *root, ts_item *item, uint64_t max_bytes, ckpt_object **out,
                         ckpt_error *err) {
    *out = NULL;
    ckpt_object *o = calloc(1, sizeof *o);
    conv_ctx c = {.item = item, .borrow = item != NULL, .max_bytes = max_bytes, .err = err};
    if (!o || !(c.arena = o->arena = ck_arena_new(max_bytes))) {
        free(o);
        ts_item_free(item);
        return ck_fail(err, CKPT_E_NOMEM, "out of memory converting a value");
    }
    o->item = item;
    ckpt_value *r = NULL;
    unsigned h = 0;
    ckpt_status st = conv(&c, root, 1, &r, &h);
    free(c.slots);
    if (st != CKPT_OK) {
        ckpt_object_free(o);
        return st;
    }
    o->root = r;
    *out = o;
    return CKPT_OK;
}

ckpt_status ck_object_from_item(ts_item *item, uint64_t max_bytes, ckpt_object **out,
                                ckpt_error *err) {
    if (!out) {
        ts_item_free(item);
        return ck_fail(err, CKPT_E_INVAL, "ck_object_from_item: NULL argument");
    }
    if (!item) {
        *out = NULL;
        return ck_fail(err, CKPT_E_INVAL, "ck_object_from_item: NULL argument");
    }
    return build(ts_item_root(item), item, max_bytes, out, err);
}

ckpt_status ck_object_from_pickle(const pk_value *root, uint64_t max_bytes, ckpt_object **out,
                                  ckpt_error *err) {
    if (!out || !root) {
        if (out) *out = NULL;
        return ck_fail(err, CKPT_E_INVAL, "ck_object_from_pickle: NULL argument");
    }
    return build(root, NULL, max_bytes, out, err);
}
