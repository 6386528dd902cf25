/* ckpt.h — public API of libckpt, the ckptfs reader library.
 *
 * libckpt opens a PyTorch Distributed Checkpoint (DCP) directory (`.metadata` + `*.distcp`
 * files), indexes every state_dict entry without executing anything, and copies any
 * hyper-rectangle of any tensor into a caller buffer, touching only the overlapping bytes
 * of the shard files.  It knows nothing of FUSE, MPI or the command line.
 *
 * Conventions
 *   - Every name is prefixed `ckpt_`; handles are opaque; `*_free(NULL)` is a no-op.
 *   - Functions that can fail return a `ckpt_status` and fill an optional, caller-owned
 *     `ckpt_error` (pass NULL to ignore) whose message names the file, key and byte offset.
 *     There is no hidden global or thread-local error state.
 *   - A `ckpt_reader` is safe to use from several threads at once after `ckpt_reader_open`
 *     returns (lazy per-chunk decoding is internally locked).
 *   - Pointers returned by accessors live as long as the handle they came from.
 */
#ifndef CKPT_H
#define CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_VERSION_STRING "0.1.0"

/* The version of the library actually loaded (CKPT_VERSION_STRING when it was built): lets a
 * program (or a binding loading libckpt.so.0 at run time) check it got the one it expects. */
const char *ckpt_version(void);

/* ---------------------------------------------------------------- errors */

typedef enum ckpt_status {
    CKPT_OK = 0,
    CKPT_E_IO,          /* a system call failed (errno in the message) */
    CKPT_E_NOMEM,       /* allocation failed */
    CKPT_E_FORMAT,      /* malformed input: pickle, zip, metadata, chunk layout */
    CKPT_E_UNSUPPORTED, /* well-formed but not representable (unknown transform, opcode...) */
    CKPT_E_LIMIT,       /* input exceeds a configured safety bound (depth, size, count) */
    CKPT_E_NOTFOUND,    /* no such key, file or record */
    CKPT_E_RANGE,       /* a byte range or region lies outside its container */
    CKPT_E_INVAL,       /* the caller passed an invalid argument */
    CKPT_E_CHECKSUM,    /* stored bytes do not match their recorded checksum */
    CKPT_E_ACCESS,      /* the caller may not read a file (ckpt_tree_may_read) */
    CKPT_E_TRANSPORT,   /* communication between ranks failed (ckpt_transport.h) */
} ckpt_status;

#define CKPT_ERROR_MSG_MAX 1024

typedef struct ckpt_error {
    ckpt_status code;
    char message[CKPT_ERROR_MSG_MAX]; /* "FILE: offset N: what went wrong (key 'K')" */
} ckpt_error;

/* Static description of a status code ("invalid format", ...). Never NULL. */
const char *ckpt_strerror(ckpt_status code);

/* ---------------------------------------------------------------- dtypes */

typedef enum ckpt_dtype {
    CKPT_DTYPE_INVALID = 0,
    CKPT_DTYPE_FLOAT64,
    CKPT_DTYPE_FLOAT32,
    CKPT_DTYPE_FLOAT16,
    CKPT_DTYPE_BFLOAT16,
    CKPT_DTYPE_FLOAT8_E4M3FN,
    CKPT_DTYPE_FLOAT8_E5M2,
    CKPT_DTYPE_FLOAT8_E4M3FNUZ,
    CKPT_DTYPE_FLOAT8_E5M2FNUZ,
    CKPT_DTYPE_FLOAT8_E8M0FNU,
    CKPT_DTYPE_INT8,
    CKPT_DTYPE_INT16,
    CKPT_DTYPE_INT32,
    CKPT_DTYPE_INT64,
    CKPT_DTYPE_UINT8,
    CKPT_DTYPE_UINT16,
    CKPT_DTYPE_UINT32,
    CKPT_DTYPE_UINT64,
    CKPT_DTYPE_BOOL,
    CKPT_DTYPE_COMPLEX64,
    CKPT_DTYPE_COMPLEX128,
    CKPT_DTYPE_COUNT_
} ckpt_dtype;

/* torch's primary name ("bfloat16"); "invalid" for unknown values. */
const char *ckpt_dtype_name(ckpt_dtype dt);
/* Bytes per element, 0 for CKPT_DTYPE_INVALID. */
size_t ckpt_dtype_itemsize(ckpt_dtype dt);
/* The safetensors name ("BF16", "F8_E4M3", "C64"...) of a dtype that safetensors files and
 * safetensors.torch both handle; NULL for the others (complex128, float8_e8m0fnu). */
const char *ckpt_dtype_safetensors_name(ckpt_dtype dt);
/* The oldest torch release whose dcp.load loads a tensor of this dtype, as major * 100 + minor:
 * 206 (torch 2.6) for uint16, uint32 and uint64 (torch.load's weights_only unpickler, which
 * dcp.load uses for every tensor, refuses them before), 207 for float8_e8m0fnu (new in 2.7),
 * 204 for every other dtype (2.4 is the oldest release that reads the .metadata the saver
 * writes; older ones were not checked).  0 for CKPT_DTYPE_INVALID. */
