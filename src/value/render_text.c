/* render_text.c — ckpt_value_to_text: the value tree as Python's repr() would print it
 * (`{'lr': 0.001, 'betas': (0.9, 0.999)}`, `(1,)`, `set()`, `b'\x00'`, `True`, `None`),
 * complex, range, slice, bytearray, frozenset and naive datetimes included (`(1+2j)`, `range(0, 10,
 * 2)`, `frozenset({1})`), with these spellings for what has no Python literal: tensor
 * tensor(dtype=float32, shape=[2, 3]) reference         module.Name                      (class,
 * function, dtype, enum member) object            module.Class(arg, ..., kw=v, ..., attr=v, ...,
 * items=...) where attr=v are the entries of a BUILD state dict whose keys are all identifiers (any
 * other state prints as state=...), and items= shows APPENDed / SETITEMed contents. Strings follow
 * CPython's unicode repr: single quotes unless the text has ' but no ", escapes
 * \\ \n \r \t, \xNN for other control characters, and \xNN / \uNNNN / \UNNNNNNNN for the
 * non-printable non-ASCII characters of Unicode categories Cc Cf Cs Co Zs Zl Zp and the
 * noncharacters.  Unassigned code points (also non-printable to Python) are kept raw.
 * The output is bounded by CK_VALUE_RENDER_MAX bytes and CK_VALUE_RENDER_STEPS nodes
 * (CKPT_E_LIMIT past either): a DAG of shared references never expands unboundedly. */
#include "ckpt.h"

#include "util/error.h"
#include "util/strbuf.h"
#include "tensor/float_repr.h"
#include "value/value_i.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

/* Non-printable, assigned code points above U+007F (Unicode 14, categories Cc Cf Cs Co Zs Zl
 * Zp), sorted. */
static const uint32_t nonprint[][2] = {
    {0x80, 0xa0},       {0xad, 0xad},       {0x600, 0x605},      {0x61c, 0x61c},
    {0x6dd, 0x6dd},     {0x70f, 0x70f},     {0x890, 0x891},      {0x8e2, 0x8e2},
    {0x1680, 0x1680},   {0x180e, 0x180e},   {0x2000, 0x200f},    {0x2028, 0x202f},
    {0x205f, 0x2064},   {0x2066, 0x206f},   {0x3000, 0x3000},    {0xd800, 0xf8ff},
    {0xfdd0, 0xfdef},   {0xfeff, 0xfeff},   {0xfff9, 0xfffb},    {0x110bd, 0x110bd},
    {0x110cd, 0x110cd}, {0x13430, 0x13438}, {0x1bca0, 0x1bca3},  {0x1d173, 0x1d17a},
    {0xe0001, 0xe0001}, {0xe0020, 0xe007f}, {0xf0000, 0x10ffff},
};

static bool printable(uint32_t cp) {
    if ((cp & 0xfffe) == 0xfffe) return false; /* U+xxFFFE, U+xxFFFF: noncharacters */
    size_t lo = 0, hi = sizeof nonprint / sizeof nonprint[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < nonprint[mid][0])
            hi = mid;
        else if (cp > nonprint[mid][1])
            lo = mid + 1;
        else
            return false;
    }
    return true;
}

/* One UTF-8 sequence at s (avail > 0); surrogates accepted (Python strings may hold them).
 * Returns its length, 0 when malformed. */
static size_t utf8_decode(const uint8_t *s, size_t avail, uint32_t *cp) {
    size_t n = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc0 ? 2 : 0;
    if (n == 0 || n > avail || s[0] > 0xf4) return 0;
    uint32_t c = s[0] & (0x7f >> n);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        c = c << 6 | (s[i] & 0x3f);
    }
    static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min[n] || c > 0x10ffff) return 0;
    *cp = c;
    return n;
}

static char pick_quote(const char *p, size_t len) {
    return memchr(p, '\'', len) && !memchr(p, '"', len) ? '"' : '\'';
}

