/* test_safetensors.c — safetensors headers written by the safetensors package and by DCP's
 * SAFETENSORS writer (inside a .distcp, after a BYTE_IO zip), checked against the oracle in
 * manifest.txt; then hand-made headers for every validation rule. */
#include "torchsave/safetensors.h"
#include "util/arena.h"
#include "util/json.h"
#include "zipvec.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void check_blob(const zv_blob *b, const ts_safetensors *st, const uint8_t *file) {
    cr_assert_eq(ts_safetensors_header_len(st), b->header_len);
    cr_assert_eq(ts_safetensors_data_start(st), b->offset + 8 + b->header_len);
    cr_assert_eq(ts_safetensors_num_tensors(st), b->n);
    for (size_t i = 0; i < b->n; i++) {
        const zv_tensor *w = &b->t[i];
        const ts_st_tensor *t = ts_safetensors_tensor(st, i);
        cr_assert_str_eq(t->name, w->name, "header order");
        cr_assert_eq(ts_safetensors_find(st, w->name), t);
        cr_assert_str_eq(t->dtype_name, w->dtype);
        cr_assert_eq(t->data_offset, w->data_offset, "%s", w->name);
        cr_assert_eq(t->size, w->size, "%s", w->name);
        cr_assert_eq(t->end - t->begin, t->size);
        cr_assert_eq(t->ndim, w->ndim, "%s", w->name);
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            cr_assert_eq(t->shape[d], w->shape[d]);
            numel *= (uint64_t)w->shape[d];
        }
        cr_assert_eq(t->numel, numel);
        if (t->ndim == 0) cr_assert_null(t->shape);
        cr_assert_eq(zv_crc32(file + t->data_offset, t->size), w->crc, "%s bytes", w->name);
    }
    cr_assert_null(ts_safetensors_tensor(st, b->n));
}

Test(safetensors, package_output_matches_oracle) {
    zv_manifest m;
    zv_manifest_load(&m);
    const zv_blob *b = zv_find_blob(&m, "model.safetensors");
    cr_assert_not_null(b);
    size_t len;
    uint8_t *file = zv_load("model.safetensors", &len);
    int fd = zv_open("model.safetensors");
    for (int pass = 0; pass < 2; pass++) {
        ck_source s = pass ? (ck_source){.fd = -1, .mem = file, .len = len, .name = "m"}
                           : (ck_source){.fd = fd, .len = len, .name = "model.safetensors"};
        ts_safetensors *st;
        ckpt_error err = {0};
        cr_assert_eq(ts_safetensors_open(&s, 0, 0, &st, &err), CKPT_OK, "%s", err.message);
        check_blob(b, st, file);
        cr_assert_eq(ts_safetensors_data_len(st), len - 8 - b->header_len);
        static const struct {
            const char *name;
            ckpt_dtype dt;
        } dts[] = {
            {"f32", CKPT_DTYPE_FLOAT32},
            {"bf16", CKPT_DTYPE_BFLOAT16},
            {"f8e4m3", CKPT_DTYPE_FLOAT8_E4M3FN},
            {"f8e5m2", CKPT_DTYPE_FLOAT8_E5M2},
            {"flag", CKPT_DTYPE_BOOL},
            {"i64", CKPT_DTYPE_INT64},
            {"u16", CKPT_DTYPE_UINT16},
            {"c64", CKPT_DTYPE_COMPLEX64},
            {"scalar", CKPT_DTYPE_FLOAT64},
            {"empty", CKPT_DTYPE_FLOAT16},
            {"layers.0.w\xc3\xa9", CKPT_DTYPE_INT8},
        };
        for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
            const ts_st_tensor *t = ts_safetensors_find(st, dts[i].name);
            cr_assert_not_null(t, "%s", dts[i].name);
            cr_assert_eq(t->dtype, dts[i].dt, "%s", dts[i].name);
        }
        const ts_st_tensor *t = ts_safetensors_find(st, "i64");
        int64_t v[2];
        memcpy(v, file + t->data_offset, sizeof v);
        cr_assert(v[0] == -1 && v[1] == (int64_t)1 << 40);
        t = ts_safetensors_find(st, "empty");
        cr_assert(t->numel == 0 && t->size == 0 && t->shape[0] == 0 && t->shape[1] == 4);
        cr_assert_null(ts_safetensors_find(st, "missing"));
        cr_assert_null(ts_safetensors_find(st, "f3"));
        cr_assert_null(ts_safetensors_find(st, "__metadata__"));
        cr_assert_eq(ts_safetensors_num_metadata(st), 2);
        cr_assert_str_eq(ts_safetensors_metadata(st, "format"), "pt");
        cr_assert_str_eq(ts_safetensors_metadata(st, "note"), "caf\xc3\xa9 \"q\"");
        cr_assert_null(ts_safetensors_metadata(st, "nope"));
        cr_assert_null(ts_safetensors_metadata_key(st, 2));
        ts_safetensors_free(st);
    }
    ts_safetensors_free(NULL);
    close(fd);
    free(file);
}

