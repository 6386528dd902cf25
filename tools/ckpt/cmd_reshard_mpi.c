/* cmd_reshard_mpi.c — `mpirun -np M ckpt reshard SRC DST`: each rank loads its Shard(D) share
 * of the tensors with the collective loader (each stored byte read once across the job), in
 * rounds of at most --budget tensor bytes job-wide, and hands it to the collective saver,
 * which writes one file per rank and commits once; rank 0 re-saves the values, all entries in
 * the source's order.  Every phase
 * is collective and agreed, so a failure anywhere fails every rank with the same message. */
#include "ckpt_load_mpi.h"
#include "ckpt_save_mpi.h"
#include "cli.h"
#include "reshard.h"

#include <stdlib.h>
#include <string.h>

typedef struct held {
    const ckpt_entry *e;
    int64_t start[CKPT_MAX_NDIM], count[CKPT_MAX_NDIM];
    void *buf;
    size_t bytes;
} held;

/* A non-tensor value (rank 0 adds them, in the source's order). */
static ckpt_status add_value(ckpt_reader *r, const ckpt_entry *e, ckpt_save_mpi *s,
                             ckpt_error *err) {
    ckpt_save_key key;
    ckpt_save_elem *elems = NULL;
    reshard_val v = {0};
    ckpt_status st = reshard_key(e, &key, &elems, err);
    if (st == CKPT_OK) st = reshard_value(r, e, &v, err);
    if (st == CKPT_OK && v.archive) {
        st = ckpt_save_mpi_add_value_archive(s, &key, v.archive, v.len, err);
    } else if (st == CKPT_OK) {
        st = ckpt_save_mpi_add_value(s, &key, v.v, err); /* takes the value */
        v.v = NULL;
    }
    reshard_val_release(&v);
    free(elems);
    return st;
}

/* One round: entries [*next, ...) up to `budget` bytes job-wide, loaded then saved. */
static ckpt_status round_trip(ckpt_load *l, ckpt_save_mpi *s, const reshard_args *a, int rank,
                              size_t *next, uint64_t *bytes, ckpt_error *err) {
    ckpt_reader *r = ckpt_load_reader(l);
    size_t n = ckpt_reader_num_entries(r), nh = 0, cap = 16;
    held *h = calloc(cap, sizeof *h);
    ckpt_status st = h ? CKPT_OK : cli_fail(err, CKPT_E_NOMEM, "out of memory");
    uint64_t taken = 0;
    for (; st == CKPT_OK && *next < n; (*next)++) {
        const ckpt_entry *e = ckpt_reader_entry(r, *next);
        if (ckpt_entry_kind_of(e) != CKPT_ENTRY_TENSOR) {
            if (rank == 0) st = add_value(r, e, s, err);
            continue;
        }
        if (taken && taken + ckpt_entry_nbytes(e) > a->budget) break;
        taken += ckpt_entry_nbytes(e);
        reshard_share sh;
        st = reshard_share_of(a, e, (uint32_t)rank, &sh, err);
        /* one chunk per run box of the rank's share (nothing for a replica a lower rank
         * stores), each loaded into its own buffer */
        for (uint64_t b = 0; st == CKPT_OK && b < sh.nboxes; b++) {
            if (nh == cap) {
                held *t = realloc(h, 2 * cap * sizeof *t);
                if (!t) {
                    st = cli_fail(err, CKPT_E_NOMEM, "out of memory");
                    break;
                }
                h = t, cap *= 2;
            }
            held x = {.e = e};
            uint64_t nb = 0;
            reshard_share_box(&sh, b, x.start, x.count, &nb);
            x.bytes = (size_t)nb;
            x.buf = nb <= SIZE_MAX ? malloc(nb ? (size_t)nb : 1) : NULL;
            if (!x.buf) {
                st = cli_fail(err, CKPT_E_NOMEM, "key '%s': out of memory", ckpt_entry_key(e));
                break;
            }
            h[nh++] = x;
            st = ckpt_load_request(l, ckpt_entry_key(e), x.start, x.count, x.buf, x.bytes, err);
        }
        reshard_share_release(&sh);
        if (st != CKPT_OK) break;
    }
    /* every rank must reach execute: agree on local failures first; from here on every
     * status is the same on all ranks */
    int bad = st != CKPT_OK, anybad = 0;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (anybad) {
        if (!bad) st = cli_fail(err, CKPT_E_INVAL, "another rank failed to plan its loads");
    } else {
        st = ckpt_load_execute(l, NULL, err);
    }
    ckpt_status loaded = anybad ? CKPT_E_INVAL : st;
    for (size_t i = 0; st == CKPT_OK && i < nh; i++) {
        ckpt_save_key key;
        ckpt_save_elem *elems = NULL;
        st = reshard_key(h[i].e, &key, &elems, err);
        ckpt_save_tensor t = {.dtype = ckpt_entry_dtype(h[i].e),
                              .ndim = ckpt_entry_ndim(h[i].e),
                              .global_shape = ckpt_entry_shape(h[i].e),
                              .offsets = h[i].start,
                              .sizes = h[i].count,
                              .data = h[i].buf,
                              .data_size = h[i].bytes,
                              .memory = CKPT_SAVE_MEM_HOST};
        if (st == CKPT_OK) st = ckpt_save_mpi_add_tensor(s, &key, &t, err);
        if (st == CKPT_OK) *bytes += h[i].bytes;
        free(elems);
    }
    /* the flush agrees on the adds (a failed add poisoned the saver); a failure before an add
     * (the key) poisoned nothing, so it is agreed on after the flush */
    if (loaded == CKPT_OK) {
        ckpt_status local = st;
        st = ckpt_save_mpi_flush(s, err);
        int mine = st == CKPT_OK && local != CKPT_OK, any = 0;
        MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (any)
            st =
                mine ? local : cli_fail(err, CKPT_E_INVAL, "another rank failed to save its share");
    }
    for (size_t i = 0; i < nh; i++)
        free(h[i].buf);
    free(h);
    return st;
}

