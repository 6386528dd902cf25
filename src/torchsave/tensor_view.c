/* tensor_view.c — interpreting torch's tensor rebuild calls in data.pkl
 * (`_rebuild_tensor_v2`, `_rebuild_tensor_v3`, `_rebuild_parameter`) as a validated strided
 * view of one storage record, and copying such a view out in C order. */
#include "torchsave/item.h"

#include "tensor/dtype.h"
#include "tensor/strided.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_rebuild(const pk_value *v, const char *fn) {
    return v && v->type == PK_OBJECT && pk_is_global(v->u.obj.cls, NULL, fn);
}

bool ts_is_tensor_node(const pk_value *v) {
    return is_rebuild(v, "_rebuild_tensor_v2") || is_rebuild(v, "_rebuild_tensor_v3") ||
           is_rebuild(v, "_rebuild_parameter") || is_rebuild(v, "_rebuild_parameter_with_state");
}

static ckpt_status bad(ckpt_error *err, const ts_item *it, const char *what) {
    return ck_fail(err, CKPT_E_FORMAT, "%s: tensor in data.pkl: %s", ts_item_source(it)->name,
                   what);
}

/* The local tensor of a pickled DTensor: torch.save writes one as
 * _rebuild_from_type_v2(_rebuild_wrapper_subclass, DTensor, (DTensor, dtype, size, ...),
 * {"_local_tensor": tensor, "_spec": ...}); NULL when v is no DTensor.  *global (may be NULL)
 * gets the wrapper's size tuple. */
const pk_value *ts_dtensor_local(const pk_value *v, const pk_value **global) {
    if (!v || v->type != PK_OBJECT || !pk_is_global(v->u.obj.cls, NULL, "_rebuild_from_type_v2"))
        return NULL;
    const pk_value *a = v->u.obj.args;
    if (pk_len(a) < 4 || !pk_is_global(pk_item(a, 1), NULL, "DTensor")) return NULL;
    /* the state: a dict, or (dict or None, slots dict) as _get_obj_state gives it */
    const pk_value *st = pk_item(a, 3), *local = pk_get(st, "_local_tensor");
    if (!local && st && st->type == PK_TUPLE)
        for (size_t i = 0; i < pk_len(st) && !local; i++)
            local = pk_get(pk_item(st, i), "_local_tensor");
    if (!local || !ts_is_tensor_node(local)) return NULL;
    if (global) *global = pk_len(pk_item(a, 2)) >= 3 ? pk_item(pk_item(a, 2), 2) : NULL;
    return local;
}

static bool empty_or_none(const pk_value *v) {
    if (!v || v->type == PK_NONE) return true;
    if (v->type == PK_DICT) return v->u.dict.len == 0;
    if (v->type == PK_OBJECT) /* OrderedDict() */
        return (!pk_obj_dictitems(v) || pk_obj_dictitems(v)->u.dict.len == 0) &&
               pk_len(v->u.obj.args) == 0;
    return false;
}

