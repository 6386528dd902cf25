/* metadata_stream.h — reading a `.metadata` file while it is decoded: a helper thread reads
 * the file into one buffer piece by piece and the pickle decoder (pk_input.wait) waits only
 * for bytes that are not there yet, so reading and decoding overlap.  Small files are read
 * in one go on the calling thread. */
#ifndef CKPT_INDEX_METADATA_STREAM_H
#define CKPT_INDEX_METADATA_STREAM_H

#include "ckpt.h"
#include "pickle/pickle.h"

#include <stdint.h>

typedef struct ckpt_metadata_stream ckpt_metadata_stream;

/* Opens `path` (a regular file of at most `max` bytes) and starts reading it.
 * CKPT_E_NOTFOUND when it does not exist, CKPT_E_LIMIT when it is larger than max. */
ckpt_status ckpt_metadata_stream_open(const char *path, uint64_t max, ckpt_metadata_stream **out,
                                      ckpt_error *err);
/* The input to decode (valid until _free). */
const pk_input *ckpt_metadata_stream_input(const ckpt_metadata_stream *s);
/* Waits for the reading to end; CKPT_OK if the whole file was read, else the read error
 * (which names the file and offset).  Call it before trusting a decoder error: a failed read
 * shows to the decoder as a truncated input. */
ckpt_status ckpt_metadata_stream_finish(ckpt_metadata_stream *s, ckpt_error *err);
/* Stops reading (if still running) and frees the buffer. */
void ckpt_metadata_stream_free(ckpt_metadata_stream *s);

#endif
