/* bench_save.c — throughput of the saver: writes a checkpoint of float32 tensors sharded
 * Shard(0) over R simulated ranks (ranks written one after the other, one thread) and prints
 * the time of the data files, of the .metadata + commit, and GB/s.
 *
 * usage: bench_save DIR [--gib G] [--ranks R] [--tensor-mib M] [--fsync] [--one-tensor BYTES]
 *   --one-tensor BYTES: a single rank, a single uint8 tensor of BYTES bytes (> 4 GiB
 *   exercises the Zip64 fields); byte i = (i * 131 + 7) & 0xff. */
#include "ckpt_save.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void check(ckpt_status s, const ckpt_error *e, const char *what) {
    if (s == CKPT_OK) return;
    fprintf(stderr, "bench_save: %s: %s\n", what, e->message);
    exit(1);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_save DIR [--gib G] [--ranks R] [--tensor-mib M] [--fsync] "
                        "[--one-tensor BYTES]\n");
        return 2;
    }
    double gib = 1;
    long ranks = 4, tmib = 64;
    unsigned long long one = 0;
    ckpt_save_options o = {.no_fsync = true};
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--gib") && i + 1 < argc)
            gib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--ranks") && i + 1 < argc)
            ranks = atol(argv[++i]);
        else if (!strcmp(argv[i], "--tensor-mib") && i + 1 < argc)
            tmib = atol(argv[++i]);
        else if (!strcmp(argv[i], "--one-tensor") && i + 1 < argc)
            one = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--fsync"))
            o.no_fsync = false;
        else
            return 2;
    }
    if (one) ranks = 1;
    if (ranks < 1 || tmib < 1) return 2;
    ckpt_error err;
    ckpt_save_txn *t;
    check(ckpt_save_begin(argv[1], &o, &t, &err), &err, "begin");
    ckpt_save_desc **descs = calloc((size_t)ranks, sizeof *descs);
    double t0 = now();
    unsigned long long bytes = 0;
    if (one) {
        unsigned char *b = malloc(one);
        if (!b) return 1;
        for (unsigned long long i = 0; i < one; i++)
            b[i] = (unsigned char)((i * 131 + 7) & 0xff);
        t0 = now();
        ckpt_save_file *f;
        check(ckpt_save_file_open(ckpt_save_txn_staging_dir(t), 0, &o, &f, &err), &err, "open");
        int64_t shape[1] = {(int64_t)one};
        ckpt_save_key k = {.path = "big"};
        ckpt_save_tensor ten = {.dtype = CKPT_DTYPE_UINT8,
                                .ndim = 1,
                                .global_shape = shape,
                                .data = b,
                                .data_size = one};
        check(ckpt_save_file_add_tensor(f, &k, &ten, &err), &err, "add");
        check(ckpt_save_file_finish(f, &descs[0], &err), &err, "finish");
        ckpt_save_file_free(f);
        free(b);
        bytes = one;
    } else {
        long long rows = tmib * 1024 * 1024 / 4 / 1024; /* [rows, 1024] float32 */
        long ntensors = (long)(gib * 1024 / (double)tmib);
        if (ntensors < 1) ntensors = 1;
        long long c = (rows + ranks - 1) / ranks;
        float *buf = malloc((size_t)c * 1024 * sizeof *buf);
        if (!buf) return 1;
        for (long long i = 0; i < c * 1024; i++)
            buf[i] = (float)i;
        for (long r = 0; r < ranks; r++) {
            ckpt_save_file *f;
            check(ckpt_save_file_open(ckpt_save_txn_staging_dir(t), (uint32_t)r, &o, &f, &err),
                  &err, "open");
            for (long i = 0; i < ntensors; i++) {
                char path[64];
                snprintf(path, sizeof path, "model/layers.%ld.w", i);
                long long lo = r * c < rows ? r * c : rows, hi = lo + c < rows ? lo + c : rows;
                int64_t shape[2] = {rows, 1024}, off[2] = {lo, 0}, sz[2] = {hi - lo, 1024};
                ckpt_save_key k = {.path = path};
                ckpt_save_tensor ten = {.dtype = CKPT_DTYPE_FLOAT32,
                                        .ndim = 2,
                                        .global_shape = shape,
                                        .offsets = off,
                                        .sizes = sz,
                                        .data = buf,
                                        .data_size = (size_t)(hi - lo) * 4096};
                check(ckpt_save_file_add_tensor(f, &k, &ten, &err), &err, "add");
                bytes += (unsigned long long)(hi - lo) * 4096;
            }
            check(ckpt_save_file_finish(f, &descs[r], &err), &err, "finish");
            ckpt_save_file_free(f);
        }
        free(buf);
    }
    double t1 = now();
    check(ckpt_save_commit(t, (const ckpt_save_desc *const *)descs, (size_t)ranks, &err), &err,
          "commit");
    double t2 = now();
    ckpt_save_txn_free(t);
    for (long r = 0; r < ranks; r++)
        ckpt_save_desc_free(descs[r]);
    free(descs);
    printf("data %.3f GiB in %.3f s (%.2f GB/s), metadata+commit %.3f s, fsync %s\n",
           (double)bytes / (1 << 30), t1 - t0, (double)bytes / (t1 - t0) / 1e9, t2 - t1,
           o.no_fsync ? "off" : "on");
    return 0;
}
