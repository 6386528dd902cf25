/* value.h — turning a decoded pickle (pk_value tree) into the public ckpt_value tree of a
 * non-tensor entry, and rendering pickle trees as JSON (the safe `.metadata` dump). */
#ifndef CK_VALUE_H
#define CK_VALUE_H

#include "ckpt.h"
#include "pickle/pickle.h"
#include "torchsave/item.h"

/* Builds a ckpt_object from the root of an opened torch.save item.  Takes ownership of
 * `item` (freed with the object, also on failure).  Tensor nodes inside become
 * CKPT_VALUE_TENSOR values readable through ckpt_value_tensor_read.  max_bytes (0:
 * unbounded) bounds the value tree made (its values, strings and the conversion's table of
 * shared nodes): past it, CKPT_E_LIMIT. */
ckpt_status ck_object_from_item(ts_item *item, uint64_t max_bytes, ckpt_object **out,
                                ckpt_error *err);

/* Builds a ckpt_object from a bare pickle tree, without a torch.save item: tensor rebuild
 * nodes then stay OBJECTs.  Strings are copied, so the pickle may be freed afterwards.  For
 * tests and tools that decode pickles themselves; max_bytes as above. */
ckpt_status ck_object_from_pickle(const pk_value *root, uint64_t max_bytes, ckpt_object **out,
                                  ckpt_error *err);

/* JSON rendering of a raw pickle tree (for `ckpt dump-metadata`), malloc'ed.  Depth is bounded
 * by max_depth (cycles and hostile nesting end in CKPT_E_LIMIT), output bytes and nodes visited
 * by `budget` (0: CK_PK_JSON_RENDER_MIN; shared memo references can expand a small pickle
 * exponentially, which then ends in CKPT_E_LIMIT). */
ckpt_status pk_to_json(const pk_value *v, unsigned max_depth, size_t budget, char **out,
                       ckpt_error *err);
/* The budget pk_to_json gets for a document of doc_bytes decoded bytes (pk_doc_bytes_used):
 * CK_PK_JSON_RENDER_FACTOR times that, at least CK_PK_JSON_RENDER_MIN. */
size_t pk_json_budget(uint64_t doc_bytes);

#endif
