/* test_layout.c — ckpt_shard_box against torch.chunk semantics: for every size 0..17 and
 * N 1..9 the boxes of all ranks tile the dimension in rank order, each is ceil(size/N) rows
 * except a shorter last non-empty one, and ranks past the end are empty at size. */
#include <criterion/criterion.h>

#include "ckpt.h"
#include "fixture_ref.h"

#include <stdio.h>
#include <string.h>

Test(layout, torch_chunk_semantics) {
    for (int64_t size = 0; size <= 17; size++) {
        for (uint32_t n = 1; n <= 9; n++) {
            int64_t chunk = (size + n - 1) / n, next = 0;
            for (uint32_t r = 0; r < n; r++) {
                int64_t shape[2] = {3, size}, start[2], count[2];
                cr_assert_eq(ckpt_shard_box(2, shape, 1, n, r, start, count), CKPT_OK);
                cr_assert_eq(start[0], 0);
                cr_assert_eq(count[0], 3);
                cr_assert_eq(start[1], next, "size %lld n %u rank %u", (long long)size, n, r);
                int64_t want = size - next < chunk ? size - next : chunk;
                cr_assert_eq(count[1], want, "size %lld n %u rank %u", (long long)size, n, r);
                next += count[1];
            }
            cr_assert_eq(next, size);
        }
    }
}

Test(layout, known_uneven_case) {
    /* torch.chunk(torch.arange(5), 4) -> [0,1] [2,3] [4]  + DTensor pads one empty shard */
    int64_t shape[1] = {5}, start[1], count[1];
    const int64_t want_start[4] = {0, 2, 4, 5}, want_count[4] = {2, 2, 1, 0};
    for (uint32_t r = 0; r < 4; r++) {
        cr_assert_eq(ckpt_shard_box(1, shape, 0, 4, r, start, count), CKPT_OK);
        cr_assert_eq(start[0], want_start[r]);
        cr_assert_eq(count[0], want_count[r]);
    }
}

Test(layout, replicated_and_invalid) {
    int64_t shape[2] = {4, 6}, start[2], count[2];
    cr_assert_eq(ckpt_shard_box(2, shape, 2, 8, 7, start, count), CKPT_OK);
    cr_assert(start[0] == 0 && start[1] == 0 && count[0] == 4 && count[1] == 6);
    cr_assert_eq(ckpt_shard_box(0, NULL, 0, 3, 1, NULL, NULL), CKPT_OK); /* 0-d: replicated */
    cr_assert_eq(ckpt_shard_box(2, shape, 0, 0, 0, start, count), CKPT_E_INVAL);
    cr_assert_eq(ckpt_shard_box(2, shape, 0, 4, 4, start, count), CKPT_E_INVAL);
    cr_assert_eq(ckpt_shard_box(2, shape, -1, 4, 0, start, count), CKPT_E_INVAL);
}

/* ------------------------------------------------------------------ layout maps */

static ckpt_status map_parse(const char *json, uint32_t n, ckpt_layout_map **m, ckpt_error *err) {
    return ckpt_layout_map_parse(json, strlen(json), n, m, err);
}

static void expect_spec(const ckpt_layout *l, const char *want) {
    cr_assert_not_null(l, "no layout, wanted %s", want);
    char got[CKPT_LAYOUT_SPEC_MAX];
    ckpt_layout_format(l, got, sizeof got);
    cr_expect_str_eq(got, want);
}

Test(layout, map_refuses_bad_text) {
    ckpt_layout_map *m = NULL;
    ckpt_error err = {0};
    cr_assert_eq(map_parse("[1]", 4, &m, &err), CKPT_E_FORMAT);
    cr_expect(strstr(err.message, "not a JSON object"), "%s", err.message);
    cr_assert_eq(map_parse("{\"a\": \"dim0\"", 4, &m, &err), CKPT_E_FORMAT);
    cr_assert_eq(map_parse("{\"a\": 3}", 4, &m, &err), CKPT_E_INVAL);
    cr_expect(strstr(err.message, "'a'") && strstr(err.message, "not a string"), "%s", err.message);
    cr_assert_eq(map_parse("{\"w\": \"2x3:R,S0\"}", 4, &m, &err), CKPT_E_INVAL);
    cr_expect(strstr(err.message, "'w'") && strstr(err.message, "6 ranks, not 4"), "%s",
              err.message);
    cr_assert_eq(map_parse("{\"w\": \"4:Q0\"}", 4, &m, &err), CKPT_E_INVAL);
    cr_expect(strstr(err.message, "member 'w'"), "%s", err.message);
    cr_assert_eq(map_parse("{\"a\\u0000b\": \"dim0\"}", 4, &m, &err), CKPT_E_INVAL);
    cr_assert_eq(map_parse("{\"a\": \"dim0\"}", 0, &m, &err), CKPT_E_INVAL);
    cr_assert_eq(ckpt_layout_map_parse("{}", CKPT_LAYOUT_MAP_MAX_BYTES + 1ull, 4, &m, &err),
                 CKPT_E_LIMIT);
    /* err may be NULL: the status stays */
    cr_assert_eq(map_parse("{\"w\": \"2x3:R,S0\"}", 4, &m, NULL), CKPT_E_INVAL);
    cr_assert_null(m);
    cr_assert_eq(map_parse("{}", 4, &m, &err), CKPT_OK, "%s", err.message);
    cr_assert_null(ckpt_layout_map_default(m));
    ckpt_layout_map_free(m);
}

