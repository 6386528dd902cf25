/* fuzz_torchsave.c — libFuzzer target: a single torch.save file opened as a checkpoint
 * (src/index/torchsave_file.c).  The input is the file; it is written into a private
 * directory, opened, and every entry read: tensors of at most 1 MiB whole and through a
 * region of their first element, values loaded and rendered as text. */
#include "ckpt.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], file[96];

static void cleanup(void) {
    unlink(file);
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/fuzz-ts-%ld", (long)getpid());
        if (mkdir(dir, 0700) != 0 && access(dir, W_OK) != 0) abort();
        snprintf(file, sizeof file, "%s/model.pt", dir);
        atexit(cleanup);
    }
    FILE *f = fopen(file, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    if (fclose(f) != 0) abort();

    ckpt_limits lim = {.max_metadata_bytes = 1u << 20, .max_object_bytes = 1u << 20};
    ckpt_open_options opts = {.limits = &lim};
    ckpt_reader *r = NULL;
    ckpt_error err;
    if (ckpt_reader_open(file, &opts, &r, &err) != CKPT_OK) return 0;
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
    ckpt_reader_free(r);
    return 0;
}
