/* cmd_load.c — `mpirun -np M ckpt load DIR --layout SPEC`: every rank loads its DTensor local
 * shard (a device mesh and placements, `2x2:S0s2,S0`; `dimD` is Shard(D) over the M ranks) of
 * every tensor (or of --keys; per key with --layout-map) with the collective loader (each stored
 * byte read once across the job), prints the job's counters, and with --dump writes each rank's
 * local shards as raw files OUTDIR/rank<k>/<path> for validation; with --device cuda the buffers
 * are device memory (CUDA builds), and --transport picks MPI or NCCL between ranks.  Built when MPI
 * is found. */
#include "ckpt_load_mpi.h"
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#ifdef CKPT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif
#include <string.h>
#include <sys/stat.h>
#include <sys/mman.h>

void cmd_load_help(FILE *out) {
    fputs("Usage: mpirun -np M ckpt load [options] CHECKPOINT_DIR\n"
          "\n"
          "Load the checkpoint into a new layout across the M ranks of an MPI job: rank k\n"
          "gets the local shard DTensor gives it (distribute_tensor(..., src_data_rank=None)\n"
          ".to_local(), ranks row-major on the mesh) of every tensor, every needed stored\n"
          "byte being read from storage once across the job and sent to the ranks that need\n"
          "it.  Prints the counters; a one-rank run works without mpirun.\n"
          "\n"
          "Options:\n"
          "      --layout SPEC   mesh sizes joined by 'x', ':', one placement per mesh dim\n"
          "                      joined by ',': R, S<d> (Shard(d)) or S<d>s<k>\n"
          "                      (_StridedShard(d, split_factor=k)); the mesh has M ranks:\n"
          "                      2x2:S0s2,S0, 2x3:R,S0, 8:S0.  dimD (default dim0) is M:SD.\n"
          "                      A tensor without dim d is replicated along that mesh dim\n"
          "      --layout-map F  per-key specs from JSON file F: {\"*\": SPEC (default: the\n"
          "                      --layout), \"KEY or PATH or DIR\": SPEC, ...}; the longest\n"
          "                      matching key, path or directory wins\n"
          "      --keys A,B,...  only these entries (flat keys or tree paths) or directories\n"
          "      --mode M        collective (default) or independent (every rank reads its\n"
          "                      own overlaps: the baseline)\n"
          "      --budget BYTES  staging memory per rank (default 256M)\n"
          "      --direct-min B  runs of at least B bytes (default 4K; 'never') that one\n"
          "                      rank alone needs are read by it straight into place\n"
          "      --io-threads N  threads reading each rank's ranges in parallel (default: the\n"
          "                      rank's CPUs, shared among the ranks of the node bound to the\n"
          "                      same CPUs, 2 to 16)\n"
          "      --io-piece B    split long reads into pieces of B bytes (default 4M)\n"
          "      --dump OUTDIR   write rank k's shards to OUTDIR/rank<k>/<path>\n"
          "      --json          counters of every rank as JSON (rank 0 prints)\n"
          "      --device cuda   load into GPU memory (CUDA builds): rank k uses device\n"
          "                      k % (number of devices); --dump copies back to the host\n"
          "      --transport T   auto (default), mpi or nccl: how shared bytes travel between\n"
          "                      ranks; nccl (builds with NCCL, --device cuda) moves them\n"
          "                      device to device; auto picks it when every rank loads into\n"
          "                      device memory and NCCL can start, MPI otherwise\n"
          "  -q, --quiet         print nothing on success\n"
          "      --help          show this help\n",
          out);
}

enum {
    OPT_LAYOUT = 1,
    OPT_KEYS,
    OPT_MODE,
    OPT_BUDGET,
    OPT_DUMP,
    OPT_JSON,
    OPT_DEVICE,
    OPT_QUIET,
    OPT_DIRECT_MIN,
    OPT_IO_THREADS,
    OPT_IO_PIECE,
    OPT_TRANSPORT,
    OPT_LAYOUT_MAP
};
static const cli_opt load_opts[] = {
    {"layout", 0, true, OPT_LAYOUT},
    {"layout-map", 0, true, OPT_LAYOUT_MAP},
    {"keys", 0, true, OPT_KEYS},
    {"mode", 0, true, OPT_MODE},
    {"budget", 0, true, OPT_BUDGET},
    {"dump", 0, true, OPT_DUMP},
    {"json", 0, false, OPT_JSON},
    {"device", 0, true, OPT_DEVICE},
    {"quiet", 'q', false, OPT_QUIET},
    {"direct-min", 0, true, OPT_DIRECT_MIN},
    {"io-threads", 0, true, OPT_IO_THREADS},
    {"io-piece", 0, true, OPT_IO_PIECE},
    {"transport", 0, true, OPT_TRANSPORT},
};

