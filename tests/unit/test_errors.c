/* test_errors.c — the error contract of the public API: every function that takes a
 * `ckpt_error *err` accepts NULL there and still returns the status it returns with an error
 * to fill (include/ckpt.h).  Each case calls a public function on a failing input twice, with
 * and without `err`, and expects the same, specific status (a missing shard file is
 * CKPT_E_NOTFOUND, not the CKPT_E_INVAL the error helpers used to return for NULL). */
#include "ckpt.h"
#include "ckpt_tree.h"
#include "fixture_copy.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A tensor of the copy stored (at least partly) in data file `file`. */
static const ckpt_entry *tensor_in_file(ckpt_reader *r, const char *file) {
    for (size_t i = 0; i < ckpt_reader_num_entries(r); i++) {
        const ckpt_entry *e = ckpt_reader_entry(r, i);
        if (ckpt_entry_kind_of(e) != CKPT_ENTRY_TENSOR || !ckpt_entry_nbytes(e)) continue;
        for (size_t k = 0; k < ckpt_entry_num_chunks(e); k++) {
            ckpt_chunk_info ci;
            if (ckpt_entry_chunk(e, k, &ci) == CKPT_OK && ci.file_id >= 0 &&
                strcmp(ckpt_reader_file_name(r, (uint32_t)ci.file_id), file) == 0)
                return e;
        }
    }
    return NULL;
}

Test(errors, missing_shard_is_notfound_with_or_without_err) {
    fx_copy t;
    fx_copy_make(&t, "fsdp2_ws2");
    fx_copy_unlink(&t, "__1_0.distcp");
    ckpt_reader *r = fx_copy_open_ok(&t);
    const ckpt_entry *e = tensor_in_file(r, "__1_0.distcp");
    cr_assert(e, "no tensor stored in __1_0.distcp");
    size_t n = (size_t)ckpt_entry_nbytes(e);
    void *buf = malloc(n);
    cr_assert(buf);
    ckpt_error err = {0};
    cr_expect_eq(ckpt_read_tensor(r, e, buf, n, &err), CKPT_E_NOTFOUND, "%s", err.message);
    expect_has(err.message, "__1_0.distcp");
    cr_expect_eq(ckpt_read_tensor(r, e, buf, n, NULL), CKPT_E_NOTFOUND);
    int nd = ckpt_entry_ndim(e);
    int64_t start[CKPT_MAX_NDIM] = {0}, count[CKPT_MAX_NDIM];
    memcpy(count, ckpt_entry_shape(e), (size_t)nd * sizeof *count);
    cr_expect_eq(ckpt_read_region(r, e, start, count, buf, n, NULL), CKPT_E_NOTFOUND);
    ckpt_plan *p = NULL;
    ckpt_status ps = ckpt_plan_region(r, e, start, count, &p, NULL);
    cr_expect(ps == CKPT_OK || ps == CKPT_E_NOTFOUND, "plan: %s", ckpt_strerror(ps));
    if (ps == CKPT_OK) {
        cr_expect_eq(ckpt_plan_execute(r, e, p, buf, n, NULL), CKPT_E_NOTFOUND);
        ckpt_plan_free(p);
    }
    free(buf);
    ckpt_reader_free(r);
    fx_copy_remove(&t);
}

Test(errors, bad_arguments_keep_their_status) {
    ckpt_reader *r = NULL;
    ckpt_error err = {0};
    ckpt_status with = ckpt_reader_open("/nonexistent/ckptfs-test", NULL, &r, &err);
    cr_expect_neq(with, CKPT_OK);
    cr_expect_eq(ckpt_reader_open("/nonexistent/ckptfs-test", NULL, &r, NULL), with);
    fx_copy t;
    fx_copy_make(&t, "fsdp2_ws2");
    r = fx_copy_open_ok(&t);
    const ckpt_entry *e = tensor_in_file(r, "__0_0.distcp");
    cr_assert(e);
    int nd = ckpt_entry_ndim(e);
    int64_t start[CKPT_MAX_NDIM] = {0}, count[CKPT_MAX_NDIM];
    memcpy(count, ckpt_entry_shape(e), (size_t)nd * sizeof *count);
    count[0] += 1; /* past the end */
    char buf[16];
    with = ckpt_read_region(r, e, start, count, buf, sizeof buf, &err);
    cr_expect_neq(with, CKPT_OK);
    cr_expect_eq(ckpt_read_region(r, e, start, count, buf, sizeof buf, NULL), with);
    ckpt_reader_free(r);
    fx_copy_remove(&t);
}

