/* ckpt_save.h — public API of the ckptfs saver: writing PyTorch Distributed Checkpoint (DCP)
 * directories that torch.distributed.checkpoint.load reads at any world size.
 *
 * The work is split so that a collective (MPI) layer can drive it:
 *
 *   rank 0:       ckpt_save_begin(dir)            -> staging directory (hidden, same parent)
 *   every rank:   ckpt_save_file_open(staging, rank)
 *                 ckpt_save_file_add_tensor / _add_value ...   (its local pieces)
 *                 ckpt_save_file_finish           -> ckpt_save_desc (what it wrote)
 *                 ckpt_save_desc_encode           -> bytes to gather
 *   rank 0:       ckpt_save_desc_decode (each)    -> descriptions of all ranks
 *                 ckpt_save_commit(txn, descs)    -> `.metadata` written last, then rename
 *
 * In one process (tests, single-rank tools) the same calls run one after the other.
 *
 * Conventions are those of ckpt.h: prefix ckpt_save_, opaque handles, `*_free(NULL)` is a
 * no-op, failures return a ckpt_status and fill an optional caller-owned ckpt_error.  No
 * global state: handles may be used from different threads, one thread per handle.
 *
 * Ownership: every string and buffer passed in is copied or only read during the call
 * (tensor data may be CUDA device memory in builds with the cuda feature, see
 * ckpt_save_tensor);
 * descriptions returned by _finish / _decode belong to the caller (ckpt_save_desc_free) and
 * are only read by _write_metadata / _commit; the value adders take their item.
 * Files are created 0644 and directories 0755 (before the umask).
 */
#ifndef CKPT_SAVE_H
#define CKPT_SAVE_H

#include "ckpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- options */

typedef struct ckpt_save_options {
    /* Skip fsync of files and directories (tests, scratch space).  Default false: every data
     * file, `.metadata` and the directories involved are fsync'ed before the commit rename. */
    bool no_fsync;
    /* Kept for source compatibility: the 5-tuple TensorProperties it asked for is now the
     * default (see tensor_properties_strides).  Ignored. */
    bool legacy_tensor_properties;
    /* ckpt_save_commit also writes the integrity manifest `.ckptfs-manifest` (XXH3-64 of every
     * stored item and of `.metadata`, see ckpt_manifest.h) into the staging directory before
     * the rename, so the step is published sealed.  Costs one read pass over the data (all
     * cores), normally from the page cache. */
    bool seal;
    /* Pickle protocol of `.metadata`: 0 or 4 = protocol 4 (what torch writes under Python
     * 3.8-3.13), 5 = protocol 5 (Python 3.14's default; same opcodes).  Others: INVAL. */
    int metadata_protocol;
    /* StorageMeta.checkpoint_id (a pathlib.PosixPath); NULL: the final directory path. */
    const char *checkpoint_id;
    /* Pinned host memory a data file uses to bring CUDA device pieces to the host (two
     * halves: the GPU copies into one while the other is CRC'ed and written); allocated at
     * the first device piece.  0: 16 MiB; at least 512 bytes. */
    uint64_t device_staging_bytes;
    /* Write TensorProperties as torch 2.15's 6-tuple (the global tensor's contiguous strides
     * appended) instead of the 5-tuple.  Default false: the saver writes the oldest form that
     * represents the data, and every tensor it writes has the default strides, so the
     * 5-tuple says everything; torch 2.4 - 2.14 read only the 5-tuple (torch 2.11: "ValueError:
     * too many values to unpack (expected 5)" on the 6-tuple), torch 2.15 reads both and uses
     * the strides in no load.  Set it only for a reader that needs the field. */
    bool tensor_properties_strides;
    /* The torch release that will load the checkpoint, as major * 100 + minor (211 = 2.11);
     * 0: no target (what is written may then need a newer torch than 2.4: see
     * ckpt_dtype_torch_min).  With a target, ckpt_save_file_add_tensor refuses a tensor whose
     * dtype that release cannot load (CKPT_E_UNSUPPORTED, naming the key, the dtype and the
     * release needed), and ckpt_save_begin / ckpt_save_file_open refuse a target below 204
     * (torch 2.4 reads no .metadata the saver writes) or tensor_properties_strides with a
     * target below 215 (CKPT_E_INVAL). */
    int torch_target;
} ckpt_save_options;

