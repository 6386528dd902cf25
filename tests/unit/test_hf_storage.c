/* test_hf_storage.c — HuggingFace safetensors storage (src/index/hf_storage.c) with damage:
 * copies of two torch-written fixtures (hf_full: two files and model.safetensors.index.json;
 * hf_sharded: three ranks' `shard-*` files with DCP_SHARDING_INFO), damaged at run time in
 * one way each.  Defects of a whole file fail the open naming the file; defects of one
 * tensor fail that tensor only, every other tensor still reading bit-exactly what torch read
 * (the fixture's reference). */
#include "fixture_copy.h"
#include "test_util.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------ tests */

Test(hf_storage, intact_copies_read_like_torch) {
    const char *names[] = {"hf_full", "hf_sharded"};
    for (size_t i = 0; i < 2; i++) {
        fx_copy t;
        fx_copy_make(&t, names[i]);
        ckpt_reader *r = fx_copy_open_ok(&t);
        ckpt_reader_info in;
        ckpt_reader_get_info(r, &in);
        cr_expect(in.hf_storage);
        cr_expect_eq(in.num_metadata_files, 0);
        cr_expect_eq(ckpt_reader_num_entries(r), t.ref.n);
        cr_expect_eq(in.num_ranks, i == 0 ? 0u : 3u);
        uint64_t bad = 99;
        cr_expect_eq(ckpt_reader_check_ranges(r, NULL, NULL, &bad), CKPT_OK);
        cr_expect_eq(bad, 0);
        cr_expect_eq(fx_expect_reads(&t, r, NULL, CKPT_OK, NULL), t.ref.n);
        ckpt_reader_free(r);
        fx_copy_remove(&t);
    }
}

Test(hf_storage, index_json_names_a_missing_file) {
    fx_copy t;
    fx_copy_make(&t, "hf_full");
    fx_copy_unlink(&t, "model-00002-of-00002.safetensors");
    /* torch's reader would silently drop the tensors of that file */
    fx_expect_open_fails(&t, CKPT_E_NOTFOUND,
                         (const char *[]){"model.safetensors.index.json",
                                          "model-00002-of-00002.safetensors", "missing", NULL});
    fx_copy_remove(&t);
}

/* hf_full's index json, with model.scalar mapped to `file` (as long as its real file's name). */
static void remap_scalar(const fx_copy *t, const char *file) {
    char to[128];
    snprintf(to, sizeof to, "\"model.scalar\": \"%s\"", file);
    fx_copy_patch(t, "model.safetensors.index.json",
                  "\"model.scalar\": \"model-00002-of-00002.safetensors\"", to);
}

Test(hf_storage, index_json_maps_a_tensor_to_the_wrong_file) {
    fx_copy t;
    fx_copy_make(&t, "hf_full");
    remap_scalar(&t, "model-00001-of-00002.safetensors");
    fx_expect_open_fails(&t, CKPT_E_FORMAT,
                         (const char *[]){"model.scalar", "model-00001-of-00002.safetensors",
                                          "does not hold it", NULL});
    fx_copy_remove(&t);
}

Test(hf_storage, index_json_limits_the_files) {
    /* a hub folder may hold other *.safetensors beside the indexed ones (an fp16 variant);
     * as transformers, only the files the index names are read */
    fx_copy t;
    fx_copy_make(&t, "hf_full");
    char from[4096], to[4096];
    fx_copy_path(&t, "model-00001-of-00002.safetensors", from, sizeof from);
    fx_copy_path(&t, "model-00001-of-00002.fp16.safetensors", to, sizeof to);
    tu_copy_file(from, to);
    fx_copy_patch(&t, "model-00001-of-00002.fp16.safetensors", "\"F32\"", "\"I32\"");
    ckpt_reader *r = fx_copy_open_ok(&t);
    cr_expect_eq(ckpt_reader_num_files(r), 2);
    cr_expect_eq(fx_expect_reads(&t, r, NULL, CKPT_OK, NULL), t.ref.n);
    ckpt_reader_free(r);
    /* without the index every file counts, and the two disagree on a dtype */
    fx_copy_unlink(&t, "model.safetensors.index.json");
    r = fx_copy_open_ok(&t);
    cr_expect_eq(ckpt_reader_num_files(r), 3);
    cr_expect(ckpt_entry_problem(ckpt_reader_find(r, "model.dtypes.float32")));
    ckpt_reader_free(r);
    fx_copy_remove(&t);
}

