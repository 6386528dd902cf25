/* error.h — filling a caller's ckpt_error: formatted messages, context prefixes, and the
 * propagate-on-failure check macro used across the library. */
#ifndef CKPT_UTIL_ERROR_H
#define CKPT_UTIL_ERROR_H

#include "ckpt.h"

#include <stdarg.h>

/* Sets err->code and err->message (printf-style); returns `code` so callers can write
 * `return ckpt_fail(err, CKPT_E_FORMAT, "...")`.  err may be NULL. */
ckpt_status ckpt_fail(ckpt_error *err, ckpt_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
ckpt_status ckpt_vfail(ckpt_error *err, ckpt_status code, const char *fmt, va_list ap);
/* Prepends context ("FILE: ") to an already-filled message.  Returns err->code (or
 * CKPT_E_INVAL if err is NULL). */
ckpt_status ckpt_error_prefix(ckpt_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Appends context (" (key 'K')"). */
ckpt_status ckpt_error_suffix(ckpt_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void ckpt_error_clear(ckpt_error *err);

/* Evaluates a ckpt_status expression and returns it from the caller on failure. */
#define CKPT_TRY(expr)                                                                             \
    do {                                                                                           \
        ckpt_status ckpt_try_status_ = (expr);                                                     \
        if (ckpt_try_status_ != CKPT_OK) return ckpt_try_status_;                                  \
    } while (0)

/* Same, but jumps to `label` after storing the status in `var`. */
#define CKPT_TRY_GOTO(var, expr, label)                                                            \
    do {                                                                                           \
        (var) = (expr);                                                                            \
        if ((var) != CKPT_OK) goto label;                                                          \
    } while (0)

#endif
