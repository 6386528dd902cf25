/* save_mpi.c — the collective saver's calls (ckpt_save_mpi.h): begin (rank 0 creates the
 * staging directory and broadcasts it, every rank opens its data file), deferred adds, flush
 * (replica plan + writes), commit (descriptions gathered to rank 0, decoded as untrusted,
 * `.metadata` last, rename, `latest`, retention) with error agreement after every phase. */
#include "save_mpi/save_mpi_i.h"

#include "util/error.h"

#include <stdlib.h>
#include <string.h>

static ckpt_status sticky(const ckpt_save_mpi *s, ckpt_error *err) {
    if (err) *err = s->ferr;
    return s->failed;
}

/* Entry of a collective call: an agreed failure is returned at once on every rank; a local
 * one (a failed add) is agreed on first. */
static ckpt_status enter(ckpt_save_mpi *s, ckpt_error *err) {
    if (s->agreed) return sticky(s, err);
    if (s->committed) {
        ckpt_status st = ck_fail(err, CKPT_E_INVAL, "already committed");
        return st;
    }
    ckpt_error e = s->ferr;
    ckpt_status st = smpi_agree(s, s->failed, &e);
    if (err && st != CKPT_OK) *err = e;
    return st;
}

ckpt_status ckpt_save_mpi_begin(MPI_Comm comm, const char *dir, const ckpt_save_options *opts,
                                const ckpt_save_mpi_options *mopts, ckpt_save_mpi **out,
                                ckpt_error *err) {
    *out = NULL;
    ckpt_save_mpi *s = calloc(1, sizeof *s);
    if (!s) MPI_Abort(comm, 1); /* cannot take part in the collective calls: end the job */
    s->t0 = smpi_now();
    MPI_Comm_dup(comm, &s->comm);
    MPI_Comm_rank(s->comm, &s->rank);
    MPI_Comm_size(s->comm, &s->size);
    if (opts) s->opts = *opts;
    s->opts.checkpoint_id = NULL; /* only the transaction (rank 0) keeps it, copied */
    if (mopts) s->mopts = *mopts;
    ckpt_status st = CKPT_OK;
    ckpt_error e = {0};
    uint64_t len = 0;
    if (s->rank == 0) {
        st = ckpt_save_begin(dir, opts, &s->txn, &e);
        if (st == CKPT_OK && !(s->dir = strdup(dir)))
            st = ck_fail(&e, CKPT_E_NOMEM, "out of memory");
        if (st == CKPT_OK) len = strlen(ckpt_save_txn_staging_dir(s->txn)) + 1;
    }
    st = smpi_agree(s, st, &e);
    char *staging = NULL;
    if (st == CKPT_OK) {
        MPI_Bcast(&len, 1, MPI_UINT64_T, 0, s->comm);
        staging = s->rank == 0 ? strdup(ckpt_save_txn_staging_dir(s->txn)) : malloc(len);
        if (staging)
            MPI_Bcast(staging, (int)len, MPI_CHAR, 0, s->comm);
        else
            MPI_Abort(s->comm, 1); /* cannot take part in the broadcast: end the job */
        st = ckpt_save_file_open(staging, (uint32_t)s->rank, &s->opts, &s->file, &e);
        st = smpi_agree(s, st, &e);
    }
    free(staging);
    if (st != CKPT_OK) {
        if (err) *err = e;
        ckpt_save_mpi_free(s); /* rank 0 removes the staging directory */
        return st;
    }
    *out = s;
    return CKPT_OK;
}

static smpi_piece *push(ckpt_save_mpi *s) {
    if (s->npending == s->cap) {
        size_t nc = s->cap ? 2 * s->cap : 64;
        smpi_piece *t = realloc(s->pending, nc * sizeof *t);
        if (!t) return NULL;
        s->pending = t, s->cap = nc;
    }
    smpi_piece *p = &s->pending[s->npending++];
    memset(p, 0, sizeof *p);
    return p;
}

/* Takes back the piece just pushed (its key and dims freed). */
static void drop_last(ckpt_save_mpi *s, smpi_piece *p) {
    save_item_release(&p->id);
    s->npending--;
}

/* While *st is CKPT_OK: a new pending piece with `key` resolved into it; NULL with the failure
 * in *st / *e (nothing left pending) otherwise. */
static smpi_piece *push_keyed(ckpt_save_mpi *s, const ckpt_save_key *key, ckpt_status *st,
                              ckpt_error *e) {
    if (*st != CKPT_OK) return NULL;
    smpi_piece *p = push(s);
    if (!p) {
        *st = ck_fail(e, CKPT_E_NOMEM, "out of memory");
        return NULL;
    }
    *st = save_key_resolve(key, &p->id, e);
    if (*st != CKPT_OK) {
        drop_last(s, p);
        return NULL;
    }
    return p;
}

