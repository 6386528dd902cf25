/* test_badinput.c — damaged and hostile checkpoints: every class of defect gives its documented
 * status and a message naming the file, key or offset, never a crash or a leak, and leaves the
 * undamaged entries of the same checkpoint readable bit-exactly (compared with what torch
 * itself reads back).  Committed cases come from tests/fixtures/make_corrupt.py (directory in
 * $CKPT_CORRUPT); damage that is simpler to make at run time (truncation at every offset, bit
 * flips, deleting or truncating a data file) is applied to a copy of the intact "base" case.
 *
 * The base checkpoint: a float32 (4, 3) in two chunks (rows [0, 2) and [2, 4)), b int64 (5,),
 * step = 7 (an object).  Per-entry cases damage `a` (usually its chunk 1, rows [2, 4)). */
#include "ckpt.h"
#include "fixture_ref.h"
#include "ckpt_tree.h"
#include "index/reader_i.h" /* index_overlapped */
#include "tree/tree_i.h"    /* the tree's render counter */
#include "test_util.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------ helpers */

static const char *corrupt_dir(void) {
    const char *d = getenv("CKPT_CORRUPT");
    return d && *d ? d : "tests/fixtures/corrupt";
}

static char *case_path(const char *name, const char *rel) {
    char *p = NULL;
    cr_assert(asprintf(&p, "%s/%s/%s", corrupt_dir(), name, rel) > 0);
    return p;
}

#define expect_has(msg, needle)                                                                    \
    cr_expect(strstr((msg), (needle)) != NULL, "message \"%s\" should mention \"%s\"", (msg),      \
              (needle))

/* Opens a committed case that must open. */
static ckpt_reader *open_ok(const char *dir) {
    ckpt_reader *r = NULL;
    ckpt_error err = {0};
    ckpt_status s = ckpt_reader_open(dir, NULL, &r, &err);
    cr_assert_eq(s, CKPT_OK, "%s: open failed (%d): %s", dir, s, err.message);
    cr_assert(r);
    return r;
}

static ckpt_reader *open_case(const char *name) {
    char *dir = case_path(name, "ckpt");
    ckpt_reader *r = open_ok(dir);
    free(dir);
    return r;
}

static const ckpt_entry *find(const ckpt_reader *r, const char *key) {
    const ckpt_entry *e = ckpt_reader_find(r, key);
    cr_assert(e, "no entry '%s'", key);
    return e;
}

static ref_fixture load_ref(const char *name) {
    setenv("CKPT_FIXTURES", corrupt_dir(), 1);
    ref_fixture f;
    cr_assert_eq(ref_load(name, &f), 0, "no reference for case %s", name);
    return f;
}

/* Every entry in the case's reference (what torch reads back from the damaged checkpoint),
 * but `skip`, reads bit-exactly and passes every check. */
static void expect_intact_except(ckpt_reader *r, const char *name, const char *skip) {
    ref_fixture f = load_ref(name);
    cr_assert_geq(f.n, 2, "%s: reference lists %zu intact entries", name, f.n);
    for (size_t i = 0; i < f.n; i++) {
        const ref_entry *re = &f.entries[i];
        if (skip && !strcmp(re->key, skip)) continue;
        const ckpt_entry *e = find(r, re->key);
        ckpt_error err = {0};
        cr_expect_null(ckpt_entry_problem(e), "%s: '%s' has a problem: %s", name, re->key,
                       ckpt_entry_problem(e));
        if (re->kind == 'T') {
            cr_assert_eq(ckpt_entry_nbytes(e), re->nbytes, "%s: '%s' nbytes", name, re->key);
            uint8_t *buf = malloc(re->nbytes + 1);
            memset(buf, 0xA5, re->nbytes + 1);
            ckpt_status s = ckpt_read_tensor(r, e, buf, re->nbytes, &err);
            cr_expect_eq(s, CKPT_OK, "%s: read '%s': %s", name, re->key, err.message);
            if (s == CKPT_OK)
                cr_expect(memcmp(buf, f.bin + re->offset, re->nbytes) == 0,
                          "%s: '%s' differs from torch's reference", name, re->key);
            free(buf);
            cr_expect_eq(ckpt_entry_check_layout(e, &err), CKPT_OK, "%s: %s", name, err.message);
            for (size_t k = 0; k < ckpt_entry_num_chunks(e); k++)
                cr_expect_eq(ckpt_entry_check_chunk(r, e, k, &err), CKPT_OK, "%s: %s", name,
                             err.message);
        } else {
            ckpt_object *o = NULL;
            ckpt_status s = ckpt_object_load(r, e, &o, &err);
            cr_expect_eq(s, CKPT_OK, "%s: load '%s': %s", name, re->key, err.message);
            if (s != CKPT_OK) continue;
            char *json = NULL;
            cr_expect_eq(ckpt_value_to_json(ckpt_object_root(o), &json, &err), CKPT_OK);
            if (json) cr_expect_str_eq(json, re->json, "%s: '%s' json", name, re->key);
            free(json);
            ckpt_object_free(o);
        }
    }
    ref_free(&f);
}

static void expect_intact_entries(ckpt_reader *r, const char *name) {
    expect_intact_except(r, name, NULL);
}

/* Rows [row0, row0 + nrows) of `a` read bit-exactly (torch's values from the base case). */
static void expect_rows_of_a(ckpt_reader *r, int64_t row0, int64_t nrows) {
    ref_fixture base = load_ref("base");
    const ref_entry *ra = NULL;
    for (size_t i = 0; i < base.n; i++)
        if (strcmp(base.entries[i].key, "a") == 0) ra = &base.entries[i];
    cr_assert(ra && ra->nbytes == 48, "base reference lacks a (4, 3) float32 'a'");
    int64_t start[2] = {row0, 0}, count[2] = {nrows, 3};
    size_t n = (size_t)nrows * 12;
    uint8_t got[48];
    ckpt_error err = {0};
    ckpt_status s = ckpt_read_region(r, find(r, "a"), start, count, got, n, &err);
    cr_expect_eq(s, CKPT_OK, "rows [%lld, %lld) of 'a': %s", (long long)row0,
                 (long long)(row0 + nrows), err.message);
    if (s == CKPT_OK)
        cr_expect(memcmp(got, base.bin + ra->offset + row0 * 12, n) == 0,
                  "rows [%lld, %lld) of 'a' differ from torch's values", (long long)row0,
                  (long long)(row0 + nrows));
    ref_free(&base);
}

