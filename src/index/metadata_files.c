/* metadata_files.c — limits, bounded reads and rank-local discovery of metadata files
 * (see metadata_files.h). */
#include "index/metadata_files.h"

#include "util/error.h"
#include "util/source.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void ckpt_limits_resolve(ckpt_limits *out, const ckpt_limits *given) {
    *out = given ? *given : (ckpt_limits){0};
    if (!out->max_metadata_bytes) out->max_metadata_bytes = 4ull << 30;
    if (!out->max_pickle_memory) out->max_pickle_memory = 8ull << 30;
    if (!out->max_depth) out->max_depth = 256;
    if (!out->max_items) out->max_items = 256ull << 20;
    if (!out->max_object_bytes) out->max_object_bytes = 1ull << 30;
    if (!out->max_decoded_cache) out->max_decoded_cache = 512ull << 20;
    if (!out->index_threads) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        out->index_threads = cpus < 1 ? 1 : cpus > 4 ? 4 : (uint32_t)cpus;
    }
}

pk_limits ckpt_metadata_pk_limits(const ckpt_limits *l, size_t len) {
    return (pk_limits){
        .max_bytes = l->max_pickle_memory,
        .max_items = l->max_items,
        .max_depth = l->max_depth,
        /* one memo store per opcode at most; the memo's memory counts against max_bytes */
        .max_memo = (uint64_t)len + 16,
    };
}

ckpt_status ckpt_metadata_read(const char *path, uint64_t max, uint8_t **buf, size_t *len,
                               ckpt_error *err) {
    *buf = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ckpt_fail(err, errno == ENOENT ? CKPT_E_NOTFOUND : CKPT_E_IO, "%s: cannot open: %s",
                         path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ckpt_fail(err, CKPT_E_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return ckpt_fail(err, CKPT_E_LIMIT, "%s: %lld bytes exceed the metadata size limit of %llu",
                         path, (long long)st.st_size, (unsigned long long)max);
    }
    size_t n = (size_t)st.st_size;
    uint8_t *p = malloc(n ? n : 1);
    if (!p) {
        close(fd);
        return ckpt_fail(err, CKPT_E_NOMEM, "%s: out of memory reading %zu bytes", path, n);
    }
    ckpt_source src = {.fd = fd, .base = 0, .len = n, .name = path};
    ckpt_status s = ckpt_source_read(&src, 0, p, n, err);
    close(fd);
    if (s != CKPT_OK) {
        free(p);
        return s;
    }
    *buf = p;
    *len = n;
    return CKPT_OK;
}

static int cmp_rank(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

ckpt_status ckpt_metadata_list_ranks(const char *dir, long long **ranks, size_t *count,
                                     ckpt_error *err) {
    *ranks = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d) return ckpt_fail(err, CKPT_E_IO, "%s: cannot list: %s", dir, strerror(errno));
    long long *rs = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char *end;
        if (strncmp(de->d_name, "__", 2) != 0) continue;
        if (de->d_name[2] < '0' || de->d_name[2] > '9') continue;
        errno = 0;
        long long rank = strtoll(de->d_name + 2, &end, 10);
        if (errno || strcmp(end, ".metadata") != 0 || rank < 0) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            long long *nr = realloc(rs, cap * sizeof *nr);
            if (!nr) {
                free(rs);
                closedir(d);
                return ckpt_fail(err, CKPT_E_NOMEM, "out of memory listing %s", dir);
            }
            rs = nr;
        }
        rs[n++] = rank;
    }
    closedir(d);
    if (n) qsort(rs, n, sizeof *rs, cmp_rank);
    *ranks = rs;
    *count = n;
    return CKPT_OK;
}
