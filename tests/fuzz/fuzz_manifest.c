/* fuzz_manifest.c — libFuzzer target: the input is a `.ckptfs-manifest`.  Parsing must fail
 * cleanly or give records that are sorted, name plain files, and are found again by
 * ckpt_manifest_find.  Each input is parsed twice: as is, and with its trailing checksum
 * recomputed, so mutations reach the parser behind the checksum too. */
#include "manifest/manifest_i.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int parse_one(const uint8_t *data, size_t size) {
    ckpt_manifest *m = NULL;
    ckpt_error err = {0};
    if (manifest_parse(data, size, "fuzz", &m, &err) != CKPT_OK) {
        if (m || !err.message[0]) abort();
        return 0;
    }
    for (size_t i = 0; i < ckpt_manifest_num_records(m); i++) {
        const ckpt_manifest_record *r = ckpt_manifest_record_at(m, i);
        if (!r->file[0] || strchr(r->file, '/')) abort();
        if (r->offset > UINT64_MAX - r->length) abort();
        if (ckpt_manifest_find(m, r->file, r->offset) != r) abort();
        if (i) {
            const ckpt_manifest_record *p = ckpt_manifest_record_at(m, i - 1);
            int c = strcmp(p->file, r->file);
            if (c > 0 || (c == 0 && p->offset >= r->offset)) abort();
        }
    }
    ckpt_manifest_free(m);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    parse_one(data, size);
    if (size < 8) return 0;
    uint8_t *fixed = malloc(size);
    if (!fixed) return 0;
    memcpy(fixed, data, size);
    XXH64_canonical_t c;
    XXH64_canonicalFromHash(&c, XXH3_64bits(fixed, size - 8));
    memcpy(fixed + size - 8, c.digest, 8);
    parse_one(fixed, size);
    free(fixed);
    return 0;
}
