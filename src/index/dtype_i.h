/* dtype_i.h — private dtype helpers shared by the index and torch.save decoding. */
#ifndef CKPT_INDEX_DTYPE_I_H
#define CKPT_INDEX_DTYPE_I_H

#include "ckpt.h"

/* "FloatStorage" -> CKPT_DTYPE_FLOAT32 (torch.save's typed storages, _rebuild_tensor_v2). */
ckpt_dtype ckpt_dtype_from_storage_class(const char *cls);

#endif
