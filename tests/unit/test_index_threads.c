/* test_index_threads.c — the index is the same whatever the number of threads building it
 * (ckpt_limits.index_threads), on a saver-written checkpoint big enough for the parallel
 * walk, and its tensors read back bit-exact; a pickle decoded from a read input (a window
 * sliding over the file, as metadata_stream.c gives the decoder) gives the same tree as
 * from a buffer, through windows of any size and reads of any length, including text
 * arguments straddling window ends; a read that stops short fails as a truncated input; a
 * `.metadata` bigger than the window opens like the same bytes given as a buffer. */
#include <criterion/criterion.h>

#include "ckpt.h"
#include "ckpt_save.h"
#include "index/metadata_stream.h"
#include "index/reader_i.h"
#include "pickle/pickle.h"
#include "value/value.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static char tmp[64];

static void mk_tmp(void) {
    snprintf(tmp, sizeof tmp, "/tmp/ckpt-idxthr-XXXXXX");
    cr_assert_not_null(mkdtemp(tmp));
}
static void rm_tmp(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    cr_assert_eq(system(cmd), 0);
}

/* ------------------------------------------------------------- a many-tensor checkpoint */

enum { NTENSORS = 4800, ROWS = 5, COLS = 3 };

static float value_at(int t, int i) { return (float)t * 100.0f + (float)i * 0.5f; }

/* Two ranks: tensor t is split after row (t % ROWS) + 1 (rank 1 may hold nothing: its box
 * is then left out); every 7th tensor is 1-D, every 11th is a bf16 copy held by rank 0 only;
 * a few values. */
static void write_checkpoint(const char *dir) {
    static const ckpt_save_options opts = {.no_fsync = true};
    ckpt_error err;
    ckpt_save_txn *t;
    cr_assert_eq(ckpt_save_begin(dir, &opts, &t, &err), CKPT_OK, "%s", err.message);
    ckpt_save_desc *d[2];
    for (uint32_t rank = 0; rank < 2; rank++) {
        ckpt_save_file *f;
        cr_assert_eq(ckpt_save_file_open(ckpt_save_txn_staging_dir(t), rank, &opts, &f, &err),
                     CKPT_OK, "%s", err.message);
        for (int k = 0; k < NTENSORS; k++) {
            char path[64];
            snprintf(path, sizeof path, "model/layers/%d/w%d", k / 8, k % 8);
            ckpt_save_key key = {.path = path};
            bool oned = k % 7 == 0, bf16 = k % 11 == 0;
            int64_t shape[2] = {ROWS, COLS}, off[2] = {0, 0}, sz[2] = {ROWS, COLS};
            int split = k % ROWS + 1, ndim = oned ? 1 : 2;
            if (oned) shape[0] = sz[0] = ROWS * COLS;
            int64_t rows = oned ? ROWS * COLS : ROWS;
            if (!bf16) {
                int64_t cut = oned ? split * COLS : split;
                off[0] = rank ? cut : 0;
                sz[0] = rank ? rows - cut : cut;
            } else if (rank) {
                continue;
            }
            if (sz[0] == 0) continue;
            int64_t rowlen = oned ? 1 : COLS, first = off[0] * rowlen, n = sz[0] * rowlen;
            float fbuf[ROWS * COLS];
            uint16_t hbuf[ROWS * COLS];
            for (int64_t i = 0; i < n; i++) {
                fbuf[i] = value_at(k, (int)(first + i));
                uint32_t u;
                memcpy(&u, &fbuf[i], 4);
                hbuf[i] = (uint16_t)(u >> 16);
            }
            ckpt_save_tensor ten = {.dtype = bf16 ? CKPT_DTYPE_BFLOAT16 : CKPT_DTYPE_FLOAT32,
                                    .ndim = ndim,
                                    .global_shape = shape,
                                    .offsets = off,
                                    .sizes = sz,
                                    .data = bf16 ? (const void *)hbuf : (const void *)fbuf,
                                    .data_size = (size_t)n * (bf16 ? 2 : 4)};
            cr_assert_eq(ckpt_save_file_add_tensor(f, &key, &ten, &err), CKPT_OK, "%s",
                         err.message);
        }
        if (rank == 0) {
            ckpt_save_key key = {.path = "optim/param_groups/0/lr"};
            ckpt_save_value *v = ckpt_save_value_float(3e-4);
            cr_assert_eq(ckpt_save_file_add_value(f, &key, v, 0, &err), CKPT_OK, "%s", err.message);
            ckpt_save_value_free(v);
        }
        cr_assert_eq(ckpt_save_file_finish(f, &d[rank], &err), CKPT_OK, "%s", err.message);
        ckpt_save_file_free(f);
    }
    const ckpt_save_desc *ds[2] = {d[0], d[1]};
    cr_assert_eq(ckpt_save_commit(t, ds, 2, &err), CKPT_OK, "%s", err.message);
    ckpt_save_txn_free(t);
    ckpt_save_desc_free(d[0]);
    ckpt_save_desc_free(d[1]);
}

