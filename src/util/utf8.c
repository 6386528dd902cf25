/* utf8.c — strict UTF-8 validation (utf8.h). */
#include "util/utf8.h"

#include <string.h>

size_t utf8_seq_len(const uint8_t *s, size_t avail) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    size_t need;
    uint8_t lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
        need = 1;
    else if (c >= 0xe0 && c <= 0xef) {
        need = 2;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 3;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else
        return 0;
    if (avail < need + 1) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i <= need; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    return need + 1;
}

bool utf8_valid(const void *p, size_t n) {
    const uint8_t *s = p;
    size_t i = 0;
    while (i < n) {
        if (n - i >= 8) { /* eight ASCII bytes at a time */
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ull)) {
                i += 8;
                continue;
            }
        }
        size_t l = utf8_seq_len(s + i, n - i);
        if (!l) return false;
        i += l;
    }
    return true;
}
