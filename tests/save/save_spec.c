/* save_spec.c — writes a checkpoint described by a JSON spec, so Python tests can save any
 * state_dict (a real model and optimizer) through the C saver and load it back with torch.
 *
 * usage: save_spec SPEC.json FINAL_DIR
 *
 * spec: {"ranks": [{"rank": R, "items": [ITEM, ...]}, ...]}
 *   ITEM tensor: {"kind": "tensor", "flat": K, "path": [str|int, ...], "dtype": "bfloat16",
 *                 "shape": [...], "offsets": [...], "sizes": [...], "data": FILE,
 *                 "replica": N}      (data: raw C-order bytes of the box; replica optional)
 *   ITEM value:  {"kind": "value", "flat": K, "path": [...], "value": V, "replica": N}
 *   V: null, bool, int, float (a JSON number with a fraction/exponent), string, array (list),
 *      object (dict), or {"__tuple__": [V, ...]} / {"__float__": "inf"|"-inf"|"nan"}. */
#include "ckpt_save.h"
#include "util/arena.h"
#include "util/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *what, const char *detail) {
    fprintf(stderr, "save_spec: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(1);
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) die("cannot read", path);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static ckpt_save_value *to_value(const ck_json *j) {
    switch (j->type) {
    case CK_JSON_NULL: return ckpt_save_value_none();
    case CK_JSON_BOOL: return ckpt_save_value_bool(j->boolean);
    case CK_JSON_NUMBER:
        return j->is_int ? ckpt_save_value_int(j->u.num.i) : ckpt_save_value_float(j->u.num.d);
    case CK_JSON_STRING: return ckpt_save_value_string(j->u.str);
    case CK_JSON_ARRAY: {
        ckpt_save_value *l = ckpt_save_value_list();
        for (size_t i = 0; i < j->len; i++)
            if (ckpt_save_value_append(l, to_value(&j->u.items[i])) != CKPT_OK) die("list", NULL);
        return l;
    }
    case CK_JSON_OBJECT: {
        const ck_json *t = ck_json_get(j, "__tuple__");
        if (t && j->len == 1) {
            ckpt_save_value *v = ckpt_save_value_tuple();
            for (size_t i = 0; i < t->len; i++)
                if (ckpt_save_value_append(v, to_value(&t->u.items[i])) != CKPT_OK)
                    die("tuple", NULL);
            return v;
        }
        const ck_json *fl = ck_json_get(j, "__float__");
        if (fl && j->len == 1 && fl->type == CK_JSON_STRING)
            return ckpt_save_value_float(strcmp(fl->u.str, "nan") == 0   ? NAN
                                         : strcmp(fl->u.str, "inf") == 0 ? INFINITY
                                                                         : -INFINITY);
        ckpt_save_value *d = ckpt_save_value_dict();
        for (size_t i = 0; i < j->len; i++)
            if (ckpt_save_value_set(d, j->u.members[i].key, to_value(&j->u.members[i].value)) !=
                CKPT_OK)
                die("dict", j->u.members[i].key);
        return d;
    }
    }
    return NULL;
}

static int64_t *ints(const ck_json *a, int *n) {
    if (!a || a->type != CK_JSON_ARRAY) die("expected an array of ints", NULL);
    *n = (int)a->len;
    int64_t *v = calloc(a->len + 1, sizeof *v);
    for (size_t i = 0; i < a->len; i++)
        v[i] = a->u.items[i].u.num.i;
    return v;
}

static void check(ckpt_status s, const ckpt_error *e, const char *what) {
    if (s != CKPT_OK) die(what, e->message);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: save_spec SPEC.json FINAL_DIR\n");
        return 2;
    }
    size_t len;
    char *text = slurp(argv[1], &len);
    ck_arena *arena = ck_arena_new(0);
    const ck_json *spec;
    ckpt_error err;
    check(ck_json_parse(arena, text, len, 0, &spec, &err), &err, "spec");
    const ck_json *ranks = ck_json_get(spec, "ranks");
    if (!ranks || ranks->type != CK_JSON_ARRAY) die("spec has no ranks", NULL);
    ckpt_save_options o = {.no_fsync = true};
    ckpt_save_txn *t;
    check(ckpt_save_begin(argv[2], &o, &t, &err), &err, "begin");
    ckpt_save_desc **descs = calloc(ranks->len, sizeof *descs);
    for (size_t r = 0; r < ranks->len; r++) {
        const ck_json *rk = &ranks->u.items[r];
        const ck_json *items = ck_json_get(rk, "items");
        ckpt_save_file *f;
        check(ckpt_save_file_open(ckpt_save_txn_staging_dir(t),
                                  (uint32_t)ck_json_get(rk, "rank")->u.num.i, &o, &f, &err),
              &err, "open");
        for (size_t i = 0; items && i < items->len; i++) {
            const ck_json *it = &items->u.items[i];
            const ck_json *path = ck_json_get(it, "path");
            ckpt_save_elem *el = calloc(path->len + 1, sizeof *el);
            for (size_t k = 0; k < path->len; k++) {
                const ck_json *e = &path->u.items[k];
                if (e->type == CK_JSON_STRING)
                    el[k].name = e->u.str;
                else
                    el[k].index = e->u.num.i;
            }
            ckpt_save_key key = {
                .flat = ck_json_get(it, "flat")->u.str, .elems = el, .nelems = path->len};
            const ck_json *rep = ck_json_get(it, "replica");
            uint32_t replica = rep ? (uint32_t)rep->u.num.i : 0;
            if (strcmp(ck_json_get(it, "kind")->u.str, "tensor") == 0) {
                int nd, n2, n3;
                int64_t *shape = ints(ck_json_get(it, "shape"), &nd);
                int64_t *off = ints(ck_json_get(it, "offsets"), &n2);
                int64_t *sz = ints(ck_json_get(it, "sizes"), &n3);
                size_t dlen;
                char *data = slurp(ck_json_get(it, "data")->u.str, &dlen);
                ckpt_save_tensor ten = {.dtype =
                                            ckpt_dtype_from_name(ck_json_get(it, "dtype")->u.str),
                                        .ndim = nd,
                                        .global_shape = nd ? shape : NULL,
                                        .offsets = nd ? off : NULL,
                                        .sizes = nd ? sz : NULL,
                                        .data = data,
                                        .data_size = dlen,
                                        .replica_id = replica};
                check(ckpt_save_file_add_tensor(f, &key, &ten, &err), &err, key.flat);
                free(shape);
                free(off);
                free(sz);
                free(data);
            } else {
                ckpt_save_value *v = to_value(ck_json_get(it, "value"));
                check(ckpt_save_file_add_value(f, &key, v, replica, &err), &err, key.flat);
                ckpt_save_value_free(v);
            }
            free(el);
        }
        check(ckpt_save_file_finish(f, &descs[r], &err), &err, "finish");
        ckpt_save_file_free(f);
    }
    check(ckpt_save_commit(t, (const ckpt_save_desc *const *)descs, ranks->len, &err), &err,
          "commit");
    ckpt_save_txn_free(t);
    for (size_t r = 0; r < ranks->len; r++)
        ckpt_save_desc_free(descs[r]);
    free(descs);
    ck_arena_free(arena);
    free(text);
    return 0;
}
