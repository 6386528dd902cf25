/* cli_util.c — helpers shared by the `ckpt` commands: messages, the option parser, opening a
 * checkpoint, `--slice` parsing (numpy semantics, no steps), human-readable sizes, shortest
 * round-trip float formatting per dtype, and small JSON output helpers. */
#include "cli.h"

#include "ckpt_save.h"
#include "ckpt_tree.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ messages */

void cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("ckpt: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

ckpt_status cli_fail(ckpt_error *err, ckpt_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return code;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("ckpt: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (cmd)
        fprintf(stderr, "Try 'ckpt %s --help' for more information.\n", cmd);
    else
        fputs("Try 'ckpt --help' for more information.\n", stderr);
    return CLI_EXIT_USAGE;
}

/* ------------------------------------------------------------------ options */

void cli_parser_init(cli_parser *p, const char *cmd, int argc, char **argv) {
    *p = (cli_parser){.argc = argc, .argv = argv, .i = 1, .cmd = cmd};
}

static const cli_opt *find_short(const cli_opt *opts, size_t n, char c) {
    for (size_t k = 0; k < n; k++)
        if (opts[k].short_name && opts[k].short_name == c) return &opts[k];
    return NULL;
}

static const cli_opt *find_long(const cli_opt *opts, size_t n, const char *name, size_t len) {
    for (size_t k = 0; k < n; k++)
        if (opts[k].long_name && strlen(opts[k].long_name) == len &&
            memcmp(opts[k].long_name, name, len) == 0)
            return &opts[k];
    return NULL;
}

static int next_short(cli_parser *p, const cli_opt *opts, size_t nopts, const char **arg) {
    const char *a = p->argv[p->i];
    char c = a[p->sub];
    const cli_opt *o = find_short(opts, nopts, c);
    if (!o) {
        cli_usage_error(p->cmd, "unknown option '-%c'", c);
        return CLI_OPT_ERROR;
    }
    p->sub++;
    if (o->has_arg) {
        if (a[p->sub]) {
            *arg = a + p->sub;
            p->i++;
        } else if (p->i + 1 < p->argc) {
            *arg = p->argv[p->i + 1];
            p->i += 2;
        } else {
            cli_usage_error(p->cmd, "option '-%c' needs an argument", c);
            return CLI_OPT_ERROR;
        }
        p->sub = 0;
    } else if (!a[p->sub]) {
        p->sub = 0;
        p->i++;
    }
    return o->id;
}

int cli_next(cli_parser *p, const cli_opt *opts, size_t nopts, const char **arg) {
    *arg = NULL;
    if (p->sub) return next_short(p, opts, nopts, arg);
    if (p->i >= p->argc) return CLI_OPT_END;
    const char *a = p->argv[p->i];
    if (p->only_operands || a[0] != '-' || a[1] == '\0') {
        p->i++;
        *arg = a;
        return CLI_OPT_OPERAND;
    }
    if (strcmp(a, "--") == 0) {
        p->only_operands = true;
        p->i++;
        return cli_next(p, opts, nopts, arg);
    }
    if (a[1] != '-') {
        p->sub = 1;
        return next_short(p, opts, nopts, arg);
    }
    const char *name = a + 2, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    if (len == 4 && memcmp(name, "help", 4) == 0 && !eq) {
        p->i++;
        return CLI_OPT_HELP;
    }
    const cli_opt *o = find_long(opts, nopts, name, len);
    if (!o) {
        cli_usage_error(p->cmd, "unknown option '--%.*s'", (int)len, name);
        return CLI_OPT_ERROR;
    }
    p->i++;
    if (o->has_arg) {
        if (eq) {
            *arg = eq + 1;
        } else if (p->i < p->argc) {
            *arg = p->argv[p->i++];
        } else {
            cli_usage_error(p->cmd, "option '--%s' needs an argument", o->long_name);
            return CLI_OPT_ERROR;
        }
    } else if (eq) {
        cli_usage_error(p->cmd, "option '--%s' takes no argument", o->long_name);
        return CLI_OPT_ERROR;
    }
    return o->id;
}

bool cli_parse_size(const char *s, uint64_t *out) {
    if (!s || *s < '0' || *s > '9') return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return false;
    unsigned shift = 0;
    switch (*end) {
    case '\0': break;
    case 'k':
    case 'K': shift = 10; break;
    case 'm':
    case 'M': shift = 20; break;
    case 'g':
    case 'G': shift = 30; break;
    default: return false;
    }
    if (*end && end[1] != '\0' && strcmp(end + 1, "iB") != 0 && strcmp(end + 1, "B") != 0)
        return false;
    if (shift && v > (UINT64_MAX >> shift)) return false;
    *out = (uint64_t)v << shift;
    return true;
}

/* ------------------------------------------------------------------ checkpoints */

typedef struct step_names {
    char buf[512];
    size_t len, n;
} step_names;

static bool add_step(void *ctx, const char *name, const ckpt_tree_stat *st, uint64_t next) {
    (void)next;
    step_names *s = ctx;
    if (st->type != CKPT_NODE_DIR) return true; /* `latest` */
    if (s->len < sizeof s->buf - 64)
        s->len += (size_t)snprintf(s->buf + s->len, sizeof s->buf - s->len, "%s%s",
                                   s->n ? ", " : "", name);
    else if (s->len < sizeof s->buf - 4)
        s->len += (size_t)snprintf(s->buf + s->len, sizeof s->buf - s->len, ", ...");
    s->n++;
    return true;
}

static void report_leftover(void *ctx, const char *name, ckpt_save_leftover_kind kind,
                            double idle_s, uint64_t bytes) {
    const char *dir = ctx;
    char hs[32];
    cli_human_size(bytes, hs, sizeof hs);
    if (kind == CKPT_SAVE_LEFTOVER_DELETING)
        fprintf(stderr,
                "ckpt: %s/%s: a step retention was deleting when it stopped (%s); safe to "
                "remove\n",
                dir, name, hs);
    else
        fprintf(stderr,
                "ckpt: %s/%s: staging directory of a save that did not finish (%s, nothing "
                "written for %.1f h)%s\n",
                dir, name, hs, idle_s / 3600,
                idle_s >= CKPT_SAVE_STALE_S ? "; safe to remove, and the saver's retention will"
                                            : "; remove it once no save is running");
}

void cli_hint_steps(const char *dir) {
    ckpt_save_leftovers(dir, report_leftover, (void *)dir, NULL);
    ckpt_tree *t = NULL;
    if (ckpt_tree_open(dir, NULL, &t, NULL) != CKPT_OK) return;
    step_names s = {.len = 0};
    char *latest = NULL;
    ckpt_tree_stat st;
    if (!ckpt_tree_reader(t) &&
        ckpt_tree_readdir(t, CKPT_TREE_ROOT, 0, add_step, &s, NULL) == CKPT_OK && s.n &&
        ckpt_tree_lookup(t, CKPT_TREE_ROOT, "latest", &st, NULL) == CKPT_OK &&
        ckpt_tree_readlink(t, st.ino, &latest, NULL) == CKPT_OK) {
        size_t len = strlen(dir);
        while (len > 1 && dir[len - 1] == '/')
            len--;
        fprintf(stderr,
                "ckpt: %s is a directory of %zu checkpoint%s (%s): give one of them, e.g. "
                "%.*s/%s (the latest)\n",
                dir, s.n, s.n == 1 ? "" : "s", s.buf, (int)len, dir, latest);
    }
    free(latest);
    ckpt_tree_free(t);
}

const char *cli_step_dir(const char *arg, cli_dir *out) {
    struct stat st;
    const char *at = strrchr(arg, '@');
    if (!at || stat(arg, &st) == 0) return arg;
    size_t rl = (size_t)(at - arg);
    const char *step = at + 1;
    if (!rl || !*step || strchr(step, '/')) {
        cli_error("%s: no such checkpoint (RUN@STEP wants a run directory and a step name)", arg);
        return NULL;
    }
    char run[4096];
    if (rl >= sizeof run) {
        cli_error("%s: path too long", arg);
        return NULL;
    }
    memcpy(run, arg, rl);
    run[rl] = '\0';
    char *name = NULL;
    if (strcmp(step, "latest") == 0) {
        ckpt_error err = {0};
        if (ckpt_run_latest(run, true, &name, &err) != CKPT_OK) {
            if (err.code == CKPT_E_NOTFOUND)
                cli_error("%s: %s holds no complete step to be the latest", arg, run);
            else
                cli_error("%s: %s", arg, err.message);
            return NULL;
        }
        step = name;
    }
    int n = snprintf(out->buf, sizeof out->buf, "%s/%s", run, step);
    free(name);
    if (n < 0 || (size_t)n >= sizeof out->buf) {
        cli_error("%s: path too long", arg);
        return NULL;
    }
    return out->buf;
}

ckpt_reader *cli_open(const char *dir) {
    ckpt_reader *r = NULL;
    ckpt_error err = {0};
    if (ckpt_reader_open(dir, NULL, &r, &err) != CKPT_OK) {
        cli_error("%s", err.message[0] ? err.message : ckpt_strerror(err.code));
        if (err.code == CKPT_E_NOTFOUND) cli_hint_steps(dir);
        return NULL;
    }
    return r;
}

const ckpt_entry *cli_find(const ckpt_reader *r, const char *name, cli_find_by by) {
    const ckpt_entry *k = by == CLI_BY_PATH ? NULL : ckpt_reader_find_key(r, name);
    const ckpt_entry *p = by == CLI_BY_KEY ? NULL : ckpt_reader_find_path(r, name);
    if (k && p && k != p) {
        cli_error("%s: '%s' is ambiguous: the flat key of '%s' and the tree path of '%s' "
                  "(the key '%s'); say --key or --path",
                  ckpt_reader_dir(r), name, ckpt_entry_path(k), ckpt_entry_path(p),
                  ckpt_entry_key(p));
        return NULL;
    }
    if (!k && !p)
        cli_error("%s: no entry with %s '%s'", ckpt_reader_dir(r),
                  by == CLI_BY_KEY    ? "flat key"
                  : by == CLI_BY_PATH ? "tree path"
                                      : "key or path",
                  name);
    return k ? k : p;
}

const char *cli_kind_name(ckpt_entry_kind k) {
    return k == CKPT_ENTRY_TENSOR ? "tensor" : k == CKPT_ENTRY_OBJECT ? "object" : "?";
}

uint64_t cli_entry_bytes(const ckpt_entry *e) {
    if (ckpt_entry_kind_of(e) == CKPT_ENTRY_TENSOR) return ckpt_entry_nbytes(e);
    ckpt_chunk_info ci;
    if (ckpt_entry_chunk(e, 0, &ci) == CKPT_OK) return ci.length;
    return 0;
}

static void dims_str(int nd, const int64_t *off, const int64_t *sz, char *buf, size_t size) {
    size_t o = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < nd && o < size; d++)
        o += (size_t)snprintf(buf + o, size - o, "%s%lld:%lld", d ? ", " : "", (long long)off[d],
                              (long long)(off[d] + sz[d]));
    if (o < size) snprintf(buf + o, size - o, "]");
}

void cli_print_chunks(FILE *out, const ckpt_reader *r, const ckpt_entry *e) {
    char box[1024];
    bool obj = ckpt_entry_kind_of(e) == CKPT_ENTRY_OBJECT;
    size_t n = obj ? 1 : ckpt_entry_num_chunks(e);
    for (size_t i = 0; i < n; i++) {
        ckpt_chunk_info ci;
        if (ckpt_entry_chunk(e, i, &ci) != CKPT_OK) continue;
        if (obj) {
            fprintf(out, "    item");
        } else {
            dims_str(ckpt_entry_ndim(e), ci.offsets, ci.sizes, box, sizeof box);
            fprintf(out, "    chunk %zu %s", i, box);
        }
        if (ci.file_id >= 0) {
            fprintf(out, " %s offset %llu length %llu",
                    ckpt_reader_file_name(r, (uint32_t)ci.file_id),
                    (unsigned long long)ci.file_offset, (unsigned long long)ci.length);
            if (ci.transforms) fprintf(out, " transforms %s", ci.transforms);
        } else if (!obj && ci.numel == 0) {
            fprintf(out, " (empty, not stored)");
        } else {
            fprintf(out, " (not located: %s)", ci.problem ? ci.problem : "unknown");
        }
        fputc('\n', out);
    }
}

/* ------------------------------------------------------------------ slices */

void cli_slice_full(cli_slice *s, int ndim, const int64_t *shape) {
    memset(s, 0, sizeof *s);
    s->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        s->count[d] = shape[d];
}

uint64_t cli_slice_numel(const cli_slice *s) {
    uint64_t n = 1;
    for (int d = 0; d < s->ndim; d++)
        n *= (uint64_t)s->count[d];
    return n;
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
    return s;
}

/* An optional integer: empty -> *present = false. */
static bool parse_int(char *text, bool *present, int64_t *v) {
    char *t = trim(text);
    *present = *t != '\0';
    if (!*present) return true;
    errno = 0;
    char *end;
    long long x = strtoll(t, &end, 10);
    if (errno || *end || end == t) return false;
    *v = x;
    return true;
}

static int64_t clamp_bound(int64_t v, int64_t n) {
    if (v < 0) {
        v += n;
        if (v < 0) v = 0;
    }
    return v > n ? n : v;
}

/* One comma-separated item applied to dim d of size n. */
static bool slice_item(char *item, int d, int64_t n, cli_slice *s, char *msg, size_t msg_size) {
    char *c1 = strchr(item, ':');
    if (!c1) {
        bool present;
        int64_t i = 0;
        if (!parse_int(item, &present, &i) || !present) {
            snprintf(msg, msg_size, "invalid index '%s' (expected an integer or start:stop)",
                     trim(item));
            return false;
        }
        int64_t j = i < 0 ? i + n : i;
        if (j < 0 || j >= n) {
            snprintf(msg, msg_size, "index %lld is out of bounds for dimension %d with size %lld",
                     (long long)i, d, (long long)n);
            return false;
        }
        s->start[d] = j;
        s->count[d] = 1;
        s->drop[d] = true;
        return true;
    }
    *c1 = '\0';
    char *rest = c1 + 1, *c2 = strchr(rest, ':');
    if (c2) {
        *c2 = '\0';
        bool present;
        int64_t step = 1;
        if (strchr(c2 + 1, ':') || !parse_int(c2 + 1, &present, &step)) {
            snprintf(msg, msg_size, "invalid slice step '%s'", c2 + 1);
            return false;
        }
        if (present && step != 1) {
            snprintf(msg, msg_size,
                     step == 0 ? "slice step cannot be zero (dimension %d)"
                               : "slice steps are not supported (dimension %d): use start:stop",
                     d);
            return false;
        }
    }
    bool has_start, has_stop;
    int64_t a = 0, b = n;
    if (!parse_int(item, &has_start, &a)) {
        snprintf(msg, msg_size, "invalid slice start '%s'", trim(item));
        return false;
    }
    if (!parse_int(rest, &has_stop, &b)) {
        snprintf(msg, msg_size, "invalid slice stop '%s'", trim(rest));
        return false;
    }
    a = has_start ? clamp_bound(a, n) : 0;
    b = has_stop ? clamp_bound(b, n) : n;
    s->start[d] = a;
    s->count[d] = b > a ? b - a : 0;
    s->drop[d] = false;
    return true;
}

bool cli_slice_parse(const char *text, int ndim, const int64_t *shape, cli_slice *s, char *msg,
                     size_t msg_size) {
    cli_slice_full(s, ndim, shape);
    size_t tl = strlen(text);
    char *buf = malloc(tl + 1);
    if (!buf) {
        snprintf(msg, msg_size, "out of memory");
        return false;
    }
    memcpy(buf, text, tl + 1);
    bool ok = false;
    char *items[CKPT_MAX_NDIM + 2];
    int nitems = 0, ellipsis = -1;
    if (*trim(buf) != '\0') {
        char *p = buf;
        for (;;) {
            char *comma = strchr(p, ',');
            if (comma) *comma = '\0';
            if (nitems == CKPT_MAX_NDIM + 1) {
                snprintf(msg, msg_size, "too many indices for a tensor of %d dimensions", ndim);
                goto out;
            }
            char *it = trim(p);
            if (!*it) {
                snprintf(msg, msg_size, "empty item in slice '%s'", text);
                goto out;
            }
            if (strcmp(it, "...") == 0) {
                if (ellipsis >= 0) {
                    snprintf(msg, msg_size, "a slice can only have a single ellipsis ('...')");
                    goto out;
                }
                ellipsis = nitems;
            }
            items[nitems++] = it;
            if (!comma) break;
            p = comma + 1;
        }
    }
    int used = nitems - (ellipsis >= 0);
    if (used > ndim) {
        snprintf(msg, msg_size,
                 "too many indices for tensor: tensor is %d-dimensional, but %d were indexed", ndim,
                 used);
        goto out;
    }
    int d = 0;
    for (int k = 0; k < nitems; k++) {
        if (k == ellipsis) {
            d += ndim - used; /* those dims stay whole */
            continue;
        }
        if (!slice_item(items[k], d, shape[d], s, msg, msg_size)) goto out;
        d++;
    }
    ok = true;
out:
    free(buf);
    return ok;
}

static uint64_t sat_mul(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

ckpt_status cli_read_blocks(ckpt_reader *r, const ckpt_entry *e, const cli_slice *s, uint64_t limit,
                            cli_block_sink sink, void *ctx, const char *dest, ckpt_error *err) {
    size_t item = ckpt_dtype_itemsize(ckpt_entry_dtype(e));
    int nd = s->ndim;
    if (item == 0) {
        /* let the library say why (unknown dtype, metadata defect...) */
        ckpt_status st = ckpt_read_region(r, e, s->start, s->count, NULL, 0, err);
        if (st != CKPT_OK) return st;
        snprintf(err->message, sizeof err->message, "'%s': unsupported dtype", ckpt_entry_key(e));
        return err->code = CKPT_E_UNSUPPORTED;
    }
    if (cli_slice_numel(s) == 0) return CKPT_OK;
    if (limit < item) limit = item;
    /* inner[d]: bytes of one index step along dim d-1 (inner[nd] = one element); the block
     * splits dim k, the outermost whose step fits the limit: dims < k advance one index at a
     * time, dim k `rows` indices per block, dims > k are whole. */
    uint64_t inner[CKPT_MAX_NDIM + 1];
    inner[nd] = item;
    for (int d = nd - 1; d >= 0; d--)
        inner[d] = sat_mul(inner[d + 1], (uint64_t)s->count[d]);
    int k = 0;
    while (k < nd && inner[k + 1] > limit)
        k++;
    uint64_t rows = 1;
    if (nd) {
        rows = limit / inner[k + 1];
        if (rows > (uint64_t)s->count[k]) rows = (uint64_t)s->count[k];
        if (!rows) rows = 1;
    }
    uint64_t bufsize = nd ? rows * inner[k + 1] : item;
    void *buf = malloc(bufsize);
    if (!buf) {
        snprintf(err->message, sizeof err->message, "out of memory (block of %llu bytes)",
                 (unsigned long long)bufsize);
        return err->code = CKPT_E_NOMEM;
    }
    ckpt_status st = CKPT_OK;
    if (nd == 0) {
        st = ckpt_read_region(r, e, NULL, NULL, buf, bufsize, err);
        if (st == CKPT_OK && !sink(ctx, buf, bufsize)) goto sink_failed;
        free(buf);
        return st;
    }
    int64_t idx[CKPT_MAX_NDIM] = {0}, start[CKPT_MAX_NDIM], count[CKPT_MAX_NDIM];
    for (;;) {
        for (int64_t row = 0; row < s->count[k]; row += (int64_t)rows) {
            for (int d = 0; d < nd; d++) {
                if (d < k) {
                    start[d] = s->start[d] + idx[d];
                    count[d] = 1;
                } else if (d == k) {
                    start[d] = s->start[d] + row;
                    int64_t left = s->count[d] - row;
                    count[d] = left < (int64_t)rows ? left : (int64_t)rows;
                } else {
                    start[d] = s->start[d];
                    count[d] = s->count[d];
                }
            }
            size_t n = (size_t)((uint64_t)count[k] * inner[k + 1]);
            st = ckpt_read_region(r, e, start, count, buf, n, err);
            if (st != CKPT_OK) goto out;
            if (!sink(ctx, buf, n)) goto sink_failed;
        }
        int d = k - 1; /* odometer over dims < k */
        while (d >= 0 && ++idx[d] == s->count[d])
            idx[d--] = 0;
        if (d < 0) break;
    }
out:
    free(buf);
    return st;
sink_failed:
    snprintf(err->message, sizeof err->message, "error writing to %s: %s", dest, strerror(errno));
    free(buf);
    return err->code = CKPT_E_IO;
}

/* ------------------------------------------------------------------ formatting */

const char *cli_human_size(uint64_t n, char *buf, size_t size) {
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (n < 1024) {
        snprintf(buf, size, "%llu B", (unsigned long long)n);
        return buf;
    }
    double v = (double)n;
    int u = -1;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, size, v < 10.0 ? "%.1f %s" : "%.0f %s", v, units[u]);
    return buf;
}

bool cli_dtype_is_float(ckpt_dtype dt) {
    switch (dt) {
    case CKPT_DTYPE_FLOAT64:
    case CKPT_DTYPE_FLOAT32:
    case CKPT_DTYPE_FLOAT16:
    case CKPT_DTYPE_BFLOAT16:
    case CKPT_DTYPE_FLOAT8_E4M3FN:
    case CKPT_DTYPE_FLOAT8_E5M2:
    case CKPT_DTYPE_FLOAT8_E4M3FNUZ:
    case CKPT_DTYPE_FLOAT8_E5M2FNUZ:
    case CKPT_DTYPE_FLOAT8_E8M0FNU: return true;
    default: return false;
    }
}

bool cli_dtype_is_complex(ckpt_dtype dt) {
    return dt == CKPT_DTYPE_COMPLEX64 || dt == CKPT_DTYPE_COMPLEX128;
}

/* Explicit mantissa bits and the smallest normal exponent of the narrow float formats. */
static bool narrow_params(ckpt_dtype dt, int *mant, int *emin) {
    switch (dt) {
    case CKPT_DTYPE_FLOAT16: *mant = 10, *emin = -14; return true;
    case CKPT_DTYPE_BFLOAT16: *mant = 7, *emin = -126; return true;
    case CKPT_DTYPE_FLOAT8_E4M3FN: *mant = 3, *emin = -6; return true;
    case CKPT_DTYPE_FLOAT8_E5M2: *mant = 2, *emin = -14; return true;
    case CKPT_DTYPE_FLOAT8_E4M3FNUZ: *mant = 3, *emin = -7; return true;
    case CKPT_DTYPE_FLOAT8_E5M2FNUZ: *mant = 2, *emin = -15; return true;
    case CKPT_DTYPE_FLOAT8_E8M0FNU: *mant = 0, *emin = -127; return true;
    default: return false;
    }
}

/* Does the decimal `text` read back as `v` in format `dt`? */
static bool reads_back(ckpt_dtype dt, double v, const char *text) {
    if (dt == CKPT_DTYPE_FLOAT32 || dt == CKPT_DTYPE_COMPLEX64)
        return strtof(text, NULL) == (float)v;
    double p = strtod(text, NULL);
    int mant, emin;
    if (!narrow_params(dt, &mant, &emin)) return p == v; /* float64 */
    /* p rounds to v when it is closer than half the smaller gap to v's neighbours. */
    int e = ilogb(v);
    int q = e < emin ? emin : e;
    double ulp = ldexp(1.0, q - mant);
    double gap = (e > emin && fabs(v) == ldexp(1.0, e)) ? ulp / 2 : ulp;
    return fabs(p - v) * 2 < gap;
}

size_t cli_format_float(ckpt_dtype dt, double v, bool force_point, bool json, char *buf,
                        size_t size) {
    if (isnan(v)) return (size_t)snprintf(buf, size, "%s", json ? "NaN" : "nan");
    if (isinf(v))
        return (size_t)snprintf(
            buf, size, "%s", v > 0 ? (json ? "Infinity" : "inf") : (json ? "-Infinity" : "-inf"));
    if (v == 0)
        return (size_t)snprintf(buf, size, "%s%s", signbit(v) ? "-0" : "0",
                                force_point ? ".0" : "");
    char e[64];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, v);
        if (reads_back(dt, v, e)) break;
    }
    /* e = "[-]d[.ddd]e[+-]XX" -> sign, digits, exponent */
    const char *s = e;
    bool neg = *s == '-';
    if (neg) s++;
    char digits[32];
    size_t nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s >= '0' && *s <= '9' && nd < sizeof digits - 1) digits[nd++] = *s;
    int x = *s == 'e' ? atoi(s + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    char out[96];
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (x < -4 || x >= 16) {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, digits + 1, nd - 1);
            o += nd - 1;
        }
        o += (size_t)snprintf(out + o, sizeof out - o, "e%c%02d", x < 0 ? '-' : '+', abs(x));
    } else if (x < 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (int k = 0; k < -x - 1; k++)
            out[o++] = '0';
        memcpy(out + o, digits, nd);
        o += nd;
    } else {
        for (int k = 0; k <= x; k++)
            out[o++] = (size_t)k < nd ? digits[k] : '0';
        if (nd > (size_t)x + 1) {
            out[o++] = '.';
            memcpy(out + o, digits + x + 1, nd - (size_t)x - 1);
            o += nd - (size_t)x - 1;
        } else if (force_point) {
            out[o++] = '.';
            out[o++] = '0';
        }
    }
    out[o] = '\0';
    return (size_t)snprintf(buf, size, "%s", out);
}

