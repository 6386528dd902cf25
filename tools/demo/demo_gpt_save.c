/* demo_gpt_save.c — writes a GPT-style model and its AdamW state as a PyTorch Distributed
 * Checkpoint with the collective saver, each MPI rank holding its FSDP-style Shard(0) piece
 * (torch.chunk boundaries) of every parameter and optimizer moment, the 0-d `step` tensors and
 * the param_groups values on every rank (stored once).  Keys follow torch's
 * get_state_dict(model, optimizer) flattened by dcp.save: model.<fqn>,
 * optim.state.<fqn>.{step,exp_avg,exp_avg_sq}, optim.param_groups.0.{lr,...,params}.
 *
 * Values are deterministic: element i of the entry with seed s is v(s, i) =
 * (top 24 bits of splitmix64(s << 40 ^ i)) / 2^24 - 0.5, times 0.04 for parameters, 0.001 for
 * exp_avg; exp_avg_sq is v^2 * 1e-4; step = 100.  Seeds are the entry's position in the list
 * below (model entries 1.., their moments 1000 + 2k, 1001 + 2k).
 *
 * Usage: mpirun -np N demo_gpt_save PARENT STEP [--layers L] [--dim D] [--vocab V]
 *        [--no-fsync]    (defaults 8, 512, 8192: 33.6 M parameters, 403 MB with AdamW)
 * Writes PARENT/STEP and points PARENT/latest at it; rank 0 prints a summary. */
#include "ckpt_save_mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct param {
    char fqn[96];
    int ndim;
    int64_t shape[2];
} param;

static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static float v(uint64_t seed, uint64_t i) {
    return (float)(splitmix64(seed << 40 ^ i) >> 40) / 16777216.0f - 0.5f;
}

static size_t model_params(param *p, int layers, int64_t d, int64_t vocab) {
    size_t n = 0;
    p[n++] = (param){"tok_embeddings.weight", 2, {vocab, d}};
    static const char *attn[] = {"wq", "wk", "wv", "wo"};
    for (int l = 0; l < layers; l++) {
        for (int k = 0; k < 4; k++) {
            p[n] = (param){"", 2, {d, d}};
            snprintf(p[n++].fqn, sizeof p->fqn, "layers.%d.attention.%s.weight", l, attn[k]);
        }
        p[n] = (param){"", 1, {d, 0}};
        snprintf(p[n++].fqn, sizeof p->fqn, "layers.%d.attention_norm.weight", l);
        p[n] = (param){"", 2, {4 * d, d}};
        snprintf(p[n++].fqn, sizeof p->fqn, "layers.%d.feed_forward.w1.weight", l);
        p[n] = (param){"", 2, {d, 4 * d}};
        snprintf(p[n++].fqn, sizeof p->fqn, "layers.%d.feed_forward.w2.weight", l);
        p[n] = (param){"", 1, {d, 0}};
        snprintf(p[n++].fqn, sizeof p->fqn, "layers.%d.ffn_norm.weight", l);
    }
    p[n++] = (param){"norm.weight", 1, {d, 0}};
    p[n++] = (param){"output.weight", 2, {vocab, d}};
    return n;
}

/* kind 0: parameter, 1: exp_avg, 2: exp_avg_sq, over the box [off0, off0 + rows) x all. */
static float *fill(const param *p, uint64_t seed, int kind, int64_t off0, int64_t rows) {
    int64_t cols = p->ndim == 2 ? p->shape[1] : 1;
    size_t n = (size_t)(rows * cols);
    float *b = malloc(n ? n * sizeof *b : 1);
    if (!b) return NULL;
    uint64_t base = (uint64_t)(off0 * cols);
    for (size_t i = 0; i < n; i++) {
        float x = v(seed, base + i);
        b[i] = kind == 0 ? x * 0.04f : kind == 1 ? x * 0.001f : x * x * 1e-4f;
    }
    return b;
}

