/* test_read_stats.c — the reader's read counters (ckpt_reader_get_stats) against what the
 * kernel counted for this process (/proc/self/io rchar), for every fixture. */
#include "ckpt.h"
#include "fixture_ref.h"

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif

/* Under valgrind the tool's own reads (symbols, /proc) land in this process's rchar too: the
 * counters are then only checked for what they must hold regardless. */
static bool under_valgrind(void) {
#ifdef RUNNING_ON_VALGRIND
    if (RUNNING_ON_VALGRIND) return true;
#endif
    const char *p = getenv("LD_PRELOAD");
    return p && strstr(p, "vgpreload");
}

/* rchar of /proc/self/io: the bytes every read syscall of this process returned so far.
 * *own: the bytes this read of /proc/self/io itself returned (rchar counts them next time). */
static unsigned long long rchar_now(unsigned long long *own) {
    FILE *f = fopen("/proc/self/io", "r");
    cr_assert(f, "no /proc/self/io");
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    *own = n;
    const char *p = strstr(buf, "rchar:");
    cr_assert(p, "no rchar in /proc/self/io");
    return strtoull(p + 6, NULL, 10);
}

/* The reader's counters equal what the kernel counted for this process (rchar): the open
 * (metadata files), then a whole read of every tensor twice (data files; a decoded chunk the
 * second time comes from the cache: nothing read), and ckpt_reader_add_read adds what it is
 * told.  Single-threaded: index_threads = 1, so no other thread reads meanwhile. */
Test(read_stats, equal_rchar, .timeout = 120) {
    char **names;
    size_t n = ref_list(&names);
    for (size_t fi = 0; fi < n; fi++) {
        ref_fixture f;
        cr_assert_eq(ref_load(names[fi], &f), 0, "cannot load reference of %s", names[fi]);
        ckpt_limits lim = {.index_threads = 1};
        ckpt_open_options o = {.limits = &lim};
        ckpt_reader *r = NULL;
        ckpt_error err = {0};
        unsigned long long own0, own1, r0 = rchar_now(&own0);
        cr_assert_eq(ckpt_reader_open(f.ckpt_dir, &o, &r, &err), CKPT_OK, "%s: %s", f.name,
                     err.message);
        unsigned long long r1 = rchar_now(&own1);
        ckpt_reader_stats st;
        ckpt_reader_get_stats(r, &st);
        bool exact = !under_valgrind();
        if (exact)
            cr_expect_eq(st.bytes_read + st.bytes_read_metadata, r1 - r0 - own0,
                         "%s: open: counted %llu + %llu, rchar %llu", f.name,
                         (unsigned long long)st.bytes_read,
                         (unsigned long long)st.bytes_read_metadata, r1 - r0 - own0);
        cr_expect_gt(st.bytes_read_metadata, 0, "%s", f.name);
        cr_expect_gt(st.preads_metadata, 0, "%s", f.name);
        for (int pass = 0; pass < 2; pass++) {
            ckpt_reader_stats a, b;
            ckpt_reader_get_stats(r, &a);
            unsigned long long needed = 0;
            r0 = rchar_now(&own0);
            for (size_t i = 0; i < ckpt_reader_num_entries(r); i++) {
                const ckpt_entry *e = ckpt_reader_entry(r, i);
                if (ckpt_entry_kind_of(e) != CKPT_ENTRY_TENSOR || ckpt_entry_problem(e)) continue;
                size_t nb = (size_t)ckpt_entry_nbytes(e);
                void *buf = malloc(nb ? nb : 1);
                cr_assert(buf);
                if (ckpt_read_tensor(r, e, buf, nb, &err) == CKPT_OK) needed += nb;
                free(buf);
            }
            r1 = rchar_now(&own1);
            ckpt_reader_get_stats(r, &b);
            unsigned long long got =
                (b.bytes_read - a.bytes_read) + (b.bytes_read_metadata - a.bytes_read_metadata);
            if (exact)
                cr_expect_eq(got, r1 - r0 - own0, "%s: pass %d: counted %llu, rchar %llu", f.name,
                             pass, got, r1 - r0 - own0);
            cr_expect_eq(b.bytes_read_metadata, a.bytes_read_metadata, "%s", f.name);
            if (pass == 0 && strcmp(f.name, "zstd") != 0)
                cr_expect_geq(got, needed, "%s: read %llu of %llu needed", f.name, got, needed);
        }
        ckpt_reader_stats a, b;
        ckpt_reader_get_stats(r, &a);
        ckpt_reader_add_read(r, 100);
        ckpt_reader_add_read(r, 0);
        ckpt_reader_get_stats(r, &b);
        cr_expect_eq(b.bytes_read - a.bytes_read, 100);
        cr_expect_eq(b.preads - a.preads, 1);
        ckpt_reader_free(r);
        ref_free(&f);
    }
    ref_free_names(names, n);
}
