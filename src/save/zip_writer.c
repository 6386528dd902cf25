/* zip_writer.c — torch.save-compatible stored zip archives (zip_writer.h). */
#include "save/zip_writer.h"

#include "save/crc32.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN 64u
#define U32MAX 0xffffffffu
#define ZW_BLOCK (512u << 10) /* CRC + write granule: stays in L2 */

typedef struct hdr {
    unsigned char b[512];
    size_t n;
} hdr;

static void h_le(hdr *h, uint64_t v, int k) {
    for (int i = 0; i < k; i++)
        h->b[h->n++] = (unsigned char)(v >> (8 * i));
}
static void h_bytes(hdr *h, const void *p, size_t k) {
    memcpy(h->b + h->n, p, k);
    h->n += k;
}

void zw_begin(zip_writer *z, save_sink *sink, const char *root) {
    memset(z, 0, sizeof *z);
    z->sink = sink;
    z->base = sink->pos;
    z->root = root;
}

void zw_release(zip_writer *z) {
    for (size_t i = 0; i < z->n; i++)
        free(z->ents[i].name);
    free(z->ents);
    z->ents = NULL;
    z->n = z->cap = 0;
    free(z->open.name);
    z->open.name = NULL;
}

/* ------------------------------------------------------------------ the pieces */

static bool zip64_extra(uint64_t cursor, uint64_t len, bool *big_size, bool *big_off) {
    *big_size = len >= U32MAX;
    *big_off = cursor >= U32MAX;
    return *big_size || *big_off;
}

size_t zw_local_header(unsigned char *out, const char *full, size_t nl, uint64_t cursor,
                       uint64_t len) {
    bool big_size, big_off;
    size_t z64len = 0;
    if (zip64_extra(cursor, len, &big_size, &big_off))
        z64len = 4 + (big_size ? 16 : 0) + (big_off ? 8 : 0);
    /* padding as PyTorchStreamWriter's getPadding computes it */
    uint64_t start = cursor + 30 + (uint64_t)nl + z64len + 4;
    size_t pad = (size_t)((ALIGN - start % ALIGN) % ALIGN);
    size_t total = 30 + nl + z64len + 4 + pad;
    if (!out) return total;
    hdr h = {.n = 0};
    h_le(&h, 0x04034b50u, 4);
    h_le(&h, 0, 2);                     /* version needed (miniz: 0) */
    h_le(&h, len ? 0x0808 : 0x0800, 2); /* data descriptor (not for empty records), UTF-8 */
    h_le(&h, 0, 2);                     /* stored */
    h_le(&h, 0, 2);                     /* time */
    h_le(&h, 0, 2);                     /* date */
    h_le(&h, 0, 4);                     /* crc: in the data descriptor */
    h_le(&h, 0, 4);
    h_le(&h, 0, 4);
    h_le(&h, nl, 2);
    h_le(&h, z64len + 4 + pad, 2);
    h_bytes(&h, full, nl);
    if (z64len) {
        h_le(&h, 0x0001, 2);
        h_le(&h, z64len - 4, 2);
        if (big_size) {
            h_le(&h, len, 8);
            h_le(&h, len, 8);
        }
        if (big_off) h_le(&h, cursor, 8);
    }
    h_le(&h, 'F' | ('B' << 8), 2);
    h_le(&h, pad, 2);
    memset(h.b + h.n, 'Z', pad);
    h.n += pad;
    memcpy(out, h.b, h.n);
    return h.n;
}

size_t zw_descriptor(unsigned char *out, uint64_t cursor, uint64_t len, uint32_t crc) {
    if (!len) return 0; /* miniz writes none after an empty record */
    bool big_size, big_off;
    bool big = zip64_extra(cursor, len, &big_size, &big_off); /* 64-bit sizes, as miniz */
    if (!out) return big ? 24 : 16;
    hdr d = {.n = 0};
    h_le(&d, 0x08074b50u, 4);
    h_le(&d, crc, 4);
    h_le(&d, len, big ? 8 : 4);
    h_le(&d, len, big ? 8 : 4);
    memcpy(out, d.b, d.n);
    return d.n;
}

size_t zw_central(unsigned char *out, const char *full, size_t nl, uint64_t lho, uint64_t len,
                  uint32_t crc) {
    bool big_size, big_off;
    size_t xl = zip64_extra(lho, len, &big_size, &big_off)
                    ? 4 + (big_size ? 16 : 0) + (big_off ? 8 : 0)
                    : 0;
    if (!out) return 46 + nl + xl;
    hdr h = {.n = 0};
    h_le(&h, 0x02014b50u, 4);
    h_le(&h, 0, 2); /* version made by (miniz: 0) */
    h_le(&h, 0, 2); /* version needed (miniz: 0, Zip64 extra or not) */
    h_le(&h, len ? 0x0808 : 0x0800, 2);
    h_le(&h, 0, 2);
    h_le(&h, 0, 2);
    h_le(&h, 0, 2);
    h_le(&h, crc, 4);
    h_le(&h, big_size ? U32MAX : len, 4);
    h_le(&h, big_size ? U32MAX : len, 4);
    h_le(&h, nl, 2);
    h_le(&h, xl, 2);
    h_le(&h, 0, 2); /* comment */
    h_le(&h, 0, 2); /* disk */
    h_le(&h, 0, 2); /* internal attributes */
    h_le(&h, 0, 4); /* external attributes */
    h_le(&h, big_off ? U32MAX : lho, 4);
    h_bytes(&h, full, nl);
    if (xl) {
        h_le(&h, 0x0001, 2);
        h_le(&h, xl - 4, 2);
        if (big_size) {
            h_le(&h, len, 8);
            h_le(&h, len, 8);
        }
        if (big_off) h_le(&h, lho, 8);
    }
    memcpy(out, h.b, h.n);
    return h.n;
}