static ckpt_status local_fail(ckpt_save_mpi *s, ckpt_status st, const ckpt_error *e,
                              ckpt_error *err) {
    if (s->failed == CKPT_OK) {
        s->failed = st;
        s->ferr = *e;
    }
    if (err) *err = *e;
    return st;
}

ckpt_status ckpt_save_mpi_add_tensor(ckpt_save_mpi *s, const ckpt_save_key *key,
                                     const ckpt_save_tensor *t, ckpt_error *err) {
    if (s->failed) return sticky(s, err);
    if (s->committed) return ck_fail(err, CKPT_E_INVAL, "already committed");
    ckpt_error e = {0};
    ckpt_status st = CKPT_OK;
    if (!t)
        st = ck_fail(&e, CKPT_E_INVAL, "no tensor");
    else if (!ckpt_dtype_itemsize(t->dtype))
        st = ck_fail(&e, CKPT_E_INVAL, "invalid dtype %d", (int)t->dtype);
    else if (t->ndim < 0 || t->ndim > CKPT_MAX_NDIM || (t->ndim && !t->global_shape))
        st = ck_fail(&e, CKPT_E_INVAL, "invalid ndim %d or missing shape", t->ndim);
    else
        st = save_memory_check(t->memory, &e);
    smpi_piece *p = push_keyed(s, key, &st, &e);
    int nd = t ? t->ndim : 0;
    if (st == CKPT_OK && nd && !(p->id.dims = malloc(3 * (size_t)nd * sizeof *p->id.dims))) {
        drop_last(s, p);
        st = ck_fail(&e, CKPT_E_NOMEM, "out of memory");
    }
    if (st != CKPT_OK) return local_fail(s, st, &e, err);
    p->id.kind = SAVE_ITEM_TENSOR;
    p->id.dtype = t->dtype;
    p->id.ndim = nd;
    for (int d = 0; d < nd; d++) {
        p->id.dims[d] = t->global_shape[d];
        p->id.dims[nd + d] = t->offsets ? t->offsets[d] : 0;
        p->id.dims[2 * nd + d] = t->sizes ? t->sizes[d] : t->global_shape[d];
    }
    p->data = t->data;
    p->data_size = t->data_size;
    p->memory = t->memory;
    s->stats.bytes_added += t->data_size;
    return CKPT_OK;
}

ckpt_status ckpt_save_mpi_add_value(ckpt_save_mpi *s, const ckpt_save_key *key, ckpt_save_value *v,
                                    ckpt_error *err) {
    if (s->failed || s->committed) {
        ckpt_save_value_free(v);
        return s->failed ? sticky(s, err) : ck_fail(err, CKPT_E_INVAL, "already committed");
    }
    ckpt_error e = {0};
    ckpt_status st = v ? CKPT_OK : ck_fail(&e, CKPT_E_NOMEM, "out of memory");
    smpi_piece *p = push_keyed(s, key, &st, &e);
    if (st != CKPT_OK) {
        ckpt_save_value_free(v);
        return local_fail(s, st, &e, err);
    }
    p->id.kind = SAVE_ITEM_VALUE;
    p->value = v;
    return CKPT_OK;
}

ckpt_status ckpt_save_mpi_add_value_archive(ckpt_save_mpi *s, const ckpt_save_key *key,
                                            const void *archive, size_t len, ckpt_error *err) {
    if (s->failed) return sticky(s, err);
    if (s->committed) return ck_fail(err, CKPT_E_INVAL, "already committed");
    ckpt_error e = {0};
    ckpt_status st = CKPT_OK;
    void *copy = malloc(len ? len : 1);
    if (!copy) st = ck_fail(&e, CKPT_E_NOMEM, "out of memory");
    smpi_piece *p = push_keyed(s, key, &st, &e);
    if (st != CKPT_OK) {
        free(copy);
        return local_fail(s, st, &e, err);
    }
    if (len) memcpy(copy, archive, len);
    p->id.kind = SAVE_ITEM_VALUE;
    p->archive = copy;
    p->archive_len = len;
    return CKPT_OK;
}

static void drop_pending(ckpt_save_mpi *s) {
    for (size_t i = 0; i < s->npending; i++) {
        save_item_release(&s->pending[i].id);
        ckpt_save_value_free(s->pending[i].value);
        free(s->pending[i].archive);
    }
    s->npending = 0;
}