size_t cli_format_elem(ckpt_dtype dt, const void *elem, bool json, char *buf, size_t size) {
    const unsigned char *p = elem;
    switch (dt) {
    case CKPT_DTYPE_BOOL:
        return (size_t)snprintf(buf, size, "%s",
                                p[0] ? (json ? "true" : "True") : (json ? "false" : "False"));
    case CKPT_DTYPE_INT8: return (size_t)snprintf(buf, size, "%d", (int)(int8_t)p[0]);
    case CKPT_DTYPE_UINT8: return (size_t)snprintf(buf, size, "%u", (unsigned)p[0]);
    case CKPT_DTYPE_INT16: {
        int16_t v;
        memcpy(&v, p, 2);
        return (size_t)snprintf(buf, size, "%d", (int)v);
    }
    case CKPT_DTYPE_UINT16: {
        uint16_t v;
        memcpy(&v, p, 2);
        return (size_t)snprintf(buf, size, "%u", (unsigned)v);
    }
    case CKPT_DTYPE_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        return (size_t)snprintf(buf, size, "%ld", (long)v);
    }
    case CKPT_DTYPE_UINT32: {
        uint32_t v;
        memcpy(&v, p, 4);
        return (size_t)snprintf(buf, size, "%lu", (unsigned long)v);
    }
    case CKPT_DTYPE_INT64: {
        int64_t v;
        memcpy(&v, p, 8);
        return (size_t)snprintf(buf, size, "%lld", (long long)v);
    }
    case CKPT_DTYPE_UINT64: {
        uint64_t v;
        memcpy(&v, p, 8);
        return (size_t)snprintf(buf, size, "%llu", (unsigned long long)v);
    }
    case CKPT_DTYPE_COMPLEX64:
    case CKPT_DTYPE_COMPLEX128: {
        double re, im;
        if (dt == CKPT_DTYPE_COMPLEX64) {
            float f[2];
            memcpy(f, p, sizeof f);
            re = f[0], im = f[1];
        } else {
            double f[2];
            memcpy(f, p, sizeof f);
            re = f[0], im = f[1];
        }
        char a[64], b[64];
        cli_format_float(dt, re, json, json, a, sizeof a);
        cli_format_float(dt, im, json, json, b, sizeof b);
        if (json) return (size_t)snprintf(buf, size, "[%s, %s]", a, b);
        bool im_neg = b[0] == '-';
        return (size_t)snprintf(buf, size, "(%s%s%sj)", a, im_neg ? "" : "+", b);
    }
    default:
        if (cli_dtype_is_float(dt))
            return cli_format_float(dt, ckpt_elem_to_double(dt, elem), true, json, buf, size);
        return (size_t)snprintf(buf, size, "?");
    }
}

