/* test_manifest.c — the integrity manifest: build from a real fixture, save, load back equal;
 * every item the reader references is covered; hostile manifests (bad magic, damaged
 * checksum, counts past the end, path traversal, unsorted records, unknown version) are
 * refused with an error naming the file and offset, without crashing. */
#include <criterion/criterion.h>

#include "ckpt_manifest.h"
#include "fixture_ref.h"
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

static char dir[64];

static void copy_fixture(const char *name) {
    ref_fixture fx;
    cr_assert_eq(ref_load(name, &fx), 0);
    snprintf(dir, sizeof dir, "/tmp/ckpt-manifest-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cp -r '%s'/. '%s'/", fx.ckpt_dir, dir);
    cr_assert_eq(system(cmd), 0);
    ref_free(&fx);
}

static void cleanup(void) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

static uint8_t *manifest_bytes(size_t *len) {
    char path[256];
    snprintf(path, sizeof path, "%s/" CKPT_MANIFEST_FILE, dir);
    return tu_read_file(path, len);
}

/* Writes `buf` as the manifest with a correct trailing checksum (so the parser itself is
 * tested, not only the checksum). */
static void write_manifest(uint8_t *buf, size_t len, bool fix_sum) {
    if (fix_sum && len >= 8) {
        XXH64_canonical_t c;
        XXH64_canonicalFromHash(&c, XXH3_64bits(buf, len - 8));
        memcpy(buf + len - 8, c.digest, 8);
    }
    char path[256];
    snprintf(path, sizeof path, "%s/" CKPT_MANIFEST_FILE, dir);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(buf, 1, len, f), len);
    fclose(f);
}

static ckpt_manifest *seal(void) {
    ckpt_reader *r;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_reader_open(dir, NULL, &r, &err), CKPT_OK, "%s", err.message);
    ckpt_manifest *m;
    cr_assert_eq(ckpt_manifest_build(r, 2, NULL, NULL, &m, &err), CKPT_OK, "%s", err.message);
    cr_assert_eq(ckpt_manifest_save(m, dir, &err), CKPT_OK, "%s", err.message);
    uint64_t failures = 9;
    cr_assert_eq(ckpt_manifest_verify(dir, m, r, 1, NULL, NULL, NULL, &failures, &err), CKPT_OK);
    cr_assert_eq(failures, 0);
    ckpt_reader_free(r);
    return m;
}

Test(manifest, roundtrip_and_coverage, .fini = cleanup) {
    copy_fixture("fsdp2_ws3");
    ckpt_manifest *m = seal();
    ckpt_manifest *back;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_manifest_load(dir, &back, &err), CKPT_OK, "%s", err.message);
    cr_assert_eq(ckpt_manifest_num_records(back), ckpt_manifest_num_records(m));
    cr_assert_gt(ckpt_manifest_num_records(m), 10);
    bool metadata = false;
    for (size_t i = 0; i < ckpt_manifest_num_records(m); i++) {
        const ckpt_manifest_record *a = ckpt_manifest_record_at(m, i),
                                   *b = ckpt_manifest_record_at(back, i);
        cr_assert_str_eq(a->file, b->file);
        cr_assert(a->offset == b->offset && a->length == b->length && a->hash == b->hash);
        cr_assert_eq(ckpt_manifest_find(back, a->file, a->offset), b);
        if (strcmp(a->file, ".metadata") == 0) metadata = true;
    }
    cr_assert(metadata, "the metadata file is sealed too");
    cr_assert_null(ckpt_manifest_find(back, "nope.distcp", 0));
    ckpt_manifest_free(m);
    ckpt_manifest_free(back);
}

static void expect_refused(uint8_t *buf, size_t len, bool fix, ckpt_status want, const char *what) {
    write_manifest(buf, len, fix);
    ckpt_manifest *m = NULL;
    ckpt_error err = {0};
    ckpt_status s = ckpt_manifest_load(dir, &m, &err);
    cr_assert_eq(s, want, "%s: status %d (%s)", what, s, err.message);
    cr_assert_null(m);
    cr_assert(strstr(err.message, CKPT_MANIFEST_FILE) != NULL, "%s: %s", what, err.message);
}

Test(manifest, hostile_files_are_refused, .fini = cleanup) {
    copy_fixture("fsdp2_ws2");
    ckpt_manifest_free(seal());
    size_t len;
    uint8_t *orig = manifest_bytes(&len);
    uint8_t *b = malloc(len + 64);
    cr_assert_not_null(b);

    memcpy(b, orig, len);
    b[0] = 'X';
    expect_refused(b, len, true, CKPT_E_FORMAT, "bad magic");

    memcpy(b, orig, len);
    b[len / 2] ^= 1;
    expect_refused(b, len, false, CKPT_E_CHECKSUM, "flipped byte");

    memcpy(b, orig, len);
    b[8] = 7;
    expect_refused(b, len, true, CKPT_E_UNSUPPORTED, "future version");

    memcpy(b, orig, len);
    memset(b + 24, 0xFF, 8); /* record count */
    expect_refused(b, len, true, CKPT_E_FORMAT, "huge record count");

    memcpy(b, orig, len);
    memset(b + 16, 0xFF, 4); /* file count */
    expect_refused(b, len, true, CKPT_E_FORMAT, "huge file count");

    memcpy(b, orig, len);
    memset(b + 32, 0xFF, 4); /* first name length */
    expect_refused(b, len, true, CKPT_E_FORMAT, "huge name length");

    memcpy(b, orig, len); /* first name ".metadata" -> "../metada" */
    cr_assert(memcmp(b + 36, ".metadata", 9) == 0);
    memcpy(b + 36, "../metada", 9);
    expect_refused(b, len, true, CKPT_E_FORMAT, "path traversal");

    memcpy(b, orig, len);
    expect_refused(b, 20, true, CKPT_E_FORMAT, "truncated");

    /* swap two records: unsorted */
    memcpy(b, orig, len);
    size_t nrec = (size_t)b[24] | (size_t)b[25] << 8 | (size_t)b[26] << 16;
    cr_assert_gt(nrec, 1);
    size_t recs = len - 8 - nrec * 32;
    uint8_t tmp[32];
    memcpy(tmp, b + recs, 32);
    memcpy(b + recs, b + recs + 32, 32);
    memcpy(b + recs + 32, tmp, 32);
    expect_refused(b, len, true, CKPT_E_FORMAT, "unsorted records");

    free(b);
    free(orig);
}
