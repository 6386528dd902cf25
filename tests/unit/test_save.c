/* test_save.c — the saver's units: CRC-32 vectors, description encode/decode round trips and
 * hostile encodings, every refusal of bad input (boxes, sizes, values, conflicting ranks,
 * overlapping / missing / replica-only pieces), the transaction's abort and refusal paths,
 * retention, and random sharded tensors of every dtype written over several ranks and read
 * back bit-exact through the ckpt reader. */
#include <criterion/criterion.h>

#include "ckpt.h"
#include "ckpt_save.h"
#include "save/crc32.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmp[64];
static const ckpt_save_options nosync = {.no_fsync = true};

static void mk_tmp(void) {
    snprintf(tmp, sizeof tmp, "/tmp/ckpt-save-XXXXXX");
    cr_assert_not_null(mkdtemp(tmp));
}
static void rm_tmp(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    cr_assert_eq(system(cmd), 0);
}

static size_t count_entries(const char *dir) {
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
    closedir(d);
    return n;
}

static bool exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

Test(save, crc32_clmul_matches_tables) {
    enum { N = 70000 };
    unsigned char *b = malloc(N);
    cr_assert_not_null(b);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        b[i] = (unsigned char)x;
    }
    cr_assert_eq(save_crc32_clmul(0, "123456789", 9), 0xCBF43926u);
    /* every length 0..300 at every offset 0..15, a long run, and chained calls */
    for (size_t off = 0; off < 16; off++)
        for (size_t n = 0; n <= 300; n++)
            cr_assert_eq(save_crc32_clmul(7, b + off, n), save_crc32_builtin(7, b + off, n),
                         "off %zu len %zu", off, n);
    cr_assert_eq(save_crc32_clmul(0, b, N), save_crc32_builtin(0, b, N));
    uint32_t parts = 0;
    for (size_t i = 0; i < N; i += 4099)
        parts = save_crc32_clmul(parts, b + i, N - i < 4099 ? N - i : 4099);
    cr_assert_eq(parts, save_crc32_builtin(0, b, N));
    cr_assert_eq(save_crc32(0, b, N), save_crc32_builtin(0, b, N));
    free(b);
}

Test(save, crc32_vectors) {
    cr_assert_eq(save_crc32(0, "123456789", 9), 0xCBF43926u);
    cr_assert_eq(save_crc32(0, "", 0), 0u);
    enum { N = 100003 };
    unsigned char *b = malloc(N);
    cr_assert_not_null(b);
    for (size_t i = 0; i < N; i++)
        b[i] = (unsigned char)(i * 7 + (i >> 9));
    uint32_t whole = save_crc32(0, b, N), parts = 0;
    for (size_t i = 0; i < N; i += 1000)
        parts = save_crc32(parts, b + i, N - i < 1000 ? N - i : 1000);
    cr_assert_eq(whole, parts, "slice-by-8 (%08x) != byte-wise (%08x)", whole, parts);
    cr_assert_eq(save_crc32_builtin(0, b, N), whole, "built-in CRC differs from zlib's");
    uint32_t bparts = 0;
    for (size_t i = 0; i < N; i += 1000)
        bparts = save_crc32_builtin(bparts, b + i, N - i < 1000 ? N - i : 1000);
    cr_assert_eq(bparts, whole);
    cr_assert_eq(save_crc32_builtin(0, "123456789", 9), 0xCBF43926u);
    free(b);
}

/* One rank's file in `dir` with a 2-D piece and a value; returns its description. */
static ckpt_save_desc *small_rank(const char *dir, uint32_t rank, int64_t row0, int64_t rows) {
    ckpt_error err;
    ckpt_save_file *f;
    cr_assert_eq(ckpt_save_file_open(dir, rank, &nosync, &f, &err), CKPT_OK, "%s", err.message);
    int64_t shape[2] = {4, 3}, off[2] = {row0, 0}, sz[2] = {rows, 3};
    float data[12];
    for (int i = 0; i < 12; i++)
        data[i] = (float)(row0 * 3 + i);
    ckpt_save_key k = {.path = "m/w"};
    ckpt_save_tensor t = {.dtype = CKPT_DTYPE_FLOAT32,
                          .ndim = 2,
                          .global_shape = shape,
                          .offsets = off,
                          .sizes = sz,
                          .data = data,
                          .data_size = (size_t)rows * 3 * 4};
    cr_assert_eq(ckpt_save_file_add_tensor(f, &k, &t, &err), CKPT_OK, "%s", err.message);
    ckpt_save_elem el[3] = {{"opt", 0}, {NULL, 0}, {"0", 0}};
    ckpt_save_key kv = {.elems = el, .nelems = 3};
    ckpt_save_value *v = ckpt_save_value_float(0.5);
    cr_assert_eq(ckpt_save_file_add_value(f, &kv, v, rank, &err), CKPT_OK, "%s", err.message);
    ckpt_save_value_free(v);
    ckpt_save_desc *d;
    cr_assert_eq(ckpt_save_file_finish(f, &d, &err), CKPT_OK, "%s", err.message);
    ckpt_save_file_free(f);
    return d;
}

