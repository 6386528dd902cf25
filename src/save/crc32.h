/* crc32.h — CRC-32 (ISO 3309 / zip polynomial 0xEDB88320) for the zip writer. */
#ifndef CKPT_SAVE_CRC32_H
#define CKPT_SAVE_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* Continues `crc` (0 to start) over `len` bytes; returns the updated CRC as zip stores it. */
uint32_t save_crc32(uint32_t crc, const void *data, size_t len);
/* The built-in implementation (what save_crc32 is without zlib), for tests. */
uint32_t save_crc32_builtin(uint32_t crc, const void *data, size_t len);

#endif
