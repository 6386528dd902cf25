/* pickle.h — a data-only decoder for Python pickles (protocols 0-5 as far as torch uses them).
 *
 * It never executes anything: GLOBAL/STACK_GLOBAL become symbolic class references,
 * REDUCE/NEWOBJ/NEWOBJ_EX become object nodes (class + args), BUILD attaches state, and
 * persistent ids become PK_PERSID nodes.  One call is decoded as its value: REDUCE of
 * `torch.Size` on one tuple of ints gives that tuple (a torch.Size is a tuple of ints; a
 * million-chunk `.metadata` holds millions of them), so a BUILD on it fails as in Python.
 * Everything lives in one arena with a byte budget; the number of values, the stack, the memo and
 * the mark depth are bounded.  Values can be shared (memo) and even cyclic (a list appended into
 * itself), so every consumer that recurses must bound its depth.  (max_depth is checked when items
 * are added to a container; a hostile stream can still deepen an already-nested container later
 * through the memo.)
 *
 * Decoding choices (details in pickle_vm.c): module/name strings are kept as written
 * (`copy_reg`, `__builtin__` are not mapped); INST/OBJ give objects built like REDUCE; a
 * second BUILD replaces the earlier state; APPEND(S)/SETITEM(S) on an object fill its
 * listitems/dictitems; Python-2 str opcodes give PK_STR (Latin-1 when not valid UTF-8);
 * ints that fit int64 are PK_INT whatever opcode carried them; small ints, None, True, False
 * and the empty tuple are shared within a document, and other ints, strings and short tuples
 * often are (one node for equal values built close together), as are the key arrays of dicts
 * with the same keys: never compare nodes by address to tell values apart.  EXT1/2/4 and
 * NEXT_BUFFER/READONLY_BUFFER fail with CKPT_E_UNSUPPORTED.
 */
#ifndef CK_PICKLE_H
#define CK_PICKLE_H

#include "ckpt.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum pk_type {
    PK_NONE = 0,
    PK_BOOL,
    PK_INT,       /* u.i */
    PK_BIGINT,    /* u.str: little-endian two's complement bytes (as LONG1/LONG4 store them) */
    PK_FLOAT,     /* u.f */
    PK_STR,       /* u.str: UTF-8, NUL-terminated */
    PK_BYTES,     /* u.str: raw bytes (NUL-terminated for convenience) */
    PK_TUPLE,     /* u.seq */
    PK_LIST,      /* u.seq */
    PK_SET,       /* u.seq */
    PK_FROZENSET, /* u.seq */
    PK_DICT,      /* u.dict: ordered pairs, keys of any type */
    PK_GLOBAL,    /* u.global: a class/function reference, never resolved */
    PK_OBJECT,    /* u.obj: cls applied to args (REDUCE/NEWOBJ), with optional BUILD state */
    PK_PERSID,    /* u.persid: persistent id (torch storages) */
} pk_type;

typedef struct pk_value pk_value;

/* pk_value.flags: set by the decoder only. */
enum {
    PK_FLAG_ALIASED = 1 /* pushed again (memo GET, DUP) while a pk_watch was set */
};

typedef enum pk_obj_how { PK_HOW_REDUCE = 0, PK_HOW_NEWOBJ = 1, PK_HOW_NEWOBJ_EX = 2 } pk_obj_how;

/* Values are allocated at the size of their variant (a PK_INT takes 16 bytes, not
 * sizeof(pk_value)): read only the union member that `type` names, and never copy a pk_value
 * by value — hold `const pk_value *`. */
/* The rarely set parts of an object (read them with pk_obj_kwargs & co.). */
typedef struct pk_obj_extra {
    pk_value *kwargs;    /* NEWOBJ_EX only, else NULL */
    pk_value *listitems; /* PK_LIST: APPEND(S) applied to the object, or NULL */
    pk_value *dictitems; /* PK_DICT: SETITEM(S) applied to the object, or NULL */
} pk_obj_extra;

struct pk_value {
    uint8_t type;  /* a pk_type */
    uint8_t how;   /* PK_OBJECT: a pk_obj_how */
    uint8_t flags; /* PK_FLAG_*: the decoder's own bookkeeping */
    /* Containers: nesting depth when last added to (1 + deepest item), a lower bound of the
     * real depth; 0 for scalars. */
    uint32_t depth;
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *ptr;
            size_t len;
        } str;
        struct {
            pk_value **items;
            size_t len;
            size_t cap;
        } seq;
        struct {
            pk_value **keys;
            pk_value **vals;
            size_t len;
            size_t cap;
        } dict;
        struct {
            const char *module;
            const char *name;
        } global;
        struct {
            pk_value *cls;       /* usually PK_GLOBAL; may be any value */
            pk_value *args;      /* PK_TUPLE (NEWOBJ/REDUCE args), never NULL */
            pk_value *state;     /* BUILD argument, NULL if never built */
            pk_obj_extra *extra; /* NULL while kwargs, listitems and dictitems are */
        } obj;                   /* (`how` is in the header) */
        struct {
            pk_value *pid;
        } persid;
    } u;
};

