/* test_decoded_cache.c — decoded (zstd) chunks are kept in a bounded LRU: with a budget of a
 * single byte every read decodes again, from 4 threads at once, and every tensor of the zstd
 * fixture still equals torch's reference (whole and by rows, also through region plans). */
#include <criterion/criterion.h>

#include "fixture_ref.h"
#include "index/reader_i.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct job {
    ckpt_reader *r;
    const ref_fixture *fx;
    int seed;
    int bad;
} job;

static void *worker(void *arg) {
    job *j = arg;
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < j->fx->n; i++) {
            const ref_entry *re = &j->fx->entries[(i + (size_t)j->seed) % j->fx->n];
            if (re->kind != 'T' || !re->nbytes) continue;
            const ckpt_entry *e = ckpt_reader_find(j->r, re->key);
            if (!e) {
                j->bad++;
                continue;
            }
            uint8_t *buf = malloc(re->nbytes);
            ckpt_error err = {0};
            if (ckpt_read_tensor(j->r, e, buf, re->nbytes, &err) != CKPT_OK ||
                memcmp(buf, j->fx->bin + re->offset, re->nbytes) != 0)
                j->bad++;
            /* the same bytes through a plan of rows 1.. (decoded pieces) */
            if (re->ndim >= 1 && re->shape[0] > 1) {
                int64_t start[64] = {1}, count[64];
                memcpy(count, re->shape, sizeof(int64_t) * (size_t)re->ndim);
                count[0] -= 1;
                ckpt_plan *p = NULL;
                uint64_t row = re->nbytes / (uint64_t)re->shape[0];
                memset(buf, 0, re->nbytes);
                if (ckpt_plan_region(j->r, e, start, count, &p, &err) != CKPT_OK ||
                    ckpt_plan_execute(j->r, e, p, buf, re->nbytes, &err) != CKPT_OK ||
                    memcmp(buf, j->fx->bin + re->offset + row, re->nbytes - row) != 0)
                    j->bad++;
                ckpt_plan_free(p);
            }
            free(buf);
        }
    }
    return NULL;
}

Test(decoded_cache, tiny_budget_many_threads) {
    ref_fixture fx;
    cr_assert_eq(ref_load("zstd", &fx), 0);
    ckpt_limits lim = {.max_decoded_cache = 1};
    ckpt_open_options o = {.limits = &lim};
    ckpt_reader *r;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_reader_open(fx.ckpt_dir, &o, &r, &err), CKPT_OK, "%s", err.message);
    job jobs[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (job){r, &fx, i * 7, 0};
        cr_assert_eq(pthread_create(&t[i], NULL, worker, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(jobs[i].bad, 0, "thread %d: %d mismatches", i, jobs[i].bad);
    }
    /* nothing unpinned stays beyond the budget */
    cr_assert_leq(r->decoded_bytes, lim.max_decoded_cache);
    size_t decoded = 0;
    for (size_t i = 0; i < r->nentries; i++)
        for (size_t c = 0; c < r->entries[i].nchunks; c++)
            if (r->entries[i].chunks[c].res && r->entries[i].chunks[c].res->kind == CHUNK_IN_MEMORY)
                decoded++;
    cr_assert_gt(decoded, 0, "the zstd fixture must have decoded chunks");
    ckpt_reader_free(r);
    ref_free(&fx);
}

Test(decoded_cache, default_budget_keeps_them) {
    ref_fixture fx;
    cr_assert_eq(ref_load("zstd", &fx), 0);
    ckpt_reader *r;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_reader_open(fx.ckpt_dir, NULL, &r, &err), CKPT_OK, "%s", err.message);
    job j = {r, &fx, 0, 0};
    worker(&j);
    cr_assert_eq(j.bad, 0);
    cr_assert_gt(r->decoded_bytes, 0);
    ckpt_reader_free(r);
    ref_free(&fx);
}
