/* arena.c — bump allocator with a byte budget (see arena.h).  Blocks come straight from
 * mmap: they are already zero (so allocations need no memset) and freeing is one munmap per
 * block; no block is larger than what the budget leaves.  Faulting the memory in and giving
 * it back are most of the cost of a big arena, so big blocks are populated when mapped
 * (MAP_POPULATE; under a budget, only those it leaves room to fill), optionally one block
 * ahead on a helper thread, and big arenas are unmapped on a detached thread.  (Transparent
 * huge pages were tried for the big metadata arenas: on the 2-vCPU VMs here they tripled the
 * system time of faulting the memory in.) */
#include "util/arena.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define ARENA_BLOCK_MIN (64u * 1024u)
#define ARENA_BLOCK_MAX (64u * 1024u * 1024u)
/* With ck_arena_map_ahead, blocks of this size and up are mapped one ahead. */
#define ARENA_AHEAD_MIN (4u * 1024u * 1024u)
/* Arenas that mapped this much are unmapped by a detached thread. */
#define ARENA_ASYNC_FREE_MIN (64u * 1024u * 1024u)

typedef struct arena_block {
    struct arena_block *next;
    size_t size; /* mapping size, header included */
    size_t used; /* bytes used after the header */
} arena_block;

/* Allocations are 8-byte aligned: enough for every type kept in arenas (pointers, 64-bit
 * integers, doubles), and small values (a 40-byte dict node, a one-item array) waste less
 * than with 16. */
#define ARENA_ALIGN 8u
#define HEADER_SIZE ((sizeof(arena_block) + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1))

struct ck_arena {
    arena_block *head;
    uint64_t budget;
    uint64_t used;
    size_t next_block; /* size of the next block to map */
    size_t max_block;  /* blocks grow up to this size */
    int over_budget;
    uint64_t mapped; /* bytes of the blocks in the list */
    /* Mapping ahead: the helper maps a block of ahead_size into `ahead` (the only field it
     * writes); pthread_join hands it over. */
    bool map_ahead;
    bool helper_running;
    pthread_t helper;
    size_t ahead_size;
    bool ahead_populate;
    arena_block *ahead; /* mapped ahead and not used yet, or NULL */
};

ck_arena *ck_arena_new(uint64_t budget) {
    ck_arena *a = calloc(1, sizeof *a);
    if (a) {
        a->budget = budget;
        a->next_block = ARENA_BLOCK_MIN;
        a->max_block = ARENA_BLOCK_MAX;
    }
    return a;
}

static void join_helper(ck_arena *a) {
    if (a->helper_running) pthread_join(a->helper, NULL);
    a->helper_running = false;
}

static void unmap_blocks(arena_block *b) {
    while (b) {
        arena_block *next = b->next;
        munmap(b, b->size);
        b = next;
    }
}

static void *unmap_thread(void *blocks) {
    unmap_blocks(blocks);
    return NULL;
}

/* Hands the blocks to a detached thread to unmap; false if none could be started. */
static bool unmap_async(arena_block *blocks) {
    pthread_attr_t attr;
    pthread_t t;
    if (pthread_attr_init(&attr) != 0) return false;
    bool ok = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
              pthread_create(&t, &attr, unmap_thread, blocks) == 0;
    pthread_attr_destroy(&attr);
    return ok;
}

void ck_arena_free(ck_arena *a) {
    if (!a) return;
    ck_arena_settle(a);
    if (!(a->mapped >= ARENA_ASYNC_FREE_MIN && unmap_async(a->head))) unmap_blocks(a->head);
    free(a);
}

void ck_arena_map_ahead(ck_arena *a) { a->map_ahead = true; }

void ck_arena_max_block(ck_arena *a, size_t bytes) {
    a->max_block = bytes < ARENA_BLOCK_MIN ? ARENA_BLOCK_MIN : bytes;
}

void ck_arena_settle(ck_arena *a) {
    join_helper(a);
    if (a->ahead) munmap(a->ahead, a->ahead->size);
    a->ahead = NULL;
    a->map_ahead = false;
}

/* Big blocks are filled soon: populating them in one go is cheaper than page faults.  Under a
 * budget, only a block of at most half what the budget leaves is populated, so that the
 * resident memory of an arena its budget stops stays close to what it handed out (a block it
 * could not fill is faulted in only as far as it is used: a value decoded within a budget
 * costs the budget, not the doubled blocks around it). */