ckpt_status ts_tensor_view_of(const ts_item *it, const pk_value *v, ts_tensor_view *out,
                              ckpt_error *err) {
    memset(out, 0, sizeof *out);
    if (is_rebuild(v, "_rebuild_parameter") || is_rebuild(v, "_rebuild_parameter_with_state")) {
        const pk_value *inner = pk_item(v->u.obj.args, 0);
        if (!is_rebuild(inner, "_rebuild_tensor_v2") && !is_rebuild(inner, "_rebuild_tensor_v3"))
            return bad(err, it, "_rebuild_parameter does not wrap a plain tensor");
        v = inner;
    }
    bool v3 = is_rebuild(v, "_rebuild_tensor_v3");
    if (!v3 && !is_rebuild(v, "_rebuild_tensor_v2")) {
        const char *cls = pk_class_name(v);
        return ck_fail(err, CKPT_E_UNSUPPORTED, "%s: unsupported tensor rebuild function '%s'",
                       ts_item_source(it)->name, cls ? cls : "(not a call)");
    }
    const pk_value *args = v->u.obj.args;
    size_t nargs = pk_len(args);
    if (nargs < (v3 ? 7u : 6u)) return bad(err, it, "too few rebuild arguments");
    const pk_value *meta = pk_item(args, v3 ? 7 : 6);
    if (nargs > (v3 ? 7u : 6u) && !empty_or_none(meta))
        return ck_fail(err, CKPT_E_UNSUPPORTED,
                       "%s: tensor carries rebuild metadata (conj/neg bits) that is not supported",
                       ts_item_source(it)->name);

    const pk_value *storage = pk_item(args, 0);
    if (!storage || storage->type != PK_PERSID)
        return bad(err, it, "storage is not a persistent id");
    const pk_value *pid = storage->u.persid.pid;
    if (pk_len(pid) < 5 || !pk_as_str(pk_item(pid, 0)) ||
        strcmp(pk_as_str(pk_item(pid, 0)), "storage") != 0)
        return bad(err, it, "persistent id is not ('storage', type, key, location, numel)");
    const pk_value *stype = pk_item(pid, 1);
    const char *key = pk_as_str(pk_item(pid, 2));
    int64_t numel = 0;
    if (!key || !pk_as_int(pk_item(pid, 4), &numel) || numel < 0)
        return bad(err, it, "storage key or size malformed");
    const char *stype_name = pk_class_name(stype);
    bool untyped = stype_name && strcmp(stype_name, "UntypedStorage") == 0;
    ckpt_dtype dt = CKPT_DTYPE_INVALID;
    if (v3) {
        const pk_value *dtv = pk_item(args, 6);
        if (!dtv || dtv->type != PK_GLOBAL) return bad(err, it, "dtype argument is not a global");
        dt = ckpt_dtype_from_name(dtv->u.global.name);
    } else if (!untyped) {
        dt = ck_dtype_from_storage_class(stype_name);
    }
    if (dt == CKPT_DTYPE_INVALID)
        return ck_fail(err, CKPT_E_UNSUPPORTED, "%s: unsupported storage/dtype '%s'",
                       ts_item_source(it)->name, stype_name ? stype_name : "?");
    size_t isz = ckpt_dtype_itemsize(dt);
    uint64_t storage_bytes;
    if (untyped) {
        if ((uint64_t)numel % isz)
            return bad(err, it, "untyped storage size not a multiple of itemsize");
        storage_bytes = (uint64_t)numel;
        out->storage_numel = (uint64_t)numel / isz;
    } else {
        if ((uint64_t)numel > UINT64_MAX / isz) return bad(err, it, "storage size overflows");
        storage_bytes = (uint64_t)numel * isz;
        out->storage_numel = (uint64_t)numel;
    }
    out->dtype = dt;
    if (!pk_as_int(pk_item(args, 1), &out->storage_offset) || out->storage_offset < 0)
        return bad(err, it, "storage_offset malformed");
    size_t nd = 0, nst = 0;
    if (!pk_as_int_seq(pk_item(args, 2), out->shape, CKPT_MAX_NDIM, &nd) ||
        !pk_as_int_seq(pk_item(args, 3), out->stride, CKPT_MAX_NDIM, &nst) || nd != nst)
        return bad(err, it, "size/stride malformed or of different lengths");
    out->ndim = (int)nd;
    /* bounds: the highest addressed element must lie inside the storage */
    uint64_t max_index = (uint64_t)out->storage_offset;
    bool empty = false;
    for (size_t d = 0; d < nd; d++) {
        if (out->shape[d] < 0 || out->stride[d] < 0) return bad(err, it, "negative size or stride");
        if (out->shape[d] == 0) empty = true;
    }
    if (!empty) {
        for (size_t d = 0; d < nd; d++) {
            uint64_t step = (uint64_t)(out->shape[d] - 1);
            if (out->stride[d] && step > (UINT64_MAX - max_index) / (uint64_t)out->stride[d])
                return bad(err, it, "strides overflow");
            max_index += step * (uint64_t)out->stride[d];
        }
        if (max_index >= out->storage_numel)
            return ck_fail(err, CKPT_E_FORMAT,
                           "%s: tensor addresses element %llu of a %llu-element storage",
                           ts_item_source(it)->name, (unsigned long long)max_index,
                           (unsigned long long)out->storage_numel);
    }
    char recname[300];
    snprintf(recname, sizeof recname, "data/%s", key);
    out->storage_key = key;
    out->record = zip_find(ts_item_zip(it), recname);
    if (!out->record)
        return ck_fail(err, CKPT_E_FORMAT, "%s: storage record '%s' missing from the archive",
                       ts_item_source(it)->name, recname);
    if (out->record->size != storage_bytes)
        return ck_fail(err, CKPT_E_FORMAT,
                       "%s: storage record '%s' holds %llu bytes, data.pkl says %llu",
                       ts_item_source(it)->name, recname, (unsigned long long)out->record->size,
                       (unsigned long long)storage_bytes);
    return CKPT_OK;
}