Test(save, desc_round_trip_and_hostile_encodings, .init = mk_tmp, .fini = rm_tmp) {
    ckpt_save_desc *d = small_rank(tmp, 5, 0, 4);
    cr_assert_eq(ckpt_save_desc_rank(d), 5u);
    void *a, *b;
    size_t al, bl;
    ckpt_error err;
    cr_assert_eq(ckpt_save_desc_encode(d, &a, &al, &err), CKPT_OK);
    ckpt_save_desc *d2;
    cr_assert_eq(ckpt_save_desc_decode(a, al, &d2, &err), CKPT_OK, "%s", err.message);
    cr_assert_eq(ckpt_save_desc_encode(d2, &b, &bl, &err), CKPT_OK);
    cr_assert(al == bl && memcmp(a, b, al) == 0, "re-encoding differs");
    /* every truncation fails cleanly */
    for (size_t n = 0; n < al; n++) {
        ckpt_save_desc *x = NULL;
        cr_assert_neq(ckpt_save_desc_decode(a, n, &x, &err), CKPT_OK, "prefix %zu accepted", n);
        cr_assert_null(x);
    }
    /* every single-byte corruption either decodes or fails; never crashes */
    unsigned char *c = malloc(al);
    for (size_t i = 0; i < al; i++) {
        for (int bit = 0; bit < 8; bit += 3) {
            memcpy(c, a, al);
            c[i] ^= (unsigned char)(1u << bit);
            ckpt_save_desc *x = NULL;
            if (ckpt_save_desc_decode(c, al, &x, &err) == CKPT_OK) ckpt_save_desc_free(x);
        }
    }
    free(c);
    free(a);
    free(b);
    ckpt_save_desc_free(d);
    ckpt_save_desc_free(d2);
}

Test(save, bad_pieces_are_refused, .init = mk_tmp, .fini = rm_tmp) {
    ckpt_error err;
    ckpt_save_file *f;
    cr_assert_eq(ckpt_save_file_open(tmp, 0, &nosync, &f, &err), CKPT_OK);
    ckpt_save_file *f2;
    cr_assert_eq(ckpt_save_file_open(tmp, 0, &nosync, &f2, &err), CKPT_E_IO, "same rank twice");
    int64_t shape[1] = {4}, off[1] = {3}, sz[1] = {2};
    float data[4] = {0};
    ckpt_save_key k = {.path = "w"};
    ckpt_save_tensor t = {.dtype = CKPT_DTYPE_FLOAT32,
                          .ndim = 1,
                          .global_shape = shape,
                          .offsets = off,
                          .sizes = sz,
                          .data = data,
                          .data_size = 8};
    cr_assert_eq(ckpt_save_file_add_tensor(f, &k, &t, &err), CKPT_E_INVAL);
    cr_assert(strstr(err.message, "outside"), "%s", err.message);
    off[0] = 2;
    t.data_size = 12;
    cr_assert_eq(ckpt_save_file_add_tensor(f, &k, &t, &err), CKPT_E_INVAL);
    t.data_size = 8;
    t.dtype = CKPT_DTYPE_INVALID;
    cr_assert_eq(ckpt_save_file_add_tensor(f, &k, &t, &err), CKPT_E_INVAL);
    t.dtype = CKPT_DTYPE_FLOAT32;
    ckpt_save_key empty = {0};
    cr_assert_eq(ckpt_save_file_add_tensor(f, &empty, &t, &err), CKPT_E_INVAL);
    ckpt_save_key badutf = {.path = "a/\xff"};
    cr_assert_eq(ckpt_save_file_add_tensor(f, &badutf, &t, &err), CKPT_E_INVAL);
    t.memory = (ckpt_save_memory)7;
    cr_assert_eq(ckpt_save_file_add_tensor(f, &k, &t, &err), CKPT_E_INVAL);
    cr_assert(strstr(err.message, "memory kind"), "%s", err.message);
    if (!ckpt_save_has_cuda()) { /* a build without CUDA refuses device buffers */
        t.memory = CKPT_SAVE_MEM_CUDA;
        cr_assert_eq(ckpt_save_file_add_tensor(f, &k, &t, &err), CKPT_E_UNSUPPORTED);
        cr_assert(strstr(err.message, "no CUDA support"), "%s", err.message);
    }
    t.memory = CKPT_SAVE_MEM_HOST;
    cr_assert_eq(ckpt_save_file_add_tensor(f, &k, &t, &err), CKPT_OK, "%s", err.message);
    ckpt_save_desc *d;
    cr_assert_eq(ckpt_save_file_finish(f, &d, &err), CKPT_OK);
    cr_assert_eq(ckpt_save_file_add_tensor(f, &k, &t, &err), CKPT_E_INVAL, "after finish");
    ckpt_save_file_free(f);
    /* the piece covers only half of the tensor */
    const ckpt_save_desc *ds[1] = {d};
    cr_assert_eq(ckpt_save_write_metadata(tmp, ds, 1, &nosync, &err), CKPT_E_INVAL);
    cr_assert(strstr(err.message, "2 of 4"), "%s", err.message);
    cr_assert(!exists("/nonexistent") && count_entries(tmp) == 1, "no .metadata written");
    ckpt_save_desc_free(d);
}

