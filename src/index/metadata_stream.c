/* metadata_stream.c — a metadata file as a pickle input read piece by piece (see
 * metadata_stream.h): pread into the decoder's window, errors kept for the caller. */
#include "index/metadata_stream.h"

#include "util/error.h"
#include "util/iotap.h"
#include "util/source.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct ck_metadata_stream {
    char *path;
    int fd;
    pk_input in;
    int read_errno; /* 0, or errno of the failed read (-1: the file ended early) */
    ck_io_count *count;
    uint64_t fail_offset;
};

static size_t stream_read(void *ctx, uint8_t *dst, uint64_t off, size_t n) {
    ck_metadata_stream *s = ctx;
    if (s->read_errno) return 0;
    ck_io_tap *tap = s->count ? s->count->tap : NULL;
    for (;;) {
        ssize_t got = tap ? ck_io_tap_pread(tap, s->path, s->fd, dst, n, off)
                          : pread(s->fd, dst, n, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            s->read_errno = got < 0 ? errno : -1;
            s->fail_offset = off;
            return 0;
        }
        if (!tap || !ck_io_tap_replays(tap)) ck_io_count_add(s->count, (uint64_t)got);
        return (size_t)got;
    }
}

ckpt_status ck_metadata_stream_open(const char *path, uint64_t max, ck_io_count *count,
                                    ck_metadata_stream **out, ckpt_error *err) {
    *out = NULL;
    ck_metadata_stream *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        return ck_fail(err, CKPT_E_NOMEM, "out of memory opening %s", path);
    }
    s->fd = ck_open_regular(path, NULL); /* never blocks on a FIFO or device */
    if (s->fd < 0) {
        int e = errno;
        ck_metadata_stream_free(s);
        return ck_fail(err, e == ENOENT ? CKPT_E_NOTFOUND : CKPT_E_IO, "%s: cannot open: %s", path,
                       ck_open_strerror(e));
    }
    struct stat st;
    if (fstat(s->fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        ck_metadata_stream_free(s);
        return ck_fail(err, CKPT_E_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > max) {
        ck_metadata_stream_free(s);
        return ck_fail(err, CKPT_E_LIMIT, "%s: %lld bytes exceed the metadata size limit of %llu",
                       path, (long long)st.st_size, (unsigned long long)max);
    }
    s->count = count;
    s->in = (pk_input){.len = (size_t)st.st_size, .read = stream_read, .ctx = s};
    *out = s;
    return CKPT_OK;
}

const pk_input *ck_metadata_stream_input(const ck_metadata_stream *s) { return &s->in; }

ckpt_status ck_metadata_stream_finish(ck_metadata_stream *s, ckpt_error *err) {
    if (s->read_errno == CK_ETAPMISS)
        return ck_fail(
            err, CKPT_E_INVAL,
            "%s: ranks see different checkpoint metadata (not the size or the bytes the rank "
            "that read the metadata saw: a read at offset %llu)",
            s->path, (unsigned long long)s->fail_offset);
    if (s->read_errno > 0)
        return ck_fail(err, CKPT_E_IO, "%s: read error at offset %llu: %s", s->path,
                       (unsigned long long)s->fail_offset, strerror(s->read_errno));
    if (s->read_errno < 0)
        return ck_fail(err, CKPT_E_IO, "%s: file ended at offset %llu of %zu while being read",
                       s->path, (unsigned long long)s->fail_offset, s->in.len);
    return CKPT_OK;
}

void ck_metadata_stream_free(ck_metadata_stream *s) {
    if (!s) return;
    if (s->fd >= 0) close(s->fd);
    free(s->path);
    free(s);
}
