/* cmd_reshard.c — `ckpt reshard SRC DST [--ranks M]`: rewrite a checkpoint laid out for M
 * ranks (every tensor as Shard(D) pieces with torch.chunk boundaries, values once) with the
 * saver.  This file parses the options and holds the single-process writer (one data file
 * per target rank, one box in memory at a time); under mpirun (MPI builds) each rank loads its
 * share with the collective loader and saves it with the collective saver
 * (cmd_reshard_mpi.c). */
#include "cli.h"
#include "reshard.h"

#include "util/error.h"

#include <stdlib.h>
#include <string.h>

void cmd_reshard_help(FILE *out) {
    fputs("Usage: ckpt reshard [options] SRC_DIR DST_DIR\n"
          "       mpirun -np M ckpt reshard [options] SRC_DIR DST_DIR\n"
          "\n"
          "Write a new checkpoint DST_DIR (which must not exist) holding the same entries as\n"
          "SRC_DIR, laid out for M ranks: rank k's file holds its Shard(D) piece of every\n"
          "tensor (torch.chunk boundaries, as `ckptfs` .layout/dimD-of-M and `ckpt load`),\n"
          "tensors of at most D dimensions and the non-tensor values once, in rank 0's file.\n"
          "The result is committed atomically (hidden staging directory, .metadata last,\n"
          "rename).  Alone, one process writes the M files; under mpirun each rank loads its\n"
          "share with the collective loader (each stored byte read once) and saves it.\n"
          "Non-tensor values are copied byte for byte from their stored items; items\n"
          "stored through a stream transform (zstd) are decoded and pickled again, and\n"
          "an object of another class or an embedded tensor inside one is an error.\n"
          "\n"
          "Options:\n"
          "      --ranks M       target ranks (default: the MPI world size, or 1)\n"
          "      --layout dimD   shard along dimension D (default dim0)\n"
          "      --budget BYTES  under mpirun: tensor bytes loaded per round, job-wide\n"
          "                      (default 1G; alone, memory peaks at the largest share\n"
          "                      of one tensor)\n"
          "      --torch VER     the torch release that will load it: 2.15 and later\n"
          "                      add the strides field to every TensorProperties, which\n"
          "                      torch 2.4 - 2.14 cannot read; a tensor of a dtype that\n"
          "                      release cannot load (uint16/32/64 before 2.6,\n"
          "                      float8_e8m0fnu before 2.7) fails the reshard.  Without\n"
          "                      it: the form torch 2.4 reads, and a note when a dtype\n"
          "                      needs a newer torch\n"
          "      --no-fsync      skip fsync (scratch space)\n"
          "  -q, --quiet         print nothing on success\n"
          "      --help          show this help\n",
          out);
}

enum { OPT_RANKS = 1, OPT_LAYOUT, OPT_BUDGET, OPT_NO_FSYNC, OPT_QUIET, OPT_TORCH };
static const cli_opt reshard_opts[] = {
    {"ranks", 0, true, OPT_RANKS},    {"layout", 0, true, OPT_LAYOUT},
    {"budget", 0, true, OPT_BUDGET},  {"no-fsync", 0, false, OPT_NO_FSYNC},
    {"quiet", 'q', false, OPT_QUIET}, {"torch", 0, true, OPT_TORCH},
};

