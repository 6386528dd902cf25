/* bigint.c — decimal text of little-endian two's complement integers (see bigint.h): the
 * magnitude is held as base-2^32 limbs and divided by 10^9 until it is zero. */
#include "value/bigint.h"

#include <stdlib.h>
#include <string.h>

bool bigint_to_i64(const uint8_t *le, size_t n, int64_t *out) {
    if (n == 0) {
        *out = 0;
        return true;
    }
    bool neg = le[n - 1] & 0x80;
    /* Bytes beyond the 8th must be pure sign extension, and so must bit 63. */
    for (size_t i = 8; i < n; i++)
        if (le[i] != (neg ? 0xff : 0x00)) return false;
    if (n > 8 && ((le[7] & 0x80) != 0) != neg) return false;
    uint64_t u = neg ? UINT64_MAX : 0;
    for (size_t i = 0; i < n && i < 8; i++) {
        u &= ~((uint64_t)0xff << (8 * i));
        u |= (uint64_t)le[i] << (8 * i);
    }
    memcpy(out, &u, sizeof u); /* two's complement reinterpretation */
    return true;
}

size_t bigint_decimal_cap(size_t n) {
    /* 8 bits are at most 2.41 decimal digits; one for the sign, one for rounding. */
    return n * 241 / 100 + 3;
}

size_t bigint_to_decimal(const uint8_t *le, size_t n, char *out, size_t cap) {
    if (n > BIGINT_MAX_BYTES || cap < bigint_decimal_cap(n) + 1) return 0;
    bool neg = n > 0 && (le[n - 1] & 0x80);
    size_t nlimbs = (n + 3) / 4;
    uint32_t limbs_small[16];
    uint32_t *limbs = nlimbs <= 16 ? limbs_small : malloc(nlimbs * sizeof *limbs);
    if (!limbs) return 0;
    /* magnitude = neg ? ~x + 1 : x, computed byte by byte with a carry */
    unsigned carry = 1;
    for (size_t l = 0; l < nlimbs; l++) {
        uint32_t w = 0;
        for (size_t b = 0; b < 4; b++) {
            size_t i = l * 4 + b;
            unsigned byte = i < n ? le[i] : (neg ? 0xffu : 0u);
            if (neg) {
                byte = (~byte & 0xffu) + carry;
                carry = byte >> 8;
                byte &= 0xffu;
            }
            w |= (uint32_t)byte << (8 * b);
        }
        limbs[l] = w;
    }
    /* Groups of 9 digits, least significant first, written from the end of `out`. */
    char *end = out + cap - 1;
    char *p = end;
    *p = '\0';
    size_t top = nlimbs;
    while (top > 0 && limbs[top - 1] == 0)
        top--;
    do {
        uint64_t rem = 0;
        for (size_t l = top; l-- > 0;) {
            uint64_t cur = (rem << 32) | limbs[l];
            limbs[l] = (uint32_t)(cur / 1000000000u);
            rem = cur % 1000000000u;
        }
        while (top > 0 && limbs[top - 1] == 0)
            top--;
        for (int k = 0; k < 9; k++) {
            *--p = (char)('0' + rem % 10);
            rem /= 10;
            if (top == 0 && rem == 0) break;
        }
    } while (top > 0);
    if (neg) *--p = '-';
    if (limbs != limbs_small) free(limbs);
    size_t len = (size_t)(end - p);
    memmove(out, p, len + 1);
    return len;
}
