/* fuzz_manifest.c — libFuzzer target: the input is a `.ckptfs-manifest`.  Parsing must fail
 * cleanly or give records that are sorted, name plain files, and are found again by
 * ckpt_manifest_find. */
#include "manifest/manifest_i.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
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
