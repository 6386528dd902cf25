/* cli_format.c — text of values for `ckpt` output: human-readable sizes, shapes, and elements
 * of every dtype with the shortest digits that read back as the same value in that dtype. */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *cli_human_size(uint64_t n, char *buf, size_t size) {
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (n < 1024) {
        snprintf(buf, size, "%llu B", (unsigned long long)n);
        return buf;
    }
    double v = (double)n;
    int u = -1;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, size, v < 10.0 ? "%.1f %s" : "%.0f %s", v, units[u]);
    return buf;
}

bool cli_dtype_is_float(ckpt_dtype dt) {
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

bool cli_dtype_is_complex(ckpt_dtype dt) {
    return dt == CKPT_DTYPE_COMPLEX64 || dt == CKPT_DTYPE_COMPLEX128;
}

/* Explicit mantissa bits and the smallest normal exponent of the narrow float formats. */
static bool narrow_params(ckpt_dtype dt, int *mant, int *emin) {
    switch (dt) {
    case CKPT_DTYPE_FLOAT16: *mant = 10, *emin = -14; return true;
    case CKPT_DTYPE_BFLOAT16: *mant = 7, *emin = -126; return true;
    case CKPT_DTYPE_FLOAT8_E4M3FN: *mant = 3, *emin = -6; return true;
    case CKPT_DTYPE_FLOAT8_E5M2: *mant = 2, *emin = -14; return true;
    case CKPT_DTYPE_FLOAT8_E4M3FNUZ: *mant = 3, *emin = -7; return true;
    case CKPT_DTYPE_FLOAT8_E5M2FNUZ: *mant = 2, *emin = -15; return true;
    case CKPT_DTYPE_FLOAT8_E8M0FNU: *mant = 0, *emin = -127; return true;
    default: return false;
    }
}

/* Does the decimal `text` read back as `v` in format `dt`? */
static bool reads_back(ckpt_dtype dt, double v, const char *text) {
    if (dt == CKPT_DTYPE_FLOAT32 || dt == CKPT_DTYPE_COMPLEX64)
        return strtof(text, NULL) == (float)v;
    double p = strtod(text, NULL);
    int mant, emin;
    if (!narrow_params(dt, &mant, &emin)) return p == v; /* float64 */
    /* p rounds to v when it is closer than half the smaller gap to v's neighbours. */
    int e = ilogb(v);
    int q = e < emin ? emin : e;
    double ulp = ldexp(1.0, q - mant);
    double gap = (e > emin && fabs(v) == ldexp(1.0, e)) ? ulp / 2 : ulp;
    return fabs(p - v) * 2 < gap;
}

size_t cli_format_float(ckpt_dtype dt, double v, bool force_point, bool json, char *buf,
                        size_t size) {
    if (isnan(v)) return (size_t)snprintf(buf, size, "%s", json ? "NaN" : "nan");
    if (isinf(v))
        return (size_t)snprintf(
            buf, size, "%s", v > 0 ? (json ? "Infinity" : "inf") : (json ? "-Infinity" : "-inf"));
    if (v == 0)
        return (size_t)snprintf(buf, size, "%s%s", signbit(v) ? "-0" : "0",
                                force_point ? ".0" : "");
    char e[64];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, v);
        if (reads_back(dt, v, e)) break;
    }
    /* e = "[-]d[.ddd]e[+-]XX" -> sign, digits, exponent */
    const char *s = e;
    bool neg = *s == '-';
    if (neg) s++;
    char digits[32];
    size_t nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s >= '0' && *s <= '9' && nd < sizeof digits - 1) digits[nd++] = *s;
    int x = *s == 'e' ? atoi(s + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    char out[96];
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (x < -4 || x >= 16) {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, digits + 1, nd - 1);
            o += nd - 1;
        }
        o += (size_t)snprintf(out + o, sizeof out - o, "e%c%02d", x < 0 ? '-' : '+', abs(x));
    } else if (x < 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (int k = 0; k < -x - 1; k++)
            out[o++] = '0';
        memcpy(out + o, digits, nd);
        o += nd;
    } else {
        for (int k = 0; k <= x; k++)
            out[o++] = (size_t)k < nd ? digits[k] : '0';
        if (nd > (size_t)x + 1) {
            out[o++] = '.';
            memcpy(out + o, digits + x + 1, nd - (size_t)x - 1);
            o += nd - (size_t)x - 1;
        } else if (force_point) {
            out[o++] = '.';
            out[o++] = '0';
        }
    }
    out[o] = '\0';
    return (size_t)snprintf(buf, size, "%s", out);
}

size_t cli_format_elem(ckpt_dtype dt, const void *elem, bool json, char *buf, size_t size) {
    const unsigned char *p = elem;
    switch (dt) {
    case CKPT_DTYPE_BOOL:
        return (size_t)snprintf(buf, size, "%s",
                                p[0] ? (json ? "true" : "True") : (json ? "false" : "False"));
    case CKPT_DTYPE_INT8: return (size_t)snprintf(buf, size, "%d", (int)(int8_t)p[0]);
    case CKPT_DTYPE_UINT8: return (size_t)snprintf(buf, size, "%u", (unsigned)p[0]);
    case CKPT_DTYPE_INT16: {
        int16_t v;
        memcpy(&v, p, 2);
        return (size_t)snprintf(buf, size, "%d", (int)v);
    }
    case CKPT_DTYPE_UINT16: {
        uint16_t v;
        memcpy(&v, p, 2);
        return (size_t)snprintf(buf, size, "%u", (unsigned)v);
    }
    case CKPT_DTYPE_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        return (size_t)snprintf(buf, size, "%ld", (long)v);
    }
    case CKPT_DTYPE_UINT32: {
        uint32_t v;
        memcpy(&v, p, 4);
        return (size_t)snprintf(buf, size, "%lu", (unsigned long)v);
    }
    case CKPT_DTYPE_INT64: {
        int64_t v;
        memcpy(&v, p, 8);
        return (size_t)snprintf(buf, size, "%lld", (long long)v);
    }
    case CKPT_DTYPE_UINT64: {
        uint64_t v;
        memcpy(&v, p, 8);
        return (size_t)snprintf(buf, size, "%llu", (unsigned long long)v);
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
        char a[64], b[64];
        cli_format_float(dt, re, json, json, a, sizeof a);
        cli_format_float(dt, im, json, json, b, sizeof b);
        if (json) return (size_t)snprintf(buf, size, "[%s, %s]", a, b);
        bool im_neg = b[0] == '-';
        return (size_t)snprintf(buf, size, "(%s%s%sj)", a, im_neg ? "" : "+", b);
    }
    default:
        if (cli_dtype_is_float(dt))
            return cli_format_float(dt, ckpt_elem_to_double(dt, elem), true, json, buf, size);
        return (size_t)snprintf(buf, size, "?");
    }
}

const char *cli_shape_str(int ndim, const int64_t *shape, char *buf, size_t size) {
    size_t o = 0;
    o += (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && o < size; d++)
        o += (size_t)snprintf(buf + o, size - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (o < size) snprintf(buf + o, size - o, "]");
    return buf;
}
