/* strbuf.c — owns the growable string buffer (see strbuf.h): growth, sticky failures,
 * formatted appends and detaching. */
#include "util/strbuf.h"

#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ckpt_strbuf_init(ckpt_strbuf *sb, size_t max) {
    memset(sb, 0, sizeof *sb);
    sb->max = max;
}

void ckpt_strbuf_release(ckpt_strbuf *sb) {
    size_t max = sb->max;
    free(sb->buf);
    ckpt_strbuf_init(sb, max);
}

void ckpt_strbuf_reset(ckpt_strbuf *sb) {
    sb->len = 0;
    if (sb->buf) sb->buf[0] = '\0';
    sb->status = CKPT_OK;
}

static bool sb_failed(ckpt_strbuf *sb, ckpt_status code) {
    if (sb->status == CKPT_OK) sb->status = code;
    return false;
}

bool ckpt_strbuf_grow(ckpt_strbuf *sb, size_t extra) {
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

bool ckpt_strbuf_add(ckpt_strbuf *sb, const void *data, size_t len) {
    if (!ckpt_strbuf_grow(sb, len)) return false;
    if (len) memcpy(sb->buf + sb->len, data, len);
    sb->len += len;
    sb->buf[sb->len] = '\0';
    return true;
}

bool ckpt_strbuf_adds(ckpt_strbuf *sb, const char *s) { return ckpt_strbuf_add(sb, s, strlen(s)); }

bool ckpt_strbuf_addc(ckpt_strbuf *sb, char c) { return ckpt_strbuf_add(sb, &c, 1); }

bool ckpt_strbuf_add_le(ckpt_strbuf *sb, uint64_t v, int n) {
    unsigned char t[8];
    for (int i = 0; i < n; i++)
        t[i] = (unsigned char)(v >> (8 * i));
    return ckpt_strbuf_add(sb, t, (size_t)n);
}

bool ckpt_strbuf_vaddf(ckpt_strbuf *sb, const char *fmt, va_list ap) {
    if (sb->status != CKPT_OK) return false;
    va_list cp;
    va_copy(cp, ap);
    size_t room = sb->alloc ? sb->alloc - sb->len : 0;
    int n = vsnprintf(room ? sb->buf + sb->len : NULL, room, fmt, cp);
    va_end(cp);
    if (n < 0) return sb_failed(sb, CKPT_E_INVAL);
    if ((size_t)n >= room) {
        if (!ckpt_strbuf_grow(sb, (size_t)n)) {
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

bool ckpt_strbuf_addf(ckpt_strbuf *sb, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    bool ok = ckpt_strbuf_vaddf(sb, fmt, ap);
    va_end(ap);
    return ok;
}

const char *ckpt_strbuf_cstr(const ckpt_strbuf *sb) { return sb->buf ? sb->buf : ""; }

char *ckpt_strbuf_detach(ckpt_strbuf *sb, size_t *len) {
    if (len) *len = 0;
    if (sb->status != CKPT_OK) {
        ckpt_strbuf_release(sb);
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

ckpt_status ckpt_strbuf_status(const ckpt_strbuf *sb, const char *what, ckpt_error *err) {
    switch (sb->status) {
    case CKPT_OK: return CKPT_OK;
    case CKPT_E_LIMIT:
        return ckpt_fail(err, CKPT_E_LIMIT, "%s: text longer than the %zu bytes allowed", what,
                         sb->max);
    case CKPT_E_NOMEM: return ckpt_fail(err, CKPT_E_NOMEM, "%s: out of memory", what);
    default: return ckpt_fail(err, sb->status, "%s: formatting failed", what);
    }
}
