/* pickle_i.h — what the pickle decoder's files share and consumers must not use: the
 * document, value construction with count/depth/budget accounting (pickle_value.c) and the
 * protocol-0 text parsers (pickle_text.c). */
#ifndef CK_PICKLE_I_H
#define CK_PICKLE_I_H

#include "pickle/pickle.h"
#include "util/arena.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pk_doc {
    ck_arena *arena;
    const pk_value *root;
};

/* A slot of the cache of dict key arrays (see pk_builder). */
typedef struct pkb_keys_slot {
    uint64_t hash;
    pk_value **keys;
    size_t len;
} pkb_keys_slot;

/* Value construction state.  Every constructor returns NULL/false on failure and leaves the
 * reason in `status`/`why`/`limit` for the VM to turn into a message. */
typedef struct pk_builder {
    ck_arena *arena;
    /* Key arrays of dicts filled in one batch, by a hash of their key nodes (2^keys_bits
     * slots, or none when keys_cache is NULL): the state dicts of objects of one class share
     * one array of key nodes.  An item array is only ever written past its length, so a full
     * one (len == cap) is never written in place: a shared key array stays as it is when a
     * dict holding it grows (pkb_dict_extend copies it). */
    pkb_keys_slot *keys_cache;
    unsigned keys_bits;
    uint64_t items; /* values created so far */
    uint64_t max_items;
    uint64_t max_bytes;
    uint32_t max_depth;
    ckpt_status status;
    const char *why;
    uint64_t limit; /* the bound that was hit (0 if none) */
} pk_builder;

bool pkb_is_container(pk_type t);
static inline uint32_t pkb_depth(const pk_value *v) { return v->depth; }

void *pkb_alloc(pk_builder *b, size_t size);
pk_value *pkb_scalar(pk_builder *b, pk_type t);
/* A container of depth 1 with no items. */
pk_value *pkb_container(pk_builder *b, pk_type t);
/* Raises c's depth to 1 + child_depth; fails when that exceeds max_depth. */
bool pkb_nest(pk_builder *b, pk_value *c, uint32_t child_depth);
/* PK_STR / PK_BYTES / PK_BIGINT holding a NUL-terminated copy of p[0, n) (stored inline). */
pk_value *pkb_string(pk_builder *b, pk_type t, const uint8_t *p, size_t n);
/* An uninitialised string value of n bytes (NUL at [n]) to fill through *bytes; the caller
 * may shorten it afterwards with pkb_string_trim. */
pk_value *pkb_string_alloc(pk_builder *b, pk_type t, size_t n, char **bytes);
void pkb_string_trim(pk_value *v, size_t n);
/* New tuple/list/set/frozenset holding items[0, n). */
pk_value *pkb_seq(pk_builder *b, pk_type t, pk_value *const *items, size_t n);
/* Appends items to a list/set (geometric growth in the arena). */
bool pkb_seq_extend(pk_builder *b, pk_value *seq, pk_value *const *items, size_t n);
/* Appends npairs (key, value) pairs, given interleaved in kv[0, 2*npairs), to a dict. */
bool pkb_dict_extend(pk_builder *b, pk_value *dict, pk_value *const *kv, size_t npairs);

/* The n-byte little-endian unsigned integer at p (the decoder's and the scan's arguments). */
static inline uint64_t pk_rd_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* ---- batch scan (pickle_scan.c) ---- */

typedef struct pk_scan {
    size_t end;     /* offset of the SETITEMS that closes the batch */
    uint64_t memos; /* MEMOIZE opcodes before it */
    size_t pairs;   /* pairs it adds */
} pk_scan;
/* Scans p[0, n), the bytes right after the MARK that opens a SETITEMS batch (total_left: bytes
 * of the pickle from p on, to check FRAME lengths).  True when the batch ends within n, holds
 * only the opcodes a batch of objects is made of (no PUT, no POP, ...) without a stack
 * underflow, and is closed by SETITEMS on an even number of items. */
bool pk_scan_batch(const uint8_t *p, size_t n, uint64_t total_left, pk_scan *out);

/* ---- protocol-0 text (pickle_text.c) ---- */

/* Python refuses int() of more digits than this (sys.int_info.default_max_str_digits). */
#define PK_MAX_INT_DIGITS PK_INT_MAX_DIGITS
/* Longest FLOAT text accepted. */
#define PK_MAX_FLOAT_TEXT 1024u

typedef enum pkt_num { PKT_OK = 0, PKT_OVERFLOW, PKT_SYNTAX } pkt_num;

/* Optional '+'/'-' then one or more ASCII digits, nothing else. */
pkt_num pkt_parse_i64(const uint8_t *s, size_t n, int64_t *out);
/* Same syntax, any size (caller checked the syntax and n <= PK_MAX_INT_DIGITS + 1): writes the
 * minimal little-endian two's complement bytes (as LONG1 stores them) to out, which must hold
 * n / 2 + 8 bytes, and returns their count. */
size_t pkt_decimal_to_le(const uint8_t *s, size_t n, uint8_t *out);
/* Python float() of ASCII text (C locale, surrounding blanks allowed). */
bool pkt_parse_float(const uint8_t *s, size_t n, double *out);
/* codecs.escape_decode: out (>= n bytes) receives the bytes; false on a bad escape. */
bool pkt_escape_decode(const uint8_t *s, size_t n, uint8_t *out, size_t *out_len, const char **why);
/* Latin-1 bytes to UTF-8; out must hold 2 * n bytes. */
size_t pkt_latin1_to_utf8(const uint8_t *s, size_t n, uint8_t *out);
/* 'raw-unicode-escape' text to UTF-8; out must hold 2 * n bytes.  Rejects bad escapes,
 * surrogates and code points above U+10FFFF. */
bool pkt_raw_unicode_escape(const uint8_t *s, size_t n, uint8_t *out, size_t *out_len,
                            const char **why);

#endif
