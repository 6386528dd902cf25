/* pickle_vm.c — pk_decode: the opcode loop of the data-only pickle decoder.  Reads every
 * data-producing opcode of protocols 0-5, keeps the value stack, the mark stack and the memo,
 * and builds values through pickle_value.c.  Nothing is executed and nothing recurses; every
 * length is checked against the remaining input before anything is allocated.  The same loop
 * runs on a consumer's thread for batches handed over undecoded (split decoding: handing
 * over and the waits are pickle_split.c's; the rules the consumer's VM keeps while it decodes
 * a batch, split_may_share and mutating, are here).
 *
 * Semantics chosen where Python would run code:
 *   GLOBAL/STACK_GLOBAL -> PK_GLOBAL (module and name as written: no copyreg/__builtin__
 *   mapping); REDUCE, INST, OBJ -> PK_OBJECT how=REDUCE; NEWOBJ(_EX) -> how=NEWOBJ(_EX);
 *   except that REDUCE of torch.Size on a tuple of ints gives that tuple;
 *   BUILD on an object stores its state, and a second BUILD replaces the first state (as a
 *   __setstate__ that assigns would); APPEND(S)/SETITEM(S) on an object go to its
 *   listitems/dictitems (OrderedDict, defaultdict); PERSID/BINPERSID -> PK_PERSID.
 *   Python-2 str opcodes (STRING, BINSTRING, SHORT_BINSTRING) give PK_STR: the bytes as they
 *   are when they are valid UTF-8, else read as Latin-1 (encoding='latin1').
 *   EXT1/2/4 and out-of-band buffers are rejected with CKPT_E_UNSUPPORTED.
 * The stack and mark stack follow CPython's _pickle.c: a MARK fences the stack, and POP on a
 * fence pops the mark.  The memo is dense (chunks of entries) for the indices pickles use
 * (0, 1, 2, ...) and a hash map for sparse ones, so its memory follows the number of stores,
 * not the indices.  Working memory (stack, memo) is bounded by max_bytes as well. */
#include "pickle/pickle_ops_i.h"
#include "pickle/pickle_vm_i.h"
#include "util/error.h"
#include "util/htab.h"
#include "util/utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_BYTES (1ull << 30)
#define DEFAULT_MAX_ITEMS (64ull << 20)
#define DEFAULT_MAX_DEPTH 512u
#define DEFAULT_MAX_MEMO (16ull << 20)

/* Memo indices up to 2 * (stores so far) + MEMO_SLACK go to the dense part, which is made of
 * chunks of MEMO_CHUNK entries. */
#define MEMO_SLACK 1024u
/* Window of a read input (grown for longer arguments). */
#define PK_WINDOW_DEFAULT ((size_t)4 << 20)

/* ---------------------------------------------------------------- errors */

__attribute__((format(printf, 3, 4))) static ckpt_status fail(pk_vm *vm, ckpt_status st,
                                                              const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    const char *name = pk_op_name(vm->op);
    return ck_fail(vm->err, st, "pickle offset %zu: %s (opcode 0x%02x %s)", vm->op_off, what,
                   vm->op, name ? name : "?");
}

static ckpt_status fail_build(pk_vm *vm) {
    const pk_builder *b = &vm->b;
    ckpt_status st = b->status != CKPT_OK ? b->status : CKPT_E_NOMEM;
    const char *why = b->why ? b->why : "out of memory";
    if (b->limit) return fail(vm, st, "%s (limit %llu)", why, (unsigned long long)b->limit);
    return fail(vm, st, "%s", why);
}

static ckpt_status truncated(pk_vm *vm, uint64_t need) {
    if (vm->win_nomem)
        return fail(vm, CKPT_E_NOMEM, "out of memory for a %llu-byte argument",
                    (unsigned long long)need);
    return fail(vm, CKPT_E_FORMAT, "truncated: argument needs %llu bytes, %zu left",
                (unsigned long long)need, vm->total - vm->base - vm->pos);
}

static ckpt_status underflow(pk_vm *vm) { return fail(vm, CKPT_E_FORMAT, "stack underflow"); }

/* ---------------------------------------------------------------- input */

/* Makes `need` bytes from pos available in buf.  False when the input ends before (or a read
 * failed: the input's owner reports why; or the window could not grow: win_nomem).  A read
 * input's window drops the bytes before pos (so pointers from take() and take_line() are
 * good until the next call of either), grows to hold long arguments and is filled as far as
 * it goes. */
static bool more(pk_vm *vm, size_t need) {
    if (vm->total - vm->base - vm->pos < need) return false;
    if (vm->len - vm->pos >= need) return true;
    if (!vm->read) return false;
    if (vm->pos) {
        memmove(vm->win, vm->win + vm->pos, vm->len - vm->pos);
        vm->base += vm->pos;
        vm->len -= vm->pos;
        vm->pos = 0;
    }
    if (need > vm->cap) {
        size_t cap = vm->cap > (vm->total - vm->base) / 2 ? vm->total - vm->base : 2 * vm->cap;
        if (cap < need) cap = need;
        uint8_t *w = realloc(vm->win, cap);
        if (!w) {
            vm->win_nomem = true;
            return false;
        }
        vm->win = w;
        vm->cap = cap;
    }
    vm->buf = vm->win;
    while (vm->len < need) {
        size_t want = vm->cap - vm->len, left = vm->total - vm->base - vm->len;
        size_t got = vm->read(vm->read_ctx, vm->win + vm->len, vm->base + vm->len,
                              want < left ? want : left);
        if (!got) return false;
        vm->len += got;
    }
    return true;
}

/* The next n bytes of argument, or NULL (and a truncation error in *st). */
static const uint8_t *take(pk_vm *vm, uint64_t n, ckpt_status *st) {
    if (n > vm->len - vm->pos && (n > SIZE_MAX || !more(vm, (size_t)n))) {
        *st = truncated(vm, n);
        return NULL;
    }
    const uint8_t *p = vm->buf + vm->pos;
    vm->pos += (size_t)n;
    return p;
}

/* A newline-terminated text argument (newline excluded). */
static ckpt_status take_line(pk_vm *vm, const uint8_t **s, size_t *n) {
    size_t scanned = 0; /* bytes from pos on without a newline */
    const uint8_t *nl;
    while (!(nl = memchr(vm->buf + vm->pos + scanned, '\n', vm->len - vm->pos - scanned))) {
        scanned = vm->len - vm->pos;
        size_t left = vm->total - vm->base - vm->pos;
        if (scanned == left || !more(vm, left - scanned > 65536 ? scanned + 65536 : left)) {
            if (vm->win_nomem) return fail(vm, CKPT_E_NOMEM, "out of memory for a text argument");
            return fail(vm, CKPT_E_FORMAT, "truncated: text argument has no newline");
        }
    }
    *s = vm->buf + vm->pos;
    *n = (size_t)(nl - *s);
    vm->pos += *n + 1;
    return CKPT_OK;
}

/* ---------------------------------------------------------------- working memory */

static ckpt_status grow_aux(pk_vm *vm, const char *what, void **arr, size_t *cap, size_t need,
                            size_t elem, size_t min_cap, uint64_t max_cap) {
    if (need > max_cap)
        return fail(vm, CKPT_E_LIMIT, "%s too large (limit %llu)", what,
                    (unsigned long long)max_cap);
    size_t ncap = *cap < min_cap ? min_cap : *cap;
    while (ncap < need)
        ncap = ncap > SIZE_MAX / 4 / elem ? need : ncap * 2;
    if (ncap > max_cap) ncap = (size_t)max_cap;
    if (ncap > SIZE_MAX / elem) return fail(vm, CKPT_E_LIMIT, "%s too large", what);
    uint64_t old_bytes = (uint64_t)*cap * elem, new_bytes = (uint64_t)ncap * elem;
    if (vm->aux_bytes - old_bytes + new_bytes > vm->b.max_bytes)
        return fail(vm, CKPT_E_LIMIT, "working memory exceeds the memory budget (limit %llu)",
                    (unsigned long long)vm->b.max_bytes);
    void *p = realloc(*arr, (size_t)new_bytes);
    if (!p) return fail(vm, CKPT_E_NOMEM, "out of memory");
    vm->aux_bytes = vm->aux_bytes - old_bytes + new_bytes;
    *arr = p;
    *cap = ncap;
    return CKPT_OK;
}

