/* cmd_cat.c — `ckpt cat`: a tensor's raw C-order little-endian bytes (read in bounded blocks,
 * so memory stays small for any tensor size), optionally a `--slice` of it; `--text` prints
 * the values like numpy (nested brackets, summarised with `...` above 1000 elements) and
 * `--json` as nested JSON arrays.  Non-tensor entries print their Python-like rendering (or
 * JSON with --json). */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cmd_cat_help(FILE *out) {
    fputs("Usage: ckpt cat [options] CHECKPOINT_DIR KEY\n"
          "\n"
          "Write entry KEY (a flat key such as 'model.layers.0.weight' or a tree path such as\n"
          "'model/layers.0.weight') to standard output.  A tensor is written as its raw bytes\n"
          "in C order, little-endian (readable with numpy.fromfile); an object (a pickled\n"
          "Python value) is printed as a Python-like literal.\n"
          "\n"
          "Options:\n"
          "  -s, --slice SLICE   select a region with Python slice syntax, one item per\n"
          "                      dimension: 'START:STOP', ':', a single index (which drops\n"
          "                      the dimension, as in numpy), or '...'; negative values count\n"
          "                      from the end; steps are not supported.  E.g. '0:4,:' or\n"
          "                      '-1' or '...,2:'\n"
          "  -t, --text          print the values as text like numpy ([[1.0, 2.5], ...]);\n"
          "                      more than 1000 elements are summarised with '...'\n"
          "      --json          print the values as nested JSON arrays (never summarised);\n"
          "                      objects: their JSON rendering\n"
          "  -v, --verbose       print a '# KEY: DTYPE [SHAPE]' header first (to stderr for\n"
          "                      raw output)\n"
          "  -f, --force         write raw bytes even when stdout is a terminal\n"
          "      --block-size N  read raw output in blocks of at most N bytes (default 1M;\n"
          "                      K/M/G suffixes)\n"
          "      --max-memory N  decode an object within N bytes (default 1G; K/M/G\n"
          "                      suffixes; 0: only the reader's limits)\n"
          "      --key           KEY is a flat key only (never a tree path)\n"
          "      --path          KEY is a tree path only, as `ckpt ls` prints it; without\n"
          "                      either, a KEY that is one entry's key and another's path\n"
          "                      is refused as ambiguous\n"
          "      --help          show this help\n",
          out);
}

enum {
    OPT_SLICE = 1,
    OPT_TEXT,
    OPT_JSON,
    OPT_VERBOSE,
    OPT_FORCE,
    OPT_BLOCK,
    OPT_KEY,
    OPT_PATH,
    OPT_MAX_MEMORY
};

static const cli_opt cat_opts[] = {
    {"slice", 's', true, OPT_SLICE},
    {"text", 't', false, OPT_TEXT},
    {"json", 0, false, OPT_JSON},
    {"verbose", 'v', false, OPT_VERBOSE},
    {"force", 'f', false, OPT_FORCE},
    {"block-size", 0, true, OPT_BLOCK},
    {"key", 0, false, OPT_KEY},
    {"path", 0, false, OPT_PATH},
    {"max-memory", 0, true, OPT_MAX_MEMORY},
};

/* Small blocks stay in the CPU caches and avoid faulting in a large fresh buffer: measured
 * here (docs/benchmarks.md), 1 MiB blocks stream 3x faster than 64 MiB blocks. */
#define DEFAULT_BLOCK ((uint64_t)1 << 20)
/* What decoding an object may take (a small pickle can decode into far more). */
#define DEFAULT_MAX_MEMORY ((uint64_t)1 << 30)
/* --text/--json hold the (summarised) values in memory: bound it. */
#define MAX_TEXT_BYTES ((uint64_t)1 << 30)
#define EDGE_ITEMS 3
#define SUMMARY_THRESHOLD 1000

