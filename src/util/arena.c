/* arena.c — bump allocator with a byte budget (see arena.h). */
#include "util/arena.h"

#include <stdlib.h>
#include <string.h>

#define ARENA_BLOCK_MIN (64u * 1024u)

typedef struct arena_block {
    struct arena_block *next;
    size_t size;
    size_t used;
    _Alignas(16) unsigned char data[];
} arena_block;

struct ckpt_arena {
    arena_block *head;
    uint64_t budget;
    uint64_t used;
    int over_budget;
};

ckpt_arena *ckpt_arena_new(uint64_t budget) {
    ckpt_arena *a = calloc(1, sizeof *a);
    if (a) a->budget = budget;
    return a;
}

void ckpt_arena_free(ckpt_arena *a) {
    if (!a) return;
    arena_block *b = a->head;
    while (b) {
        arena_block *next = b->next;
        free(b);
        b = next;
    }
    free(a);
}

void *ckpt_arena_alloc(ckpt_arena *a, size_t size) {
    size_t rounded = (size + 15u) & ~(size_t)15u;
    if (rounded < size) return NULL;
    if (a->budget && (rounded > a->budget || a->used > a->budget - rounded)) {
        a->over_budget = 1;
        return NULL;
    }
    arena_block *b = a->head;
    if (!b || b->size - b->used < rounded) {
        size_t want = rounded > ARENA_BLOCK_MIN ? rounded : ARENA_BLOCK_MIN;
        if (b && b->size * 2 > want && b->size < (1u << 24)) want = b->size * 2;
        b = malloc(sizeof *b + want);
        if (!b) return NULL;
        b->size = want;
        b->used = 0;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += rounded;
    a->used += rounded;
    memset(p, 0, size);
    return p;
}

char *ckpt_arena_strndup(ckpt_arena *a, const char *s, size_t len) {
    if (len == SIZE_MAX) return NULL;
    char *p = ckpt_arena_alloc(a, len + 1);
    if (!p) return NULL;
    if (len) memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

void *ckpt_arena_grow(ckpt_arena *a, void *old, size_t old_size, size_t new_size) {
    void *p = ckpt_arena_alloc(a, new_size);
    if (p && old && old_size) memcpy(p, old, old_size < new_size ? old_size : new_size);
    return p;
}

int ckpt_arena_over_budget(const ckpt_arena *a) { return a->over_budget; }
uint64_t ckpt_arena_used(const ckpt_arena *a) { return a->used; }