static inline ckpt_status push(pk_vm *vm, pk_value *v) {
    if (vm->sp == vm->scap) {
        void *arr = vm->stack;
        ckpt_status st = grow_aux(vm, "stack", &arr, &vm->scap, vm->sp + 1, sizeof *vm->stack, 256,
                                  vm->b.max_items);
        if (st) return st;
        vm->stack = arr;
    }
    vm->stack[vm->sp++] = v;
    return CKPT_OK;
}

/* Pushes a freshly built value, or reports why it could not be built. */
static inline ckpt_status push_new(pk_vm *vm, pk_value *v) {
    return v ? push(vm, v) : fail_build(vm);
}

#define NEED_STACK(vm, k)                                                                          \
    do {                                                                                           \
        if ((vm)->sp - (vm)->fence < (k)) return underflow(vm);                                    \
    } while (0)

static ckpt_status push_mark(pk_vm *vm) {
    if (vm->nmarks >= vm->b.max_depth)
        return fail(vm, CKPT_E_LIMIT, "MARKs nested too deeply (limit %u)", vm->b.max_depth);
    if (vm->nmarks == vm->mcap) {
        void *arr = vm->marks;
        ckpt_status st = grow_aux(vm, "mark stack", &arr, &vm->mcap, vm->nmarks + 1,
                                  sizeof *vm->marks, 16, vm->b.max_depth);
        if (st) return st;
        vm->marks = arr;
    }
    vm->marks[vm->nmarks++] = vm->sp;
    vm->fence = vm->sp;
    return CKPT_OK;
}

/* Pops the innermost mark: the items above it are stack[*start, sp). */
static ckpt_status pop_mark(pk_vm *vm, size_t *start) {
    if (!vm->nmarks) return fail(vm, CKPT_E_FORMAT, "no MARK on the stack");
    *start = vm->marks[--vm->nmarks];
    vm->fence = vm->nmarks ? vm->marks[vm->nmarks - 1] : 0;
    return CKPT_OK;
}

/* ---------------------------------------------------------------- for pickle_split.c */

/* (pickle_vm_i.h: wrappers, so that the opcode loop keeps its own static copies inlined) */
ckpt_status pkvm_fail_build(pk_vm *vm) { return fail_build(vm); }
ckpt_status pkvm_grow_aux(pk_vm *vm, const char *what, void **arr, size_t *cap, size_t need,
                          size_t elem, size_t min_cap, uint64_t max_cap) {
    return grow_aux(vm, what, arr, cap, need, elem, min_cap, max_cap);
}
bool pkvm_more(pk_vm *vm, size_t need) { return more(vm, need); }
ckpt_status pkvm_pop_mark(pk_vm *vm, size_t *start) { return pop_mark(vm, start); }

/* ---------------------------------------------------------------- memo */

static size_t hslot(uint64_t key, size_t cap) {
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1);
}

static pk_value *memo_get(const pk_vm *vm, uint64_t idx) {
    if (idx < vm->memo_cap) {
        pk_value **chunk = vm->memo_dir[idx >> MEMO_CHUNK_BITS];
        return chunk ? chunk[idx & (MEMO_CHUNK - 1)] : NULL;
    }
    if (!vm->hcount) return NULL;
    for (size_t i = hslot(idx + 1, vm->hcap);; i = (i + 1) & (vm->hcap - 1)) {
        if (vm->hkeys[i] == idx + 1) return vm->hvals[i];
        if (!vm->hkeys[i]) return NULL;
    }
}

static void hash_insert(uint64_t *keys, pk_value **vals, size_t cap, uint64_t key, pk_value *v,
                        bool *added) {
    size_t i = hslot(key, cap);
    while (keys[i] && keys[i] != key)
        i = (i + 1) & (cap - 1);
    *added = !keys[i];
    keys[i] = key;
    vals[i] = v;
}

/* The dense memo slot idx (< memo_cap), allocating its chunk. */
static ckpt_status memo_slot(pk_vm *vm, uint64_t idx, pk_value ***slot) {
    pk_value ***chunk = &vm->memo_dir[idx >> MEMO_CHUNK_BITS];
    if (!*chunk) {
        uint64_t bytes = MEMO_CHUNK * sizeof **chunk;
        if (vm->aux_bytes + bytes > vm->b.max_bytes)
            return fail(vm, CKPT_E_LIMIT, "working memory exceeds the memory budget (limit %llu)",
                        (unsigned long long)vm->b.max_bytes);
        if (!vm->memo_arena) {
            if (!(vm->memo_arena = ck_arena_new(0))) return fail(vm, CKPT_E_NOMEM, "out of memory");
            ck_arena_map_ahead(vm->memo_arena);
        }
        if (!(*chunk = ck_arena_alloc(vm->memo_arena, (size_t)bytes)))
            return fail(vm, CKPT_E_NOMEM, "out of memory");
        vm->aux_bytes += bytes;
    }
    *slot = &(*chunk)[idx & (MEMO_CHUNK - 1)];
    return CKPT_OK;
}

ckpt_status pkvm_memo_slot(pk_vm *vm, uint64_t idx, pk_value ***slot) {
    return memo_slot(vm, idx, slot);
}

/* Rebuilds the hash with at least `cap` slots, moving indices below memo_cap to the dense
 * part. */
static ckpt_status hash_rebuild(pk_vm *vm, size_t cap) {
    uint64_t bytes = (uint64_t)cap * (sizeof(uint64_t) + sizeof(pk_value *));
    uint64_t old = (uint64_t)vm->hcap * (sizeof(uint64_t) + sizeof(pk_value *));
    if (vm->aux_bytes - old + bytes > vm->b.max_bytes)
        return fail(vm, CKPT_E_LIMIT, "working memory exceeds the memory budget (limit %llu)",
                    (unsigned long long)vm->b.max_bytes);
    uint64_t *keys = calloc(cap, sizeof *keys);
    pk_value **vals = calloc(cap, sizeof *vals);
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return fail(vm, CKPT_E_NOMEM, "out of memory");
    }
    size_t count = 0;
    for (size_t i = 0; i < vm->hcap; i++) {
        uint64_t k = vm->hkeys[i];
        if (!k) continue;
        if (k - 1 < vm->memo_cap) {
            pk_value **slot;
            ckpt_status st = memo_slot(vm, k - 1, &slot);
            if (st) {
                free(keys);
                free(vals);
                return st;
            }
            *slot = vm->hvals[i];
            if (k > vm->memo_end) vm->memo_end = k;
            continue;
        }
        bool added;
        hash_insert(keys, vals, cap, k, vm->hvals[i], &added);
        count++;
    }
    free(vm->hkeys);
    free(vm->hvals);
    vm->hkeys = keys;
    vm->hvals = vals;
    vm->aux_bytes = vm->aux_bytes - old + bytes;
    vm->hcap = cap;
    vm->hcount = count;
    return CKPT_OK;
}

