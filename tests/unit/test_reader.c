/* test_reader.c — the reader against torch's own reference for every fixture: every tensor
 * bit-exact (whole, by key and by path), random regions, region plans, and objects rendered
 * as torch's values. */
#include "ckpt.h"
#include "fixture_ref.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ckpt_reader *open_fixture(const ref_fixture *f) {
    ckpt_reader *r = NULL;
    ckpt_error err = {0};
    ckpt_status s = ckpt_reader_open(f->ckpt_dir, NULL, &r, &err);
    cr_assert_eq(s, CKPT_OK, "%s: open failed: %s", f->name, err.message);
    return r;
}

static void joined_path(const ckpt_entry *e, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < ckpt_entry_path_len(e); i++)
        at +=
            (size_t)snprintf(buf + at, cap - at, "%s%s", i ? "/" : "", ckpt_entry_path_elem(e, i));
}

Test(reader, fixtures_exist) {
    char **names;
    size_t n = ref_list(&names);
    cr_assert_geq(n, 5, "expected the torch fixtures under %s, found %zu", ref_fixtures_dir(), n);
    ref_free_names(names, n);
}

Test(reader, every_entry_matches_reference, .timeout = 120) {
    char **names;
    size_t n = ref_list(&names);
    for (size_t fi = 0; fi < n; fi++) {
        ref_fixture f;
        cr_assert_eq(ref_load(names[fi], &f), 0, "cannot load reference of %s", names[fi]);
        ckpt_reader *r = open_fixture(&f);
        cr_expect_eq(ckpt_reader_num_entries(r), f.n, "%s: %zu entries, reference has %zu", f.name,
                     ckpt_reader_num_entries(r), f.n);
        for (size_t i = 0; i < f.n; i++) {
            const ref_entry *re = &f.entries[i];
            const ckpt_entry *e = ckpt_reader_find(r, re->key);
            cr_assert(e, "%s: key '%s' not found", f.name, re->key);
            char path[4096];
            joined_path(e, path, sizeof path);
            cr_expect_str_eq(path, re->path, "%s: '%s' path elements", f.name, re->key);
            cr_expect_eq(ckpt_reader_find(r, ckpt_entry_path(e)), e, "%s: lookup by path '%s'",
                         f.name, ckpt_entry_path(e));
            ckpt_error err = {0};
            if (re->kind == 'T') {
                cr_assert_eq(ckpt_entry_kind_of(e), CKPT_ENTRY_TENSOR, "%s: '%s' kind", f.name,
                             re->key);
                cr_expect_str_eq(ckpt_dtype_name(ckpt_entry_dtype(e)), re->dtype, "%s: '%s' dtype",
                                 f.name, re->key);
                cr_assert_eq(ckpt_entry_ndim(e), re->ndim, "%s: '%s' ndim", f.name, re->key);
                for (int d = 0; d < re->ndim; d++)
                    cr_expect_eq(ckpt_entry_shape(e)[d], re->shape[d], "%s: '%s' dim %d", f.name,
                                 re->key, d);
                cr_assert_eq(ckpt_entry_nbytes(e), re->nbytes, "%s: '%s' nbytes", f.name, re->key);
                uint8_t *buf = malloc(re->nbytes + 1);
                memset(buf, 0xA5, re->nbytes + 1);
                ckpt_status s = ckpt_read_tensor(r, e, buf, re->nbytes, &err);
                cr_expect_eq(s, CKPT_OK, "%s: read '%s': %s", f.name, re->key, err.message);
                if (s == CKPT_OK)
                    cr_expect(memcmp(buf, f.bin + re->offset, re->nbytes) == 0,
                              "%s: '%s' differs from torch's reference", f.name, re->key);
                free(buf);
            } else {
                cr_assert_eq(ckpt_entry_kind_of(e), CKPT_ENTRY_OBJECT, "%s: '%s' kind", f.name,
                             re->key);
                ckpt_object *o = NULL;
                ckpt_status s = ckpt_object_load(r, e, &o, &err);
                cr_expect_eq(s, CKPT_OK, "%s: load '%s': %s", f.name, re->key, err.message);
                if (s != CKPT_OK) continue;
                char *json = NULL, *text = NULL;
                cr_expect_eq(ckpt_value_to_json(ckpt_object_root(o), &json, &err), CKPT_OK);
                cr_expect_eq(ckpt_value_to_text(ckpt_object_root(o), &text, &err), CKPT_OK);
                if (json) cr_expect_str_eq(json, re->json, "%s: '%s' json", f.name, re->key);
                if (text) cr_expect_str_eq(text, re->repr, "%s: '%s' text", f.name, re->key);
                free(json);
                free(text);
                ckpt_object_free(o);
            }
        }
        ckpt_reader_free(r);
        ref_free(&f);
    }
    ref_free_names(names, n);
}

