/* pt_view.c — virtual torch.save files (`.torch/<top>.pt` per top-level directory,
 * `@all.pt`, and `@root.pt` for the entries at the root): the archive's layout comes from
 * ckpt_torchsave (the nested state_dict pickled, every record placed) on first use; reads map a
 * byte range to rendered bytes and byte ranges of tensors, which the read engine turns into fd
 * segments like any tensor file. A top-level directory shaped like an optimizer state_dict
 * (`state/` and `param_groups/` with `params` in each group) also gets `<top>.by-id.pt`, in
 * torch.optim's form. Entries left out (values torch.load(weights_only=True) refuses...) are logged
 * once. */
#include "tree/tree_i.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

/* The stored items of the values under f's top, checked against the manifest (-o verify)
 * before the build reads them (a tensor's chunks are checked as they are read). */
static ckpt_status verify_values(tree_ckpt *c, const pt_file *f, ckpt_error *err) {
    if (!c->manifest) return CKPT_OK;
    const char *top = f->top ? c->nodes[f->top].name : "";
    for (size_t i = 0, n = ckpt_reader_num_entries(c->r); i < n; i++) {
        const ckpt_entry *e = ckpt_reader_entry(c->r, i);
        if (ckpt_entry_kind_of(e) == CKPT_ENTRY_TENSOR) continue;
        if (!ckpt_entry_under(e, top) || (f->root_only && !ckpt_entry_at_root(e))) continue;
        CK_TRY(tree_verify_item(c, &e->loc, err));
    }
    return CKPT_OK;
}

static ckpt_status build(tree_ckpt *c, pt_file *f, const ckpt_tree_options *o, ckpt_error *err) {
    CK_TRY(verify_values(c, f, err));
    /* the values decoded to lay the archive out, one at a time, each within what the value
     * cache sets aside for it (a value needing more is left out, logged) */
    uint64_t decode = tree_values_reserve_decode(c->values);
    ckpt_torchsave_options to = {.under = f->top ? c->nodes[f->top].name : "",
                                 .by_id = f->by_id,
                                 .root_only = f->root_only,
                                 .zero_crc = o && o->torch_zero_crc,
                                 .max_value_memory = decode};
    ckpt_status st = ckpt_torchsave_create(c->r, &to, &f->ts, err);
    tree_values_unreserve(c->values, decode);
    CK_TRY(st);
    for (size_t i = 0; i < ckpt_torchsave_num_skipped(f->ts); i++) {
        const char *why;
        const ckpt_entry *e = ckpt_torchsave_skipped(f->ts, i, &why);
        tree_log(o, "%s/.torch/%s: '%s' left out: %s", c->dir, f->name, ckpt_entry_path(e), why);
    }
    return CKPT_OK;
}

ckpt_status tree_pt_build(tree_ckpt *c, pt_file *f, const ckpt_tree_options *o, ckpt_error *err) {
    pthread_mutex_lock(&c->open_lock);
    ckpt_status s;
    if (f->ts) {
        s = CKPT_OK;
    } else if (f->status != CKPT_OK) {
        s = ck_fail(err, f->status, "%s/.torch/%s could not be built: %s", c->dir, f->name,
                    f->error ? f->error : ckpt_strerror(f->status));
    } else {
        ckpt_error local = {0};
        s = build(c, f, o, &local);
        if (s != CKPT_OK) {
            /* a verify mismatch or an I/O error is not remembered: they may pass */
            if (s != CKPT_E_IO && s != CKPT_E_CHECKSUM && s != CKPT_E_NOMEM) {
                f->status = s;
                f->error = strdup(local.message);
            }
            ck_fail(err, s, "%s/.torch/%s: %s", c->dir, f->name, local.message);
        }
    }
    pthread_mutex_unlock(&c->open_lock);
    return s;
}
