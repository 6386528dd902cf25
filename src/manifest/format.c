/* format.c — the manifest file (docs/manifest.md): writing it atomically, reading it with
 * every count and length bounded and every file name checked, and looking records up.
 *
 *   0  "CKPTFSM\0"            magic
 *   8  u32 version = 1        little-endian from here on
 *  12  u32 algorithm = 1      XXH3-64, seed 0
 *  16  u32 file count F
 *  20  u32 reserved = 0
 *  24  u64 record count R
 *  32  F x { u32 length, bytes }           file names, sorted, unique, relative, no '/'
 *      R x { u32 file, u32 reserved = 0, u64 offset, u64 length, u8[8] hash }
 *                                           sorted by (file, offset); hash in xxHash's
 *                                           canonical (big-endian) byte order
 *  end u8[8]                  canonical XXH3-64 of every preceding byte */
#include "index/reader_i.h"
#include "manifest/manifest_i.h"
#include "util/error.h"
#include "util/source.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define MAGIC "CKPTFSM\0"
#define VERSION 1u
#define ALGO_XXH3_64 1u
#define MAX_FILE_BYTES (1ull << 32)

void ckpt_manifest_free(ckpt_manifest *m) {
    if (!m) return;
    for (uint32_t i = 0; i < m->nfiles; i++)
        free(m->files[i]);
    free(m->files);
    free(m->recs);
    free(m);
}

size_t ckpt_manifest_num_records(const ckpt_manifest *m) { return m->n; }
const ckpt_manifest_record *ckpt_manifest_record_at(const ckpt_manifest *m, size_t i) {
    return i < m->n ? &m->recs[i] : NULL;
}

static int cmp_rec(const ckpt_manifest_record *a, const ckpt_manifest_record *b) {
    int c = strcmp(a->file, b->file);
    if (c) return c;
    if (a->offset != b->offset) return a->offset < b->offset ? -1 : 1;
    return a->length < b->length ? -1 : a->length > b->length;
}
static int cmp_rec_v(const void *a, const void *b) { return cmp_rec(a, b); }

const ckpt_manifest_record *ckpt_manifest_find(const ckpt_manifest *m, const char *file,
                                               uint64_t offset) {
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->recs[mid].file, file);
        if (c == 0) c = m->recs[mid].offset < offset ? -1 : m->recs[mid].offset > offset;
        if (c == 0) return &m->recs[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

ckpt_status manifest_from_records(ckpt_manifest_record *recs, size_t n, ckpt_manifest **out,
                                  ckpt_error *err) {
    *out = NULL;
    ckpt_manifest *m = calloc(1, sizeof *m);
    if (!m) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    if (n) qsort(recs, n, sizeof *recs, cmp_rec_v);
    m->recs = malloc((n ? n : 1) * sizeof *m->recs);
    m->files = malloc((n ? n : 1) * sizeof *m->files);
    if (!m->recs || !m->files) goto oom;
    for (size_t i = 0; i < n; i++) {
        ckpt_manifest_record *last = m->n ? &m->recs[m->n - 1] : NULL;
        if (last && strcmp(last->file, recs[i].file) == 0 && last->offset == recs[i].offset) {
            /* a shared item (replicas, a safetensors blob): one record, the longest range */
            if (recs[i].length > last->length) last->length = recs[i].length;
            continue;
        }
        if (!m->nfiles || strcmp(m->files[m->nfiles - 1], recs[i].file) != 0) {
            m->files[m->nfiles] = strdup(recs[i].file);
            if (!m->files[m->nfiles]) goto oom;
            m->nfiles++;
        }
        m->recs[m->n] = recs[i];
        m->recs[m->n].file = m->files[m->nfiles - 1];
        m->n++;
    }
    *out = m;
    return CKPT_OK;
oom:
    ckpt_manifest_free(m);
    return ck_fail(err, CKPT_E_NOMEM, "out of memory");
}

/* ------------------------------------------------------------------ writing */

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}
static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}
static void put_hash(uint8_t *p, uint64_t h) {
    XXH64_canonical_t c;
    XXH64_canonicalFromHash(&c, h);
    memcpy(p, c.digest, 8);
}
static uint64_t get_hash(const uint8_t *p) {
    XXH64_canonical_t c;
    memcpy(c.digest, p, 8);
    return XXH64_hashFromCanonical(&c);
}

