/* reshard.h — shared pieces of `ckpt reshard` (cmd_reshard.c: options and the single-process
 * writer; cmd_reshard_mpi.c: the MPI path): the parsed arguments, re-saving an entry's key,
 * and converting a stored non-tensor value into a saver value. */
#ifndef CK_TOOLS_RESHARD_H
#define CK_TOOLS_RESHARD_H

#include "ckpt_save.h"

typedef struct reshard_args {
    const char *src, *dst;
    uint32_t ranks;          /* --ranks; 0: the layout's, the MPI world size or 1 */
    const char *layout_text; /* --layout: a spec (ckpt.h "layouts") or dimD (Shard(D)) */
    const char *map_file;    /* --layout-map: per-key specs (JSON, as `ckpt load`'s) */
    ckpt_layout layout;      /* the default layout (reshard_layouts) */
    ckpt_layout_map *map;    /* NULL without --layout-map */
    uint64_t budget; /* bytes of tensor data held at once (per process, single; job-wide, MPI) */
    bool no_fsync, quiet;
    bool strides;     /* --torch 2.15 or later: TensorProperties with strides (ckpt_save_options) */
    int torch_target; /* --torch: major * 100 + minor, 0 without (ckpt_save_options) */
} reshard_args;

/* --torch VERSION: the torch release that will load the result ("2.11", "2.15.0+cu132").
 * Sets a->strides for 2.15 and later; 0, or a usage error (printed) for what no torch of
 * that version can read or what is not a version. */
int reshard_parse_torch(const char *arg, reshard_args *a);
/* Without --torch: the oldest torch that loads what the reshard of `r` writes (204 .. 215,
 * major * 100 + minor) and, when that is newer than 2.4, a tensor that needs it (`key`,
 * `dt`); printed as a note so nobody learns it from a failing load. */
int reshard_torch_needed(ckpt_reader *r, const reshard_args *a, const char **key, ckpt_dtype *dt);
/* Prints reshard_torch_needed's note (stderr) unless --torch or -q was given. */
void reshard_note_torch(ckpt_reader *r, const reshard_args *a);

/* The saver key of entry `e`: its flat key and its planner_data path, where an element made
 * only of decimal digits becomes a list position.  `elems` receives the path (freed with
 * free()). */
ckpt_status reshard_key(const ckpt_entry *e, ckpt_save_key *key, ckpt_save_elem **elems,
                        ckpt_error *err);
/* A stored value to write again: the source item's archive bytes (`archive`, `len`) or a
 * saver value (`v`). */
typedef struct reshard_val {
    void *archive;
    size_t len;
    ckpt_save_value *v;
} reshard_val;
/* Loads object entry `e` (it must decode).  A plain stored item is copied byte for byte (any
 * content: objects, embedded tensors, sets and frozensets, OrderedDicts stay what they are);
 * a transformed one (zstd) is converted into a saver value (None, bool, ints of any size,
 * float, str, bytes, list, tuple, set, dicts with any keys), and what cannot be rebuilt as
 * data (objects of other classes, embedded tensors) fails with CKPT_E_UNSUPPORTED naming the
 * key. */
ckpt_status reshard_value(ckpt_reader *r, const ckpt_entry *e, reshard_val *out, ckpt_error *err);
void reshard_val_release(reshard_val *v);
/* The number of target ranks before the layouts are read: --ranks, else the ranks of a
 * --layout spec, else `world` (the MPI world size, or 1 alone). */
uint32_t reshard_nranks(const reshard_args *a, uint32_t world);
/* Resolves a->layout (--layout; `dimD` is Shard(D) over `nranks`) and a->map (--layout-map
 * FILE) for `nranks` ranks; a usage error (printed when `print`) for a bad spec, a spec of
 * another rank count or a bad map file.  Free a->map with ckpt_layout_map_free. */
int reshard_layouts(reshard_args *a, uint32_t nranks, bool print);
/* The canonical spec of the default layout, and " + --layout-map FILE" when there is a map. */
void reshard_layout_desc(const reshard_args *a, char *buf, size_t size);

/* What rank `rank` stores of tensor `e` under its layout (the map's or the default): the run
 * boxes of its DTensor local shard (ckpt_layout_shard_run_box: one box per choice of a run on
 * every dim, so a _StridedShard shard of several pieces is several chunks), nothing when a
 * lower rank holds the same replica (a mesh dim that replicates the tensor, R or a Shard of a
 * dim the tensor lacks: only coordinate 0 along it stores, as torch's dedup to the lowest
 * rank) or when the shard is empty.  Of a tensor with no elements, rank 0 stores its (empty)
 * box, and another rank its box when that is not empty along a dim the layout shards (what
 * torch's DCP saves for each DTensor shard).  Fails (naming the key) on an entry with a problem (a
 * damaged or hostile `.metadata`) or a layout the tensor cannot take. */
typedef struct reshard_share {
    ckpt_layout_shard *sh; /* the rank's local shard (NULL when nboxes is 0) */
    uint64_t nboxes;       /* 0: this rank stores nothing */
    int ndim;
    const int64_t *shape;
    size_t itemsize;
} reshard_share;
ckpt_status reshard_share_of(const reshard_args *a, const ckpt_entry *e, uint32_t rank,
                             reshard_share *out, ckpt_error *err);
/* Box i (< nboxes) of a share: start/count (ndim values) and its bytes. */
void reshard_share_box(const reshard_share *s, uint64_t i, int64_t *start, int64_t *count,
                       uint64_t *bytes);
void reshard_share_release(reshard_share *s);

#ifdef CKPT_WITH_MPI
int reshard_mpi(reshard_args *a);
#endif

#endif
