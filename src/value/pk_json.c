/* pk_json.c — pk_to_json: a raw pickle tree (e.g. a whole `.metadata`) as compact JSON in the
 * style of ckpt_value_to_json, without interpreting idioms beyond torch.Size:
 *   global            {"__global__": "module.name"}
 *   object            {"__object__": "module.name", "args": [...], "kwargs": {...},
 *                      "state": ..., "listitems": [...], "dictitems": ...}  (absent parts
 *                      omitted; a callee that is not a global is rendered in place of the name)
 *   torch.Size((..))  [..]
 *   persistent id     {"__persid__": ...}
 *   bytes             {"__bytes__": "<hex>"}
 *   dict, non-str key {"__dict__": [[k, v], ...]}
 *   tuple, set        [...]
 * One pass, no allocation besides the output buffer (and scratch for integers wider than
 * 64 bytes); shared nodes are rendered at each use, so the output size and the nodes visited
 * are capped by a budget (pk_json_budget: proportional to the decoded document, with a
 * floor), past which it fails with CKPT_E_LIMIT. */
#include "value/value.h"

#include "util/error.h"
#include "util/json.h"
#include "util/strbuf.h"
#include "value/bigint.h"
#include "value/value_i.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define PK_JSON_DEFAULT_DEPTH 512

typedef struct pkj_ctx {
    ck_strbuf sb;
    unsigned max_depth;
    uint64_t steps, max_steps; /* nodes visited and the budget */
    ckpt_status status;        /* failures other than the buffer's own */
    ckpt_error *err;
} pkj_ctx;

static void put(pkj_ctx *c, const pk_value *v, unsigned depth);

static void put_bigint(pkj_ctx *c, const pk_value *v) {
    const uint8_t *le = (const uint8_t *)v->u.str.ptr;
    size_t n = v->u.str.len;
    int64_t i;
    if (bigint_to_i64(le, n, &i)) {
        value_add_i64(&c->sb, i);
        return;
    }
    if (n > BIGINT_MAX_BYTES) {
        c->status = ck_fail(c->err, CKPT_E_LIMIT, "integer of %zu bytes is too large to print", n);
        return;
    }
    char small[256];
    size_t cap = bigint_decimal_cap(n) + 1;
    char *dec = cap <= sizeof small ? small : malloc(cap);
    size_t len = dec ? bigint_to_decimal(le, n, dec, cap) : 0;
    if (len)
        ck_strbuf_add(&c->sb, dec, len);
    else
        c->status = ck_fail(c->err, CKPT_E_NOMEM, "out of memory printing an integer");
    if (dec != small) free(dec);
}

/* A list, tuple, set or dict of the pickle, for value_json_put_list / _dict. */
typedef struct seq_view {
    pkj_ctx *c;
    pk_value *const *items; /* sequences; a dict's values */
    pk_value *const *keys;  /* dicts */
    unsigned depth;
} seq_view;

static const char *seq_key_str(void *ctx, size_t i, size_t *len) {
    const pk_value *k = ((seq_view *)ctx)->keys[i];
    if (!k || k->type != PK_STR) return NULL;
    *len = k->u.str.len;
    return k->u.str.ptr;
}

static void seq_put(void *ctx, size_t i, bool key) {
    seq_view *s = ctx;
    put(s->c, key ? s->keys[i] : s->items[i], s->depth + 1);
}

static void put_seq(pkj_ctx *c, pk_value *const *items, size_t n, unsigned depth) {
    seq_view sv = {c, items, NULL, depth};
    value_json_put_list(&(value_json_seq){&c->sb, n, NULL, seq_put, &sv});
}

static void put_dict(pkj_ctx *c, const pk_value *v, unsigned depth) {
    seq_view sv = {c, v->u.dict.vals, v->u.dict.keys, depth};
    value_json_put_dict(&(value_json_seq){&c->sb, v->u.dict.len, seq_key_str, seq_put, &sv});
}

static void put_qualname(pkj_ctx *c, const pk_value *g) {
    const char *m = g->u.global.module ? g->u.global.module : "";
    const char *n = g->u.global.name ? g->u.global.name : "";
    /* "module.name" built in the output's own escaping: both parts escaped as one string. */
    size_t ml = strlen(m), nl = strlen(n);
    char small[256];
    char *s = ml + nl + 2 <= sizeof small ? small : malloc(ml + nl + 2);
    if (!s) {
        c->status = ck_fail(c->err, CKPT_E_NOMEM, "out of memory rendering a pickle");
        return;
    }
    memcpy(s, m, ml);
    s[ml] = '.';
    memcpy(s + ml + 1, n, nl);
    ck_json_escape(&c->sb, s, *m ? ml + 1 + nl : nl);
    if (s != small) free(s);
}

static void put_part(pkj_ctx *c, const char *prefix, const pk_value *v, unsigned depth) {
    if (!v) return;
    ck_strbuf_adds(&c->sb, prefix);
    put(c, v, depth + 1);
}

