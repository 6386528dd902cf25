/* item.h — one torch.save item (a "torch.save archive") as DCP stores it: a byte range of a
 * data file, optionally wrapped by stream transforms, holding a zip whose data.pkl describes a
 * tensor or a Python object and whose data/<key> records hold tensor storages.
 *
 * ts_item_open undoes transforms (into memory), opens the zip, decodes data.pkl with the
 * data-only pickle decoder and reads the `byteorder` record.  ts_tensor_view interprets a
 * `torch._utils._rebuild_tensor_v2/_v3` (or `_rebuild_parameter`) node as a strided view of
 * one storage record. */
#ifndef CK_TORCHSAVE_ITEM_H
#define CK_TORCHSAVE_ITEM_H

#include "ckpt.h"
#include "pickle/pickle.h"
#include "util/source.h"
#include "zip/zip.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct ts_item ts_item;

typedef struct ts_open_options {
    const char *transforms;     /* comma-separated transform descriptors, or NULL */
    uint64_t max_decoded_bytes; /* bound for transformed items decoded into memory */
    uint64_t max_pickle_bytes;  /* bound for data.pkl */
    const pk_limits *pickle_limits;
    /* 0, or the memory the item may take in all (CKPT_E_LIMIT past it): the bytes its
     * transforms decode into memory, data.pkl read while it is decoded and the decoded values
     * (pk_limits.max_bytes lowered to what is left; the decoder's transient stack and memo are
     * bounded by that same figure beside it) */
    uint64_t max_memory;
} ts_open_options;

/* `src` describes the stored item; its `name` is used in messages.  The item keeps a copy of
 * *src (the fd must stay open while the item lives). */
ckpt_status ts_item_open(const ck_source *src, const ts_open_options *opts, ts_item **out,
                         ckpt_error *err);
void ts_item_free(ts_item *it);

const pk_value *ts_item_root(const ts_item *it); /* decoded data.pkl */
const zip_archive *ts_item_zip(const ts_item *it);
bool ts_item_big_endian(const ts_item *it); /* byteorder record says "big" */
/* The source the zip lives in: the original window, or the decoded memory buffer. */
const ck_source *ts_item_source(const ts_item *it);
bool ts_item_is_decoded(const ts_item *it); /* transforms were undone into memory */
/* Bytes the open item holds: its transforms' decoded bytes and the decoded pickle's values
 * (what ts_open_options.max_memory counted, but data.pkl, freed once decoded). */
uint64_t ts_item_memory(const ts_item *it);

typedef struct ts_tensor_view {
    ckpt_dtype dtype;
    int ndim;
    int64_t shape[CKPT_MAX_NDIM];
    int64_t stride[CKPT_MAX_NDIM]; /* in elements */
    int64_t storage_offset;        /* in elements */
    const char *storage_key;       /* record name under data/ */
    uint64_t storage_numel;        /* elements in the storage */
    const zip_record *record;      /* data/<key>, validated: size == numel * itemsize */
} ts_tensor_view;

/* Interprets `v` (a rebuild-tensor object node from this item's pickle) and validates that
 * every addressed element lies inside the storage record. */
ckpt_status ts_tensor_view_of(const ts_item *it, const pk_value *v, ts_tensor_view *out,
                              ckpt_error *err);
/* True when `v` is an object node built by one of torch's tensor rebuild functions. */
bool ts_is_tensor_node(const pk_value *v);

/* The local tensor (a rebuild-tensor node) of a pickled DTensor — torch.save writes one as
 * _rebuild_from_type_v2(_rebuild_wrapper_subclass, DTensor, (DTensor, dtype, size, ...),
 * state holding "_local_tensor") — or NULL when v is none; *global (may be NULL) gets the
 * wrapper's size (the global shape). */
const pk_value *ts_dtensor_local(const pk_value *v, const pk_value **global);

/* Copies the view's elements in C order into dst (dst_size >= numel*itemsize), swapping
 * bytes when the archive is big-endian. */
ckpt_status ts_tensor_copy(const ts_item *it, const ts_tensor_view *view, void *dst,
                           size_t dst_size, ckpt_error *err);

#endif
