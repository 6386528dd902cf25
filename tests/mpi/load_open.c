/* load_open.c — every rank opens a checkpoint with ckpt_load_open and says what it got:
 * "rank\tK\tSTATUS\tMESSAGE\tMETA_READ" (bytes_read_metadata of the open; test_load.py
 * checks that a bad `.metadata` fails every rank alike, and that only rank 0 reads it).
 *
 *   mpirun -np M load_open DIR */
#include "ckpt_load_mpi.h"

#include <stdio.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    ckpt_load *l = NULL;
    ckpt_error err = {0};
    ckpt_status s =
        argc == 2 ? ckpt_load_open(MPI_COMM_WORLD, argv[1], NULL, &l, &err) : CKPT_E_INVAL;
    ckpt_load_stats st = {0};
    if (l) {
        /* an empty execute: the counters of the open (the metadata) */
        if (ckpt_load_execute(l, NULL, &err) != CKPT_OK) s = err.code;
        ckpt_load_get_stats(l, &st, sizeof st);
    }
    printf("rank\t%d\t%d\t%s\t%llu\n", rank, (int)s, s ? err.message : "",
           (unsigned long long)st.bytes_read_metadata);
    fflush(stdout);
    ckpt_load_free(l);
    MPI_Finalize();
    return s != CKPT_OK;
}
