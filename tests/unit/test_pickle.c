/* test_pickle.c — the data-only pickle decoder against real CPython pickles (protocols 0-5,
 * written by pickle_vectors/gen.py, found through CKPT_PICKLE_VECTORS) and against hostile
 * streams: exact decoded values, exact error codes and messages, limits, truncation at every
 * byte, and deep nesting. */
#include "test_util.h"
#include "pickle/pickle.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- helpers */

static uint8_t *load_vector(const char *name, size_t *len) {
    const char *dir = getenv("CKPT_PICKLE_VECTORS");
    if (!dir || !*dir) dir = "tests/unit/pickle_vectors";
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.pkl", dir, name);
    return tu_read_file(path, len); /* vectors: CKPT_PICKLE_VECTORS */
}

static pk_doc *decode_vector(const char *name) {
    size_t len;
    uint8_t *buf = load_vector(name, &len);
    pk_doc *doc = NULL;
    ckpt_error err = {0};
    ckpt_status st = pk_decode(buf, len, NULL, &doc, &err);
    free(buf); /* the document must not point into the input */
    cr_assert_eq(st, CKPT_OK, "%s: %s", name, err.message);
    cr_assert(doc && pk_doc_root(doc));
    return doc;
}

static ckpt_status decode_mem(const void *buf, size_t len, const pk_limits *lim, pk_doc **doc,
                              ckpt_error *err) {
    /* A private copy, so ASan/valgrind catch any read past `len`. */
    uint8_t *copy = malloc(len ? len : 1);
    cr_assert(copy);
    if (len) memcpy(copy, buf, len);
    ckpt_status st = pk_decode(copy, len, lim, doc, err);
    free(copy);
    return st;
}

#define MEM(lit) (const uint8_t *)(lit), sizeof(lit) - 1

static void expect_type(const pk_value *v, pk_type t) {
    cr_assert(v, "value is NULL, expected %s", pk_type_name(t));
    cr_assert_eq(v->type, t, "type %s, expected %s", pk_type_name(v->type), pk_type_name(t));
}

static void expect_int(const pk_value *v, int64_t x) {
    expect_type(v, PK_INT);
    cr_assert_eq(v->u.i, x, "int %lld, expected %lld", (long long)v->u.i, (long long)x);
}

static void expect_bool(const pk_value *v, bool b) {
    expect_type(v, PK_BOOL);
    cr_assert_eq(v->u.b, b);
}

static void expect_float(const pk_value *v, double d) {
    expect_type(v, PK_FLOAT);
    cr_assert(memcmp(&v->u.f, &d, sizeof d) == 0, "float %.17g, expected %.17g", v->u.f, d);
}

static void expect_blob(const pk_value *v, pk_type t, const void *p, size_t n) {
    expect_type(v, t);
    cr_assert_eq(v->u.str.len, n, "length %zu, expected %zu", v->u.str.len, n);
    cr_assert(memcmp(v->u.str.ptr, p, n) == 0, "content differs");
    cr_assert_eq(v->u.str.ptr[n], '\0', "not NUL-terminated");
}

static void expect_str(const pk_value *v, const char *s) { expect_blob(v, PK_STR, s, strlen(s)); }

static void expect_seq(const pk_value *v, pk_type t, size_t n) {
    expect_type(v, t);
    cr_assert_eq(v->u.seq.len, n, "%s of %zu items, expected %zu", pk_type_name(t), v->u.seq.len,
                 n);
}

static void expect_global(const pk_value *v, const char *module, const char *name) {
    expect_type(v, PK_GLOBAL);
    cr_assert_str_eq(v->u.global.module, module);
    cr_assert_str_eq(v->u.global.name, name);
}

static const pk_value *item(const pk_value *v, size_t i) {
    const pk_value *x = pk_item(v, i);
    cr_assert(x, "no item %zu", i);
    return x;
}

static const pk_value *get(const pk_value *v, const char *key) {
    const pk_value *x = pk_get(v, key);
    cr_assert(x, "no key '%s'", key);
    return x;
}

static void expect_fail(const void *buf, size_t len, const pk_limits *lim, ckpt_status code,
                        const char *needle) {
    pk_doc *doc = (pk_doc *)1;
    ckpt_error err = {0};
    ckpt_status st = decode_mem(buf, len, lim, &doc, &err);
    cr_assert_eq(st, code, "status %d (%s), expected %d", st, err.message, code);
    cr_assert_eq(err.code, code);
    cr_assert_null(doc);
    cr_assert(strncmp(err.message, "pickle offset ", 14) == 0, "message: %s", err.message);
    cr_assert(strstr(err.message, needle), "message '%s' lacks '%s'", err.message, needle);
}

static void expect_vector_fails(const char *name, ckpt_status code, const char *needle) {
    size_t len;
    uint8_t *buf = load_vector(name, &len);
    expect_fail(buf, len, NULL, code, needle);
    free(buf);
}

/* ---------------------------------------------------------------- valid vectors */

Test(pickle, nested_all_protocols) {
    for (int p = 0; p <= 5; p++) {
        char name[32];
        snprintf(name, sizeof name, "nested_p%d", p);
        pk_doc *doc = decode_vector(name);
        const pk_value *r = pk_doc_root(doc);
        expect_type(r, PK_DICT);
        cr_assert_eq(r->u.dict.len, 5);
        const char *keys[] = {"a", "b", "c", "e", "f"};
        for (size_t i = 0; i < 5; i++)
            expect_str(r->u.dict.keys[i], keys[i]);
        const pk_value *a = get(r, "a");
        expect_seq(a, PK_LIST, 3);
        expect_int(item(a, 0), 1);
        expect_int(item(a, 1), 2);
        const pk_value *t = item(a, 2);
        expect_seq(t, PK_TUPLE, 3);
        expect_int(item(t, 0), 3);
        expect_float(item(t, 1), 4.5);
        expect_type(item(t, 2), PK_NONE);
        const pk_value *b = get(r, "b");
        expect_type(b, PK_DICT);
        cr_assert_eq(pk_len(b), 2);
        expect_bool(get(b, "x"), true);
        expect_bool(get(b, "y"), false);
        expect_str(get(r, "c"), "h\xc3\xa9llo");
        expect_seq(get(r, "e"), PK_TUPLE, 0);
        expect_seq(get(r, "f"), PK_LIST, 0);
        cr_assert_null(pk_get(r, "missing"));
        cr_assert_gt(pk_doc_bytes_used(doc), 0);
        pk_doc_free(doc);
    }
}