Test(save, values) {
    ckpt_save_value *d = ckpt_save_value_dict();
    cr_assert_eq(ckpt_save_value_set(d, "a", ckpt_save_value_int(1)), CKPT_OK);
    cr_assert_eq(ckpt_save_value_set(d, "a", ckpt_save_value_int(2)), CKPT_E_INVAL);
    cr_assert_eq(ckpt_save_value_set(d, "\xc0\x80", ckpt_save_value_int(2)), CKPT_E_INVAL);
    cr_assert_null(ckpt_save_value_string("\xed\xa0\x80")); /* surrogate */
    cr_assert_eq(ckpt_save_value_append(d, ckpt_save_value_int(1)), CKPT_E_INVAL);
    cr_assert_eq(ckpt_save_value_append(d, NULL), CKPT_E_NOMEM);
    cr_assert_eq(ckpt_save_value_append(d, d), CKPT_E_INVAL);
    ckpt_save_value_free(d);
    ckpt_save_value_free(NULL);
}

/* Saves values vs[i] at paths[i] (freed) as a checkpoint of one file in tmp. */
static void save_values(size_t n, const char *const *paths, ckpt_save_value *const *vs) {
    ckpt_error err;
    ckpt_save_file *f;
    cr_assert_eq(ckpt_save_file_open(tmp, 0, &nosync, &f, &err), CKPT_OK, "%s", err.message);
    for (size_t i = 0; i < n; i++) {
        ckpt_save_key k = {.path = paths[i]};
        cr_assert_eq(ckpt_save_file_add_value(f, &k, vs[i], 0, &err), CKPT_OK, "%s", err.message);
        ckpt_save_value_free(vs[i]);
    }
    ckpt_save_desc *d;
    cr_assert_eq(ckpt_save_file_finish(f, &d, &err), CKPT_OK);
    ckpt_save_file_free(f);
    const ckpt_save_desc *ds[1] = {d};
    cr_assert_eq(ckpt_save_write_metadata(tmp, ds, 1, &nosync, &err), CKPT_OK, "%s", err.message);
    ckpt_save_desc_free(d);
}

/* Saves `v` as the only entry "v" of a checkpoint in tmp and renders what the reader decodes
 * (Python-like text); the caller frees it. */
static char *round_trip_text(ckpt_save_value *v) {
    ckpt_error err;
    save_values(1, (const char *const[]){"v"}, &v);
    ckpt_reader *r;
    cr_assert_eq(ckpt_reader_open(tmp, NULL, &r, &err), CKPT_OK, "%s", err.message);
    ckpt_object *o;
    cr_assert_eq(ckpt_object_load(r, ckpt_reader_find(r, "v"), &o, &err), CKPT_OK, "%s",
                 err.message);
    char *text;
    cr_assert_eq(ckpt_value_to_text(ckpt_object_root(o), &text, &err), CKPT_OK);
    ckpt_object_free(o);
    ckpt_reader_free(r);
    return text;
}

/* Issue #22, daemon memory <= 256 MB whatever the values: a value whose decoded form is far
 * larger than its pickle (a list of small ints, 2 bytes each stored, a whole value each
 * decoded) loads within ckpt_object_options.max_memory or fails with CKPT_E_LIMIT, the message
 * naming the key and the budget; another entry of the checkpoint still loads, and without a
 * budget (the reader's limits only) the same value loads whole. */
