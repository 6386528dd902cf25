/* load_columns.c — column slices through the collective plan: every rank asks for its
 * Shard(1) slice (torch.chunk) of each key, "full", or for the first half of its columns only,
 * "holes" (the job then leaves bytes between each stored row that nobody needs).  Each buffer
 * must equal the reader library's read of the same box, and the job must read each needed
 * stored byte once: the sum of the ranks' planned reads equals the union, which with "holes"
 * is exactly the bytes asked for (the slices are disjoint).  Rank 0 prints the plan counters
 * as one JSON line (test_load.py checks that the plan does not grow with the rows).
 * Usage: mpirun -np M load_columns CHECKPOINT_DIR full|holes KEY... */
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "ckpt_load_mpi.h"

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
    if (argc < 4) return fail(rank, "usage: load_columns CHECKPOINT_DIR full|holes KEY...", NULL);
    bool holes = strcmp(argv[2], "holes") == 0;
    ckpt_error err = {0};
    ckpt_load *l = NULL;
    if (ckpt_load_open(MPI_COMM_WORLD, argv[1], NULL, &l, &err) != CKPT_OK)
        return fail(rank, "open", &err);
    ckpt_reader *r = ckpt_load_reader(l);
    int nkeys = argc - 3;
    unsigned char **buf = calloc((size_t)nkeys, sizeof *buf);
    size_t *len = calloc((size_t)nkeys, sizeof *len);
    int64_t(*st)[CKPT_MAX_NDIM] = calloc((size_t)nkeys, sizeof *st);
    int64_t(*ct)[CKPT_MAX_NDIM] = calloc((size_t)nkeys, sizeof *ct);
    if (!buf || !len || !st || !ct) return fail(rank, "out of memory", NULL);
    unsigned long long asked = 0;
    for (int k = 0; k < nkeys; k++) {
        const ckpt_entry *e = ckpt_reader_find(r, argv[k + 3]);
        if (!e || ckpt_entry_ndim(e) < 2) return fail(rank, argv[k + 3], NULL);
        int nd = ckpt_entry_ndim(e);
        if (ckpt_shard_box(nd, ckpt_entry_shape(e), 1, (uint32_t)size, (uint32_t)rank, st[k],
                           ct[k]) != CKPT_OK)
            return fail(rank, "shard box", NULL);
        if (holes) ct[k][1] /= 2;
        size_t n = ckpt_dtype_itemsize(ckpt_entry_dtype(e));
        for (int d = 0; d < nd; d++)
            n *= (size_t)ct[k][d];
        len[k] = n;
        asked += n;
        buf[k] = malloc(n + 1);
        if (!buf[k]) return fail(rank, "out of memory", NULL);
        memset(buf[k], 0xA5, n);
        if (ckpt_load_request(l, argv[k + 3], st[k], ct[k], buf[k], n, &err) != CKPT_OK)
            return fail(rank, "request", &err);
    }
    if (ckpt_load_execute(l, NULL, &err) != CKPT_OK) return fail(rank, "execute", &err);
    int bad = 0;
    for (int k = 0; k < nkeys; k++) {
        unsigned char *want = malloc(len[k] + 1);
        if (!want) return fail(rank, "out of memory", NULL);
        if (ckpt_read_region(r, ckpt_reader_find(r, argv[k + 3]), st[k], ct[k], want, len[k],
                             &err) != CKPT_OK)
            return fail(rank, "read_region", &err);
        if (memcmp(want, buf[k], len[k]) != 0) {
            fprintf(stderr, "rank %d: %s differs from the reader's bytes\n", rank, argv[k + 3]);
            bad = 1;
        }
        free(want);
        free(buf[k]);
    }
    ckpt_load_stats s;
    ckpt_load_get_stats(l, &s, sizeof s);
    unsigned long long read = s.bytes_read_plan, all_read = 0, all_asked = 0, mem = s.plan_memory,
                       peak = 0;
    MPI_Allreduce(&read, &all_read, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&asked, &all_asked, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&mem, &peak, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    if (all_read != s.union_bytes) {
        fprintf(stderr, "rank %d: read %llu across the job, union %llu\n", rank, all_read,
                (unsigned long long)s.union_bytes);
        bad = 1;
    }
    if (holes && s.union_bytes != all_asked) {
        fprintf(stderr, "rank %d: union %llu, asked %llu\n", rank,
                (unsigned long long)s.union_bytes, all_asked);
        bad = 1;
    }
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && !any)
        printf("{\"union_bytes\": %llu, \"asked\": %llu, \"plan_transfers\": %llu, "
               "\"plan_ranges\": %llu, \"plan_rows\": %llu, \"plan_memory_max\": %llu}\n",
               (unsigned long long)s.union_bytes, all_asked, (unsigned long long)s.plan_transfers,
               (unsigned long long)s.plan_ranges, (unsigned long long)s.plan_rows, peak);
    free(buf);
    free(len);
    free(st);
    free(ct);
    ckpt_load_free(l);
    MPI_Finalize();
    return any;
}
