/* test_value.c — non-tensor values: pickles written by CPython (value_vectors/gen.py) decoded
 * with pk_decode, converted with ck_object_from_pickle and rendered with
 * ckpt_value_to_json / ckpt_value_to_text / pk_to_json, compared byte for byte with what
 * Python computed; plus accessors, tensors inside a torch.save item, hand-made hostile
 * pickles, float and bigint formatting, and the speed of pk_to_json on a million-entry
 * pickle. */
#include "test_util.h"
#include "ckpt.h"
#include "pickle/pickle.h"
#include "torchsave/item.h"
#include "value/bigint.h"
#include "tensor/float_repr.h"
#include "value/value.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ helpers */

static const char *vectors_dir(void) {
    const char *d = getenv("CKPT_VALUE_VECTORS");
    if (d && *d) return d;
    static char buf[4096]; /* fallback: next to this source file */
    const char *slash = strrchr(__FILE__, '/');
    int dir = slash ? (int)(slash - __FILE__) : 1;
    snprintf(buf, sizeof buf, "%.*s/value_vectors", dir, slash ? __FILE__ : ".");
    return buf;
}

static char *read_file(const char *name, const char *ext, size_t *len) {
    char path[4096];
    int pn = snprintf(path, sizeof path, "%s/%s%s", vectors_dir(), name, ext);
    cr_assert(pn > 0 && (size_t)pn < sizeof path, "path too long");
    return (char *)tu_read_file(path, len); /* vectors: CKPT_VALUE_VECTORS */
}

static pk_doc *decode(const void *buf, size_t len, const char *what) {
    pk_doc *doc = NULL;
    ckpt_error err = {0};
    ckpt_status st = pk_decode(buf, len, NULL, &doc, &err);
    cr_assert_eq(st, CKPT_OK, "%s: pk_decode: %s", what, err.message);
    return doc;
}

static pk_doc *decode_vector(const char *name) {
    size_t len;
    char *buf = read_file(name, ".pkl", &len);
    pk_doc *doc = decode(buf, len, name);
    free(buf); /* the decoded tree must not depend on the input buffer */
    return doc;
}

static ckpt_object *convert(const pk_doc *doc, const char *what) {
    ckpt_object *o = NULL;
    ckpt_error err = {0};
    ckpt_status st = ck_object_from_pickle(pk_doc_root(doc), 0, &o, &err);
    cr_assert_eq(st, CKPT_OK, "%s: ck_object_from_pickle: %s", what, err.message);
    return o;
}

static ckpt_object *load_vector(const char *name) {
    pk_doc *doc = decode_vector(name);
    ckpt_object *o = convert(doc, name);
    pk_doc_free(doc); /* strings were copied */
    return o;
}

static char *to_json(const ckpt_value *v) {
    char *s = NULL;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_value_to_json(v, &s, &err), CKPT_OK, "%s", err.message);
    return s;
}

static char *to_text(const ckpt_value *v) {
    char *s = NULL;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_value_to_text(v, &s, &err), CKPT_OK, "%s", err.message);
    return s;
}

/* Byte-exact comparison with a pointer to the first difference. */
static void expect_same(const char *got, const char *want, const char *what) {
    if (strcmp(got, want) == 0) return;
    size_t i = 0;
    while (got[i] && got[i] == want[i])
        i++;
    size_t from = i > 40 ? i - 40 : 0;
    cr_expect_fail("%s differs at byte %zu:\n  got  ...%.120s\n  want ...%.120s", what, i,
                   got + from, want + from);
}

/* ------------------------------------------------------------------ CPython vectors */

