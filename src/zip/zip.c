/* zip.c — owns the torch.save zip reader: finding the end-of-central-directory record (classic
 * and zip64), parsing the central directory (zip64 extras included), resolving each record's
 * data start from its local header, name lookup, and whole-record reads.
 *
 * I/O plan for a file-backed archive (memory sources are never copied):
 *   1. one read of the last min(len, ZIP_TAIL_GUESS) bytes; it normally holds the classic EOCD,
 *      the zip64 locator + record, the whole central directory and the local headers of the
 *      small records torch writes after the tensor data;
 *   2. only when the EOCD is not in that tail (a long comment): one read of the largest window
 *      an EOCD can hide in;
 *   3. only when the central directory starts before the tail: one read of the directory;
 *   4. the 30-byte fixed parts of the local headers not already in a buffer, coalesced into one
 *      read per cluster (headers at most ZIP_LFH_GAP apart share a read).
 * A torch.save archive smaller than the tail costs 1 pread; a DCP tensor chunk of any size costs
 * 2 (tail + the cluster of headers at the start of the archive).
 *
 * Error classes: CKPT_E_FORMAT for malformed structures (signatures, missing EOCD, bad extras,
 * duplicate names), CKPT_E_RANGE for offsets/sizes that leave the archive or the region they
 * belong to, CKPT_E_UNSUPPORTED for multi-disk archives and compressed/encrypted records (the
 * latter only when read), CKPT_E_LIMIT for records larger than the caller's bound and central
 * directories over ZIP_MAX_CD_BYTES.  Messages
 * start with "zip offset N:" where N is relative to the archive start. */
#include "zip/zip.h"

#include "util/error.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define ZIP_TAIL_GUESS 8192u
#define ZIP_EOCD_LEN 22u
#define ZIP64_LOC_LEN 20u
#define ZIP64_EOCD_LEN 56u
#define ZIP_CDH_LEN 46u
#define ZIP_LFH_LEN 30u
#define ZIP_MAX_COMMENT 65535u
#define ZIP_LFH_GAP 4096u             /* local headers closer than this share one read */
#define ZIP_LFH_CLUSTER_MAX 65536u    /* ... as long as the read stays this small */
#define ZIP_MAX_CD_BYTES (1ull << 30) /* ~15 M records; torch writes ~70 bytes per record */

#define SIG_LFH 0x04034b50u
#define SIG_CDH 0x02014b50u
#define SIG_EOCD 0x06054b50u
#define SIG_Z64_EOCD 0x06064b50u
#define SIG_Z64_LOC 0x07064b50u

#define ZIP_FLAG_ENCRYPTED 0x0001u

typedef unsigned long long ull;

typedef struct zip_entry {
    zip_record pub;     /* first member: zip_record pointers convert back */
    uint64_t comp_size; /* bytes stored in the archive */
    uint64_t lho;       /* local header offset */
    size_t name_len;
    uint16_t flags;
} zip_entry;

struct zip_archive {
    ck_source src; /* copy; the fd / memory must outlive the archive */
    const char *root;
    size_t root_len;
    size_t n;
    zip_entry *recs;
    uint32_t *slots; /* open addressing: record index + 1, 0 = empty */
    size_t slot_mask;
    unsigned reads; /* source reads zip_open issued */
};

/* A view of bytes [start, start + len) of the archive. */
typedef struct zip_view {
    const uint8_t *p;
    uint64_t start;
    uint64_t len;
    uint8_t *owned; /* malloc'ed backing store, or NULL for memory sources */
} zip_view;

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

static void view_release(zip_view *v) {
    free(v->owned);
    memset(v, 0, sizeof *v);
}

static bool view_has(const zip_view *v, uint64_t off, uint64_t len) {
    return v->p && off >= v->start && off - v->start <= v->len && len <= v->len - (off - v->start);
}

static const uint8_t *view_at(const zip_view *v, uint64_t off) { return v->p + (off - v->start); }

