/* save_mpi_driver.c — writes a checkpoint with the collective saver under mpirun, for
 * test_save_mpi.py: every rank adds its torch.chunk Shard(0) piece of float32 `model/w`
 * [7, 5] and of float32 `model/big` [256 * world, 1024], its Shard(1) piece of bfloat16
 * `model/b` [4, 6], the whole of a replicated float16 `model/norm` [3, 3] and a 0-d int64
 * `optim/state/model.w/step`, and the same values (lr, betas, name, a nested dict; every
 * rank, stored once), plus `misc/rank<k>` = k.  Element values are exact in their dtypes:
 *   w[i] = 0.5 * i - 3, big[i] = (i % 1000) * 0.25, b[i] = 0.25 * (i - 12), norm[i] = 0.125 * i,
 *   step = 12345678901 (i = flat C-order index of the global tensor).
 *
 * Usage: mpirun -np N save_mpi_driver PARENT STEP [--latest] [--keep N] [--flush-each]
 *        [--kill-rank K] [--bad-shape-rank K] [--bad-data-rank K] [--bad-add-rank K]
 *        [--bad-key-rank K] [--no-fsync]
 * --kill-rank: rank K SIGKILLs itself mid-file, after storing its 1 MiB piece of model/big
 *   (written past the 1 MiB sink buffer, so it is in the file) and before model/b;
 * --bad-shape-rank: rank K gives model/w another global shape (rank 0's commit refuses);
 * --bad-data-rank: rank K passes model/w with a wrong byte count (its write refuses);
 * --bad-add-rank: rank K adds model/w with an invalid dtype (its add refuses at once);
 * --bad-key-rank: rank K adds a value under an empty key (its add refuses at once);
 *   with --flush-each a flush follows, so the failure is agreed there, else at the commit.
 * Each rank prints "rank K: ok" or "rank K: error: MESSAGE"; exit 1 on error. */
#include "ckpt_save_mpi.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct piece {
    int64_t off[2], cnt[2];
    void *buf;
    size_t bytes;
} piece;

static uint16_t f32_to_bf16(float f) { /* exact for the values used (no rounding needed) */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}
static uint16_t f32_to_f16(float f) { /* 0.125 * i for small i: normal halves, exact */
    if (f == 0) return 0;
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000, exp = ((u >> 23) & 0xff) - 127 + 15,
             man = (u >> 13) & 0x3ff;
    return (uint16_t)(sign | exp << 10 | man);
}

/* The box `p` of a 2-d global tensor [g0, g1], element (r, c) = f(r * g1 + c). */
static void fill(piece *p, int64_t g1, size_t isz, void (*f)(int64_t i, void *dst)) {
    p->bytes = (size_t)(p->cnt[0] * p->cnt[1]) * isz;
    p->buf = malloc(p->bytes ? p->bytes : 1);
    unsigned char *d = p->buf;
    for (int64_t r = 0; r < p->cnt[0]; r++)
        for (int64_t c = 0; c < p->cnt[1]; c++, d += isz)
            f((p->off[0] + r) * g1 + p->off[1] + c, d);
}
static void f_w(int64_t i, void *d) { *(float *)d = 0.5f * (float)i - 3.0f; }
static void f_big(int64_t i, void *d) { *(float *)d = (float)(i % 1000) * 0.25f; }
static void f_b(int64_t i, void *d) {
    uint16_t v = f32_to_bf16(0.25f * (float)(i - 12));
    memcpy(d, &v, 2);
}
static void f_norm(int64_t i, void *d) {
    uint16_t v = f32_to_f16(0.125f * (float)i);
    memcpy(d, &v, 2);
}

typedef struct kill_ctx {
    int armed;
} kill_ctx;
static void progress(void *ctx, uint64_t done, uint64_t total) {
    kill_ctx *k = ctx;
    if (k->armed && done >= (1u << 20) && done < total) {
        fflush(NULL);
        raise(SIGKILL);
    }
}

static ckpt_status add2d(ckpt_save_mpi *s, const char *path, ckpt_dtype dt, const int64_t *shape,
                         piece *p, ckpt_error *err) {
    ckpt_save_key k = {.path = path};
    ckpt_save_tensor t = {.dtype = dt,
                          .ndim = 2,
                          .global_shape = shape,
                          .offsets = p->off,
                          .sizes = p->cnt,
                          .data = p->buf,
                          .data_size = p->bytes};
    return ckpt_save_mpi_add_tensor(s, &k, &t, err);
}

