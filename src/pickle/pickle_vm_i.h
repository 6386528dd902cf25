/* pickle_vm_i.h — what the decoder's opcode loop (pickle_vm.c) and split decoding
 * (pickle_split.c) share: the VM's state, a batch handed over to the consumer, and the few
 * calls each file makes into the other.  Private to those two files. */
#ifndef CK_PICKLE_VM_I_H
#define CK_PICKLE_VM_I_H

#include "pickle/pickle_i.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Ints in [SMALL_MIN, SMALL_MAX) are shared within a document. */
#define SMALL_MIN (-16)
#define SMALL_MAX 1024
/* Values that never change once built (ints, strings, tuples) are also shared through
 * direct-mapped caches keyed by content: an equal value built recently is reused (the offsets
 * of a tensor's chunks repeated in its storage index, the same key or file name in every
 * chunk's record...).  A tuple is reused only when it holds the very same item nodes; strings
 * longer than INTERN_STR_MAX and tuples longer than INTERN_TUPLE_MAX are not looked up.  The
 * caches (and the builder's one of dict key arrays) have 2^bits slots, bits growing with the
 * input from INTERN_BITS_MIN to INTERN_BITS_MAX (reached at 1 MiB), so that small pickles do
 * not pay for clearing big caches. */
#define INTERN_BITS_MIN 6u
#define INTERN_BITS_MAX 12u
#define INTERN_STR_MAX 256u
#define INTERN_TUPLE_MAX 8u
/* The dense memo is made of chunks of MEMO_CHUNK entries. */
#define MEMO_CHUNK_BITS 10
#define MEMO_CHUNK ((size_t)1 << MEMO_CHUNK_BITS)
/* A batch is not handed over while the stack holds more containers than this (they are
 * the batch's `pinned`). */
#define SPLIT_MAX_PINNED 16
/* Distinct containers from before its batch a handed batch may fetch (it may not change
 * them). */
#define SPLIT_MAX_FETCHED 64

/* A cache slot: the int itself, or a hash of the content; v is NULL when empty.  Keeping the
 * key here spares loading v (usually a cache miss) on the frequent mismatches. */
typedef struct intern_slot {
    uint64_t key;
    pk_value *v;
} intern_slot;

typedef struct pk_split pk_split;
typedef struct pk_batch pk_batch;

typedef struct pk_vm {
    /* Input: buf[0, len) holds bytes [base, base + len) of the pickle, pos is relative to buf.
     * A buffer input is all there (base 0, len total); a read input slides a window `win` of
     * `cap` bytes over it (see more()). */
    const uint8_t *buf;
    size_t len;
    size_t pos;
    size_t base;
    size_t total;
    size_t (*read)(void *ctx, uint8_t *dst, uint64_t off, size_t n);
    void *read_ctx;
    uint8_t *win;
    size_t cap;
    bool win_nomem; /* the window could not grow */
    size_t op_off;  /* offset of the opcode being executed (from the input's start) */
    unsigned op;
    ckpt_error *err;
    pk_builder b;

    pk_value **stack;
    size_t sp, scap;
    size_t fence; /* stack index of the innermost MARK (0 if none) */
    size_t *marks;
    size_t nmarks, mcap;

    /* Dense part: memo_dir[c] holds the entries of indices c * MEMO_CHUNK and up, or is NULL
     * while none of them is set.  Chunk 0 is memo_first, the others come from memo_arena:
     * zero-filled (NULL = unset), never moved as the memo grows, and faulted in ahead of use
     * for big pickles (see arena.c). */
    pk_value ***memo_dir;
    size_t memo_dir_cap;
    size_t memo_cap;   /* indices below it are dense: memo_dir_cap * MEMO_CHUNK */
    uint64_t memo_end; /* dense indices from it up were never set (so a store need not look) */
    ck_arena *memo_arena;
    uint64_t *hkeys; /* sparse part: open addressing, key + 1 (0 = empty) */
    pk_value **hvals;
    size_t hcap, hcount;
    uint64_t memo_count; /* distinct indices stored (what MEMOIZE uses) */
    uint64_t max_memo;

    uint64_t aux_bytes; /* working memory: stack, marks, memo */

    pk_value *none, *yes, *no, *empty_tuple;
    pk_value *small[SMALL_MAX - SMALL_MIN];
    intern_slot *ints, *strs, *tuples; /* one allocation */
    unsigned intern_bits;
    pk_value *memo_first[MEMO_CHUNK]; /* so that small pickles need no memo_arena */
    pk_value *result;

    /* pk_watch: NULL when none, or once revoked; `taken`: pairs were taken and not revoked */
    const pk_watch *watch;
    bool taken;

    const pk_value *torch_size; /* the last class node found to be torch.Size */

    /* Handing batches over (pk_watch.split; pickle_split.c).  Decoding thread: */
    pk_split *split;      /* made at the first hand-over */
    pk_value *split_dict; /* the dict whose batches go to the consumer, or NULL */
    size_t split_at;      /* its stack index */
    size_t split_len0;    /* its pairs before the first hand-over */
    size_t split_pairs;   /* pairs handed over for it */
    uint64_t memo_guard;  /* a GET from this index up may need a handed batch (else ~0) */
    /* The consumer's VM (sub): decodes handed batches; memo indices below memo_lo are the
     * decoding thread's, read-only; its own run from memo_lo to max_memo. */
    bool sub;
    uint64_t memo_lo;
    const pk_batch *batch; /* the batch it decodes */
    /* containers it fetched from below memo_lo in this batch: the decoding thread's, or an
     * earlier batch's, which that thread may read at any time, so they must not change */
    const pk_value *fetched[SPLIT_MAX_FETCHED];
    size_t nfetched;
    bool can_split; /* the watch has split and hand */
} pk_vm;