static void check_ints(const pk_value *r) {
    expect_seq(r, PK_LIST, 16);
    const int64_t small[] = {0,     1,         -1,        255,        256,       65535,
                             65536, INT32_MIN, INT32_MAX, 2147483648, INT64_MAX, INT64_MIN};
    for (size_t i = 0; i < 12; i++)
        expect_int(item(r, i), small[i]);
    static const uint8_t p63[] = {0, 0, 0, 0, 0, 0, 0, 0x80, 0};
    static const uint8_t m63m1[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0xff};
    static const uint8_t p100[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10};
    static const uint8_t m100[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xf0};
    expect_blob(item(r, 12), PK_BIGINT, p63, sizeof p63);
    expect_blob(item(r, 13), PK_BIGINT, m63m1, sizeof m63m1);
    expect_blob(item(r, 14), PK_BIGINT, p100, sizeof p100);
    expect_blob(item(r, 15), PK_BIGINT, m100, sizeof m100);
}

Test(pickle, ints) {
    const char *names[] = {"ints_p0", "ints_p2", "ints_p4"};
    for (size_t i = 0; i < 3; i++) {
        pk_doc *doc = decode_vector(names[i]);
        check_ints(pk_doc_root(doc));
        pk_doc_free(doc);
    }
}

Test(pickle, floats) {
    const char *names[] = {"floats_p0", "floats_p4"};
    for (size_t i = 0; i < 2; i++) {
        pk_doc *doc = decode_vector(names[i]);
        const pk_value *r = pk_doc_root(doc);
        expect_seq(r, PK_LIST, 9);
        expect_float(item(r, 0), 0.0);
        expect_float(item(r, 1), -0.0);
        cr_assert(signbit(item(r, 1)->u.f));
        expect_float(item(r, 2), 1.5);
        expect_float(item(r, 3), -2.25);
        expect_float(item(r, 4), 1e300);
        expect_float(item(r, 5), INFINITY);
        expect_float(item(r, 6), -INFINITY);
        expect_type(item(r, 7), PK_FLOAT);
        cr_assert(isnan(item(r, 7)->u.f));
        expect_float(item(r, 8), 1e-310);
        pk_doc_free(doc);
    }
}

Test(pickle, strings) {
    const char *names[] = {"strings_p0", "strings_p1", "strings_p4"};
    for (size_t i = 0; i < 3; i++) {
        pk_doc *doc = decode_vector(names[i]);
        const pk_value *r = pk_doc_root(doc);
        expect_seq(r, PK_LIST, 7);
        expect_str(item(r, 0), "");
        expect_str(item(r, 1), "ascii");
        expect_str(item(r, 2), "h\xc3\xa9llo w\xc3\xb6rld");
        expect_str(item(r, 3), "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e");
        expect_str(item(r, 4), "\xf0\x9f\x98\x80");
        expect_str(item(r, 5), "a\\b\nc");
        expect_blob(item(r, 6), PK_STR, "nul\0byte", 8);
        cr_assert_str_eq(pk_as_str(item(r, 1)), "ascii");
        pk_doc_free(doc);
    }
}

Test(pickle, bytes_protocol3) {
    pk_doc *doc = decode_vector("bytes_p3");
    const pk_value *r = pk_doc_root(doc);
    expect_seq(r, PK_LIST, 3);
    expect_blob(item(r, 0), PK_BYTES, "", 0);
    expect_blob(item(r, 1), PK_BYTES,
                "\x00\xff"
                "abc",
                5);
    char x300[300];
    memset(x300, 'x', sizeof x300);
    expect_blob(item(r, 2), PK_BYTES, x300, sizeof x300);
    cr_assert_null(pk_as_str(item(r, 1)));
    pk_doc_free(doc);
}

Test(pickle, bytes_protocol2_codecs_encode) {
    /* Protocol 2 has no bytes opcode: bytes are _codecs.encode(latin-1 text, 'latin1'). */
    pk_doc *doc = decode_vector("bytes_p2");
    const pk_value *r = pk_doc_root(doc);
    expect_seq(r, PK_LIST, 3);
    const pk_value *e = item(r, 0);
    expect_type(e, PK_OBJECT);
    expect_global(e->u.obj.cls, "__builtin__", "bytes");
    expect_seq(e->u.obj.args, PK_TUPLE, 0);
    const pk_value *o = item(r, 1);
    expect_type(o, PK_OBJECT);
    cr_assert_eq(o->how, PK_HOW_REDUCE);
    cr_assert(pk_is_global(o->u.obj.cls, "_codecs", "encode"));
    expect_seq(o->u.obj.args, PK_TUPLE, 2);
    expect_blob(item(o->u.obj.args, 0), PK_STR,
                "\x00\xc3\xbf"
                "abc",
                6);
    expect_str(item(o->u.obj.args, 1), "latin1");
    pk_doc_free(doc);

    doc = decode_vector("codecs_bytes_p2");
    r = pk_doc_root(doc);
    cr_assert(pk_is_global(r->u.obj.cls, NULL, "encode"));
    expect_blob(item(r->u.obj.args, 0), PK_STR,
                "\x00\xc2\x80\xc3\xbf"
                "A",
                6);
    pk_doc_free(doc);
}

Test(pickle, bytearray_protocol5) {
    pk_doc *doc = decode_vector("bytearray_p5");
    expect_blob(pk_doc_root(doc), PK_BYTES, "ba", 2);
    pk_doc_free(doc);
}

