/* mesh_spec.c — layout spec strings (ckpt.h "layouts"): parsing `2x2:S0s2,S0`-style specs and
 * the `dim<d>-of-<N>` alias into a ckpt_layout, formatting the canonical spec, and mapping a
 * rank to its row-major mesh coordinate.  Specs come from file names in the mount: every
 * number and count is bounded before use. */
#include "ckpt.h"
#include "util/error.h"

#include <stdio.h>
#include <string.h>

/* A decimal number without leading zeros; values past `max` set *big (the digits are still
 * consumed, so the message can name the bound). */
static bool spec_uint(const char **p, uint64_t max, uint64_t *out, bool *big) {
    const char *s = *p;
    if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] >= '0' && s[1] <= '9')) return false;
    uint64_t v = 0;
    *big = false;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v <= max) v = v * 10 + (uint64_t)(*s - '0');
        if (v > max) *big = true;
    }
    *out = v;
    *p = s;
    return true;
}

static ckpt_status bad(ckpt_error *err, const char *spec, const char *p, const char *what) {
    return ck_fail(err, CKPT_E_INVAL, "layout spec '%s': %s at character %td", spec, what,
                   p - spec + 1);
}

static ckpt_status number(const char *spec, const char **p, uint64_t lo, uint64_t hi,
                          const char *what, uint64_t *out, ckpt_error *err) {
    bool big;
    const char *at = *p;
    if (!spec_uint(p, hi, out, &big))
        return ck_fail(err, CKPT_E_INVAL,
                       "layout spec '%s': expected %s (a decimal number without leading "
                       "zeros) at character %td",
                       spec, what, at - spec + 1);
    if (big)
        return ck_fail(err, CKPT_E_LIMIT, "layout spec '%s': %s above %llu at character %td", spec,
                       what, (unsigned long long)hi, at - spec + 1);
    if (*out < lo)
        return ck_fail(err, CKPT_E_INVAL, "layout spec '%s': %s below %llu at character %td", spec,
                       what, (unsigned long long)lo, at - spec + 1);
    return CKPT_OK;
}

static ckpt_status parse_alias(const char *spec, ckpt_layout *l, ckpt_error *err) {
    const char *p = spec + 3;
    uint64_t d, n;
    CK_TRY(number(spec, &p, 0, CKPT_MAX_NDIM - 1, "a tensor dim", &d, err));
    if (strncmp(p, "-of-", 4) != 0) return bad(err, spec, p, "expected '-of-'");
    p += 4;
    CK_TRY(number(spec, &p, 1, CKPT_LAYOUT_MAX_RANKS, "a rank count", &n, err));
    if (*p) return bad(err, spec, p, "unexpected text after the rank count");
    l->mesh_ndim = 1;
    l->mesh[0] = (uint32_t)n;
    l->placements[0] = (ckpt_placement){CKPT_PLACEMENT_SHARD, (int)d, 1};
    return CKPT_OK;
}