static ckpt_status memo_put(pk_vm *vm, uint64_t idx, pk_value *v) {
    /* the usual store (MEMOIZE): the next dense index, in a chunk already there */
    if (idx == vm->memo_end && idx < vm->memo_cap && idx < vm->max_memo) {
        pk_value **chunk = vm->memo_dir[idx >> MEMO_CHUNK_BITS];
        if (chunk) {
            chunk[idx & (MEMO_CHUNK - 1)] = v;
            vm->memo_end = idx + 1;
            vm->memo_count++;
            return CKPT_OK;
        }
    }
    if (vm->sub)
        return fail(vm, CKPT_E_UNSUPPORTED, "memo store %llu in a handed-over batch",
                    (unsigned long long)idx);
    /* handed batches may read the entry it replaces (new ones are above theirs) */
    if (vm->split_dict && idx < vm->memo_end) CK_TRY(pkvm_split_sync(vm));
    if (idx >= vm->max_memo)
        return fail(vm, CKPT_E_LIMIT, "memo index %llu too large (limit %llu)",
                    (unsigned long long)idx, (unsigned long long)vm->max_memo);
    if (idx >= vm->memo_cap && idx <= 2 * vm->memo_count + MEMO_SLACK) {
        void *arr = vm->memo_dir;
        size_t old = vm->memo_dir_cap;
        ckpt_status st =
            grow_aux(vm, "memo", &arr, &vm->memo_dir_cap, (size_t)(idx >> MEMO_CHUNK_BITS) + 1,
                     sizeof *vm->memo_dir, 16, (vm->max_memo >> MEMO_CHUNK_BITS) + 1);
        if (st) return st;
        vm->memo_dir = arr;
        memset(vm->memo_dir + old, 0, (vm->memo_dir_cap - old) * sizeof *vm->memo_dir);
        if (!old) vm->memo_dir[0] = vm->memo_first;
        vm->memo_cap = vm->memo_dir_cap << MEMO_CHUNK_BITS;
        if (vm->hcount) CK_TRY(hash_rebuild(vm, vm->hcap));
    }
    if (idx < vm->memo_cap) {
        pk_value **slot;
        CK_TRY(memo_slot(vm, idx, &slot));
        if (idx >= vm->memo_end) {
            vm->memo_end = idx + 1;
            vm->memo_count++;
        } else if (!*slot) {
            vm->memo_count++;
        }
        *slot = v;
        return CKPT_OK;
    }
    if ((vm->hcount + 1) * 2 > vm->hcap) CK_TRY(hash_rebuild(vm, vm->hcap ? vm->hcap * 2 : 64));
    bool added;
    hash_insert(vm->hkeys, vm->hvals, vm->hcap, idx + 1, v, &added);
    if (added) {
        vm->hcount++;
        vm->memo_count++;
    }
    return CKPT_OK;
}

/* Pushes a node that is already in the document (memo GET, DUP): under a watch it is marked
 * PK_FLAG_ALIASED (see mutating()), written once, so that nodes the watch's thread reads too
 * (class references, keys) are not written again at every GET. */
static ckpt_status push_again(pk_vm *vm, pk_value *v) {
    if (v == vm->split_dict) CK_TRY(pkvm_split_sync(vm)); /* its batches are added first */
    if (vm->watch && !(v->flags & PK_FLAG_ALIASED)) v->flags |= PK_FLAG_ALIASED;
    return push(vm, v);
}

/* Whether a handed-over batch may refer to v, made before it by the decoding thread.  That
 * thread changes a container only while it is on its stack or after fetching it again (memo
 * GET, DUP), which marks it aliased so that the change first revokes the watch, stopping the
 * consumer: so any value is fine except the containers on its stack at the hand-over
 * (`pinned`) and tuples holding containers (re-made tuples from the intern cache get their
 * depth raised when their items deepened). */
static bool split_may_share(const pk_vm *vm, const pk_value *v) {
    switch ((pk_type)v->type) {
    case PK_NONE:
    case PK_BOOL:
    case PK_INT:
    case PK_BIGINT:
    case PK_FLOAT:
    case PK_STR:
    case PK_BYTES:
    case PK_GLOBAL: return true;
    case PK_TUPLE:
    case PK_FROZENSET: return v->depth <= 1;
    default: break;
    }
    const pk_batch *bt = vm->batch;
    for (size_t i = 0; i < bt->npinned; i++)
        if (bt->pinned[i] == v) return false;
    return true;
}

static ckpt_status memo_push(pk_vm *vm, uint64_t idx) {
    if (idx >= vm->memo_guard) CK_TRY(pkvm_memo_wait(vm, idx));
    pk_value *v = vm->sub && idx >= vm->memo_count ? NULL : memo_get(vm, idx);
    if (!v) return fail(vm, CKPT_E_FORMAT, "memo key %llu not found", (unsigned long long)idx);
    if (vm->sub && idx < vm->memo_lo) {
        if (!split_may_share(vm, v))
            return fail(vm, CKPT_E_UNSUPPORTED, "a handed-over batch refers to a %s outside it",
                        pk_type_name(v->type));
        if (pkb_is_container(v->type) && v->type != PK_TUPLE && v->type != PK_FROZENSET) {
            size_t i = 0; /* (torch's batches fetch a few shared objects, many times) */
            while (i < vm->nfetched && vm->fetched[i] != v)
                i++;
            if (i == SPLIT_MAX_FETCHED)
                return fail(vm, CKPT_E_UNSUPPORTED, "a handed-over batch fetches too much");
            if (i == vm->nfetched) vm->fetched[vm->nfetched++] = v;
        }
    }
    return push_again(vm, v);
}

static ckpt_status memo_store(pk_vm *vm, uint64_t idx) {
    NEED_STACK(vm, 1);
    return memo_put(vm, idx, vm->stack[vm->sp - 1]);
}

/* ---------------------------------------------------------------- scalars */

static pk_value *mk_singleton(pk_vm *vm, pk_value **slot, pk_type t, bool b) {
    if (!*slot) {
        *slot = pkb_scalar(&vm->b, t);
        if (*slot) (*slot)->u.b = b;
    }
    return *slot;
}

static intern_slot *intern_lookup(const pk_vm *vm, intern_slot *cache, uint64_t key) {
    return &cache[(key * 0x9E3779B97F4A7C15ull) >> (64 - vm->intern_bits)];
}

static pk_value *mk_int(pk_vm *vm, int64_t x) {
    pk_value **small = x >= SMALL_MIN && x < SMALL_MAX ? &vm->small[x - SMALL_MIN] : NULL;
    if (small && *small) return *small;
    intern_slot *slot = small ? NULL : intern_lookup(vm, vm->ints, (uint64_t)x);
    if (slot && slot->v && slot->key == (uint64_t)x) return slot->v;
    pk_value *v = pkb_scalar(&vm->b, PK_INT);
    if (!v) return NULL;
    v->u.i = x;
    if (small)
        *small = v;
    else
        *slot = (intern_slot){(uint64_t)x, v};
    return v;
}

/* A PK_STR of p[0, n), which the caller checked to be UTF-8. */
static pk_value *mk_str(pk_vm *vm, const uint8_t *p, size_t n) {
    if (n > INTERN_STR_MAX) return pkb_string(&vm->b, PK_STR, p, n);
    uint64_t h = ck_hash_bytes(p, n, 0);
    intern_slot *slot = intern_lookup(vm, vm->strs, h);
    pk_value *v = slot->v;
    if (v && slot->key == h && v->u.str.len == n && memcmp(v->u.str.ptr, p, n) == 0) return v;
    v = pkb_string(&vm->b, PK_STR, p, n);
    if (v) *slot = (intern_slot){h, v};
    return v;
}

/* LONG1/LONG4 payload: little-endian two's complement. */
static pk_value *mk_long(pk_vm *vm, const uint8_t *p, size_t n) {
    if (n == 0) return mk_int(vm, 0);
    uint8_t fill = (p[n - 1] & 0x80) ? 0xFF : 0x00;
    bool fits = true;
    if (n > 8) {
        for (size_t i = 8; i < n && fits; i++)
            fits = p[i] == fill;
        fits = fits && (p[7] & 0x80) == (fill & 0x80);
    }
    if (!fits) return pkb_string(&vm->b, PK_BIGINT, p, n);
    size_t k = n < 8 ? n : 8;
    uint64_t u = pk_rd_le(p, (int)k);
    if (k < 8 && fill) u |= ~0ull << (8 * k);
    return mk_int(vm, (int64_t)u);
}

/* INT/LONG text: decimal of any size. */
static ckpt_status push_decimal(pk_vm *vm, const uint8_t *s, size_t n) {
    int64_t x;
    switch (pkt_parse_i64(s, n, &x)) {
    case PKT_OK: return push_new(vm, mk_int(vm, x));
    case PKT_SYNTAX: return fail(vm, CKPT_E_FORMAT, "invalid integer literal");
    case PKT_OVERFLOW: break;
    }
    if (n > PK_MAX_INT_DIGITS + 1)
        return fail(vm, CKPT_E_LIMIT, "integer literal longer than %u digits", PK_MAX_INT_DIGITS);
    char *buf;
    pk_value *v = pkb_string_alloc(&vm->b, PK_BIGINT, n / 2 + 8, &buf);
    if (!v) return fail_build(vm);
    pkb_string_trim(v, pkt_decimal_to_le(s, n, (uint8_t *)buf));
    return push(vm, v);
}

