/* tc_shard.c — the tensors torch-checkpointing's metadata.pkl names (tc.h): each one entry of
 * its global shape (DTensorShardingMetadata: global_shape, dtype, mesh_spec, placements), and
 * every rank's local tensor — a DTensor's `_local_tensor` in a torch.save file, or a
 * safetensors record (SafetensorsSerialization keeps the local tensor only) — the chunks of
 * the boxes its mesh coordinate holds (ckpt_layout_shard: torch's local-shard rule,
 * _StridedShard included), read in place; a replica (the same box from another rank) is
 * stored once. */
#include "index/tc.h"

#include "util/error.h"
#include "util/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The group of `groups` whose ranks hold `rank`, or NULL. */
static const pk_value *group_of(const pk_value *groups, long long rank) {
    for (size_t i = 0; i < pk_len(groups); i++) { /* the usual (0, 1, ..., N-1) first */
        int64_t x;
        if (pk_as_int(pk_item(pk_get(pk_item(groups, i), "ranks"), (size_t)rank), &x) && x == rank)
            return pk_item(groups, i);
    }
    for (size_t i = 0; i < pk_len(groups); i++) {
        const pk_value *ranks = pk_get(pk_item(groups, i), "ranks");
        for (size_t j = 0; j < pk_len(ranks); j++) {
            int64_t x;
            if (pk_as_int(pk_item(ranks, j), &x) && x == rank) return pk_item(groups, i);
        }
    }
    return NULL;
}

/* The layout and the mesh coordinate of `rank` from a DTensorShardingMetadata's data;
 * false with *why when it cannot be read, true with *in_mesh false when rank is not in it. */
static bool layout_of(const pk_value *data, long long rank, int ndim, ckpt_layout *l,
                      uint32_t *coord, bool *in_mesh, const char **why) {
    /* (a replica: a rank whose coordinate is not 0 along some Replicate mesh dim holds the
     * boxes of the rank that has 0 there; the caller skips it) */
    const pk_value *ms = pk_get(data, "mesh_spec"), *pl = pk_get(data, "placements");
    int64_t shape[CKPT_LAYOUT_MAX_MESH_NDIM];
    size_t nd = 0;
    *in_mesh = false;
    if (!pk_as_int_seq(pk_get(ms, "mesh_shape"), shape, CKPT_LAYOUT_MAX_MESH_NDIM, &nd) || !nd ||
        pk_len(pl) != nd)
        return *why = "mesh_shape and placements do not agree", false;
    memset(l, 0, sizeof *l);
    l->mesh_ndim = (int)nd;
    uint64_t total = 1;
    for (size_t i = 0; i < nd; i++) {
        if (shape[i] < 1 || shape[i] > TC_MAX_WORLD) return *why = "bad mesh size", false;
        l->mesh[i] = (uint32_t)shape[i];
        total *= (uint64_t)shape[i];
        if (total > TC_MAX_WORLD) return *why = "mesh too large", false;
        const pk_value *p = pk_item(pl, i);
        const char *type = pk_as_str(pk_get(p, "type"));
        int64_t dim = 0, k = 1;
        if (type && strcmp(type, "Replicate") == 0) {
            l->placements[i].kind = CKPT_PLACEMENT_REPLICATE;
            l->placements[i].split_factor = 1;
            continue;
        }
        bool strided = type && strcmp(type, "StridedShard") == 0;
        if (!type || (!strided && strcmp(type, "Shard") != 0))
            return *why = "unknown placement type", false;
        if (!pk_as_int(pk_get(p, "dim"), &dim) || dim < 0 || dim >= ndim)
            return *why = "placement dim out of range", false;
        if (strided && (!pk_as_int(pk_get(p, "split_factor"), &k) || k < 1 ||
                        k > CKPT_LAYOUT_MAX_SPLIT_FACTOR))
            return *why = "bad split_factor", false;
        l->placements[i].kind = strided ? CKPT_PLACEMENT_STRIDED_SHARD : CKPT_PLACEMENT_SHARD;
        l->placements[i].dim = (int)dim;
        l->placements[i].split_factor = (uint32_t)k;
    }
    const pk_value *md = pk_get(ms, "mesh_data");
    if (pk_len(md) != total) return *why = "mesh_data does not fill mesh_shape", false;
    int64_t x;
    size_t first =
        rank >= 0 && (uint64_t)rank < total && pk_as_int(pk_item(md, (size_t)rank), &x) && x == rank
            ? (size_t)rank /* the usual mesh of ranks in order */
            : 0;
    for (size_t i = first; i < total; i++) {
        if (!pk_as_int(pk_item(md, i), &x)) return *why = "mesh_data holds a non-int", false;
        if (x != rank) continue;
        for (size_t d = nd; d-- > 0;) { /* row-major, as DeviceMeshSpec flattens the mesh */
            coord[d] = (uint32_t)(i % l->mesh[d]);
            i /= l->mesh[d];
        }
        *in_mesh = true;
        return true;
    }
    return true;
}

