/* replay_main.c — runs a libFuzzer target over every file of the given corpus directories
 * without libFuzzer, so the corpora replay as plain tests under any compiler and sanitizer. */
#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!buf || got != (size_t)n) {
        free(buf);
        return -1;
    }
    LLVMFuzzerTestOneInput(buf, got);
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    unsigned long files = 0;
    for (int i = 1; i < argc; i++) {
        DIR *d = opendir(argv[i]);
        if (!d) {
            fprintf(stderr, "replay: cannot open corpus %s\n", argv[i]);
            return 1;
        }
        struct dirent *de;
        while ((de = readdir(d))) {
            char path[4096];
            struct stat st;
            snprintf(path, sizeof path, "%s/%s", argv[i], de->d_name);
            if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
            if (run_file(path) != 0) {
                fprintf(stderr, "replay: cannot read %s\n", path);
                closedir(d);
                return 1;
            }
            files++;
        }
        closedir(d);
    }
    printf("replayed %lu inputs\n", files);
    return files ? 0 : 1;
}
