/* render_json.c — ckpt_value_to_json: the value tree as compact JSON, byte for byte what
 * Python's json.dumps(v, separators=(",", ":"), ensure_ascii=False, allow_nan=True) writes
 * after mapping
 *   tuple, set                  -> list
 *   dict with a non-str key     -> {"__dict__": [[k, v], ...]}
 *   bytes                       -> {"__bytes__": "<lowercase hex>"}
 *   tensor                      -> {"__tensor__": {"dtype": "float32", "shape": [2, 3]}}
 *   other object                -> {"__object__": "module.Class", "args": [...], "kwargs": {...},
 *                                   "state": ..., "listitems": [...], "dictitems": {...}}
 *                                  (absent parts omitted; a bare reference has only the name)
 * Bounded like the text: CK_VALUE_RENDER_MAX bytes, CK_VALUE_RENDER_STEPS nodes.
 * Also the JSON pieces shared with pk_json.c (floats, bytes, dict-key checks). */
#include "ckpt.h"

#include "util/error.h"
#include "util/json.h"
#include "util/strbuf.h"
#include "tensor/float_repr.h"
#include "value/value_i.h"

#include <inttypes.h>
#include <stdio.h>

bool value_add_i64(ck_strbuf *sb, int64_t v) {
    char buf[24], *p = buf + sizeof buf;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do
        *--p = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0) *--p = '-';
    return ck_strbuf_add(sb, p, (size_t)(buf + sizeof buf - p));
}

bool value_json_float(ck_strbuf *sb, double d) {
    char buf[FLOAT_REPR_MAX];
    size_t n = float_repr(d, FLOAT_REPR_JSON, buf);
    return ck_strbuf_add(sb, buf, n);
}

bool value_json_bytes(ck_strbuf *sb, const char *p, size_t len) {
    static const char hex[] = "0123456789abcdef";
    if (len > (SIZE_MAX - 32) / 2 || !ck_strbuf_grow(sb, 2 * len + 32)) return false;
    ck_strbuf_adds(sb, "{\"__bytes__\":\"");
    char *o = sb->buf + sb->len;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)p[i];
        *o++ = hex[c >> 4];
        *o++ = hex[c & 15];
    }
    sb->len += 2 * len;
    sb->buf[sb->len] = '\0';
    return ck_strbuf_adds(sb, "\"}");
}

typedef value_render json_ctx;

static void put(json_ctx *c, const ckpt_value *v, unsigned depth);

void value_json_put_list(const value_json_seq *s) {
    ck_strbuf_addc(s->sb, '[');
    for (size_t i = 0; i < s->n; i++) {
        if (i) ck_strbuf_addc(s->sb, ',');
        s->put(s->ctx, i, false);
    }
    ck_strbuf_addc(s->sb, ']');
}

void value_json_put_dict(const value_json_seq *s) {
    bool str_keys = true;
    size_t len;
    for (size_t i = 0; i < s->n && str_keys; i++)
        str_keys = s->key_str(s->ctx, i, &len) != NULL;
    if (str_keys) {
        ck_strbuf_addc(s->sb, '{');
        for (size_t i = 0; i < s->n; i++) {
            const char *k = s->key_str(s->ctx, i, &len);
            if (i) ck_strbuf_addc(s->sb, ',');
            ck_json_escape(s->sb, k, len);
            ck_strbuf_addc(s->sb, ':');
            s->put(s->ctx, i, false);
        }
        ck_strbuf_addc(s->sb, '}');
        return;
    }
    ck_strbuf_adds(s->sb, "{\"__dict__\":[");
    for (size_t i = 0; i < s->n; i++) {
        ck_strbuf_adds(s->sb, i ? ",[" : "[");
        s->put(s->ctx, i, true);
        ck_strbuf_addc(s->sb, ',');
        s->put(s->ctx, i, false);
        ck_strbuf_addc(s->sb, ']');
    }
    ck_strbuf_adds(s->sb, "]}");
}

bool value_render_enter(value_render *r, unsigned depth) {
    if (r->sb.status != CKPT_OK || r->too_deep) return false; /* stop walking once it failed */
    if (depth > CK_VALUE_MAX_DEPTH) {
        r->too_deep = true;
        return false;
    }
    if (++r->steps > CK_VALUE_RENDER_STEPS) {
        r->sb.status = CKPT_E_LIMIT; /* sticky, like the buffer's own cap */
        return false;
    }
    return true;
}

ckpt_status value_render_finish(value_render *r, const char *as, char **out, ckpt_error *err) {
    ck_strbuf *sb = &r->sb;
    ckpt_status st = CKPT_OK;
    if (r->too_deep)
        st = ck_fail(err, CKPT_E_LIMIT, "value nested deeper than %d levels", CK_VALUE_MAX_DEPTH);
    else if (sb->status == CKPT_E_LIMIT)
        st = ck_fail(err, CKPT_E_LIMIT,
                     "value too large to render as %s (over %zu MiB or %llu nodes; shared "
                     "references expand as a tree)",
                     as, CK_VALUE_RENDER_MAX >> 20, (unsigned long long)CK_VALUE_RENDER_STEPS);
    else {
        char what[48];
        snprintf(what, sizeof what, "rendering a value as %s", as);
        st = ck_strbuf_status(sb, what, err);
    }
    if (st != CKPT_OK) {
        ck_strbuf_release(sb);
        return st;
    }
    *out = ck_strbuf_detach(sb, NULL);
    if (!*out) return ck_fail(err, CKPT_E_NOMEM, "rendering a value as %s: out of memory", as);
    return CKPT_OK;
}

