/* transport_demo.c — a program built against an installed libckpt_load with pkg-config
 * (ckpt-load-core) alone, no MPI: the collective loader over a transport of its own, one
 * rank whose collectives copy its own blocks (ckpt_transport.h), loads every tensor whole
 * and prints the same checksums reader_demo prints. */
#include <ckpt_load.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int gatherv(void *ctx, const void *send, size_t send_bytes, void *recv,
                   const size_t *recv_bytes, const size_t *recv_displs) {
    (void)ctx;
    if (send_bytes != recv_bytes[0]) return 1;
    if (send_bytes) memcpy((char *)recv + recv_displs[0], send, send_bytes);
    return 0;
}

static int alltoallv(void *ctx, const void *send, const size_t *send_bytes,
                     const size_t *send_displs, void *recv, const size_t *recv_bytes,
                     const size_t *recv_displs) {
    (void)ctx;
    if (send_bytes[0] != recv_bytes[0]) return 1;
    if (send_bytes[0])
        memcpy((char *)recv + recv_displs[0], (const char *)send + send_displs[0], send_bytes[0]);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: transport_demo CHECKPOINT_DIR\n");
        return 2;
    }
    ckpt_transport t = {.version = CKPT_TRANSPORT_VERSION,
                        .rank = 0,
                        .size = 1,
                        .allgatherv = gatherv,
                        .alltoallv = alltoallv};
    ckpt_load *l = NULL;
    ckpt_error err;
    if (ckpt_load_open_transport(&t, argv[1], NULL, &l, &err) != CKPT_OK) {
        fprintf(stderr, "transport_demo: %s\n", err.message);
        return 1;
    }
    ckpt_reader *r = ckpt_load_reader(l);
    size_t n = ckpt_reader_num_entries(r), nb = 0;
    unsigned char **bufs = calloc(n ? n : 1, sizeof *bufs);
    const ckpt_entry **es = calloc(n ? n : 1, sizeof *es);
    int rc = bufs && es ? 0 : 1;
    for (size_t i = 0; !rc && i < n; i++) {
        const ckpt_entry *e = ckpt_reader_entry(r, i);
        if (ckpt_entry_kind_of(e) != CKPT_ENTRY_TENSOR) continue;
        size_t bytes = (size_t)ckpt_entry_nbytes(e);
        es[nb] = e;
        bufs[nb] = malloc(bytes ? bytes : 1);
        if (!bufs[nb] ||
            ckpt_load_request(l, ckpt_entry_key(e), NULL, NULL, bufs[nb], bytes, &err) != CKPT_OK) {
            fprintf(stderr, "transport_demo: %s\n", bufs[nb] ? err.message : "oom");
            rc = 1;
        }
        nb++;
    }
    if (!rc && ckpt_load_execute(l, NULL, &err) != CKPT_OK) {
        fprintf(stderr, "transport_demo: %s\n", err.message);
        rc = 1;
    }
    for (size_t i = 0; i < nb; i++) {
        size_t bytes = (size_t)ckpt_entry_nbytes(es[i]);
        uint64_t sum = 0;
        for (size_t k = 0; !rc && k < bytes; k++)
            sum = sum * 31 + bufs[i][k];
        if (!rc)
            printf("%s\t%s\t%zu\t%llu\n", ckpt_entry_key(es[i]),
                   ckpt_dtype_name(ckpt_entry_dtype(es[i])), bytes, (unsigned long long)sum);
        free(bufs[i]);
    }
    free(bufs);
    free(es);
    ckpt_load_free(l);
    return rc;
}
