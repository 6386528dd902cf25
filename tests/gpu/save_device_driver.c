/* save_device_driver.c — saves a checkpoint whose tensor pieces live in CUDA device memory
 * (or, with --host, the same pieces from host memory), for test_save_device_mock.py (built
 * against the stand-in runtime mock_cudart.c) and test_save_gpu.py (the real runtime).
 *
 *   save_device_driver probe                       prints the CUDA device count
 *   save_device_driver single DIR [opts]           the per-rank API (ckpt_save_file_*), two
 *                                                  simulated ranks in one process, one commit
 *   mpirun -np N save_device_driver mpi PARENT STEP [opts]   the collective saver
 *   opts: --host (host buffers)  --staging BYTES (device_staging_bytes)  --auto (memory AUTO
 *         instead of CUDA: the saver asks the runtime)
 *
 * Content (global tensors; element i = flat C-order index):
 *   model/w    float32 [1000, 300] Shard(0) (torch.chunk over 2 ranks, or over the MPI ranks)
 *              w[i] = (i % 4093) * 0.5 - 7
 *   model/norm float16 [3, 3] held by every rank (replicas), norm[i] = 0.125 * i
 *   model/u8   uint8 [257] (single: rank 1; mpi: the last rank), u8[i] = (i * 7 + 3) % 256
 *   model/e    float32 [0, 3] (an empty tensor, rank 0)
 *   model/step int64 0-d (rank 0) = 12345678901
 *   lr         0.5 (every rank, stored once)
 * The host copies are overwritten after being copied to the device, so every stored byte
 * must come from device memory.  Each rank prints "rank K: ok device=B stored=S" (mpi) or
 * "ok device=B" (single) — B: tensor bytes stored from device memory — or an error. */
#include "ckpt_save.h"
#ifdef SAVE_DEVICE_MPI
#include "ckpt_save_mpi.h"
#endif

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct opts {
    bool host, autodetect;
    uint64_t staging;
} opts;

typedef struct piece {
    const char *path;
    ckpt_dtype dtype;
    int ndim;
    int64_t shape[2], off[2], cnt[2];
    void *host, *dev;
    size_t bytes;
} piece;

static uint16_t f32_to_f16(float f) { /* 0.125 * i for small i: normal halves, exact */
    if (f == 0) return 0;
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000, exp = ((u >> 23) & 0xff) - 127 + 15,
             man = (u >> 13) & 0x3ff;
    return (uint16_t)(sign | exp << 10 | man);
}

static void elem(const char *path, int64_t i, unsigned char *d) {
    if (!strcmp(path, "model/w")) {
        float v = (float)(i % 4093) * 0.5f - 7.0f;
        memcpy(d, &v, 4);
    } else if (!strcmp(path, "model/norm")) {
        uint16_t v = f32_to_f16(0.125f * (float)i);
        memcpy(d, &v, 2);
    } else if (!strcmp(path, "model/u8")) {
        *d = (unsigned char)((i * 7 + 3) % 256);
    } else if (!strcmp(path, "model/step")) {
        int64_t v = 12345678901;
        memcpy(d, &v, 8);
    }
}

/* Fills the box, moves it to the device (unless --host) and spoils the host copy. */
static int make(piece *p, const opts *o) {
    size_t isz = ckpt_dtype_itemsize(p->dtype), n = 1;
    for (int d = 0; d < p->ndim; d++)
        n *= (size_t)p->cnt[d];
    p->bytes = n * isz;
    p->host = malloc(p->bytes ? p->bytes : 1);
    if (!p->host) return -1;
    unsigned char *q = p->host;
    int64_t g1 = p->ndim == 2 ? p->shape[1] : 1;
    if (p->ndim == 0)
        elem(p->path, 0, q);
    else if (p->ndim == 1)
        for (int64_t i = 0; i < p->cnt[0]; i++)
            elem(p->path, p->off[0] + i, q + (size_t)i * isz);
    else
        for (int64_t r = 0; r < p->cnt[0]; r++)
            for (int64_t c = 0; c < p->cnt[1]; c++)
                elem(p->path, (p->off[0] + r) * g1 + p->off[1] + c,
                     q + ((size_t)(r * p->cnt[1] + c)) * isz);
    if (o->host || !p->bytes) return 0;
    if (cudaMalloc(&p->dev, p->bytes) != cudaSuccess ||
        cudaMemcpy(p->dev, p->host, p->bytes, cudaMemcpyHostToDevice) != cudaSuccess)
        return -1;
    memset(p->host, 0x5a, p->bytes);
    return 0;
}