/* Whether this build can save from CUDA device memory (the cuda meson feature). */
bool ckpt_save_has_cuda(void);

/* ---------------------------------------------------------------- values */

/* A non-tensor value (what Python would store in a state_dict: None, bool, int of any size,
 * float, str, bytes, list, tuple, set, frozenset, dict with keys of any hashable kind),
 * pickled into the data file as torch.save(obj) would (CPython's protocol-2 opcodes). */
typedef struct ckpt_save_value ckpt_save_value;

/* Constructors return NULL when memory runs out; the adders below accept that NULL and fail
 * with CKPT_E_NOMEM, so a whole tree can be built and checked once. */
ckpt_save_value *ckpt_save_value_none(void);
ckpt_save_value *ckpt_save_value_bool(bool v);
ckpt_save_value *ckpt_save_value_int(int64_t v);
ckpt_save_value *ckpt_save_value_float(double v);
ckpt_save_value *ckpt_save_value_string(const char *utf8); /* copied; NULL if not UTF-8 */
ckpt_save_value *ckpt_save_value_bytes(const void *data, size_t len); /* copied */
/* An int of any size from decimal text ("-123", "340282366920938463463374607431768211456");
 * NULL when malformed.  One that fits int64 is an ordinary int. */
ckpt_save_value *ckpt_save_value_bigint(const char *decimal);
/* A set (frozen: a frozenset); items are added with ckpt_save_value_append (hashable ones:
 * no list, dict or set inside) and pickled in that order. */
ckpt_save_value *ckpt_save_value_pyset(bool frozen);
ckpt_save_value *ckpt_save_value_list(void);
ckpt_save_value *ckpt_save_value_tuple(void);
ckpt_save_value *ckpt_save_value_dict(void);
/* Appends to a list, tuple, set or frozenset.  Takes ownership of `item` in every case (freed
 * on failure). */
ckpt_status ckpt_save_value_append(ckpt_save_value *seq, ckpt_save_value *item);
/* Sets dict[key] = item for a str key (insertion order kept; a repeated key fails with
 * CKPT_E_INVAL).  Takes ownership of `item` in every case. */
ckpt_status ckpt_save_value_set(ckpt_save_value *dict, const char *key, ckpt_save_value *item);
/* Sets dict[key] = item for a key of any hashable kind (int, float, bool, None, str, bytes,
 * tuple, frozenset ...; a list, dict or set anywhere in it is CKPT_E_INVAL, as is a key equal
 * by Python's == to one already there: 1, 1.0 and True are the same key).  Takes ownership
 * of `key` and `item` in every case. */
ckpt_status ckpt_save_value_set_item(ckpt_save_value *dict, ckpt_save_value *key,
                                     ckpt_save_value *item);
/* Frees a value and everything it owns. */
void ckpt_save_value_free(ckpt_save_value *v);
/* A value the reader decoded (ckpt_object_root, ckpt_value_item ...) as a saver value, to be
 * written again.  NULL when out of memory (or a dict key repeats), or — with *why set to what
 * it holds — when the value holds what the saver cannot write as data: an embedded tensor,
 * an object of another class. */
ckpt_save_value *ckpt_save_value_from(const ckpt_value *v, const char **why);

/* ---------------------------------------------------------------- keys */

/* One element of a state_dict path: a dict key (name != NULL) or a list position (name ==
 * NULL, index >= 0).  torch records these in `planner_data` (list positions as ints). */
typedef struct ckpt_save_elem {
    const char *name;
    int64_t index;
} ckpt_save_elem;

/* How an entry is named.  Give either
 *   - `elems` (nelems > 0): the exact path; or
 *   - `path`: "optim/param_groups/0/lr" split on '/', elements made only of decimal digits
 *     taken as list positions (use `elems` for dict keys like "0").
 * `flat` is the state_dict_metadata key; NULL means the elements joined by '.' (what torch's
 * flatten_state_dict produces).  Every string is UTF-8 and copied. */
typedef struct ckpt_save_key {
    const char *flat;
    const char *path;
    const ckpt_save_elem *elems;
    size_t nelems;
} ckpt_save_key;

/* ---------------------------------------------------------------- per-rank data file */

/* The data file `__<rank>_0.distcp` of one rank, written sequentially: one torch.save
 * archive per tensor piece and per value, in call order. */
