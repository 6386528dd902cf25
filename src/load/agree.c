/* agree.c — error agreement: after each phase of a collective call, every rank learns whether
 * any rank failed and returns the first failing rank's status and message, so no rank goes on
 * to a collective operation the others skip (no hangs), and all report the same error. */
#include "load/load_i.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

ckpt_status load_agree(ckpt_load *l, ckpt_status s, ckpt_error *err) {
    int mine = s != CKPT_OK ? l->rank : INT_MAX, first = INT_MAX;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, l->comm);
    if (first == INT_MAX) return CKPT_OK;
    ckpt_error e = {0};
    if (l->rank == first) {
        if (err) e = *err;
        e.code = s;
        if (!e.message[0]) snprintf(e.message, sizeof e.message, "%s", ckpt_strerror(s));
    }
    MPI_Bcast(&e, (int)sizeof e, MPI_BYTE, first, l->comm);
    if (err) {
        err->code = e.code;
        int n = snprintf(err->message, sizeof err->message, "rank %d: ", first);
        if (n > 0 && (size_t)n < sizeof err->message)
            memcpy(err->message + n, e.message,
                   strnlen(e.message, sizeof err->message - (size_t)n - 1) + 1);
        err->message[sizeof err->message - 1] = '\0';
    }
    return e.code;
}
