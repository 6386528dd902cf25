/* test_tree.c — the mount's namespace without a mount: for every tensor of every fixture,
 * ckpt_tree_read of random windows (whole file, unaligned, chunk-crossing) must give torch's
 * reference bytes once its segments are materialised, under every reply policy (all in
 * memory; few segments; many; short runs allowed), never more segments (fd and memory)
 * than allowed, and the fd segments must be runs of the checkpoint's shard files. */
#include <criterion/criterion.h>

#include "ckpt_tree.h"
#include "fixture_ref.h"
#include "tree/tree_i.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
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
static uint8_t *read_window(ckpt_tree *t, ckpt_ino ino, uint64_t off, size_t len, size_t max_segs,
                            size_t min_run, ckpt_tree_scratch *s, size_t *got) {
    const ckpt_tree_seg *segs;
    size_t n;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_tree_read(t, ino, off, len, max_segs, min_run, s, &segs, &n, &err), CKPT_OK,
                 "%s", err.message);
    uint8_t *out = malloc(len + 1);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        cr_assert(at + segs[i].len <= len);
        if (segs[i].fd >= 0) {
            cr_assert_gt(max_segs, 0);
            cr_assert_geq(segs[i].len, min_run ? min_run : 1);
            cr_assert_eq(pread(segs[i].fd, out + at, segs[i].len, (off_t)segs[i].pos),
                         (ssize_t)segs[i].len);
        } else {
            memcpy(out + at, segs[i].mem, segs[i].len);
        }
        at += segs[i].len;
    }
    cr_assert_leq(n, max_segs ? max_segs : 1, "%zu segments, %zu allowed", n, max_segs);
    *got = at;
    return out;
}

Test(tree, reads_match_torch_under_every_policy) {
    char **names;
    size_t nf = ref_list(&names);
    cr_assert_gt(nf, 0);
    const size_t policies[][2] = {{0, 4096}, {1, 4096}, {5, 4096}, {100000, 1}, {2, 1}, {7, 1}};
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

/* ---------------------------------------------------------------- .layout at scale */

typedef struct rank_walk {
    uint64_t next; /* the index the next entry must have */
    uint64_t stop; /* stop after this many entries (0: never) */
    ckpt_ino last_ino;
} rank_walk;

static bool walk_rank(void *ctx, const char *name, const ckpt_tree_stat *st, uint64_t next) {
    rank_walk *w = ctx;
    char want[24];
    snprintf(want, sizeof want, "%llu", (unsigned long long)w->next);
    cr_assert_str_eq(name, want);
    cr_assert_eq(next, w->next + 1);
    cr_assert_eq(st->type, CKPT_NODE_DIR);
    w->last_ino = st->ino;
    w->next++;
    return !(w->stop && w->next >= w->stop);
}

/* The first tensor of the fixture with at least 2 rows (for a rank holding one row). */
static const ref_entry *tensor_with_rows(const ref_fixture *fx) {
    for (size_t i = 0; i < fx->n; i++)
        if (fx->entries[i].kind == 'T' && fx->entries[i].ndim >= 1 &&
            fx->entries[i].shape[0] >= 2 && fx->entries[i].nbytes)
            return &fx->entries[i];
    return NULL;
}

static uint8_t *read_all(ckpt_tree *t, ckpt_ino ino, size_t *got) {
    ckpt_tree_stat st;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_tree_getattr(t, ino, &st, &err), CKPT_OK, "%s", err.message);
    ckpt_tree_scratch s = {0};
    uint8_t *b = read_window(t, ino, 0, st.size, 8, 4096, &s, got);
    ckpt_tree_scratch_release(&s);
    return b;
}

/* ckpt_tree_file_fd: a `.raw/` file is its source file, all of it (the FUSE passthrough
 * front end hands that descriptor to the kernel); nothing else is. */
