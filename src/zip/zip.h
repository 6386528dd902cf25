/* zip.h — reads the stored-entry zip archives that torch.save writes, from a byte range of
 * a file or from memory.  Records are found through the central directory (zip64 aware);
 * the archive's root folder name is taken from the first entry, never assumed. */
#ifndef CK_ZIP_H
#define CK_ZIP_H

#include "ckpt.h"
#include "util/source.h"

#include <stdint.h>

typedef struct zip_archive zip_archive;

typedef struct zip_record {
    const char *name;     /* full name, e.g. "archive/data/0" */
    uint64_t data_offset; /* start of the stored bytes, relative to the archive start */
    uint64_t size;        /* stored (= uncompressed) size */
    uint16_t method;      /* 0 = stored; anything else is rejected on read */
} zip_record;

/* Parses the central directory of the archive occupying the whole of `src`.  Every record's
 * data range is validated to lie inside the source.  Error messages give the offset
 * relative to the archive start; the caller prefixes file and base offset. */
ckpt_status zip_open(const ck_source *src, zip_archive **out, ckpt_error *err);
void zip_close(zip_archive *z);

const char *zip_root(const zip_archive *z); /* "archive" */
size_t zip_num_records(const zip_archive *z);
const zip_record *zip_record_at(const zip_archive *z, size_t i);
/* Looks `<root>/<name>` up (e.g. "data.pkl", "data/0", "byteorder").  NULL if absent. */
const zip_record *zip_find(const zip_archive *z, const char *name);
/* Reads a whole record into a malloc'ed buffer (NUL-terminated; *len excludes the NUL);
 * refuses records larger than max_size. */
ckpt_status zip_read_record(const zip_archive *z, const zip_record *rec, uint64_t max_size,
                            uint8_t **buf, size_t *len, ckpt_error *err);
/* Number of reads zip_open issued on a file source (0 for memory sources); for tests and
 * diagnostics.  A torch.save archive costs 1 (smaller than 8 KiB) or 2. */
unsigned zip_open_reads(const zip_archive *z);

#endif
