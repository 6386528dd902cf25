/* test_zip.c — the zip reader against archives written by torch.save, DCP and Python's
 * zipfile (tests/unit/zip_vectors, oracle in manifest.txt), plus malformed variants: cuts,
 * bit flips, out-of-range offsets, and archives built here to reach zip64 extras, long
 * comments, duplicate names and large record counts. */
#include "util/error.h"
#include "util/strbuf.h"
#include "zip/zip.h"
#include "zipvec.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ck_source mem_source(const uint8_t *p, size_t len) {
    return (ck_source){.fd = -1, .mem = p, .len = len, .name = "mem"};
}

static ckpt_status open_mem(const uint8_t *p, size_t len, zip_archive **z, ckpt_error *err) {
    ck_source s = mem_source(p, len);
    return zip_open(&s, z, err);
}

/* Offset of the nth (0-based) occurrence of a 4-byte little-endian signature, or -1. */
static long find_sig(const uint8_t *p, size_t len, uint32_t sig, int nth) {
    for (size_t i = 0; i + 4 <= len; i++) {
        uint32_t v = (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 | (uint32_t)p[i + 2] << 16 |
                     (uint32_t)p[i + 3] << 24;
        if (v == sig && nth-- == 0) return (long)i;
    }
    return -1;
}

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v) {
    put16(p, (uint16_t)v);
    put16(p + 2, (uint16_t)(v >> 16));
}
static void put64(uint8_t *p, uint64_t v) {
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

static void check_archive(const zv_archive *a, const zip_archive *z) {
    cr_assert_str_eq(zip_root(z), a->root, "%s@%llu", a->file, (unsigned long long)a->offset);
    cr_assert_eq(zip_num_records(z), a->n);
    for (size_t i = 0; i < a->n; i++) {
        const zip_record *r = zip_record_at(z, i);
        cr_assert_str_eq(r->name, a->rec[i].name);
        cr_assert_eq(r->data_offset, a->rec[i].data_offset, "%s", r->name);
        cr_assert_eq(r->size, a->rec[i].size, "%s", r->name);
        cr_assert_eq(r->method, 0);
        const char *rel = r->name + strlen(a->root) + 1;
        cr_assert_eq(zip_find(z, rel), r, "lookup of %s", rel);
        uint8_t *buf;
        size_t len;
        ckpt_error err = {0};
        cr_assert_eq(zip_read_record(z, r, r->size, &buf, &len, &err), CKPT_OK, "%s", err.message);
        cr_assert_eq(len, r->size);
        cr_assert_eq(buf[len], 0);
        cr_assert_eq(zv_crc32(buf, len), a->rec[i].crc, "%s content", r->name);
        free(buf);
    }
    cr_assert_null(zip_record_at(z, a->n));
}

Test(zip, manifest_archives_from_file_and_memory) {
    zv_manifest m;
    zv_manifest_load(&m);
    size_t checked = 0;
    for (size_t i = 0; i < m.narchives; i++) {
        const zv_archive *a = &m.archives[i];
        if (a->transforms[0] || strstr(a->file, "deflated")) continue; /* other tests */
        int fd = zv_open(a->file);
        ck_source s = {.fd = fd, .base = a->offset, .len = a->length, .name = a->file};
        zip_archive *z = NULL;
        ckpt_error err = {0};
        cr_assert_eq(zip_open(&s, &z, &err), CKPT_OK, "%s: %s", a->file, err.message);
        check_archive(a, z);
        /* Everything below 8 KiB comes from the single tail read. */
        cr_assert_eq(zip_open_reads(z), a->length <= 8192 ? 1u : 2u, "%s: %u reads", a->file,
                     zip_open_reads(z));
        zip_close(z);
        close(fd);

        size_t len;
        uint8_t *all = zv_load(a->file, &len);
        cr_assert_eq(open_mem(all + a->offset, a->length, &z, &err), CKPT_OK, "%s", err.message);
        check_archive(a, z);
        cr_assert_eq(zip_open_reads(z), 0u);
        zip_close(z);
        free(all);
        checked++;
    }
    cr_assert_geq(checked, 9);
}

Test(zip, torch_tensor_archive_exact) {
    size_t len;
    uint8_t *p = zv_load("tensor_f32.pt", &len);
    cr_assert_eq(len, 1577);
    zip_archive *z;
    ckpt_error err = {0};
    cr_assert_eq(open_mem(p, len, &z, &err), CKPT_OK, "%s", err.message);
    static const struct {
        const char *name;
        uint64_t off, size;
    } want[] = {
        {"archive/data.pkl", 64, 154},
        {"archive/.format_version", 320, 1},
        {"archive/.storage_alignment", 448, 2},
        {"archive/byteorder", 576, 6},
        {"archive/data/0", 704, 24},
        {"archive/version", 832, 2},
        {"archive/.data/serialization_id", 960, 40},
    };
    cr_assert_str_eq(zip_root(z), "archive");
    cr_assert_eq(zip_num_records(z), 7);
    for (size_t i = 0; i < 7; i++) {
        const zip_record *r = zip_record_at(z, i);
        cr_assert_str_eq(r->name, want[i].name);
        cr_assert_eq(r->data_offset, want[i].off);
        cr_assert_eq(r->size, want[i].size);
        cr_assert_eq(r->data_offset % 64, 0, "torch aligns record data to 64 bytes");
    }
    uint8_t *buf;
    size_t n;
    cr_assert_eq(zip_read_record(z, zip_find(z, "data/0"), 1024, &buf, &n, &err), CKPT_OK);
    float f[6];
    cr_assert_eq(n, sizeof f);
    memcpy(f, buf, sizeof f);
    for (int i = 0; i < 6; i++)
        cr_assert_float_eq(f[i], (float)i, 0);
    free(buf);
    cr_assert_eq(zip_read_record(z, zip_find(z, "byteorder"), 64, &buf, &n, &err), CKPT_OK);
    cr_assert_str_eq((char *)buf, "little");
    free(buf);
    cr_assert_eq(zip_read_record(z, zip_find(z, ".storage_alignment"), 64, &buf, &n, &err),
                 CKPT_OK);
    cr_assert_str_eq((char *)buf, "64");
    free(buf);
    cr_assert_eq(zip_read_record(z, zip_find(z, ".format_version"), 64, &buf, &n, &err), CKPT_OK);
    cr_assert_str_eq((char *)buf, "1");
    free(buf);
    cr_assert_null(zip_find(z, "archive/data.pkl"), "names are relative to the root");
    cr_assert_null(zip_find(z, "data"));
    cr_assert_null(zip_find(z, "data/1"));
    cr_assert_null(zip_find(z, ""));
    cr_assert_null(zip_find(z, NULL));
    zip_close(z);
    free(p);
}

Test(zip, root_from_file_name) {
    size_t len;
    uint8_t *p = zv_load("common.pt", &len);
    zip_archive *z;
    ckpt_error err = {0};
    cr_assert_eq(open_mem(p, len, &z, &err), CKPT_OK, "%s", err.message);
    cr_assert_str_eq(zip_root(z), "common");
    const zip_record *r = zip_find(z, "data.pkl");
    cr_assert_not_null(r);
    cr_assert_str_eq(r->name, "common/data.pkl");
    cr_assert_null(zip_find(z, "data/0"), "a dict of plain values has no storages");
    zip_close(z);
    free(p);
}

Test(zip, object_with_several_storages) {
    size_t len;
    uint8_t *p = zv_load("object.pt", &len);
    zip_archive *z;
    ckpt_error err = {0};
    cr_assert_eq(open_mem(p, len, &z, &err), CKPT_OK, "%s", err.message);
    uint8_t *buf;
    size_t n;
    cr_assert_eq(zip_read_record(z, zip_find(z, "data/0"), 64, &buf, &n, &err), CKPT_OK);
    int64_t v[3];
    cr_assert_eq(n, sizeof v);
    memcpy(v, buf, sizeof v);
    cr_assert(v[0] == 1 && v[1] == 2 && v[2] == 3);
    free(buf);
    cr_assert_eq(zip_read_record(z, zip_find(z, "data/1"), 64, &buf, &n, &err), CKPT_OK);
    static const uint8_t bf16[8] = {0xc0, 0x3f, 0x00, 0xc0, 0x80, 0x3e, 0x00, 0x41};
    cr_assert_eq(n, 8);
    cr_assert_arr_eq(buf, bf16, 8);
    free(buf);
    cr_assert_eq(zip_read_record(z, zip_find(z, "data/2"), 64, &buf, &n, &err), CKPT_OK);
    cr_assert(n == 1 && buf[0] == 1);
    free(buf);
    zip_close(z);
    free(p);
}

Test(zip, archive_larger_than_tail_costs_two_reads) {
    int fd = zv_open("big_u8.pt");
    ck_source s = {.fd = fd, .len = 11561, .name = "big_u8.pt"};
    zip_archive *z;
    ckpt_error err = {0};
    cr_assert_eq(zip_open(&s, &z, &err), CKPT_OK, "%s", err.message);
    cr_assert_eq(zip_open_reads(z), 2);
    const zip_record *r = zip_find(z, "data/0");
    cr_assert_eq(r->data_offset, 704);
    cr_assert_eq(r->size, 10000);
    uint8_t *buf;
    size_t n;
    cr_assert_eq(zip_read_record(z, r, 10000, &buf, &n, &err), CKPT_OK);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(buf[i], i % 251);
    free(buf);
    cr_assert_eq(zip_read_record(z, r, 9999, &buf, &n, &err), CKPT_E_LIMIT);
    cr_assert_null(buf);
    zip_close(z);
    close(fd);
}

Test(zip, python_zipfile_without_zip64_and_with_comment) {
    size_t len;
    uint8_t *p = zv_load("classic.zip", &len);
    cr_assert_eq(find_sig(p, len, 0x06064b50u, 0), -1, "vector must not carry zip64 records");
    cr_assert(len > 19 && !memcmp(p + len - 19, "ckptfs test comment", 19));
    zip_archive *z;
    ckpt_error err = {0};
    cr_assert_eq(open_mem(p, len, &z, &err), CKPT_OK, "%s", err.message);
    cr_assert_eq(zip_num_records(z), 7);
    cr_assert_eq(zip_find(z, "data/0")->data_offset, 409);
    zip_close(z);
    free(p);
}

Test(zip, compressed_record_rejected_on_read) {
    size_t len;
    uint8_t *p = zv_load("deflated.zip", &len);
    zip_archive *z;
    ckpt_error err = {0};
    cr_assert_eq(open_mem(p, len, &z, &err), CKPT_OK, "%s", err.message);
    const zip_record *r = zip_find(z, "data/0");
    cr_assert_eq(r->method, 8);
    cr_assert_eq(r->size, 24, "size is the uncompressed size");
    cr_assert_eq(r->data_offset, 398);
    uint8_t *buf = (uint8_t *)1;
    size_t n = 7;
    cr_assert_eq(zip_read_record(z, r, 1 << 20, &buf, &n, &err), CKPT_E_UNSUPPORTED);
    cr_assert_null(buf);
    cr_assert_eq(n, 0);
    cr_assert(strstr(err.message, "compressed (method 8)"), "%s", err.message);
    cr_assert(strstr(err.message, "archive/data/0"), "%s", err.message);
    zip_close(z);
    free(p);
}

Test(zip, bad_arguments) {
    size_t len;
    uint8_t *p = zv_load("tensor_f32.pt", &len);
    zip_archive *z, *z2;
    ckpt_error err = {0};
    cr_assert_eq(open_mem(p, len, &z, &err), CKPT_OK);
    cr_assert_eq(open_mem(p, len, &z2, &err), CKPT_OK);
    uint8_t *buf;
    size_t n;
    cr_assert_eq(zip_read_record(z, zip_record_at(z2, 0), 1000, &buf, &n, &err), CKPT_E_INVAL);
    cr_assert_eq(zip_read_record(z, NULL, 1000, &buf, &n, &err), CKPT_E_INVAL);
    zip_record fake = *zip_record_at(z, 0);
    cr_assert_eq(zip_read_record(z, &fake, 1000, &buf, &n, &err), CKPT_E_INVAL);
    zip_close(z2);
    ck_source none = {.fd = -1};
    cr_assert_eq(zip_open(&none, &z2 /* unused */, &err), CKPT_E_INVAL);
    cr_assert_null(z2);
    cr_assert_eq(zip_open(NULL, &z2, NULL), CKPT_E_INVAL);
    zip_close(z);
    zip_close(NULL);
    free(p);
}

/* A window that runs past the end of its file is a bad range, not an I/O failure. */
Test(zip, short_file_is_range_error) {
    int fd = zv_open("tensor_f32.pt");
    ck_source s = {.fd = fd, .len = 5000, .name = "tensor_f32.pt"}; /* file has 1577 */
    zip_archive *z;
    ckpt_error err = {0};
    cr_assert_eq(zip_open(&s, &z, &err), CKPT_E_RANGE);
    cr_assert(strstr(err.message, "tensor_f32.pt"), "%s", err.message);
    close(fd);
}

Test(zip, every_truncation_fails) {
    size_t len;
    uint8_t *p = zv_load("tensor_f32.pt", &len);
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *c = malloc(cut ? cut : 1);
        memcpy(c, p, cut);
        zip_archive *z = (zip_archive *)1;
        ckpt_error err = {0};
        ckpt_status st = open_mem(c, cut, &z, &err);
        cr_assert(st == CKPT_E_FORMAT || st == CKPT_E_RANGE, "cut %zu: status %d", cut, st);
        cr_assert_null(z);
        cr_assert(!strncmp(err.message, "zip offset ", 11), "%s", err.message);
        free(c);
    }
    /* The same through a file window, at a few cut points. */
    int fd = zv_open("tensor_f32.pt");
    static const size_t cuts[] = {0, 1, 21, 22, 100, 1016, 1478, 1500, 1554, 1576};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        ck_source s = {.fd = fd, .len = cuts[i], .name = "f"};
        zip_archive *z;
        ckpt_error err = {0};
        ckpt_status st = zip_open(&s, &z, &err);
        cr_assert(st == CKPT_E_FORMAT || st == CKPT_E_RANGE, "cut %zu: %d", cuts[i], st);
    }
    close(fd);
    free(p);
}

