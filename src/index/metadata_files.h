/* metadata_files.h — finding and reading a checkpoint's metadata files, shared by the index
 * (ckpt_reader_open) and the JSON dump (ckpt_metadata_dump_json): one set of limits, one way
 * to read and decode a metadata file, one way to list rank-local `__<r>.metadata` files. */
#ifndef CK_INDEX_METADATA_FILES_H
#define CK_INDEX_METADATA_FILES_H

#include "ckpt.h"
#include "pickle/pickle.h"
#include "util/source.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* `given` (may be NULL) with every zero field replaced by its documented default. */
void ck_limits_resolve(ckpt_limits *out, const ckpt_limits *given);
/* Pickle-decoder limits for a metadata pickle of `len` bytes under resolved limits `l`. */
pk_limits ck_metadata_pk_limits(const ckpt_limits *l, size_t len);
/* Decodes the metadata pickle in `path` (a regular file of at most l->max_metadata_bytes, read
 * through a window sliding over it: metadata_stream.h) under the resolved limits `l`; *len
 * (may be NULL) gets the file's size.  Errors name the file; a failed read is reported as
 * such, not as the truncated pickle the decoder saw.  CKPT_E_NOTFOUND when it does not
 * exist. */
ckpt_status ck_metadata_decode_file(const char *path, const ckpt_limits *l, pk_doc **doc,
                                    size_t *len, ckpt_error *err);
/* The same, decoding under `watch` (see pk_decode_watched; may be NULL).  When the file
 * fails to read after the pickle decoded, watch->revoke is called before the document is
 * freed.  What each pread returned is added to `count` (may be NULL). */
ckpt_status ck_metadata_decode_file_watched(const char *path, const ckpt_limits *l,
                                            const pk_watch *watch, ck_io_count *count, pk_doc **doc,
                                            size_t *len, ckpt_error *err);
/* torch pickles its metadata with protocol 2 or later: PROTO (0x80) and the protocol.  Anything
 * else is not a metadata file, and the decoder's messages (opcode bytes, argument lengths)
 * would echo bytes of it: CKPT_E_FORMAT saying so without them.  buf: the file's first len
 * bytes (at least 2 unless the file is shorter). */
ckpt_status index_metadata_check_head(const char *path, const uint8_t *buf, size_t len,
                                      ckpt_error *err);
/* Ranks r of the `__<r>.metadata` files in dir, sorted ascending (malloc'ed; may be empty). */
ckpt_status ck_metadata_list_ranks(const char *dir, long long **ranks, size_t *count,
                                   ckpt_error *err);

/* What marks a directory as a checkpoint (each format's probe; ck_checkpoint_dir_probe in
 * formats.h asks them in order). */
typedef enum ck_dir_kind {
    CK_DIR_NONE = 0, /* not a checkpoint, or one still being written */
    CK_DIR_MARKED,   /* complete by the writer's own mark: `.metadata` or `__0.metadata`
                          (written last, renamed into place), or a HuggingFace index json that
                          parses and names only files that exist */
    CK_DIR_UNMARKED, /* `*.safetensors` files and nothing that says they are all there
                          (HuggingFace storage without an index json) */
} ck_dir_kind;

#endif
