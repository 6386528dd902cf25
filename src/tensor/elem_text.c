/* elem_text.c — one stored element as text (ckpt_elem_format in ckpt.h): integers in decimal,
 * bool, floats of every width with the shortest digits that read back in their own dtype
 * (float_repr.h), complex as Python writes it. */
#include "ckpt.h"
#include "tensor/float_repr.h"

#include <stdio.h>
#include <string.h>

static bool is_float(ckpt_dtype dt) {
    switch (dt) {
    case CKPT_DTYPE_FLOAT64:
    case CKPT_DTYPE_FLOAT32:
    case CKPT_DTYPE_FLOAT16:
    case CKPT_DTYPE_BFLOAT16:
    case CKPT_DTYPE_FLOAT8_E4M3FN:
    case CKPT_DTYPE_FLOAT8_E5M2:
    case CKPT_DTYPE_FLOAT8_E4M3FNUZ:
    case CKPT_DTYPE_FLOAT8_E5M2FNUZ:
    case CKPT_DTYPE_FLOAT8_E8M0FNU: return true;
    default: return false;
    }
}

static size_t len_of(int n) { return n < 0 ? 0 : (size_t)n; }

size_t ckpt_elem_format(ckpt_dtype dt, const void *elem, unsigned flags, char *buf, size_t size) {
    const unsigned char *p = elem;
    bool json = flags & CKPT_ELEM_JSON;
    float_repr_style style = json ? FLOAT_REPR_JSON : FLOAT_REPR_PYTHON;
    char a[FLOAT_REPR_MAX], b[FLOAT_REPR_MAX];
    long long i = 0;
    unsigned long long u = 0;
    switch (dt) {
    case CKPT_DTYPE_BOOL:
        return len_of(snprintf(buf, size, "%s",
                               p[0] ? (json ? "true" : "True") : (json ? "false" : "False")));
    case CKPT_DTYPE_INT8: i = (int8_t)p[0]; break;
    case CKPT_DTYPE_UINT8: u = p[0]; break;
    case CKPT_DTYPE_INT16: {
        int16_t v;
        memcpy(&v, p, sizeof v);
        i = v;
        break;
    }
    case CKPT_DTYPE_UINT16: {
        uint16_t v;
        memcpy(&v, p, sizeof v);
        u = v;
        break;
    }
    case CKPT_DTYPE_INT32: {
        int32_t v;
        memcpy(&v, p, sizeof v);
        i = v;
        break;
    }
    case CKPT_DTYPE_UINT32: {
        uint32_t v;
        memcpy(&v, p, sizeof v);
        u = v;
        break;
    }
    case CKPT_DTYPE_INT64: {
        int64_t v;
        memcpy(&v, p, sizeof v);
        i = v;
        break;
    }
    case CKPT_DTYPE_UINT64: {
        uint64_t v;
        memcpy(&v, p, sizeof v);
        u = v;
        break;
    }
    case CKPT_DTYPE_COMPLEX64:
    case CKPT_DTYPE_COMPLEX128: {
        double re, im;
        if (dt == CKPT_DTYPE_COMPLEX64) {
            float f[2];
            memcpy(f, p, sizeof f);
            re = f[0], im = f[1];
        } else {
            double f[2];
            memcpy(f, p, sizeof f);
            re = f[0], im = f[1];
        }
        /* Python: (1+2j), (1.5-0.5j); JSON: the parts as floats, [1.0, 2.0] */
        float_repr_as(re, dt, style, json, a);
        float_repr_as(im, dt, style, json, b);
        if (json) return len_of(snprintf(buf, size, "[%s, %s]", a, b));
        return len_of(snprintf(buf, size, "(%s%s%sj)", a, b[0] == '-' ? "" : "+", b));
    }
    default:
        if (!is_float(dt)) return len_of(snprintf(buf, size, "?"));
        float_repr_as(ckpt_elem_to_double(dt, elem), dt, style, true, a);
        return len_of(snprintf(buf, size, "%s", a));
    }
    bool is_unsigned = dt == CKPT_DTYPE_UINT8 || dt == CKPT_DTYPE_UINT16 ||
                       dt == CKPT_DTYPE_UINT32 || dt == CKPT_DTYPE_UINT64;
    return len_of(is_unsigned ? snprintf(buf, size, "%llu", u) : snprintf(buf, size, "%lld", i));
}