Test(safetensors, dcp_blob_inside_distcp) {
    zv_manifest m;
    zv_manifest_load(&m);
    const zv_blob *b = zv_find_blob(&m, "st.distcp");
    cr_assert_not_null(b);
    cr_assert_eq(b->offset, 1261, "the blob follows the 1261-byte BYTE_IO zip of 'lr'");
    size_t len;
    uint8_t *file = zv_load("st.distcp", &len);
    int fd = zv_open("st.distcp");
    /* the window is the whole data file; the blob starts at the item offset */
    ck_source s = {.fd = fd, .len = len, .name = "st.distcp"};
    ts_safetensors *st;
    ckpt_error err = {0};
    cr_assert_eq(ts_safetensors_open(&s, b->offset, 0, &st, &err), CKPT_OK, "%s", err.message);
    check_blob(b, st, file);
    const ts_st_tensor *w = ts_safetensors_find(st, "w");
    cr_assert_eq(w->dtype, CKPT_DTYPE_FLOAT32);
    cr_assert_eq(w->data_offset, 1525);
    float f[6];
    memcpy(f, file + w->data_offset, sizeof f);
    for (int i = 0; i < 6; i++)
        cr_assert_float_eq(f[i], (float)i, 0);
    cr_assert_eq(ts_safetensors_find(st, "b")->dtype, CKPT_DTYPE_BFLOAT16);
    cr_assert_str_eq(ts_safetensors_metadata(st, "DCP_VERSION"), "1.0");
    cr_assert_str_eq(ts_safetensors_metadata(st, "format"), "pt");
    const char *info = ts_safetensors_metadata(st, "DCP_SHARDING_INFO");
    cr_assert_str_eq(info, "{\"w\": {\"saved_offsets\": [0, 0]}, \"b\": {\"saved_offsets\": [0]}}");
    /* DCP_SHARDING_INFO is JSON itself */
    ck_arena *a = ck_arena_new(0);
    const ck_json *j;
    cr_assert_eq(ck_json_parse(a, info, strlen(info), 0, &j, &err), CKPT_OK);
    const ck_json *so = ck_json_get(ck_json_get(j, "w"), "saved_offsets");
    cr_assert(so && so->len == 2 && so->u.items[0].u.num.i == 0 && so->u.items[1].is_int);
    ck_arena_free(a);
    ts_safetensors_free(st);

    /* a window that starts at the blob works the same, with offsets relative to it */
    s.base = b->offset;
    s.len = len - b->offset;
    cr_assert_eq(ts_safetensors_open(&s, 0, 0, &st, &err), CKPT_OK, "%s", err.message);
    cr_assert_eq(ts_safetensors_find(st, "w")->data_offset, 1525 - 1261);
    ts_safetensors_free(st);
    close(fd);
    free(file);
}