static void release(piece *p) {
    if (p->dev) cudaFree(p->dev);
    free(p->host);
}

static ckpt_save_tensor tensor(const piece *p, const opts *o, uint32_t replica) {
    return (ckpt_save_tensor){.dtype = p->dtype,
                              .ndim = p->ndim,
                              .global_shape = p->ndim ? p->shape : NULL,
                              .offsets = p->ndim ? p->off : NULL,
                              .sizes = p->ndim ? p->cnt : NULL,
                              .data = p->dev ? p->dev : p->host,
                              .data_size = p->bytes,
                              .replica_id = replica,
                              .memory = o->host         ? CKPT_SAVE_MEM_HOST
                                        : o->autodetect ? CKPT_SAVE_MEM_AUTO
                                                        : CKPT_SAVE_MEM_CUDA};
}

/* Rank `rank` of `world`'s pieces (np: how many were set). */
static void pieces(int rank, int world, piece *ps, size_t *np) {
    size_t n = 0;
    piece w = {.path = "model/w", .dtype = CKPT_DTYPE_FLOAT32, .ndim = 2, .shape = {1000, 300}};
    ckpt_shard_box(2, w.shape, 0, (uint32_t)world, (uint32_t)rank, w.off, w.cnt);
    ps[n++] = w;
    ps[n++] = (piece){.path = "model/norm",
                      .dtype = CKPT_DTYPE_FLOAT16,
                      .ndim = 2,
                      .shape = {3, 3},
                      .cnt = {3, 3}};
    if (rank == world - 1)
        ps[n++] = (piece){
            .path = "model/u8", .dtype = CKPT_DTYPE_UINT8, .ndim = 1, .shape = {257}, .cnt = {257}};
    if (rank == 0) {
        ps[n++] = (piece){.path = "model/e",
                          .dtype = CKPT_DTYPE_FLOAT32,
                          .ndim = 2,
                          .shape = {0, 3},
                          .cnt = {0, 3}};
        ps[n++] = (piece){.path = "model/step", .dtype = CKPT_DTYPE_INT64, .ndim = 0};
    }
    *np = n;
}

static int single(const char *dir, const opts *o) {
    ckpt_error err = {0};
    ckpt_save_options so = {.no_fsync = true, .device_staging_bytes = o->staging};
    ckpt_save_txn *txn = NULL;
    ckpt_save_desc *descs[2] = {NULL, NULL};
    uint64_t device = 0;
    ckpt_status st = ckpt_save_begin(dir, &so, &txn, &err);
    for (int r = 0; st == CKPT_OK && r < 2; r++) {
        ckpt_save_file *f = NULL;
        st = ckpt_save_file_open(ckpt_save_txn_staging_dir(txn), (uint32_t)r, &so, &f, &err);
        ckpt_save_value *lr = ckpt_save_value_float(0.5);
        ckpt_save_key kl = {.path = "lr"};
        if (st == CKPT_OK) st = ckpt_save_file_add_value(f, &kl, lr, (uint32_t)r, &err);
        ckpt_save_value_free(lr);
        piece ps[8];
        size_t np = 0;
        pieces(r, 2, ps, &np);
        for (size_t i = 0; i < np; i++)
            if (st == CKPT_OK && make(&ps[i], o) != 0) {
                fprintf(stderr, "cannot set up %s on the device\n", ps[i].path);
                st = CKPT_E_IO;
            }
        for (size_t i = 0; st == CKPT_OK && i < np; i++) {
            ckpt_save_key k = {.path = ps[i].path};
            uint32_t replica = !strcmp(ps[i].path, "model/norm") ? (uint32_t)r : 0;
            ckpt_save_tensor t = tensor(&ps[i], o, replica);
            st = ckpt_save_file_add_tensor(f, &k, &t, &err);
            if (st == CKPT_OK && replica == 0 && t.data_size && !o->host) device += t.data_size;
        }
        if (st == CKPT_OK) st = ckpt_save_file_finish(f, &descs[r], &err);
        ckpt_save_file_free(f);
        for (size_t i = 0; i < np; i++)
            release(&ps[i]);
    }
    if (st == CKPT_OK) st = ckpt_save_commit(txn, (const ckpt_save_desc *const *)descs, 2, &err);
    ckpt_save_txn_free(txn);
    ckpt_save_desc_free(descs[0]);
    ckpt_save_desc_free(descs[1]);
    if (st != CKPT_OK) {
        printf("error: %s\n", err.message[0] ? err.message : ckpt_strerror(st));
        return 1;
    }
    printf("ok device=%llu\n", (unsigned long long)device);
    return 0;
}

