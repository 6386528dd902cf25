/* pickle_text.c — the textual arguments of protocol-0 opcodes: decimal ints of any size
 * (INT, LONG), floats (FLOAT), escaped byte strings (STRING) and raw-unicode-escape text
 * (UNICODE).  Pure functions over caller-provided byte ranges. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strtod_l */
#endif
#include "pickle/pickle_i.h"

#include <locale.h>
#include <stdlib.h>
#include <string.h>

static bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

static int hex_value(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

pkt_num pkt_parse_i64(const uint8_t *s, size_t n, int64_t *out) {
    size_t i = 0;
    bool neg = false;
    if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    if (i == n) return PKT_SYNTAX;
    uint64_t mag = 0;
    bool over = false;
    for (; i < n; i++) {
        if (!is_digit(s[i])) return PKT_SYNTAX;
        unsigned d = (unsigned)(s[i] - '0');
        if (mag > (UINT64_MAX - d) / 10)
            over = true;
        else
            mag = mag * 10 + d;
    }
    if (over || mag > (neg ? (uint64_t)1 << 63 : (uint64_t)INT64_MAX)) return PKT_OVERFLOW;
    *out = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    return PKT_OK;
}

size_t pk_decimal_to_bigint(const char *s, size_t n, uint8_t *out) {
    const uint8_t *u = (const uint8_t *)s;
    size_t i = n && (u[0] == '+' || u[0] == '-') ? 1 : 0;
    if (i == n || n - i > PK_MAX_INT_DIGITS) return 0;
    for (size_t k = i; k < n; k++)
        if (!is_digit(u[k])) return 0;
    return pkt_decimal_to_le(u, n, out);
}

/* 4300 digits need 14 284 bits: 447 32-bit limbs. */
#define LIMBS ((PK_MAX_INT_DIGITS + 1u) / 9u + 8u)

size_t pkt_decimal_to_le(const uint8_t *s, size_t n, uint8_t *out) {
    uint32_t limb[LIMBS];
    size_t nl = 0;
    size_t i = 0;
    bool neg = false;
    if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    /* Nine digits at a time: limb = limb * 10^k + chunk. */
    while (i < n) {
        uint32_t chunk = 0, mul = 1;
        for (int k = 0; k < 9 && i < n; k++, i++) {
            chunk = chunk * 10u + (uint32_t)(s[i] - '0');
            mul *= 10u;
        }
        uint64_t carry = chunk;
        for (size_t j = 0; j < nl; j++) {
            uint64_t t = (uint64_t)limb[j] * mul + carry;
            limb[j] = (uint32_t)t;
            carry = t >> 32;
        }
        if (carry && nl < LIMBS) limb[nl++] = (uint32_t)carry;
    }
    /* Magnitude bytes, trimmed. */
    size_t len = 0;
    for (size_t j = 0; j < nl; j++)
        for (int k = 0; k < 4; k++)
            out[len++] = (uint8_t)(limb[j] >> (8 * k));
    while (len && out[len - 1] == 0)
        len--;
    if (!neg) {
        if (len && (out[len - 1] & 0x80)) out[len++] = 0x00;
        return len;
    }
    if (len == 0) return 0; /* -0 */
    unsigned carry = 1;
    for (size_t j = 0; j < len; j++) {
        unsigned t = (unsigned)(uint8_t)~out[j] + carry;
        out[j] = (uint8_t)t;
        carry = t >> 8;
    }
    if (!(out[len - 1] & 0x80)) out[len++] = 0xFF;
    while (len > 1 && out[len - 1] == 0xFF && (out[len - 2] & 0x80))
        len--;
    return len;
}

static bool is_blank(uint8_t c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

bool pkt_parse_float(const uint8_t *s, size_t n, double *out) {
    while (n && is_blank(*s))
        s++, n--;
    while (n && is_blank(s[n - 1]))
        n--;
    if (n == 0 || n >= PK_MAX_FLOAT_TEXT) return false;
    char text[PK_MAX_FLOAT_TEXT];
    for (size_t i = 0; i < n; i++) {
        /* Python's float() grammar uses only these; keep strtod away from hex floats. */
        uint8_t c = s[i];
        if (!(is_digit(c) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' ||
              (c | 0x20) == 'i' || (c | 0x20) == 'n' || (c | 0x20) == 'f' || (c | 0x20) == 'a' ||
              (c | 0x20) == 't' || (c | 0x20) == 'y'))
            return false;
        text[i] = (char)c;
    }
    text[n] = '\0';
    locale_t c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (!c_locale) return false;
    char *end = NULL;
    double d = strtod_l(text, &end, c_locale);
    freelocale(c_locale);
    if (end != text + n) return false;
    *out = d;
    return true;
}

bool pkt_escape_decode(const uint8_t *s, size_t n, uint8_t *out, size_t *out_len,
                       const char **why) {
    size_t o = 0;
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i++];
        if (c != '\\') {
            out[o++] = c;
            continue;
        }
        if (i == n) {
            *why = "trailing \\ in STRING argument";
            return false;
        }
        c = s[i++];
        switch (c) {
        case '\n': break; /* line continuation */
        case '\\': out[o++] = '\\'; break;
        case '\'': out[o++] = '\''; break;
        case '"': out[o++] = '"'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 't': out[o++] = '\t'; break;
        case 'n': out[o++] = '\n'; break;
        case 'r': out[o++] = '\r'; break;
        case 'v': out[o++] = '\v'; break;
        case 'a': out[o++] = '\a'; break;
        case '0':
        case '1':
        case '2':
        case '3':
        case '4':
        case '5':
        case '6':
        case '7': {
            unsigned v = (unsigned)(c - '0');
            for (int k = 0; k < 2 && i < n && s[i] >= '0' && s[i] <= '7'; k++)
                v = v * 8u + (unsigned)(s[i++] - '0');
            out[o++] = (uint8_t)v; /* Python keeps the low byte of \400..\777 too */
            break;
        }
        case 'x': {
            int h1 = i < n ? hex_value(s[i]) : -1;
            int h2 = i + 1 < n ? hex_value(s[i + 1]) : -1;
            if (h1 < 0 || h2 < 0) {
                *why = "invalid \\x escape in STRING argument";
                return false;
            }
            out[o++] = (uint8_t)(h1 * 16 + h2);
            i += 2;
            break;
        }
        default: /* unknown escape: kept as written */
            out[o++] = '\\';
            i--;
            break;
        }
    }
    *out_len = o;
    return true;
}