static ckpt_reader *open_with_threads(const char *dir, uint32_t threads) {
    ckpt_limits lim = {.index_threads = threads};
    ckpt_open_options o = {.limits = &lim};
    ckpt_reader *r;
    ckpt_error err;
    cr_assert_eq(ckpt_reader_open(dir, &o, &r, &err), CKPT_OK, "%u threads: %s", threads,
                 err.message);
    return r;
}

static bool same_str(const char *a, const char *b) {
    return a == b || (a && b && strcmp(a, b) == 0);
}

/* Everything the index says about every entry, compared field by field. */
static void assert_same_index(const ckpt_reader *a, const ckpt_reader *b, uint32_t threads) {
    cr_assert_eq(ckpt_reader_num_entries(a), ckpt_reader_num_entries(b));
    for (size_t i = 0; i < ckpt_reader_num_entries(a); i++) {
        const ckpt_entry *x = ckpt_reader_entry(a, i), *y = ckpt_reader_entry(b, i);
        const char *k = ckpt_entry_key(x);
        cr_assert_str_eq(k, ckpt_entry_key(y), "%u threads: entry %zu", threads, i);
        cr_assert_str_eq(ckpt_entry_path(x), ckpt_entry_path(y), "%s", k);
        cr_assert_eq(ckpt_entry_kind_of(x), ckpt_entry_kind_of(y), "%s", k);
        cr_assert_eq(ckpt_entry_dtype(x), ckpt_entry_dtype(y), "%s", k);
        cr_assert(same_str(ckpt_entry_problem(x), ckpt_entry_problem(y)), "%s", k);
        int nd = ckpt_entry_ndim(x);
        cr_assert_eq(nd, ckpt_entry_ndim(y), "%s", k);
        cr_assert(nd == 0 || memcmp(ckpt_entry_shape(x), ckpt_entry_shape(y), nd * 8u) == 0);
        size_t nc = ckpt_entry_num_chunks(x);
        cr_assert_eq(nc, ckpt_entry_num_chunks(y), "%s", k);
        for (size_t c = 0; c < (ckpt_entry_kind_of(x) == CKPT_ENTRY_OBJECT ? 1 : nc); c++) {
            ckpt_chunk_info p, q;
            cr_assert_eq(ckpt_entry_chunk(x, c, &p), CKPT_OK);
            cr_assert_eq(ckpt_entry_chunk(y, c, &q), CKPT_OK);
            cr_assert(p.file_id == q.file_id && p.file_offset == q.file_offset &&
                          p.length == q.length && p.numel == q.numel,
                      "%s chunk %zu: %u threads index it differently", k, c, threads);
            cr_assert(same_str(p.problem, q.problem) && same_str(p.transforms, q.transforms));
            cr_assert(nd == 0 || (memcmp(p.offsets, q.offsets, nd * 8u) == 0 &&
                                  memcmp(p.sizes, q.sizes, nd * 8u) == 0));
        }
    }
}

