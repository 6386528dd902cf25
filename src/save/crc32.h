/* crc32.h — CRC-32 (ISO 3309 / zip polynomial 0xEDB88320) for the zip writer. */
#ifndef CK_SAVE_CRC32_H
#define CK_SAVE_CRC32_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Continues `crc` (0 to start) over `len` bytes; returns the updated CRC as zip stores it. */
uint32_t save_crc32(uint32_t crc, const void *data, size_t len);
/* The built-in table implementation, for tests and short inputs. */
uint32_t save_crc32_builtin(uint32_t crc, const void *data, size_t len);
/* Carry-less multiplication (x86-64 with PCLMULQDQ + SSE4.1, checked at run time; the table
 * code elsewhere and for the last < 16 bytes).  save_crc32 uses it when available. */
uint32_t save_crc32_clmul(uint32_t crc, const void *data, size_t len);
bool save_crc32_clmul_available(void);

#endif
