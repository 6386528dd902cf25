/* agree.c — error agreement of the collective saver (mpi/agree.h), remembered on the handle
 * so that later calls return the agreed error; and the saver's clock. */
#include "save_mpi/save_mpi_i.h"

#include "mpi/agree.h"

#include <time.h>

double smpi_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

ckpt_status smpi_agree(ckpt_save_mpi *s, ckpt_status st, ckpt_error *err) {
    ckpt_error e = err ? *err : (ckpt_error){0};
    ckpt_status agreed = ck_mpi_agree(s->comm, s->rank, st, &e);
    if (agreed == CKPT_OK) return CKPT_OK;
    if (err) *err = e;
    s->failed = agreed; /* every rank now holds the same error */
    s->ferr = e;
    s->agreed = true;
    return agreed;
}
