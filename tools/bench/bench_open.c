/* bench_open.c — times ckpt_reader_open (read + decode + index of `.metadata`) on a
 * checkpoint directory, best of N runs, and prints the index size and peak RSS. */
#include "ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_open DIR [RUNS]\n");
        return 2;
    }
    int runs = argc > 2 ? atoi(argv[2]) : 3;
    double best = 1e30;
    ckpt_reader_info info = {0};
    for (int i = 0; i < runs; i++) {
        ckpt_reader *r = NULL;
        ckpt_error err;
        double t0 = now();
        if (ckpt_reader_open(argv[1], NULL, &r, &err) != CKPT_OK) {
            fprintf(stderr, "bench_open: %s\n", err.message);
            return 1;
        }
        double t = now() - t0;
        if (t < best) best = t;
        ckpt_reader_get_info(r, &info);
        ckpt_reader_free(r);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"seconds\": %.4f, \"entries\": %llu, \"chunks\": %llu, \"metadata_bytes\": %llu, "
           "\"peak_rss_mib\": %.1f}\n",
           best, (unsigned long long)info.num_entries,
           (unsigned long long)(info.num_chunks + info.num_empty_chunks),
           (unsigned long long)info.metadata_bytes, (double)ru.ru_maxrss / 1024.0);
    return 0;
}
