/* object_load.c — loading a non-tensor entry: open its torch.save item and hand the decoded
 * pickle to the value layer. */
#include "index/reader_i.h"

#include "util/error.h"
#include "value/value.h"

ckpt_status ckpt_object_load(ckpt_reader *r, const ckpt_entry *e, ckpt_object **out,
                             ckpt_error *err) {
    *out = NULL;
    if (e->kind != CKPT_ENTRY_OBJECT)
        return ck_fail(err, CKPT_E_INVAL, "'%s' is a tensor, not an object", e->key);
    if (e->problem) return ck_fail(err, CKPT_E_FORMAT, "'%s': %s", e->key, e->problem);
    if (e->value) return ck_object_from_pickle(e->value, out, err); /* in a torch.save file */
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
                         .pickle_limits = &lim};
    ts_item *it = NULL;
    ckpt_status s = ts_item_open(&src, &o, &it, err);
    if (s == CKPT_OK) s = ck_object_from_item(it, out, err);
    if (s != CKPT_OK) ck_error_suffix(err, " (key '%s')", e->key);
    return s;
}
