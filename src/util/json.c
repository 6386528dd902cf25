/* json.c — owns JSON: the strict recursive-descent parser (bounded depth, arena-allocated
 * tree built through a scratch value stack so arrays and objects are allocated exactly once)
 * and the string escaper used by renderers.
 *
 * Numbers are converted with strtod, which follows the C locale's decimal point; the library never
 * calls setlocale(). */
#include "util/json.h"

#include "util/utf8.h"

#include "util/error.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned long long ull;

typedef struct json_parser {
    const uint8_t *s;
    size_t n;
    size_t pos;
    ck_arena *arena;
    uint32_t max_depth;
    bool python;    /* NaN, Infinity, -Infinity accepted (ck_json_parse_python) */
    ck_json *stack; /* children of the arrays/objects being parsed (malloc'ed scratch) */
    size_t sp;
    size_t cap;
    ckpt_error *err;
} json_parser;

static ckpt_status jfail(json_parser *p, size_t at, const char *what) {
    return ck_fail(p->err, CKPT_E_FORMAT, "json offset %zu: %s", at, what);
}

static ckpt_status jnomem(json_parser *p) {
    if (ck_arena_over_budget(p->arena))
        return ck_fail(p->err, CKPT_E_LIMIT,
                       "json offset %zu: document needs more memory than its budget", p->pos);
    return ck_fail(p->err, CKPT_E_NOMEM, "json offset %zu: out of memory", p->pos);
}