static uint32_t file_index(const ckpt_manifest *m, const char *f) {
    size_t lo = 0, hi = m->nfiles;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->files[mid], f);
        if (c == 0) return (uint32_t)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

ckpt_status ckpt_manifest_save(const ckpt_manifest *m, const char *dir, ckpt_error *err) {
    size_t size = 32 + 8 + m->n * 32;
    for (uint32_t i = 0; i < m->nfiles; i++)
        size += 4 + strlen(m->files[i]);
    uint8_t *buf = calloc(1, size);
    if (!buf) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    memcpy(buf, MAGIC, 8);
    put32(buf + 8, VERSION);
    put32(buf + 12, ALGO_XXH3_64);
    put32(buf + 16, m->nfiles);
    put64(buf + 24, m->n);
    size_t at = 32;
    for (uint32_t i = 0; i < m->nfiles; i++) {
        size_t l = strlen(m->files[i]);
        put32(buf + at, (uint32_t)l);
        memcpy(buf + at + 4, m->files[i], l);
        at += 4 + l;
    }
    for (size_t i = 0; i < m->n; i++) {
        put32(buf + at, file_index(m, m->recs[i].file));
        put64(buf + at + 8, m->recs[i].offset);
        put64(buf + at + 16, m->recs[i].length);
        put_hash(buf + at + 24, m->recs[i].hash);
        at += 32;
    }
    put_hash(buf + at, XXH3_64bits(buf, at));
    char tmp[4096], path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, CKPT_MANIFEST_FILE);
    snprintf(tmp, sizeof tmp, "%s/%s.tmp.%ld", dir, CKPT_MANIFEST_FILE, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ckpt_status s = CKPT_OK;
    if (fd < 0) {
        s = ck_fail(err, CKPT_E_IO, "%s: %s", tmp, strerror(errno));
    } else {
        size_t done = 0;
        while (done < size && s == CKPT_OK) {
            ssize_t w = write(fd, buf + done, size - done);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0)
                s = ck_fail(err, CKPT_E_IO, "%s: %s", tmp, strerror(errno));
            else
                done += (size_t)w;
        }
        if (s == CKPT_OK && fsync(fd) != 0)
            s = ck_fail(err, CKPT_E_IO, "%s: fsync: %s", tmp, strerror(errno));
        close(fd);
        if (s == CKPT_OK && rename(tmp, path) != 0)
            s = ck_fail(err, CKPT_E_IO, "%s: %s", path, strerror(errno));
        if (s != CKPT_OK) unlink(tmp);
    }
    free(buf);
    return s;
}

/* ------------------------------------------------------------------ reading */

static ckpt_status bad(ckpt_error *err, const char *path, size_t off, const char *what) {
    return ck_fail(err, CKPT_E_FORMAT, "%s: offset %zu: %s", path, off, what);
}

ckpt_status ckpt_manifest_load(const char *dir, ckpt_manifest **out, ckpt_error *err) {
    *out = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, CKPT_MANIFEST_FILE);
    int fd = ck_open_regular(path, NULL);
    if (fd < 0)
        return ck_fail(err, errno == ENOENT ? CKPT_E_NOTFOUND : CKPT_E_IO, "%s: %s%s", path,
                       ck_open_strerror(errno), errno == ENOENT ? " (ckpt seal creates it)" : "");
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size > MAX_FILE_BYTES) {
        close(fd);
        return ck_fail(err, CKPT_E_LIMIT, "%s: not a regular file of at most 4 GiB", path);
    }
    size_t size = (size_t)st.st_size;
    uint8_t *buf = malloc(size ? size : 1);
    ckpt_status s = buf ? CKPT_OK : ck_fail(err, CKPT_E_NOMEM, "out of memory");
    size_t got = 0;
    while (s == CKPT_OK && got < size) {
        ssize_t r = pread(fd, buf + got, size - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) s = ck_fail(err, CKPT_E_IO, "%s: short read", path);
        got += r > 0 ? (size_t)r : 0;
    }
    close(fd);
    if (s != CKPT_OK) {
        free(buf);
        return s;
    }
    s = manifest_parse(buf, size, path, out, err);
    free(buf);
    return s;
}

