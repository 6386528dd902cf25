/* fuzz_zip.c — libFuzzer target: the input is a zip archive.  zip_open on a memory source must
 * either fail cleanly or produce records whose names, root, lookups and data ranges are
 * consistent; every record is then read (stored ones must succeed, others must be refused).
 * The same bytes are opened again through a file descriptor (memfd), which takes the
 * buffered-read path (tail read, clustered local headers): both must agree exactly. */
#include "zip/zip.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_records(const zip_archive *z, const uint8_t *data, size_t size) {
    const char *root = zip_root(z);
    size_t root_len = strlen(root);
    if (root_len == 0) abort();
    for (size_t i = 0; i < zip_num_records(z); i++) {
        const zip_record *r = zip_record_at(z, i);
        if (r->data_offset > size) abort();
        if (r->method == 0 && r->size > size - r->data_offset) abort();
        /* names under the root are found again */
        if (!strncmp(r->name, root, root_len) && r->name[root_len] == '/') {
            if (zip_find(z, r->name + root_len + 1) != r) abort();
        }
        uint8_t *buf = NULL;
        size_t len = 0;
        ckpt_error err;
        ckpt_status st = zip_read_record(z, r, 1u << 24, &buf, &len, &err);
        if (st == CKPT_OK) {
            if (r->method != 0 || len != r->size || buf[len] != 0) abort();
            if (len && memcmp(buf, data + r->data_offset, len)) abort();
            free(buf);
        } else if (buf) {
            abort();
        }
    }
    if (zip_record_at(z, zip_num_records(z))) abort();
    (void)zip_find(z, "data.pkl");
    (void)zip_find(z, "data/0");
}

static void same_archive(const zip_archive *a, const zip_archive *b) {
    if (strcmp(zip_root(a), zip_root(b)) || zip_num_records(a) != zip_num_records(b)) abort();
    for (size_t i = 0; i < zip_num_records(a); i++) {
        const zip_record *x = zip_record_at(a, i), *y = zip_record_at(b, i);
        if (strcmp(x->name, y->name) || x->data_offset != y->data_offset || x->size != y->size ||
            x->method != y->method)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ck_source src = {.fd = -1, .mem = data, .len = size, .name = "fuzz"};
    zip_archive *z = NULL;
    ckpt_error err;
    ckpt_status st = zip_open(&src, &z, &err);
    if (st != CKPT_OK) {
        if (z || !memchr(err.message, '\0', sizeof err.message)) abort();
    } else {
        check_records(z, data, size);
    }

    int fd = memfd_create("fuzz_zip", MFD_CLOEXEC);
    if (fd >= 0) {
        if (write(fd, data, size) == (ssize_t)size) {
            ck_source fsrc = {.fd = fd, .len = size, .name = "fuzz"};
            zip_archive *fz = NULL;
            ckpt_error ferr;
            ckpt_status fst = zip_open(&fsrc, &fz, &ferr);
            /* Same verdict; errors may differ only in which bad header is reported first. */
            if ((fst == CKPT_OK) != (st == CKPT_OK)) abort();
            if (fst == CKPT_OK) {
                same_archive(z, fz);
                check_records(fz, data, size);
                if (zip_open_reads(fz) == 0) abort();
            }
            zip_close(fz);
        }
        close(fd);
    }
    zip_close(z);
    return 0;
}
