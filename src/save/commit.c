/* commit.c — the atomic publication of one checkpoint (ckpt_save_begin / _commit / txn_free):
 * data goes to a hidden staging directory beside the final one, `.metadata` is written last,
 * files and directories are fsync'ed, and one rename makes the step visible.  Whatever
 * happens before that rename, `<dir>` does not exist. */
#include "save/save_i.h"

#include "ckpt_manifest.h"
#include "util/error.h"

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

struct ckpt_save_txn {
    char *final_dir;
    char *parent;
    char *staging;
    ckpt_save_options opts;
    char *checkpoint_id; /* copy of opts.checkpoint_id */
    bool committed;
};

ckpt_status ckpt_save_begin(const char *dir, const ckpt_save_options *opts, ckpt_save_txn **out,
                            ckpt_error *err) {
    *out = NULL;
    if (!dir || !*dir) return ck_fail(err, CKPT_E_INVAL, "no directory");
    CK_TRY(save_options_check(opts, err));
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    ckpt_save_txn *t = calloc(1, sizeof *t);
    if (!t) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    if (opts) t->opts = *opts;
    t->final_dir = strndup(dir, n);
    if (opts && opts->checkpoint_id) t->checkpoint_id = strdup(opts->checkpoint_id);
    ckpt_status s = CKPT_OK;
    if (!t->final_dir || (opts && opts->checkpoint_id && !t->checkpoint_id)) {
        s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
        goto fail;
    }
    t->opts.checkpoint_id = t->checkpoint_id;
    const char *slash = strrchr(t->final_dir, '/');
    const char *base = slash ? slash + 1 : t->final_dir;
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
        s = ck_fail(err, CKPT_E_INVAL, "%s: not a usable directory name", dir);
        goto fail;
    }
    t->parent =
        slash ? (slash == t->final_dir ? strdup("/")
                                       : strndup(t->final_dir, (size_t)(slash - t->final_dir)))
              : strdup(".");
    if (!t->parent) {
        s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
        goto fail;
    }
    struct stat st;
    if (lstat(t->final_dir, &st) == 0) {
        s = ck_fail(err, CKPT_E_INVAL, "%s: already exists", t->final_dir);
        goto fail;
    }
    unsigned char r[8];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_sec;
        memcpy(r, &x, 8);
    }
    char hex[17];
    for (int i = 0; i < 8; i++)
        snprintf(hex + 2 * i, 3, "%02x", r[i]);
    if (asprintf(&t->staging, "%s/.%s.tmp-%s", t->parent, base, hex) < 0) {
        t->staging = NULL;
        s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
        goto fail;
    }
    if (mkdir(t->staging, 0755) != 0) {
        s = ck_fail(err, CKPT_E_IO, "%s: mkdir: %s", t->staging, strerror(errno));
        free(t->staging);
        t->staging = NULL;
        goto fail;
    }
    *out = t;
    return CKPT_OK;
fail:
    ckpt_save_txn_free(t);
    return s;
}

const char *ckpt_save_txn_staging_dir(const ckpt_save_txn *t) { return t ? t->staging : NULL; }

/* Hashes the complete staging checkpoint through the reader and writes its manifest. */
static ckpt_status seal(const char *dir, ckpt_error *err) {
    ckpt_reader *r;
    CK_TRY(ckpt_reader_open(dir, NULL, &r, err));
    ckpt_manifest *m = NULL;
    ckpt_status s = ckpt_manifest_build(r, 0, NULL, NULL, &m, err);
    if (s == CKPT_OK) s = ckpt_manifest_save(m, dir, err);
    ckpt_manifest_free(m);
    ckpt_reader_free(r);
    if (s != CKPT_OK) ck_error_prefix(err, "sealing %s: ", dir);
    return s;
}

ckpt_status ckpt_save_commit(ckpt_save_txn *t, const ckpt_save_desc *const *descs, size_t ndescs,
                             ckpt_error *err) {
    if (!t || !t->staging) return ck_fail(err, CKPT_E_INVAL, "no transaction");
    if (t->committed) return ck_fail(err, CKPT_E_INVAL, "%s: already committed", t->final_dir);
    bool sync = !t->opts.no_fsync;
    CK_TRY(save_write_metadata_id(t->staging, descs, ndescs, &t->opts, t->final_dir, err));
    if (t->opts.seal) CK_TRY(seal(t->staging, err));
    /* RENAME_NOREPLACE refuses a target created meanwhile; file systems without it fall back
     * to rename, which still fails on a non-empty directory. */
    int rc = renameat2(AT_FDCWD, t->staging, AT_FDCWD, t->final_dir, RENAME_NOREPLACE);
    if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) rc = rename(t->staging, t->final_dir);
    if (rc != 0)
        return ck_fail(err, CKPT_E_IO, "rename %s -> %s: %s", t->staging, t->final_dir,
                       strerror(errno));
    t->committed = true;
    if (sync) CK_TRY(save_fsync_dir(t->parent, err));
    return CKPT_OK;
}

void ckpt_save_txn_free(ckpt_save_txn *t) {
    if (!t) return;
    if (!t->committed && t->staging) save_remove_tree(t->staging, NULL);
    free(t->final_dir);
    free(t->parent);
    free(t->staging);
    free(t->checkpoint_id);
    free(t);
}
