/* cmd_ls.c — `ckpt ls`: the checkpoint's entries as a tree of paths (ckpt_entry_path, '/'
 * separating components).  Without -R it lists the immediate children of PATH like ls(1)
 * (directories as `name/`), with -R every entry below PATH by full path, with -l the kind,
 * dtype, shape and size of each line, with --chunks where each chunk is stored, and with
 * --json a machine-readable array of the entries below PATH. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

void cmd_ls_help(FILE *out) {
    fputs("Usage: ckpt ls [options] CHECKPOINT_DIR [PATH]\n"
          "\n"
          "List the entries of a checkpoint as a tree.  Entry paths come from the planner\n"
          "data (e.g. 'model/layers.0.weight'); PATH selects a directory (a path prefix made\n"
          "of whole components) or a single entry (by path or flat key).  Children are listed\n"
          "in checkpoint order; directories end with '/'.\n"
          "\n"
          "Options:\n"
          "  -l, --long            show kind, dtype, shape and size (directories: the number\n"
          "                        of entries and their total size)\n"
          "  -R, --recursive       list every entry below PATH by its full path\n"
          "  -h, --human-readable  sizes like 1.5 MiB (with -l)\n"
          "      --chunks          also show each chunk's box and stored byte range\n"
          "      --json            print a JSON array of the entries below PATH (recursive):\n"
          "                        {key, path, path_elems, kind, dtype, shape, bytes, chunks\n"
          "                        [, problem] [, storage (with --chunks)]}\n"
          "      --help            show this help\n",
          out);
}

enum { OPT_LONG = 1, OPT_REC, OPT_HUMAN, OPT_CHUNKS, OPT_JSON };

static const cli_opt ls_opts[] = {
    {"long", 'l', false, OPT_LONG},
    {"recursive", 'R', false, OPT_REC},
    {"human-readable", 'h', false, OPT_HUMAN},
    {"chunks", 0, false, OPT_CHUNKS},
    {"json", 0, false, OPT_JSON},
};

typedef struct ls_opts_t {
    bool longfmt, recursive, human, chunks, json;
} ls_opts_t;

/* One output line: an entry, or a directory (a distinct next path component). */
typedef struct ls_row {
    const char *name; /* not NUL-terminated for directories */
    size_t name_len;
    const ckpt_entry *entry; /* NULL for directories */
    size_t first;            /* index of the first entry that produced it (ordering) */
    uint64_t bytes;          /* directories: sum over the entries below */
    uint64_t count;          /* directories: entries below */
} ls_row;

static int by_name(const void *a, const void *b) {
    const ls_row *x = a, *y = b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);
    if (c) return c;
    if (x->name_len != y->name_len) return x->name_len < y->name_len ? -1 : 1;
    bool xd = !x->entry, yd = !y->entry;
    if (xd != yd) return xd ? 1 : -1;
    return x->first < y->first ? -1 : x->first > y->first;
}

static int by_first(const void *a, const void *b) {
    const ls_row *x = a, *y = b;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    return (x->entry ? 0 : 1) - (y->entry ? 0 : 1);
}

/* Where entry path `p` stands relative to prefix `pre` (length lp): 0 = unrelated,
 * 1 = the entry itself, 2 = below it (*rest = the remainder after "pre/"). */
static int relate(const char *p, const char *pre, size_t lp, const char **rest) {
    if (lp == 0) {
        *rest = p;
        return 2;
    }
    if (strncmp(p, pre, lp) != 0) return 0;
    if (p[lp] == '\0') return 1;
    if (p[lp] == '/') {
        *rest = p + lp + 1;
        return 2;
    }
    return 0;
}

static void print_size(FILE *out, uint64_t n, bool human, int width) {
    char buf[48];
    if (human)
        fprintf(out, "%*s", width, cli_human_size(n, buf, sizeof buf));
    else
        fprintf(out, "%*llu", width, (unsigned long long)n);
}

static void json_storage(FILE *out, const ckpt_reader *r, const ckpt_entry *e) {
    bool obj = ckpt_entry_kind_of(e) == CKPT_ENTRY_OBJECT;
    size_t n = obj ? 1 : ckpt_entry_num_chunks(e);
    int nd = ckpt_entry_ndim(e);
    fputs(", \"storage\": [", out);
    for (size_t i = 0; i < n; i++) {
        ckpt_chunk_info ci;
        if (ckpt_entry_chunk(e, i, &ci) != CKPT_OK) continue;
        fputs(i ? ", {" : "{", out);
        if (!obj) {
            fputs("\"offsets\": [", out);
            for (int d = 0; d < nd; d++)
                fprintf(out, "%s%lld", d ? ", " : "", (long long)ci.offsets[d]);
            fputs("], \"sizes\": [", out);
            for (int d = 0; d < nd; d++)
                fprintf(out, "%s%lld", d ? ", " : "", (long long)ci.sizes[d]);
            fprintf(out, "], \"numel\": %llu, ", (unsigned long long)ci.numel);
        }
        fputs("\"file\": ", out);
        if (ci.file_id >= 0)
            cli_json_string(out, ckpt_reader_file_name(r, (uint32_t)ci.file_id));
        else
            fputs("null", out);
        fprintf(out, ", \"offset\": %llu, \"length\": %llu, \"transforms\": ",
                (unsigned long long)ci.file_offset, (unsigned long long)ci.length);
        if (ci.transforms)
            cli_json_string(out, ci.transforms);
        else
            fputs("null", out);
        if (ci.problem) {
            fputs(", \"problem\": ", out);
            cli_json_string(out, ci.problem);
        }
        fputc('}', out);
    }
    fputc(']', out);
}

