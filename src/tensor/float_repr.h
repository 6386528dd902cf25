/* float_repr.h — formatting doubles exactly as CPython's repr(float) does: the shortest digit
 * string that reads back to the same double, fixed notation for decimal exponents in
 * [-4, 16), else `1e-05` / `1.5e+16` style, and ".0" on integral fixed values; and the same
 * for a value of any float dtype (the shortest digits that read back in that dtype: numpy's
 * repr of a float32 or float16 scalar). */
#ifndef CK_VALUE_FLOAT_REPR_H
#define CK_VALUE_FLOAT_REPR_H

#include "ckpt.h"

#include <stdbool.h>
#include <stddef.h>

/* Longest result ("-2.2250738585072014e-308" is 24 chars) plus NUL, with room to spare. */
#define FLOAT_REPR_MAX 32

typedef enum float_repr_style {
    FLOAT_REPR_PYTHON, /* nan, inf, -inf (Python repr) */
    FLOAT_REPR_JSON,   /* NaN, Infinity, -Infinity (Python json.dumps with allow_nan) */
} float_repr_style;

/* Writes the repr of `d` into buf (NUL-terminated) and returns its length. */
size_t float_repr(double d, float_repr_style style, char buf[FLOAT_REPR_MAX]);
/* The same for d, a value of float dtype dt (CKPT_DTYPE_FLOAT64 or COMPLEX128: float_repr;
 * FLOAT32 or COMPLEX64; FLOAT16, BFLOAT16, the float8 family): the shortest digits that read
 * back as d in dt.  point: ".0" on integral fixed values (Python's float repr; false for the
 * parts of a complex repr, `(1+2j)`). */
size_t float_repr_as(double d, ckpt_dtype dt, float_repr_style style, bool point,
                     char buf[FLOAT_REPR_MAX]);

#endif
