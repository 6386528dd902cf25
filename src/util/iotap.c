/* iotap.c — recording a reader's metadata reads and replaying them elsewhere (see iotap.h). */
#include "util/iotap.h"

#include "util/error.h"
#include "util/htab.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TAP_MAGIC "CKPTTAP1"
#define TAP_MAX_FILES (1u << 24)

/* A recorded read (recorder: its own copy of the bytes) or a range of the blob (replayer). */
typedef struct tap_rec {
    uint64_t off, len;
    uint8_t *data;
} tap_rec;

typedef struct tap_file {
    char *name; /* the last path component, NUL-terminated */
    size_t name_len;
    uint64_t eof;  /* lowest offset where a pread returned 0; UINT64_MAX: none seen */
    uint64_t size; /* the file's size when first read (fstat; UINT64_MAX: unknown) */
    bool checked;  /* replayer: this process's file was checked to have that size */
    tap_rec *recs;
    size_t n, cap;
} tap_file;

struct ck_io_tap {
    bool replay;
    pthread_mutex_t lock;
    ckpt_status status; /* recorder: CKPT_E_NOMEM once a read could not be kept */
    tap_file *files;
    size_t nfiles, cap;
    ck_htab by_name;
    uint8_t *blob; /* replayer: its copy of the blob (the ranges point into it) */
};

static const char *base_name(const char *name, size_t *len) {
    const char *b = name ? strrchr(name, '/') : NULL;
    b = b ? b + 1 : name ? name : "";
    *len = strlen(b);
    return b;
}

typedef struct name_key {
    const ck_io_tap *t;
    const char *s;
    size_t n;
} name_key;
static bool name_eq(const void *ctx, uint64_t v) {
    const name_key *k = ctx;
    const tap_file *f = &k->t->files[v];
    return f->name_len == k->n && memcmp(f->name, k->s, k->n) == 0;
}

/* The file named s[0, n), made when `make` (NULL: none, or out of memory). */
static tap_file *find_file(ck_io_tap *t, const char *s, size_t n, bool make) {
    uint64_t h = ck_hash_bytes(s, n, 0x7a9), v;
    name_key k = {t, s, n};
    if (ck_htab_find(&t->by_name, h, name_eq, &k, &v)) return &t->files[v];
    if (!make || t->nfiles >= TAP_MAX_FILES) return NULL;
    if (t->nfiles == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 16;
        tap_file *m = realloc(t->files, cap * sizeof *m);
        if (!m) return NULL;
        t->files = m;
        t->cap = cap;
    }
    tap_file *f = &t->files[t->nfiles];
    memset(f, 0, sizeof *f);
    if (!(f->name = malloc(n + 1))) return NULL;
    memcpy(f->name, s, n);
    f->name[n] = '\0';
    f->name_len = n;
    f->eof = UINT64_MAX;
    f->size = UINT64_MAX;
    if (!ck_htab_insert(&t->by_name, h, t->nfiles)) {
        free(f->name);
        return NULL;
    }
    t->nfiles++;
    return f;
}

static ck_io_tap *tap_new(bool replay) {
    ck_io_tap *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    if (!ck_htab_init(&t->by_name, 64)) {
        free(t);
        return NULL;
    }
    pthread_mutex_init(&t->lock, NULL);
    t->replay = replay;
    return t;
}

ck_io_tap *ck_io_tap_recorder(void) { return tap_new(false); }

bool ck_io_tap_replays(const ck_io_tap *t) { return t->replay; }

void ck_io_tap_free(ck_io_tap *t) {
    if (!t) return;
    for (size_t i = 0; i < t->nfiles; i++) {
        if (!t->replay)
            for (size_t k = 0; k < t->files[i].n; k++)
                free(t->files[i].recs[k].data);
        free(t->files[i].recs);
        free(t->files[i].name);
    }
    free(t->files);
    ck_htab_release(&t->by_name);
    pthread_mutex_destroy(&t->lock);
    free(t->blob);
    free(t);
}

static uint64_t fd_size(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 ? (uint64_t)st.st_size : UINT64_MAX;
}

