/* arena.h — a bump allocator with a hard byte budget.  Decoders of untrusted input allocate
 * everything from one arena, so a hostile file can never use more than the budget and freeing
 * a decoded document is one call, with no recursion over its (possibly cyclic) values. */
#ifndef CK_UTIL_ARENA_H
#define CK_UTIL_ARENA_H

#include <stddef.h>
#include <stdint.h>

typedef struct ck_arena ck_arena;

/* budget: the most bytes the arena may hand out in total (0 = unlimited); its resident
 * memory stays close to what it hands out (no block larger than the budget leaves, none
 * populated that it leaves no room to fill). */
ck_arena *ck_arena_new(uint64_t budget);
/* Frees everything; an arena that mapped 64 MiB or more is unmapped by a detached thread, so
 * the call returns at once. */
void ck_arena_free(ck_arena *a);
/* For filling an arena with a lot (a decoded `.metadata`): from blocks of 4 MiB on, a helper
 * thread maps and faults in the next block while the current one fills.  Until
 * ck_arena_settle (or free), a helper may be running between calls.  Like all calls on one
 * arena, these must not run concurrently. */
void ck_arena_map_ahead(ck_arena *a);
/* Blocks double in size up to 64 MiB; this lowers that cap (arenas of which many fill at
 * once, so that their partly used last blocks waste less). */
void ck_arena_max_block(ck_arena *a, size_t bytes);
/* Ends mapping ahead: waits for the helper and unmaps a block mapped ahead but not used. */
void ck_arena_settle(ck_arena *a);
/* 8-byte aligned, zero-filled memory; NULL when out of memory or over budget
 * (ck_arena_over_budget tells which). */
void *ck_arena_alloc(ck_arena *a, size_t size);
/* Copies `len` bytes and appends a NUL. */
char *ck_arena_strndup(ck_arena *a, const char *s, size_t len);
/* Grows an array allocated from the arena (old contents copied; old block is not reused). */
void *ck_arena_grow(ck_arena *a, void *old, size_t old_size, size_t new_size);
/* Moves everything `src` handed out into `dst` (which then owns and frees it) and frees the
 * src handle; pointers into src stay valid.  Both must be settled (no helper running). */
void ck_arena_adopt(ck_arena *dst, ck_arena *src);
int ck_arena_over_budget(const ck_arena *a);
/* Changes the budget (0 = unlimited); bytes handed out so far still count. */
void ck_arena_set_budget(ck_arena *a, uint64_t budget);
uint64_t ck_arena_used(const ck_arena *a);

#endif