/* u64 length + header + `data` zero bytes, at `pad` bytes into the buffer. */
static uint8_t *blob(const char *header, size_t data, size_t pad, size_t *len) {
    size_t n = strlen(header);
    *len = pad + 8 + n + data;
    uint8_t *p = calloc(1, *len);
    for (int i = 0; i < 8; i++)
        p[pad + i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(p + pad + 8, header, n);
    return p;
}

static ckpt_status open_blob(const char *header, size_t data, ckpt_error *err) {
    size_t len;
    uint8_t *p = blob(header, data, 3, &len);
    ck_source s = {.fd = -1, .mem = p, .len = len, .name = "b"};
    ts_safetensors *st = (ts_safetensors *)1;
    ckpt_status r = ts_safetensors_open(&s, 3, 0, &st, err);
    if (r == CKPT_OK)
        ts_safetensors_free(st);
    else
        cr_assert_null(st);
    free(p);
    return r;
}

Test(safetensors, validation_rules) {
    static const struct {
        const char *what, *header;
        size_t data;
        ckpt_status want;
        const char *msg;
    } cases[] = {
        {"minimal", "{}", 0, CKPT_OK, NULL},
        {"space padded", "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}     ", 2,
         CKPT_OK, NULL},
        {"metadata null", "{\"__metadata__\":null}", 0, CKPT_OK, NULL},
        {"extra keys ignored",
         "{\"a\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1],\"x\":1}}", 1, CKPT_OK,
         NULL},
        {"data may be followed by more bytes",
         "{\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 100, CKPT_OK, NULL},
        {"unknown dtype is kept", "{\"a\":{\"dtype\":\"Q7\",\"shape\":[3],\"data_offsets\":[0,5]}}",
         5, CKPT_OK, NULL},
        {"F4 packs two per byte", "{\"a\":{\"dtype\":\"F4\",\"shape\":[4],\"data_offsets\":[0,2]}}",
         2, CKPT_OK, NULL},
        {"F4 odd count", "{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2,
         CKPT_E_FORMAT, "needs 1+ bytes"},
        {"size inconsistent with shape",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 24, CKPT_E_FORMAT,
         "'a' (F32, 6 elements) needs 24 bytes but data_offsets [0, 20) hold 20"},
        {"data past the source", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
         7, CKPT_E_RANGE, "data section of 8 bytes"},
        {"begin after end", "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4,
         CKPT_E_FORMAT, "ending before"},
        {"gap", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2, CKPT_E_FORMAT,
         "expected 0"},
        {"overlap",
         "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
         "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}",
         3, CKPT_E_FORMAT, "tile"},
        {"huge offsets",
         "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],"
         "\"data_offsets\":[18446744073709551615,18446744073709551615]}}",
         0, CKPT_E_FORMAT, "data_offsets"},
        {"negative shape", "{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0,
         CKPT_E_FORMAT, "shape entry"},
        {"float shape", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}}", 1,
         CKPT_E_FORMAT, "shape entry"},
        {"numel overflow",
         "{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", 0,
         CKPT_E_FORMAT, "too many elements"},
        {"zero dim beats overflow",
         "{\"a\":{\"dtype\":\"F64\",\"shape\":[9223372036854775807,9223372036854775807,0],"
         "\"data_offsets\":[0,0]}}",
         0, CKPT_OK, NULL},
        {"65 dims",
         "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
         "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"
         "\"data_offsets\":[0,1]}}",
         1, CKPT_E_LIMIT, "65 dimensions"},
        {"no dtype", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, CKPT_E_FORMAT, "dtype"},
        {"dtype not a string", "{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
         CKPT_E_FORMAT, "dtype"},
        {"no shape", "{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, CKPT_E_FORMAT,
         "shape"},
        {"three offsets", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1,
         CKPT_E_FORMAT, "data_offsets"},
        {"entry not an object", "{\"a\":[1]}", 0, CKPT_E_FORMAT, "not an object"},
        {"header not an object", "[]", 0, CKPT_E_FORMAT, "header is not an object"},
        {"duplicate tensor",
         "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
         "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
         2, CKPT_E_FORMAT, "duplicate tensor 'a'"},
        {"metadata value not a string", "{\"__metadata__\":{\"k\":1}}", 0, CKPT_E_FORMAT,
         "'k' is a number"},
        {"metadata not an object", "{\"__metadata__\":\"x\"}", 0, CKPT_E_FORMAT, "__metadata__"},
        {"duplicate metadata", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, CKPT_E_FORMAT,
         "duplicate __metadata__"},
        {"invalid JSON", "{\"a\":}", 0, CKPT_E_FORMAT, "header json offset 5"},
        {"empty header", "", 0, CKPT_E_FORMAT, "json offset 0"},
        {"deep JSON", "{\"a\":[[[[[[[[[[[[1]]]]]]]]]]]]}", 0, CKPT_E_LIMIT, "nesting"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ckpt_error err = {0};
        ckpt_status st = open_blob(cases[i].header, cases[i].data, &err);
        cr_expect_eq(st, cases[i].want, "%s: %d (%s)", cases[i].what, st, err.message);
        if (cases[i].msg)
            cr_expect(strstr(err.message, cases[i].msg), "%s: '%s' lacks '%s'", cases[i].what,
                      err.message, cases[i].msg);
        if (st != CKPT_OK)
            cr_expect(!strncmp(err.message, "safetensors at offset 3: ", 25), "%s: %s",
                      cases[i].what, err.message);
    }
}

Test(safetensors, unknown_and_subbyte_dtypes) {
    size_t len;
    uint8_t *p = blob("{\"q\":{\"dtype\":\"Q7\",\"shape\":[3],\"data_offsets\":[0,5]},"
                      "\"f\":{\"dtype\":\"F6_E3M2\",\"shape\":[4],\"data_offsets\":[5,8]}}",
                      8, 0, &len);
    ck_source s = {.fd = -1, .mem = p, .len = len, .name = "b"};
    ts_safetensors *st;
    ckpt_error err = {0};
    cr_assert_eq(ts_safetensors_open(&s, 0, 0, &st, &err), CKPT_OK, "%s", err.message);
    const ts_st_tensor *q = ts_safetensors_find(st, "q");
    cr_assert_eq(q->dtype, CKPT_DTYPE_INVALID);
    cr_assert_str_eq(q->dtype_name, "Q7");
    cr_assert_eq(q->size, 5);
    cr_assert_eq(ts_safetensors_find(st, "f")->dtype, CKPT_DTYPE_INVALID);
    ts_safetensors_free(st);
    free(p);
}

Test(safetensors, header_length_bounds) {
    size_t len;
    uint8_t *p = blob("{}", 0, 0, &len);
    ck_source s = {.fd = -1, .mem = p, .len = len, .name = "b"};
    ts_safetensors *st;
    ckpt_error err = {0};
    /* huge declared length */
    p[5] = 0x10; /* 2^40 + 2 */
    cr_assert_eq(ts_safetensors_open(&s, 0, 0, &st, &err), CKPT_E_LIMIT);
    cr_assert(strstr(err.message, "exceeds the 100000000-byte limit"), "%s", err.message);
    p[5] = 0;
    /* all ones */
    memset(p, 0xff, 8);
    cr_assert_eq(ts_safetensors_open(&s, 0, 0, &st, &err), CKPT_E_LIMIT);
    /* within the limit but past the source */
    memset(p, 0, 8);
    p[0] = 3;
    cr_assert_eq(ts_safetensors_open(&s, 0, 0, &st, &err), CKPT_E_RANGE);
    cr_assert(strstr(err.message, "passes the end"), "%s", err.message);
    /* caller's own bound */
    p[0] = 2;
    cr_assert_eq(ts_safetensors_open(&s, 0, 1, &st, &err), CKPT_E_LIMIT);
    cr_assert_eq(ts_safetensors_open(&s, 0, 2, &st, &err), CKPT_OK);
    ts_safetensors_free(st);
    /* no room for the length */
    cr_assert_eq(ts_safetensors_open(&s, 3, 0, &st, &err), CKPT_E_RANGE);
    cr_assert_eq(ts_safetensors_open(&s, 100, 0, &st, &err), CKPT_E_RANGE);
    s.len = 7;
    cr_assert_eq(ts_safetensors_open(&s, 0, 0, &st, &err), CKPT_E_RANGE);
    cr_assert_null(st);
    free(p);
}

Test(safetensors, big_header_from_file_costs_two_reads_and_works) {
    /* A header larger than the first 64 KiB read: many tensors. */
    enum { N = 4000 };
    size_t cap = (size_t)N * 96 + 64;
    char *h = malloc(cap);
    size_t k = 0;
    k += (size_t)snprintf(h + k, cap - k, "{");
    for (int i = 0; i < N; i++)
        k += (size_t)snprintf(h + k, cap - k,
                              "%s\"model.layers.%d.weight\":{\"dtype\":\"BF16\",\"shape\":[2],"
                              "\"data_offsets\":[%d,%d]}",
                              i ? "," : "", i, 4 * i, 4 * i + 4);
    k += (size_t)snprintf(h + k, cap - k, "}");
    cr_assert_gt(k, 65536);
    size_t len;
    uint8_t *p = blob(h, 4 * N, 0, &len);
    FILE *f = tmpfile();
    cr_assert_eq(fwrite(p, 1, len, f), len);
    fflush(f);
    ck_source s = {.fd = fileno(f), .len = len, .name = "tmp"};
    ts_safetensors *st;
    ckpt_error err = {0};
    cr_assert_eq(ts_safetensors_open(&s, 0, 0, &st, &err), CKPT_OK, "%s", err.message);
    cr_assert_eq(ts_safetensors_num_tensors(st), N);
    for (int i = 0; i < N; i += 37) {
        char name[64];
        snprintf(name, sizeof name, "model.layers.%d.weight", i);
        const ts_st_tensor *t = ts_safetensors_find(st, name);
        cr_assert_not_null(t, "%s", name);
        cr_assert_eq(t->data_offset, 8 + k + 4 * (uint64_t)i);
    }
    ts_safetensors_free(st);
    /* a window too short for the header */
    s.len = 1000;
    cr_assert_eq(ts_safetensors_open(&s, 0, 0, &st, &err), CKPT_E_RANGE);
    /* a file shorter than its window: the second read fails with a range error naming it */
    s.len = len;
    cr_assert_eq(ftruncate(fileno(f), 70000), 0);
    cr_assert_eq(ts_safetensors_open(&s, 0, 0, &st, &err), CKPT_E_RANGE);
    cr_assert(strstr(err.message, "tmp: unexpected end of file"), "%s", err.message);
    fclose(f);
    free(p);
    free(h);
}
