/* fixture_copy.c — damaged private copies of fixtures (see fixture_copy.h). */
#include "fixture_copy.h"

#include "test_util.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* A private copy of fixture `name`'s checkpoint (its files; no subdirectories). */
void fx_copy_make(fx_copy *t, const char *name) {
    cr_assert_eq(ref_load(name, &t->ref), 0, "fixture %s missing in %s", name, ref_fixtures_dir());
    snprintf(t->root, sizeof t->root, "/tmp/ckpt-fx-XXXXXX");
    cr_assert(mkdtemp(t->root), "mkdtemp: %s", strerror(errno));
    snprintf(t->dir, sizeof t->dir, "%s/ckpt", t->root);
    cr_assert_eq(mkdir(t->dir, 0755), 0, "mkdir %s: %s", t->dir, strerror(errno));
    tu_copy_files(t->ref.ckpt_dir, t->dir);
}

void fx_copy_path(const fx_copy *t, const char *file, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s", t->dir, file);
}

void fx_copy_unlink(const fx_copy *t, const char *file) {
    char p[4096];
    fx_copy_path(t, file, p, sizeof p);
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

void fx_copy_remove(fx_copy *t) {
    remove_files(t->dir);
    rmdir(t->dir);
    remove_files(t->root);
    rmdir(t->root);
    ref_free(&t->ref);
}

void fx_copy_patch_after(const fx_copy *t, const char *file, const char *anchor, const void *from,
                         const void *to, size_t len) {
    char p[4096];
    fx_copy_path(t, file, p, sizeof p);
    size_t n;
    uint8_t *buf = tu_read_file(p, &n), *at = buf;
    if (anchor) {
        at = memmem(buf, n, anchor, strlen(anchor));
        cr_assert(at, "%s does not contain \"%s\"", file, anchor);
    }
    uint8_t *hit = memmem(at, n - (size_t)(at - buf), from, len);
    cr_assert(hit, "%s does not contain the %zu bytes to patch", file, len);
    memcpy(hit, to, len);
    tu_write_file(p, buf, n);
    free(buf);
}

void fx_copy_patch_bytes(const fx_copy *t, const char *file, const void *from, const void *to,
                         size_t len) {
    fx_copy_patch_after(t, file, NULL, from, to, len);
}

void fx_copy_patch(const fx_copy *t, const char *file, const char *from, const char *to) {
    cr_assert_eq(strlen(to), strlen(from));
    fx_copy_patch_bytes(t, file, from, to, strlen(from));
}

ckpt_status fx_copy_open(const fx_copy *t, ckpt_reader **r, ckpt_error *err) {
    *r = NULL;
    return ckpt_reader_open(t->dir, NULL, r, err);
}

ckpt_reader *fx_copy_open_ok(const fx_copy *t) {
    ckpt_reader *r;
    ckpt_error err = {0};
    ckpt_status s = fx_copy_open(t, &r, &err);
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
size_t fx_expect_reads(const fx_copy *t, ckpt_reader *r, const char *const *bad, ckpt_status code,
                       const char *const *gone) {
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

void fx_expect_open_fails(const fx_copy *t, ckpt_status code, const char *const *words) {
    ckpt_reader *r;
    ckpt_error err = {0};
    ckpt_status s = fx_copy_open(t, &r, &err);
    cr_expect_eq(s, code, "open gave %d, want %d: %s", s, code, err.message);
    cr_expect_null(r);
    for (size_t i = 0; words[i]; i++)
        expect_has(err.message, words[i]);
    ckpt_reader_free(r);
}

/* The copy opens; `key` alone has a problem that names each of `words` and fails to read
 * (CKPT_E_FORMAT), every other tensor reads as torch read it. */
void fx_expect_entry_problem(const fx_copy *t, const char *key, const char *const *words) {
    ckpt_reader *r = fx_copy_open_ok(t);
    const ckpt_entry *e = ckpt_reader_find(r, key);
    cr_assert(e, "'%s' is not indexed", key);
    cr_assert(ckpt_entry_problem(e), "'%s': the defect went unnoticed", key);
    for (size_t i = 0; words[i]; i++)
        expect_has(ckpt_entry_problem(e), words[i]);
    const char *bad[] = {key, NULL};
    cr_expect_eq(fx_expect_reads(t, r, bad, CKPT_E_FORMAT, NULL), t->ref.n - 1);
    ckpt_reader_free(r);
}
