/* metadata_walk.h — the walk of a decoded Metadata pickle into the reader's index, in parts:
 * state_dict_metadata, then planner_data, then storage_data, each given as runs of (key,
 * value) pairs in pickle order.  ck_walk_doc walks a whole decoded document this
 * way; metadata_overlap.c feeds the same steps the pairs of each SETITEMS batch while the rest
 * of the pickle is still being decoded.  The same pairs in the same order give the same
 * index either way. */
#ifndef CK_INDEX_METADATA_WALK_H
#define CK_INDEX_METADATA_WALK_H

#include "index/builder.h"
#include "pickle/pickle.h"

#include <stddef.h>

typedef struct ck_walk ck_walk;

/* Pairs i < n: key k[i * stride], value v[i * stride] (a dict's arrays: stride 1; the
 * interleaved items of a SETITEMS batch: k = kv, v = kv + 1, stride 2). */
typedef struct ck_pairs {
    pk_value *const *k;
    pk_value *const *v;
    size_t stride;
    size_t n;
} ck_pairs;

/* Adds one decoded metadata pickle (of `file`, for messages) to the index. */
ckpt_status ck_walk_doc(ckpt_reader *r, const char *file, const pk_doc *doc, ckpt_error *err);

/* A walk adding to r (messages name `file`); NULL when out of memory. */
ck_walk *ck_walk_new(ckpt_reader *r, const char *file);
void ck_walk_free(ck_walk *w);
/* Records the root's class, version and format hints in r->info. */
void ck_walk_note_root(ckpt_reader *r, const pk_value *root, const pk_value *sdm);
/* state_dict_metadata pairs [base, base + p.n), on `threads` threads (1: this one only). */
ckpt_status ck_walk_sdm(ck_walk *w, ck_pairs p, size_t base, unsigned threads, ckpt_error *err);
/* After the last state_dict_metadata pairs: the items of keys seen before them. */
ckpt_status ck_walk_sdm_end(ck_walk *w, ckpt_error *err);
/* planner_data pairs (after ck_walk_sdm_end). */
ckpt_status ck_walk_planner(ck_walk *w, ck_pairs p, ckpt_error *err);
/* storage_data pairs (after ck_walk_sdm_end). */
ckpt_status ck_walk_storage(ck_walk *w, ck_pairs p, ckpt_error *err);

#endif
