/* fuzz_dirscan.c — libFuzzer target: the directory scanner (issue #22): what the mount and the
 * run tools see of a directory tree they did not make.  The input is a list of operations
 * that build a tree in a private directory: regular files (any bytes: `.metadata`, shards,
 * `latest`, trackers), subdirectories, symlinks (relative targets, loops and `..` included,
 * or one of a few absolute ones: /dev/zero, /dev/null, /nonexistent), FIFOs and empty names
 * refused by the file system.  Every file is dated an hour back, so steps count as settled.
 * Then: the checkpoint-directory probe, ckpt_run_latest (with and without verification) and a
 * ckpt_tree over the whole directory, walked (readdir, lookup, getattr, readlink, xattrs,
 * may_read, sources) with the first 4 KiB of every file read — bounded to 2000 nodes.
 *
 * Operations, one byte `op` then its operands (lengths one byte, names at most 48 bytes; '/'
 * and NUL in a name become '_'):
 *   op % 6 == 0  file:     name, u16 length (little endian), bytes
 *   op % 6 == 1  mkdir:    name (entered; at most 4 deep)
 *   op % 6 == 2  leave the current directory
 *   op % 6 == 3  symlink:  name, target (a leading '/' picks an absolute target by its length)
 *   op % 6 == 4  FIFO:     name
 *   op % 6 == 5  file that repeats the previous file's bytes under another name */
#include "ckpt.h"
#include "ckpt_tree.h"
#include "index/formats.h"
#include "index/metadata_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char root[64];

/* Calls fn on everything below `path` (children before their directory), then on `path`. */
static void post_order(const char *path, int depth, void (*fn)(const char *path, bool dir)) {
    DIR *d = depth < 16 ? opendir(path) : NULL;
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            char p[4096];
            int n = snprintf(p, sizeof p, "%s/%s", path, de->d_name);
            if (n < 0 || (size_t)n >= sizeof p) continue; /* deeper than any tree we build */
            struct stat st;
            if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
                post_order(p, depth + 1, fn);
            else
                fn(p, false);
        }
        closedir(d);
    }
    fn(path, true);
}

static void remove_one(const char *path, bool dir) {
    if (dir)
        rmdir(path);
    else
        unlink(path);
}

static void rm_tree(const char *path) { post_order(path, 0, remove_one); }

static void cleanup(void) { rm_tree(root); }

typedef struct {
    const uint8_t *p;
    size_t n;
} input;

static bool take(input *in, size_t k, const uint8_t **out) {
    if (in->n < k) return false;
    *out = in->p;
    in->p += k;
    in->n -= k;
    return true;
}

static bool take_name(input *in, char *name, size_t cap) {
    const uint8_t *b;
    if (!take(in, 1, &b)) return false;
    size_t k = *b % 49;
    if (k >= cap) k = cap - 1;
    const uint8_t *s;
    if (!take(in, k, &s)) return false;
    for (size_t i = 0; i < k; i++)
        name[i] = s[i] == '/' || s[i] == 0 ? '_' : (char)s[i];
    name[k] = 0;
    return true;
}

static void put_file(const char *path, const uint8_t *p, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return; /* a name the file system refuses, or one taken by a directory */
    if (n && write(fd, p, n) != (ssize_t)n) abort();
    close(fd);
}

static void build(input *in) {
    char cwd[4200];
    snprintf(cwd, sizeof cwd, "%s", root);
    int depth = 0, ops = 0;
    const uint8_t *last = NULL;
    size_t last_n = 0;
    const uint8_t *op;
    while (ops++ < 64 && take(in, 1, &op)) {
        char name[64], path[4300];
        switch (*op % 6) {
        case 0:
        case 5: {
            if (!take_name(in, name, sizeof name)) return;
            const uint8_t *p = last, *lb;
            size_t n = last_n;
            if (*op % 6 == 0) {
                if (!take(in, 2, &lb)) return;
                n = (size_t)lb[0] | (size_t)lb[1] << 8;
                if (n > in->n) n = in->n;
                take(in, n, &p);
                last = p;
                last_n = n;
            }
            snprintf(path, sizeof path, "%s/%s", cwd, name);
            put_file(path, p, n);
            break;
        }
        case 1:
            if (!take_name(in, name, sizeof name)) return;
            if (depth >= 4) break;
            snprintf(path, sizeof path, "%s/%s", cwd, name);
            if (strlen(path) < sizeof cwd && mkdir(path, 0755) == 0) {
                memcpy(cwd, path, strlen(path) + 1);
                depth++;
            }
            break;
        case 2:
            if (depth > 0) {
                *strrchr(cwd, '/') = 0;
                depth--;
            }
            break;
        case 3: {
            char target[64];
            if (!take_name(in, name, sizeof name) || !take_name(in, target, sizeof target)) return;
            static const char *const abs_targets[] = {"/dev/zero", "/dev/null", "/nonexistent"};
            const uint8_t *t;
            bool absolute = take(in, 1, &t) && (*t & 1);
            snprintf(path, sizeof path, "%s/%s", cwd, name);
            if (absolute) {
                if (symlink(abs_targets[strlen(target) % 3], path) != 0) { /* taken */
                }
            } else {
                /* relative: '_' in the name stands for '/' so targets can climb and loop */
                for (char *c = target; *c; c++)
                    if (*c == '_') *c = '/';
                if (symlink(*target ? target : ".", path) != 0) { /* taken */
                }
            }
            break;
        }
        case 4:
            if (!take_name(in, name, sizeof name)) return;
            snprintf(path, sizeof path, "%s/%s", cwd, name);
            if (mkfifo(path, 0644) != 0) { /* taken */
            }
            break;
        }
    }
}

