/* bench_pinned.c — what pinned staging costs to set up on this machine (CUDA builds): the
 * loader's device sink pins two halves with cudaHostAlloc at the start of a load, and that
 * setup is part of every load's wall time.  For each size, best of --runs: cudaHostAlloc +
 * cudaFreeHost, and the alternative of mapping anonymous memory with transparent huge pages
 * (madvise MADV_HUGEPAGE), touching it and registering it with cudaHostRegister; then the
 * host-to-device rate of a copy from each (to check that both are really pinned).
 *
 *   bench_pinned [--runs N] [MiB ...]        (default: 16 64 256) */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int check(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return 0;
    fprintf(stderr, "bench_pinned: %s: %s\n", what, cudaGetErrorString(e));
    return 1;
}

/* Seconds for one host-to-device copy of n bytes from src. */
static double h2d(void *dev, const void *src, size_t n) {
    double t = now();
    if (check(cudaMemcpy(dev, src, n, cudaMemcpyHostToDevice), "copy")) return -1;
    return now() - t;
}

int main(int argc, char **argv) {
    int runs = 5;
    size_t sizes[16];
    int nsizes = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (nsizes < 16)
            sizes[nsizes++] = (size_t)strtoull(argv[i], NULL, 10) << 20;
    }
    if (!nsizes) {
        sizes[nsizes++] = (size_t)16 << 20;
        sizes[nsizes++] = (size_t)64 << 20;
        sizes[nsizes++] = (size_t)256 << 20;
    }
    void *dev = NULL;
    if (check(cudaMalloc(&dev, sizes[0]), "cudaMalloc") || check(cudaFree(dev), "cudaFree"))
        return 1;
    printf("| MiB | cudaHostAlloc s | THP mmap + cudaHostRegister s | ratio | H2D GiB/s "
           "(alloc / register) |\n|---|---|---|---|---|\n");
    for (int k = 0; k < nsizes; k++) {
        size_t n = sizes[k];
        double best_a = 1e9, best_r = 1e9, rate_a = 0, rate_r = 0;
        if (check(cudaMalloc(&dev, n), "cudaMalloc")) return 1;
        for (int r = 0; r < runs; r++) {
            void *p = NULL;
            double t = now();
            if (check(cudaHostAlloc(&p, n, cudaHostAllocDefault), "cudaHostAlloc")) return 1;
            double a = now() - t;
            double c = h2d(dev, p, n);
            cudaFreeHost(p);
            best_a = a < best_a ? a : best_a;
            if (c > 0 && n / c > rate_a) rate_a = n / c;

            t = now();
            void *q = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (q == MAP_FAILED) return 1;
            madvise(q, n, MADV_HUGEPAGE);
            if (check(cudaHostRegister(q, n, cudaHostRegisterDefault), "cudaHostRegister"))
                return 1;
            double g = now() - t;
            c = h2d(dev, q, n);
            cudaHostUnregister(q);
            munmap(q, n);
            best_r = g < best_r ? g : best_r;
            if (c > 0 && n / c > rate_r) rate_r = n / c;
        }
        cudaFree(dev);
        printf("| %zu | %.4f | %.4f | %.2f | %.1f / %.1f |\n", n >> 20, best_a, best_r,
               best_r / best_a, rate_a / (1 << 30), rate_r / (1 << 30));
    }
    return 0;
}
