/* builder.h — the index builder: what every storage format's walker uses to fill a reader's
 * index (entries by key, their tree paths, sizes, defects), and the format-free completion of
 * an index.  The formats themselves (formats.c) sit on top of it: a walker adds entries and
 * chunks with these calls and knows nothing of the other formats. */
#ifndef CK_INDEX_BUILDER_H
#define CK_INDEX_BUILDER_H

#include "index/reader_i.h"

#include <stddef.h>

/* The hash of a key in r->by_key. */
uint64_t index_key_hash(const char *key);
/* The entry of `key`, or NULL; _hashed: given its index_key_hash. */
ckpt_entry *index_find(ckpt_reader *r, const char *key);
ckpt_entry *index_find_hashed(ckpt_reader *r, const char *key, uint64_t h);
/* index_find trying entry `guess` first (walkers meeting the keys in much the same order
 * again pass the entry after the last one found). */
ckpt_entry *index_find_near(ckpt_reader *r, const char *key, size_t guess);
/* A new entry for `key` (NULL when out of memory); _hashed: given its index_key_hash. */
ckpt_entry *index_new_entry(ckpt_reader *r, const char *key);
ckpt_entry *index_new_entry_hashed(ckpt_reader *r, const char *key, uint64_t h);

/* The element count of a shape; 0 with *problem set (in arena a) when a dimension is negative
 * or the count passes 2^62. */
uint64_t index_numel(ck_arena *a, const int64_t *shape, int ndim, const char **problem);
/* numel * itemsize; 0 for an unknown dtype or past 2^62 bytes. */
uint64_t index_nbytes(ckpt_dtype dt, uint64_t numel);
/* CKPT_E_NOMEM, saying the index was being built. */
ckpt_status index_nomem(ckpt_error *err);
/* A formatted description of an entry's or a chunk's defect, in arena a (a fixed text when
 * out of memory: never NULL). */
const char *index_problemf(ck_arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One element of an entry's tree path: `len` bytes (NUL bytes allowed: they are escaped in
 * the joined path, never a truncation); is_int: the format gave it as an integer (a list
 * index, an int dict key), which a front end rebuilding the state dict needs back; int_key
 * (is_int false): an int dict key of a torch.save file, written in decimal, a str for DCP's
 * planner (DCP stringifies dict keys) but an int again when the file is rebuilt. */
typedef struct index_elem {
    const char *s;
    size_t len;
    bool is_int;
    bool int_key;
} index_elem;
/* Gives e its tree path: n > 0 elements, or (n == 0) the flat key as the only element. */
ckpt_status index_set_path(ckpt_reader *r, ckpt_entry *e, const index_elem *elems, size_t n,
                           ckpt_error *err);
/* Gives the entries made since the last call the flat-key path when their walker gave them
 * none, and adds them to by_path (the first entry of a path wins).  index_finish calls it; a
 * walker may call it earlier (the overlapped walk of a checkpoint's only metadata file does,
 * once planner_data is walked). */
ckpt_status index_paths(ckpt_reader *r, ckpt_error *err);

/* The rank that wrote data file `name` by its format's naming rule, or -1. */
typedef long long (*index_file_rank_fn)(const char *name);
/* Completes the index once every file of its format is added: paths, the counts of
 * r->info, and the number of ranks (distinct file_rank values of the data files). */
ckpt_status index_finish(ckpt_reader *r, index_file_rank_fn file_rank, ckpt_error *err);

/* Empties the index (entries, data files, what the walk counted) of a reader whose index was
 * empty before a walk began (metadata_overlap.c restarts that way); what the walk allocated
 * from the arena stays there until the reader is freed. */
ckpt_status index_reset(ckpt_reader *r, ckpt_error *err);

#endif