static size_t put_utf8(uint32_t cp, uint8_t *out) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

size_t pkt_latin1_to_utf8(const uint8_t *s, size_t n, uint8_t *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        o += put_utf8(s[i], out + o);
    return o;
}

bool pkt_raw_unicode_escape(const uint8_t *s, size_t n, uint8_t *out, size_t *out_len,
                            const char **why) {
    size_t o = 0;
    size_t i = 0;
    while (i < n) {
        if (s[i] != '\\') {
            o += put_utf8(s[i++], out + o);
            continue;
        }
        /* A run of backslashes; \u and \U escapes count only after an odd number of them. */
        size_t run = 0;
        while (i < n && s[i] == '\\') {
            out[o++] = '\\';
            run++;
            i++;
        }
        if (!(run & 1) || i == n || (s[i] != 'u' && s[i] != 'U')) continue;
        o--; /* the escaping backslash */
        int count = s[i] == 'u' ? 4 : 8;
        i++;
        uint32_t cp = 0;
        for (int k = 0; k < count; k++, i++) {
            int h = i < n ? hex_value(s[i]) : -1;
            if (h < 0) {
                *why = count == 4 ? "truncated \\u escape (4 hex digits expected)"
                                  : "truncated \\U escape (8 hex digits expected)";
                return false;
            }
            cp = cp * 16u + (uint32_t)h;
        }
        if (cp > 0x10FFFF) {
            *why = "\\U escape out of range";
            return false;
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) {
            *why = "surrogate code point in UNICODE argument";
            return false;
        }
        o += put_utf8(cp, out + o);
    }
    *out_len = o;
    return true;
}