Test(pickle, sets) {
    pk_doc *doc = decode_vector("sets_p4");
    const pk_value *r = pk_doc_root(doc);
    expect_seq(r, PK_LIST, 2);
    const pk_value *s = item(r, 0);
    expect_seq(s, PK_SET, 3);
    for (int i = 0; i < 3; i++)
        expect_int(item(s, (size_t)i), i + 1);
    expect_seq(item(r, 1), PK_FROZENSET, 1);
    expect_str(item(item(r, 1), 0), "a");
    pk_doc_free(doc);

    doc = decode_vector("sets_p2"); /* protocol 2: set([...]) and frozenset([...]) */
    r = pk_doc_root(doc);
    s = item(r, 0);
    expect_type(s, PK_OBJECT);
    expect_global(s->u.obj.cls, "__builtin__", "set");
    expect_seq(item(s->u.obj.args, 0), PK_LIST, 3);
    expect_global(item(r, 1)->u.obj.cls, "__builtin__", "frozenset");
    pk_doc_free(doc);
}

Test(pickle, memo_sharing) {
    const char *names[] = {"memo_shared_p2", "memo_shared_p4"};
    for (size_t i = 0; i < 2; i++) {
        pk_doc *doc = decode_vector(names[i]);
        const pk_value *r = pk_doc_root(doc);
        expect_seq(r, PK_LIST, 3);
        const pk_value *x = item(r, 0);
        expect_seq(x, PK_LIST, 2);
        cr_assert_eq(item(r, 1), x, "memo GET must share the value");
        cr_assert_eq(get(item(r, 2), "k"), x);
        pk_doc_free(doc);
    }
}

Test(pickle, self_referencing_list) {
    const char *names[] = {"selfref_p0", "selfref_p2", "selfref_p4"};
    for (size_t i = 0; i < 3; i++) {
        pk_doc *doc = decode_vector(names[i]);
        const pk_value *r = pk_doc_root(doc);
        expect_seq(r, PK_LIST, 1);
        cr_assert_eq(item(r, 0), r);
        pk_doc_free(doc);
    }
}

Test(pickle, ordered_dict) {
    const char *names[] = {"ordered_dict_p2", "ordered_dict_p4"};
    for (size_t i = 0; i < 2; i++) {
        pk_doc *doc = decode_vector(names[i]);
        const pk_value *r = pk_doc_root(doc);
        expect_type(r, PK_OBJECT);
        cr_assert(pk_is_global(r->u.obj.cls, "collections", "OrderedDict"));
        cr_assert_eq(r->how, PK_HOW_REDUCE);
        expect_seq(r->u.obj.args, PK_TUPLE, 0);
        cr_assert_null(r->u.obj.state);
        cr_assert_null(pk_obj_listitems(r));
        const pk_value *d = pk_obj_dictitems(r);
        expect_type(d, PK_DICT);
        cr_assert_eq(d->u.dict.len, 2);
        expect_str(d->u.dict.keys[0], "b");
        expect_int(d->u.dict.vals[0], 1);
        expect_str(d->u.dict.keys[1], "a");
        expect_int(pk_get(r, "a"), 2);
        pk_doc_free(doc);
    }
}

Test(pickle, class_instance) {
    const char *names[] = {"instance_p2", "instance_p4"};
    for (size_t i = 0; i < 2; i++) {
        pk_doc *doc = decode_vector(names[i]);
        const pk_value *r = pk_doc_root(doc);
        expect_type(r, PK_OBJECT);
        cr_assert_eq(r->how, PK_HOW_NEWOBJ);
        cr_assert_str_eq(pk_class_name(r), "Point");
        cr_assert_str_eq(pk_class_module(r), "__main__");
        expect_seq(r->u.obj.args, PK_TUPLE, 0);
        cr_assert_null(pk_obj_kwargs(r));
        expect_type(r->u.obj.state, PK_DICT);
        expect_int(get(r, "x"), 1);
        expect_str(get(r, "y"), "two");
        pk_doc_free(doc);
    }
    /* Protocol 0: copy_reg._reconstructor(Point, object, None), names kept as written. */
    pk_doc *doc = decode_vector("instance_p0");
    const pk_value *r = pk_doc_root(doc);
    expect_type(r, PK_OBJECT);
    expect_global(r->u.obj.cls, "copy_reg", "_reconstructor");
    expect_seq(r->u.obj.args, PK_TUPLE, 3);
    expect_global(item(r->u.obj.args, 0), "__main__", "Point");
    expect_global(item(r->u.obj.args, 1), "__builtin__", "object");
    expect_type(item(r->u.obj.args, 2), PK_NONE);
    expect_int(get(r, "x"), 1);
    expect_str(get(r, "y"), "two");
    pk_doc_free(doc);
}

Test(pickle, inst_and_obj) {
    pk_doc *doc = decode_vector("inst_obj_p0");
    const pk_value *r = pk_doc_root(doc);
    expect_seq(r, PK_LIST, 2);
    for (size_t i = 0; i < 2; i++) {
        const pk_value *o = item(r, i);
        expect_type(o, PK_OBJECT);
        cr_assert_eq(o->how, PK_HOW_REDUCE);
        expect_global(o->u.obj.cls, "__main__", "Point");
        expect_seq(o->u.obj.args, PK_TUPLE, 2);
        expect_int(item(o->u.obj.args, 0), (int64_t)i + 1);
        expect_str(item(o->u.obj.args, 1), i ? "b" : "a");
    }
    pk_doc_free(doc);
}

Test(pickle, newobj_ex) {
    pk_doc *doc = decode_vector("newobj_ex_p4");
    const pk_value *r = pk_doc_root(doc);
    expect_type(r, PK_OBJECT);
    cr_assert_eq(r->how, PK_HOW_NEWOBJ_EX);
    cr_assert_str_eq(pk_class_name(r), "KW");
    expect_seq(r->u.obj.args, PK_TUPLE, 1);
    expect_int(item(r->u.obj.args, 0), 7);
    expect_int(get(pk_obj_kwargs(r), "k"), 8);
    expect_int(get(r, "a"), 7);
    pk_doc_free(doc);
}