typedef struct ckpt_save_file ckpt_save_file;
/* What one rank wrote: entries, chunk boxes, byte ranges.  Compact and serialisable. */
typedef struct ckpt_save_desc ckpt_save_desc;

/* Where a piece's bytes live. */
typedef enum ckpt_save_memory {
    CKPT_SAVE_MEM_AUTO = 0, /* CUDA builds ask the CUDA runtime (cudaPointerGetAttributes);
                               builds without CUDA cannot tell and read it as host memory */
    CKPT_SAVE_MEM_HOST = 1, /* host memory (no CUDA call is made) */
    CKPT_SAVE_MEM_CUDA = 2, /* CUDA device memory; CKPT_E_UNSUPPORTED without the cuda feature */
} ckpt_save_memory;

/* One rank's piece of a tensor: the box [offsets, offsets + sizes) of the global tensor.
 * `data` holds the box in C order, little-endian, prod(sizes) * itemsize bytes, in host
 * memory or (CUDA builds) device memory, read during the call only.  Device bytes are
 * copied to the host through pinned staging on the saver's own stream, which waits for work
 * on the legacy default stream only: work on other streams that writes the buffer must be
 * complete (synchronized) before the call.  A 0-d tensor has ndim 0 (shape/offsets/sizes
 * NULL).
 * Replicated pieces: every holder passes the same box; only the holder with replica_id 0
 * stores bytes, the others are recorded as replicas (nothing written).  When several
 * holders store the same box anyway (all replica_id 0), .metadata keeps the lowest rank's
 * copy and the others' bytes stay unreferenced. */
typedef struct ckpt_save_tensor {
    ckpt_dtype dtype;
    int ndim;
    const int64_t *global_shape; /* ndim values */
    const int64_t *offsets;      /* ndim values; NULL: zeros */
    const int64_t *sizes;        /* ndim values; NULL: global_shape (the whole tensor) */
    const void *data;
    size_t data_size; /* must equal prod(sizes) * itemsize */
    uint32_t replica_id;
    ckpt_save_memory memory; /* where `data` lives (AUTO: asks the CUDA runtime) */
} ckpt_save_tensor;

/* Creates `<dir>/__<rank>_0.distcp` (it must not exist).  `opts` may be NULL. */
ckpt_status ckpt_save_file_open(const char *dir, uint32_t rank, const ckpt_save_options *opts,
                                ckpt_save_file **out, ckpt_error *err);
ckpt_status ckpt_save_file_add_tensor(ckpt_save_file *f, const ckpt_save_key *key,
                                      const ckpt_save_tensor *t, ckpt_error *err);
/* A non-tensor entry (BytesStorageMetadata).  replica_id as for tensors: values every rank
 * holds (hyper-parameters) are normally passed by all ranks, stored by replica 0. */
ckpt_status ckpt_save_file_add_value(ckpt_save_file *f, const ckpt_save_key *key,
                                     const ckpt_save_value *v, uint32_t replica_id,
                                     ckpt_error *err);
/* A non-tensor entry whose torch.save archive already exists — the stored bytes of a value
 * item of another checkpoint (`ckpt reshard` copies them) — written unchanged, so whatever
 * it holds (objects of any class, embedded tensors) is kept exactly.  `archive` (read during
 * the call) must be a whole zip archive (a local header first, the end record last, no
 * comment), else CKPT_E_FORMAT; its content is not interpreted. */
ckpt_status ckpt_save_file_add_value_archive(ckpt_save_file *f, const ckpt_save_key *key,
                                             const void *archive, size_t len, uint32_t replica_id,
                                             ckpt_error *err);
/* Flushes, fsyncs (unless no_fsync) and closes the file; *out receives the description
 * (caller frees it).  The file handle must still be freed. */
ckpt_status ckpt_save_file_finish(ckpt_save_file *f, ckpt_save_desc **out, ckpt_error *err);
/* Closes the file if needed (an unfinished file is left as is: the transaction's abort
 * removes the staging directory). */
void ckpt_save_file_free(ckpt_save_file *f);

/* ---------------------------------------------------------------- descriptions */

/* Encodes a description as bytes (little-endian, versioned; for MPI_Gatherv).  *buf is
 * malloc'ed; the caller frees it. */