Test(tree, file_fd_only_for_whole_source_files) {
    ref_fixture fx;
    cr_assert_eq(ref_load("fsdp2_ws2", &fx), 0);
    ckpt_tree *t = NULL;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_tree_open(fx.ckpt_dir, NULL, &t, &err), CKPT_OK, "%s", err.message);
    DIR *d = opendir(fx.ckpt_dir);
    cr_assert_not_null(d);
    int files = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.' && strcmp(de->d_name, ".metadata") != 0) continue;
        char src[4096], raw[512];
        snprintf(src, sizeof src, "%s/%s", fx.ckpt_dir, de->d_name);
        snprintf(raw, sizeof raw, ".raw/%s", de->d_name);
        FILE *f = fopen(src, "rb");
        cr_assert_not_null(f, "%s", src);
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        uint8_t *want = malloc((size_t)n + 1), *got = malloc((size_t)n + 1);
        rewind(f);
        cr_assert_eq(fread(want, 1, (size_t)n, f), (size_t)n);
        fclose(f);
        ckpt_ino ino = lookup_path(t, raw);
        cr_assert_eq(ckpt_tree_open_file(t, ino, &err), CKPT_OK, "%s", err.message);
        uint64_t size = 0;
        int fd = ckpt_tree_file_fd(t, ino, &size);
        cr_assert_geq(fd, 0, "%s", raw);
        cr_assert_eq(size, (uint64_t)n, "%s", raw);
        /* the descriptor's bytes at the same offsets are the file's, all of them */
        cr_assert_eq(pread(fd, got, (size_t)n + 1, 0), (ssize_t)n, "%s", raw);
        cr_assert(memcmp(got, want, (size_t)n) == 0, "%s", raw);
        ckpt_tree_release_file(t, ino);
        free(want);
        free(got);
        files++;
    }
    closedir(d);
    cr_assert_geq(files, 3, "the shards and .metadata");
    /* entry files, views and directories are assembled: no descriptor */
    const ref_entry *re = tensor_with_rows(&fx);
    cr_assert_not_null(re);
    const char *path = ckpt_entry_path(ckpt_reader_find(ckpt_tree_reader(t), re->key));
    char p[512];
    const char *const others[] = {"", ".raw", ".npy", ".safetensors"};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++)
        cr_assert_eq(ckpt_tree_file_fd(t, i ? lookup_path(t, others[i]) : CKPT_TREE_ROOT, NULL), -1,
                     "%s", others[i]);
    cr_assert_eq(ckpt_tree_file_fd(t, lookup_path(t, path), NULL), -1, "%s", path);
    snprintf(p, sizeof p, ".npy/%s.npy", path);
    cr_assert_eq(ckpt_tree_file_fd(t, lookup_path(t, p), NULL), -1, "%s", p);
    snprintf(p, sizeof p, ".layout/dim0-of-2/0/%s", path);
    cr_assert_eq(ckpt_tree_file_fd(t, lookup_path(t, p), NULL), -1, "%s", p);
    cr_assert_eq(ckpt_tree_file_fd(t, 0x7fffffffffffull, NULL), -1, "an unknown inode");
    ckpt_tree_free(t);
    ref_free(&fx);
}