/* Escape shared by str and bytes for ASCII; false when c needs no escape. */
static bool put_ascii_escape(ck_strbuf *sb, unsigned c, char quote) {
    if (c == (unsigned char)quote || c == '\\') {
        char e[2] = {'\\', (char)c};
        ck_strbuf_add(sb, e, 2);
    } else if (c == '\n') {
        ck_strbuf_adds(sb, "\\n");
    } else if (c == '\r') {
        ck_strbuf_adds(sb, "\\r");
    } else if (c == '\t') {
        ck_strbuf_adds(sb, "\\t");
    } else if (c < 0x20 || c >= 0x7f) {
        ck_strbuf_addf(sb, "\\x%02x", c);
    } else {
        return false;
    }
    return true;
}

static void put_str(ck_strbuf *sb, const char *p, size_t len) {
    char quote = pick_quote(p, len);
    if (!ck_strbuf_grow(sb, len + 2)) return;
    ck_strbuf_addc(sb, quote);
    const uint8_t *u = (const uint8_t *)p;
    size_t run = 0; /* start of the bytes not yet copied */
    for (size_t i = 0; i < len;) {
        uint32_t cp = u[i];
        size_t n = 1;
        bool raw, byte = cp < 0x80; /* byte: escape u[i] alone */
        if (byte) {
            raw = cp >= 0x20 && cp < 0x7f && cp != (unsigned char)quote && cp != '\\';
        } else {
            n = utf8_decode(u + i, len - i, &cp);
            raw = n && printable(cp);
            if (!n) { /* not UTF-8: show the byte */
                n = 1;
                cp = u[i];
                byte = true;
            }
        }
        if (!raw) {
            ck_strbuf_add(sb, p + run, i - run);
            if (byte)
                put_ascii_escape(sb, cp, quote);
            else if (cp <= 0xff)
                ck_strbuf_addf(sb, "\\x%02" PRIx32, cp);
            else if (cp <= 0xffff)
                ck_strbuf_addf(sb, "\\u%04" PRIx32, cp);
            else
                ck_strbuf_addf(sb, "\\U%08" PRIx32, cp);
            run = i + n;
        }
        i += n;
    }
    ck_strbuf_add(sb, p + run, len - run);
    ck_strbuf_addc(sb, quote);
}

/* bytes repr; `bytearray`: CPython's bytearray repr, which escapes ' whatever the quotes. */
static void put_bytes(ck_strbuf *sb, const char *p, size_t len, bool bytearray) {
    char quote = pick_quote(p, len), esc = bytearray ? '\'' : quote;
    if (!ck_strbuf_grow(sb, len + 3)) return;
    ck_strbuf_addc(sb, 'b');
    ck_strbuf_addc(sb, quote);
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned c = (unsigned char)p[i];
        if (c >= 0x20 && c < 0x7f && c != (unsigned char)esc && c != '\\') continue;
        ck_strbuf_add(sb, p + run, i - run);
        put_ascii_escape(sb, c, esc);
        run = i + 1;
    }
    ck_strbuf_add(sb, p + run, len - run);
    ck_strbuf_addc(sb, quote);
}

typedef value_render text_ctx;

static void put(text_ctx *c, const ckpt_value *v, unsigned depth);

static void put_items(text_ctx *c, ckpt_value *const *items, size_t n, unsigned depth,
                      bool *first) {
    for (size_t i = 0; i < n; i++) {
        if (!*first) ck_strbuf_adds(&c->sb, ", ");
        *first = false;
        put(c, items[i], depth + 1);
    }
}

static bool is_identifier(const ckpt_value *k) {
    if (k->type != CKPT_VALUE_STRING || k->u.str.len == 0) return false;
    for (size_t i = 0; i < k->u.str.len; i++) {
        char ch = k->u.str.ptr[i];
        bool alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
        if (!alpha && !(i > 0 && ch >= '0' && ch <= '9')) return false;
    }
    return true;
}

