/* htab.c — open-addressing hash index with linear probing (see htab.h). */
#include "util/htab.h"

#include <stdlib.h>
#include <string.h>

bool ck_htab_init(ck_htab *t, size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2 + 1)
        cap <<= 1;
    t->hashes = calloc(cap, sizeof *t->hashes);
    t->values = malloc(cap * sizeof *t->values);
    t->cap = cap;
    t->len = 0;
    if (!t->hashes || !t->values) {
        ck_htab_release(t);
        return false;
    }
    return true;
}

void ck_htab_release(ck_htab *t) {
    free(t->hashes);
    free(t->values);
    t->hashes = NULL;
    t->values = NULL;
    t->cap = t->len = 0;
}

static bool grow(ck_htab *t) {
    ck_htab n;
    if (!ck_htab_init(&n, t->cap)) return false;
    for (size_t i = 0; i < t->cap; i++)
        if (t->hashes[i]) ck_htab_insert(&n, t->hashes[i], t->values[i]);
    ck_htab_release(t);
    *t = n;
    return true;
}

bool ck_htab_insert(ck_htab *t, uint64_t hash, uint64_t value) {
    if ((t->len + 1) * 4 > t->cap * 3 && !grow(t)) return false;
    if (!hash) hash = 1;
    size_t mask = t->cap - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        if (!t->hashes[i]) {
            t->hashes[i] = hash;
            t->values[i] = value;
            t->len++;
            return true;
        }
    }
}

bool ck_htab_find(const ck_htab *t, uint64_t hash, bool (*eq)(const void *ctx, uint64_t value),
                  const void *ctx, uint64_t *out) {
    if (!t->cap) return false;
    if (!hash) hash = 1;
    size_t mask = t->cap - 1;
    for (size_t i = hash & mask; t->hashes[i]; i = (i + 1) & mask) {
        if (t->hashes[i] == hash && eq(ctx, t->values[i])) {
            *out = t->values[i];
            return true;
        }
    }
    return false;
}

/* FNV-1a over 8-byte words with a final avalanche (splitmix64); good enough for keys that an
 * attacker cannot use to do worse than linear probing over their own entries. */
uint64_t ck_hash_bytes(const void *p, size_t n, uint64_t seed) {
    const uint8_t *s = p;
    uint64_t h = 0xcbf29ce484222325ull ^ seed;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    while (n--)
        h = (h ^ *s++) * 0x100000001b3ull;
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
    return h;
}
