/* load_overlap.c — the collective loader when one rank asks for the same bytes more than once:
 * every rank requests each key whole twice, the first half of its rows, and its own Shard(0)
 * slice, so that its pieces overlap (the plan's general sweep, not the merge of ordered
 * streams).  Every buffer must hold what the reader library reads alone, and each needed
 * stored byte must still be read once across the job.
 * Usage: mpirun -np M load_overlap CHECKPOINT_DIR KEY...  (prints "ok" on rank 0). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "ckpt_load_mpi.h"

enum { PER_KEY = 4 };

static int fail(int rank, const char *what, const ckpt_error *err) {
    fprintf(stderr, "rank %d: %s: %s\n", rank, what, err ? err->message : "");
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 3) return fail(rank, "usage: load_overlap CHECKPOINT_DIR KEY...", NULL);
    ckpt_error err = {0};
    ckpt_load *l = NULL;
    if (ckpt_load_open(MPI_COMM_WORLD, argv[1], NULL, &l, &err) != CKPT_OK)
        return fail(rank, "open", &err);
    ckpt_reader *r = ckpt_load_reader(l);
    int nkeys = argc - 2;
    unsigned char **buf = calloc((size_t)nkeys * PER_KEY, sizeof *buf);
    size_t *len = calloc((size_t)nkeys * PER_KEY, sizeof *len);
    int64_t(*start)[CKPT_MAX_NDIM] = calloc((size_t)nkeys * PER_KEY, sizeof *start);
    int64_t(*count)[CKPT_MAX_NDIM] = calloc((size_t)nkeys * PER_KEY, sizeof *count);
    const ckpt_entry **ents = calloc((size_t)nkeys, sizeof *ents);
    if (!buf || !len || !start || !count || !ents) return fail(rank, "out of memory", NULL);
    for (int k = 0; k < nkeys; k++) {
        const ckpt_entry *e = ents[k] = ckpt_reader_find(r, argv[k + 2]);
        if (!e || ckpt_entry_ndim(e) < 1) return fail(rank, argv[k + 2], NULL);
        int nd = ckpt_entry_ndim(e);
        const int64_t *shape = ckpt_entry_shape(e);
        uint64_t item = ckpt_entry_nbytes(e) / (ckpt_entry_numel(e) ? ckpt_entry_numel(e) : 1);
        for (int j = 0; j < PER_KEY; j++) {
            int64_t *st = start[k * PER_KEY + j], *ct = count[k * PER_KEY + j];
            memcpy(ct, shape, (size_t)nd * sizeof *ct);
            if (j == 2) ct[0] = (shape[0] + 1) / 2; /* the first half of the rows */
            /* this rank's Shard(0) slice */
            ckpt_status sb =
                j == 3 ? ckpt_shard_box(nd, shape, 0, (uint32_t)size, (uint32_t)rank, st, ct)
                       : CKPT_OK;
            if (sb != CKPT_OK) return fail(rank, "shard box", NULL);
            uint64_t n = item;
            for (int d = 0; d < nd; d++)
                n *= (uint64_t)ct[d];
            len[k * PER_KEY + j] = n;
            buf[k * PER_KEY + j] = malloc(n + 1);
            if (!buf[k * PER_KEY + j]) return fail(rank, "out of memory", NULL);
            memset(buf[k * PER_KEY + j], 0xA5, n);
            if (ckpt_load_request(l, argv[k + 2], st, ct, buf[k * PER_KEY + j], n, &err) != CKPT_OK)
                return fail(rank, "request", &err);
        }
    }
    if (ckpt_load_execute(l, NULL, &err) != CKPT_OK) return fail(rank, "execute", &err);
    int bad = 0;
    for (int k = 0; k < nkeys; k++) {
        const ckpt_entry *e = ents[k];
        for (int j = 0; j < PER_KEY; j++) {
            size_t n = len[k * PER_KEY + j];
            unsigned char *want = malloc(n + 1);
            if (!want) return fail(rank, "out of memory", NULL);
            if (ckpt_read_region(r, e, start[k * PER_KEY + j], count[k * PER_KEY + j], want, n,
                                 &err) != CKPT_OK)
                return fail(rank, "read_region", &err);
            if (memcmp(want, buf[k * PER_KEY + j], n) != 0) {
                fprintf(stderr, "rank %d: %s request %d differs from the reader's bytes\n", rank,
                        argv[k + 2], j);
                bad = 1;
            }
            free(want);
            free(buf[k * PER_KEY + j]);
        }
    }
    /* every request is part of a whole tensor that some rank asks for: the needed bytes are
     * the tensors' stored bytes (the library's own plans; the keys must not share storage) */
    unsigned long long needed = 0;
    for (int k = 0; k < nkeys; k++) {
        ckpt_plan *plan = NULL;
        if (ckpt_plan_region(r, ents[k], NULL, NULL, &plan, &err) != CKPT_OK)
            return fail(rank, "plan", &err);
        const ckpt_piece *pc = ckpt_plan_pieces(plan);
        for (size_t i = 0; i < ckpt_plan_num_pieces(plan); i++)
            needed += pc[i].length;
        ckpt_plan_free(plan);
    }
    ckpt_load_stats st;
    ckpt_load_get_stats(l, &st, sizeof st);
    unsigned long long read = st.bytes_read_plan + st.bytes_local, total = 0;
    MPI_Allreduce(&read, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (total != needed || st.union_bytes != needed) {
        if (rank == 0)
            fprintf(stderr, "read %llu bytes across the job, union %llu, for %llu needed\n", total,
                    (unsigned long long)st.union_bytes, needed);
        bad = 1;
    }
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && !any)
        printf("ok: %d keys, %d requests per rank each, %llu stored bytes read once\n", nkeys,
               PER_KEY, (unsigned long long)st.union_bytes);
    free(buf);
    free(len);
    free(start);
    free(count);
    free(ents);
    ckpt_load_free(l);
    MPI_Finalize();
    return any;
}