static ckpt_status push_utf8(pk_vm *vm, const uint8_t *p, size_t n) {
    if (!utf8_valid(p, n)) return fail(vm, CKPT_E_FORMAT, "string is not valid UTF-8");
    return push_new(vm, mk_str(vm, p, n));
}

/* A Python-2 str: UTF-8 when it is, else Latin-1. */
static ckpt_status push_py2str(pk_vm *vm, const uint8_t *p, size_t n) {
    if (utf8_valid(p, n)) return push_new(vm, mk_str(vm, p, n));
    if (n > (SIZE_MAX - 1) / 2) return fail(vm, CKPT_E_LIMIT, "string too long");
    char *buf;
    pk_value *v = pkb_string_alloc(&vm->b, PK_STR, 2 * n, &buf);
    if (!v) return fail_build(vm);
    pkb_string_trim(v, pkt_latin1_to_utf8(p, n, (uint8_t *)buf));
    return push(vm, v);
}

typedef enum str_kind { STR_UTF8, STR_PY2, STR_BYTES } str_kind;

/* SHORT_BINUNICODE, BINBYTES, ...: a length prefix of `width` bytes, then the payload. */
static ckpt_status push_counted(pk_vm *vm, int width, bool is_signed, str_kind kind) {
    ckpt_status st = CKPT_OK;
    const uint8_t *p = take(vm, (uint64_t)width, &st);
    if (!p) return st;
    uint64_t n = pk_rd_le(p, width);
    if (is_signed && (n & 0x80000000u))
        return fail(vm, CKPT_E_FORMAT, "negative length %lld", (long long)(int32_t)(uint32_t)n);
    p = take(vm, n, &st);
    if (!p) return st;
    if (kind == STR_UTF8) return push_utf8(vm, p, (size_t)n);
    if (kind == STR_PY2) return push_py2str(vm, p, (size_t)n);
    return push_new(vm, pkb_string(&vm->b, PK_BYTES, p, (size_t)n));
}

/* ---------------------------------------------------------------- containers */

static pk_value *mk_tuple(pk_vm *vm, pk_value *const *items, size_t n) {
    if (!n) {
        if (!vm->empty_tuple) vm->empty_tuple = pkb_container(&vm->b, PK_TUPLE);
        return vm->empty_tuple;
    }
    if (n > INTERN_TUPLE_MAX) return pkb_seq(&vm->b, PK_TUPLE, items, n);
    uint64_t h = n;
    uint32_t depth = 0;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ (uintptr_t)items[i]) * 0x100000001b3ull;
        if (pkb_depth(items[i]) > depth) depth = pkb_depth(items[i]);
    }
    intern_slot *slot = intern_lookup(vm, vm->tuples, h);
    pk_value *t = slot->v;
    if (t && slot->key == h && t->u.seq.len == n) {
        size_t i = 0;
        while (i < n && t->u.seq.items[i] == items[i])
            i++;
        if (i == n) return pkb_nest(&vm->b, t, depth) ? t : NULL; /* items may have deepened */
    }
    t = pkb_seq(&vm->b, PK_TUPLE, items, n);
    if (t) *slot = (intern_slot){h, t};
    return t;
}

/* Replaces the top k items with a tuple of them. */
static ckpt_status tuple_top(pk_vm *vm, size_t k) {
    NEED_STACK(vm, k);
    pk_value *t = mk_tuple(vm, vm->stack + vm->sp - k, k);
    if (!t) return fail_build(vm);
    vm->sp -= k;
    vm->stack[vm->sp++] = t;
    return CKPT_OK;
}

/* The object's out-of-line parts, made on first use (NULL when out of memory). */
static pk_obj_extra *obj_extra(pk_vm *vm, pk_value *o) {
    if (!o->u.obj.extra) o->u.obj.extra = pkb_alloc(&vm->b, sizeof *o->u.obj.extra);
    return o->u.obj.extra;
}

/* ---------------------------------------------------------------- watch (pk_watch) */

static void revoke(pk_vm *vm) {
    const pk_watch *w = vm->watch;
    bool taken = vm->taken;
    vm->watch = NULL;
    vm->taken = false;
    if (w && taken) w->revoke(w->ctx);
}

void pkvm_revoke(pk_vm *vm) { revoke(vm); }

/* Called before `target` is changed.  Pairs once taken left the stack: the decoder can only
 * reach them again through a node pushed a second time (memo GET, DUP), which carries
 * PK_FLAG_ALIASED; changing such a node after a take revokes (also when it was not taken:
 * Python's pickler changes a node it fetched again only for a few recursive objects). */
static inline ckpt_status mutating(pk_vm *vm, const pk_value *target) {
    if (vm->taken && (target->flags & PK_FLAG_ALIASED)) revoke(vm);
    if (vm->sub) /* a handed batch changes only what it made itself */
        for (size_t i = 0; i < vm->nfetched; i++)
            if (vm->fetched[i] == target)
                return fail(vm, CKPT_E_UNSUPPORTED, "a handed-over batch changes a %s outside it",
                            pk_type_name(target->type));
    return CKPT_OK;
}

/* The pairs kv[0, n) (n values) are about to be added to dict, which sits at stack index
 * `at`: offers them to the watch, labelled with the string below dict in its MARK region. */
static void offer(pk_vm *vm, const pk_value *dict, size_t at, pk_value *const *kv, size_t n) {
    const pk_value *lab = at >= 1 && at - 1 >= vm->fence ? vm->stack[at - 1] : NULL;
    const char *label = lab && lab->type == PK_STR ? lab->u.str.ptr : NULL;
    if (vm->watch->take(vm->watch->ctx, label, dict, dict->u.dict.len, kv, n / 2)) vm->taken = true;
}

static ckpt_status append_items(pk_vm *vm, pk_value *target, pk_value *const *items, size_t n) {
    pk_builder *b = &vm->b;
    CK_TRY(mutating(vm, target));
    if (target->type == PK_LIST)
        return pkb_seq_extend(b, target, items, n) ? CKPT_OK : fail_build(vm);
    if (target->type != PK_OBJECT)
        return fail(vm, CKPT_E_FORMAT, "cannot append to %s", pk_type_name(target->type));
    if (!n) return CKPT_OK;
    pk_obj_extra *x = obj_extra(vm, target);
    if (!x || (!x->listitems && !(x->listitems = pkb_container(b, PK_LIST)))) return fail_build(vm);
    pk_value *li = x->listitems;
    if (!pkb_seq_extend(b, li, items, n) || !pkb_nest(b, target, pkb_depth(li)))
        return fail_build(vm);
    return CKPT_OK;
}

/* SETITEM(S): kv[0, n) into target, which sits at stack index `at`. */
static ckpt_status set_items(pk_vm *vm, pk_value *target, size_t at, pk_value *const *kv,
                             size_t n) {
    pk_builder *b = &vm->b;
    if (n % 2) return fail(vm, CKPT_E_FORMAT, "odd number of items for a dict");
    CK_TRY(mutating(vm, target));
    if (target->type == PK_DICT) {
        if (target == vm->split_dict) return n ? pkvm_hand_pairs(vm, target, at, kv, n) : CKPT_OK;
        if (vm->watch && n) offer(vm, target, at, kv, n);
        return pkb_dict_extend(b, target, kv, n / 2) ? CKPT_OK : fail_build(vm);
    }
    if (target->type != PK_OBJECT)
        return fail(vm, CKPT_E_FORMAT, "cannot set items on %s", pk_type_name(target->type));
    if (!n) return CKPT_OK;
    pk_obj_extra *x = obj_extra(vm, target);
    if (!x || (!x->dictitems && !(x->dictitems = pkb_container(b, PK_DICT)))) return fail_build(vm);
    pk_value *di = x->dictitems;
    if (!pkb_dict_extend(b, di, kv, n / 2) || !pkb_nest(b, target, pkb_depth(di)))
        return fail_build(vm);
    return CKPT_OK;
}