static inline const pk_value *pk_obj_kwargs(const pk_value *v) {
    return v->u.obj.extra ? v->u.obj.extra->kwargs : NULL;
}
static inline const pk_value *pk_obj_listitems(const pk_value *v) {
    return v->u.obj.extra ? v->u.obj.extra->listitems : NULL;
}
static inline const pk_value *pk_obj_dictitems(const pk_value *v) {
    return v->u.obj.extra ? v->u.obj.extra->dictitems : NULL;
}

typedef struct pk_limits {
    uint64_t max_bytes; /* arena budget (the decoded tree's memory); 0 = 1 GiB.  The decoder's
                         working memory (stack, memo) is held to the same figure. */
    uint64_t max_items; /* values created; 0 = 64 M */
    uint32_t max_depth; /* nested MARKs and container nesting of the result; 0 = 512 */
    uint64_t max_memo;  /* highest memo index + 1; 0 = 16 M */
} pk_limits;

typedef struct pk_doc pk_doc;

/* Decodes the pickle in buf[0, len).  Stops at STOP; trailing bytes are ignored.
 * On failure the error names the byte offset and opcode:
 *   "pickle offset 1234: unknown opcode 0xff".
 * The caller prefixes the file name. */
ckpt_status pk_decode(const uint8_t *buf, size_t len, const pk_limits *limits, pk_doc **out,
                      ckpt_error *err);
/* An input decoded from a buffer (buf, len) or, with `read` set, read piece by piece into a
 * window of `window` bytes (0: 4 MiB; grown for longer arguments) that slides over it, so a
 * big file needs no whole-file buffer.  read(ctx, dst, off, n) copies n > 0 bytes at `off`
 * (< len) into dst and returns how many it copied (fewer is fine, 0 means they never will
 * be: the decoder then fails as on a truncated input and the reader's owner reports the real
 * cause).  Bytes are asked for in order, each once, except that a split decode that has to
 * start over (pk_batch_run) asks for them again from the start. */
typedef struct pk_input {
    const uint8_t *buf;
    size_t len;
    size_t (*read)(void *ctx, uint8_t *dst, uint64_t off, size_t n);
    void *ctx;
    size_t window;
} pk_input;
ckpt_status pk_decode_input(const pk_input *in, const pk_limits *limits, pk_doc **out,
                            ckpt_error *err);

/* Lets a consumer read the pairs of big dicts on another thread while the rest of the pickle
 * is still being decoded (the index walks `state_dict_metadata` while `storage_data` is
 * decoded).  Both calls run on the decoding thread.
 *
 * take(ctx, label, dict, len, kv, npairs) comes before SETITEMS/SETITEM adds npairs pairs
 * (kv[2i] key, kv[2i+1] value) to `dict`, a PK_DICT that holds `len` pairs so far.  `label`
 * is the PK_STR value right below `dict` on the stack in the same MARK region (the key that
 * dict will be stored under, in a pickled dict being built) or NULL.  Returning true takes
 * the pairs: until revoke, the nodes reachable from them do not change and may be read from
 * any thread (after a hand-off that orders the reads after the call).  kv itself is only
 * valid during the call: copy the pointers.
 *
 * revoke(ctx) comes once, before the decoder changes a node that may be reachable from taken
 * pairs (only a hand-made pickle does that, or one of a recursive object: Python's pickler
 * fills every container before it is an item of another), and before the document is freed
 * when decoding fails.  When it returns, the consumer must no longer be reading any node, and
 * must drop what it made of them.  No take follows a revoke. */
