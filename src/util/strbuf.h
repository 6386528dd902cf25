/* strbuf.h — a growable, always NUL-terminated byte string for rendering text and JSON.
 *
 * Errors are sticky: when an append fails (out of memory, or the optional size cap is hit)
 * the buffer keeps what it had, ignores every later append, and `ckpt_strbuf_status` reports
 * the failure.  Renderers can therefore append freely and check once at the end.
 *
 * Ownership: the buffer owns `buf` until `ckpt_strbuf_detach` hands it to the caller (who
 * frees it with free()) or `ckpt_strbuf_release` frees it.  A zero-initialised struct
 * (CKPT_STRBUF_INIT) is a valid empty buffer; `buf` is NULL until the first append, so read
 * the text through `ckpt_strbuf_cstr`. */
#ifndef CKPT_UTIL_STRBUF_H
#define CKPT_UTIL_STRBUF_H

#include "ckpt.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct ckpt_strbuf {
    char *buf;          /* len bytes + NUL, or NULL while nothing was ever appended */
    size_t len;         /* bytes of text, excluding the NUL */
    size_t alloc;       /* bytes allocated for buf */
    size_t max;         /* most bytes of text accepted; 0 = unlimited */
    ckpt_status status; /* CKPT_OK, or the first failure (CKPT_E_NOMEM / CKPT_E_LIMIT) */
} ckpt_strbuf;

#define CKPT_STRBUF_INIT                                                                           \
    { 0 }

/* max: cap on the text length (0 = unlimited); exceeding it fails with CKPT_E_LIMIT. */
void ckpt_strbuf_init(ckpt_strbuf *sb, size_t max);
/* Frees the text and returns to the initial state (the cap is kept). */
void ckpt_strbuf_release(ckpt_strbuf *sb);
/* Empties the text, keeps the allocation, clears a previous failure. */
void ckpt_strbuf_reset(ckpt_strbuf *sb);
/* Makes room for `extra` more bytes.  false (and a sticky failure) if that is impossible. */
bool ckpt_strbuf_grow(ckpt_strbuf *sb, size_t extra);

/* Appenders return false once the buffer has failed. */
bool ckpt_strbuf_add(ckpt_strbuf *sb, const void *data, size_t len);
bool ckpt_strbuf_adds(ckpt_strbuf *sb, const char *s);
bool ckpt_strbuf_addc(ckpt_strbuf *sb, char c);
/* The low `n` (<= 8) bytes of v, little-endian. */
bool ckpt_strbuf_add_le(ckpt_strbuf *sb, uint64_t v, int n);
bool ckpt_strbuf_addf(ckpt_strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool ckpt_strbuf_vaddf(ckpt_strbuf *sb, const char *fmt, va_list ap);

/* The text (never NULL; "" when empty). */
const char *ckpt_strbuf_cstr(const ckpt_strbuf *sb);
/* Hands the malloc'ed, NUL-terminated text to the caller (len may be NULL) and resets the
 * buffer.  NULL if the buffer failed (it is released) or memory runs out. */
char *ckpt_strbuf_detach(ckpt_strbuf *sb, size_t *len);
/* CKPT_OK, or the sticky failure with `err` filled ("what: out of memory"...). */
ckpt_status ckpt_strbuf_status(const ckpt_strbuf *sb, const char *what, ckpt_error *err);

#endif
