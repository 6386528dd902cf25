/* metadata_stream.h — a `.metadata` file as a pickle input read piece by piece (pk_input with
 * `read`): the decoder's window slides over the file, so no buffer of the file's size is
 * ever allocated or faulted in (a 1 M-chunk `.metadata` is ~200 MB).  Read errors are kept
 * and reported by ck_metadata_stream_finish, naming the file and offset. */
#ifndef CK_INDEX_METADATA_STREAM_H
#define CK_INDEX_METADATA_STREAM_H

#include "ckpt.h"
#include "pickle/pickle.h"
#include "util/source.h"

#include <stdint.h>

typedef struct ck_metadata_stream ck_metadata_stream;

/* Opens `path` (a regular file of at most `max` bytes).  CKPT_E_NOTFOUND when it does not
 * exist, CKPT_E_LIMIT when it is larger than max.  Each pread's returned bytes are added to
 * `count` (may be NULL). */
ckpt_status ck_metadata_stream_open(const char *path, uint64_t max, ck_io_count *count,
                                    ck_metadata_stream **out, ckpt_error *err);
/* The input to decode (valid until _free). */
const pk_input *ck_metadata_stream_input(const ck_metadata_stream *s);
/* CKPT_OK if every read succeeded, else the read error (file and offset).  Check it before
 * trusting a decoder error: a failed read shows to the decoder as a truncated input. */
ckpt_status ck_metadata_stream_finish(ck_metadata_stream *s, ckpt_error *err);
void ck_metadata_stream_free(ck_metadata_stream *s);

#endif
