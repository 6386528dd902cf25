/* torch_checkpointing.c — checkpoints written by torch-checkpointing (meta-pytorch's
 * torch_checkpointing, 0.1.x; docs/dcp-support.md "torch-checkpointing"): one file per
 * top-level item and rank, `<item>_<rank>.pt` written by torch.save by default, and, when an
 * item declares a resharder, a `metadata.pkl` that rank 0 writes last: a pickle of plain
 * dicts, lists, tuples, strings and ints (DistributedMetadata.to_dict, version "2.0")
 *
 *   {"metadata": {item: {"nested_path_to_metadata": {json path: [group, ...]},
 *                        "rank_to_layout_info": {rank: None | layout}}},
 *    "world_size": N, "version": "2.0"}
 *   group  = {"sharding_metadata": {"type": "DTensorShardingMetadata", "data": {"global_shape",
 *             "dtype", "stride", "mesh_spec": {"mesh_shape", "mesh_data", ...}, "placements":
 *             [{"type": "Shard", "dim"} | {"type": "Replicate"} | {"type": "StridedShard",
 *             "dim", "split_factor"}]}}, "ranks": (r, ...)}
 *   layout = {"file_path": name, "serialization_format": {"type": "TorchSerialization"}}
 *
 * decoded with the data-only decoder (nothing is called).  Each tensor the metadata names is
 * one entry of its global shape; every rank's file is walked and the local tensor it holds
 * (a DTensor's `_local_tensor`, or a plain tensor) becomes the chunks of the boxes its mesh
 * coordinate holds (ckpt_layout_shard: torch's local-shard rule, _StridedShard included),
 * read in place; a replica (the same box from another rank) is stored once.  Everything else
 * of an item — values, tensors the metadata does not name — is read from the first rank's
 * file, as a load on one rank sees it.  Items the metadata does not name (no resharder) and
 * checkpoints without metadata.pkl are read from their `<item>_0.pt` files. */
#include "index/builder.h"
#include "index/formats.h"
#include "index/metadata_files.h"
#include "index/torchsave_walk.h"

#include "util/error.h"
#include "util/json.h"
#include "util/strbuf.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TC_METADATA "metadata.pkl"
#define TC_MAX_WORLD (1u << 20)
#define TC_MAX_PATH 62 /* elements of a nested path (the walker's depth, item key included) */

typedef struct pending {
    size_t entry;           /* index in r->entries */
    const pk_value *groups; /* list of {sharding_metadata, ranks} */
    ck_chunk **chunks;      /* collected over the ranks' files (malloc'ed vector) */
    size_t nchunks, cap;
} pending;

typedef struct tc {
    ckpt_reader *r;
    const char *md_path;
    /* the item being walked */
    const char *item;
    size_t first_entry; /* entries [first_entry, first_entry + npend) are pend[] */
    pending *pend;
    size_t npend;
    long long rank;
    bool first_file; /* values and unnamed tensors come from this file */
    ts_item *it;
    int32_t file_id;
    const char *file_path;
    ck_strbuf key;
} tc;