ckpt_status ckpt_save_desc_encode(const ckpt_save_desc *d, void **buf, size_t *len,
                                  ckpt_error *err);
/* Decodes (and validates) an encoded description. */
ckpt_status ckpt_save_desc_decode(const void *buf, size_t len, ckpt_save_desc **out,
                                  ckpt_error *err);
uint32_t ckpt_save_desc_rank(const ckpt_save_desc *d);
void ckpt_save_desc_free(ckpt_save_desc *d);

/* ---------------------------------------------------------------- metadata and commit */

/* Writes `<dir>/.metadata` (through `.metadata.tmp` + rename) from the descriptions of all
 * ranks: merges entries by key, checks that every rank agrees on dtype / global shape /
 * kind, drops duplicate boxes (lowest rank's stored copy wins), checks that the stored boxes
 * of each tensor lie inside it, do not overlap and cover it.  Does not commit anything. */
ckpt_status ckpt_save_write_metadata(const char *dir, const ckpt_save_desc *const *descs,
                                     size_t ndescs, const ckpt_save_options *opts, ckpt_error *err);

/* A checkpoint being written.  The data goes to a hidden staging directory
 * `<parent>/.<name>.tmp-<16 hex>` beside the final `<parent>/<name>`, so the rename that
 * publishes it is atomic and directory scanners (the ckptfs mount skips dot names) never see
 * a partial step. */
typedef struct ckpt_save_txn ckpt_save_txn;

/* Creates the staging directory for the final directory `dir`, which must not exist. */
ckpt_status ckpt_save_begin(const char *dir, const ckpt_save_options *opts, ckpt_save_txn **out,
                            ckpt_error *err);
/* The staging directory (where the ranks' data files go). */
const char *ckpt_save_txn_staging_dir(const ckpt_save_txn *t);
/* ckpt_save_write_metadata into the staging directory, fsync, rename staging -> dir, fsync
 * the parent.  On failure nothing is visible at `dir`; the txn can still be freed (abort). */
ckpt_status ckpt_save_commit(ckpt_save_txn *t, const ckpt_save_desc *const *descs, size_t ndescs,
                             ckpt_error *err);
/* Frees the transaction; one that was not committed is aborted: its staging directory and
 * the files in it are removed. */
void ckpt_save_txn_free(ckpt_save_txn *t);

/* ---------------------------------------------------------------- directories of steps */

/* Points `<parent>/latest` at step `name` (a sub-directory of parent): a small text file
 * holding the name and a newline (the DeepSpeed convention), replaced atomically through a
 * temporary file and rename.  Fails with CKPT_E_NOTFOUND unless `<parent>/<name>/.metadata`
 * exists. */
ckpt_status ckpt_save_set_latest(const char *parent, const char *name,
                                 const ckpt_save_options *opts, ckpt_error *err);
/* Reads `<parent>/latest` into *name (malloc'ed).  CKPT_E_NOTFOUND if there is none. */
ckpt_status ckpt_save_get_latest(const char *parent, char **name, ckpt_error *err);
/* Keep-N retention: among the complete steps of `parent` (sub-directories, not symlinks, not
 * starting with '.', that their writer marked complete: `.metadata`, `__0.metadata`, a
 * HuggingFace index), ordered as the mount orders them (the number their names end with, then
 * modification time, then name: ckpt_run_latest), the newest `keep` stay and the older ones
 * are deleted, except `protect` (may be NULL) and the steps the run's trackers name (`latest`,
 * `newest`, Megatron's latest_checkpointed_iteration.txt), so a newer step is never deleted
 * for an older protected one.  A step is first renamed to a hidden name, then removed, so a
 * crash mid-way never leaves a visible half-deleted step.  *removed (may be NULL) receives
 * the count (steps only).  It also removes the leftovers of earlier runs
 * (ckpt_save_leftovers): every `.deleting` directory, and staging directories idle for
 * CKPT_SAVE_STALE_S or more. */
ckpt_status ckpt_save_retain(const char *parent, size_t keep, const char *protect, size_t *removed,
                             ckpt_error *err);

/* Leftovers of saves and deletions that did not finish (a killed job): hidden staging
 * directories `.<step>.tmp-<hex>` (ckpt_save_begin) and `.<step>.deleting` (retention).
 * `idle_s` is how long nothing in it has changed (its newest modification), `bytes` what its
 * files hold.  A staging directory may also belong to a save still running: only its age
 * tells; CKPT_SAVE_STALE_S is the age from which ckpt_save_retain removes one. */
