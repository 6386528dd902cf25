/* error.h — filling a caller's ckpt_error: formatted messages, context prefixes, and the
 * propagate-on-failure check macro used across the library. */
#ifndef CK_UTIL_ERROR_H
#define CK_UTIL_ERROR_H

#include "ckpt.h"

#include <stdarg.h>

/* Sets err->code and err->message (printf-style); returns `code` so callers can write
 * `return ck_fail(err, CKPT_E_FORMAT, "...")`.  err may be NULL. */
ckpt_status ck_fail(ckpt_error *err, ckpt_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
ckpt_status ck_vfail(ckpt_error *err, ckpt_status code, const char *fmt, va_list ap);
/* Prepends context ("FILE: ") to an already-filled message; nothing when err is NULL.  They
 * return nothing: the status is the caller's to return (err may be NULL, and then only the
 * caller knows it). */
void ck_error_prefix(ckpt_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends context (" (key 'K')"). */
void ck_error_suffix(ckpt_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ck_error_clear(ckpt_error *err);

/* At a public entry point: callers may pass err = NULL, while internal helpers report a
 * status through err (one that returns NULL or -1, say); this points err at a local one, so
 * the caller still gets the right status. */
#define CK_ERR_OR_LOCAL(err)                                                                       \
    ckpt_error err##_local;                                                                        \
    err##_local.code = CKPT_OK;                                                                    \
    err##_local.message[0] = '\0';                                                                 \
    if (!(err)) (err) = &err##_local

/* Evaluates a ckpt_status expression and returns it from the caller on failure. */
#define CK_TRY(expr)                                                                               \
    do {                                                                                           \
        ckpt_status ckpt_try_status_ = (expr);                                                     \
        if (ckpt_try_status_ != CKPT_OK) return ckpt_try_status_;                                  \
    } while (0)

/* Same, but jumps to `label` after storing the status in `var`. */
#define CK_TRY_GOTO(var, expr, label)                                                              \
    do {                                                                                           \
        (var) = (expr);                                                                            \
        if ((var) != CKPT_OK) goto label;                                                          \
    } while (0)

#endif