/* Makes [off, off+len) of the archive available; the caller checked it lies inside. */
static ckpt_status fetch(const ck_source *src, unsigned *reads, uint64_t off, uint64_t len,
                         zip_view *out, ckpt_error *err) {
    memset(out, 0, sizeof *out);
    out->start = off;
    out->len = len;
    if (src->mem) {
        out->p = src->mem + off;
        return CKPT_OK;
    }
    if (len > SIZE_MAX - 1)
        return ck_fail(err, CKPT_E_NOMEM, "zip offset %llu: cannot buffer %llu bytes", (ull)off,
                       (ull)len);
    out->owned = malloc(len ? (size_t)len : 1);
    if (!out->owned)
        return ck_fail(err, CKPT_E_NOMEM, "zip offset %llu: out of memory buffering %llu bytes",
                       (ull)off, (ull)len);
    (*reads)++;
    ckpt_status st = ck_source_read(src, off, out->owned, len, err);
    if (st != CKPT_OK) {
        view_release(out);
        return st;
    }
    out->p = out->owned;
    return CKPT_OK;
}

/* Small structure at a known place: from `have` when it covers it, else one read into tmp. */
static ckpt_status get_small(const ck_source *src, unsigned *reads, const zip_view *have,
                             uint64_t off, uint32_t len, uint8_t *tmp, const uint8_t **out,
                             ckpt_error *err) {
    if (view_has(have, off, len)) {
        *out = view_at(have, off);
        return CKPT_OK;
    }
    if (src->mem) {
        *out = src->mem + off;
        return CKPT_OK;
    }
    (*reads)++;
    CK_TRY(ck_source_read(src, off, tmp, len, err));
    *out = tmp;
    return CKPT_OK;
}

/* Scans `v` backwards for an EOCD whose comment ends exactly at the end of the archive. */
static bool find_eocd(const zip_view *v, uint64_t total, uint64_t *pos) {
    if (v->len < ZIP_EOCD_LEN) return false;
    uint64_t hi = v->start + v->len - ZIP_EOCD_LEN;
    uint64_t lo =
        total - ZIP_EOCD_LEN > ZIP_MAX_COMMENT ? total - ZIP_EOCD_LEN - ZIP_MAX_COMMENT : 0;
    if (lo < v->start) lo = v->start;
    for (uint64_t p = hi + 1; p-- > lo;) {
        const uint8_t *q = view_at(v, p);
        if (q[0] != 0x50 || q[1] != 0x4b || rd32(q) != SIG_EOCD) continue;
        if (p + ZIP_EOCD_LEN + rd16(q + 20) == total) {
            *pos = p;
            return true;
        }
    }
    return false;
}

