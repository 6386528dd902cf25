/* save_driver.c — writes the saver's test checkpoint: three simulated ranks in one process
 * (sharded, replicated, empty and 0-d tensors in every dtype family, non-tensor values),
 * descriptions passed through encode/decode as a gather would, then commit, `latest` and
 * retention.  test_save.py regenerates the same values in Python and checks what the ckpt
 * reader and real torch load.
 *
 * usage: save_driver PARENT STEP [--keep N] [--strides] [--protocol5] [--many N]
 *                                  [--mini] [--seal] [--crash-before-commit]
 *                                  [--abort-before-commit]
 * --crash-before-commit: writes every data file and the staging .metadata, then SIGKILLs
 * itself before the rename.  --abort-before-commit: frees the transaction instead.
 *
 * Tensor contents: byte k of the global C-order buffer of tensor number `seed` is
 * (k * 131 + seed * 17 + 7) & 0xff (& 1 for bool). */
#include "ckpt_save.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NRANKS 3

typedef struct tspec {
    const char *path;
    ckpt_dtype dt;
    int ndim;
    int64_t shape[4];
    int seed;
} tspec;

static const tspec T[] = {
    {"model/layers.0.w", CKPT_DTYPE_FLOAT32, 2, {7, 5}, 1},
    {"model/layers.0.b", CKPT_DTYPE_BFLOAT16, 1, {5}, 2},
    {"model/norm", CKPT_DTYPE_FLOAT16, 1, {4}, 3},
    {"model/emb", CKPT_DTYPE_INT64, 2, {6, 4}, 4},
    {"model/mask", CKPT_DTYPE_BOOL, 2, {3, 3}, 5},
    {"model/f8", CKPT_DTYPE_FLOAT8_E4M3FN, 1, {8}, 6},
    {"optim/state/model.layers.0.w/step", CKPT_DTYPE_FLOAT32, 0, {0}, 7},
    {"model/empty", CKPT_DTYPE_FLOAT32, 2, {0, 3}, 8},
    {"model/f8b", CKPT_DTYPE_FLOAT8_E5M2, 2, {2, 3}, 9},
    {"model/u16", CKPT_DTYPE_UINT16, 1, {5}, 10},
};
#define NT (sizeof T / sizeof T[0])

static unsigned char *global_buf(const tspec *t, size_t *len) {
    size_t n = ckpt_dtype_itemsize(t->dt);
    for (int d = 0; d < t->ndim; d++)
        n *= (size_t)t->shape[d];
    unsigned char *b = malloc(n ? n : 1);
    if (!b) abort();
    for (size_t k = 0; k < n; k++) {
        unsigned v = (unsigned)((k * 131 + (size_t)t->seed * 17 + 7) & 0xff);
        b[k] = (unsigned char)(t->dt == CKPT_DTYPE_BOOL ? (v & 1) : v);
    }
    *len = n;
    return b;
}

/* Copies box [off, off+sz) of the C-order global buffer into dst (C order). */
static void extract(const unsigned char *g, const int64_t *shape, int nd, size_t isz,
                    const int64_t *off, const int64_t *sz, unsigned char *dst) {
    int64_t numel = 1;
    for (int d = 0; d < nd; d++)
        numel *= sz[d];
    if (numel == 0) return;
    int64_t idx[8] = {0};
    for (int64_t e = 0; e < numel; e++) {
        int64_t lin = 0;
        for (int d = 0; d < nd; d++)
            lin = lin * shape[d] + off[d] + idx[d];
        memcpy(dst + (size_t)e * isz, g + (size_t)lin * isz, isz);
        for (int d = nd - 1; d >= 0; d--) {
            if (++idx[d] < sz[d]) break;
            idx[d] = 0;
        }
    }
}

static void check(ckpt_status s, const ckpt_error *err, const char *what) {
    if (s == CKPT_OK) return;
    fprintf(stderr, "save_driver: %s: %s: %s\n", what, ckpt_strerror(s), err->message);
    exit(1);
}

