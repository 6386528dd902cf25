/* bigint.h — Python ints wider than int64 (pickle LONG1/LONG4: little-endian two's complement
 * bytes) as decimal text. */
#ifndef CK_VALUE_BIGINT_H
#define CK_VALUE_BIGINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Widest integer converted to decimal (bytes of two's complement): about 19700 digits.  The
 * conversion is quadratic, so wider ones are refused (CPython itself refuses to print ints
 * of more than 4300 digits by default). */
#define BIGINT_MAX_BYTES 8192

/* True when the value fits int64; stores it in *out. */
bool bigint_to_i64(const uint8_t *le, size_t n, int64_t *out);

/* Upper bound of the decimal length (sign included, NUL excluded) of an n-byte integer. */
size_t bigint_decimal_cap(size_t n);

/* Writes the decimal text of the n-byte integer into out (cap >= bigint_decimal_cap(n) + 1),
 * NUL-terminated, and returns its length; 0 when n > BIGINT_MAX_BYTES or out of memory. */
size_t bigint_to_decimal(const uint8_t *le, size_t n, char *out, size_t cap);

#endif
