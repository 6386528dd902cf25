/* transform.h — undoing DCP stream transforms (`_StorageInfo.transform_descriptors`), e.g.
 * "stream.zstd/1".  Descriptors are applied in list order; unknown ones are rejected. */
#ifndef CK_TORCHSAVE_TRANSFORM_H
#define CK_TORCHSAVE_TRANSFORM_H

#include "ckpt.h"
#include "util/source.h"

#include <stdint.h>

/* `descriptors`: comma-separated list as stored by the index.  Reads all of `src`, returns a
 * malloc'ed buffer of the decoded bytes (at most max_out bytes, else CKPT_E_LIMIT). */
ckpt_status ts_transform_decode(const ck_source *src, const char *descriptors, uint64_t max_out,
                                uint8_t **out, size_t *out_len, ckpt_error *err);
/* CKPT_OK if every descriptor is known (used by verify). */
ckpt_status ts_transform_check(const char *descriptors, ckpt_error *err);

#endif