Test(zip, every_shifted_start_fails) {
    size_t len;
    uint8_t *p = zv_load("tensor_f32.pt", &len);
    for (size_t k = 1; k < len; k++) {
        zip_archive *z;
        ckpt_error err = {0};
        ckpt_status st = open_mem(p + k, len - k, &z, &err);
        cr_assert(st == CKPT_E_FORMAT || st == CKPT_E_RANGE, "start %zu: status %d", k, st);
    }
    free(p);
}

static ckpt_status open_patched(const uint8_t *p, size_t len, void (*patch)(uint8_t *, size_t),
                                ckpt_error *err) {
    uint8_t *c = malloc(len);
    memcpy(c, p, len);
    patch(c, len);
    zip_archive *z = NULL;
    ckpt_status st = open_mem(c, len, &z, err);
    if (st == CKPT_OK) {
        /* Reading every record must still be safe. */
        for (size_t i = 0; i < zip_num_records(z); i++) {
            uint8_t *buf;
            size_t n;
            ckpt_error e2;
            if (zip_read_record(z, zip_record_at(z, i), 1 << 20, &buf, &n, &e2) == CKPT_OK)
                free(buf);
        }
    }
    zip_close(z);
    free(c);
    return st;
}

static void patch_eocd_sig(uint8_t *c, size_t len) { c[len - 22] ^= 0x01; }
static void patch_z64_sig(uint8_t *c, size_t len) { c[find_sig(c, len, 0x06064b50u, 0)] ^= 0x80; }
static void patch_loc_sig(uint8_t *c, size_t len) { c[len - 42 + 3] ^= 0x10; }
static void patch_cd_off(uint8_t *c, size_t len) {
    put32(c + len - 22 + 16, (uint32_t)len + 100);
    put64(c + find_sig(c, len, 0x06064b50u, 0) + 48, len + 100);
}
static void patch_cd_size(uint8_t *c, size_t len) {
    put32(c + len - 22 + 12, 0x7fffffff);
    put64(c + find_sig(c, len, 0x06064b50u, 0) + 40, 0x7fffffff);
}
static void patch_z64_only_cd_off(uint8_t *c, size_t len) {
    put64(c + find_sig(c, len, 0x06064b50u, 0) + 48, 1);
}
static void patch_count(uint8_t *c, size_t len) {
    put16(c + len - 22 + 8, 1000);
    put16(c + len - 22 + 10, 1000);
    long z = find_sig(c, len, 0x06064b50u, 0);
    put64(c + z + 24, 1000);
    put64(c + z + 32, 1000);
}
static void patch_zero_records(uint8_t *c, size_t len) {
    put16(c + len - 22 + 8, 0);
    put16(c + len - 22 + 10, 0);
    long z = find_sig(c, len, 0x06064b50u, 0);
    put64(c + z + 24, 0);
    put64(c + z + 32, 0);
}
static void patch_locator_offset(uint8_t *c, size_t len) { put64(c + len - 42 + 8, len); }
static void patch_z64_record_size(uint8_t *c, size_t len) {
    put64(c + find_sig(c, len, 0x06064b50u, 0) + 4, 1u << 20);
}
static void patch_multidisk(uint8_t *c, size_t len) { put32(c + len - 42 + 16, 3); }
static void patch_data0_size(uint8_t *c, size_t len) { /* 5th central record = data/0 */
    long cd = find_sig(c, len, 0x02014b50u, 4);
    put32(c + cd + 20, 0x00100000);
    put32(c + cd + 24, 0x00100000);
}
static void patch_data0_stored_mismatch(uint8_t *c, size_t len) {
    put32(c + find_sig(c, len, 0x02014b50u, 4) + 20, 23);
}
static void patch_lho_past_cd(uint8_t *c, size_t len) {
    put32(c + find_sig(c, len, 0x02014b50u, 2) + 42, (uint32_t)len - 40);
}
static void patch_lho_unaligned(uint8_t *c, size_t len) { /* points at a non-header */
    put32(c + find_sig(c, len, 0x02014b50u, 1) + 42, 10);
}
static void patch_first_name(uint8_t *c, size_t len) {
    c[find_sig(c, len, 0x02014b50u, 0) + 46 + 7] = '_'; /* "archive_data.pkl" */
}
static void patch_name_nul(uint8_t *c, size_t len) {
    c[find_sig(c, len, 0x02014b50u, 3) + 46 + 9] = 0;
}
static void patch_name_len(uint8_t *c, size_t len) { /* last record name runs past the dir */
    put16(c + find_sig(c, len, 0x02014b50u, 6) + 28, 500);
}
static void patch_method(uint8_t *c, size_t len) {
    put16(c + find_sig(c, len, 0x02014b50u, 4) + 10, 8);
}
static void patch_encrypted(uint8_t *c, size_t len) {
    c[find_sig(c, len, 0x02014b50u, 4) + 8] |= 1;
}
static void patch_local_extra_len(uint8_t *c, size_t len) { /* data/0 local extra -> huge */
    put16(c + find_sig(c, len, 0x04034b50u, 4) + 28, 0xffff);
}
static void patch_local_name_len(uint8_t *c, size_t len) { /* shifts data past next header */
    put16(c + find_sig(c, len, 0x04034b50u, 4) + 26, 200);
}