Test(tree, layout_ranks_are_computed_not_stored) {
    ref_fixture fx;
    cr_assert_eq(ref_load("fsdp2_ws2", &fx), 0);
    ckpt_tree *t = NULL;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_tree_open(fx.ckpt_dir, NULL, &t, &err), CKPT_OK, "%s", err.message);
    tree_ckpt *c = t->slots[0];
    const ref_entry *re = tensor_with_rows(&fx);
    cr_assert_not_null(re);
    const ckpt_entry *e = ckpt_reader_find(ckpt_tree_reader(t), re->key);
    cr_assert_not_null(e);
    const char *path = ckpt_entry_path(e);

    /* every rank of the widest spec lists, in order, with cookies index + 1 */
    ckpt_ino spec = lookup_path(t, ".layout/dim0-of-1048576");
    cr_assert_eq(tree_layout_nspecs(c), 1);
    rank_walk w = {0};
    cr_assert_eq(ckpt_tree_readdir(t, spec, 0, walk_rank, &w, &err), CKPT_OK, "%s", err.message);
    cr_assert_eq(w.next, 1048576);
    cr_assert_eq(tree_layout_nspecs(c), 1, "listing ranks must not add table entries");
    /* resuming from a cookie far into the listing gives the entries after it */
    w = (rank_walk){.next = 1048570};
    cr_assert_eq(ckpt_tree_readdir(t, spec, 1048570, walk_rank, &w, &err), CKPT_OK);
    cr_assert_eq(w.next, 1048576);
    ckpt_ino last = lookup_path(t, ".layout/dim0-of-1048576/1048575");
    cr_assert_eq(last, w.last_ino, "readdir and lookup agree on the inode");
    ckpt_tree_stat st;
    cr_assert_eq(ckpt_tree_lookup(t, spec, "1048576", &st, &err), CKPT_E_NOTFOUND);

    /* a rank near 2^20 of a replicated spec holds the whole tensor */
    char p[512];
    snprintf(p, sizeof p, ".layout/dim63-of-1048576/1048575/%s", path);
    size_t got;
    uint8_t *b = read_all(t, lookup_path(t, p), &got);
    cr_assert_eq(got, re->nbytes);
    cr_assert(memcmp(b, fx.bin + re->offset, got) == 0);
    free(b);
    /* under dim0 of 2^20 ranks, rank r < rows holds row r; ranks past the rows are empty */
    uint64_t rows = (uint64_t)re->shape[0], row = re->nbytes / rows;
    snprintf(p, sizeof p, ".layout/dim0-of-1048576/%llu/%s", (unsigned long long)(rows - 1), path);
    b = read_all(t, lookup_path(t, p), &got);
    cr_assert_eq(got, row);
    cr_assert(memcmp(b, fx.bin + re->offset + (rows - 1) * row, row) == 0);
    free(b);
    snprintf(p, sizeof p, ".layout/dim0-of-1048576/1048575/%s", path);
    cr_assert_eq(ckpt_tree_getattr(t, lookup_path(t, p), &st, &err), CKPT_OK);
    cr_assert_eq(st.size, 0);
    cr_assert_eq(tree_layout_nspecs(c), 2, "one entry per spec directory, none per rank");

    /* the table is bounded: TREE_LAYOUT_MAX_SPECS specs, then CKPT_E_LIMIT; the old ones
     * keep resolving */
    ckpt_ino layout = lookup_path(t, ".layout");
    for (uint32_t n = 1; tree_layout_nspecs(c) < TREE_LAYOUT_MAX_SPECS; n++) {
        char name[64];
        snprintf(name, sizeof name, "dim1-of-%u", n);
        cr_assert_eq(ckpt_tree_lookup(t, layout, name, &st, &err), CKPT_OK, "%s", err.message);
    }
    cr_assert_eq(ckpt_tree_lookup(t, layout, "dim2-of-7", &st, &err), CKPT_E_LIMIT);
    cr_assert(strstr(err.message, "dim2-of-7") != NULL, "%s", err.message);
    cr_assert_eq(ckpt_tree_getattr(t, last, &st, &err), CKPT_OK);
    cr_assert_eq(st.type, CKPT_NODE_DIR);
    ckpt_tree_free(t);
    ref_free(&fx);
}

/* ------------------------------------------------------------------ steps that go away */

static size_t open_fds(void) {
    size_t n = 0;
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d);
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* Fds of this process that point into `dir` (a removed directory's files read
 * "<path> (deleted)"). */
static size_t fds_into(const char *dir) {
    size_t n = 0, dl = strlen(dir);
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d);
    struct dirent *de;
    while ((de = readdir(d))) {
        char link[300], target[4096];
        snprintf(link, sizeof link, "/proc/self/fd/%s", de->d_name);
        ssize_t k = readlink(link, target, sizeof target - 1);
        if (k <= 0) continue;
        target[k] = 0;
        if (strncmp(target, dir, dl) == 0 && target[dl] == '/') n++;
    }
    closedir(d);
    return n;
}

