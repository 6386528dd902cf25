/* test_transform.c — DCP stream transforms: real "stream.zstd/1" items written by
 * dcp.save(_extensions=[ZStandard()]) and frames from python-zstandard, decoded and opened as
 * zips; descriptor syntax; corrupt, truncated and oversized streams. */
#include "torchsave/transform.h"
#include "util/error.h"
#include "zip/zip.h"
#include "zipvec.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

static ck_source mem_source(const uint8_t *p, size_t len) {
    return (ck_source){.fd = -1, .mem = p, .len = len, .name = "mem"};
}

static ckpt_status decode_mem(const uint8_t *p, size_t len, const char *desc, uint64_t max,
                              uint8_t **out, size_t *out_len, ckpt_error *err) {
    ck_source s = mem_source(p, len);
    return ts_transform_decode(&s, desc, max, out, out_len, err);
}

Test(transform, dcp_zstd_items_decode_to_torch_archives) {
    zv_manifest m;
    zv_manifest_load(&m);
    int fd = zv_open("zstd.distcp");
    size_t done = 0;
    for (size_t i = 0; i < m.narchives; i++) {
        const zv_archive *a = &m.archives[i];
        if (strcmp(a->transforms, "stream.zstd/1")) continue;
        ck_source s = {.fd = fd, .base = a->offset, .len = a->length, .name = a->file};
        uint8_t *out;
        size_t out_len;
        ckpt_error err = {0};
        cr_assert_eq(ts_transform_decode(&s, a->transforms, 1 << 20, &out, &out_len, &err), CKPT_OK,
                     "%s", err.message);
        cr_assert(out_len > 4 && !memcmp(out, "PK\x03\x04", 4));
        ck_source d = mem_source(out, out_len);
        zip_archive *z;
        cr_assert_eq(zip_open(&d, &z, &err), CKPT_OK, "%s", err.message);
        cr_assert_eq(zip_num_records(z), a->n);
        for (size_t k = 0; k < a->n; k++) {
            const zip_record *r = zip_record_at(z, k);
            cr_assert_str_eq(r->name, a->rec[k].name);
            cr_assert_eq(r->data_offset, a->rec[k].data_offset);
            uint8_t *buf;
            size_t n;
            cr_assert_eq(zip_read_record(z, r, 1 << 20, &buf, &n, &err), CKPT_OK);
            cr_assert_eq(zv_crc32(buf, n), a->rec[k].crc);
            free(buf);
        }
        zip_close(z);

        /* Exactly the decoded size passes, one byte less does not (no content size here). */
        free(out);
        cr_assert_eq(ts_transform_decode(&s, a->transforms, out_len, &out, &out_len, &err),
                     CKPT_OK);
        free(out);
        out = (uint8_t *)1;
        cr_assert_eq(ts_transform_decode(&s, a->transforms, out_len - 1, &out, &out_len, &err),
                     CKPT_E_LIMIT);
        cr_assert_null(out);
        cr_assert(strstr(err.message, "transform 'stream.zstd/1'"), "%s", err.message);
        done++;
    }
    cr_assert_eq(done, 3);
    close(fd);
}

Test(transform, frame_with_content_size) {
    size_t zl, pl;
    uint8_t *z = zv_load("zstd_sized.zst", &zl);
    uint8_t *pt = zv_load("tensor_f32.pt", &pl);
    cr_assert_eq(ZSTD_getFrameContentSize(z, zl), pl, "vector must declare its size");
    uint8_t *out;
    size_t n;
    ckpt_error err = {0};
    cr_assert_eq(decode_mem(z, zl, "stream.zstd/1", pl, &out, &n, &err), CKPT_OK, "%s",
                 err.message);
    cr_assert_eq(n, pl);
    cr_assert_arr_eq(out, pt, pl);
    free(out);
    cr_assert_eq(decode_mem(z, zl, "stream.zstd/1", pl - 1, &out, &n, &err), CKPT_E_LIMIT);
    cr_assert(strstr(err.message, "declares 1577"), "%s", err.message);
    free(z);
    free(pt);
}