static void piece(ckpt_save_file *f, const tspec *t, const int64_t *off, const int64_t *sz,
                  uint32_t replica_id) {
    size_t glen;
    unsigned char *g = global_buf(t, &glen);
    size_t isz = ckpt_dtype_itemsize(t->dt);
    int64_t zero[4] = {0};
    const int64_t *o = off ? off : zero, *z = sz ? sz : t->shape;
    size_t n = isz;
    for (int d = 0; d < t->ndim; d++)
        n *= (size_t)z[d];
    unsigned char *b = malloc(n ? n : 1);
    if (!b) abort();
    if (t->ndim == 0)
        memcpy(b, g, isz);
    else
        extract(g, t->shape, t->ndim, isz, o, z, b);
    ckpt_save_key key = {.path = t->path};
    ckpt_save_tensor ten = {.dtype = t->dt,
                            .ndim = t->ndim,
                            .global_shape = t->ndim ? t->shape : NULL,
                            .offsets = t->ndim ? o : NULL,
                            .sizes = t->ndim ? z : NULL,
                            .data = b,
                            .data_size = n,
                            .replica_id = replica_id};
    ckpt_error err;
    check(ckpt_save_file_add_tensor(f, &key, &ten, &err), &err, t->path);
    free(b);
    free(g);
}

static void value(ckpt_save_file *f, const char *path, ckpt_save_value *v, uint32_t replica) {
    ckpt_error err;
    ckpt_save_key key = {.path = path};
    if (!v) {
        fprintf(stderr, "save_driver: out of memory building %s\n", path);
        exit(1);
    }
    check(ckpt_save_file_add_value(f, &key, v, replica, &err), &err, path);
    ckpt_save_value_free(v);
}

static ckpt_save_value *betas(void) {
    ckpt_save_value *t = ckpt_save_value_tuple();
    ckpt_save_value_append(t, ckpt_save_value_float(0.9));
    if (ckpt_save_value_append(t, ckpt_save_value_float(0.999)) != CKPT_OK) {
        ckpt_save_value_free(t);
        return NULL;
    }
    return t;
}

static ckpt_save_value *cfg(void) {
    ckpt_save_value *d = ckpt_save_value_dict(), *l = ckpt_save_value_list(),
                    *inner = ckpt_save_value_dict();
    ckpt_status s = CKPT_OK;
    s |= ckpt_save_value_append(l, ckpt_save_value_int(1));
    s |= ckpt_save_value_append(l, ckpt_save_value_float(2.5));
    s |= ckpt_save_value_append(l, ckpt_save_value_string("x"));
    s |= ckpt_save_value_append(l, ckpt_save_value_none());
    s |= ckpt_save_value_append(l, ckpt_save_value_bool(true));
    s |= ckpt_save_value_set(inner, "d", ckpt_save_value_int(-5));
    s |= ckpt_save_value_set(inner, "big", ckpt_save_value_int(-(1LL << 40)));
    s |= ckpt_save_value_set(inner, "long_tuple", ckpt_save_value_tuple());
    s |= ckpt_save_value_set(d, "a", ckpt_save_value_int(1));
    s |= ckpt_save_value_set(d, "b", l);
    s |= ckpt_save_value_set(d, "c", inner);
    s |= ckpt_save_value_set(d, "flag", ckpt_save_value_bool(false));
    if (s != CKPT_OK) {
        ckpt_save_value_free(d);
        return NULL;
    }
    return d;
}

static ckpt_save_value *ints(void) {
    static const int64_t v[] = {0,          1,
                                255,        256,
                                65535,      65536,
                                -1,         -256,
                                2147483647, -2147483647 - 1,
                                2147483648, -2147483649,
                                INT64_MAX,  INT64_MIN,
                                1LL << 40,  -(1LL << 40),
                                128,        -128,
                                32768,      -32769};
    ckpt_save_value *l = ckpt_save_value_list();
    ckpt_status s = CKPT_OK;
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        s |= ckpt_save_value_append(l, ckpt_save_value_int(v[i]));
    /* a tuple longer than 3 (MARK ... TUPLE) and floats that need all 8 bytes */
    ckpt_save_value *t = ckpt_save_value_tuple();
    s |= ckpt_save_value_append(t, ckpt_save_value_float(-0.0));
    s |= ckpt_save_value_append(t, ckpt_save_value_float(1e300));
    s |= ckpt_save_value_append(t, ckpt_save_value_float(5e-324));
    s |= ckpt_save_value_append(t, ckpt_save_value_float(0.1));
    s |= ckpt_save_value_append(l, t);
    if (s != CKPT_OK) {
        ckpt_save_value_free(l);
        return NULL;
    }
    return l;
}

/* --many N: N value entries (dict batches beyond 1000 items, frames beyond 64 KiB) and a
 * tensor of N one-element chunks spread over the ranks (chunk lists beyond 1000). */