static uint64_t sat_mul(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static int read_fail(const ckpt_error *err) {
    cli_error("%s", err->message[0] ? err->message : ckpt_strerror(err->code));
    return CLI_EXIT_FAIL;
}

/* ------------------------------------------------------------------ raw bytes */

static bool write_block(void *ctx, const void *buf, size_t len) {
    (void)ctx;
    return cli_write_all(STDOUT_FILENO, buf, len);
}

static int cat_raw(ckpt_reader *r, const ckpt_entry *e, const cli_slice *s, uint64_t limit) {
    ckpt_error err = {0};
    ckpt_status st = cli_read_blocks(r, e, s, limit, write_block, NULL, "standard output", &err);
    if (st != CKPT_OK) return read_fail(&err);
    return CLI_EXIT_OK;
}

/* ------------------------------------------------------------------ values as text */

/* The values to print: the slice's result dims (dropped dims removed), each either whole or,
 * when summarising, cut to its first and last EDGE_ITEMS indices. */
typedef struct view {
    ckpt_dtype dt;
    size_t item;
    int nd;                         /* result dims */
    int src[CKPT_MAX_NDIM];         /* source dim of result dim j */
    int64_t n[CKPT_MAX_NDIM];       /* result shape */
    int64_t m[CKPT_MAX_NDIM];       /* kept indices per dim (n, or 2*EDGE_ITEMS) */
    uint64_t stride[CKPT_MAX_NDIM]; /* bytes per index step in `data` */
    unsigned char *data;            /* the kept values, C order over m[] */
    bool json;
    FILE *out;
} view;

static void put_elem(const view *v, const unsigned char *p) {
    char buf[128];
    ckpt_elem_format(v->dt, p, v->json ? CKPT_ELEM_JSON : 0, buf, sizeof buf);
    fputs(buf, v->out);
}

static void put_sep(const view *v, int j) {
    if (j == v->nd - 1) {
        fputs(", ", v->out);
        return;
    }
    fputs(",\n", v->out);
    for (int k = 0; k < v->nd - j - 2; k++)
        fputc('\n', v->out);
    for (int k = 0; k <= j; k++)
        fputc(' ', v->out);
}

static void put_array(const view *v, int j, const unsigned char *p) {
    fputc('[', v->out);
    bool cut = v->m[j] != v->n[j];
    for (int64_t t = 0; t < v->m[j]; t++) {
        if (t) put_sep(v, j);
        if (cut && t == EDGE_ITEMS) {
            fputs("...", v->out);
            put_sep(v, j);
        }
        const unsigned char *q = p + (uint64_t)t * v->stride[j];
        if (j == v->nd - 1)
            put_elem(v, q);
        else
            put_array(v, j + 1, q);
    }
    fputc(']', v->out);
}

/* Reads the kept values into v->data. */
static ckpt_status load_view(ckpt_reader *r, const ckpt_entry *e, const cli_slice *s, view *v,
                             ckpt_error *err) {
    uint64_t total = v->item;
    for (int j = v->nd - 1; j >= 0; j--) {
        v->stride[j] = total;
        total = sat_mul(total, (uint64_t)v->m[j]);
    }
    if (total > MAX_TEXT_BYTES) {
        snprintf(err->message, sizeof err->message,
                 "'%s': %llu bytes of values are too many to print; select less with --slice",
                 ckpt_entry_key(e), (unsigned long long)total);
        return err->code = CKPT_E_LIMIT;
    }
    v->data = malloc(total ? total : 1);
    if (!v->data) {
        snprintf(err->message, sizeof err->message, "out of memory");
        return err->code = CKPT_E_NOMEM;
    }
    for (int j = 0; j < v->nd; j++)
        if (v->n[j] == 0) return CKPT_OK; /* nothing to read */
    bool cut = false;
    for (int j = 0; j < v->nd; j++)
        cut |= v->m[j] != v->n[j];
    if (!cut) {
        if (v->nd == 0 && s->ndim == 0)
            return ckpt_read_region(r, e, NULL, NULL, v->data, total, err);
        return ckpt_read_region(r, e, s->start, s->count, v->data, total, err);
    }
    /* summarised: one box per head/tail combination of the cut dims */
    int cutdims[CKPT_MAX_NDIM], ncut = 0;
    for (int j = 0; j < v->nd; j++)
        if (v->m[j] != v->n[j]) cutdims[ncut++] = j;
    size_t boxmax = v->item;
    for (int j = 0; j < v->nd; j++)
        boxmax *= (size_t)(v->m[j] != v->n[j] ? EDGE_ITEMS : v->m[j]);
    unsigned char *box = malloc(boxmax);
    if (!box) {
        snprintf(err->message, sizeof err->message, "out of memory");
        return err->code = CKPT_E_NOMEM;
    }
    ckpt_status st = CKPT_OK;
    for (uint64_t mask = 0; mask < ((uint64_t)1 << ncut) && st == CKPT_OK; mask++) {
        int64_t start[CKPT_MAX_NDIM], count[CKPT_MAX_NDIM];
        int64_t lo[CKPT_MAX_NDIM], dst0[CKPT_MAX_NDIM];
        memcpy(start, s->start, sizeof start);
        memcpy(count, s->count, sizeof count);
        for (int j = 0, c = 0; j < v->nd; j++) {
            int d = v->src[j];
            lo[j] = 0, dst0[j] = 0;
            if (c < ncut && cutdims[c] == j) {
                bool tail = (mask >> c) & 1;
                lo[j] = tail ? v->n[j] - EDGE_ITEMS : 0;
                dst0[j] = tail ? EDGE_ITEMS : 0;
                count[d] = EDGE_ITEMS;
                c++;
            }
            start[d] = s->start[d] + lo[j];
        }
        size_t bytes = v->item;
        for (int j = 0; j < v->nd; j++)
            bytes *= (size_t)count[v->src[j]];
        st = ckpt_read_region(r, e, start, count, box, bytes, err);
        if (st != CKPT_OK) break;
        /* scatter the box into data */
        int64_t idx[CKPT_MAX_NDIM] = {0};
        for (size_t at = 0; at < bytes; at += v->item) {
            uint64_t dst = 0;
            for (int j = 0; j < v->nd; j++)
                dst += (uint64_t)(dst0[j] + idx[j]) * v->stride[j];
            memcpy(v->data + dst, box + at, v->item);
            for (int j = v->nd - 1; j >= 0; j--) {
                if (++idx[j] < count[v->src[j]]) break;
                idx[j] = 0;
            }
        }
    }
    free(box);
    return st;
}

static int cat_values(ckpt_reader *r, const ckpt_entry *e, const cli_slice *s, bool json) {
    view v = {.dt = ckpt_entry_dtype(e), .json = json, .out = stdout};
    v.item = ckpt_dtype_itemsize(v.dt);
    ckpt_error err = {0};
    if (v.item == 0) {
        if (ckpt_read_region(r, e, s->start, s->count, NULL, 0, &err) != CKPT_OK)
            return read_fail(&err);
        cli_error("'%s': unsupported dtype", ckpt_entry_key(e));
        return CLI_EXIT_FAIL;
    }
    for (int d = 0; d < s->ndim; d++) {
        if (s->drop[d]) continue;
        v.src[v.nd] = d;
        v.n[v.nd] = s->count[d];
        v.m[v.nd] = s->count[d];
        v.nd++;
    }
    bool summarise = !json && cli_slice_numel(s) > SUMMARY_THRESHOLD;
    if (summarise)
        for (int j = 0; j < v.nd; j++)
            if (v.n[j] > 2 * EDGE_ITEMS) v.m[j] = 2 * EDGE_ITEMS;
    int status = CLI_EXIT_OK;
    if (load_view(r, e, s, &v, &err) != CKPT_OK) {
        status = read_fail(&err);
    } else {
        if (v.nd == 0)
            put_elem(&v, v.data);
        else
            put_array(&v, 0, v.data);
        fputc('\n', stdout);
        if (!cli_flush_stdout()) status = CLI_EXIT_FAIL;
    }
    free(v.data);
    return status;
}

/* ------------------------------------------------------------------ objects */

static int cat_object(ckpt_reader *r, const ckpt_entry *e, bool json, uint64_t max_memory) {
    ckpt_object *o = NULL;
    ckpt_error err = {0};
    ckpt_object_options oo = {.max_memory = max_memory};
    if (ckpt_object_load_with(r, e, &oo, &o, &err) != CKPT_OK) {
        int st = read_fail(&err);
        if (err.code == CKPT_E_LIMIT && max_memory) cli_error("raise --max-memory to read it");
        return st;
    }
    char *text = NULL;
    ckpt_status st = json ? ckpt_value_to_json(ckpt_object_root(o), &text, &err)
                          : ckpt_value_to_text(ckpt_object_root(o), &text, &err);
    int status = CLI_EXIT_OK;
    if (st != CKPT_OK) {
        cli_error("%s: %s", ckpt_entry_key(e), err.message[0] ? err.message : ckpt_strerror(st));
        status = CLI_EXIT_FAIL;
    } else {
        fputs(text, stdout);
        fputc('\n', stdout);
        if (!cli_flush_stdout()) status = CLI_EXIT_FAIL;
    }
    free(text);
    ckpt_object_free(o);
    return status;
}

/* ------------------------------------------------------------------ command */

static void header(FILE *out, const ckpt_entry *e, const cli_slice *s) {
    fputs("# ", out);
    fputs(ckpt_entry_key(e), out);
    if (ckpt_entry_kind_of(e) != CKPT_ENTRY_TENSOR) {
        fputs(": object\n", out);
        return;
    }
    int64_t shape[CKPT_MAX_NDIM];
    int nd = 0;
    for (int d = 0; d < s->ndim; d++)
        if (!s->drop[d]) shape[nd++] = s->count[d];
    char buf[64 * 24];
    fprintf(out, ": %s %s\n", ckpt_dtype_name(ckpt_entry_dtype(e)),
            cli_shape_str(nd, shape, buf, sizeof buf));
}

int cmd_cat(int argc, char **argv) {
    cli_parser p;
    cli_parser_init(&p, "cat", argc, argv);
    const char *slice = NULL, *operands[2] = {NULL, NULL}, *arg;
    bool text = false, json = false, verbose = false, force = false;
    uint64_t block = DEFAULT_BLOCK, max_memory = DEFAULT_MAX_MEMORY;
    cli_find_by by = CLI_BY_EITHER;
    int nops = 0;
    for (int id; (id = cli_next(&p, cat_opts, sizeof cat_opts / sizeof cat_opts[0], &arg));) {
        switch (id) {
        case CLI_OPT_HELP: cmd_cat_help(stdout); return cli_flush_stdout() ? 0 : CLI_EXIT_FAIL;
        case CLI_OPT_ERROR: return CLI_EXIT_USAGE;
        case CLI_OPT_OPERAND:
            if (nops == 2) return cli_usage_error("cat", "too many arguments ('%s')", arg);
            operands[nops++] = arg;
            break;
        case OPT_SLICE: slice = arg; break;
        case OPT_TEXT: text = true; break;
        case OPT_JSON: json = true; break;
        case OPT_VERBOSE: verbose = true; break;
        case OPT_FORCE: force = true; break;
        case OPT_KEY:
        case OPT_PATH:
            if (by != CLI_BY_EITHER)
                return cli_usage_error("cat", "--key and --path are exclusive");
            by = id == OPT_KEY ? CLI_BY_KEY : CLI_BY_PATH;
            break;
        case OPT_BLOCK:
            if (!cli_parse_size(arg, &block) || block == 0)
                return cli_usage_error("cat", "invalid --block-size '%s'", arg);
            break;
        case OPT_MAX_MEMORY:
            if (!cli_parse_size(arg, &max_memory))
                return cli_usage_error("cat", "invalid --max-memory '%s'", arg);
            break;
        }
    }
    if (nops < 2)
        return cli_usage_error("cat", nops ? "missing KEY" : "missing CHECKPOINT_DIR and KEY");
    if (text && json) return cli_usage_error("cat", "--text and --json are exclusive");
    cli_dir d0;
    const char *dir0 = cli_step_dir(operands[0], &d0);
    ckpt_reader *r = dir0 ? cli_open(dir0) : NULL;
    if (!r) return CLI_EXIT_FAIL;
    int status = CLI_EXIT_OK;
    const ckpt_entry *e = cli_find(r, operands[1], by);
    if (!e) {
        status = CLI_EXIT_USAGE;
        goto out;
    }
    cli_slice s;
    if (ckpt_entry_kind_of(e) != CKPT_ENTRY_TENSOR) {
        if (slice) {
            status = cli_usage_error("cat",
                                     "'%s' is an object, not a tensor: --slice applies "
                                     "to tensors only",
                                     ckpt_entry_key(e));
            goto out;
        }
        cli_slice_full(&s, 0, NULL);
        if (verbose) header(stdout, e, &s);
        status = cat_object(r, e, json, max_memory);
        goto out;
    }
    if (ckpt_entry_problem(e)) {
        cli_error("%s: '%s': %s", ckpt_reader_dir(r), ckpt_entry_key(e), ckpt_entry_problem(e));
        status = CLI_EXIT_FAIL;
        goto out;
    }
    char msg[256];
    if (!cli_slice_parse(slice ? slice : "", ckpt_entry_ndim(e), ckpt_entry_shape(e), &s, msg,
                         sizeof msg)) {
        status = cli_usage_error("cat", "--slice '%s': %s", slice, msg);
        goto out;
    }
    if (text || json) {
        if (verbose) header(stdout, e, &s);
        status = cat_values(r, e, &s, json);
    } else {
        if (!force && isatty(STDOUT_FILENO)) {
            status = cli_usage_error("cat", "refusing to write binary tensor data to a terminal "
                                            "(use --text, redirect the output, or -f)");
            goto out;
        }
        if (verbose) header(stderr, e, &s);
        status = cat_raw(r, e, &s, block);
    }
out:
    ckpt_reader_free(r);
    return status;
}
