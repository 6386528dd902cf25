/* mcore_flat.h — Megatron's N-D flattened tensors (mcore_flat.c): mcore_note remembers the
 * original shapes a metadata pickle's `mcore_data` gives (copied: the document may be freed);
 * mcore_reformulate (the DCP format's finish) gives those entries their original shape back,
 * with chunks tiling it. */
#ifndef CK_INDEX_MCORE_FLAT_H
#define CK_INDEX_MCORE_FLAT_H

#include "index/reader_i.h"
#include "pickle/pickle.h"

ckpt_status mcore_note(ckpt_reader *r, const char *file, const pk_value *root, ckpt_error *err);
ckpt_status mcore_reformulate(ckpt_reader *r, ckpt_error *err);

#endif