Test(save, value_decode_within_memory_budget, .init = mk_tmp, .fini = rm_tmp) {
    enum { N = 400000 };
    ckpt_error err;
    ckpt_save_value *l = ckpt_save_value_list();
    for (int i = 0; i < N; i++)
        cr_assert_eq(ckpt_save_value_append(l, ckpt_save_value_int(i % 200)), CKPT_OK);
    ckpt_save_value *d = ckpt_save_value_dict();
    cr_assert_eq(ckpt_save_value_set(d, "lr", ckpt_save_value_float(0.5)), CKPT_OK);
    save_values(2, (const char *const[]){"ints", "cfg"}, (ckpt_save_value *const[]){l, d});
    ckpt_reader *r;
    cr_assert_eq(ckpt_reader_open(tmp, NULL, &r, &err), CKPT_OK, "%s", err.message);
    const ckpt_entry *ints = ckpt_reader_find(r, "ints"), *cfg = ckpt_reader_find(r, "cfg");
    cr_assert(ints && cfg);
    ckpt_chunk_info ci;
    cr_assert_eq(ckpt_entry_chunk(ints, 0, &ci), CKPT_OK);
    cr_assert_lt(ci.length, 4 * N, "stored %llu bytes", (unsigned long long)ci.length);
    /* 8 MiB: over 10 times the stored item, far less than the decoded list */
    ckpt_object_options small = {.max_memory = 8u << 20};
    ckpt_object *o = (ckpt_object *)1;
    cr_assert_eq(ckpt_object_load_with(r, ints, &small, &o, &err), CKPT_E_LIMIT, "%s", err.message);
    cr_assert_null(o);
    cr_assert_eq(err.code, CKPT_E_LIMIT);
    cr_assert(strstr(err.message, "'ints'") && strstr(err.message, "8388608 bytes"), "%s",
              err.message);
    /* the small one decodes within a small budget, and the budget is not kept anywhere */
    ckpt_object_options tiny = {.max_memory = 1u << 20};
    cr_assert_eq(ckpt_object_load_with(r, cfg, &tiny, &o, &err), CKPT_OK, "%s", err.message);
    char *text;
    cr_assert_eq(ckpt_value_to_text(ckpt_object_root(o), &text, &err), CKPT_OK);
    cr_assert_str_eq(text, "{'lr': 0.5}");
    free(text);
    ckpt_object_free(o);
    /* a budget of a few bytes: refused, whatever stage runs out */
    ckpt_object_options bytes = {.max_memory = 16};
    cr_assert_eq(ckpt_object_load_with(r, cfg, &bytes, &o, &err), CKPT_E_LIMIT, "%s", err.message);
    cr_assert(strstr(err.message, "'cfg'") && strstr(err.message, "16 bytes"), "%s", err.message);
    /* no budget (NULL options, or 0): the reader's limits only, the list loads whole */
    ckpt_object_options none = {0};
    cr_assert_eq(ckpt_object_load_with(r, ints, &none, &o, &err), CKPT_OK, "%s", err.message);
    ckpt_object_free(o);
    cr_assert_eq(ckpt_object_load_with(r, ints, NULL, &o, &err), CKPT_OK, "%s", err.message);
    cr_assert_eq(ckpt_value_len(ckpt_object_root(o)), N);
    cr_assert_eq(ckpt_value_int(ckpt_value_item(ckpt_object_root(o), N - 1)), (N - 1) % 200);
    ckpt_object_free(o);
    ckpt_reader_free(r);
}

Test(save, values_of_every_kind, .init = mk_tmp, .fini = rm_tmp) {
    ckpt_save_value *d = ckpt_save_value_dict();
    cr_assert_eq(ckpt_save_value_set_item(d, ckpt_save_value_int(1), ckpt_save_value_none()),
                 CKPT_OK);
    /* 1 == True == 1.0 in Python: the same key */
    cr_assert_eq(ckpt_save_value_set_item(d, ckpt_save_value_bool(true), ckpt_save_value_none()),
                 CKPT_E_INVAL);
    cr_assert_eq(ckpt_save_value_set_item(d, ckpt_save_value_float(1.0), ckpt_save_value_none()),
                 CKPT_E_INVAL);
    cr_assert_eq(ckpt_save_value_set(d, "1", ckpt_save_value_float(2.5)), CKPT_OK);
    ckpt_save_value *t = ckpt_save_value_tuple();
    ckpt_save_value_append(t, ckpt_save_value_int(2));
    ckpt_save_value_append(t, ckpt_save_value_bytes("\x00\xff", 2));
    cr_assert_eq(ckpt_save_value_set_item(d, t, ckpt_save_value_bigint("-18446744073709551616")),
                 CKPT_OK);
    ckpt_save_value *bad = ckpt_save_value_tuple(); /* a tuple holding a list: unhashable */
    ckpt_save_value_append(bad, ckpt_save_value_list());
    cr_assert_eq(ckpt_save_value_set_item(d, bad, ckpt_save_value_none()), CKPT_E_INVAL);
    ckpt_save_value *fs = ckpt_save_value_pyset(true);
    cr_assert_eq(ckpt_save_value_append(fs, ckpt_save_value_list()), CKPT_E_INVAL);
    cr_assert_eq(ckpt_save_value_append(fs, ckpt_save_value_string("a")), CKPT_OK);
    ckpt_save_value *s = ckpt_save_value_pyset(false);
    ckpt_save_value_append(s, ckpt_save_value_bigint("9223372036854775808"));
    ckpt_save_value_append(s, ckpt_save_value_bigint("-9223372036854775808")); /* an int64 */
    cr_assert_eq(ckpt_save_value_set_item(d, fs, s), CKPT_OK);
    cr_assert_eq(ckpt_save_value_set_item(d, ckpt_save_value_none(), ckpt_save_value_bytes("", 0)),
                 CKPT_OK);
    cr_assert_null(ckpt_save_value_bigint("12a"));
    cr_assert_null(ckpt_save_value_bigint("-"));
    char *text = round_trip_text(d);
    cr_assert_str_eq(text,
                     "{1: None, '1': 2.5, (2, b'\\x00\\xff'): -18446744073709551616, "
                     "frozenset({'a'}): {9223372036854775808, -9223372036854775808}, None: b''}",
                     "%s", text);
    free(text);
}

