/* steps.c — a parent directory of checkpoint steps: the `latest` pointer file
 * (ckpt_save_set_latest / _get_latest) and keep-N retention (ckpt_save_retain), by the run
 * directory rules of src/run/ (what a complete step is, their order, the trackers). */
#include "save/save_i.h"

#include "run/run.h"

#include "util/error.h"
#include "util/source.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LATEST "latest"

static bool valid_name(const char *n) {
    return n && *n && !strchr(n, '/') && !strchr(n, '\n') && n[0] != '.';
}

/* A complete step (run.h; a real directory, not a symlink: retention must never follow one). */
static bool is_complete(const char *parent, const char *name) {
    return run_step_probe(parent, name, true, NULL) == RUN_STEP_MARKED;
}

ckpt_status ckpt_save_set_latest(const char *parent, const char *name,
                                 const ckpt_save_options *opts, ckpt_error *err) {
    if (!parent || !valid_name(name))
        return ck_fail(err, CKPT_E_INVAL, "latest: bad step name '%s'", name ? name : "(null)");
    if (!is_complete(parent, name))
        return ck_fail(err, CKPT_E_NOTFOUND, "%s/%s: not a complete checkpoint (no .metadata)",
                       parent, name);
    unsigned char r[4] = {0};
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) r[0] = (unsigned char)getpid();
    char *tmp = NULL, *fin = save_path_join(parent, LATEST);
    if (asprintf(&tmp, "%s/.latest.tmp-%02x%02x%02x%02x", parent, r[0], r[1], r[2], r[3]) < 0)
        tmp = NULL;
    ckpt_status s = CKPT_OK;
    if (!tmp || !fin) {
        s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
        goto out;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        s = ck_fail(err, CKPT_E_IO, "%s: %s", tmp, strerror(errno));
        goto out;
    }
    size_t n = strlen(name);
    bool ok = write(fd, name, n) == (ssize_t)n && write(fd, "\n", 1) == 1;
    if (ok && !(opts && opts->no_fsync)) ok = fsync(fd) == 0;
    int e = errno;
    if (close(fd) != 0) ok = false;
    if (!ok) {
        s = ck_fail(err, CKPT_E_IO, "%s: %s", tmp, strerror(e));
        unlink(tmp);
        goto out;
    }
    if (rename(tmp, fin) != 0) {
        s = ck_fail(err, CKPT_E_IO, "rename %s -> %s: %s", tmp, fin, strerror(errno));
        unlink(tmp);
        goto out;
    }
    if (!(opts && opts->no_fsync)) s = save_fsync_dir(parent, err);
out:
    free(tmp);
    free(fin);
    return s;
}

ckpt_status ckpt_save_get_latest(const char *parent, char **name, ckpt_error *err) {
    *name = NULL;
    char *p = save_path_join(parent, LATEST);
    if (!p) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    FILE *f = ck_fopen_regular(p, false);
    if (!f) {
        ckpt_status s = ck_fail(err, errno == ENOENT ? CKPT_E_NOTFOUND : CKPT_E_IO, "%s: %s", p,
                                ck_open_strerror(errno));
        free(p);
        return s;
    }
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        buf[--n] = 0;
    ckpt_status s = CKPT_OK;
    if (!valid_name(buf))
        s = ck_fail(err, CKPT_E_FORMAT, "%s: does not hold a step name", p);
    else if (!(*name = strdup(buf)))
        s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
    free(p);
    return s;
}

/* A leftover's kind from its name: ".<step>.tmp-<hex>" or ".<step>.deleting"; -1 if neither
 * (".latest.tmp-..." files of ckpt_save_set_latest are not directories and are skipped). */
static int leftover_kind(const char *n) {
    size_t len = strlen(n);
    if (n[0] != '.' || len < 3) return -1;
    static const char del[] = ".deleting";
    if (len > sizeof del && strcmp(n + len - (sizeof del - 1), del) == 0)
        return CKPT_SAVE_LEFTOVER_DELETING;
    const char *t = strstr(n + 1, ".tmp-");
    if (!t || t == n + 1 || !t[5]) return -1;
    for (const char *h = t + 5; *h; h++)
        if (!((*h >= '0' && *h <= '9') || (*h >= 'a' && *h <= 'f'))) return -1;
    return CKPT_SAVE_LEFTOVER_STAGING;
}

static double ts_s(struct timespec t) { return (double)t.tv_sec + (double)t.tv_nsec * 1e-9; }

/* The newest modification time and the total size of the regular files of directory `fd`
 * (one level: the saver writes no subdirectories), the directory's own time included. */