static void backdate_one(const char *path, bool dir) {
    (void)dir;
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= 3600;
    t[1] = t[0];
    utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW);
}

typedef struct {
    ckpt_ino inos[64];
    char names[64][256];
    size_t n;
} dirents;

static bool collect(void *ctx, const char *name, const ckpt_tree_stat *st, uint64_t next) {
    (void)next;
    dirents *d = ctx;
    if (d->n == 64) return false;
    d->inos[d->n] = st->ino;
    snprintf(d->names[d->n], sizeof d->names[d->n], "%s", name);
    d->n++;
    return true;
}

static bool count_source(void *ctx, const char *path) {
    (void)path;
    ++*(size_t *)ctx;
    return true;
}

static void walk(ckpt_tree *t, ckpt_ino dir, int depth, size_t *budget, ckpt_tree_scratch *s) {
    ckpt_error err;
    dirents *d = calloc(1, sizeof *d);
    if (!d) abort();
    (void)ckpt_tree_readdir(t, dir, 0, collect, d, &err); /* the first 64 entries */
    for (size_t i = 0; i < d->n && *budget; i++, --*budget) {
        ckpt_tree_stat st;
        if (ckpt_tree_lookup(t, dir, d->names[i], &st, &err) != CKPT_OK) continue;
        ckpt_tree_stat st2;
        (void)ckpt_tree_getattr(t, st.ino, &st2, &err);
        ckpt_tree_cred cred = {.uid = 1000, .gid = 1000};
        (void)ckpt_tree_may_read(t, st.ino, &cred, &err);
        size_t nsrc = 0;
        (void)ckpt_tree_sources(t, st.ino, count_source, &nsrc, &err);
        char *names = NULL;
        size_t len = 0;
        if (ckpt_tree_listxattr(t, st.ino, &names, &len, &err) == CKPT_OK) {
            for (size_t k = 0; k < len; k += strlen(names + k) + 1) {
                char *v = NULL;
                size_t vlen = 0;
                if (ckpt_tree_getxattr(t, st.ino, names + k, &v, &vlen, &err) == CKPT_OK) free(v);
            }
            free(names);
        }
        if (st.type == CKPT_NODE_SYMLINK) {
            char *target = NULL;
            if (ckpt_tree_readlink(t, st.ino, &target, &err) == CKPT_OK) free(target);
        } else if (st.type == CKPT_NODE_FILE) {
            if (ckpt_tree_open_file(t, st.ino, &err) == CKPT_OK) {
                const ckpt_tree_seg *segs;
                size_t nsegs;
                (void)ckpt_tree_read(t, st.ino, 0, 4096, 0, 0, s, &segs, &nsegs, &err);
                ckpt_tree_read_end(t, s);
                ckpt_tree_release_file(t, st.ino);
            }
        } else if (st.type == CKPT_NODE_DIR && depth < 8) {
            walk(t, st.ino, depth + 1, budget, s);
        }
    }
    free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!root[0]) {
        snprintf(root, sizeof root, "/tmp/fuzz-dirscan-%ld", (long)getpid());
        atexit(cleanup);
    }
    rm_tree(root);
    if (mkdir(root, 0700) != 0) abort();
    input in = {data, size};
    build(&in);
    post_order(root, 0, backdate_one); /* an hour back: every step counts as settled */

    struct timespec mt;
    (void)ck_checkpoint_dir_probe(root, &mt);
    ckpt_error err;
    for (int verify = 0; verify < 2; verify++) {
        char *name = NULL;
        if (ckpt_run_latest(root, verify, &name, &err) == CKPT_OK) free(name);
    }
    ckpt_limits lim = {.max_metadata_bytes = 1u << 20};
    ckpt_open_options oo = {.limits = &lim};
    ckpt_tree_options to = {.open = &oo};
    ckpt_tree *t = NULL;
    ckpt_status ts = ckpt_tree_open(root, &to, &t, &err);
    if (ts != CKPT_OK && getenv("FUZZ_DIRSCAN_VERBOSE"))
        fprintf(stderr, "dirscan: tree: %s\n", err.message);
    if (ts == CKPT_OK) {
        ckpt_tree_scratch s = {0};
        size_t budget = 2000;
        walk(t, CKPT_TREE_ROOT, 0, &budget, &s);
        ckpt_tree_totals tot;
        ckpt_tree_get_totals(t, &tot);
        if (getenv("FUZZ_DIRSCAN_VERBOSE")) /* to see what a seed reaches */
            fprintf(stderr, "dirscan: %zu nodes walked, %llu entries, %llu tensor bytes\n",
                    2000 - budget, (unsigned long long)tot.files, (unsigned long long)tot.bytes);
        ckpt_tree_scratch_release(&s);
        ckpt_tree_free(t);
    }
    return 0;
}
