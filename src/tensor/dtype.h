/* dtype.h — private dtype helpers (the public ones are in ckpt.h) shared by the index and
 * torch.save decoding. */
#ifndef CK_TENSOR_DTYPE_H
#define CK_TENSOR_DTYPE_H

#include "ckpt.h"

/* "FloatStorage" -> CKPT_DTYPE_FLOAT32 (torch.save's typed storages, _rebuild_tensor_v2). */
ckpt_dtype ck_dtype_from_storage_class(const char *cls);

#endif