int ckpt_dtype_torch_min(ckpt_dtype dt);
/* Parses a torch name, with or without a "torch." prefix; also accepts aliases
 * ("float", "half", "long", "bf16", ...).  CKPT_DTYPE_INVALID if unknown. */
ckpt_dtype ckpt_dtype_from_name(const char *name);

/* ---------------------------------------------------------------- reader */

#define CKPT_MAX_NDIM 64

typedef struct ckpt_reader ckpt_reader;
typedef struct ckpt_entry ckpt_entry;

/* Safety bounds for untrusted input.  Zero fields take the defaults shown. */
typedef struct ckpt_limits {
    uint64_t max_metadata_bytes; /* size of `.metadata` accepted (default 4 GiB) */
    uint64_t max_pickle_memory;  /* memory a decoded pickle may use (default 8 GiB) */
    uint32_t max_depth;          /* nesting of containers (default 256) */
    uint64_t max_items;          /* total values in one pickle (default 256 M) */
    uint64_t max_object_bytes;   /* non-tensor entry size loaded into memory (default 1 GiB) */
    uint64_t max_decoded_cache;  /* decoded (e.g. zstd) chunks kept in memory between reads;
                                    least recently used ones beyond this are dropped and
                                    decoded again when needed (default 512 MiB) */
    uint32_t index_threads;      /* threads that build the index (default: the online CPUs, at
                                    most 4).  Above 1, `.metadata` is indexed on a second thread
                                    while it is decoded (faster; the peak memory of a big file
                                    is then that of the decoder and the index together); a file
                                    walked after decoding (further rank-local files) has its
                                    tensors walked on up to this many threads; 1: the calling
                                    thread only, after decoding */
} ckpt_limits;

typedef struct ckpt_open_options {
    const ckpt_limits *limits; /* NULL: defaults */
} ckpt_open_options;

/* Opens and indexes the checkpoint in `dir`: decodes `.metadata` (or the rank-local
 * `__<r>.metadata` files when it is absent; without either, the headers of the directory's
 * `*.safetensors` files: HuggingFace safetensors storage).  Shard files are opened lazily.
 * `opts` may be NULL.  On failure `*out` is NULL; CKPT_E_NOTFOUND when the directory holds
 * no checkpoint. */
ckpt_status ckpt_reader_open(const char *dir, const ckpt_open_options *opts, ckpt_reader **out,
                             ckpt_error *err);
void ckpt_reader_free(ckpt_reader *r);

const char *ckpt_reader_dir(const ckpt_reader *r);

typedef struct ckpt_reader_info {
    const char *root_class;      /* "torch.distributed.checkpoint.metadata.Metadata" */
    const char *version;         /* Metadata.version, NULL when absent or None */
    const char *format_hint;     /* human-readable variant: "torch >= 2.9", "torch 1.13 (_shard)",
                                    "megatron-core", "rank-local metadata", ... */
    bool has_planner_data;       /* paths come from planner_data */
    bool has_storage_meta;       /* Metadata.storage_meta present (torch >= 2.4) */
    bool rank_local_metadata;    /* built from __<r>.metadata files */
    bool has_mcore_data;         /* Megatron's extra attributes present */
    bool hf_storage;             /* HuggingFace safetensors storage: no metadata pickle, the
                                    index comes from the `*.safetensors` headers (and
                                    model.safetensors.index.json); metadata_bytes counts those */
    uint32_t num_metadata_files; /* 1, or the number of rank-local files */
    uint64_t metadata_bytes;     /* size of the metadata file(s) */
    uint64_t num_entries;        /* tensors + objects */
    uint64_t num_tensors;
    uint64_t num_objects;
    uint64_t num_chunks;          /* stored chunks, zero-size chunks excluded (a piece of a
                                     Megatron flattened tensor counts as the boxes it tiles) */
    uint64_t num_empty_chunks;    /* zero-size chunks recorded in the metadata */
    uint64_t tensor_bytes;        /* sum of numel * itemsize over tensors */
    uint64_t stored_bytes;        /* sum of storage_data lengths */
    uint32_t num_files;           /* distinct data files referenced */
    uint32_t num_ranks;           /* distinct `__<r>_` (or HuggingFace `shard-<r>-`) prefixes
                                     among them (0 if none) */
    uint64_t num_mcore_flattened; /* tensors Megatron stored in its N-D flattened form
                                     (`flattened_range`), read in their original shape */
    uint64_t dtype_counts[CKPT_DTYPE_COUNT_]; /* tensors per dtype */
} ckpt_reader_info;

void ckpt_reader_get_info(const ckpt_reader *r, ckpt_reader_info *info);