/* The chunks rank w->rank's local tensor t gives pending entry p (tc.h). */
ckpt_status tc_add_shard(tc *w, tc_pending *p, const tc_local *t, ckpt_error *err) {
    ckpt_reader *r = w->r;
    ckpt_entry *e = &r->entries[p->entry];
    if (e->problem) return CKPT_OK;
    const pk_value *g = group_of(p->groups, w->rank);
    if (!g) return CKPT_OK; /* this rank holds no part of it */
    const pk_value *data = pk_get(pk_get(g, "sharding_metadata"), "data");
    if (t->dtype != e->dtype || t->ndim != e->ndim) {
        e->problem =
            index_problemf(r->arena, "%s: rank %lld holds a %s tensor of %d dims, %s says %s of %d",
                           w->file_path, w->rank, ckpt_dtype_name(t->dtype), t->ndim, w->md_path,
                           ckpt_dtype_name(e->dtype), e->ndim);
        return CKPT_OK;
    }
    ckpt_layout l;
    uint32_t coord[CKPT_LAYOUT_MAX_MESH_NDIM];
    bool in_mesh;
    const char *why = NULL;
    if (!layout_of(data, w->rank, e->ndim, &l, coord, &in_mesh, &why)) {
        e->problem = index_problemf(r->arena, "%s: '%s': %s", w->md_path, e->key, why);
        return CKPT_OK;
    }
    if (!in_mesh) return CKPT_OK;
    for (int d = 0; d < l.mesh_ndim; d++)
        if (l.placements[d].kind == CKPT_PLACEMENT_REPLICATE && coord[d] != 0)
            return CKPT_OK; /* a replica: the rank at 0 along that dim stores it once */
    ckpt_layout_shard *sh = NULL;
    ckpt_error lerr = {0};
    if (ckpt_layout_shard_new(&l, e->ndim, e->shape, coord, &sh, &lerr) != CKPT_OK) {
        if (lerr.code == CKPT_E_NOMEM) return index_nomem(err);
        e->problem = index_problemf(r->arena, "%s: '%s': %s", w->md_path, e->key, lerr.message);
        return CKPT_OK;
    }
    const int64_t *ls = ckpt_layout_shard_local_shape(sh);
    uint64_t nboxes = ckpt_layout_shard_num_boxes(sh);
    ckpt_status s = CKPT_OK;
    for (int d = 0; d < e->ndim && !e->problem; d++)
        if (ls[d] != t->shape[d])
            e->problem = index_problemf(
                r->arena,
                "%s: rank %lld's local tensor of '%s' is not the shape its placements give",
                w->file_path, w->rank, e->key);
    if (!e->problem && nboxes > 1 && t->view && !index_ts_c_order(t->view))
        e->problem = index_problemf(r->arena, "%s: rank %lld's local tensor of '%s' is strided",
                                    w->file_path, w->rank, e->key);
    size_t nd = (size_t)(e->ndim ? e->ndim : 1);
    for (uint64_t b = 0; b < nboxes && !e->problem && s == CKPT_OK; b++) {
        int64_t *box = ck_arena_alloc(r->arena, 2 * nd * sizeof *box);
        if (!box) {
            s = index_nomem(err);
            break;
        }
        uint64_t at = 0;
        ckpt_layout_shard_box(sh, b, box, box + nd, &at);
        uint64_t numel = 1;
        for (int d = 0; d < e->ndim; d++)
            numel *= (uint64_t)box[nd + (size_t)d];
        /* disjoint boxes hold at most numel elements, one empty box a rank: more is metadata
         * whose ranks disagree (their overlaps are for verify to find), bounded here */
        if (p->nchunks >= e->numel + TC_MAX_WORLD) {
            e->problem =
                index_problemf(r->arena, "%s: '%s': more shards than elements", w->md_path, e->key);
            break;
        }
        if (p->nchunks == p->cap) {
            size_t cap = p->cap ? p->cap * 2 : 4;
            ck_chunk **m = realloc(p->chunks, cap * sizeof *m);
            if (!m) {
                s = index_nomem(err);
                break;
            }
            p->chunks = m;
            p->cap = cap;
        }
        ck_chunk *c = ck_arena_alloc(r->arena, sizeof *c);
        if (!c) {
            s = index_nomem(err);
            break;
        }
        if (t->view) {
            s = index_ts_chunk(r, t->it, w->file_id, t->view, nboxes > 1 ? at : 0, box, box + nd,
                               numel, c, err);
        } else { /* safetensors: C order, little endian; a box is a run of the local tensor */
            memset(c, 0, sizeof *c);
            c->offsets = box;
            c->sizes = box + nd;
            c->numel = numel;
            c->loc.file_id = numel ? w->file_id : -1;
            c->loc.raw = true;
            c->loc.offset = t->data_offset + (nboxes > 1 ? at : 0) * ckpt_dtype_itemsize(e->dtype);
            c->loc.length = numel * ckpt_dtype_itemsize(e->dtype);
        }
        if (s == CKPT_OK) p->chunks[p->nchunks++] = c;
    }
    ckpt_layout_shard_free(sh);
    return s;
}