static void many(ckpt_save_file *f, uint32_t r, long n) {
    for (long i = 0; i < n; i++) {
        char path[64];
        snprintf(path, sizeof path, "many/v%ld", i);
        value(f, path, ckpt_save_value_int(i * 7), r);
    }
    int64_t shape[1] = {n};
    for (long i = 0; i < n; i++) {
        if (i % NRANKS != (long)r) continue;
        float x = (float)i * 0.25f;
        int64_t off[1] = {i}, sz[1] = {1};
        ckpt_save_key key = {.path = "many/t"};
        ckpt_save_tensor t = {.dtype = CKPT_DTYPE_FLOAT32,
                              .ndim = 1,
                              .global_shape = shape,
                              .offsets = off,
                              .sizes = sz,
                              .data = &x,
                              .data_size = 4};
        ckpt_error err;
        check(ckpt_save_file_add_tensor(f, &key, &t, &err), &err, "many/t");
    }
}

static void write_rank(const char *dir, uint32_t r, const ckpt_save_options *opts, long nmany,
                       void **enc, size_t *enc_len) {
    ckpt_error err;
    ckpt_save_file *f;
    check(ckpt_save_file_open(dir, r, opts, &f, &err), &err, "open data file");
    /* values first, as torch writes them; every rank passes the hyper-parameters */
    value(f, "optim/param_groups/0/lr", ckpt_save_value_float(0.001), r);
    value(f, "optim/param_groups/0/betas", betas(), r);
    value(f, "optim/param_groups/0/step", ckpt_save_value_int(12345678901LL), r);
    value(f, "optim/param_groups/0/name", ckpt_save_value_string("adamw \xc3\xbc"), r);
    ckpt_save_value *params = ckpt_save_value_list();
    ckpt_save_value_append(params, ckpt_save_value_string("model.layers.0.w"));
    ckpt_save_value_append(params, ckpt_save_value_string("model.layers.0.b"));
    value(f, "optim/param_groups/0/params", params, r);
    value(f, "misc/cfg", cfg(), r);
    value(f, "misc/ints", ints(), r);
    if (nmany > 0) many(f, r, nmany);
    if (r == 2) value(f, "misc/note", ckpt_save_value_string("written by rank 2 only"), 0);

    /* model/layers.0.w: Shard(0) over 3 ranks, torch.chunk split 3,3,1 */
    int64_t rows[3][2] = {{0, 3}, {3, 3}, {6, 1}};
    int64_t o0[2] = {rows[r][0], 0}, s0[2] = {rows[r][1], 5};
    piece(f, &T[0], o0, s0, 0);
    /* model/layers.0.b: replicated, stored by replica 0 (rank 0) only */
    piece(f, &T[1], NULL, NULL, r);
    /* model/norm: replicated, every rank stores it; .metadata keeps rank 0's copy */
    piece(f, &T[2], NULL, NULL, 0);
    /* model/emb: Shard(1) over ranks 0,1; rank 2 holds the empty shard at offset 4 */
    int64_t o3[2] = {0, r < 2 ? 2 * (int64_t)r : 4}, s3[2] = {6, r < 2 ? 2 : 0};
    piece(f, &T[3], o3, s3, 0);
    if (r == 1) piece(f, &T[4], NULL, NULL, 0); /* model/mask: rank 1 only */
    if (r != 1) {                               /* model/f8: halves on ranks 0 and 2 */
        int64_t o5[1] = {r == 0 ? 0 : 4}, s5[1] = {4};
        piece(f, &T[5], o5, s5, 0);
    }
    piece(f, &T[6], NULL, NULL, r);             /* 0-d step, replicated */
    if (r == 0) piece(f, &T[7], NULL, NULL, 0); /* empty tensor */
    if (r == 2) {
        piece(f, &T[8], NULL, NULL, 0);
        piece(f, &T[9], NULL, NULL, 0);
    }
    ckpt_save_desc *d;
    check(ckpt_save_file_finish(f, &d, &err), &err, "finish");
    ckpt_save_file_free(f);
    check(ckpt_save_desc_encode(d, enc, enc_len, &err), &err, "encode");
    ckpt_save_desc_free(d);
}

/* --mini: one rank, what `dcp.save({"lr": 0.01, "model": {"w": torch.arange(6.).reshape(2,3)}})`
 * writes, for a byte comparison with torch. */