Test(hf_storage, index_json_path_traversal_is_not_followed) {
    fx_copy t;
    fx_copy_make(&t, "hf_full");
    /* a decoy beside the copy that a reader following the name would find */
    char decoy[4096], from[4096];
    snprintf(decoy, sizeof decoy, "%s/xx-00002-of-00002.safetensors", t.root);
    fx_copy_path(&t, "model-00002-of-00002.safetensors", from, sizeof from);
    tu_copy_file(from, decoy);
    remap_scalar(&t, "../xx-00002-of-00002.safetensors");
    fx_expect_open_fails(&t, CKPT_E_FORMAT,
                         (const char *[]){"model.scalar", "../xx-00002-of-00002.safetensors",
                                          "path traversal refused", NULL});
    fx_copy_remove(&t);
}

Test(hf_storage, missing_shard_leaves_a_gap) {
    fx_copy t;
    fx_copy_make(&t, "hf_sharded");
    fx_copy_unlink(&t, "shard-00002-model-00001-of-00001.safetensors");
    ckpt_reader *r = fx_copy_open_ok(&t); /* no index json: nothing says the file existed */
    /* every sharded tensor lost rank 1's rows or columns; model.ids was all in that file (as
     * torch's reader, the index cannot know it existed), model.scale is in shard 3 */
    const char *gone[] = {"model.ids", NULL};
    cr_expect_null(ckpt_reader_find(r, "model.ids"));
    const char *bad[] = {"model.layers.0.attention.wq.weight",
                         "model.layers.0.attention.wo.weight",
                         "model.layers.0.norm.weight",
                         "model.embed.weight",
                         "model.head.weight",
                         NULL};
    for (size_t i = 0; bad[i]; i++) {
        ckpt_error err = {0};
        cr_expect_eq(ckpt_entry_check_layout(ckpt_reader_find(r, bad[i]), &err), CKPT_E_FORMAT,
                     "%s: layout should show the gap", bad[i]);
        expect_has(err.message, bad[i]);
    }
    cr_expect_eq(fx_expect_reads(&t, r, bad, CKPT_E_FORMAT, gone), t.ref.n - 6);
    ckpt_reader_free(r);
    fx_copy_remove(&t);
}

Test(hf_storage, truncated_data_section_fails_only_the_cut_tensors) {
    fx_copy t;
    fx_copy_make(&t, "hf_sharded");
    char p[4096];
    fx_copy_path(&t, "shard-00001-model-00001-of-00001.safetensors", p, sizeof p);
    struct stat st;
    cr_assert_eq(stat(p, &st), 0);
    cr_assert_eq(truncate(p, st.st_size - 1), 0); /* the last byte of the last tensor */
    ckpt_reader *r = fx_copy_open_ok(&t);
    uint64_t nbad = 0;
    cr_expect_eq(ckpt_reader_check_ranges(r, NULL, NULL, &nbad), CKPT_E_FORMAT);
    cr_expect_eq(nbad, 1);
    /* which tensor is last in the file: the one whose chunk there ends at the old size */
    const char *last = NULL;
    for (size_t i = 0; i < ckpt_reader_num_entries(r) && !last; i++) {
        const ckpt_entry *e = ckpt_reader_entry(r, i);
        for (size_t k = 0; k < ckpt_entry_num_chunks(e); k++) {
            ckpt_chunk_info ci;
            cr_assert_eq(ckpt_entry_chunk(e, k, &ci), CKPT_OK);
            if (ci.file_id >= 0 && ci.file_offset + ci.length == (uint64_t)st.st_size &&
                strstr(ckpt_reader_file_name(r, (uint32_t)ci.file_id), "shard-00001"))
                last = ckpt_entry_key(e);
        }
    }
    cr_assert(last, "no chunk ends at the end of shard-00001");
    const char *bad[] = {last, NULL};
    cr_expect_eq(fx_expect_reads(&t, r, bad, CKPT_E_RANGE, NULL), t.ref.n - 1);
    ckpt_reader_free(r);
    fx_copy_remove(&t);
}

