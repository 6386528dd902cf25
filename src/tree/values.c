/* values.c — the rendered texts of non-tensor values: rendered on first use, kept within
 * the tree's budget (ckpt_tree_options.value_cache), the least recently used dropped past
 * it and rendered again when next read.  The budget bounds one total: texts kept, texts
 * dropped while a reader still copies from them, and the renders in flight (tree_i.h,
 * tree_values).  A text is shared by reference, so a reader copying from it never sees it
 * freed by another thread dropping it; the size (what stat shows) and an over-budget error
 * stay known without the text.  A reader holds a text only while it copies one request's
 * bytes, never across calls, so a render waiting for room always gets it. */
#include "tree/tree_i.h"
#include "util/error.h"
#include "value/value_i.h"

#include <stdlib.h>
#include <string.h>

void tree_values_init(tree_values *v, uint64_t budget) {
    memset(v, 0, sizeof *v);
    pthread_mutex_init(&v->lock, NULL);
    pthread_cond_init(&v->cond, NULL);
    v->budget = budget ? budget : TREE_VALUES_DEFAULT;
}

static void text_free(tree_text *t) {
    free(t->data);
    free(t);
}

static uint64_t in_use(const tree_values *v) { return v->kept + v->held + v->reserved; }

static void note_peak(tree_values *v) {
    if (in_use(v) > v->peak) v->peak = in_use(v);
}

/* Unlinks a kept text and gives back the cache's reference (under v->lock). */
static void drop(tree_values *v, tree_text *t) {
    if (t->prev)
        t->prev->next = t->next;
    else
        v->mru = t->next;
    if (t->next)
        t->next->prev = t->prev;
    else
        v->lru = t->prev;
    t->owner->text = NULL;
    t->owner = NULL;
    t->prev = t->next = NULL;
    v->kept -= t->len;
    v->drops++;
    if (--t->refs == 0) {
        text_free(t);
    } else { /* a reader still copies from it: counted until its tree_value_put */
        t->orphan = true;
        v->held += t->len;
    }
}

static void push_front(tree_values *v, tree_text *t) {
    t->prev = NULL;
    t->next = v->mru;
    if (v->mru)
        v->mru->prev = t;
    else
        v->lru = t;
    v->mru = t;
}

void tree_values_destroy(tree_values *v) {
    pthread_mutex_lock(&v->lock);
    while (v->lru)
        drop(v, v->lru);
    pthread_mutex_unlock(&v->lock);
    pthread_mutex_destroy(&v->lock);
    pthread_cond_destroy(&v->cond);
}

void tree_values_forget(tree_ckpt *c) {
    tree_values *v = c->values;
    if (!v || !c->objects || !c->r) return;
    size_t n = ckpt_reader_num_entries(c->r);
    pthread_mutex_lock(&v->lock);
    for (size_t i = 0; i < n; i++)
        if (c->objects[i].text) drop(v, c->objects[i].text);
    pthread_mutex_unlock(&v->lock);
}

static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

/* A text of unknown length is reserved as the render budget allows (and its newline). */
#define TEXT_UNKNOWN ((uint64_t)CK_VALUE_RENDER_MAX + 2)

/* The text's part of a render's reservation: the length an earlier render found, else
 * TEXT_UNKNOWN. */
static uint64_t text_reservation(const object_text *ot) {
    uint64_t known = atomic_load_explicit(&ot->size, memory_order_acquire);
    return known ? known : TEXT_UNKNOWN;
}

/* The most memory one decode gets beside `text` bytes of text: what the budget leaves, at
 * least TREE_DECODE_MIN (a small budget still decodes what it renders; such a render runs
 * alone). */
static uint64_t cap_beside(const tree_values *v, uint64_t text) {
    uint64_t cap = v->budget > text ? v->budget - text : 0;
    return cap > TREE_DECODE_MIN ? cap : TREE_DECODE_MIN;
}

static uint64_t decode_cap(const tree_values *v, const object_text *ot) {
    return cap_beside(v, text_reservation(ot));
}