Test(pickle, frames_protocol5) {
    pk_doc *doc = decode_vector("frame_p5");
    const pk_value *r = pk_doc_root(doc);
    const pk_value *k = get(r, "k");
    expect_seq(k, PK_LIST, 10);
    for (size_t i = 0; i < 10; i++)
        expect_int(item(k, i), (int64_t)i);
    char x100[101];
    memset(x100, 'x', 100);
    x100[100] = '\0';
    expect_str(get(r, "s"), x100);
    pk_doc_free(doc);
}

Test(pickle, persistent_ids) {
    pk_doc *doc = decode_vector("persid_p0");
    const pk_value *t = get(pk_doc_root(doc), "t");
    expect_type(t, PK_PERSID);
    expect_str(t->u.persid.pid, "storage0");
    pk_doc_free(doc);

    doc = decode_vector("persid_p2");
    t = get(pk_doc_root(doc), "t");
    expect_type(t, PK_PERSID);
    const pk_value *pid = t->u.persid.pid;
    expect_seq(pid, PK_TUPLE, 5);
    expect_str(item(pid, 0), "storage");
    expect_global(item(pid, 1), "torch", "FloatStorage");
    expect_str(item(pid, 2), "0");
    expect_str(item(pid, 3), "cpu");
    expect_int(item(pid, 4), 6);
    pk_doc_free(doc);
}