Test(index_threads, same_index_for_any_thread_count, .init = mk_tmp, .fini = rm_tmp) {
    char dir[128];
    snprintf(dir, sizeof dir, "%s/step", tmp);
    write_checkpoint(dir);
    ckpt_reader *one = open_with_threads(dir, 1);
    cr_assert_eq(ckpt_reader_num_entries(one), NTENSORS + 1u);
    cr_assert(!one->index_overlapped);
    /* the overlapped walk (metadata_overlap.c), also in lockstep with the decoder */
    char md[160];
    snprintf(md, sizeof md, "%s/.metadata", dir);
    size_t len;
    uint8_t *buf = tu_read_file(md, &len);
    ckpt_limits lim2 = {.index_threads = 2};
    ckpt_reader *lock;
    ckpt_error err0;
    cr_assert_eq(ck_reader_open_buffer(dir, buf, len, &lim2, CKPT_OPEN_LOCKSTEP, &lock, &err0),
                 CKPT_OK, "%s", err0.message);
    cr_assert(lock->index_overlapped, "lockstep: the walk should have overlapped decoding");
    /* its dicts are pickled in batches of 1000 items: in lockstep, every other batch after the
     * first is decoded by the walker (pk_watch.split) */
    size_t items = 0;
    for (size_t i = 0; i < ckpt_reader_num_entries(lock); i++)
        items += ckpt_entry_num_chunks(ckpt_reader_entry(lock, i));
    size_t batches = (items + 999) / 1000;
    cr_assert_geq(lock->index_split_batches, batches / 2, "lockstep: %zu batches split",
                  lock->index_split_batches);
    assert_same_index(one, lock, 2);
    ckpt_reader_free(lock);
    free(buf);
    for (uint32_t threads = 2; threads <= 4; threads += 2) {
        ckpt_reader *many = open_with_threads(dir, threads);
        cr_assert(many->index_overlapped, "%u threads: the walk should overlap decoding", threads);
        assert_same_index(one, many, threads);
        if (threads < 4) {
            ckpt_reader_free(many);
            continue;
        }
        /* and the data reads back bit-exact through the many-thread index */
        ckpt_error err;
        for (int k = 0; k < NTENSORS; k++) {
            char path[64];
            snprintf(path, sizeof path, "model/layers/%d/w%d", k / 8, k % 8);
            const ckpt_entry *e = ckpt_reader_find(many, path);
            cr_assert_not_null(e, "%s missing", path);
            cr_assert_null(ckpt_entry_problem(e), "%s: %s", path, ckpt_entry_problem(e));
            bool bf16 = k % 11 == 0;
            unsigned char got[ROWS * COLS * 4];
            cr_assert_eq(ckpt_read_tensor(many, e, got, sizeof got, &err), CKPT_OK, "%s: %s", path,
                         err.message);
            for (int i = 0; i < ROWS * COLS; i++) {
                float want = value_at(k, i), have;
                if (bf16) {
                    uint32_t u, w;
                    memcpy(&w, &want, 4);
                    u = (uint32_t)(got[2 * i] | got[2 * i + 1] << 8) << 16;
                    cr_assert_eq(u, w & 0xffff0000u, "%s[%d]", path, i);
                } else {
                    memcpy(&have, got + 4 * i, 4);
                    cr_assert_eq(have, want, "%s[%d]: %g != %g", path, i, have, want);
                }
            }
        }
        ckpt_reader_free(many);
    }
    ckpt_reader_free(one);
}

/* ------------------------------------------------------------- streamed input */

/* A read input over buf: at most `step` bytes a call; with `stop_at`, bytes from there on
 * never come (a failed read).  Checks that the decoder asks for bytes in order, once. */
typedef struct trickle {
    const uint8_t *src;
    size_t len, step, stop_at, calls, next;
} trickle;