#ifdef SAVE_DEVICE_MPI
static int collective(const char *parent, const char *step, const opts *o) {
    int rank, world, ndev = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (!o->host && cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0)
        cudaSetDevice(rank % ndev);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", parent, step);
    ckpt_error err = {0};
    ckpt_save_options so = {.no_fsync = true, .device_staging_bytes = o->staging};
    ckpt_save_mpi *s = NULL;
    ckpt_status st = ckpt_save_mpi_begin(MPI_COMM_WORLD, dir, &so, NULL, &s, &err);
    if (st != CKPT_OK) {
        printf("rank %d: error: %s\n", rank, err.message);
        return 1;
    }
    ckpt_save_key kl = {.path = "lr"};
    st = ckpt_save_mpi_add_value(s, &kl, ckpt_save_value_float(0.5), &err);
    piece ps[8];
    size_t np = 0;
    pieces(rank, world, ps, &np);
    for (size_t i = 0; i < np; i++)
        if (st == CKPT_OK && make(&ps[i], o) != 0) {
            fprintf(stderr, "cannot set up %s on the device\n", ps[i].path);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    /* every add is deferred: the device buffers are read at the commit */
    for (size_t i = 0; st == CKPT_OK && i < np; i++) {
        ckpt_save_key k = {.path = ps[i].path};
        ckpt_save_tensor t = tensor(&ps[i], o, 0);
        st = ckpt_save_mpi_add_tensor(s, &k, &t, &err);
    }
    ckpt_error e2 = {0};
    ckpt_status cs = ckpt_save_mpi_commit(s, &e2);
    if (cs != CKPT_OK) st = cs, err = e2;
    ckpt_save_mpi_stats stats;
    ckpt_save_mpi_get_stats(s, &stats);
    ckpt_save_mpi_free(s);
    for (size_t i = 0; i < np; i++)
        release(&ps[i]);
    if (st != CKPT_OK) {
        printf("rank %d: error: %s\n", rank, err.message);
        return 1;
    }
    printf("rank %d: ok device=%llu stored=%llu\n", rank, (unsigned long long)stats.bytes_device,
           (unsigned long long)stats.bytes_stored);
    return 0;
}
#endif

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "probe")) {
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
        printf("%d\n", n);
        return 0;
    }
    opts o = {0};
    int first = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--host"))
            o.host = true;
        else if (!strcmp(argv[i], "--auto"))
            o.autodetect = true;
        else if (!strcmp(argv[i], "--staging") && i + 1 < argc)
            o.staging = strtoull(argv[++i], NULL, 10);
        else if (argv[i][0] == '-') {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        } else if (!first)
            first = i;
    }
    if (argc >= 3 && !strcmp(argv[1], "single") && first) return single(argv[first], &o);
#ifdef SAVE_DEVICE_MPI
    if (argc >= 4 && !strcmp(argv[1], "mpi") && first && first + 1 < argc) {
        MPI_Init(&argc, &argv);
        int rc = collective(argv[first], argv[first + 1], &o);
        fflush(stdout);
        MPI_Finalize();
        return rc;
    }
#endif
    fputs("usage: save_device_driver probe | single DIR [opts] | mpi PARENT STEP [opts]\n", stderr);
    return 2;
}
