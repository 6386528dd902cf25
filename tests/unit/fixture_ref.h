/* fixture_ref.h — test helper: enumerates the torch-generated fixtures and parses their
 * reference.tsv / reference.bin (see tests/fixtures/README.md). */
#ifndef CK_TEST_FIXTURE_REF_H
#define CK_TEST_FIXTURE_REF_H

#include <stddef.h>
#include <stdint.h>

typedef struct ref_entry {
    char kind; /* 'T' or 'O' */
    char *key;
    char *path;
    char *dtype;
    int ndim;
    int64_t shape[64];
    uint64_t offset, nbytes; /* in reference.bin */
    char *json, *repr;       /* objects */
} ref_entry;

typedef struct ref_fixture {
    char *name;
    char *ckpt_dir;
    ref_entry *entries;
    size_t n;
    uint8_t *bin;
    size_t bin_len;
} ref_fixture;

/* The fixtures directory: $CKPT_FIXTURES, else $CKPT_FIXTURES_DEFAULT. */
const char *ref_fixtures_dir(void);
/* Lists fixture names (sorted); returns count, fills *names (free with ref_free_names). */
size_t ref_list(char ***names);
void ref_free_names(char **names, size_t n);
/* Loads one fixture's reference; returns 0 on success. */
int ref_load(const char *name, ref_fixture *out);
void ref_free(ref_fixture *f);

#endif
