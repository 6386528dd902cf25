/* json.h — a strict, bounded JSON (RFC 8259) parser producing an arena-allocated tree, and
 * a JSON string escaper for ck_strbuf (doubles: src/tensor/float_repr.h).
 *
 * Parsing rejects everything RFC 8259 does not allow (comments, trailing commas, leading
 * zeros, NaN, raw control characters in strings, invalid UTF-8, lone surrogates in \u
 * escapes, text after the value) and limits nesting depth; all memory comes from the
 * caller's arena, so its budget bounds what a hostile document can use.  Object members keep
 * document order, duplicates included. */
#ifndef CK_UTIL_JSON_H
#define CK_UTIL_JSON_H

#include "ckpt.h"
#include "util/arena.h"
#include "util/strbuf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum ck_json_type {
    CK_JSON_NULL = 0,
    CK_JSON_BOOL,
    CK_JSON_NUMBER,
    CK_JSON_STRING,
    CK_JSON_ARRAY,
    CK_JSON_OBJECT,
} ck_json_type;

typedef struct ck_json_member ck_json_member;

typedef struct ck_json {
    ck_json_type type;
    bool boolean; /* BOOL */
    bool is_int;  /* NUMBER: the literal has no fraction/exponent and fits int64 (in .i) */
    size_t len;   /* STRING: bytes (a \u0000 escape yields an embedded NUL); ARRAY: items;
                     OBJECT: members; NUMBER: the text's bytes when u.num.big is set */
    union {
        struct {
            int64_t i;       /* valid when is_int */
            double d;        /* always: the nearest double (an integer beyond it: +-inf) */
            const char *big; /* an integer literal beyond int64 (no fraction, no exponent): its
                                text, sign and digits, NUL-terminated, in the arena (len bytes;
                                at most CK_JSON_MAX_INT_DIGITS digits, Python's int() limit,
                                else a parse error); else NULL */
        } num;
        const char *str;               /* STRING: unescaped UTF-8, NUL-terminated */
        const struct ck_json *items;   /* ARRAY: len values */
        const ck_json_member *members; /* OBJECT: len members, document order */
    } u;
} ck_json;

struct ck_json_member {
    const char *key; /* unescaped UTF-8, NUL-terminated */
    size_t key_len;
    ck_json value;
};

#define CK_JSON_DEFAULT_DEPTH 128
#define CK_JSON_MAX_INT_DIGITS 4300u /* sys.int_info.default_max_str_digits */
#define CK_JSON_MAX_DEPTH 4096       /* larger max_depth values are clamped (recursion) */

/* Parses `len` bytes of `text` (need not be NUL-terminated).  max_depth: most nested
 * arrays/objects (0 = CK_JSON_DEFAULT_DEPTH).  Errors: CKPT_E_FORMAT ("json offset N: ..."),
 * CKPT_E_LIMIT (depth, arena budget), CKPT_E_NOMEM.  The tree lives in `arena`. */
ckpt_status ck_json_parse(ck_arena *arena, const char *text, size_t len, uint32_t max_depth,
                          const ck_json **out, ckpt_error *err);
/* The same, also accepting the constants Python's json.dumps writes for floats JSON has no
 * literal for (allow_nan=True, its default): NaN, Infinity, -Infinity (NUMBER, not is_int). */
ckpt_status ck_json_parse_python(ck_arena *arena, const char *text, size_t len, uint32_t max_depth,
                                 const ck_json **out, ckpt_error *err);

/* The value of the last member named `key` (like Python's json and serde), or NULL; NULL for
 * non-objects. */
const ck_json *ck_json_get(const ck_json *obj, const char *key);
/* Item i of an array, or NULL. */
const ck_json *ck_json_at(const ck_json *arr, size_t i);
/* "null", "bool", "number", "string", "array", "object". */
const char *ck_json_type_name(ck_json_type t);

/* Appends `s` as a quoted JSON string: '"' and '\\' escaped, control characters as \b \f \n
 * \r \t or \u00XX, UTF-8 passed through, each byte of an invalid UTF-8 sequence replaced by
 * \ufffd (so the output is always valid JSON). */
bool ck_json_escape(ck_strbuf *sb, const char *s, size_t len);
#endif