/* Makes the top level rescan now (it rescans at most once a second, on getattr of it). */
static void rescan(ckpt_tree *t) {
    usleep(1100 * 1000);
    ckpt_tree_stat st;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_tree_getattr(t, CKPT_TREE_ROOT, &st, &err), CKPT_OK, "%s", err.message);
}

/* Issue #22: a step removed from a directory of checkpoints (keep-N retention) keeps serving
 * the files opened through it, as a removed file does, and once the last of them is released
 * its index and shard file descriptors are freed (they were kept until unmount). */
Test(tree, removed_step_is_freed_after_its_last_open_file) {
    ref_fixture fx;
    cr_assert_eq(ref_load("fsdp2_ws2", &fx), 0);
    char root[] = "/tmp/ckpt-tree-gone-XXXXXX", cmd[8192], step[300], gone[300];
    cr_assert_not_null(mkdtemp(root));
    snprintf(step, sizeof step, "%s/step-1", root);
    snprintf(gone, sizeof gone, "%s/.removed", root);
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s' && cp -r '%s' '%s/step-2'", fx.ckpt_dir, step,
             fx.ckpt_dir, root);
    cr_assert_eq(system(cmd), 0);
    size_t fds0 = open_fds();
    ckpt_tree *t = NULL;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_tree_open(root, NULL, &t, &err), CKPT_OK, "%s", err.message);

    /* two tensors of step-1: one read and kept open, one only read */
    const ref_entry *re[2] = {NULL, NULL};
    for (size_t i = 0; i < fx.n && !re[1]; i++)
        if (fx.entries[i].kind == 'T' && fx.entries[i].nbytes) re[re[0] ? 1 : 0] = &fx.entries[i];
    cr_assert_not_null(re[1]);
    ckpt_ino ino[2];
    ckpt_tree_scratch s = {0};
    /* entry paths come from a reader of the same checkpoint */
    ckpt_reader *r = NULL;
    cr_assert_eq(ckpt_reader_open(step, NULL, &r, &err), CKPT_OK, "%s", err.message);
    for (int k = 0; k < 2; k++) {
        const ckpt_entry *e = ckpt_reader_find(r, re[k]->key);
        cr_assert_not_null(e);
        char path[4096];
        snprintf(path, sizeof path, "step-1/%s", ckpt_entry_path(e));
        ino[k] = lookup_path(t, path);
        size_t got;
        free(read_window(t, ino[k], 0, re[k]->nbytes, 8, 1, &s, &got));
        ckpt_tree_read_end(t, &s);
    }
    ckpt_reader_free(r);
    cr_assert_eq(ckpt_tree_open_file(t, ino[0], &err), CKPT_OK, "%s", err.message);
    size_t held = fds_into(step);
    cr_assert_gt(held, 0, "reading step-1 opened none of its shard files");

    /* the step goes away (renamed to a hidden name: no longer a step, its files still
     * exist, so the fds can be told apart by path) */
    cr_assert_eq(rename(step, gone), 0);
    rescan(t);
    rescan(t);
    /* the open file still reads, bit-exactly: the step is kept whole while a file of it is
     * open */
    size_t got;
    uint8_t *b = read_window(t, ino[0], 0, re[0]->nbytes, 8, 1, &s, &got);
    cr_assert_eq(got, re[0]->nbytes);
    cr_assert(memcmp(b, fx.bin + re[0]->offset, got) == 0, "the open file changed");
    free(b);
    ckpt_tree_read_end(t, &s);
    cr_assert_eq(fds_into(gone), held, "fds of the removed step closed while a file is open");

    /* a read reply still pending holds it too */
    const ckpt_tree_seg *segs;
    size_t nsegs;
    cr_assert_eq(ckpt_tree_read(t, ino[0], 0, re[0]->nbytes, 8, 1, &s, &segs, &nsegs, &err),
                 CKPT_OK, "%s", err.message);
    ckpt_tree_release_file(t, ino[0]);
    rescan(t);
    cr_assert_eq(fds_into(gone), held, "fds closed under a pending read reply");
    ckpt_tree_read_end(t, &s);

    /* released and not read: freed at the next rescan; its inodes read as gone */
    rescan(t);
    cr_assert_eq(fds_into(gone), 0, "the removed step's shard files are still open");
    ckpt_tree_stat st;
    cr_assert_eq(ckpt_tree_getattr(t, ino[0], &st, &err), CKPT_E_NOTFOUND);
    cr_assert_eq(ckpt_tree_getattr(t, ino[1], &st, &err), CKPT_E_NOTFOUND);
    cr_assert_eq(ckpt_tree_read(t, ino[1], 0, 16, 8, 1, &s, &segs, &nsegs, &err), CKPT_E_NOTFOUND);
    /* the other step reads on, and `latest` names it */
    char *target = NULL;
    ckpt_tree_stat lst;
    cr_assert_eq(ckpt_tree_lookup(t, CKPT_TREE_ROOT, "latest", &lst, &err), CKPT_OK, "%s",
                 err.message);
    cr_assert_eq(ckpt_tree_readlink(t, lst.ino, &target, &err), CKPT_OK, "%s", err.message);
    cr_assert_str_eq(target, "step-2");
    free(target);
    r = NULL;
    snprintf(step, sizeof step, "%s/step-2", root);
    cr_assert_eq(ckpt_reader_open(step, NULL, &r, &err), CKPT_OK, "%s", err.message);
    char path[4096];
    snprintf(path, sizeof path, "step-2/%s", ckpt_entry_path(ckpt_reader_find(r, re[1]->key)));
    ckpt_reader_free(r);
    ckpt_ino i2 = lookup_path(t, path);
    b = read_window(t, i2, 0, re[1]->nbytes, 8, 1, &s, &got);
    cr_assert(got == re[1]->nbytes && memcmp(b, fx.bin + re[1]->offset, got) == 0);
    free(b);
    ckpt_tree_read_end(t, &s);

    ckpt_tree_scratch_release(&s);
    ckpt_tree_free(t);
    cr_assert_eq(open_fds(), fds0, "fds leaked");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    cr_assert_eq(system(cmd), 0);
    ref_free(&fx);
}