ckpt_status ckpt_layout_parse(const char *spec, ckpt_layout *out, ckpt_error *err) {
    if (!spec || !out) return ck_fail(err, CKPT_E_INVAL, "layout spec: NULL argument");
    size_t len = strnlen(spec, CKPT_LAYOUT_SPEC_MAX);
    if (len >= CKPT_LAYOUT_SPEC_MAX)
        return ck_fail(err, CKPT_E_LIMIT, "layout spec '%.40s...': longer than %d characters", spec,
                       CKPT_LAYOUT_SPEC_MAX - 1);
    if (len == 0) return ck_fail(err, CKPT_E_INVAL, "layout spec is empty");
    ckpt_layout l;
    memset(&l, 0, sizeof l);
    if (strncmp(spec, "dim", 3) == 0) {
        CK_TRY(parse_alias(spec, &l, err));
        *out = l;
        return CKPT_OK;
    }
    const char *p = spec;
    uint64_t ranks = 1;
    for (;;) {
        if (l.mesh_ndim == CKPT_LAYOUT_MAX_MESH_NDIM)
            return ck_fail(err, CKPT_E_LIMIT, "layout spec '%s': more than %d mesh dims", spec,
                           CKPT_LAYOUT_MAX_MESH_NDIM);
        uint64_t n;
        CK_TRY(number(spec, &p, 1, CKPT_LAYOUT_MAX_RANKS, "a mesh size", &n, err));
        ranks *= n;
        if (ranks > CKPT_LAYOUT_MAX_RANKS)
            return ck_fail(err, CKPT_E_LIMIT, "layout spec '%s': the mesh has more than %u ranks",
                           spec, CKPT_LAYOUT_MAX_RANKS);
        l.mesh[l.mesh_ndim++] = (uint32_t)n;
        if (*p == 'x') {
            p++;
            continue;
        }
        if (*p == ':') break;
        return bad(err, spec, p, "expected 'x' or ':' after a mesh size");
    }
    p++;
    for (int i = 0;; i++) {
        if (i == l.mesh_ndim) return bad(err, spec, p, "more placements than mesh dims");
        ckpt_placement *pl = &l.placements[i];
        if (*p == 'R') {
            *pl = (ckpt_placement){CKPT_PLACEMENT_REPLICATE, 0, 1};
            p++;
        } else if (*p == 'S') {
            p++;
            uint64_t d, k = 1;
            CK_TRY(number(spec, &p, 0, CKPT_MAX_NDIM - 1, "a tensor dim", &d, err));
            *pl = (ckpt_placement){CKPT_PLACEMENT_SHARD, (int)d, 1};
            if (*p == 's') {
                p++;
                CK_TRY(
                    number(spec, &p, 1, CKPT_LAYOUT_MAX_SPLIT_FACTOR, "a split factor", &k, err));
                *pl = (ckpt_placement){CKPT_PLACEMENT_STRIDED_SHARD, (int)d, (uint32_t)k};
            }
        } else {
            return bad(err, spec, p, "expected a placement 'R', 'S<d>' or 'S<d>s<k>'");
        }
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p) return bad(err, spec, p, "expected ',' or the end after a placement");
        if (i + 1 != l.mesh_ndim)
            return ck_fail(err, CKPT_E_INVAL, "layout spec '%s': %d placements for %d mesh dims",
                           spec, i + 1, l.mesh_ndim);
        break;
    }
    *out = l;
    return CKPT_OK;
}

size_t ckpt_layout_format(const ckpt_layout *l, char *buf, size_t size) {
    char tmp[CKPT_LAYOUT_MAX_MESH_NDIM * 48 + 8];
    size_t n = 0;
    int nd = l->mesh_ndim < 0 ? 0 : l->mesh_ndim;
    if (nd > CKPT_LAYOUT_MAX_MESH_NDIM) nd = CKPT_LAYOUT_MAX_MESH_NDIM;
    for (int i = 0; i < nd; i++)
        n += (size_t)snprintf(tmp + n, sizeof tmp - n, "%s%u", i ? "x" : "", l->mesh[i]);
    n += (size_t)snprintf(tmp + n, sizeof tmp - n, ":");
    for (int i = 0; i < nd; i++) {
        const ckpt_placement *p = &l->placements[i];
        const char *sep = i ? "," : "";
        if (p->kind == CKPT_PLACEMENT_SHARD)
            n += (size_t)snprintf(tmp + n, sizeof tmp - n, "%sS%d", sep, p->dim);
        else if (p->kind == CKPT_PLACEMENT_STRIDED_SHARD)
            n +=
                (size_t)snprintf(tmp + n, sizeof tmp - n, "%sS%ds%u", sep, p->dim, p->split_factor);
        else
            n += (size_t)snprintf(tmp + n, sizeof tmp - n, "%sR", sep);
    }
    if (size) snprintf(buf, size, "%s", tmp);
    return n;
}

uint32_t ckpt_layout_nranks(const ckpt_layout *l) {
    uint64_t n = 1;
    for (int i = 0; i < l->mesh_ndim && i < CKPT_LAYOUT_MAX_MESH_NDIM; i++) {
        n *= l->mesh[i];
        if (n > CKPT_LAYOUT_MAX_RANKS) return 0;
    }
    return (uint32_t)n;
}

ckpt_status ckpt_layout_coord(const ckpt_layout *l, uint32_t rank, uint32_t *coord) {
    uint32_t n = ckpt_layout_nranks(l);
    if (l->mesh_ndim < 1 || l->mesh_ndim > CKPT_LAYOUT_MAX_MESH_NDIM || n == 0 || rank >= n)
        return CKPT_E_INVAL;
    for (int i = l->mesh_ndim - 1; i >= 0; i--) {
        if (l->mesh[i] == 0) return CKPT_E_INVAL;
        coord[i] = rank % l->mesh[i];
        rank /= l->mesh[i];
    }
    return CKPT_OK;
}