static bool populate_block(const ck_arena *a, size_t size) {
    return size >= (1u << 20) &&
           (!a->budget || (a->used <= a->budget && size <= (a->budget - a->used) / 2));
}

static arena_block *map_block(size_t size, bool populate_it) {
    int populate = populate_it ? MAP_POPULATE : 0;
    void *p =
        mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | populate, -1, 0);
    if (p == MAP_FAILED) return NULL;
    arena_block *b = p;
    b->size = size;
    b->used = 0;
    return b;
}

static void *map_ahead(void *arg) {
    ck_arena *a = arg;
    a->ahead = map_block(a->ahead_size, a->ahead_populate);
    return NULL;
}

/* A new block of `size` bytes, or the one mapped ahead if that holds `need` bytes. */
static arena_block *new_block(ck_arena *a, size_t size, size_t need) {
    join_helper(a);
    if (a->ahead && a->ahead->size >= need) {
        arena_block *b = a->ahead;
        a->ahead = NULL;
        return b;
    }
    return map_block(size, populate_block(a, size)); /* (a block ahead too small waits) */
}

/* Starts mapping the block the next regular request will want, unless it is small, already
 * there, or could not be used within the budget. */
static void start_ahead(ck_arena *a) {
    size_t size = a->next_block;
    if (!a->map_ahead || size < ARENA_AHEAD_MIN || a->ahead ||
        (a->budget && a->used + size > a->budget))
        return;
    a->ahead_size = size;
    a->ahead_populate = populate_block(a, size);
    a->helper_running = pthread_create(&a->helper, NULL, map_ahead, a) == 0;
}

void *ck_arena_alloc(ck_arena *a, size_t size) {
    size_t rounded = (size + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    if (rounded < size || rounded > SIZE_MAX / 2) return NULL;
    if (a->budget && (rounded > a->budget || a->used > a->budget - rounded)) {
        a->over_budget = 1;
        return NULL;
    }
    arena_block *b = a->head;
    if (!b || b->size - HEADER_SIZE - b->used < rounded) {
        size_t want = a->next_block;
        if (want < a->max_block) a->next_block = want * 2;
        if (a->budget && want - HEADER_SIZE > a->budget - a->used) /* no more than it may use */
            want = (size_t)(a->budget - a->used);
        if (want < rounded + HEADER_SIZE) /* an oversized request gets its own block */
            want = (rounded + HEADER_SIZE + 4095u) & ~(size_t)4095u;
        arena_block *nb = new_block(a, want, rounded + HEADER_SIZE);
        if (!nb) return NULL;
        a->mapped += nb->size;
        if (b && b->size - HEADER_SIZE - b->used >= nb->size - HEADER_SIZE - rounded) {
            /* keep filling the current block; the new one goes behind it */
            nb->next = b->next;
            b->next = nb;
            b = nb;
        } else {
            nb->next = b;
            a->head = nb;
            b = nb;
        }
        start_ahead(a);
    }
    void *p = (unsigned char *)b + HEADER_SIZE + b->used;
    b->used += rounded;
    a->used += rounded;
    return p; /* fresh anonymous memory, never reused: already zero */
}

char *ck_arena_strndup(ck_arena *a, const char *s, size_t len) {
    if (len == SIZE_MAX) return NULL;
    char *p = ck_arena_alloc(a, len + 1);
    if (!p) return NULL;
    if (len) memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

void *ck_arena_grow(ck_arena *a, void *old, size_t old_size, size_t new_size) {
    void *p = ck_arena_alloc(a, new_size);
    if (p && old && old_size) memcpy(p, old, old_size < new_size ? old_size : new_size);
    return p;
}

void ck_arena_adopt(ck_arena *dst, ck_arena *src) {
    if (!src) return;
    ck_arena_settle(src);
    arena_block *last = src->head;
    while (last && last->next)
        last = last->next;
    if (last) {
        /* behind dst's current block, which keeps filling */
        if (dst->head) {
            last->next = dst->head->next;
            dst->head->next = src->head;
        } else {
            dst->head = src->head;
        }
    }
    dst->used += src->used;
    dst->mapped += src->mapped;
    dst->over_budget |= src->over_budget;
    free(src);
}

int ck_arena_over_budget(const ck_arena *a) { return a->over_budget; }
void ck_arena_set_budget(ck_arena *a, uint64_t budget) { a->budget = budget; }
uint64_t ck_arena_used(const ck_arena *a) { return a->used; }
