/* dcp.h — the DCP storage format's entry for a `.metadata` held in memory (fuzzing, tests). */
#ifndef CK_INDEX_DCP_H
#define CK_INDEX_DCP_H

#include "index/reader_i.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Adds the metadata pickle buf[0, len) (named `name` in messages) to r's index, as the only
 * metadata file; lockstep: see CKPT_OPEN_LOCKSTEP.  Complete the index with
 * index_complete(r, &index_format_dcp, err). */
ckpt_status dcp_add_buffer(ckpt_reader *r, const char *name, const uint8_t *buf, size_t len,
                           bool lockstep, ckpt_error *err);

#endif
