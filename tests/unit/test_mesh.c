/* test_mesh.c — layouts (ckpt.h): every line of mesh_vectors (written by gen_mesh_vectors.py
 * with real DTensor under gloo) against ckpt_layout_shard_* and ckpt_layout_boxes: the
 * boxes, expanded in order, hold exactly the element indices the rank's local tensor holds,
 * with torch's local shape and global offset; plus spec parsing, formatting and errors, and
 * ckpt_shard_box as the one-box case of `<N>:S<d>`. */
#include <criterion/criterion.h>

#include "ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_list(const char *s, int64_t *v) {
    if (strcmp(s, "-") == 0) return 0;
    int n = 0;
    for (const char *p = s; *p;) {
        v[n++] = strtoll(p, (char **)&p, 10);
        if (*p == ',') p++;
    }
    return n;
}

/* "0-5,12-17" -> the indices, in order */
static size_t parse_runs(const char *s, int64_t *v, size_t cap) {
    if (strcmp(s, "-") == 0) return 0;
    size_t n = 0;
    for (const char *p = s; *p;) {
        int64_t a = strtoll(p, (char **)&p, 10), b = a;
        if (*p == '-') b = strtoll(p + 1, (char **)&p, 10);
        for (int64_t x = a; x <= b; x++) {
            cr_assert(n < cap);
            v[n++] = x;
        }
        if (*p == ',') p++;
    }
    return n;
}

/* The flat C-order indices of box (start, count) of a tensor of `shape`, appended. */
static void expand(int ndim, const int64_t *shape, const int64_t *start, const int64_t *count,
                   int64_t *out, size_t *n, size_t cap) {
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++)
        numel *= count[d];
    for (int64_t e = 0; e < numel; e++) {
        int64_t rem = e, flat = 0, mul = 1;
        for (int d = ndim - 1; d >= 0; d--) {
            int64_t i = rem % count[d];
            rem /= count[d];
            flat += (start[d] + i) * mul;
            mul *= shape[d];
        }
        cr_assert(*n < cap);
        out[(*n)++] = flat;
    }
}

#define CAP 4096

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

