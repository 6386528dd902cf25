/* run.c — run directories: steps, their order, trackers (run.h), and ckpt_run_latest. */
#include "run/run.h"

#include "index/formats.h"
#include "index/metadata_files.h"
#include "util/error.h"
#include "util/source.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

bool run_step_number(const char *name, uint64_t *num) {
    size_t n = strlen(name), i = n;
    while (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9')
        i--;
    if (i == n || n - i > 19) return false;
    uint64_t v = 0;
    for (; i < n; i++)
        v = v * 10 + (uint64_t)(name[i] - '0'); /* 19 digits fit in 64 bits */
    *num = v;
    return true;
}

int run_step_cmp(const char *a, struct timespec a_mtime, const char *b, struct timespec b_mtime) {
    uint64_t x = 0, y = 0;
    bool hx = run_step_number(a, &x), hy = run_step_number(b, &y);
    if (hx != hy) return hx ? 1 : -1;
    if (x != y) return x < y ? -1 : 1;
    if (a_mtime.tv_sec != b_mtime.tv_sec) return a_mtime.tv_sec < b_mtime.tv_sec ? -1 : 1;
    if (a_mtime.tv_nsec != b_mtime.tv_nsec) return a_mtime.tv_nsec < b_mtime.tv_nsec ? -1 : 1;
    return strcmp(a, b);
}

/* The first line of a small tracker file of `run`, trimmed; false when there is none. */
static bool read_tracker(const char *run, const char *file, char *buf, size_t cap) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", run, file) >= sizeof path) return false;
    /* a FIFO must not block a scan; a symlink must not let whoever can write here steer
     * `latest` by the first line of a file they may not read */
    FILE *f = ck_fopen_regular(path, true);
    if (!f) return false;
    size_t len = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[len] = '\0';
    len = strcspn(buf, "\r\n");
    while (len && buf[len - 1] == ' ')
        len--;
    buf[len] = '\0';
    return len > 0;
}

size_t run_tracked(const char *run, char out[RUN_TRACKERS][RUN_NAME_MAX]) {
    size_t n = 0;
    if (read_tracker(run, "latest", out[n], RUN_NAME_MAX)) n++;
    if (read_tracker(run, "newest", out[n], RUN_NAME_MAX)) n++; /* SageMaker's, like latest */
    char *name = out[n];
    if (read_tracker(run, "latest_checkpointed_iteration.txt", name, RUN_NAME_MAX)) {
        char *end;
        errno = 0;
        long long it = strtoll(name, &end, 10);
        if (end != name && !*end && !errno && it >= 0) {
            snprintf(name, RUN_NAME_MAX, "iter_%07lld", it);
            n++;
        } else if (strcmp(name, "release") == 0) {
            n++;
        }
    }
    return n;
}

bool run_step_name_ok(const char *name) {
    return name && *name && name[0] != '.' && !strchr(name, '/') && strcmp(name, "latest") != 0;
}

run_step_kind run_step_probe(const char *run, const char *name, bool no_symlink,
                             struct timespec *mtime) {
    char path[4096];
    struct stat st;
    if (!run_step_name_ok(name) ||
        (size_t)snprintf(path, sizeof path, "%s/%s", run, name) >= sizeof path)
        return RUN_STEP_NONE;
    if ((no_symlink ? lstat(path, &st) : stat(path, &st)) != 0 || !S_ISDIR(st.st_mode))
        return RUN_STEP_NONE;
    switch (ck_checkpoint_dir_probe(path, mtime)) {
    case CK_DIR_MARKED: return RUN_STEP_MARKED;
    case CK_DIR_UNMARKED: return RUN_STEP_UNMARKED;
    default: return RUN_STEP_NONE;
    }
}

static int newest_first(const void *a, const void *b) {
    const run_step *x = a, *y = b;
    return run_step_cmp(y->name, y->mtime, x->name, x->mtime);
}

void run_steps_free(run_step *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(v[i].name);
    free(v);
}

ckpt_status run_list_steps(const char *run, bool no_symlink, bool with_unmarked, run_step **out,
                           size_t *n, ckpt_error *err) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(run);
    if (!d) return ck_fail(err, CKPT_E_IO, "%s: %s", run, strerror(errno));
    run_step *v = NULL;
    size_t cnt = 0, cap = 0;
    ckpt_status s = CKPT_OK;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct dirent *de;
    while ((de = readdir(d))) {
        struct timespec mt;
        run_step_kind k = run_step_probe(run, de->d_name, no_symlink, &mt);
        if (k == RUN_STEP_NONE ||
            (k == RUN_STEP_UNMARKED &&
             (!with_unmarked || now.tv_sec - mt.tv_sec < RUN_UNMARKED_SETTLE_S)))
            continue;
        if (cnt == cap) {
            size_t c = cap ? cap * 2 : 16;
            run_step *m = realloc(v, c * sizeof *m);
            if (!m) {
                s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
                break;
            }
            v = m;
            cap = c;
        }
        if (!(v[cnt].name = strdup(de->d_name))) {
            s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
            break;
        }
        v[cnt++].mtime = mt;
    }
    closedir(d);
    if (s != CKPT_OK) {
        run_steps_free(v, cnt);
        return s;
    }
    if (cnt) qsort(v, cnt, sizeof *v, newest_first);
    *out = v;
    *n = cnt;
    return CKPT_OK;
}

ckpt_status ckpt_run_latest(const char *run, bool verify, char **name, ckpt_error *err) {
    CK_ERR_OR_LOCAL(err);
    if (!name) return ck_fail(err, CKPT_E_INVAL, "ckpt_run_latest: NULL argument");
    *name = NULL;
    if (!run) return ck_fail(err, CKPT_E_INVAL, "ckpt_run_latest: NULL argument");
    char tracked[RUN_TRACKERS][RUN_NAME_MAX];
    size_t nt = run_tracked(run, tracked);
    run_step *steps = NULL;
    size_t n = 0;
    CK_TRY(run_list_steps(run, false, true, &steps, &n, err));
    /* candidates: the tracked names that are complete steps, then every step newest first */
    ckpt_status s = CKPT_E_NOTFOUND;
    for (size_t i = 0, tries = 0; i < nt + n && s == CKPT_E_NOTFOUND && tries < 8; i++) {
        const char *cand = i < nt ? tracked[i] : steps[i - nt].name;
        bool listed = i >= nt;
        for (size_t k = 0; k < n && !listed; k++)
            listed = strcmp(steps[k].name, cand) == 0;
        if (!listed) continue; /* a tracker naming no complete step */
        if (verify) {          /* the mount's test: it indexes */
            char path[4096];
            ckpt_reader *r = NULL;
            tries++;
            if ((size_t)snprintf(path, sizeof path, "%s/%s", run, cand) >= sizeof path ||
                ckpt_reader_open(path, NULL, &r, NULL) != CKPT_OK)
                continue;
            ckpt_reader_free(r);
        }
        s = (*name = strdup(cand)) ? CKPT_OK : ck_fail(err, CKPT_E_NOMEM, "out of memory");
    }
    run_steps_free(steps, n);
    if (s == CKPT_E_NOTFOUND) s = ck_fail(err, s, "%s: no complete step", run);
    return s;
}
