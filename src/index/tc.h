/* tc.h — the torch-checkpointing walker (docs/dcp-support.md "torch-checkpointing"), one format
 * behind the seam in three files by job: torch_checkpointing.c (metadata.pkl, the items and
 * their files, the directory probe), tc_shard.c (the DTensors metadata.pkl names: entries of
 * their global shape, each rank's local tensor placed by mesh and placements), tc_items.c (the
 * item files other than torch.save: safetensors, JSON, raw bytes). */
#ifndef CK_INDEX_TC_H
#define CK_INDEX_TC_H

#include "index/builder.h"
#include "index/torchsave_walk.h"
#include "util/strbuf.h"

#define TC_METADATA "metadata.pkl"
#define TC_MAX_WORLD (1u << 20)
#define TC_MAX_PATH 62 /* elements of a nested path (the walker's depth, item key included) */

/* An item file's SerializationFormat (checkpoint_layout.py). */
typedef enum tc_fmt { TC_TORCH = 0, TC_SAFETENSORS, TC_JSON, TC_RAW } tc_fmt;

typedef struct tc_pending {
    size_t entry;           /* index in r->entries */
    const pk_value *groups; /* list of {sharding_metadata, ranks} */
    ck_chunk **chunks;      /* collected over the ranks' files (malloc'ed vector) */
    size_t nchunks, cap;
} tc_pending;

typedef struct tc {
    ckpt_reader *r;
    const char *md_path; /* metadata.pkl's path, or NULL */
    /* the item being walked */
    const char *item;
    size_t first_entry; /* entries [first_entry, first_entry + npend) are pend[] */
    tc_pending *pend;
    size_t npend;
    long long rank;
    bool first_file; /* values and unnamed tensors come from this file */
    ts_item *it;
    int32_t file_id;
    const char *file_path;
    ck_strbuf key;
} tc;

/* A rank's local tensor of one entry: a torch.save view (view != NULL) or the C-order
 * little-endian bytes of a safetensors record at data_offset of file_id. */
typedef struct tc_local {
    ckpt_dtype dtype;
    int ndim;
    const int64_t *shape;
    const ts_item *it;
    const ts_tensor_view *view;
    uint64_t data_offset;
} tc_local;

/* tc_shard.c */
/* The entries metadata.pkl names in `paths` (an item's nested_path_to_metadata), made before
 * any file is walked: global shape and dtype, chunks to come (w->pend). */
ckpt_status tc_named_entries(tc *w, const pk_value *paths, ck_arena *tmp, ckpt_error *err);
/* The pending entry of key `key`, or NULL. */
tc_pending *tc_pending_of(tc *w, const char *key);
/* The chunks rank w->rank's local tensor gives pending entry p. */
ckpt_status tc_add_shard(tc *w, tc_pending *p, const tc_local *local, ckpt_error *err);
/* The chunks collected for the item's named entries, into the index; then w->pend freed. */
ckpt_status tc_settle(tc *w, ckpt_error *err);
void tc_drop_pending(tc *w);

/* tc_items.c: rank w->rank's file `name` of item w->item in a format other than torch.save
 * (JSON and raw bytes: rank 0's only). */
ckpt_status tc_walk_safetensors(tc *w, const char *name, ckpt_error *err);
ckpt_status tc_add_json(tc *w, const char *name, ckpt_error *err);
ckpt_status tc_add_raw(tc *w, const char *name, ckpt_error *err);

#endif