Test(mesh, torch_vectors) {
    const char *path = getenv("CKPT_MESH_VECTORS");
    cr_assert(path, "CKPT_MESH_VECTORS not set");
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    char spec[128], shape_s[64], lshape_s[64], off_s[64], *runs_s = malloc(1 << 16);
    unsigned rank;
    static int64_t want[CAP], got[CAP], starts[CAP * 4], counts[CAP * 4];
    int lines = 0, multi = 0, empty = 0;
    while (fscanf(f, "%127s %63s %u %63s %63s %65535s", spec, shape_s, &rank, lshape_s, off_s,
                  runs_s) == 6) {
        lines++;
        int64_t shape[8], lshape[8], off[8];
        int ndim = parse_list(shape_s, shape);
        cr_assert_eq(parse_list(lshape_s, lshape), ndim);
        cr_assert_eq(parse_list(off_s, off), ndim);
        size_t nwant = parse_runs(runs_s, want, CAP);
        ckpt_layout l;
        ckpt_error err = {0};
        cr_assert_eq(ckpt_layout_parse(spec, &l, &err), CKPT_OK, "%s: %s", spec, err.message);
        /* materialized */
        size_t nb = 0, ngot = 0;
        int64_t ls[8], go[8];
        cr_assert_eq(
            ckpt_layout_boxes(&l, ndim, shape, rank, starts, counts, CAP, &nb, ls, go, &err),
            CKPT_OK, "%s: %s", spec, err.message);
        for (size_t b = 0; b < nb; b++)
            expand(ndim, shape, starts + b * ndim, counts + b * ndim, got, &ngot, CAP);
        cr_assert_eq(ngot, nwant, "%s %s rank %u: %zu elements, torch %zu", spec, shape_s, rank,
                     ngot, nwant);
        for (size_t i = 0; i < ngot; i++)
            cr_assert_eq(got[i], want[i], "%s %s rank %u: element %zu is %lld, torch %lld", spec,
                         shape_s, rank, i, (long long)got[i], (long long)want[i]);
        for (int d = 0; d < ndim; d++) {
            cr_assert_eq(ls[d], lshape[d], "%s %s rank %u: local shape dim %d", spec, shape_s, rank,
                         d);
            cr_assert_eq(go[d], off[d], "%s %s rank %u: offset dim %d is %lld, torch %lld", spec,
                         shape_s, rank, d, (long long)go[d], (long long)off[d]);
        }
        /* on demand: element offsets and find_box agree with the materialized list */
        uint32_t coord[CKPT_LAYOUT_MAX_MESH_NDIM];
        cr_assert_eq(ckpt_layout_coord(&l, rank, coord), CKPT_OK);
        ckpt_layout_shard *s;
        cr_assert_eq(ckpt_layout_shard_new(&l, ndim, shape, coord, &s, &err), CKPT_OK);
        cr_assert_eq(ckpt_layout_shard_num_boxes(s), nb);
        cr_assert_eq(ckpt_layout_shard_numel(s), nwant);
        uint64_t at = 0;
        for (size_t b = 0; b < nb; b++) {
            int64_t st[8], ct[8];
            uint64_t eo;
            ckpt_layout_shard_box(s, b, st, ct, &eo);
            cr_assert_eq(eo, at, "%s %s rank %u box %zu", spec, shape_s, rank, b);
            uint64_t n = 1;
            for (int d = 0; d < ndim; d++)
                n *= (uint64_t)ct[d];
            for (uint64_t e = at; e < at + n; e++)
                cr_assert_eq(ckpt_layout_shard_find_box(s, e), b);
            at += n;
        }
        /* run boxes: the same elements (as a set), no more boxes than the torch-order list,
         * and each one's first element sits at its local position */
        uint64_t nr = ckpt_layout_shard_num_run_boxes(s);
        cr_assert(nr >= 1 && nr <= nb, "%s %s rank %u: %llu run boxes", spec, shape_s, rank,
                  (unsigned long long)nr);
        size_t nrun = 0;
        for (uint64_t b = 0; b < nr; b++) {
            int64_t st[8], ct[8], lo[8];
            ckpt_layout_shard_run_box(s, b, st, ct, lo);
            size_t before = nrun;
            expand(ndim, shape, st, ct, got, &nrun, CAP);
            if (nrun == before) continue;
            int64_t lpos = 0, gflat = 0;
            for (int d = 0; d < ndim; d++) {
                lpos = lpos * lshape[d] + lo[d];
                gflat = gflat * shape[d] + st[d];
            }
            cr_assert_eq(want[lpos], gflat, "%s %s rank %u run box %llu: local position", spec,
                         shape_s, rank, (unsigned long long)b);
        }
        cr_assert_eq(nrun, nwant, "%s %s rank %u: run boxes hold %zu elements, torch %zu", spec,
                     shape_s, rank, nrun, nwant);
        qsort(got, nrun, sizeof *got, cmp_i64);
        qsort(want, nwant, sizeof *want, cmp_i64);
        for (size_t i = 0; i < nrun; i++)
            cr_assert_eq(got[i], want[i], "%s %s rank %u: run boxes' element %zu", spec, shape_s,
                         rank, i);
        ckpt_layout_shard_free(s);
        multi += nb > 1;
        empty += nwant == 0 && ndim > 0;
    }
    fclose(f);
    free(runs_s);
    cr_assert_gt(lines, 2000);
    cr_assert_gt(multi, 100, "the vectors cover shards of several boxes");
    cr_assert_gt(empty, 100, "the vectors cover empty shards");
}

Test(mesh, strided_example_from_the_issue) {
    /* 2:S0s2 on [8, 3]: rank 1 holds rows 2, 3, 6, 7, in that order: two boxes */
    ckpt_layout l;
    cr_assert_eq(ckpt_layout_parse("2:S0s2", &l, NULL), CKPT_OK);
    int64_t shape[2] = {8, 3}, st[4], ct[4], ls[2], go[2];
    size_t nb;
    cr_assert_eq(ckpt_layout_boxes(&l, 2, shape, 1, st, ct, 2, &nb, ls, go, NULL), CKPT_OK);
    cr_assert_eq(nb, 2);
    cr_assert(st[0] == 2 && ct[0] == 2 && st[1] == 0 && ct[1] == 3);
    cr_assert(st[2] == 6 && ct[2] == 2 && st[3] == 0 && ct[3] == 3);
    cr_assert(ls[0] == 4 && ls[1] == 3 && go[0] == 2 && go[1] == 0);
    /* too little room: says how many */
    ckpt_error err;
    cr_assert_eq(ckpt_layout_boxes(&l, 2, shape, 1, st, ct, 1, &nb, NULL, NULL, &err),
                 CKPT_E_LIMIT);
    cr_assert_eq(nb, 2);
    /* the run boxes are the same two, at local rows 0 and 2 */
    uint32_t coord[1] = {1};
    ckpt_layout_shard *s;
    cr_assert_eq(ckpt_layout_shard_new(&l, 2, shape, coord, &s, NULL), CKPT_OK);
    cr_assert_eq(ckpt_layout_shard_num_run_boxes(s), 2);
    int64_t lo[2];
    ckpt_layout_shard_run_box(s, 1, st, ct, lo);
    cr_assert(st[0] == 6 && ct[0] == 2 && st[1] == 0 && ct[1] == 3 && lo[0] == 2 && lo[1] == 0);
    ckpt_layout_shard_free(s);
    /* a _StridedShard after the first dim: a box per row and run, two run boxes */
    cr_assert_eq(ckpt_layout_parse("2x2:S1s2,R", &l, NULL), CKPT_OK);
    int64_t big[2] = {8192, 512};
    uint32_t c2[2] = {1, 1};
    cr_assert_eq(ckpt_layout_shard_new(&l, 2, big, c2, &s, NULL), CKPT_OK);
    cr_assert_eq(ckpt_layout_shard_num_boxes(s), 16384);
    cr_assert_eq(ckpt_layout_shard_num_run_boxes(s), 2);
    ckpt_layout_shard_run_box(s, 0, st, ct, lo);
    cr_assert(st[0] == 0 && ct[0] == 8192 && st[1] == 128 && ct[1] == 128 && lo[1] == 0);
    ckpt_layout_shard_run_box(s, 1, st, ct, lo);
    cr_assert(st[1] == 384 && ct[1] == 128 && lo[1] == 128);
    ckpt_layout_shard_free(s);
}