static bool selected(const ckpt_entry *e, const char *keys) {
    if (!keys) return true;
    const char *p = keys;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        const char *path = ckpt_entry_path(e), *key = ckpt_entry_key(e);
        if ((strlen(key) == n && strncmp(key, p, n) == 0) ||
            (strncmp(path, p, n) == 0 && (path[n] == '\0' || path[n] == '/')))
            return true;
        p += n + (comma ? 1 : 0);
    }
    return false;
}

static int mkdirs(char *path) { /* mkdir -p of the directory part of path */
    for (char *s = strchr(path + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        int r = mkdir(path, 0755);
        *s = '/';
        if (r != 0 && errno != EEXIST) return -1;
    }
    return 0;
}

#define HUGE_PAGE ((size_t)2 << 20)

/* Buffers in host or device memory (device only in CUDA builds). */
static void *buf_alloc(size_t n, bool cuda) {
#ifdef CKPT_WITH_CUDA
    if (cuda) {
        void *p = NULL;
        return cudaMalloc(&p, n ? n : 1) == cudaSuccess ? p : NULL;
    }
#endif
    (void)cuda;
    /* large host buffers on transparent huge pages where the kernel has them (THP's default
     * "madvise" mode): filling a tensor then costs a fault per 2 MiB, not per 4 KiB */
    void *p = NULL;
    if (n < HUGE_PAGE) return malloc(n ? n : 1);
    if (posix_memalign(&p, HUGE_PAGE, n) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, n & ~(HUGE_PAGE - 1), MADV_HUGEPAGE);
#endif
    return p;
}
static void buf_free(void *p, bool cuda) {
#ifdef CKPT_WITH_CUDA
    if (cuda) {
        if (p) cudaFree(p);
        return;
    }
#endif
    (void)cuda;
    free(p);
}
/* The host bytes of a buffer: itself, or a copy of the device buffer in `tmp`. */
static const uint8_t *buf_host(const uint8_t *p, size_t n, bool cuda, uint8_t **tmp) {
    *tmp = NULL;
#ifdef CKPT_WITH_CUDA
    if (cuda) {
        *tmp = malloc(n ? n : 1);
        if (*tmp && cudaMemcpy(*tmp, p, n, cudaMemcpyDeviceToHost) != cudaSuccess) {
            free(*tmp);
            *tmp = NULL;
        }
        return *tmp;
    }
#endif
    (void)n;
    (void)cuda;
    return p;
}

/* --device cuda: rank k takes device k % ndev.  Every rank returns the same verdict. */
static int pick_device(bool cuda, int rank) {
    int bad = 0, anybad = 0;
#ifdef CKPT_WITH_CUDA
    if (cuda) {
        int ndev = 0;
        cudaError_t e = cudaGetDeviceCount(&ndev);
        if (e == cudaSuccess && ndev > 0) e = cudaSetDevice(rank % ndev);
        if (e != cudaSuccess || ndev <= 0) {
            cli_error("--device cuda: rank %d: no usable CUDA device (%s)", rank,
                      e != cudaSuccess ? cudaGetErrorString(e) : "none found");
            bad = 1;
        }
    }
#endif
    (void)cuda;
    (void)rank;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return anybad ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}

/* --layout: `dimD` is Shard(D) over the job's ranks; anything else is a spec of exactly as many
 * ranks as the job (ckpt_layout_parse). */
static int layout_arg(const char *what, const char *arg, int size, ckpt_layout *out) {
    char spec[CKPT_LAYOUT_SPEC_MAX + 32];
    const char *text = arg;
    if (strncmp(arg, "dim", 3) == 0 && !strchr(arg, '-')) {
        snprintf(spec, sizeof spec, "%d:S%s", size, arg + 3);
        text = spec;
    }
    ckpt_error err = {0};
    if (ckpt_layout_parse(text, out, &err) != CKPT_OK)
        return cli_usage_error("load", "%s '%s': %s", what, arg, err.message);
    if (ckpt_layout_nranks(out) != (uint32_t)size)
        return cli_usage_error("load", "%s '%s' has %u ranks but the job has %d", what, arg,
                               ckpt_layout_nranks(out), size);
    return CLI_EXIT_OK;
}

/* --layout-map FILE: a JSON object of key/path/directory -> spec; "*" replaces the default. */
static int layout_map_load(const char *file, int size, ckpt_layout_map **m, ckpt_layout *def) {
    FILE *f = fopen(file, "rb");
    if (!f) return cli_usage_error("load", "--layout-map %s: %s", file, strerror(errno));
    char *text = malloc(CKPT_LAYOUT_MAP_MAX_BYTES + 1);
    size_t len = text ? fread(text, 1, CKPT_LAYOUT_MAP_MAX_BYTES + 1, f) : 0;
    fclose(f);
    if (!text || len > CKPT_LAYOUT_MAP_MAX_BYTES) {
        free(text);
        return cli_usage_error("load", "--layout-map %s: %s", file,
                               text ? "larger than 64 MiB" : "out of memory");
    }
    ckpt_error err = {0};
    ckpt_status st = ckpt_layout_map_parse(text, len, (uint32_t)size, m, &err);
    free(text);
    if (st != CKPT_OK) return cli_usage_error("load", "--layout-map %s: %s", file, err.message);
    if (ckpt_layout_map_default(*m)) *def = *ckpt_layout_map_default(*m);
    return CLI_EXIT_OK;
}

typedef struct buf {
    const ckpt_entry *e;
    uint8_t *data;
    size_t size;
} buf;

static int run(int argc, char **argv, int rank, int size) {
    cli_parser p;
    cli_parser_init(&p, "load", argc, argv);
    const char *dir = NULL, *keys = NULL, *dump = NULL, *arg, *layout_text = "dim0",
               *map_file = NULL;
    bool json = false, quiet = false, cuda = false;
    ckpt_load_options o = {0};
    for (int id; (id = cli_next(&p, load_opts, sizeof load_opts / sizeof *load_opts, &arg));) {
        switch (id) {
        case CLI_OPT_HELP:
            if (rank == 0) cmd_load_help(stdout);
            return 0;
        case CLI_OPT_ERROR: return CLI_EXIT_USAGE;
        case CLI_OPT_OPERAND:
            if (dir) return cli_usage_error("load", "too many arguments ('%s')", arg);
            dir = arg;
            break;
        case OPT_LAYOUT: layout_text = arg; break;
        case OPT_LAYOUT_MAP: map_file = arg; break;
        case OPT_KEYS: keys = arg; break;
        case OPT_MODE:
            if (strcmp(arg, "collective") == 0)
                o.mode = CKPT_LOAD_COLLECTIVE;
            else if (strcmp(arg, "independent") == 0)
                o.mode = CKPT_LOAD_INDEPENDENT;
            else
                return cli_usage_error("load", "--mode wants collective or independent");
            break;
        case OPT_BUDGET:
            if (!cli_parse_size(arg, &o.staging_bytes))
                return cli_usage_error("load", "bad --budget '%s'", arg);
            break;
        case OPT_DUMP: dump = arg; break;
        case OPT_DIRECT_MIN:
            if (strcmp(arg, "never") == 0)
                o.direct_min_bytes = UINT64_MAX;
            else if (!cli_parse_size(arg, &o.direct_min_bytes) || !o.direct_min_bytes)
                return cli_usage_error("load", "bad --direct-min '%s'", arg);
            break;
        case OPT_IO_THREADS: {
            char *end;
            long t = strtol(arg, &end, 10);
            if (*end || end == arg || t < 1 || t > 64)
                return cli_usage_error("load", "--io-threads wants 1 to 64, not '%s'", arg);
            o.io_threads = (unsigned)t;
            break;
        }
        case OPT_IO_PIECE:
            if (!cli_parse_size(arg, &o.io_piece_bytes) || !o.io_piece_bytes)
                return cli_usage_error("load", "bad --io-piece '%s'", arg);
            break;
        case OPT_TRANSPORT:
            if (strcmp(arg, "auto") == 0)
                o.transport = CKPT_LOAD_TRANSPORT_AUTO;
            else if (strcmp(arg, "mpi") == 0)
                o.transport = CKPT_LOAD_TRANSPORT_MPI;
            else if (strcmp(arg, "nccl") == 0)
                o.transport = CKPT_LOAD_TRANSPORT_NCCL;
            else
                return cli_usage_error("load", "--transport wants auto, mpi or nccl, not '%s'",
                                       arg);
            break;
        case OPT_JSON: json = true; break;
        case OPT_DEVICE:
            if (strcmp(arg, "cuda") == 0 && ckpt_load_has_cuda()) {
                cuda = true;
            } else if (strcmp(arg, "cpu") != 0) {
                if (strcmp(arg, "cuda") == 0)
                    cli_error("--device cuda: this ckpt is built without CUDA device support");
                else
                    cli_error("--device wants cpu or cuda, not '%s'", arg);
                return CLI_EXIT_USAGE;
            }
            break;
        case OPT_QUIET: quiet = true; break;
        }
    }
    if (!dir) return cli_usage_error("load", "missing CHECKPOINT_DIR");
    cli_dir dd;
    if (!(dir = cli_step_dir(dir, &dd))) return CLI_EXIT_FAIL;
    ckpt_layout def;
    ckpt_layout_map *map = NULL;
    int rc = layout_arg("--layout", layout_text, size, &def);
    if (rc == CLI_EXIT_OK && map_file) rc = layout_map_load(map_file, size, &map, &def);
    if (rc != CLI_EXIT_OK) {
        ckpt_layout_map_free(map);
        return rc;
    }
    char spec_text[CKPT_LAYOUT_SPEC_MAX];
    ckpt_layout_format(&def, spec_text, sizeof spec_text);
    ckpt_load *l = NULL;
    ckpt_error err = {0};
    if (pick_device(cuda, rank) != CLI_EXIT_OK ||
        ckpt_load_open(MPI_COMM_WORLD, dir, NULL, &l, &err) != CKPT_OK) {
        if (rank == 0 && err.code) cli_error("%s", err.message);
        ckpt_layout_map_free(map);
        return CLI_EXIT_FAIL;
    }
    ckpt_reader *r = ckpt_load_reader(l);
    size_t n = ckpt_reader_num_entries(r), nb = 0;
    buf *bufs = calloc(n ? n : 1, sizeof *bufs);
    int status = bufs ? CLI_EXIT_OK : CLI_EXIT_FAIL;
    for (size_t i = 0; status == CLI_EXIT_OK && i < n; i++) {
        const ckpt_entry *e = ckpt_reader_entry(r, i);
        if (ckpt_entry_kind_of(e) != CKPT_ENTRY_TENSOR || !selected(e, keys)) continue;
        const ckpt_layout *lay = ckpt_layout_map_find(map, e, &def);
        uint32_t coord[CKPT_LAYOUT_MAX_MESH_NDIM];
        ckpt_layout_shard *sh = NULL;
        if (ckpt_layout_coord(lay, (uint32_t)rank, coord) != CKPT_OK ||
            ckpt_layout_shard_new(lay, ckpt_entry_ndim(e), ckpt_entry_shape(e), coord, &sh, &err) !=
                CKPT_OK) {
            cli_error("%s: %s", ckpt_entry_key(e), err.message);
            status = CLI_EXIT_FAIL;
            break;
        }
        size_t bytes = ckpt_dtype_itemsize(ckpt_entry_dtype(e)) * ckpt_layout_shard_numel(sh);
        ckpt_layout_shard_free(sh);
        bufs[nb] = (buf){e, buf_alloc(bytes, cuda), bytes};
        if (!bufs[nb].data ||
            ckpt_load_request_layout(l, ckpt_entry_key(e), lay, coord, bufs[nb].data, bytes,
                                     cuda ? CKPT_LOAD_MEM_CUDA : CKPT_LOAD_MEM_HOST,
                                     &err) != CKPT_OK) {
            cli_error("%s", bufs[nb].data ? err.message : "out of memory");
            status = CLI_EXIT_FAIL;
        }
        nb++;
    }
    /* every rank must reach execute: a local failure becomes a no-request participation */
    int bad = status != CLI_EXIT_OK, anybad = 0;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (!anybad && ckpt_load_execute(l, &o, &err) != CKPT_OK) {
        if (rank == 0) cli_error("%s", err.message);
        status = CLI_EXIT_FAIL;
    } else if (anybad) {
        status = CLI_EXIT_FAIL;
    }
    ckpt_load_stats st;
    ckpt_load_get_stats(l, &st, sizeof st);
    if (status == CLI_EXIT_OK && dump) {
        for (size_t i = 0; i < nb; i++) {
            char path[8192];
            snprintf(path, sizeof path, "%s/rank%d/%s", dump, rank, ckpt_entry_path(bufs[i].e));
            uint8_t *tmp;
            const uint8_t *host = buf_host(bufs[i].data, bufs[i].size, cuda, &tmp);
            FILE *f = host && mkdirs(path) == 0 ? fopen(path, "wb") : NULL;
            if (!f || fwrite(host, 1, bufs[i].size, f) != bufs[i].size) {
                cli_error("%s: %s", path, host ? strerror(errno) : "cannot copy from the device");
                status = CLI_EXIT_FAIL;
            }
            if (f && fclose(f) != 0) status = CLI_EXIT_FAIL;
            free(tmp);
        }
    }
    ckpt_load_stats *all = rank == 0 ? calloc((size_t)size, sizeof *all) : NULL;
    MPI_Gather(&st, (int)sizeof st, MPI_BYTE, all, (int)sizeof st, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rank == 0 && all && !quiet && status == CLI_EXIT_OK) {
        ckpt_load_stats sum = {0};
        double wall = 0;
        for (int k = 0; k < size; k++) {
            sum.bytes_requested += all[k].bytes_requested;
            sum.bytes_read += all[k].bytes_read;
            sum.bytes_read_metadata += all[k].bytes_read_metadata;
            sum.bytes_sent += all[k].bytes_sent;
            sum.bytes_local += all[k].bytes_local;
            if (all[k].seconds_total > wall) wall = all[k].seconds_total;
        }
        if (json) {
            printf("{\"ranks\": %d, \"union_bytes\": %llu, \"wall_seconds\": %.6f, \"per_rank\": [",
                   size, (unsigned long long)all[0].union_bytes, wall);
            for (int k = 0; k < size; k++)
                printf("%s{\"requested\": %llu, \"read\": %llu, \"sent\": %llu, \"received\": "
                       "%llu, \"local\": %llu, \"device\": %llu, \"rounds\": %u, \"plan_s\": %.6f, "
                       "\"read_s\": "
                       "%.6f, \"exchange_s\": %.6f, \"total_s\": %.6f, \"transport\": \"%s\", "
                       "\"sent_nccl\": %llu, \"received_nccl\": %llu, \"nccl_init_s\": %.6f, "
                       "\"io_threads\": %u, \"setup_s\": %.6f, \"preads\": %llu, \"read_plan\": "
                       "%llu, \"read_metadata\": %llu, \"plan_transfers\": %llu, "
                       "\"plan_ranges\": %llu, \"plan_rows\": %llu, \"plan_memory\": %llu, "
                       "\"received_metadata\": %llu, \"chunks_adopted\": %llu}",
                       k ? ", " : "", (unsigned long long)all[k].bytes_requested,
                       (unsigned long long)all[k].bytes_read, (unsigned long long)all[k].bytes_sent,
                       (unsigned long long)all[k].bytes_received,
                       (unsigned long long)all[k].bytes_local,
                       (unsigned long long)all[k].bytes_device, all[k].rounds, all[k].seconds_plan,
                       all[k].seconds_read, all[k].seconds_exchange, all[k].seconds_total,
                       all[k].transport == CKPT_LOAD_TRANSPORT_NCCL ? "nccl" : "mpi",
                       (unsigned long long)all[k].bytes_sent_nccl,
                       (unsigned long long)all[k].bytes_received_nccl, all[k].seconds_nccl_init,
                       all[k].io_threads, all[k].seconds_setup, (unsigned long long)all[k].preads,
                       (unsigned long long)all[k].bytes_read_plan,
                       (unsigned long long)all[k].bytes_read_metadata,
                       (unsigned long long)all[k].plan_transfers,
                       (unsigned long long)all[k].plan_ranges, (unsigned long long)all[k].plan_rows,
                       (unsigned long long)all[k].plan_memory,
                       (unsigned long long)all[k].bytes_received_metadata,
                       (unsigned long long)all[k].chunks_adopted);
            printf("]}\n");
        } else {
            char a[32], b[32], c[32], d[32], e[32];
            printf("loaded %s into %d ranks (layout %s, %s) in %.3f s: read %s from storage "
                   "(needed %s once; metadata %s), sent %s between ranks%s\n",
                   cli_human_size(sum.bytes_requested, a, sizeof a), size,
                   map_file ? "per key" : spec_text,
                   o.mode == CKPT_LOAD_INDEPENDENT ? "independent" : "collective", wall,
                   cli_human_size(sum.bytes_read, b, sizeof b),
                   cli_human_size(all[0].union_bytes, c, sizeof c),
                   cli_human_size(sum.bytes_read_metadata, e, sizeof e),
                   cli_human_size(sum.bytes_sent, d, sizeof d),
                   all[0].transport == CKPT_LOAD_TRANSPORT_NCCL ? " over NCCL" : "");
        }
        fflush(stdout);
    }
    free(all);
    for (size_t i = 0; i < nb; i++)
        buf_free(bufs[i].data, cuda);
    free(bufs);
    ckpt_load_free(l);
    ckpt_layout_map_free(map);
    return status;
}

int cmd_load(int argc, char **argv) {
    int provided;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int status = run(argc, argv, rank, size);
    /* the job's exit status: the worst rank's */
    int worst = status;
    MPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return worst;
}