const char *cli_shape_str(int ndim, const int64_t *shape, char *buf, size_t size) {
    size_t o = 0;
    o += (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && o < size; d++)
        o += (size_t)snprintf(buf + o, size - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (o < size) snprintf(buf + o, size - o, "]");
    return buf;
}

void cli_json_string(FILE *out, const char *s) {
    /* the library's escaper, so the CLI's JSON strings are the mount's and the dumps' */
    char *q = ckpt_json_string(s, strlen(s));
    fputs(q ? q : "\"\"", out); /* out of memory: still valid JSON */
    free(q);
}

static void newline_indent(FILE *out, int indent, int level) {
    fputc('\n', out);
    for (int k = 0; k < indent * level; k++)
        fputc(' ', out);
}

void cli_json_pretty(FILE *out, const char *json, int indent) {
    int level = 0;
    bool in_str = false;
    for (const char *p = json; *p; p++) {
        char c = *p;
        if (in_str) {
            fputc(c, out);
            if (c == '\\' && p[1]) {
                fputc(*++p, out);
            } else if (c == '"') {
                in_str = false;
            }
            continue;
        }
        switch (c) {
        case '"':
            in_str = true;
            fputc(c, out);
            break;
        case '{':
        case '[': {
            const char *q = p + 1;
            while (*q == ' ' || *q == '\n' || *q == '\t' || *q == '\r')
                q++;
            if (*q == (c == '{' ? '}' : ']')) {
                fputc(c, out);
                fputc(*q, out);
                p = q;
                break;
            }
            fputc(c, out);
            newline_indent(out, indent, ++level);
            break;
        }
        case '}':
        case ']':
            newline_indent(out, indent, --level);
            fputc(c, out);
            break;
        case ',':
            fputc(',', out);
            newline_indent(out, indent, level);
            break;
        case ':': fputs(": ", out); break;
        case ' ':
        case '\n':
        case '\t':
        case '\r': break;
        default: fputc(c, out);
        }
    }
    fputc('\n', out);
}

bool cli_flush_stdout(void) {
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_error("error writing to standard output: %s", strerror(errno));
        return false;
    }
    return true;
}

bool cli_write_all(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len) {
        size_t n = len > ((size_t)1 << 30) ? (size_t)1 << 30 : len;
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        p += w;
        len -= (size_t)w;
    }
    return true;
}