ckpt_status manifest_parse(const uint8_t *buf, size_t size, const char *path, ckpt_manifest **out,
                           ckpt_error *err) {
    *out = NULL;
    ckpt_status s = CKPT_OK;
    ckpt_manifest *m = NULL;
    ckpt_manifest_record *recs = NULL;
    char **names = NULL;
    uint32_t nfiles = 0;
    if (size < 40 || memcmp(buf, MAGIC, 8) != 0) {
        s = bad(err, path, 0, "not a ckptfs manifest (bad magic)");
        goto done;
    }
    if (get_hash(buf + size - 8) != XXH3_64bits(buf, size - 8)) {
        s = ck_fail(err, CKPT_E_CHECKSUM,
                    "%s: offset %zu: the manifest's own checksum does "
                    "not match: it is damaged",
                    path, size - 8);
        goto done;
    }
    if (get32(buf + 8) != VERSION) {
        s = ck_fail(err, CKPT_E_UNSUPPORTED,
                    "%s: offset 8: manifest version %u (this build "
                    "reads version %u)",
                    path, get32(buf + 8), VERSION);
        goto done;
    }
    if (get32(buf + 12) != ALGO_XXH3_64) {
        s = ck_fail(err, CKPT_E_UNSUPPORTED, "%s: offset 12: unknown hash algorithm %u", path,
                    get32(buf + 12));
        goto done;
    }
    nfiles = get32(buf + 16);
    uint64_t n = get64(buf + 24);
    size_t end = size - 8, at = 32;
    if (nfiles > (end - at) / 4 || n > (end - at) / 32) {
        s = bad(err, path, 16, "counts larger than the file");
        goto done;
    }
    names = calloc(nfiles ? nfiles : 1, sizeof *names);
    recs = calloc(n ? n : 1, sizeof *recs);
    if (!names || !recs) {
        s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
        goto done;
    }
    for (uint32_t i = 0; i < nfiles; i++) {
        if (end - at < 4) {
            s = bad(err, path, at, "truncated file name");
            goto done;
        }
        uint32_t l = get32(buf + at);
        if (l == 0 || l > 4096 || l > end - at - 4) {
            s = bad(err, path, at, "bad file name length");
            goto done;
        }
        names[i] = strndup((const char *)buf + at + 4, l);
        if (!names[i]) {
            s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
            goto done;
        }
        if (strlen(names[i]) != l || !ck_safe_rel_path(names[i]) ||
            (i && strcmp(names[i - 1], names[i]) >= 0)) {
            s = bad(err, path, at,
                    "file names must be plain (or below the directory), unique and sorted");
            goto done;
        }
        at += 4 + l;
    }
    if ((end - at) != n * 32) {
        s = bad(err, path, at, "record table does not fill the file");
        goto done;
    }
    for (uint64_t i = 0; i < n; i++, at += 32) {
        uint32_t f = get32(buf + at);
        if (f >= nfiles || get32(buf + at + 4) != 0) {
            s = bad(err, path, at, "record names no file");
            goto done;
        }
        recs[i] = (ckpt_manifest_record){names[f], get64(buf + at + 8), get64(buf + at + 16),
                                         get_hash(buf + at + 24)};
        if (recs[i].offset > UINT64_MAX - recs[i].length ||
            (i && (strcmp(recs[i - 1].file, recs[i].file) > 0 ||
                   (recs[i - 1].file == recs[i].file && recs[i - 1].offset >= recs[i].offset)))) {
            s = bad(err, path, at,
                    "records must be sorted by (file, offset), unique, within 64 bits");
            goto done;
        }
    }
    m = calloc(1, sizeof *m);
    if (!m) {
        s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
        goto done;
    }
    m->files = names;
    m->nfiles = nfiles;
    m->recs = recs;
    m->n = (size_t)n;
    names = NULL;
    recs = NULL;
    *out = m;
done:
    if (names) {
        for (uint32_t i = 0; i < nfiles; i++)
            free(names[i]);
        free(names);
    }
    free(recs);
    return s;
}
