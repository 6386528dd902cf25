/* pool.c — the bounded pool of assembly buffers (scratch_pool in ckptfs.h). */
#include "ckptfs.h"

#include <stdlib.h>

int pool_init(scratch_pool *p, size_t n) {
    p->items = calloc(n, sizeof *p->items);
    p->busy = calloc(n, sizeof *p->busy);
    p->n = n;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->freed, NULL);
    return p->items && p->busy ? 0 : -1;
}

ckpt_tree_scratch *pool_get(scratch_pool *p) {
    pthread_mutex_lock(&p->lock);
    for (;;) {
        for (size_t i = 0; i < p->n; i++)
            if (!p->busy[i]) {
                p->busy[i] = true;
                pthread_mutex_unlock(&p->lock);
                return &p->items[i];
            }
        pthread_cond_wait(&p->freed, &p->lock);
    }
}

void pool_put(scratch_pool *p, ckpt_tree_scratch *s) {
    pthread_mutex_lock(&p->lock);
    p->busy[s - p->items] = false;
    pthread_cond_signal(&p->freed);
    pthread_mutex_unlock(&p->lock);
}

void pool_release(scratch_pool *p) {
    for (size_t i = 0; p->items && i < p->n; i++)
        ckpt_tree_scratch_release(&p->items[i]);
    free(p->items);
    free(p->busy);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->freed);
}
