/* htab.h — an open-addressing hash index: maps 64-bit hashes to small integer values, with
 * the caller confirming candidates (so keys stay wherever the caller keeps them). */
#ifndef CK_UTIL_HTAB_H
#define CK_UTIL_HTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ck_htab {
    uint64_t *hashes; /* 0 = empty slot (hash 0 is remapped) */
    uint64_t *values;
    size_t cap; /* power of two */
    size_t len;
} ck_htab;

bool ck_htab_init(ck_htab *t, size_t expected);
void ck_htab_release(ck_htab *t);
bool ck_htab_insert(ck_htab *t, uint64_t hash, uint64_t value);
/* Calls eq(ctx, value) for every value stored under `hash` until it returns true; returns that
 * value through *out. */
bool ck_htab_find(const ck_htab *t, uint64_t hash, bool (*eq)(const void *ctx, uint64_t value),
                  const void *ctx, uint64_t *out);

uint64_t ck_hash_bytes(const void *p, size_t n, uint64_t seed);

#endif