size_t zw_trailer(unsigned char *out, uint64_t n, uint64_t cd_off, uint64_t cd_size) {
    uint64_t z64_off = cd_off + cd_size;
    hdr h = {.n = 0};
    h_le(&h, 0x06064b50u, 4);
    h_le(&h, 44, 8);
    h_le(&h, 0x031e, 2);
    h_le(&h, 0x2d, 2);
    h_le(&h, 0, 4);
    h_le(&h, 0, 4);
    h_le(&h, n, 8);
    h_le(&h, n, 8);
    h_le(&h, cd_size, 8);
    h_le(&h, cd_off, 8);
    h_le(&h, 0x07064b50u, 4);
    h_le(&h, 0, 4);
    h_le(&h, z64_off, 8);
    h_le(&h, 1, 4);
    h_le(&h, 0x06054b50u, 4);
    h_le(&h, 0, 2);
    h_le(&h, 0, 2);
    h_le(&h, n > 0xffff ? 0xffff : n, 2);
    h_le(&h, n > 0xffff ? 0xffff : n, 2);
    h_le(&h, cd_size >= U32MAX ? U32MAX : cd_size, 4);
    h_le(&h, cd_off >= U32MAX ? U32MAX : cd_off, 4);
    h_le(&h, 0, 2);
    memcpy(out, h.b, h.n);
    return h.n;
}

/* ------------------------------------------------------------------ into a sink */

ckpt_status zw_record_begin(zip_writer *z, const char *name, uint64_t len, ckpt_error *err) {
    if (z->open.name) return ck_fail(err, CKPT_E_INVAL, "zip record %s still open", z->open.name);
    char full[256];
    int fl = snprintf(full, sizeof full, "%s/%s", z->root, name);
    if (fl < 0 || (size_t)fl >= sizeof full)
        return ck_fail(err, CKPT_E_INVAL, "zip record name too long: %s", name);
    if (z->n == z->cap) {
        size_t c = z->cap ? z->cap * 2 : 8;
        zw_entry *e = realloc(z->ents, c * sizeof *e);
        if (!e) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
        z->ents = e;
        z->cap = c;
    }
    uint64_t cursor = z->sink->pos - z->base;
    unsigned char h[ZW_LOCAL_MAX];
    size_t hl = zw_local_header(h, full, (size_t)fl, cursor, len);
    char *nm = strdup(full);
    if (!nm) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    ckpt_status s = save_sink_write(z->sink, h, hl, err);
    if (s != CKPT_OK) {
        free(nm);
        return s;
    }
    z->open = (zw_entry){nm, cursor, len, 0};
    z->open_done = 0;
    return CKPT_OK;
}

ckpt_status zw_record_data(zip_writer *z, const void *data, size_t n, ckpt_error *err) {
    if (!z->open.name || n > z->open.size - z->open_done)
        return ck_fail(err, CKPT_E_INVAL, "zip record: more data than announced");
    /* CRC and write block by block, so each block is written while still in cache (one pass
     * over memory instead of two); the CRC goes in the data descriptor after the data. */
    const unsigned char *p = data;
    for (size_t done = 0; done < n;) {
        size_t k = n - done < ZW_BLOCK ? n - done : ZW_BLOCK;
        z->open.crc = save_crc32(z->open.crc, p + done, k);
        CK_TRY(save_sink_write(z->sink, p + done, k, err));
        done += k;
    }
    z->open_done += n;
    return CKPT_OK;
}

ckpt_status zw_record_end(zip_writer *z, ckpt_error *err) {
    if (!z->open.name || z->open_done != z->open.size)
        return ck_fail(err, CKPT_E_INVAL, "zip record: %llu of %llu bytes written",
                       (unsigned long long)z->open_done, (unsigned long long)z->open.size);
    unsigned char d[ZW_DESC_MAX];
    size_t dl = zw_descriptor(d, z->open.lho, z->open.size, z->open.crc);
    if (dl) CK_TRY(save_sink_write(z->sink, d, dl, err));
    z->ents[z->n++] = z->open;
    z->open.name = NULL;
    return CKPT_OK;
}

ckpt_status zw_add(zip_writer *z, const char *name, const void *data, uint64_t len,
                   ckpt_error *err) {
    CK_TRY(zw_record_begin(z, name, len, err));
    const unsigned char *p = data;
    for (uint64_t done = 0; done < len;) { /* size_t pieces of a uint64_t length */
        size_t n = len - done < ((size_t)1 << 30) ? (size_t)(len - done) : (size_t)1 << 30;
        CK_TRY(zw_record_data(z, p + done, n, err));
        done += n;
    }
    return zw_record_end(z, err);
}

ckpt_status zw_finish(zip_writer *z, uint64_t *archive_len, ckpt_error *err) {
    uint64_t cd_off = z->sink->pos - z->base;
    for (size_t i = 0; i < z->n; i++) {
        const zw_entry *e = &z->ents[i];
        unsigned char h[ZW_CENTRAL_MAX];
        size_t hl = zw_central(h, e->name, strlen(e->name), e->lho, e->size, e->crc);
        CK_TRY(save_sink_write(z->sink, h, hl, err));
    }
    uint64_t cd_size = z->sink->pos - z->base - cd_off;
    unsigned char t[ZW_TRAILER_LEN];
    size_t tl = zw_trailer(t, z->n, cd_off, cd_size);
    CK_TRY(save_sink_write(z->sink, t, tl, err));
    *archive_len = z->sink->pos - z->base;
    zw_release(z);
    return CKPT_OK;
}
