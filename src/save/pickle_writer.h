/* pickle_writer.h — emitting Python pickle opcodes: protocol 2 (what torch.save writes into
 * data.pkl) and protocol 4 (what pickle.dump writes for DCP's .metadata on Python 3.8-3.13).
 *
 * The writer appends opcodes to a growable buffer with a sticky error (check once with
 * pkw_finish).  Strings and globals can be memoised by content: the first use emits the value
 * and a memo store (MEMOIZE / BINPUT), later uses a BINGET — Python memoises by identity,
 * which for the immutable strings and classes written here reads back the same.  Protocol 4
 * output is cut into FRAMEs of about 64 KiB at opcode boundaries, as CPython's framer does.
 * Containers are written by the caller with the batch helpers (Python's 1000-item batches). */
#ifndef CK_SAVE_PICKLE_WRITER_H
#define CK_SAVE_PICKLE_WRITER_H

#include "ckpt.h"
#include "util/htab.h"
#include "util/strbuf.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct pkw_memo_ent {
    char *text; /* "s" + string, or "g" + module + "\n" + name */
    size_t len;
    uint32_t index;
} pkw_memo_ent;

typedef struct pkw {
    ck_strbuf out;
    int proto;          /* 2 or 4 (5 accepted: same opcodes, PROTO 5) */
    size_t frame_start; /* protocol >= 4: offset in `out` where the open frame's body begins */
    ck_htab memo_index; /* hash of memo text -> position in memo[] */
    pkw_memo_ent *memo;
    size_t nmemo, memo_cap;
    uint32_t next_memo; /* protocol 4 MEMOIZE index / protocol 2 BINPUT index */
    bool nomem;
} pkw;

/* Starts a stream: PROTO n (and the first FRAME for n >= 4). */
void pkw_init(pkw *w, int proto);
void pkw_release(pkw *w);
/* Ends the stream with STOP, closes the last frame and hands the bytes to the caller
 * (malloc'ed).  Releases the writer in every case. */
ckpt_status pkw_finish(pkw *w, char **out, size_t *len, ckpt_error *err);

/* Call between top-level opcodes of protocol >= 4 streams: starts a new frame once the open
 * one holds 64 KiB or more. */
void pkw_maybe_frame(pkw *w);

void pkw_op(pkw *w, unsigned char op);
void pkw_none(pkw *w);
void pkw_bool(pkw *w, bool v);
void pkw_int(pkw *w, int64_t v);
/* An int given as its minimal little-endian two's complement bytes (n >= 1): LONG1, or LONG4
 * from 256 bytes on, as pickle.encode_long. */
void pkw_long_bytes(pkw *w, const unsigned char *le, size_t n);
void pkw_float(pkw *w, double v);
/* A str (UTF-8 bytes); memo: store once and re-use by content. */
void pkw_str(pkw *w, const char *s, size_t len, bool memo);
/* A class/function reference: STACK_GLOBAL (proto 4) or GLOBAL (proto 2), always memoised. */
void pkw_global(pkw *w, const char *module, const char *name);
/* Memoises the value on top of the stack without remembering it (keeps indices in step with
 * what Python would write; never referenced). */
void pkw_memoize(pkw *w);
/* Object memo by caller-chosen tag ("layout:strided"): returns true after emitting a BINGET
 * when the tag was memoised before; otherwise false, and the caller emits the value and then
 * calls pkw_memo_end (which stores it under the tag). */
bool pkw_memo_begin(pkw *w, const char *tag);
void pkw_memo_end(pkw *w, const char *tag);
/* Tuple of n items already pushed after a pkw_tuple_begin(n). */
void pkw_tuple_begin(pkw *w, size_t n);
void pkw_tuple_end(pkw *w, size_t n);

/* Batched APPENDS / SETITEMS: call _item_begin before each item (i = index, n = total) and
 * _item_end after it (after the value for dicts). */
void pkw_batch_item_begin(pkw *w, size_t i, size_t n);
void pkw_batch_item_end(pkw *w, size_t i, size_t n, bool dict);

/* Opcodes used by callers. */
enum {
    PKO_MARK = '(',
    PKO_STOP = '.',
    PKO_BINPERSID = 'Q',
    PKO_REDUCE = 'R',
    PKO_BUILD = 'b',
    PKO_EMPTY_DICT = '}',
    PKO_EMPTY_LIST = ']',
    PKO_EMPTY_TUPLE = ')',
    PKO_NEWOBJ = 0x81,
    PKO_APPEND = 'a',
    PKO_APPENDS = 'e',
    PKO_SETITEM = 's',
    PKO_SETITEMS = 'u',
    PKO_TUPLE = 't',
};

#endif