/* Recorder: keeps got bytes of buf read at off (got 0: the end of the file). */
static void record(ck_io_tap *t, const char *name, int fd, const void *buf, uint64_t got,
                   uint64_t off) {
    size_t n;
    const char *b = base_name(name, &n);
    pthread_mutex_lock(&t->lock);
    tap_file *f = t->status == CKPT_OK ? find_file(t, b, n, true) : NULL;
    if (f && f->size == UINT64_MAX) f->size = fd_size(fd);
    if (!f) {
        t->status = CKPT_E_NOMEM;
    } else if (!got) {
        if (off < f->eof) f->eof = off;
    } else {
        uint8_t *copy = NULL;
        if (f->n == f->cap) {
            size_t cap = f->cap ? 2 * f->cap : 4;
            tap_rec *m = realloc(f->recs, cap * sizeof *m);
            if (m) {
                f->recs = m;
                f->cap = cap;
            }
        }
        if (f->n < f->cap && (copy = malloc((size_t)got))) {
            memcpy(copy, buf, (size_t)got);
            f->recs[f->n++] = (tap_rec){off, got, copy};
        } else {
            t->status = CKPT_E_NOMEM;
        }
    }
    pthread_mutex_unlock(&t->lock);
}

/* Replayer: what the blob holds at off of file `name` (open as fd here: it must have the
 * size the recorder saw). */
static ssize_t replay(ck_io_tap *t, const char *name, int fd, void *buf, size_t n, uint64_t off) {
    size_t nl;
    const char *b = base_name(name, &nl);
    tap_file *f = find_file(t, b, nl, false); /* (the table is not written: no lock needed) */
    bool same = f != NULL;
    if (f) {
        pthread_mutex_lock(&t->lock);
        if (!f->checked) f->checked = f->size != UINT64_MAX && fd_size(fd) == f->size;
        same = f->checked;
        pthread_mutex_unlock(&t->lock);
    }
    if (!same) {
        errno = CK_ETAPMISS;
        return -1;
    }
    if (f->n) {
        size_t lo = 0, hi = f->n; /* the last range starting at or before off */
        while (hi - lo > 1) {
            size_t mid = lo + (hi - lo) / 2;
            if (f->recs[mid].off <= off)
                lo = mid;
            else
                hi = mid;
        }
        const tap_rec *r = &f->recs[lo];
        if (r->off <= off && off - r->off < r->len) {
            uint64_t left = r->len - (off - r->off), k = n < left ? n : left;
            memcpy(buf, r->data + (off - r->off), (size_t)k);
            return (ssize_t)k;
        }
    }
    if (off >= f->eof) return 0;
    errno = CK_ETAPMISS;
    return -1;
}

ssize_t ck_io_tap_pread(ck_io_tap *t, const char *name, int fd, void *buf, size_t n, uint64_t off) {
    if (t->replay) return n ? replay(t, name, fd, buf, n, off) : 0;
    ssize_t got = pread(fd, buf, n, (off_t)off);
    if (got >= 0 && (got > 0 || n)) record(t, name, fd, buf, (uint64_t)got, off);
    return got;
}

static int by_off(const void *a, const void *b) {
    const tap_rec *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->len < y->len ? -1 : x->len > y->len;
}

static void put_u64(uint8_t *p, size_t *at, uint64_t v) {
    memcpy(p + *at, &v, sizeof v);
    *at += sizeof v;
}

ckpt_status ck_io_tap_blob(ck_io_tap *t, uint8_t **blob, size_t *len, ckpt_error *err) {
    *blob = NULL;
    *len = 0;
    if (t->replay) return ck_fail(err, CKPT_E_INVAL, "metadata tap: a replayer has no log");
    if (t->status != CKPT_OK)
        return ck_fail(err, t->status, "out of memory keeping the metadata read for the job");
    /* sizes: each file's reads sorted and merged into disjoint ranges */
    uint64_t total = 16;
    for (size_t i = 0; i < t->nfiles; i++) {
        tap_file *f = &t->files[i];
        if (f->n) qsort(f->recs, f->n, sizeof *f->recs, by_off);
        total += 32 + f->name_len;
    }
    /* the merged ranges' extents */
    for (size_t i = 0; i < t->nfiles; i++) {
        const tap_file *f = &t->files[i];
        uint64_t a = 0, b = 0;
        for (size_t k = 0; k < f->n; k++) {
            uint64_t o = f->recs[k].off, e = o + f->recs[k].len;
            if (k && o <= b) {
                if (e > b) b = e;
                continue;
            }
            if (k) total += 16 + (b - a);
            a = o;
            b = e;
        }
        if (f->n) total += 16 + (b - a);
    }
    if (total > SIZE_MAX)
        return ck_fail(err, CKPT_E_LIMIT, "metadata tap: %llu bytes", (unsigned long long)total);
    uint8_t *p = malloc((size_t)total);
    if (!p)
        return ck_fail(err, CKPT_E_NOMEM, "out of memory (metadata of %llu bytes)",
                       (unsigned long long)total);
    size_t at = 0;
    memcpy(p, TAP_MAGIC, 8);
    at = 8;
    put_u64(p, &at, t->nfiles);
    for (size_t i = 0; i < t->nfiles; i++) {
        const tap_file *f = &t->files[i];
        size_t nr = 0, head = at;
        put_u64(p, &at, f->name_len);
        put_u64(p, &at, f->eof);
        put_u64(p, &at, f->size);
        put_u64(p, &at, 0); /* ranges: filled below */
        memcpy(p + at, f->name, f->name_len);
        at += f->name_len;
        for (size_t k = 0; k < f->n;) {
            uint64_t a = f->recs[k].off, b = a + f->recs[k].len;
            size_t j = k + 1;
            for (; j < f->n && f->recs[j].off <= b; j++)
                if (f->recs[j].off + f->recs[j].len > b) b = f->recs[j].off + f->recs[j].len;
            put_u64(p, &at, a);
            put_u64(p, &at, b - a);
            for (size_t q = k; q < j; q++) /* (overlaps: the same bytes, read twice) */
                memcpy(p + at + (f->recs[q].off - a), f->recs[q].data, (size_t)f->recs[q].len);
            at += (size_t)(b - a);
            nr++;
            k = j;
        }
        memcpy(p + head + 24, &(uint64_t){nr}, 8);
    }
    *blob = p;
    *len = at;
    return CKPT_OK;
}