static ckpt_save_desc *piece_desc(const char *dir, uint32_t rank, ckpt_dtype dt, int64_t row0,
                                  int64_t rows, uint32_t replica) {
    ckpt_error err;
    ckpt_save_file *f;
    cr_assert_eq(ckpt_save_file_open(dir, rank, &nosync, &f, &err), CKPT_OK, "%s", err.message);
    int64_t shape[1] = {4}, off[1] = {row0}, sz[1] = {rows};
    uint64_t data[4] = {0};
    ckpt_save_key k = {.path = "w"};
    ckpt_save_tensor t = {.dtype = dt,
                          .ndim = 1,
                          .global_shape = shape,
                          .offsets = off,
                          .sizes = sz,
                          .data = data,
                          .data_size = (size_t)rows * ckpt_dtype_itemsize(dt),
                          .replica_id = replica};
    cr_assert_eq(ckpt_save_file_add_tensor(f, &k, &t, &err), CKPT_OK, "%s", err.message);
    ckpt_save_desc *d;
    cr_assert_eq(ckpt_save_file_finish(f, &d, &err), CKPT_OK);
    ckpt_save_file_free(f);
    return d;
}

static void expect_refused(const char *sub, ckpt_save_desc *a, ckpt_save_desc *b) {
    ckpt_error err;
    const ckpt_save_desc *ds[2] = {a, b};
    cr_assert_eq(ckpt_save_write_metadata(tmp, ds, 2, &nosync, &err), CKPT_E_INVAL, "%s", sub);
    cr_assert(strstr(err.message, sub), "'%s' not in '%s'", sub, err.message);
    char p[128];
    snprintf(p, sizeof p, "%s/.metadata", tmp);
    cr_assert(!exists(p));
    ckpt_save_desc_free(a);
    ckpt_save_desc_free(b);
    rm_tmp();
    mk_tmp();
}

Test(save, conflicting_ranks_are_refused, .init = mk_tmp, .fini = rm_tmp) {
    expect_refused("overlap", piece_desc(tmp, 0, CKPT_DTYPE_FLOAT32, 0, 3, 0),
                   piece_desc(tmp, 1, CKPT_DTYPE_FLOAT32, 2, 2, 0));
    expect_refused("disagrees", piece_desc(tmp, 0, CKPT_DTYPE_FLOAT32, 0, 2, 0),
                   piece_desc(tmp, 1, CKPT_DTYPE_INT32, 2, 2, 0));
    expect_refused("no rank stored", piece_desc(tmp, 0, CKPT_DTYPE_FLOAT32, 0, 4, 1),
                   piece_desc(tmp, 1, CKPT_DTYPE_FLOAT32, 0, 4, 2));
    expect_refused("same offsets with other sizes", piece_desc(tmp, 0, CKPT_DTYPE_FLOAT32, 0, 4, 0),
                   piece_desc(tmp, 1, CKPT_DTYPE_FLOAT32, 0, 2, 0));
    expect_refused("two descriptions", piece_desc(tmp, 0, CKPT_DTYPE_FLOAT32, 0, 4, 0), ({
                       char sub[96];
                       snprintf(sub, sizeof sub, "%s/x", tmp);
                       mkdir(sub, 0755);
                       piece_desc(sub, 0, CKPT_DTYPE_FLOAT32, 0, 4, 0);
                   }));
}

