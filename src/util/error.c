/* error.c — status strings and ckpt_error formatting. */
#include "util/error.h"

#include <stdio.h>
#include <string.h>

const char *ckpt_version(void) { return CKPT_VERSION_STRING; }

const char *ckpt_strerror(ckpt_status code) {
    switch (code) {
    case CKPT_OK: return "success";
    case CKPT_E_IO: return "input/output error";
    case CKPT_E_NOMEM: return "out of memory";
    case CKPT_E_FORMAT: return "malformed checkpoint data";
    case CKPT_E_UNSUPPORTED: return "unsupported feature";
    case CKPT_E_LIMIT: return "safety limit exceeded";
    case CKPT_E_NOTFOUND: return "not found";
    case CKPT_E_RANGE: return "out of range";
    case CKPT_E_INVAL: return "invalid argument";
    case CKPT_E_CHECKSUM: return "checksum mismatch";
    case CKPT_E_ACCESS: return "permission denied";
    case CKPT_E_TRANSPORT: return "communication between ranks failed";
    }
    return "unknown error";
}

ckpt_status ck_vfail(ckpt_error *err, ckpt_status code, const char *fmt, va_list ap) {
    if (err) {
        err->code = code;
        vsnprintf(err->message, sizeof err->message, fmt, ap);
    }
    return code;
}

ckpt_status ck_fail(ckpt_error *err, ckpt_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ck_vfail(err, code, fmt, ap);
    va_end(ap);
    return code;
}

void ck_error_prefix(ckpt_error *err, const char *fmt, ...) {
    if (!err) return;
    char head[CKPT_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    if (n > 0) {
        char joined[CKPT_ERROR_MSG_MAX];
        size_t hl = strnlen(head, sizeof head - 1);
        size_t ml = strnlen(err->message, sizeof err->message);
        if (hl + ml >= sizeof joined) ml = sizeof joined - 1 - hl;
        memcpy(joined, head, hl);
        memcpy(joined + hl, err->message, ml);
        joined[hl + ml] = '\0';
        memcpy(err->message, joined, sizeof joined);
    }
}

void ck_error_suffix(ckpt_error *err, const char *fmt, ...) {
    if (!err) return;
    size_t used = strnlen(err->message, sizeof err->message);
    if (used + 1 < sizeof err->message) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message + used, sizeof err->message - used, fmt, ap);
        va_end(ap);
    }
}

void ck_error_clear(ckpt_error *err) {
    if (err) {
        err->code = CKPT_OK;
        err->message[0] = '\0';
    }
}