/* The bytes of a batch handed over undecoded (reused for later batches). */
typedef struct split_buf {
    struct split_buf *next;
    size_t cap;
    uint8_t bytes[];
} split_buf;

/* A batch handed over (pk_watch.hand): as bytes the consumer's VM decodes, or as pairs the
 * decoder decoded itself.  Made by pickle_split.c, decoded by pkvm_decode_batch. */
struct pk_batch {
    pk_split *split;
    pk_batch *next;
    uint64_t seq;
    pk_value *dict;
    split_buf *buf; /* handed undecoded: buf->bytes[0, nbytes) at `offset`, else NULL */
    size_t nbytes;
    uint64_t offset;
    uint64_t memo_lo, memo_hi;
    size_t nmarks; /* marks open at its start, its own included */
    /* containers on the decoding thread's stack when it was handed: the decoder may still
     * change them without fetching them again, so the batch must not refer to them */
    const pk_value *pinned[SPLIT_MAX_PINNED];
    size_t npinned;
    pk_value **kv; /* its pairs (handed decoded, or once run) */
    size_t npairs;
};

/* ---- pickle_vm.c, for split decoding ---- */

/* The builder's failure as the VM's error (the opcode being executed and its offset). */
ckpt_status pkvm_fail_build(pk_vm *vm);
/* Grows the working-memory array *arr (see pickle_vm.c). */
ckpt_status pkvm_grow_aux(pk_vm *vm, const char *what, void **arr, size_t *cap, size_t need,
                          size_t elem, size_t min_cap, uint64_t max_cap);
/* Makes `need` bytes from pos available in buf; false when the input ends before. */
bool pkvm_more(pk_vm *vm, size_t need);
/* The dense memo slot idx (< memo_cap), allocating its chunk. */
ckpt_status pkvm_memo_slot(pk_vm *vm, uint64_t idx, pk_value ***slot);
/* Pops the innermost mark: the items above it are stack[*start, sp). */
ckpt_status pkvm_pop_mark(pk_vm *vm, size_t *start);
/* Tells the watch's consumer to stop reading taken pairs (once; a no-op without a watch). */
void pkvm_revoke(pk_vm *vm);
/* The consumer's VM `sub` decodes bt's bytes and sets bt->kv (without messages: a failure
 * makes the decoder start over, and the plain decoder reports). */
ckpt_status pkvm_decode_batch(pk_vm *sub, pk_batch *bt);

/* ---- pickle_split.c, for the opcode loop ---- */

/* At the MARK just pushed: hands the batch it opens over undecoded, when the consumer wants
 * it and the batch can be (else decoding goes on as usual). */
ckpt_status pkvm_maybe_split(pk_vm *vm);
/* SETITEMS of n values into the split dict, decoded by the decoder: handed over as pairs. */
ckpt_status pkvm_hand_pairs(pk_vm *vm, pk_value *dict, size_t at, pk_value *const *kv, size_t n);
/* Waits until every handed batch was added to the split dict; the dict is the decoder's
 * again. */
ckpt_status pkvm_split_sync(pk_vm *vm);
/* A GET of idx >= memo_guard: waits for the handed batch that stores idx, if any. */
ckpt_status pkvm_memo_wait(pk_vm *vm, uint64_t idx);
/* After the decoding thread's loop ended with `st`: waits until every handed batch was run
 * or cancelled.  True when the document depends on a failed or cancelled batch (the watch is
 * then revoked): the caller decodes the pickle again without a watch.  (False without a
 * split.) */
bool pkvm_split_wait_all(pk_vm *vm, ckpt_status st);
/* Frees the split, if any; with `doc` (settled), first makes the consumer's values part of
 * it, whose budget becomes max_bytes again. */
void pkvm_split_free(pk_vm *vm, ck_arena *doc, uint64_t max_bytes);

#endif