/* The target of APPENDS/SETITEMS/ADDITEMS: the item just below the popped mark. */
static ckpt_status mark_target(pk_vm *vm, size_t *start, pk_value **target) {
    CK_TRY(pop_mark(vm, start));
    if (*start <= vm->fence) return underflow(vm);
    *target = vm->stack[*start - 1];
    return CKPT_OK;
}

static pk_value *mk_object(pk_vm *vm, pk_value *cls, pk_value *args, pk_value *kwargs,
                           pk_obj_how how) {
    pk_value *o = pkb_container(&vm->b, PK_OBJECT);
    if (!o) return NULL;
    o->u.obj.cls = cls;
    o->u.obj.args = args;
    o->how = (uint8_t)how;
    if (kwargs) {
        pk_obj_extra *x = obj_extra(vm, o);
        if (!x) return NULL;
        x->kwargs = kwargs;
    }
    uint32_t d = pkb_depth(cls);
    if (pkb_depth(args) > d) d = pkb_depth(args);
    if (kwargs && pkb_depth(kwargs) > d) d = pkb_depth(kwargs);
    return pkb_nest(&vm->b, o, d) ? o : NULL;
}

/* A GLOBAL/INST module or name line: UTF-8 without NULs, copied into the arena. */
static ckpt_status global_part(pk_vm *vm, const char **out) {
    const uint8_t *s;
    size_t n;
    CK_TRY(take_line(vm, &s, &n));
    if (!utf8_valid(s, n) || memchr(s, '\0', n))
        return fail(vm, CKPT_E_FORMAT, "module or name is not a valid string");
    pk_value *str = pkb_string(&vm->b, PK_STR, s, n);
    if (!str) return fail_build(vm);
    *out = str->u.str.ptr;
    return CKPT_OK;
}

static pk_value *mk_global(pk_vm *vm, const char *module, const char *name) {
    pk_value *g = pkb_scalar(&vm->b, PK_GLOBAL);
    if (g) {
        g->u.global.module = module;
        g->u.global.name = name;
    }
    return g;
}

/* ---------------------------------------------------------------- opcodes */

static ckpt_status op_text_int(pk_vm *vm, bool is_long) {
    const uint8_t *s;
    size_t n;
    CK_TRY(take_line(vm, &s, &n));
    if (!is_long && n == 2 && s[0] == '0' && (s[1] == '0' || s[1] == '1'))
        return push_new(vm, s[1] == '1' ? mk_singleton(vm, &vm->yes, PK_BOOL, true)
                                        : mk_singleton(vm, &vm->no, PK_BOOL, false));
    if (is_long && n && s[n - 1] == 'L') n--;
    return push_decimal(vm, s, n);
}

static ckpt_status op_float(pk_vm *vm) {
    const uint8_t *s;
    size_t n;
    double d;
    CK_TRY(take_line(vm, &s, &n));
    if (!pkt_parse_float(s, n, &d)) return fail(vm, CKPT_E_FORMAT, "invalid float literal");
    pk_value *v = pkb_scalar(&vm->b, PK_FLOAT);
    if (v) v->u.f = d;
    return push_new(vm, v);
}

static ckpt_status op_binfloat(pk_vm *vm) {
    ckpt_status st = CKPT_OK;
    const uint8_t *p = take(vm, 8, &st);
    if (!p) return st;
    uint64_t bits = 0;
    for (int i = 0; i < 8; i++)
        bits = (bits << 8) | p[i]; /* big-endian */
    pk_value *v = pkb_scalar(&vm->b, PK_FLOAT);
    if (v) memcpy(&v->u.f, &bits, sizeof bits);
    return push_new(vm, v);
}

static ckpt_status op_string(pk_vm *vm) {
    const uint8_t *s;
    size_t n, len;
    const char *why = NULL;
    CK_TRY(take_line(vm, &s, &n));
    if (n < 2 || s[0] != s[n - 1] || (s[0] != '\'' && s[0] != '"'))
        return fail(vm, CKPT_E_FORMAT, "STRING argument is not quoted");
    s++;
    n -= 2;
    char *buf;
    pk_value *v = pkb_string_alloc(&vm->b, PK_STR, n, &buf);
    if (!v) return fail_build(vm);
    if (!pkt_escape_decode(s, n, (uint8_t *)buf, &len, &why))
        return fail(vm, CKPT_E_FORMAT, "%s", why);
    if (utf8_valid((const uint8_t *)buf, len)) {
        pkb_string_trim(v, len);
        return push(vm, v);
    }
    return push_py2str(vm, (const uint8_t *)buf, len); /* v is left unused */
}

static ckpt_status op_unicode(pk_vm *vm) {
    const uint8_t *s;
    size_t n, len;
    const char *why = NULL;
    CK_TRY(take_line(vm, &s, &n));
    if (n > (SIZE_MAX - 1) / 2) return fail(vm, CKPT_E_LIMIT, "string too long");
    char *buf;
    pk_value *v = pkb_string_alloc(&vm->b, PK_STR, 2 * n, &buf);
    if (!v) return fail_build(vm);
    if (!pkt_raw_unicode_escape(s, n, (uint8_t *)buf, &len, &why))
        return fail(vm, CKPT_E_FORMAT, "%s", why);
    pkb_string_trim(v, len);
    return push(vm, v);
}

static ckpt_status op_persid(pk_vm *vm) {
    const uint8_t *s;
    size_t n;
    CK_TRY(take_line(vm, &s, &n));
    for (size_t i = 0; i < n; i++)
        if (s[i] & 0x80) return fail(vm, CKPT_E_FORMAT, "persistent id is not ASCII");
    pk_value *pid = pkb_string(&vm->b, PK_STR, s, n);
    pk_value *v = pid ? pkb_container(&vm->b, PK_PERSID) : NULL;
    if (v) v->u.persid.pid = pid;
    return push_new(vm, v);
}

static ckpt_status op_binpersid(pk_vm *vm) {
    NEED_STACK(vm, 1);
    pk_value *pid = vm->stack[vm->sp - 1];
    pk_value *v = pkb_container(&vm->b, PK_PERSID);
    if (!v) return fail_build(vm);
    v->u.persid.pid = pid;
    if (!pkb_nest(&vm->b, v, pkb_depth(pid))) return fail_build(vm);
    vm->stack[vm->sp - 1] = v;
    return CKPT_OK;
}

static ckpt_status op_memo_text(pk_vm *vm, bool put) {
    const uint8_t *s;
    size_t n;
    int64_t idx;
    CK_TRY(take_line(vm, &s, &n));
    pkt_num r = pkt_parse_i64(s, n, &idx);
    if (r == PKT_SYNTAX || (r == PKT_OK && idx < 0))
        return fail(vm, CKPT_E_FORMAT, "invalid memo index");
    if (r == PKT_OVERFLOW) {
        if (put) return fail(vm, CKPT_E_LIMIT, "memo index too large");
        return fail(vm, CKPT_E_FORMAT, "memo key not found");
    }
    return put ? memo_store(vm, (uint64_t)idx) : memo_push(vm, (uint64_t)idx);
}

static ckpt_status op_memo_bin(pk_vm *vm, int width, bool put) {
    ckpt_status st = CKPT_OK;
    const uint8_t *p = take(vm, (uint64_t)width, &st);
    if (!p) return st;
    uint64_t idx = pk_rd_le(p, width);
    return put ? memo_store(vm, idx) : memo_push(vm, idx);
}

static ckpt_status op_long_bin(pk_vm *vm, int width) {
    ckpt_status st = CKPT_OK;
    const uint8_t *p = take(vm, (uint64_t)width, &st);
    if (!p) return st;
    uint64_t n = pk_rd_le(p, width);
    if (width == 4 && (n & 0x80000000u))
        return fail(vm, CKPT_E_FORMAT, "negative LONG4 byte count");
    p = take(vm, n, &st);
    if (!p) return st;
    return push_new(vm, mk_long(vm, p, (size_t)n));
}

