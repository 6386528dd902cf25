/* test_pickle_split.c — split decoding (pk_watch.split/hand, pk_batch_run): a pickle decoded
 * with batches handed to another thread must give the very document (or the very error) the
 * plain decoder gives.  A test consumer hands batches over (every one, or every other one) and
 * runs them on its own thread; documents are compared value by value.  Inputs: every fixture's
 * `.metadata` (torch-written, hostile ones included), the pickle vectors, and hand-made
 * pickles aimed at each rule of the split (a batch referring to a container still on the
 * decoder's stack, a container changed after a batch referred to it, a GET into a batch still
 * being decoded elsewhere, a PUT replacing an entry a later batch reads, errors inside and
 * after handed batches). */
#include "test_util.h"
#include "pickle/pickle.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- test consumer */

enum { EVERY, ALTERNATE };
#define QCAP 65536

typedef struct consumer {
    pk_watch w;
    int policy;
    const char *only; /* label to split, or NULL for any */
    bool toggle;
    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pk_batch **q;
    size_t head, tail;
    bool stop, abort;
    /* counts (read after the join) */
    size_t handed_bytes, handed_pairs, run_ok, run_failed, cancelled;
} consumer;

static void *consumer_main(void *arg) {
    consumer *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (c->head == c->tail && !c->stop && !c->abort)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->abort || c->head == c->tail) break;
        pk_batch *b = c->q[c->head++ % QCAP];
        pthread_mutex_unlock(&c->mu);
        pk_value *const *kv;
        size_t n;
        if (pk_batch_run(b, &kv, &n) == CKPT_OK) {
            c->run_ok++;
            for (size_t i = 0; i < 2 * n; i++) /* the pairs are readable */
                cr_assert_not_null(kv[i]);
        } else {
            c->run_failed++;
        }
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static void consumer_join(consumer *c, bool drain) {
    if (!c->started) return;
    pthread_mutex_lock(&c->mu);
    if (drain)
        c->stop = true;
    else
        c->abort = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->th, NULL);
    c->started = false;
    while (c->head != c->tail) { /* not run: cancelled, in order */
        pk_batch_cancel(c->q[c->head++ % QCAP]);
        c->cancelled++;
    }
}

static bool c_take(void *ctx, const char *label, const pk_value *dict, size_t len,
                   pk_value *const *kv, size_t npairs) {
    (void)ctx, (void)label, (void)dict, (void)len, (void)kv, (void)npairs;
    return false;
}

static void c_revoke(void *ctx) { consumer_join(ctx, false); }

static bool c_split(void *ctx, const char *label, const pk_value *dict) {
    consumer *c = ctx;
    (void)dict;
    if (c->only && strcmp(label, c->only) != 0) return false;
    if (c->policy == ALTERNATE) return (c->toggle = !c->toggle);
    return true;
}

static bool c_hand(void *ctx, const char *label, const pk_value *dict, size_t len, pk_batch *b,
                   size_t npairs) {
    consumer *c = ctx;
    (void)label, (void)dict, (void)len, (void)npairs;
    if (c->tail - c->head == QCAP) return false;
    if (!c->started) {
        c->stop = c->abort = false;
        cr_assert_eq(pthread_create(&c->th, NULL, consumer_main, c), 0);
        c->started = true;
    }
    if (pk_batch_bytes(b))
        c->handed_bytes++;
    else
        c->handed_pairs++;
    pthread_mutex_lock(&c->mu);
    c->q[c->tail++ % QCAP] = b;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return true;
}

static void consumer_init(consumer *c, int policy, const char *only) {
    memset(c, 0, sizeof *c);
    c->policy = policy;
    c->only = only;
    c->q = calloc(QCAP, sizeof *c->q);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->w =
        (pk_watch){.take = c_take, .revoke = c_revoke, .ctx = c, .split = c_split, .hand = c_hand};
}

static void consumer_fini(consumer *c) {
    consumer_join(c, true);
    free(c->q);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
}

/* ---------------------------------------------------------------- document equality */