static void json_entry(FILE *out, const ckpt_reader *r, const ckpt_entry *e, bool chunks) {
    bool tensor = ckpt_entry_kind_of(e) == CKPT_ENTRY_TENSOR;
    fputs("{\"key\": ", out);
    cli_json_string(out, ckpt_entry_key(e));
    fputs(", \"path\": ", out);
    cli_json_string(out, ckpt_entry_path(e));
    fputs(", \"path_elems\": [", out);
    for (size_t i = 0; i < ckpt_entry_path_len(e); i++) {
        if (i) fputs(", ", out);
        cli_json_string(out, ckpt_entry_path_elem(e, i));
    }
    fprintf(out, "], \"kind\": \"%s\", \"dtype\": ", cli_kind_name(ckpt_entry_kind_of(e)));
    if (tensor) {
        cli_json_string(out, ckpt_dtype_name(ckpt_entry_dtype(e)));
        fputs(", \"shape\": [", out);
        const int64_t *sh = ckpt_entry_shape(e);
        for (int d = 0; d < ckpt_entry_ndim(e); d++)
            fprintf(out, "%s%lld", d ? ", " : "", (long long)sh[d]);
        fputc(']', out);
    } else {
        fputs("null, \"shape\": null", out);
    }
    fprintf(out, ", \"bytes\": %llu, \"chunks\": %zu", (unsigned long long)cli_entry_bytes(e),
            ckpt_entry_num_chunks(e));
    if (ckpt_entry_problem(e)) {
        fputs(", \"problem\": ", out);
        cli_json_string(out, ckpt_entry_problem(e));
    }
    if (chunks) json_storage(out, r, e);
    fputc('}', out);
}

/* Long-format columns of one row. */
typedef struct cols {
    const char *kind;
    const char *dtype;
    char *shape; /* malloc'ed */
} cols;

