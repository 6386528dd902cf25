/* source.h — a bounded byte range to read from: a window [base, base+len) of an open file
 * descriptor, or a memory buffer.  Decoders read through it and never see absolute offsets. */
#ifndef CK_UTIL_SOURCE_H
#define CK_UTIL_SOURCE_H

#include "ckpt.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

/* What the preads of one kind of file returned (a reader's data files, its metadata files):
 * bytes, and calls that returned bytes.  Any thread adds (relaxed atomics: totals only). */
typedef struct ck_io_count {
    _Atomic uint64_t bytes;
    _Atomic uint64_t calls;
    /* while set (a reader's metadata counter, during a collective open): the preads counted
     * here go through this tap instead (util/iotap.h); replayed reads are not counted */
    struct ck_io_tap *tap;
} ck_io_count;

/* Adds one pread's result (n > 0) to c; c may be NULL. */
static inline void ck_io_count_add(ck_io_count *c, uint64_t n) {
    if (!c) return;
    atomic_fetch_add_explicit(&c->bytes, n, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->calls, 1, memory_order_relaxed);
}

typedef struct ck_source {
    int fd;             /* -1 for memory sources */
    uint64_t base;      /* file offset of byte 0 of the window */
    uint64_t len;       /* window length */
    const uint8_t *mem; /* memory source, or NULL */
    const char *name;   /* for error messages: the file path or a description */
    ck_io_count *count; /* file sources: where each pread's returned bytes are added, or
                             NULL (not counted); copies of a source (windows of it) keep it */
} ck_source;

/* Reads exactly `len` bytes at `off` (relative to the window), adding what each pread
 * returned to src->count.  Fails with CKPT_E_RANGE if
 * the range leaves the window and CKPT_E_IO on a short read (message names file + offset). */
ckpt_status ck_source_read(const ck_source *src, uint64_t off, void *buf, uint64_t len,
                           ckpt_error *err);

/* errno of ck_open_regular for a path that names no regular file (a FIFO, a device, a
 * socket, a directory); ck_open_strerror words it. */
#define CK_ENOTREG EMEDIUMTYPE

/* Opens a source file (a shard, metadata, an index, a manifest) read-only without ever
 * blocking: O_NONBLOCK|O_NOCTTY|O_CLOEXEC, then fstat; anything but a regular file is closed
 * and refused (-1, errno CK_ENOTREG), so a FIFO or a device in place of a checkpoint file
 * cannot hang the reader.  O_NONBLOCK is cleared again on the regular file.  Returns the
 * descriptor, or -1 with errno set; *st (if not NULL) receives the file's attributes. */
int ck_open_regular(const char *path, struct stat *st);
/* The same for `rel`, '/'-separated names below directory `dir`, opened one component at a
 * time with O_NOFOLLOW: a symbolic link anywhere on the way (the file itself included) fails
 * with ELOOP (or ENOTDIR), so the file is inside dir whatever links the tree holds. */
int ck_open_regular_below(const char *dir, const char *rel, struct stat *st);
/* fopen(path, "r") through ck_open_regular; with `nofollow`, a symlink is refused too
 * (ELOOP): for small files whose content steers a privileged reader (the `latest` trackers of
 * a directory of checkpoints), which must not be borrowed from a file elsewhere. */
FILE *ck_fopen_regular(const char *path, bool nofollow);
/* strerror(e), or "not a regular file" for CK_ENOTREG. */
const char *ck_open_strerror(int e);

#endif