/* Reading all of `a` fails with `code`; returns the message (static buffer). */
static const char *expect_read_a_fails(ckpt_reader *r, ckpt_status code) {
    static ckpt_error err;
    memset(&err, 0, sizeof err);
    const ckpt_entry *a = find(r, "a");
    uint8_t buf[4 * 3 * 8];
    size_t need = ckpt_entry_nbytes(a);
    cr_assert_leq(need, sizeof buf);
    ckpt_status s = ckpt_read_tensor(r, a, buf, need, &err);
    cr_expect_eq(s, code, "reading 'a' gave %s (%d), expected %s (%d): %s", ckpt_strerror(s), s,
                 ckpt_strerror(code), code, err.message);
    cr_expect_eq(err.code, s, "err.code %d, returned %d", err.code, s);
    /* again: a remembered failure must be reported the same way */
    ckpt_error again = {0};
    cr_expect_eq(ckpt_read_tensor(r, a, buf, need, &again), s);
    cr_expect_str_eq(again.message, err.message);
    return err.message;
}

typedef struct report_log {
    size_t n;
    ckpt_status code[16];
    char key[16][64];
    char msg[16][CKPT_ERROR_MSG_MAX];
} report_log;

static void on_report(void *ctx, const ckpt_entry *e, const ckpt_error *err) {
    report_log *log = ctx;
    if (log->n >= 16) return;
    log->code[log->n] = err->code;
    snprintf(log->key[log->n], sizeof log->key[0], "%s", e ? ckpt_entry_key(e) : "");
    snprintf(log->msg[log->n], sizeof log->msg[0], "%s", err->message);
    log->n++;
}

/* ckpt_reader_check_ranges finds exactly `n` defects (fills *log). */
static void expect_ranges(ckpt_reader *r, uint64_t n, report_log *log) {
    memset(log, 0, sizeof *log);
    uint64_t failures = 99;
    ckpt_status s = ckpt_reader_check_ranges(r, on_report, log, &failures);
    cr_expect_eq(failures, n, "check_ranges found %llu defects, expected %llu (first: %s)",
                 (unsigned long long)failures, (unsigned long long)n, log->n ? log->msg[0] : "-");
    cr_expect_eq(log->n, n);
    cr_expect_eq(s, n ? CKPT_E_FORMAT : CKPT_OK);
}

/* Chunk `i` of `a`: ckpt_entry_check_chunk's status and message. */
static ckpt_status check_chunk_a(ckpt_reader *r, size_t i, ckpt_error *err) {
    memset(err, 0, sizeof *err);
    return ckpt_entry_check_chunk(r, find(r, "a"), i, err);
}

/* A whole-file defect: opening fails with `code`, naming .metadata and `needle`.  The JSON
 * dump fails the same way when the pickle itself is bad (`pickle_bad`), else renders it. */
static void expect_open_fails(const char *name, bool pickle_bad, ckpt_status code,
                              const char *needle) {
    char *dir = case_path(name, "ckpt");
    ckpt_reader *r = (ckpt_reader *)&r; /* must be reset to NULL */
    ckpt_error err = {0};
    ckpt_status s = ckpt_reader_open(dir, NULL, &r, &err);
    cr_expect_eq(s, code, "%s: open gave %s (%d), expected %s: %s", name, ckpt_strerror(s), s,
                 ckpt_strerror(code), err.message);
    if (s == CKPT_OK)
        ckpt_reader_free(r);
    else
        cr_expect_null(r, "%s: *out not NULL after a failed open", name);
    cr_expect_eq(err.code, s);
    char *md = case_path(name, "ckpt/.metadata");
    expect_has(err.message, md);
    expect_has(err.message, needle);
    char *json = NULL;
    ckpt_error err2 = {0};
    ckpt_status ds = ckpt_metadata_dump_json(dir, NULL, &json, &err2);
    cr_expect_eq(ds, pickle_bad ? code : CKPT_OK, "%s: dump-json gave %d: %s", name, ds,
                 err2.message);
    if (pickle_bad) {
        expect_has(err2.message, md);
        expect_has(err2.message, needle);
    }
    free(json);
    free(md);
    free(dir);
}

/* --------------------------------------------------------------- run-time damaged copies */

typedef struct tmpckpt {
    char dir[256];
} tmpckpt;

/* A private copy of base/ckpt. */
static void tmp_copy_base(tmpckpt *t) {
    snprintf(t->dir, sizeof t->dir, "/tmp/ckpt-badinput-XXXXXX");
    cr_assert(mkdtemp(t->dir), "mkdtemp: %s", strerror(errno));
    char *src = case_path("base", "ckpt");
    tu_copy_files(src, t->dir);
    free(src);
}

static void tmp_path(const tmpckpt *t, const char *name, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s", t->dir, name);
}