/* What the reader's preads returned since it was opened: the bytes each pread call gave back
 * (not what was asked: a strided read through slabs counts the whole slabs, a zstd chunk its
 * compressed bytes, a chunk's first access the container headers it reads), and the calls
 * that returned bytes.  Data files are the shard files (`*.distcp`, `*.safetensors` data);
 * metadata files are `.metadata` (or the rank-local `__<r>.metadata`), a HuggingFace index
 * json and the `*.safetensors` headers read while indexing.  Counted by every thread using
 * the reader (atomically), and by callers that read through ckpt_reader_file_fd and report
 * it (ckpt_reader_add_read; the collective loader does).  Bytes served from memory (decoded
 * chunks kept in the cache, an in-memory `.metadata`) are not read, so not counted. */
typedef struct ckpt_reader_stats {
    uint64_t bytes_read;          /* returned by preads of data files */
    uint64_t preads;              /* pread calls on data files that returned bytes */
    uint64_t bytes_read_metadata; /* returned by preads of metadata files */
    uint64_t preads_metadata;
} ckpt_reader_stats;

void ckpt_reader_get_stats(const ckpt_reader *r, ckpt_reader_stats *stats);
/* Reports one pread of `bytes` (> 0; 0 is ignored) made through ckpt_reader_file_fd on a
 * data file, so that ckpt_reader_get_stats counts it.  Thread-safe. */
void ckpt_reader_add_read(ckpt_reader *r, uint64_t bytes);

/* Entries in `state_dict_metadata` order. */
size_t ckpt_reader_num_entries(const ckpt_reader *r);
const ckpt_entry *ckpt_reader_entry(const ckpt_reader *r, size_t index);
/* By flat key (`model.layers.0.w`) or by tree path (`model/layers.0.w`).  NULL if absent.
 * The flat key wins when one entry's key spells another entry's path: to address an entry
 * unambiguously, use ckpt_reader_find_key or ckpt_reader_find_path. */
const ckpt_entry *ckpt_reader_find(const ckpt_reader *r, const char *key_or_path);
/* By flat key only (the `state_dict_metadata` key). */
const ckpt_entry *ckpt_reader_find_key(const ckpt_reader *r, const char *key);
/* By tree path only (escaped, as ckpt_entry_path gives it). */
const ckpt_entry *ckpt_reader_find_path(const ckpt_reader *r, const char *path);

/* Data files referenced by storage_data, in first-seen order. */
size_t ckpt_reader_num_files(const ckpt_reader *r);
const char *ckpt_reader_file_name(const ckpt_reader *r, uint32_t file_id); /* relative */

/* ---------------------------------------------------------------- entries */

typedef enum ckpt_entry_kind {
    CKPT_ENTRY_TENSOR = 1, /* TensorStorageMetadata */
    CKPT_ENTRY_OBJECT = 2, /* BytesStorageMetadata: a pickled Python value */
} ckpt_entry_kind;

const char *ckpt_entry_key(const ckpt_entry *e); /* flat key from state_dict_metadata */
/* Tree path: planner_data elements joined by '/', each element escaped ('%' -> "%25",
 * '/' -> "%2F", and an element that is "." or ".." or empty spelled "%2E", "%2E%2E", "%00"...
 * see docs/naming.md).  Without planner_data it is the escaped flat key. */
const char *ckpt_entry_path(const ckpt_entry *e);
size_t ckpt_entry_path_len(const ckpt_entry *e);                 /* number of raw path elements */
const char *ckpt_entry_path_elem(const ckpt_entry *e, size_t i); /* raw (unescaped) element */
/* Whether planner_data recorded element i as an int (a list index: `optim/param_groups/0/lr`
 * has ('optim', 'param_groups', 0, 'lr')) rather than a str; ckpt_entry_path_elem gives its
 * decimal text.  false past the last element and for paths that are the flat key. */
bool ckpt_entry_path_elem_is_int(const ckpt_entry *e, size_t i);
/* Whether element i is an int dict key of a torch.save file (an optimizer state_dict's
 * `state: {0: ...}`): its path element is the decimal text, a str to DCP's planner (which
 * stringifies dict keys: ckpt_entry_path_elem_is_int is false), but the key is an int when
 * the state dict is rebuilt (ckpt_torchsave writes it as one, as torch.save had it). */
bool ckpt_entry_path_elem_is_int_key(const ckpt_entry *e, size_t i);
ckpt_entry_kind ckpt_entry_kind_of(const ckpt_entry *e);
size_t ckpt_entry_index(const ckpt_entry *e);
/* Selecting entries, the one rule of `ckpt export --keys` / `--exclude` and the views:
 * ckpt_entry_under gives the rest of e's tree path below the tree path `prefix` (trailing
 * '/'s ignored) -- the text after "prefix/", "" when the path is `prefix` itself -- or NULL
 * when e is not under it; an empty or NULL prefix holds every entry (the whole path).
 * ckpt_entry_matches says whether `prefix` names e or a directory above it: by tree path
 * (ckpt_entry_under), or by flat key, the key being `prefix` or continuing it after a '.'
 * (`optimizer` names `optimizer.state.w.exp_avg` of a checkpoint without planner_data); an
 * empty prefix names nothing.  ckpt_entry_at_root: e is not under any directory (its path
 * has one element: a top-level key, or a flat key without planner_data). */
