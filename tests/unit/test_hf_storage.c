/* test_hf_storage.c — HuggingFace safetensors storage (src/index/hf_storage.c) with damage:
 * copies of two torch-written fixtures (hf_full: two files and model.safetensors.index.json;
 * hf_sharded: three ranks' `shard-*` files with DCP_SHARDING_INFO), damaged at run time in
 * one way each.  Defects of a whole file fail the open naming the file; defects of one
 * tensor fail that tensor only, every other tensor still reading bit-exactly what torch read
 * (the fixture's reference). */
#include "ckpt.h"
#include "fixture_ref.h"
#include "test_util.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define expect_has(msg, needle)                                                                    \
    cr_expect(strstr((msg), (needle)) != NULL, "message \"%s\" should mention \"%s\"", (msg),      \
              (needle))

typedef struct tmpdir {
    char root[256]; /* private: holds decoys beside the copy */
    char dir[300];  /* root/ckpt: the copy */
    ref_fixture ref;
} tmpdir;

/* A private copy of fixture `name`'s checkpoint (its files; no subdirectories). */
static void copy_fixture(tmpdir *t, const char *name) {
    cr_assert_eq(ref_load(name, &t->ref), 0, "fixture %s missing in %s", name, ref_fixtures_dir());
    snprintf(t->root, sizeof t->root, "/tmp/ckpt-hf-XXXXXX");
    cr_assert(mkdtemp(t->root), "mkdtemp: %s", strerror(errno));
    snprintf(t->dir, sizeof t->dir, "%s/ckpt", t->root);
    cr_assert_eq(mkdir(t->dir, 0755), 0, "mkdir %s: %s", t->dir, strerror(errno));
    tu_copy_files(t->ref.ckpt_dir, t->dir);
}

static void path_of(const tmpdir *t, const char *file, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s", t->dir, file);
}

static void remove_from_copy(const tmpdir *t, const char *file) {
    char p[4096];
    path_of(t, file, p, sizeof p);
    cr_assert_eq(unlink(p), 0, "%s: %s", p, strerror(errno));
}

static void remove_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) unlink(p);
    }
    closedir(d);
}

static void remove_copy(tmpdir *t) {
    remove_files(t->dir);
    rmdir(t->dir);
    remove_files(t->root);
    rmdir(t->root);
    ref_free(&t->ref);
}

/* Replaces the first occurrence of `from` in `file` by `to` (same length). */
static void patch(const tmpdir *t, const char *file, const char *from, const char *to) {
    char p[4096];
    path_of(t, file, p, sizeof p);
    size_t n, k = strlen(from);
    cr_assert_eq(strlen(to), k);
    uint8_t *buf = tu_read_file(p, &n);
    uint8_t *hit = memmem(buf, n, from, k);
    cr_assert(hit, "%s does not contain \"%s\"", file, from);
    memcpy(hit, to, k);
    tu_write_file(p, buf, n);
    free(buf);
}

static ckpt_status try_open(const tmpdir *t, ckpt_reader **r, ckpt_error *err) {
    *r = NULL;
    return ckpt_reader_open(t->dir, NULL, r, err);
}

static ckpt_reader *open_ok(const tmpdir *t) {
    ckpt_reader *r;
    ckpt_error err = {0};
    ckpt_status s = try_open(t, &r, &err);
    cr_assert_eq(s, CKPT_OK, "%s: open failed (%d): %s", t->dir, s, err.message);
    return r;
}

static bool listed(const char *const *list, const char *key) {
    for (size_t k = 0; list && list[k]; k++)
        if (!strcmp(list[k], key)) return true;
    return false;
}

/* Reads every tensor of the reference: those in `gone` must not be indexed, those in `bad`
 * must fail with `code`, the message naming them, the others read bit-exactly (lists
 * NULL-terminated, or NULL).  Returns how many read. */
static size_t expect_reads(const tmpdir *t, ckpt_reader *r, const char *const *bad,
                           ckpt_status code, const char *const *gone) {
    size_t ok = 0;
    for (size_t i = 0; i < t->ref.n; i++) {
        const ref_entry *re = &t->ref.entries[i];
        bool is_bad = listed(bad, re->key);
        const ckpt_entry *e = ckpt_reader_find(r, re->key);
        if (listed(gone, re->key)) {
            cr_expect_null(e, "'%s' should be gone", re->key);
            continue;
        }
        cr_assert(e, "'%s' is not indexed", re->key);
        uint8_t *buf = malloc(re->nbytes + 1);
        ckpt_error err = {0};
        ckpt_status s = ckpt_read_tensor(r, e, buf, re->nbytes, &err);
        if (is_bad) {
            cr_expect_eq(s, code, "'%s': read gave %d, want %d (%s)", re->key, s, code,
                         err.message);
            if (s != CKPT_OK) expect_has(err.message, re->key);
        } else {
            cr_expect_eq(s, CKPT_OK, "'%s': %s", re->key, err.message);
            if (s == CKPT_OK) {
                cr_expect(memcmp(buf, t->ref.bin + re->offset, re->nbytes) == 0,
                          "'%s' differs from torch's reading", re->key);
                ok++;
            }
        }
        free(buf);
    }
    return ok;
}

