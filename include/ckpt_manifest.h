/* ckpt_manifest.h — the integrity manifest of a checkpoint: the XXH3-64 hash of every stored
 * item (each tensor chunk's and each object's byte range in its data file) and of the metadata
 * files, kept in a sidecar file `.ckptfs-manifest` inside the checkpoint directory.  Format:
 * docs/manifest.md.  `ckpt seal` writes one for a checkpoint written by torch, `ckpt verify
 * --data` checks it, the mount's `-o verify` checks each chunk the first time it is read.
 *
 * Conventions as in ckpt.h: ckpt_status + caller-owned ckpt_error; handles are opaque and
 * immutable once built, so a manifest may be shared by threads. */
#ifndef CKPT_MANIFEST_H
#define CKPT_MANIFEST_H

#include "ckpt.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_MANIFEST_FILE ".ckptfs-manifest"

typedef struct ckpt_manifest ckpt_manifest;

typedef struct ckpt_manifest_record {
    const char *file; /* relative to the checkpoint directory */
    uint64_t offset;
    uint64_t length;
    uint64_t hash; /* XXH3-64 (seed 0) of the `length` bytes at `offset` */
} ckpt_manifest_record;

/* Progress of long operations: bytes done of total.  Called from worker threads, one call at
 * a time. */
typedef void (*ckpt_progress_fn)(void *ctx, uint64_t done, uint64_t total);

/* Hashes every stored item the reader references and its metadata file(s), with `threads`
 * threads (0: one per online CPU).  Items shared by several entries are hashed once. */
ckpt_status ckpt_manifest_build(ckpt_reader *r, unsigned threads, ckpt_progress_fn progress,
                                void *ctx, ckpt_manifest **out, ckpt_error *err);
/* Writes `dir`/.ckptfs-manifest atomically (temporary file, fsync, rename). */
ckpt_status ckpt_manifest_save(const ckpt_manifest *m, const char *dir, ckpt_error *err);
/* Reads `dir`/.ckptfs-manifest; CKPT_E_NOTFOUND when there is none, CKPT_E_FORMAT (with the
 * byte offset) or CKPT_E_CHECKSUM when it is damaged. */
ckpt_status ckpt_manifest_load(const char *dir, ckpt_manifest **out, ckpt_error *err);
void ckpt_manifest_free(ckpt_manifest *m);

size_t ckpt_manifest_num_records(const ckpt_manifest *m);
/* Records sorted by file name, then offset; at most one record starts at an offset of a file
 * (an item stored as a safetensors blob is recorded as the whole blob, to the end of its
 * file, so a record may be longer than the item's recorded length). */
const ckpt_manifest_record *ckpt_manifest_record_at(const ckpt_manifest *m, size_t i);
/* The record of `file` that starts at `offset`, or NULL.  It covers an item when its length
 * is at least the item's. */
const ckpt_manifest_record *ckpt_manifest_find(const ckpt_manifest *m, const char *file,
                                               uint64_t offset);

/* XXH3-64 of [offset, offset+length) of fd. */
ckpt_status ckpt_hash_range(int fd, const char *name, uint64_t offset, uint64_t length,
                            uint64_t *hash, ckpt_error *err);

/* Re-hashes every record from the files in `dir` (threads as above) and also checks that
 * every item `r` references (r may be NULL) has a record.  report() is called once per
 * problem (under a lock): `rec` is the record (NULL for an unsealed item), `err` says what
 * is wrong (mismatch with both hashes, missing file, short file...). *failures counts them. */
typedef void (*ckpt_manifest_report_fn)(void *ctx, const ckpt_manifest_record *rec,
                                        const ckpt_error *err);
ckpt_status ckpt_manifest_verify(const char *dir, const ckpt_manifest *m, ckpt_reader *r,
                                 unsigned threads, ckpt_manifest_report_fn report,
                                 ckpt_progress_fn progress, void *ctx, uint64_t *failures,
                                 ckpt_error *err);

#ifdef __cplusplus
}
#endif
#endif /* CKPT_MANIFEST_H */