const char *ckpt_entry_under(const ckpt_entry *e, const char *prefix);
bool ckpt_entry_matches(const ckpt_entry *e, const char *prefix);
bool ckpt_entry_at_root(const ckpt_entry *e);

/* Tensor entries (0 / INVALID for objects). */
ckpt_dtype ckpt_entry_dtype(const ckpt_entry *e);
int ckpt_entry_ndim(const ckpt_entry *e);
const int64_t *ckpt_entry_shape(const ckpt_entry *e); /* ndim values; NULL when ndim == 0 */
uint64_t ckpt_entry_numel(const ckpt_entry *e);       /* 1 for 0-d tensors */
uint64_t ckpt_entry_nbytes(const ckpt_entry *e);      /* numel * itemsize */
/* As recorded, zero-size included; for a Megatron flattened tensor (ckpt_reader_info
 * .num_mcore_flattened) the boxes its stored pieces tile, zero-size pieces left out. */
size_t ckpt_entry_num_chunks(const ckpt_entry *e);

typedef struct ckpt_chunk_info {
    const int64_t *offsets; /* ndim values: global offset of the box */
    const int64_t *sizes;   /* ndim values: extent of the box */
    uint64_t numel;         /* product of sizes (0 for zero-size chunks) */
    int32_t file_id;        /* -1 for zero-size chunks (nothing stored) */
    uint64_t file_offset;   /* byte range of the stored item in its file (the boxes of one
                               Megatron flat piece share its item) */
    uint64_t length;
    const char *transforms; /* comma-separated transform descriptors, NULL when none */
    const char *problem;    /* why the chunk cannot be located (file_id == -1), or NULL */
} ckpt_chunk_info;

/* Chunk i of a tensor.  For objects, i == 0 gives the stored item's byte range (offsets/sizes
 * NULL). */
ckpt_status ckpt_entry_chunk(const ckpt_entry *e, size_t i, ckpt_chunk_info *out);
/* A defect found in the metadata for this entry (unknown dtype, chunk outside the shape...),
 * or NULL.  Reading such an entry fails with CKPT_E_FORMAT and this text. */
const char *ckpt_entry_problem(const ckpt_entry *e);

/* ---------------------------------------------------------------- regions */

/* Copies the box [start, start+count) of tensor `e` into `dst` in C order, little-endian,
 * `dst_size` >= prod(count) * itemsize.  start/count have ndim values each (NULL for 0-d).
 * Only the overlapping parts of the stored chunks are read. */
ckpt_status ckpt_read_region(ckpt_reader *r, const ckpt_entry *e, const int64_t *start,
                             const int64_t *count, void *dst, size_t dst_size, ckpt_error *err);
/* The whole tensor. */
ckpt_status ckpt_read_tensor(ckpt_reader *r, const ckpt_entry *e, void *dst, size_t dst_size,
                             ckpt_error *err);

/* A plan: where each byte of a region comes from.  Each piece copies `length` bytes from
 * `file_offset` of data file `file_id` to `dst_offset` of the region's C-order buffer.
 * Pieces are sorted by destination, never overlap, and cover every byte of the region.
 * A chunk whose bytes are not addressable in its file (stream transforms)
 * yields pieces with file_id == CKPT_PIECE_DECODED: `file_offset` is then
 * the offset inside the chunk's decoded little-endian storage and `chunk` says which. */
#define CKPT_PIECE_DECODED (-1)

typedef struct ckpt_piece {
    int32_t file_id;
    uint16_t swap_unit; /* 0, or reverse each group of this many bytes (big-endian files) */
    uint16_t reserved;
    uint32_t chunk; /* chunk index within the entry */
    uint64_t file_offset;
    uint64_t length;
    uint64_t dst_offset;
} ckpt_piece;

typedef struct ckpt_plan ckpt_plan;

ckpt_status ckpt_plan_region(ckpt_reader *r, const ckpt_entry *e, const int64_t *start,
                             const int64_t *count, ckpt_plan **out, ckpt_error *err);
size_t ckpt_plan_num_pieces(const ckpt_plan *p);
const ckpt_piece *ckpt_plan_pieces(const ckpt_plan *p);
uint64_t ckpt_plan_bytes(const ckpt_plan *p); /* total destination bytes */
/* Executes a plan (reads files, decodes transformed chunks) into dst. */
ckpt_status ckpt_plan_execute(ckpt_reader *r, const ckpt_entry *e, const ckpt_plan *p, void *dst,
                              size_t dst_size, ckpt_error *err);