static void dir_age(int fd, double *newest, uint64_t *bytes) {
    struct stat st;
    *newest = fstat(fd, &st) == 0 ? ts_s(st.st_mtim) : 0;
    *bytes = 0;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)))
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
            *bytes += (uint64_t)st.st_size;
            if (ts_s(st.st_mtim) > *newest) *newest = ts_s(st.st_mtim);
        }
    closedir(d);
}

typedef struct leftover {
    char *name;
    int kind;
    double idle;
    uint64_t bytes;
} leftover;

static int leftover_cmp(const void *a, const void *b) {
    return strcmp(((const leftover *)a)->name, ((const leftover *)b)->name);
}

ckpt_status ckpt_save_leftovers(const char *parent, ckpt_save_leftover_fn fn, void *ctx,
                                ckpt_error *err) {
    if (!parent || !fn) return ck_fail(err, CKPT_E_INVAL, "ckpt_save_leftovers: NULL argument");
    DIR *d = opendir(parent);
    if (!d) return ck_fail(err, CKPT_E_IO, "%s: %s", parent, strerror(errno));
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    leftover *v = NULL;
    size_t n = 0, cap = 0;
    ckpt_status s = CKPT_OK;
    struct dirent *de;
    while (s == CKPT_OK && (de = readdir(d))) {
        int kind = leftover_kind(de->d_name);
        struct stat st;
        if (kind < 0 || fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISDIR(st.st_mode))
            continue;
        int fd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            leftover *m = realloc(v, cap * sizeof *m);
            if (!m) {
                close(fd);
                s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
                break;
            }
            v = m;
        }
        double newest;
        v[n] = (leftover){strdup(de->d_name), kind, 0, 0};
        dir_age(fd, &newest, &v[n].bytes);
        v[n].idle = ts_s(now) - newest;
        if (!v[n].name) {
            s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
            break;
        }
        n++;
    }
    closedir(d);
    if (s == CKPT_OK) {
        if (n) qsort(v, n, sizeof *v, leftover_cmp);
        for (size_t i = 0; i < n; i++)
            fn(ctx, v[i].name, (ckpt_save_leftover_kind)v[i].kind, v[i].idle, v[i].bytes);
    }
    for (size_t i = 0; i < n; i++)
        free(v[i].name);
    free(v);
    return s;
}

typedef struct sweep_ctx {
    const char *parent;
    ckpt_status s;
    ckpt_error *err;
} sweep_ctx;

static void sweep_one(void *ctx, const char *name, ckpt_save_leftover_kind kind, double idle_s,
                      uint64_t bytes) {
    (void)bytes;
    sweep_ctx *c = ctx;
    if (c->s != CKPT_OK || (kind == CKPT_SAVE_LEFTOVER_STAGING && idle_s < CKPT_SAVE_STALE_S))
        return;
    char *p = save_path_join(c->parent, name);
    c->s = p ? save_remove_tree(p, c->err) : ck_fail(c->err, CKPT_E_NOMEM, "out of memory");
    free(p);
}

ckpt_status ckpt_save_retain(const char *parent, size_t keep, const char *protect, size_t *removed,
                             ckpt_error *err) {
    if (removed) *removed = 0;
    if (!parent) return ck_fail(err, CKPT_E_INVAL, "no directory");
    char tracked[RUN_TRACKERS][RUN_NAME_MAX];
    size_t nt = run_tracked(parent, tracked);
    run_step *steps = NULL;
    size_t n = 0;
    CK_TRY(run_list_steps(parent, true, false, &steps, &n, err));
    ckpt_status s = CKPT_OK;
    /* newest first: the first `keep` stay; of the older ones, a protected one stays too (a
     * newer step is never deleted for it) */
    for (size_t i = keep; i < n && s == CKPT_OK; i++) {
        const char *nm = steps[i].name;
        bool keep_it = protect && strcmp(nm, protect) == 0;
        for (size_t k = 0; k < nt && !keep_it; k++)
            keep_it = strcmp(nm, tracked[k]) == 0;
        if (keep_it) continue;
        char *from = save_path_join(parent, nm), *to = NULL;
        if (from && asprintf(&to, "%s/.%s.deleting", parent, nm) < 0) to = NULL;
        if (!from || !to) {
            s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
        } else if (rename(from, to) != 0) {
            s = ck_fail(err, CKPT_E_IO, "rename %s -> %s: %s", from, to, strerror(errno));
        } else {
            s = save_remove_tree(to, err);
            if (s == CKPT_OK && removed) (*removed)++;
        }
        free(from);
        free(to);
    }
    run_steps_free(steps, n);
    if (s == CKPT_OK) { /* leftovers of killed saves and deletions */
        sweep_ctx c = {parent, CKPT_OK, err};
        s = ckpt_save_leftovers(parent, sweep_one, &c, err);
        if (s == CKPT_OK) s = c.s;
    }
    return s;
}