Test(mesh, parse_and_format) {
    static const char *const good[][2] = {
        {"8:S0", "8:S0"},
        {"dim0-of-8", "8:S0"},
        {"dim3-of-1", "1:S3"},
        {"2x2:S0s2,S0", NULL},
        {"2x3:R,S0", NULL},
        {"3x2:S1,R", NULL},
        {"1x1x1x1x1x1x1x1:R,R,R,R,R,R,R,R", NULL},
        {"2:S63s65536", NULL},
        {"1048576:S0", NULL},
        {"1024x1024:R,S1", NULL},
        {"2:S0s1", NULL},
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        ckpt_layout l;
        ckpt_error err = {0};
        cr_assert_eq(ckpt_layout_parse(good[i][0], &l, &err), CKPT_OK, "%s: %s", good[i][0],
                     err.message);
        char buf[CKPT_LAYOUT_SPEC_MAX];
        size_t n = ckpt_layout_format(&l, buf, sizeof buf);
        const char *want = good[i][1] ? good[i][1] : good[i][0];
        cr_assert_str_eq(buf, want);
        cr_assert_eq(n, strlen(want));
    }
    ckpt_layout l;
    cr_assert_eq(ckpt_layout_parse("2x3:S0s2,R", &l, NULL), CKPT_OK);
    cr_assert_eq(l.mesh_ndim, 2);
    cr_assert_eq(ckpt_layout_nranks(&l), 6);
    cr_assert(l.placements[0].kind == CKPT_PLACEMENT_STRIDED_SHARD && l.placements[0].dim == 0 &&
              l.placements[0].split_factor == 2);
    cr_assert(l.placements[1].kind == CKPT_PLACEMENT_REPLICATE);
    uint32_t c[2];
    cr_assert_eq(ckpt_layout_coord(&l, 4, c), CKPT_OK); /* row-major */
    cr_assert(c[0] == 1 && c[1] == 1);
    cr_assert_eq(ckpt_layout_coord(&l, 6, c), CKPT_E_INVAL);
}

