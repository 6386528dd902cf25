/* bench_read.c — the reading side of the mount benchmarks (tools/bench/bench_mount.py), in C
 * so that the reader's own overhead is the same for every path measured:
 *
 *   bench_read files [-j N] [-b BYTES] FILE...
 *       N threads (default 1) read the files (split between them by size) with read(2) into a
 *       reused buffer of BYTES (default 1 MiB); prints "bytes seconds".
 *   bench_read ranges [-b BYTES [-j N]] DIR DIM N RANK [PREFIX]
 *       what rank RANK of a Shard(DIM)-over-N layout needs of every tensor under PREFIX,
 *       read straight from the shard files: libckpt plans each tensor's box into
 *       (file, offset, length) pieces and each piece is pread into its place in a reused
 *       destination buffer; with -b, each piece is read in preads of BYTES into one reused
 *       page-aligned buffer of that size instead (as a reader of the mount's files does:
 *       DIR may be a mount's .raw/, to read the same bytes at the same offsets through
 *       FUSE), by N threads with -j (tensors split between them by size); prints
 *       "bytes seconds". */
#include "ckpt.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A span of a file to pread (ranges -b). */
typedef struct span {
    int fd;
    uint64_t off, len;
} span;

/* One reading thread: whole files read to their end (files), or spans (ranges -b), in
 * `block`-byte reads into one reused page-aligned buffer. */
typedef struct worker {
    char **files;
    span *spans;
    size_t n, cap; /* files or spans */
    size_t block;
    unsigned long long bytes;
    int failed;
} worker;

static void read_file(worker *w, char *buf, const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        perror(path);
        w->failed = 1;
        return;
    }
    for (;;) {
        ssize_t k = read(fd, buf, w->block);
        if (k < 0) {
            perror(path);
            w->failed = 1;
            break;
        }
        if (k == 0) break;
        w->bytes += (unsigned long long)k;
    }
    close(fd);
}

static void read_span(worker *w, char *buf, const span *sp) {
    for (uint64_t done = 0; done < sp->len;) {
        uint64_t left = sp->len - done;
        size_t want = left < w->block ? (size_t)left : w->block;
        if (pread(sp->fd, buf, want, (off_t)(sp->off + done)) != (ssize_t)want) {
            w->failed = 1;
            return;
        }
        done += want;
        w->bytes += want;
    }
}

static void *work(void *arg) {
    worker *w = arg;
    char *buf = aligned_alloc(4096, (w->block + 4095) / 4096 * 4096);
    if (!buf) {
        w->failed = 1;
        return NULL;
    }
    memset(buf, 0, w->block);
    for (size_t i = 0; i < w->n && !(w->spans && w->failed); i++) {
        if (w->files)
            read_file(w, buf, w->files[i]);
        else
            read_span(w, buf, &w->spans[i]);
    }
    free(buf);
    return NULL;
}

/* The thread of w[0, jobs) with the least bytes so far. */
static int least_loaded(const unsigned long long *load, int jobs) {
    int best = 0;
    for (int t = 1; t < jobs; t++)
        if (load[t] < load[best]) best = t;
    return best;
}

/* Runs the workers on their threads; prints "bytes seconds"; 1 if any failed. */
static int run_workers(worker *w, int jobs) {
    pthread_t tid[64];
    double t0 = now();
    for (int t = 0; t < jobs; t++)
        pthread_create(&tid[t], NULL, work, &w[t]);
    unsigned long long total = 0;
    int failed = 0;
    for (int t = 0; t < jobs; t++) {
        pthread_join(tid[t], NULL);
        total += w[t].bytes;
        failed |= w[t].failed;
    }
    printf("%llu %.6f\n", total, now() - t0);
    return failed;
}

