/* metadata_stream.c — a metadata file read on a helper thread while it is decoded (see
 * metadata_stream.h).  The reader publishes how many bytes are in the buffer with a release
 * store; the decoder's wait() loads it with acquire and sleeps on a condition variable only
 * when it has caught up with the reader. */
#include "index/metadata_stream.h"

#include "util/error.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Files from this size on are read on a helper thread, in pieces of this size. */
#define STREAM_MIN ((size_t)4 << 20)
#define STREAM_PIECE ((size_t)4 << 20)

struct ckpt_metadata_stream {
    char *path;
    int fd;
    uint8_t *buf;
    size_t len;
    pk_input in;
    bool threaded;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t more;
    _Atomic size_t avail; /* bytes of buf read so far */
    atomic_bool done;     /* the reader ended (all read, failed, or stopped) */
    atomic_bool stop;     /* asks the reader to end early */
    bool waiting;         /* the decoder sleeps on `more` (under lock) */
    int read_errno;       /* 0, or errno of the failed read (-1: the file shrank) */
    size_t fail_offset;
};

/* Reads [from, to) of the file into buf; returns the offset reached and sets s->read_errno
 * when it stops short. */
static size_t read_range(ckpt_metadata_stream *s, size_t from, size_t to) {
    while (from < to) {
        ssize_t n = pread(s->fd, s->buf + from, to - from, (off_t)from);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            s->read_errno = n < 0 ? errno : -1;
            s->fail_offset = from;
            break;
        }
        from += (size_t)n;
    }
    return from;
}

static void publish(ckpt_metadata_stream *s, size_t avail, bool done) {
    pthread_mutex_lock(&s->lock);
    atomic_store_explicit(&s->avail, avail, memory_order_release);
    if (done) atomic_store_explicit(&s->done, true, memory_order_release);
    if (s->waiting) pthread_cond_broadcast(&s->more);
    pthread_mutex_unlock(&s->lock);
}

static void *reader_main(void *arg) {
    ckpt_metadata_stream *s = arg;
    size_t at = 0;
    while (at < s->len && !atomic_load_explicit(&s->stop, memory_order_relaxed)) {
        size_t to = s->len - at > STREAM_PIECE ? at + STREAM_PIECE : s->len;
        size_t got = read_range(s, at, to);
        if (got < to) {
            publish(s, got, true);
            return NULL;
        }
        at = to;
        if (at < s->len) publish(s, at, false);
    }
    publish(s, at, true);
    return NULL;
}

static size_t stream_wait(void *ctx, size_t want) {
    ckpt_metadata_stream *s = ctx;
    size_t avail = atomic_load_explicit(&s->avail, memory_order_acquire);
    if (avail >= want) return avail;
    pthread_mutex_lock(&s->lock);
    while ((avail = atomic_load_explicit(&s->avail, memory_order_acquire)) < want &&
           !atomic_load_explicit(&s->done, memory_order_acquire)) {
        s->waiting = true;
        pthread_cond_wait(&s->more, &s->lock);
    }
    s->waiting = false;
    pthread_mutex_unlock(&s->lock);
    return avail;
}

ckpt_status ckpt_metadata_stream_open(const char *path, uint64_t max, ckpt_metadata_stream **out,
                                      ckpt_error *err) {
    *out = NULL;
    ckpt_metadata_stream *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        return ckpt_fail(err, CKPT_E_NOMEM, "out of memory opening %s", path);
    }
    s->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0) {
        int e = errno;
        ckpt_metadata_stream_free(s);
        return ckpt_fail(err, e == ENOENT ? CKPT_E_NOTFOUND : CKPT_E_IO, "%s: cannot open: %s",
                         path, strerror(e));
    }
    struct stat st;
    if (fstat(s->fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        ckpt_metadata_stream_free(s);
        return ckpt_fail(err, CKPT_E_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > max) {
        ckpt_metadata_stream_free(s);
        return ckpt_fail(err, CKPT_E_LIMIT, "%s: %lld bytes exceed the metadata size limit of %llu",
                         path, (long long)st.st_size, (unsigned long long)max);
    }
    s->len = (size_t)st.st_size;
    s->buf = malloc(s->len ? s->len : 1);
    if (!s->buf) {
        size_t n = s->len;
        ckpt_metadata_stream_free(s);
        return ckpt_fail(err, CKPT_E_NOMEM, "%s: out of memory reading %zu bytes", path, n);
    }
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->more, NULL);
    s->in = (pk_input){.buf = s->buf, .len = s->len};
    if (s->len >= STREAM_MIN) {
        s->in.wait = stream_wait;
        s->in.ctx = s;
        s->threaded = pthread_create(&s->thread, NULL, reader_main, s) == 0;
    }
    if (!s->threaded) { /* small, or no thread to be had: read it all now */
        size_t got = read_range(s, 0, s->len);
        atomic_store(&s->avail, got);
        atomic_store(&s->done, true);
    }
    *out = s;
    return CKPT_OK;
}

const pk_input *ckpt_metadata_stream_input(const ckpt_metadata_stream *s) { return &s->in; }

static void join(ckpt_metadata_stream *s) {
    if (s->threaded) pthread_join(s->thread, NULL);
    s->threaded = false;
}

ckpt_status ckpt_metadata_stream_finish(ckpt_metadata_stream *s, ckpt_error *err) {
    join(s);
    if (s->read_errno > 0)
        return ckpt_fail(err, CKPT_E_IO, "%s: read error at offset %zu: %s", s->path,
                         s->fail_offset, strerror(s->read_errno));
    if (s->read_errno < 0)
        return ckpt_fail(err, CKPT_E_IO, "%s: file ended at offset %zu of %zu while being read",
                         s->path, s->fail_offset, s->len);
    return CKPT_OK;
}

void ckpt_metadata_stream_free(ckpt_metadata_stream *s) {
    if (!s) return;
    if (s->threaded) {
        atomic_store(&s->stop, true);
        join(s);
    }
    if (s->buf) {
        pthread_cond_destroy(&s->more);
        pthread_mutex_destroy(&s->lock);
    }
    if (s->fd >= 0) close(s->fd);
    free(s->buf);
    free(s->path);
    free(s);
}