static void expect_open_fails(const tmpdir *t, ckpt_status code, const char *const *words) {
    ckpt_reader *r;
    ckpt_error err = {0};
    ckpt_status s = try_open(t, &r, &err);
    cr_expect_eq(s, code, "open gave %d, want %d: %s", s, code, err.message);
    cr_expect_null(r);
    for (size_t i = 0; words[i]; i++)
        expect_has(err.message, words[i]);
    ckpt_reader_free(r);
}

/* The copy opens; `key` alone has a problem that names each of `words` and fails to read
 * (CKPT_E_FORMAT), every other tensor reads as torch read it. */
static void expect_entry_problem(const tmpdir *t, const char *key, const char *const *words) {
    ckpt_reader *r = open_ok(t);
    const ckpt_entry *e = ckpt_reader_find(r, key);
    cr_assert(e, "'%s' is not indexed", key);
    cr_assert(ckpt_entry_problem(e), "'%s': the defect went unnoticed", key);
    for (size_t i = 0; words[i]; i++)
        expect_has(ckpt_entry_problem(e), words[i]);
    const char *bad[] = {key, NULL};
    cr_expect_eq(expect_reads(t, r, bad, CKPT_E_FORMAT, NULL), t->ref.n - 1);
    ckpt_reader_free(r);
}

/* ------------------------------------------------------------------------------ tests */

Test(hf_storage, intact_copies_read_like_torch) {
    const char *names[] = {"hf_full", "hf_sharded"};
    for (size_t i = 0; i < 2; i++) {
        tmpdir t;
        copy_fixture(&t, names[i]);
        ckpt_reader *r = open_ok(&t);
        ckpt_reader_info in;
        ckpt_reader_get_info(r, &in);
        cr_expect(in.hf_storage);
        cr_expect_eq(in.num_metadata_files, 0);
        cr_expect_eq(ckpt_reader_num_entries(r), t.ref.n);
        cr_expect_eq(in.num_ranks, i == 0 ? 0u : 3u);
        uint64_t bad = 99;
        cr_expect_eq(ckpt_reader_check_ranges(r, NULL, NULL, &bad), CKPT_OK);
        cr_expect_eq(bad, 0);
        cr_expect_eq(expect_reads(&t, r, NULL, CKPT_OK, NULL), t.ref.n);
        ckpt_reader_free(r);
        remove_copy(&t);
    }
}

Test(hf_storage, index_json_names_a_missing_file) {
    tmpdir t;
    copy_fixture(&t, "hf_full");
    remove_from_copy(&t, "model-00002-of-00002.safetensors");
    /* torch's reader would silently drop the tensors of that file */
    expect_open_fails(&t, CKPT_E_NOTFOUND,
                      (const char *[]){"model.safetensors.index.json",
                                       "model-00002-of-00002.safetensors", "missing", NULL});
    remove_copy(&t);
}

/* hf_full's index json, with model.scalar mapped to `file` (as long as its real file's name). */
static void remap_scalar(const tmpdir *t, const char *file) {
    char to[128];
    snprintf(to, sizeof to, "\"model.scalar\": \"%s\"", file);
    patch(t, "model.safetensors.index.json",
          "\"model.scalar\": \"model-00002-of-00002.safetensors\"", to);
}

Test(hf_storage, index_json_maps_a_tensor_to_the_wrong_file) {
    tmpdir t;
    copy_fixture(&t, "hf_full");
    remap_scalar(&t, "model-00001-of-00002.safetensors");
    expect_open_fails(&t, CKPT_E_FORMAT,
                      (const char *[]){"model.scalar", "model-00001-of-00002.safetensors",
                                       "does not hold it", NULL});
    remove_copy(&t);
}

Test(hf_storage, index_json_limits_the_files) {
    /* a hub folder may hold other *.safetensors beside the indexed ones (an fp16 variant);
     * as transformers, only the files the index names are read */
    tmpdir t;
    copy_fixture(&t, "hf_full");
    char from[4096], to[4096];
    path_of(&t, "model-00001-of-00002.safetensors", from, sizeof from);
    path_of(&t, "model-00001-of-00002.fp16.safetensors", to, sizeof to);
    tu_copy_file(from, to);
    patch(&t, "model-00001-of-00002.fp16.safetensors", "\"F32\"", "\"I32\"");
    ckpt_reader *r = open_ok(&t);
    cr_expect_eq(ckpt_reader_num_files(r), 2);
    cr_expect_eq(expect_reads(&t, r, NULL, CKPT_OK, NULL), t.ref.n);
    ckpt_reader_free(r);
    /* without the index every file counts, and the two disagree on a dtype */
    remove_from_copy(&t, "model.safetensors.index.json");
    r = open_ok(&t);
    cr_expect_eq(ckpt_reader_num_files(r), 3);
    cr_expect(ckpt_entry_problem(ckpt_reader_find(r, "model.dtypes.float32")));
    ckpt_reader_free(r);
    remove_copy(&t);
}

