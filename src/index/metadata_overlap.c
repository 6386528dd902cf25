/* metadata_overlap.c — the overlapped walk (see metadata_overlap.h).  The decoder calls
 * take() on its thread before every SETITEMS into a dict; the batches of the dicts stored
 * under "state_dict_metadata", "planner_data" and "storage_data" are copied to a queue that
 * one walker thread feeds to the steps of metadata_walk.h, in the order the sequential walk
 * takes them.  The walker also decodes some of those batches itself: the decoder hands a
 * batch over undecoded when split() says so (pk_watch.split: while the walker has fewer than
 * SPLIT_AHEAD to decode), and from then on every batch of that dict comes through hand(),
 * decoded or not, so the walker adds them to the dict in order (pk_batch_run) before walking
 * them.  Anything unexpected (another order, a dict not filled from empty, a changed
 * handed-over value: the decoder's revoke) drops the result, and the caller walks the
 * decoded document as usual, so the index never depends on which path made it. */
#include "index/metadata_overlap.h"

#include "index/metadata_walk.h"
#include "util/error.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

enum { PART_SDM = 0, PART_PLANNER, PART_STORAGE, NPARTS };
/* Handed batches the walker may have queued and not yet decoded: past that, the decoder
 * decodes the next batch itself.  Measured on 2 CPUs (1 M-chunk benchmark): 1 left the walker
 * idle part of the time, no bound made it fall behind; 2 to 6 were alike. */
#define SPLIT_AHEAD 3u
static const char *const part_key[NPARTS] = {"state_dict_metadata", "planner_data", "storage_data"};

typedef struct batch {
    struct batch *next;
    int part;
    size_t base;         /* index of its first pair in the dict */
    size_t n;            /* pairs */
    pk_batch *pb;        /* handed over (pk_watch.hand): run it first; else pairs in own */
    bool undecoded;      /* pb came as bytes */
    pk_value *const *kv; /* its pairs */
    pk_value *own[];
} batch;

struct ck_overlap {
    ckpt_reader *r;
    ck_walk *w;
    pk_watch watch;

    bool only_file; /* no metadata file follows: paths may be settled before the end */
    bool lockstep;  /* the decoder waits for each batch to be walked */

    /* decoder thread only */
    bool dropped;                 /* nothing more is taken: the result will be dropped */
    int part;                     /* last part taken, -1 before the first */
    const pk_value *dict[NPARTS]; /* the dict of each part, once taken from */
    size_t taken[NPARTS];         /* pairs taken of it */
    bool started, joined;
    pthread_t thread;

    /* shared, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* to the walker: a batch, done or abort */
    pthread_cond_t cv_back; /* to the decoder (lockstep): a batch walked */
    size_t queued, walked;  /* batches */
    batch *head, *tail;
    bool done;  /* decoding ended: drain the queue, then exit */
    bool abort; /* exit now */
    /* handed batches queued and not yet run (the decoder hands one more only below a
     * bound, so that both threads decode); lockstep alternates instead */
    _Atomic unsigned split_pending;
    bool split_toggle; /* decoder thread */
    bool split_failed; /* walker: a handed batch failed (the decoder will start over) */
    size_t split_run;  /* walker: handed batches it decoded */

    /* walker thread, read after the join */
    bool sdm_ended;
    bool paths_settled;
    ckpt_status st;
    ckpt_error err;
};

/* After the last state_dict_metadata batch (once): the walk's pass over repeated keys. */
static ckpt_status end_sdm(ck_overlap *o) {
    if (o->sdm_ended) return CKPT_OK;
    o->sdm_ended = true;
    return ck_walk_sdm_end(o->w, &o->err);
}