Test(zip, malformed_variants) {
    size_t len;
    uint8_t *p = zv_load("tensor_f32.pt", &len);
    static const struct {
        const char *what;
        void (*patch)(uint8_t *, size_t);
        ckpt_status want;
        const char *msg;
    } cases[] = {
        {"EOCD signature flipped", patch_eocd_sig, CKPT_E_FORMAT, "not found"},
        {"zip64 EOCD signature flipped", patch_z64_sig, CKPT_E_FORMAT, "zip64 end of central"},
        {"zip64 locator flipped: classic EOCD is used", patch_loc_sig, CKPT_OK, NULL},
        {"central directory offset past the end", patch_cd_off, CKPT_E_RANGE, "zip offset 1677"},
        {"central directory size past the end", patch_cd_size, CKPT_E_RANGE, "central directory"},
        {"EOCD and zip64 disagree", patch_z64_only_cd_off, CKPT_E_FORMAT, "disagrees"},
        {"record count too large", patch_count, CKPT_E_FORMAT, "1000 records"},
        {"no records", patch_zero_records, CKPT_E_FORMAT, "no records"},
        {"zip64 locator offset", patch_locator_offset, CKPT_E_RANGE, "zip64"},
        {"zip64 record size", patch_z64_record_size, CKPT_E_FORMAT, "size"},
        {"multi-disk", patch_multidisk, CKPT_E_UNSUPPORTED, "multi-disk"},
        {"record data past the directory", patch_data0_size, CKPT_E_RANGE,
         "data of 'archive/data/0'"},
        {"stored sizes differ", patch_data0_stored_mismatch, CKPT_E_FORMAT, "compressed size 23"},
        {"local header past directory", patch_lho_past_cd, CKPT_E_RANGE, "local header"},
        {"local header offset wrong", patch_lho_unaligned, CKPT_E_FORMAT,
         "zip offset 10: bad local"},
        {"first record outside a folder", patch_first_name, CKPT_E_FORMAT, "root folder"},
        {"NUL in a name", patch_name_nul, CKPT_E_FORMAT, "NUL"},
        {"name past the directory", patch_name_len, CKPT_E_FORMAT, "zip offset 1403"},
        {"compressed: opens, read refused", patch_method, CKPT_OK, NULL},
        {"encrypted: opens, read refused", patch_encrypted, CKPT_OK, NULL},
        {"local extra length huge", patch_local_extra_len, CKPT_E_RANGE, "data of"},
        {"local name length shifts data", patch_local_name_len, CKPT_OK, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ckpt_error err = {0};
        ckpt_status st = open_patched(p, len, cases[i].patch, &err);
        cr_expect_eq(st, cases[i].want, "%s: got %d (%s)", cases[i].what, st, err.message);
        if (cases[i].msg)
            cr_expect(strstr(err.message, cases[i].msg), "%s: message '%s' lacks '%s'",
                      cases[i].what, err.message, cases[i].msg);
        if (st != CKPT_OK)
            cr_expect(!strncmp(err.message, "zip offset ", 11), "%s: %s", cases[i].what,
                      err.message);
    }
    free(p);
}

Test(zip, every_central_and_local_signature_flip) {
    size_t len;
    uint8_t *p = zv_load("tensor_f32.pt", &len);
    for (int kind = 0; kind < 2; kind++) {
        uint32_t sig = kind ? 0x04034b50u : 0x02014b50u;
        for (int i = 0; i < 7; i++) {
            uint8_t *c = malloc(len);
            memcpy(c, p, len);
            long at = find_sig(c, len, sig, i);
            cr_assert_geq(at, 0);
            for (int bit = 0; bit < 32; bit++) {
                c[at + bit / 8] ^= (uint8_t)(1u << (bit % 8));
                zip_archive *z;
                ckpt_error err = {0};
                cr_assert_eq(open_mem(c, len, &z, &err), CKPT_E_FORMAT, "sig %x #%d bit %d", sig, i,
                             bit);
                cr_assert(strstr(err.message, "signature"), "%s", err.message);
                c[at + bit / 8] ^= (uint8_t)(1u << (bit % 8));
            }
            free(c);
        }
    }
    free(p);
}

/* ---- archives built here, for what no tool writes at test size ---- */

typedef struct zb_rec {
    const char *name;
    const void *data;
    size_t len;
    uint16_t method;
    bool z64;       /* central sizes and offset as 0xFFFFFFFF + zip64 extra */
    bool z64_short; /* ... with the extra one field short */
} zb_rec;

static void add16(ck_strbuf *b, uint16_t v) {
    uint8_t x[2];
    put16(x, v);
    ck_strbuf_add(b, x, 2);
}
static void add32(ck_strbuf *b, uint32_t v) {
    uint8_t x[4];
    put32(x, v);
    ck_strbuf_add(b, x, 4);
}
static void add64(ck_strbuf *b, uint64_t v) {
    uint8_t x[8];
    put64(x, v);
    ck_strbuf_add(b, x, 8);
}

/* Stored records with torch-style 64-byte alignment ("FB" padding), optional zip64 trailer. */
static uint8_t *zb_build(const zb_rec *r, size_t n, bool zip64, const char *comment,
                         size_t comment_len, size_t *out_len) {
    ck_strbuf b = CK_STRBUF_INIT;
    uint64_t *lho = calloc(n, sizeof *lho);
    for (size_t i = 0; i < n; i++) {
        lho[i] = b.len;
        size_t nl = strlen(r[i].name);
        size_t base = b.len + 30 + nl + 4;
        size_t pad = (64 - base % 64) % 64;
        add32(&b, 0x04034b50u);
        add16(&b, 20);
        add16(&b, 0);
        add16(&b, r[i].method);
        add32(&b, 0);
        add32(&b, 0);
        add32(&b, (uint32_t)r[i].len);
        add32(&b, (uint32_t)r[i].len);
        add16(&b, (uint16_t)nl);
        add16(&b, (uint16_t)(4 + pad));
        ck_strbuf_add(&b, r[i].name, nl);
        ck_strbuf_add(&b, "FB", 2);
        add16(&b, (uint16_t)pad);
        for (size_t k = 0; k < pad; k++)
            ck_strbuf_addc(&b, 'Z');
        ck_strbuf_add(&b, r[i].data, r[i].len);
    }
    uint64_t cd = b.len;
    for (size_t i = 0; i < n; i++) {
        size_t nl = strlen(r[i].name);
        bool z = r[i].z64;
        uint16_t xl = z ? (uint16_t)(4 + (r[i].z64_short ? 16 : 24)) : 0;
        add32(&b, 0x02014b50u);
        add16(&b, 0x31e);
        add16(&b, 45);
        add16(&b, 0);
        add16(&b, r[i].method);
        add32(&b, 0);
        add32(&b, 0);
        add32(&b, z ? 0xffffffffu : (uint32_t)r[i].len);
        add32(&b, z ? 0xffffffffu : (uint32_t)r[i].len);
        add16(&b, (uint16_t)nl);
        add16(&b, xl);
        add16(&b, 0);
        add16(&b, 0);
        add16(&b, 0);
        add32(&b, 0);
        add32(&b, z ? 0xffffffffu : (uint32_t)lho[i]);
        ck_strbuf_add(&b, r[i].name, nl);
        if (z) {
            add16(&b, 0x0001);
            add16(&b, (uint16_t)(xl - 4));
            add64(&b, r[i].len);
            add64(&b, r[i].len);
            if (!r[i].z64_short) add64(&b, lho[i]);
        }
    }
    uint64_t cd_size = b.len - cd;
    if (zip64) {
        uint64_t z64 = b.len;
        add32(&b, 0x06064b50u);
        add64(&b, 44);
        add16(&b, 0x31e);
        add16(&b, 45);
        add32(&b, 0);
        add32(&b, 0);
        add64(&b, n);
        add64(&b, n);
        add64(&b, cd_size);
        add64(&b, cd);
        add32(&b, 0x07064b50u);
        add32(&b, 0);
        add64(&b, z64);
        add32(&b, 1);
    }
    add32(&b, 0x06054b50u);
    add16(&b, 0);
    add16(&b, 0);
    add16(&b, n > 0xffff ? 0xffff : (uint16_t)n);
    add16(&b, n > 0xffff ? 0xffff : (uint16_t)n);
    add32(&b, zip64 ? 0xffffffffu : (uint32_t)cd_size);
    add32(&b, zip64 ? 0xffffffffu : (uint32_t)cd);
    add16(&b, (uint16_t)comment_len);
    ck_strbuf_add(&b, comment, comment_len);
    free(lho);
    cr_assert_eq(b.status, CKPT_OK);
    return (uint8_t *)ck_strbuf_detach(&b, out_len);
}

Test(zip, zip64_extras_in_central_records) {
    zb_rec r[] = {
        {.name = "root/data.pkl", .data = "pickle", .len = 6},
        {.name = "root/data/0", .data = "0123456789abcdef", .len = 16, .z64 = true},
        {.name = "root/version", .data = "3\n", .len = 2, .z64 = true},
    };
    size_t len;
    uint8_t *p = zb_build(r, 3, true, NULL, 0, &len);
    zip_archive *z;
    ckpt_error err = {0};
    cr_assert_eq(open_mem(p, len, &z, &err), CKPT_OK, "%s", err.message);
    cr_assert_str_eq(zip_root(z), "root");
    const zip_record *d = zip_find(z, "data/0");
    cr_assert_eq(d->size, 16);
    cr_assert_eq(d->data_offset, 128);
    uint8_t *buf;
    size_t n;
    cr_assert_eq(zip_read_record(z, d, 16, &buf, &n, &err), CKPT_OK);
    cr_assert_str_eq((char *)buf, "0123456789abcdef");
    free(buf);
    cr_assert_eq(zip_find(z, "version")->data_offset, 192);
    zip_close(z);
    free(p);

    r[2].z64_short = true; /* the local header offset is missing from the extra */
    p = zb_build(r, 3, true, NULL, 0, &len);
    cr_assert_eq(open_mem(p, len, &z, &err), CKPT_E_FORMAT);
    cr_assert(strstr(err.message, "zip64 extra"), "%s", err.message);
    free(p);
}

Test(zip, classic_eocd_built_here) {
    zb_rec r[] = {{.name = "a/x", .data = "xyz", .len = 3}};
    size_t len;
    uint8_t *p = zb_build(r, 1, false, NULL, 0, &len);
    zip_archive *z;
    ckpt_error err = {0};
    cr_assert_eq(open_mem(p, len, &z, &err), CKPT_OK, "%s", err.message);
    cr_assert_eq(zip_find(z, "x")->data_offset, 64);
    zip_close(z);
    free(p);
}

Test(zip, duplicate_names_rejected) {
    zb_rec r[] = {{.name = "a/x", .data = "1", .len = 1},
                  {.name = "a/y", .data = "2", .len = 1},
                  {.name = "a/x", .data = "3", .len = 1}};
    size_t len;
    uint8_t *p = zb_build(r, 3, true, NULL, 0, &len);
    zip_archive *z;
    ckpt_error err = {0};
    cr_assert_eq(open_mem(p, len, &z, &err), CKPT_E_FORMAT);
    cr_assert(strstr(err.message, "duplicate record name 'a/x'"), "%s", err.message);
    free(p);
}

Test(zip, many_records_lookup) {
    enum { N = 3000 };
    zb_rec *r = calloc(N, sizeof *r);
    char(*names)[32] = calloc(N, sizeof *names);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "archive/data/%d", i);
        r[i].name = names[i];
        r[i].data = names[i] + 8;
        r[i].len = strlen(names[i] + 8);
    }
    size_t len;
    uint8_t *p = zb_build(r, N, true, NULL, 0, &len);
    FILE *f = tmpfile();
    cr_assert_eq(fwrite(p, 1, len, f), len);
    fflush(f);
    ck_source s = {.fd = fileno(f), .len = len, .name = "tmp"};
    zip_archive *z;
    ckpt_error err = {0};
    cr_assert_eq(zip_open(&s, &z, &err), CKPT_OK, "%s", err.message);
    cr_assert_eq(zip_num_records(z), N);
    /* tail + directory + local headers in 64 KiB clusters */
    cr_assert_leq(zip_open_reads(z), 2 + len / 60000 + 1, "%u reads", zip_open_reads(z));
    for (int i = N - 1; i >= 0; i--) {
        const zip_record *rec = zip_find(z, names[i] + 8);
        cr_assert_not_null(rec, "%s", names[i]);
        cr_assert_eq(rec, zip_record_at(z, (size_t)i));
        cr_assert_eq(rec->data_offset % 64, 0);
        uint8_t *buf;
        size_t n;
        cr_assert_eq(zip_read_record(z, rec, 64, &buf, &n, &err), CKPT_OK);
        cr_assert_str_eq((char *)buf, names[i] + 8);
        free(buf);
    }
    cr_assert_null(zip_find(z, "data/3000"));
    zip_close(z);
    fclose(f);
    free(p);
    free(names);
    free(r);
}

