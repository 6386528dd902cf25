/* layout.c — the `.layout/` view's names and inode numbers: spec directories (`2x2:S0s2,S0`,
 * `dim<d>-of-<N>`: ckpt_layout_parse; a small table of the specs in use, so `ls .layout` can
 * list them) and the computed inodes of
 * every rank directory and file below them (tree_i.h), which need no per-rank state. */
#include "tree/tree_i.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Bits of the node field: enough for every plain node (at least 1). */
static uint32_t node_bits(const tree_ckpt *c) {
    uint32_t b = 1;
    while (b < 32 && ((uint64_t)1 << b) < c->nnodes)
        b++;
    return b;
}

/* Specs the encoding has room for: 47 bits hold spec, a 20-bit rank and the node. */
static uint32_t max_specs(const tree_ckpt *c) {
    uint32_t nb = node_bits(c);
    if (nb + TREE_LAYOUT_RANK_BITS >= 47) return 0;
    uint32_t sb = 47 - TREE_LAYOUT_RANK_BITS - nb;
    if (sb >= 10) return TREE_LAYOUT_MAX_SPECS;
    return 1u << sb;
}

ckpt_status tree_layout_spec(tree_ckpt *c, const char *name, uint32_t *spec, ckpt_error *err) {
    ckpt_layout lay;
    if (strnlen(name, CKPT_LAYOUT_SPEC_MAX) >= CKPT_LAYOUT_SPEC_MAX ||
        ckpt_layout_parse(name, &lay, NULL) != CKPT_OK)
        return ck_fail(err, CKPT_E_NOTFOUND, "no such file or directory");
    uint32_t n = ckpt_layout_nranks(&lay);
    layout_spec *t = atomic_load_explicit(&c->specs, memory_order_acquire);
    uint32_t k = atomic_load_explicit(&c->nspecs, memory_order_acquire);
    for (uint32_t i = 0; t && i < k; i++) /* few specs are in use at a time */
        if (strcmp(t[i].name, name) == 0) {
            *spec = i;
            return CKPT_OK;
        }
    ckpt_status s = CKPT_OK;
    pthread_mutex_lock(&c->spec_lock);
    t = atomic_load_explicit(&c->specs, memory_order_relaxed);
    if (!t) {
        t = calloc(TREE_LAYOUT_MAX_SPECS, sizeof *t);
        if (!t) {
            s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
            goto out;
        }
        atomic_store_explicit(&c->specs, t, memory_order_release);
    }
    k = atomic_load_explicit(&c->nspecs, memory_order_relaxed);
    for (uint32_t i = 0; i < k; i++) /* another thread may have added it */
        if (strcmp(t[i].name, name) == 0) {
            *spec = i;
            goto out;
        }
    if (k >= max_specs(c)) {
        s = ck_fail(err, CKPT_E_LIMIT,
                    "%s: %u layout specs are in use, the most this checkpoint "
                    "(%u tree nodes) allows",
                    name, k, c->nnodes);
        goto out;
    }
    t[k].layout = lay;
    t[k].n = n;
    snprintf(t[k].name, sizeof t[k].name, "%s", name);
    atomic_store_explicit(&c->nspecs, k + 1, memory_order_release);
    /* `.layout` lists the specs in use: its mtime moves so the kernel drops its listing */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec,
             base = (uint64_t)c->mtime.tv_sec * 1000000000u + (uint64_t)c->mtime.tv_nsec,
             prev = atomic_load(&c->layout_mtime_ns);
    if (ns < base) ns = base;
    if (ns <= prev) ns = prev + 1;
    atomic_store(&c->layout_mtime_ns, ns);
    *spec = k;
out:
    pthread_mutex_unlock(&c->spec_lock);
    return s;
}

bool tree_layout_spec_get(tree_ckpt *c, uint32_t spec, layout_inst *out) {
    uint32_t k = atomic_load_explicit(&c->nspecs, memory_order_acquire);
    layout_spec *t = atomic_load_explicit(&c->specs, memory_order_acquire);
    if (!t || spec >= k) return false;
    *out = (layout_inst){&t[spec], t[spec].n, -1, spec};
    return true;
}

uint32_t tree_layout_nspecs(tree_ckpt *c) {
    return atomic_load_explicit(&c->nspecs, memory_order_acquire);
}

uint64_t tree_layout_mtime_ns(tree_ckpt *c) { return atomic_load(&c->layout_mtime_ns); }

ckpt_ino tree_layout_ino(const tree_ckpt *c, uint32_t spec, uint32_t rank, uint32_t node) {
    uint32_t nb = node_bits(c);
    uint64_t v = ((uint64_t)c->slot << 48) | TREE_LAYOUT_BIT |
                 ((uint64_t)spec << (TREE_LAYOUT_RANK_BITS + nb)) | ((uint64_t)rank << nb) | node;
    return v + 1;
}

bool tree_layout_decode(tree_ckpt *c, ckpt_ino ino, layout_inst *li, uint32_t *node) {
    if (!tree_ino_is_layout(ino)) return false;
    uint64_t v = (ino - 1) & (TREE_LAYOUT_BIT - 1);
    uint32_t nb = node_bits(c);
    uint64_t nd = v & (((uint64_t)1 << nb) - 1);
    uint64_t rank = (v >> nb) & (TREE_LAYOUT_MAX_RANKS - 1);
    uint64_t spec = v >> (nb + TREE_LAYOUT_RANK_BITS);
    if (spec > UINT32_MAX || nd >= c->nnodes) return false;
    if (!tree_layout_spec_get(c, (uint32_t)spec, li) || rank >= li->n) return false;
    li->rank = (int32_t)rank;
    *node = (uint32_t)nd;
    return true;
}
