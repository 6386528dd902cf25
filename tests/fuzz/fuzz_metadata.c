/* fuzz_metadata.c — libFuzzer target: the input is a `.metadata` file; it is indexed with
 * small limits, and every entry is listed and its layout checked (no data files exist, so
 * reads must fail cleanly). */
#include "ckpt.h"
#include "index/reader_i.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ckpt_limits lim = {.max_pickle_memory = 64u << 20, .max_items = 1u << 20, .max_depth = 64};
    ckpt_reader *r = NULL;
    ckpt_error err;
    if (ckpt_reader_open_buffer("/nonexistent-fuzz-dir", data, size, &lim, 0, &r, &err) != CKPT_OK)
        return 0;
    for (size_t i = 0; i < ckpt_reader_num_entries(r); i++) {
        const ckpt_entry *e = ckpt_reader_entry(r, i);
        (void)ckpt_entry_path(e);
        (void)ckpt_entry_check_layout(e, &err);
        if (ckpt_entry_kind_of(e) == CKPT_ENTRY_TENSOR && ckpt_entry_nbytes(e) <= 4096) {
            uint8_t buf[4096];
            (void)ckpt_read_tensor(r, e, buf, sizeof buf, &err);
        }
    }
    ckpt_reader_free(r);
    return 0;
}
