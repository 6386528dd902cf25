/* strbuf.h — a growable, always NUL-terminated byte string for rendering text and JSON.
 *
 * Errors are sticky: when an append fails (out of memory, or the optional size cap is hit)
 * the buffer keeps what it had, ignores every later append, and `ck_strbuf_status` reports
 * the failure.  Renderers can therefore append freely and check once at the end.
 *
 * Ownership: the buffer owns `buf` until `ck_strbuf_detach` hands it to the caller (who
 * frees it with free()) or `ck_strbuf_release` frees it.  A zero-initialised struct
 * (CK_STRBUF_INIT) is a valid empty buffer; `buf` is NULL until the first append, so read
 * the text through `ck_strbuf_cstr`. */
#ifndef CK_UTIL_STRBUF_H
#define CK_UTIL_STRBUF_H

#include "ckpt.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct ck_strbuf {
    char *buf;          /* len bytes + NUL, or NULL while nothing was ever appended */
    size_t len;         /* bytes of text, excluding the NUL */
    size_t alloc;       /* bytes allocated for buf */
    size_t max;         /* most bytes of text accepted; 0 = unlimited */
    ckpt_status status; /* CKPT_OK, or the first failure (CKPT_E_NOMEM / CKPT_E_LIMIT) */
} ck_strbuf;

#define CK_STRBUF_INIT                                                                             \
    { 0 }

/* max: cap on the text length (0 = unlimited); exceeding it fails with CKPT_E_LIMIT. */
void ck_strbuf_init(ck_strbuf *sb, size_t max);
/* Frees the text and returns to the initial state (the cap is kept). */
void ck_strbuf_release(ck_strbuf *sb);
/* Empties the text, keeps the allocation, clears a previous failure. */
void ck_strbuf_reset(ck_strbuf *sb);
/* Makes room for `extra` more bytes.  false (and a sticky failure) if that is impossible. */
bool ck_strbuf_grow(ck_strbuf *sb, size_t extra);

/* Appenders return false once the buffer has failed. */
bool ck_strbuf_add(ck_strbuf *sb, const void *data, size_t len);
bool ck_strbuf_adds(ck_strbuf *sb, const char *s);
bool ck_strbuf_addc(ck_strbuf *sb, char c);
/* The low `n` (<= 8) bytes of v, little-endian. */
bool ck_strbuf_add_le(ck_strbuf *sb, uint64_t v, int n);
bool ck_strbuf_addf(ck_strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool ck_strbuf_vaddf(ck_strbuf *sb, const char *fmt, va_list ap);

/* The text (never NULL; "" when empty). */
const char *ck_strbuf_cstr(const ck_strbuf *sb);
/* Hands the malloc'ed, NUL-terminated text to the caller (len may be NULL) and resets the
 * buffer.  NULL if the buffer failed (it is released) or memory runs out. */
char *ck_strbuf_detach(ck_strbuf *sb, size_t *len);
/* CKPT_OK, or the sticky failure with `err` filled ("what: out of memory"...). */
ckpt_status ck_strbuf_status(const ck_strbuf *sb, const char *what, ckpt_error *err);

#endif
