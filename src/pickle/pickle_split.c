/* pickle_split.c — split decoding (pk_watch.split): handing SETITEMS batches of big dicts
 * over to the consumer's thread undecoded, and the waits that keep the two threads apart.
 * The opcode loop, which both threads run, is pickle_vm.c's; the VM state both files share
 * is in pickle_vm_i.h.
 *
 * At the MARK of a SETITEMS batch into a dict the consumer names (its
 * split()), the decoder scans to the batch's end (pk_scan_batch), reserves the memo indices
 * the batch stores, hands the bytes over and goes on after the batch; the consumer's thread
 * decodes them with a VM of its own (pk_batch_run), which reads earlier memo entries but
 * refuses those the decoding thread may still change (split_may_share) and never changes one
 * itself (mutating), then adds the pairs to the dict.  From then on, batches the decoder decodes
 * itself for that dict are handed over as pairs, so that the consumer adds every batch in order.
 * The decoder waits for the consumer before anything else reads or changes that dict (the next
 * opcode after a batch that is not MARK, a GET or DUP of it), before a GET of an index a pending
 * batch stores, before a PUT that is not the next index, and at the end.  When a handed batch
 * fails, or is cancelled, the whole pickle is decoded again without handing over, so the
 * document, its errors and its limits are those of the plain decoder. */
#include "pickle/pickle_vm_i.h"
#include "util/error.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Batches longer than this are not handed over. */
#define SPLIT_MAX_BYTES ((size_t)1 << 20)

typedef struct split_range {
    uint64_t lo, hi; /* memo indices a batch handed as bytes stores */
    uint64_t seq;
} split_range;

struct pk_split {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t handed;              /* decoding thread */
    _Atomic uint64_t resolved;    /* batches run or cancelled, in handing order */
    _Atomic bool failed;          /* one failed or was cancelled */
    pk_batch *head, *tail;        /* every batch handed, freed at the end */
    split_range *ranges;          /* pending ranges since the last sync (decoding thread) */
    size_t nranges, rcap, rfirst; /* ranges[rfirst, nranges) may still be pending */
    pk_vm *sub;                   /* the consumer's VM */
    split_buf *spare;             /* byte buffers of run batches, for reuse (under mu) */
    ck_arena *arena;              /* its values, adopted by the document at the end */
};

/* (Always under the lock, never from the counter alone: the consumer increments it under the
 * lock before it broadcasts, and the split may be freed as soon as this returns.) */