/* k=v for every entry of a dict whose keys are identifiers; false (nothing written) else. */
static bool put_keywords(text_ctx *c, const ckpt_value *d, unsigned depth, bool *first) {
    if (d->type != CKPT_VALUE_DICT) return false;
    for (size_t i = 0; i < d->u.dict.len; i++)
        if (!is_identifier(d->u.dict.keys[i])) return false;
    for (size_t i = 0; i < d->u.dict.len; i++) {
        const ckpt_value *k = d->u.dict.keys[i];
        if (!*first) ck_strbuf_adds(&c->sb, ", ");
        *first = false;
        ck_strbuf_add(&c->sb, k->u.str.ptr, k->u.str.len);
        ck_strbuf_addc(&c->sb, '=');
        put(c, d->u.dict.vals[i], depth + 1);
    }
    return true;
}

static void put_named(text_ctx *c, const char *name, const ckpt_value *v, unsigned depth,
                      bool *first) {
    if (!v) return;
    if (!*first) ck_strbuf_adds(&c->sb, ", ");
    *first = false;
    ck_strbuf_adds(&c->sb, name);
    ck_strbuf_addc(&c->sb, '=');
    put(c, v, depth + 1);
}

static bool name_is(const ckpt_value *v, const char *name) {
    return v->u.obj.name_len == strlen(name) && memcmp(v->u.obj.name, name, v->u.obj.name_len) == 0;
}

/* One part of a complex: Python's float repr without the ".0" of integral values, with a
 * sign when `sign` (CPython's complex_repr: format 'r', Py_DTSF_SIGN for the imaginary part;
 * a NaN's sign is never shown). */
static void put_complex_part(ck_strbuf *sb, double d, bool sign) {
    char buf[FLOAT_REPR_MAX];
    size_t n = float_repr(d, FLOAT_REPR_PYTHON, buf);
    if (n >= 2 && buf[n - 2] == '.' && buf[n - 1] == '0') n -= 2;
    if (sign && buf[0] != '-') ck_strbuf_addc(sb, '+');
    ck_strbuf_add(sb, buf, n);
}

static bool is_int(const ckpt_value *v) {
    return v->type == CKPT_VALUE_INT || v->type == CKPT_VALUE_BIGINT;
}

/* The datetime module's naive date, time and datetime (their pickled state: big-endian year,
 * then one byte a field, microseconds in three) and timedelta, as their repr spells them;
 * false (nothing written) for anything else, a time zone or a fold included. */
static bool put_datetime(ck_strbuf *sb, const ckpt_value *v, ckpt_value *const *a, size_t n) {
    if (name_is(v, "datetime.timedelta") && n == 3 && a[0]->type == CKPT_VALUE_INT &&
        a[1]->type == CKPT_VALUE_INT && a[2]->type == CKPT_VALUE_INT) {
        static const char *const names[] = {"days", "seconds", "microseconds"};
        ck_strbuf_adds(sb, "datetime.timedelta(");
        bool any = false;
        for (int i = 0; i < 3; i++)
            if (a[i]->u.i) {
                ck_strbuf_addf(sb, "%s%s=%lld", any ? ", " : "", names[i], (long long)a[i]->u.i);
                any = true;
            }
        ck_strbuf_adds(sb, any ? ")" : "0)");
        return true;
    }
    if (n != 1 || a[0]->type != CKPT_VALUE_BYTES) return false;
    const uint8_t *b = (const uint8_t *)a[0]->u.str.ptr;
    size_t len = a[0]->u.str.len;
    long f[7];
    int nf;
    if (name_is(v, "datetime.date") && len == 4) {
        f[0] = b[0] * 256 + b[1], f[1] = b[2], f[2] = b[3], nf = 3;
    } else if (name_is(v, "datetime.datetime") && len == 10 && b[2] < 128) {
        f[0] = b[0] * 256 + b[1], f[1] = b[2], f[2] = b[3], f[3] = b[4], f[4] = b[5];
        f[5] = b[6], f[6] = (long)b[7] << 16 | (long)b[8] << 8 | b[9], nf = 7;
        for (int k = 0; k < 2 && f[nf - 1] == 0; k++) /* microseconds, then seconds, when 0 */
            nf--;
    } else if (name_is(v, "datetime.time") && len == 6 && b[0] < 128) {
        f[0] = b[0], f[1] = b[1], f[2] = b[2], f[3] = (long)b[3] << 16 | (long)b[4] << 8 | b[5];
        nf = f[3] ? 4 : f[2] ? 3 : 2;
    } else {
        return false;
    }
    ck_strbuf_add(sb, v->u.obj.name, v->u.obj.name_len);
    for (int i = 0; i < nf; i++)
        ck_strbuf_addf(sb, "%s%ld", i ? ", " : "(", f[i]);
    ck_strbuf_addc(sb, ')');
    return true;
}

