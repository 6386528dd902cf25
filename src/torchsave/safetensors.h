/* safetensors.h — reading a safetensors blob's header at a given offset of a source: the
 * format DCP uses for SerializationFormat.SAFETENSORS data files (one blob after the BYTE_IO
 * items, dcp-format.md §11.1) and HuggingFace storage (§11.2).
 *
 * Layout: u64 little-endian header length N, N bytes of JSON (possibly space-padded), then the
 * data section.  Each tensor entry gives dtype, shape and data_offsets [begin, end) relative to
 * the data section; "__metadata__" is a string -> string map (DCP_SHARDING_INFO, ...).
 *
 * Validation (as the safetensors crate does, except that the data section may be followed by
 * more bytes, since DCP records no blob length): header length bounded, strict JSON, shapes of
 * non-negative integers, data_offsets of known dtypes hold exactly numel * itemsize bytes,
 * tensors tile the data section from 0 without gaps or overlaps, and everything lies inside
 * the source.  Unknown dtype strings are kept (dtype CKPT_DTYPE_INVALID, size unchecked) so the
 * other tensors stay readable. */
#ifndef CK_TORCHSAVE_SAFETENSORS_H
#define CK_TORCHSAVE_SAFETENSORS_H

#include "ckpt.h"
#include "util/source.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ts_safetensors ts_safetensors;

typedef struct ts_st_tensor {
    const char *name; /* NUL-terminated; name_len bytes (a \u0000 escape is kept) */
    size_t name_len;
    const char *dtype_name; /* as written: "F32", "BF16", "F8_E4M3", ... */
    ckpt_dtype dtype;       /* CKPT_DTYPE_INVALID when ckpt has no such dtype */
    int ndim;
    const int64_t *shape; /* ndim values; NULL when ndim == 0 */
    uint64_t numel;       /* product of shape (1 for 0-d) */
    uint64_t begin, end;  /* data_offsets as written (relative to the data section) */
    uint64_t data_offset; /* first byte, relative to the source window */
    uint64_t size;        /* end - begin */
} ts_st_tensor;

#define TS_SAFETENSORS_MAX_HEADER 100000000u /* the safetensors crate's limit */

/* N, the header length a blob starts with (8 bytes, little endian). */
static inline uint64_t ts_safetensors_len_prefix(const uint8_t p[8]) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | p[i];
    return n;
}

/* Parses the blob starting at `offset` of `src`.  max_header: largest N accepted (0 =
 * TS_SAFETENSORS_MAX_HEADER).  Errors: CKPT_E_FORMAT, CKPT_E_RANGE (header or data outside
 * the source), CKPT_E_LIMIT (header length, ndim, memory), CKPT_E_IO, CKPT_E_NOMEM; messages
 * start with "safetensors at offset X:" (X relative to the window).  *out is NULL on failure. */
ckpt_status ts_safetensors_open(const ck_source *src, uint64_t offset, uint64_t max_header,
                                ts_safetensors **out, ckpt_error *err);
/* The same, except that the data section may pass the end of the source: for a file whose
 * tensors are read later through bounds-checked windows, so a truncated file still lists
 * them (and the tensors whose bytes are all there stay readable). */
ckpt_status ts_safetensors_open_header(const ck_source *src, uint64_t offset, uint64_t max_header,
                                       ts_safetensors **out, ckpt_error *err);
void ts_safetensors_free(ts_safetensors *st);

uint64_t ts_safetensors_header_len(const ts_safetensors *st); /* N */
uint64_t ts_safetensors_data_start(const ts_safetensors *st); /* offset + 8 + N */
uint64_t ts_safetensors_data_len(const ts_safetensors *st);   /* largest `end` */

/* Tensors in header order (the "__metadata__" entry excluded). */
size_t ts_safetensors_num_tensors(const ts_safetensors *st);
const ts_st_tensor *ts_safetensors_tensor(const ts_safetensors *st, size_t i);
const ts_st_tensor *ts_safetensors_find(const ts_safetensors *st, const char *name);

/* "__metadata__" entries in header order; values are NUL-terminated strings. */
size_t ts_safetensors_num_metadata(const ts_safetensors *st);
const char *ts_safetensors_metadata_key(const ts_safetensors *st, size_t i);
const char *ts_safetensors_metadata_value(const ts_safetensors *st, size_t i);
/* The value for `key` (the last one if repeated), or NULL. */
const char *ts_safetensors_metadata(const ts_safetensors *st, const char *key);

#endif