static uint64_t hash_name(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
#define HASH_INIT 0xcbf29ce484222325ull

typedef struct zip_dir {
    uint64_t entries;
    uint64_t cd_size;
    uint64_t cd_off;
    uint64_t trailer; /* where the zip64 EOCD (or the classic EOCD) starts */
} zip_dir;

static ckpt_status read_trailer(const ck_source *src, unsigned *reads, zip_view *tail, zip_dir *d,
                                ckpt_error *err) {
    const uint64_t total = src->len;
    if (total < ZIP_EOCD_LEN)
        return ck_fail(err, CKPT_E_FORMAT,
                       "zip offset 0: %llu bytes is too short for a zip archive", (ull)total);
    uint64_t want = total < ZIP_TAIL_GUESS ? total : ZIP_TAIL_GUESS;
    CK_TRY(fetch(src, reads, total - want, want, tail, err));
    uint64_t pos;
    if (!find_eocd(tail, total, &pos)) {
        uint64_t most = ZIP_EOCD_LEN + ZIP_MAX_COMMENT + ZIP64_LOC_LEN + ZIP64_EOCD_LEN;
        if (most > total) most = total;
        if (most > want) {
            view_release(tail);
            CK_TRY(fetch(src, reads, total - most, most, tail, err));
        }
        if (!find_eocd(tail, total, &pos))
            return ck_fail(err, CKPT_E_FORMAT,
                           "zip offset %llu: end of central directory record not found "
                           "(truncated or not a zip archive)",
                           (ull)total);
    }
    uint8_t tmp[ZIP64_EOCD_LEN];
    const uint8_t *e;
    CK_TRY(get_small(src, reads, tail, pos, ZIP_EOCD_LEN, tmp, &e, err));
    uint16_t disk = rd16(e + 4), cd_disk = rd16(e + 6), n_disk = rd16(e + 8),
             n_total = rd16(e + 10);
    uint32_t cd_size = rd32(e + 12), cd_off = rd32(e + 16);
    d->entries = n_total;
    d->cd_size = cd_size;
    d->cd_off = cd_off;
    d->trailer = pos;
    if (pos >= ZIP64_LOC_LEN) {
        const uint8_t *l;
        CK_TRY(get_small(src, reads, tail, pos - ZIP64_LOC_LEN, ZIP64_LOC_LEN, tmp, &l, err));
        if (rd32(l) == SIG_Z64_LOC) {
            uint64_t loc = pos - ZIP64_LOC_LEN;
            uint32_t z64_disk = rd32(l + 4), disks = rd32(l + 16);
            uint64_t z64 = rd64(l + 8);
            if (z64_disk != 0 || disks > 1)
                return ck_fail(err, CKPT_E_UNSUPPORTED,
                               "zip offset %llu: multi-disk zip64 archive (%u disks)", (ull)loc,
                               (unsigned)disks);
            if (z64 > loc || loc - z64 < ZIP64_EOCD_LEN)
                return ck_fail(err, CKPT_E_RANGE,
                               "zip offset %llu: zip64 end of central directory offset %llu "
                               "does not leave room for the record before the locator",
                               (ull)loc, (ull)z64);
            const uint8_t *r;
            CK_TRY(get_small(src, reads, tail, z64, ZIP64_EOCD_LEN, tmp, &r, err));
            if (rd32(r) != SIG_Z64_EOCD)
                return ck_fail(err, CKPT_E_FORMAT,
                               "zip offset %llu: bad zip64 end of central directory signature",
                               (ull)z64);
            uint64_t rec_size = rd64(r + 4);
            if (rec_size < ZIP64_EOCD_LEN - 12 || rec_size > loc - z64 - 12)
                return ck_fail(err, CKPT_E_FORMAT,
                               "zip offset %llu: zip64 end of central directory size %llu is "
                               "invalid",
                               (ull)z64, (ull)rec_size);
            uint32_t d64 = rd32(r + 16), cd64_disk = rd32(r + 20);
            uint64_t nd64 = rd64(r + 24), nt64 = rd64(r + 32), sz64 = rd64(r + 40),
                     off64 = rd64(r + 48);
            if (d64 != 0 || cd64_disk != 0 || nd64 != nt64)
                return ck_fail(err, CKPT_E_UNSUPPORTED, "zip offset %llu: multi-disk zip64 archive",
                               (ull)z64);
            if ((n_total != 0xffffu && n_total != nt64) ||
                (cd_size != 0xffffffffu && cd_size != sz64) ||
                (cd_off != 0xffffffffu && cd_off != off64))
                return ck_fail(err, CKPT_E_FORMAT,
                               "zip offset %llu: end of central directory disagrees with the "
                               "zip64 record at %llu",
                               (ull)pos, (ull)z64);
            d->entries = nt64;
            d->cd_size = sz64;
            d->cd_off = off64;
            d->trailer = z64;
            return CKPT_OK;
        }
    }
    if (disk != 0 || cd_disk != 0 || n_disk != n_total)
        return ck_fail(err, CKPT_E_UNSUPPORTED, "zip offset %llu: multi-disk zip archive",
                       (ull)pos);
    return CKPT_OK;
}

/* Parses one central header at `p` (inside the directory, `avail` bytes left). */
static ckpt_status parse_cdh(const uint8_t *p, uint64_t avail, uint64_t at, zip_entry *e,
                             const uint8_t **name, uint64_t *consumed, ckpt_error *err) {
    if (avail < ZIP_CDH_LEN)
        return ck_fail(err, CKPT_E_FORMAT,
                       "zip offset %llu: central directory ends inside a record header", (ull)at);
    if (rd32(p) != SIG_CDH)
        return ck_fail(err, CKPT_E_FORMAT, "zip offset %llu: bad central directory signature",
                       (ull)at);
    uint16_t flags = rd16(p + 8), method = rd16(p + 10);
    uint64_t comp = rd32(p + 20), size = rd32(p + 24);
    uint16_t nlen = rd16(p + 28), xlen = rd16(p + 30), clen = rd16(p + 32);
    uint32_t disk = rd16(p + 34);
    uint64_t lho = rd32(p + 42);
    uint64_t need = (uint64_t)ZIP_CDH_LEN + nlen + xlen + clen;
    if (need > avail)
        return ck_fail(err, CKPT_E_FORMAT,
                       "zip offset %llu: central directory record (%llu bytes) passes the end "
                       "of the directory",
                       (ull)at, (ull)need);
    const uint8_t *x = p + ZIP_CDH_LEN + nlen, *xend = x + xlen;
    bool want_size = size == 0xffffffffu, want_comp = comp == 0xffffffffu,
         want_lho = lho == 0xffffffffu, want_disk = disk == 0xffffu;
    while (xend - x >= 4) {
        uint16_t id = rd16(x), len = rd16(x + 2);
        if (len > xend - x - 4)
            return ck_fail(err, CKPT_E_FORMAT,
                           "zip offset %llu: extra field 0x%04x overruns its record", (ull)at,
                           (unsigned)id);
        if (id == 0x0001) {
            const uint8_t *f = x + 4, *fend = f + len;
            if (want_size) {
                if (fend - f < 8) goto short_z64;
                size = rd64(f);
                f += 8;
                want_size = false;
            }
            if (want_comp) {
                if (fend - f < 8) goto short_z64;
                comp = rd64(f);
                f += 8;
                want_comp = false;
            }
            if (want_lho) {
                if (fend - f < 8) goto short_z64;
                lho = rd64(f);
                f += 8;
                want_lho = false;
            }
            if (want_disk) {
                if (fend - f < 4) goto short_z64;
                disk = rd32(f);
                want_disk = false;
            }
        }
        x += 4 + (size_t)len;
    }
    if (want_size || want_comp || want_lho || want_disk) goto short_z64;
    if (disk != 0)
        return ck_fail(err, CKPT_E_UNSUPPORTED, "zip offset %llu: record on disk %u", (ull)at,
                       (unsigned)disk);
    if (method == 0 && comp != size)
        return ck_fail(err, CKPT_E_FORMAT,
                       "zip offset %llu: stored record has compressed size %llu but size %llu",
                       (ull)at, (ull)comp, (ull)size);
    if (nlen == 0 || memchr(p + ZIP_CDH_LEN, '\0', nlen))
        return ck_fail(err, CKPT_E_FORMAT, "zip offset %llu: record name is empty or has a NUL",
                       (ull)at);
    e->pub.size = size;
    e->pub.method = method;
    e->comp_size = comp;
    e->lho = lho;
    e->name_len = nlen;
    e->flags = flags;
    *name = p + ZIP_CDH_LEN;
    *consumed = need;
    return CKPT_OK;
short_z64:
    return ck_fail(err, CKPT_E_FORMAT,
                   "zip offset %llu: record needs a zip64 extra field that is missing or short",
                   (ull)at);
}

static int cmp_by_lho(const void *a, const void *b, void *ctx) {
    const zip_entry *r = ctx;
    uint64_t x = r[*(const uint32_t *)a].lho, y = r[*(const uint32_t *)b].lho;
    return x < y ? -1 : x > y;
}

/* Records the data start from the local header `h` of e (PyTorch's getRecordOffset). */
static ckpt_status local_header(zip_entry *e, const uint8_t *h, ckpt_error *err) {
    if (rd32(h) != SIG_LFH)
        return ck_fail(err, CKPT_E_FORMAT, "zip offset %llu: bad local header signature for '%s'",
                       (ull)e->lho, e->pub.name);
    e->pub.data_offset = e->lho + ZIP_LFH_LEN + rd16(h + 26) + rd16(h + 28);
    return CKPT_OK;
}

/* Resolves data_offset for every record, reading local headers not in `tail` or `cd`. */
static ckpt_status resolve_data(zip_archive *z, const zip_view *tail, const zip_view *cd,
                                uint64_t cd_off, ckpt_error *err) {
    const ck_source *src = &z->src;
    uint32_t *todo = NULL;
    size_t ntodo = 0;
    ckpt_status st = CKPT_OK;
    zip_view cluster = {0};
    for (size_t i = 0; i < z->n; i++) {
        zip_entry *e = &z->recs[i];
        if (e->lho > cd_off || cd_off - e->lho < ZIP_LFH_LEN)
            return ck_fail(err, CKPT_E_RANGE,
                           "zip offset %llu: local header of '%s' lies past the central "
                           "directory at %llu",
                           (ull)e->lho, e->pub.name, (ull)cd_off);
    }
    if (!src->mem) {
        todo = malloc(z->n * sizeof *todo);
        if (!todo) return ck_fail(err, CKPT_E_NOMEM, "zip: out of memory");
        for (size_t i = 0; i < z->n; i++) {
            uint64_t lho = z->recs[i].lho;
            if (!view_has(tail, lho, ZIP_LFH_LEN) && !view_has(cd, lho, ZIP_LFH_LEN))
                todo[ntodo++] = (uint32_t)i;
        }
        qsort_r(todo, ntodo, sizeof *todo, cmp_by_lho, z->recs);
    }
    size_t next = 0; /* first todo entry not yet read */
    /* Clustered reads, in offset order. */
    while (next < ntodo) {
        uint64_t start = z->recs[todo[next]].lho, end = start + ZIP_LFH_LEN;
        size_t last = next + 1;
        while (last < ntodo) {
            uint64_t l = z->recs[todo[last]].lho;
            if ((l > end && l - end > ZIP_LFH_GAP) || l + ZIP_LFH_LEN - start > ZIP_LFH_CLUSTER_MAX)
                break;
            if (l + ZIP_LFH_LEN > end) end = l + ZIP_LFH_LEN;
            last++;
        }
        view_release(&cluster);
        CK_TRY_GOTO(st, fetch(src, &z->reads, start, end - start, &cluster, err), out);
        for (size_t k = next; k < last; k++) {
            zip_entry *e = &z->recs[todo[k]];
            CK_TRY_GOTO(st, local_header(e, view_at(&cluster, e->lho), err), out);
        }
        next = last;
    }
    for (size_t i = 0; i < z->n; i++) {
        zip_entry *e = &z->recs[i];
        const uint8_t *h = NULL;
        if (src->mem)
            h = src->mem + e->lho;
        else if (view_has(tail, e->lho, ZIP_LFH_LEN))
            h = view_at(tail, e->lho);
        else if (view_has(cd, e->lho, ZIP_LFH_LEN))
            h = view_at(cd, e->lho);
        if (h) CK_TRY_GOTO(st, local_header(e, h, err), out);
        /* Every record, however its header was read.  lho + 30 <= cd_off and the name/extra
         * lengths are 16-bit, so data_offset cannot overflow. */
        if (e->pub.data_offset > cd_off || e->comp_size > cd_off - e->pub.data_offset) {
            st = ck_fail(err, CKPT_E_RANGE,
                         "zip offset %llu: data of '%s' (%llu bytes at %llu) passes the start "
                         "of the central directory at %llu",
                         (ull)e->lho, e->pub.name, (ull)e->comp_size, (ull)e->pub.data_offset,
                         (ull)cd_off);
            goto out;
        }
    }
out:
    view_release(&cluster);
    free(todo);
    return st;
}

ckpt_status zip_open(const ck_source *src, zip_archive **out, ckpt_error *err) {
    if (!out) return ck_fail(err, CKPT_E_INVAL, "zip_open: out is NULL");
    *out = NULL;
    if (!src || (!src->mem && src->fd < 0))
        return ck_fail(err, CKPT_E_INVAL, "zip_open: no source");
    unsigned reads = 0;
    zip_view tail = {0}, cd = {0};
    zip_archive *z = NULL;
    zip_dir d = {0};
    ckpt_status st;
    CK_TRY_GOTO(st, read_trailer(src, &reads, &tail, &d, err), fail);

    if (d.cd_off > d.trailer || d.cd_size > d.trailer - d.cd_off) {
        st = ck_fail(err, CKPT_E_RANGE,
                     "zip offset %llu: central directory (%llu bytes at %llu) passes the end "
                     "of central directory record at %llu",
                     (ull)d.cd_off, (ull)d.cd_size, (ull)d.cd_off, (ull)d.trailer);
        goto fail;
    }
    if (d.cd_size > ZIP_MAX_CD_BYTES) {
        st = ck_fail(err, CKPT_E_LIMIT,
                     "zip offset %llu: central directory of %llu bytes exceeds the %llu-byte "
                     "limit",
                     (ull)d.cd_off, (ull)d.cd_size, (ull)ZIP_MAX_CD_BYTES);
        goto fail;
    }
    if (d.entries == 0) {
        st = ck_fail(err, CKPT_E_FORMAT, "zip offset %llu: archive has no records", (ull)d.cd_off);
        goto fail;
    }
    if (d.entries > d.cd_size / ZIP_CDH_LEN || d.entries >= UINT32_MAX / 2) {
        st = ck_fail(err, CKPT_E_FORMAT,
                     "zip offset %llu: %llu records cannot fit a %llu-byte central directory",
                     (ull)d.cd_off, (ull)d.entries, (ull)d.cd_size);
        goto fail;
    }
    if (view_has(&tail, d.cd_off, d.cd_size)) {
        cd.p = view_at(&tail, d.cd_off);
        cd.start = d.cd_off;
        cd.len = d.cd_size;
    } else {
        CK_TRY_GOTO(st, fetch(src, &reads, d.cd_off, d.cd_size, &cd, err), fail);
    }

    /* One allocation: archive, records, hash slots, names (sum of name lengths < cd_size). */
    size_t n = (size_t)d.entries, nslots = 16;
    while (nslots < 2 * n)
        nslots *= 2;
    size_t off_recs = (sizeof *z + 15) & ~(size_t)15;
    size_t off_slots = off_recs + n * sizeof(zip_entry);
    size_t off_names = off_slots + nslots * sizeof(uint32_t);
    size_t total = off_names + (size_t)d.cd_size + n + 1;
    char *mem = calloc(1, total);
    if (!mem) {
        st = ck_fail(err, CKPT_E_NOMEM, "zip: out of memory for %llu records", (ull)d.entries);
        goto fail;
    }
    z = (zip_archive *)mem;
    z->src = *src;
    z->n = n;
    z->recs = (zip_entry *)(mem + off_recs);
    z->slots = (uint32_t *)(mem + off_slots);
    z->slot_mask = nslots - 1;
    char *names = mem + off_names;

    uint64_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        zip_entry *e = &z->recs[i];
        const uint8_t *name = NULL;
        uint64_t used = 0;
        CK_TRY_GOTO(
            st, parse_cdh(cd.p + pos, d.cd_size - pos, d.cd_off + pos, e, &name, &used, err), fail);
        memcpy(names, name, e->name_len);
        names[e->name_len] = '\0';
        e->pub.name = names;
        names += e->name_len + 1;
        pos += used;
        if (i == 0) {
            const char *slash = memchr(e->pub.name, '/', e->name_len);
            if (!slash || slash == e->pub.name) {
                st = ck_fail(err, CKPT_E_FORMAT,
                             "zip offset %llu: first record '%s' is not inside a root folder",
                             (ull)d.cd_off, e->pub.name);
                goto fail;
            }
            z->root = e->pub.name;
            z->root_len = (size_t)(slash - e->pub.name);
        }
        size_t slot = (size_t)hash_name(HASH_INIT, e->pub.name, e->name_len) & z->slot_mask;
        while (z->slots[slot]) {
            const zip_entry *o = &z->recs[z->slots[slot] - 1];
            if (o->name_len == e->name_len && !memcmp(o->pub.name, e->pub.name, e->name_len)) {
                st = ck_fail(err, CKPT_E_FORMAT, "zip offset %llu: duplicate record name '%s'",
                             (ull)(d.cd_off + pos - used), e->pub.name);
                goto fail;
            }
            slot = (slot + 1) & z->slot_mask;
        }
        z->slots[slot] = (uint32_t)(i + 1);
    }
    /* Root is a copy so it is NUL-terminated at the slash. */
    memcpy(names, z->root, z->root_len);
    names[z->root_len] = '\0';
    z->root = names;

    CK_TRY_GOTO(st, resolve_data(z, &tail, &cd, d.cd_off, err), fail);
    z->reads += reads;
    view_release(&cd);
    view_release(&tail);
    *out = z;
    return CKPT_OK;
fail:
    view_release(&cd);
    view_release(&tail);
    free(z);
    return st;
}

