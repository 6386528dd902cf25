/* value.c — the public accessors of ckpt_value and the lifetime of ckpt_object.
 *
 * Accessors never fail: asked for the wrong type they return 0 / false / NULL, except that
 * ckpt_value_int accepts BOOL and ckpt_value_float accepts BOOL and INT (converted). */
#include "ckpt.h"

#include "util/error.h"
#include "value/value_i.h"

#include <stdlib.h>

const ckpt_value *ckpt_object_root(const ckpt_object *o) { return o ? o->root : NULL; }

void ckpt_object_free(ckpt_object *o) {
    if (!o) return;
    ck_arena_free(o->arena);
    ts_item_free(o->item);
    free(o);
}

ckpt_value_type ckpt_value_type_of(const ckpt_value *v) { return v ? v->type : CKPT_VALUE_NONE; }

bool ckpt_value_bool(const ckpt_value *v) { return v && v->type == CKPT_VALUE_BOOL && v->u.b; }

int64_t ckpt_value_int(const ckpt_value *v) {
    if (!v) return 0;
    if (v->type == CKPT_VALUE_INT) return v->u.i;
    if (v->type == CKPT_VALUE_BOOL) return v->u.b;
    return 0;
}

double ckpt_value_float(const ckpt_value *v) {
    if (!v) return 0;
    switch (v->type) {
    case CKPT_VALUE_FLOAT: return v->u.f;
    case CKPT_VALUE_INT: return (double)v->u.i;
    case CKPT_VALUE_BOOL: return v->u.b;
    default: return 0;
    }
}

const char *ckpt_value_str(const ckpt_value *v, size_t *len) {
    const char *s = NULL;
    size_t n = 0;
    if (v) {
        switch (v->type) {
        case CKPT_VALUE_STRING:
        case CKPT_VALUE_BYTES:
        case CKPT_VALUE_BIGINT:
            s = v->u.str.ptr;
            n = v->u.str.len;
            break;
        case CKPT_VALUE_OBJECT:
            s = v->u.obj.name;
            n = v->u.obj.name_len;
            break;
        default: break;
        }
    }
    if (len) *len = n;
    return s;
}

static bool is_seq(const ckpt_value *v) {
    return v &&
           (v->type == CKPT_VALUE_LIST || v->type == CKPT_VALUE_TUPLE || v->type == CKPT_VALUE_SET);
}

size_t ckpt_value_len(const ckpt_value *v) {
    if (is_seq(v)) return v->u.seq.len;
    if (v && v->type == CKPT_VALUE_DICT) return v->u.dict.len;
    return 0;
}

const ckpt_value *ckpt_value_item(const ckpt_value *v, size_t i) {
    return is_seq(v) && i < v->u.seq.len ? v->u.seq.items[i] : NULL;
}

const ckpt_value *ckpt_value_dict_key(const ckpt_value *v, size_t i) {
    return v && v->type == CKPT_VALUE_DICT && i < v->u.dict.len ? v->u.dict.keys[i] : NULL;
}

const ckpt_value *ckpt_value_dict_val(const ckpt_value *v, size_t i) {
    return v && v->type == CKPT_VALUE_DICT && i < v->u.dict.len ? v->u.dict.vals[i] : NULL;
}

bool ckpt_value_set_frozen(const ckpt_value *v) {
    return v && v->type == CKPT_VALUE_SET && v->u.seq.frozen;
}

const ckpt_value *ckpt_value_object_args(const ckpt_value *v) {
    return v && v->type == CKPT_VALUE_OBJECT ? v->u.obj.args : NULL;
}

const ckpt_value *ckpt_value_object_state(const ckpt_value *v) {
    return v && v->type == CKPT_VALUE_OBJECT ? v->u.obj.state : NULL;
}

ckpt_dtype ckpt_value_tensor_dtype(const ckpt_value *v) {
    return v && v->type == CKPT_VALUE_TENSOR ? v->u.tensor.view->dtype : CKPT_DTYPE_INVALID;
}

int ckpt_value_tensor_ndim(const ckpt_value *v) {
    return v && v->type == CKPT_VALUE_TENSOR ? v->u.tensor.view->ndim : 0;
}

const int64_t *ckpt_value_tensor_shape(const ckpt_value *v) {
    if (!v || v->type != CKPT_VALUE_TENSOR || v->u.tensor.view->ndim == 0) return NULL;
    return v->u.tensor.view->shape;
}

ckpt_status ckpt_value_tensor_read(const ckpt_value *v, void *dst, size_t dst_size,
                                   ckpt_error *err) {
    if (!v || v->type != CKPT_VALUE_TENSOR)
        return ck_fail(err, CKPT_E_INVAL, "ckpt_value_tensor_read: not a tensor value");
    const ts_tensor_view *view = v->u.tensor.view;
    uint64_t nbytes = ckpt_dtype_itemsize(view->dtype);
    for (int d = 0; d < view->ndim; d++) {
        uint64_t dim = (uint64_t)view->shape[d];
        if (dim && nbytes > UINT64_MAX / dim)
            return ck_fail(err, CKPT_E_RANGE, "tensor value too large");
        nbytes *= dim;
    }
    if (!dst && nbytes)
        return ck_fail(err, CKPT_E_INVAL, "ckpt_value_tensor_read: NULL destination");
    if (dst_size < nbytes)
        return ck_fail(err, CKPT_E_INVAL,
                       "ckpt_value_tensor_read: buffer of %zu bytes, tensor needs %llu", dst_size,
                       (unsigned long long)nbytes);
    return ts_tensor_copy(v->u.tensor.item, view, dst, dst_size, err);
}