/* ------------------------------------------------------------------ value texts */

typedef struct value_case {
    ckpt_ino ino;
    const ckpt_entry *e;
    char *want; /* torch's repr and the newline */
    size_t len;
} value_case;

/* The non-tensor entries of a single-checkpoint tree of fixture fx, with their expected text. */
static size_t value_cases(ckpt_tree *t, const ref_fixture *fx, value_case **out) {
    ckpt_reader *r = ckpt_tree_reader(t);
    value_case *v = calloc(ckpt_reader_num_entries(r), sizeof *v);
    size_t n = 0;
    for (size_t i = 0; i < ckpt_reader_num_entries(r); i++) {
        const ckpt_entry *e = ckpt_reader_entry(r, i);
        if (ckpt_entry_kind_of(e) == CKPT_ENTRY_TENSOR) continue;
        const ref_entry *re = NULL;
        for (size_t k = 0; k < fx->n && !re; k++)
            if (fx->entries[k].kind == 'O' && !strcmp(fx->entries[k].key, ckpt_entry_key(e)))
                re = &fx->entries[k];
        cr_assert_not_null(re, "%s", ckpt_entry_key(e));
        v[n].e = e;
        v[n].ino = lookup_path(t, ckpt_entry_path(e));
        v[n].len = strlen(re->repr) + 1;
        v[n].want = malloc(v[n].len + 1);
        snprintf(v[n].want, v[n].len + 1, "%s\n", re->repr);
        n++;
    }
    *out = v;
    return n;
}