static int cmd_files(int argc, char **argv) {
    int j = 1;
    size_t block = 1u << 20;
    int i = 0;
    for (; i < argc && argv[i][0] == '-'; i += 2) {
        if (i + 1 >= argc) return 2;
        if (strcmp(argv[i], "-j") == 0) j = atoi(argv[i + 1]);
        if (strcmp(argv[i], "-b") == 0) block = (size_t)atol(argv[i + 1]);
    }
    int nf = argc - i;
    if (j < 1 || j > 64 || nf < 1 || block == 0) return 2;
    worker w[64];
    memset(w, 0, sizeof w);
    /* largest files first to the least loaded thread */
    unsigned long long load[64] = {0};
    for (int t = 0; t < j; t++) {
        w[t].files = calloc((size_t)nf, sizeof(char *));
        w[t].block = block;
    }
    char **files = argv + i;
    for (int f = 0; f < nf; f++) {
        struct stat st;
        unsigned long long sz = stat(files[f], &st) == 0 ? (unsigned long long)st.st_size : 0;
        int best = least_loaded(load, j);
        w[best].files[w[best].n++] = files[f];
        load[best] += sz;
    }
    int failed = run_workers(w, j);
    for (int t = 0; t < j; t++)
        free(w[t].files);
    return failed;
}

/* The plan of what rank `rank` of Shard(dim) over n needs of entry i, when it is a tensor
 * under `prefix`; NULL otherwise, or when planning fails (*failed set, message printed). */
static ckpt_plan *plan_of(ckpt_reader *r, size_t i, int dim, uint32_t n, uint32_t rank,
                          const char *prefix, int *failed) {
    const ckpt_entry *e = ckpt_reader_entry(r, i);
    if (ckpt_entry_kind_of(e) != CKPT_ENTRY_TENSOR ||
        strncmp(ckpt_entry_path(e), prefix, strlen(prefix)) != 0)
        return NULL;
    int64_t start[CKPT_MAX_NDIM], count[CKPT_MAX_NDIM];
    ckpt_shard_box(ckpt_entry_ndim(e), ckpt_entry_shape(e), dim, n, rank, start, count);
    ckpt_plan *p = NULL;
    ckpt_error err = {0};
    if (ckpt_plan_region(r, e, start, count, &p, &err) != CKPT_OK) {
        fprintf(stderr, "%s\n", err.message);
        *failed = 1;
        return NULL;
    }
    return p;
}

/* ranges -b: the planned pieces of each tensor (file, offset, length), read in `block`-byte
 * preads into one reused page-aligned buffer per thread; tensors go to the least loaded of
 * `jobs` threads, largest first (as `files -j` splits files).  Planned before the clock. */
static int ranges_blocked(ckpt_reader *r, int dim, uint32_t n, uint32_t rank, const char *prefix,
                          size_t block, int jobs) {
    worker w[64];
    memset(w, 0, sizeof w);
    unsigned long long load[64] = {0};
    ckpt_error err = {0};
    int failed = 0;
    /* every tensor planned once, then largest first to the least loaded thread */
    size_t ne = ckpt_reader_num_entries(r), nt = 0;
    ckpt_plan **plans = calloc(ne ? ne : 1, sizeof *plans);
    if (!plans) return 1;
    for (size_t i = 0; i < ne; i++)
        if ((plans[nt] = plan_of(r, i, dim, n, rank, prefix, &failed))) nt++;
    for (size_t a = 1; a < nt; a++) /* insertion sort, largest first (few tensors) */
        for (size_t b = a; b > 0 && ckpt_plan_bytes(plans[b]) > ckpt_plan_bytes(plans[b - 1]);
             b--) {
            ckpt_plan *t = plans[b];
            plans[b] = plans[b - 1];
            plans[b - 1] = t;
        }
    for (size_t t = 0; t < nt && !failed; t++) {
        const ckpt_plan *p = plans[t];
        int best = least_loaded(load, jobs);
        load[best] += ckpt_plan_bytes(p);
        worker *sw = &w[best];
        const ckpt_piece *pc = ckpt_plan_pieces(p);
        for (size_t k = 0; k < ckpt_plan_num_pieces(p) && !failed; k++) {
            int fd = ckpt_reader_file_fd(r, (uint32_t)pc[k].file_id, &err);
            if (fd < 0) {
                failed = 1;
                break;
            }
            if (sw->n == sw->cap) {
                size_t nc = sw->cap ? 2 * sw->cap : 64;
                span *ns = realloc(sw->spans, nc * sizeof *ns);
                if (!ns) {
                    failed = 1;
                    break;
                }
                sw->spans = ns;
                sw->cap = nc;
            }
            sw->spans[sw->n++] = (span){fd, pc[k].file_offset, pc[k].length};
        }
    }
    for (size_t t = 0; t < nt; t++)
        ckpt_plan_free(plans[t]);
    free(plans);
    for (int j = 0; j < jobs; j++)
        w[j].block = block;
    if (!failed) failed = run_workers(w, jobs);
    for (int j = 0; j < jobs; j++)
        free(w[j].spans);
    return failed;
}

