/* fuzz_pickle.c — libFuzzer target: the input is a pickle; it is decoded with small limits and
 * the resulting tree (shared and cyclic values included) is walked without recursion, touching
 * every field and calling the consumer helpers, so bad pointers or lengths show up under ASan.
 * Then it is decoded again with batches of every labelled dict handed to another thread
 * (split decoding, tests/lib/split_check.c): the same document or the same error, or abort.
 * The decoded tree is also converted and rendered (text, JSON, raw JSON): bounded output per
 * input (each text within its render budget), whatever sharing the pickle's memo references
 * make; a render that never ends is the fuzzer's -timeout (or the replay's test timeout). */
#include "ckpt.h"
#include "pickle/pickle.h"
#include "split_check.h"
#include "value/value.h"
#include "value/value_i.h" /* CK_VALUE_RENDER_MAX */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_VISITS 200000u

static size_t touch_string(const pk_value *v) {
    /* Every byte and the terminating NUL must be readable. */
    size_t sum = 0;
    for (size_t i = 0; i <= v->u.str.len; i++)
        sum += (unsigned char)v->u.str.ptr[i];
    if (v->u.str.ptr[v->u.str.len] != '\0') abort();
    return sum;
}

/* Returns a checksum so the reads are not optimized away. */
static size_t walk(const pk_value *root) {
    const pk_value **todo = malloc(MAX_VISITS * sizeof *todo);
    if (!todo) return 0;
    size_t n = 0, visits = 0, sink = 0;
    todo[n++] = root;
    while (n && visits++ < MAX_VISITS) {
        const pk_value *v = todo[--n];
#define PUSH(x)                                                                                    \
    do {                                                                                           \
        if (!(x)) abort();                                                                         \
        if (n < MAX_VISITS) todo[n++] = (x);                                                       \
    } while (0)
        int64_t ints[8];
        size_t cnt;
        (void)pk_as_int_seq(v, ints, 8, &cnt);
        (void)pk_get(v, "state_dict_metadata");
        (void)pk_class_name(v);
        (void)pk_class_module(v);
        (void)pk_as_str(v);
        (void)pk_type_name(v->type);
        switch (v->type) {
        case PK_NONE: break;
        case PK_BOOL: sink += v->u.b; break;
        case PK_INT: sink += (size_t)v->u.i; break;
        case PK_FLOAT: sink += (size_t)(v->u.f == v->u.f); break;
        case PK_BIGINT:
        case PK_STR:
        case PK_BYTES: sink += touch_string(v); break;
        case PK_TUPLE:
        case PK_LIST:
        case PK_SET:
        case PK_FROZENSET:
            if (v->u.seq.len > v->u.seq.cap) abort();
            if (pk_len(v) != v->u.seq.len) abort();
            for (size_t i = 0; i < v->u.seq.len; i++)
                PUSH(v->u.seq.items[i]);
            break;
        case PK_DICT:
            if (v->u.dict.len > v->u.dict.cap) abort();
            for (size_t i = 0; i < v->u.dict.len; i++) {
                PUSH(v->u.dict.keys[i]);
                PUSH(v->u.dict.vals[i]);
            }
            break;
        case PK_GLOBAL:
            sink += strlen(v->u.global.module) + strlen(v->u.global.name);
            (void)pk_is_global(v, "torch", "Size");
            break;
        case PK_OBJECT:
            PUSH(v->u.obj.cls);
            if (!v->u.obj.args || v->u.obj.args->type != PK_TUPLE) abort();
            PUSH(v->u.obj.args);
            if (pk_obj_kwargs(v)) PUSH(pk_obj_kwargs(v));
            if (v->u.obj.state) PUSH(v->u.obj.state);
            if (pk_obj_listitems(v)) PUSH(pk_obj_listitems(v));
            if (pk_obj_dictitems(v)) PUSH(pk_obj_dictitems(v));
            break;
        case PK_PERSID: PUSH(v->u.persid.pid); break;
        default: abort();
        }
#undef PUSH
    }
    free(todo);
    return sink;
}

/* A rendering that succeeded: a text, within its budget (the work a render may do is bounded
 * by it; the unbounded renderer expanded a DAG of memo references to gigabytes). */
static void check_text(const char *s, size_t budget, const char *what) {
    if (!s || !*s) abort();
    size_t n = strlen(s);
    if (n > budget) {
        fprintf(stderr, "fuzz_pickle: %s of %zu bytes, over its %zu-byte budget\n", what, n,
                budget);
        abort();
    }
}

/* The value renderers over the decoded tree: conversion, text, JSON and the raw pickle's
 * JSON each succeed within their render budget or fail with a message, whatever the input. */
static void render(const pk_doc *doc) {
    ckpt_object *o = NULL;
    ckpt_error err = {0};
    if (ck_object_from_pickle(pk_doc_root(doc), 0, &o, &err) == CKPT_OK) {
        char *s = NULL;
        if (ckpt_value_to_text(ckpt_object_root(o), &s, &err) == CKPT_OK)
            check_text(s, CK_VALUE_RENDER_MAX, "text");
        free(s);
        s = NULL;
        if (ckpt_value_to_json(ckpt_object_root(o), &s, &err) == CKPT_OK)
            check_text(s, CK_VALUE_RENDER_MAX, "JSON");
        free(s);
        ckpt_object_free(o);
    } else if (o || !err.message[0]) {
        abort();
    }
    char *j = NULL;
    size_t budget = pk_json_budget(pk_doc_bytes_used(doc));
    if (pk_to_json(pk_doc_root(doc), 0, budget, &j, &err) == CKPT_OK)
        check_text(j, budget, "raw JSON");
    free(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pk_limits lim = {
        .max_bytes = 32u << 20, .max_items = 1u << 20, .max_depth = 64, .max_memo = 1u << 16};
    pk_doc *doc = NULL;
    ckpt_error err;
    ckpt_status st = pk_decode(data, size, &lim, &doc, &err);
    if (st != CKPT_OK) {
        if (doc) abort();
        if (strncmp(err.message, "pickle offset ", 14) != 0) abort();
    } else {
        volatile size_t sum = walk(pk_doc_root(doc));
        (void)sum;
        render(doc);
        pk_doc_free(doc);
    }
    split_consumer c;
    if (!split_consumer_init(&c, size % 2 ? SPLIT_EVERY : SPLIT_ALTERNATE, NULL)) abort();
    const char *why = split_check(data, size, &lim, &c);
    split_consumer_fini(&c);
    if (why) {
        fprintf(stderr, "fuzz_pickle: %s: %s\n", why, c.detail);
        abort();
    }
    return 0;
}
