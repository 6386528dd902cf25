/* strbuf.c — owns the growable string buffer (see strbuf.h): growth, sticky failures,
 * formatted appends and detaching. */
#include "util/strbuf.h"

#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ck_strbuf_init(ck_strbuf *sb, size_t max) {
    memset(sb, 0, sizeof *sb);
    sb->max = max;
}

void ck_strbuf_release(ck_strbuf *sb) {
    size_t max = sb->max;
    free(sb->buf);
    ck_strbuf_init(sb, max);
}

void ck_strbuf_reset(ck_strbuf *sb) {
    sb->len = 0;
    if (sb->buf) sb->buf[0] = '\0';
    sb->status = CKPT_OK;
}

static bool sb_failed(ck_strbuf *sb, ckpt_status code) {
    if (sb->status == CKPT_OK) sb->status = code;
    return false;
}

bool ck_strbuf_grow(ck_strbuf *sb, size_t extra) {
    if (sb->status != CKPT_OK) return false;
    if (extra > SIZE_MAX - 1 - sb->len) return sb_failed(sb, CKPT_E_NOMEM);
    size_t need = sb->len + extra + 1;
    if (sb->max && need - 1 > sb->max) return sb_failed(sb, CKPT_E_LIMIT);
    if (need <= sb->alloc) return true;
    size_t n = sb->alloc < 64 ? 64 : sb->alloc;
    while (n < need)
        n = n > SIZE_MAX / 2 ? need : n + n / 2;
    char *p = realloc(sb->buf, n);
    if (!p) return sb_failed(sb, CKPT_E_NOMEM);
    if (!sb->buf) p[0] = '\0';
    sb->buf = p;
    sb->alloc = n;
    return true;
}

bool ck_strbuf_add(ck_strbuf *sb, const void *data, size_t len) {
    if (!ck_strbuf_grow(sb, len)) return false;
    if (len) memcpy(sb->buf + sb->len, data, len);
    sb->len += len;
    sb->buf[sb->len] = '\0';
    return true;
}

bool ck_strbuf_adds(ck_strbuf *sb, const char *s) { return ck_strbuf_add(sb, s, strlen(s)); }

bool ck_strbuf_addc(ck_strbuf *sb, char c) { return ck_strbuf_add(sb, &c, 1); }

bool ck_strbuf_add_le(ck_strbuf *sb, uint64_t v, int n) {
    unsigned char t[8];
    for (int i = 0; i < n; i++)
        t[i] = (unsigned char)(v >> (8 * i));
    return ck_strbuf_add(sb, t, (size_t)n);
}

bool ck_strbuf_vaddf(ck_strbuf *sb, const char *fmt, va_list ap) {
    if (sb->status != CKPT_OK) return false;
    va_list cp;
    va_copy(cp, ap);
    size_t room = sb->alloc ? sb->alloc - sb->len : 0;
    int n = vsnprintf(room ? sb->buf + sb->len : NULL, room, fmt, cp);
    va_end(cp);
    if (n < 0) return sb_failed(sb, CKPT_E_INVAL);
    if ((size_t)n >= room) {
        if (!ck_strbuf_grow(sb, (size_t)n)) {
            if (sb->buf) sb->buf[sb->len] = '\0';
            return false;
        }
        vsnprintf(sb->buf + sb->len, (size_t)n + 1, fmt, ap);
    } else if (sb->max && sb->len + (size_t)n > sb->max) {
        sb->buf[sb->len] = '\0';
        return sb_failed(sb, CKPT_E_LIMIT);
    }
    sb->len += (size_t)n;
    return true;
}

bool ck_strbuf_addf(ck_strbuf *sb, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    bool ok = ck_strbuf_vaddf(sb, fmt, ap);
    va_end(ap);
    return ok;
}

const char *ck_strbuf_cstr(const ck_strbuf *sb) { return sb->buf ? sb->buf : ""; }

char *ck_strbuf_detach(ck_strbuf *sb, size_t *len) {
    if (len) *len = 0;
    if (sb->status != CKPT_OK) {
        ck_strbuf_release(sb);
        return NULL;
    }
    char *p = sb->buf;
    if (!p) {
        p = malloc(1);
        if (!p) return NULL;
        p[0] = '\0';
    }
    if (len) *len = sb->len;
    sb->buf = NULL;
    sb->len = sb->alloc = 0;
    return p;
}

ckpt_status ck_strbuf_status(const ck_strbuf *sb, const char *what, ckpt_error *err) {
    switch (sb->status) {
    case CKPT_OK: return CKPT_OK;
    case CKPT_E_LIMIT:
        return ck_fail(err, CKPT_E_LIMIT, "%s: text longer than the %zu bytes allowed", what,
                       sb->max);
    case CKPT_E_NOMEM: return ck_fail(err, CKPT_E_NOMEM, "%s: out of memory", what);
    default: return ck_fail(err, sb->status, "%s: formatting failed", what);
    }
}
