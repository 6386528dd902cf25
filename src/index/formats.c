/* formats.c — which storage format a checkpoint directory is in: the first in this order that
 * recognises it. */
#include "index/formats.h"

#include "util/error.h"

#include <stdio.h>

static const index_format *const formats[] = {
    &index_format_dcp,                 /* .metadata */
    &index_format_dcp_rank_local,      /* __<rank>.metadata */
    &index_format_torch_checkpointing, /* metadata.pkl (its items may be safetensors files) */
    &index_format_hf,                  /* *.safetensors, model.safetensors.index.json */
    &index_format_torch_bin,           /* pytorch_model.bin.index.json, pytorch_model.bin */
    &index_format_torch_checkpointing_unmarked, /* <item>_0.pt, no metadata.pkl */
};

ck_dir_kind ck_checkpoint_dir_probe(const char *dir, struct timespec *mtime) {
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++) {
        ck_dir_kind k = formats[i]->probe ? formats[i]->probe(dir, mtime) : CK_DIR_NONE;
        if (k != CK_DIR_NONE) return k;
    }
    return CK_DIR_NONE;
}

ckpt_status index_complete(ckpt_reader *r, const index_format *f, ckpt_error *err) {
    if (f->finish) CK_TRY(f->finish(r, err));
    return index_finish(r, f->file_rank, err);
}

ckpt_status index_build(ckpt_reader *r, ckpt_error *err) {
    /* a format that is not the directory's says so with CKPT_E_NOTFOUND; the message kept is
     * the last one that said why (a format with nothing of its own here says nothing) */
    ckpt_error kept = {.code = CKPT_E_NOTFOUND}, e;
    snprintf(kept.message, sizeof kept.message, "%s: not a checkpoint", r->dir);
    ckpt_status s = CKPT_E_NOTFOUND;
    for (size_t i = 0; i < sizeof formats / sizeof *formats && s == CKPT_E_NOTFOUND; i++) {
        e = (ckpt_error){0};
        s = formats[i]->add(r, &e);
        if (s == CKPT_OK) s = index_complete(r, formats[i], &e);
        if (s != CKPT_E_NOTFOUND || e.message[0]) kept = e;
    }
    if (s != CKPT_OK && err) *err = kept;
    return s;
}

ckpt_status index_build_file(ckpt_reader *r, ckpt_error *err) {
    ckpt_status s = index_format_torchsave_file.add(r, err);
    if (s == CKPT_OK) s = index_complete(r, &index_format_torchsave_file, err);
    return s;
}
