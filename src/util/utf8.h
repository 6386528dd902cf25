/* utf8.h — strict UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above
 * U+10FFFF), as Python decodes it: the one check the pickle decoder, the JSON parser and
 * the saver share. */
#ifndef CK_UTIL_UTF8_H
#define CK_UTIL_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Length (1-4) of the valid UTF-8 sequence at s[0..avail), 0 if it is not one. */
size_t utf8_seq_len(const uint8_t *s, size_t avail);
/* Whether s[0..n) is valid UTF-8 (NUL bytes are valid). */
bool utf8_valid(const void *s, size_t n);

#endif
