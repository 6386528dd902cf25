/* reshard_util.c — what `ckpt reshard` needs from a source entry in either path: the saver key
 * (flat key + planner_data path), the Shard(dim) box of a rank, and stored non-tensor values
 * converted back into saver values. */
#include "reshard.h"

#include "util/error.h"

#include <stdlib.h>
#include <string.h>

ckpt_status reshard_key(const ckpt_entry *e, ckpt_save_key *key, ckpt_save_elem **elems,
                        ckpt_error *err) {
    size_t n = ckpt_entry_path_len(e);
    *elems = calloc(n ? n : 1, sizeof **elems);
    if (!*elems) return ckpt_fail(err, CKPT_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const char *s = ckpt_entry_path_elem(e, i);
        size_t len = strlen(s);
        bool digits = len > 0 && len < 19 && strspn(s, "0123456789") == len;
        (*elems)[i] =
            digits ? (ckpt_save_elem){NULL, strtoll(s, NULL, 10)} : (ckpt_save_elem){s, 0};
    }
    if (!n) { /* no planner_data: the flat key as the one element */
        (*elems)[0] = (ckpt_save_elem){ckpt_entry_key(e), 0};
        n = 1;
    }
    *key = (ckpt_save_key){.flat = ckpt_entry_key(e), .elems = *elems, .nelems = n};
    return CKPT_OK;
}

ckpt_status reshard_box(const ckpt_entry *e, int dim, uint32_t nranks, uint32_t rank,
                        int64_t *start, int64_t *count, uint64_t *bytes, ckpt_error *err) {
    *bytes = 0;
    if (ckpt_entry_problem(e))
        return ckpt_fail(err, CKPT_E_FORMAT, "key '%s': %s", ckpt_entry_key(e),
                         ckpt_entry_problem(e));
    int nd = ckpt_entry_ndim(e);
    ckpt_status st = ckpt_shard_box(nd, ckpt_entry_shape(e), dim, nranks, rank, start, count);
    if (st != CKPT_OK)
        return ckpt_fail(err, st, "key '%s': cannot split it over %u ranks along dim %d",
                         ckpt_entry_key(e), nranks, dim);
    uint64_t b = ckpt_dtype_itemsize(ckpt_entry_dtype(e));
    for (int d = 0; d < nd; d++) {
        if (count[d] < 0 || (count[d] && b > UINT64_MAX / (uint64_t)count[d]))
            return ckpt_fail(err, CKPT_E_FORMAT, "key '%s': share of rank %u is too large",
                             ckpt_entry_key(e), rank);
        b *= (uint64_t)count[d];
    }
    *bytes = b;
    return CKPT_OK;
}

static ckpt_save_value *convert(const ckpt_value *v, const char **why) {
    switch (ckpt_value_type_of(v)) {
    case CKPT_VALUE_NONE: return ckpt_save_value_none();
    case CKPT_VALUE_BOOL: return ckpt_save_value_bool(ckpt_value_bool(v));
    case CKPT_VALUE_INT: return ckpt_save_value_int(ckpt_value_int(v));
    case CKPT_VALUE_FLOAT: return ckpt_save_value_float(ckpt_value_float(v));
    case CKPT_VALUE_STRING: return ckpt_save_value_string(ckpt_value_str(v, NULL));
    case CKPT_VALUE_LIST:
    case CKPT_VALUE_TUPLE: {
        ckpt_save_value *seq = ckpt_value_type_of(v) == CKPT_VALUE_LIST ? ckpt_save_value_list()
                                                                        : ckpt_save_value_tuple();
        for (size_t i = 0; seq && i < ckpt_value_len(v); i++) {
            ckpt_save_value *item = convert(ckpt_value_item(v, i), why);
            if (!item || ckpt_save_value_append(seq, item) != CKPT_OK) {
                ckpt_save_value_free(seq);
                return NULL;
            }
        }
        return seq;
    }
    case CKPT_VALUE_DICT: {
        ckpt_save_value *d = ckpt_save_value_dict();
        for (size_t i = 0; d && i < ckpt_value_len(v); i++) {
            const ckpt_value *k = ckpt_value_dict_key(v, i);
            if (ckpt_value_type_of(k) != CKPT_VALUE_STRING) {
                *why = "a dict key that is not a string";
                ckpt_save_value_free(d);
                return NULL;
            }
            ckpt_save_value *item = convert(ckpt_value_dict_val(v, i), why);
            if (!item || ckpt_save_value_set(d, ckpt_value_str(k, NULL), item) != CKPT_OK) {
                ckpt_save_value_free(d);
                return NULL;
            }
        }
        return d;
    }
    case CKPT_VALUE_BIGINT: *why = "an int beyond 64 bits"; return NULL;
    case CKPT_VALUE_BYTES: *why = "bytes"; return NULL;
    case CKPT_VALUE_SET: *why = "a set"; return NULL;
    case CKPT_VALUE_TENSOR: *why = "an embedded tensor"; return NULL;
    case CKPT_VALUE_OBJECT: *why = "an object of another class"; return NULL;
    }
    *why = "an unknown kind of value";
    return NULL;
}

ckpt_status reshard_value(ckpt_reader *r, const ckpt_entry *e, ckpt_save_value **out,
                          ckpt_error *err) {
    *out = NULL;
    ckpt_object *o;
    CKPT_TRY(ckpt_object_load(r, e, &o, err));
    const char *why = NULL;
    *out = convert(ckpt_object_root(o), &why);
    ckpt_object_free(o);
    if (*out) return CKPT_OK;
    if (why)
        return ckpt_fail(err, CKPT_E_UNSUPPORTED,
                         "key '%s': the value holds %s, which the saver "
                         "cannot write",
                         ckpt_entry_key(e), why);
    return ckpt_fail(err, CKPT_E_NOMEM, "key '%s': out of memory (or a repeated dict key)",
                     ckpt_entry_key(e));
}
