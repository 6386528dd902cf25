/* float_repr.c — CPython-compatible repr(float), and the same for every float format a tensor
 * element can have (see float_repr.h).
 *
 * The digits come from glibc's correctly rounded printf: the nearest decimal with p
 * significant digits is tried, and the smallest p whose candidate strtod maps back to the same
 * double wins.  That is the shortest round-tripping string, nearest the true value among equals,
 * which is what CPython's dtoa (mode 0) produces.  At a power of two the rounding interval is
 * lopsided (the gap below is half the gap above), so there the nearest candidate can miss while
 * the next one up still reads back: both neighbours in the last digit are tried too.  With that,
 * "some p-digit string reads back" holds for every p from the shortest on, so p is found by
 * binary search over 1..17 (about four printf/strtod pairs per double).  For a narrower format
 * (float32, float16, bfloat16, the float8 family) "reads back" means the decimal rounds to the
 * same value in that format: strtof for float32; for the narrow ones the decimal must lie
 * inside the rounding interval around the value (half the gap to each neighbour, the gap below
 * halved at a power of two; its ends included when the value's last mantissa bit is 0, as
 * round-half-to-even decides), which the same search and neighbour steps find. */
#include "tensor/float_repr.h"

#include "ckpt.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Digits of a positive finite x: digits[0..n), no trailing zeros, value = d.ddd × 10^exp10. */
typedef struct float_digits {
    char d[24];
    int n;
    int exp10;
} float_digits;

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

/* Does the decimal text `s` read back as x (positive, finite, a value of format dt)? */
static bool text_reads_back(ckpt_dtype dt, const char *s, double x) {
    if (dt == CKPT_DTYPE_FLOAT32 || dt == CKPT_DTYPE_COMPLEX64) return strtof(s, NULL) == (float)x;
    int mant, emin;
    if (!narrow_params(dt, &mant, &emin)) return strtod(s, NULL) == x; /* float64 */
    double q = strtod(s, NULL); /* exact enough: the interval is wider than a double's ulp */
    int e = ilogb(x);
    double ulp = ldexp(1.0, (e < emin ? emin : e) - mant);
    double below = (e > emin && x == ldexp(1.0, e)) ? ulp / 2 : ulp;
    double gap = q < x ? below : ulp, off = fabs(x - q) * 2;
    /* a tie rounds to the even neighbour: x when its last mantissa bit is 0 */
    return off < gap || (off == gap && fmod(x / ulp, 2.0) == 0.0);
}

static bool reads_back(ckpt_dtype dt, const float_digits *fd, double x) {
    char s[48];
    snprintf(s, sizeof s, "%c.%.*se%d", fd->d[0], fd->n - 1, fd->d + 1, fd->exp10);
    return text_reads_back(dt, s, x);
}

/* Adds `delta` (+1 or -1) to the last digit; false when that changes the digit count. */
static bool step_last_digit(float_digits *fd, int delta) {
    int i = fd->n - 1;
    if (delta > 0) {
        while (i >= 0 && fd->d[i] == '9')
            fd->d[i--] = '0';
        if (i < 0) return false;
        fd->d[i]++;
    } else {
        while (i >= 0 && fd->d[i] == '0')
            fd->d[i--] = '9';
        if (i < 0 || (i == 0 && fd->d[0] == '1' && fd->n > 1)) return false;
        fd->d[i]--;
    }
    return true;
}

static void parse_e(const char *s, float_digits *fd) {
    /* s is "D.DDDDe[+-]XX" or "De[+-]XX" */
    fd->n = 0;
    for (; *s != 'e'; s++)
        if (*s != '.') fd->d[fd->n++] = *s;
    fd->d[fd->n] = '\0';
    fd->exp10 = atoi(s + 1);
}

/* The p-digit decimal that reads back as x (x > 0, finite), if there is one. */
static bool digits_at(ckpt_dtype dt, double x, int prec, bool pow2, float_digits *out) {
    char s[48];
    snprintf(s, sizeof s, "%.*e", prec - 1, x);
    parse_e(s, out);
    if (text_reads_back(dt, s, x)) return true;
    if (!pow2) return false;
    for (int delta = -1; delta <= 1; delta += 2) {
        float_digits cand = *out;
        if (step_last_digit(&cand, delta) && reads_back(dt, &cand, x)) {
            *out = cand;
            return true;
        }
    }
    return false;
}

static void shortest_digits(ckpt_dtype dt, double x, float_digits *out) {
    int e2;
    bool pow2 = frexp(x, &e2) == 0.5;
    int lo = 1, hi = 17; /* 17 significant digits always read back */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        float_digits cand;
        if (digits_at(dt, x, mid, pow2, &cand))
            hi = mid;
        else
            lo = mid + 1;
    }
    digits_at(dt, x, lo, pow2, out);
}

size_t float_repr_as(double d, ckpt_dtype dt, float_repr_style style, bool point,
                     char buf[FLOAT_REPR_MAX]) {
    bool json = style == FLOAT_REPR_JSON;
    if (isnan(d)) return (size_t)snprintf(buf, FLOAT_REPR_MAX, "%s", json ? "NaN" : "nan");
    if (isinf(d)) {
        const char *s = d > 0 ? (json ? "Infinity" : "inf") : (json ? "-Infinity" : "-inf");
        return (size_t)snprintf(buf, FLOAT_REPR_MAX, "%s", s);
    }
    float_digits fd = {.d = "0", .n = 1, .exp10 = 0};
    if (d != 0) shortest_digits(dt, fabs(d), &fd);
    while (fd.n > 1 && fd.d[fd.n - 1] == '0')
        fd.n--;
    fd.d[fd.n] = '\0';

    char *p = buf;
    if (signbit(d)) *p++ = '-';
    int e = fd.exp10;
    if (e < -4 || e >= 16) {
        *p++ = fd.d[0];
        if (fd.n > 1) {
            *p++ = '.';
            memcpy(p, fd.d + 1, (size_t)fd.n - 1);
            p += fd.n - 1;
        }
        p += snprintf(p, 8, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    } else if (e >= 0) {
        for (int i = 0; i <= e; i++)
            *p++ = i < fd.n ? fd.d[i] : '0';
        if (fd.n > e + 1) {
            *p++ = '.';
            memcpy(p, fd.d + e + 1, (size_t)(fd.n - e - 1));
            p += fd.n - e - 1;
        } else if (point) {
            *p++ = '.';
            *p++ = '0';
        }
    } else {
        *p++ = '0';
        *p++ = '.';
        for (int i = 0; i < -e - 1; i++)
            *p++ = '0';
        memcpy(p, fd.d, (size_t)fd.n);
        p += fd.n;
    }
    *p = '\0';
    return (size_t)(p - buf);
}

size_t float_repr(double d, float_repr_style style, char buf[FLOAT_REPR_MAX]) {
    return float_repr_as(d, CKPT_DTYPE_FLOAT64, style, true, buf);
}