/* Expected region bytes gathered from the full reference tensor. */
static void gather(const uint8_t *full, const int64_t *shape, int nd, size_t isz,
                   const int64_t *start, const int64_t *count, uint8_t *out) {
    uint64_t total = 1;
    for (int d = 0; d < nd; d++)
        total *= (uint64_t)count[d];
    int64_t idx[64] = {0};
    for (uint64_t k = 0; k < total; k++) {
        uint64_t lin = 0;
        for (int d = 0; d < nd; d++)
            lin = lin * (uint64_t)shape[d] + (uint64_t)(start[d] + idx[d]);
        memcpy(out + k * isz, full + lin * isz, isz);
        for (int d = nd - 1; d >= 0; d--) {
            if (++idx[d] < count[d]) break;
            idx[d] = 0;
        }
    }
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

Test(reader, random_regions_and_plans, .timeout = 120) {
    char **names;
    size_t n = ref_list(&names);
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (size_t fi = 0; fi < n; fi++) {
        ref_fixture f;
        cr_assert_eq(ref_load(names[fi], &f), 0);
        ckpt_reader *r = open_fixture(&f);
        for (size_t i = 0; i < f.n; i++) {
            const ref_entry *re = &f.entries[i];
            if (re->kind != 'T' || re->ndim == 0) continue;
            const ckpt_entry *e = ckpt_reader_find(r, re->key);
            cr_assert(e);
            size_t isz = ckpt_dtype_itemsize(ckpt_entry_dtype(e));
            for (int trial = 0; trial < 6; trial++) {
                int64_t start[64], count[64];
                uint64_t bytes = isz;
                for (int d = 0; d < re->ndim; d++) {
                    int64_t L = re->shape[d];
                    start[d] = L ? (int64_t)(rng_next(&seed) % (uint64_t)(L + 1)) : 0;
                    count[d] = (int64_t)(rng_next(&seed) % (uint64_t)(L - start[d] + 1));
                    if (trial == 0) {
                        start[d] = 0;
                        count[d] = L;
                    }
                    bytes *= (uint64_t)count[d];
                }
                uint8_t *want = malloc(bytes + 1), *got = malloc(bytes + 1),
                        *viaplan = malloc(bytes + 1);
                gather(f.bin + re->offset, re->shape, re->ndim, isz, start, count, want);
                ckpt_error err = {0};
                ckpt_status s = ckpt_read_region(r, e, start, count, got, bytes, &err);
                cr_expect_eq(s, CKPT_OK, "%s: region of '%s': %s", f.name, re->key, err.message);
                if (s == CKPT_OK)
                    cr_expect(memcmp(got, want, bytes) == 0,
                              "%s: region of '%s' (trial %d) differs", f.name, re->key, trial);
                ckpt_plan *p = NULL;
                s = ckpt_plan_region(r, e, start, count, &p, &err);
                cr_expect_eq(s, CKPT_OK, "%s: plan of '%s': %s", f.name, re->key, err.message);
                if (s == CKPT_OK) {
                    cr_expect_eq(ckpt_plan_bytes(p), bytes);
                    uint64_t sum = 0, next = 0;
                    for (size_t k = 0; k < ckpt_plan_num_pieces(p); k++) {
                        const ckpt_piece *pc = &ckpt_plan_pieces(p)[k];
                        cr_expect_eq(pc->dst_offset, next, "%s: '%s' plan pieces not contiguous",
                                     f.name, re->key);
                        next = pc->dst_offset + pc->length;
                        sum += pc->length;
                    }
                    cr_expect_eq(sum, bytes, "%s: '%s' plan covers %llu of %llu bytes", f.name,
                                 re->key, (unsigned long long)sum, (unsigned long long)bytes);
                    s = ckpt_plan_execute(r, e, p, viaplan, bytes, &err);
                    cr_expect_eq(s, CKPT_OK, "%s: execute plan of '%s': %s", f.name, re->key,
                                 err.message);
                    if (s == CKPT_OK)
                        cr_expect(memcmp(viaplan, want, bytes) == 0,
                                  "%s: plan of '%s' gives other bytes", f.name, re->key);
                    ckpt_plan_free(p);
                }
                free(want);
                free(got);
                free(viaplan);
            }
        }
        ckpt_reader_free(r);
        ref_free(&f);
    }
    ref_free_names(names, n);
}

Test(reader, layout_and_chunks_verify_on_good_fixtures, .timeout = 120) {
    char **names;
    size_t n = ref_list(&names);
    for (size_t fi = 0; fi < n; fi++) {
        ref_fixture f;
        cr_assert_eq(ref_load(names[fi], &f), 0);
        ckpt_reader *r = open_fixture(&f);
        uint64_t bad = 0;
        cr_expect_eq(ckpt_reader_check_ranges(r, NULL, NULL, &bad), CKPT_OK, "%s: %llu bad ranges",
                     f.name, (unsigned long long)bad);
        for (size_t i = 0; i < ckpt_reader_num_entries(r); i++) {
            const ckpt_entry *e = ckpt_reader_entry(r, i);
            ckpt_error err = {0};
            cr_expect_eq(ckpt_entry_check_layout(e, &err), CKPT_OK, "%s: %s", f.name, err.message);
            for (size_t k = 0;
                 k < ckpt_entry_num_chunks(e) && ckpt_entry_kind_of(e) == CKPT_ENTRY_TENSOR; k++)
                cr_expect_eq(ckpt_entry_check_chunk(r, e, k, &err), CKPT_OK, "%s: %s", f.name,
                             err.message);
        }
        ckpt_reader_free(r);
        ref_free(&f);
    }
    ref_free_names(names, n);
}

Test(reader, missing_directory_and_key) {
    ckpt_reader *r = NULL;
    ckpt_error err = {0};
    cr_expect_eq(ckpt_reader_open("/nonexistent/ckpt", NULL, &r, &err), CKPT_E_NOTFOUND);
    cr_expect_null(r);
    cr_expect(strstr(err.message, "/nonexistent/ckpt") != NULL, "message: %s", err.message);
    /* a directory without a checkpoint: a fresh empty one (/tmp itself may hold anything,
     * e.g. another program's *.safetensors file) */
    char empty[] = "/tmp/ckpt-empty-XXXXXX";
    cr_assert_not_null(mkdtemp(empty));
    cr_expect_eq(ckpt_reader_open(empty, NULL, &r, &err), CKPT_E_NOTFOUND);
    cr_expect(strstr(err.message, ".metadata") != NULL, "message: %s", err.message);
    rmdir(empty);
    cr_expect_str_eq(ckpt_strerror(CKPT_E_FORMAT), "malformed checkpoint data");
}

Test(reader, version_of_the_loaded_library) {
    cr_expect_str_eq(ckpt_version(), CKPT_VERSION_STRING);
}

/* The one selection rule of --keys/--exclude and the @root views: tree paths at element
 * boundaries, flat keys at '.' boundaries, the root = one path element. */
Test(reader, entry_selection) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/torchtitan/ckpt", ref_fixtures_dir());
    ckpt_reader *r = NULL;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_reader_open(dir, NULL, &r, &err), CKPT_OK, "%s", err.message);
    const ckpt_entry *m = ckpt_reader_find_key(r, "norm.weight");
    const ckpt_entry *o = ckpt_reader_find_key(r, "optimizer.state.norm.weight.exp_avg");
    cr_assert(m && o);
    cr_expect_str_eq(ckpt_entry_path(o), "optimizer/state.norm.weight.exp_avg");
    cr_expect(ckpt_entry_at_root(m) && !ckpt_entry_at_root(o));
    cr_expect_str_eq(ckpt_entry_under(o, "optimizer"), "state.norm.weight.exp_avg");
    cr_expect_str_eq(ckpt_entry_under(o, "optimizer//"), "state.norm.weight.exp_avg");
    cr_expect_str_eq(ckpt_entry_under(o, ""), "optimizer/state.norm.weight.exp_avg");
    cr_expect_str_eq(ckpt_entry_under(o, NULL), "optimizer/state.norm.weight.exp_avg");
    cr_expect_str_eq(ckpt_entry_under(m, "norm.weight"), ""); /* the entry itself */
    cr_expect_null(ckpt_entry_under(o, "optim"));             /* element boundary */
    cr_expect_null(ckpt_entry_under(m, "norm"));
    cr_expect_null(ckpt_entry_under(o, "optimizer.state")); /* not a tree path here */
    cr_expect(ckpt_entry_matches(o, "optimizer"));
    cr_expect(ckpt_entry_matches(o, "optimizer.state")); /* a flat-key prefix */
    cr_expect(ckpt_entry_matches(o, "optimizer.state.norm.weight.exp_avg"));
    cr_expect(!ckpt_entry_matches(o, "optimizer.sta"));
    cr_expect(!ckpt_entry_matches(o, "optim"));
    cr_expect(ckpt_entry_matches(m, "norm") && ckpt_entry_matches(m, "norm.weight"));
    cr_expect(!ckpt_entry_matches(m, "") && !ckpt_entry_matches(m, "/") &&
              !ckpt_entry_matches(m, NULL));
    ckpt_reader_free(r);
}