typedef enum { CKPT_SAVE_LEFTOVER_STAGING, CKPT_SAVE_LEFTOVER_DELETING } ckpt_save_leftover_kind;
typedef void (*ckpt_save_leftover_fn)(void *ctx, const char *name, ckpt_save_leftover_kind kind,
                                      double idle_s, uint64_t bytes);
#define CKPT_SAVE_STALE_S (24.0 * 3600)
/* Calls fn for each leftover in `parent`, in name order. */
ckpt_status ckpt_save_leftovers(const char *parent, ckpt_save_leftover_fn fn, void *ctx,
                                ckpt_error *err);

/* ---------------------------------------------------------------- torch.save files */

/* A torch.save file (the zip archive torch.save writes and torch.load reads, `weights_only`
 * and `mmap=True` included) of a checkpoint's entries, laid out from the index alone: its
 * size and the place of every byte are known before any tensor is read, so any byte range
 * can be produced on demand (the mount's `.torch/` view) or the whole file streamed in order
 * (`ckpt export --format torch`), in memory proportional to the number of entries (the
 * pickle and a record table), never to the entries' tensor bytes.
 *
 * The archive holds the nested state_dict that torch.distributed.checkpoint's own
 * conversion (dcp_to_torch_save) rebuilds from the same checkpoint: path elements become
 * nested dict keys, int elements list positions (lists padded with None, as DCP's
 * set_element does), in `state_dict_metadata` order.  Tensors are C-contiguous CPU tensors
 * of their own storages (records data/0, data/1 ... in pickle order, each 64-byte aligned);
 * non-tensor values are pickled again as plain data, the tensors inside them (a value saved
 * whole, not flattened) as storages of their own, read into memory when the archive is laid
 * out (64 MiB of them at most per archive).  Left out (ckpt_torchsave_skipped says which and
 * why): tensors with a metadata defect, values that torch.load(weights_only=True) refuses or
 * that are not plain data (objects of other classes, a frozenset, empty bytes, ints of 256
 * bytes or more, a tensor as a dict key, embedded tensors past the budget), and entries
 * whose path conflicts with an earlier one (a value where a container is, a str key under a
 * list).
 *
 * Records: data.pkl, .format_version, .storage_alignment, byteorder, data/<N>..., version,
 * .data/serialization_id (derived from the content, so the same entries give the same
 * bytes), stored, Zip64 where needed, byte for byte as torch's writer lays them out, with
 * data descriptors: a record's CRC-32 is in its descriptor (after its data) and its central
 * directory entry, never in its local header.  Ranges (ckpt_torchsave_read/_map) carry the
 * same real CRC-32s as ckpt_torchsave_write: a tensor record's is computed the first time a
 * range covers part of its descriptor or central directory entry — reading the whole tensor
 * then, TS_CRC_BLOCK (4 MiB) at a time — and kept in the handle, so a range of the central
 * directory costs one read of every tensor it names, once per handle (torch.load reads the
 * whole directory when it opens an archive, mmap=True included: it then costs a read of all
 * the archive's tensor bytes); local headers and data never need it.  With zero_crc the
 * ranges carry 0 instead and read nothing (torch never checks it, as with torch.save under
 * torch.serialization.set_crc32_options(False); `unzip -t` and zipfile's testzip do).
 */
typedef struct ckpt_torchsave ckpt_torchsave;

