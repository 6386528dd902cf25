/* test_mcore_flat.c — Megatron's N-D flattened tensors (src/index/mcore_flat.c) on the
 * `megatron_flat` fixture, written by megatron-core 0.15.3 with the distributed optimizer's
 * `flattened_range` states: every region of every tensor against megatron-core's own load
 * (the reference), then copies whose `.metadata` is damaged in one way each, patched in
 * place: each defect fails its tensor alone with a message saying what is wrong, the other
 * tensors still read bit-exactly. */
#include "fixture_copy.h"
#include "test_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIXTURE "megatron_flat"
#define W "optimizer.state.exp_avg.decoder.weight"               /* [8, 6], 2 cells */
#define FC "optimizer.state.exp_avg_sq.decoder.layers.fc.weight" /* [3, 4, 6], 6 cells */
#define EMBED "optimizer.state.exp_avg.embedding.weight"         /* [4, 4], 1 cell */
#define BIAS "optimizer.state.exp_avg.decoder.bias"              /* [10] bf16 */

static const ref_entry *ref_find(const ref_fixture *f, const char *key) {
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->entries[i].key, key)) return &f->entries[i];
    cr_assert_fail("'%s' is not in the reference", key);
    return NULL;
}

/* Copies box [lo, hi) of a C-order tensor (shape, itemsize) into dst, C order. */
static void ref_region(const uint8_t *src, const int64_t *shape, int nd, size_t isz,
                       const int64_t *lo, const int64_t *hi, uint8_t *dst) {
    int64_t idx[64];
    memcpy(idx, lo, (size_t)nd * sizeof *idx);
    size_t n = 0;
    for (;;) {
        int64_t off = 0;
        for (int d = 0; d < nd; d++)
            off = off * shape[d] + idx[d];
        memcpy(dst + n * isz, src + (size_t)off * isz, isz);
        n++;
        int d = nd - 1;
        while (d >= 0 && ++idx[d] == hi[d]) {
            idx[d] = lo[d];
            d--;
        }
        if (d < 0) return;
    }
}

/* Reads every box [lo, hi) with lo < hi of `key` and compares it with the reference;
 * returns how many. */
static size_t every_region(ckpt_reader *r, const ref_fixture *f, const char *key) {
    const ref_entry *re = ref_find(f, key);
    const ckpt_entry *e = ckpt_reader_find(r, key);
    cr_assert(e);
    int nd = re->ndim;
    uint64_t numel = 1;
    for (int d = 0; d < nd; d++)
        numel *= (uint64_t)re->shape[d];
    size_t isz = numel ? re->nbytes / numel : 1;
    uint8_t *want = malloc(re->nbytes + 1), *got = malloc(re->nbytes + 1);
    int64_t lo[64] = {0}, hi[64];
    size_t count = 0;
    /* odometer over (lo[d], hi[d]) pairs with 0 <= lo < hi <= shape */
    for (int d = 0; d < nd; d++)
        hi[d] = 1;
    for (;;) {
        uint64_t n = 1;
        int64_t ext[64];
        for (int d = 0; d < nd; d++) {
            ext[d] = hi[d] - lo[d];
            n *= (uint64_t)ext[d];
        }
        ref_region(f->bin + re->offset, re->shape, nd, isz, lo, hi, want);
        ckpt_error err = {0};
        ckpt_status s = ckpt_read_region(r, e, lo, ext, got, n * isz, &err);
        cr_assert_eq(s, CKPT_OK, "'%s': %s", key, err.message);
        cr_assert(memcmp(got, want, n * isz) == 0, "'%s': region from [%lld, ...) differs", key,
                  (long long)lo[0]);
        count++;
        int d = nd - 1;
        for (; d >= 0; d--) { /* next (lo, hi) in dimension d */
            if (hi[d] < re->shape[d]) {
                hi[d]++;
                break;
            }
            if (lo[d] + 1 < re->shape[d]) {
                lo[d]++;
                hi[d] = lo[d] + 1;
                break;
            }
            lo[d] = 0;
            hi[d] = 1;
        }
        if (d < 0) break;
    }
    free(want);
    free(got);
    return count;
}