Test(zip, long_comment_needs_second_tail_read) {
    zb_rec r[] = {{.name = "archive/data.pkl", .data = "x", .len = 1}};
    size_t clen = 30000;
    char *comment = malloc(clen);
    memset(comment, 'c', clen);
    memcpy(comment + 100, "PK\x05\x06", 4); /* a false EOCD signature inside the comment */
    size_t len;
    uint8_t *p = zb_build(r, 1, true, comment, clen, &len);
    FILE *f = tmpfile();
    cr_assert_eq(fwrite(p, 1, len, f), len);
    fflush(f);
    ck_source s = {.fd = fileno(f), .len = len, .name = "tmp"};
    zip_archive *z;
    ckpt_error err = {0};
    cr_assert_eq(zip_open(&s, &z, &err), CKPT_OK, "%s", err.message);
    cr_assert_eq(zip_open_reads(z), 2);
    cr_assert_eq(zip_find(z, "data.pkl")->data_offset, 64);
    zip_close(z);
    /* One byte of the comment missing: the EOCD no longer ends the archive. */
    s.len = len - 1;
    cr_assert_eq(zip_open(&s, &z, &err), CKPT_E_FORMAT);
    fclose(f);
    free(p);
    free(comment);
}

Test(zip, distcp_windows_through_one_fd) {
    /* Several archives of one .distcp opened through the same fd at their offsets. */
    int fd = zv_open("plain.distcp");
    static const uint64_t off[] = {0, 1261, 2838}, len[] = {1261, 1577, 1577};
    static const size_t nrec[] = {6, 7, 7};
    for (int i = 0; i < 3; i++) {
        ck_source s = {.fd = fd, .base = off[i], .len = len[i], .name = "plain.distcp"};
        zip_archive *z;
        ckpt_error err = {0};
        cr_assert_eq(zip_open(&s, &z, &err), CKPT_OK, "%s", err.message);
        cr_assert_eq(zip_num_records(z), nrec[i]);
        cr_assert_eq(zip_open_reads(z), 1);
        zip_close(z);
    }
    close(fd);
}