/* Under v->lock: drops least recently used texts until `need` more fits beside what is kept,
 * held and reserved; whether it fits, or nothing else is in flight (one larger than the
 * budget alone then runs). */
static bool make_room(tree_values *v, uint64_t need) {
    while (v->lru && sat_add(in_use(v), need) > v->budget)
        drop(v, v->lru);
    return sat_add(in_use(v), need) <= v->budget || (!v->held && !v->reserved);
}

/* The memory budget of e's decode: at first what its last render succeeded with, else twice
 * the stored pickle (the bytes read, the values made from them) and some slack, within the
 * cap; `retry` (the first one needed more): the cap. */
static uint64_t decode_budget(const tree_values *v, const ckpt_entry *e, const object_text *ot,
                              bool retry) {
    uint64_t cap = decode_cap(v, ot);
    if (retry) return cap;
    uint64_t d = atomic_load_explicit(&ot->decode, memory_order_acquire);
    if (!d) {
        ckpt_chunk_info ci;
        uint64_t stored = ckpt_entry_chunk(e, 0, &ci) == CKPT_OK ? ci.length : 0;
        d = sat_add(sat_add(stored, stored), TREE_DECODE_SLACK);
    }
    return d < cap ? d : cap;
}

/* Keeps a CKPT_E_LIMIT failure (bounded work, once: every later use reports it). */
static void keep_limit(const ckpt_entry *e, object_text *ot, ckpt_error *err) {
    ck_error_prefix(err, "value '%s': ", ckpt_entry_key(e));
    char *msg = strdup(err ? err->message : "value too large to render");
    char *expected = NULL;
    if (msg && !atomic_compare_exchange_strong(&ot->limit_error, &expected, msg)) free(msg);
}

/* Renders e's text with its final newline, its decode within `decode` bytes (a failure over
 * the render budget, or over the most any decode gets, is kept).  *again: the decode needed
 * more than `decode`, less than the cap: worth one more try with the cap. */
static tree_text *render(tree_ckpt *c, const ckpt_entry *e, object_text *ot, uint64_t decode,
                         uint64_t cap, bool *again, ckpt_error *err) {
    *again = false;
    if (tree_verify_item(c, &e->loc, err) != CKPT_OK) return NULL;
    ckpt_object *obj = NULL;
    ckpt_object_options oo = {.max_memory = decode};
    ckpt_status st = ckpt_object_load_with(c->r, e, &oo, &obj, err);
    if (st == CKPT_E_LIMIT && decode < cap) {
        *again = true;
        return NULL;
    }
    if (st == CKPT_E_LIMIT) {
        ck_error_suffix(err, "; the value cache (value_cache) is %llu bytes",
                        (unsigned long long)c->values->budget);
        keep_limit(e, ot, err);
        return NULL;
    }
    if (st != CKPT_OK) return NULL;
    char *s = NULL;
    st = ckpt_value_to_text(ckpt_object_root(obj), &s, err);
    ckpt_object_free(obj);
    if (st == CKPT_E_LIMIT) {
        keep_limit(e, ot, err);
        return NULL;
    }
    if (st != CKPT_OK) return NULL;
    atomic_store_explicit(&ot->decode, decode, memory_order_release);
    size_t n = strlen(s);
    char *withnl = realloc(s, n + 2);
    tree_text *t = withnl ? calloc(1, sizeof *t) : NULL;
    if (!t) {
        free(withnl ? withnl : s);
        ck_fail(err, CKPT_E_NOMEM, "out of memory");
        return NULL;
    }
    withnl[n] = '\n';
    withnl[n + 1] = '\0';
    t->data = withnl;
    t->len = n + 1;
    return t;
}

