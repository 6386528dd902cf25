/* archive.c — torch.save archives for one tensor chunk (from host or device memory) or one
 * value (archive.h). */
#include "save/archive.h"

#include "save/zip_writer.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Typed storage classes of _rebuild_tensor_v2; NULL: the dtype is one of
 * torch.storage._new_dtypes() and goes through _rebuild_tensor_v3 with UntypedStorage. */
static const char *storage_class(ckpt_dtype dt) {
    switch (dt) {
    case CKPT_DTYPE_FLOAT64: return "DoubleStorage";
    case CKPT_DTYPE_FLOAT32: return "FloatStorage";
    case CKPT_DTYPE_FLOAT16: return "HalfStorage";
    case CKPT_DTYPE_BFLOAT16: return "BFloat16Storage";
    case CKPT_DTYPE_INT8: return "CharStorage";
    case CKPT_DTYPE_INT16: return "ShortStorage";
    case CKPT_DTYPE_INT32: return "IntStorage";
    case CKPT_DTYPE_INT64: return "LongStorage";
    case CKPT_DTYPE_UINT8: return "ByteStorage";
    case CKPT_DTYPE_BOOL: return "BoolStorage";
    case CKPT_DTYPE_COMPLEX64: return "ComplexFloatStorage";
    case CKPT_DTYPE_COMPLEX128: return "ComplexDoubleStorage";
    default: return NULL;
    }
}

static ckpt_status common_records(zip_writer *z, ckpt_error *err) {
    CK_TRY(zw_add(z, ".format_version", "1", 1, err));
    CK_TRY(zw_add(z, ".storage_alignment", "64", 2, err));
    return zw_add(z, "byteorder", "little", 6, err);
}

static ckpt_status tail_records(zip_writer *z, uint64_t serial, ckpt_error *err) {
    CK_TRY(zw_add(z, "version", "3\n", 2, err));
    /* torch writes 40 decimal digits (a per-archive id); any digits do. */
    char id[48];
    snprintf(id, sizeof id, "%020llu%020llu",
             (unsigned long long)(serial % 10000000000000000000ull),
             (unsigned long long)((serial * 0x9e3779b97f4a7c15ull) % 10000000000000000000ull));
    return zw_add(z, ".data/serialization_id", id, 40, err);
}

static ckpt_status finish_archive(zip_writer *z, const char *pkl, size_t pkl_len, ckpt_status st,
                                  uint64_t *len, ckpt_error *err) {
    (void)pkl;
    (void)pkl_len;
    if (st == CKPT_OK) st = zw_finish(z, len, err);
    zw_release(z);
    return st;
}

static ckpt_status emit_record_data(void *ctx, const void *block, size_t n, ckpt_error *err) {
    return zw_record_data(ctx, block, n, err);
}

/* Record data/0: host bytes directly, device bytes block by block through the pipeline. */
static ckpt_status tensor_record(zip_writer *z, const void *data, uint64_t nbytes, save_dev *dev,
                                 ckpt_error *err) {
    if (!dev) return zw_add(z, "data/0", data, nbytes, err);
    CK_TRY(zw_record_begin(z, "data/0", nbytes, err));
    CK_TRY(save_dev_stream(dev, data, nbytes, emit_record_data, z, err));
    return zw_record_end(z, err);
}

void save_pickle_tensor(pkw *w, ckpt_dtype dt, int ndim, const int64_t *sizes, const char *key) {
    size_t isz = ckpt_dtype_itemsize(dt);
    const char *sc = storage_class(dt);
    uint64_t numel = 1;
    for (int d = 0; d < ndim; d++)
        numel *= (uint64_t)sizes[d];
    pkw_global(w, "torch._utils", sc ? "_rebuild_tensor_v2" : "_rebuild_tensor_v3");
    pkw_op(w, PKO_MARK);
    pkw_op(w, PKO_MARK);
    pkw_str(w, "storage", 7, true);
    if (sc)
        pkw_global(w, "torch", sc);
    else
        pkw_global(w, "torch.storage", "UntypedStorage");
    pkw_str(w, key, strlen(key), true);
    pkw_str(w, "cpu", 3, true);
    pkw_int(w, (int64_t)(sc ? numel : numel * isz));
    pkw_op(w, PKO_TUPLE);
    pkw_memoize(w);
    pkw_op(w, PKO_BINPERSID);
    pkw_int(w, 0); /* storage_offset */
    pkw_tuple_begin(w, (size_t)ndim);
    for (int d = 0; d < ndim; d++)
        pkw_int(w, sizes[d]);
    pkw_tuple_end(w, (size_t)ndim);
    if (ndim) pkw_memoize(w);
    pkw_tuple_begin(w, (size_t)ndim);
    int64_t stride = 1;
    int64_t strides[CKPT_MAX_NDIM];
    for (int d = ndim - 1; d >= 0; d--) {
        strides[d] = stride;
        stride *= sizes[d] ? sizes[d] : 1;
    }
    for (int d = 0; d < ndim; d++)
        pkw_int(w, strides[d]);
    pkw_tuple_end(w, (size_t)ndim);
    if (ndim) pkw_memoize(w);
    pkw_bool(w, false); /* requires_grad */
    pkw_global(w, "collections", "OrderedDict");
    pkw_op(w, PKO_EMPTY_TUPLE);
    pkw_op(w, PKO_REDUCE);
    pkw_memoize(w);
    if (!sc) pkw_global(w, "torch", ckpt_dtype_name(dt));
    pkw_op(w, PKO_TUPLE);
    pkw_memoize(w);
    pkw_op(w, PKO_REDUCE);
    pkw_memoize(w);
}

ckpt_status save_archive_tensor(save_sink *s, ckpt_dtype dt, int ndim, const int64_t *sizes,
                                const void *data, uint64_t nbytes, save_dev *dev, uint64_t serial,
                                uint64_t *len, ckpt_error *err) {
    pkw w;
    pkw_init(&w, 2);
    save_pickle_tensor(&w, dt, ndim, sizes, "0");
    char *pkl;
    size_t pkl_len;
    CK_TRY(pkw_finish(&w, &pkl, &pkl_len, err));

    zip_writer z;
    zw_begin(&z, s, "archive");
    ckpt_status st = zw_add(&z, "data.pkl", pkl, pkl_len, err);
    if (st == CKPT_OK) st = common_records(&z, err);
    if (st == CKPT_OK) st = tensor_record(&z, data, nbytes, dev, err);
    if (st == CKPT_OK) st = tail_records(&z, serial, err);
    st = finish_archive(&z, pkl, pkl_len, st, len, err);
    free(pkl);
    return st;
}

ckpt_status save_archive_value(save_sink *s, const ckpt_save_value *v, uint64_t serial,
                               uint64_t *len, ckpt_error *err) {
    pkw w;
    pkw_init(&w, 2);
    save_value_pickle(&w, v);
    char *pkl;
    size_t pkl_len;
    CK_TRY(pkw_finish(&w, &pkl, &pkl_len, err));
    zip_writer z;
    zw_begin(&z, s, "archive");
    ckpt_status st = zw_add(&z, "data.pkl", pkl, pkl_len, err);
    if (st == CKPT_OK) st = common_records(&z, err);
    if (st == CKPT_OK) st = tail_records(&z, serial, err);
    st = finish_archive(&z, pkl, pkl_len, st, len, err);
    free(pkl);
    return st;
}