static ckpt_status op_global(pk_vm *vm) {
    const char *module = NULL, *name = NULL; /* (set by global_part; for -O3) */
    CK_TRY(global_part(vm, &module));
    CK_TRY(global_part(vm, &name));
    return push_new(vm, mk_global(vm, module, name));
}

static bool is_plain_str(const pk_value *v) {
    return v->type == PK_STR && !memchr(v->u.str.ptr, '\0', v->u.str.len);
}

static ckpt_status op_stack_global(pk_vm *vm) {
    NEED_STACK(vm, 2);
    pk_value *module = vm->stack[vm->sp - 2], *name = vm->stack[vm->sp - 1];
    if (!is_plain_str(module) || !is_plain_str(name))
        return fail(vm, CKPT_E_FORMAT, "STACK_GLOBAL needs two strings, got %s and %s",
                    pk_type_name(module->type), pk_type_name(name->type));
    pk_value *g = mk_global(vm, module->u.str.ptr, name->u.str.ptr);
    if (!g) return fail_build(vm);
    vm->sp -= 2;
    vm->stack[vm->sp++] = g;
    return CKPT_OK;
}

/* The tuple of ints that REDUCE of torch.Size on `args` gives, or NULL when it is not that
 * call: `torch.Size((i, ...))` is a tuple of ints (pickled by `Size.__reduce__` as exactly
 * this), so the tuple stands for it and no object node is made (a 1 M-chunk `.metadata`
 * holds ~3 M of them). */
static pk_value *torch_size_dims(pk_vm *vm, const pk_value *cls, const pk_value *args) {
    if (cls->type != PK_GLOBAL || args->u.seq.len != 1) return NULL;
    pk_value *dims = args->u.seq.items[0];
    if (dims->type != PK_TUPLE) return NULL;
    if (cls != vm->torch_size) { /* the class is usually one memoized node */
        if (strcmp(cls->u.global.name, "Size") != 0 || strcmp(cls->u.global.module, "torch") != 0)
            return NULL;
        vm->torch_size = cls;
    }
    for (size_t i = 0; i < dims->u.seq.len; i++)
        if (dims->u.seq.items[i]->type != PK_INT) return NULL;
    return dims;
}

/* REDUCE, NEWOBJ: cls args -> object. */
static ckpt_status op_call(pk_vm *vm, pk_obj_how how) {
    NEED_STACK(vm, 2);
    pk_value *cls = vm->stack[vm->sp - 2], *args = vm->stack[vm->sp - 1];
    if (args->type != PK_TUPLE)
        return fail(vm, CKPT_E_FORMAT, "arguments are %s, not tuple", pk_type_name(args->type));
    pk_value *o = how == PK_HOW_REDUCE ? torch_size_dims(vm, cls, args) : NULL;
    if (o) {
        vm->sp -= 2;
        vm->stack[vm->sp++] = o;
        return CKPT_OK;
    }
    o = mk_object(vm, cls, args, NULL, how);
    if (!o) return fail_build(vm);
    vm->sp -= 2;
    vm->stack[vm->sp++] = o;
    return CKPT_OK;
}

static ckpt_status op_newobj_ex(pk_vm *vm) {
    NEED_STACK(vm, 3);
    pk_value *cls = vm->stack[vm->sp - 3], *args = vm->stack[vm->sp - 2],
             *kwargs = vm->stack[vm->sp - 1];
    if (args->type != PK_TUPLE || kwargs->type != PK_DICT)
        return fail(vm, CKPT_E_FORMAT, "NEWOBJ_EX needs a tuple and a dict, got %s and %s",
                    pk_type_name(args->type), pk_type_name(kwargs->type));
    pk_value *o = mk_object(vm, cls, args, kwargs, PK_HOW_NEWOBJ_EX);
    if (!o) return fail_build(vm);
    vm->sp -= 3;
    vm->stack[vm->sp++] = o;
    return CKPT_OK;
}

static ckpt_status op_build(pk_vm *vm) {
    NEED_STACK(vm, 2);
    pk_value *inst = vm->stack[vm->sp - 2], *state = vm->stack[vm->sp - 1];
    if (inst->type != PK_OBJECT)
        return fail(vm, CKPT_E_FORMAT, "BUILD on %s", pk_type_name(inst->type));
    CK_TRY(mutating(vm, inst));
    inst->u.obj.state = state; /* a second BUILD replaces the state */
    if (!pkb_nest(&vm->b, inst, pkb_depth(state))) return fail_build(vm);
    vm->sp--;
    return CKPT_OK;
}

/* INST (module/name in the stream) and OBJ (class is the first marked item). */
static ckpt_status op_inst(pk_vm *vm, bool obj) {
    const char *module = NULL, *name = NULL;
    if (!obj) {
        CK_TRY(global_part(vm, &module));
        CK_TRY(global_part(vm, &name));
    }
    size_t start = 0; /* set by pop_mark; initialised for -O3 -Wmaybe-uninitialized */
    CK_TRY(pop_mark(vm, &start));
    pk_value *cls;
    if (obj) {
        if (vm->sp == start) return fail(vm, CKPT_E_FORMAT, "OBJ without a class");
        cls = vm->stack[start++];
    } else if (!(cls = mk_global(vm, module, name))) {
        return fail_build(vm);
    }
    pk_value *args = mk_tuple(vm, vm->stack + start, vm->sp - start);
    pk_value *o = args ? mk_object(vm, cls, args, NULL, PK_HOW_REDUCE) : NULL;
    if (!o) return fail_build(vm);
    vm->sp = obj ? start - 1 : start;
    return push(vm, o);
}

/* TUPLE, LIST, DICT, FROZENSET: the marked items become a new container. */
static ckpt_status op_collect(pk_vm *vm, pk_type t) {
    size_t start = 0; /* set by pop_mark; initialised for -O3 -Wmaybe-uninitialized */
    CK_TRY(pop_mark(vm, &start));
    size_t n = vm->sp - start;
    pk_value *v;
    if (t == PK_TUPLE) {
        v = mk_tuple(vm, vm->stack + start, n);
    } else if (t == PK_DICT) {
        if (n % 2) return fail(vm, CKPT_E_FORMAT, "odd number of items for a dict");
        v = pkb_container(&vm->b, PK_DICT);
        if (v && !pkb_dict_extend(&vm->b, v, vm->stack + start, n / 2)) v = NULL;
    } else {
        v = pkb_seq(&vm->b, t, vm->stack + start, n);
    }
    if (!v) return fail_build(vm);
    vm->sp = start;
    return push(vm, v);
}

/* APPENDS, SETITEMS, ADDITEMS. */
static ckpt_status op_extend(pk_vm *vm, unsigned op) {
    size_t start = 0; /* set by pop_mark; initialised for -O3 -Wmaybe-uninitialized */
    pk_value *target = NULL;
    CK_TRY(mark_target(vm, &start, &target));
    pk_value *const *items = vm->stack + start;
    size_t n = vm->sp - start;
    ckpt_status st;
    if (op == PK_OP_APPENDS) {
        st = append_items(vm, target, items, n);
    } else if (op == PK_OP_SETITEMS) {
        st = set_items(vm, target, start - 1, items, n);
    } else if (target->type != PK_SET) {
        st = fail(vm, CKPT_E_FORMAT, "cannot add items to %s", pk_type_name(target->type));
    } else {
        st = mutating(vm, target);
        if (st == CKPT_OK) st = pkb_seq_extend(&vm->b, target, items, n) ? CKPT_OK : fail_build(vm);
    }
    vm->sp = start;
    return st;
}

static ckpt_status op_pop(pk_vm *vm) {
    if (vm->nmarks && vm->marks[vm->nmarks - 1] == vm->sp) {
        size_t start = 0; /* set by pop_mark; initialised for -O3 -Wmaybe-uninitialized */
        return pop_mark(vm, &start);
    }
    NEED_STACK(vm, 1);
    vm->sp--;
    return CKPT_OK;
}

