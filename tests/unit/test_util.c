/* test_util.c — helpers shared by the unit tests. */
#include "test_util.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

uint8_t *tu_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    cr_assert_geq(n, 0, "cannot size %s", path);
    uint8_t *buf = malloc((size_t)n + 1);
    cr_assert(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n, "short read of %s", path);
    fclose(f);
    buf[n] = '\0';
    if (len) *len = (size_t)n;
    return buf;
}

void tu_write_file(const char *path, const void *buf, size_t len) {
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot create %s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(buf, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
}

void tu_copy_file(const char *from, const char *to) {
    size_t n;
    uint8_t *buf = tu_read_file(from, &n);
    tu_write_file(to, buf, n);
    free(buf);
}

void tu_copy_files(const char *from, const char *to) {
    DIR *d = opendir(from);
    cr_assert(d, "%s: %s", from, strerror(errno));
    struct dirent *de;
    while ((de = readdir(d))) {
        char src[4096], dst[4096];
        snprintf(src, sizeof src, "%s/%s", from, de->d_name);
        struct stat st;
        if (stat(src, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        snprintf(dst, sizeof dst, "%s/%s", to, de->d_name);
        tu_copy_file(src, dst);
    }
    closedir(d);
}
