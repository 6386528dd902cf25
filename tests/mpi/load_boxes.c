/* load_boxes.c — the loader's box-list requests through the C API: every rank asks for each
 * key's local shard under layout SPEC twice, with ckpt_load_request_layout and with
 * ckpt_load_request_boxes of the boxes ckpt_layout_boxes lists, after two requests that must
 * fail and leave nothing behind (a buffer one byte short, a box outside the tensor).  Both
 * buffers must equal the reader library's reads of the boxes, concatenated, and each needed
 * stored byte must be read once across the job.
 * Usage: mpirun -np M load_boxes CHECKPOINT_DIR SPEC KEY...  (prints "ok: N boxes" on rank 0). */
#include <mpi.h>
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

enum { MAX_BOXES = 1 << 16 };

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 4) return fail(rank, "usage: load_boxes CHECKPOINT_DIR SPEC KEY...", NULL);
    ckpt_error err = {0};
    ckpt_layout lay;
    if (ckpt_layout_parse(argv[2], &lay, &err) != CKPT_OK) return fail(rank, "spec", &err);
    if (ckpt_layout_nranks(&lay) != (uint32_t)size) return fail(rank, "spec size", NULL);
    uint32_t coord[CKPT_LAYOUT_MAX_MESH_NDIM];
    ckpt_layout_coord(&lay, (uint32_t)rank, coord);
    ckpt_load *l = NULL;
    if (ckpt_load_open(MPI_COMM_WORLD, argv[1], NULL, &l, &err) != CKPT_OK)
        return fail(rank, "open", &err);
    ckpt_reader *r = ckpt_load_reader(l);
    int nkeys = argc - 3;
    unsigned char **a = calloc((size_t)nkeys, sizeof *a), **b = calloc((size_t)nkeys, sizeof *b),
                  **want = calloc((size_t)nkeys, sizeof *want);
    size_t *len = calloc((size_t)nkeys, sizeof *len);
    int64_t *st = malloc(sizeof *st * MAX_BOXES * 4), *ct = malloc(sizeof *ct * MAX_BOXES * 4);
    if (!a || !b || !want || !len || !st || !ct) return fail(rank, "out of memory", NULL);
    unsigned long long boxes = 0;
    for (int k = 0; k < nkeys; k++) {
        const char *key = argv[k + 3];
        const ckpt_entry *e = ckpt_reader_find(r, key);
        if (!e || ckpt_entry_ndim(e) > 4) return fail(rank, key, NULL);
        int nd = ckpt_entry_ndim(e);
        const int64_t *shape = ckpt_entry_shape(e);
        size_t nb, item = ckpt_dtype_itemsize(ckpt_entry_dtype(e));
        int64_t ls[4];
        if (ckpt_layout_boxes(&lay, nd, shape, (uint32_t)rank, st, ct, MAX_BOXES, &nb, ls, NULL,
                              &err) != CKPT_OK)
            return fail(rank, "boxes", &err);
        boxes += nb;
        size_t n = item;
        for (int d = 0; d < nd; d++)
            n *= (size_t)ls[d];
        len[k] = n;
        a[k] = malloc(n + 1);
        b[k] = malloc(n + 1);
        want[k] = malloc(n + 1);
        if (!a[k] || !b[k] || !want[k]) return fail(rank, "out of memory", NULL);
        memset(a[k], 0xA5, n);
        memset(b[k], 0x5A, n);
        size_t at = 0;
        for (size_t i = 0; i < nb; i++) { /* the reader alone, box by box */
            size_t bn = item;
            for (int d = 0; d < nd; d++)
                bn *= (size_t)ct[i * nd + d];
            if (ckpt_read_region(r, e, nd ? st + i * nd : NULL, nd ? ct + i * nd : NULL,
                                 want[k] + at, bn, &err) != CKPT_OK)
                return fail(rank, "read_region", &err);
            at += bn;
        }
        if (at != n) return fail(rank, "box sizes do not add up to the local shape", NULL);
        /* failures keep nothing */
        if (n && ckpt_load_request_layout(l, key, &lay, coord, a[k], n - 1, CKPT_LOAD_MEM_HOST,
                                          &err) == CKPT_OK)
            return fail(rank, "a short buffer was accepted", NULL);
        if (nd && nb) {
            int64_t keep = st[(nb - 1) * nd];
            st[(nb - 1) * nd] = shape[0] + 1; /* the last box outside the tensor */
            if (ckpt_load_request_boxes(l, key, nb, st, ct, b[k], n, CKPT_LOAD_MEM_HOST, &err) ==
                CKPT_OK)
                return fail(rank, "a box outside the tensor was accepted", NULL);
            st[(nb - 1) * nd] = keep;
        }
        if (ckpt_load_request_layout(l, key, &lay, coord, a[k], n, CKPT_LOAD_MEM_HOST, &err) !=
                CKPT_OK ||
            ckpt_load_request_boxes(l, key, nb, st, ct, b[k], n, CKPT_LOAD_MEM_HOST, &err) !=
                CKPT_OK)
            return fail(rank, "request", &err);
    }
    if (ckpt_load_execute(l, NULL, &err) != CKPT_OK) return fail(rank, "execute", &err);
    ckpt_load_stats s;
    ckpt_load_get_stats(l, &s, sizeof s);
    unsigned long long requested = 0, read = s.bytes_read_plan, all_read = 0;
    for (int k = 0; k < nkeys; k++) {
        requested += 2 * len[k];
        if (memcmp(a[k], want[k], len[k]) != 0) return fail(rank, "layout request differs", NULL);
        if (memcmp(b[k], want[k], len[k]) != 0) return fail(rank, "boxes request differs", NULL);
    }
    if (s.bytes_requested != requested) return fail(rank, "a failed request was kept", NULL);
    MPI_Allreduce(&read, &all_read, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (all_read != s.union_bytes) return fail(rank, "bytes read more than once", NULL);
    unsigned long long all_boxes = 0;
    MPI_Reduce(&boxes, &all_boxes, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("ok: %llu boxes\n", all_boxes);
    for (int k = 0; k < nkeys; k++) {
        free(a[k]);
        free(b[k]);
        free(want[k]);
    }
    free(a);
    free(b);
    free(want);
    free(len);
    free(st);
    free(ct);
    ckpt_load_free(l);
    MPI_Finalize();
    return 0;
}
