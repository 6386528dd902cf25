/* pickle_scan.c — pk_scan_batch: where a SETITEMS batch ends, found without decoding it.
 * The decoder hands such a batch's bytes to another thread (pk_watch.split); to go on past it
 * it needs the batch's end, how many memo indices it stores and how many pairs it adds.  The
 * scan models only the stack height and the marks, over the few opcodes Python's pickler
 * writes inside the batches of big dicts of objects; anything else (or anything the decoder
 * would reject for the stack: an underflow, a mark left open) says "no", and the decoder
 * then decodes the batch itself, reporting what it finds as usual. */
#include "pickle/pickle_i.h"
#include "pickle/pickle_ops_i.h"

#include <string.h>

/* Marks open inside a batch at most (objects' state dicts nest 1 deep in torch's). */
#define SCAN_MAX_MARKS 32

bool pk_scan_batch(const uint8_t *p, size_t n, uint64_t total_left, pk_scan *out) {
    size_t marks[SCAN_MAX_MARKS]; /* stack height at each open mark */
    size_t nmarks = 0, h = 0;     /* h: stack height above the batch's mark */
    uint64_t memos = 0;
    size_t i = 0;
#define NEED(k)                                                                                    \
    do {                                                                                           \
        if (h - (nmarks ? marks[nmarks - 1] : 0) < (k)) return false;                              \
    } while (0)
#define ARG(k)                                                                                     \
    do {                                                                                           \
        if (n - i < (k)) return false;                                                             \
    } while (0)
    while (i < n) {
        unsigned op = p[i++];
        switch (op) {
        case PK_OP_MARK:
            if (nmarks == SCAN_MAX_MARKS) return false;
            marks[nmarks++] = h;
            break;
        case PK_OP_MEMOIZE:
            NEED(1);
            memos++;
            break;
        case PK_OP_FRAME: {
            ARG(8);
            uint64_t len = pk_rd_le(p + i, 8);
            i += 8;
            if (len > total_left - i) return false; /* the decoder reports it */
            break;
        }
        case PK_OP_BINGET:
            ARG(1);
            i += 1;
            h++;
            break;
        case PK_OP_LONG_BINGET:
            ARG(4);
            i += 4;
            h++;
            break;
        case PK_OP_EMPTY_TUPLE:
        case PK_OP_EMPTY_LIST:
        case PK_OP_EMPTY_DICT:
        case PK_OP_NONE:
        case PK_OP_NEWTRUE:
        case PK_OP_NEWFALSE: h++; break;
        case PK_OP_BININT1:
            ARG(1);
            i += 1;
            h++;
            break;
        case PK_OP_BININT2:
            ARG(2);
            i += 2;
            h++;
            break;
        case PK_OP_BININT:
            ARG(4);
            i += 4;
            h++;
            break;
        case PK_OP_BINFLOAT:
            ARG(8);
            i += 8;
            h++;
            break;
        case PK_OP_LONG1:
        case PK_OP_SHORT_BINUNICODE: {
            ARG(1);
            size_t len = p[i++];
            ARG(len);
            i += len;
            h++;
            break;
        }
        case PK_OP_BINUNICODE: {
            ARG(4);
            uint64_t len = pk_rd_le(p + i, 4);
            i += 4;
            ARG(len);
            i += (size_t)len;
            h++;
            break;
        }
        case PK_OP_TUPLE1:
        case PK_OP_TUPLE2:
        case PK_OP_TUPLE3: {
            size_t k = op - PK_OP_TUPLE1 + 1;
            NEED(k);
            h = h - k + 1;
            break;
        }
        case PK_OP_TUPLE:
            if (!nmarks) return false; /* closes the batch's mark: not a batch */
            h = marks[--nmarks] + 1;
            break;
        case PK_OP_NEWOBJ:
        case PK_OP_REDUCE:
        case PK_OP_BUILD:
        case PK_OP_APPEND:
        case PK_OP_STACK_GLOBAL:
            NEED(2);
            h--;
            break;
        case PK_OP_SETITEM:
            NEED(3);
            h -= 2;
            break;
        case PK_OP_APPENDS:
        case PK_OP_SETITEMS: {
            if (!nmarks) {
                /* the batch's own end: its items are key, value, key, value... */
                if (op != PK_OP_SETITEMS || h % 2) return false;
                out->end = i - 1;
                out->memos = memos;
                out->pairs = h / 2;
                return true;
            }
            size_t at = marks[--nmarks];
            /* the target below the mark, above the enclosing one */
            if (at <= (nmarks ? marks[nmarks - 1] : 0)) return false;
            h = at;
            break;
        }
        default: return false;
        }
    }
#undef NEED
#undef ARG
    return false;
}
