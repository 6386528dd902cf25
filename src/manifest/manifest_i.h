/* manifest_i.h — private layout of a manifest, and the parallel range hasher shared by
 * building and verifying. */
#ifndef CK_MANIFEST_MANIFEST_I_H
#define CK_MANIFEST_MANIFEST_I_H

#include "ckpt_manifest.h"

struct ckpt_manifest {
    char **files; /* sorted, unique */
    uint32_t nfiles;
    ckpt_manifest_record *recs; /* sorted by (file, offset); .file points into files[] */
    size_t n;
};

/* One range to hash: `rec` gets .hash (build) or is compared (verify). */
typedef struct hash_job {
    ckpt_manifest_record *rec;
    uint64_t actual;
    ckpt_status status;
    ckpt_error err;
} hash_job;

/* Hashes every job's range from the files in `dir` with `threads` threads (0 = CPUs), then
 * calls done(ctx, job) for each in order.  Jobs failing to read keep their status/err. */
void hash_jobs_run(const char *dir, hash_job *jobs, size_t n, unsigned threads,
                   ckpt_progress_fn progress, void *ctx);

/* Sorts and de-duplicates records by (file, offset, length); files interned. */
ckpt_status manifest_from_records(ckpt_manifest_record *recs, size_t n, ckpt_manifest **out,
                                  ckpt_error *err);

/* format.c: parses a manifest held in memory (`path` names it in messages). */
ckpt_status manifest_parse(const uint8_t *buf, size_t size, const char *path, ckpt_manifest **out,
                           ckpt_error *err);

/* items.c: the items a manifest covers (file pointers are the reader's names or `names`). */
typedef struct manifest_item_list {
    ckpt_manifest_record *recs;
    size_t n;
    char *names[4096]; /* metadata file names (rank-local files: at most this many) */
    size_t nnames;
} manifest_item_list;
ckpt_status manifest_items(ckpt_reader *r, manifest_item_list *out, ckpt_error *err);
void manifest_items_release(manifest_item_list *l);

#endif