void ckpt_plan_free(ckpt_plan *p);

/* The box that rank `rank` of `nranks` holds when a tensor of `shape` is laid out as
 * DTensor Shard(`dim`), with torch.chunk semantics: chunk = ceil(shape[dim] / nranks), rank r
 * holds rows [r*chunk, min((r+1)*chunk, shape[dim])) — trailing ranks may hold zero rows
 * (start is then clamped to shape[dim]).  When dim >= ndim the tensor is replicated and the box
 * is the whole tensor.  Fills ndim values of start and count.  The 1-D special case of the
 * layouts below: the one box of layout `<nranks>:S<dim>` (`dim<dim>-of-<nranks>`). */
ckpt_status ckpt_shard_box(int ndim, const int64_t *shape, int dim, uint32_t nranks, uint32_t rank,
                           int64_t *start, int64_t *count);

/* ---------------------------------------------------------------- layouts */

/* A layout: a device mesh shape and one DTensor placement per mesh dimension, with exactly
 * DTensor's local-shard semantics — what `distribute_tensor(full, mesh, placements,
 * src_data_rank=None).to_local()` holds on each rank (torch.chunk splits, uneven and empty
 * shards, several mesh dims sharding one tensor dim left to right, _StridedShard's
 * interleaving).  Ranks map to mesh coordinates row-major, as init_device_mesh does.
 *
 * Spec strings (docs/loader.md): mesh sizes joined by `x`, a colon, one placement per mesh
 * dim joined by `,`: `R` (Replicate), `S<d>` (Shard(d)), `S<d>s<k>` (_StridedShard(d,
 * split_factor=k)).  `2x2:S0s2,S0`, `2x3:R,S0`, `8:S0`.  `dim<d>-of-<N>` is an alias of
 * `<N>:S<d>`.  Numbers are decimal without leading zeros.
 *
 * Where torch refuses a placement whose d is not a dim of the tensor (0-d tensors, S1 on a
 * 1-D tensor), a layout replicates the tensor along that mesh dim instead. */
#define CKPT_LAYOUT_MAX_MESH_NDIM 8
#define CKPT_LAYOUT_MAX_RANKS (1u << 20)        /* product of the mesh sizes */
#define CKPT_LAYOUT_MAX_SPLIT_FACTOR (1u << 16) /* k of S<d>s<k> */
#define CKPT_LAYOUT_SPEC_MAX 128                /* longest spec accepted, NUL included */

typedef enum ckpt_placement_kind {
    CKPT_PLACEMENT_REPLICATE = 0,
    CKPT_PLACEMENT_SHARD = 1,
    CKPT_PLACEMENT_STRIDED_SHARD = 2,
} ckpt_placement_kind;

typedef struct ckpt_placement {
    ckpt_placement_kind kind;
    int dim;               /* tensor dim (Shard, _StridedShard) */
    uint32_t split_factor; /* _StridedShard's split_factor (>= 1); 1 otherwise */
} ckpt_placement;

typedef struct ckpt_layout {
    int mesh_ndim; /* 1..CKPT_LAYOUT_MAX_MESH_NDIM */
    uint32_t mesh[CKPT_LAYOUT_MAX_MESH_NDIM];
    ckpt_placement placements[CKPT_LAYOUT_MAX_MESH_NDIM];
} ckpt_layout;

/* Parses a spec (above).  CKPT_E_INVAL naming what is wrong for a malformed spec,
 * CKPT_E_LIMIT when a bound (mesh dims, ranks, split factor, tensor dim < CKPT_MAX_NDIM,
 * length) is exceeded. */
ckpt_status ckpt_layout_parse(const char *spec, ckpt_layout *out, ckpt_error *err);
/* Writes the canonical spec (`2x2:S0s2,S0`; never the alias) into buf, NUL-terminated and
 * truncated to size; returns the length it needs (without the NUL). */
size_t ckpt_layout_format(const ckpt_layout *l, char *buf, size_t size);
/* The number of ranks: the product of the mesh sizes. */
uint32_t ckpt_layout_nranks(const ckpt_layout *l);
/* The mesh coordinate (mesh_ndim values) of `rank`, row-major.  CKPT_E_INVAL if out of range. */
ckpt_status ckpt_layout_coord(const ckpt_layout *l, uint32_t rank, uint32_t *coord);

/* The local shard one mesh coordinate holds of a tensor: torch's local shape and global
 * offset (compute_local_shape_and_global_offset: the first global index held along each
 * sharded dim, the dim's global size when the shard is empty, 0 along unsharded dims), and a
 * list of boxes whose C-order contents, concatenated in list order, are the local tensor.  A
 * Shard-only layout holds one box; a _StridedShard one may hold several (`2:S0s2` on [8, 3]:
 * rank 1 holds rows 2-3 then 6-7).  An empty local shard is one box of zero elements
 * (start = the global offset).  Boxes are computed on demand, never stored. */
