/* formats.h — the storage formats a checkpoint directory may be in, each one walker behind
 * the index builder (builder.h), and the one place that chooses among them.
 *
 * To add a format: write its walker (a file of src/index/ that fills the index with the
 * builder's calls), give it an index_format below, and put it in the order of formats.c. */
#ifndef CK_INDEX_FORMATS_H
#define CK_INDEX_FORMATS_H

#include "index/builder.h"
#include "index/metadata_files.h"

#include <time.h>

typedef struct index_format {
    const char *name;
    /* Adds every metadata file of r->dir in this format to r's empty index; CKPT_E_NOTFOUND
     * (index still empty) when the directory is not in this format. */
    ckpt_status (*add)(ckpt_reader *r, ckpt_error *err);
    /* What the format does once every file is added (NULL: nothing), before index_finish. */
    ckpt_status (*finish)(ckpt_reader *r, ckpt_error *err);
    /* Its data files' naming rule for the rank that wrote one (NULL: ranks unknown). */
    index_file_rank_fn file_rank;
    /* Whether dir holds a checkpoint in this format, judged by its files' names (and at most
     * a small index json), nothing decoded: CK_DIR_MARKED / CK_DIR_UNMARKED with *mtime (may
     * be NULL) the modification time of the file that marks it, or CK_DIR_NONE (NULL: the
     * format has no directory form). */
    ck_dir_kind (*probe)(const char *dir, struct timespec *mtime);
} index_format;

/* dcp.c: a `.metadata` pickle (torch 1.13 – today, Megatron torch_dist), or rank-local
 * `__<rank>.metadata` files (LocalShardsMetadata / no-dedup saves), merged in rank order. */
extern const index_format index_format_dcp;
extern const index_format index_format_dcp_rank_local;
/* hf_storage.c: HuggingFace safetensors storage (no metadata pickle). */
extern const index_format index_format_hf;
/* torchsave_file.c: one torch.save file (r->single_file), not a directory; a directory of
 * HuggingFace's torch.save shards (pytorch_model.bin.index.json, or a lone
 * pytorch_model.bin). */
extern const index_format index_format_torchsave_file;
extern const index_format index_format_torch_bin;
/* Whether dir holds HuggingFace torch.save shards, complete (every file its index names
 * exists); *mtime the newest of them. */
ck_dir_kind torch_bin_dir_probe(const char *dir, struct timespec *mtime);

/* torch_checkpointing.c: torch-checkpointing's metadata.pkl and the item files it names (first
 * of the directory formats after DCP's: its items may be safetensors files), and — after the
 * others — a torch-checkpointing directory without metadata.pkl (`<item>_0.pt` files). */
extern const index_format index_format_torch_checkpointing;
extern const index_format index_format_torch_checkpointing_unmarked;
/* Whether dir holds a torch-checkpointing metadata.pkl (MARKED, *mtime its modification time)
 * or only `<item>_0.pt` files (UNMARKED, *mtime the newest one's). */
ck_dir_kind tc_dir_probe(const char *dir, struct timespec *mtime);

/* What marks dir as a checkpoint: the first format of the order above whose probe says so
 * (CK_DIR_NONE when none does). */
ck_dir_kind ck_checkpoint_dir_probe(const char *dir, struct timespec *mtime);
/* Indexes r->dir in the first format that recognises it (in the order above); the last
 * format's CKPT_E_NOTFOUND when none does. */
ckpt_status index_build(ckpt_reader *r, ckpt_error *err);
/* Indexes the single file r->single_file in the file format that recognises it. */
ckpt_status index_build_file(ckpt_reader *r, ckpt_error *err);
/* f->finish, then index_finish with f's rank rule. */
ckpt_status index_complete(ckpt_reader *r, const index_format *f, ckpt_error *err);

#endif
