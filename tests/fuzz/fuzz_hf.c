/* fuzz_hf.c — libFuzzer target: HuggingFace safetensors storage (src/index/hf_storage.c).
 * The input is two `*.safetensors` files and a model.safetensors.index.json: u16 length of
 * the first file, u16 length of the index (0: no index), then the first file, the index and
 * the second file (the rest), little endian.  They are written into a private directory that
 * is then probed, opened as a checkpoint (headers, DCP_SHARDING_INFO, chunks merged across
 * the files, the index's weight_map), read (read_all.h) and dumped as JSON. */
#include "ckpt.h"
#include "index/formats.h"
#include "index/metadata_files.h"
#include "read_all.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

static const char *const names[] = {"model-00001-of-00002.safetensors",
                                    "model-00002-of-00002.safetensors",
                                    "model.safetensors.index.json"};

static void cleanup(void) {
    char path[128];
    for (size_t i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

static void put(const char *name, const uint8_t *p, size_t n) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(p, 1, n, f) != n) abort();
    if (fclose(f) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/fuzz-hf-%ld", (long)getpid());
        if (mkdir(dir, 0700) != 0 && access(dir, W_OK) != 0) abort();
        atexit(cleanup);
    }
    if (size < 4) return 0;
    size_t k = (size_t)data[0] | (size_t)data[1] << 8, j = (size_t)data[2] | (size_t)data[3] << 8;
    data += 4;
    size -= 4;
    if (k > size) k = size;
    if (j > size - k) j = size - k;
    put(names[0], data, k);
    put(names[1], data + k + j, size - k - j);
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, names[2]);
    if (j)
        put(names[2], data + k, j);
    else
        unlink(path);
    struct timespec mt;
    ck_checkpoint_dir_probe(dir, &mt);

    ckpt_limits lim = {.max_metadata_bytes = 1u << 20};
    ckpt_open_options opts = {.limits = &lim};
    ckpt_reader *r = NULL;
    ckpt_error err;
    if (ckpt_reader_open(dir, &opts, &r, &err) == CKPT_OK) {
        fuzz_read_all(r);
        ckpt_reader_free(r);
    }
    char *json = NULL;
    if (ckpt_metadata_dump_json(dir, &opts, &json, &err) == CKPT_OK) free(json);
    return 0;
}
