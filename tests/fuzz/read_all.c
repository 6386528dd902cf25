/* read_all.c — fuzz_read_all (read_all.h). */
#include "read_all.h"

#include <stdint.h>
#include <stdlib.h>

void fuzz_read_all(ckpt_reader *r) {
    ckpt_error err;
    uint64_t bad;
    ckpt_reader_check_ranges(r, NULL, NULL, &bad);
    for (size_t i = 0; i < ckpt_reader_num_entries(r); i++) {
        const ckpt_entry *e = ckpt_reader_entry(r, i);
        if (ckpt_entry_kind_of(e) == CKPT_ENTRY_OBJECT) {
            ckpt_object *o = NULL;
            if (ckpt_object_load(r, e, &o, &err) == CKPT_OK) {
                char *text = NULL;
                if (ckpt_value_to_text(ckpt_object_root(o), &text, &err) == CKPT_OK) free(text);
                ckpt_object_free(o);
            }
            continue;
        }
        ckpt_entry_check_layout(e, &err);
        uint64_t n = ckpt_entry_nbytes(e);
        if (n <= (1u << 20)) {
            uint8_t *buf = malloc(n ? n : 1);
            if (!buf) abort();
            ckpt_read_tensor(r, e, buf, n, &err);
            free(buf);
        }
        int nd = ckpt_entry_ndim(e);
        const int64_t *shape = ckpt_entry_shape(e);
        int64_t start[CKPT_MAX_NDIM] = {0}, count[CKPT_MAX_NDIM];
        bool empty = false;
        for (int d = 0; d < nd; d++) {
            count[d] = 1;
            empty |= shape[d] == 0;
        }
        uint8_t one[16];
        if (!empty) ckpt_read_region(r, e, start, count, one, sizeof one, &err);
    }
}
