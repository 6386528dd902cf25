/* value_i.h — private layout of ckpt_value / ckpt_object and the limits shared by the
 * conversion (convert.c), the accessors (value.c) and the renderers (render_*.c, pk_json.c). */
#ifndef CK_VALUE_VALUE_I_H
#define CK_VALUE_VALUE_I_H

#include "ckpt.h"
#include "torchsave/item.h"
#include "util/arena.h"
#include "util/strbuf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest path from the root of a converted value tree (the shared, memoized DAG included):
 * deeper or cyclic pickles fail with CKPT_E_LIMIT, and renderers may recurse that deep. */
#define CK_VALUE_MAX_DEPTH 256

/* The render budget of one value (ckpt_value_to_text, ckpt_value_to_json): at most this many
 * bytes of output and this many nodes visited, else CKPT_E_LIMIT.  A value is a DAG (pickle
 * memo references share nodes) whose expansion as a tree can be exponential in its size (a
 * 1.5 KB pickle of `a = [a, a]` 40 times expands to 2^40 lists), so the budget is what bounds
 * the time and memory a rendering takes, whatever the value: 16 MiB renders in about 0.1 s. */
#define CK_VALUE_RENDER_MAX ((size_t)16 << 20)
#define CK_VALUE_RENDER_STEPS ((uint64_t)16 << 20)
/* pk_to_json renders whole `.metadata` files, which can be large: its budget is the larger of
 * this floor and CK_PK_JSON_RENDER_FACTOR times the decoded document's size (the caller
 * passes that size), for output bytes and nodes visited alike. */
#define CK_PK_JSON_RENDER_MIN ((size_t)16 << 20)
#define CK_PK_JSON_RENDER_FACTOR 64

struct ckpt_value {
    ckpt_value_type type;
    union {
        bool b;
        int64_t i;
        double f;
        struct { /* STRING (UTF-8), BYTES, BIGINT (decimal text); NUL-terminated */
            const char *ptr;
            size_t len;
        } str;
        struct { /* LIST, TUPLE, SET */
            ckpt_value **items;
            size_t len;
            bool frozen; /* SET: a frozenset */
        } seq;
        struct { /* DICT: ordered pairs, keys of any type */
            ckpt_value **keys;
            ckpt_value **vals;
            size_t len;
        } dict;
        /* OBJECT.  A bare reference to a named thing (a class, function, torch dtype, enum
         * member) has args == NULL and no other part; a constructed instance has args (a TUPLE,
         * possibly empty) plus whatever the pickle attached. */
        struct {
            const char *name; /* "module.Qualname" */
            size_t name_len;
            ckpt_value *args;      /* TUPLE or NULL */
            ckpt_value *kwargs;    /* DICT (NEWOBJ_EX keyword arguments) or NULL */
            ckpt_value *state;     /* BUILD state or NULL */
            ckpt_value *listitems; /* LIST of APPENDed items or NULL */
            ckpt_value *dictitems; /* DICT of SETITEMs or NULL */
        } obj;
        struct {
            const ts_item *item; /* owned by the ckpt_object */
            const ts_tensor_view *view;
        } tensor;
    } u;
};

struct ckpt_object {
    ck_arena *arena; /* every ckpt_value and string of the tree */
    ts_item *item;   /* owned; NULL for objects built from a bare pickle */
    const ckpt_value *root;
};

/* Pieces shared by the renderers (render_json.c; sticky strbuf errors). */
/* Decimal integer. */
bool value_add_i64(ck_strbuf *sb, int64_t v);
/* Python's float repr, with NaN / Infinity / -Infinity. */
bool value_json_float(ck_strbuf *sb, double d);
/* {"__bytes__":"<lowercase hex>"} */
bool value_json_bytes(ck_strbuf *sb, const char *p, size_t len);

/* A Python list/tuple or dict in the renderers' JSON convention, for either tree (ckpt_value
 * here, the raw pickle's pk_value in pk_json.c): `[a,b]`; a dict `{"k":v,...}` when every key
 * is a str, else `{"__dict__":[[k,v],...]}`.  The tree stays the caller's: `key_str` gives
 * key i's UTF-8 text (NULL when it is not a str), `put(ctx, i, key)` renders key i (key true)
 * or item / value i. */
typedef struct value_json_seq {
    ck_strbuf *sb;
    size_t n;
    const char *(*key_str)(void *ctx, size_t i, size_t *len); /* dicts only */
    void (*put)(void *ctx, size_t i, bool key);
    void *ctx;
} value_json_seq;
void value_json_put_list(const value_json_seq *s);
void value_json_put_dict(const value_json_seq *s);

/* A rendering of a value tree (render_json.c, render_text.c): the text and its budget. */
typedef struct value_render {
    ck_strbuf sb;   /* made with ck_strbuf_init(&sb, CK_VALUE_RENDER_MAX) */
    bool too_deep;  /* a node deeper than CK_VALUE_MAX_DEPTH was met */
    uint64_t steps; /* nodes visited, against CK_VALUE_RENDER_STEPS */
} value_render;
/* Whether one more node at `depth` may be rendered: false once the buffer failed, the tree
 * went too deep, or the nodes visited passed the budget (the buffer's status is then the
 * sticky CKPT_E_LIMIT, like its own cap). */
bool value_render_enter(value_render *r, unsigned depth);
/* The end of a rendering: the text into *out, or the buffer released and CKPT_E_LIMIT for a
 * value nested too deep or over the render budget, naming `as` ("JSON", "text"). */
ckpt_status value_render_finish(value_render *r, const char *as, char **out, ckpt_error *err);

#endif