static uint64_t view_numel(const ts_tensor_view *v) {
    uint64_t n = 1;
    for (int d = 0; d < v->ndim; d++)
        n *= (uint64_t)v->shape[d];
    return n;
}

ckpt_status ts_tensor_copy(const ts_item *it, const ts_tensor_view *view, void *dst,
                           size_t dst_size, ckpt_error *err) {
    size_t isz = ckpt_dtype_itemsize(view->dtype);
    uint64_t n = view_numel(view);
    if (dst_size < n * isz)
        return ck_fail(err, CKPT_E_INVAL, "destination of %zu bytes is smaller than the tensor",
                       dst_size);
    if (n == 0) return CKPT_OK;
    /* span of storage elements addressed */
    uint64_t lo = (uint64_t)view->storage_offset, hi = lo;
    for (int d = 0; d < view->ndim; d++)
        hi += (uint64_t)(view->shape[d] - 1) * (uint64_t)view->stride[d];
    uint64_t span = (hi - lo + 1) * isz;
    const ck_source *src = ts_item_source(it);
    uint64_t at = view->record->data_offset + lo * isz;
    int64_t sstr[CKPT_MAX_NDIM], dstr[CKPT_MAX_NDIM];
    int64_t acc = (int64_t)isz;
    for (int d = view->ndim - 1; d >= 0; d--) {
        dstr[d] = acc;
        acc *= view->shape[d];
        sstr[d] = view->stride[d] * (int64_t)isz;
    }
    bool contiguous = span == n * isz;
    for (int d = 0; d < view->ndim && contiguous; d++)
        if (view->shape[d] > 1 && sstr[d] != dstr[d]) contiguous = false;
    if (contiguous) {
        CK_TRY(ck_source_read(src, at, dst, span, err));
    } else {
        uint8_t *tmp = malloc(span);
        if (!tmp)
            return ck_fail(err, CKPT_E_NOMEM, "out of memory (%llu bytes)",
                           (unsigned long long)span);
        ckpt_status st = ck_source_read(src, at, tmp, span, err);
        if (st == CKPT_OK) ck_strided_copy(dst, dstr, tmp, sstr, view->shape, view->ndim, isz);
        free(tmp);
        CK_TRY(st);
    }
    if (ts_item_big_endian(it) && isz > 1) {
        bool cplx = view->dtype == CKPT_DTYPE_COMPLEX64 || view->dtype == CKPT_DTYPE_COMPLEX128;
        ck_bswap_elems(dst, cplx ? n * 2 : n, cplx ? isz / 2 : isz);
    }
    return CKPT_OK;
}