static void tmp_remove(tmpckpt *t) {
    DIR *d = opendir(t->dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char p[4096];
        tmp_path(t, de->d_name, p, sizeof p);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            rmdir(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(t->dir);
}

/* Name of the data file holding chunk `i` of `a`, and the item's byte range. */
static void chunk_of_a(ckpt_reader *r, size_t i, char *file, size_t cap, uint64_t *off,
                       uint64_t *len) {
    ckpt_chunk_info ci;
    cr_assert_eq(ckpt_entry_chunk(find(r, "a"), i, &ci), CKPT_OK);
    cr_assert_geq(ci.file_id, 0, "chunk %zu of 'a' has no file: %s", i,
                  ci.problem ? ci.problem : "-");
    snprintf(file, cap, "%s", ckpt_reader_file_name(r, (uint32_t)ci.file_id));
    *off = ci.file_offset;
    *len = ci.length;
}

static bool status_is_documented(ckpt_status s) {
    return s == CKPT_OK || s == CKPT_E_IO || s == CKPT_E_FORMAT || s == CKPT_E_UNSUPPORTED ||
           s == CKPT_E_LIMIT || s == CKPT_E_NOTFOUND || s == CKPT_E_RANGE;
}

/* Exercises everything a reader offers; returns the status of reading `a` (if present). */
static ckpt_status poke_everything(ckpt_reader *r) {
    ckpt_status sa = CKPT_OK;
    ckpt_reader_info info;
    ckpt_reader_get_info(r, &info);
    uint64_t failures = 0;
    ckpt_reader_check_ranges(r, NULL, NULL, &failures);
    for (size_t i = 0; i < ckpt_reader_num_entries(r); i++) {
        const ckpt_entry *e = ckpt_reader_entry(r, i);
        ckpt_error err = {0};
        (void)ckpt_entry_path(e);
        if (ckpt_entry_kind_of(e) == CKPT_ENTRY_TENSOR) {
            ckpt_entry_check_layout(e, &err);
            for (size_t k = 0; k < ckpt_entry_num_chunks(e); k++) {
                ckpt_chunk_info ci;
                ckpt_entry_chunk(e, k, &ci);
                ckpt_entry_check_chunk(r, e, k, &err);
            }
            uint64_t nb = ckpt_entry_nbytes(e);
            if (nb > (1u << 20)) continue;
            uint8_t *buf = malloc(nb + 1);
            ckpt_status s = ckpt_read_tensor(r, e, buf, nb, &err);
            cr_expect(status_is_documented(s) || s == CKPT_E_INVAL, "read '%s' gave %d: %s",
                      ckpt_entry_key(e), s, err.message);
            if (!strcmp(ckpt_entry_key(e), "a")) sa = s;
            ckpt_plan *p = NULL;
            if (ckpt_plan_region(r, e, NULL, NULL, &p, &err) == CKPT_OK) {
                ckpt_plan_execute(r, e, p, buf, nb, &err);
                ckpt_plan_free(p);
            }
            free(buf);
        } else {
            ckpt_object *o = NULL;
            if (ckpt_object_load(r, e, &o, &err) == CKPT_OK) {
                char *json = NULL;
                ckpt_value_to_json(ckpt_object_root(o), &json, &err);
                free(json);
                ckpt_object_free(o);
            }
        }
    }
    return sa;
}

/* =============================================================== the intact base */

Test(badinput, base_is_intact) {
    ckpt_reader *r = open_case("base");
    cr_expect_eq(ckpt_reader_num_entries(r), 3);
    expect_intact_entries(r, "base");
    report_log log;
    expect_ranges(r, 0, &log);
    ckpt_reader_free(r);
}

/* =============================================================== the overlapped walk */

/* Opens a committed case with `threads` index threads (2: the walk overlaps decoding, in
 * lockstep: each batch handed over is walked before the decoder goes on). */
static ckpt_reader *open_case_threads(const char *name, uint32_t threads) {
    char *dir = case_path(name, "ckpt"), *md = case_path(name, "ckpt/.metadata");
    FILE *f = fopen(md, "rb");
    cr_assert(f, "%s", md);
    static uint8_t buf[1 << 16];
    size_t len = fread(buf, 1, sizeof buf, f);
    cr_assert(len > 0 && feof(f), "%s", md);
    fclose(f);
    ckpt_limits lim = {.index_threads = threads};
    ckpt_reader *r = NULL;
    ckpt_error err = {0};
    cr_assert_eq(ck_reader_open_buffer(dir, buf, len, &lim, CKPT_OPEN_LOCKSTEP, &r, &err), CKPT_OK,
                 "%s: %s", dir, err.message);
    free(dir);
    free(md);
    return r;
}

Test(badinput, overlapped_walk_indexes_the_base) {
    ckpt_reader *r = open_case_threads("base", 2);
    cr_expect(r->index_overlapped, "base: the walk should have overlapped decoding");
    expect_intact_entries(r, "base");
    ckpt_reader_free(r);
    r = open_case_threads("base", 1);
    cr_expect(!r->index_overlapped);
    expect_intact_entries(r, "base");
    ckpt_reader_free(r);
}

/* A pickle the overlapped walk must not trust: it is dropped, and the whole walk gives every
 * entry as torch reads it. */
static void expect_overlap_dropped(const char *name) {
    for (uint32_t threads = 1; threads <= 2; threads++) {
        ckpt_reader *r = open_case_threads(name, threads);
        cr_expect(!r->index_overlapped, "%s: the overlapped walk should have been dropped", name);
        cr_expect_eq(ckpt_reader_num_entries(r), 3, "%s", name);
        expect_intact_entries(r, name);
        ckpt_reader_free(r);
    }
}

/* a's chunk list gets its second chunk (APPEND to a memo GET of the list) after the whole
 * state_dict_metadata was handed over: the decoder revokes */
Test(badinput, overlap_late_append) { expect_overlap_dropped("overlap_late_append"); }
/* storage_data pickled before state_dict_metadata: not the walk's order */
Test(badinput, overlap_storage_first) { expect_overlap_dropped("overlap_storage_first"); }
/* a dict stored under "state_dict_metadata" deeper in the pickle, before the real one */
Test(badinput, overlap_decoy_label) { expect_overlap_dropped("overlap_decoy_label"); }

/* =============================================================== chunk layout */

Test(badinput, overlapping_chunks) {
    /* a is (3, 3) with boxes rows [0, 2) and [1, 3): row 1 is stored twice */
    ckpt_reader *r = open_case("overlap");
    const ckpt_entry *a = find(r, "a");
    ckpt_error err = {0};
    cr_expect_eq(ckpt_entry_check_layout(a, &err), CKPT_E_FORMAT, "%s", err.message);
    expect_has(err.message, "'a'");
    expect_has(err.message, "chunks 0 and 1 overlap");
    const char *msg = expect_read_a_fails(r, CKPT_E_FORMAT);
    expect_has(msg, "'a'");
    expect_has(msg, "overlap");
    /* each stored item is itself fine */
    cr_expect_eq(check_chunk_a(r, 0, &err), CKPT_OK, "%s", err.message);
    cr_expect_eq(check_chunk_a(r, 1, &err), CKPT_OK, "%s", err.message);
    report_log log;
    expect_ranges(r, 0, &log);
    expect_rows_of_a(r, 0, 1); /* row 0 comes from chunk 0 only */
    expect_intact_entries(r, "overlap");
    ckpt_reader_free(r);
}

Test(badinput, gap_in_chunks) {
    /* a is (5, 3) but only rows [0, 4) are stored */
    ckpt_reader *r = open_case("gap");
    const ckpt_entry *a = find(r, "a");
    ckpt_error err = {0};
    cr_expect_eq(ckpt_entry_check_layout(a, &err), CKPT_E_FORMAT, "%s", err.message);
    expect_has(err.message, "'a'");
    expect_has(err.message, "12 elements but the tensor has 15");
    const char *msg = expect_read_a_fails(r, CKPT_E_FORMAT);
    expect_has(msg, "'a'");
    expect_has(msg, "cover 12 of the 15");
    /* the covered rows read; a region touching row 4 fails */
    expect_rows_of_a(r, 0, 4);
    int64_t start[2] = {3, 0}, count[2] = {2, 3};
    uint8_t buf[24];
    cr_expect_eq(ckpt_read_region(r, a, start, count, buf, sizeof buf, &err), CKPT_E_FORMAT);
    expect_has(err.message, "cover 3 of the 6");
    ckpt_plan *p = NULL;
    cr_expect_eq(ckpt_plan_region(r, a, start, count, &p, &err), CKPT_E_FORMAT);
    cr_expect_null(p);
    report_log log;
    expect_ranges(r, 0, &log);
    expect_intact_entries(r, "gap");
    ckpt_reader_free(r);
}

Test(badinput, chunk_outside_shape) {
    /* chunk 1 claims rows [3, 5) of a 4-row tensor */
    ckpt_reader *r = open_case("outside_shape");
    const ckpt_entry *a = find(r, "a");
    cr_assert(ckpt_entry_problem(a));
    expect_has(ckpt_entry_problem(a), "chunk 1 lies outside the tensor's shape");
    ckpt_error err = {0};
    cr_expect_eq(ckpt_entry_check_layout(a, &err), CKPT_E_FORMAT);
    expect_has(err.message, "'a'");
    expect_has(err.message, "outside");
    const char *msg = expect_read_a_fails(r, CKPT_E_FORMAT);
    expect_has(msg, "'a'");
    expect_has(msg, "chunk 1 lies outside the tensor's shape");
    expect_intact_entries(r, "outside_shape");
    ckpt_reader_free(r);
}

/* =============================================================== Megatron flattened tensors */

Test(badinput, mcore_repeated_piece) {
    /* a stored as [1, 12] with mcore_data's original shape (12,), and one piece [0, 6) listed
     * 20000 times (a memo reference each): not 20000 boxes, but a problem of `a` */
    ckpt_reader *r = open_case("mcore_repeated_piece");
    const ckpt_entry *a = find(r, "a");
    cr_assert(ckpt_entry_problem(a));
    expect_has(ckpt_entry_problem(a), "stored chunks 0 and 1 overlap");
    cr_expect_eq(ckpt_entry_num_chunks(a), 20000u, "left as stored");
    const char *msg = expect_read_a_fails(r, CKPT_E_FORMAT);
    expect_has(msg, "'a'");
    expect_has(msg, "overlap");
    expect_intact_entries(r, "mcore_repeated_piece");
    ckpt_reader_free(r);
}

Test(badinput, mcore_box_amplification) {
    /* 40-d grid cells and 2048 distinct pieces whose ranges each tile into ~56 boxes: 84 MB
     * of index from 420 KB of pickle, past what the metadata's size allows */
    ckpt_reader *r = open_case("mcore_box_amplification");
    const ckpt_entry *a = find(r, "a");
    cr_assert(ckpt_entry_problem(a));
    expect_has(ckpt_entry_problem(a), "more than the metadata's size allows");
    cr_expect_eq(ckpt_entry_num_chunks(a), 2048u, "left as stored");
    cr_assert_eq(ckpt_entry_ndim(a), 41);
    int64_t start[41] = {0}, count[41];
    for (int d = 0; d < 41; d++)
        count[d] = 1;
    float one;
    ckpt_error err = {0};
    cr_expect_eq(ckpt_read_region(r, a, start, count, &one, sizeof one, &err), CKPT_E_FORMAT);
    expect_has(err.message, "more than the metadata's size allows");
    expect_intact_entries(r, "mcore_box_amplification");
    ckpt_reader_free(r);
}

/* =============================================================== relative_path escapes */

static void expect_path_refused(const char *name) {
    /* chunk 1's relative_path leaves the directory; a readable decoy waits at its target */
    ckpt_reader *r = open_case(name);
    for (uint32_t f = 0; f < ckpt_reader_num_files(r); f++) {
        const char *fn = ckpt_reader_file_name(r, f);
        cr_expect(!strchr(fn, '/') && strcmp(fn, "..") != 0, "%s: data file '%s' interned", name,
                  fn);
    }
    ckpt_chunk_info ci;
    cr_assert_eq(ckpt_entry_chunk(find(r, "a"), 1, &ci), CKPT_OK);
    cr_expect_eq(ci.file_id, -1, "%s: chunk 1 got file #%d", name, ci.file_id);
    cr_assert(ci.problem, "%s: chunk 1 has no problem recorded", name);
    expect_has(ci.problem, "path traversal refused");
    const char *msg = expect_read_a_fails(r, CKPT_E_FORMAT);
    expect_has(msg, "path traversal refused");
    expect_has(msg, "key 'a'");
    expect_has(msg, "chunk at offset 2");
    ckpt_error err;
    cr_expect_eq(check_chunk_a(r, 1, &err), CKPT_E_FORMAT, "%s", err.message);
    expect_has(err.message, "path traversal refused");
    cr_expect_eq(check_chunk_a(r, 0, &err), CKPT_OK, "%s", err.message);
    report_log log;
    expect_ranges(r, 1, &log);
    cr_expect_str_eq(log.key[0], "a");
    cr_expect_eq(log.code[0], CKPT_E_FORMAT);
    expect_has(log.msg[0], "'a'");
    expect_has(log.msg[0], "path traversal refused");
    expect_rows_of_a(r, 0, 2);
    expect_intact_entries(r, name);
    ckpt_reader_free(r);
}

Test(badinput, relative_path_dotdot) { expect_path_refused("path_dotdot"); }
Test(badinput, relative_path_absolute) { expect_path_refused("path_absolute"); }
Test(badinput, relative_path_subdir) { expect_path_refused("path_subdir"); }

/* =============================================================== byte ranges */

static void expect_range_past_eof(const char *name, const char *offset_text) {
    ckpt_reader *r = open_case(name);
    report_log log;
    expect_ranges(r, 1, &log);
    cr_expect_str_eq(log.key[0], "a");
    cr_expect_eq(log.code[0], CKPT_E_RANGE, "%s: %s", name, log.msg[0]);
    expect_has(log.msg[0], "__0_1.distcp");
    expect_has(log.msg[0], offset_text);
    ckpt_error err;
    cr_expect_eq(check_chunk_a(r, 1, &err), CKPT_E_RANGE, "%s: check_chunk: %s", name, err.message);
    const char *msg = expect_read_a_fails(r, CKPT_E_RANGE);
    expect_has(msg, "__0_1.distcp");
    expect_has(msg, "key 'a'");
    expect_has(msg, offset_text);
    expect_rows_of_a(r, 0, 2);
    expect_intact_entries(r, name);
    ckpt_reader_free(r);
}

Test(badinput, range_offset_past_eof) { expect_range_past_eof("range_offset_past_eof", "1587"); }
Test(badinput, range_length_past_eof) { expect_range_past_eof("range_length_past_eof", "1577"); }
Test(badinput, range_huge_offset_and_length) {
    expect_range_past_eof("range_huge", "9223372036854775807");
}

Test(badinput, range_negative_offset) {
    ckpt_reader *r = open_case("range_negative");
    ckpt_chunk_info ci;
    cr_assert_eq(ckpt_entry_chunk(find(r, "a"), 1, &ci), CKPT_OK);
    cr_expect_eq(ci.file_id, -1);
    cr_assert(ci.problem);
    expect_has(ci.problem, "offset");
    const char *msg = expect_read_a_fails(r, CKPT_E_FORMAT);
    expect_has(msg, "key 'a'");
    expect_has(msg, "relative_path/offset/length");
    report_log log;
    expect_ranges(r, 1, &log);
    cr_expect_eq(log.code[0], CKPT_E_FORMAT);
    expect_rows_of_a(r, 0, 2);
    expect_intact_entries(r, "range_negative");
    ckpt_reader_free(r);
}

Test(badinput, range_into_middle_of_another_item) {
    /* chunk 1 of a: bytes [100, 1477) of b's item, neither a zip nor a safetensors blob */
    ckpt_reader *r = open_case("range_mid_item");
    report_log log;
    expect_ranges(r, 0, &log); /* the range itself lies inside the file */
    char file[256];
    uint64_t off, len;
    chunk_of_a(r, 1, file, sizeof file, &off, &len);
    cr_expect_eq(off, 100);
    ckpt_error err;
    cr_expect_eq(check_chunk_a(r, 1, &err), CKPT_E_FORMAT, "check_chunk gave %d: %s", err.code,
                 err.message);
    expect_has(err.message, file);
    const char *msg = expect_read_a_fails(r, CKPT_E_FORMAT);
    expect_has(msg, file);
    expect_has(msg, "offset 100");
    expect_has(msg, "key 'a'");
    expect_rows_of_a(r, 0, 2);
    expect_intact_entries(r, "range_mid_item");
    ckpt_reader_free(r);
}

/* =============================================================== metadata vs. stored items */

Test(badinput, dtype_disagrees_with_item) {
    /* metadata says float64, the items hold float32 */
    ckpt_reader *r = open_case("dtype_mismatch");
    cr_expect_eq(ckpt_entry_dtype(find(r, "a")), CKPT_DTYPE_FLOAT64);
    ckpt_error err;
    for (size_t k = 0; k < 2; k++) {
        cr_expect_eq(check_chunk_a(r, k, &err), CKPT_E_FORMAT, "chunk %zu: %s", k, err.message);
        expect_has(err.message, "stores float32, metadata says float64");
        expect_has(err.message, "key 'a'");
        expect_has(err.message, ".distcp");
        expect_has(err.message, "offset 0");
    }
    const char *msg = expect_read_a_fails(r, CKPT_E_FORMAT);
    expect_has(msg, "stores float32, metadata says float64");
    report_log log;
    expect_ranges(r, 0, &log);
    expect_intact_entries(r, "dtype_mismatch");
    ckpt_reader_free(r);
}

Test(badinput, chunk_shape_disagrees_with_item) {
    /* chunk 1's box is (2, 3), its item holds a (3, 2) tensor with the same bytes */
    ckpt_reader *r = open_case("shape_mismatch");
    ckpt_error err;
    cr_expect_eq(check_chunk_a(r, 1, &err), CKPT_E_FORMAT, "%s", err.message);
    expect_has(err.message, "different shape than its chunk box");
    expect_has(err.message, "key 'a'");
    cr_expect_eq(check_chunk_a(r, 0, &err), CKPT_OK, "%s", err.message);
    const char *msg = expect_read_a_fails(r, CKPT_E_FORMAT);
    expect_has(msg, "different shape than its chunk box");
    expect_has(msg, ".distcp");
    expect_rows_of_a(r, 0, 2);
    expect_intact_entries(r, "shape_mismatch");
    ckpt_reader_free(r);
}

Test(badinput, missing_storage_entry) {
    ckpt_reader *r = open_case("missing_storage");
    ckpt_chunk_info ci;
    cr_assert_eq(ckpt_entry_chunk(find(r, "a"), 1, &ci), CKPT_OK);
    cr_expect_eq(ci.file_id, -1);
    cr_assert(ci.problem);
    expect_has(ci.problem, "no storage_data entry");
    const char *msg = expect_read_a_fails(r, CKPT_E_FORMAT);
    expect_has(msg, "no storage_data entry for this chunk");
    expect_has(msg, "key 'a'");
    expect_has(msg, "chunk at offset 2");
    ckpt_error err;
    cr_expect_eq(check_chunk_a(r, 1, &err), CKPT_E_FORMAT);
    report_log log;
    expect_ranges(r, 1, &log);
    expect_has(log.msg[0], "no storage_data entry");
    expect_rows_of_a(r, 0, 2);
    expect_intact_entries(r, "missing_storage");
    ckpt_reader_free(r);
}

Test(badinput, unknown_dtype_global) {
    /* TensorProperties.dtype is the global torch.float7_e3m3 */
    ckpt_reader *r = open_case("unknown_dtype");
    const ckpt_entry *a = find(r, "a");
    cr_expect_eq(ckpt_entry_dtype(a), CKPT_DTYPE_INVALID);
    cr_assert(ckpt_entry_problem(a));
    expect_has(ckpt_entry_problem(a), "float7_e3m3");
    ckpt_error err = {0};
    uint8_t buf[64];
    cr_expect_eq(ckpt_read_tensor(r, a, buf, sizeof buf, &err), CKPT_E_FORMAT);
    expect_has(err.message, "'a'");
    expect_has(err.message, "unknown or missing dtype 'float7_e3m3'");
    cr_expect_eq(ckpt_entry_check_layout(a, &err), CKPT_E_FORMAT);
    cr_expect_eq(check_chunk_a(r, 0, &err), CKPT_E_FORMAT);
    expect_has(err.message, "float7_e3m3");
    ckpt_reader_info info;
    ckpt_reader_get_info(r, &info);
    cr_expect_eq(info.num_tensors, 2);
    expect_intact_entries(r, "unknown_dtype");
    ckpt_reader_free(r);
}

Test(badinput, wrong_storage_metadata_class) {
    /* state_dict_metadata['a'] is a ChunkStorageMetadata */
    ckpt_reader *r = open_case("wrong_storage_class");
    const ckpt_entry *a = find(r, "a");
    cr_assert(ckpt_entry_problem(a));
    expect_has(ckpt_entry_problem(a), "ChunkStorageMetadata");
    ckpt_object *o = NULL;
    ckpt_error err = {0};
    ckpt_status s = ckpt_object_load(r, a, &o, &err);
    cr_expect_eq(s, CKPT_E_FORMAT, "load gave %d: %s", s, err.message);
    expect_has(err.message, "'a'");
    expect_has(err.message, "ChunkStorageMetadata");
    ckpt_object_free(o);
    expect_intact_entries(r, "wrong_storage_class");
    ckpt_reader_free(r);
}

/* =============================================================== whole-file defects */

Test(badinput, root_is_a_dict) {
    expect_open_fails("root_dict", false, CKPT_E_FORMAT, "not a DCP Metadata pickle");
}

Test(badinput, root_is_another_class) {
    expect_open_fails("root_other_class", false, CKPT_E_FORMAT,
                      "not a DCP Metadata pickle (root is TensorStorageMetadata");
}

Test(badinput, state_dict_metadata_not_a_dict) {
    expect_open_fails("sdm_not_dict", false, CKPT_E_FORMAT,
                      "state_dict_metadata is missing or not a dict");
}

Test(badinput, hostile_deep_nesting) {
    expect_open_fails("deep_nesting", true, CKPT_E_LIMIT, "nested too deeply (limit 256)");
    expect_open_fails("deep_nesting_metadata", true, CKPT_E_LIMIT, "nested too deeply (limit 256)");
    /* a larger bound lets the 1500 lists decode: the root is then not a Metadata */
    char *dir = case_path("deep_nesting", "ckpt");
    ckpt_limits lim = {.max_depth = 4096};
    ckpt_open_options o = {.limits = &lim};
    ckpt_reader *r = NULL;
    ckpt_error err = {0};
    cr_expect_eq(ckpt_reader_open(dir, &o, &r, &err), CKPT_E_FORMAT, "%s", err.message);
    expect_has(err.message, "not a DCP Metadata pickle");
    cr_expect_null(r);
    free(dir);
}

Test(badinput, hostile_huge_length_prefix) {
    expect_open_fails("huge_binunicode8", true, CKPT_E_FORMAT,
                      "pickle offset 2: truncated: argument needs 1152921504606846976 bytes");
    expect_open_fails("bitflip_frame", true, CKPT_E_FORMAT, "(opcode 0x95 FRAME)");
}

Test(badinput, hostile_memo_abuse) {
    expect_open_fails("memo_get_unset", true, CKPT_E_FORMAT, "memo key 12345 not found");
    expect_open_fails("memo_get_unset", true, CKPT_E_FORMAT, "LONG_BINGET");
    expect_open_fails("memo_put_huge", true, CKPT_E_LIMIT, "memo index 4294967295 too large");
}

Test(badinput, hostile_unknown_opcode) {
    char *md = case_path("unknown_opcode", "ckpt/.metadata");
    size_t n;
    free(tu_read_file(md, &n));
    char needle[64];
    snprintf(needle, sizeof needle, "pickle offset %zu: unknown opcode 0xff", n - 1);
    expect_open_fails("unknown_opcode", true, CKPT_E_FORMAT, needle);
    free(md);
}

Test(badinput, bitflipped_field_name) {
    expect_open_fails("bitflip_field", false, CKPT_E_FORMAT,
                      "not a DCP Metadata pickle (root is Metadata");
}

Test(badinput, metadata_size_limit) {
    char *dir = case_path("base", "ckpt");
    ckpt_limits lim = {.max_metadata_bytes = 100};
    ckpt_open_options o = {.limits = &lim};
    ckpt_reader *r = NULL;
    ckpt_error err = {0};
    cr_expect_eq(ckpt_reader_open(dir, &o, &r, &err), CKPT_E_LIMIT, "%s", err.message);
    expect_has(err.message, ".metadata");
    expect_has(err.message, "size limit of 100");
    cr_expect_null(r);
    free(dir);
}

Test(badinput, missing_metadata_and_directory) {
    tmpckpt t;
    tmp_copy_base(&t);
    char p[4096];
    tmp_path(&t, ".metadata", p, sizeof p);
    cr_assert_eq(unlink(p), 0);
    ckpt_reader *r = NULL;
    ckpt_error err = {0};
    cr_expect_eq(ckpt_reader_open(t.dir, NULL, &r, &err), CKPT_E_NOTFOUND, "%s", err.message);
    expect_has(err.message, t.dir);
    expect_has(err.message, "no .metadata");
    cr_expect_null(r);
    /* .metadata that is a directory */
    cr_assert_eq(mkdir(p, 0700), 0);
    cr_expect_eq(ckpt_reader_open(t.dir, NULL, &r, &err), CKPT_E_IO, "%s", err.message);
    expect_has(err.message, p);
    cr_expect_null(r);
    tmp_remove(&t);
    /* no directory at all */
    cr_expect_eq(ckpt_reader_open(t.dir, NULL, &r, &err), CKPT_E_NOTFOUND, "%s", err.message);
    expect_has(err.message, t.dir);
    cr_expect_null(r);
}

Test(badinput, truncated_metadata_every_offset, .timeout = 240) {
    tmpckpt t;
    tmp_copy_base(&t);
    char p[4096];
    tmp_path(&t, ".metadata", p, sizeof p);
    size_t n;
    uint8_t *md = tu_read_file(p, &n);
    cr_assert_gt(n, 100);
    for (size_t k = 0; k < n; k++) {
        tu_write_file(p, md, k);
        ckpt_reader *r = (ckpt_reader *)&r;
        ckpt_error err = {0};
        ckpt_status s = ckpt_reader_open(t.dir, NULL, &r, &err);
        cr_expect_eq(s, CKPT_E_FORMAT, "truncated to %zu of %zu bytes: %d: %s", k, n, s,
                     err.message);
        cr_expect_null(r, "truncated to %zu bytes: *out not NULL", k);
        if (s == CKPT_OK && r) ckpt_reader_free(r);
        if (k < 2) { /* not even the PROTO header: refused without running the decoder */
            if (!strstr(err.message, p) || !strstr(err.message, "not a pickle of protocol 2-5"))
                cr_expect_fail("truncated to %zu bytes: message \"%s\"", k, err.message);
            continue;
        }
        if (!strstr(err.message, p) || !strstr(err.message, "pickle offset") ||
            !strstr(err.message, "truncated")) {
            cr_expect_fail("truncated to %zu bytes: message \"%s\" should name %s, the pickle "
                           "offset and the truncation",
                           k, err.message, p);
        }
    }
    free(md);
    tmp_remove(&t);
}

Test(badinput, bitflipped_metadata_every_byte, .timeout = 240) {
    /* every byte flipped two ways: whatever the reader makes of it, nothing crashes or leaks,
     * and failures use documented statuses */
    tmpckpt t;
    tmp_copy_base(&t);
    char p[4096];
    tmp_path(&t, ".metadata", p, sizeof p);
    size_t n;
    uint8_t *md = tu_read_file(p, &n);
    size_t opened = 0, failed = 0;
    for (size_t k = 0; k < n; k++) {
        for (int way = 0; way < 2; way++) {
            uint8_t saved = md[k];
            md[k] ^= way ? 0xFF : (uint8_t)(1u << (k % 8));
            tu_write_file(p, md, n);
            md[k] = saved;
            ckpt_reader *r = NULL;
            ckpt_error err = {0};
            ckpt_status s = ckpt_reader_open(t.dir, NULL, &r, &err);
            cr_expect(status_is_documented(s), "flip at %zu: status %d: %s", k, s, err.message);
            if (s != CKPT_OK) {
                failed++;
                cr_expect_null(r);
                if (!strstr(err.message, p))
                    cr_expect_fail("flip at %zu: message \"%s\" does not name %s", k, err.message,
                                   p);
                continue;
            }
            opened++;
            poke_everything(r);
            ckpt_reader_free(r);
        }
    }
    cr_expect_gt(failed, 0);
    cr_log_info("bit flips of .metadata: %zu opened, %zu refused", opened, failed);
    free(md);
    tmp_remove(&t);
}

/* =============================================================== damaged data files */

Test(badinput, truncated_distcp) {
    tmpckpt t;
    tmp_copy_base(&t);
    ckpt_reader *r = open_ok(t.dir);
    char file[256], p[4096];
    uint64_t off, len;
    chunk_of_a(r, 1, file, sizeof file, &off, &len);
    ckpt_reader_free(r);
    tmp_path(&t, file, p, sizeof p);
    cr_assert_eq(truncate(p, (off_t)(off + len / 2)), 0);
    r = open_ok(t.dir); /* data files are only opened when needed */
    report_log log;
    expect_ranges(r, 1, &log);
    cr_expect_eq(log.code[0], CKPT_E_RANGE, "%s", log.msg[0]);
    expect_has(log.msg[0], file);
    ckpt_error err;
    cr_expect_eq(check_chunk_a(r, 1, &err), CKPT_E_RANGE, "check_chunk gave %d: %s", err.code,
                 err.message);
    const char *msg = expect_read_a_fails(r, CKPT_E_RANGE);
    expect_has(msg, file);
    expect_has(msg, "key 'a'");
    expect_rows_of_a(r, 0, 2);
    expect_intact_except(r, "base", "a");
    ckpt_reader_free(r);
    tmp_remove(&t);
}

Test(badinput, missing_distcp) {
    tmpckpt t;
    tmp_copy_base(&t);
    ckpt_reader *r = open_ok(t.dir);
    char file[256], p[4096];
    uint64_t off, len;
    chunk_of_a(r, 1, file, sizeof file, &off, &len);
    ckpt_reader_free(r);
    tmp_path(&t, file, p, sizeof p);
    cr_assert_eq(unlink(p), 0);
    r = open_ok(t.dir);
    report_log log;
    expect_ranges(r, 2, &log); /* the file, and the chunk inside it */
    for (size_t i = 0; i < log.n; i++) {
        cr_expect_eq(log.code[i], CKPT_E_NOTFOUND, "%s", log.msg[i]);
        expect_has(log.msg[i], file);
    }
    ckpt_error err;
    cr_expect_eq(check_chunk_a(r, 1, &err), CKPT_E_NOTFOUND, "%s", err.message);
    const char *msg = expect_read_a_fails(r, CKPT_E_NOTFOUND);
    expect_has(msg, p);
    expect_has(msg, "'a'");
    expect_rows_of_a(r, 0, 2);
    expect_intact_except(r, "base", "a");
    ckpt_reader_free(r);
    tmp_remove(&t);
}

/* Offset of the first central directory header of the zip item [off, off+len) in `buf`
 * (the whole file), from its end-of-central-directory record (zip64 aware). */
static uint64_t central_directory_of(const uint8_t *buf, uint64_t off, uint64_t len) {
    cr_assert_geq(len, 22);
    const uint8_t *end = buf + off + len - 22;
    cr_assert(memcmp(end, "PK\x05\x06", 4) == 0, "item has no plain EOCD at its end");
    uint64_t cd = (uint64_t)end[16] | (uint64_t)end[17] << 8 | (uint64_t)end[18] << 16 |
                  (uint64_t)end[19] << 24;
    if (cd == 0xFFFFFFFFu) {
        const uint8_t *loc = end - 20;
        cr_assert(memcmp(loc, "PK\x06\x07", 4) == 0);
        uint64_t z = 0, c = 0;
        for (int i = 7; i >= 0; i--)
            z = z << 8 | loc[8 + i];
        const uint8_t *z64 = buf + off + z;
        cr_assert(memcmp(z64, "PK\x06\x06", 4) == 0);
        for (int i = 7; i >= 0; i--)
            c = c << 8 | z64[48 + i];
        cd = c;
    }
    cr_assert(memcmp(buf + off + cd, "PK\x01\x02", 4) == 0, "no central directory at %llu",
              (unsigned long long)cd);
    return off + cd;
}

Test(badinput, zip_central_directory_flips, .timeout = 240) {
    tmpckpt t;
    tmp_copy_base(&t);
    ckpt_reader *r = open_ok(t.dir);
    char file[256], p[4096];
    uint64_t off, len;
    chunk_of_a(r, 1, file, sizeof file, &off, &len);
    ckpt_reader_free(r);
    tmp_path(&t, file, p, sizeof p);
    size_t n;
    uint8_t *buf = tu_read_file(p, &n);
    cr_assert_geq(n, off + len);
    uint64_t cd = central_directory_of(buf, off, len);

    /* the signature of the first central directory header */
    buf[cd] ^= 0xFF;
    tu_write_file(p, buf, n);
    buf[cd] ^= 0xFF;
    r = open_ok(t.dir);
    ckpt_error err;
    cr_expect_eq(check_chunk_a(r, 1, &err), CKPT_E_FORMAT, "%s", err.message);
    expect_has(err.message, file);
    expect_has(err.message, "key 'a'");
    const char *msg = expect_read_a_fails(r, CKPT_E_FORMAT);
    expect_has(msg, file);
    expect_rows_of_a(r, 0, 2);
    expect_intact_except(r, "base", "a");
    ckpt_reader_free(r);

    /* every byte of the central directory and end records: never a crash, and never wrong
     * bytes reported as success */
    ref_fixture base = load_ref("base");
    const uint8_t *want = NULL;
    for (size_t i = 0; i < base.n; i++)
        if (!strcmp(base.entries[i].key, "a")) want = base.bin + base.entries[i].offset;
    cr_assert(want);
    size_t ok = 0, bad = 0;
    for (uint64_t k = cd; k < off + len; k++) {
        buf[k] ^= 0xFF;
        tu_write_file(p, buf, n);
        buf[k] ^= 0xFF;
        r = open_ok(t.dir);
        uint8_t got[48];
        memset(&err, 0, sizeof err);
        ckpt_status s = ckpt_read_tensor(r, find(r, "a"), got, sizeof got, &err);
        cr_expect(status_is_documented(s), "flip at %llu: status %d: %s", (unsigned long long)k, s,
                  err.message);
        if (s == CKPT_OK) {
            ok++;
            cr_expect(memcmp(got, want, 48) == 0,
                      "flip at file offset %llu (central directory +%llu): 'a' read OK but "
                      "differs from torch's values",
                      (unsigned long long)k, (unsigned long long)(k - cd));
        } else {
            bad++;
            if (!strstr(err.message, file))
                cr_expect_fail("flip at %llu: message \"%s\" does not name %s",
                               (unsigned long long)k, err.message, file);
        }
        poke_everything(r);
        ckpt_reader_free(r);
    }
    cr_log_info("central directory flips: %zu harmless, %zu refused", ok, bad);
    ref_free(&base);
    free(buf);
    tmp_remove(&t);
}

Test(badinput, item_every_byte_flipped, .timeout = 240) {
    /* every byte of chunk 1's whole item (data bytes included, which no checksum guards):
     * no crash, documented statuses only */
    tmpckpt t;
    tmp_copy_base(&t);
    ckpt_reader *r = open_ok(t.dir);
    char file[256], p[4096];
    uint64_t off, len;
    chunk_of_a(r, 1, file, sizeof file, &off, &len);
    ckpt_reader_free(r);
    tmp_path(&t, file, p, sizeof p);
    size_t n;
    uint8_t *buf = tu_read_file(p, &n);
    for (uint64_t k = off; k < off + len; k++) {
        buf[k] ^= 0xFF;
        tu_write_file(p, buf, n);
        buf[k] ^= 0xFF;
        r = open_ok(t.dir);
        ckpt_status s = poke_everything(r);
        cr_expect(status_is_documented(s), "flip at %llu: status %d", (unsigned long long)k, s);
        ckpt_reader_free(r);
    }
    free(buf);
    tmp_remove(&t);
}

/* ------------------------------------------------------------------ shared-reference DAGs */

/* step's stored value is 40 levels of `a = [a, a]` (1.5 KB, 2**40 lists as a tree): it
 * converts, its renderings stop at the render budget (16 MiB, 16 Mi nodes) with CKPT_E_LIMIT
 * — the unbounded renderer needed 16 s and 1 GB, and would return a text — and the rest of
 * the checkpoint reads as torch reads it.  The .timeout guards against a hang only. */
Test(badinput, shared_dag_value_render_is_bounded, .timeout = 60) {
    ckpt_reader *r = open_case("dag_value");
    expect_intact_except(r, "dag_value", "step");
    ckpt_object *o = NULL;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_object_load(r, find(r, "step"), &o, &err), CKPT_OK, "%s", err.message);
    for (int json = 0; json < 2; json++) {
        char *s = NULL;
        ckpt_status st = json ? ckpt_value_to_json(ckpt_object_root(o), &s, &err)
                              : ckpt_value_to_text(ckpt_object_root(o), &s, &err);
        cr_expect_eq(st, CKPT_E_LIMIT, "%s: %d %s", json ? "json" : "text", st, err.message);
        cr_expect_null(s);
        expect_has(err.message, "too large to render");
    }
    ckpt_object_free(o);
    ckpt_reader_free(r);
}

/* The same through the tree the mount serves: lookup and getattr report size 0 and render
 * the value once in all (the failure kept: the tree's render counter stays at 1 over 100
 * getattr, the open and the read), opening and reading fail with CKPT_E_LIMIT and a message
 * naming the key. */
Test(badinput, shared_dag_value_in_the_tree, .timeout = 60) {
    char *dir = case_path("dag_value", "ckpt");
    ckpt_tree *t = NULL;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_tree_open(dir, NULL, &t, &err), CKPT_OK, "%s", err.message);
    free(dir);
    ckpt_tree_stat st;
    cr_assert_eq(ckpt_tree_lookup(t, CKPT_TREE_ROOT, "step", &st, &err), CKPT_OK, "%s",
                 err.message);
    cr_expect_eq(st.size, 0);
    cr_expect_eq(t->values.renders, 1, "%llu renders", (unsigned long long)t->values.renders);
    for (int i = 0; i < 100; i++)
        cr_assert_eq(ckpt_tree_getattr(t, st.ino, &st, &err), CKPT_OK, "%s", err.message);
    cr_expect_eq(ckpt_tree_open_file(t, st.ino, &err), CKPT_E_LIMIT, "%s", err.message);
    expect_has(err.message, "value 'step'");
    expect_has(err.message, "too large to render");
    ckpt_tree_scratch s = {0};
    const ckpt_tree_seg *segs;
    size_t nsegs;
    cr_expect_eq(ckpt_tree_read(t, st.ino, 0, 4096, 0, 0, &s, &segs, &nsegs, &err), CKPT_E_LIMIT);
    expect_has(err.message, "value 'step'");
    cr_expect_eq(t->values.renders, 1, "the failure is not kept: %llu renders",
                 (unsigned long long)t->values.renders);
    ckpt_tree_scratch_release(&s);
    ckpt_tree_free(t);
}

/* `ckpt dump-metadata` of a .metadata holding that DAG: CKPT_E_LIMIT at its budget (16 MiB at
 * least, proportional to the decoded document), not 2**40 lists. */
Test(badinput, shared_dag_metadata_dump_is_bounded, .timeout = 60) {
    char *dir = case_path("dag_metadata", "ckpt");
    char *json = NULL;
    ckpt_error err = {0};
    ckpt_status st = ckpt_metadata_dump_json(dir, NULL, &json, &err);
    cr_expect_eq(st, CKPT_E_LIMIT, "%d %s", st, err.message);
    cr_expect_null(json);
    expect_has(err.message, ".metadata: pickle too large to render as JSON");
    free(dir);
}
