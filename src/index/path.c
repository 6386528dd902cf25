/* path.c — escaping of state_dict path elements into file-name-safe components (the naming
 * contract of the tree; see docs/naming.md): '%' -> "%25", '/' -> "%2F", control characters
 * (NUL included) -> "%XX"; an element that is exactly "." or ".." becomes "%2E" / "%2E%2E";
 * the empty element becomes "%" (which no other element can produce).  An escaped element
 * longer than a file name may be (NAME_MAX, 255 bytes) keeps its first bytes and ends in
 * "%~" and 16 hex digits of a hash of the whole raw element ("%~" is never produced
 * otherwise). */
#include "index/reader_i.h"
#include "util/htab.h"

#include <stdio.h>
#include <string.h>

#define NAME_MAX_BYTES 255
#define LONG_KEEP 200 /* bytes of a too long element kept before "%~" + 16 hex digits */

static char *escape(ck_arena *a, const char *elem, size_t len);

char *ck_path_escape_elem(ck_arena *a, const char *elem, size_t len) {
    char *e = escape(a, elem, len);
    if (!e || strlen(e) <= NAME_MAX_BYTES) return e;
    size_t keep = LONG_KEEP;
    /* never cut a %XX escape or a UTF-8 sequence */
    if (keep >= 1 && e[keep - 1] == '%')
        keep -= 1;
    else if (keep >= 2 && e[keep - 2] == '%')
        keep -= 2;
    while (keep > 0 && ((unsigned char)e[keep] & 0xC0) == 0x80)
        keep--;
    char *out = ck_arena_alloc(a, keep + 2 + 16 + 1);
    if (!out) return NULL;
    memcpy(out, e, keep);
    snprintf(out + keep, 2 + 16 + 1, "%%~%016llx",
             (unsigned long long)ck_hash_bytes(elem, len, 0x6e616d65));
    return out;
}

static char *escape(ck_arena *a, const char *elem, size_t len) {
    if (len == 0) return ck_arena_strndup(a, "%", 1);
    if (len == 1 && elem[0] == '.') return ck_arena_strndup(a, "%2E", 3);
    if (len == 2 && elem[0] == '.' && elem[1] == '.') return ck_arena_strndup(a, "%2E%2E", 6);
    size_t extra = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)elem[i];
        if (ch == '%' || ch == '/' || ch < 0x20 || ch == 0x7f) extra += 2;
    }
    if (!extra) return ck_arena_strndup(a, elem, len);
    char *out = ck_arena_alloc(a, len + extra + 1);
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