static int run(reshard_args *a, int rank, int size) {
    uint32_t want = reshard_nranks(a, (uint32_t)size);
    if (want != (uint32_t)size) {
        if (rank == 0 && a->ranks)
            cli_usage_error("reshard", "--ranks %u under mpirun -np %d: give -np %u", a->ranks,
                            size, want);
        else if (rank == 0)
            cli_usage_error("reshard",
                            "--layout '%s' has %u ranks under mpirun -np %d: give -np %u",
                            a->layout_text, want, size, want);
        return CLI_EXIT_USAGE;
    }
    int rc = reshard_layouts(a, (uint32_t)size, rank == 0);
    if (rc != CLI_EXIT_OK) return rc;
    char desc[CKPT_LAYOUT_SPEC_MAX + 4096];
    reshard_layout_desc(a, desc, sizeof desc);
    ckpt_error err = {0};
    ckpt_load *l = NULL;
    ckpt_save_mpi *s = NULL;
    ckpt_save_options o = {.no_fsync = a->no_fsync,
                           .tensor_properties_strides = a->strides,
                           .torch_target = a->torch_target};
    uint64_t bytes = 0, total = 0;
    ckpt_status st = ckpt_load_open(MPI_COMM_WORLD, a->src, NULL, &l, &err); /* agreed */
    if (st == CKPT_OK && rank == 0) reshard_note_torch(ckpt_load_reader(l), a);
    if (st == CKPT_OK) st = ckpt_save_mpi_begin(MPI_COMM_WORLD, a->dst, &o, NULL, &s, &err);
    if (st == CKPT_OK) {
        size_t next = 0, n = ckpt_reader_num_entries(ckpt_load_reader(l));
        while (st == CKPT_OK && next < n)
            st = round_trip(l, s, a, rank, &next, &bytes, &err);
        if (st == CKPT_OK) st = ckpt_save_mpi_commit(s, &err);
    }
    ckpt_save_mpi_free(s);
    ckpt_load_free(l);
    ckpt_layout_map_free(a->map);
    a->map = NULL;
    MPI_Reduce(&bytes, &total, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    if (st != CKPT_OK) {
        if (rank == 0) cli_error("%s", err.message[0] ? err.message : ckpt_strerror(st));
        return CLI_EXIT_FAIL;
    }
    if (rank == 0 && !a->quiet) {
        char h[32];
        printf("wrote %s for %d ranks (layout %s) with %d MPI ranks: %s of tensors\n", a->dst, size,
               desc, size, cli_human_size(total, h, sizeof h));
    }
    return cli_flush_stdout() ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}

int reshard_mpi(reshard_args *a) {
    int provided;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int status = run(a, rank, size), worst = status;
    MPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return worst;
}