Test(mesh, bad_specs) {
    static const struct {
        const char *spec;
        ckpt_status code;
        const char *msg;
    } bad[] = {
        {"", CKPT_E_INVAL, "empty"},
        {"8", CKPT_E_INVAL, "expected 'x' or ':'"},
        {"8:", CKPT_E_INVAL, "expected a placement"},
        {"0:S0", CKPT_E_INVAL, "mesh size below 1"},
        {"08:S0", CKPT_E_INVAL, "expected a mesh size"},
        {"2x2:S0", CKPT_E_INVAL, "1 placements for 2 mesh dims"},
        {"2:S0,S1", CKPT_E_INVAL, "more placements than mesh dims"},
        {"2:S", CKPT_E_INVAL, "expected a tensor dim"},
        {"2:S64", CKPT_E_LIMIT, "tensor dim above 63"},
        {"2:S0s0", CKPT_E_INVAL, "split factor below 1"},
        {"2:S0s65537", CKPT_E_LIMIT, "split factor above 65536"},
        {"2:S0x", CKPT_E_INVAL, "expected ',' or the end"},
        {"2:r", CKPT_E_INVAL, "expected a placement"},
        {"1048577:S0", CKPT_E_LIMIT, "mesh size above 1048576"},
        {"2048x1024:R,R", CKPT_E_LIMIT, "more than 1048576 ranks"},
        {"99999999999999999999999:R", CKPT_E_LIMIT, "mesh size above"},
        {"1x1x1x1x1x1x1x1x1:R,R,R,R,R,R,R,R,R", CKPT_E_LIMIT, "more than 8 mesh dims"},
        {"dim0-of-0", CKPT_E_INVAL, "rank count below 1"},
        {"dim0-of-8x", CKPT_E_INVAL, "unexpected text"},
        {"dim-of-8", CKPT_E_INVAL, "expected a tensor dim"},
        {"2:S0 ", CKPT_E_INVAL, "expected ',' or the end"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ckpt_layout l;
        ckpt_error err = {0};
        cr_assert_eq(ckpt_layout_parse(bad[i].spec, &l, &err), bad[i].code, "'%s': %s", bad[i].spec,
                     err.message);
        cr_assert(strstr(err.message, bad[i].msg), "'%s': %s", bad[i].spec, err.message);
    }
    char longspec[300];
    memset(longspec, 'R', sizeof longspec - 1);
    longspec[sizeof longspec - 1] = 0;
    ckpt_layout l;
    cr_assert_eq(ckpt_layout_parse(longspec, &l, NULL), CKPT_E_LIMIT);
}

Test(mesh, shard_box_is_the_one_dim_case) {
    for (int64_t size = 0; size <= 13; size++)
        for (uint32_t n = 1; n <= 7; n++)
            for (int dim = 0; dim < 3; dim++) {
                char spec[32];
                snprintf(spec, sizeof spec, "dim%d-of-%u", dim, n);
                ckpt_layout l;
                cr_assert_eq(ckpt_layout_parse(spec, &l, NULL), CKPT_OK);
                for (uint32_t r = 0; r < n; r++) {
                    int64_t shape[2] = {size, 3}, s1[2], c1[2], s2[2], c2[2];
                    size_t nb;
                    cr_assert_eq(ckpt_shard_box(2, shape, dim, n, r, s1, c1), CKPT_OK);
                    cr_assert_eq(
                        ckpt_layout_boxes(&l, 2, shape, r, s2, c2, 1, &nb, NULL, NULL, NULL),
                        CKPT_OK);
                    cr_assert_eq(nb, 1);
                    cr_assert(memcmp(s1, s2, sizeof s1) == 0 && memcmp(c1, c2, sizeof c1) == 0,
                              "%s size %lld rank %u", spec, (long long)size, r);
                }
            }
}

Test(mesh, bounded_runs_and_bad_arguments) {
    /* split factors multiply the runs a dim is held as; the count stays bounded */
    ckpt_layout l;
    cr_assert_eq(ckpt_layout_parse("1x1:S0s65536,S0s65536", &l, NULL), CKPT_OK);
    int64_t shape[1] = {(int64_t)1 << 40};
    uint32_t coord[2] = {0, 0};
    ckpt_layout_shard *s = NULL;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_layout_shard_new(&l, 1, shape, coord, &s, &err), CKPT_OK, "%s", err.message);
    cr_assert_eq(ckpt_layout_shard_num_boxes(s), 1); /* mesh size 1: everything, one run */
    ckpt_layout_shard_free(s);
    cr_assert_eq(ckpt_layout_parse("2x2:S0s65536,S0s65536", &l, NULL), CKPT_OK);
    cr_assert_eq(ckpt_layout_shard_new(&l, 1, shape, coord, &s, &err), CKPT_OK, "%s", err.message);
    cr_assert_eq(ckpt_layout_shard_num_boxes(s), 65536);
    ckpt_layout_shard_free(s);
    /* the element count must fit */
    int64_t huge[2] = {INT64_MAX, 4};
    cr_assert_eq(ckpt_layout_shard_new(&l, 2, huge, coord, &s, &err), CKPT_E_LIMIT);
    cr_assert_null(s);
    coord[1] = 2;
    cr_assert_eq(ckpt_layout_shard_new(&l, 1, shape, coord, &s, &err), CKPT_E_INVAL);
    cr_assert(strstr(err.message, "coordinate 2 along mesh dim 1"), "%s", err.message);
    int64_t neg[1] = {-1};
    coord[1] = 0;
    cr_assert_eq(ckpt_layout_shard_new(&l, 1, neg, coord, &s, &err), CKPT_E_INVAL);
    cr_assert_eq(ckpt_layout_boxes(&l, 1, shape, 4, NULL, NULL, 0, NULL, NULL, NULL, &err),
                 CKPT_E_INVAL);
}