Test(save, abort_and_existing_target, .init = mk_tmp, .fini = rm_tmp) {
    char dir[128];
    snprintf(dir, sizeof dir, "%s/step-1", tmp);
    ckpt_error err;
    ckpt_save_txn *t;
    cr_assert_eq(ckpt_save_begin(dir, &nosync, &t, &err), CKPT_OK, "%s", err.message);
    const char *st = ckpt_save_txn_staging_dir(t);
    cr_assert(strstr(st, "/.step-1.tmp-"), "%s", st);
    ckpt_save_desc *d = small_rank(st, 0, 0, 4);
    ckpt_save_txn_free(t); /* abort */
    cr_assert_eq(count_entries(tmp), 0u, "staging left behind");
    ckpt_save_desc_free(d);

    /* a failing commit (pieces do not cover the tensor) publishes nothing */
    cr_assert_eq(ckpt_save_begin(dir, &nosync, &t, &err), CKPT_OK);
    d = small_rank(ckpt_save_txn_staging_dir(t), 0, 0, 2);
    const ckpt_save_desc *ds[1] = {d};
    cr_assert_eq(ckpt_save_commit(t, ds, 1, &err), CKPT_E_INVAL);
    cr_assert(!exists(dir));
    ckpt_save_txn_free(t);
    ckpt_save_desc_free(d);
    cr_assert_eq(count_entries(tmp), 0u);

    /* two ranks, commit, then the same target again is refused */
    cr_assert_eq(ckpt_save_begin(dir, &nosync, &t, &err), CKPT_OK);
    ckpt_save_desc *a = small_rank(ckpt_save_txn_staging_dir(t), 0, 0, 2);
    ckpt_save_desc *b = small_rank(ckpt_save_txn_staging_dir(t), 1, 2, 2);
    const ckpt_save_desc *ab[2] = {b, a};
    cr_assert_eq(ckpt_save_commit(t, ab, 2, &err), CKPT_OK, "%s", err.message);
    ckpt_save_txn_free(t);
    ckpt_save_desc_free(a);
    ckpt_save_desc_free(b);
    cr_assert_eq(ckpt_save_begin(dir, &nosync, &t, &err), CKPT_E_INVAL);
    cr_assert_null(t);
    ckpt_reader *r;
    cr_assert_eq(ckpt_reader_open(dir, NULL, &r, &err), CKPT_OK, "%s", err.message);
    const ckpt_entry *e = ckpt_reader_find(r, "m/w");
    cr_assert_not_null(e);
    float got[12];
    cr_assert_eq(ckpt_read_tensor(r, e, got, sizeof got, &err), CKPT_OK, "%s", err.message);
    for (int i = 0; i < 12; i++)
        cr_assert_eq(got[i], (float)i);
    const ckpt_entry *v = ckpt_reader_find(r, "opt.0.0");
    cr_assert_not_null(v);
    cr_assert_eq(ckpt_entry_path_len(v), 3u);
    cr_assert_str_eq(ckpt_entry_path_elem(v, 2), "0");
    ckpt_reader_free(r);
}

static void make_step(const char *name) {
    char dir[128];
    snprintf(dir, sizeof dir, "%s/%s", tmp, name);
    ckpt_error err;
    ckpt_save_txn *t;
    cr_assert_eq(ckpt_save_begin(dir, &nosync, &t, &err), CKPT_OK, "%s", err.message);
    ckpt_save_desc *d = small_rank(ckpt_save_txn_staging_dir(t), 0, 0, 4);
    const ckpt_save_desc *ds[1] = {d};
    cr_assert_eq(ckpt_save_commit(t, ds, 1, &err), CKPT_OK, "%s", err.message);
    ckpt_save_txn_free(t);
    ckpt_save_desc_free(d);
}

Test(save, latest_and_retention, .init = mk_tmp, .fini = rm_tmp) {
    ckpt_error err;
    char *name;
    cr_assert_eq(ckpt_save_get_latest(tmp, &name, &err), CKPT_E_NOTFOUND);
    cr_assert_eq(ckpt_save_set_latest(tmp, "step-9", &nosync, &err), CKPT_E_NOTFOUND);
    cr_assert_eq(ckpt_save_set_latest(tmp, "../x", &nosync, &err), CKPT_E_INVAL);
    make_step("step-5");
    make_step("step-20");
    make_step("step-3");
    make_step("iter_0000007");
    char junk[128];
    snprintf(junk, sizeof junk, "%s/step-100", tmp); /* incomplete: no .metadata */
    mkdir(junk, 0755);
    char link[128];
    snprintf(link, sizeof link, "%s/step-1", tmp); /* a symlink to a step: never a candidate */
    cr_assert_eq(symlink("step-5", link), 0);
    cr_assert_eq(ckpt_save_set_latest(tmp, "step-3", &nosync, &err), CKPT_OK, "%s", err.message);
    cr_assert_eq(ckpt_save_get_latest(tmp, &name, &err), CKPT_OK);
    cr_assert_str_eq(name, "step-3");
    free(name);
    size_t removed = 99;
    cr_assert_eq(ckpt_save_retain(tmp, 1, "step-5", &removed, &err), CKPT_OK, "%s", err.message);
    /* keep the newest 1 of 4 complete steps (step-20); of the older ones step-3 (latest)
     * and step-5 (protected) survive: only iter_0000007 goes (a newer step is never deleted
     * for an older protected one) */
    cr_assert_eq(removed, 1u);
    char p[160];
    snprintf(p, sizeof p, "%s/step-20/.metadata", tmp);
    cr_assert(exists(p));
    snprintf(p, sizeof p, "%s/iter_0000007", tmp);
    cr_assert(!exists(p));
    snprintf(p, sizeof p, "%s/step-3/.metadata", tmp);
    cr_assert(exists(p));
    snprintf(p, sizeof p, "%s/step-5/.metadata", tmp);
    cr_assert(exists(p));
    cr_assert(exists(junk), "incomplete directories are not touched");
    cr_assert_eq(count_entries(tmp), 6u); /* latest, step-1 link, step-3, -5, -20, -100 */
}

