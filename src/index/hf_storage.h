/* hf_storage.h — HuggingFace safetensors storage (dcp-format.md §11.2): a checkpoint directory
 * of `*.safetensors` files and no metadata pickle, as torch's HuggingFaceStorageWriter writes
 * it (full tensors with `model.safetensors.index.json`, or every rank's chunks in
 * `shard-<rank>-model-<i>-of-<n>.safetensors` with DCP_SHARDING_INFO) and as the
 * HuggingFace hub stores models. */
#ifndef CK_INDEX_HF_STORAGE_H
#define CK_INDEX_HF_STORAGE_H

#include "ckpt.h"
#include "index/metadata_files.h"
#include "index/reader_i.h"
#include "util/json.h"

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#define CK_HF_INDEX_JSON "model.safetensors.index.json"

/* The `*.safetensors` regular files of dir (symlinks followed), sorted by name: a malloc'ed
 * array of malloc'ed names (free with ck_hf_names_free); *newest (may be NULL) gets the
 * latest mtime among them. */
ckpt_status ck_hf_list(const char *dir, char ***names, size_t *count, struct timespec *newest,
                       ckpt_error *err);
void ck_hf_names_free(char **names, size_t count);

/* HuggingFace safetensors storage in dir: MARKED when model.safetensors.index.json parses and
 * every file its weight_map names exists (torch writes the index last, in place: one that
 * does not parse yet is NONE), UNMARKED when there is no index but `*.safetensors` files,
 * else NONE.  *mtime (may be NULL): the index's modification time, else the newest
 * `*.safetensors` file's. */
ck_dir_kind ck_hf_dir_probe(const char *dir, struct timespec *mtime);

/* The weight_map of the HuggingFace index json at `path` (at most `max` bytes; parsed into
 * arena a; the bytes read added to *count, which may be NULL), whose files must be plain
 * names ending with `suffix`, and the distinct files it names, sorted (*files malloc'ed,
 * pointing into a). */
ckpt_status ck_hf_index_files(const char *path, const char *suffix, uint64_t max,
                              ck_io_count *count, ck_arena *a, const ck_json **map,
                              const char ***files, size_t *n, ckpt_error *err);

/* `{"<file>": <its safetensors header>, ..., "model.safetensors.index.json": <it>}` for
 * `ckpt dump-metadata` (each header checked by the safetensors reader first). */
ckpt_status ck_hf_dump_json(const char *dir, const ckpt_limits *l, char **out, ckpt_error *err);

#endif
