/* metadata_dump.c — ckpt_metadata_dump_json: a checkpoint's `.metadata` (or its rank-local
 * `__<r>.metadata` files) decoded with the data-only pickle decoder and rendered as JSON,
 * for `ckpt dump-metadata`.  Independent of the index: it shows the raw pickle tree. */
#include "ckpt.h"

#include "pickle/pickle.h"
#include "util/error.h"
#include "util/source.h"
#include "util/strbuf.h"
#include "value/value.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct dump_limits {
    uint64_t max_file;
    pk_limits pk;
} dump_limits;

static void limits_from(const ckpt_open_options *opts, dump_limits *l) {
    ckpt_limits g = {0};
    if (opts && opts->limits) g = *opts->limits;
    l->max_file = g.max_metadata_bytes ? g.max_metadata_bytes : 4ull << 30;
    l->pk = (pk_limits){
        .max_bytes = g.max_pickle_memory ? g.max_pickle_memory : 8ull << 30,
        .max_items = g.max_items ? g.max_items : 256ull << 20,
        .max_depth = g.max_depth ? g.max_depth : 256, /* as ckpt_reader_open */
    };
}

/* Reads and renders one metadata file.  CKPT_E_NOTFOUND when it does not exist. */
static ckpt_status dump_file(const char *path, const dump_limits *l, char **out, ckpt_error *err) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ckpt_fail(err, errno == ENOENT ? CKPT_E_NOTFOUND : CKPT_E_IO, "%s: cannot open: %s",
                         path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ckpt_fail(err, CKPT_E_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > l->max_file) {
        close(fd);
        return ckpt_fail(err, CKPT_E_LIMIT, "%s: %lld bytes exceed the metadata size limit of %llu",
                         path, (long long)st.st_size, (unsigned long long)l->max_file);
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        close(fd);
        return ckpt_fail(err, CKPT_E_NOMEM, "%s: out of memory reading %zu bytes", path, n);
    }
    ckpt_source src = {.fd = fd, .base = 0, .len = n, .name = path};
    ckpt_status s = ckpt_source_read(&src, 0, buf, n, err);
    close(fd);
    pk_doc *doc = NULL;
    if (s == CKPT_OK) {
        s = pk_decode(buf, n, &l->pk, &doc, err);
        if (s != CKPT_OK) ckpt_error_prefix(err, "%s: ", path);
    }
    free(buf);
    if (s == CKPT_OK) {
        s = pk_to_json(pk_doc_root(doc), l->pk.max_depth, out, err);
        if (s != CKPT_OK) ckpt_error_prefix(err, "%s: ", path);
    }
    pk_doc_free(doc);
    return s;
}

static int cmp_rank(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

/* Ranks of the `__<r>.metadata` files in dir, sorted. */
static ckpt_status list_ranks(const char *dir, long long **ranks, size_t *count, ckpt_error *err) {
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

ckpt_status ckpt_metadata_dump_json(const char *dir, const ckpt_open_options *opts, char **out,
                                    ckpt_error *err) {
    if (!out) return ckpt_fail(err, CKPT_E_INVAL, "ckpt_metadata_dump_json: NULL argument");
    *out = NULL;
    if (!dir) return ckpt_fail(err, CKPT_E_INVAL, "no checkpoint directory given");
    struct stat st;
    if (stat(dir, &st) < 0)
        return ckpt_fail(err, errno == ENOENT ? CKPT_E_NOTFOUND : CKPT_E_IO, "%s: %s", dir,
                         strerror(errno));
    if (!S_ISDIR(st.st_mode)) return ckpt_fail(err, CKPT_E_INVAL, "%s: not a directory", dir);
    dump_limits l;
    limits_from(opts, &l);

    size_t dl = strlen(dir);
    char *path = malloc(dl + 64);
    if (!path) return ckpt_fail(err, CKPT_E_NOMEM, "out of memory");
    snprintf(path, dl + 64, "%s/.metadata", dir);
    ckpt_status s = dump_file(path, &l, out, err);
    if (s != CKPT_E_NOTFOUND) {
        free(path);
        return s;
    }

    long long *ranks = NULL;
    size_t n = 0;
    s = list_ranks(dir, &ranks, &n, err);
    if (s == CKPT_OK && n == 0)
        s = ckpt_fail(err, CKPT_E_NOTFOUND,
                      "%s: no .metadata file (not a checkpoint, or an incomplete one)", dir);
    ckpt_strbuf sb = CKPT_STRBUF_INIT;
    ckpt_strbuf_addc(&sb, '{');
    for (size_t i = 0; i < n && s == CKPT_OK; i++) {
        snprintf(path, dl + 64, "%s/__%lld.metadata", dir, ranks[i]);
        char *one = NULL;
        s = dump_file(path, &l, &one, err);
        if (s != CKPT_OK) break;
        ckpt_strbuf_addf(&sb, "%s\"__%lld.metadata\":", i ? "," : "", ranks[i]);
        ckpt_strbuf_adds(&sb, one);
        free(one);
    }
    ckpt_strbuf_addc(&sb, '}');
    if (s == CKPT_OK) s = ckpt_strbuf_status(&sb, "metadata dump", err);
    if (s == CKPT_OK) {
        *out = ckpt_strbuf_detach(&sb, NULL);
        if (!*out) s = ckpt_fail(err, CKPT_E_NOMEM, "out of memory");
    } else {
        ckpt_strbuf_release(&sb);
    }
    free(ranks);
    free(path);
    return s;
}
