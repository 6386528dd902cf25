/* split_check.c — the split-decoding test harness (see split_check.h). */
#include "split_check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QCAP 65536

static void *consumer_main(void *arg) {
    split_consumer *c = arg;
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
                if (!kv[i] || kv[i]->type > PK_PERSID) abort();
        } else {
            c->run_failed++;
        }
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

void split_consumer_join(split_consumer *c, bool drain) {
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

static void c_revoke(void *ctx) { split_consumer_join(ctx, false); }

static bool c_split(void *ctx, const char *label, const pk_value *dict) {
    split_consumer *c = ctx;
    (void)dict;
    if (c->only && strcmp(label, c->only) != 0) return false;
    if (c->policy == SPLIT_ALTERNATE) return (c->toggle = !c->toggle);
    return true;
}

static bool c_hand(void *ctx, const char *label, const pk_value *dict, size_t len, pk_batch *b,
                   size_t npairs) {
    split_consumer *c = ctx;
    (void)label, (void)dict, (void)len, (void)npairs;
    if (c->tail - c->head == QCAP) return false;
    if (!c->started) {
        c->stop = c->abort = false;
        if (pthread_create(&c->th, NULL, consumer_main, c) != 0) return false;
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

bool split_consumer_init(split_consumer *c, int policy, const char *only) {
    memset(c, 0, sizeof *c);
    c->policy = policy;
    c->only = only;
    if (!(c->q = calloc(QCAP, sizeof *c->q))) return false;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->w =
        (pk_watch){.take = c_take, .revoke = c_revoke, .ctx = c, .split = c_split, .hand = c_hand};
    return true;
}

void split_consumer_fini(split_consumer *c) {
    split_consumer_join(c, true);
    free(c->q);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
}

/* ---------------------------------------------------------------- document equality */

#define MAX_DEPTH 800

/* The pairs being compared on the way down: meeting one again is a cycle, equal so far.  And
 * the pairs already found equal (open addressing, at most half full): memo references make a
 * DAG whose expansion as a tree is exponential (40 levels of a = [a, a]), compared once each. */
typedef struct cmp_path {
    const pk_value *a[MAX_DEPTH], *b[MAX_DEPTH];
    const pk_value **eq; /* pairs: eq[2i], eq[2i + 1] */
    size_t eq_cap, eq_len;
} cmp_path;

static size_t eq_slot(const cmp_path *p, const pk_value *a, const pk_value *b) {
    uint64_t h = ((uint64_t)(uintptr_t)a * 0x9E3779B97F4A7C15u) ^ (uint64_t)(uintptr_t)b;
    h ^= h >> 29;
    size_t i = (size_t)h & (p->eq_cap - 1);
    while (p->eq[2 * i] && (p->eq[2 * i] != a || p->eq[2 * i + 1] != b))
        i = (i + 1) & (p->eq_cap - 1);
    return i;
}

static bool eq_known(const cmp_path *p, const pk_value *a, const pk_value *b) {
    return p->eq_cap && p->eq[2 * eq_slot(p, a, b)] == a;
}

static void eq_add(cmp_path *p, const pk_value *a, const pk_value *b) {
    if ((p->eq_len + 1) * 2 > p->eq_cap) {
        cmp_path old = *p;
        p->eq_cap = p->eq_cap ? 2 * p->eq_cap : 1024;
        p->eq = calloc(2 * p->eq_cap, sizeof *p->eq);
        if (!p->eq) abort();
        p->eq_len = 0;
        for (size_t i = 0; i < old.eq_cap; i++)
            if (old.eq[2 * i]) eq_add(p, old.eq[2 * i], old.eq[2 * i + 1]);
        free(old.eq);
    }
    size_t i = eq_slot(p, a, b);
    if (p->eq[2 * i]) return;
    p->eq[2 * i] = a;
    p->eq[2 * i + 1] = b;
    p->eq_len++;
}

static bool same(cmp_path *p, const pk_value *a, const pk_value *b, int depth);

static bool same_opt(cmp_path *p, const pk_value *a, const pk_value *b, int depth) {
    return (!a && !b) || (a && b && same(p, a, b, depth));
}

static bool same_node(cmp_path *p, const pk_value *a, const pk_value *b, int d) {
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
            if (!same(p, a->u.seq.items[i], b->u.seq.items[i], d + 1)) return false;
        return true;
    case PK_DICT:
        if (a->u.dict.len != b->u.dict.len) return false;
        for (size_t i = 0; i < a->u.dict.len; i++)
            if (!same(p, a->u.dict.keys[i], b->u.dict.keys[i], d + 1) ||
                !same(p, a->u.dict.vals[i], b->u.dict.vals[i], d + 1))
                return false;
        return true;
    case PK_GLOBAL:
        return strcmp(a->u.global.module, b->u.global.module) == 0 &&
               strcmp(a->u.global.name, b->u.global.name) == 0;
    case PK_OBJECT:
        return a->how == b->how && same(p, a->u.obj.cls, b->u.obj.cls, d + 1) &&
               same(p, a->u.obj.args, b->u.obj.args, d + 1) &&
               same_opt(p, a->u.obj.state, b->u.obj.state, d + 1) &&
               same_opt(p, pk_obj_kwargs(a), pk_obj_kwargs(b), d + 1) &&
               same_opt(p, pk_obj_listitems(a), pk_obj_listitems(b), d + 1) &&
               same_opt(p, pk_obj_dictitems(a), pk_obj_dictitems(b), d + 1);
    case PK_PERSID: return same(p, a->u.persid.pid, b->u.persid.pid, d + 1);
    }
    return false;
}

static bool same(cmp_path *p, const pk_value *a, const pk_value *b, int depth) {
    if (a == b) return true;
    if (depth >= MAX_DEPTH || a->type != b->type) return false;
    for (int i = 0; i < depth; i++)
        if (p->a[i] == a && p->b[i] == b) return true;
    if (eq_known(p, a, b)) return true;
    p->a[depth] = a;
    p->b[depth] = b;
    if (!same_node(p, a, b, depth)) return false;
    eq_add(p, a, b);
    return true;
}

bool split_same_doc(const pk_value *a, const pk_value *b) {
    if (!a || !b) return a == b;
    cmp_path *p = calloc(1, sizeof *p);
    if (!p) abort();
    bool r = same(p, a, b, 0);
    free(p->eq);
    free(p);
    return r;
}

const char *split_check(const uint8_t *buf, size_t len, const pk_limits *limits,
                        split_consumer *c) {
    pk_doc *plain = NULL, *split = NULL;
    ckpt_error e1 = {0}, e2 = {0};
    pk_input in = {.buf = buf, .len = len};
    ckpt_status s1 = pk_decode_watched(&in, limits, NULL, &plain, &e1);
    ckpt_status s2 = pk_decode_watched(&in, limits, &c->w, &split, &e2);
    split_consumer_join(c, true);
    const char *why = NULL;
    if (s1 == CKPT_E_LIMIT && s2 == CKPT_OK) {
        /* documented (pk_batch_run): the limits are shared out and equal values are shared
         * within each thread only, so a pickle at a limit may decode split */
    } else if (s1 != s2)
        why = "the plain and the split decode end differently";
    else if (s1 != CKPT_OK && strcmp(e1.message, e2.message) != 0)
        why = "the plain and the split decode fail with different messages";
    else if (s1 == CKPT_OK && !split_same_doc(pk_doc_root(plain), pk_doc_root(split)))
        why = "the split decode made another document";
    if (why)
        snprintf(c->detail, sizeof c->detail, "plain: %d %.500s; split: %d %.500s", s1,
                 s1 ? e1.message : "ok", s2, s2 ? e2.message : "ok");
    pk_doc_free(plain);
    pk_doc_free(split);
    return why;
}