static ckpt_status run(int rank, int world, int argc, char **argv, ckpt_error *err) {
    if (argc < 3) {
        fprintf(stderr, "usage: save_mpi_driver PARENT STEP [options]\n");
        exit(2);
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", argv[1], argv[2]);
    ckpt_save_options o = {0};
    ckpt_save_mpi_options mo = {0};
    kill_ctx kc = {0};
    int kill_rank = -1, bad_shape = -1, bad_data = -1, bad_add = -1, bad_key = -1, flush_each = 0;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--latest"))
            mo.set_latest = true;
        else if (!strcmp(argv[i], "--keep") && i + 1 < argc)
            mo.keep = (size_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--flush-each"))
            flush_each = 1;
        else if (!strcmp(argv[i], "--no-fsync"))
            o.no_fsync = true;
        else if (!strcmp(argv[i], "--kill-rank") && i + 1 < argc)
            kill_rank = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bad-shape-rank") && i + 1 < argc)
            bad_shape = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bad-data-rank") && i + 1 < argc)
            bad_data = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bad-add-rank") && i + 1 < argc)
            bad_add = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bad-key-rank") && i + 1 < argc)
            bad_key = atoi(argv[++i]);
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            exit(2);
        }
    }
    kc.armed = rank == kill_rank;
    mo.progress = progress;
    mo.progress_ctx = &kc;
    ckpt_save_mpi *s;
    ckpt_status st = ckpt_save_mpi_begin(MPI_COMM_WORLD, dir, &o, &mo, &s, err);
    if (st != CKPT_OK) return st;

    /* values first (as torch orders them), every rank passes the shared ones */
    ckpt_save_value *betas = ckpt_save_value_tuple();
    ckpt_save_value_append(betas, ckpt_save_value_float(0.9));
    ckpt_save_value_append(betas, ckpt_save_value_float(0.999));
    ckpt_save_value *cfg = ckpt_save_value_dict();
    ckpt_save_value_set(cfg, "layers", ckpt_save_value_int(2));
    ckpt_save_value *names = ckpt_save_value_list();
    ckpt_save_value_append(names, ckpt_save_value_string("w"));
    ckpt_save_value_append(names, ckpt_save_value_none());
    ckpt_save_value_append(names, ckpt_save_value_bool(true));
    ckpt_save_value_set(cfg, "names", names);
    char rk[32];
    snprintf(rk, sizeof rk, "misc/rank%d", rank);
    struct {
        const char *path;
        ckpt_save_value *v;
    } vals[] = {
        {"optim/param_groups/0/lr", ckpt_save_value_float(3e-4)},
        {"optim/param_groups/0/betas", betas},
        {"optim/param_groups/0/name", ckpt_save_value_string("adamw \xc3\xbc")},
        {"misc/cfg", cfg},
        {rk, ckpt_save_value_int(rank)},
    };
    for (size_t i = 0; st == CKPT_OK && i < sizeof vals / sizeof *vals; i++) {
        ckpt_save_key k = {.path = vals[i].path};
        st = ckpt_save_mpi_add_value(s, &k, vals[i].v, err);
        vals[i].v = NULL;
    }
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++)
        ckpt_save_value_free(vals[i].v);
    if (st == CKPT_OK && bad_key >= 0) {
        ckpt_save_key k = {.path = rank == bad_key ? "" : "misc/ok"};
        st = ckpt_save_mpi_add_value(s, &k, ckpt_save_value_bool(true), err);
    }

    int64_t gw[2] = {7, 5}, gbig[2] = {256 * (int64_t)world, 1024}, gb[2] = {4, 6}, gn[2] = {3, 3};
    piece w = {0}, big = {0}, b = {0}, norm = {0};
    ckpt_shard_box(2, gw, 0, (uint32_t)world, (uint32_t)rank, w.off, w.cnt);
    ckpt_shard_box(2, gbig, 0, (uint32_t)world, (uint32_t)rank, big.off, big.cnt);
    ckpt_shard_box(2, gb, 1, (uint32_t)world, (uint32_t)rank, b.off, b.cnt);
    norm.cnt[0] = 3, norm.cnt[1] = 3;
    fill(&w, gw[1], 4, f_w);
    fill(&big, gbig[1], 4, f_big);
    fill(&b, gb[1], 2, f_b);
    fill(&norm, gn[1], 2, f_norm);
    if (rank == bad_data) w.bytes += 4;
    int64_t gw_bad[2] = {8, 5};
    if (st == CKPT_OK)
        st = add2d(s, "model/w", rank == bad_add ? (ckpt_dtype)999 : CKPT_DTYPE_FLOAT32,
                   rank == bad_shape ? gw_bad : gw, &w, err);
    if (st == CKPT_OK && flush_each) st = ckpt_save_mpi_flush(s, err);
    if (st == CKPT_OK) st = add2d(s, "model/big", CKPT_DTYPE_FLOAT32, gbig, &big, err);
    if (st == CKPT_OK) st = add2d(s, "model/b", CKPT_DTYPE_BFLOAT16, gb, &b, err);
    if (st == CKPT_OK) st = add2d(s, "model/norm", CKPT_DTYPE_FLOAT16, gn, &norm, err);
    if (st == CKPT_OK && flush_each) st = ckpt_save_mpi_flush(s, err);
    int64_t step = 12345678901;
    if (st == CKPT_OK) {
        ckpt_save_key k = {.path = "optim/state/model.w/step"};
        ckpt_save_tensor t = {.dtype = CKPT_DTYPE_INT64, .data = &step, .data_size = 8};
        st = ckpt_save_mpi_add_tensor(s, &k, &t, err);
    }
    /* a failed add poisons the handle; commit still takes part and agrees on the error */
    ckpt_error e2 = {0};
    ckpt_status cs = ckpt_save_mpi_commit(s, &e2);
    if (cs != CKPT_OK) {
        st = cs;
        *err = e2;
    }
    ckpt_save_mpi_stats stats;
    ckpt_save_mpi_get_stats(s, &stats);
    if (st == CKPT_OK)
        fprintf(stderr, "rank %d: added %llu stored %llu file %llu\n", rank,
                (unsigned long long)stats.bytes_added, (unsigned long long)stats.bytes_stored,
                (unsigned long long)stats.file_bytes);
    ckpt_save_mpi_free(s);
    free(w.buf), free(big.buf), free(b.buf), free(norm.buf);
    return st;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    ckpt_error err = {0};
    ckpt_status st = run(rank, world, argc, argv, &err);
    if (st == CKPT_OK)
        printf("rank %d: ok\n", rank);
    else
        printf("rank %d: error: %s\n", rank, err.message);
    fflush(stdout);
    MPI_Finalize();
    return st == CKPT_OK ? 0 : 1;
}