Test(mcore_flat, every_region_reads_like_megatron, .timeout = 120) {
    ref_fixture f;
    cr_assert_eq(ref_load(FIXTURE, &f), 0, "fixture %s missing in %s", FIXTURE, ref_fixtures_dir());
    ckpt_reader *r = NULL;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_reader_open(f.ckpt_dir, NULL, &r, &err), CKPT_OK, "%s", err.message);
    ckpt_reader_info in;
    ckpt_reader_get_info(r, &in);
    cr_expect(in.has_mcore_data);
    cr_expect_eq(in.num_mcore_flattened, 4);
    for (size_t i = 0; i < f.n; i++) {
        const ref_entry *re = &f.entries[i];
        const ckpt_entry *e = ckpt_reader_find(r, re->key);
        cr_assert(e, "'%s' is not indexed", re->key);
        cr_expect_null(ckpt_entry_problem(e), "'%s': %s", re->key, ckpt_entry_problem(e));
        cr_assert_eq(ckpt_entry_ndim(e), re->ndim, "'%s': the original shape's rank", re->key);
        cr_expect(memcmp(ckpt_entry_shape(e), re->shape, (size_t)re->ndim * 8) == 0,
                  "'%s' is not in its original shape", re->key);
        cr_expect_eq(ckpt_entry_check_layout(e, &err), CKPT_OK, "'%s': %s", re->key, err.message);
        for (size_t k = 0; k < ckpt_entry_num_chunks(e); k++)
            cr_expect_eq(ckpt_entry_check_chunk(r, e, k, &err), CKPT_OK, "'%s' chunk %zu: %s",
                         re->key, k, err.message);
    }
    /* (8·9/2)(6·7/2) + (3·4/2)(4·5/2)(6·7/2) + (10·11/2) + (4·5/2)² regions */
    size_t n = every_region(r, &f, W) + every_region(r, &f, FC) + every_region(r, &f, BIAS) +
               every_region(r, &f, EMBED);
    cr_expect_eq(n, 756u + 1260u + 55u + 100u);
    /* pieces split into boxes: 2 pieces of 10 and 14 in each [4, 6] cell -> 4 boxes a cell */
    cr_expect_eq(ckpt_entry_num_chunks(ckpt_reader_find(r, W)), 8u);
    cr_expect_eq(ckpt_entry_num_chunks(ckpt_reader_find(r, EMBED)), 1u);
    uint64_t bad = 99;
    cr_expect_eq(ckpt_reader_check_ranges(r, NULL, NULL, &bad), CKPT_OK);
    cr_expect_eq(bad, 0);
    ckpt_reader_free(r);
    ref_free(&f);
}

/* Patches the first `from` after the first `anchor` in the copy's .metadata (same length). */
static void patch_after(const fx_copy *t, const char *anchor, const void *from, const void *to,
                        size_t len) {
    fx_copy_patch_after(t, ".metadata", anchor, from, to, len);
}

static void damaged(const char *anchor, const char *from, const char *to, size_t len,
                    const char *key, const char *const *words) {
    fx_copy t;
    fx_copy_make(&t, FIXTURE);
    patch_after(&t, anchor, from, to, len);
    fx_expect_entry_problem(&t, key, words);
    fx_copy_remove(&t);
}

/* The pickle opcodes of the original shapes in mcore_data: BININT1 n (K n), TUPLE1/2/3
 * (\x85/\x86/\x87); "(1" (MARK, POP_MARK) pushes nothing and keeps lengths equal. */
Test(mcore_flat, original_dimension_not_a_multiple_of_the_grid) {
    damaged("mcore_data", "K\x08K\x06\x86", "K\x07K\x06\x86", 5, W,
            (const char *[]){"mcore_data", "not a multiple", "(7)", NULL});
}

Test(mcore_flat, grid_cell_size_differs_from_the_stored_pieces) {
    damaged("mcore_data", "K\x08K\x06\x86", "K\x08K\x07\x86", 5, W,
            (const char *[]){"holds 28 elements", "last dimension 24", NULL});
}

