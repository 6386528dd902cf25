/* split_check.h — test harness for split decoding (pk_watch.split/hand, pk_batch_run), shared
 * by the unit tests and the fuzz_pickle target: a consumer that takes every batch (or every
 * other one) it is offered and runs it on a thread of its own, and a value-by-value
 * comparison of two decoded documents. */
#ifndef CK_TESTS_SPLIT_CHECK_H
#define CK_TESTS_SPLIT_CHECK_H

#include "pickle/pickle.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

enum { SPLIT_EVERY, SPLIT_ALTERNATE };

typedef struct split_consumer {
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
    /* counts (read after split_consumer_join) */
    size_t handed_bytes, handed_pairs, run_ok, run_failed, cancelled;
    char detail[1200]; /* split_check: the two outcomes, when they differ */
} split_consumer;

/* false when out of memory */
bool split_consumer_init(split_consumer *c, int policy, const char *only);
/* Waits for the thread: after running what is queued (drain) or cancelling it. */
void split_consumer_join(split_consumer *c, bool drain);
void split_consumer_fini(split_consumer *c);

/* Whether two documents hold the same values (cycles and shared values included). */
bool split_same_doc(const pk_value *a, const pk_value *b);

/* Decodes buf plainly and with c's watch: NULL when both give the same document or the same
 * error, else what differs (c->detail then holds both outcomes). */
const char *split_check(const uint8_t *buf, size_t len, const pk_limits *limits, split_consumer *c);

#endif