Test(transform, concatenated_frames_from_a_file) {
    size_t zl, pl;
    uint8_t *z = zv_load("zstd_multi.zst", &zl);
    uint8_t *pt = zv_load("tensor_f32.pt", &pl);
    int fd = zv_open("zstd_multi.zst");
    ck_source s = {.fd = fd, .len = zl, .name = "zstd_multi.zst"};
    uint8_t *out;
    size_t n;
    ckpt_error err = {0};
    cr_assert_eq(ts_transform_decode(&s, "stream.zstd/1", 1 << 20, &out, &n, &err), CKPT_OK, "%s",
                 err.message);
    cr_assert_eq(n, 2 * pl);
    cr_assert_arr_eq(out, pt, pl);
    cr_assert_arr_eq(out + pl, pt, pl);
    free(out);
    cr_assert_eq(ts_transform_decode(&s, "stream.zstd/1", 2 * pl - 1, &out, &n, &err),
                 CKPT_E_LIMIT);
    close(fd);
    free(z);
    free(pt);
}

Test(transform, large_output_grows_and_streams_input) {
    /* 3 MiB of patterned data, compressed without a content size, read through an fd in
     * several input chunks. */
    size_t n = 3u << 20;
    uint8_t *src = malloc(n);
    for (size_t i = 0; i < n; i++)
        src[i] = (uint8_t)((i * 2654435761u) >> 13);
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cc, ZSTD_c_contentSizeFlag, 0);
    size_t cap = ZSTD_compressBound(n);
    uint8_t *z = malloc(cap);
    ZSTD_outBuffer ob = {z, cap, 0};
    ZSTD_inBuffer ib = {src, n, 0};
    size_t r;
    do
        r = ZSTD_compressStream2(cc, &ob, &ib, ZSTD_e_end);
    while (r != 0 && !ZSTD_isError(r));
    cr_assert(!ZSTD_isError(r));
    cr_assert_eq(ZSTD_getFrameContentSize(z, ob.pos), ZSTD_CONTENTSIZE_UNKNOWN);
    FILE *f = tmpfile();
    fwrite(z, 1, ob.pos, f);
    fflush(f);
    ck_source s = {.fd = fileno(f), .len = ob.pos, .name = "tmp"};
    uint8_t *out;
    size_t out_len;
    ckpt_error err = {0};
    cr_assert_eq(ts_transform_decode(&s, "stream.zstd/1", n, &out, &out_len, &err), CKPT_OK, "%s",
                 err.message);
    cr_assert_eq(out_len, n);
    cr_assert_arr_eq(out, src, n);
    free(out);
    cr_assert_eq(ts_transform_decode(&s, "stream.zstd/1", n - 1, &out, &out_len, &err),
                 CKPT_E_LIMIT);
    fclose(f);
    ZSTD_freeCCtx(cc);
    free(z);
    free(src);
}

Test(transform, applied_in_list_order) {
    /* Two nested zstd layers (written with libzstd): both descriptors undo them. */
    size_t pl;
    uint8_t *pt = zv_load("tensor_f32.pt", &pl);
    size_t c1cap = ZSTD_compressBound(pl);
    uint8_t *c1 = malloc(c1cap);
    size_t c1n = ZSTD_compress(c1, c1cap, pt, pl, 1);
    size_t c2cap = ZSTD_compressBound(c1n);
    uint8_t *c2 = malloc(c2cap);
    size_t c2n = ZSTD_compress(c2, c2cap, c1, c1n, 1);
    uint8_t *out;
    size_t n;
    ckpt_error err = {0};
    cr_assert_eq(decode_mem(c2, c2n, "stream.zstd/1, stream.zstd/1.2", 1 << 20, &out, &n, &err),
                 CKPT_OK, "%s", err.message);
    cr_assert_eq(n, pl);
    cr_assert_arr_eq(out, pt, pl);
    free(out);
    /* One layer only: the result is the inner zstd frame. */
    cr_assert_eq(decode_mem(c2, c2n, "stream.zstd/1", 1 << 20, &out, &n, &err), CKPT_OK);
    cr_assert_eq(n, c1n);
    free(out);
    free(c1);
    free(c2);
    free(pt);
}