static void check_vector(const char *name, const char *vstatus, const char *pstatus) {
    char what[256];
    pk_doc *doc = decode_vector(name);
    const pk_value *root = pk_doc_root(doc);
    ckpt_error err = {0};

    ckpt_object *o = NULL;
    ckpt_status st = ck_object_from_pickle(root, 0, &o, &err);
    if (strcmp(vstatus, "limit") == 0) {
        cr_expect_eq(st, CKPT_E_LIMIT, "%s: conversion gave %d (%s), want CKPT_E_LIMIT", name, st,
                     err.message);
        cr_expect_null(o);
    } else {
        cr_expect_eq(st, CKPT_OK, "%s: conversion failed: %s", name, err.message);
    }
    if (o && strcmp(vstatus, "ok") == 0) {
        char *want = read_file(name, ".json", NULL), *got = to_json(ckpt_object_root(o));
        snprintf(what, sizeof what, "%s: ckpt_value_to_json", name);
        expect_same(got, want, what);
        free(want);
        free(got);
        want = read_file(name, ".txt", NULL);
        got = to_text(ckpt_object_root(o));
        snprintf(what, sizeof what, "%s: ckpt_value_to_text", name);
        expect_same(got, want, what);
        free(want);
        free(got);
    }
    ckpt_object_free(o);

    if (strcmp(pstatus, "skip") != 0) {
        char *got = NULL;
        st = pk_to_json(root, 0, 0, &got, &err);
        if (strcmp(pstatus, "limit") == 0) {
            cr_expect_eq(st, CKPT_E_LIMIT, "%s: pk_to_json gave %d, want CKPT_E_LIMIT", name, st);
            cr_expect_null(got);
        } else {
            cr_expect_eq(st, CKPT_OK, "%s: pk_to_json failed: %s", name, err.message);
            if (got) {
                char *want = read_file(name, ".pk.json", NULL);
                snprintf(what, sizeof what, "%s: pk_to_json", name);
                expect_same(got, want, what);
                free(want);
            }
        }
        free(got);
    }
    pk_doc_free(doc);
}

Test(value, cpython_vectors, .timeout = 120) {
    char *list = read_file("vectors", ".txt", NULL);
    size_t count = 0;
    for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n")) {
        char name[128], vstatus[16], pstatus[16];
        cr_assert_eq(sscanf(line, "%127s %15s %15s", name, vstatus, pstatus), 3, "bad line '%s'",
                     line);
        check_vector(name, vstatus, pstatus);
        count++;
    }
    cr_expect_geq(count, 20, "only %zu vectors listed", count);
    free(list);
}

/* ------------------------------------------------------------------ accessors */

static const ckpt_value *dict_get(const ckpt_value *d, const char *key) {
    for (size_t i = 0; i < ckpt_value_len(d); i++) {
        const char *k = ckpt_value_str(ckpt_value_dict_key(d, i), NULL);
        if (k && strcmp(k, key) == 0) return ckpt_value_dict_val(d, i);
    }
    return NULL;
}

Test(value, accessors_optimizer) {
    ckpt_object *o = load_vector("optim");
    const ckpt_value *r = ckpt_object_root(o);
    cr_assert_eq(ckpt_value_type_of(r), CKPT_VALUE_DICT);
    cr_expect_eq(ckpt_value_len(r), 9);
    cr_expect_eq(ckpt_value_float(dict_get(r, "lr")), 0.001);
    const ckpt_value *betas = dict_get(r, "betas");
    cr_assert_eq(ckpt_value_type_of(betas), CKPT_VALUE_TUPLE);
    cr_expect_eq(ckpt_value_len(betas), 2);
    cr_expect_eq(ckpt_value_float(ckpt_value_item(betas, 1)), 0.999);
    cr_expect_null(ckpt_value_item(betas, 2));
    cr_expect_eq(ckpt_value_type_of(dict_get(r, "amsgrad")), CKPT_VALUE_BOOL);
    cr_expect_not(ckpt_value_bool(dict_get(r, "amsgrad")));
    cr_expect(ckpt_value_bool(dict_get(r, "maximize")));
    cr_expect_eq(ckpt_value_type_of(dict_get(r, "foreach")), CKPT_VALUE_NONE);
    cr_expect_eq(ckpt_value_int(dict_get(r, "step")), 10);
    cr_expect_eq(ckpt_value_float(dict_get(r, "step")), 10.0);
    const ckpt_value *params = dict_get(r, "params");
    cr_assert_eq(ckpt_value_type_of(params), CKPT_VALUE_LIST);
    size_t len = 0;
    cr_expect_str_eq(ckpt_value_str(ckpt_value_item(params, 1), &len), "model.b");
    cr_expect_eq(len, 7);
    /* wrong-type questions answer 0 / NULL */
    cr_expect_eq(ckpt_value_int(params), 0);
    cr_expect_null(ckpt_value_str(params, &len));
    cr_expect_eq(len, 0);
    cr_expect_null(ckpt_value_dict_key(params, 0));
    cr_expect_null(ckpt_value_object_args(params));
    cr_expect_eq(ckpt_value_tensor_dtype(params), CKPT_DTYPE_INVALID);
    cr_expect_eq(ckpt_value_tensor_ndim(params), 0);
    cr_expect_null(ckpt_value_tensor_shape(params));
    ckpt_error err = {0};
    char dst[4];
    cr_expect_eq(ckpt_value_tensor_read(params, dst, sizeof dst, &err), CKPT_E_INVAL);
    ckpt_object_free(o);
}

