/* test_util.h — helpers shared by the unit tests. */
#ifndef CKPT_TEST_UTIL_H
#define CKPT_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Reads a whole file (failing the current test if it cannot); the buffer is NUL-terminated
 * past *len (len may be NULL) and freed by the caller. */
uint8_t *tu_read_file(const char *path, size_t *len);

#endif
