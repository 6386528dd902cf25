/* reader_demo.c — a program built against an installed libckpt with pkg-config alone
 * (tests/install/test_install.py): lists a checkpoint's entries and the XXH-free checksum of
 * every tensor's bytes, read through the public API only. */
#include <ckpt.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: reader_demo CHECKPOINT_DIR\n");
        return 2;
    }
    ckpt_reader *r = NULL;
    ckpt_error err;
    if (ckpt_reader_open(argv[1], NULL, &r, &err) != CKPT_OK) {
        fprintf(stderr, "reader_demo: %s (%s)\n", err.message, ckpt_strerror(err.code));
        return 1;
    }
    for (size_t i = 0; i < ckpt_reader_num_entries(r); i++) {
        const ckpt_entry *e = ckpt_reader_entry(r, i);
        if (ckpt_entry_kind_of(e) != CKPT_ENTRY_TENSOR) continue;
        size_t n = (size_t)ckpt_entry_nbytes(e);
        unsigned char *buf = malloc(n ? n : 1);
        if (!buf || ckpt_read_tensor(r, e, buf, n, &err) != CKPT_OK) {
            fprintf(stderr, "reader_demo: %s: %s\n", ckpt_entry_key(e), buf ? err.message : "oom");
            return 1;
        }
        uint64_t sum = 0; /* position-weighted byte sum: any changed or moved byte shows */
        for (size_t k = 0; k < n; k++)
            sum = sum * 31 + buf[k];
        printf("%s\t%s\t%zu\t%llu\n", ckpt_entry_key(e), ckpt_dtype_name(ckpt_entry_dtype(e)), n,
               (unsigned long long)sum);
        free(buf);
    }
    ckpt_reader_free(r);
    return 0;
}