Test(hf_storage, index_json_path_traversal_is_not_followed) {
    tmpdir t;
    copy_fixture(&t, "hf_full");
    /* a decoy beside the copy that a reader following the name would find */
    char decoy[4096], from[4096];
    snprintf(decoy, sizeof decoy, "%s/xx-00002-of-00002.safetensors", t.root);
    path_of(&t, "model-00002-of-00002.safetensors", from, sizeof from);
    tu_copy_file(from, decoy);
    remap_scalar(&t, "../xx-00002-of-00002.safetensors");
    expect_open_fails(&t, CKPT_E_FORMAT,
                      (const char *[]){"model.scalar", "../xx-00002-of-00002.safetensors",
                                       "path traversal refused", NULL});
    remove_copy(&t);
}

Test(hf_storage, missing_shard_leaves_a_gap) {
    tmpdir t;
    copy_fixture(&t, "hf_sharded");
    remove_from_copy(&t, "shard-00002-model-00001-of-00001.safetensors");
    ckpt_reader *r = open_ok(&t); /* no index json: nothing says the file existed */
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
    cr_expect_eq(expect_reads(&t, r, bad, CKPT_E_FORMAT, gone), t.ref.n - 6);
    ckpt_reader_free(r);
    remove_copy(&t);
}

Test(hf_storage, truncated_data_section_fails_only_the_cut_tensors) {
    tmpdir t;
    copy_fixture(&t, "hf_sharded");
    char p[4096];
    path_of(&t, "shard-00001-model-00001-of-00001.safetensors", p, sizeof p);
    struct stat st;
    cr_assert_eq(stat(p, &st), 0);
    cr_assert_eq(truncate(p, st.st_size - 1), 0); /* the last byte of the last tensor */
    ckpt_reader *r = open_ok(&t);
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
    cr_expect_eq(expect_reads(&t, r, bad, CKPT_E_RANGE, NULL), t.ref.n - 1);
    ckpt_reader_free(r);
    remove_copy(&t);
}

Test(hf_storage, truncated_header_fails_the_open_naming_the_file) {
    tmpdir t;
    copy_fixture(&t, "hf_sharded");
    char p[4096];
    path_of(&t, "shard-00003-model-00001-of-00001.safetensors", p, sizeof p);
    cr_assert_eq(truncate(p, 100), 0);
    expect_open_fails(&t, CKPT_E_RANGE,
                      (const char *[]){"shard-00003-model-00001-of-00001.safetensors", NULL});
    remove_copy(&t);
}

Test(hf_storage, sharding_info_that_is_not_json) {
    tmpdir t;
    copy_fixture(&t, "hf_sharded");
    /* inside the DCP_SHARDING_INFO string: still a valid header, no longer valid inner JSON */
    patch(&t, "shard-00002-model-00001-of-00001.safetensors", "\\\"saved_offsets\\\": [",
          "\\\"saved_offsets\\\": (");
    expect_open_fails(&t, CKPT_E_FORMAT,
                      (const char *[]){"shard-00002-model-00001-of-00001.safetensors",
                                       "DCP_SHARDING_INFO", NULL});
    remove_copy(&t);
}

Test(hf_storage, sharding_info_without_a_tensor) {
    tmpdir t;
    copy_fixture(&t, "hf_sharded");
    patch(&t, "shard-00002-model-00001-of-00001.safetensors", "model.head.weight\\\"",
          "model.heax.weight\\\"");
    expect_entry_problem(
        &t, "model.head.weight",
        (const char *[]){"shard-00002-model-00001-of-00001.safetensors", "saved_offsets", NULL});
    remove_copy(&t);
}

Test(hf_storage, files_disagree_on_a_dtype) {
    tmpdir t;
    copy_fixture(&t, "hf_sharded");
    patch(&t, "shard-00002-model-00001-of-00001.safetensors", "\"F16\"", "\"I16\"");
    expect_entry_problem(&t, "model.head.weight", (const char *[]){"I16", "float16", NULL});
    remove_copy(&t);
}

Test(hf_storage, hostile_header_length) {
    tmpdir t;
    copy_fixture(&t, "hf_sharded");
    char p[4096];
    path_of(&t, "evil.safetensors", p, sizeof p);
    uint8_t head[16] = {0, 0, 0, 0, 0, 1, 0, 0, '{', '}'}; /* N = 2^40 */
    tu_write_file(p, head, sizeof head);
    expect_open_fails(&t, CKPT_E_LIMIT, (const char *[]){"evil.safetensors", "header", NULL});
    remove_copy(&t);
}

Test(hf_storage, no_safetensors_file_is_no_checkpoint) {
    tmpdir t;
    copy_fixture(&t, "hf_full");
    remove_from_copy(&t, "model-00001-of-00002.safetensors");
    remove_from_copy(&t, "model-00002-of-00002.safetensors");
    remove_from_copy(&t, "model.safetensors.index.json");
    expect_open_fails(&t, CKPT_E_NOTFOUND, (const char *[]){".metadata", "*.safetensors", NULL});
    remove_copy(&t);
}