/* The kept texts as the list has them: their bytes add up to `kept`, each points back. */
static uint64_t kept_bytes(tree_values *v) {
    uint64_t sum = 0;
    pthread_mutex_lock(&v->lock);
    for (const tree_text *x = v->mru; x; x = x->next) {
        cr_assert_eq(x->owner->text, x);
        cr_assert(x->next ? x->next->prev == x : v->lru == x);
        sum += x->len;
    }
    cr_assert_eq(sum, v->kept);
    pthread_mutex_unlock(&v->lock);
    return sum;
}

static void read_value(ckpt_tree *t, const value_case *c, ckpt_tree_scratch *s) {
    ckpt_tree_stat st;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_tree_getattr(t, c->ino, &st, &err), CKPT_OK, "%s", err.message);
    cr_assert_eq(st.size, c->len, "%s: size %llu, text %zu", ckpt_entry_key(c->e),
                 (unsigned long long)st.size, c->len);
    size_t got;
    uint8_t *b = read_window(t, c->ino, 0, c->len + 16, 0, 0, s, &got);
    cr_assert_eq(got, c->len, "%s", ckpt_entry_key(c->e));
    cr_assert_eq(memcmp(b, c->want, c->len), 0, "%s: %.*s", ckpt_entry_key(c->e), (int)got, b);
    free(b);
}

/* Issue #22, daemon memory: value texts are kept within ckpt_tree_options.value_cache, the
 * least recently used dropped and rendered again when read (the same bytes, the same size
 * by getattr, which never renders once the size is known); a text a reader holds survives
 * being dropped; the tree's texts are freed with it (LeakSanitizer). */
Test(tree, value_texts_kept_within_the_budget) {
    ref_fixture fx;
    cr_assert_eq(ref_load("fsdp2_ws1", &fx), 0);
    ckpt_tree_options o = {.value_cache = 1};
    ckpt_tree *t = NULL;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_tree_open(fx.ckpt_dir, &o, &t, &err), CKPT_OK, "%s", err.message);
    value_case *vc;
    size_t n = value_cases(t, &fx, &vc);
    cr_assert_geq(n, 4, "%zu values", n);
    tree_values *v = &t->values;
    /* room for the two longest texts, not for all */
    size_t a = 0, b = 0, all = 0;
    for (size_t i = 0; i < n; i++) {
        all += vc[i].len;
        if (vc[i].len > a)
            b = a, a = vc[i].len;
        else if (vc[i].len > b)
            b = vc[i].len;
    }
    v->budget = a + b;
    cr_assert_lt(v->budget, all);
    ckpt_tree_scratch s = {0};
    for (int pass = 0; pass < 3; pass++)
        for (size_t i = 0; i < n; i++) {
            read_value(t, &vc[i], &s);
            cr_assert_leq(kept_bytes(v), v->budget);
            cr_assert_not_null(v->mru);
            cr_assert_eq(v->mru->owner, &t->slots[0]->objects[ckpt_entry_index(vc[i].e)],
                         "the text just read is the most recent");
        }
    /* every pass renders each again: only the last two read are kept between passes */
    cr_assert_geq(v->renders, 3 * n - 2, "%llu renders", (unsigned long long)v->renders);
    cr_assert_geq(v->drops, 3 * n - 2 - 2);
    /* sizes stay known without the text: getattr renders nothing */
    uint64_t renders = v->renders;
    for (size_t i = 0; i < n; i++) {
        ckpt_tree_stat st;
        cr_assert_eq(ckpt_tree_getattr(t, vc[i].ino, &st, &err), CKPT_OK, "%s", err.message);
        cr_assert_eq(st.size, vc[i].len);
    }
    cr_assert_eq(v->renders, renders);
    /* a held text outlives its drop and counts against the budget until given back (a
     * reader holds one only while it copies: a render would wait for it here) */
    tree_ckpt *c = t->slots[0];
    const tree_text *held = tree_value_get(c, vc[0].e, &err);
    cr_assert_not_null(held, "%s", err.message);
    tree_values_forget(c);
    cr_assert_null(c->objects[ckpt_entry_index(vc[0].e)].text, "dropped while held");
    cr_assert_eq(v->held, vc[0].len);
    cr_assert_eq(kept_bytes(v), 0);
    cr_assert_eq(held->len, vc[0].len);
    cr_assert_eq(memcmp(held->data, vc[0].want, vc[0].len), 0);
    tree_value_put(c, held);
    cr_assert_eq(v->held, 0);
    cr_assert_eq(v->reserved, 0);
    /* a budget of 0 bytes kept: nothing kept, every read still right */
    v->budget = 0;
    read_value(t, &vc[1], &s);
    cr_assert_eq(kept_bytes(v), 0);
    cr_assert_null(v->mru);
    ckpt_tree_scratch_release(&s);
    for (size_t i = 0; i < n; i++)
        free(vc[i].want);
    free(vc);
    ckpt_tree_free(t);
    ref_free(&fx);
}