/* Writes this rank's pending pieces, the replicas as records only. */
static ckpt_status write_pending(ckpt_save_mpi *s, const bool *writer, ckpt_error *err) {
    uint64_t total = 0, done = 0;
    for (size_t i = 0; i < s->npending; i++)
        if (writer[i]) total += s->pending[i].data_size;
    ckpt_save_elem elems[64], *big = NULL;
    ckpt_status st = CKPT_OK;
    for (size_t i = 0; st == CKPT_OK && i < s->npending; i++) {
        const smpi_piece *p = &s->pending[i];
        ckpt_save_elem *el = elems;
        if (p->id.npath > sizeof elems / sizeof *elems) {
            free(big);
            if (!(big = malloc(p->id.npath * sizeof *big))) {
                st = ck_fail(err, CKPT_E_NOMEM, "out of memory");
                break;
            }
            el = big;
        }
        for (size_t k = 0; k < p->id.npath; k++)
            el[k] = (ckpt_save_elem){p->id.path[k].name, p->id.path[k].index};
        ckpt_save_key key = {.flat = p->id.key, .elems = el, .nelems = p->id.npath};
        uint32_t replica = writer[i] ? 0 : 1;
        if (p->id.kind == SAVE_ITEM_VALUE) {
            st = p->archive ? ckpt_save_file_add_value_archive(s->file, &key, p->archive,
                                                               p->archive_len, replica, err)
                            : ckpt_save_file_add_value(s->file, &key, p->value, replica, err);
            continue;
        }
        int nd = p->id.ndim;
        ckpt_save_tensor t = {.dtype = p->id.dtype,
                              .ndim = nd,
                              .global_shape = nd ? p->id.dims : NULL,
                              .offsets = nd ? p->id.dims + nd : NULL,
                              .sizes = nd ? p->id.dims + 2 * nd : NULL,
                              .data = p->data,
                              .data_size = p->data_size,
                              .replica_id = replica,
                              .memory = p->memory};
        st = ckpt_save_file_add_tensor(s->file, &key, &t, err);
        if (st == CKPT_OK && writer[i]) {
            done += p->data_size;
            s->stats.bytes_stored += p->data_size;
            if (s->mopts.progress) s->mopts.progress(s->mopts.progress_ctx, done, total);
        }
    }
    free(big);
    return st;
}

ckpt_status ckpt_save_mpi_flush(ckpt_save_mpi *s, ckpt_error *err) {
    CK_TRY(enter(s, err));
    double t = smpi_now();
    ckpt_error e = {0};
    bool *writer = calloc(s->npending ? s->npending : 1, sizeof *writer);
    int ok = writer != NULL, allok = 0;
    MPI_Allreduce(&ok, &allok, 1, MPI_INT, MPI_MIN, s->comm);
    ckpt_status st = CKPT_OK;
    if (!allok)
        st = writer ? ck_fail(&e, CKPT_E_NOMEM, "another rank ran out of memory")
                    : ck_fail(&e, CKPT_E_NOMEM, "out of memory");
    else
        st = smpi_plan_writers(s, writer, &e);
    if (st == CKPT_OK) st = write_pending(s, writer, &e);
    free(writer);
    drop_pending(s);
    s->stats.bytes_device = save_file_bytes_device(s->file);
    s->stats.seconds_write += smpi_now() - t;
    st = smpi_agree(s, st, &e);
    if (err && st != CKPT_OK) *err = e;
    return st;
}

/* Splits "a/b/step-1/" into the parent ("a/b", "." or "/") and the name ("step-1"), both
 * malloc'ed; false on NOMEM (nothing to free then). */
static bool split_parent(const char *dir, char **parent, char **name) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    const char *slash = memrchr(dir, '/', n);
    const char *base = slash ? slash + 1 : dir;
    *name = strndup(base, n - (size_t)(base - dir));
    *parent = !slash         ? strdup(".")
              : slash == dir ? strdup("/")
                             : strndup(dir, (size_t)(slash - dir));
    if (*name && *parent) return true;
    free(*name);
    free(*parent);
    return false;
}

