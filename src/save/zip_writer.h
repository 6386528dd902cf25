/* zip_writer.h — one torch.save archive written into a sink, byte-compatible with what
 * PyTorch's PyTorchStreamWriter (bundled miniz) writes: stored entries named
 * `<root>/<record>`, general-purpose flags 0x0808 (data descriptor + UTF-8) with zero
 * CRC/sizes in the local header, a "FB" extra field of 'Z' padding so every record's data
 * starts at a multiple of 64 bytes from the archive start, a data descriptor after each
 * record, then the central directory, a Zip64 end record and locator and the classic end
 * record (miniz writes the Zip64 trailer for every torch.save archive).  Records of 4 GiB or
 * more, or starting beyond 4 GiB, carry a Zip64 extra field and a data descriptor with 64-bit
 * sizes, as miniz writes them; an empty record has flags 0x0800 and no data descriptor.  All
 * offsets are relative to the archive start (the sink position at zw_begin).
 *
 * The pieces are also rendered one at a time (zw_local_header ...), for writers that lay an
 * archive out before having its data (a virtual file served by ranges): every piece's length
 * depends only on the record's name, offset and size. */
#ifndef CK_SAVE_ZIP_WRITER_H
#define CK_SAVE_ZIP_WRITER_H

#include "save/sink.h"

/* Largest pieces, for buffers (full names are at most ZW_NAME_MAX bytes). */
#define ZW_ALIGN 64u
#define ZW_NAME_MAX 255u
#define ZW_LOCAL_MAX (30u + ZW_NAME_MAX + 28u + 4u + ZW_ALIGN - 1u)
#define ZW_DESC_MAX 24u
#define ZW_CENTRAL_MAX (46u + ZW_NAME_MAX + 28u)
#define ZW_TRAILER_LEN 98u

/* The local header of record `full` (nl bytes, the root included) of `len` bytes whose header
 * starts at archive offset `cursor`, its 'Z' padding included (the data starts right after, at
 * a multiple of 64).  out == NULL: the length only.  Returns the length. */
size_t zw_local_header(unsigned char *out, const char *full, size_t nl, uint64_t cursor,
                       uint64_t len);
/* The data descriptor after that record's data (0 bytes for an empty record). */
size_t zw_descriptor(unsigned char *out, uint64_t cursor, uint64_t len, uint32_t crc);
/* Its central directory entry (lho: the local header's offset). */
size_t zw_central(unsigned char *out, const char *full, size_t nl, uint64_t lho, uint64_t len,
                  uint32_t crc);
/* Zip64 end record, locator and end record (ZW_TRAILER_LEN bytes) of n records whose central
 * directory of cd_size bytes starts at cd_off. */
size_t zw_trailer(unsigned char *out, uint64_t n, uint64_t cd_off, uint64_t cd_size);

typedef struct zw_entry {
    char *name;
    uint64_t lho; /* local header offset (archive-relative) */
    uint64_t size;
    uint32_t crc;
} zw_entry;

typedef struct zip_writer {
    save_sink *sink;
    uint64_t base; /* sink position of the archive start */
    const char *root;
    zw_entry *ents;
    size_t n, cap;
    zw_entry open;      /* the record being written (open.name != NULL) */
    uint64_t open_done; /* bytes of it written so far */
} zip_writer;

void zw_begin(zip_writer *z, save_sink *sink, const char *root);
/* Adds record `<root>/<name>`. */
ckpt_status zw_add(zip_writer *z, const char *name, const void *data, uint64_t len,
                   ckpt_error *err);
/* The same in pieces, for data that arrives block by block (device sources): _record_begin
 * writes the local header of a record of `len` bytes, _record_data CRCs and writes the next
 * `n` bytes, _record_end (after exactly `len` bytes) writes the data descriptor. */
ckpt_status zw_record_begin(zip_writer *z, const char *name, uint64_t len, ckpt_error *err);
ckpt_status zw_record_data(zip_writer *z, const void *data, size_t n, ckpt_error *err);
ckpt_status zw_record_end(zip_writer *z, ckpt_error *err);
/* Writes the central directory and end records; *archive_len = bytes of the whole archive.
 * Frees the entry list. */
ckpt_status zw_finish(zip_writer *z, uint64_t *archive_len, ckpt_error *err);
void zw_release(zip_writer *z);

#endif