static void walk_batch(ck_overlap *o, batch *b) {
    ck_pairs p = {.k = b->kv, .v = b->kv + 1, .stride = 2, .n = b->n};
    if (b->part == PART_SDM) {
        o->st = ck_walk_sdm(o->w, p, b->base, 1, &o->err);
        return;
    }
    if ((o->st = end_sdm(o)) != CKPT_OK) return;
    if (b->part == PART_PLANNER) {
        o->st = ck_walk_planner(o->w, p, &o->err);
        return;
    }
    if (o->only_file && !o->paths_settled) {
        /* planner_data is walked: what index_finish would do first is done now, while
         * the decoder is still busy with storage_data */
        o->paths_settled = true;
        if ((o->st = index_paths(o->r, &o->err)) != CKPT_OK) return;
    }
    o->st = ck_walk_storage(o->w, p, &o->err);
}

static void *walker_main(void *arg) {
    ck_overlap *o = arg;
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (!o->head && !o->done && !o->abort)
            pthread_cond_wait(&o->cv, &o->mu);
        if (o->abort || !o->head) break;
        batch *b = o->head;
        o->head = b->next;
        if (!o->head) o->tail = NULL;
        pthread_mutex_unlock(&o->mu);
        if (b->pb) {
            /* run even after a failed walk: the document must be complete */
            size_t n;
            if (pk_batch_run(b->pb, &b->kv, &n) != CKPT_OK)
                o->split_failed = true;
            else if (b->undecoded)
                o->split_run++;
            if (b->undecoded) atomic_fetch_sub(&o->split_pending, 1);
        }
        if (o->st == CKPT_OK && !o->split_failed) walk_batch(o, b);
        free(b);
        pthread_mutex_lock(&o->mu);
        o->walked++;
        if (o->lockstep) pthread_cond_signal(&o->cv_back);
    }
    bool finish = !o->abort;
    pthread_mutex_unlock(&o->mu);
    if (finish && o->st == CKPT_OK) o->st = end_sdm(o);
    return NULL;
}

/* Stops the walker (now, or after the queue when `drain`) and waits for it. */
static void stop(ck_overlap *o, bool drain) {
    if (!o->started || o->joined) return;
    pthread_mutex_lock(&o->mu);
    if (drain)
        o->done = true;
    else
        o->abort = true;
    pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->mu);
    pthread_join(o->thread, NULL);
    o->joined = true;
    /* what the walker left: handed batches are cancelled (the decoder waits for each) */
    for (batch *b = o->head, *next; b; b = next) {
        next = b->next;
        if (b->pb) pk_batch_cancel(b->pb);
        free(b);
    }
    o->head = o->tail = NULL;
}

static void drop(ck_overlap *o) {
    o->dropped = true;
    stop(o, false);
}

/* Queues npairs pairs for `dict` labelled `label` (kv, or the handed batch pb); false, and
 * nothing kept, when they are not what the sequential walk would read next (then the
 * result is dropped) or not a part at all. */
static bool enqueue(ck_overlap *o, const char *label, const pk_value *dict, size_t len,
                    pk_value *const *kv, pk_batch *pb, size_t npairs) {
    if (o->dropped || !label) return false;
    int part = 0;
    while (part < NPARTS && strcmp(label, part_key[part]) != 0)
        part++;
    if (part == NPARTS) return false;
    /* the parts in the sequential walk's order, each dict filled from empty in batches */
    bool next_part = !o->dict[part] && part > o->part && len == 0;
    bool same_part = o->dict[part] == dict && part == o->part && len == o->taken[part];
    if (!next_part && !same_part) {
        drop(o);
        return false;
    }
    size_t own = pb ? 0 : 2 * npairs;
    batch *b = malloc(sizeof *b + own * sizeof *b->own);
    if (!b) {
        drop(o);
        return false;
    }
    b->next = NULL;
    b->part = part;
    b->base = len;
    b->n = npairs;
    b->pb = pb;
    b->undecoded = pb && pk_batch_bytes(pb) > 0;
    b->kv = b->own;
    if (kv && own) memcpy(b->own, kv, own * sizeof *kv);
    if (!o->started) {
        /* (the reader's arena is not mapped ahead: the walker, not the decoder, takes its
         * page faults; mapping ahead cost 64 MiB more peak memory and no time) */
        if (pthread_create(&o->thread, NULL, walker_main, o) != 0) {
            free(b);
            o->dropped = true;
            return false;
        }
        o->started = true;
    }
    o->dict[part] = dict;
    o->part = part;
    o->taken[part] += npairs;
    if (b->undecoded) atomic_fetch_add(&o->split_pending, 1);
    pthread_mutex_lock(&o->mu);
    if (o->tail)
        o->tail->next = b;
    else
        o->head = b;
    o->tail = b;
    o->queued++;
    pthread_cond_signal(&o->cv);
    while (o->lockstep && o->walked < o->queued)
        pthread_cond_wait(&o->cv_back, &o->mu);
    pthread_mutex_unlock(&o->mu);
    return true;
}

