/* test_pickle_split.c — split decoding (pk_watch.split/hand, pk_batch_run): a pickle decoded
 * with batches handed to another thread must give the very document (or the very error) the
 * plain decoder gives.  A test consumer (tests/lib/split_check.c) hands batches over (every one,
 * or every other one) and
 * runs them on its own thread; documents are compared value by value.  Inputs: every fixture's
 * `.metadata` (torch-written, hostile ones included), the pickle vectors, and hand-made
 * pickles aimed at each rule of the split (a batch referring to a container still on the
 * decoder's stack, a container changed after a batch referred to it, a GET into a batch still
 * being decoded elsewhere, a PUT replacing an entry a later batch reads, errors inside and
 * after handed batches). */
#include "test_util.h"
#include "pickle/pickle.h"
#include "split_check.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Decodes buf plainly and with `c`; the documents (or the errors) must be the same. */
static void check_same(const char *what, const uint8_t *buf, size_t len, split_consumer *c) {
    const char *why = split_check(buf, len, NULL, c);
    cr_assert_null(why, "%s: %s (%s)", what, why, c->detail);
}

/* ---------------------------------------------------------------- fixtures */

static size_t check_dir(const char *dir, int policy, const char *only, size_t *handed) {
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    size_t files = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' && strcmp(de->d_name, ".metadata") != 0) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        size_t n = strlen(de->d_name);
        bool pickle = strcmp(de->d_name, ".metadata") == 0 ||
                      (n > 9 && strcmp(de->d_name + n - 9, ".metadata") == 0) ||
                      (n > 4 && strcmp(de->d_name + n - 4, ".pkl") == 0);
        if (de->d_type == DT_DIR) {
            files += check_dir(path, policy, only, handed);
            continue;
        }
        if (!pickle) continue;
        size_t len;
        uint8_t *buf = tu_read_file(path, &len);
        split_consumer c;
        cr_assert(split_consumer_init(&c, policy, only));
        check_same(path, buf, len, &c);
        *handed += c.handed_bytes;
        split_consumer_fini(&c);
        free(buf);
        files++;
    }
    closedir(d);
    return files;
}

Test(pickle_split, fixtures_decode_the_same_split_or_not) {
    const char *dirs[] = {getenv("CKPT_FIXTURES_ROOT"), getenv("CKPT_PICKLE_VECTORS")};
    for (int policy = SPLIT_EVERY; policy <= SPLIT_ALTERNATE; policy++) {
        for (int only = 0; only < 2; only++) {
            size_t files = 0, handed = 0;
            for (size_t i = 0; i < 2; i++) {
                cr_assert_not_null(dirs[i]);
                files += check_dir(dirs[i], policy, only ? "storage_data" : NULL, &handed);
            }
            cr_assert_gt(files, 50, "found %zu pickles", files);
            cr_assert_gt(handed, 20, "only %zu batches were handed over", handed);
        }
    }
}

/* ---------------------------------------------------------------- hand-made pickles */

typedef struct pkl {
    uint8_t b[4096];
    size_t n;
    unsigned memo;
} pkl;

static void op(pkl *p, uint8_t o) { p->b[p->n++] = o; }
static unsigned memoize(pkl *p) {
    op(p, 0x94);
    return p->memo++;
}
static unsigned str(pkl *p, const char *s) {
    op(p, 0x8c);
    op(p, (uint8_t)strlen(s));
    memcpy(p->b + p->n, s, strlen(s));
    p->n += strlen(s);
    return memoize(p);
}
static void int1(pkl *p, uint8_t v) {
    op(p, 'K');
    op(p, v);
}
static void binget(pkl *p, unsigned idx) {
    op(p, 'h');
    op(p, (uint8_t)idx);
}
static void start(pkl *p) {
    memset(p, 0, sizeof *p);
    op(p, 0x80);
    op(p, 4);
}
#define MARK(p) op(p, '(')
#define SETITEMS(p) op(p, 'u')
#define STOP(p) op(p, '.')

/* PROTO 4, the root dict, MARK, "storage_data" and its empty dict: batches follow. */
static void begin_storage_data(pkl *p) {
    start(p);
    op(p, '}');
    memoize(p);
    MARK(p);
    str(p, "storage_data");
    op(p, '}');
    memoize(p);
}

/* Runs a hand-made pickle with policy, checks it against the plain decode and returns the
 * consumer's counts. */
