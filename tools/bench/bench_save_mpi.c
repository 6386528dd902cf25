/* bench_save_mpi.c — save throughput of the collective saver under mpirun vs plain write() of
 * the same bytes.  Every rank holds its Shard(0) piece (torch.chunk) of T float32 tensors
 * [rows, 1024] (G GiB in all); each round runs, back to back and in alternating order,
 *   saver: ckpt_save_mpi_begin / add every piece / commit (a new step each round), and
 *   write: each rank write()s the same buffers (1 call per piece) to its own file in a new
 *          directory, fsync if --fsync, close;
 * each timed from a barrier to a barrier (the job's wall time).  Rank 0 prints one line per
 * run, the medians of the saver's and of write()'s times and their ratio
 * write_time / saver_time (= saver GB/s / write GB/s; the goal is >= 0.8).
 *
 * usage: mpirun -np M bench_save_mpi DIR [--gib G] [--tensors T] [--rounds R] [--fsync] */
#include "ckpt_save_mpi.h"

#include <errno.h>
#include <fcntl.h>
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

static void die(int rank, const char *what, const char *msg) {
    fprintf(stderr, "bench_save_mpi: rank %d: %s: %s\n", rank, what, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

typedef struct piece {
    int64_t shape[2], off[2], cnt[2];
    float *buf;
    size_t bytes;
} piece;

static double run_saver(const char *dir, int round, piece *p, int n, bool fsync_on, int rank) {
    char step[4096];
    snprintf(step, sizeof step, "%s/step-%d", dir, round);
    ckpt_save_options o = {.no_fsync = !fsync_on};
    ckpt_error err = {0};
    ckpt_save_mpi *s;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    if (ckpt_save_mpi_begin(MPI_COMM_WORLD, step, &o, NULL, &s, &err) != CKPT_OK)
        die(rank, "begin", err.message);
    for (int i = 0; i < n; i++) {
        char key[64];
        snprintf(key, sizeof key, "model/layers.%d.w", i);
        ckpt_save_key k = {.path = key};
        ckpt_save_tensor t = {.dtype = CKPT_DTYPE_FLOAT32,
                              .ndim = 2,
                              .global_shape = p[i].shape,
                              .offsets = p[i].off,
                              .sizes = p[i].cnt,
                              .data = p[i].buf,
                              .data_size = p[i].bytes};
        if (ckpt_save_mpi_add_tensor(s, &k, &t, &err) != CKPT_OK) die(rank, "add", err.message);
    }
    if (ckpt_save_mpi_commit(s, &err) != CKPT_OK) die(rank, "commit", err.message);
    ckpt_save_mpi_free(s);
    MPI_Barrier(MPI_COMM_WORLD);
    return now() - t0;
}

static double run_write(const char *dir, int round, piece *p, int n, bool fsync_on, int rank) {
    char d[4096], f[4200];
    snprintf(d, sizeof d, "%s/plain-%d", dir, round);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    if (rank == 0 && mkdir(d, 0755) != 0) die(rank, d, strerror(errno));
    MPI_Barrier(MPI_COMM_WORLD);
    snprintf(f, sizeof f, "%s/rank%d.bin", d, rank);
    int fd = open(f, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) die(rank, f, strerror(errno));
    for (int i = 0; i < n; i++) {
        const char *b = (const char *)p[i].buf;
        size_t left = p[i].bytes;
        while (left) {
            ssize_t w = write(fd, b, left);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) die(rank, f, strerror(errno));
            b += w, left -= (size_t)w;
        }
    }
    if (fsync_on && fsync(fd) != 0) die(rank, f, strerror(errno));
    close(fd);
    MPI_Barrier(MPI_COMM_WORLD);
    return now() - t0;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (argc < 2) {
        if (rank == 0) fprintf(stderr, "usage: bench_save_mpi DIR [--gib G] [--tensors T] ...\n");
        MPI_Finalize();
        return 2;
    }
    double gib = 1;
    int n = 16, rounds = 3;
    bool fsync_on = false;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--gib") && i + 1 < argc)
            gib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--tensors") && i + 1 < argc)
            n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--fsync"))
            fsync_on = true;
    }
    if (n < 1 || rounds < 1 || rounds > 100 || gib <= 0) {
        if (rank == 0) fprintf(stderr, "bench_save_mpi: bad arguments\n");
        MPI_Finalize();
        return 2;
    }
    int64_t rows = (int64_t)(gib * (1 << 30) / 4096 / n);
    piece *p = calloc((size_t)n, sizeof *p);
    uint64_t mine = 0, total = 0;
    for (int i = 0; i < n; i++) {
        p[i].shape[0] = rows, p[i].shape[1] = 1024;
        ckpt_shard_box(2, p[i].shape, 0, (uint32_t)world, (uint32_t)rank, p[i].off, p[i].cnt);
        p[i].bytes = (size_t)(p[i].cnt[0] * 1024) * 4;
        p[i].buf = malloc(p[i].bytes ? p[i].bytes : 1);
        if (!p[i].buf) die(rank, "malloc", "out of memory");
        for (size_t k = 0; k < p[i].bytes / 4; k++)
            p[i].buf[k] = (float)(k % 1000) * 0.001f + (float)i;
        mine += p[i].bytes;
    }
    MPI_Reduce(&mine, &total, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    double *ratio = calloc((size_t)rounds, sizeof *ratio);
    double *tsv = calloc((size_t)rounds, sizeof *tsv), *twv = calloc((size_t)rounds, sizeof *twv);
    for (int r = 0; r < rounds; r++) {
        double ts, tw;
        if (r % 2 == 0) {
            ts = run_saver(argv[1], r, p, n, fsync_on, rank);
            tw = run_write(argv[1], r, p, n, fsync_on, rank);
        } else {
            tw = run_write(argv[1], r, p, n, fsync_on, rank);
            ts = run_saver(argv[1], r, p, n, fsync_on, rank);
        }
        ratio[r] = tw / ts;
        tsv[r] = ts, twv[r] = tw;
        if (rank == 0)
            printf("round %d: %d ranks, %.2f GiB%s: saver %.3f s (%.2f GB/s), write() %.3f s "
                   "(%.2f GB/s), saver/write throughput %.2f\n",
                   r, world, (double)total / (1 << 30), fsync_on ? ", fsync" : "", ts,
                   (double)total / ts / 1e9, tw, (double)total / tw / 1e9, ratio[r]);
    }
    qsort(ratio, (size_t)rounds, sizeof *ratio, cmp);
    qsort(tsv, (size_t)rounds, sizeof *tsv, cmp);
    qsort(twv, (size_t)rounds, sizeof *twv, cmp);
    if (rank == 0)
        printf(
            "median of %d: saver %.3f s (%.2f GB/s), write() %.3f s (%.2f GB/s), ratio of medians "
            "%.2f, median of per-round ratios %.2f\n",
            rounds, tsv[rounds / 2], (double)total / tsv[rounds / 2] / 1e9, twv[rounds / 2],
            (double)total / twv[rounds / 2] / 1e9, twv[rounds / 2] / tsv[rounds / 2],
            ratio[rounds / 2]);
    free(tsv);
    free(twv);
    for (int i = 0; i < n; i++)
        free(p[i].buf);
    free(p);
    free(ratio);
    MPI_Finalize();
    return 0;
}