static ckpt_status add_values(ckpt_save_mpi *s, const param *ps, size_t np, ckpt_error *err) {
    struct {
        const char *name;
        ckpt_save_value *v;
    } g[] = {
        {"lr", ckpt_save_value_float(3e-4)},
        {"betas", ckpt_save_value_tuple()},
        {"eps", ckpt_save_value_float(1e-8)},
        {"weight_decay", ckpt_save_value_float(0.1)},
        {"amsgrad", ckpt_save_value_bool(false)},
        {"foreach", ckpt_save_value_none()},
        {"maximize", ckpt_save_value_bool(false)},
        {"capturable", ckpt_save_value_bool(false)},
        {"differentiable", ckpt_save_value_bool(false)},
        {"fused", ckpt_save_value_none()},
        {"decoupled_weight_decay", ckpt_save_value_bool(true)},
        {"params", ckpt_save_value_list()},
    };
    ckpt_save_value_append(g[1].v, ckpt_save_value_float(0.9));
    ckpt_save_value_append(g[1].v, ckpt_save_value_float(0.95));
    for (size_t i = 0; i < np; i++)
        ckpt_save_value_append(g[11].v, ckpt_save_value_string(ps[i].fqn));
    ckpt_status st = CKPT_OK;
    for (size_t i = 0; i < sizeof g / sizeof *g; i++) {
        char path[128];
        snprintf(path, sizeof path, "optim/param_groups/0/%s", g[i].name);
        ckpt_save_key k = {.path = path};
        if (st == CKPT_OK)
            st = ckpt_save_mpi_add_value(s, &k, g[i].v, err);
        else
            ckpt_save_value_free(g[i].v);
    }
    return st;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (argc < 3) {
        if (rank == 0) fprintf(stderr, "usage: demo_gpt_save PARENT STEP [--layers L] ...\n");
        MPI_Finalize();
        return 2;
    }
    int layers = 8;
    int64_t d = 512, vocab = 8192;
    ckpt_save_options o = {0};
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--layers") && i + 1 < argc)
            layers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dim") && i + 1 < argc)
            d = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--vocab") && i + 1 < argc)
            vocab = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--no-fsync"))
            o.no_fsync = true;
    }
    if (layers < 0 || layers > 1000 || d < 1 || d > 65536 || vocab < 1 || vocab > 1 << 24) {
        if (rank == 0) fprintf(stderr, "demo_gpt_save: bad size\n");
        MPI_Finalize();
        return 2;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", argv[1], argv[2]);
    param *ps = calloc(8 * (size_t)layers + 3, sizeof *ps);
    size_t np = ps ? model_params(ps, layers, d, vocab) : 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ckpt_error err = {0};
    ckpt_save_mpi *s = NULL;
    ckpt_save_mpi_options mo = {.set_latest = true};
    ckpt_status st = ckpt_save_mpi_begin(MPI_COMM_WORLD, dir, &o, &mo, &s, &err);
    float zero_step = 100.0f;
    /* model entries, then per parameter its AdamW state, written one parameter at a time
     * (a flush after each, so a rank holds at most one parameter's three pieces) */
    for (int pass = 0; pass < 2 && st == CKPT_OK; pass++) {
        if (pass == 1) { /* every rank is here (statuses agreed so far): flush agrees */
            st = add_values(s, ps, np, &err);
            ckpt_status fs = ckpt_save_mpi_flush(s, &err);
            if (st == CKPT_OK) st = fs;
        }
        for (size_t i = 0; i < np && st == CKPT_OK; i++) {
            const param *p = &ps[i];
            int64_t start[2] = {0, 0}, count[2] = {0, 0};
            ckpt_shard_box(p->ndim, p->shape, 0, (uint32_t)world, (uint32_t)rank, start, count);
            int64_t cols = p->ndim == 2 ? p->shape[1] : 1;
            float *bufs[3] = {0};
            int kinds = pass == 0 ? 1 : 3;
            for (int k = 0; k < kinds && st == CKPT_OK; k++) {
                int kind = pass == 0 ? 0 : k;
                if (pass == 1 && k == 0) { /* step: a 0-d float32 every rank holds */
                    char path[160];
                    snprintf(path, sizeof path, "optim/state/%s/step", p->fqn);
                    ckpt_save_key key = {.path = path};
                    ckpt_save_tensor t = {
                        .dtype = CKPT_DTYPE_FLOAT32, .data = &zero_step, .data_size = 4};
                    st = ckpt_save_mpi_add_tensor(s, &key, &t, &err);
                    continue;
                }
                uint64_t seed = pass == 0 ? 1 + i : 1000 + 2 * i + (uint64_t)(kind - 1);
                bufs[k] = fill(p, seed, kind, start[0], count[0]);
                if (!bufs[k]) {
                    fprintf(stderr, "rank %d: out of memory\n", rank);
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
                char path[160];
                if (pass == 0)
                    snprintf(path, sizeof path, "model/%s", p->fqn);
                else
                    snprintf(path, sizeof path, "optim/state/%s/%s", p->fqn,
                             kind == 1 ? "exp_avg" : "exp_avg_sq");
                ckpt_save_key key = {.path = path};
                ckpt_save_tensor t = {.dtype = CKPT_DTYPE_FLOAT32,
                                      .ndim = p->ndim,
                                      .global_shape = p->shape,
                                      .offsets = start,
                                      .sizes = count,
                                      .data = bufs[k],
                                      .data_size = (size_t)(count[0] * cols) * 4};
                st = ckpt_save_mpi_add_tensor(s, &key, &t, &err);
            }
            ckpt_status fs = ckpt_save_mpi_flush(s, &err); /* collective: every rank calls it */
            if (st == CKPT_OK) st = fs;
            for (int k = 0; k < 3; k++)
                free(bufs[k]);
        }
    }
    if (s) {
        ckpt_status cs = ckpt_save_mpi_commit(s, &err);
        if (st == CKPT_OK) st = cs;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ckpt_save_mpi_stats stats = {0};
    if (s) ckpt_save_mpi_get_stats(s, &stats);
    uint64_t stored = 0;
    MPI_Reduce(&stats.bytes_stored, &stored, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    ckpt_save_mpi_free(s);
    free(ps);
    if (rank == 0) {
        if (st == CKPT_OK)
            printf("saved %s: %zu parameters + AdamW state, %.1f MB of tensors from %d ranks in "
                   "%.2f s\n",
                   dir, np, (double)stored / 1e6, world,
                   (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
        else
            fprintf(stderr, "demo_gpt_save: %s\n", err.message);
    }
    MPI_Finalize();
    return st == CKPT_OK ? 0 : 1;
}