/* xorshift for reproducible random layouts */
static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

Test(save, random_sharded_tensors_read_back_bit_exact, .init = mk_tmp, .fini = rm_tmp) {
    uint64_t seed = 0x1234567;
    for (int round = 0; round < 12; round++) {
        char dir[128];
        snprintf(dir, sizeof dir, "%s/r%d", tmp, round);
        ckpt_error err;
        ckpt_save_txn *t;
        cr_assert_eq(ckpt_save_begin(dir, &nosync, &t, &err), CKPT_OK);
        int nd = 1 + (int)(rnd(&seed) % 4);
        int64_t shape[4];
        size_t numel = 1;
        for (int d = 0; d < nd; d++) {
            shape[d] = (int64_t)(rnd(&seed) % 7);
            numel *= (size_t)shape[d];
        }
        ckpt_dtype dt = (ckpt_dtype)(1 + rnd(&seed) % (CKPT_DTYPE_COUNT_ - 1));
        size_t isz = ckpt_dtype_itemsize(dt);
        unsigned char *g = malloc(numel * isz + 1);
        for (size_t i = 0; i < numel * isz; i++)
            g[i] = (unsigned char)(dt == CKPT_DTYPE_BOOL ? rnd(&seed) & 1 : rnd(&seed));
        int dim = (int)(rnd(&seed) % (uint64_t)nd);
        uint32_t nranks = 1 + (uint32_t)(rnd(&seed) % 5);
        ckpt_save_desc *descs[5];
        for (uint32_t r = 0; r < nranks; r++) {
            int64_t c = (shape[dim] + nranks - 1) / nranks;
            int64_t lo = (int64_t)r * c < shape[dim] ? (int64_t)r * c : shape[dim];
            int64_t hi = lo + c < shape[dim] ? lo + c : shape[dim];
            int64_t off[4] = {0}, sz[4];
            memcpy(sz, shape, sizeof sz);
            off[dim] = lo;
            sz[dim] = hi - lo;
            size_t n = isz;
            for (int d = 0; d < nd; d++)
                n *= (size_t)sz[d];
            unsigned char *b = malloc(n + 1);
            /* gather the box from the global buffer */
            size_t outer = 1, inner = isz;
            for (int d = 0; d < dim; d++)
                outer *= (size_t)shape[d];
            for (int d = dim + 1; d < nd; d++)
                inner *= (size_t)shape[d];
            for (size_t o = 0; o < outer; o++)
                memcpy(b + o * (size_t)sz[dim] * inner,
                       g + (o * (size_t)shape[dim] + (size_t)lo) * inner, (size_t)sz[dim] * inner);
            ckpt_save_file *f;
            cr_assert_eq(ckpt_save_file_open(ckpt_save_txn_staging_dir(t), r, &nosync, &f, &err),
                         CKPT_OK);
            ckpt_save_key k = {.path = "x/y"};
            ckpt_save_tensor ten = {.dtype = dt,
                                    .ndim = nd,
                                    .global_shape = shape,
                                    .offsets = off,
                                    .sizes = sz,
                                    .data = b,
                                    .data_size = n};
            cr_assert_eq(ckpt_save_file_add_tensor(f, &k, &ten, &err), CKPT_OK, "%s", err.message);
            cr_assert_eq(ckpt_save_file_finish(f, &descs[r], &err), CKPT_OK);
            ckpt_save_file_free(f);
            free(b);
        }
        cr_assert_eq(ckpt_save_commit(t, (const ckpt_save_desc *const *)descs, nranks, &err),
                     CKPT_OK, "%s", err.message);
        ckpt_save_txn_free(t);
        for (uint32_t r = 0; r < nranks; r++)
            ckpt_save_desc_free(descs[r]);
        ckpt_reader *rd;
        cr_assert_eq(ckpt_reader_open(dir, NULL, &rd, &err), CKPT_OK, "%s", err.message);
        const ckpt_entry *e = ckpt_reader_find(rd, "x.y");
        cr_assert_not_null(e);
        cr_assert_eq(ckpt_entry_dtype(e), dt);
        cr_assert_leq(ckpt_entry_num_chunks(e), nranks); /* equal empty boxes merge */
        unsigned char *got = malloc(numel * isz + 1);
        cr_assert_eq(ckpt_read_tensor(rd, e, got, numel * isz, &err), CKPT_OK, "%s", err.message);
        cr_assert(memcmp(got, g, numel * isz) == 0, "round %d: bytes differ", round);
        cr_assert_eq(ckpt_entry_check_layout(e, &err), CKPT_OK, "%s", err.message);
        ckpt_reader_free(rd);
        free(got);
        free(g);
    }
}