/* Builtins whose repr Python spells without the module: complex, range, slice, bytearray,
 * when their arguments have the shape pickle gives them.  false (nothing written) else. */
static bool put_builtin(text_ctx *c, const ckpt_value *v, unsigned depth) {
    const ckpt_value *args = v->u.obj.args;
    if (!args || args->type != CKPT_VALUE_TUPLE || v->u.obj.kwargs || v->u.obj.state ||
        v->u.obj.listitems || v->u.obj.dictitems)
        return false;
    ckpt_value *const *a = args->u.seq.items;
    size_t n = args->u.seq.len;
    ck_strbuf *sb = &c->sb;
    bool first = true;
    if (name_is(v, "builtins.complex") && n == 2 && a[0]->type == CKPT_VALUE_FLOAT &&
        a[1]->type == CKPT_VALUE_FLOAT) {
        double re = a[0]->u.f, im = a[1]->u.f;
        bool plain = re == 0 && !signbit(re); /* +0 real part: the imaginary part alone */
        if (!plain) {
            ck_strbuf_addc(sb, '(');
            put_complex_part(sb, re, false);
        }
        put_complex_part(sb, im, !plain);
        ck_strbuf_adds(sb, plain ? "j" : "j)");
        return true;
    }
    if (name_is(v, "builtins.range") && n == 3 && is_int(a[0]) && is_int(a[1]) && is_int(a[2])) {
        bool unit = a[2]->type == CKPT_VALUE_INT && a[2]->u.i == 1;
        ck_strbuf_adds(sb, "range(");
        put_items(c, a, unit ? 2 : 3, depth, &first);
        ck_strbuf_addc(sb, ')');
        return true;
    }
    if (name_is(v, "builtins.slice") && n == 3) {
        ck_strbuf_adds(sb, "slice(");
        put_items(c, a, 3, depth, &first);
        ck_strbuf_addc(sb, ')');
        return true;
    }
    if (put_datetime(sb, v, a, n)) return true;
    if (name_is(v, "builtins.bytearray") &&
        (n == 0 || (n == 1 && a[0]->type == CKPT_VALUE_BYTES))) {
        ck_strbuf_adds(sb, "bytearray(");
        if (n)
            put_bytes(sb, a[0]->u.str.ptr, a[0]->u.str.len, true);
        else
            ck_strbuf_adds(sb, "b''");
        ck_strbuf_addc(sb, ')');
        return true;
    }
    return false;
}

static void put_object(text_ctx *c, const ckpt_value *v, unsigned depth) {
    if (put_builtin(c, v, depth)) return;
    ck_strbuf_add(&c->sb, v->u.obj.name, v->u.obj.name_len);
    const ckpt_value *args = v->u.obj.args, *kw = v->u.obj.kwargs, *st = v->u.obj.state;
    if (!args && !kw && !st && !v->u.obj.listitems && !v->u.obj.dictitems) return;
    ck_strbuf_addc(&c->sb, '(');
    bool first = true;
    if (args && (args->type == CKPT_VALUE_TUPLE || args->type == CKPT_VALUE_LIST))
        put_items(c, args->u.seq.items, args->u.seq.len, depth, &first);
    else if (args)
        put_items(c, (ckpt_value *const *)&v->u.obj.args, 1, depth, &first);
    if (kw && !put_keywords(c, kw, depth, &first)) put_named(c, "kwargs", kw, depth, &first);
    if (st && !put_keywords(c, st, depth, &first)) put_named(c, "state", st, depth, &first);
    put_named(c, "items", v->u.obj.listitems, depth, &first);
    put_named(c, "items", v->u.obj.dictitems, depth, &first);
    ck_strbuf_addc(&c->sb, ')');
}