static int print_rows(const ckpt_reader *r, ls_row *rows, size_t n, const ls_opts_t *o) {
    cols *c = calloc(n ? n : 1, sizeof *c);
    if (!c) {
        cli_error("out of memory");
        return CLI_EXIT_FAIL;
    }
    int wk = 0, wd = 0, ws = 0, wb = 0;
    int status = CLI_EXIT_OK;
    if (o->longfmt) {
        for (size_t i = 0; i < n; i++) {
            const ckpt_entry *e = rows[i].entry;
            char buf[64 * 24];
            if (!e) {
                c[i].kind = "dir";
                c[i].dtype = "-";
                snprintf(buf, sizeof buf, "%llu %s", (unsigned long long)rows[i].count,
                         rows[i].count == 1 ? "entry" : "entries");
            } else if (ckpt_entry_kind_of(e) == CKPT_ENTRY_TENSOR) {
                c[i].kind = "tensor";
                c[i].dtype = ckpt_dtype_name(ckpt_entry_dtype(e));
                cli_shape_str(ckpt_entry_ndim(e), ckpt_entry_shape(e), buf, sizeof buf);
            } else {
                c[i].kind = "object";
                c[i].dtype = "-";
                snprintf(buf, sizeof buf, "-");
            }
            c[i].shape = strdup(buf);
            if (!c[i].shape) {
                cli_error("out of memory");
                status = CLI_EXIT_FAIL;
                goto out;
            }
            uint64_t bytes = e ? cli_entry_bytes(e) : rows[i].bytes;
            char sz[48];
            if (o->human)
                cli_human_size(bytes, sz, sizeof sz);
            else
                snprintf(sz, sizeof sz, "%llu", (unsigned long long)bytes);
            int l;
            if ((l = (int)strlen(c[i].kind)) > wk) wk = l;
            if ((l = (int)strlen(c[i].dtype)) > wd) wd = l;
            if ((l = (int)strlen(c[i].shape)) > ws) ws = l;
            if ((l = (int)strlen(sz)) > wb) wb = l;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const ckpt_entry *e = rows[i].entry;
        if (o->longfmt) {
            printf("%-*s  %-*s  %-*s  ", wk, c[i].kind, wd, c[i].dtype, ws, c[i].shape);
            print_size(stdout, e ? cli_entry_bytes(e) : rows[i].bytes, o->human, wb);
            fputs("  ", stdout);
        }
        fwrite(rows[i].name, 1, rows[i].name_len, stdout);
        if (!e) fputc('/', stdout);
        fputc('\n', stdout);
        if (e && o->chunks) cli_print_chunks(stdout, r, e);
    }
out:
    for (size_t i = 0; i < n; i++)
        free(c[i].shape);
    free(c);
    return status;
}

int cmd_ls(int argc, char **argv) {
    cli_parser p;
    cli_parser_init(&p, "ls", argc, argv);
    ls_opts_t o = {0};
    const char *operands[2] = {NULL, NULL};
    int nops = 0;
    const char *arg;
    for (int id; (id = cli_next(&p, ls_opts, sizeof ls_opts / sizeof ls_opts[0], &arg));) {
        switch (id) {
        case CLI_OPT_HELP: cmd_ls_help(stdout); return cli_flush_stdout() ? 0 : CLI_EXIT_FAIL;
        case CLI_OPT_ERROR: return CLI_EXIT_USAGE;
        case CLI_OPT_OPERAND:
            if (nops == 2) return cli_usage_error("ls", "too many arguments ('%s')", arg);
            operands[nops++] = arg;
            break;
        case OPT_LONG: o.longfmt = true; break;
        case OPT_REC: o.recursive = true; break;
        case OPT_HUMAN: o.human = true; break;
        case OPT_CHUNKS: o.chunks = true; break;
        case OPT_JSON: o.json = true; break;
        }
    }
    if (nops == 0) return cli_usage_error("ls", "missing CHECKPOINT_DIR");

    /* the prefix, without leading/trailing slashes */
    const char *given = operands[1] ? operands[1] : "";
    while (*given == '/')
        given++;
    size_t lp = strlen(given);
    while (lp && given[lp - 1] == '/')
        lp--;
    char *pre = strndup(given, lp);
    if (!pre) {
        cli_error("out of memory");
        return CLI_EXIT_FAIL;
    }

    cli_dir d0;
    const char *dir0 = cli_step_dir(operands[0], &d0);
    ckpt_reader *r = dir0 ? cli_open(dir0) : NULL;
    if (!r) {
        free(pre);
        return CLI_EXIT_FAIL;
    }
    int status = CLI_EXIT_OK;
    size_t ne = ckpt_reader_num_entries(r);
    ls_row *rows = calloc(ne ? ne : 1, sizeof *rows);
    if (!rows) {
        cli_error("out of memory");
        status = CLI_EXIT_FAIL;
        goto out;
    }
    size_t nrows = 0;
    bool flat = o.recursive || o.json;
    for (size_t i = 0; i < ne; i++) {
        const ckpt_entry *e = ckpt_reader_entry(r, i);
        const char *path = ckpt_entry_path(e), *rest = NULL;
        int rel = relate(path, pre, lp, &rest);
        if (!rel) continue;
        ls_row *row = &rows[nrows++];
        row->first = i;
        if (rel == 1 || flat) {
            row->entry = e;
            row->name = path;
            row->name_len = strlen(path);
            continue;
        }
        const char *slash = strchr(rest, '/');
        row->name = rest;
        if (slash) {
            row->name_len = (size_t)(slash - rest);
            row->bytes = cli_entry_bytes(e);
            row->count = 1;
        } else {
            row->name_len = strlen(rest);
            row->entry = e;
        }
    }
    if (nrows == 0 && operands[1]) {
        /* not a path: maybe a flat key */
        const ckpt_entry *e = ckpt_reader_find(r, operands[1]);
        if (!e) {
            cli_error("%s: no entry or directory '%s'", ckpt_reader_dir(r), operands[1]);
            status = CLI_EXIT_USAGE;
            goto out;
        }
        rows[0] = (ls_row){.name = ckpt_entry_path(e),
                           .name_len = strlen(ckpt_entry_path(e)),
                           .entry = e,
                           .first = ckpt_entry_index(e)};
        nrows = 1;
    }
    if (!flat && nrows > 1) {
        /* merge directory rows with the same name */
        qsort(rows, nrows, sizeof *rows, by_name);
        size_t w = 0;
        for (size_t i = 0; i < nrows; i++) {
            if (w && !rows[i].entry && !rows[w - 1].entry &&
                rows[i].name_len == rows[w - 1].name_len &&
                memcmp(rows[i].name, rows[w - 1].name, rows[i].name_len) == 0) {
                rows[w - 1].bytes += rows[i].bytes;
                rows[w - 1].count += rows[i].count;
                continue;
            }
            rows[w++] = rows[i];
        }
        nrows = w;
        qsort(rows, nrows, sizeof *rows, by_first);
    }
    if (o.json) {
        fputs("[", stdout);
        for (size_t i = 0; i < nrows; i++) {
            fputs(i ? ",\n " : "\n ", stdout);
            json_entry(stdout, r, rows[i].entry, o.chunks);
        }
        fputs(nrows ? "\n]\n" : "]\n", stdout);
    } else {
        status = print_rows(r, rows, nrows, &o);
    }
    if (!cli_flush_stdout() && status == CLI_EXIT_OK) status = CLI_EXIT_FAIL;
out:
    free(rows);
    free(pre);
    ckpt_reader_free(r);
    return status;
}
