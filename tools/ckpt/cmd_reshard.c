/* cmd_reshard.c — `ckpt reshard SRC DST [--ranks M] [--layout SPEC] [--layout-map F]`:
 * rewrite a checkpoint laid out for M ranks (each rank's file: the run boxes of its DTensor
 * local shard of every tensor under a mesh layout, replicas once, values once) with the
 * saver.  This file parses the options and holds the single-process writer (one data file
 * per target rank, one box in memory at a time); under mpirun (MPI builds) each rank loads its
 * share with the collective loader and saves it with the collective saver
 * (cmd_reshard_mpi.c). */
#include "cli.h"
#include "reshard.h"

#include <stdlib.h>
#include <string.h>

void cmd_reshard_help(FILE *out) {
    fputs("Usage: ckpt reshard [options] SRC_DIR DST_DIR\n"
          "       mpirun -np M ckpt reshard [options] SRC_DIR DST_DIR\n"
          "\n"
          "Write a new checkpoint DST_DIR (which must not exist) holding the same entries as\n"
          "SRC_DIR, laid out for M ranks: rank k's file holds the DTensor local shard of\n"
          "every tensor that rank k has under --layout (distribute_tensor(..., src_data_rank=\n"
          "None).to_local(), ranks row-major on the mesh, as `ckpt load` and the mount's\n"
          ".layout/), one chunk per box of it (a _StridedShard shard may be several);\n"
          "a replica is stored once, by the lowest rank holding it, and the non-tensor\n"
          "values once, in rank 0's file.\n"
          "The result is committed atomically (hidden staging directory, .metadata last,\n"
          "rename).  Alone, one process writes the M files; under mpirun each rank loads its\n"
          "share with the collective loader (each stored byte read once) and saves it.\n"
          "Non-tensor values are copied byte for byte from their stored items; items\n"
          "stored through a stream transform (zstd) are decoded and pickled again, and\n"
          "an object of another class or an embedded tensor inside one is an error.\n"
          "\n"
          "Options:\n"
          "      --ranks M       target ranks (default: the --layout spec's, the MPI\n"
          "                      world size, or 1)\n"
          "      --layout SPEC   mesh sizes joined by 'x', ':', one placement per mesh dim\n"
          "                      joined by ',': R, S<d> (Shard(d)) or S<d>s<k>\n"
          "                      (_StridedShard(d, split_factor=k)): 2x2:S0s2,S0, 2x3:R,S0,\n"
          "                      8:S0.  dimD (default dim0) is M:SD.  A tensor without\n"
          "                      dim d is replicated along that mesh dim\n"
          "      --layout-map F  per-key specs from JSON file F, as `ckpt load`'s:\n"
          "                      {\"*\": SPEC (default: the --layout), \"KEY or PATH or\n"
          "                      DIR\": SPEC, ...}; the longest matching one wins.  Needs\n"
          "                      --ranks M, a --layout spec or mpirun for M\n"
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

enum { OPT_RANKS = 1, OPT_LAYOUT, OPT_LAYOUT_MAP, OPT_BUDGET, OPT_NO_FSYNC, OPT_QUIET, OPT_TORCH };
static const cli_opt reshard_opts[] = {
    {"ranks", 0, true, OPT_RANKS},           {"layout", 0, true, OPT_LAYOUT},
    {"layout-map", 0, true, OPT_LAYOUT_MAP}, {"budget", 0, true, OPT_BUDGET},
    {"no-fsync", 0, false, OPT_NO_FSYNC},    {"quiet", 'q', false, OPT_QUIET},
    {"torch", 0, true, OPT_TORCH},
};

static bool under_mpirun(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

/* Rank k's data file: its box of every tensor, and (k = 0) every value. */
static ckpt_status write_rank(ckpt_reader *r, const reshard_args *a, const char *staging,
                              uint32_t k, const ckpt_save_options *o, ckpt_save_desc **desc,
                              uint64_t *bytes, ckpt_error *err) {
    ckpt_save_file *f;
    CLI_TRY(ckpt_save_file_open(staging, k, o, &f, err));
    ckpt_status s = CKPT_OK;
    size_t n = ckpt_reader_num_entries(r);
    /* entries in the source's order (the new .metadata keeps it), values in rank 0's file */
    for (size_t i = 0; s == CKPT_OK && i < n; i++) {
        const ckpt_entry *e = ckpt_reader_entry(r, i);
        bool tensor = ckpt_entry_kind_of(e) == CKPT_ENTRY_TENSOR;
        reshard_share sh = {0};
        if (tensor) s = reshard_share_of(a, e, k, &sh, err);
        if (s != CKPT_OK) break;
        /* values are stored once (rank 0); a tensor by the ranks its share names */
        if ((!tensor && k != 0) || (tensor && !sh.nboxes)) {
            reshard_share_release(&sh);
            continue;
        }
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
        }
        /* one chunk per run box of the shard (a _StridedShard shard of several pieces is
         * several chunks), one box in memory at a time */
        for (uint64_t b = 0; s == CKPT_OK && tensor && b < sh.nboxes; b++) {
            int64_t start[CKPT_MAX_NDIM] = {0}, count[CKPT_MAX_NDIM] = {0};
            uint64_t nb = 0;
            reshard_share_box(&sh, b, start, count, &nb);
            void *buf = nb <= SIZE_MAX ? malloc(nb ? (size_t)nb : 1) : NULL;
            if (!buf) s = cli_fail(err, CKPT_E_NOMEM, "key '%s': out of memory", key.flat);
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
        reshard_share_release(&sh);
        free(elems);
    }
    if (s == CKPT_OK) s = ckpt_save_file_finish(f, desc, err);
    ckpt_save_file_free(f);
    return s;
}

static int reshard_single(reshard_args *a) {
    int rc = reshard_layouts(a, a->ranks, true);
    if (rc != CLI_EXIT_OK) return rc;
    ckpt_reader *r = cli_open(a->src);
    if (!r) {
        ckpt_layout_map_free(a->map);
        return CLI_EXIT_FAIL;
    }
    reshard_note_torch(r, a);
    ckpt_save_options o = {.no_fsync = a->no_fsync,
                           .tensor_properties_strides = a->strides,
                           .torch_target = a->torch_target};
    ckpt_error err = {0};
    ckpt_save_txn *txn = NULL;
    ckpt_save_desc **descs = calloc(a->ranks, sizeof *descs);
    ckpt_status s = descs ? ckpt_save_begin(a->dst, &o, &txn, &err)
                          : cli_fail(&err, CKPT_E_NOMEM, "out of memory");
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
    char desc[CKPT_LAYOUT_SPEC_MAX + 4096];
    reshard_layout_desc(a, desc, sizeof desc);
    ckpt_layout_map_free(a->map);
    a->map = NULL;
    if (s != CKPT_OK) {
        cli_error("%s", err.message[0] ? err.message : ckpt_strerror(s));
        return CLI_EXIT_FAIL;
    }
    if (!a->quiet) {
        char h[32];
        printf("wrote %s for %u ranks (layout %s) in one process: %s of tensors\n", a->dst,
               a->ranks, desc, cli_human_size(bytes, h, sizeof h));
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
        case OPT_LAYOUT: a.layout_text = arg; break;
        case OPT_LAYOUT_MAP: a.map_file = arg; break;
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
    a.ranks = reshard_nranks(&a, 1);
    return reshard_single(&a);
}
