/* layout_map.c — layout maps (ckpt_layout_map_*): a JSON object of entry keys, tree paths or
 * directories of paths → layout specs, and the longest-match lookup of an entry's layout. */
#include "ckpt.h"
#include "util/arena.h"
#include "util/error.h"
#include "util/json.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct map_item {
    char *key; /* flat key, tree path or directory of paths */
    size_t len;
    ckpt_layout layout;
} map_item;

struct ckpt_layout_map {
    map_item *v;
    size_t n;
    bool has_def;
    ckpt_layout def;
};

/* One member's spec: `dim<d>` is Shard(d) over nranks; anything else a spec (or its alias)
 * of exactly nranks ranks. */
static ckpt_status parse_spec(const char *key, const char *text, uint32_t nranks, ckpt_layout *out,
                              ckpt_error *err) {
    char spec[CKPT_LAYOUT_SPEC_MAX + 32];
    const char *s = text;
    if (strncmp(text, "dim", 3) == 0 && !strchr(text, '-')) {
        snprintf(spec, sizeof spec, "%u:S%.*s", (unsigned)nranks, CKPT_LAYOUT_SPEC_MAX, text + 3);
        s = spec;
    }
    if (ckpt_layout_parse(s, out, err) != CKPT_OK) {
        ck_error_prefix(err, "layout map member '%.256s': ", key);
        return err ? err->code : CKPT_E_INVAL;
    }
    if (ckpt_layout_nranks(out) != nranks)
        return ck_fail(err, CKPT_E_INVAL,
                       "layout map member '%.256s': '%.128s' has %u ranks, not %u", key, text,
                       ckpt_layout_nranks(out), (unsigned)nranks);
    return CKPT_OK;
}

ckpt_status ckpt_layout_map_parse(const char *json, size_t len, uint32_t nranks,
                                  ckpt_layout_map **out, ckpt_error *err) {
    *out = NULL;
    if (len > CKPT_LAYOUT_MAP_MAX_BYTES)
        return ck_fail(err, CKPT_E_LIMIT, "layout map: %zu bytes, more than the %u accepted", len,
                       CKPT_LAYOUT_MAP_MAX_BYTES);
    if (nranks == 0) return ck_fail(err, CKPT_E_INVAL, "layout map: 0 ranks");
    ck_arena *a = ck_arena_new(4 * (uint64_t)len + (1u << 20));
    if (!a) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    const ck_json *root = NULL;
    ckpt_status st = ck_json_parse(a, json, len, 0, &root, err);
    ckpt_layout_map *m = NULL;
    if (st == CKPT_OK && root->type != CK_JSON_OBJECT)
        st = ck_fail(err, CKPT_E_FORMAT, "layout map: not a JSON object of specs (a JSON %s)",
                     ck_json_type_name(root->type));
    if (st == CKPT_OK &&
        (!(m = calloc(1, sizeof *m)) || !(m->v = calloc(root->len ? root->len : 1, sizeof *m->v))))
        st = ck_fail(err, CKPT_E_NOMEM, "out of memory");
    for (size_t i = 0; st == CKPT_OK && i < root->len; i++) {
        const ck_json_member *mb = &root->u.members[i];
        ckpt_layout l;
        if (strlen(mb->key) != mb->key_len)
            st = ck_fail(err, CKPT_E_INVAL, "layout map: a key with a NUL character");
        else if (mb->value.type != CK_JSON_STRING || strlen(mb->value.u.str) != mb->value.len)
            st = ck_fail(err, CKPT_E_INVAL, "layout map member '%.256s': the spec is not a string",
                         mb->key);
        else
            st = parse_spec(mb->key, mb->value.u.str, nranks, &l, err);
        if (st != CKPT_OK) break;
        if (strcmp(mb->key, "*") == 0) {
            m->def = l;
            m->has_def = true;
            continue;
        }
        map_item *it = &m->v[m->n];
        if (!(it->key = strdup(mb->key))) {
            st = ck_fail(err, CKPT_E_NOMEM, "out of memory");
            break;
        }
        it->len = mb->key_len;
        it->layout = l;
        m->n++;
    }
    ck_arena_free(a);
    if (st != CKPT_OK) {
        ckpt_layout_map_free(m);
        return st;
    }
    *out = m;
    return CKPT_OK;
}

void ckpt_layout_map_free(ckpt_layout_map *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n; i++)
        free(m->v[i].key);
    free(m->v);
    free(m);
}

const ckpt_layout *ckpt_layout_map_find(const ckpt_layout_map *m, const ckpt_entry *e,
                                        const ckpt_layout *def) {
    if (!m) return def;
    const char *key = ckpt_entry_key(e), *path = ckpt_entry_path(e);
    const map_item *best = NULL;
    for (size_t i = 0; i < m->n; i++) {
        const map_item *it = &m->v[i];
        bool hit = strcmp(key, it->key) == 0 || (strncmp(path, it->key, it->len) == 0 &&
                                                 (path[it->len] == '\0' || path[it->len] == '/'));
        if (hit && (!best || it->len >= best->len)) best = it;
    }
    if (best) return &best->layout;
    return m->has_def ? &m->def : def;
}

const ckpt_layout *ckpt_layout_map_default(const ckpt_layout_map *m) {
    return m && m->has_def ? &m->def : NULL;
}