typedef struct ckpt_layout_shard ckpt_layout_shard;

/* coord: mesh_ndim values, each below its mesh size.  shape: ndim values >= 0 (NULL for
 * 0-d).  CKPT_E_LIMIT when a dim would be held as more than 2^20 separate runs or the
 * tensor's element count overflows. */
ckpt_status ckpt_layout_shard_new(const ckpt_layout *l, int ndim, const int64_t *shape,
                                  const uint32_t *coord, ckpt_layout_shard **out, ckpt_error *err);
void ckpt_layout_shard_free(ckpt_layout_shard *s);
int ckpt_layout_shard_ndim(const ckpt_layout_shard *s);
const int64_t *ckpt_layout_shard_local_shape(const ckpt_layout_shard *s);   /* ndim values */
const int64_t *ckpt_layout_shard_global_offset(const ckpt_layout_shard *s); /* ndim values */
uint64_t ckpt_layout_shard_numel(const ckpt_layout_shard *s);     /* of the local tensor */
uint64_t ckpt_layout_shard_num_boxes(const ckpt_layout_shard *s); /* >= 1 */
/* Box i (< num_boxes): ndim values of start and count; *elem_offset (may be NULL) is where
 * it begins in the local tensor, in elements. */
void ckpt_layout_shard_box(const ckpt_layout_shard *s, uint64_t i, int64_t *start, int64_t *count,
                           uint64_t *elem_offset);
/* The index of the box holding local element `elem` (< numel; 0 when numel is 0). */
uint64_t ckpt_layout_shard_find_box(const ckpt_layout_shard *s, uint64_t elem);

/* The shard as global boxes, for writers (`ckpt reshard`): along each dim the held indices are
 * a few maximal runs of consecutive ones (one per piece of a _StridedShard, adjacent pieces
 * merged), and the shard is their product: one run box per choice of a run on every dim, C
 * order over the dims' runs.  Run boxes tile the shard exactly without overlap, and their
 * number does not grow with the rows (`2x2:S1s2,R` on [8192, 512]: 2 run boxes, 16384 boxes
 * in torch's order).  Run box i (< num_run_boxes): ndim values of start and count, and `local`
 * (may be NULL) its first position per dim in the local tensor.  An empty shard: one empty run
 * box, ckpt_layout_shard_box's. */
uint64_t ckpt_layout_shard_num_run_boxes(const ckpt_layout_shard *s); /* >= 1 */
void ckpt_layout_shard_run_box(const ckpt_layout_shard *s, uint64_t i, int64_t *start,
                               int64_t *count, int64_t *local);

/* The boxes rank `rank` (row-major) holds, materialized: up to `cap` boxes into
 * starts/counts (ndim values per box, box i at [i * ndim]), their number into *nboxes
 * (CKPT_E_LIMIT when above cap: *nboxes then says how many are needed); local_shape and
 * global_offset (ndim values each) may be NULL. */
ckpt_status ckpt_layout_boxes(const ckpt_layout *l, int ndim, const int64_t *shape, uint32_t rank,
                              int64_t *starts, int64_t *counts, size_t cap, size_t *nboxes,
                              int64_t *local_shape, int64_t *global_offset, ckpt_error *err);

/* A layout map: which layout each entry of a checkpoint is resharded to (`ckpt load
 * --layout-map`).  Its text is a JSON object whose members name an entry by its flat key, by
 * its tree path, or by a directory of tree paths (`model/layers/0`), each with a layout spec
 * (above, or `dim<d>`: Shard(d) over `nranks`); the member `*` is the default.  Every spec
 * must have exactly `nranks` ranks.  An entry takes the longest member that names it (the
 * later of equal ones), else the default. */
typedef struct ckpt_layout_map ckpt_layout_map;
#define CKPT_LAYOUT_MAP_MAX_BYTES (64u << 20) /* longest text accepted */

/* Parses `len` bytes of JSON text (no NUL needed).  CKPT_E_INVAL naming the member for a bad
 * spec, a spec of another rank count, a non-string spec or a key holding a NUL character;
 * CKPT_E_FORMAT for text that is not a JSON object; CKPT_E_LIMIT above the bounds. */
ckpt_status ckpt_layout_map_parse(const char *json, size_t len, uint32_t nranks,
                                  ckpt_layout_map **out, ckpt_error *err);
void ckpt_layout_map_free(ckpt_layout_map *m);
/* The layout of entry e: the longest member naming it, else the map's default (`*`), else
 * `def` (may be NULL). */
const ckpt_layout *ckpt_layout_map_find(const ckpt_layout_map *m, const ckpt_entry *e,
                                        const ckpt_layout *def);
/* The map's `*` layout, or NULL when it has none. */
const ckpt_layout *ckpt_layout_map_default(const ckpt_layout_map *m);

