/* torchsave_walk.h — the torch.save file walker of torchsave_file.c, for formats whose data
 * files are torch.save archives (torch_checkpointing.c): open one file of the checkpoint
 * directory, walk its pickle as torch's flatten_state_dict traverses a state dict, and make
 * entries and chunks of what it meets. */
#ifndef CK_INDEX_TORCHSAVE_WALK_H
#define CK_INDEX_TORCHSAVE_WALK_H

#include "index/builder.h"
#include "torchsave/item.h"
#include "util/strbuf.h"

/* Opens torch.save file `name` of r->dir: *out is owned by r (value entries point into its
 * pickle), *file_id its data file, *path (may be NULL) its path for messages.  A legacy
 * (non-zip) file is CKPT_E_UNSUPPORTED naming it. */
ckpt_status index_ts_open(ckpt_reader *r, const char *name, ts_item **out, int32_t *file_id,
                          const char **path, ckpt_error *err);

/* One leaf the walk meets: its path elements (the walk's prefix first) and its value. */
typedef ckpt_status (*index_ts_leaf_fn)(void *ctx, const index_elem *elems, size_t n,
                                        const pk_value *v, ckpt_error *err);
/* Walks the file's pickle below the path elements `prefix` (nprefix may be 0), calling fn
 * (NULL: index_ts_add_leaf) on every leaf. */
ckpt_status index_ts_walk(ckpt_reader *r, ts_item *it, int32_t file_id, const index_elem *prefix,
                          size_t nprefix, index_ts_leaf_fn fn, void *ctx, ckpt_error *err);
/* The same below a decoded value of another source (a JSON document converted: no tensors),
 * its entries' source file_id. */
ckpt_status index_ts_walk_value(ckpt_reader *r, const pk_value *root, int32_t file_id,
                                const index_elem *prefix, size_t nprefix, ckpt_error *err);
/* The entry of a leaf (the elements joined with '.' as its key, built in *keybuf): a tensor
 * read in place, or a value; nothing when the key is taken. */
ckpt_status index_ts_add_leaf(ckpt_reader *r, ts_item *it, int32_t file_id, const index_elem *elems,
                              size_t n, const pk_value *v, ck_strbuf *keybuf, ckpt_error *err);
/* Fills chunk c (offsets, sizes: ndim values kept by the caller) with numel elements of view
 * t from its element elem_offset (which needs a C-order view when not 0) in file_id. */
ckpt_status index_ts_chunk(ckpt_reader *r, const ts_item *it, int32_t file_id,
                           const ts_tensor_view *t, uint64_t elem_offset, const int64_t *offsets,
                           const int64_t *sizes, uint64_t numel, ck_chunk *c, ckpt_error *err);

/* Whether a tensor view is laid out in C order (size-1 dims may have any stride). */
bool index_ts_c_order(const ts_tensor_view *t);

#endif