Test(save, torch_target_refuses_what_that_release_cannot_load, .init = mk_tmp, .fini = rm_tmp) {
    cr_assert_eq(ckpt_dtype_torch_min(CKPT_DTYPE_FLOAT32), 204);
    cr_assert_eq(ckpt_dtype_torch_min(CKPT_DTYPE_FLOAT8_E4M3FN), 204);
    cr_assert_eq(ckpt_dtype_torch_min(CKPT_DTYPE_UINT16), 206);
    cr_assert_eq(ckpt_dtype_torch_min(CKPT_DTYPE_UINT64), 206);
    cr_assert_eq(ckpt_dtype_torch_min(CKPT_DTYPE_FLOAT8_E8M0FNU), 207);
    cr_assert_eq(ckpt_dtype_torch_min(CKPT_DTYPE_INVALID), 0);
    ckpt_error err;
    ckpt_save_txn *txn;
    ckpt_save_file *f;
    char dir[128];
    snprintf(dir, sizeof dir, "%s/step", tmp);
    ckpt_save_options o = {.no_fsync = true, .torch_target = 203};
    cr_assert_eq(ckpt_save_begin(dir, &o, &txn, &err), CKPT_E_INVAL);
    cr_assert(strstr(err.message, "before 2.4"), "%s", err.message);
    cr_assert_eq(ckpt_save_file_open(tmp, 0, &o, &f, &err), CKPT_E_INVAL);
    o = (ckpt_save_options){
        .no_fsync = true, .torch_target = 211, .tensor_properties_strides = true};
    cr_assert_eq(ckpt_save_begin(dir, &o, &txn, &err), CKPT_E_INVAL);
    cr_assert(strstr(err.message, "2.15"), "%s", err.message);
    o.tensor_properties_strides = false;
    cr_assert_eq(ckpt_save_file_open(tmp, 0, &o, &f, &err), CKPT_OK, "%s", err.message);
    int64_t shape[1] = {2};
    uint16_t data[2] = {1, 2};
    ckpt_save_key k = {.path = "model/u16"};
    ckpt_save_tensor t = {
        .dtype = CKPT_DTYPE_UINT16, .ndim = 1, .global_shape = shape, .data = data, .data_size = 4};
    o.torch_target = 205; /* the file keeps the target it was opened with (2.11) */
    cr_assert_eq(ckpt_save_file_add_tensor(f, &k, &t, &err), CKPT_OK, "%s", err.message);
    ckpt_save_desc *d;
    cr_assert_eq(ckpt_save_file_finish(f, &d, &err), CKPT_OK);
    ckpt_save_file_free(f);
    /* .metadata for a 2.5 target: the description's uint16 tensor is refused by key */
    const ckpt_save_desc *ds[1] = {d};
    cr_assert_eq(ckpt_save_write_metadata(tmp, ds, 1, &o, &err), CKPT_E_UNSUPPORTED);
    cr_assert(strstr(err.message, "'model.u16'") && strstr(err.message, "torch 2.6"), "%s",
              err.message);
    o.torch_target = 206;
    cr_assert_eq(ckpt_save_write_metadata(tmp, ds, 1, &o, &err), CKPT_OK, "%s", err.message);
    ckpt_save_desc_free(d);
    /* a file opened for 2.5 refuses the tensor itself */
    char sub[128];
    snprintf(sub, sizeof sub, "%s/b", tmp);
    cr_assert_eq(mkdir(sub, 0755), 0);
    o.torch_target = 205;
    cr_assert_eq(ckpt_save_file_open(sub, 0, &o, &f, &err), CKPT_OK, "%s", err.message);
    cr_assert_eq(ckpt_save_file_add_tensor(f, &k, &t, &err), CKPT_E_UNSUPPORTED);
    cr_assert(strstr(err.message, "torch 2.5 cannot load a uint16 tensor (needs torch 2.6"), "%s",
              err.message);
    t.dtype = CKPT_DTYPE_INT16;
    cr_assert_eq(ckpt_save_file_add_tensor(f, &k, &t, &err), CKPT_OK, "%s", err.message);
    ckpt_save_file_free(f);
}