static ckpt_status op_frame(pk_vm *vm) {
    ckpt_status st = CKPT_OK;
    const uint8_t *p = take(vm, 8, &st);
    if (!p) return st;
    uint64_t n = pk_rd_le(p, 8);
    /* (a handed batch holds part of a frame: the decoding thread's scan checked it) */
    if (!vm->sub && n > vm->total - vm->base - vm->pos) return truncated(vm, n);
    return CKPT_OK; /* frames are a buffering hint: the payload is parsed in place */
}

static ckpt_status op_proto(pk_vm *vm) {
    ckpt_status st = CKPT_OK;
    const uint8_t *p = take(vm, 1, &st);
    if (!p) return st;
    if (*p > 5) return fail(vm, CKPT_E_UNSUPPORTED, "unsupported pickle protocol %u", *p);
    return CKPT_OK;
}

/* Whether the MARK just pushed may open a batch into a labelled dict: the cheap part of
 * pkvm_maybe_split's test, inline here because most MARKs open an object's state dict, below
 * which lies the object, not a label. */
static inline bool split_candidate(const pk_vm *vm) {
    return vm->watch && vm->can_split && vm->sp >= 2 && vm->stack[vm->sp - 1]->type == PK_DICT &&
           vm->stack[vm->sp - 2]->type == PK_STR;
}

static inline __attribute__((always_inline)) ckpt_status step(pk_vm *vm) {
    pk_builder *b = &vm->b;
    switch (vm->op) {
    case PK_OP_PROTO: return op_proto(vm);
    case PK_OP_FRAME: return op_frame(vm);
    case PK_OP_MARK:
        CK_TRY(push_mark(vm));
        return split_candidate(vm) ? pkvm_maybe_split(vm) : CKPT_OK;
    case PK_OP_POP: return op_pop(vm);
    case PK_OP_POP_MARK: {
        size_t start = 0; /* set by pop_mark; initialised for -O3 -Wmaybe-uninitialized */
        CK_TRY(pop_mark(vm, &start));
        vm->sp = start;
        return CKPT_OK;
    }
    case PK_OP_DUP: NEED_STACK(vm, 1); return push_again(vm, vm->stack[vm->sp - 1]);

    case PK_OP_NONE: return push_new(vm, mk_singleton(vm, &vm->none, PK_NONE, false));
    case PK_OP_NEWTRUE: return push_new(vm, mk_singleton(vm, &vm->yes, PK_BOOL, true));
    case PK_OP_NEWFALSE: return push_new(vm, mk_singleton(vm, &vm->no, PK_BOOL, false));
    case PK_OP_INT: return op_text_int(vm, false);
    case PK_OP_LONG: return op_text_int(vm, true);
    case PK_OP_BININT:
    case PK_OP_BININT1:
    case PK_OP_BININT2: {
        int width = vm->op == PK_OP_BININT ? 4 : vm->op == PK_OP_BININT1 ? 1 : 2;
        ckpt_status st = CKPT_OK;
        const uint8_t *p = take(vm, (uint64_t)width, &st);
        if (!p) return st;
        uint64_t u = pk_rd_le(p, width);
        int64_t x = width == 4 ? (int64_t)(int32_t)(uint32_t)u : (int64_t)u;
        return push_new(vm, mk_int(vm, x));
    }
    case PK_OP_LONG1: return op_long_bin(vm, 1);
    case PK_OP_LONG4: return op_long_bin(vm, 4);
    case PK_OP_FLOAT: return op_float(vm);
    case PK_OP_BINFLOAT: return op_binfloat(vm);

    case PK_OP_STRING: return op_string(vm);
    case PK_OP_BINSTRING: return push_counted(vm, 4, true, STR_PY2);
    case PK_OP_SHORT_BINSTRING: return push_counted(vm, 1, false, STR_PY2);
    case PK_OP_UNICODE: return op_unicode(vm);
    case PK_OP_SHORT_BINUNICODE: return push_counted(vm, 1, false, STR_UTF8);
    case PK_OP_BINUNICODE: return push_counted(vm, 4, false, STR_UTF8);
    case PK_OP_BINUNICODE8: return push_counted(vm, 8, false, STR_UTF8);
    case PK_OP_SHORT_BINBYTES: return push_counted(vm, 1, false, STR_BYTES);
    case PK_OP_BINBYTES: return push_counted(vm, 4, false, STR_BYTES);
    case PK_OP_BINBYTES8:
    case PK_OP_BYTEARRAY8: return push_counted(vm, 8, false, STR_BYTES);

    case PK_OP_EMPTY_TUPLE: return push_new(vm, mk_tuple(vm, NULL, 0));
    case PK_OP_TUPLE1: return tuple_top(vm, 1);
    case PK_OP_TUPLE2: return tuple_top(vm, 2);
    case PK_OP_TUPLE3: return tuple_top(vm, 3);
    case PK_OP_TUPLE: return op_collect(vm, PK_TUPLE);
    case PK_OP_EMPTY_LIST: return push_new(vm, pkb_container(b, PK_LIST));
    case PK_OP_LIST: return op_collect(vm, PK_LIST);
    case PK_OP_EMPTY_DICT: return push_new(vm, pkb_container(b, PK_DICT));
    case PK_OP_DICT: return op_collect(vm, PK_DICT);
    case PK_OP_EMPTY_SET: return push_new(vm, pkb_container(b, PK_SET));
    case PK_OP_FROZENSET: return op_collect(vm, PK_FROZENSET);
    case PK_OP_APPEND: {
        NEED_STACK(vm, 2);
        ckpt_status st = append_items(vm, vm->stack[vm->sp - 2], vm->stack + vm->sp - 1, 1);
        vm->sp--;
        return st;
    }
    case PK_OP_SETITEM: {
        NEED_STACK(vm, 3);
        ckpt_status st =
            set_items(vm, vm->stack[vm->sp - 3], vm->sp - 3, vm->stack + vm->sp - 2, 2);
        vm->sp -= 2;
        return st;
    }
    case PK_OP_APPENDS:
    case PK_OP_SETITEMS:
    case PK_OP_ADDITEMS: return op_extend(vm, vm->op);

    case PK_OP_GLOBAL: return op_global(vm);
    case PK_OP_STACK_GLOBAL: return op_stack_global(vm);
    case PK_OP_REDUCE: return op_call(vm, PK_HOW_REDUCE);
    case PK_OP_NEWOBJ: return op_call(vm, PK_HOW_NEWOBJ);
    case PK_OP_NEWOBJ_EX: return op_newobj_ex(vm);
    case PK_OP_BUILD: return op_build(vm);
    case PK_OP_INST: return op_inst(vm, false);
    case PK_OP_OBJ: return op_inst(vm, true);
    case PK_OP_PERSID: return op_persid(vm);
    case PK_OP_BINPERSID: return op_binpersid(vm);

    case PK_OP_GET: return op_memo_text(vm, false);
    case PK_OP_BINGET: return op_memo_bin(vm, 1, false);
    case PK_OP_LONG_BINGET: return op_memo_bin(vm, 4, false);
    case PK_OP_PUT: return op_memo_text(vm, true);
    case PK_OP_BINPUT: return op_memo_bin(vm, 1, true);
    case PK_OP_LONG_BINPUT: return op_memo_bin(vm, 4, true);
    case PK_OP_MEMOIZE: return memo_store(vm, vm->memo_count);

    case PK_OP_EXT1:
    case PK_OP_EXT2:
    case PK_OP_EXT4:
        return fail(vm, CKPT_E_UNSUPPORTED, "extension registry codes are not supported");
    case PK_OP_NEXT_BUFFER:
    case PK_OP_READONLY_BUFFER:
        return fail(vm, CKPT_E_UNSUPPORTED, "out-of-band buffers are not supported");
    }
    return ck_fail(vm->err, CKPT_E_FORMAT, "pickle offset %zu: unknown opcode 0x%02x", vm->op_off,
                   vm->op);
}

/* Executes vm->op, and a MEMOIZE right after it.  Protocol 4 memoizes nearly every value right
 * after building it: a plain branch here costs less than another trip through the opcode
 * switch.  (Inlined into both loops, the decoder's and a handed batch's: called, the switch
 * cost a third more per opcode.) */
