/* npy.c — the numpy header of a `.npy/<path>.npy` file (format 1.0, padded so the data starts
 * on a 64-byte boundary).  Dtypes numpy lacks are stored as unsigned integers of their width
 * (bfloat16 as '<u2', the float8 family as '|u1'), with the torch dtype named in a comment
 * after the header dict, which numpy's literal parser ignores. */
#include "tree/tree_i.h"

#include <stdio.h>
#include <string.h>

static const char *descr_of(ckpt_dtype dt, bool *exotic) {
    *exotic = false;
    switch (dt) {
    case CKPT_DTYPE_FLOAT64: return "<f8";
    case CKPT_DTYPE_FLOAT32: return "<f4";
    case CKPT_DTYPE_FLOAT16: return "<f2";
    case CKPT_DTYPE_INT8: return "|i1";
    case CKPT_DTYPE_INT16: return "<i2";
    case CKPT_DTYPE_INT32: return "<i4";
    case CKPT_DTYPE_INT64: return "<i8";
    case CKPT_DTYPE_UINT8: return "|u1";
    case CKPT_DTYPE_UINT16: return "<u2";
    case CKPT_DTYPE_UINT32: return "<u4";
    case CKPT_DTYPE_UINT64: return "<u8";
    case CKPT_DTYPE_BOOL: return "|b1";
    case CKPT_DTYPE_COMPLEX64: return "<c8";
    case CKPT_DTYPE_COMPLEX128: return "<c16";
    case CKPT_DTYPE_BFLOAT16: *exotic = true; return "<u2";
    default: *exotic = true; return ckpt_dtype_itemsize(dt) == 1 ? "|u1" : "|V0";
    }
}

size_t tree_npy_header(const ckpt_entry *e, char *out) {
    char dict[TREE_NPY_HEADER_MAX];
    bool exotic;
    const char *descr = descr_of(ckpt_entry_dtype(e), &exotic);
    int n =
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    int nd = ckpt_entry_ndim(e);
    const int64_t *shape = ckpt_entry_shape(e);
    for (int d = 0; d < nd && n > 0 && (size_t)n < sizeof dict; d++)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%s%lld", d ? ", " : "",
                      (long long)shape[d]);
    if (n > 0 && (size_t)n < sizeof dict)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%s), }", nd == 1 ? "," : "");
    if (exotic && n > 0 && (size_t)n < sizeof dict)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "  # ckpt.dtype=%s",
                      ckpt_dtype_name(ckpt_entry_dtype(e)));
    if (n < 0 || (size_t)n + 10 + 64 > TREE_NPY_HEADER_MAX)
        return 0; /* cannot happen: ndim <= 64 */
    size_t total = 10 + (size_t)n + 1;
    total = (total + 63) / 64 * 64;
    size_t hlen = total - 10;
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (char)(hlen & 0xFF);
    out[9] = (char)(hlen >> 8);
    memcpy(out + 10, dict, (size_t)n);
    memset(out + 10 + n, ' ', hlen - (size_t)n - 1);
    out[total - 1] = '\n';
    return total;
}