Test(hf_storage, truncated_header_fails_the_open_naming_the_file) {
    fx_copy t;
    fx_copy_make(&t, "hf_sharded");
    char p[4096];
    fx_copy_path(&t, "shard-00003-model-00001-of-00001.safetensors", p, sizeof p);
    cr_assert_eq(truncate(p, 100), 0);
    fx_expect_open_fails(&t, CKPT_E_RANGE,
                         (const char *[]){"shard-00003-model-00001-of-00001.safetensors", NULL});
    fx_copy_remove(&t);
}

Test(hf_storage, sharding_info_that_is_not_json) {
    fx_copy t;
    fx_copy_make(&t, "hf_sharded");
    /* inside the DCP_SHARDING_INFO string: still a valid header, no longer valid inner JSON */
    fx_copy_patch(&t, "shard-00002-model-00001-of-00001.safetensors", "\\\"saved_offsets\\\": [",
                  "\\\"saved_offsets\\\": (");
    fx_expect_open_fails(&t, CKPT_E_FORMAT,
                         (const char *[]){"shard-00002-model-00001-of-00001.safetensors",
                                          "DCP_SHARDING_INFO", NULL});
    fx_copy_remove(&t);
}

Test(hf_storage, sharding_info_without_a_tensor) {
    fx_copy t;
    fx_copy_make(&t, "hf_sharded");
    fx_copy_patch(&t, "shard-00002-model-00001-of-00001.safetensors", "model.head.weight\\\"",
                  "model.heax.weight\\\"");
    fx_expect_entry_problem(
        &t, "model.head.weight",
        (const char *[]){"shard-00002-model-00001-of-00001.safetensors", "saved_offsets", NULL});
    fx_copy_remove(&t);
}

Test(hf_storage, files_disagree_on_a_dtype) {
    fx_copy t;
    fx_copy_make(&t, "hf_sharded");
    fx_copy_patch(&t, "shard-00002-model-00001-of-00001.safetensors", "\"F16\"", "\"I16\"");
    fx_expect_entry_problem(&t, "model.head.weight", (const char *[]){"I16", "float16", NULL});
    fx_copy_remove(&t);
}

Test(hf_storage, hostile_header_length) {
    fx_copy t;
    fx_copy_make(&t, "hf_sharded");
    char p[4096];
    fx_copy_path(&t, "evil.safetensors", p, sizeof p);
    uint8_t head[16] = {0, 0, 0, 0, 0, 1, 0, 0, '{', '}'}; /* N = 2^40 */
    tu_write_file(p, head, sizeof head);
    fx_expect_open_fails(&t, CKPT_E_LIMIT, (const char *[]){"evil.safetensors", "header", NULL});
    fx_copy_remove(&t);
}

Test(hf_storage, no_safetensors_file_is_no_checkpoint) {
    fx_copy t;
    fx_copy_make(&t, "hf_full");
    fx_copy_unlink(&t, "model-00001-of-00002.safetensors");
    fx_copy_unlink(&t, "model-00002-of-00002.safetensors");
    fx_copy_unlink(&t, "model.safetensors.index.json");
    fx_expect_open_fails(&t, CKPT_E_NOTFOUND, (const char *[]){".metadata", "*.safetensors", NULL});
    fx_copy_remove(&t);
}
