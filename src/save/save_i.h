/* save_i.h — internals shared by the saver's parts: the in-memory description of what one
 * rank wrote (ckpt_save_desc), key normalisation and the value tree. */
#ifndef CK_SAVE_SAVE_I_H
#define CK_SAVE_SAVE_I_H

#include "ckpt_save.h"
#include "save/pickle_writer.h"

#include <stdbool.h>
#include <stdint.h>

enum { SAVE_ITEM_TENSOR = 1, SAVE_ITEM_VALUE = 2 };

typedef struct save_elem {
    char *name; /* NULL: list position */
    int64_t index;
} save_elem;

typedef struct save_item {
    uint8_t kind;
    bool stored; /* bytes written by this rank (replica_id 0) */
    char *key;
    save_elem *path;
    size_t npath;
    ckpt_dtype dtype;
    int ndim;
    int64_t *dims;           /* 3 * ndim: global shape, offsets, sizes */
    uint64_t offset, length; /* byte range in the rank's file when stored */
} save_item;

struct ckpt_save_desc {
    uint32_t rank;
    char *file; /* relative name: "__<rank>_0.distcp" */
    save_item *items;
    size_t n, cap;
};

/* Releases what an item owns (not the item itself). */
void save_item_release(save_item *it);
/* Appends a zeroed item; NULL when out of memory. */
save_item *save_desc_push(ckpt_save_desc *d);

/* Fills it->key / it->path from a public key.  CKPT_E_INVAL for an empty or malformed key. */
ckpt_status save_key_resolve(const ckpt_save_key *k, save_item *it, ckpt_error *err);
/* CKPT_E_INVAL for an unknown ckpt_save_memory, CKPT_E_UNSUPPORTED for CUDA memory in a
 * build without CUDA (data_file.c). */
ckpt_status save_memory_check(ckpt_save_memory m, ckpt_error *err);
/* CKPT_E_INVAL for a torch_target below 204, or tensor_properties_strides with a target
 * below 215 (ckpt_save_options.torch_target); CKPT_OK for NULL options. */
ckpt_status save_options_check(const ckpt_save_options *opts, ckpt_error *err);
/* CKPT_E_UNSUPPORTED naming `key` when a tensor of `dt` cannot be loaded by the target torch
 * (0: none, always CKPT_OK). */
ckpt_status save_dtype_check(int torch_target, ckpt_dtype dt, const char *key, ckpt_error *err);
/* Tensor bytes a data file stored from device memory. */
uint64_t save_file_bytes_device(const ckpt_save_file *f);

/* Pickles `v` (protocol 2, Python's choices of opcodes). */
void save_value_pickle(pkw *w, const ckpt_save_value *v);

/* "<a>/<b>" (malloc'ed), NULL when out of memory. */
char *save_path_join(const char *a, const char *b);
/* fsync of a directory (after creating, renaming or removing entries in it). */
ckpt_status save_fsync_dir(const char *dir, ckpt_error *err);
/* ckpt_save_write_metadata with a default StorageMeta.checkpoint_id (the final directory
 * when called by the commit; `dir` itself when NULL). */
ckpt_status save_write_metadata_id(const char *dir, const ckpt_save_desc *const *descs,
                                   size_t ndescs, const ckpt_save_options *opts,
                                   const char *default_id, ckpt_error *err);
/* Removes a directory and the regular files, links and sub-directories in it. */
ckpt_status save_remove_tree(const char *dir, ckpt_error *err);

#endif
