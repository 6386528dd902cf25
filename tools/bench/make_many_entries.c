/* make_many_entries.c — writes a checkpoint with many small entries for the listing benchmark
 * (bench_mount.py listing): P parameters named like a transformer's, each with its model
 * tensor and AdamW state (exp_avg, exp_avg_sq, a 0-d step), plus the param group's
 * hyper-parameters, saved by the C saver as one rank.  The mounted tree then has P files in
 * model/, P directories in optim/state/ with 3 files each: 5·P + 6 entries.
 *
 * usage: make_many_entries DIR P */
#include "ckpt_save.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(ckpt_status s, const ckpt_error *e, const char *what) {
    if (s == CKPT_OK) return;
    fprintf(stderr, "make_many_entries: %s: %s\n", what, e->message);
    exit(1);
}

static const char *const parts[] = {"attention.wq",    "attention.wk",    "attention.wv",
                                    "attention.wo",    "feed_forward.w1", "feed_forward.w2",
                                    "feed_forward.w3", "attention_norm"};

int main(int argc, char **argv) {
    if (argc != 3 || atol(argv[2]) < 1) {
        fprintf(stderr, "usage: make_many_entries DIR P\n");
        return 2;
    }
    long p = atol(argv[2]);
    ckpt_save_options o = {.no_fsync = true};
    ckpt_error err;
    ckpt_save_txn *t;
    check(ckpt_save_begin(argv[1], &o, &t, &err), &err, "begin");
    ckpt_save_file *f;
    check(ckpt_save_file_open(ckpt_save_txn_staging_dir(t), 0, &o, &f, &err), &err, "open");
    float data[16];
    for (int i = 0; i < 16; i++)
        data[i] = (float)i * 0.25f;
    float step = 1000;
    int64_t shape[2] = {4, 4};
    ckpt_save_tensor w = {.dtype = CKPT_DTYPE_FLOAT32,
                          .ndim = 2,
                          .global_shape = shape,
                          .data = data,
                          .data_size = sizeof data};
    ckpt_save_tensor s0 = {.dtype = CKPT_DTYPE_FLOAT32, .data = &step, .data_size = 4};
    static const char *const state[] = {"exp_avg", "exp_avg_sq", "step"};
    for (long i = 0; i < p; i++) {
        char fqn[96];
        snprintf(fqn, sizeof fqn, "layers.%ld.%s.weight", i / 8, parts[i % 8]);
        ckpt_save_elem me[2] = {{"model", 0}, {fqn, 0}};
        ckpt_save_key mk = {.elems = me, .nelems = 2};
        check(ckpt_save_file_add_tensor(f, &mk, &w, &err), &err, "model tensor");
        for (int k = 0; k < 3; k++) {
            ckpt_save_elem oe[4] = {{"optim", 0}, {"state", 0}, {fqn, 0}, {state[k], 0}};
            ckpt_save_key ok = {.elems = oe, .nelems = 4};
            check(ckpt_save_file_add_tensor(f, &ok, k == 2 ? &s0 : &w, &err), &err, "state");
        }
    }
    static const char *const hp[] = {"lr", "weight_decay", "eps"};
    const double hv[] = {3e-4, 0.1, 1e-8};
    for (int k = 0; k < 3; k++) {
        ckpt_save_elem e[4] = {{"optim", 0}, {"param_groups", 0}, {NULL, 0}, {hp[k], 0}};
        ckpt_save_key key = {.elems = e, .nelems = 4};
        ckpt_save_value *v = ckpt_save_value_float(hv[k]);
        check(ckpt_save_file_add_value(f, &key, v, 0, &err), &err, "value");
        ckpt_save_value_free(v);
    }
    ckpt_save_desc *d;
    check(ckpt_save_file_finish(f, &d, &err), &err, "finish");
    ckpt_save_file_free(f);
    check(ckpt_save_commit(t, (const ckpt_save_desc *const *)&d, 1, &err), &err, "commit");
    ckpt_save_desc_free(d);
    ckpt_save_txn_free(t);
    printf("%s: %ld parameters, %ld entries\n", argv[1], p, 4 * p + 3);
    return 0;
}