typedef struct ckpt_torchsave_options {
    /* Tree path (as ckpt_entry_path spells it) of the subtree to write: the value at that
     * path becomes the archive's root (a dict, a list, or a tensor); NULL or "": the whole
     * state_dict. */
    const char *under;
    /* The value at `under` is an optimizer state_dict keyed by parameter FQN (`state` maps
     * FQNs to their state, each of `param_groups` lists its FQNs under `params`, as
     * torch.distributed.checkpoint.state_dict.get_state_dict gives it): write it in the form
     * torch.optim.Optimizer.load_state_dict takes instead — parameters numbered 0, 1, ... in
     * param_groups order, `params` lists of those numbers, `state` keyed by them (in number
     * order).  CKPT_E_FORMAT, naming what is missing, when the value is not of that form. */
    bool by_id;
    /* Entries that ckpt_entry_matches with one of these prefixes (tree paths, or flat-key
     * prefixes) are left out, as if absent (`ckpt export --exclude`). */
    const char *const *exclude;
    size_t num_exclude;
    /* Only the entries at the root (ckpt_entry_at_root: not under a top-level directory),
     * e.g. the model keys of a torchtitan checkpoint beside `optimizer/`...
     * (`.torch/@root.pt`). */
    bool root_only;
    /* Ranges (ckpt_torchsave_read/_map) carry CRC-32 0 for the entries' tensor records
     * instead of computing them (ckpt_torchsave_write's are real regardless). */
    bool zero_crc;
    /* Each non-tensor value is decoded within this many bytes (ckpt_object_options.max_memory);
     * one needing more is left out, as a value torch.load(weights_only=True) refuses is
     * (ckpt_torchsave_skipped says why; a `params` list of the by_id form fails the create
     * with CKPT_E_LIMIT).  0: the reader's limits only. */
    uint64_t max_value_memory;
} ckpt_torchsave_options;

/* Lays out the archive: decodes the non-tensor values under `under` (reading their stored
 * items) and pickles the tree; no tensor byte is read.  CKPT_E_NOTFOUND when no entry lies
 * under `under`.  The reader must outlive the handle.  opts may be NULL. */
ckpt_status ckpt_torchsave_create(ckpt_reader *r, const ckpt_torchsave_options *opts,
                                  ckpt_torchsave **out, ckpt_error *err);
void ckpt_torchsave_free(ckpt_torchsave *t);

uint64_t ckpt_torchsave_size(const ckpt_torchsave *t); /* bytes of the whole archive */
size_t ckpt_torchsave_num_tensors(const ckpt_torchsave *t);
size_t ckpt_torchsave_num_values(const ckpt_torchsave *t);
uint64_t ckpt_torchsave_tensor_bytes(const ckpt_torchsave *t);
/* Entries under `under` that were left out, in entry order, with the reason. */
size_t ckpt_torchsave_num_skipped(const ckpt_torchsave *t);
const ckpt_entry *ckpt_torchsave_skipped(const ckpt_torchsave *t, size_t i, const char **why);

/* One piece of a byte range: bytes [offset, offset+len) of the archive are either `mem`
 * (valid during the call only) or bytes [tensor_offset, tensor_offset+len) of tensor
 * `tensor`'s C-order little-endian bytes (mem NULL). */
typedef struct ckpt_torchsave_span {
    uint64_t offset;
    uint64_t len;
    const void *mem;
    const ckpt_entry *tensor;
    uint64_t tensor_offset;
} ckpt_torchsave_span;
typedef ckpt_status (*ckpt_torchsave_span_fn)(void *ctx, const ckpt_torchsave_span *s,
                                              ckpt_error *err);

/* Calls fn for the pieces of [off, off+len) in order (clipped to the archive); reads no
 * tensor bytes for fn, only those that a CRC-32 not yet known needs (see above; a read
 * failure there is returned, CKPT_E_IO, and tried again by a later call).  Stops at fn's
 * first failure and returns it.  Thread-safe. */
ckpt_status ckpt_torchsave_map(const ckpt_torchsave *t, uint64_t off, uint64_t len,
                               ckpt_torchsave_span_fn fn, void *ctx, ckpt_error *err);
/* Copies bytes [off, off+len) into dst (len clipped to the archive: *got, may be NULL, says
 * how many), reading the tensors' overlapping bytes.  Thread-safe. */
ckpt_status ckpt_torchsave_read(const ckpt_torchsave *t, uint64_t off, void *dst, size_t len,
                                size_t *got, ckpt_error *err);
/* The whole archive in order, with real CRC-32s: fn(ctx, bytes, n) for consecutive pieces
 * (a false return stops it with CKPT_E_IO); tensors are read `block` bytes at a time (0: 16
 * MiB), so memory stays at one block. */
typedef bool (*ckpt_torchsave_write_fn)(void *ctx, const void *buf, size_t len);
ckpt_status ckpt_torchsave_write(const ckpt_torchsave *t, uint64_t block,
                                 ckpt_torchsave_write_fn fn, void *ctx, ckpt_error *err);

#ifdef __cplusplus
}
#endif

#endif