static void check_size(const pk_value *v, const int64_t *want, size_t n) {
    int64_t got[8];
    size_t m = 99;
    cr_assert(pk_as_int_seq(v, got, 8, &m), "not an int sequence");
    cr_assert_eq(m, n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(got[i], want[i]);
}

Test(pickle, dcp_metadata_shape) {
    const char *md = "torch.distributed.checkpoint.metadata";
    const char *names[] = {"metadata_p3", "metadata_p4"};
    for (size_t n = 0; n < 2; n++) {
        pk_doc *doc = decode_vector(names[n]);
        const pk_value *r = pk_doc_root(doc);
        expect_type(r, PK_OBJECT);
        cr_assert_str_eq(pk_class_name(r), "Metadata");
        cr_assert_str_eq(pk_class_module(r), md);
        cr_assert_eq(r->how, PK_HOW_NEWOBJ);
        expect_str(get(r, "version"), "1.0.0");

        const pk_value *sdm = get(r, "state_dict_metadata");
        cr_assert_eq(pk_len(sdm), 3);
        const pk_value *w = get(sdm, "model.w");
        cr_assert_str_eq(pk_class_name(w), "TensorStorageMetadata");
        const pk_value *size = get(w, "size");
        expect_type(size, PK_TUPLE); /* torch.Size((4, 3)) decodes as its tuple */
        check_size(size, (const int64_t[]){4, 3}, 2);
        int64_t small[1];
        size_t cnt;
        cr_assert_not(pk_as_int_seq(size, small, 1, &cnt), "cap must be honoured");
        const pk_value *chunks = get(w, "chunks");
        expect_seq(chunks, PK_LIST, 2);
        check_size(get(item(chunks, 1), "offsets"), (const int64_t[]){2, 0}, 2);
        check_size(get(item(chunks, 1), "sizes"), (const int64_t[]){2, 3}, 2);
        const pk_value *props = get(w, "properties");
        cr_assert_str_eq(pk_class_name(props), "TensorProperties");
        expect_seq(props->u.obj.state, PK_TUPLE, 5);
        cr_assert(pk_is_global(item(props->u.obj.state, 0), "torch", "float32"));
        const pk_value *layout = item(props->u.obj.state, 1);
        cr_assert(pk_is_global(layout->u.obj.cls, "torch.serialization", "_get_layout"));
        expect_str(item(layout->u.obj.args, 0), "torch.strided");
        expect_bool(item(props->u.obj.state, 2), false);
        cr_assert_str_eq(pk_class_name(item(props->u.obj.state, 3)), "_MEM_FORMAT_ENCODING");

        const pk_value *lr = get(sdm, "optim.lr");
        cr_assert_str_eq(pk_class_name(lr), "BytesStorageMetadata");
        cr_assert_null(lr->u.obj.state);

        const pk_value *sd = get(r, "storage_data");
        expect_type(sd, PK_DICT);
        cr_assert_eq(sd->u.dict.len, 4);
        const pk_value *k2 = sd->u.dict.keys[2], *v2 = sd->u.dict.vals[2];
        cr_assert_str_eq(pk_class_name(k2), "MetadataIndex");
        expect_str(get(k2, "fqn"), "model.b");
        expect_int(get(k2, "index"), 0);
        check_size(get(k2, "offset"), (const int64_t[]){0}, 1);
        cr_assert_str_eq(pk_class_module(v2), "torch.distributed.checkpoint.filesystem");
        expect_str(get(v2, "relative_path"), "__0_0.distcp");
        expect_int(get(v2, "offset"), 5000000000);
        expect_int(get(v2, "length"), 70);
        const pk_value *k3 = sd->u.dict.keys[3];
        expect_str(get(k3, "fqn"), "optim.lr");
        expect_type(get(k3, "index"), PK_NONE);
        cr_assert_null(pk_get(k3, "offset"));

        const pk_value *pd = get(get(r, "planner_data"), "optim.lr");
        expect_seq(pd, PK_TUPLE, 4);
        expect_str(item(pd, 1), "param_groups");
        expect_int(item(pd, 2), 0);
        pk_doc_free(doc);
    }
}

Test(pickle, python2_str_opcodes) {
    pk_doc *doc = decode_vector("py2str_p0");
    const pk_value *r = pk_doc_root(doc);
    expect_seq(r, PK_LIST, 4);
    expect_str(item(r, 0), "abc\xc2\x80\n"); /* not UTF-8: read as Latin-1 */
    expect_str(item(r, 1), "q'\\");
    expect_str(item(r, 2), "\xc3\xa9!"); /* valid UTF-8 kept */
    expect_str(item(r, 3), "\xc3\xa9!"); /* Latin-1 0xe9 */
    pk_doc_free(doc);
}

Test(pickle, stack_ops) {
    /* ((None, 8), ((1,), 5, ((5, 5),))) from MARK/POP_MARK/DUP/POP/POP-on-mark/PUT/GET. */
    pk_doc *doc = decode_vector("stack_ops_p0");
    const pk_value *r = pk_doc_root(doc);
    expect_seq(r, PK_TUPLE, 2);
    const pk_value *a = item(r, 0), *b = item(r, 1);
    expect_seq(a, PK_TUPLE, 2);
    expect_type(item(a, 0), PK_NONE);
    expect_int(item(a, 1), 8);
    expect_seq(b, PK_TUPLE, 3);
    expect_seq(item(b, 0), PK_TUPLE, 1);
    expect_int(item(item(b, 0), 0), 1);
    expect_int(item(b, 1), 5);
    const pk_value *c = item(item(b, 2), 0);
    expect_seq(c, PK_TUPLE, 2);
    expect_int(item(c, 0), 5);
    cr_assert_eq(item(c, 0), item(c, 1));
    pk_doc_free(doc);
}

Test(pickle, long_and_wide_opcodes) {
    pk_doc *doc = decode_vector("long_ops_p4");
    const pk_value *r = pk_doc_root(doc);
    expect_seq(r, PK_TUPLE, 9);
    expect_str(item(r, 0), "h\xc3\xa9");              /* BINUNICODE8 */
    expect_blob(item(r, 1), PK_BYTES, "\x00\xff", 2); /* BINBYTES8 */
    expect_int(item(r, 2), 32767);                    /* LONG4 */
    expect_int(item(r, 3), -1);                       /* LONG1, 9 redundant bytes */
    expect_int(item(r, 4), 0);                        /* LONG1, 0 bytes */
    static const uint8_t big[] = {0x35, 0xbb, 0xbd, 0x8e, 0x89, 0xb1, 0x49, 0xbd, 0x62, 0xfd};
    expect_blob(item(r, 5), PK_BIGINT, big, sizeof big); /* LONG text */
    expect_bool(item(r, 6), false);                      /* I00 */
    expect_bool(item(r, 7), true);                       /* I01 */
    expect_float(item(r, 8), 2.5);                       /* FLOAT */
    pk_doc_free(doc);
}

Test(pickle, sparse_memo) {
    /* LONG_BINPUT 1048576, then MEMOIZE stores at len(memo) == 1. */
    pk_doc *doc = decode_vector("memo_sparse_p4");
    const pk_value *r = pk_doc_root(doc);
    expect_seq(r, PK_TUPLE, 2);
    expect_int(item(r, 0), 6);
    expect_int(item(item(r, 1), 0), 5);
    expect_int(item(item(r, 1), 1), 6);
    pk_doc_free(doc);
}

/* ---------------------------------------------------------------- hand-made streams */

Test(pickle, memo_index_at_limit_uses_little_memory) {
    /* LONG_BINPUT/LONG_BINGET 0xffffffff are fine when max_memo allows them, and the memo
     * does not grow to the index. */
    pk_limits lim = {.max_memo = 1ull << 40};
    pk_doc *doc = NULL;
    ckpt_error err = {0};
    ckpt_status st = decode_mem(MEM("\x80\x02K\x07r\xff\xff\xff\xff"
                                    "0j\xff\xff\xff\xff."),
                                &lim, &doc, &err);
    cr_assert_eq(st, CKPT_OK, "%s", err.message);
    expect_int(pk_doc_root(doc), 7);
    cr_assert_lt(pk_doc_bytes_used(doc), 1u << 20);
    pk_doc_free(doc);
}

Test(pickle, memo_put_overwrites_and_text_forms) {
    pk_doc *doc = NULL;
    ckpt_error err = {0};
    /* PUT 1 twice (second wins), GET 1, MEMOIZE after sparse puts. */
    ckpt_status st = decode_mem(MEM("I1\np1\n0I2\np1\n0g1\n."), NULL, &doc, &err);
    cr_assert_eq(st, CKPT_OK, "%s", err.message);
    expect_int(pk_doc_root(doc), 2);
    pk_doc_free(doc);
}

Test(pickle, text_int_overflow_becomes_bigint) {
    pk_doc *doc = NULL;
    ckpt_error err = {0};
    cr_assert_eq(decode_mem(MEM("(I18446744073709551616\nI-9223372036854775809\nL+7L\nl."), NULL,
                            &doc, &err),
                 CKPT_OK, "%s", err.message);
    const pk_value *r = pk_doc_root(doc);
    expect_blob(item(r, 0), PK_BIGINT, "\0\0\0\0\0\0\0\0\x01", 9);
    expect_blob(item(r, 1), PK_BIGINT, "\xff\xff\xff\xff\xff\xff\xff\x7f\xff", 9);
    expect_int(item(r, 2), 7);
    pk_doc_free(doc);
}

Test(pickle, duplicate_keys_last_wins) {
    pk_doc *doc = NULL;
    ckpt_error err = {0};
    cr_assert_eq(decode_mem(MEM("\x80\x04}(\x8c\x01"
                                "aK\x01\x8c\x01"
                                "aK\x02u."),
                            NULL, &doc, &err),
                 CKPT_OK);
    expect_int(get(pk_doc_root(doc), "a"), 2);
    pk_doc_free(doc);
}

Test(pickle, build_twice_replaces_state) {
    pk_doc *doc = NULL;
    ckpt_error err = {0};
    cr_assert_eq(decode_mem(MEM("\x80\x02"
                                "cm\nC\n)\x81K\x01"
                                "bK\x02"
                                "b."),
                            NULL, &doc, &err),
                 CKPT_OK, "%s", err.message);
    const pk_value *r = pk_doc_root(doc);
    expect_int(r->u.obj.state, 2);
    pk_doc_free(doc);
}

/* REDUCE of torch.Size on one tuple of ints gives that tuple; anything else stays an object. */
Test(pickle, torch_size_is_its_tuple) {
    static const struct {
        const char *what;
        const uint8_t *p;
        size_t n;
        bool collapsed;
    } cases[] = {
        {"Size((2, 3))",
         MEM("\x80\x02"
             "ctorch\nSize\nK\x02K\x03\x86\x85R."),
         true},
        {"Size(())",
         MEM("\x80\x02"
             "ctorch\nSize\n)\x85R."),
         true},
        {"Size([2, 3]) (a list)",
         MEM("\x80\x02"
             "ctorch\nSize\n]K\x02K\x03\x86\x85R."),
         false},
        {"Size((2, 'a'))",
         MEM("\x80\x02"
             "ctorch\nSize\nK\x02X\x01\x00\x00\x00"
             "a\x86\x85R."),
         false},
        {"Size((2,), (3,)) (two args)",
         MEM("\x80\x02"
             "ctorch\nSize\nK\x02\x85K\x03\x85\x86R."),
         false},
        {"other.Size((2,))",
         MEM("\x80\x02"
             "cother\nSize\nK\x02\x85\x85R."),
         false},
        {"torch.Sizes((2,))",
         MEM("\x80\x02"
             "ctorch\nSizes\nK\x02\x85\x85R."),
         false},
        {"NEWOBJ torch.Size",
         MEM("\x80\x02"
             "ctorch\nSize\nK\x02\x85\x85\x81."),
         false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pk_doc *doc = NULL;
        ckpt_error err = {0};
        cr_assert_eq(decode_mem(cases[i].p, cases[i].n, NULL, &doc, &err), CKPT_OK, "%s: %s",
                     cases[i].what, err.message);
        const pk_value *r = pk_doc_root(doc);
        cr_assert_eq(r->type, cases[i].collapsed ? PK_TUPLE : PK_OBJECT, "%s: %s", cases[i].what,
                     pk_type_name(r->type));
        pk_doc_free(doc);
    }
    /* The tuple is the value: a memo reference to the Size is that tuple too. */
    pk_doc *doc = NULL;
    ckpt_error err = {0};
    cr_assert_eq(decode_mem(MEM("\x80\x02"
                                "ctorch\nSize\nK\x02K\x03\x86\x85Rq\x00h\x00\x86."),
                            NULL, &doc, &err),
                 CKPT_OK, "%s", err.message);
    const pk_value *r = pk_doc_root(doc);
    expect_seq(r, PK_TUPLE, 2);
    cr_assert_eq(item(r, 0), item(r, 1));
    check_size(item(r, 0), (const int64_t[]){2, 3}, 2);
    pk_doc_free(doc);
    /* BUILD of a state on it fails as in Python (a torch.Size has no __dict__ to update). */
    expect_fail(MEM("\x80\x02"
                    "ctorch\nSize\nK\x02\x85\x85R}X\x01\x00\x00\x00"
                    "aK\x01sb."),
                NULL, CKPT_E_FORMAT, "BUILD on tuple");
}

Test(pickle, append_onto_object_goes_to_listitems) {
    pk_doc *doc = NULL;
    ckpt_error err = {0};
    cr_assert_eq(decode_mem(MEM("\x80\x02"
                                "cm\nL\n)RK\x01"
                                "a(K\x02K\x03"
                                "e."),
                            NULL, &doc, &err),
                 CKPT_OK, "%s", err.message);
    const pk_value *li = pk_obj_listitems(pk_doc_root(doc));
    expect_seq(li, PK_LIST, 3);
    expect_int(item(li, 2), 3);
    pk_doc_free(doc);
}

Test(pickle, deep_nesting_allowed_when_limit_allows) {
    /* The decoder does not recurse: 100 000 nested lists decode with a large max_depth. */
    enum { N = 100000 };
    uint8_t *buf = malloc(2 * N + 3);
    size_t n = 0;
    buf[n++] = 0x80;
    buf[n++] = 2;
    for (int i = 0; i < N; i++)
        buf[n++] = ']';
    for (int i = 0; i < N - 1; i++)
        buf[n++] = 'a';
    buf[n++] = '.';
    pk_limits lim = {.max_depth = N + 1};
    pk_doc *doc = NULL;
    ckpt_error err = {0};
    cr_assert_eq(decode_mem(buf, n, &lim, &doc, &err), CKPT_OK, "%s", err.message);
    const pk_value *v = pk_doc_root(doc);
    for (int i = 0; i < N - 1; i++)
        v = item(v, 0);
    expect_seq(v, PK_LIST, 0);
    pk_doc_free(doc);
    /* The default bound rejects it. */
    expect_fail(buf, n, NULL, CKPT_E_LIMIT, "nested too deeply");
    free(buf);
}

static void deep_stream(const char *prefix, const char *open, const char *close, size_t count,
                        ckpt_status code, const char *needle) {
    size_t lp = strlen(prefix), lo = strlen(open), lc = strlen(close);
    uint8_t *buf = malloc(lp + count * (lo + lc) + 4);
    size_t n = lp;
    memcpy(buf, prefix, lp);
    for (size_t i = 0; i < count; i++, n += lo)
        memcpy(buf + n, open, lo);
    for (size_t i = 0; i < count; i++, n += lc)
        memcpy(buf + n, close, lc);
    buf[n++] = '.';
    expect_fail(buf, n, NULL, code, needle);
    free(buf);
}

Test(pickle, hostile_depth) {
    deep_stream("", "]", "a", 100000, CKPT_E_LIMIT, "nested too deeply (limit 512)");
    deep_stream("", "(", "t", 100000, CKPT_E_LIMIT,
                "MARKs nested too deeply (limit 512) (opcode 0x28");
    deep_stream("}", "K\x01}", "s", 100000, CKPT_E_LIMIT, "nested too deeply");
    /* ) TUPLE1 TUPLE1 ...: depth grows without marks. */
    uint8_t *buf = malloc(100002);
    buf[0] = ')';
    memset(buf + 1, 0x85, 100000);
    buf[100001] = '.';
    expect_fail(buf, 100002, NULL, CKPT_E_LIMIT, "(opcode 0x85 TUPLE1)");
    free(buf);
}

Test(pickle, self_append_is_bounded) {
    /* DUP APPEND, over and over: a list appended into itself gets one level deeper each time
     * (its real depth is infinite), so it ends at max_depth instead of looping. */
    uint8_t buf[1 + 2 * 600 + 1];
    size_t n = 0;
    buf[n++] = ']';
    for (int i = 0; i < 600; i++) {
        buf[n++] = '2';
        buf[n++] = 'a';
    }
    buf[n++] = '.';
    expect_fail(buf, n, NULL, CKPT_E_LIMIT, "nested too deeply");
}

Test(pickle, hostile_vectors) {
    static const struct {
        const char *name;
        ckpt_status code;
        const char *needle;
    } cases[] = {
        {"bad_unknown_op", CKPT_E_FORMAT, "pickle offset 2: unknown opcode 0xff"},
        {"bad_binunicode8_huge", CKPT_E_FORMAT,
         "pickle offset 2: truncated: argument needs 1152921504606846976 bytes, 4 left "
         "(opcode 0x8d BINUNICODE8)"},
        {"bad_binbytes8_huge", CKPT_E_FORMAT, "truncated: argument needs 18446744073709551615"},
        {"bad_binunicode_huge", CKPT_E_FORMAT, "truncated: argument needs 4294967295 bytes"},
        {"bad_long_binget_missing", CKPT_E_FORMAT,
         "pickle offset 2: memo key 12345 not found (opcode 0x6a LONG_BINGET)"},
        {"bad_long_binput_max", CKPT_E_LIMIT,
         "pickle offset 3: memo index 4294967295 too large (limit 16777216) (opcode 0x72 "
         "LONG_BINPUT)"},
        {"bad_stack_global_nonstr", CKPT_E_FORMAT,
         "STACK_GLOBAL needs two strings, got int and int (opcode 0x93 STACK_GLOBAL)"},
        {"bad_underflow_append", CKPT_E_FORMAT,
         "pickle offset 4: stack underflow (opcode 0x61 APPEND)"},
        {"bad_underflow_mark", CKPT_E_FORMAT, "stack underflow (opcode 0x61 APPEND)"},
        {"bad_pop_empty", CKPT_E_FORMAT, "pickle offset 0: stack underflow (opcode 0x30 POP)"},
        {"bad_tuple_nomark", CKPT_E_FORMAT, "no MARK on the stack (opcode 0x74 TUPLE)"},
        {"bad_stop_empty", CKPT_E_FORMAT, "stack underflow (opcode 0x2e STOP)"},
        {"bad_no_stop", CKPT_E_FORMAT, "pickle offset 3: truncated: input ends before STOP"},
        {"bad_next_buffer", CKPT_E_UNSUPPORTED, "(opcode 0x97 NEXT_BUFFER)"},
        {"bad_readonly_buffer", CKPT_E_UNSUPPORTED, "(opcode 0x98 READONLY_BUFFER)"},
        {"bad_ext1", CKPT_E_UNSUPPORTED,
         "extension registry codes are not supported (opcode 0x82 EXT1)"},
        {"bad_setitems_list", CKPT_E_FORMAT, "cannot set items on list (opcode 0x75 SETITEMS)"},
        {"bad_appends_dict", CKPT_E_FORMAT, "cannot append to dict (opcode 0x65 APPENDS)"},
        {"bad_odd_setitems", CKPT_E_FORMAT, "odd number of items"},
        {"bad_build_list", CKPT_E_FORMAT, "BUILD on list (opcode 0x62 BUILD)"},
        {"bad_reduce_nontuple", CKPT_E_FORMAT, "arguments are int, not tuple (opcode 0x52"},
        {"bad_utf8", CKPT_E_FORMAT, "not valid UTF-8 (opcode 0x8c SHORT_BINUNICODE)"},
        {"bad_surrogate", CKPT_E_FORMAT, "not valid UTF-8"},
        {"bad_long4_negative", CKPT_E_FORMAT, "negative LONG4 byte count (opcode 0x8b LONG4)"},
        {"bad_proto6", CKPT_E_UNSUPPORTED, "unsupported pickle protocol 6 (opcode 0x80 PROTO)"},
        {"bad_get_missing", CKPT_E_FORMAT, "memo key 5 not found (opcode 0x67 GET)"},
        {"bad_global_nul", CKPT_E_FORMAT, "(opcode 0x63 GLOBAL)"},
        {"bad_deep_lists", CKPT_E_LIMIT, "containers nested too deeply (limit 512)"},
        {"bad_deep_marks", CKPT_E_LIMIT, "pickle offset 512: MARKs nested too deeply"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_vector_fails(cases[i].name, cases[i].code, cases[i].needle);
}

Test(pickle, hostile_text_arguments) {
    expect_fail(MEM("Ix\n."), NULL, CKPT_E_FORMAT, "invalid integer literal (opcode 0x49 INT)");
    expect_fail(MEM("I12"), NULL, CKPT_E_FORMAT, "truncated: text argument has no newline");
    expect_fail(MEM("F1.5x\n."), NULL, CKPT_E_FORMAT, "invalid float literal");
    expect_fail(MEM("F0x1p3\n."), NULL, CKPT_E_FORMAT, "invalid float literal");
    expect_fail(MEM("Vab\\u12\n."), NULL, CKPT_E_FORMAT,
                "truncated \\u escape (4 hex digits expected)");
    expect_fail(MEM("V\\ud800\n."), NULL, CKPT_E_FORMAT, "surrogate");
    expect_fail(MEM("V\\U00110000\n."), NULL, CKPT_E_FORMAT, "out of range");
    expect_fail(MEM("S'abc\n."), NULL, CKPT_E_FORMAT, "not quoted");
    expect_fail(MEM("S'\\x4'\n."), NULL, CKPT_E_FORMAT, "invalid \\x escape");
    expect_fail(MEM("Pn\xc3\xa9\n."), NULL, CKPT_E_FORMAT, "not ASCII (opcode 0x50 PERSID)");
    expect_fail(MEM("p-1\n."), NULL, CKPT_E_FORMAT, "invalid memo index");
    expect_fail(MEM("N\x8b\x01\x00\x00"), NULL, CKPT_E_FORMAT, "truncated");
    expect_fail(MEM("\x80\x04\x95\xff\x00\x00\x00\x00\x00\x00\x00N."), NULL, CKPT_E_FORMAT,
                "truncated: argument needs 255 bytes, 2 left (opcode 0x95 FRAME)");
    expect_fail(MEM("K\x01K\x02\x93."), NULL, CKPT_E_FORMAT, "STACK_GLOBAL needs two strings");
    expect_fail(MEM("\x8c\x01"
                    "a\x8c\x02"
                    "b\x00\x93."),
                NULL, CKPT_E_FORMAT, "got str and str");
    expect_fail(MEM("\x80\x04"
                    "cm\nC\n)K\x01\x92."),
                NULL, CKPT_E_FORMAT, "NEWOBJ_EX needs a tuple and a dict, got tuple and int");
    expect_fail(MEM("(o."), NULL, CKPT_E_FORMAT, "OBJ without a class");
    expect_fail(MEM("((\x90."), NULL, CKPT_E_FORMAT, "stack underflow (opcode 0x90");
    expect_fail(MEM("](\x90."), NULL, CKPT_E_FORMAT, "cannot add items to list");

    char *digits = malloc(5000 + 3);
    digits[0] = 'L';
    memset(digits + 1, '7', 5000);
    digits[5001] = '\n';
    digits[5002] = '.';
    expect_fail(digits, 5003, NULL, CKPT_E_LIMIT, "longer than 4300 digits");
    free(digits);
}

Test(pickle, truncated_at_every_offset) {
    const char *names[] = {"nested_p0",   "nested_p2",  "nested_p5",   "metadata_p3",
                           "metadata_p4", "strings_p0", "long_ops_p4", "py2str_p0",
                           "ints_p0",     "floats_p0",  "persid_p0",   "inst_obj_p0"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        size_t len;
        uint8_t *buf = load_vector(names[k], &len);
        for (size_t cut = 0; cut < len; cut++) {
            pk_doc *doc = (pk_doc *)1;
            ckpt_error err = {0};
            ckpt_status st = decode_mem(buf, cut, NULL, &doc, &err);
            cr_assert_eq(st, CKPT_E_FORMAT, "%s cut at %zu: %d %s", names[k], cut, st, err.message);
            cr_assert_null(doc);
            cr_assert(strstr(err.message, "truncated"), "%s cut at %zu: %s", names[k], cut,
                      err.message);
        }
        free(buf);
    }
}

Test(pickle, limits) {
    size_t len;
    uint8_t *buf = load_vector("metadata_p4", &len);
    pk_limits items = {.max_items = 20};
    expect_fail(buf, len, &items, CKPT_E_LIMIT, "too many values (limit 20)");
    pk_limits bytes = {.max_bytes = 2048};
    expect_fail(buf, len, &bytes, CKPT_E_LIMIT, "memory budget");
    pk_limits memo = {.max_memo = 10};
    expect_fail(buf, len, &memo, CKPT_E_LIMIT, "memo index 10 too large (limit 10)");
    pk_limits depth = {.max_depth = 3};
    expect_fail(buf, len, &depth, CKPT_E_LIMIT, "nested too deeply (limit 3)");
    free(buf);

    /* The stack is bounded too (by max_items and by the byte budget). */
    uint8_t many[4096];
    memset(many, 'N', sizeof many);
    many[sizeof many - 1] = '.';
    pk_limits stack = {.max_items = 1000};
    expect_fail(many, sizeof many, &stack, CKPT_E_LIMIT, "stack too large (limit 1000)");
}

Test(pickle, helpers_accept_null_and_wrong_types) {
    cr_assert_not(pk_is_global(NULL, NULL, "x"));
    cr_assert_null(pk_class_name(NULL));
    cr_assert_null(pk_class_module(NULL));
    cr_assert_null(pk_get(NULL, "x"));
    cr_assert_eq(pk_len(NULL), 0);
    cr_assert_null(pk_item(NULL, 0));
    int64_t x;
    cr_assert_not(pk_as_int(NULL, &x));
    size_t n;
    cr_assert_not(pk_as_int_seq(NULL, &x, 1, &n));
    cr_assert_null(pk_as_str(NULL));
    cr_assert_null(pk_doc_root(NULL));
    cr_assert_eq(pk_doc_bytes_used(NULL), 0);
    pk_doc_free(NULL);

    pk_doc *doc = NULL;
    ckpt_error err = {0};
    /* (1, True, 'a') */
    cr_assert_eq(decode_mem(MEM("\x80\x02K\x01\x88X\x01\x00\x00\x00"
                                "a\x87."),
                            NULL, &doc, &err),
                 CKPT_OK);
    const pk_value *t = pk_doc_root(doc);
    cr_assert_null(pk_item(t, 3));
    cr_assert(pk_as_int(item(t, 1), &x) && x == 1);
    cr_assert_null(pk_as_str(item(t, 0)));
    int64_t xs[8];
    cr_assert_not(pk_as_int_seq(t, xs, 8, &n), "'a' is not an int");
    cr_assert_null(pk_class_name(t));
    cr_assert_null(pk_get(t, "a"));
    cr_assert_str_eq(pk_type_name(PK_FROZENSET), "frozenset");
    pk_doc_free(doc);

    cr_assert_eq(pk_decode(NULL, 3, NULL, &doc, &err), CKPT_E_INVAL);
    cr_assert_eq(pk_decode((const uint8_t *)"N.", 2, NULL, NULL, NULL), CKPT_E_INVAL);
}
