/* source.c — bounded reads from a file window or a memory buffer. */
#include "util/source.h"

#include "util/error.h"
#include "util/iotap.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

ckpt_status ck_source_read(const ck_source *src, uint64_t off, void *buf, uint64_t len,
                           ckpt_error *err) {
    const char *name = src->name ? src->name : "(source)";
    if (off > src->len || len > src->len - off)
        return ck_fail(
            err, CKPT_E_RANGE,
            "%s: read of %llu bytes at offset %llu passes the end of its %llu-byte range", name,
            (unsigned long long)len, (unsigned long long)(src->base + off),
            (unsigned long long)src->len);
    if (src->mem) {
        memcpy(buf, src->mem + off, (size_t)len);
        return CKPT_OK;
    }
    uint8_t *p = buf;
    uint64_t done = 0;
    ck_io_tap *tap = src->count ? src->count->tap : NULL;
    while (done < len) {
        uint64_t at = src->base + off + done;
        ssize_t n =
            tap ? ck_io_tap_pread(tap, src->name, src->fd, p + done, (size_t)(len - done), at)
                : pread(src->fd, p + done, (size_t)(len - done), (off_t)at);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == CK_ETAPMISS)
                return ck_fail(err, CKPT_E_INVAL,
                               "%s: ranks see different checkpoint metadata (not the size or "
                               "the bytes the rank that read the metadata saw: a read at "
                               "offset %llu)",
                               name, (unsigned long long)at);
            if (errno == EINVAL && src->base + off + done > (uint64_t)INT64_MAX)
                return ck_fail(err, CKPT_E_RANGE, "%s: offset %llu is beyond any file", name,
                               (unsigned long long)(src->base + off + done));
            return ck_fail(err, CKPT_E_IO, "%s: read at offset %llu failed: %s", name,
                           (unsigned long long)(src->base + off + done), strerror(errno));
        }
        if (n == 0) /* the range passes the end of the file (truncated, or a bad range) */
            return ck_fail(err, CKPT_E_RANGE, "%s: unexpected end of file at offset %llu", name,
                           (unsigned long long)(src->base + off + done));
        if (!tap || !ck_io_tap_replays(tap)) ck_io_count_add(src->count, (uint64_t)n);
        done += (uint64_t)n;
    }
    return CKPT_OK;
}

static int regular_fd(int fd, struct stat *st);

/* What a path names before it is opened: anything but a regular file is refused unopened
 * (CK_ENOTREG, *st filled), so a device or FIFO in a checkpoint directory is never opened
 * (opening some devices acts: a tape rewinds on close).  The opened file is checked again
 * (regular_fd): it may have been swapped since. */
static bool not_regular(int r, const struct stat *pre, struct stat *st) {
    if (r != 0 || S_ISREG(pre->st_mode)) return false;
    if (st) *st = *pre;
    errno = S_ISLNK(pre->st_mode) ? ELOOP : CK_ENOTREG; /* a link: as O_NOFOLLOW says */
    return true;
}

static int open_regular(const char *path, int flags, struct stat *st) {
    struct stat pre;
    int r = flags & O_NOFOLLOW ? lstat(path, &pre) : stat(path, &pre);
    if (not_regular(r, &pre, st)) return -1;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | flags);
    return fd < 0 ? -1 : regular_fd(fd, st);
}

int ck_open_regular_below(const char *dir, const char *rel, struct stat *st) {
    int d = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d < 0) return -1;
    const char *p = rel;
    for (const char *q; (q = strchr(p, '/')); p = q + 1) {
        char part[256];
        size_t n = (size_t)(q - p);
        if (n == 0 || n >= sizeof part) {
            close(d);
            errno = EINVAL;
            return -1;
        }
        memcpy(part, p, n);
        part[n] = 0;
        int nd = openat(d, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        struct stat ls; /* a symbolic link to a directory: ENOTDIR there, ELOOP here */
        if (nd < 0 && e == ENOTDIR && fstatat(d, part, &ls, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISLNK(ls.st_mode))
            e = ELOOP;
        close(d);
        if (nd < 0) {
            errno = e;
            return -1;
        }
        d = nd;
    }
    struct stat pre;
    if (not_regular(fstatat(d, p, &pre, AT_SYMLINK_NOFOLLOW), &pre, st)) {
        int e = errno;
        close(d);
        errno = e;
        return -1;
    }
    int fd = openat(d, p, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | O_NOFOLLOW);
    int e = errno;
    close(d);
    if (fd < 0) {
        errno = e;
        return -1;
    }
    return regular_fd(fd, st);
}

/* fd, checked to be a regular file (else closed, -1 with errno CK_ENOTREG), O_NONBLOCK
 * cleared. */
static int regular_fd(int fd, struct stat *st) {
    struct stat own;
    if (!st) st = &own;
    int e = 0;
    if (fstat(fd, st) != 0)
        e = errno;
    else if (!S_ISREG(st->st_mode))
        e = CK_ENOTREG;
    if (e) {
        close(fd);
        errno = e;
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

int ck_open_regular(const char *path, struct stat *st) { return open_regular(path, 0, st); }

FILE *ck_fopen_regular(const char *path, bool nofollow) {
    int fd = open_regular(path, nofollow ? O_NOFOLLOW : 0, NULL);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "r");
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

const char *ck_open_strerror(int e) {
    return e == CK_ENOTREG ? "not a regular file (a FIFO, device, socket or directory)"
                           : strerror(e);
}
