/* load_demo.c — an MPI program built against an installed libckpt_mpi with pkg-config
 * (ckpt-load) alone: every rank loads its Shard(0) rows of one tensor with the collective
 * loader and prints the same checksum reader_demo prints for the whole tensor's slice. */
#include <ckpt_load_mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 3) {
        if (!rank) fprintf(stderr, "usage: load_demo CHECKPOINT_DIR KEY\n");
        MPI_Finalize();
        return 2;
    }
    ckpt_load *l = NULL;
    ckpt_error err;
    int rc = 1;
    if (ckpt_load_open(MPI_COMM_WORLD, argv[1], NULL, &l, &err) != CKPT_OK) {
        fprintf(stderr, "load_demo: %s\n", err.message);
        goto out;
    }
    const ckpt_entry *e = ckpt_reader_find(ckpt_load_reader(l), argv[2]);
    if (!e) {
        fprintf(stderr, "load_demo: no %s\n", argv[2]);
        goto out;
    }
    int64_t start[CKPT_MAX_NDIM], count[CKPT_MAX_NDIM];
    if (ckpt_shard_box(ckpt_entry_ndim(e), ckpt_entry_shape(e), 0, (uint32_t)size, (uint32_t)rank,
                       start, count) != CKPT_OK) {
        fprintf(stderr, "load_demo: bad shard box\n");
        goto out;
    }
    uint64_t bytes = ckpt_dtype_itemsize(ckpt_entry_dtype(e));
    for (int d = 0; d < ckpt_entry_ndim(e); d++)
        bytes *= (uint64_t)count[d];
    unsigned char *buf = malloc(bytes ? bytes : 1);
    if (!buf || ckpt_load_request(l, ckpt_entry_key(e), start, count, buf, bytes, &err) ||
        ckpt_load_execute(l, NULL, &err)) {
        fprintf(stderr, "load_demo: %s\n", buf ? err.message : "oom");
        free(buf);
        goto out;
    }
    uint64_t sum = 0;
    for (uint64_t k = 0; k < bytes; k++)
        sum = sum * 31 + buf[k];
    printf("rank %d\t%llu\t%llu\n", rank, (unsigned long long)bytes, (unsigned long long)sum);
    free(buf);
    rc = 0;
out:
    ckpt_load_free(l);
    MPI_Finalize();
    return rc;
}