/* Entries of a torch-written checkpoint take the longest member naming their key, their path
 * or a directory of it, else `*`, else the caller's default. */
Test(layout, map_finds_the_longest_member) {
    ref_fixture fx;
    cr_assert_eq(ref_load("fsdp2_ws2", &fx), 0);
    ckpt_reader *r = NULL;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_reader_open(fx.ckpt_dir, NULL, &r, &err), CKPT_OK, "%s", err.message);
    /* a tensor under a directory with another entry beside it */
    const ckpt_entry *a = NULL, *b = NULL;
    char dir[1024] = "";
    for (size_t i = 0; i < ckpt_reader_num_entries(r) && !b; i++) {
        const ckpt_entry *e = ckpt_reader_entry(r, i);
        const char *p = ckpt_entry_path(e), *slash = strrchr(p, '/');
        if (!slash) continue;
        if (!a) {
            a = e;
            snprintf(dir, sizeof dir, "%.*s", (int)(slash - p), p);
        } else if (strncmp(p, dir, strlen(dir)) == 0 && p[strlen(dir)] == '/') {
            b = e;
        }
    }
    cr_assert_not_null(b, "no two entries in one directory");
    char json[4096];
    snprintf(json, sizeof json, "{\"%s\": \"2x2:R,S0\", \"%s\": \"dim1\", \"%s\": \"4:S0\"}", dir,
             ckpt_entry_key(a), dir[0] ? "nothing/here" : "x");
    ckpt_layout_map *m = NULL;
    cr_assert_eq(map_parse(json, 4, &m, &err), CKPT_OK, "%s", err.message);
    ckpt_layout def;
    cr_assert_eq(ckpt_layout_parse("4:S0", &def, &err), CKPT_OK);
    /* a: its key (shorter than the directory? the longest wins: compare lengths) */
    const ckpt_layout *la = ckpt_layout_map_find(m, a, &def);
    expect_spec(la, strlen(ckpt_entry_key(a)) >= strlen(dir) ? "4:S1" : "2x2:R,S0");
    expect_spec(ckpt_layout_map_find(m, b, &def), "2x2:R,S0");
    /* an entry outside the directory: the caller's default, then `*` once there is one */
    const ckpt_entry *c = NULL;
    for (size_t i = 0; i < ckpt_reader_num_entries(r) && !c; i++) {
        const ckpt_entry *e = ckpt_reader_entry(r, i);
        const char *p = ckpt_entry_path(e);
        if (e != a && strcmp(ckpt_entry_key(e), ckpt_entry_key(a)) != 0 &&
            !(strncmp(p, dir, strlen(dir)) == 0 && p[strlen(dir)] == '/'))
            c = e;
    }
    cr_assert_not_null(c);
    cr_assert_eq(ckpt_layout_map_find(m, c, &def), &def);
    cr_assert_null(ckpt_layout_map_find(m, c, NULL));
    ckpt_layout_map_free(m);
    /* a directory is matched whole: "dir" does not name "dirx/..." */
    snprintf(json, sizeof json, "{\"*\": \"2:S0s2\", \"%.*s\": \"dim0\"}", (int)strlen(dir) - 1,
             dir);
    cr_assert_eq(map_parse(json, 2, &m, &err), CKPT_OK, "%s", err.message);
    expect_spec(ckpt_layout_map_find(m, b, &def), "2:S0s2");
    expect_spec(ckpt_layout_map_default(m), "2:S0s2");
    ckpt_layout_map_free(m);
    ckpt_reader_free(r);
    ref_free(&fx);
}
