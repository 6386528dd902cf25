/* source.h — a bounded byte range to read from: a window [base, base+len) of an open file
 * descriptor, or a memory buffer.  Decoders read through it and never see absolute offsets. */
#ifndef CKPT_UTIL_SOURCE_H
#define CKPT_UTIL_SOURCE_H

#include "ckpt.h"

#include <stdint.h>

typedef struct ckpt_source {
    int fd;             /* -1 for memory sources */
    uint64_t base;      /* file offset of byte 0 of the window */
    uint64_t len;       /* window length */
    const uint8_t *mem; /* memory source, or NULL */
    const char *name;   /* for error messages: the file path or a description */
} ckpt_source;

/* Reads exactly `len` bytes at `off` (relative to the window).  Fails with CKPT_E_RANGE if
 * the range leaves the window and CKPT_E_IO on a short read (message names file + offset). */
ckpt_status ckpt_source_read(const ckpt_source *src, uint64_t off, void *buf, uint64_t len,
                             ckpt_error *err);

#endif
