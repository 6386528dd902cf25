/* image.h — a checkpoint's metadata files as one blob of bytes (an "image"), so that one
 * process reads them and others index the checkpoint from the blob without reading any
 * metadata file (the collective loader: one rank reads, its transport carries the blob to the
 * others, every rank builds the same index).  DCP metadata only: `.metadata`, or the
 * rank-local `__<r>.metadata` files; a directory in another format has no image (each
 * process opens it with ckpt_reader_open).
 *
 * The blob: "CKPTIMG1", u64 nfiles, then per file u64 name length, u64 data length, the name,
 * the data (host byte order: the processes of one job share it).  A blob is checked before
 * use (bounds, names), as any input. */
#ifndef CK_INDEX_IMAGE_H
#define CK_INDEX_IMAGE_H

#include "ckpt.h"

#include <stddef.h>
#include <stdint.h>

/* A parsed blob (pointers into it). */
typedef struct index_image_file {
    const char *name; /* not NUL-terminated: name_len */
    size_t name_len;
    const uint8_t *data;
    uint64_t len;
} index_image_file;
typedef struct index_image {
    index_image_file *files;
    size_t n;
} index_image;

/* Reads the metadata files of `dir` (`.metadata`, else every `__<r>.metadata` in rank order)
 * whole into a new blob (*blob malloc'ed, *len), under the limits `limits` (resolved or
 * NULL), with the errors the index would report for them (missing, too large, a failed
 * read: file and offset).  CKPT_E_NOTFOUND with an empty message when `dir` holds neither (or
 * is not a directory): no image, open it the usual way.  *read gets what the preads
 * returned (bytes_read_metadata, preads_metadata; the data fields 0). */
ckpt_status index_image_read(const char *dir, const ckpt_limits *limits, uint8_t **blob,
                             size_t *len, ckpt_reader_stats *read, ckpt_error *err);

/* Opens and indexes `dir` as ckpt_reader_open would, with its metadata files taken from
 * blob[0, len) instead of read (none is opened; data files are opened lazily as always).
 * Every file of the image must have the same size in this process's `dir` (a stat, not a
 * read): otherwise CKPT_E_INVAL, "...: ranks see different checkpoint metadata".  `read`
 * (may be NULL) is added to the reader's metadata counters: the preads that made the blob,
 * when this process made it.  The blob is not kept: free it after the call. */
ckpt_status index_reader_open_image(const char *dir, const ckpt_open_options *opts,
                                    const uint8_t *blob, size_t len, const ckpt_reader_stats *read,
                                    ckpt_reader **out, ckpt_error *err);

/* Opens `dir` as ckpt_reader_open would, every metadata read of the index build (those
 * counted as metadata: bytes_read_metadata) going through `tap` (util/iotap.h): a recorder
 * keeps them, for other processes to open the same checkpoint from its blob with a replayer,
 * reading no metadata file.  For formats without DCP metadata (HuggingFace safetensors
 * storage, torch.save files and `.bin` shards, torch-checkpointing).  The tap is not kept. */
struct ck_io_tap;
ckpt_status index_reader_open_tapped(const char *dir, const ckpt_open_options *opts,
                                     struct ck_io_tap *tap, ckpt_reader **out, ckpt_error *err);

/* Parses blob[0, len) into *img (img->files malloc'ed, free() it; pointers into the blob):
 * CKPT_E_FORMAT when it is not a well-formed image. */
ckpt_status index_image_parse(const uint8_t *blob, size_t len, index_image *img, ckpt_error *err);

/* For the walkers (dcp.c), while r->image is set: the file `name` of the image. */
const index_image_file *index_image_find(const index_image *img, const char *name);

#endif