Test(transform, no_descriptors_copies_raw_bytes) {
    const uint8_t raw[] = "PK\x03\x04 not really";
    uint8_t *out;
    size_t n;
    ckpt_error err = {0};
    cr_assert_eq(decode_mem(raw, sizeof raw, NULL, 100, &out, &n, &err), CKPT_OK);
    cr_assert_eq(n, sizeof raw);
    cr_assert_arr_eq(out, raw, n);
    free(out);
    cr_assert_eq(decode_mem(raw, sizeof raw, "  ", 100, &out, &n, &err), CKPT_OK);
    free(out);
    cr_assert_eq(decode_mem(raw, sizeof raw, "", sizeof raw - 1, &out, &n, &err), CKPT_E_LIMIT);
}

Test(transform, descriptor_syntax) {
    static const struct {
        const char *d;
        ckpt_status want;
        const char *msg;
    } cases[] = {
        {"stream.zstd/1", CKPT_OK, NULL},
        {"stream.zstd/1.0", CKPT_OK, NULL},
        {"stream.zstd/1.7.3", CKPT_OK, NULL},
        {" stream.zstd/1 ", CKPT_OK, NULL},
        {"stream.zstd/1,stream.zstd/1", CKPT_OK, NULL},
        {NULL, CKPT_OK, NULL},
        {"", CKPT_OK, NULL},
        {"stream.zstd", CKPT_E_UNSUPPORTED, "'stream.zstd' has no version"},
        {"stream.zstd/", CKPT_E_UNSUPPORTED, "unsupported version"},
        {"stream.zstd/2", CKPT_E_UNSUPPORTED, "'stream.zstd/2' has an unsupported version"},
        {"stream.zstd/10", CKPT_E_UNSUPPORTED, "unsupported version"},
        {"stream.zstd/1a", CKPT_E_UNSUPPORTED, "unsupported version"},
        {"stream.zstd@meta/1", CKPT_E_UNSUPPORTED, "unknown transform 'stream.zstd@meta/1'"},
        {"Rot13Example/1", CKPT_E_UNSUPPORTED, "unknown transform 'Rot13Example/1'"},
        {"STREAM.ZSTD/1", CKPT_E_UNSUPPORTED, "unknown transform"},
        {"stream.zstd/1,foo", CKPT_E_UNSUPPORTED, "unknown transform 'foo'"},
        {"stream.zstd/1,,stream.zstd/1", CKPT_E_FORMAT, "empty transform descriptor"},
        {",", CKPT_E_FORMAT, "empty"},
        {"a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a", CKPT_E_UNSUPPORTED, "unknown transform 'a'"},
        {"stream.zstd/1,stream.zstd/1,stream.zstd/1,stream.zstd/1,stream.zstd/1,stream.zstd/1,"
         "stream.zstd/1,stream.zstd/1,stream.zstd/1,stream.zstd/1,stream.zstd/1,stream.zstd/1,"
         "stream.zstd/1,stream.zstd/1,stream.zstd/1,stream.zstd/1,stream.zstd/1",
         CKPT_E_LIMIT, "more than 16"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ckpt_error err = {0};
        ckpt_status st = ts_transform_check(cases[i].d, &err);
        cr_expect_eq(st, cases[i].want, "'%s': %d %s", cases[i].d, st, err.message);
        if (cases[i].msg)
            cr_expect(strstr(err.message, cases[i].msg), "'%s': %s", cases[i].d, err.message);
        if (cases[i].want != CKPT_OK) {
            /* decode refuses before reading anything */
            uint8_t *out = (uint8_t *)1;
            size_t n;
            cr_expect_eq(decode_mem((const uint8_t *)"x", 1, cases[i].d, 100, &out, &n, NULL),
                         cases[i].want);
            cr_expect_null(out);
        }
    }
    char longname[400];
    memset(longname, 'q', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    ckpt_error err = {0};
    cr_assert_eq(ts_transform_check(longname, &err), CKPT_E_UNSUPPORTED);
    cr_assert(strstr(err.message, "qqq..."), "%s", err.message);
}

Test(transform, corrupt_streams) {
    size_t zl;
    uint8_t *z = zv_load("zstd_sized.zst", &zl);
    uint8_t *out;
    size_t n;
    ckpt_error err = {0};
    /* garbage */
    const uint8_t junk[] = "this is not a zstd frame at all";
    cr_assert_eq(decode_mem(junk, sizeof junk, "stream.zstd/1", 1 << 20, &out, &n, &err),
                 CKPT_E_FORMAT);
    cr_assert(strstr(err.message, "zstd error"), "%s", err.message);
    /* empty */
    cr_assert_eq(decode_mem(z, 0, "stream.zstd/1", 1 << 20, &out, &n, &err), CKPT_E_FORMAT);
    cr_assert(strstr(err.message, "empty"), "%s", err.message);
    /* every truncation */
    for (size_t cut = 1; cut < zl; cut++) {
        ckpt_status st = decode_mem(z, cut, "stream.zstd/1", 1 << 20, &out, &n, &err);
        cr_assert_eq(st, CKPT_E_FORMAT, "cut %zu: %d %s", cut, st, err.message);
    }
    /* trailing garbage after a complete frame */
    uint8_t *t = malloc(zl + 5);
    memcpy(t, z, zl);
    memcpy(t + zl, "junk!", 5);
    cr_assert_eq(decode_mem(t, zl + 5, "stream.zstd/1", 1 << 20, &out, &n, &err), CKPT_E_FORMAT);
    /* bit flips in the frame body: either detected, or (no checksum) different bytes */
    for (size_t i = 0; i < zl; i += 7) {
        memcpy(t, z, zl);
        t[i] ^= 0x5a;
        ckpt_status st = decode_mem(t, zl, "stream.zstd/1", 1 << 20, &out, &n, &err);
        cr_assert(st == CKPT_OK || st == CKPT_E_FORMAT || st == CKPT_E_LIMIT, "flip %zu: %d", i,
                  st);
        if (st == CKPT_OK) free(out);
    }
    free(t);
    free(z);
}

Test(transform, window_bound_follows_max_out) {
    /* A streamed frame (no size known) declaring a 256 MiB window: refused with a small output
     * bound, before anything that large is allocated; accepted once the bound covers it. */
    const size_t n = 1000;
    uint8_t src[1000];
    memset(src, 'a', n);
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cc, ZSTD_c_windowLog, 28);
    uint8_t z[2048];
    ZSTD_outBuffer ob = {z, sizeof z, 0};
    ZSTD_inBuffer ib = {src, n, 0};
    cr_assert(!ZSTD_isError(ZSTD_compressStream2(cc, &ob, &ib, ZSTD_e_continue)));
    ZSTD_inBuffer none = {NULL, 0, 0};
    size_t r;
    do
        r = ZSTD_compressStream2(cc, &ob, &none, ZSTD_e_end);
    while (r && !ZSTD_isError(r));
    cr_assert(!ZSTD_isError(r));
    cr_assert_eq(ZSTD_getFrameContentSize(z, ob.pos), ZSTD_CONTENTSIZE_UNKNOWN);
    uint8_t *out;
    size_t on;
    ckpt_error err = {0};
    cr_assert_eq(decode_mem(z, ob.pos, "stream.zstd/1", 4096, &out, &on, &err), CKPT_E_LIMIT);
    cr_assert(strstr(err.message, "Frame requires too much memory"), "%s", err.message);
    cr_assert_eq(decode_mem(z, ob.pos, "stream.zstd/1", 1u << 28, &out, &on, &err), CKPT_OK, "%s",
                 err.message);
    cr_assert_eq(on, n);
    cr_assert_arr_eq(out, src, n);
    free(out);
    ZSTD_freeCCtx(cc);
}
