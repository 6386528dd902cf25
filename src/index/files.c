/* files.c — the data files a checkpoint references: name validation (no path traversal),
 * interning, and lazily opened read-only descriptors shared by all threads. */
#include "index/reader_i.h"

#include "util/error.h"
#include "util/source.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool ck_safe_file_name(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > 255 || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) return false;
    for (size_t i = 0; i < n; i++)
        if (name[i] == '/' || (unsigned char)name[i] < 0x20) return false;
    return true;
}

static bool name_eq(const void *ctx, uint64_t v) {
    const void *const *c = ctx;
    const ckpt_reader *r = c[0];
    return strcmp(r->files[v].name, (const char *)c[1]) == 0;
}

bool ck_safe_rel_path(const char *name) {
    size_t len = strlen(name), parts = 0;
    if (len == 0 || len > 1024 || name[0] == '/') return false;
    for (const char *p = name;;) {
        const char *q = strchr(p, '/');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        char part[256];
        if (n == 0 || n >= sizeof part || ++parts > 16) return false;
        memcpy(part, p, n);
        part[n] = 0;
        if (!ck_safe_file_name(part)) return false;
        if (!q) return true;
        p = q + 1;
    }
}

static int32_t intern(ckpt_reader *r, const char *name, bool sub, const char **problem);

int32_t ck_files_intern(ckpt_reader *r, const char *name, const char **problem) {
    return intern(r, name, false, problem);
}

int32_t ck_files_intern_sub(ckpt_reader *r, const char *name, const char **problem) {
    return intern(r, name, true, problem);
}

static int32_t intern(ckpt_reader *r, const char *name, bool sub, const char **problem) {
    *problem = NULL;
    uint64_t h = ck_hash_bytes(name, strlen(name), 7), v;
    const void *ctx[2] = {r, name};
    if (ck_htab_find(&r->file_by_name, h, name_eq, ctx, &v)) return (int32_t)v;
    if (sub ? !ck_safe_rel_path(name) : !ck_safe_file_name(name)) {
        char msg[400];
        snprintf(msg, sizeof msg,
                 "relative_path '%.300s' is not a plain file name (path traversal refused)", name);
        *problem = ck_arena_strndup(r->arena, msg, strlen(msg));
        if (!*problem) *problem = "relative_path is not a plain file name (path traversal refused)";
        return -1;
    }
    if (r->nfiles >= INT32_MAX) return -1;
    if (r->nfiles == r->files_cap) {
        size_t cap = r->files_cap ? r->files_cap * 2 : 16;
        ck_file *n = realloc(r->files, cap * sizeof *n);
        if (!n) return -1;
        r->files = n;
        r->files_cap = cap;
    }
    ck_file *f = &r->files[r->nfiles];
    f->name = ck_arena_strndup(r->arena, name, strlen(name));
    f->fd = -1;
    f->open_errno = 0;
    if (!f->name || !ck_htab_insert(&r->file_by_name, h, r->nfiles)) return -1;
    return (int32_t)r->nfiles++;
}

/* The status of a failed ck_files_fd (err may be NULL). */
static ckpt_status files_fd_status(ckpt_reader *r, uint32_t file_id) {
    if (file_id >= r->nfiles) return CKPT_E_INVAL;
    pthread_mutex_lock(&r->lock);
    int saved = r->files[file_id].open_errno;
    pthread_mutex_unlock(&r->lock);
    return saved == ENOENT ? CKPT_E_NOTFOUND : CKPT_E_IO;
}

int ck_files_fd(ckpt_reader *r, uint32_t file_id, ckpt_error *err) {
    if (file_id >= r->nfiles) {
        ck_fail(err, CKPT_E_INVAL, "no data file #%u", file_id);
        return -1;
    }
    ck_file *f = &r->files[file_id];
    pthread_mutex_lock(&r->lock);
    int fd = f->fd;
    if (fd < 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", r->dir, f->name);
        fd = strchr(f->name, '/') ? ck_open_regular_below(r->dir, f->name, NULL)
                                  : ck_open_regular(path, NULL); /* never blocks on a FIFO */
        if (fd < 0)
            f->open_errno = errno;
        else
            f->fd = fd;
    }
    int saved = f->open_errno;
    pthread_mutex_unlock(&r->lock);
    if (fd < 0)
        ck_fail(err, saved == ENOENT ? CKPT_E_NOTFOUND : CKPT_E_IO, "%s/%s: cannot open: %s",
                r->dir, f->name,
                saved == ELOOP && strchr(f->name, '/')
                    ? "a symbolic link on the way (not followed below the checkpoint directory)"
                    : ck_open_strerror(saved));
    return fd;
}

void ck_files_close_all(ckpt_reader *r) {
    for (size_t i = 0; i < r->nfiles; i++)
        if (r->files[i].fd >= 0) close(r->files[i].fd);
}

ckpt_status ck_loc_source(ckpt_reader *r, const ck_loc *loc, const char *what, ck_source *src,
                          ckpt_error *err) {
    if (loc->file_id < 0)
        return ck_fail(err, CKPT_E_FORMAT, "%s: %s", what,
                       loc->problem ? loc->problem : "no storage location");
    int fd = ck_files_fd(r, (uint32_t)loc->file_id, err);
    if (fd < 0) {
        ck_error_suffix(err, " (needed by %s)", what);
        return files_fd_status(r, (uint32_t)loc->file_id);
    }
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        (loc->offset > (uint64_t)st.st_size || loc->length > (uint64_t)st.st_size - loc->offset))
        return ck_fail(
            err, CKPT_E_RANGE, "%s: bytes [%llu, %llu) of %s lie past its end (%lld bytes)", what,
            (unsigned long long)loc->offset, (unsigned long long)(loc->offset + loc->length),
            r->files[loc->file_id].name, (long long)st.st_size);
    src->fd = fd;
    src->base = loc->offset;
    src->len = loc->length;
    src->mem = NULL;
    src->name = r->files[loc->file_id].name;
    src->count = &r->io_data;
    return CKPT_OK;
}

int ckpt_reader_file_fd(ckpt_reader *r, uint32_t file_id, ckpt_error *err) {
    return ck_files_fd(r, file_id, err);
}

size_t ckpt_reader_num_files(const ckpt_reader *r) { return r->nfiles; }

const char *ckpt_reader_file_name(const ckpt_reader *r, uint32_t file_id) {
    return file_id < r->nfiles ? r->files[file_id].name : NULL;
}