static bool same(const pk_value *a, const pk_value *b, int depth);

static bool same_opt(const pk_value *a, const pk_value *b, int depth) {
    return (!a && !b) || (a && b && same(a, b, depth));
}

/* the pairs being compared on the way down: meeting one again is a cycle, equal so far */
static const pk_value *path_a[800], *path_b[800];

static bool same_node(const pk_value *a, const pk_value *b, int depth);

static bool same(const pk_value *a, const pk_value *b, int depth) {
    if (a == b) return true;
    if (depth >= 800 || a->type != b->type) return false;
    for (int i = 0; i < depth; i++)
        if (path_a[i] == a && path_b[i] == b) return true;
    path_a[depth] = a;
    path_b[depth] = b;
    return same_node(a, b, depth);
}

static bool same_node(const pk_value *a, const pk_value *b, int depth) {
    switch ((pk_type)a->type) {
    case PK_NONE: return true;
    case PK_BOOL: return a->u.b == b->u.b;
    case PK_INT: return a->u.i == b->u.i;
    case PK_FLOAT: return memcmp(&a->u.f, &b->u.f, sizeof a->u.f) == 0;
    case PK_BIGINT:
    case PK_STR:
    case PK_BYTES:
        return a->u.str.len == b->u.str.len &&
               memcmp(a->u.str.ptr, b->u.str.ptr, a->u.str.len) == 0;
    case PK_TUPLE:
    case PK_LIST:
    case PK_SET:
    case PK_FROZENSET:
        if (a->u.seq.len != b->u.seq.len) return false;
        for (size_t i = 0; i < a->u.seq.len; i++)
            if (!same(a->u.seq.items[i], b->u.seq.items[i], depth + 1)) return false;
        return true;
    case PK_DICT:
        if (a->u.dict.len != b->u.dict.len) return false;
        for (size_t i = 0; i < a->u.dict.len; i++)
            if (!same(a->u.dict.keys[i], b->u.dict.keys[i], depth + 1) ||
                !same(a->u.dict.vals[i], b->u.dict.vals[i], depth + 1))
                return false;
        return true;
    case PK_GLOBAL:
        return strcmp(a->u.global.module, b->u.global.module) == 0 &&
               strcmp(a->u.global.name, b->u.global.name) == 0;
    case PK_OBJECT:
        return a->how == b->how && same(a->u.obj.cls, b->u.obj.cls, depth + 1) &&
               same(a->u.obj.args, b->u.obj.args, depth + 1) &&
               same_opt(a->u.obj.state, b->u.obj.state, depth + 1) &&
               same_opt(pk_obj_kwargs(a), pk_obj_kwargs(b), depth + 1) &&
               same_opt(pk_obj_listitems(a), pk_obj_listitems(b), depth + 1) &&
               same_opt(pk_obj_dictitems(a), pk_obj_dictitems(b), depth + 1);
    case PK_PERSID: return same(a->u.persid.pid, b->u.persid.pid, depth + 1);
    }
    return false;
}

/* Decodes buf plainly and with `c`; the documents (or the errors) must be the same. */
static void check_same(const char *what, const uint8_t *buf, size_t len, consumer *c) {
    pk_doc *plain = NULL, *split = NULL;
    ckpt_error e1 = {0}, e2 = {0};
    pk_input in = {.buf = buf, .len = len};
    ckpt_status s1 = pk_decode_watched(&in, NULL, NULL, &plain, &e1);
    ckpt_status s2 = pk_decode_watched(&in, NULL, &c->w, &split, &e2);
    consumer_join(c, true);
    cr_assert_eq(s1, s2, "%s: plain %d (%s), split %d (%s)", what, s1, e1.message, s2, e2.message);
    if (s1 != CKPT_OK) {
        cr_assert_str_eq(e1.message, e2.message, "%s", what);
    } else {
        cr_assert(same(pk_doc_root(plain), pk_doc_root(split), 0),
                  "%s: the split decode made another document", what);
    }
    pk_doc_free(plain);
    pk_doc_free(split);
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
        consumer c;
        consumer_init(&c, policy, only);
        check_same(path, buf, len, &c);
        *handed += c.handed_bytes;
        consumer_fini(&c);
        free(buf);
        files++;
    }
    closedir(d);
    return files;
}