/* An open read-only file descriptor of data file `file_id` (owned by the reader; do not
 * close), for zero-copy users (splice).  -1 with `err` filled on failure.  What is read
 * through it is counted only when reported (ckpt_reader_add_read). */
int ckpt_reader_file_fd(ckpt_reader *r, uint32_t file_id, ckpt_error *err);

/* ---------------------------------------------------------------- checks */

/* The tensor's stored chunks tile its shape exactly: no overlap, no gap (zero-size chunks
 * ignored).  CKPT_E_FORMAT naming the chunks otherwise. */
ckpt_status ckpt_entry_check_layout(const ckpt_entry *e, ckpt_error *err);
/* Opens chunk i's stored item and checks it against the metadata (zip well-formed, data.pkl
 * decodes, dtype and box size agree, storage record inside the item). */
ckpt_status ckpt_entry_check_chunk(ckpt_reader *r, const ckpt_entry *e, size_t i, ckpt_error *err);
/* Checks that every data file exists and every stored byte range lies inside its file;
 * calls report(ctx, entry or NULL, error) per defect.  Returns CKPT_OK when none. */
typedef void (*ckpt_check_fn)(void *ctx, const ckpt_entry *e, const ckpt_error *err);
ckpt_status ckpt_reader_check_ranges(ckpt_reader *r, ckpt_check_fn report, void *ctx,
                                     uint64_t *failures);

/* Converts one stored element to double (complex: the real part; bool: 0/1; float8 and
 * bfloat16 decoded exactly).  NaN for CKPT_DTYPE_INVALID. */
double ckpt_elem_to_double(ckpt_dtype dt, const void *elem);

/* ckpt_elem_format flags.  CKPT_ELEM_JSON: JSON (true/false, NaN/Infinity, floats with
 * ".0", complex as [re, im]). */
enum { CKPT_ELEM_JSON = 1 };
/* One stored element of dtype dt (its bytes at elem, in host order as ckpt_read_region
 * returns them) as text, the way Python and numpy print it: integers in decimal, bool
 * True/False, floats of every width with the shortest digits that read back as the same value
 * in that dtype (`0.1` for float32 0.1f, numpy's repr of a float32 or float16 scalar; fixed
 * notation for decimal exponents -4..15, else `1e-05`, `1.5e+16`; `nan`, `inf`), complex
 * `(1+2j)`.  "?" for CKPT_DTYPE_INVALID.  Writes at most size bytes, NUL-terminated, and
 * returns the length of the whole text (snprintf's contract; 64 bytes always suffice). */
size_t ckpt_elem_format(ckpt_dtype dt, const void *elem, unsigned flags, char *buf, size_t size);

/* ---------------------------------------------------------------- values */

/* Non-tensor entries decode to a tree of values.  Python objects of unknown classes are
 * kept symbolically (class name, arguments, state); nothing is ever executed. */
typedef enum ckpt_value_type {
    CKPT_VALUE_NONE = 0,
    CKPT_VALUE_BOOL,
    CKPT_VALUE_INT,    /* fits int64 */
    CKPT_VALUE_BIGINT, /* larger: decimal text via ckpt_value_str */
    CKPT_VALUE_FLOAT,
    CKPT_VALUE_STRING, /* UTF-8 */
    CKPT_VALUE_BYTES,
    CKPT_VALUE_LIST,
    CKPT_VALUE_TUPLE,
    CKPT_VALUE_SET,
    CKPT_VALUE_DICT,
    CKPT_VALUE_TENSOR, /* an embedded tensor */
    CKPT_VALUE_OBJECT, /* instance of another class: name + args + state */
} ckpt_value_type;

typedef struct ckpt_value ckpt_value;
typedef struct ckpt_object ckpt_object; /* a loaded non-tensor entry, owns its values */

ckpt_status ckpt_object_load(ckpt_reader *r, const ckpt_entry *e, ckpt_object **out,
                             ckpt_error *err);
/* How one value is loaded (ckpt_object_load_with); zero fields take the defaults. */
typedef struct ckpt_object_options {
    /* The memory loading the value may take, in bytes: its stored bytes decoded into memory
     * (transforms such as zstd), its pickle while it is decoded, the decoded values, the
     * decoder's working memory (stack, memo) and the ckpt_value tree made of them, together.  A
     * value that needs more fails with CKPT_E_LIMIT, the message naming the key and this figure; a
     * small pickle can decode into far more (a list of small ints: 2 bytes each stored, ~80
     * decoded), so this bounds what a value costs whatever it holds.  0: only the reader's limits
     * (max_object_bytes, max_pickle_memory). */
    uint64_t max_memory;
} ckpt_object_options;
/* ckpt_object_load with options (NULL: as ckpt_object_load). */
ckpt_status ckpt_object_load_with(ckpt_reader *r, const ckpt_entry *e,
                                  const ckpt_object_options *opts, ckpt_object **out,
                                  ckpt_error *err);