static inline __attribute__((always_inline)) ckpt_status step_memoize(pk_vm *vm) {
    CK_TRY(step(vm));
    if (vm->pos < vm->len && vm->buf[vm->pos] == PK_OP_MEMOIZE) {
        vm->op_off = vm->base + vm->pos++;
        vm->op = PK_OP_MEMOIZE;
        CK_TRY(memo_store(vm, vm->memo_count));
    }
    return CKPT_OK;
}

/* (pickle_vm_i.h) */
ckpt_status pkvm_decode_batch(pk_vm *vm, pk_batch *bt) {
    ckpt_error err;
    vm->err = &err;
    vm->buf = bt->buf->bytes;
    vm->len = bt->nbytes;
    vm->pos = 0;
    vm->base = (size_t)bt->offset;
    vm->total = (size_t)bt->offset + bt->nbytes;
    vm->sp = 0;
    if (vm->mcap < bt->nmarks) {
        void *arr = vm->marks;
        CK_TRY(grow_aux(vm, "mark stack", &arr, &vm->mcap, bt->nmarks, sizeof *vm->marks, 16,
                        vm->b.max_depth));
        vm->marks = arr;
    }
    for (size_t i = 0; i < bt->nmarks; i++)
        vm->marks[i] = 0; /* the batch's own mark fences an empty stack */
    vm->nmarks = bt->nmarks;
    vm->fence = 0;
    vm->memo_lo = vm->memo_count = vm->memo_end = bt->memo_lo;
    vm->batch = bt;
    vm->nfetched = 0;
    vm->max_memo = bt->memo_hi;
    while (vm->pos < vm->len) {
        vm->op_off = vm->base + vm->pos;
        vm->op = vm->buf[vm->pos++];
        if (vm->op == PK_OP_STOP) return fail(vm, CKPT_E_FORMAT, "STOP in a batch");
        CK_TRY(step_memoize(vm));
    }
    if (vm->sp != 2 * bt->npairs || vm->memo_count != bt->memo_hi || vm->nmarks != bt->nmarks)
        return fail(vm, CKPT_E_FORMAT, "batch did not decode as scanned");
    pk_value **kv = pkb_alloc(&vm->b, (vm->sp ? vm->sp : 1) * sizeof *kv);
    if (!kv) return fail_build(vm);
    memcpy(kv, vm->stack, vm->sp * sizeof *kv);
    bt->kv = kv;
    return CKPT_OK;
}

static ckpt_status run(pk_vm *vm) {
    /* The stack always exists, so `stack + sp` is never arithmetic on NULL. */
    void *arr = NULL;
    CK_TRY(grow_aux(vm, "stack", &arr, &vm->scap, 1, sizeof *vm->stack, 16, vm->b.max_items));
    vm->stack = arr;
    for (;;) {
        if (vm->pos >= vm->len && !more(vm, 1)) {
            if (vm->win_nomem) return ck_fail(vm->err, CKPT_E_NOMEM, "pickle: out of memory");
            return ck_fail(vm->err, CKPT_E_FORMAT,
                           "pickle offset %zu: truncated: input ends before STOP",
                           vm->base + vm->pos);
        }
        vm->op_off = vm->base + vm->pos;
        vm->op = vm->buf[vm->pos++];
        /* the split dict is reachable unless a MARK above it fences it: only the MARK of its
         * next batch may come before its batches are all added */
        if (vm->split_dict &&
            ((vm->fence <= vm->split_at && vm->op != PK_OP_MARK) || vm->op == PK_OP_STOP))
            CK_TRY(pkvm_split_sync(vm));
        if (vm->op == PK_OP_STOP) {
            NEED_STACK(vm, 1);
            vm->result = vm->stack[--vm->sp];
            return CKPT_OK;
        }
        CK_TRY(step_memoize(vm));
    }
}

ckpt_status pk_decode(const uint8_t *buf, size_t len, const pk_limits *limits, pk_doc **out,
                      ckpt_error *err) {
    pk_input in = {.buf = buf, .len = len};
    return pk_decode_input(&in, limits, out, err);
}

ckpt_status pk_decode_input(const pk_input *in, const pk_limits *limits, pk_doc **out,
                            ckpt_error *err) {
    return pk_decode_watched(in, limits, NULL, out, err);
}

ckpt_status pk_decode_watched(const pk_input *in, const pk_limits *limits, const pk_watch *watch,
                              pk_doc **out, ckpt_error *err) {
    if (out) *out = NULL;
    if (!out || !in || (!in->buf && !in->read && in->len))
        return ck_fail(err, CKPT_E_INVAL, "pk_decode: bad argument");
    size_t len = in->len;
    pk_limits lim = limits ? *limits : (pk_limits){0};
    if (!lim.max_bytes) lim.max_bytes = DEFAULT_MAX_BYTES;
    if (!lim.max_items) lim.max_items = DEFAULT_MAX_ITEMS;
    if (!lim.max_depth) lim.max_depth = DEFAULT_MAX_DEPTH;
    if (!lim.max_memo) lim.max_memo = DEFAULT_MAX_MEMO;

    pk_doc *doc = calloc(1, sizeof *doc);
    pk_vm *vm = calloc(1, sizeof *vm);
    if (doc) doc->arena = ck_arena_new(lim.max_bytes);
    if (!doc || !vm || !doc->arena) {
        pk_doc_free(doc);
        free(vm);
        return ck_fail(err, CKPT_E_NOMEM, "pickle: out of memory");
    }
    vm->total = len;
    if (in->read) {
        vm->read = in->read;
        vm->read_ctx = in->ctx;
        vm->cap = in->window ? in->window : PK_WINDOW_DEFAULT;
        if (vm->cap > len) vm->cap = len ? len : 1;
        vm->win = malloc(vm->cap);
        vm->buf = vm->win;
    } else {
        vm->buf = in->buf;
        vm->len = len;
    }
    vm->err = err;
    vm->watch = watch && watch->take && watch->revoke ? watch : NULL;
    vm->can_split = vm->watch && watch->split && watch->hand;
    vm->b.arena = doc->arena;
    ck_arena_map_ahead(doc->arena); /* a big pickle fills a lot of it */
    vm->b.max_items = lim.max_items;
    vm->b.max_bytes = lim.max_bytes;
    vm->b.max_depth = lim.max_depth;
    vm->max_memo = lim.max_memo;
    vm->intern_bits = INTERN_BITS_MIN;
    while (vm->intern_bits < INTERN_BITS_MAX && ((size_t)1 << (vm->intern_bits + 8)) < len)
        vm->intern_bits++;
    vm->b.keys_bits = vm->intern_bits - 2;
    vm->ints = calloc((size_t)3 << vm->intern_bits, sizeof *vm->ints);
    vm->b.keys_cache = calloc((size_t)1 << vm->b.keys_bits, sizeof *vm->b.keys_cache);
    if (!vm->ints || !vm->b.keys_cache || (in->read && !vm->win)) {
        free(vm->win);
        free(vm->ints);
        free(vm->b.keys_cache);
        pk_doc_free(doc);
        free(vm);
        return ck_fail(err, CKPT_E_NOMEM, "pickle: out of memory");
    }
    vm->strs = vm->ints + ((size_t)1 << vm->intern_bits);
    vm->tuples = vm->strs + ((size_t)1 << vm->intern_bits);

    vm->memo_guard = UINT64_MAX;

    ckpt_status st = run(vm);
    if (st != CKPT_OK) revoke(vm); /* the consumer stops before the document goes */
    bool again = pkvm_split_wait_all(vm, st);
    ck_arena_settle(doc->arena);
    pkvm_split_free(vm, again ? NULL : doc->arena, lim.max_bytes);
    doc->root = vm->result;
    free(vm->stack);
    free(vm->marks);
    free(vm->memo_dir);
    ck_arena_free(vm->memo_arena);
    free(vm->ints);
    free(vm->b.keys_cache);
    free(vm->hkeys);
    free(vm->hvals);
    free(vm->win);
    free(vm);
    if (st != CKPT_OK || again) {
        pk_doc_free(doc);
        /* handed batches made the result depend on the split: the plain decoder decides */
        if (again) return pk_decode_watched(in, limits, NULL, out, err);
        return st;
    }
    *out = doc;
    return CKPT_OK;
}
