/* io.c — a rank's parallel large preads: a small pool of threads (the caller is one of them)
 * that reads a batch of byte ranges of the shard files into memory.  Ranges longer than two
 * pieces are split into pieces of `piece` bytes (4 MiB by default, less when the batch is
 * small: an even share of it per thread, down to 256 KiB) so one large range keeps every
 * thread busy; short ranges are read whole.  The first failing range in batch order
 * gives the batch's error (file name and offset), whatever order the threads ran in.  The
 * threads never call MPI. */
#include "load/load_i.h"
#include "util/error.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One pread task: part of a job. */
typedef struct io_task {
    size_t job;
    int fd;
    uint64_t off, len;
    uint8_t *dst;
} io_task;

struct io_pool {
    pthread_t *threads;
    unsigned nthreads; /* workers besides the caller */
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    uint64_t generation; /* bumped per batch */
    unsigned busy;       /* workers still on the current batch */
    bool stop;
    /* the current batch */
    ckpt_reader *r;
    const io_job *jobs;
    io_task *tasks;
    size_t ntasks, next;
    size_t err_job; /* lowest failing job, SIZE_MAX if none */
    ckpt_error err;
};

static void run_task(io_pool *p, const io_task *t) {
    uint64_t done = 0;
    while (done < t->len) {
        ssize_t k = pread(t->fd, t->dst + done, t->len - done, (off_t)(t->off + done));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = errno;
            pthread_mutex_lock(&p->mu);
            if (t->job < p->err_job) {
                p->err_job = t->job;
                ck_fail(&p->err, k < 0 ? CKPT_E_IO : CKPT_E_RANGE, "%s: offset %llu: %s",
                        ckpt_reader_file_name(p->r, (uint32_t)p->jobs[t->job].file),
                        (unsigned long long)(t->off + done),
                        k < 0 ? strerror(e) : "unexpected end of file");
            }
            pthread_mutex_unlock(&p->mu);
            return;
        }
        ckpt_reader_add_read(p->r, (uint64_t)k); /* what the call returned, for the stats */
        done += (uint64_t)k;
    }
}

/* Takes tasks until none is left (called with the lock held; returns with it held). */
static void drain(io_pool *p) {
    while (p->next < p->ntasks) {
        io_task t = p->tasks[p->next++];
        pthread_mutex_unlock(&p->mu);
        run_task(p, &t);
        pthread_mutex_lock(&p->mu);
    }
}

static void *worker(void *arg) {
    io_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    uint64_t seen = 0; /* workers start before the first batch */
    for (;;) {
        while (!p->stop && p->generation == seen)
            pthread_cond_wait(&p->work, &p->mu);
        if (p->stop) break;
        seen = p->generation;
        drain(p);
        if (--p->busy == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

ckpt_status io_pool_create(unsigned nthreads, io_pool **out, ckpt_error *err) {
    *out = NULL;
    io_pool *p = calloc(1, sizeof *p);
    if (!p) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    if (nthreads > 1) {
        p->threads = calloc(nthreads - 1, sizeof *p->threads);
        if (!p->threads) {
            free(p);
            return ck_fail(err, CKPT_E_NOMEM, "out of memory");
        }
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    for (unsigned i = 0; i + 1 < nthreads; i++) {
        int rc = pthread_create(&p->threads[i], NULL, worker, p);
        if (rc != 0) {
            io_pool_free(p);
            return ck_fail(err, CKPT_E_IO, "cannot start an I/O thread: %s", strerror(rc));
        }
        p->nthreads++;
    }
    *out = p;
    return CKPT_OK;
}

void io_pool_free(io_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    free(p->threads);
    free(p);
}

unsigned io_pool_threads(const io_pool *p) { return p->nthreads + 1; }

ckpt_status io_pool_read(io_pool *p, ckpt_reader *r, const io_job *jobs, size_t njobs,
                         uint64_t piece, ckpt_error *err) {
    if (!njobs) return CKPT_OK;
    /* pieces small enough that the batch keeps every thread busy (down to 256 KiB) */
    uint64_t total = 0;
    for (size_t i = 0; i < njobs; i++)
        total += jobs[i].len;
    uint64_t even = total / (p->nthreads + 1);
    if (even < ((uint64_t)256 << 10)) even = (uint64_t)256 << 10;
    if (piece > even) piece = even;
    if (piece < 1) piece = 1;
    /* tasks: open every file first (on this thread, in job order: the first missing file
     * is the one reported) */
    size_t ntasks = 0;
    for (size_t i = 0; i < njobs; i++)
        ntasks += jobs[i].len > 2 * piece ? (size_t)((jobs[i].len + piece - 1) / piece) : 1;
    io_task *tasks = malloc(ntasks * sizeof *tasks);
    if (!tasks) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < njobs; i++) {
        int fd = ckpt_reader_file_fd(r, (uint32_t)jobs[i].file, err);
        if (fd < 0) {
            free(tasks);
            return err && err->code ? err->code : CKPT_E_IO;
        }
        uint64_t step = jobs[i].len > 2 * piece ? piece : jobs[i].len;
        uint64_t at = 0;
        do {
            uint64_t len = jobs[i].len - at < step ? jobs[i].len - at : step;
            tasks[n++] = (io_task){i, fd, jobs[i].off + at, len, jobs[i].dst + at};
            at += len;
        } while (at < jobs[i].len);
    }
    pthread_mutex_lock(&p->mu);
    p->r = r;
    p->jobs = jobs;
    p->tasks = tasks;
    p->ntasks = n;
    p->next = 0;
    p->err_job = SIZE_MAX;
    memset(&p->err, 0, sizeof p->err);
    /* wake the workers only when there is more than one task */
    unsigned helpers = n > 1 ? p->nthreads : 0;
    if (helpers) {
        p->busy = helpers;
        p->generation++;
        pthread_cond_broadcast(&p->work);
    }
    drain(p);
    while (helpers && p->busy)
        pthread_cond_wait(&p->done, &p->mu);
    ckpt_status s = CKPT_OK;
    if (p->err_job != SIZE_MAX) {
        s = p->err.code;
        if (err) *err = p->err;
    }
    p->tasks = NULL;
    p->jobs = NULL;
    pthread_mutex_unlock(&p->mu);
    free(tasks);
    return s;
}
