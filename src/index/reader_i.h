/* reader_i.h — private layout of the reader: entries, chunks, data files and their locks.
 * Shared by the index (building), chunk resolution, the slicer and object loading. */
#ifndef CK_INDEX_READER_I_H
#define CK_INDEX_READER_I_H

#include "ckpt.h"
#include "torchsave/item.h"
#include "util/arena.h"
#include "util/htab.h"
#include "util/source.h"

#include <pthread.h>
#include <stdatomic.h>

/* Where a stored item lives: a byte range of one data file. */
typedef struct ck_loc {
    int32_t file_id; /* -1: no usable location (see problem) */
    bool raw;        /* the bytes are the tensor itself, C order, little endian (HuggingFace
                        safetensors storage: no container to open) */
    uint64_t offset;
    uint64_t length;
    bool big_endian; /* raw: the elements are stored big-endian (a torch.save file says so) */
    const int64_t *raw_stride; /* raw: element strides of the stored view (NULL: C order) */
    const char *transforms;    /* comma-separated, or NULL */
    const char *problem;       /* why the item cannot be read (set at index time), or NULL */
} ck_loc;

enum { CHUNK_UNRESOLVED = 0, CHUNK_RESOLVED = 1, CHUNK_FAILED = 2 };

typedef enum chunk_storage_kind {
    CHUNK_IN_FILE = 0, /* storage bytes addressable in the data file */
    CHUNK_IN_MEMORY,   /* transforms undone: bytes live in `item`'s decoded buffer */
} chunk_storage_kind;

/* What the first access to a chunk found (chunk_resolve.c): allocated from the reader's arena
 * then, under reader->lock, and published by the chunk's `state` (release), so the index of a
 * million chunks holds nothing for the ones never read. */
typedef struct ck_chunk_res {
    chunk_storage_kind kind;
    bool big_endian;
    bool contiguous; /* C-order strides over `sizes` */
    uint64_t elem0;  /* byte offset of storage element `storage_offset` (file or memory) */
    ts_item *item;   /* CHUNK_IN_MEMORY: the decoded item, or NULL when evicted;
                        read it only while pinned (ck_chunk_pin) */
    /* decoded-chunk cache (reader->lock): LRU links, pins */
    struct ck_chunk *lru_prev, *lru_next;
    uint32_t pins;
    ckpt_status fail_code; /* CHUNK_FAILED: the error to report again */
    const char *fail_msg;
    int64_t stride[]; /* element strides (ndim values) */
} ck_chunk_res;

typedef struct ck_chunk {
    const int64_t *offsets;
    const int64_t *sizes;
    uint64_t numel;
    ck_loc loc;
    atomic_int state;  /* CHUNK_*: set under reader->lock, read with acquire */
    ck_chunk_res *res; /* CHUNK_RESOLVED and CHUNK_FAILED, else NULL */
} ck_chunk;

/* A box of a Megatron flattened tensor (mcore_flat.c): its chunk's storage is the whole
 * stored piece, a run of `stored_numel` elements stored as [1, ..., 1, stored_numel], and the
 * box is the `numel` elements from element `skip` of it, in C order. */
typedef struct ck_flat_src {
    uint64_t skip;
    uint64_t stored_numel;
} ck_flat_src;

typedef struct ck_mcore_shape ck_mcore_shape;

struct ckpt_entry {
    const char *key;
    const char *path;
    const char **elems;
    /* nelems flags: 1 planner_data gave element i as an int, 2 it is an int dict key of a
     * torch.save file (ckpt_entry_path_elem_is_int_key); NULL: none */
    const uint8_t *elem_int;
    size_t nelems;
    size_t index;
    ckpt_entry_kind kind;
    ckpt_dtype dtype;
    int ndim;
    const int64_t *shape;
    uint64_t numel;
    uint64_t nbytes;
    ck_chunk *chunks;
    size_t nchunks;
    ck_loc loc;              /* objects */
    const char *problem;     /* metadata-level defect (dtype unknown...), or NULL */
    const ck_flat_src *flat; /* per chunk, for a Megatron flattened tensor; else NULL */
    ck_mcore_shape *mcore;   /* the original shape mcore_data gives it (mcore_flat.c) */
    const pk_value *value;   /* an object of a torch.save file: its decoded pickle (in the
                                reader's owned_item), converted when loaded */
};

typedef struct ck_file {
    const char *name;
    int fd;         /* -1 until opened (protected by reader->lock) */
    int open_errno; /* set when opening failed */
} ck_file;

