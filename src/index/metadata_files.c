/* metadata_files.c — limits, decoding and rank-local discovery of metadata files, and telling
 * a checkpoint directory by its files' names (see metadata_files.h). */
#include "index/metadata_files.h"

#include "index/metadata_stream.h"
#include "util/error.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void ck_limits_resolve(ckpt_limits *out, const ckpt_limits *given) {
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

pk_limits ck_metadata_pk_limits(const ckpt_limits *l, size_t len) {
    return (pk_limits){
        .max_bytes = l->max_pickle_memory,
        .max_items = l->max_items,
        .max_depth = l->max_depth,
        /* one memo store per opcode at most; the memo's memory counts against max_bytes */
        .max_memo = (uint64_t)len + 16,
    };
}

ckpt_status index_metadata_check_head(const char *path, const uint8_t *buf, size_t len,
                                      ckpt_error *err) {
    if (len >= 2 && buf[0] == 0x80 && buf[1] >= 2 && buf[1] <= 5) return CKPT_OK;
    return ck_fail(err, CKPT_E_FORMAT,
                   "%s: not a pickle of protocol 2-5 (as torch writes metadata): not a "
                   "checkpoint metadata file",
                   path);
}

ckpt_status ck_metadata_decode_file(const char *path, const ckpt_limits *l, pk_doc **doc,
                                    size_t *len, ckpt_error *err) {
    return ck_metadata_decode_file_watched(path, l, NULL, NULL, doc, len, err);
}

ckpt_status ck_metadata_decode_file_watched(const char *path, const ckpt_limits *l,
                                            const pk_watch *watch, ck_io_count *count, pk_doc **doc,
                                            size_t *len, ckpt_error *err) {
    *doc = NULL;
    ck_metadata_stream *ms = NULL;
    CK_TRY(ck_metadata_stream_open(path, l->max_metadata_bytes, count, &ms, err));
    const pk_input *in = ck_metadata_stream_input(ms);
    if (len) *len = in->len;
    /* torch pickles its metadata with protocol 2 or later: PROTO (0x80) and the protocol.
     * Anything else is not a metadata file, and the decoder's messages (opcode bytes,
     * argument lengths) would echo bytes of it: say so without them. */
    uint8_t head[2] = {0};
    if (in->len < 2 || in->read(in->ctx, head, 0, 2) != 2 ||
        index_metadata_check_head(path, head, 2, NULL) != CKPT_OK) {
        ckpt_error read_err;
        size_t have = in->len < 2 ? in->len : 2; /* `in` lives in ms */
        ckpt_status rs = ck_metadata_stream_finish(ms, &read_err);
        ck_metadata_stream_free(ms);
        if (rs != CKPT_OK) {
            if (err) *err = read_err;
            return rs;
        }
        return index_metadata_check_head(path, head, have, err);
    }
    pk_limits pl = ck_metadata_pk_limits(l, in->len);
    ckpt_status s = pk_decode_watched(in, &pl, watch, doc, err);
    if (s != CKPT_OK) ck_error_prefix(err, "%s: ", path);
    /* a failed read looks like a truncated pickle to the decoder: the read error wins */
    ckpt_error read_err;
    if (ck_metadata_stream_finish(ms, &read_err) != CKPT_OK) {
        s = read_err.code;
        if (err) *err = read_err;
        if (watch && *doc) watch->revoke(watch->ctx); /* the consumer stops reading it first */
        pk_doc_free(*doc);
        *doc = NULL;
    }
    ck_metadata_stream_free(ms);
    return s;
}

static int cmp_rank(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

ckpt_status ck_metadata_list_ranks(const char *dir, long long **ranks, size_t *count,
                                   ckpt_error *err) {
    *ranks = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d) return ck_fail(err, CKPT_E_IO, "%s: cannot list: %s", dir, strerror(errno));
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
                return ck_fail(err, CKPT_E_NOMEM, "out of memory listing %s", dir);
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
