/* iotap.h — a tap on the metadata reads of one reader's open, so that one process reads a
 * checkpoint's metadata and others index it from the same bytes without reading (the
 * collective loader for formats whose metadata is spread over many files: a HuggingFace index
 * json and every `*.safetensors` header, the zip directory and data.pkl of each torch.save
 * file, torch-checkpointing's metadata.pkl).  A *recorder* passes each pread through and keeps
 * what it returned; its log becomes a blob; a *replayer* made from the blob answers the same
 * preads from it.  The walkers are deterministic in the bytes they read (and the directory
 * entries and file sizes they see), so a process that sees the same checkpoint asks for the
 * same ranges; a range the blob lacks, or a file whose size here is not the size the recorder
 * saw, is a *miss* (errno CK_ETAPMISS): this process sees different metadata.
 *
 * A tap is attached through the ck_io_count of the reads it taps (ck_io_count.tap): the
 * reader's metadata counter, while it is opened.  Files are named by the last component of
 * the source name (every metadata file of a checkpoint lies in its directory), so processes
 * that see the checkpoint under different paths agree.
 *
 * The blob: "CKPTTAP1", u64 nfiles, then per file u64 name length, u64 end of file (the
 * lowest offset where a pread returned 0, or UINT64_MAX), u64 its size (fstat when first
 * read), u64 number of ranges, the name, and
 * per range (ascending, disjoint, not adjacent) u64 offset, u64 length, the bytes (host byte
 * order: the processes of one job share it).  A blob is checked before use, as any input. */
#ifndef CK_UTIL_IOTAP_H
#define CK_UTIL_IOTAP_H

#include "ckpt.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* errno of a replayed read the blob cannot answer (no pread returns it). */
#define CK_ETAPMISS EREMCHG

typedef struct ck_io_tap ck_io_tap;

/* A recorder (NULL: out of memory). */
ck_io_tap *ck_io_tap_recorder(void);
/* A replayer of blob[0, len) (copied: free the blob after the call); CKPT_E_FORMAT when it is
 * not a well-formed blob. */
ckpt_status ck_io_tap_replayer(const uint8_t *blob, size_t len, ck_io_tap **out, ckpt_error *err);
void ck_io_tap_free(ck_io_tap *t);

/* pread(fd, buf, n, off) of the file `name` through the tap: a recorder reads and keeps what
 * the call returned; a replayer copies it from its blob (fd unused), 0 at or after the
 * recorded end of file, or -1 with errno CK_ETAPMISS.  Thread-safe. */
ssize_t ck_io_tap_pread(ck_io_tap *t, const char *name, int fd, void *buf, size_t n, uint64_t off);

/* Whether t replays (its reads are not preads: not counted). */
bool ck_io_tap_replays(const ck_io_tap *t);

/* The recorder's log as a blob (malloc'ed; merged ranges): CKPT_E_NOMEM when recording ran
 * out of memory, CKPT_E_INVAL for a replayer. */
ckpt_status ck_io_tap_blob(ck_io_tap *t, uint8_t **blob, size_t *len, ckpt_error *err);

#endif
