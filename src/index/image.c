/* image.c — a checkpoint's DCP metadata files as one blob (see image.h): reading them whole
 * (through the same stream, limits and errors as the index's own reads), and parsing a blob
 * handed over by another process. */
#include "index/image.h"

#include "index/metadata_files.h"
#include "index/metadata_stream.h"
#include "util/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define IMAGE_MAGIC "CKPTIMG1"
#define IMAGE_MAX_FILES (1u << 20)

typedef struct blob_buf {
    uint8_t *p;
    size_t len, cap;
} blob_buf;

static ckpt_status blob_grow(blob_buf *b, size_t more, ckpt_error *err) {
    if (more > SIZE_MAX - b->len)
        return ck_fail(err, CKPT_E_LIMIT, "metadata image: too large for this process");
    if (b->len + more <= b->cap) return CKPT_OK;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more)
        cap = cap > SIZE_MAX / 2 ? b->len + more : cap * 2;
    uint8_t *m = realloc(b->p, cap);
    if (!m) return ck_fail(err, CKPT_E_NOMEM, "out of memory (metadata image of %zu bytes)", cap);
    b->p = m;
    b->cap = cap;
    return CKPT_OK;
}

static void put_u64(blob_buf *b, uint64_t v) {
    memcpy(b->p + b->len, &v, sizeof v);
    b->len += sizeof v;
}

/* Appends the file dir/name whole: its header, then its bytes read through the metadata
 * stream (the index's errors: missing, over the limit, a failed read with its offset). */
static ckpt_status add_file(blob_buf *b, const char *dir, const char *name, uint64_t max,
                            ck_io_count *count, ckpt_error *err) {
    char path[4096];
    int pn = snprintf(path, sizeof path, "%s/%s", dir, name);
    if (pn < 0 || (size_t)pn >= sizeof path)
        return ck_fail(err, CKPT_E_INVAL, "%s: path too long", dir);
    ck_metadata_stream *ms = NULL;
    CK_TRY(ck_metadata_stream_open(path, max, count, &ms, err));
    const pk_input *in = ck_metadata_stream_input(ms);
    size_t nl = strlen(name);
    ckpt_status s = blob_grow(b, 16 + nl + in->len, err);
    if (s == CKPT_OK) {
        put_u64(b, nl);
        put_u64(b, in->len);
        memcpy(b->p + b->len, name, nl);
        b->len += nl;
        for (size_t at = 0; at < in->len;) {
            size_t got = in->read(in->ctx, b->p + b->len + at, at, in->len - at);
            if (!got) break; /* the stream keeps the error */
            at += got;
        }
        b->len += in->len;
        s = ck_metadata_stream_finish(ms, err);
    }
    ck_metadata_stream_free(ms);
    return s;
}

ckpt_status index_image_read(const char *dir, const ckpt_limits *limits, uint8_t **blob,
                             size_t *len, ckpt_reader_stats *read, ckpt_error *err) {
    *blob = NULL;
    *len = 0;
    memset(read, 0, sizeof *read);
    struct stat st;
    if (!dir || stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) return CKPT_E_NOTFOUND;
    ckpt_limits lim;
    ck_limits_resolve(&lim, limits);
    ck_io_count count = {0};
    blob_buf b = {0};
    ckpt_status s = blob_grow(&b, 16, err);
    if (s != CKPT_OK) return s;
    memcpy(b.p, IMAGE_MAGIC, 8);
    b.len = 8;
    put_u64(&b, 0);
    uint64_t nfiles = 0;
    char p[4096];
    int pn = snprintf(p, sizeof p, "%s/.metadata", dir);
    /* the index tries `.metadata` first: anything there but nothing at all is its to report */
    if (pn > 0 && (size_t)pn < sizeof p && (stat(p, &st) == 0 || errno != ENOENT)) {
        s = add_file(&b, dir, ".metadata", lim.max_metadata_bytes, &count, err);
        nfiles = 1;
    } else {
        long long *ranks = NULL;
        size_t n = 0;
        s = ck_metadata_list_ranks(dir, &ranks, &n, err);
        for (size_t i = 0; s == CKPT_OK && i < n; i++) {
            char name[64];
            snprintf(name, sizeof name, "__%lld.metadata", ranks[i]);
            s = add_file(&b, dir, name, lim.max_metadata_bytes, &count, err);
        }
        free(ranks);
        nfiles = n;
        if (s == CKPT_OK && !n) s = CKPT_E_NOTFOUND; /* another format: no image */
    }
    if (s != CKPT_OK) {
        free(b.p);
        return s;
    }
    memcpy(b.p + 8, &nfiles, sizeof nfiles);
    read->bytes_read_metadata = atomic_load(&count.bytes);
    read->preads_metadata = atomic_load(&count.calls);
    *blob = b.p;
    *len = b.len;
    return CKPT_OK;
}

static bool get_u64(const uint8_t *blob, size_t len, size_t *at, uint64_t *v) {
    if (len - *at < sizeof *v) return false;
    memcpy(v, blob + *at, sizeof *v);
    *at += sizeof *v;
    return true;
}

ckpt_status index_image_parse(const uint8_t *blob, size_t len, index_image *img, ckpt_error *err) {
    *img = (index_image){0};
    uint64_t n;
    size_t at = 8;
    if (!blob || len < 16 || memcmp(blob, IMAGE_MAGIC, 8) != 0 || !get_u64(blob, len, &at, &n) ||
        n > IMAGE_MAX_FILES || n > (len - at) / 16)
        return ck_fail(err, CKPT_E_FORMAT, "metadata image: bad header (%zu bytes)", len);
    img->files = calloc(n ? n : 1, sizeof *img->files);
    if (!img->files) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    for (uint64_t i = 0; i < n; i++) {
        uint64_t nl, dl;
        if (!get_u64(blob, len, &at, &nl) || !get_u64(blob, len, &at, &dl) || nl == 0 || nl > 255 ||
            nl > len - at || dl > len - at - nl || memchr(blob + at, '/', nl) ||
            memchr(blob + at, '\0', nl)) {
            free(img->files);
            *img = (index_image){0};
            return ck_fail(err, CKPT_E_FORMAT, "metadata image: file %llu is malformed at %zu",
                           (unsigned long long)i, at);
        }
        img->files[i] = (index_image_file){.name = (const char *)blob + at,
                                           .name_len = (size_t)nl,
                                           .data = blob + at + nl,
                                           .len = dl};
        at += (size_t)(nl + dl);
    }
    img->n = (size_t)n;
    return CKPT_OK;
}

const index_image_file *index_image_find(const index_image *img, const char *name) {
    size_t nl = strlen(name);
    for (size_t i = 0; img && i < img->n; i++)
        if (img->files[i].name_len == nl && memcmp(img->files[i].name, name, nl) == 0)
            return &img->files[i];
    return NULL;
}