static split_consumer run_case(const char *what, const pkl *p, int policy) {
    split_consumer c;
    cr_assert(split_consumer_init(&c, policy, "storage_data"));
    check_same(what, p->b, p->n, &c);
    split_consumer out = c;
    split_consumer_fini(&c);
    return out;
}

Test(pickle_split, a_batch_may_not_refer_to_a_container_on_the_stack) {
    pkl p;
    start(&p);
    op(&p, '}');
    memoize(&p); /* root */
    MARK(&p);
    str(&p, "lst");
    op(&p, ']');
    unsigned lst = memoize(&p); /* still on the stack when the batch is handed */
    str(&p, "storage_data");
    op(&p, '}');
    memoize(&p);
    MARK(&p);
    str(&p, "k1");
    binget(&p, lst);
    str(&p, "k2");
    int1(&p, 7);
    SETITEMS(&p);
    SETITEMS(&p);
    STOP(&p);
    split_consumer c = run_case("pinned", &p, SPLIT_EVERY);
    cr_assert_eq(c.handed_bytes, 1);
    cr_assert_eq(c.run_failed, 1, "the handed batch should have been refused");
}

Test(pickle_split, a_container_changed_after_a_batch_referred_to_it) {
    pkl p;
    start(&p);
    op(&p, '}');
    memoize(&p);
    MARK(&p);
    str(&p, "lst");
    op(&p, ']');
    unsigned lst = memoize(&p);
    MARK(&p);
    int1(&p, 1);
    int1(&p, 2);
    op(&p, 'e'); /* APPENDS */
    SETITEMS(&p);
    MARK(&p);
    str(&p, "storage_data");
    op(&p, '}');
    memoize(&p);
    for (int k = 0; k < 4; k++) {
        MARK(&p);
        char key[16];
        snprintf(key, sizeof key, "k%d", k);
        str(&p, key);
        binget(&p, lst); /* the list, no longer on the stack */
        snprintf(key, sizeof key, "v%d", k);
        str(&p, key);
        int1(&p, (uint8_t)k);
        SETITEMS(&p);
    }
    SETITEMS(&p);
    binget(&p, lst); /* fetched again and changed: revokes before the change */
    int1(&p, 3);
    op(&p, 'a'); /* APPEND */
    op(&p, '0'); /* POP */
    STOP(&p);
    for (int policy = SPLIT_EVERY; policy <= SPLIT_ALTERNATE; policy++) {
        split_consumer c = run_case("changed later", &p, policy);
        cr_assert_geq(c.handed_bytes, 2);
    }
}

Test(pickle_split, a_get_into_a_batch_being_decoded_waits_for_it) {
    pkl p;
    begin_storage_data(&p);
    MARK(&p); /* handed (SPLIT_ALTERNATE: the first one is) */
    str(&p, "k1");
    op(&p, ']');
    unsigned inner = memoize(&p);
    str(&p, "k2");
    int1(&p, 7);
    SETITEMS(&p);
    MARK(&p); /* decoded by the decoder: GETs the list the handed batch made */
    str(&p, "k3");
    binget(&p, inner);
    SETITEMS(&p);
    SETITEMS(&p);
    MARK(&p);
    str(&p, "again");
    binget(&p, inner);
    SETITEMS(&p);
    STOP(&p);
    split_consumer c = run_case("get into a batch", &p, SPLIT_ALTERNATE);
    cr_assert_eq(c.handed_bytes, 1);
    cr_assert_eq(c.handed_pairs, 1);
    cr_assert_eq(c.run_failed, 0);
}

Test(pickle_split, a_put_replacing_an_entry_waits_for_the_batches) {
    pkl p;
    start(&p);
    op(&p, '}');
    memoize(&p);
    MARK(&p);
    str(&p, "x");
    unsigned old = str(&p, "old");
    str(&p, "storage_data");
    op(&p, '}');
    memoize(&p);
    MARK(&p); /* handed: reads "old" */
    str(&p, "k1");
    binget(&p, old);
    SETITEMS(&p);
    MARK(&p); /* BINPUT: not handed (the scan refuses it); replaces "old" */
    str(&p, "k2");
    op(&p, 0x8c);
    op(&p, 3);
    memcpy(p.b + p.n, "new", 3);
    p.n += 3;
    op(&p, 'q'); /* BINPUT */
    op(&p, (uint8_t)old);
    SETITEMS(&p);
    MARK(&p); /* handed: reads "new" */
    str(&p, "k3");
    binget(&p, old);
    SETITEMS(&p);
    SETITEMS(&p);
    STOP(&p);
    split_consumer c = run_case("put", &p, SPLIT_EVERY);
    cr_assert_eq(c.handed_bytes, 2);
    cr_assert_eq(c.run_failed, 0);
}

