/* dcp.c — the DCP storage format: a directory with a `.metadata` pickle (torch 1.13 – today,
 * Megatron torch_dist), or with rank-local `__<rank>.metadata` files.  Each pickle is decoded
 * with the data-only decoder and walked into the index (metadata_walk.c), while it is decoded
 * when it is the only one (metadata_overlap.c); Megatron's flattened tensors get their
 * original shape back when every file is added (mcore_flat.c). */
#include "index/dcp.h"

#include "index/formats.h"
#include "index/image.h"
#include "index/mcore_flat.h"
#include "index/metadata_files.h"
#include "index/metadata_overlap.h"
#include "index/metadata_walk.h"

#include "util/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Whether the index of the next metadata file may be walked while it is decoded: with a
 * second thread allowed, into an index still empty (what the walk finds then does not
 * depend on earlier files). */
static bool may_overlap(const ckpt_reader *r) {
    return r->limits.index_threads > 1 && r->nentries == 0 && r->nfiles == 0;
}

/* Decodes a metadata pickle (from the file `path`, or buf[0, len) when buf is set) and adds
 * it to the index, walking it while it is decoded when may_overlap. */
static ckpt_status add_metadata(ckpt_reader *r, const char *path, const uint8_t *buf, size_t len,
                                bool only_file, bool lockstep, ckpt_error *err) {
    ck_overlap *ov = may_overlap(r) ? ck_overlap_new(r, path, only_file, lockstep) : NULL;
    const pk_watch *watch = ov ? ck_overlap_watch(ov) : NULL;
    pk_doc *doc = NULL;
    ckpt_status s;
    if (buf) {
        pk_limits lim = ck_metadata_pk_limits(&r->limits, len);
        pk_input in = {.buf = buf, .len = len};
        s = pk_decode_watched(&in, &lim, watch, &doc, err);
        if (s != CKPT_OK) ck_error_prefix(err, "%s: ", path);
    } else {
        s = ck_metadata_decode_file_watched(path, &r->limits, watch, &r->io_meta, &doc, &len, err);
    }
    bool complete = false;
    r->index_overlapped = false;
    r->index_split_batches = 0;
    if (ov) {
        ckpt_error ov_err;
        ckpt_status os = ck_overlap_finish(ov, doc, &complete, &ov_err);
        if (s == CKPT_OK && os != CKPT_OK) {
            s = os;
            if (err) *err = ov_err;
        }
    }
    if (s == CKPT_OK) {
        r->info.metadata_bytes += len;
        r->info.num_metadata_files++;
        if (!complete) s = ck_walk_doc(r, path, doc, err);
        if (s == CKPT_OK) s = mcore_note(r, path, pk_doc_root(doc), err);
        r->index_overlapped = complete;
    }
    pk_doc_free(doc);
    return s;
}

/* only_file: no other metadata file will be added. */
static ckpt_status add_file(ckpt_reader *r, const char *name, bool only_file, ckpt_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", r->dir, name);
    if (!r->image) return add_metadata(r, path, NULL, 0, only_file, false, err);
    /* opened from an image (image.h): its bytes, as if read from the file */
    const index_image_file *f = index_image_find(r->image, name);
    if (!f) return ck_fail(err, CKPT_E_NOTFOUND, "%s: cannot open: %s", path, strerror(ENOENT));
    CK_TRY(index_metadata_check_head(path, f->data, (size_t)f->len, err));
    return add_metadata(r, path, f->data, (size_t)f->len, only_file, false, err);
}

/* The ranks of an image's `__<rank>.metadata` files (malloc'ed). */
static ckpt_status image_ranks(const index_image *img, long long **ranks, size_t *n,
                               ckpt_error *err) {
    *n = 0;
    *ranks = malloc((img->n ? img->n : 1) * sizeof **ranks);
    if (!*ranks) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    for (size_t i = 0; i < img->n; i++) {
        char name[64];
        long long k;
        int used = 0;
        if (img->files[i].name_len >= sizeof name) continue;
        memcpy(name, img->files[i].name, img->files[i].name_len);
        name[img->files[i].name_len] = '\0';
        if (sscanf(name, "__%lld.metadata%n", &k, &used) == 1 &&
            (size_t)used == img->files[i].name_len && k >= 0)
            (*ranks)[(*n)++] = k;
    }
    return CKPT_OK;
}

/* Rank-local metadata: `__<rank>.metadata` files, merged in rank order. */
static ckpt_status add_rank_local(ckpt_reader *r, ckpt_error *err) {
    long long *ranks = NULL;
    size_t n = 0;
    if (r->image) /* the image's files, in rank order as listed when it was read */
        CK_TRY(image_ranks(r->image, &ranks, &n, err));
    else
        CK_TRY(ck_metadata_list_ranks(r->dir, &ranks, &n, err));
    ckpt_status s = CKPT_OK;
    if (!n) {
        free(ranks);
        return ck_fail(err, CKPT_E_NOTFOUND, "%s: no __<rank>.metadata files", r->dir);
    }
    for (size_t i = 0; i < n && s == CKPT_OK; i++) {
        char name[64];
        snprintf(name, sizeof name, "__%lld.metadata", ranks[i]);
        s = add_file(r, name, n == 1, err);
    }
    free(ranks);
    r->info.rank_local_metadata = n > 0;
    return s;
}

ckpt_status dcp_add_buffer(ckpt_reader *r, const char *name, const uint8_t *buf, size_t len,
                           bool lockstep, ckpt_error *err) {
    return add_metadata(r, name, buf, len, true, lockstep, err);
}

static ckpt_status add_dot_metadata(ckpt_reader *r, ckpt_error *err) {
    return add_file(r, ".metadata", true, err);
}

/* Data files "__<rank>_<n>.distcp" (any prefix before the "__"). */
static long long dcp_file_rank(const char *name) {
    const char *p = strstr(name, "__");
    if (!p || p[2] < '0' || p[2] > '9') return -1;
    char *end;
    long long rank = strtoll(p + 2, &end, 10);
    return *end == '_' ? rank : -1;
}

/* A regular file `name` in dir marks it (written last, renamed into place). */
static ck_dir_kind probe_named(const char *dir, const char *name, struct timespec *mtime) {
    char path[4096];
    struct stat st;
    int n = snprintf(path, sizeof path, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof path) return CK_DIR_NONE; /* too long to be one */
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return CK_DIR_NONE;
    if (mtime) *mtime = st.st_mtim;
    return CK_DIR_MARKED;
}

static ck_dir_kind probe_dot_metadata(const char *dir, struct timespec *mtime) {
    return probe_named(dir, ".metadata", mtime);
}

static ck_dir_kind probe_rank_local(const char *dir, struct timespec *mtime) {
    return probe_named(dir, "__0.metadata", mtime);
}

const index_format index_format_dcp = {.name = "dcp",
                                       .add = add_dot_metadata,
                                       .finish = mcore_reformulate,
                                       .file_rank = dcp_file_rank,
                                       .probe = probe_dot_metadata};
const index_format index_format_dcp_rank_local = {.name = "dcp-rank-local",
                                                  .add = add_rank_local,
                                                  .finish = mcore_reformulate,
                                                  .file_rank = dcp_file_rank,
                                                  .probe = probe_rank_local};