static void put(text_ctx *c, const ckpt_value *v, unsigned depth) {
    if (!value_render_enter(c, depth)) return;
    ck_strbuf *sb = &c->sb;
    bool first = true;
    switch (v->type) {
    case CKPT_VALUE_NONE: ck_strbuf_adds(sb, "None"); break;
    case CKPT_VALUE_BOOL: ck_strbuf_adds(sb, v->u.b ? "True" : "False"); break;
    case CKPT_VALUE_INT: value_add_i64(sb, v->u.i); break;
    case CKPT_VALUE_BIGINT: ck_strbuf_add(sb, v->u.str.ptr, v->u.str.len); break;
    case CKPT_VALUE_FLOAT: {
        char buf[FLOAT_REPR_MAX];
        ck_strbuf_add(sb, buf, float_repr(v->u.f, FLOAT_REPR_PYTHON, buf));
        break;
    }
    case CKPT_VALUE_STRING: put_str(sb, v->u.str.ptr, v->u.str.len); break;
    case CKPT_VALUE_BYTES: put_bytes(sb, v->u.str.ptr, v->u.str.len, false); break;
    case CKPT_VALUE_LIST:
        ck_strbuf_addc(sb, '[');
        put_items(c, v->u.seq.items, v->u.seq.len, depth, &first);
        ck_strbuf_addc(sb, ']');
        break;
    case CKPT_VALUE_TUPLE:
        ck_strbuf_addc(sb, '(');
        put_items(c, v->u.seq.items, v->u.seq.len, depth, &first);
        ck_strbuf_adds(sb, v->u.seq.len == 1 ? ",)" : ")");
        break;
    case CKPT_VALUE_SET:
        if (v->u.seq.len == 0) {
            ck_strbuf_adds(sb, v->u.seq.frozen ? "frozenset()" : "set()");
            break;
        }
        ck_strbuf_adds(sb, v->u.seq.frozen ? "frozenset({" : "{");
        put_items(c, v->u.seq.items, v->u.seq.len, depth, &first);
        ck_strbuf_adds(sb, v->u.seq.frozen ? "})" : "}");
        break;
    case CKPT_VALUE_DICT:
        ck_strbuf_addc(sb, '{');
        for (size_t i = 0; i < v->u.dict.len; i++) {
            if (i) ck_strbuf_adds(sb, ", ");
            put(c, v->u.dict.keys[i], depth + 1);
            ck_strbuf_adds(sb, ": ");
            put(c, v->u.dict.vals[i], depth + 1);
        }
        ck_strbuf_addc(sb, '}');
        break;
    case CKPT_VALUE_TENSOR: {
        const ts_tensor_view *t = v->u.tensor.view;
        ck_strbuf_addf(sb, "tensor(dtype=%s, shape=[", ckpt_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++)
            ck_strbuf_addf(sb, d ? ", %" PRId64 : "%" PRId64, t->shape[d]);
        ck_strbuf_adds(sb, "])");
        break;
    }
    case CKPT_VALUE_OBJECT: put_object(c, v, depth); break;
    }
}

ckpt_status ckpt_value_to_text(const ckpt_value *v, char **out, ckpt_error *err) {
    if (!out) return ck_fail(err, CKPT_E_INVAL, "ckpt_value_to_text: NULL argument");
    *out = NULL;
    if (!v) return ck_fail(err, CKPT_E_INVAL, "ckpt_value_to_text: NULL argument");
    text_ctx c = {.too_deep = false};
    ck_strbuf_init(&c.sb, CK_VALUE_RENDER_MAX);
    put(&c, v, 1);
    return value_render_finish(&c, "text", out, err);
}
