/* seal.c — building a manifest (hashing every item in parallel) and verifying a checkpoint
 * against one. */
#include "manifest/manifest_i.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

ckpt_status ckpt_manifest_build(ckpt_reader *r, unsigned threads, ckpt_progress_fn progress,
                                void *ctx, ckpt_manifest **out, ckpt_error *err) {
    *out = NULL;
    manifest_item_list *items = malloc(sizeof *items);
    if (!items) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    ckpt_status s = manifest_items(r, items, err);
    ckpt_manifest *m = NULL;
    if (s == CKPT_OK) s = manifest_from_records(items->recs, items->n, &m, err); /* copies */
    manifest_items_release(items);
    free(items);
    CK_TRY(s);
    hash_job *jobs = calloc(m->n ? m->n : 1, sizeof *jobs);
    if (!jobs) {
        ckpt_manifest_free(m);
        return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < m->n; i++)
        jobs[i].rec = &m->recs[i];
    hash_jobs_run(ckpt_reader_dir(r), jobs, m->n, threads, progress, ctx);
    for (size_t i = 0; i < m->n && s == CKPT_OK; i++) {
        if (jobs[i].status != CKPT_OK) {
            if (err) *err = jobs[i].err;
            s = jobs[i].status;
        }
        m->recs[i].hash = jobs[i].actual;
    }
    free(jobs);
    if (s != CKPT_OK) {
        ckpt_manifest_free(m);
        return s;
    }
    *out = m;
    return CKPT_OK;
}

ckpt_status ckpt_manifest_verify(const char *dir, const ckpt_manifest *m, ckpt_reader *r,
                                 unsigned threads, ckpt_manifest_report_fn report,
                                 ckpt_progress_fn progress, void *ctx, uint64_t *failures,
                                 ckpt_error *err) {
    *failures = 0;
    if (r) { /* every item the metadata references must be sealed */
        manifest_item_list *l = malloc(sizeof *l);
        if (!l) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
        ckpt_status s = manifest_items(r, l, err);
        if (s != CKPT_OK) {
            free(l);
            return s;
        }
        for (size_t i = 0; i < l->n; i++) {
            const ckpt_manifest_record *it = &l->recs[i];
            const ckpt_manifest_record *rec = ckpt_manifest_find(m, it->file, it->offset);
            if (rec && rec->length >= it->length) continue;
            ckpt_error e = {0};
            ck_fail(&e, CKPT_E_CHECKSUM, "%s: offset %llu: %llu bytes not in the manifest",
                    it->file, (unsigned long long)it->offset, (unsigned long long)it->length);
            if (report) report(ctx, NULL, &e);
            (*failures)++;
        }
        manifest_items_release(l);
        free(l);
    }
    ckpt_manifest_record *recs = malloc((m->n ? m->n : 1) * sizeof *recs);
    hash_job *jobs = calloc(m->n ? m->n : 1, sizeof *jobs);
    if (!recs || !jobs) {
        free(recs);
        free(jobs);
        return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    }
    memcpy(recs, m->recs, m->n * sizeof *recs);
    for (size_t i = 0; i < m->n; i++)
        jobs[i].rec = &recs[i];
    hash_jobs_run(dir, jobs, m->n, threads, progress, ctx);
    for (size_t i = 0; i < m->n; i++) {
        ckpt_error e = jobs[i].err;
        if (jobs[i].status == CKPT_OK && jobs[i].actual == m->recs[i].hash) continue;
        if (jobs[i].status == CKPT_OK)
            ck_fail(&e, CKPT_E_CHECKSUM,
                    "%s: offset %llu: %llu bytes hash to %016llx, the manifest says %016llx",
                    m->recs[i].file, (unsigned long long)m->recs[i].offset,
                    (unsigned long long)m->recs[i].length, (unsigned long long)jobs[i].actual,
                    (unsigned long long)m->recs[i].hash);
        if (report) report(ctx, &m->recs[i], &e);
        (*failures)++;
    }
    free(recs);
    free(jobs);
    return *failures ? CKPT_E_CHECKSUM : CKPT_OK;
}