const ckpt_value *ckpt_object_root(const ckpt_object *o);
void ckpt_object_free(ckpt_object *o);

ckpt_value_type ckpt_value_type_of(const ckpt_value *v);
bool ckpt_value_bool(const ckpt_value *v);
int64_t ckpt_value_int(const ckpt_value *v);
double ckpt_value_float(const ckpt_value *v);
/* STRING and BYTES: pointer + length (NUL-terminated as well); BIGINT: decimal text;
 * OBJECT: "module.Class". */
const char *ckpt_value_str(const ckpt_value *v, size_t *len);
/* LIST, TUPLE, SET: items; DICT: pairs; OBJECT: 0. */
size_t ckpt_value_len(const ckpt_value *v);
const ckpt_value *ckpt_value_item(const ckpt_value *v, size_t i);
const ckpt_value *ckpt_value_dict_key(const ckpt_value *v, size_t i);
const ckpt_value *ckpt_value_dict_val(const ckpt_value *v, size_t i);
/* SET: true for a frozenset. */
bool ckpt_value_set_frozen(const ckpt_value *v);
/* OBJECT: constructor arguments and state (NULL when absent). */
const ckpt_value *ckpt_value_object_args(const ckpt_value *v);
const ckpt_value *ckpt_value_object_state(const ckpt_value *v);
/* TENSOR. */
ckpt_dtype ckpt_value_tensor_dtype(const ckpt_value *v);
int ckpt_value_tensor_ndim(const ckpt_value *v);
const int64_t *ckpt_value_tensor_shape(const ckpt_value *v);
ckpt_status ckpt_value_tensor_read(const ckpt_value *v, void *dst, size_t dst_size,
                                   ckpt_error *err);

/* Renderings into a malloc'ed, NUL-terminated string the caller frees.
 * JSON: numbers, strings, lists/tuples as arrays, dicts as objects when every key is a
 * string (else {"__dict__": [[k, v], ...]}), tensors as
 * {"__tensor__": {"dtype":..., "shape": [...]}}, objects as {"__object__": "mod.Class", ...}.
 * Text: Python's repr (`{'lr': 0.001, 'betas': (0.9, 0.999)}`, `(1+2j)`, `frozenset({1})`,
 * `range(0, 10)`), symbolic for other objects (`module.Class(args, attr=v)`).
 * Both are bounded: past 16 MiB of output or 16 Mi nodes visited (a DAG of shared references
 * expands exponentially as a tree) they fail with CKPT_E_LIMIT. */
ckpt_status ckpt_value_to_json(const ckpt_value *v, char **out, ckpt_error *err);
ckpt_status ckpt_value_to_text(const ckpt_value *v, char **out, ckpt_error *err);

/* s[0, len) as a JSON string literal, as every JSON ckptfs writes has it: quotes included,
 * `"`, backslash and control characters escaped, UTF-8 kept, each byte of an invalid UTF-8 sequence
 * written as \ufffd (so the result is always valid JSON).  malloc'ed; NULL when out of
 * memory. */
char *ckpt_json_string(const char *s, size_t len);

/* ---------------------------------------------------------------- metadata dump */

/* The whole checkpoint metadata as compact JSON (malloc'ed, NUL-terminated; the caller frees
 * it): the decoded `.metadata` pickle rendered without executing or interpreting anything
 * (classes as {"__object__": "module.Class", "args": [...], "state": ...}, see
 * src/value/pk_json.c).  Without `.metadata`, the rank-local files are dumped as one object
 * {"__0.metadata": ..., "__1.metadata": ...} in rank order; HuggingFace safetensors storage
 * (no metadata pickle) as {"<file>.safetensors": <its header>, ...,
 * "model.safetensors.index.json": <it, when present>}.  The safe replacement for
 * unpickling the metadata; `opts` (may be NULL) bounds file size, memory and depth as for
 * ckpt_reader_open. */
ckpt_status ckpt_metadata_dump_json(const char *dir, const ckpt_open_options *opts, char **out,
                                    ckpt_error *err);

/* ---------------------------------------------------------------- run directories */

/* The latest complete step of run directory `run` (its sub-directories holding a checkpoint),
 * by the rule the mount's `latest` follows: the first step its trackers name (`latest` as
 * this saver and DeepSpeed keep it, SageMaker's `newest`, Megatron's
 * latest_checkpointed_iteration.txt) that is complete, else the newest complete step (by the
 * number its name ends with, then modification time, then name).  verify: a candidate must
 * also open with ckpt_reader_open, as the mount checks (a copy still under way fails and the
 * next candidate is tried; at most 8).  *name (malloc'ed) is the step's name.
 * CKPT_E_NOTFOUND when there is none. */
ckpt_status ckpt_run_latest(const char *run, bool verify, char **name, ckpt_error *err);

#ifdef __cplusplus
}
#endif
#endif /* CKPT_H */