static int cmd_ranges(int argc, char **argv) {
    size_t block = 0; /* 0: each piece into its place in the tensor's destination */
    int jobs = 1;
    while (argc >= 2 && argv[0][0] == '-') {
        if (strcmp(argv[0], "-b") == 0)
            block = (size_t)atol(argv[1]);
        else if (strcmp(argv[0], "-j") == 0)
            jobs = atoi(argv[1]);
        else
            return 2;
        argc -= 2;
        argv += 2;
    }
    if (argc < 4 || jobs < 1 || jobs > 64 || (jobs > 1 && !block)) return 2;
    const char *dir = argv[0], *prefix = argc > 4 ? argv[4] : "";
    int dim = atoi(argv[1]);
    uint32_t n = (uint32_t)atoi(argv[2]), rank = (uint32_t)atoi(argv[3]);
    ckpt_reader *r;
    ckpt_error err = {0};
    if (ckpt_reader_open(dir, NULL, &r, &err) != CKPT_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    if (block) {
        int rc = ranges_blocked(r, dim, n, rank, prefix, block, jobs);
        ckpt_reader_free(r);
        return rc;
    }
    size_t cap = 0;
    char *buf = NULL;
    unsigned long long total = 0;
    int failed = 0;
    /* the destination is allocated and touched before the clock starts (the mount's reader
     * reuses a 1 MiB buffer; page faults are expensive in these VMs) */
    for (size_t i = 0; i < ckpt_reader_num_entries(r); i++) {
        ckpt_plan *p = plan_of(r, i, dim, n, rank, prefix, &failed);
        if (!p) continue;
        if (ckpt_plan_bytes(p) > cap) cap = ckpt_plan_bytes(p);
        ckpt_plan_free(p);
    }
    if (cap) {
        buf = malloc(cap);
        if (!buf) return 1;
        memset(buf, 0, cap);
    }
    double t0 = now();
    for (size_t i = 0; i < ckpt_reader_num_entries(r); i++) {
        ckpt_plan *p = plan_of(r, i, dim, n, rank, prefix, &failed);
        if (!p) continue;
        uint64_t need = ckpt_plan_bytes(p);
        if (need > cap) {
            free(buf);
            buf = malloc(need);
            cap = need;
            memset(buf, 0, need);
        }
        const ckpt_piece *pc = ckpt_plan_pieces(p);
        for (size_t k = 0; k < ckpt_plan_num_pieces(p); k++) {
            int fd = ckpt_reader_file_fd(r, (uint32_t)pc[k].file_id, &err);
            if (fd < 0) {
                failed = 1;
                break;
            }
            if (pread(fd, buf + pc[k].dst_offset, pc[k].length, (off_t)pc[k].file_offset) !=
                (ssize_t)pc[k].length)
                failed = 1;
        }
        total += need;
        ckpt_plan_free(p);
    }
    printf("%llu %.6f\n", total, now() - t0);
    free(buf);
    ckpt_reader_free(r);
    return failed;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "files") == 0) return cmd_files(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "ranges") == 0) return cmd_ranges(argc - 2, argv + 2);
    fprintf(stderr, "usage: bench_read files [-j N] [-b BYTES] FILE... | "
                    "bench_read ranges [-b BYTES [-j N]] DIR DIM N RANK [PREFIX]\n");
    return 2;
}