Test(zip, huge_central_directory_is_a_limit) {
    /* A sparse 1.5 GiB file whose trailer claims a central directory of almost all of it. */
    FILE *f = tmpfile();
    uint64_t total = 3ull << 29;
    cr_assert_eq(ftruncate(fileno(f), (off_t)total), 0);
    uint8_t t[98] = {0};
    uint64_t z64 = total - 98;
    put32(t, 0x06064b50u);
    put64(t + 4, 44);
    put64(t + 24, 1);
    put64(t + 32, 1);
    put64(t + 40, z64);
    put64(t + 48, 0);
    put32(t + 56, 0x07064b50u);
    put64(t + 56 + 8, z64);
    put32(t + 56 + 16, 1);
    put32(t + 76, 0x06054b50u);
    put16(t + 76 + 8, 1);
    put16(t + 76 + 10, 1);
    put32(t + 76 + 12, 0xffffffffu);
    put32(t + 76 + 16, 0xffffffffu);
    cr_assert_eq(pwrite(fileno(f), t, sizeof t, (off_t)z64), (ssize_t)sizeof t);
    ck_source s = {.fd = fileno(f), .len = total, .name = "sparse"};
    zip_archive *z;
    ckpt_error err = {0};
    cr_assert_eq(zip_open(&s, &z, &err), CKPT_E_LIMIT, "%s", err.message);
    cr_assert(strstr(err.message, "exceeds the 1073741824-byte limit"), "%s", err.message);
    fclose(f);
}
