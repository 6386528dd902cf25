/* crc32.c — CRC-32 of zip entries (reflected polynomial 0xEDB88320, as zip and zlib).
 * Inputs of 4 KiB or more go to the carry-less-multiply code (crc32_clmul.c) on CPUs with
 * PCLMULQDQ.  Otherwise, with zlib (found at configure time) its crc32_z does the work; otherwise
 * short inputs are done bit by bit and long ones slice by 8 with tables built on the stack for that
 * call (2 K table steps, paid back after a few KiB) — no global state either way. */
#include "save/crc32.h"
#include "save/save_config.h"

#if CK_SAVE_HAVE_ZLIB
#include <zlib.h>
#endif

#define POLY 0xEDB88320u

static uint32_t bits8(uint32_t c) {
    for (int k = 0; k < 8; k++)
        c = (c >> 1) ^ ((c & 1u) ? POLY : 0u);
    return c;
}

uint32_t save_crc32_builtin(uint32_t crc, const void *data, size_t len) {
    const unsigned char *p = data;
    uint32_t c = ~crc;
    if (len >= 4096) {
        uint32_t t[8][256];
        for (uint32_t i = 0; i < 256; i++)
            t[0][i] = bits8(i);
        for (int k = 1; k < 8; k++)
            for (int i = 0; i < 256; i++)
                t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xffu];
        while (len >= 8) {
            uint32_t a = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                              (uint32_t)p[3] << 24);
            uint32_t b =
                (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
            c = t[7][a & 0xff] ^ t[6][(a >> 8) & 0xff] ^ t[5][(a >> 16) & 0xff] ^ t[4][a >> 24] ^
                t[3][b & 0xff] ^ t[2][(b >> 8) & 0xff] ^ t[1][(b >> 16) & 0xff] ^ t[0][b >> 24];
            p += 8;
            len -= 8;
        }
        while (len--)
            c = (c >> 8) ^ t[0][(c ^ *p++) & 0xffu];
        return ~c;
    }
    while (len--)
        c = bits8(c ^ *p++);
    return ~c;
}

uint32_t save_crc32(uint32_t crc, const void *data, size_t len) {
    if (len >= 4096 && save_crc32_clmul_available()) return save_crc32_clmul(crc, data, len);
#if CK_SAVE_HAVE_ZLIB
    return (uint32_t)crc32_z(crc, data, len);
#else
    return save_crc32_builtin(crc, data, len);
#endif
}