Test(mcore_flat, original_shape_of_the_wrong_rank) {
    damaged("mcore_data", "K\x03K\x04K\x06\x87", "K\x03K\x18\x86(1", 7, FC,
            (const char *[]){"original shape of 2 dimensions", "stored tensor of 4", NULL});
}

Test(mcore_flat, original_shape_not_ints) {
    damaged("mcore_data", "K\x04K\x04\x86", "](1N\x86", 5, EMBED,
            (const char *[]){"not a tuple of ints", NULL});
}

Test(mcore_flat, stored_chunk_not_a_flat_piece) {
    /* the first chunk of W in state_dict_metadata: sizes (1, 1, 10) -> (2, 1, 10) */
    damaged(W, "K\x01K\x01K\x0a\x87", "K\x02K\x01K\x0a\x87", 7, W,
            (const char *[]){"stored chunk 0", "not a flat piece", NULL});
}

Test(mcore_flat, unknown_keys_in_mcore_data_are_ignored) {
    /* mcore_data naming a key the checkpoint lacks: ignored, nothing fails; the bias keeps
     * its stored form [2, 5], whose bytes are the original [10]'s in the same order */
    fx_copy t;
    fx_copy_make(&t, FIXTURE);
    patch_after(&t, "mcore_data", "exp_avg.decoder.bias", "exp_avg.decoder.Bias", 20);
    ckpt_reader *r = fx_copy_open_ok(&t);
    ckpt_reader_info in;
    ckpt_reader_get_info(r, &in);
    cr_expect_eq(in.num_mcore_flattened, 3);
    const ckpt_entry *e = ckpt_reader_find(r, BIAS);
    cr_assert(e);
    cr_expect_eq(ckpt_entry_ndim(e), 2);
    cr_expect_eq(fx_expect_reads(&t, r, NULL, CKPT_OK, NULL), t.ref.n);
    ckpt_reader_free(r);
    fx_copy_remove(&t);
}

Test(mcore_flat, repeated_key_in_mcore_data_keeps_the_last_value) {
    /* mcore_data's EMBED key is a memo reference (BINGET 250) to the string state_dict_metadata
     * stored; point it at W's key (BINGET 61): W is then given twice, (8, 6) and then EMBED's
     * (4, 4), and Python's dict keeps the last, which does not fit W's stored [2, 1, 24] */
    fx_copy t;
    fx_copy_make(&t, FIXTURE);
    patch_after(&t, "mcore_data", "h\xfa", "h\x3d", 2);
    fx_expect_entry_problem(&t, W, (const char *[]){"holds 8 elements", NULL});
    ckpt_reader *r = fx_copy_open_ok(&t);
    cr_expect_eq(ckpt_entry_ndim(ckpt_reader_find(r, EMBED)), 3, "EMBED keeps its stored form");
    ckpt_reader_free(r);
    fx_copy_remove(&t);
}

Test(mcore_flat, overlapping_pieces) {
    /* W's second piece of cell 0, elements [10, 24), moved to start at 9: it overlaps the
     * first, [0, 10) (a hostile pickle could repeat one piece many times for a few bytes) */
    damaged(W, "K\x00K\x00K\x0a\x87", "K\x00K\x00K\x09\x87", 7, W,
            (const char *[]){"stored chunks 0 and 1 overlap", NULL});
}

Test(mcore_flat, rank_local_files_disagree_on_the_original_shape) {
    /* the same metadata as two rank-local files, one of them giving W another shape */
    fx_copy t;
    fx_copy_make(&t, FIXTURE);
    char from[4096], to[4096];
    fx_copy_path(&t, ".metadata", from, sizeof from);
    fx_copy_path(&t, "__0.metadata", to, sizeof to);
    tu_copy_file(from, to);
    fx_copy_path(&t, "__1.metadata", to, sizeof to);
    cr_assert_eq(rename(from, to), 0);
    fx_copy_patch_after(&t, "__1.metadata", "mcore_data", "K\x08K\x06\x86", "K\x10K\x03\x86", 5);
    fx_expect_entry_problem(&t, W, (const char *[]){"disagree on the original shape", NULL});
    fx_copy_remove(&t);
}
