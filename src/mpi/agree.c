/* agree.c — error agreement across the ranks of a collective call (see agree.h). */
#include "mpi/agree.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

ckpt_status ck_mpi_agree(MPI_Comm comm, int rank, ckpt_status st, ckpt_error *err) {
    int mine = st != CKPT_OK ? rank : INT_MAX, first = INT_MAX;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
    if (first == INT_MAX) return CKPT_OK;
    ckpt_error e = {0};
    if (rank == first) {
        if (err) e = *err;
        e.code = st;
        e.message[sizeof e.message - 1] = '\0';
        if (!e.message[0]) snprintf(e.message, sizeof e.message, "%s", ckpt_strerror(st));
    }
    MPI_Bcast(&e, (int)sizeof e, MPI_BYTE, first, comm);
    if (err) {
        ckpt_error out = {.code = e.code};
        int n = snprintf(out.message, sizeof out.message, "rank %d: ", first);
        if (n > 0 && (size_t)n < sizeof out.message)
            memcpy(out.message + n, e.message,
                   strnlen(e.message, sizeof out.message - (size_t)n - 1));
        out.message[sizeof out.message - 1] = '\0';
        *err = out;
    }
    return e.code;
}