Test(value, accessors_scalars_and_objects) {
    ckpt_object *o = load_vector("ints");
    const ckpt_value *r = ckpt_object_root(o);
    /* [0, 1, -1, 255, 256, 2**31, -2**31-1, 2**63-1, -2**63, 2**63, ...] */
    cr_expect_eq(ckpt_value_type_of(ckpt_value_item(r, 7)), CKPT_VALUE_INT);
    cr_expect_eq(ckpt_value_int(ckpt_value_item(r, 7)), INT64_MAX);
    cr_expect_eq(ckpt_value_int(ckpt_value_item(r, 8)), INT64_MIN);
    cr_expect_eq(ckpt_value_type_of(ckpt_value_item(r, 9)), CKPT_VALUE_BIGINT);
    cr_expect_str_eq(ckpt_value_str(ckpt_value_item(r, 9), NULL), "9223372036854775808");
    cr_expect_str_eq(ckpt_value_str(ckpt_value_item(r, 10), NULL), "-9223372036854775809");
    ckpt_object_free(o);

    o = load_vector("bytes");
    r = ckpt_object_root(o);
    size_t len;
    const char *b = ckpt_value_str(ckpt_value_item(r, 2), &len);
    cr_expect_eq(ckpt_value_type_of(ckpt_value_item(r, 2)), CKPT_VALUE_BYTES);
    cr_assert_eq(len, 256);
    for (int i = 0; i < 256; i++)
        cr_expect_eq((unsigned char)b[i], i);
    cr_expect_eq(b[256], '\0');
    ckpt_object_free(o);

    o = load_vector("objects");
    r = ckpt_object_root(o);
    const ckpt_value *dev = dict_get(r, "dev");
    cr_assert_eq(ckpt_value_type_of(dev), CKPT_VALUE_OBJECT);
    cr_expect_str_eq(ckpt_value_str(dev, NULL), "myapp.state.Device");
    cr_expect_eq(ckpt_value_len(dev), 0);
    const ckpt_value *args = ckpt_value_object_args(dev);
    cr_expect_eq(ckpt_value_type_of(args), CKPT_VALUE_TUPLE);
    cr_expect_str_eq(ckpt_value_str(ckpt_value_item(args, 0), NULL), "cuda");
    cr_expect_null(ckpt_value_object_state(dev));
    const ckpt_value *cfg = dict_get(r, "cfg2");
    cr_expect_eq(ckpt_value_float(dict_get(ckpt_value_object_state(cfg), "lr")), 0.2);
    const ckpt_value *ref = dict_get(r, "fmt");
    cr_expect_str_eq(ckpt_value_str(ref, NULL), "myapp.state.Format.CHANNELS_LAST");
    cr_expect_null(ckpt_value_object_args(ref));
    cr_expect_str_eq(ckpt_value_str(dict_get(r, "dtype"), NULL), "torch.float32");
    cr_expect_eq(ckpt_value_type_of(dict_get(r, "size")), CKPT_VALUE_TUPLE);
    ckpt_object_free(o);
}

