/* sink.c — buffered sequential writes with position tracking (sink.h). */
#include "save/sink.h"

#include "util/error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SINK_BUF (1u << 20)

ckpt_status save_sink_init(save_sink *s, int fd, const char *path, ckpt_error *err) {
    memset(s, 0, sizeof *s);
    s->fd = fd;
    s->path = path;
    s->buf = malloc(SINK_BUF);
    if (!s->buf) return ck_fail(err, CKPT_E_NOMEM, "%s: out of memory", path);
    s->cap = SINK_BUF;
    return CKPT_OK;
}

static ckpt_status write_all(save_sink *s, const void *data, size_t len, uint64_t at,
                             ckpt_error *err) {
    const unsigned char *p = data;
    while (len) {
        size_t n = len > (1u << 30) ? (1u << 30) : len;
        ssize_t w = write(s->fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            return ck_fail(err, CKPT_E_IO, "%s: write at offset %llu: %s", s->path,
                           (unsigned long long)at, w < 0 ? strerror(errno) : "no progress");
        p += w;
        len -= (size_t)w;
        at += (uint64_t)w;
    }
    return CKPT_OK;
}

ckpt_status save_sink_flush(save_sink *s, ckpt_error *err) {
    if (!s->len) return CKPT_OK;
    ckpt_status st = write_all(s, s->buf, s->len, s->pos - s->len, err);
    s->len = 0;
    return st;
}

ckpt_status save_sink_write(save_sink *s, const void *data, size_t len, ckpt_error *err) {
    if (len == 0) return CKPT_OK;
    if (len <= s->cap - s->len) {
        memcpy(s->buf + s->len, data, len);
        s->len += len;
        s->pos += len;
        return CKPT_OK;
    }
    CK_TRY(save_sink_flush(s, err));
    if (len < s->cap / 2) {
        memcpy(s->buf, data, len);
        s->len = len;
        s->pos += len;
        return CKPT_OK;
    }
    CK_TRY(write_all(s, data, len, s->pos, err));
    s->pos += len;
    return CKPT_OK;
}

void save_sink_release(save_sink *s) {
    free(s->buf);
    s->buf = NULL;
    s->len = s->cap = 0;
}