Test(pickle_split, fixtures_decode_the_same_split_or_not) {
    const char *dirs[] = {getenv("CKPT_FIXTURES"), getenv("CKPT_PICKLE_VECTORS")};
    for (int policy = EVERY; policy <= ALTERNATE; policy++) {
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

/* Runs a hand-made pickle with policy, checks it against the plain decode and returns the
 * consumer's counts. */
static consumer run_case(const char *what, const pkl *p, int policy) {
    consumer c;
    consumer_init(&c, policy, "storage_data");
    check_same(what, p->b, p->n, &c);
    consumer out = c;
    consumer_fini(&c);
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
    consumer c = run_case("pinned", &p, EVERY);
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
        char key[8];
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
    for (int policy = EVERY; policy <= ALTERNATE; policy++) {
        consumer c = run_case("changed later", &p, policy);
        cr_assert_geq(c.handed_bytes, 2);
    }
}

Test(pickle_split, a_get_into_a_batch_being_decoded_waits_for_it) {
    pkl p;
    start(&p);
    op(&p, '}');
    memoize(&p);
    MARK(&p);
    str(&p, "storage_data");
    op(&p, '}');
    memoize(&p);
    MARK(&p); /* handed (ALTERNATE: the first one is) */
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
    consumer c = run_case("get into a batch", &p, ALTERNATE);
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
    consumer c = run_case("put", &p, EVERY);
    cr_assert_eq(c.handed_bytes, 2);
    cr_assert_eq(c.run_failed, 0);
}

Test(pickle_split, errors_are_the_plain_decoders) {
    /* inside a handed batch: a GET of an index never stored */
    pkl p;
    start(&p);
    op(&p, '}');
    memoize(&p);
    MARK(&p);
    str(&p, "storage_data");
    op(&p, '}');
    memoize(&p);
    MARK(&p);
    str(&p, "k1");
    binget(&p, 200);
    SETITEMS(&p);
    SETITEMS(&p);
    STOP(&p);
    consumer c = run_case("error inside", &p, EVERY);
    cr_assert_eq(c.run_failed, 1);
    /* after handed batches: the input ends early, at every length past the first batch */
    pkl q;
    start(&q);
    op(&q, '}');
    memoize(&q);
    MARK(&q);
    str(&q, "storage_data");
    op(&q, '}');
    memoize(&q);
    for (int k = 0; k < 6; k++) {
        MARK(&q);
        char key[8];
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
        consumer t = run_case("truncated", &q, ALTERNATE);
        handed += t.handed_bytes;
    }
    cr_assert_gt(handed, 0);
}

/* Every byte of a torch-written `.metadata` flipped two ways: split or not, the same document
 * or the same error (hostile inputs through every path of the split). */
Test(pickle_split, bit_flips_decode_the_same_split_or_not, .timeout = 240) {
    char path[1024];
    snprintf(path, sizeof path, "%s/corrupt/base/ckpt/.metadata", getenv("CKPT_FIXTURES"));
    size_t n;
    uint8_t *md = tu_read_file(path, &n);
    size_t handed = 0;
    for (size_t k = 0; k < n; k++) {
        for (int way = 0; way < 2; way++) {
            uint8_t saved = md[k];
            md[k] ^= way ? 0xFF : (uint8_t)(1u << (k % 8));
            char what[64];
            snprintf(what, sizeof what, "flip %d at %zu", way, k);
            consumer c;
            consumer_init(&c, (k + (size_t)way) % 2 ? EVERY : ALTERNATE, NULL);
            check_same(what, md, n, &c);
            handed += c.handed_bytes;
            consumer_fini(&c);
            md[k] = saved;
        }
    }
    cr_assert_gt(handed, n / 2);
    free(md);
}