/* The entries the metadata names in `paths` (nested_path_to_metadata), made before any file
 * is walked: global shape and dtype, chunks to come. */
ckpt_status tc_named_entries(tc *w, const pk_value *paths, ck_arena *tmp, ckpt_error *err) {
    ckpt_reader *r = w->r;
    if (!paths || paths->type != PK_DICT)
        return ck_fail(err, CKPT_E_FORMAT,
                       "%s: item '%.200s': nested_path_to_metadata is not a dict", w->md_path,
                       w->item);
    w->pend = calloc(paths->u.dict.len ? paths->u.dict.len : 1, sizeof *w->pend);
    if (!w->pend) return index_nomem(err);
    w->first_entry = r->nentries;
    w->npend = 0;
    for (size_t i = 0; i < paths->u.dict.len; i++) {
        const char *js = pk_as_str(paths->u.dict.keys[i]);
        const ck_json *path = NULL;
        ckpt_error jerr = {0};
        if (!js ||
            ck_json_parse(tmp, js, paths->u.dict.keys[i]->u.str.len, 8, &path, &jerr) != CKPT_OK ||
            path->type != CK_JSON_ARRAY || path->len + 1 > TC_MAX_PATH)
            return ck_fail(err, CKPT_E_FORMAT,
                           "%s: item '%.200s': nested path %zu is not a JSON list of keys%s%s",
                           w->md_path, w->item, i, jerr.message[0] ? ": " : "", jerr.message);
        index_elem elems[TC_MAX_PATH];
        char nums[TC_MAX_PATH][24];
        elems[0] = (index_elem){w->item, strlen(w->item), false, false};
        ck_strbuf_reset(&w->key);
        ck_strbuf_add(&w->key, w->item, strlen(w->item));
        for (size_t j = 0; j < path->len; j++) {
            const ck_json *x = &path->u.items[j];
            if (x->type == CK_JSON_STRING) {
                elems[j + 1] = (index_elem){x->u.str, x->len, false, false};
            } else if (x->type == CK_JSON_NUMBER && x->is_int) {
                int len = snprintf(nums[j], sizeof nums[j], "%lld", (long long)x->u.num.i);
                elems[j + 1] = (index_elem){nums[j], (size_t)len, true, false};
            } else {
                return ck_fail(err, CKPT_E_FORMAT,
                               "%s: item '%.200s': nested path '%.200s' holds a %s", w->md_path,
                               w->item, js, ck_json_type_name(x->type));
            }
            ck_strbuf_addc(&w->key, '.');
            ck_strbuf_add(&w->key, elems[j + 1].s, elems[j + 1].len);
        }
        if (ck_strbuf_status(&w->key, "a key", err) != CKPT_OK) return CKPT_E_NOMEM;
        const char *key = ck_strbuf_cstr(&w->key);
        if (index_find(r, key)) continue; /* named twice ("a.b" and ["a", "b"]): the first */
        ckpt_entry *e = index_new_entry(r, key);
        if (!e) return index_nomem(err);
        CK_TRY(index_set_path(r, e, elems, path->len + 1, err));
        tc_pending *p = &w->pend[w->npend++];
        p->entry = e->index;
        p->groups = paths->u.dict.vals[i];
        e->kind = CKPT_ENTRY_TENSOR;
        e->loc.file_id = -1;
        /* every group describes the same global tensor: the first one gives it */
        const pk_value *sm = pk_get(pk_item(p->groups, 0), "sharding_metadata");
        const pk_value *data = pk_get(sm, "data");
        const char *type = pk_as_str(pk_get(sm, "type"));
        int64_t shape[CKPT_MAX_NDIM];
        size_t nd = 0;
        e->dtype = ckpt_dtype_from_name(pk_as_str(pk_get(data, "dtype")));
        if (!type || strcmp(type, "DTensorShardingMetadata") != 0) {
            e->problem =
                index_problemf(r->arena, "%s: '%s': sharding metadata of type '%s' is not read",
                               w->md_path, key, type ? type : "?");
            continue;
        }
        if (!pk_as_int_seq(pk_get(data, "global_shape"), shape, CKPT_MAX_NDIM, &nd)) {
            e->problem =
                index_problemf(r->arena, "%s: '%s': global_shape is not a list of at most %d ints",
                               w->md_path, key, CKPT_MAX_NDIM);
            continue;
        }
        if (e->dtype == CKPT_DTYPE_INVALID)
            e->problem = index_problemf(r->arena, "%s: '%s': unknown dtype", w->md_path, key);
        int64_t *sh = ck_arena_alloc(r->arena, (nd ? nd : 1) * sizeof *sh);
        if (!sh) return index_nomem(err);
        memcpy(sh, shape, nd * sizeof *sh);
        e->ndim = (int)nd;
        e->shape = sh;
        const char *bad = NULL;
        e->numel = index_numel(r->arena, sh, (int)nd, &bad);
        e->nbytes = index_nbytes(e->dtype, e->numel);
        if (bad && !e->problem) e->problem = bad;
    }
    return CKPT_OK;
}