/* Rank 0: decodes the gathered descriptions, commits, sets latest, applies retention. */
static ckpt_status commit_root(ckpt_save_mpi *s, const unsigned char *all, const int *counts,
                               const int *displs, ckpt_error *err) {
    ckpt_save_desc **descs = calloc((size_t)s->size, sizeof *descs);
    if (!descs) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    ckpt_status st = CKPT_OK;
    for (int r = 0; st == CKPT_OK && r < s->size; r++) {
        st = ckpt_save_desc_decode(all + displs[r], (size_t)counts[r], &descs[r], err);
        if (st != CKPT_OK)
            ck_error_prefix(err, "description of rank %d: ", r);
        else if (ckpt_save_desc_rank(descs[r]) != (uint32_t)r)
            st = ck_fail(err, CKPT_E_FORMAT, "description of rank %d names rank %u", r,
                         ckpt_save_desc_rank(descs[r]));
    }
    double t = smpi_now();
    if (st == CKPT_OK)
        st = ckpt_save_commit(s->txn, (const ckpt_save_desc *const *)descs, (size_t)s->size, err);
    for (int r = 0; r < s->size; r++)
        ckpt_save_desc_free(descs[r]);
    free(descs);
    if (st == CKPT_OK && (s->mopts.set_latest || s->mopts.keep)) {
        char *parent = NULL, *name = NULL;
        if (!split_parent(s->dir, &parent, &name)) st = ck_fail(err, CKPT_E_NOMEM, "out of memory");
        if (st == CKPT_OK && s->mopts.set_latest)
            st = ckpt_save_set_latest(parent, name, &s->opts, err);
        if (st == CKPT_OK && s->mopts.keep)
            st = ckpt_save_retain(parent, s->mopts.keep, name, NULL, err);
        free(parent);
        free(name);
    }
    s->stats.seconds_commit = smpi_now() - t;
    return st;
}

ckpt_status ckpt_save_mpi_commit(ckpt_save_mpi *s, ckpt_error *err) {
    CK_TRY(ckpt_save_mpi_flush(s, err));
    double t = smpi_now();
    ckpt_error e = {0};
    ckpt_save_desc *d = NULL;
    void *buf = NULL;
    size_t len = 0;
    ckpt_status st = ckpt_save_file_finish(s->file, &d, &e);
    if (st == CKPT_OK) st = ckpt_save_desc_encode(d, &buf, &len, &e);
    for (size_t i = 0; d && i < d->n; i++)
        if (d->items[i].stored && d->items[i].offset + d->items[i].length > s->stats.file_bytes)
            s->stats.file_bytes = d->items[i].offset + d->items[i].length;
    if (st == CKPT_OK && len > INT32_MAX)
        st = ck_fail(&e, CKPT_E_LIMIT, "description of %zu bytes is too large", len);
    ckpt_save_desc_free(d);
    s->stats.seconds_write += smpi_now() - t;
    st = smpi_agree(s, st, &e);
    if (st != CKPT_OK) {
        free(buf);
        if (err) *err = e;
        return st;
    }
    int mylen = (int)len, *counts = NULL, *displs = NULL;
    unsigned char *all = NULL;
    int ok = 1;
    if (s->rank == 0) {
        counts = calloc((size_t)s->size, sizeof *counts);
        displs = calloc((size_t)s->size, sizeof *displs);
        if (!counts || !displs) MPI_Abort(s->comm, 1); /* cannot receive the gather */
    }
    MPI_Gather(&mylen, 1, MPI_INT, counts, 1, MPI_INT, 0, s->comm);
    if (s->rank == 0 && ok) {
        int64_t total = 0;
        for (int r = 0; r < s->size; r++) {
            if (counts[r] < 0 || total > INT32_MAX - counts[r]) ok = 0;
            displs[r] = (int)total;
            total += counts[r];
        }
        if (ok) ok = (all = malloc(total ? (size_t)total : 1)) != NULL;
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, s->comm);
    if (ok) MPI_Gatherv(buf, mylen, MPI_BYTE, all, counts, displs, MPI_BYTE, 0, s->comm);
    free(buf);
    st = CKPT_OK;
    if (!ok)
        st = ck_fail(&e, CKPT_E_LIMIT, "descriptions over 2 GiB or out of memory");
    else if (s->rank == 0)
        st = commit_root(s, all, counts, displs, &e);
    free(all);
    free(counts);
    free(displs);
    st = smpi_agree(s, st, &e);
    /* over either way: on failure before the rename rank 0's free removes the staging
     * directory; a failure after it (latest, retention) leaves the published step */
    s->committed = true;
    s->stats.seconds_total = smpi_now() - s->t0;
    if (err && st != CKPT_OK) *err = e;
    return st;
}

void ckpt_save_mpi_get_stats(const ckpt_save_mpi *s, ckpt_save_mpi_stats *out) { *out = s->stats; }

void ckpt_save_mpi_free(ckpt_save_mpi *s) {
    if (!s) return;
    drop_pending(s);
    free(s->pending);
    ckpt_save_file_free(s->file);
    ckpt_save_txn_free(s->txn); /* removes the staging directory unless committed */
    free(s->dir);
    if (s->comm != MPI_COMM_NULL) MPI_Comm_free(&s->comm);
    free(s);
}