const tree_text *tree_value_get(tree_ckpt *c, const ckpt_entry *e, ckpt_error *err) {
    tree_values *v = c->values;
    object_text *ot = &c->objects[ckpt_entry_index(e)];
    bool retry = false;
    pthread_mutex_lock(&v->lock);
    for (;;) {
        uint64_t need = 0, decode = 0, cap = 0;
        for (;;) {
            tree_text *t = ot->text;
            if (t) {
                t->refs++;
                if (t != v->mru) {
                    if (t->prev) t->prev->next = t->next;
                    if (t->next)
                        t->next->prev = t->prev;
                    else
                        v->lru = t->prev;
                    push_front(v, t);
                }
                pthread_mutex_unlock(&v->lock);
                return t;
            }
            const char *limit = atomic_load_explicit(&ot->limit_error, memory_order_acquire);
            if (limit) {
                pthread_mutex_unlock(&v->lock);
                ck_fail(err, CKPT_E_LIMIT, "%s", limit);
                return NULL;
            }
            /* one render per object at a time, a few at once in all, and each only once what
             * it may take (its text and its decode's budget) fits in the budget beside what is
             * kept, held and rendering (the least recently used texts dropped to make room);
             * one too large for the budget alone waits until nothing else is in flight */
            if (!ot->rendering && v->rendering < TREE_VALUES_RENDERS) {
                cap = decode_cap(v, ot);
                decode = decode_budget(v, e, ot, retry);
                need = sat_add(text_reservation(ot), decode);
                if (make_room(v, need)) break;
            }
            v->waits++;
            pthread_cond_wait(&v->cond, &v->lock);
        }
        ot->rendering = true;
        v->rendering++;
        v->renders++;
        v->reserved = sat_add(v->reserved, need);
        note_peak(v);
        pthread_mutex_unlock(&v->lock);

        bool again = false;
        tree_text *t = render(c, e, ot, decode, cap, &again, err);

        pthread_mutex_lock(&v->lock);
        ot->rendering = false;
        v->rendering--;
        v->reserved -= need;
        pthread_cond_broadcast(&v->cond);
        if (again && !retry) { /* once more, with the most a decode gets (others too) */
            atomic_store_explicit(&ot->decode, cap, memory_order_release);
            retry = true;
            v->retries++;
            continue;
        }
        if (t) {
            atomic_store_explicit(&ot->size, t->len + 1, memory_order_release);
            t->refs = 2; /* the cache's, the caller's */
            t->owner = ot;
            ot->text = t;
            push_front(v, t);
            v->kept += t->len;
            note_peak(v);
            while (in_use(v) > v->budget && v->lru)
                drop(v, v->lru); /* this one too when it alone is over: the caller still holds it */
        }
        pthread_mutex_unlock(&v->lock);
        return t;
    }
}

uint64_t tree_values_reserve_decode(tree_values *v) {
    uint64_t n = cap_beside(v, TEXT_UNKNOWN);
    pthread_mutex_lock(&v->lock);
    while (!make_room(v, n)) {
        v->waits++;
        pthread_cond_wait(&v->cond, &v->lock);
    }
    v->reserved = sat_add(v->reserved, n);
    note_peak(v);
    pthread_mutex_unlock(&v->lock);
    return n;
}

void tree_values_unreserve(tree_values *v, uint64_t n) {
    pthread_mutex_lock(&v->lock);
    v->reserved -= n;
    pthread_cond_broadcast(&v->cond);
    pthread_mutex_unlock(&v->lock);
}

void tree_value_put(tree_ckpt *c, const tree_text *ct) {
    if (!ct) return;
    tree_values *v = c->values;
    tree_text *t = (tree_text *)ct;
    pthread_mutex_lock(&v->lock);
    bool last = --t->refs == 0;
    if (last && t->orphan) {
        v->held -= t->len;
        pthread_cond_broadcast(&v->cond); /* room for a waiting render */
    }
    pthread_mutex_unlock(&v->lock);
    if (last) text_free(t);
}

ckpt_status tree_value_size(tree_ckpt *c, const ckpt_entry *e, uint64_t *size, ckpt_error *err) {
    object_text *ot = &c->objects[ckpt_entry_index(e)];
    uint64_t known = atomic_load_explicit(&ot->size, memory_order_acquire);
    if (!known) {
        const tree_text *t = tree_value_get(c, e, err);
        if (!t) return err ? err->code : CKPT_E_IO;
        known = t->len + 1;
        tree_value_put(c, t);
    }
    *size = known - 1;
    return CKPT_OK;
}
