/* layout.c — the `.layout/` view's names and instances: `dim<d>-of-<N>` spec directories and
 * one instance per (spec, rank), numbered on first use so inode numbers stay stable. */
#include "tree/tree_i.h"

#include <stdlib.h>
#include <string.h>

#define LAYOUT_MAX_RANKS (1u << 20)

static bool parse_uint(const char **p, uint64_t max, uint64_t *out) {
    const char *s = *p;
    if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] >= '0' && s[1] <= '9')) return false;
    uint64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        v = v * 10 + (uint64_t)(*s - '0');
        if (v > max) return false;
    }
    *out = v;
    *p = s;
    return true;
}

bool tree_layout_parse(const char *name, int *dim, uint32_t *n) {
    uint64_t d, k;
    if (strncmp(name, "dim", 3) != 0) return false;
    const char *p = name + 3;
    if (!parse_uint(&p, CKPT_MAX_NDIM - 1, &d) || strncmp(p, "-of-", 4) != 0) return false;
    p += 4;
    if (!parse_uint(&p, LAYOUT_MAX_RANKS, &k) || *p || k == 0) return false;
    *dim = (int)d;
    *n = (uint32_t)k;
    return true;
}

uint32_t tree_layout_inst(tree_ckpt *c, int dim, uint32_t n, int32_t rank) {
    pthread_mutex_lock(&c->inst_lock);
    uint32_t id = 0;
    for (uint32_t i = 0; i < c->ninsts; i++) /* few specs are used at a time */
        if (c->insts[i].dim == dim && c->insts[i].n == n && c->insts[i].rank == rank) {
            id = i + INST_DYNAMIC;
            goto out;
        }
    if (c->ninsts + INST_DYNAMIC >= TREE_MAX_INSTS) goto out;
    if (c->ninsts == c->insts_cap) {
        uint32_t cap = c->insts_cap ? c->insts_cap * 2 : 16;
        layout_inst *m = realloc(c->insts, (size_t)cap * sizeof *m);
        if (!m) goto out;
        c->insts = m;
        c->insts_cap = cap;
    }
    c->insts[c->ninsts] = (layout_inst){dim, n, rank};
    id = c->ninsts++ + INST_DYNAMIC;
out:
    pthread_mutex_unlock(&c->inst_lock);
    return id;
}

bool tree_layout_get(tree_ckpt *c, uint32_t inst, layout_inst *out) {
    bool ok = false;
    pthread_mutex_lock(&c->inst_lock);
    if (inst >= INST_DYNAMIC && inst - INST_DYNAMIC < c->ninsts) {
        *out = c->insts[inst - INST_DYNAMIC];
        ok = true;
    }
    pthread_mutex_unlock(&c->inst_lock);
    return ok;
}