static bool take(void *ctx, const char *label, const pk_value *dict, size_t len,
                 pk_value *const *kv, size_t npairs) {
    return enqueue(ctx, label, dict, len, kv, NULL, npairs);
}

static bool hand(void *ctx, const char *label, const pk_value *dict, size_t len, pk_batch *pb,
                 size_t npairs) {
    return enqueue(ctx, label, dict, len, NULL, pb, npairs);
}

/* Whether the decoder should hand the next batch of `dict` over undecoded: batches of the
 * three parts after the first one (which holds the first uses of the classes and keys),
 * while the walker has fewer than SPLIT_AHEAD left to decode; every other one in lockstep
 * (tests), so that both kinds always occur. */
static bool split(void *ctx, const char *label, const pk_value *dict) {
    ck_overlap *o = ctx;
    (void)dict;
    if (o->dropped || !o->started) return false;
    int part = 0;
    while (part < NPARTS && strcmp(label, part_key[part]) != 0)
        part++;
    if (part == NPARTS) return false;
    if (o->lockstep) return (o->split_toggle = !o->split_toggle);
    return atomic_load(&o->split_pending) < SPLIT_AHEAD;
}

static void revoke(void *ctx) { drop(ctx); }

ck_overlap *ck_overlap_new(ckpt_reader *r, const char *file, bool only_file, bool lockstep) {
    ck_overlap *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    o->w = ck_walk_new(r, file);
    if (!o->w) {
        free(o);
        return NULL;
    }
    o->r = r;
    o->part = -1;
    o->lockstep = lockstep;
    o->only_file = only_file;
    o->watch = (pk_watch){.take = take, .revoke = revoke, .ctx = o, .split = split, .hand = hand};
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    pthread_cond_init(&o->cv_back, NULL);
    return o;
}

const pk_watch *ck_overlap_watch(ck_overlap *o) { return &o->watch; }

/* Whether the walk took exactly the dict the sequential walk would read for `part` (or,
 * when none was taken, one the sequential walk would find nothing in). */
static bool part_matches(const ck_overlap *o, const pk_value *root, int part) {
    const pk_value *v = pk_get(root, part_key[part]);
    if (o->dict[part]) return v == o->dict[part] && v->u.dict.len == o->taken[part];
    if (part == PART_SDM) return false;
    return !v || v->type == PK_NONE || (v->type == PK_DICT && v->u.dict.len == 0) ||
           (part == PART_PLANNER && v->type != PK_DICT);
}

ckpt_status ck_overlap_finish(ck_overlap *o, const pk_doc *doc, bool *complete, ckpt_error *err) {
    *complete = false;
    bool dropped = o->dropped || !doc;
    stop(o, !dropped);
    for (batch *b = o->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    ckpt_reader *r = o->r;
    const pk_value *root = doc ? pk_doc_root(doc) : NULL;
    bool ok = root && root->type == PK_OBJECT && o->started && !dropped && o->st == CKPT_OK &&
              !o->split_failed;
    for (int part = 0; ok && part < NPARTS; part++)
        ok = part_matches(o, root, part);
    ckpt_status st = CKPT_OK;
    if (ok) {
        ck_walk_note_root(r, root, pk_get(root, part_key[PART_SDM]));
        *complete = true;
        r->index_split_batches = o->split_run;
    } else if (o->started) {
        st = index_reset(r, err);
    }
    ck_walk_free(o->w);
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
    pthread_cond_destroy(&o->cv_back);
    free(o);
    return st;
}
