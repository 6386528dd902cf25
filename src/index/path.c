/* path.c — escaping of state_dict path elements into file-name-safe components (the naming
 * contract of the tree; see docs/naming.md): '%' -> "%25", '/' -> "%2F", NUL-free control
 * characters -> "%XX"; an element that is exactly "." or ".." becomes "%2E" / "%2E%2E"; the
 * empty element becomes "%" (which no other element can produce). */
#include "index/reader_i.h"

#include <stdio.h>
#include <string.h>

char *ckpt_path_escape_elem(ckpt_arena *a, const char *elem, size_t len) {
    if (len == 0) return ckpt_arena_strndup(a, "%", 1);
    if (len == 1 && elem[0] == '.') return ckpt_arena_strndup(a, "%2E", 3);
    if (len == 2 && elem[0] == '.' && elem[1] == '.') return ckpt_arena_strndup(a, "%2E%2E", 6);
    size_t extra = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)elem[i];
        if (ch == '%' || ch == '/' || ch < 0x20 || ch == 0x7f) extra += 2;
    }
    if (!extra) return ckpt_arena_strndup(a, elem, len);
    char *out = ckpt_arena_alloc(a, len + extra + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)elem[i];
        if (ch == '%' || ch == '/' || ch < 0x20 || ch == 0x7f) {
            snprintf(out + o, 4, "%%%02X", ch);
            o += 3;
        } else {
            out[o++] = (char)ch;
        }
    }
    out[o] = '\0';
    return out;
}