Test(errors, tree_calls_keep_their_status) {
    fx_copy t;
    fx_copy_make(&t, "fsdp2_ws2");
    fx_copy_unlink(&t, "__1_0.distcp");
    ckpt_tree *tree = NULL;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_tree_open(t.dir, NULL, &tree, &err), CKPT_OK, "%s", err.message);
    ckpt_tree_stat st;
    ckpt_status with = ckpt_tree_getattr(tree, (ckpt_ino)0x7fffffffffffULL, &st, &err);
    cr_expect_neq(with, CKPT_OK);
    cr_expect_eq(ckpt_tree_getattr(tree, (ckpt_ino)0x7fffffffffffULL, &st, NULL), with);
    with = ckpt_tree_lookup(tree, CKPT_TREE_ROOT, "no-such-entry", &st, &err);
    cr_expect_eq(with, CKPT_E_NOTFOUND);
    cr_expect_eq(ckpt_tree_lookup(tree, CKPT_TREE_ROOT, "no-such-entry", &st, NULL), with);
    /* a tensor file whose bytes live in the missing shard */
    ckpt_reader *r = fx_copy_open_ok(&t);
    const ckpt_entry *e = tensor_in_file(r, "__1_0.distcp");
    cr_assert(e);
    ckpt_ino ino = CKPT_TREE_ROOT;
    char path[1024];
    snprintf(path, sizeof path, "%s", ckpt_entry_path(e));
    for (char *el = strtok(path, "/"); el; el = strtok(NULL, "/")) {
        cr_assert_eq(ckpt_tree_lookup(tree, ino, el, &st, &err), CKPT_OK, "%s: %s", el,
                     err.message);
        ino = st.ino;
    }
    ckpt_tree_scratch sc = {0};
    const ckpt_tree_seg *segs = NULL;
    size_t nsegs = 0;
    with = ckpt_tree_read(tree, ino, 0, (size_t)st.size, 8, 4096, &sc, &segs, &nsegs, &err);
    cr_expect_eq(with, CKPT_E_NOTFOUND, "%s", err.message);
    cr_expect_eq(ckpt_tree_read(tree, ino, 0, (size_t)st.size, 8, 4096, &sc, &segs, &nsegs, NULL),
                 with);
    ckpt_tree_scratch_release(&sc);
    ckpt_reader_free(r);
    ckpt_tree_free(tree);
    fx_copy_remove(&t);
}

/* A non-tensor value stored in a data file, and that file's name. */
static const ckpt_entry *some_value(ckpt_reader *r, char *file, size_t cap) {
    for (size_t i = 0; i < ckpt_reader_num_entries(r); i++) {
        const ckpt_entry *e = ckpt_reader_entry(r, i);
        ckpt_chunk_info ci;
        if (ckpt_entry_kind_of(e) == CKPT_ENTRY_OBJECT && ckpt_entry_chunk(e, 0, &ci) == CKPT_OK &&
            ci.file_id >= 0) {
            snprintf(file, cap, "%s", ckpt_reader_file_name(r, (uint32_t)ci.file_id));
            return e;
        }
    }
    return NULL;
}

Test(errors, value_in_missing_shard_is_notfound_with_or_without_err) {
    fx_copy t;
    fx_copy_make(&t, "fsdp2_ws2");
    ckpt_reader *r = fx_copy_open_ok(&t);
    char file[256], key[1024], path[1024];
    const ckpt_entry *e = some_value(r, file, sizeof file);
    cr_assert(e, "no stored value");
    snprintf(path, sizeof path, "%s", ckpt_entry_path(e));
    snprintf(key, sizeof key, "%s", ckpt_entry_key(e));
    ckpt_reader_free(r);
    fx_copy_unlink(&t, file);
    r = fx_copy_open_ok(&t);
    e = ckpt_reader_find(r, key);
    cr_assert(e);
    ckpt_object *obj = NULL;
    ckpt_error err = {0};
    cr_expect_eq(ckpt_object_load(r, e, &obj, &err), CKPT_E_NOTFOUND, "%s", err.message);
    cr_expect_eq(ckpt_object_load(r, e, &obj, NULL), CKPT_E_NOTFOUND);
    ckpt_reader_free(r);
    /* the same value's file through the tree */
    ckpt_tree *tree = NULL;
    cr_assert_eq(ckpt_tree_open(t.dir, NULL, &tree, &err), CKPT_OK, "%s", err.message);
    ckpt_ino ino = CKPT_TREE_ROOT;
    ckpt_tree_stat st;
    for (char *el = strtok(path, "/"); el; el = strtok(NULL, "/")) {
        ckpt_status s = ckpt_tree_lookup(tree, ino, el, &st, &err);
        if (s != CKPT_OK) { /* the size is rendered at lookup: the failure shows there */
            cr_expect_eq(s, CKPT_E_NOTFOUND, "%s: %s", el, err.message);
            cr_expect_eq(ckpt_tree_lookup(tree, ino, el, &st, NULL), s);
            break;
        }
        ino = st.ino;
    }
    ckpt_tree_free(tree);
    fx_copy_remove(&t);
}