static size_t trickle_read(void *ctx, uint8_t *dst, uint64_t off, size_t n) {
    trickle *t = ctx;
    t->calls++;
    cr_assert_eq(off, t->next, "read at %llu, expected %zu", (unsigned long long)off, t->next);
    cr_assert(n > 0 && off + n <= t->len, "read of %zu at %llu", n, (unsigned long long)off);
    size_t end = t->stop_at ? t->stop_at : t->len;
    if (off >= end) return 0;
    if (n > t->step) n = t->step;
    if (n > end - off) n = end - (size_t)off;
    memcpy(dst, t->src + off, n);
    t->next += n;
    return n;
}

static char *json_of(const pk_doc *doc) {
    char *j;
    ckpt_error err;
    cr_assert_eq(pk_to_json(pk_doc_root(doc), 512, 0, &j, &err), CKPT_OK, "%s", err.message);
    return j;
}

static void assert_streamed_like_buffer(const char *what, const uint8_t *buf, size_t len) {
    ckpt_error err;
    pk_doc *whole;
    cr_assert_eq(pk_decode(buf, len, NULL, &whole, &err), CKPT_OK, "%s: %s", what, err.message);
    char *want = json_of(whole);
    static const size_t windows[] = {1, 7, 64, 0};
    for (size_t w = 0; w < sizeof windows / sizeof *windows; w++) {
        for (size_t step = 1; step <= 13; step += 6) {
            trickle t = {.src = buf, .len = len, .step = step};
            pk_input in = {.len = len, .read = trickle_read, .ctx = &t, .window = windows[w]};
            pk_doc *doc;
            cr_assert_eq(pk_decode_input(&in, NULL, &doc, &err), CKPT_OK,
                         "%s window %zu step %zu: %s", what, windows[w], step, err.message);
            cr_assert_gt(t.calls, 1u, "%s: read in one go", what);
            char *got = json_of(doc);
            cr_assert_str_eq(got, want, "%s through a %zu-byte window, %zu bytes a read", what,
                             windows[w], step);
            free(got);
            pk_doc_free(doc);
        }
    }
    free(want);
    pk_doc_free(whole);
}

Test(index_threads, streamed_pickles_decode_like_buffers) {
    static const char *names[] = {"nested_p0.pkl",   "strings_p0.pkl", "floats_p0.pkl",
                                  "persid_p0.pkl",   "nested_p4.pkl",  "frame_p5.pkl",
                                  "metadata_p4.pkl", "long_ops_p4.pkl"};
    const char *dir = getenv("CKPT_PICKLE_VECTORS");
    cr_assert_not_null(dir);
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        size_t len;
        uint8_t *buf = tu_read_file(path, &len);
        assert_streamed_like_buffer(names[i], buf, len);
        free(buf);
    }
}

Test(index_threads, stream_stopping_short_is_a_truncation) {
    const char *dir = getenv("CKPT_PICKLE_VECTORS");
    char path[4096];
    snprintf(path, sizeof path, "%s/metadata_p4.pkl", dir);
    size_t len;
    uint8_t *buf = tu_read_file(path, &len);
    for (size_t stop = 1; stop < len; stop += len / 17 + 1) {
        trickle t = {.src = buf, .len = len, .step = 64, .stop_at = stop};
        pk_input in = {.len = len, .read = trickle_read, .ctx = &t, .window = 32};
        pk_doc *doc = NULL;
        ckpt_error err;
        cr_assert_eq(pk_decode_input(&in, NULL, &doc, &err), CKPT_E_FORMAT, "stopped at %zu", stop);
        cr_assert_null(doc);
        cr_assert(strstr(err.message, "truncated"), "stopped at %zu: %s", stop, err.message);
    }
    free(buf);
}

/* A protocol-0 pickle of `n` ints (one text line each): about 9 bytes per item. */
static uint8_t *text_list_pickle(size_t n, size_t *len) {
    size_t cap = 16 + n * 24, at = 0;
    char *p = malloc(cap);
    cr_assert_not_null(p);
    at += (size_t)sprintf(p + at, "(lp0\n");
    for (size_t i = 0; i < n; i++)
        at += (size_t)sprintf(p + at, "I%zu\na", i * 7919u % 1000003u);
    p[at++] = '.';
    *len = at;
    return (uint8_t *)p;
}