Test(value, numpy_scalars) {
    char *list = read_file("vectors", ".txt", NULL);
    bool have = strstr(list, "numpy ") != NULL;
    free(list);
    cr_assert(have, "the committed vectors must include the numpy scalars (regenerate them with "
                    "numpy installed)");
    ckpt_object *o = load_vector("numpy");
    const ckpt_value *r = ckpt_object_root(o);
    cr_expect_eq(ckpt_value_type_of(ckpt_value_item(r, 0)), CKPT_VALUE_FLOAT);
    cr_expect_eq(ckpt_value_float(ckpt_value_item(r, 0)), 0.5);
    cr_expect_eq(ckpt_value_type_of(ckpt_value_item(r, 1)), CKPT_VALUE_INT);
    cr_expect_eq(ckpt_value_int(ckpt_value_item(r, 1)), 3);
    cr_expect_eq(ckpt_value_type_of(ckpt_value_item(r, 4)), CKPT_VALUE_BOOL);
    cr_expect_eq(ckpt_value_type_of(ckpt_value_item(r, 6)), CKPT_VALUE_BIGINT);
    cr_expect_eq(ckpt_value_type_of(ckpt_value_item(r, 11)), CKPT_VALUE_OBJECT); /* complex */
    ckpt_object_free(o);
}

Test(value, shared_dag_is_converted_once, .timeout = 30) {
    /* dag = [1]; 200 times: dag = [dag, dag] -- 2**200 paths, 201 distinct nodes */
    /* an exponential conversion would never finish: the test's timeout guards that */
    ckpt_object *o = load_vector("dag");
    const ckpt_value *r = ckpt_object_root(o);
    for (int i = 0; i < 199; i++) {
        cr_assert_eq(ckpt_value_len(r), 2);
        cr_assert_eq(ckpt_value_item(r, 0), ckpt_value_item(r, 1), "level %d not shared", i);
        r = ckpt_value_item(r, 0);
    }
    ckpt_object_free(o);
}

/* The same DAG rendered: 2**200 lists as a tree.  Each rendering stops at the render budget
 * (16 MiB, 16 Mi nodes; pk_to_json: its own budget) with CKPT_E_LIMIT and no text (the
 * unbounded renderer would never end; the .timeout guards against that hang only). */
Test(value, shared_dag_render_is_bounded, .timeout = 60) {
    pk_doc *doc = decode_vector("dag");
    ckpt_object *o = convert(doc, "dag");
    for (int kind = 0; kind < 3; kind++) {
        static const char *const names[] = {"text", "json", "pk_to_json"};
        char *s = (char *)"x";
        ckpt_error err = {0};
        ckpt_status st = kind == 0   ? ckpt_value_to_text(ckpt_object_root(o), &s, &err)
                         : kind == 1 ? ckpt_value_to_json(ckpt_object_root(o), &s, &err)
                                     : pk_to_json(pk_doc_root(doc), 0, 0, &s, &err);
        cr_expect_eq(st, CKPT_E_LIMIT, "%s: status %d (%s)", names[kind], st, err.message);
        cr_expect_null(s, "%s", names[kind]);
        cr_expect(strstr(err.message, "too large to render"), "%s: %s", names[kind], err.message);
    }
    ckpt_object_free(o);
    pk_doc_free(doc);
}

