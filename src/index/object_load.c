/* object_load.c — loading a non-tensor entry: open its torch.save item and hand the decoded
 * pickle to the value layer, within the reader's limits and the caller's memory budget. */
#include "index/reader_i.h"

#include "util/error.h"
#include "value/value.h"

/* A failure over the caller's budget names it (the decoder's own message names only what was
 * left of it for the stage that ran out). */
static ckpt_status over(ckpt_status s, const ckpt_entry *e, uint64_t budget, ckpt_error *err) {
    if (s == CKPT_E_LIMIT && budget)
        ck_error_suffix(err,
                        " (key '%s': the value needs more than its memory budget of %llu "
                        "bytes)",
                        e->key, (unsigned long long)budget);
    else if (s != CKPT_OK)
        ck_error_suffix(err, " (key '%s')", e->key);
    return s;
}

ckpt_status ckpt_object_load_with(ckpt_reader *r, const ckpt_entry *e,
                                  const ckpt_object_options *opts, ckpt_object **out,
                                  ckpt_error *err) {
    *out = NULL;
    uint64_t budget = opts ? opts->max_memory : 0;
    if (e->kind != CKPT_ENTRY_OBJECT)
        return ck_fail(err, CKPT_E_INVAL, "'%s' is a tensor, not an object", e->key);
    if (e->problem) return ck_fail(err, CKPT_E_FORMAT, "'%s': %s", e->key, e->problem);
    if (e->value) /* in a torch.save file, decoded with it: only the tree is made here */
        return over(ck_object_from_pickle(e->value, budget, out, err), e, budget, err);
    ck_source src;
    CK_TRY(ck_loc_source(r, &e->loc, e->key, &src, err));
    if (src.len > r->limits.max_object_bytes)
        return ck_fail(err, CKPT_E_LIMIT, "'%s': object of %llu bytes exceeds the limit", e->key,
                       (unsigned long long)src.len);
    pk_limits lim = {.max_bytes = r->limits.max_pickle_memory < (4ull << 30)
                                      ? r->limits.max_pickle_memory
                                      : (4ull << 30),
                     .max_items = r->limits.max_items,
                     .max_depth = r->limits.max_depth};
    ts_open_options o = {.transforms = e->loc.transforms,
                         .max_decoded_bytes = r->limits.max_object_bytes,
                         .max_pickle_bytes = r->limits.max_object_bytes,
                         .pickle_limits = &lim,
                         .max_memory = budget};
    ts_item *it = NULL;
    ckpt_status s = ts_item_open(&src, &o, &it, err);
    if (s == CKPT_OK) {
        /* the tree gets what the item left of the budget (at least 1 byte: 0 is unbounded) */
        uint64_t held = ts_item_memory(it);
        uint64_t tree = !budget ? 0 : held < budget ? budget - held : 1;
        s = ck_object_from_item(it, tree, out, err);
    }
    return over(s, e, budget, err);
}

ckpt_status ckpt_object_load(ckpt_reader *r, const ckpt_entry *e, ckpt_object **out,
                             ckpt_error *err) {
    return ckpt_object_load_with(r, e, NULL, out, err);
}
