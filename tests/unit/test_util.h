/* test_util.h — helpers shared by the unit tests. */
#ifndef CK_TEST_UTIL_H
#define CK_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Reads a whole file (failing the current test if it cannot); the buffer is NUL-terminated
 * past *len (len may be NULL) and freed by the caller. */
uint8_t *tu_read_file(const char *path, size_t *len);
/* Writes buf[0, len) to path (created or truncated), failing the current test if it cannot. */
void tu_write_file(const char *path, const void *buf, size_t len);
/* Copies the file `from` to `to`. */
void tu_copy_file(const char *from, const char *to);
/* Copies the regular files of directory `from` (symlinks followed; subdirectories skipped)
 * into the existing directory `to`. */
void tu_copy_files(const char *from, const char *to);

#endif
