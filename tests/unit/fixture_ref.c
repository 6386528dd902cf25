/* fixture_ref.c — loading the torch-generated fixture references for unit tests. */
#include "fixture_ref.h"
#include "test_util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *ref_fixtures_dir(void) {
    const char *d = getenv("CKPT_FIXTURES");
    if (!d || !*d) d = getenv("CKPT_FIXTURES_DEFAULT");
    return d ? d : "tests/fixtures/data";
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

size_t ref_list(char ***names) {
    *names = NULL;
    DIR *d = opendir(ref_fixtures_dir());
    if (!d) return 0;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char p[4096];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s/reference.tsv", ref_fixtures_dir(), de->d_name);
        if (stat(p, &st) != 0) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            *names = realloc(*names, cap * sizeof **names);
        }
        (*names)[n++] = strdup(de->d_name);
    }
    closedir(d);
    if (n) qsort(*names, n, sizeof **names, cmp_str);
    return n;
}

void ref_free_names(char **names, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* Splits `line` on tabs in place; returns the number of fields. */
static int split_tabs(char *line, char **fields, int max) {
    int n = 0;
    fields[n++] = line;
    for (char *p = line; *p && n < max; p++) {
        if (*p == '\t') {
            *p = '\0';
            fields[n++] = p + 1;
        }
    }
    return n;
}

int ref_load(const char *name, ref_fixture *out) {
    memset(out, 0, sizeof *out);
    char p[4096];
    out->name = strdup(name);
    snprintf(p, sizeof p, "%s/%s/ckpt", ref_fixtures_dir(), name);
    out->ckpt_dir = strdup(p);
    snprintf(p, sizeof p, "%s/%s/reference.bin", ref_fixtures_dir(), name);
    out->bin = tu_read_file(p, &out->bin_len);
    snprintf(p, sizeof p, "%s/%s/reference.tsv", ref_fixtures_dir(), name);
    char *tsv = (char *)tu_read_file(p, NULL);
    if (!tsv || !out->bin) {
        free(tsv);
        return -1;
    }
    size_t cap = 0;
    char *save = NULL;
    for (char *line = strtok_r(tsv, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *f[8] = {0};
        int nf = split_tabs(line, f, 8);
        if (out->n == cap) {
            cap = cap ? cap * 2 : 64;
            out->entries = realloc(out->entries, cap * sizeof *out->entries);
        }
        ref_entry *e = &out->entries[out->n];
        memset(e, 0, sizeof *e);
        e->kind = f[0][0];
        if (e->kind == 'T' && nf >= 7) {
            e->key = strdup(f[1]);
            e->dtype = strdup(f[2]);
            char *s = f[3];
            while (*s) {
                e->shape[e->ndim++] = strtoll(s, &s, 10);
                if (*s == ',') s++;
            }
            e->offset = strtoull(f[4], NULL, 10);
            e->nbytes = strtoull(f[5], NULL, 10);
            e->path = strdup(f[6]);
        } else if (e->kind == 'O' && nf >= 5) {
            e->key = strdup(f[1]);
            e->json = strdup(f[2]);
            e->repr = strdup(f[3]);
            e->path = strdup(f[4]);
        } else {
            continue;
        }
        out->n++;
    }
    free(tsv);
    return 0;
}

void ref_free(ref_fixture *f) {
    for (size_t i = 0; i < f->n; i++) {
        ref_entry *e = &f->entries[i];
        free(e->key);
        free(e->path);
        free(e->dtype);
        free(e->json);
        free(e->repr);
    }
    free(f->entries);
    free(f->bin);
    free(f->name);
    free(f->ckpt_dir);
}