/* A list, tuple, set or dict of the tree, for value_json_put_list / _dict. */
typedef struct seq_view {
    json_ctx *c;
    ckpt_value *const *items; /* lists; a dict's values */
    ckpt_value *const *keys;  /* dicts */
    unsigned depth;
} seq_view;

static const char *seq_key_str(void *ctx, size_t i, size_t *len) {
    const ckpt_value *k = ((seq_view *)ctx)->keys[i];
    if (k->type != CKPT_VALUE_STRING) return NULL;
    *len = k->u.str.len;
    return k->u.str.ptr;
}

static void seq_put(void *ctx, size_t i, bool key) {
    seq_view *s = ctx;
    put(s->c, key ? s->keys[i] : s->items[i], s->depth + 1);
}

static void put_seq(json_ctx *c, ckpt_value *const *items, size_t n, unsigned depth) {
    seq_view sv = {c, items, NULL, depth};
    value_json_put_list(&(value_json_seq){&c->sb, n, NULL, seq_put, &sv});
}

static void put_dict(json_ctx *c, const ckpt_value *v, unsigned depth) {
    seq_view sv = {c, v->u.dict.vals, v->u.dict.keys, depth};
    value_json_put_dict(&(value_json_seq){&c->sb, v->u.dict.len, seq_key_str, seq_put, &sv});
}

static void put_part(json_ctx *c, const char *prefix, const ckpt_value *v, unsigned depth) {
    if (!v) return;
    ck_strbuf_adds(&c->sb, prefix);
    put(c, v, depth + 1);
}

static void put(json_ctx *c, const ckpt_value *v, unsigned depth) {
    if (!value_render_enter(c, depth)) return;
    ck_strbuf *sb = &c->sb;
    switch (v->type) {
    case CKPT_VALUE_NONE: ck_strbuf_adds(sb, "null"); break;
    case CKPT_VALUE_BOOL: ck_strbuf_adds(sb, v->u.b ? "true" : "false"); break;
    case CKPT_VALUE_INT: value_add_i64(sb, v->u.i); break;
    case CKPT_VALUE_BIGINT: ck_strbuf_add(sb, v->u.str.ptr, v->u.str.len); break;
    case CKPT_VALUE_FLOAT: value_json_float(sb, v->u.f); break;
    case CKPT_VALUE_STRING: ck_json_escape(sb, v->u.str.ptr, v->u.str.len); break;
    case CKPT_VALUE_BYTES: value_json_bytes(sb, v->u.str.ptr, v->u.str.len); break;
    case CKPT_VALUE_LIST:
    case CKPT_VALUE_TUPLE:
    case CKPT_VALUE_SET: put_seq(c, v->u.seq.items, v->u.seq.len, depth); break;
    case CKPT_VALUE_DICT: put_dict(c, v, depth); break;
    case CKPT_VALUE_TENSOR: {
        const ts_tensor_view *t = v->u.tensor.view;
        ck_strbuf_addf(sb, "{\"__tensor__\":{\"dtype\":\"%s\",\"shape\":[",
                       ckpt_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++)
            ck_strbuf_addf(sb, d ? ",%" PRId64 : "%" PRId64, t->shape[d]);
        ck_strbuf_adds(sb, "]}}");
        break;
    }
    case CKPT_VALUE_OBJECT:
        ck_strbuf_adds(sb, "{\"__object__\":");
        ck_json_escape(sb, v->u.obj.name, v->u.obj.name_len);
        put_part(c, ",\"args\":", v->u.obj.args, depth);
        put_part(c, ",\"kwargs\":", v->u.obj.kwargs, depth);
        put_part(c, ",\"state\":", v->u.obj.state, depth);
        put_part(c, ",\"listitems\":", v->u.obj.listitems, depth);
        put_part(c, ",\"dictitems\":", v->u.obj.dictitems, depth);
        ck_strbuf_addc(sb, '}');
        break;
    }
}

ckpt_status ckpt_value_to_json(const ckpt_value *v, char **out, ckpt_error *err) {
    if (!out) return ck_fail(err, CKPT_E_INVAL, "ckpt_value_to_json: NULL argument");
    *out = NULL;
    if (!v) return ck_fail(err, CKPT_E_INVAL, "ckpt_value_to_json: NULL argument");
    json_ctx c = {.too_deep = false};
    ck_strbuf_init(&c.sb, CK_VALUE_RENDER_MAX);
    put(&c, v, 1);
    return value_render_finish(&c, "JSON", out, err);
}
