/* float_repr.h — formatting doubles exactly as CPython's repr(float) does: the shortest digit
 * string that reads back to the same double, fixed notation for decimal exponents in
 * [-4, 16), else `1e-05` / `1.5e+16` style, and ".0" on integral fixed values. */
#ifndef CK_VALUE_FLOAT_REPR_H
#define CK_VALUE_FLOAT_REPR_H

#include <stddef.h>

/* Longest result ("-2.2250738585072014e-308" is 24 chars) plus NUL, with room to spare. */
#define FLOAT_REPR_MAX 32

typedef enum float_repr_style {
    FLOAT_REPR_PYTHON, /* nan, inf, -inf (Python repr) */
    FLOAT_REPR_JSON,   /* NaN, Infinity, -Infinity (Python json.dumps with allow_nan) */
} float_repr_style;

/* Writes the repr of `d` into buf (NUL-terminated) and returns its length. */
size_t float_repr(double d, float_repr_style style, char buf[FLOAT_REPR_MAX]);

#endif