/* A large plain value (a million ints, ~7 MB of text) is under the budget: rendered whole. */
Test(value, large_plain_value_renders, .timeout = 60) {
    size_t n = 1000000, len = 2 + 1 + 1 + n * 5 + 1 + 1;
    unsigned char *p = malloc(len), *q = p;
    cr_assert(p);
    *q++ = 0x80, *q++ = 2, *q++ = ']', *q++ = '('; /* PROTO 2, EMPTY_LIST, MARK */
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)(i * 7919u % 1000003u);
        *q++ = 'J'; /* BININT */
        memcpy(q, &v, 4);
        q += 4;
    }
    *q++ = 'e', *q++ = '.'; /* APPENDS, STOP */
    pk_limits lim = {0};
    pk_doc *doc = NULL;
    ckpt_error err = {0};
    cr_assert_eq(pk_decode(p, len, &lim, &doc, &err), CKPT_OK, "%s", err.message);
    free(p);
    ckpt_object *o = convert(doc, "million ints");
    char *t = to_text(ckpt_object_root(o)), *j = to_json(ckpt_object_root(o));
    size_t tl = strlen(t);
    cr_expect_gt(tl, 6000000);
    cr_expect(strncmp(t, "[0, 7919, 15838, ", 17) == 0, "%.40s", t);
    cr_expect(t[tl - 1] == ']');
    cr_expect_eq(strlen(j), tl - 2 * (n - 1) + (n - 1), "JSON: ',' where text has ', '");
    free(t);
    free(j);
    ckpt_object_free(o);
    pk_doc_free(doc);
}

Test(value, tensors_inside_a_torch_save_item) {
    size_t len;
    char *zip = read_file("tensor_item", ".zip", &len);
    ck_source src = {.fd = -1, .len = len, .mem = (const uint8_t *)zip, .name = "tensor_item"};
    ts_open_options opts = {.max_decoded_bytes = 1 << 20, .max_pickle_bytes = 1 << 20};
    ts_item *it = NULL;
    ckpt_object *o = NULL;
    ckpt_error err = {0};
    cr_assert_eq(ts_item_open(&src, &opts, &it, &err), CKPT_OK, "%s", err.message);
    cr_assert_eq(ck_object_from_item(it, 0, &o, &err), CKPT_OK, "%s", err.message);
    const ckpt_value *r = ckpt_object_root(o);
    char *j = to_json(r), *t = to_text(r);
    cr_expect_str_eq(j,
                     "{\"lr\":0.1,\"w\":{\"__tensor__\":{\"dtype\":\"float32\",\"shape\":[2,3]}},"
                     "\"wt\":{\"__tensor__\":{\"dtype\":\"float32\",\"shape\":[3,2]}}}");
    cr_expect_str_eq(t, "{'lr': 0.1, 'w': tensor(dtype=float32, shape=[2, 3]), "
                        "'wt': tensor(dtype=float32, shape=[3, 2])}");
    free(j);
    free(t);
    const ckpt_value *w = dict_get(r, "w"), *wt = dict_get(r, "wt");
    cr_assert_eq(ckpt_value_type_of(wt), CKPT_VALUE_TENSOR);
    cr_expect_eq(ckpt_value_tensor_dtype(wt), CKPT_DTYPE_FLOAT32);
    cr_assert_eq(ckpt_value_tensor_ndim(wt), 2);
    cr_expect_eq(ckpt_value_tensor_shape(wt)[0], 3);
    cr_expect_eq(ckpt_value_tensor_shape(wt)[1], 2);
    float got[6];
    static const float want_w[6] = {1, 2, 3, 4, 5, 6}, want_wt[6] = {1, 4, 2, 5, 3, 6};
    cr_assert_eq(ckpt_value_tensor_read(w, got, sizeof got, &err), CKPT_OK, "%s", err.message);
    cr_expect_arr_eq(got, want_w, sizeof got);
    cr_assert_eq(ckpt_value_tensor_read(wt, got, sizeof got, &err), CKPT_OK, "%s", err.message);
    cr_expect_arr_eq(got, want_wt, sizeof got); /* transposed view of the same storage */
    cr_expect_eq(ckpt_value_tensor_read(wt, got, sizeof got - 1, &err), CKPT_E_INVAL);
    ckpt_object_free(o); /* frees the item too */
    free(zip);
}

/* ------------------------------------------------------------------ hand-made pickles */

static ckpt_status convert_bytes(const void *pkl, size_t len, ckpt_object **o, ckpt_error *err) {
    pk_doc *doc = decode(pkl, len, "hand-made pickle");
    ckpt_status st = ck_object_from_pickle(pk_doc_root(doc), 0, o, err);
    pk_doc_free(doc);
    return st;
}

