/* zipvec.h — test helper for the zip / transform / safetensors vectors written by
 * zip_vectors/gen.py: file loading from $CKPT_ZIP_VECTORS, CRC-32, and manifest.txt parsing. */
#ifndef CK_TEST_ZIPVEC_H
#define CK_TEST_ZIPVEC_H

#include <stddef.h>
#include <stdint.h>

#define ZV_MAX_RECORDS 16
#define ZV_MAX_ARCHIVES 32
#define ZV_MAX_TENSORS 32

typedef struct zv_record {
    char name[128];
    uint64_t data_offset, size;
    uint32_t crc;
} zv_record;

typedef struct zv_archive {
    char file[64];
    uint64_t offset, length;
    char root[64];
    size_t n;            /* records listed */
    size_t declared;     /* record count on the archive line */
    char transforms[64]; /* "" when none */
    zv_record rec[ZV_MAX_RECORDS];
} zv_archive;

typedef struct zv_tensor {
    char name[128];
    char dtype[16];
    uint64_t data_offset, size; /* relative to the file */
    uint32_t crc;
    int ndim;
    int64_t shape[8];
} zv_tensor;

typedef struct zv_blob {
    char file[64];
    uint64_t offset, header_len;
    size_t n;
    zv_tensor t[ZV_MAX_TENSORS];
} zv_blob;

typedef struct zv_manifest {
    zv_archive archives[ZV_MAX_ARCHIVES];
    size_t narchives;
    zv_blob blobs[4];
    size_t nblobs;
} zv_manifest;

/* Full path of a vector into buf (aborts the test if $CKPT_ZIP_VECTORS is unset). */
const char *zv_path(const char *name, char *buf, size_t cap);
/* Whole file, malloc'ed; aborts the test on failure. */
uint8_t *zv_load(const char *name, size_t *len);
/* Opens a vector read-only; aborts on failure. */
int zv_open(const char *name);
/* Parses manifest.txt (static storage is avoided: caller provides *m). */
void zv_manifest_load(zv_manifest *m);
const zv_blob *zv_find_blob(const zv_manifest *m, const char *file);
uint32_t zv_crc32(const void *p, size_t n);

#endif
