/* elem.c — decoding single stored elements of every dtype to double (half, bfloat16 and the
 * float8 family bit-exactly), for text rendering and comparisons. */
#include "ckpt.h"

#include <math.h>
#include <string.h>

/* Generic small float: `eb` exponent bits, `mb` mantissa bits, `bias`.  `ieee`: all-ones
 * exponent is inf/NaN (e5m2, half); `fn`: only all-ones exponent+mantissa is NaN (e4m3fn);
 * `fnuz`: the pattern 0x80 (negative zero) is the only NaN, no infinities. */
typedef enum { KIND_IEEE, KIND_FN, KIND_FNUZ } float_kind;

static double small_float(unsigned bits, int eb, int mb, int bias, float_kind kind) {
    int total = 1 + eb + mb;
    unsigned sign = (bits >> (total - 1)) & 1u;
    unsigned exp = (bits >> mb) & ((1u << eb) - 1u);
    unsigned man = bits & ((1u << mb) - 1u);
    if (kind == KIND_FNUZ && sign && !exp && !man) return NAN;
    if (kind == KIND_IEEE && exp == (1u << eb) - 1u)
        return man ? NAN : (sign ? -INFINITY : INFINITY);
    if (kind == KIND_FN && exp == (1u << eb) - 1u && man == (1u << mb) - 1u) return NAN;
    double v;
    if (exp == 0)
        v = ldexp((double)man, 1 - bias - mb);
    else
        v = ldexp((double)(man | (1u << mb)), (int)exp - bias - mb);
    return sign ? -v : v;
}

double ckpt_elem_to_double(ckpt_dtype dt, const void *elem) {
    const unsigned char *p = elem;
    switch (dt) {
    case CKPT_DTYPE_FLOAT64:
    case CKPT_DTYPE_COMPLEX128: {
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    case CKPT_DTYPE_FLOAT32:
    case CKPT_DTYPE_COMPLEX64: {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    case CKPT_DTYPE_FLOAT16: return small_float((unsigned)(p[0] | p[1] << 8), 5, 10, 15, KIND_IEEE);
    case CKPT_DTYPE_BFLOAT16: {
        uint32_t u = (uint32_t)(p[0] | p[1] << 8) << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    case CKPT_DTYPE_FLOAT8_E4M3FN: return small_float(p[0], 4, 3, 7, KIND_FN);
    case CKPT_DTYPE_FLOAT8_E5M2: return small_float(p[0], 5, 2, 15, KIND_IEEE);
    case CKPT_DTYPE_FLOAT8_E4M3FNUZ: return small_float(p[0], 4, 3, 8, KIND_FNUZ);
    case CKPT_DTYPE_FLOAT8_E5M2FNUZ: return small_float(p[0], 5, 2, 16, KIND_FNUZ);
    case CKPT_DTYPE_FLOAT8_E8M0FNU: return p[0] == 0xff ? NAN : ldexp(1.0, (int)p[0] - 127);
    case CKPT_DTYPE_INT8: return (int8_t)p[0];
    case CKPT_DTYPE_UINT8: return p[0];
    case CKPT_DTYPE_BOOL: return p[0] ? 1.0 : 0.0;
    case CKPT_DTYPE_INT16: {
        int16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case CKPT_DTYPE_UINT16: {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case CKPT_DTYPE_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case CKPT_DTYPE_UINT32: {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case CKPT_DTYPE_INT64: {
        int64_t v;
        memcpy(&v, p, 8);
        return (double)v;
    }
    case CKPT_DTYPE_UINT64: {
        uint64_t v;
        memcpy(&v, p, 8);
        return (double)v;
    }
    default: return NAN;
    }
}
