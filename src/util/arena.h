/* arena.h — a bump allocator with a hard byte budget.  Decoders of untrusted input allocate
 * everything from one arena, so a hostile file can never use more than the budget and freeing
 * a decoded document is one call, with no recursion over its (possibly cyclic) values. */
#ifndef CKPT_UTIL_ARENA_H
#define CKPT_UTIL_ARENA_H

#include <stddef.h>
#include <stdint.h>

typedef struct ckpt_arena ckpt_arena;

/* budget: the most bytes the arena may hand out in total (0 = unlimited). */
ckpt_arena *ckpt_arena_new(uint64_t budget);
/* Frees everything; an arena that mapped 64 MiB or more is unmapped by a detached thread, so
 * the call returns at once. */
void ckpt_arena_free(ckpt_arena *a);
/* For filling an arena with a lot (a decoded `.metadata`): from blocks of 4 MiB on, a helper
 * thread maps and faults in the next block while the current one fills.  Until
 * ckpt_arena_settle (or free), a helper may be running between calls.  Like all calls on one
 * arena, these must not run concurrently. */
void ckpt_arena_map_ahead(ckpt_arena *a);
/* Blocks double in size up to 64 MiB; this lowers that cap (arenas of which many fill at
 * once, so that their partly used last blocks waste less). */
void ckpt_arena_max_block(ckpt_arena *a, size_t bytes);
/* Ends mapping ahead: waits for the helper and unmaps a block mapped ahead but not used. */
void ckpt_arena_settle(ckpt_arena *a);
/* 8-byte aligned, zero-filled memory; NULL when out of memory or over budget
 * (ckpt_arena_over_budget tells which). */
void *ckpt_arena_alloc(ckpt_arena *a, size_t size);
/* Copies `len` bytes and appends a NUL. */
char *ckpt_arena_strndup(ckpt_arena *a, const char *s, size_t len);
/* Grows an array allocated from the arena (old contents copied; old block is not reused). */
void *ckpt_arena_grow(ckpt_arena *a, void *old, size_t old_size, size_t new_size);
/* Moves everything `src` handed out into `dst` (which then owns and frees it) and frees the
 * src handle; pointers into src stay valid.  Both must be settled (no helper running). */
void ckpt_arena_adopt(ckpt_arena *dst, ckpt_arena *src);
int ckpt_arena_over_budget(const ckpt_arena *a);
/* Changes the budget (0 = unlimited); bytes handed out so far still count. */
void ckpt_arena_set_budget(ckpt_arena *a, uint64_t budget);
uint64_t ckpt_arena_used(const ckpt_arena *a);

#endif