/* The chunks collected for the item's named entries, into the index. */
ckpt_status tc_settle(tc *w, ckpt_error *err) {
    ckpt_reader *r = w->r;
    for (size_t i = 0; i < w->npend; i++) {
        tc_pending *p = &w->pend[i];
        ckpt_entry *e = &r->entries[p->entry];
        if (p->nchunks) {
            ck_chunk *c = ck_arena_alloc(r->arena, p->nchunks * sizeof *c);
            if (!c) return index_nomem(err);
            for (size_t j = 0; j < p->nchunks; j++)
                memcpy(&c[j], p->chunks[j], sizeof *c);
            e->chunks = c;
            e->nchunks = p->nchunks;
            if (!e->problem) r->info.stored_bytes += e->nbytes;
        } else if (!e->problem && e->numel) {
            e->problem =
                index_problemf(r->arena, "%s: '%s': no rank's file holds it", w->md_path, e->key);
        }
    }
    return CKPT_OK;
}

void tc_drop_pending(tc *w) {
    for (size_t i = 0; w->pend && i < w->npend; i++)
        free(w->pend[i].chunks);
    free(w->pend);
    w->pend = NULL;
    w->npend = 0;
}

tc_pending *tc_pending_of(tc *w, const char *key) {
    const ckpt_entry *e = index_find(w->r, key);
    if (e && e->index >= w->first_entry && e->index < w->first_entry + w->npend)
        return &w->pend[e->index - w->first_entry];
    return NULL;
}