void zip_close(zip_archive *z) { free(z); }

const char *zip_root(const zip_archive *z) { return z->root; }
size_t zip_num_records(const zip_archive *z) { return z->n; }
unsigned zip_open_reads(const zip_archive *z) { return z->reads; }

const zip_record *zip_record_at(const zip_archive *z, size_t i) {
    return i < z->n ? &z->recs[i].pub : NULL;
}

const zip_record *zip_find(const zip_archive *z, const char *name) {
    if (!name) return NULL;
    size_t len = strlen(name), full = z->root_len + 1 + len;
    uint64_t h = hash_name(HASH_INIT, z->root, z->root_len);
    h = hash_name(h, "/", 1);
    h = hash_name(h, name, len);
    for (size_t slot = (size_t)h & z->slot_mask; z->slots[slot]; slot = (slot + 1) & z->slot_mask) {
        const zip_entry *e = &z->recs[z->slots[slot] - 1];
        if (e->name_len == full && !memcmp(e->pub.name, z->root, z->root_len) &&
            e->pub.name[z->root_len] == '/' && !memcmp(e->pub.name + z->root_len + 1, name, len))
            return &e->pub;
    }
    return NULL;
}

ckpt_status zip_read_record(const zip_archive *z, const zip_record *rec, uint64_t max_size,
                            uint8_t **buf, size_t *len, ckpt_error *err) {
    if (!z || !rec || !buf) return ck_fail(err, CKPT_E_INVAL, "zip_read_record: NULL argument");
    *buf = NULL;
    if (len) *len = 0;
    const zip_entry *e = (const zip_entry *)rec;
    uintptr_t a = (uintptr_t)e, lo = (uintptr_t)z->recs, hi = (uintptr_t)(z->recs + z->n);
    if (a < lo || a >= hi || (a - lo) % sizeof *e)
        return ck_fail(err, CKPT_E_INVAL, "zip_read_record: record is not from this archive");
    if (e->flags & ZIP_FLAG_ENCRYPTED)
        return ck_fail(err, CKPT_E_UNSUPPORTED, "zip offset %llu: record '%s' is encrypted",
                       (ull)e->lho, rec->name);
    if (rec->method != 0)
        return ck_fail(err, CKPT_E_UNSUPPORTED,
                       "zip offset %llu: record '%s' is compressed (method %u); only stored "
                       "records are supported",
                       (ull)e->lho, rec->name, (unsigned)rec->method);
    if (rec->size > max_size || rec->size >= SIZE_MAX)
        return ck_fail(err, CKPT_E_LIMIT,
                       "zip offset %llu: record '%s' has %llu bytes, more than the %llu allowed",
                       (ull)rec->data_offset, rec->name, (ull)rec->size, (ull)max_size);
    uint8_t *p = malloc((size_t)rec->size + 1);
    if (!p)
        return ck_fail(err, CKPT_E_NOMEM, "zip offset %llu: out of memory reading '%s'",
                       (ull)rec->data_offset, rec->name);
    ckpt_status st = ck_source_read(&z->src, rec->data_offset, p, rec->size, err);
    if (st != CKPT_OK) {
        free(p);
        return st;
    }
    p[rec->size] = '\0';
    *buf = p;
    if (len) *len = (size_t)rec->size;
    return CKPT_OK;
}