static void put_object(pkj_ctx *c, const pk_value *v, unsigned depth) {
    const pk_value *cls = v->u.obj.cls, *args = v->u.obj.args;
    if (pk_is_global(cls, "torch", "Size") && args && args->type == PK_TUPLE &&
        args->u.seq.len == 1 && !pk_obj_kwargs(v) && !v->u.obj.state && !pk_obj_listitems(v) &&
        !pk_obj_dictitems(v)) {
        const pk_value *dims = args->u.seq.items[0];
        if (dims && (dims->type == PK_TUPLE || dims->type == PK_LIST)) {
            put_seq(c, dims->u.seq.items, dims->u.seq.len, depth);
            return;
        }
    }
    ck_strbuf_adds(&c->sb, "{\"__object__\":");
    if (cls && cls->type == PK_GLOBAL)
        put_qualname(c, cls);
    else
        put(c, cls, depth + 1);
    put_part(c, ",\"args\":", args, depth);
    put_part(c, ",\"kwargs\":", pk_obj_kwargs(v), depth);
    put_part(c, ",\"state\":", v->u.obj.state, depth);
    put_part(c, ",\"listitems\":", pk_obj_listitems(v), depth);
    put_part(c, ",\"dictitems\":", pk_obj_dictitems(v), depth);
    ck_strbuf_addc(&c->sb, '}');
}

static void put(pkj_ctx *c, const pk_value *v, unsigned depth) {
    if (c->sb.status != CKPT_OK || c->status != CKPT_OK) return; /* stop once it failed */
    if (depth > c->max_depth) {
        c->status = ck_fail(c->err, CKPT_E_LIMIT, "pickle nested deeper than %u levels (or cyclic)",
                            c->max_depth);
        return;
    }
    if (++c->steps > c->max_steps) {
        c->sb.status = CKPT_E_LIMIT; /* sticky, like the buffer's own cap */
        return;
    }
    ck_strbuf *sb = &c->sb;
    if (!v) {
        ck_strbuf_adds(sb, "null");
        return;
    }
    switch (v->type) {
    case PK_NONE: ck_strbuf_adds(sb, "null"); break;
    case PK_BOOL: ck_strbuf_adds(sb, v->u.b ? "true" : "false"); break;
    case PK_INT: value_add_i64(sb, v->u.i); break;
    case PK_BIGINT: put_bigint(c, v); break;
    case PK_FLOAT: value_json_float(sb, v->u.f); break;
    case PK_STR: ck_json_escape(sb, v->u.str.ptr, v->u.str.len); break;
    case PK_BYTES: value_json_bytes(sb, v->u.str.ptr, v->u.str.len); break;
    case PK_TUPLE:
    case PK_LIST:
    case PK_SET:
    case PK_FROZENSET: put_seq(c, v->u.seq.items, v->u.seq.len, depth); break;
    case PK_DICT: put_dict(c, v, depth); break;
    case PK_GLOBAL:
        ck_strbuf_adds(sb, "{\"__global__\":");
        put_qualname(c, v);
        ck_strbuf_addc(sb, '}');
        break;
    case PK_OBJECT: put_object(c, v, depth); break;
    case PK_PERSID:
        ck_strbuf_adds(sb, "{\"__persid__\":");
        put(c, v->u.persid.pid, depth + 1);
        ck_strbuf_addc(sb, '}');
        break;
    default:
        c->status = ck_fail(c->err, CKPT_E_FORMAT, "unknown pickle value type %d", (int)v->type);
        break;
    }
}

size_t pk_json_budget(uint64_t doc_bytes) {
    uint64_t b = doc_bytes > SIZE_MAX / CK_PK_JSON_RENDER_FACTOR
                     ? SIZE_MAX
                     : doc_bytes * CK_PK_JSON_RENDER_FACTOR;
    return b > CK_PK_JSON_RENDER_MIN ? (size_t)b : CK_PK_JSON_RENDER_MIN;
}

ckpt_status pk_to_json(const pk_value *v, unsigned max_depth, size_t budget, char **out,
                       ckpt_error *err) {
    if (!out) return ck_fail(err, CKPT_E_INVAL, "pk_to_json: NULL argument");
    *out = NULL;
    if (!v) return ck_fail(err, CKPT_E_INVAL, "pk_to_json: NULL argument");
    if (!budget) budget = CK_PK_JSON_RENDER_MIN;
    pkj_ctx c = {.max_depth = max_depth ? max_depth : PK_JSON_DEFAULT_DEPTH,
                 .max_steps = budget,
                 .err = err};
    ck_strbuf_init(&c.sb, budget);
    put(&c, v, 1);
    ckpt_status st = c.status;
    if (st == CKPT_OK && c.sb.status == CKPT_E_LIMIT) {
        ck_strbuf_release(&c.sb);
        return ck_fail(err, CKPT_E_LIMIT,
                       "pickle too large to render as JSON (over %zu MiB or %zu nodes; shared "
                       "references expand as a tree)",
                       budget >> 20, budget);
    }
    if (st == CKPT_OK) st = ck_strbuf_status(&c.sb, "rendering a pickle as JSON", err);
    if (st != CKPT_OK) {
        ck_strbuf_release(&c.sb);
        return st;
    }
    *out = ck_strbuf_detach(&c.sb, NULL);
    if (!*out) return ck_fail(err, CKPT_E_NOMEM, "rendering a pickle as JSON: out of memory");
    return CKPT_OK;
}