static bool get_u64(const uint8_t *p, size_t len, size_t *at, uint64_t *v) {
    if (len - *at < sizeof *v) return false;
    memcpy(v, p + *at, sizeof *v);
    *at += sizeof *v;
    return true;
}

ckpt_status ck_io_tap_replayer(const uint8_t *blob, size_t len, ck_io_tap **out, ckpt_error *err) {
    *out = NULL;
    uint64_t nf;
    size_t at = 8;
    if (!blob || len < 16 || memcmp(blob, TAP_MAGIC, 8) != 0 || !get_u64(blob, len, &at, &nf) ||
        nf > TAP_MAX_FILES || nf > (len - at) / 32)
        return ck_fail(err, CKPT_E_FORMAT, "metadata blob: bad header (%zu bytes)", len);
    ck_io_tap *t = tap_new(true);
    if (!t || !(t->blob = malloc(len))) {
        ck_io_tap_free(t);
        return ck_fail(err, CKPT_E_NOMEM, "out of memory (metadata of %zu bytes)", len);
    }
    memcpy(t->blob, blob, len);
    const uint8_t *p = t->blob;
    ckpt_status s = CKPT_OK;
    for (uint64_t i = 0; s == CKPT_OK && i < nf; i++) {
        uint64_t nl, eof, size, nr;
        size_t here = at;
        if (!get_u64(p, len, &at, &nl) || !get_u64(p, len, &at, &eof) ||
            !get_u64(p, len, &at, &size) || !get_u64(p, len, &at, &nr) || nl == 0 || nl > 4096 ||
            nl > len - at || memchr(p + at, '/', nl) || memchr(p + at, '\0', nl) ||
            nr > (len - at - nl) / 16) {
            s = ck_fail(err, CKPT_E_FORMAT, "metadata blob: file %llu is malformed at %zu",
                        (unsigned long long)i, here);
            break;
        }
        tap_file *f = find_file(t, (const char *)p + at, (size_t)nl, false);
        if (f) {
            s = ck_fail(err, CKPT_E_FORMAT, "metadata blob: file %llu is listed twice",
                        (unsigned long long)i);
            break;
        }
        if (!(f = find_file(t, (const char *)p + at, (size_t)nl, true))) {
            s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
            break;
        }
        at += (size_t)nl;
        f->eof = eof;
        f->size = size;
        if (nr && !(f->recs = malloc((size_t)nr * sizeof *f->recs))) {
            s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
            break;
        }
        f->cap = (size_t)nr;
        for (uint64_t k = 0; k < nr; k++) {
            uint64_t off, rl;
            if (!get_u64(p, len, &at, &off) || !get_u64(p, len, &at, &rl) || rl == 0 ||
                rl > len - at || off > UINT64_MAX - rl ||
                (k && off <= f->recs[k - 1].off + f->recs[k - 1].len)) {
                s = ck_fail(err, CKPT_E_FORMAT, "metadata blob: range %llu of %s is malformed",
                            (unsigned long long)k, f->name);
                break;
            }
            f->recs[f->n++] = (tap_rec){off, rl, t->blob + at};
            at += (size_t)rl;
        }
    }
    if (s == CKPT_OK && at != len)
        s = ck_fail(err, CKPT_E_FORMAT, "metadata blob: %zu bytes left over", len - at);
    if (s != CKPT_OK) {
        ck_io_tap_free(t);
        return s;
    }
    *out = t;
    return CKPT_OK;
}
