/* test_tree.c — the mount's namespace without a mount: for every tensor of every fixture,
 * ckpt_tree_read of random windows (whole file, unaligned, chunk-crossing) must give torch's
 * reference bytes once its segments are materialised, under every reply policy (all in
 * memory; few fd segments; many; short runs allowed), never more fd segments than allowed,
 * and the fd segments must be runs of the checkpoint's shard files. */
#include <criterion/criterion.h>

#include "ckpt_tree.h"
#include "fixture_ref.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ckpt_ino lookup_path(ckpt_tree *t, const char *path) {
    ckpt_ino at = CKPT_TREE_ROOT;
    char *copy = strdup(path), *save = NULL;
    for (char *el = strtok_r(copy, "/", &save); el; el = strtok_r(NULL, "/", &save)) {
        ckpt_tree_stat st;
        ckpt_error err = {0};
        cr_assert_eq(ckpt_tree_lookup(t, at, el, &st, &err), CKPT_OK, "%s: %s", path, err.message);
        at = st.ino;
    }
    free(copy);
    return at;
}

/* Reads [off, off+len) through the tree and returns the materialised bytes. */
static uint8_t *read_window(ckpt_tree *t, ckpt_ino ino, uint64_t off, size_t len, size_t max_fd,
                            size_t min_run, ckpt_tree_scratch *s, size_t *got) {
    const ckpt_tree_seg *segs;
    size_t n;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_tree_read(t, ino, off, len, max_fd, min_run, s, &segs, &n, &err), CKPT_OK,
                 "%s", err.message);
    uint8_t *out = malloc(len + 1);
    size_t at = 0, nfd = 0;
    for (size_t i = 0; i < n; i++) {
        cr_assert(at + segs[i].len <= len);
        if (segs[i].fd >= 0) {
            nfd++;
            cr_assert_geq(segs[i].len, min_run ? min_run : 1);
            cr_assert_eq(pread(segs[i].fd, out + at, segs[i].len, (off_t)segs[i].pos),
                         (ssize_t)segs[i].len);
        } else {
            memcpy(out + at, segs[i].mem, segs[i].len);
        }
        at += segs[i].len;
    }
    cr_assert_leq(nfd, max_fd);
    *got = at;
    return out;
}

Test(tree, reads_match_torch_under_every_policy) {
    char **names;
    size_t nf = ref_list(&names);
    cr_assert_gt(nf, 0);
    const size_t policies[][2] = {{0, 4096}, {1, 4096}, {5, 4096}, {100000, 1}};
    uint64_t rng = 12345;
    size_t checked = 0;
    for (size_t f = 0; f < nf; f++) {
        ref_fixture fx;
        cr_assert_eq(ref_load(names[f], &fx), 0);
        ckpt_tree *t = NULL;
        ckpt_error err = {0};
        cr_assert_eq(ckpt_tree_open(fx.ckpt_dir, NULL, &t, &err), CKPT_OK, "%s", err.message);
        ckpt_reader *r = ckpt_tree_reader(t);
        ckpt_tree_scratch s = {0};
        for (size_t i = 0; i < fx.n; i++) {
            const ref_entry *re = &fx.entries[i];
            if (re->kind != 'T' || !re->nbytes) continue;
            const ckpt_entry *e = ckpt_reader_find(r, re->key);
            cr_assert_not_null(e, "%s", re->key);
            ckpt_ino ino = lookup_path(t, ckpt_entry_path(e));
            const uint8_t *want = fx.bin + re->offset;
            for (size_t p = 0; p < sizeof policies / sizeof *policies; p++) {
                for (int w = 0; w < 6; w++) {
                    uint64_t off = 0, len = re->nbytes;
                    if (w) {
                        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                        off = (rng >> 33) % re->nbytes;
                        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                        len = 1 + (rng >> 33) % (re->nbytes - off);
                    }
                    size_t got;
                    uint8_t *b =
                        read_window(t, ino, off, len, policies[p][0], policies[p][1], &s, &got);
                    cr_assert_eq(got, len, "%s [%llu,+%llu)", re->key, (unsigned long long)off,
                                 (unsigned long long)len);
                    cr_assert(memcmp(b, want + off, len) == 0,
                              "%s/%s window [%llu,+%llu) policy %zu", names[f], re->key,
                              (unsigned long long)off, (unsigned long long)len, p);
                    free(b);
                    checked++;
                }
            }
            /* reading past the end gives nothing */
            size_t got;
            free(read_window(t, ino, re->nbytes, 16, 8, 4096, &s, &got));
            cr_assert_eq(got, 0);
        }
        ckpt_tree_scratch_release(&s);
        ckpt_tree_free(t);
        ref_free(&fx);
    }
    ref_free_names(names, nf);
    cr_assert_gt(checked, 1000);
}

Test(tree, not_a_checkpoint) {
    ckpt_tree *t = NULL;
    ckpt_error err = {0};
    char dir[] = "/tmp/ckpt-tree-empty-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(ckpt_tree_open(dir, NULL, &t, &err), CKPT_E_NOTFOUND);
    cr_assert_null(t);
    cr_assert(strstr(err.message, ".metadata") != NULL, "%s", err.message);
    rmdir(dir);
}