struct ckpt_reader {
    char *dir;
    char *single_file;     /* opened on one file (a torch.save file) of `dir`, or NULL */
    ts_item **owned_items; /* torch.save archives whose pickles value entries point into */
    size_t nowned;
    ck_arena *arena; /* every string and array of the index */
    ckpt_limits limits;
    ckpt_entry *entries;
    size_t nentries;
    size_t entries_cap;
    ck_htab by_key;
    ck_htab by_path;
    ck_file *files;
    size_t nfiles;
    size_t files_cap;
    ck_htab file_by_name;
    pthread_mutex_t lock;
    ckpt_reader_info info;
    uint64_t unmatched_storage; /* storage_data entries that match no chunk/entry */
    bool index_overlapped;      /* the last metadata file was indexed while it was decoded */
    size_t index_split_batches; /* ... and this many of the batches of its dicts were decoded
                                 * by the walker (pk_watch.split) */
    size_t paths_done;          /* entries [0, paths_done) have their path and are in by_path */
    /* decoded chunks held in memory, most recently used first (under `lock`) */
    ck_chunk *lru_head, *lru_tail;
    uint64_t decoded_bytes;
    /* what preads returned (ckpt_reader_get_stats): data files, metadata files */
    ck_io_count io_data, io_meta;
    /* while index_reader_open_image indexes: the metadata files, taken from it (image.h) */
    const struct index_image *image;
};

/* A reader over an in-memory `.metadata` (fuzzing and tests); data files are looked up in
 * `dir`.  flags: CKPT_OPEN_LOCKSTEP or 0. */
enum {
    /* tests: each batch handed to the overlapped walk is walked before decoding goes on, so
     * that what a pickle does after a hand-over always comes after the walk read it */
    CKPT_OPEN_LOCKSTEP = 1
};
ckpt_status ck_reader_open_buffer(const char *dir, const uint8_t *buf, size_t len,
                                  const ckpt_limits *limits, unsigned flags, ckpt_reader **out,
                                  ckpt_error *err);

/* files.c */
int32_t ck_files_intern(ckpt_reader *r, const char *name, const char **problem);
/* The same for a file in a subdirectory of r->dir (ck_safe_rel_path; torch-checkpointing's
 * LayoutInfo file paths): once interned, ck_files_intern finds it too.  Opened component by
 * component, no symbolic link followed (ck_open_regular_below). */
int32_t ck_files_intern_sub(ckpt_reader *r, const char *name, const char **problem);
/* '/'-separated plain names (ck_safe_file_name each: none empty, "." or ".."), not absolute,
 * at most 16 of them and 1024 bytes: a path below a directory by its spelling. */
bool ck_safe_rel_path(const char *name);
int ck_files_fd(ckpt_reader *r, uint32_t file_id, ckpt_error *err);
void ck_files_close_all(ckpt_reader *r);
bool ck_safe_file_name(const char *name);
/* A source for a located item (fd opened on demand). */
ckpt_status ck_loc_source(ckpt_reader *r, const ck_loc *loc, const char *what, ck_source *src,
                          ckpt_error *err);

/* chunk_resolve.c: makes chunk->elem0/stride/... valid. Thread-safe. */
ckpt_status ck_chunk_resolve(ckpt_reader *r, const ckpt_entry *e, ck_chunk *c, ckpt_error *err);
/* A resolved CHUNK_IN_MEMORY chunk's decoded bytes, decoding them again if they were evicted;
 * they stay valid until the matching ck_chunk_unpin.  Thread-safe. */
ckpt_status ck_chunk_pin(ckpt_reader *r, const ckpt_entry *e, ck_chunk *c,
                         const ck_source **decoded, ckpt_error *err);
void ck_chunk_unpin(ckpt_reader *r, ck_chunk *c);
/* Marks an unresolved chunk resolved as CHUNK_IN_FILE with what another process's
 * ck_chunk_resolve found for the same chunk of the same checkpoint (the collective loader
 * resolves each chunk on one rank: no container header is read here).  False when the chunk
 * was resolved meanwhile, or out of memory (it is then resolved the usual way).  Thread-safe. */
bool index_chunk_adopt(ckpt_reader *r, const ckpt_entry *e, ck_chunk *c, bool big_endian,
                       bool contiguous, uint64_t elem0, const int64_t *stride);

/* path escaping (path.c) */
char *ck_path_escape_elem(ck_arena *a, const char *elem, size_t len);

#endif