static long long tc_file_rank(const char *name) {
    size_t n = strlen(name);
    if (n < 5 || strcmp(name + n - 3, ".pt") != 0) return -1;
    size_t end = n - 3, i = end;
    while (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9')
        i--;
    if (i == end || i < 2 || name[i - 1] != '_' || end - i > 9) return -1; /* an item key */
    if (name[i] == '0' && end - i > 1) return -1;
    return strtoll(name + i, NULL, 10);
}

/* ------------------------------------------------------------------ DTensors */

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

/* The chunks rank w->rank's local tensor `local` gives pending entry p. */
static ckpt_status add_shard(tc *w, pending *p, const pk_value *local, ckpt_error *err) {
    ckpt_reader *r = w->r;
    ckpt_entry *e = &r->entries[p->entry];
    if (e->problem) return CKPT_OK;
    const pk_value *g = group_of(p->groups, w->rank);
    if (!g) return CKPT_OK; /* this rank holds no part of it */
    const pk_value *data = pk_get(pk_get(g, "sharding_metadata"), "data");
    ts_tensor_view t;
    ckpt_error terr = {0};
    if (ts_tensor_view_of(w->it, local, &t, &terr) != CKPT_OK) {
        if (terr.code == CKPT_E_NOMEM) return index_nomem(err);
        e->problem = index_problemf(r->arena, "%s", terr.message);
        return CKPT_OK;
    }
    if (t.dtype != e->dtype || t.ndim != e->ndim) {
        e->problem =
            index_problemf(r->arena, "%s: rank %lld holds a %s tensor of %d dims, %s says %s of %d",
                           w->file_path, w->rank, ckpt_dtype_name(t.dtype), t.ndim, w->md_path,
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
        if (ls[d] != t.shape[d])
            e->problem = index_problemf(
                r->arena,
                "%s: rank %lld's local tensor of '%s' is not the shape its placements give",
                w->file_path, w->rank, e->key);
    if (!e->problem && nboxes > 1 && !index_ts_c_order(&t))
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
        s = index_ts_chunk(r, w->it, w->file_id, &t, nboxes > 1 ? at : 0, box, box + nd, numel, c,
                           err);
        if (s == CKPT_OK) p->chunks[p->nchunks++] = c;
    }
    ckpt_layout_shard_free(sh);
    return s;
}

static ckpt_status tc_leaf(void *ctx, const index_elem *elems, size_t n, const pk_value *v,
                           ckpt_error *err) {
    tc *w = ctx;
    ckpt_reader *r = w->r;
    ck_strbuf_reset(&w->key);
    for (size_t i = 0; i < n; i++) {
        if (i) ck_strbuf_addc(&w->key, '.');
        ck_strbuf_add(&w->key, elems[i].s, elems[i].len);
    }
    if (ck_strbuf_status(&w->key, "a key", err) != CKPT_OK) return CKPT_E_NOMEM;
    const ckpt_entry *e = index_find(r, ck_strbuf_cstr(&w->key));
    const pk_value *global = NULL, *local = ts_is_tensor_node(v) ? v : ts_dtensor_local(v, &global);
    if (e && e->index >= w->first_entry && e->index < w->first_entry + w->npend && local)
        return add_shard(w, &w->pend[e->index - w->first_entry], local, err);
    if (e || !w->first_file) return CKPT_OK;
    if (local && local != v) { /* a DTensor the metadata does not name: whole, or not read */
        ts_tensor_view t;
        int64_t g[CKPT_MAX_NDIM];
        size_t gn = 0;
        bool whole = pk_as_int_seq(global, g, CKPT_MAX_NDIM, &gn) &&
                     ts_tensor_view_of(w->it, local, &t, NULL) == CKPT_OK && gn == (size_t)t.ndim;
        for (size_t d = 0; whole && d < gn; d++)
            whole = g[d] == t.shape[d];
        if (whole) v = local; /* else: a shard without metadata, reported as unreadable */
    }
    return index_ts_add_leaf(r, w->it, w->file_id, elems, n, v, &w->key, err);
}

/* ------------------------------------------------------------------ items */

/* Walks `name` (rank `rank` of w->item) below the item key. */
static ckpt_status walk_file(tc *w, const char *name, long long rank, ckpt_error *err) {
    w->rank = rank;
    CK_TRY(index_ts_open(w->r, name, &w->it, &w->file_id, &w->file_path, err));
    index_elem top = {w->item, strlen(w->item), false};
    return index_ts_walk(w->r, w->it, w->file_id, &top, 1, w->pend ? tc_leaf : NULL, w, err);
}

/* The file rank `rank` of an item wrote: its layout's file_path (TorchSerialization), or the
 * default `<item>_<rank>.pt`.  NULL with err set when it is in another format. */
static const char *rank_file(tc *w, const pk_value *layouts, long long rank, char *buf, size_t size,
                             ckpt_error *err) {
    const pk_value *lay = NULL;
    int64_t k;
    if (layouts && layouts->type == PK_DICT && (size_t)rank < layouts->u.dict.len &&
        pk_as_int(layouts->u.dict.keys[rank], &k) && k == rank) /* the usual order */
        lay = layouts->u.dict.vals[rank];
    else
        for (size_t i = 0; layouts && layouts->type == PK_DICT && i < layouts->u.dict.len; i++)
            if (pk_as_int(layouts->u.dict.keys[i], &k) && k == rank) lay = layouts->u.dict.vals[i];
    if (!lay || lay->type == PK_NONE) {
        int n = snprintf(buf, size, "%s_%lld.pt", w->item, rank);
        if (n < 0 || (size_t)n >= size) {
            ck_fail(err, CKPT_E_FORMAT, "%s: item '%.200s': file name too long", w->md_path,
                    w->item);
            return NULL;
        }
        return buf;
    }
    const char *file = pk_as_str(pk_get(lay, "file_path"));
    const char *fmt = pk_as_str(pk_get(pk_get(lay, "serialization_format"), "type"));
    if (!file) {
        ck_fail(err, CKPT_E_FORMAT, "%s: item '%.200s' rank %lld: layout without file_path",
                w->md_path, w->item, rank);
        return NULL;
    }
    if (!fmt || strcmp(fmt, "TorchSerialization") != 0) {
        ck_fail(err, CKPT_E_UNSUPPORTED,
                "%s: item '%.200s' rank %lld: %s stored as %s: not read (only "
                "TorchSerialization)",
                w->md_path, w->item, rank, file, fmt ? fmt : "an unknown format");
        return NULL;
    }
    return file;
}

/* The entries the metadata names in `paths` (nested_path_to_metadata), made before any file
 * is walked: global shape and dtype, chunks to come. */
static ckpt_status named_entries(tc *w, const pk_value *paths, ck_arena *tmp, ckpt_error *err) {
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
            path->type != CKPT_JSON_ARRAY || path->len + 1 > TC_MAX_PATH)
            return ck_fail(err, CKPT_E_FORMAT,
                           "%s: item '%.200s': nested path %zu is not a JSON list of keys%s%s",
                           w->md_path, w->item, i, jerr.message[0] ? ": " : "", jerr.message);
        index_elem elems[TC_MAX_PATH];
        char nums[TC_MAX_PATH][24];
        elems[0] = (index_elem){w->item, strlen(w->item), false};
        ck_strbuf_reset(&w->key);
        ck_strbuf_add(&w->key, w->item, strlen(w->item));
        for (size_t j = 0; j < path->len; j++) {
            const ck_json *x = &path->u.items[j];
            if (x->type == CKPT_JSON_STRING) {
                elems[j + 1] = (index_elem){x->u.str, x->len, false};
            } else if (x->type == CKPT_JSON_NUMBER && x->is_int) {
                int len = snprintf(nums[j], sizeof nums[j], "%lld", (long long)x->u.num.i);
                elems[j + 1] = (index_elem){nums[j], (size_t)len, true};
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
        pending *p = &w->pend[w->npend++];
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
static ckpt_status settle(tc *w, ckpt_error *err) {
    ckpt_reader *r = w->r;
    for (size_t i = 0; i < w->npend; i++) {
        pending *p = &w->pend[i];
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

static void drop_pending(tc *w) {
    for (size_t i = 0; w->pend && i < w->npend; i++)
        free(w->pend[i].chunks);
    free(w->pend);
    w->pend = NULL;
    w->npend = 0;
}

/* An item metadata.pkl names: its entries, then every rank's file. */
static ckpt_status add_named_item(tc *w, const pk_value *md, long long world, ck_arena *tmp,
                                  ckpt_error *err) {
    ckpt_status s = named_entries(w, pk_get(md, "nested_path_to_metadata"), tmp, err);
    const pk_value *layouts = pk_get(md, "rank_to_layout_info");
    if (s == CKPT_OK &&
        (!layouts || layouts->type != PK_DICT || layouts->u.dict.len != (size_t)world))
        s = ck_fail(err, CKPT_E_FORMAT,
                    "%s: item '%.200s': rank_to_layout_info does not give all %lld ranks",
                    w->md_path, w->item, world);
    for (long long rank = 0; s == CKPT_OK && rank < world; rank++) {
        char buf[512];
        const char *name = rank_file(w, layouts, rank, buf, sizeof buf, err);
        w->first_file = rank == 0;
        s = name ? walk_file(w, name, rank, err) : (err && err->code ? err->code : CKPT_E_FORMAT);
    }
    if (s == CKPT_OK) s = settle(w, err);
    drop_pending(w);
    return s;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The `<item>_0.pt` files of dir whose item `md_items` (may be NULL) does not name, sorted
 * (malloc'ed names). */
static ckpt_status unnamed_files(const char *dir, const pk_value *md_items, char ***out, size_t *n,
                                 ckpt_error *err) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return ck_fail(err, CKPT_E_IO, "%s: cannot list: %s", dir, strerror(errno));
    char **v = NULL;
    size_t cap = 0;
    ckpt_status s = CKPT_OK;
    struct dirent *de;
    while (s == CKPT_OK && (de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (tc_file_rank(de->d_name) != 0 || de->d_name[0] == '.') continue;
        char item[256];
        if (len - 5 >= sizeof item) continue;
        memcpy(item, de->d_name, len - 5);
        item[len - 5] = 0;
        if (md_items && pk_get(md_items, item)) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            char **m = realloc(v, cap * sizeof *m);
            if (!m) {
                s = index_nomem(err);
                break;
            }
            v = m;
        }
        if (!(v[*n] = strdup(de->d_name)))
            s = index_nomem(err);
        else
            (*n)++;
    }
    closedir(d);
    if (*n) qsort(v, *n, sizeof *v, cmp_str);
    *out = v;
    return s;
}

/* Items without metadata: rank 0's file of each, as a load on one rank reads it. */
static ckpt_status add_unnamed(tc *w, const pk_value *md_items, ckpt_error *err) {
    char **names;
    size_t n;
    ckpt_status s = unnamed_files(w->r->dir, md_items, &names, &n, err);
    char item[256];
    for (size_t i = 0; s == CKPT_OK && i < n; i++) {
        size_t len = strlen(names[i]) - 5;
        memcpy(item, names[i], len);
        item[len] = 0;
        w->item = item;
        w->first_file = true;
        s = walk_file(w, names[i], 0, err);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return s;
}

ck_dir_kind tc_dir_probe(const char *dir, struct timespec *mtime) {
    char path[4096];
    struct stat st;
    int n = snprintf(path, sizeof path, "%s/%s", dir, TC_METADATA);
    if (n < 0 || (size_t)n >= sizeof path) return CKPT_DIR_NONE;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
        if (mtime) *mtime = st.st_mtim;
        return CKPT_DIR_MARKED;
    }
    /* without metadata.pkl (no resharder declared) nothing marks a save as complete: its
     * `<item>_0.pt` files make it an unmarked one, dated by the newest of them */
    char **names;
    size_t count;
    ck_dir_kind k = CKPT_DIR_NONE;
    if (unnamed_files(dir, NULL, &names, &count, NULL) != CKPT_OK) count = 0;
    for (size_t i = 0; i < count; i++) {
        n = snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (n > 0 && (size_t)n < sizeof path && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (mtime &&
                (k == CKPT_DIR_NONE || st.st_mtim.tv_sec > mtime->tv_sec ||
                 (st.st_mtim.tv_sec == mtime->tv_sec && st.st_mtim.tv_nsec > mtime->tv_nsec)))
                *mtime = st.st_mtim;
            k = CKPT_DIR_UNMARKED;
        }
    }
    for (size_t i = 0; i < count; i++)
        free(names[i]);
    free(names);
    return k;
}

static ckpt_status tc_add(ckpt_reader *r, ckpt_error *err) {
    char path[4096];
    struct stat st;
    int pn = snprintf(path, sizeof path, "%s/%s", r->dir, TC_METADATA);
    if (pn < 0 || (size_t)pn >= sizeof path) return CKPT_E_NOTFOUND;
    bool has_md = stat(path, &st) == 0;
    tc w = {.r = r};
    ck_strbuf_init(&w.key, 0);
    if (!has_md) { /* no resharder declared: only `<item>_<rank>.pt` files */
        char **names;
        size_t n;
        ckpt_status s = unnamed_files(r->dir, NULL, &names, &n, NULL);
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
        if (s != CKPT_OK || n == 0) {
            ck_strbuf_release(&w.key);
            return CKPT_E_NOTFOUND;
        }
        r->info.format_hint = "torch-checkpointing (no metadata.pkl: rank 0's files)";
        s = add_unnamed(&w, NULL, err);
        ck_strbuf_release(&w.key);
        return s;
    }
    char *md_path = ck_arena_strndup(r->arena, path, (size_t)pn);
    if (!md_path) return index_nomem(err);
    w.md_path = md_path;
    pk_doc *doc = NULL;
    size_t len = 0;
    ckpt_status s =
        ck_metadata_decode_file_watched(path, &r->limits, NULL, &r->io_meta, &doc, &len, err);
    ck_arena *tmp = s == CKPT_OK ? ck_arena_new(r->limits.max_metadata_bytes) : NULL;
    if (s == CKPT_OK && !tmp) s = index_nomem(err);
    const pk_value *root = doc ? pk_doc_root(doc) : NULL;
    const pk_value *items = NULL;
    int64_t world = 0;
    if (s == CKPT_OK) {
        r->info.metadata_bytes += len;
        const char *version = pk_as_str(pk_get(root, "version"));
        items = pk_get(root, "metadata");
        if (!root || root->type != PK_DICT)
            s = ck_fail(err, CKPT_E_FORMAT, "%s: not a torch-checkpointing metadata dict (a %s)",
                        md_path, root ? pk_type_name((pk_type)root->type) : "nothing");
        else if (!version || strcmp(version, "2.0") != 0)
            s = ck_fail(err, CKPT_E_UNSUPPORTED,
                        "%s: metadata version '%.40s' is not read (only \"2.0\", "
                        "torch-checkpointing 0.1)",
                        md_path, version ? version : "1.0");
        else if (!pk_as_int(pk_get(root, "world_size"), &world) || world < 1 ||
                 world > TC_MAX_WORLD)
            s = ck_fail(err, CKPT_E_FORMAT, "%s: world_size is not an int in 1..%u", md_path,
                        TC_MAX_WORLD);
        else if (!items || items->type != PK_DICT)
            s = ck_fail(err, CKPT_E_FORMAT, "%s: 'metadata' is not a dict of items", md_path);
    }
    if (s == CKPT_OK) r->info.format_hint = "torch-checkpointing (metadata.pkl)";
    for (size_t i = 0; s == CKPT_OK && i < items->u.dict.len; i++) {
        w.item = pk_as_str(items->u.dict.keys[i]);
        if (!w.item || !*w.item || strlen(w.item) != items->u.dict.keys[i]->u.str.len)
            s = ck_fail(err, CKPT_E_FORMAT, "%s: item %zu's key is not a string", md_path, i);
        else
            s = add_named_item(&w, items->u.dict.vals[i], world, tmp, err);
    }
    if (s == CKPT_OK) s = add_unnamed(&w, items, err);
    drop_pending(&w);
    ck_strbuf_release(&w.key);
    ck_arena_free(tmp);
    pk_doc_free(doc);
    return s;
}

const index_format index_format_torch_checkpointing = {
    .name = "torch-checkpointing", .add = tc_add, .file_rank = tc_file_rank};