typedef struct pk_batch pk_batch;
typedef struct pk_watch {
    bool (*take)(void *ctx, const char *label, const pk_value *dict, size_t len,
                 pk_value *const *kv, size_t npairs);
    void (*revoke)(void *ctx);
    void *ctx;
    /* Optional (both or neither): handing whole batches over, so that the consumer's thread
     * also decodes some of them (the second CPU shares the decoding of `storage_data`).
     *
     * split(ctx, label, dict) is asked at the MARK that opens a SETITEMS batch into a dict
     * (labelled as for take): true asks for this batch's bytes to be handed over undecoded.
     * The decoder then (if it can: see pickle_vm.c) finds where the batch ends, reserves its
     * memo indices and calls hand(ctx, label, dict, len, batch, npairs) instead of decoding
     * it; once one batch of a dict was handed over, every later batch of that dict is handed
     * over too (as decoded pairs when the decoder decoded it), until the dict is used for
     * anything else.  hand() returns true when it took the batch, which the consumer must
     * then pass, in the order handed and on one thread, to pk_batch_run, or to
     * pk_batch_cancel if it stops early (revoke included: it cancels what it did not run
     * before revoke returns).  `len` counts the pairs handed before, as in take. */
    bool (*split)(void *ctx, const char *label, const pk_value *dict);
    bool (*hand)(void *ctx, const char *label, const pk_value *dict, size_t len, pk_batch *batch,
                 size_t npairs);
} pk_watch;
/* Runs a handed-over batch on the calling thread: decodes it (when handed as bytes), adds its
 * pairs to its dict and lets the decoder go on past it.  *kv and *npairs: the pairs, valid as
 * long as the document (read them like taken pairs).  A batch that cannot be decoded this way
 * (an error in it, a limit, a reference the split decoder does not allow) fails here, and the
 * decoder then decodes the whole pickle again without handing anything over; so does any
 * error of the decoding thread once batches were handed.  The document is always the plain
 * decoder's, and so is every error.  (The limits are shared out between the two threads, and
 * equal values are shared within each thread only: a pickle within a hair of max_items or
 * max_bytes may be decoded split where the plain decoder stops at the limit.)  After the call,
 * `batch` is the decoder's. */
ckpt_status pk_batch_run(pk_batch *batch, pk_value *const **kv, size_t *npairs);
void pk_batch_cancel(pk_batch *batch);
/* Bytes of pickle the batch was handed as (0: handed as decoded pairs). */
size_t pk_batch_bytes(const pk_batch *batch);
/* pk_decode_input with a watch (NULL: none). */
ckpt_status pk_decode_watched(const pk_input *in, const pk_limits *limits, const pk_watch *watch,
                              pk_doc **out, ckpt_error *err);
const pk_value *pk_doc_root(const pk_doc *doc);
uint64_t pk_doc_bytes_used(const pk_doc *doc);
void pk_doc_free(pk_doc *doc);

/* ---- helpers for consumers (all accept NULL and return false/NULL/0 then) ---- */

/* True if v is PK_GLOBAL named `name` (module ignored when `module` is NULL). */
bool pk_is_global(const pk_value *v, const char *module, const char *name);
/* Class name of an object (its cls's global name) or of a global; NULL otherwise. */
const char *pk_class_name(const pk_value *v);
const char *pk_class_module(const pk_value *v);
/* Dict lookup by string key (the last occurrence wins, as in Python); for PK_OBJECT, looks in
 * its state when that is a dict, else in its dictitems (OrderedDict). */
const pk_value *pk_get(const pk_value *v, const char *key);
/* pk_get for one key looked up in many dicts (a field of many objects of one class): the
 * decoder gives dicts filled alike one shared key array, and *cache remembers where the key
 * is in the array last seen.  Zero-initialise one cache per key and document, and never use
 * it with another document (arrays are only told apart by address). */
typedef struct pk_key_cache {
    pk_value *const *keys; /* key array last looked in, and its length then */
    size_t len;
    size_t pos; /* index of the key's last occurrence, or SIZE_MAX if absent */
} pk_key_cache;
const pk_value *pk_get_cached(const pk_value *v, const char *key, pk_key_cache *cache);
/* Sequence (tuple/list/set) length and item; an object whose single argument is a sequence
 * (`torch.Size([…])` of a list) is NOT unwrapped here (see pk_as_int_seq). */
size_t pk_len(const pk_value *v); /* dicts: number of pairs (use u.dict to read them) */
const pk_value *pk_item(const pk_value *v, size_t i);
bool pk_as_int(const pk_value *v, int64_t *out); /* PK_INT or PK_BOOL */
/* Fills out[0..n) from a tuple/list of ints, or from a torch.Size object wrapping one.
 * Returns false if it is neither, an item is not an int, or there are more than `cap` (out
 * may then be partly written). */
bool pk_as_int_seq(const pk_value *v, int64_t *out, size_t cap, size_t *n);
/* String value (PK_STR) or NULL. */
const char *pk_as_str(const pk_value *v);
/* The bytes of a PK_BIGINT (minimal little-endian two's complement, as LONG1 stores them) of
 * the decimal integer s[0, n) (an optional sign, then ASCII digits; at most PK_INT_MAX_DIGITS
 * digits, Python's int() limit): written to out, which must hold n / 2 + 8 bytes; returns
 * their count; 0 on bad syntax, too many digits (or the value zero). */
#define PK_INT_MAX_DIGITS 4300u
size_t pk_decimal_to_bigint(const char *s, size_t n, uint8_t *out);
/* "int", "dict", ... for messages. */
const char *pk_type_name(pk_type t);

#endif