static void expect_text(const char *pkl, size_t len, const char *want_text, const char *want_json) {
    ckpt_object *o = NULL;
    ckpt_error err = {0};
    cr_assert_eq(convert_bytes(pkl, len, &o, &err), CKPT_OK, "%s", err.message);
    char *t = to_text(ckpt_object_root(o)), *j = to_json(ckpt_object_root(o));
    cr_expect_str_eq(t, want_text);
    cr_expect_str_eq(j, want_json);
    free(t);
    free(j);
    ckpt_object_free(o);
}

#define PKL(s) s, sizeof(s) - 1

Test(value, idioms_that_do_not_apply_stay_objects) {
    /* _codecs.encode('€', 'latin1'): not latin-1 encodable */
    expect_text(PKL("\x80\x02"
                    "c_codecs\nencode\n"
                    "X\x03\x00\x00\x00\xe2\x82\xac"
                    "X\x06\x00\x00\x00latin1"
                    "\x86R."),
                "_codecs.encode('\xe2\x82\xac', 'latin1')",
                "{\"__object__\":\"_codecs.encode\",\"args\":[\"\xe2\x82\xac\",\"latin1\"]}");
    /* __builtin__.set with a non-list argument */
    expect_text(PKL("\x80\x02"
                    "c__builtin__\nset\n"
                    "K\x01\x85R."),
                "builtins.set(1)", "{\"__object__\":\"builtins.set\",\"args\":[1]}");
    /* (torch.Size((2, 3)) with a BUILD state fails to decode, as in Python: test_pickle.c) */
}

Test(value, calls_of_things_that_are_not_globals) {
    /* getattr(myapp.C, 'RED')(1): the callee is a reference, so it names the object */
    expect_text(PKL("\x80\x02"
                    "c__builtin__\ngetattr\n"
                    "cmyapp\nC\n"
                    "X\x03\x00\x00\x00RED"
                    "\x86R"
                    "K\x01\x85R."),
                "myapp.C.RED(1)", "{\"__object__\":\"myapp.C.RED\",\"args\":[1]}");
    /* [](2): anything else becomes the first argument of __call__ */
    expect_text(PKL("\x80\x02"
                    "]"
                    "K\x02\x85R."),
                "__call__([], 2)", "{\"__object__\":\"__call__\",\"args\":[[],2]}");
}

Test(value, huge_integer_is_a_limit) {
    size_t n = BIGINT_MAX_BYTES + 1, len = 2 + 1 + 4 + n + 1;
    unsigned char *p = calloc(1, len);
    p[0] = 0x80;
    p[1] = 2;
    p[2] = 0x8b; /* LONG4 */
    p[3] = (unsigned char)(n & 0xff);
    p[4] = (unsigned char)(n >> 8);
    memset(p + 7, 0x11, n);
    p[len - 1] = '.';
    pk_doc *doc = decode(p, len, "LONG4");
    ckpt_object *o = NULL;
    ckpt_error err = {0};
    cr_expect_eq(ck_object_from_pickle(pk_doc_root(doc), 0, &o, &err), CKPT_E_LIMIT);
    cr_expect_null(o);
    char *s = NULL;
    cr_expect_eq(pk_to_json(pk_doc_root(doc), 0, 0, &s, &err), CKPT_E_LIMIT);
    cr_expect_null(s);
    pk_doc_free(doc);
    free(p);
}

Test(value, depth_bound_of_pk_to_json) {
    pk_doc *doc = decode_vector("deep200");
    char *s = NULL;
    ckpt_error err = {0};
    cr_expect_eq(pk_to_json(pk_doc_root(doc), 100, 0, &s, &err), CKPT_E_LIMIT);
    cr_expect_null(s);
    cr_expect_eq(pk_to_json(pk_doc_root(doc), 201, 0, &s, &err), CKPT_OK, "%s", err.message);
    free(s);
    pk_doc_free(doc);
}

