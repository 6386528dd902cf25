/* agree.c — error agreement of the collective saver: after each phase every rank learns
 * whether any rank failed and returns the first failing rank's status and message, so no rank
 * enters a collective operation the others skip (no hangs) and all report the same error. */
#include "save_mpi/save_mpi_i.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

double smpi_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

ckpt_status smpi_agree(ckpt_save_mpi *s, ckpt_status st, ckpt_error *err) {
    int mine = st != CKPT_OK ? s->rank : INT_MAX, first = INT_MAX;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, s->comm);
    if (first == INT_MAX) return CKPT_OK;
    ckpt_error e = {0};
    if (s->rank == first) {
        if (err) e = *err;
        e.code = st;
        e.message[sizeof e.message - 1] = '\0';
        if (!e.message[0]) snprintf(e.message, sizeof e.message, "%s", ckpt_strerror(st));
    }
    MPI_Bcast(&e, (int)sizeof e, MPI_BYTE, first, s->comm);
    char prefix[32];
    int n = snprintf(prefix, sizeof prefix, "rank %d: ", first);
    ckpt_error out = {.code = e.code};
    if (n > 0 && (size_t)n < sizeof out.message) {
        memcpy(out.message, prefix, (size_t)n);
        memcpy(out.message + n, e.message, strnlen(e.message, sizeof out.message - (size_t)n - 1));
    }
    out.message[sizeof out.message - 1] = '\0';
    if (err) *err = out;
    s->failed = e.code; /* every rank now holds the same error */
    s->ferr = out;
    s->agreed = true;
    return e.code;
}
