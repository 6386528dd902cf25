/* test_iotap.c — the metadata tap (src/util/iotap.h): what a recorder kept is what a replayer
 * answers, byte for byte, for the same reads (overlapping and adjacent ones merged, the end of
 * a file kept); reads it did not see, and a file of another size, are misses; a blob cut or
 * altered anywhere is refused, never read past. */
#include "util/iotap.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int make_file(const char *path, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    for (size_t i = 0; i < n; i++)
        fputc((int)((i * 7 + 3) & 0xff), f);
    fclose(f);
    int fd = open(path, O_RDONLY);
    cr_assert(fd >= 0);
    return fd;
}

static void blob_of(const char *dir, uint8_t **blob, size_t *len, int *fd_a, int *fd_b) {
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/a.bin", dir);
    snprintf(b, sizeof b, "%s/b.bin", dir);
    *fd_a = make_file(a, 1000);
    *fd_b = make_file(b, 300);
    ck_io_tap *t = ck_io_tap_recorder();
    cr_assert(t);
    uint8_t buf[1000];
    cr_assert_eq(ck_io_tap_pread(t, a, *fd_a, buf, 100, 0), 100);
    cr_assert_eq(ck_io_tap_pread(t, a, *fd_a, buf, 100, 50), 100); /* overlaps */
    cr_assert_eq(ck_io_tap_pread(t, a, *fd_a, buf, 10, 150), 10);  /* adjacent */
    cr_assert_eq(ck_io_tap_pread(t, a, *fd_a, buf, 100, 950), 50); /* short: the end */
    cr_assert_eq(ck_io_tap_pread(t, a, *fd_a, buf, 100, 1000), 0); /* end of file */
    cr_assert_eq(ck_io_tap_pread(t, "x/y/b.bin", *fd_b, buf, 8, 292), 8);
    cr_assert_eq(ck_io_tap_blob(t, blob, len, NULL), CKPT_OK);
    ck_io_tap_free(t);
}

Test(iotap, replays_what_was_read) {
    char dir[] = "/tmp/ck-iotap-XXXXXX";
    cr_assert(mkdtemp(dir));
    uint8_t *blob;
    size_t len;
    int fa, fb;
    blob_of(dir, &blob, &len, &fa, &fb);
    ck_io_tap *t;
    cr_assert_eq(ck_io_tap_replayer(blob, len, &t, NULL), CKPT_OK);
    uint8_t got[200], want[200];
    /* the same reads, under another directory: the same bytes */
    cr_assert_eq(ck_io_tap_pread(t, "/elsewhere/a.bin", fa, got, 160, 0), 160);
    cr_assert_eq(pread(fa, want, 160, 0), 160);
    cr_assert_eq(memcmp(got, want, 160), 0);
    cr_assert_eq(ck_io_tap_pread(t, "a.bin", fa, got, 100, 950), 50);
    cr_assert_eq(pread(fa, want, 50, 950), 50);
    cr_assert_eq(memcmp(got, want, 50), 0);
    cr_assert_eq(ck_io_tap_pread(t, "a.bin", fa, got, 10, 1000), 0);
    cr_assert_eq(ck_io_tap_pread(t, "b.bin", fb, got, 8, 292), 8);
    /* reads it did not see: misses */
    errno = 0;
    cr_assert_eq(ck_io_tap_pread(t, "a.bin", fa, got, 10, 500), -1);
    cr_assert_eq(errno, CK_ETAPMISS);
    cr_assert_eq(ck_io_tap_pread(t, "c.bin", fa, got, 10, 0), -1);
    /* a file of another size than the recorder saw */
    char other[512];
    snprintf(other, sizeof other, "%s/other", dir);
    int fo = make_file(other, 301);
    ck_io_tap *t2;
    cr_assert_eq(ck_io_tap_replayer(blob, len, &t2, NULL), CKPT_OK);
    cr_assert_eq(ck_io_tap_pread(t2, "b.bin", fo, got, 8, 292), -1);
    cr_assert_eq(errno, CK_ETAPMISS);
    ck_io_tap_free(t2);
    ck_io_tap_free(t);
    /* every cut of the blob and every altered byte: refused or well formed, never read past
     * (ASan) */
    for (size_t n = 0; n < len; n++) {
        cr_assert_neq(ck_io_tap_replayer(blob, n, &t, NULL), CKPT_OK, "cut at %zu", n);
        uint8_t *copy = malloc(len);
        memcpy(copy, blob, len);
        copy[n] ^= 0xff;
        if (ck_io_tap_replayer(copy, len, &t, NULL) == CKPT_OK) {
            (void)ck_io_tap_pread(t, "a.bin", fa, got, 100, 0);
            ck_io_tap_free(t);
        }
        free(copy);
    }
    free(blob);
    close(fa);
    close(fb);
    close(fo);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}