Test(value, null_arguments) {
    ckpt_error err = {0};
    char *s = (char *)"x";
    cr_expect_eq(ckpt_value_to_json(NULL, &s, &err), CKPT_E_INVAL);
    cr_expect_null(s);
    cr_expect_eq(ckpt_value_to_text(NULL, NULL, &err), CKPT_E_INVAL);
    cr_expect_eq(pk_to_json(NULL, 0, 0, NULL, NULL), CKPT_E_INVAL);
    ckpt_object *o = (ckpt_object *)&err;
    cr_expect_eq(ck_object_from_pickle(NULL, 0, &o, &err), CKPT_E_INVAL);
    cr_expect_null(o);
    cr_expect_eq(ckpt_value_type_of(NULL), CKPT_VALUE_NONE);
    cr_expect_eq(ckpt_value_len(NULL), 0);
    cr_expect_null(ckpt_value_item(NULL, 0));
    cr_expect_null(ckpt_value_str(NULL, NULL));
    cr_expect_null(ckpt_object_root(NULL));
    ckpt_object_free(NULL);
}

/* ------------------------------------------------------------------ formatting */

Test(value, float_repr_like_python) {
    static const struct {
        double d;
        const char *py, *json;
    } cases[] = {
        {0.001, "0.001", "0.001"},
        {1e-05, "1e-05", "1e-05"},
        {0.0001, "0.0001", "0.0001"},
        {1e16, "1e+16", "1e+16"},
        {1e15, "1000000000000000.0", "1000000000000000.0"},
        {123456789.123, "123456789.123", "123456789.123"},
        {5e-324, "5e-324", "5e-324"},
        {1.7976931348623157e308, "1.7976931348623157e+308", "1.7976931348623157e+308"},
        {-0.0, "-0.0", "-0.0"},
        {0.0, "0.0", "0.0"},
        {1.5, "1.5", "1.5"},
        {-2.5e-7, "-2.5e-07", "-2.5e-07"},
        {0.1 + 0.2, "0.30000000000000004", "0.30000000000000004"},
        {7.174648137343064e-43, "7.174648137343064e-43", "7.174648137343064e-43"},
        {NAN, "nan", "NaN"},
        {INFINITY, "inf", "Infinity"},
        {-INFINITY, "-inf", "-Infinity"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[FLOAT_REPR_MAX];
        size_t n = float_repr(cases[i].d, FLOAT_REPR_PYTHON, buf);
        cr_expect_str_eq(buf, cases[i].py);
        cr_expect_eq(n, strlen(cases[i].py));
        float_repr(cases[i].d, FLOAT_REPR_JSON, buf);
        cr_expect_str_eq(buf, cases[i].json);
    }
}

Test(value, float_repr_round_trips) {
    uint64_t x = 0x9E3779B97F4A7C15u;
    for (int i = 0; i < 100000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        double d;
        memcpy(&d, &x, sizeof d);
        if (!isfinite(d)) continue;
        char buf[FLOAT_REPR_MAX];
        float_repr(d, FLOAT_REPR_PYTHON, buf);
        cr_assert_eq(strtod(buf, NULL), d, "%s does not read back as %a", buf, d);
    }
}

static void expect_decimal(const char *le, size_t n, const char *want) {
    char out[128];
    cr_assert_leq(bigint_decimal_cap(n) + 1, sizeof out);
    size_t len = bigint_to_decimal((const uint8_t *)le, n, out, bigint_decimal_cap(n) + 1);
    cr_expect_str_eq(out, want);
    cr_expect_eq(len, strlen(want));
}

Test(value, bigint_decimal) {
    expect_decimal("", 0, "0");
    expect_decimal("\x00", 1, "0");
    expect_decimal("\xff", 1, "-1");
    expect_decimal("\x80", 1, "-128");
    expect_decimal("\x00\xca\x9a\x3b", 4, "1000000000");
    expect_decimal("\x00\x00\x00\x00\x00\x00\x00\x80\x00", 9, "9223372036854775808");
    expect_decimal("\x00\x00\x00\x00\x00\x00\x00\x80", 8, "-9223372036854775808");
    /* 2**100 */
    expect_decimal("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x10", 13,
                   "1267650600228229401496703205376");
    int64_t v;
    cr_expect(bigint_to_i64((const uint8_t *)"\xff\xff\xff\xff\xff\xff\xff\xff\xff", 9, &v));
    cr_expect_eq(v, -1);
    cr_expect_not(bigint_to_i64((const uint8_t *)"\x00\x00\x00\x00\x00\x00\x00\x80\x00", 9, &v));
    cr_expect_not(bigint_to_i64((const uint8_t *)"\x00\x00\x00\x00\x00\x00\x00\x80\xff", 9, &v) &&
                  v > 0);
}

/* ------------------------------------------------------------------ scale */

/* A protocol-2 pickle of {'k0000000': Entry(i=0, name='w'), ...} with n entries, Entry's class
 * and the 'i'/'name' keys memoized as a real .metadata would have them. */
static unsigned char *big_pickle(size_t n, size_t *len) {
    size_t cap = 64 + n * 64, at = 0;
    unsigned char *p = malloc(cap);
    cr_assert(p);
#define EMIT(s, l) (memcpy(p + at, (s), (l)), at += (l))
#define EMITS(lit) EMIT(lit, sizeof(lit) - 1)
    EMITS("\x80\x02}(");
    for (size_t i = 0; i < n; i++) {
        if (i && i % 1000 == 0) EMITS("u("); /* SETITEMS, MARK: batches of 1000 */
        char key[32];
        snprintf(key, sizeof key, "k%07zu", i % 10000000);
        EMITS("X\x08\x00\x00\x00");
        EMIT(key, 8);
        if (i == 0)
            EMITS("cmod\nEntry\nq\x00)\x81}(X\x01\x00\x00\x00iq\x01");
        else
            EMITS("h\x00)\x81}(h\x01");
        unsigned char num[5] = {'J', (unsigned char)i, (unsigned char)(i >> 8),
                                (unsigned char)(i >> 16), 0};
        EMIT(num, 5);
        if (i == 0)
            EMITS("X\x04\x00\x00\x00nameq\x02");
        else
            EMITS("h\x02");
        EMITS("X\x01\x00\x00\x00wub"); /* 'w', SETITEMS, BUILD */
    }
    EMITS("u.");
#undef EMITS
#undef EMIT
    *len = at;
    return p;
}

/* A large document renders completely and correctly (speed is measured by benchmarks, not
 * here). */
Test(value, pk_to_json_big_document, .timeout = 300) {
    const char *env = getenv("CKPT_VALUE_BIG_ENTRIES");
    size_t n = env ? (size_t)strtoull(env, NULL, 10) : 200000, len;
    unsigned char *pkl = big_pickle(n, &len);
    pk_limits lim = {0};
    pk_doc *doc = NULL;
    ckpt_error err = {0};
    cr_assert_eq(pk_decode(pkl, len, &lim, &doc, &err), CKPT_OK, "%s", err.message);
    free(pkl);
    char *json = NULL;
    cr_assert_eq(
        pk_to_json(pk_doc_root(doc), 0, pk_json_budget(pk_doc_bytes_used(doc)), &json, &err),
        CKPT_OK, "%s", err.message);
    const char *first = "{\"k0000000\":{\"__object__\":\"mod.Entry\",\"args\":[],"
                        "\"state\":{\"i\":0,\"name\":\"w\"}},";
    cr_expect_eq(strncmp(json, first, strlen(first)), 0, "starts %.100s", json);
    if (n) {
        char tail[128];
        snprintf(tail, sizeof tail,
                 "\"k%07zu\":{\"__object__\":\"mod.Entry\",\"args\":[],"
                 "\"state\":{\"i\":%zu,\"name\":\"w\"}}}",
                 n - 1, n - 1);
        size_t jl = strlen(json), tl = strlen(tail);
        cr_expect(jl > tl && strcmp(json + jl - tl, tail) == 0, "ends %s", json + jl - tl);
    }
    free(json);
    pk_doc_free(doc);
}
