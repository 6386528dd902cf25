/* archive.h — the torch.save archives DCP stores per item: a tensor chunk (data.pkl calling
 * torch._utils._rebuild_tensor_v2 / _v3 on storage "0") or a pickled value, with the records
 * torch 2.15 writes (.format_version, .storage_alignment, byteorder, version,
 * .data/serialization_id). */
#ifndef CK_SAVE_ARCHIVE_H
#define CK_SAVE_ARCHIVE_H

#include "save/device.h"
#include "save/save_i.h"
#include "save/sink.h"

/* Pickles (protocol 2) a C-contiguous CPU tensor whose storage is record data/<key>, as
 * torch.Tensor.__reduce_ex__ does: _rebuild_tensor_v2 with a typed storage class, or
 * _rebuild_tensor_v3 with an UntypedStorage and the dtype for the dtypes that have no storage
 * class (uint16/32/64, float8 ...). */
void save_pickle_tensor(pkw *w, ckpt_dtype dt, int ndim, const int64_t *sizes, const char *key);

/* Writes one archive for a C-contiguous tensor of `ndim` dims `sizes` at the sink position;
 * *len = archive bytes.  `serial` seeds the serialization id.  `dev` NULL: `data` is host
 * memory; else device memory, streamed to the sink through that pipeline. */
ckpt_status save_archive_tensor(save_sink *s, ckpt_dtype dt, int ndim, const int64_t *sizes,
                                const void *data, uint64_t nbytes, save_dev *dev, uint64_t serial,
                                uint64_t *len, ckpt_error *err);
ckpt_status save_archive_value(save_sink *s, const ckpt_save_value *v, uint64_t serial,
                               uint64_t *len, ckpt_error *err);

#endif