static void skip_ws(json_parser *p) {
    while (p->pos < p->n) {
        uint8_t c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static ckpt_status push(json_parser *p, const ck_json *v) {
    if (p->sp == p->cap) {
        size_t ncap = p->cap ? p->cap * 2 : 64;
        ck_json *ns = realloc(p->stack, ncap * sizeof *ns);
        if (!ns) return ck_fail(p->err, CKPT_E_NOMEM, "json: out of memory");
        p->stack = ns;
        p->cap = ncap;
    }
    p->stack[p->sp++] = *v;
    return CKPT_OK;
}

static int hexval(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool read_hex4(const uint8_t *s, size_t avail, uint32_t *out) {
    if (avail < 4) return false;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(s[i]);
        if (h < 0) return false;
        v = v << 4 | (uint32_t)h;
    }
    *out = v;
    return true;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* p->pos is at the opening quote. */
static ckpt_status parse_string(json_parser *p, const char **out, size_t *out_len) {
    size_t start = ++p->pos;
    bool escapes = false;
    for (;;) { /* pass 1: find the end, validate raw bytes */
        if (p->pos >= p->n) return jfail(p, start - 1, "unterminated string");
        uint8_t c = p->s[p->pos];
        if (c == '"') break;
        if (c < 0x20) return jfail(p, p->pos, "control character in string");
        if (c == '\\') {
            escapes = true;
            if (p->pos + 1 >= p->n) return jfail(p, start - 1, "unterminated string");
            p->pos += 2;
            continue;
        }
        size_t l = utf8_seq_len(p->s + p->pos, p->n - p->pos);
        if (!l) return jfail(p, p->pos, "invalid UTF-8 in string");
        p->pos += l;
    }
    size_t end = p->pos++;
    size_t raw = end - start;
    char *o = ck_arena_alloc(p->arena, raw + 1);
    if (!o) return jnomem(p);
    if (!escapes) {
        memcpy(o, p->s + start, raw);
        o[raw] = '\0';
        *out = o;
        *out_len = raw;
        return CKPT_OK;
    }
    size_t k = 0;
    for (size_t i = start; i < end;) {
        uint8_t c = p->s[i];
        if (c != '\\') {
            o[k++] = (char)c;
            i++;
            continue;
        }
        uint8_t e = p->s[i + 1];
        switch (e) {
        case '"': o[k++] = '"'; break;
        case '\\': o[k++] = '\\'; break;
        case '/': o[k++] = '/'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'n': o[k++] = '\n'; break;
        case 'r': o[k++] = '\r'; break;
        case 't': o[k++] = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (!read_hex4(p->s + i + 2, end - (i + 2), &cp))
                return jfail(p, i, "bad \\u escape (needs 4 hex digits)");
            if (cp >= 0xdc00 && cp <= 0xdfff) return jfail(p, i, "lone low surrogate escape");
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (end - (i + 6) < 6 || p->s[i + 6] != '\\' || p->s[i + 7] != 'u' ||
                    !read_hex4(p->s + i + 8, end - (i + 8), &lo) || lo < 0xdc00 || lo > 0xdfff)
                    return jfail(p, i, "high surrogate escape without a low surrogate");
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                i += 6;
            }
            k += put_utf8(o + k, cp);
            i += 6;
            continue;
        }
        default: return jfail(p, i, "invalid escape in string");
        }
        i += 2;
    }
    o[k] = '\0';
    *out = o;
    *out_len = k;
    return CKPT_OK;
}

static bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

static ckpt_status parse_number(json_parser *p, ck_json *v) {
    size_t start = p->pos, i = p->pos;
    bool neg = false, integral = true;
    if (i < p->n && p->s[i] == '-') {
        neg = true;
        i++;
    }
    if (i >= p->n || !is_digit(p->s[i])) return jfail(p, start, "invalid number");
    if (p->s[i] == '0') {
        i++;
        if (i < p->n && is_digit(p->s[i])) return jfail(p, start, "number with a leading zero");
    } else {
        while (i < p->n && is_digit(p->s[i]))
            i++;
    }
    if (i < p->n && p->s[i] == '.') {
        integral = false;
        i++;
        if (i >= p->n || !is_digit(p->s[i])) return jfail(p, start, "invalid number fraction");
        while (i < p->n && is_digit(p->s[i]))
            i++;
    }
    if (i < p->n && (p->s[i] == 'e' || p->s[i] == 'E')) {
        integral = false;
        i++;
        if (i < p->n && (p->s[i] == '+' || p->s[i] == '-')) i++;
        if (i >= p->n || !is_digit(p->s[i])) return jfail(p, start, "invalid number exponent");
        while (i < p->n && is_digit(p->s[i]))
            i++;
    }
    v->type = CK_JSON_NUMBER;
    uint64_t mag = 0;
    bool fits = integral;
    for (size_t k = start + (neg ? 1 : 0); fits && k < i; k++) {
        unsigned dig = p->s[k] - '0';
        if (mag > (UINT64_MAX - dig) / 10)
            fits = false;
        else
            mag = mag * 10 + dig;
    }
    if (fits && (neg ? mag <= (uint64_t)INT64_MAX + 1 : mag <= (uint64_t)INT64_MAX)) {
        v->is_int = true;
        v->u.num.i = !neg ? (int64_t)mag : mag > (uint64_t)INT64_MAX ? INT64_MIN : -(int64_t)mag;
    }
    if (fits && mag <= (UINT64_C(1) << 53)) { /* exact as a double: what strtod would give */
        v->u.num.d = neg ? -(double)mag : (double)mag;
        p->pos = i;
        return CKPT_OK;
    }
    size_t len = i - start;
    if (integral && !v->is_int) { /* beyond int64: exact as text, as Python's int() keeps it */
        if (len - (neg ? 1 : 0) > CK_JSON_MAX_INT_DIGITS)
            return jfail(p, start, "integer of more than 4300 digits (Python's int() limit)");
        char *t = ck_arena_alloc(p->arena, len + 1);
        if (!t) return jnomem(p);
        memcpy(t, p->s + start, len);
        t[len] = '\0';
        v->u.num.big = t;
        v->len = len;
    }
    char small[64], *buf = small;
    if (len >= sizeof small) {
        buf = malloc(len + 1);
        if (!buf) return ck_fail(p->err, CKPT_E_NOMEM, "json: out of memory");
    }
    memcpy(buf, p->s + start, len);
    buf[len] = '\0';
    errno = 0;
    double d = strtod(buf, NULL);
    bool overflow = errno == ERANGE && isinf(d);
    if (buf != small) free(buf);
    if (overflow && !integral && !p->python)
        return jfail(p, start, "number out of range of a double");
    v->u.num.d = d;
    p->pos = i;
    return CKPT_OK;
}

static bool match(json_parser *p, const char *word) {
    size_t l = strlen(word);
    if (p->n - p->pos < l || memcmp(p->s + p->pos, word, l)) return false;
    p->pos += l;
    return true;
}

static ckpt_status parse_value(json_parser *p, uint32_t depth, ck_json *v);

static ckpt_status parse_array(json_parser *p, uint32_t depth, ck_json *v) {
    size_t open = p->pos++, base = p->sp;
    skip_ws(p);
    if (p->pos < p->n && p->s[p->pos] == ']') {
        p->pos++;
    } else {
        for (;;) {
            ck_json item = {0};
            CK_TRY(parse_value(p, depth + 1, &item));
            CK_TRY(push(p, &item));
            skip_ws(p);
            if (p->pos >= p->n) return jfail(p, open, "unterminated array");
            uint8_t c = p->s[p->pos++];
            if (c == ']') break;
            if (c != ',') return jfail(p, p->pos - 1, "expected ',' or ']' in array");
        }
    }
    size_t count = p->sp - base;
    ck_json *items = NULL;
    if (count) {
        items = ck_arena_alloc(p->arena, count * sizeof *items);
        if (!items) return jnomem(p);
        memcpy(items, p->stack + base, count * sizeof *items);
    }
    p->sp = base;
    v->type = CK_JSON_ARRAY;
    v->len = count;
    v->u.items = items;
    return CKPT_OK;
}

static ckpt_status parse_object(json_parser *p, uint32_t depth, ck_json *v) {
    size_t open = p->pos++, base = p->sp;
    skip_ws(p);
    if (p->pos < p->n && p->s[p->pos] == '}') {
        p->pos++;
    } else {
        for (;;) {
            skip_ws(p);
            if (p->pos >= p->n || p->s[p->pos] != '"')
                return jfail(p, p->pos,
                             p->pos >= p->n ? "unterminated object"
                                            : "expected a string key in object");
            ck_json key = {.type = CK_JSON_STRING};
            CK_TRY(parse_string(p, &key.u.str, &key.len));
            skip_ws(p);
            if (p->pos >= p->n || p->s[p->pos] != ':')
                return jfail(p, p->pos, "expected ':' after object key");
            p->pos++;
            ck_json val = {0};
            CK_TRY(parse_value(p, depth + 1, &val));
            CK_TRY(push(p, &key));
            CK_TRY(push(p, &val));
            skip_ws(p);
            if (p->pos >= p->n) return jfail(p, open, "unterminated object");
            uint8_t c = p->s[p->pos++];
            if (c == '}') break;
            if (c != ',') return jfail(p, p->pos - 1, "expected ',' or '}' in object");
        }
    }
    size_t count = (p->sp - base) / 2;
    ck_json_member *m = NULL;
    if (count) {
        m = ck_arena_alloc(p->arena, count * sizeof *m);
        if (!m) return jnomem(p);
        for (size_t k = 0; k < count; k++) {
            m[k].key = p->stack[base + 2 * k].u.str;
            m[k].key_len = p->stack[base + 2 * k].len;
            m[k].value = p->stack[base + 2 * k + 1];
        }
    }
    p->sp = base;
    v->type = CK_JSON_OBJECT;
    v->len = count;
    v->u.members = m;
    return CKPT_OK;
}

static ckpt_status parse_value(json_parser *p, uint32_t depth, ck_json *v) {
    skip_ws(p);
    if (p->pos >= p->n) return jfail(p, p->pos, "unexpected end of input, expected a value");
    memset(v, 0, sizeof *v);
    switch (p->s[p->pos]) {
    case '{':
    case '[':
        if (depth >= p->max_depth)
            return ck_fail(p->err, CKPT_E_LIMIT, "json offset %zu: nesting deeper than %u levels",
                           p->pos, (unsigned)p->max_depth);
        return p->s[p->pos] == '{' ? parse_object(p, depth, v) : parse_array(p, depth, v);
    case '"': v->type = CK_JSON_STRING; return parse_string(p, &v->u.str, &v->len);
    case 't':
        if (!match(p, "true")) break;
        v->type = CK_JSON_BOOL;
        v->boolean = true;
        return CKPT_OK;
    case 'f':
        if (!match(p, "false")) break;
        v->type = CK_JSON_BOOL;
        return CKPT_OK;
    case 'n':
        if (!match(p, "null")) break;
        v->type = CK_JSON_NULL;
        return CKPT_OK;
    default:
        if (p->python) {
            int which = match(p, "NaN")         ? 1
                        : match(p, "Infinity")  ? 2
                        : match(p, "-Infinity") ? 3
                                                : 0;
            if (which) {
                v->type = CK_JSON_NUMBER;
                v->u.num.d = which == 1   ? (double)NAN
                             : which == 2 ? (double)INFINITY
                                          : -(double)INFINITY;
                return CKPT_OK;
            }
        }
        if (p->s[p->pos] == '-' || is_digit(p->s[p->pos])) return parse_number(p, v);
        break;
    }
    return jfail(p, p->pos, "unexpected character, expected a value");
}

static ckpt_status parse_doc(ck_arena *arena, const char *text, size_t len, uint32_t max_depth,
                             bool python, const ck_json **out, ckpt_error *err) {
    if (!arena || !out || (!text && len))
        return ck_fail(err, CKPT_E_INVAL, "ck_json_parse: NULL argument");
    *out = NULL;
    json_parser p = {.s = (const uint8_t *)text,
                     .n = len,
                     .arena = arena,
                     .python = python,
                     .max_depth = !max_depth                      ? CK_JSON_DEFAULT_DEPTH
                                  : max_depth > CK_JSON_MAX_DEPTH ? CK_JSON_MAX_DEPTH
                                                                  : max_depth,
                     .err = err};
    ck_json *root = ck_arena_alloc(arena, sizeof *root);
    ckpt_status st;
    if (!root) {
        st = jnomem(&p);
    } else {
        st = parse_value(&p, 0, root);
        if (st == CKPT_OK) {
            skip_ws(&p);
            if (p.pos != p.n) st = jfail(&p, p.pos, "unexpected text after the value");
        }
    }
    free(p.stack);
    if (st == CKPT_OK) *out = root;
    return st;
}

const ck_json *ck_json_get(const ck_json *obj, const char *key) {
    if (!obj || obj->type != CK_JSON_OBJECT || !key) return NULL;
    size_t kl = strlen(key);
    for (size_t i = obj->len; i-- > 0;) {
        const ck_json_member *m = &obj->u.members[i];
        if (m->key_len == kl && !memcmp(m->key, key, kl)) return &m->value;
    }
    return NULL;
}

const ck_json *ck_json_at(const ck_json *arr, size_t i) {
    if (!arr || arr->type != CK_JSON_ARRAY || i >= arr->len) return NULL;
    return &arr->u.items[i];
}

const char *ck_json_type_name(ck_json_type t) {
    switch (t) {
    case CK_JSON_NULL: return "null";
    case CK_JSON_BOOL: return "bool";
    case CK_JSON_NUMBER: return "number";
    case CK_JSON_STRING: return "string";
    case CK_JSON_ARRAY: return "array";
    case CK_JSON_OBJECT: return "object";
    }
    return "invalid";
}

bool ck_json_escape(ck_strbuf *sb, const char *s, size_t len) {
    const uint8_t *u = (const uint8_t *)s;
    if (!ck_strbuf_grow(sb, len + 2)) return false;
    ck_strbuf_addc(sb, '"');
    size_t run = 0; /* start of the pending run of bytes copied verbatim */
    for (size_t i = 0; i < len;) {
        uint8_t c = u[i];
        const char *esc = NULL;
        char tmp[8];
        size_t l = 1;
        if (c == '"')
            esc = "\\\"";
        else if (c == '\\')
            esc = "\\\\";
        else if (c < 0x20) {
            switch (c) {
            case '\b': esc = "\\b"; break;
            case '\f': esc = "\\f"; break;
            case '\n': esc = "\\n"; break;
            case '\r': esc = "\\r"; break;
            case '\t': esc = "\\t"; break;
            default: snprintf(tmp, sizeof tmp, "\\u%04x", c); esc = tmp;
            }
        } else if (c >= 0x80) {
            l = utf8_seq_len(u + i, len - i);
            if (!l) {
                esc = "\\ufffd";
                l = 1;
            }
        }
        if (esc) {
            ck_strbuf_add(sb, s + run, i - run);
            ck_strbuf_adds(sb, esc);
            run = i + l;
        }
        i += l;
    }
    ck_strbuf_add(sb, s + run, len - run);
    return ck_strbuf_addc(sb, '"');
}

char *ckpt_json_string(const char *s, size_t len) {
    ck_strbuf sb;
    ck_strbuf_init(&sb, 0);
    if (!s || !ck_json_escape(&sb, s, len)) {
        ck_strbuf_release(&sb);
        return NULL;
    }
    return ck_strbuf_detach(&sb, NULL);
}

ckpt_status ck_json_parse(ck_arena *arena, const char *text, size_t len, uint32_t max_depth,
                          const ck_json **out, ckpt_error *err) {
    return parse_doc(arena, text, len, max_depth, false, out, err);
}

ckpt_status ck_json_parse_python(ck_arena *arena, const char *text, size_t len, uint32_t max_depth,
                                 const ck_json **out, ckpt_error *err) {
    return parse_doc(arena, text, len, max_depth, true, out, err);
}