Test(pickle_split, errors_are_the_plain_decoders) {
    /* inside a handed batch: a GET of an index never stored */
    pkl p;
    begin_storage_data(&p);
    MARK(&p);
    str(&p, "k1");
    binget(&p, 200);
    SETITEMS(&p);
    SETITEMS(&p);
    STOP(&p);
    split_consumer c = run_case("error inside", &p, SPLIT_EVERY);
    cr_assert_eq(c.run_failed, 1);
    /* after handed batches: the input ends early, at every length past the first batch */
    pkl q;
    begin_storage_data(&q);
    for (int k = 0; k < 6; k++) {
        MARK(&q);
        char key[16];
        snprintf(key, sizeof key, "k%d", k);
        str(&q, key);
        int1(&q, (uint8_t)k);
        SETITEMS(&q);
    }
    SETITEMS(&q);
    STOP(&q);
    size_t full = q.n;
    size_t handed = 0;
    for (size_t cut = full - 30; cut < full; cut++) {
        q.n = cut;
        split_consumer t = run_case("truncated", &q, SPLIT_ALTERNATE);
        handed += t.handed_bytes;
    }
    cr_assert_gt(handed, 0);
}

/* Every byte of a torch-written `.metadata` flipped two ways: split or not, the same document
 * or the same error (hostile inputs through every path of the split). */
Test(pickle_split, bit_flips_decode_the_same_split_or_not, .timeout = 240) {
    char path[1024];
    snprintf(path, sizeof path, "%s/corrupt/base/ckpt/.metadata", getenv("CKPT_FIXTURES_ROOT"));
    size_t n;
    uint8_t *md = tu_read_file(path, &n);
    size_t handed = 0;
    for (size_t k = 0; k < n; k++) {
        for (int way = 0; way < 2; way++) {
            uint8_t saved = md[k];
            md[k] ^= way ? 0xFF : (uint8_t)(1u << (k % 8));
            char what[64];
            snprintf(what, sizeof what, "flip %d at %zu", way, k);
            split_consumer c;
            cr_assert(split_consumer_init(&c, (k + (size_t)way) % 2 ? SPLIT_EVERY : SPLIT_ALTERNATE,
                                          NULL));
            check_same(what, md, n, &c);
            handed += c.handed_bytes;
            split_consumer_fini(&c);
            md[k] = saved;
        }
    }
    cr_assert_gt(handed, n / 2);
    free(md);
}

/* A STOP inside a MARK region above the split dict, after a handed batch failed: the failure
 * still makes the decoder start over (found by review and by fuzz_pickle). */
Test(pickle_split, a_failed_batch_counts_whatever_follows) {
    static const uint8_t p[] = {0x80, 4,   0x8c, 3, 'l',  'b', 'l', '}', '(', 0x8c,
                                1,    'k', 0x8c, 1, 0xff, 'u', '(', 'N', '.'};
    split_consumer c;
    cr_assert(split_consumer_init(&c, SPLIT_EVERY, NULL));
    check_same("stop after a failed batch", p, sizeof p, &c);
    cr_assert_eq(c.run_failed, 1);
    split_consumer_fini(&c);
}

/* A handed batch may fetch a container made before it but not change it: the decoding
 * thread may be reading it (found by review: a race on its depth under ThreadSanitizer). */
Test(pickle_split, a_batch_may_not_change_what_it_fetched) {
    static const uint8_t p[] = {0x80, 4,   ']', 0x94, '0', 0x8c, 3,   'l', 'b',
                                'l',  '}', '(', 0x8c, 1,   'k',  'h', 0,   ']',
                                'a',  'u', '(', 'h',  0,   0x85, '.'};
    split_consumer c;
    cr_assert(split_consumer_init(&c, SPLIT_EVERY, NULL));
    check_same("a fetched list changed", p, sizeof p, &c);
    cr_assert_eq(c.handed_bytes, 1);
    cr_assert_eq(c.run_failed, 1, "the batch should have been refused");
    split_consumer_fini(&c);
}