/* planner_data's element types: ('optim', 'param_groups', 0, 'lr') keeps its int. */
Test(reader, path_elements_that_are_ints) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/fsdp2_ws2/ckpt", ref_fixtures_dir());
    ckpt_reader *r = NULL;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_reader_open(dir, NULL, &r, &err), CKPT_OK, "%s", err.message);
    const ckpt_entry *e = ckpt_reader_find_key(r, "optim.param_groups.0.lr");
    cr_assert(e);
    cr_assert_eq(ckpt_entry_path_len(e), 4);
    cr_expect_str_eq(ckpt_entry_path_elem(e, 2), "0");
    cr_expect(ckpt_entry_path_elem_is_int(e, 2));
    cr_expect(!ckpt_entry_path_elem_is_int(e, 0));
    cr_expect(!ckpt_entry_path_elem_is_int(e, 1));
    cr_expect(!ckpt_entry_path_elem_is_int(e, 3));
    cr_expect(!ckpt_entry_path_elem_is_int(e, 4)); /* past the end */
    /* 'layers.0.mlp.0.weight' is one str element, digits and all */
    e = ckpt_reader_find_key(r, "model.layers.0.mlp.0.weight");
    cr_assert(e);
    cr_assert_eq(ckpt_entry_path_len(e), 2);
    cr_expect(!ckpt_entry_path_elem_is_int(e, 0) && !ckpt_entry_path_elem_is_int(e, 1));
    ckpt_reader_free(r);
    /* HuggingFace storage has no planner_data: the flat key is the one element */
    snprintf(dir, sizeof dir, "%s/hf_full/ckpt", ref_fixtures_dir());
    cr_assert_eq(ckpt_reader_open(dir, NULL, &r, &err), CKPT_OK, "%s", err.message);
    e = ckpt_reader_entry(r, 0);
    cr_assert(e);
    cr_expect(!ckpt_entry_path_elem_is_int(e, 0));
    ckpt_reader_free(r);
}