typedef struct value_reader {
    ckpt_tree *t;
    value_case *vc;
    size_t n;
    unsigned seed;
} value_reader;

static void *value_reader_run(void *arg) {
    value_reader *r = arg;
    ckpt_tree_scratch s = {0};
    for (int k = 0; k < 400; k++)
        read_value(r->t, &r->vc[rand_r(&r->seed) % r->n], &s);
    ckpt_tree_scratch_release(&s);
    return NULL;
}

/* Threads reading values while others drop them (a budget of one text): every read right,
 * the list consistent after (under ASan/UBSan: no use after free). */
Test(tree, value_texts_dropped_under_readers) {
    ref_fixture fx;
    cr_assert_eq(ref_load("fsdp2_ws1", &fx), 0);
    ckpt_tree *t = NULL;
    ckpt_error err = {0};
    ckpt_tree_options o = {.value_cache = 1};
    cr_assert_eq(ckpt_tree_open(fx.ckpt_dir, &o, &t, &err), CKPT_OK, "%s", err.message);
    value_case *vc;
    size_t n = value_cases(t, &fx, &vc);
    size_t longest = 0;
    for (size_t i = 0; i < n; i++)
        if (vc[i].len > longest) longest = vc[i].len;
    t->values.budget = longest;
    pthread_t th[6];
    value_reader rd[6];
    for (int i = 0; i < 6; i++) {
        rd[i] = (value_reader){.t = t, .vc = vc, .n = n, .seed = 17u + (unsigned)i};
        cr_assert_eq(pthread_create(&th[i], NULL, value_reader_run, &rd[i]), 0);
    }
    for (int i = 0; i < 6; i++)
        pthread_join(th[i], NULL);
    uint64_t kept = kept_bytes(&t->values);
    cr_assert_leq(kept, longest, "kept %llu, longest %zu, budget %llu", (unsigned long long)kept,
                  longest, (unsigned long long)t->values.budget);
    cr_assert_gt(t->values.drops, 0);
    /* one total: kept + held + rendering never past the budget, or past one render that
     * needs more than the budget alone (the render budget before its length is known, and
     * twice its stored pickle and TREE_DECODE_SLACK for its decode) */
    uint64_t one = 0;
    for (size_t i = 0; i < n; i++) {
        ckpt_chunk_info ci;
        cr_assert_eq(ckpt_entry_chunk(vc[i].e, 0, &ci), CKPT_OK);
        uint64_t need = (16u << 20) + 2 + 2 * ci.length + TREE_DECODE_SLACK;
        if (need > one) one = need;
    }
    uint64_t bound = one > t->values.budget ? one : t->values.budget;
    cr_assert_leq(t->values.peak, bound, "peak %llu, bound %llu",
                  (unsigned long long)t->values.peak, (unsigned long long)bound);
    cr_assert_eq(t->values.held, 0);
    cr_assert_eq(t->values.reserved, 0);
    for (size_t i = 0; i < n; i++)
        free(vc[i].want);
    free(vc);
    ckpt_tree_free(t);
    ref_free(&fx);
}