Test(index_threads, big_metadata_through_a_window, .init = mk_tmp, .fini = rm_tmp) {
    /* a real, big .metadata: the many-tensor checkpoint's, padded past the window (4 MiB)
     * with bytes after STOP, which the decoder ignores */
    char dir[128], meta[160];
    snprintf(dir, sizeof dir, "%s/step", tmp);
    write_checkpoint(dir);
    snprintf(meta, sizeof meta, "%s/.metadata", dir);
    size_t len;
    uint8_t *buf = tu_read_file(meta, &len);
    size_t big = (size_t)9 << 20;
    cr_assert_lt(len, big);
    buf = realloc(buf, big);
    memset(buf + len, 'x', big - len);
    FILE *f = fopen(meta, "wb");
    cr_assert_eq(fwrite(buf, 1, big, f), big);
    fclose(f);
    ckpt_reader *streamed = open_with_threads(dir, 1), *mem;
    ckpt_error err;
    cr_assert_eq(ck_reader_open_buffer(dir, buf, big, NULL, 0, &mem, &err), CKPT_OK, "%s",
                 err.message);
    assert_same_index(mem, streamed, 1);
    ckpt_reader_free(mem);
    ckpt_reader_free(streamed);

    /* a 12 MiB text pickle whose lines straddle the ends of the 4 MiB window decodes like the
     * buffer */
    size_t n = 1600000, plen;
    uint8_t *p = text_list_pickle(n, &plen);
    cr_assert_gt(plen, (size_t)12 << 20);
    f = fopen(meta, "wb");
    cr_assert_eq(fwrite(p, 1, plen, f), plen);
    fclose(f);
    ck_metadata_stream *ms;
    cr_assert_eq(ck_metadata_stream_open(meta, UINT64_MAX, NULL, &ms, &err), CKPT_OK, "%s",
                 err.message);
    pk_doc *sdoc, *bdoc;
    cr_assert_eq(pk_decode_input(ck_metadata_stream_input(ms), NULL, &sdoc, &err), CKPT_OK, "%s",
                 err.message);
    cr_assert_eq(ck_metadata_stream_finish(ms, &err), CKPT_OK, "%s", err.message);
    cr_assert_eq(pk_decode(p, plen, NULL, &bdoc, &err), CKPT_OK, "%s", err.message);
    cr_assert_eq(pk_len(pk_doc_root(sdoc)), n);
    char *sj = json_of(sdoc), *bj = json_of(bdoc);
    cr_assert(strcmp(sj, bj) == 0, "the streamed 12 MiB pickle decodes differently");
    free(sj);
    free(bj);
    pk_doc_free(sdoc);
    pk_doc_free(bdoc);
    ck_metadata_stream_free(ms);
    /* as a metadata file it needs the PROTO header torch writes (protocol 2-5; the text
     * opcodes after it are valid in any protocol) */
    static const uint8_t proto2[2] = {0x80, 2};
    f = fopen(meta, "wb");
    cr_assert_eq(fwrite(proto2, 1, 2, f), 2);
    cr_assert_eq(fwrite(p, 1, plen, f), plen);
    fclose(f);
    ckpt_reader *r = NULL;
    cr_assert_eq(ckpt_reader_open(dir, NULL, &r, &err), CKPT_E_FORMAT, "a list is no Metadata");
    cr_assert(strstr(err.message, "not a DCP Metadata pickle"), "%s", err.message);
    /* cut short: the reader names the truncation */
    f = fopen(meta, "wb");
    cr_assert_eq(fwrite(proto2, 1, 2, f), 2);
    cr_assert_eq(fwrite(p, 1, plen - 3, f), plen - 3);
    fclose(f);
    cr_assert_eq(ckpt_reader_open(dir, NULL, &r, &err), CKPT_E_FORMAT);
    cr_assert(strstr(err.message, ".metadata: pickle offset") && strstr(err.message, "truncated"),
              "%s", err.message);
    free(p);
    free(buf);
}