static bool under_mpirun(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

/* Rank k's data file: its box of every tensor, and (k = 0) every value. */
static ckpt_status write_rank(ckpt_reader *r, const reshard_args *a, const char *staging,
                              uint32_t k, const ckpt_save_options *o, ckpt_save_desc **desc,
                              uint64_t *bytes, ckpt_error *err) {
    ckpt_save_file *f;
    CKPT_TRY(ckpt_save_file_open(staging, k, o, &f, err));
    ckpt_status s = CKPT_OK;
    size_t n = ckpt_reader_num_entries(r);
    /* entries in the source's order (the new .metadata keeps it), values in rank 0's file */
    for (size_t i = 0; s == CKPT_OK && i < n; i++) {
        const ckpt_entry *e = ckpt_reader_entry(r, i);
        bool tensor = ckpt_entry_kind_of(e) == CKPT_ENTRY_TENSOR;
        int64_t start[CKPT_MAX_NDIM] = {0}, count[CKPT_MAX_NDIM] = {0};
        uint64_t nb = 0;
        if (tensor) s = reshard_box(e, a->dim, a->ranks, k, start, count, &nb, err);
        if (s != CKPT_OK) break;
        bool whole = a->dim >= ckpt_entry_ndim(e), empty = tensor && !whole && !count[a->dim];
        if (k != 0 && (!tensor || whole || empty)) continue; /* stored once / nothing to store */
        ckpt_save_key key;
        ckpt_save_elem *elems = NULL;
        s = reshard_key(e, &key, &elems, err);
        if (s == CKPT_OK && !tensor) {
            reshard_val v;
            s = reshard_value(r, e, &v, err);
            if (s == CKPT_OK)
                s = v.archive ? ckpt_save_file_add_value_archive(f, &key, v.archive, v.len, 0, err)
                              : ckpt_save_file_add_value(f, &key, v.v, 0, err);
            reshard_val_release(&v);
        } else if (s == CKPT_OK) {
            void *buf = nb <= SIZE_MAX ? malloc(nb ? (size_t)nb : 1) : NULL;
            if (!buf) s = ck_fail(err, CKPT_E_NOMEM, "key '%s': out of memory", key.flat);
            if (s == CKPT_OK) s = ckpt_read_region(r, e, start, count, buf, (size_t)nb, err);
            ckpt_save_tensor t = {.dtype = ckpt_entry_dtype(e),
                                  .ndim = ckpt_entry_ndim(e),
                                  .global_shape = ckpt_entry_shape(e),
                                  .offsets = start,
                                  .sizes = count,
                                  .data = buf,
                                  .data_size = (size_t)nb,
                                  .memory = CKPT_SAVE_MEM_HOST};
            if (s == CKPT_OK) s = ckpt_save_file_add_tensor(f, &key, &t, err);
            if (s == CKPT_OK) *bytes += nb;
            free(buf);
        }
        free(elems);
    }
    if (s == CKPT_OK) s = ckpt_save_file_finish(f, desc, err);
    ckpt_save_file_free(f);
    return s;
}

static int reshard_single(const reshard_args *a) {
    ckpt_reader *r = cli_open(a->src);
    if (!r) return CLI_EXIT_FAIL;
    reshard_note_torch(r, a);
    ckpt_save_options o = {.no_fsync = a->no_fsync,
                           .tensor_properties_strides = a->strides,
                           .torch_target = a->torch_target};
    ckpt_error err = {0};
    ckpt_save_txn *txn = NULL;
    ckpt_save_desc **descs = calloc(a->ranks, sizeof *descs);
    ckpt_status s = descs ? ckpt_save_begin(a->dst, &o, &txn, &err)
                          : ck_fail(&err, CKPT_E_NOMEM, "out of memory");
    uint64_t bytes = 0;
    for (uint32_t k = 0; s == CKPT_OK && k < a->ranks; k++)
        s = write_rank(r, a, ckpt_save_txn_staging_dir(txn), k, &o, &descs[k], &bytes, &err);
    if (s == CKPT_OK)
        s = ckpt_save_commit(txn, (const ckpt_save_desc *const *)descs, a->ranks, &err);
    for (uint32_t k = 0; descs && k < a->ranks; k++)
        ckpt_save_desc_free(descs[k]);
    free(descs);
    ckpt_save_txn_free(txn); /* removes the staging directory unless committed */
    ckpt_reader_free(r);
    if (s != CKPT_OK) {
        cli_error("%s", err.message[0] ? err.message : ckpt_strerror(s));
        return CLI_EXIT_FAIL;
    }
    if (!a->quiet) {
        char h[32];
        printf("wrote %s for %u ranks (layout dim%d) in one process: %s of tensors\n", a->dst,
               a->ranks, a->dim, cli_human_size(bytes, h, sizeof h));
    }
    return cli_flush_stdout() ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}

int cmd_reshard(int argc, char **argv) {
    cli_parser p;
    cli_parser_init(&p, "reshard", argc, argv);
    reshard_args a = {.budget = 1ull << 30};
    const char *arg;
    uint64_t v;
    for (int id;
         (id = cli_next(&p, reshard_opts, sizeof reshard_opts / sizeof *reshard_opts, &arg));) {
        switch (id) {
        case CLI_OPT_HELP: cmd_reshard_help(stdout); return cli_flush_stdout() ? 0 : CLI_EXIT_FAIL;
        case CLI_OPT_ERROR: return CLI_EXIT_USAGE;
        case CLI_OPT_OPERAND:
            if (!a.src)
                a.src = arg;
            else if (!a.dst)
                a.dst = arg;
            else
                return cli_usage_error("reshard", "too many arguments ('%s')", arg);
            break;
        case OPT_RANKS:
            if (!cli_parse_size(arg, &v) || v == 0 || v > (1u << 20))
                return cli_usage_error("reshard", "--ranks wants 1..1048576, not '%s'", arg);
            a.ranks = (uint32_t)v;
            break;
        case OPT_LAYOUT: {
            char *end;
            long d = strncmp(arg, "dim", 3) == 0 ? strtol(arg + 3, &end, 10) : -1;
            if (d < 0 || d >= CKPT_MAX_NDIM || *end || end == arg + 3)
                return cli_usage_error("reshard", "--layout wants dim0, dim1, ..., not '%s'", arg);
            a.dim = (int)d;
            break;
        }
        case OPT_BUDGET:
            if (!cli_parse_size(arg, &a.budget) || !a.budget)
                return cli_usage_error("reshard", "bad --budget '%s'", arg);
            break;
        case OPT_NO_FSYNC: a.no_fsync = true; break;
        case OPT_QUIET: a.quiet = true; break;
        case OPT_TORCH:
            if (reshard_parse_torch(arg, &a)) return CLI_EXIT_USAGE;
            break;
        }
    }
    if (!a.src || !a.dst) return cli_usage_error("reshard", "missing SRC_DIR or DST_DIR");
    cli_dir sd;
    if (!(a.src = cli_step_dir(a.src, &sd))) return CLI_EXIT_FAIL;
    if (under_mpirun()) {
#ifdef CKPT_WITH_MPI
        return reshard_mpi(&a);
#else
        cli_error("this ckpt is built without MPI: run it without mpirun (--ranks M)");
        return CLI_EXIT_USAGE;
#endif
    }
    if (!a.ranks) a.ranks = 1;
    return reshard_single(&a);
}
