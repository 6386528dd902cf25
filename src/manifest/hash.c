/* hash.c — XXH3-64 of byte ranges of files: one range with a streaming state and a reused
 * buffer, and many ranges across threads (largest first, taken from a shared counter), with
 * progress reported in bytes. */
#include "manifest/manifest_i.h"
#include "util/error.h"
#include "util/source.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#define HASH_BLOCK (4u << 20)

static ckpt_status hash_fd(int fd, const char *name, uint64_t offset, uint64_t length, uint8_t *buf,
                           uint64_t *hash, atomic_uint_fast64_t *done, ckpt_error *err) {
    XXH3_state_t *st = XXH3_createState();
    if (!st) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    XXH3_64bits_reset(st);
    uint64_t at = offset, end = offset + length;
    ckpt_status s = CKPT_OK;
    while (at < end) {
        size_t want = end - at < HASH_BLOCK ? (size_t)(end - at) : HASH_BLOCK;
        ssize_t got = pread(fd, buf, want, (off_t)at);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            s = ck_fail(err, CKPT_E_IO, "%s: offset %llu: %s", name, (unsigned long long)at,
                        strerror(errno));
            break;
        }
        if (got == 0) {
            s = ck_fail(err, CKPT_E_RANGE,
                        "%s: offset %llu: file ends before the item's last byte (offset %llu)",
                        name, (unsigned long long)at, (unsigned long long)end);
            break;
        }
        XXH3_64bits_update(st, buf, (size_t)got);
        at += (uint64_t)got;
        if (done) atomic_fetch_add(done, (uint64_t)got);
    }
    if (s == CKPT_OK) *hash = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return s;
}

ckpt_status ckpt_hash_range(int fd, const char *name, uint64_t offset, uint64_t length,
                            uint64_t *hash, ckpt_error *err) {
    uint8_t *buf = malloc(HASH_BLOCK);
    if (!buf) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    ckpt_status s = hash_fd(fd, name ? name : "file", offset, length, buf, hash, NULL, err);
    free(buf);
    return s;
}

typedef struct pool {
    const char *dir;
    hash_job *jobs;
    size_t *order; /* job indices, largest first */
    size_t n;
    atomic_size_t next;
    atomic_uint_fast64_t done;
    uint64_t total;
    ckpt_progress_fn progress;
    void *ctx;
    pthread_mutex_t lock; /* serialises progress calls */
} pool;

static void *worker(void *arg) {
    pool *p = arg;
    uint8_t *buf = malloc(HASH_BLOCK);
    int fd = -1;
    const char *open_name = NULL;
    for (;;) {
        size_t k = atomic_fetch_add(&p->next, 1);
        if (k >= p->n) break;
        hash_job *j = &p->jobs[p->order[k]];
        if (!buf) {
            j->status = ck_fail(&j->err, CKPT_E_NOMEM, "out of memory");
            continue;
        }
        if (!open_name || strcmp(open_name, j->rec->file) != 0) {
            if (fd >= 0) close(fd);
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", p->dir, j->rec->file);
            fd = ck_open_regular(path, NULL);
            open_name = j->rec->file;
            if (fd >= 0) posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        }
        if (fd < 0) {
            j->status =
                ck_fail(&j->err, CKPT_E_IO, "%s: %s", j->rec->file, ck_open_strerror(errno));
            open_name = NULL;
            continue;
        }
        j->status = hash_fd(fd, j->rec->file, j->rec->offset, j->rec->length, buf, &j->actual,
                            &p->done, &j->err);
        if (p->progress) {
            pthread_mutex_lock(&p->lock);
            p->progress(p->ctx, atomic_load(&p->done), p->total);
            pthread_mutex_unlock(&p->lock);
        }
    }
    if (fd >= 0) close(fd);
    free(buf);
    return NULL;
}

static int by_length_desc(const void *a, const void *b, void *ctx) {
    const hash_job *jobs = ctx;
    uint64_t x = jobs[*(const size_t *)a].rec->length, y = jobs[*(const size_t *)b].rec->length;
    return x > y ? -1 : x < y;
}

void hash_jobs_run(const char *dir, hash_job *jobs, size_t n, unsigned threads,
                   ckpt_progress_fn progress, void *ctx) {
    if (threads == 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        threads = c > 0 ? (unsigned)c : 1;
    }
    if (threads > 256) threads = 256;
    pool p = {.dir = dir, .jobs = jobs, .n = n, .progress = progress, .ctx = ctx};
    pthread_mutex_init(&p.lock, NULL);
    p.order = malloc((n ? n : 1) * sizeof *p.order);
    for (size_t i = 0; i < n; i++) {
        jobs[i].status = CKPT_OK;
        p.total += jobs[i].rec->length;
        if (p.order) p.order[i] = i;
    }
    if (!p.order) {
        for (size_t i = 0; i < n; i++)
            jobs[i].status = ck_fail(&jobs[i].err, CKPT_E_NOMEM, "out of memory");
        pthread_mutex_destroy(&p.lock);
        return;
    }
    qsort_r(p.order, n, sizeof *p.order, by_length_desc, jobs);
    if (threads > n) threads = n ? (unsigned)n : 1;
    pthread_t tid[256];
    unsigned started = 0;
    for (unsigned i = 1; i < threads; i++)
        if (pthread_create(&tid[started], NULL, worker, &p) == 0) started++;
    worker(&p);
    for (unsigned i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    free(p.order);
    pthread_mutex_destroy(&p.lock);
}
