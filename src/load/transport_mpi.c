/* transport_mpi.c — the MPI transport (ckpt_load_mpi.h): ckpt_transport's callbacks as MPI
 * collectives on a duplicate of the caller's communicator (MPI_Allgatherv, MPI_Alltoallv,
 * MPI_Bcast, MPI_Allreduce with MPI_MIN), and ckpt_load_open over it. */
#include "ckpt_load_mpi.h"
#include "util/error.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct mpi_ctx {
    MPI_Comm comm;
    int size;
    int *c[4]; /* int counts and displacements (size each) */
    char text[MPI_MAX_ERROR_STRING + 1];
} mpi_ctx;

/* size_t counts as MPI's ints; 0, or MPI_ERR_COUNT when one does not fit. */
static int ints(int n, const size_t *from, int *to) {
    for (int k = 0; k < n; k++) {
        if (from[k] > INT_MAX) return MPI_ERR_COUNT;
        to[k] = (int)from[k];
    }
    return 0;
}

static int mpi_allgatherv(void *ctx, const void *send, size_t send_bytes, void *recv,
                          const size_t *recv_bytes, const size_t *recv_displs) {
    mpi_ctx *m = ctx;
    if (send_bytes > INT_MAX) return MPI_ERR_COUNT;
    int rc = ints(m->size, recv_bytes, m->c[0]);
    if (!rc) rc = ints(m->size, recv_displs, m->c[1]);
    if (!rc)
        rc = MPI_Allgatherv(send, (int)send_bytes, MPI_BYTE, recv, m->c[0], m->c[1], MPI_BYTE,
                            m->comm);
    return rc;
}

static int mpi_alltoallv(void *ctx, const void *send, const size_t *send_bytes,
                         const size_t *send_displs, void *recv, const size_t *recv_bytes,
                         const size_t *recv_displs) {
    mpi_ctx *m = ctx;
    int rc = ints(m->size, send_bytes, m->c[0]);
    if (!rc) rc = ints(m->size, send_displs, m->c[1]);
    if (!rc) rc = ints(m->size, recv_bytes, m->c[2]);
    if (!rc) rc = ints(m->size, recv_displs, m->c[3]);
    if (!rc)
        rc = MPI_Alltoallv(send, m->c[0], m->c[1], MPI_BYTE, recv, m->c[2], m->c[3], MPI_BYTE,
                           m->comm);
    return rc;
}

static int mpi_bcast(void *ctx, void *buf, size_t bytes, int root) {
    mpi_ctx *m = ctx;
    return bytes > INT_MAX ? MPI_ERR_COUNT : MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, m->comm);
}

static int mpi_min_u64(void *ctx, uint64_t *values, size_t n) {
    mpi_ctx *m = ctx;
    return n > INT_MAX
               ? MPI_ERR_COUNT
               : MPI_Allreduce(MPI_IN_PLACE, values, (int)n, MPI_UINT64_T, MPI_MIN, m->comm);
}

static const char *mpi_strerror(void *ctx, int code) {
    mpi_ctx *m = ctx;
    int len = 0;
    if (MPI_Error_string(code, m->text, &len) != MPI_SUCCESS) len = 0;
    if (len <= 0) snprintf(m->text, sizeof m->text, "MPI error %d", code);
    m->text[sizeof m->text - 1] = '\0';
    return m->text;
}

static void mpi_destroy(void *ctx) {
    mpi_ctx *m = ctx;
    if (!m) return;
    if (m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
    free(m->c[0]);
    free(m);
}

ckpt_status ckpt_transport_mpi_new(MPI_Comm comm, ckpt_transport *out, ckpt_error *err) {
    CK_ERR_OR_LOCAL(err);
    *out = (ckpt_transport){0};
    mpi_ctx *m = calloc(1, sizeof *m);
    if (!m) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    m->comm = MPI_COMM_NULL;
    int rank = 0, rc = MPI_Comm_dup(comm, &m->comm);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(m->comm, &rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(m->comm, &m->size);
    if (rc != MPI_SUCCESS) {
        ckpt_status s = ck_fail(err, CKPT_E_TRANSPORT, "MPI communicator: %s", mpi_strerror(m, rc));
        mpi_destroy(m);
        return s;
    }
    m->c[0] = calloc((size_t)m->size * 4, sizeof *m->c[0]);
    if (!m->c[0]) {
        mpi_destroy(m);
        return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    }
    for (int i = 1; i < 4; i++)
        m->c[i] = m->c[0] + (size_t)i * (size_t)m->size;
    *out = (ckpt_transport){
        .version = CKPT_TRANSPORT_VERSION,
        .rank = rank,
        .size = m->size,
        .ctx = m,
        .allgatherv = mpi_allgatherv,
        .alltoallv = mpi_alltoallv,
        .bcast = mpi_bcast,
        .allreduce_min_u64 = mpi_min_u64,
        .strerror = mpi_strerror,
        .destroy = mpi_destroy,
    };
    return CKPT_OK;
}

ckpt_status ckpt_load_open(MPI_Comm comm, const char *dir, const ckpt_open_options *opts,
                           ckpt_load **out, ckpt_error *err) {
    CK_ERR_OR_LOCAL(err);
    *out = NULL;
    ckpt_transport t;
    ckpt_status s = ckpt_transport_mpi_new(comm, &t, err); /* cannot agree: no transport */
    if (s != CKPT_OK) return s;
    return ckpt_load_open_transport(&t, dir, opts, out, err);
}
