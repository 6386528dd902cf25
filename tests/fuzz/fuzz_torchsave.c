/* fuzz_torchsave.c — libFuzzer target: a single torch.save file opened as a checkpoint
 * (src/index/torchsave_file.c).  The input is the file; it is written into a private
 * directory, opened, and every entry read (read_all.h). */
#include "ckpt.h"
#include "read_all.h"

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
    fuzz_read_all(r);
    ckpt_reader_free(r);
    return 0;
}