static void split_wait(pk_split *s, uint64_t resolved) {
    pthread_mutex_lock(&s->mu);
    while (atomic_load_explicit(&s->resolved, memory_order_relaxed) < resolved)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

/* Resolves the oldest unresolved batch; `spare` (its buffer, or NULL) goes back for reuse. */
static void split_resolve(pk_split *s, bool failed, split_buf *spare) {
    pthread_mutex_lock(&s->mu);
    if (spare) {
        spare->next = s->spare;
        s->spare = spare;
    }
    if (failed) atomic_store_explicit(&s->failed, true, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->resolved, 1, memory_order_release);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* (the caller's status; pk_decode_watched then decodes again without handing over) */
static ckpt_status split_failed(pk_vm *vm) {
    return ck_fail(vm->err, CKPT_E_UNSUPPORTED, "pickle: a handed-over batch failed");
}

/* A buffer of at least n bytes: a spare one if any is big enough (batches are alike), else a
 * new one. */
static split_buf *split_buf_get(pk_split *s, size_t n) {
    pthread_mutex_lock(&s->mu);
    split_buf **p = &s->spare;
    while (*p && (*p)->cap < n)
        p = &(*p)->next;
    split_buf *f = *p;
    if (f) *p = f->next;
    pthread_mutex_unlock(&s->mu);
    if (f) return f;
    size_t cap = n < ((size_t)256 << 10) ? (size_t)256 << 10 : n;
    if (!(f = malloc(sizeof *f + cap))) return NULL;
    f->next = NULL;
    f->cap = cap;
    return f;
}

/* (pickle_vm_i.h) */
ckpt_status pkvm_split_sync(pk_vm *vm) {
    pk_split *s = vm->split;
    vm->split_dict = NULL;
    vm->memo_guard = UINT64_MAX;
    if (!s) return CKPT_OK;
    split_wait(s, s->handed);
    s->nranges = s->rfirst = 0;
    if (atomic_load_explicit(&s->failed, memory_order_relaxed)) return split_failed(vm);
    return CKPT_OK;
}

/* (pickle_vm_i.h) */
ckpt_status pkvm_memo_wait(pk_vm *vm, uint64_t idx) {
    pk_split *s = vm->split;
    size_t a = s->rfirst, b = s->nranges;
    while (a < b) {
        size_t m = a + (b - a) / 2;
        if (s->ranges[m].hi <= idx)
            a = m + 1;
        else
            b = m;
    }
    if (a < s->nranges && s->ranges[a].lo <= idx) split_wait(s, s->ranges[a].seq + 1);
    if (atomic_load_explicit(&s->failed, memory_order_acquire)) return split_failed(vm);
    uint64_t done = atomic_load_explicit(&s->resolved, memory_order_acquire);
    while (s->rfirst < s->nranges && s->ranges[s->rfirst].seq < done)
        s->rfirst++;
    vm->memo_guard = s->rfirst < s->nranges ? s->ranges[s->rfirst].lo : UINT64_MAX;
    return CKPT_OK;
}

static void split_release(pk_split *s) {
    if (!s) return;
    for (pk_batch *b = s->head, *next; b; b = next) {
        next = b->next;
        free(b->buf);
        free(b);
    }
    for (split_buf *f = s->spare, *next; f; f = next) {
        next = f->next;
        free(f);
    }
    pk_vm *sub = s->sub;
    if (sub) {
        free(sub->stack);
        free(sub->marks);
        free(sub->ints);
        free(sub->b.keys_cache);
        free(sub);
    }
    ck_arena_free(s->arena);
    free(s->ranges);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

/* The first hand-over: the memo directory at its full size (the consumer's VM reads it, so
 * it never moves again), the consumer's VM, and half of what is left of the budgets. */
static bool split_start(pk_vm *vm) {
    size_t need = (size_t)(vm->max_memo >> MEMO_CHUNK_BITS) + 1;
    if (vm->memo_dir_cap < need) {
        void *arr = vm->memo_dir;
        size_t old = vm->memo_dir_cap;
        if (pkvm_grow_aux(vm, "memo", &arr, &vm->memo_dir_cap, need, sizeof *vm->memo_dir, need,
                          need) != CKPT_OK)
            return false;
        vm->memo_dir = arr;
        memset(vm->memo_dir + old, 0, (vm->memo_dir_cap - old) * sizeof *vm->memo_dir);
        if (!old) vm->memo_dir[0] = vm->memo_first;
        vm->memo_cap = vm->memo_dir_cap << MEMO_CHUNK_BITS;
    }
    uint64_t used = ck_arena_used(vm->b.arena);
    uint64_t bytes = used < vm->b.max_bytes ? (vm->b.max_bytes - used) / 2 : 0;
    uint64_t items = vm->b.items < vm->b.max_items ? (vm->b.max_items - vm->b.items) / 2 : 0;
    if (bytes < ((uint64_t)1 << 20) || items < 1024) return false;
    pk_split *s = calloc(1, sizeof *s);
    pk_vm *sub = calloc(1, sizeof *sub);
    if (s) {
        s->sub = sub;
        s->arena = ck_arena_new(bytes);
        pthread_mutex_init(&s->mu, NULL);
        pthread_cond_init(&s->cv, NULL);
    }
    if (sub) {
        sub->sub = true;
        sub->b.arena = s ? s->arena : NULL;
        sub->b.max_bytes = bytes;
        sub->b.max_items = items;
        sub->b.max_depth = vm->b.max_depth;
        sub->intern_bits = INTERN_BITS_MAX;
        sub->b.keys_bits = sub->intern_bits - 2;
        sub->ints = calloc((size_t)3 << sub->intern_bits, sizeof *sub->ints);
        sub->b.keys_cache = calloc((size_t)1 << sub->b.keys_bits, sizeof *sub->b.keys_cache);
        sub->strs = sub->ints ? sub->ints + ((size_t)1 << sub->intern_bits) : NULL;
        sub->tuples = sub->strs ? sub->strs + ((size_t)1 << sub->intern_bits) : NULL;
        sub->memo_dir = vm->memo_dir;
        sub->memo_dir_cap = vm->memo_dir_cap;
        sub->memo_cap = vm->memo_cap;
        sub->memo_guard = UINT64_MAX;
    }
    void *stack = NULL;
    if (!s || !sub || !s->arena || !sub->ints || !sub->b.keys_cache ||
        pkvm_grow_aux(sub, "stack", &stack, &sub->scap, 256, sizeof *sub->stack, 256,
                      sub->b.max_items) != CKPT_OK) {
        free(stack);
        split_release(s);
        if (!s) free(sub);
        return false;
    }
    sub->stack = stack;
    ck_arena_max_block(s->arena, (size_t)16 << 20);
    ck_arena_set_budget(vm->b.arena, vm->b.max_bytes - bytes);
    vm->b.max_items -= items;
    vm->split = s;
    return true;
}

/* Offers bt to the consumer; false (bt freed) when it did not take it. */
static bool hand(pk_vm *vm, const char *label, pk_value *dict, size_t len, pk_batch *bt) {
    pk_split *s = vm->split;
    bt->split = s;
    bt->seq = s->handed;
    if (!vm->watch->hand(vm->watch->ctx, label, dict, len, bt, bt->npairs)) {
        free(bt->buf);
        free(bt);
        return false;
    }
    s->handed++;
    if (s->tail)
        s->tail->next = bt;
    else
        s->head = bt;
    s->tail = bt;
    vm->taken = true;
    return true;
}

/* The label of the dict at stack index `at`, as offer() finds it; `fence`: the fence of the
 * dict's own MARK region. */
static const char *dict_label(const pk_vm *vm, size_t at, size_t fence) {
    const pk_value *lab = at >= 1 && at - 1 >= fence ? vm->stack[at - 1] : NULL;
    return lab && lab->type == PK_STR ? lab->u.str.ptr : NULL;
}

/* (pickle_vm_i.h) */
ckpt_status pkvm_maybe_split(pk_vm *vm) {
    /* a failed batch: decoding on is wasted, the plain decoder starts over */
    if (vm->split && atomic_load_explicit(&vm->split->failed, memory_order_relaxed))
        return split_failed(vm);
    if (vm->sp < 2 || vm->nmarks < 1) return CKPT_OK;
    size_t at = vm->sp - 1;
    pk_value *dict = vm->stack[at];
    if (dict->type != PK_DICT || (vm->split_dict && dict != vm->split_dict)) return CKPT_OK;
    /* a dict fetched again is left to the plain path (which may revoke the watch) */
    if ((dict->flags & PK_FLAG_ALIASED) || vm->hcount || vm->memo_end != vm->memo_count)
        return CKPT_OK;
    const char *label = dict_label(vm, at, vm->nmarks >= 2 ? vm->marks[vm->nmarks - 2] : 0);
    if (!label || !vm->watch->split(vm->watch->ctx, label, dict)) return CKPT_OK;
    size_t left = vm->total - vm->base - vm->pos;
    size_t want = left < SPLIT_MAX_BYTES ? left : SPLIT_MAX_BYTES;
    if (vm->len - vm->pos < want && !pkvm_more(vm, want)) return CKPT_OK;
    pk_scan sc;
    if (!pk_scan_batch(vm->buf + vm->pos, want, left, &sc)) return CKPT_OK;
    if (sc.memos > vm->max_memo - vm->memo_count) return CKPT_OK;
    if (!vm->split && !split_start(vm)) return CKPT_OK;
    pk_split *s = vm->split;
    uint64_t lo = vm->memo_count, hi = lo + sc.memos;
    for (uint64_t i = lo; i < hi; i = (i | (MEMO_CHUNK - 1)) + 1) {
        pk_value **slot;
        if (pkvm_memo_slot(vm, i, &slot) != CKPT_OK) return CKPT_OK;
    }
    if (hi > lo && s->nranges == s->rcap) {
        size_t cap = s->rcap ? 2 * s->rcap : 64;
        split_range *r = realloc(s->ranges, cap * sizeof *r);
        if (!r) return CKPT_OK;
        s->ranges = r;
        s->rcap = cap;
    }
    const pk_value *pinned[SPLIT_MAX_PINNED];
    size_t npinned = 0;
    for (size_t i = 0; i < vm->sp; i++) {
        if (!pkb_is_container(vm->stack[i]->type) || vm->stack[i]->type == PK_TUPLE) continue;
        if (npinned == SPLIT_MAX_PINNED) return CKPT_OK;
        pinned[npinned++] = vm->stack[i];
    }
    pk_batch *bt = calloc(1, sizeof *bt);
    split_buf *buf = bt ? split_buf_get(s, sc.end) : NULL;
    if (!buf) {
        free(bt);
        return CKPT_OK;
    }
    memcpy(buf->bytes, vm->buf + vm->pos, sc.end);
    *bt = (pk_batch){.dict = dict,
                     .buf = buf,
                     .nbytes = sc.end,
                     .offset = vm->base + vm->pos,
                     .memo_lo = lo,
                     .memo_hi = hi,
                     .nmarks = vm->nmarks,
                     .npairs = sc.pairs,
                     .npinned = npinned};
    memcpy(bt->pinned, pinned, npinned * sizeof *pinned);
    bool first = !vm->split_dict;
    size_t len0 = first ? dict->u.dict.len : vm->split_len0;
    if (!hand(vm, label, dict, len0 + (first ? 0 : vm->split_pairs), bt)) return CKPT_OK;
    if (first) {
        vm->split_dict = dict;
        vm->split_at = at;
        vm->split_len0 = len0;
        vm->split_pairs = 0;
    }
    vm->split_pairs += sc.pairs;
    if (hi > lo) {
        s->ranges[s->nranges++] = (split_range){lo, hi, s->handed - 1};
        if (vm->memo_guard > lo) vm->memo_guard = lo;
    }
    vm->memo_count = vm->memo_end = hi;
    vm->pos += sc.end + 1; /* past its SETITEMS */
    size_t start = 0;
    return pkvm_pop_mark(vm, &start);
}

/* (pickle_vm_i.h) */
ckpt_status pkvm_hand_pairs(pk_vm *vm, pk_value *dict, size_t at, pk_value *const *kv, size_t n) {
    if (vm->watch) {
        pk_value **copy = pkb_alloc(&vm->b, n * sizeof *copy);
        if (!copy) return pkvm_fail_build(vm);
        memcpy(copy, kv, n * sizeof *kv);
        pk_batch *bt = calloc(1, sizeof *bt);
        if (bt) {
            *bt = (pk_batch){.dict = dict, .kv = copy, .npairs = n / 2};
            if (hand(vm, dict_label(vm, at, vm->fence), dict, vm->split_len0 + vm->split_pairs,
                     bt)) {
                vm->split_pairs += n / 2;
                return CKPT_OK;
            }
        }
    }
    CK_TRY(pkvm_split_sync(vm)); /* then as a plain SETITEMS */
    return pkb_dict_extend(&vm->b, dict, kv, n / 2) ? CKPT_OK : pkvm_fail_build(vm);
}

ckpt_status pk_batch_run(pk_batch *bt, pk_value *const **kv, size_t *npairs) {
    pk_split *s = bt->split;
    pk_vm *sub = s->sub;
    ckpt_status st = CKPT_OK;
    if (atomic_load_explicit(&s->failed, memory_order_relaxed))
        st = CKPT_E_UNSUPPORTED; /* the decoder starts over anyway */
    else if (bt->buf)
        st = pkvm_decode_batch(sub, bt);
    split_buf *spare = bt->buf;
    bt->buf = NULL;
    if (st == CKPT_OK && !pkb_dict_extend(&sub->b, bt->dict, bt->kv, bt->npairs))
        st = sub->b.status != CKPT_OK ? sub->b.status : CKPT_E_NOMEM;
    *kv = st == CKPT_OK ? bt->kv : NULL;
    *npairs = st == CKPT_OK ? bt->npairs : 0;
    split_resolve(s, st != CKPT_OK, spare);
    return st;
}

void pk_batch_cancel(pk_batch *bt) { split_resolve(bt->split, true, NULL); }

size_t pk_batch_bytes(const pk_batch *bt) { return bt->buf ? bt->nbytes : 0; }

/* (pickle_vm_i.h) */
bool pkvm_split_wait_all(pk_vm *vm, ckpt_status st) {
    pk_split *s = vm->split;
    if (!s) return false;
    split_wait(s, s->handed); /* every handed batch run or cancelled */
    /* (its budgets were shared out even if nothing was taken; and after a failed batch the
     * document is not whole, whatever path led here) */
    bool again = st != CKPT_OK || atomic_load_explicit(&s->failed, memory_order_relaxed);
    if (again && st == CKPT_OK) pkvm_revoke(vm);
    return again;
}

/* (pickle_vm_i.h) */
void pkvm_split_free(pk_vm *vm, ck_arena *doc, uint64_t max_bytes) {
    pk_split *s = vm->split;
    if (!s) return;
    if (doc) {
        ck_arena_adopt(doc, s->arena); /* the consumer's values are the document's */
        s->arena = NULL;
        ck_arena_set_budget(doc, max_bytes);
    }
    split_release(s);
    vm->split = NULL;
}