static int mini(const char *final_dir, const ckpt_save_options *opts) {
    ckpt_error err;
    ckpt_save_txn *t;
    ckpt_save_file *f;
    ckpt_save_desc *d;
    check(ckpt_save_begin(final_dir, opts, &t, &err), &err, "begin");
    check(ckpt_save_file_open(ckpt_save_txn_staging_dir(t), 0, opts, &f, &err), &err, "open");
    value(f, "lr", ckpt_save_value_float(0.01), 0);
    float x[6] = {0, 1, 2, 3, 4, 5};
    int64_t sh[2] = {2, 3};
    ckpt_save_key k = {.path = "model/w"};
    ckpt_save_tensor ten = {.dtype = CKPT_DTYPE_FLOAT32,
                            .ndim = 2,
                            .global_shape = sh,
                            .data = x,
                            .data_size = sizeof x};
    check(ckpt_save_file_add_tensor(f, &k, &ten, &err), &err, "model/w");
    check(ckpt_save_file_finish(f, &d, &err), &err, "finish");
    ckpt_save_file_free(f);
    const ckpt_save_desc *ds[1] = {d};
    check(ckpt_save_commit(t, ds, 1, &err), &err, "commit");
    ckpt_save_txn_free(t);
    ckpt_save_desc_free(d);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: save_driver PARENT STEP [--keep N] [--strides] "
                        "[--crash-before-commit] [--abort-before-commit]\n");
        return 2;
    }
    const char *parent = argv[1], *step = argv[2];
    long keep = -1, nmany = 0;
    bool crash = false, abort_commit = false, mini_ckpt = false;
    ckpt_save_options opts = {.no_fsync = getenv("SAVE_DRIVER_FSYNC") == NULL};
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--keep") == 0 && i + 1 < argc)
            keep = atol(argv[++i]);
        else if (strcmp(argv[i], "--many") == 0 && i + 1 < argc)
            nmany = atol(argv[++i]);
        else if (strcmp(argv[i], "--seal") == 0)
            opts.seal = true;
        else if (strcmp(argv[i], "--mini") == 0)
            mini_ckpt = true;
        else if (strcmp(argv[i], "--protocol5") == 0)
            opts.metadata_protocol = 5;
        else if (strcmp(argv[i], "--strides") == 0)
            opts.tensor_properties_strides = true;
        else if (strcmp(argv[i], "--crash-before-commit") == 0)
            crash = true;
        else if (strcmp(argv[i], "--abort-before-commit") == 0)
            abort_commit = true;
        else {
            fprintf(stderr, "save_driver: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    char final_dir[4096];
    snprintf(final_dir, sizeof final_dir, "%s/%s", parent, step);
    if (mini_ckpt) return mini(final_dir, &opts);
    ckpt_error err;
    ckpt_save_txn *txn;
    check(ckpt_save_begin(final_dir, &opts, &txn, &err), &err, "begin");
    const char *staging = ckpt_save_txn_staging_dir(txn);

    void *enc[NRANKS];
    size_t enc_len[NRANKS];
    for (uint32_t r = 0; r < NRANKS; r++)
        write_rank(staging, r, &opts, nmany, &enc[r], &enc_len[r]);
    /* "gather": decode in reverse order, the metadata writer sorts by rank */
    ckpt_save_desc *descs[NRANKS];
    for (int r = NRANKS - 1; r >= 0; r--) {
        check(ckpt_save_desc_decode(enc[r], enc_len[r], &descs[NRANKS - 1 - r], &err), &err,
              "decode");
        free(enc[r]);
    }
    if (crash) {
        check(ckpt_save_write_metadata(staging, (const ckpt_save_desc *const *)descs, NRANKS, &opts,
                                       &err),
              &err, "metadata");
        fflush(NULL);
        raise(SIGKILL);
    }
    if (abort_commit) {
        for (int r = 0; r < NRANKS; r++)
            ckpt_save_desc_free(descs[r]);
        ckpt_save_txn_free(txn);
        return 0;
    }
    ckpt_status s = ckpt_save_commit(txn, (const ckpt_save_desc *const *)descs, NRANKS, &err);
    for (int r = 0; r < NRANKS; r++)
        ckpt_save_desc_free(descs[r]);
    ckpt_save_txn_free(txn);
    check(s, &err, "commit");
    check(ckpt_save_set_latest(parent, step, &opts, &err), &err, "latest");
    if (keep >= 0) {
        size_t removed;
        check(ckpt_save_retain(parent, (size_t)keep, step, &removed, &err), &err, "retain");
        printf("removed %zu\n", removed);
    }
    printf("%s\n", final_dir);
    return 0;
}
