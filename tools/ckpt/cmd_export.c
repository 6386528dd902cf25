/* cmd_export.c — `ckpt export`: writes the tensors of a checkpoint (or of one subtree) as a
 * safetensors file, streaming each tensor in bounded blocks (memory stays at a few blocks
 * however large the checkpoint), optionally casting floating tensors to bf16/fp16/fp32 the
 * way torch's `.to(dtype)` rounds, with a progress line on a terminal; or, with --format
 * torch, the nested state_dict (tensors and plain values) as a torch.save file that
 * torch.load reads (ckpt_torchsave_write streams it).  The file appears atomically (written
 * as OUT.tmp-<pid>, then renamed); `-` writes to standard output. */
#include "ckpt_save.h"
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

void cmd_export_help(FILE *out) {
    fputs("Usage: ckpt export [options] CHECKPOINT_DIR OUT.safetensors\n"
          "       ckpt export --max-shard-size SIZE [options] CHECKPOINT_DIR OUT_DIR\n"
          "       ckpt export --format torch [options] CHECKPOINT_DIR OUT.pt\n"
          "\n"
          "Write the checkpoint's tensors as one safetensors file, consolidated from the\n"
          "shards in bounded memory.  Tensor names are their tree paths (as `ckpt ls` shows\n"
          "them); with --keys DIR, only the tensors under DIR, named relative to it (so\n"
          "`--keys model` gives names that load into the model).  Non-tensor entries are\n"
          "left out; tensors of dtypes safetensors cannot name (complex128, float8_e8m0fnu)\n"
          "are skipped with a warning and listed in the header's __metadata__.\n"
          "\n"
          "With --format torch (the default for an OUT ending in .pt or .pth), a torch.save\n"
          "file instead: torch.load(OUT, weights_only=True, mmap=True) gives the nested\n"
          "state_dict that torch.distributed.checkpoint.format_utils.dcp_to_torch_save\n"
          "writes (dicts, lists, tensors of every dtype, and the plain values: None, bool,\n"
          "int, float, str, bytes, tuples, lists, dicts, sets); with --keys PATH the value\n"
          "at PATH (`--keys model` a model's state_dict).  Values torch.load(weights_only=\n"
          "True) refuses or that are objects of other classes are left out with a warning.\n"
          "OUT `-` writes to standard output.  With --by-id (implies --format torch), the\n"
          "optimizer state_dict at --keys PATH, keyed by parameter FQN as DCP saves it, in\n"
          "the form torch.optim.Optimizer.load_state_dict takes: parameters numbered in\n"
          "param_groups order (`opt.load_state_dict(torch.load(OUT))` for a plain\n"
          "optimizer over the model's parameters in that order).\n"
          "\n"
          "With --exclude PREFIX (repeatable), the entries PREFIX names are left out: those\n"
          "at or under the tree path PREFIX (as --keys matches), and those whose flat key is\n"
          "PREFIX or continues it after a '.'; `--exclude optimizer --exclude lr_scheduler\n"
          "...` of a torchtitan checkpoint (model keys at the top level) gives the model.\n"
          "\n"
          "With --max-shard-size SIZE, OUT is a directory (made if missing) and the tensors\n"
          "are split as huggingface_hub's split_torch_state_dict_into_shards splits them (in\n"
          "order, a new shard when the next tensor would pass SIZE, a larger tensor alone in a\n"
          "shard of its own): model-00001-of-0000N.safetensors ... and\n"
          "model.safetensors.index.json, or model.safetensors alone when one shard holds\n"
          "everything.  SIZE is bytes, or a number with KB, MB, GB, TB (powers of 1000, as\n"
          "huggingface_hub reads \"5GB\") or KiB, MiB, GiB, TiB (powers of 1024).\n"
          "\n"
          "Options:\n"
          "      --format F      safetensors (default) or torch\n"
          "      --keys PATH     export only the subtree PATH (a tree path or directory)\n"
          "      --exclude PREFIX  leave out what PREFIX names (repeatable)\n"
          "      --max-shard-size SIZE  HuggingFace sharded safetensors in directory OUT\n"
          "      --by-id         the optimizer state at PATH with parameter ids (torch)\n"
          "      --dtype T       cast floating tensors (float64/32/16, bfloat16) to T: bf16,\n"
          "                      fp16 or fp32 (rounding as torch's .to(T)); others unchanged\n"
          "                      (safetensors only)\n"
          "  -q, --quiet         no progress line and no summary\n"
          "      --help          show this help\n",
          out);
}

enum { OPT_KEYS = 1, OPT_DTYPE, OPT_QUIET, OPT_FORMAT, OPT_BY_ID, OPT_EXCLUDE, OPT_SHARD };
static const cli_opt export_opts[] = {
    {"keys", 0, true, OPT_KEYS},
    {"format", 0, true, OPT_FORMAT},
    {"by-id", 0, false, OPT_BY_ID},
    {"dtype", 0, true, OPT_DTYPE},
    {"quiet", 'q', false, OPT_QUIET},
    {"exclude", 0, true, OPT_EXCLUDE},
    {"max-shard-size", 0, true, OPT_SHARD},
};

/* The entries an export takes: under --keys, named by no --exclude. */
typedef struct selection {
    const char *keys;
    const char **exclude;
    size_t nexclude;
} selection;

static bool excluded(const selection *sel, const ckpt_entry *e) {
    for (size_t i = 0; i < sel->nexclude; i++)
        if (ckpt_entry_matches(e, sel->exclude[i])) return true;
    return false;
}

/* --max-shard-size: bytes, or a number with huggingface_hub's units (KB, MB, GB, TB: powers
 * of 1000, any case, int(value * unit) as its parse_size_to_int computes it) or KiB, MiB, GiB,
 * TiB (powers of 1024).  0 is refused. */
static bool parse_shard_size(const char *s, uint64_t *out) {
    static const struct {
        const char *unit;
        double mul;
    } units[] = {
        {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0},
        {"kb", 1e3},     {"mb", 1e6},        {"gb", 1e9},           {"tb", 1e12}};
    if (!s || !*s) return false;
    char *end;
    if (*s >= '0' && *s <= '9') {
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (!errno && *end == '\0') {
            *out = v;
            return v > 0;
        }
    }
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v > 0)) return false;
    while (*end == ' ')
        end++;
    for (size_t i = 0; i < sizeof units / sizeof *units; i++)
        if (strcasecmp(end, units[i].unit) == 0) {
            double b = v * units[i].mul;
            if (!(b >= 1.0) || b >= 18446744073709551616.0) return false;
            *out = (uint64_t)b;
            return true;
        }
    return false;
}

#define BLOCK ((uint64_t)16 << 20)

static bool is_castable(ckpt_dtype dt) {
    return dt == CKPT_DTYPE_FLOAT64 || dt == CKPT_DTYPE_FLOAT32 || dt == CKPT_DTYPE_FLOAT16 ||
           dt == CKPT_DTYPE_BFLOAT16;
}

/* ------------------------------------------------------------------ casting */

/* IEEE binary16 bits of f, rounded to nearest even, overflow to infinity, NaN as the quiet
 * 0x7E00 with f's sign (c10::Half); integer arithmetic only, so no compiler needs _Float16. */
static uint16_t f32_to_f16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return sign | 0x7E00u;
    if (a >= 0x477FF000u) return sign | 0x7C00u; /* >= 65520: rounds past 65504 */
    if (a >= 0x38800000u) {                      /* normal: exponent >= -14 */
        uint32_t r = a - 0x38000000u;            /* rebias 127 -> 15 */
        r += 0xFFFu + ((r >> 13) & 1u);
        return sign | (uint16_t)(r >> 13);
    }
    if (a <= 0x33000000u) return sign; /* <= 2^-25: a tie or less rounds to (even) zero */
    uint32_t shift = 126u - (a >> 23); /* subnormal: units of 2^-24 = m >> shift, 14..24 */
    uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return sign | (uint16_t)q;
}

static void store(ckpt_dtype to, float f, uint8_t *p) {
    if (to == CKPT_DTYPE_FLOAT32) {
        memcpy(p, &f, 4);
    } else if (to == CKPT_DTYPE_FLOAT16) {
        uint16_t h = f32_to_f16_bits(f);
        p[0] = (uint8_t)h;
        p[1] = (uint8_t)(h >> 8);
    } else { /* bfloat16, round to nearest even; NaN becomes 0x7FC0 as in c10 */
        uint32_t u;
        memcpy(&u, &f, 4);
        uint16_t b;
        if ((u & 0x7FFFFFFFu) > 0x7F800000u)
            b = 0x7FC0;
        else
            b = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
        p[0] = (uint8_t)b;
        p[1] = (uint8_t)(b >> 8);
    }
}

/* ------------------------------------------------------------------ writing */

typedef struct sink_ctx {
    int fd;
    ckpt_dtype from, to; /* to == from: no cast */
    uint8_t *cast;       /* BLOCK-sized buffer for cast output */
    uint64_t done, total;
    cli_progress *prog;
    bool failed;
} sink_ctx;

static bool sink(void *ctx, const void *buf, size_t len) {
    sink_ctx *s = ctx;
    const uint8_t *src = buf;
    size_t out_len = len;
    if (s->from != s->to) {
        size_t in_item = ckpt_dtype_itemsize(s->from), out_item = ckpt_dtype_itemsize(s->to);
        size_t n = len / in_item;
        for (size_t i = 0; i < n; i++)
            store(s->to, (float)ckpt_elem_to_double(s->from, src + i * in_item),
                  s->cast + i * out_item); /* f64 -> float first, as torch does */
        src = s->cast;
        out_len = n * out_item;
    }
    if (!cli_write_all(s->fd, src, out_len)) return false;
    s->done += out_len;
    cli_progress_fn(s->prog, s->done, s->total);
    return true;
}

typedef struct item {
    const ckpt_entry *e;
    const char *name;
    ckpt_dtype out;
    uint64_t bytes;
} item;

/* The tensor's name in the file: its path relative to --keys (the last path element when
 * --keys names the tensor itself), else NULL when it is not under --keys. */
static const char *st_name(const ckpt_entry *e, const char *keys) {
    const char *rest = ckpt_entry_under(e, keys);
    if (!rest || *rest) return rest;
    const char *p = ckpt_entry_path(e), *slash = strrchr(p, '/');
    return slash ? slash + 1 : p;
}

static size_t order_size(const item *it) { return ckpt_dtype_itemsize(it->out); }

/* ------------------------------------------------------------------ --format torch */

typedef struct torch_sink {
    int fd;
    uint64_t done, total;
    cli_progress *prog;
    int write_errno; /* the write that failed, else 0 */
} torch_sink;

static bool torch_write(void *ctx, const void *buf, size_t len) {
    torch_sink *s = ctx;
    if (!cli_write_all(s->fd, buf, len)) {
        s->write_errno = errno ? errno : EIO;
        return false;
    }
    s->done += len;
    cli_progress_fn(s->prog, s->done, s->total);
    return true;
}

/* Opens OUT for writing: standard output for "-", else OUT.tmp-<pid> (name in tmp). */
static int open_out(const char *out, char *tmp, size_t tmp_size) {
    if (strcmp(out, "-") == 0) {
        tmp[0] = '\0';
        return STDOUT_FILENO;
    }
    int n = snprintf(tmp, tmp_size, "%s.tmp-%ld", out, (long)getpid());
    if (n < 0 || (size_t)n >= tmp_size) {
        cli_error("%s: name too long", out);
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) cli_error("%s: %s", tmp, strerror(errno));
    return fd;
}

/* Makes OUT appear (fsync, rename) or removes the temporary file; stdout: nothing. */
static bool close_out(int fd, const char *tmp, const char *out, bool ok) {
    if (!tmp[0]) return ok;
    if (ok && fsync(fd) != 0) {
        cli_error("error writing to %s: %s", tmp, strerror(errno));
        ok = false;
    }
    if (close(fd) != 0 && ok) {
        cli_error("error writing to %s: %s", tmp, strerror(errno));
        ok = false;
    }
    if (ok && rename(tmp, out) != 0) {
        cli_error("%s: %s", out, strerror(errno));
        ok = false;
    }
    if (!ok) unlink(tmp);
    return ok;
}

static int export_torch(ckpt_reader *r, const char *dir, const char *out, const selection *sel,
                        bool by_id, bool quiet) {
    const char *keys = sel->keys;
    ckpt_torchsave_options o = {
        .under = keys, .by_id = by_id, .exclude = sel->exclude, .num_exclude = sel->nexclude};
    ckpt_torchsave *t = NULL;
    ckpt_error err = {0};
    if (ckpt_torchsave_create(r, &o, &t, &err) != CKPT_OK) {
        if (err.code == CKPT_E_NOTFOUND)
            cli_error("%s: no entries%s%s%s", dir, keys[0] ? " under " : "", keys,
                      sel->nexclude ? " (after --exclude)" : "");
        else
            cli_error("%s", err.message);
        return CLI_EXIT_FAIL;
    }
    for (size_t i = 0; !quiet && i < ckpt_torchsave_num_skipped(t); i++) {
        const char *why;
        const ckpt_entry *e = ckpt_torchsave_skipped(t, i, &why);
        cli_error("warning: %s: %s, not exported", ckpt_entry_path(e), why);
    }
    char tmp[4096];
    int fd = open_out(out, tmp, sizeof tmp);
    if (fd < 0) {
        ckpt_torchsave_free(t);
        return CLI_EXIT_FAIL;
    }
    cli_progress prog;
    cli_progress_init(&prog, "export");
    if (quiet) prog.tty = false;
    torch_sink ts = {.fd = fd, .total = ckpt_torchsave_size(t), .prog = &prog};
    bool ok = ckpt_torchsave_write(t, BLOCK, torch_write, &ts, &err) == CKPT_OK;
    cli_progress_end(&prog);
    if (!ok) {
        if (ts.write_errno)
            cli_error("error writing to %s: %s", tmp[0] ? tmp : "standard output",
                      strerror(ts.write_errno));
        else
            cli_error("%s", err.message);
    }
    ok = close_out(fd, tmp, out, ok);
    int status = ok ? CLI_EXIT_OK : CLI_EXIT_FAIL;
    if (ok && !quiet) {
        char hs[32];
        FILE *f = tmp[0] ? stdout : stderr;
        fprintf(f, "exported %zu tensors (%s) and %zu values to %s\n",
                ckpt_torchsave_num_tensors(t),
                cli_human_size(ckpt_torchsave_tensor_bytes(t), hs, sizeof hs),
                ckpt_torchsave_num_values(t), tmp[0] ? out : "standard output");
        if (tmp[0] && !cli_flush_stdout()) status = CLI_EXIT_FAIL;
    }
    ckpt_torchsave_free(t);
    return status;
}

/* ------------------------------------------------------------------ safetensors */

/* Stable partition by item size, 16 down to 1 (every tensor aligned to its item size). */
static bool sort_by_itemsize(item *v, size_t m) {
    item *sorted = malloc((m ? m : 1) * sizeof *sorted);
    if (!sorted) return false;
    size_t k = 0;
    for (size_t size = 16; size >= 1; size /= 2)
        for (size_t i = 0; i < m; i++)
            if (order_size(&v[i]) == size) sorted[k++] = v[i];
    memcpy(v, sorted, m * sizeof *v);
    free(sorted);
    return true;
}

/* The header of a safetensors file of v[0..m) in that order: 8-byte length, JSON padded with
 * spaces to a multiple of 8.  *data: the bytes of the tensors. */
static bool st_header(const item *v, size_t m, const char *dir, const char *skipped, char **hdr,
                      size_t *hdr_len, uint64_t *data) {
    char *json = NULL;
    size_t json_len = 0;
    FILE *h = open_memstream(&json, &json_len);
    if (!h) return false;
    fputs("{\"__metadata__\":{\"format\":\"pt\",\"ckptfs.source\":", h);
    cli_json_string(h, dir);
    if (skipped && *skipped) {
        fputs(",\"ckptfs.skipped\":", h);
        cli_json_string(h, skipped);
    }
    fputc('}', h);
    uint64_t at = 0;
    for (size_t i = 0; i < m; i++) {
        fputc(',', h);
        cli_json_string(h, v[i].name);
        fprintf(h, ":{\"dtype\":\"%s\",\"shape\":[", ckpt_dtype_safetensors_name(v[i].out));
        for (int d = 0; d < ckpt_entry_ndim(v[i].e); d++)
            fprintf(h, "%s%lld", d ? "," : "", (long long)ckpt_entry_shape(v[i].e)[d]);
        fprintf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                (unsigned long long)(at + v[i].bytes));
        at += v[i].bytes;
    }
    fputc('}', h);
    while (ftell(h) % 8)
        fputc(' ', h);
    if (fclose(h) != 0) {
        free(json);
        return false;
    }
    *hdr = malloc(json_len + 8);
    if (!*hdr) {
        free(json);
        return false;
    }
    for (int i = 0; i < 8; i++)
        (*hdr)[i] = (char)(uint8_t)((uint64_t)json_len >> (8 * i));
    memcpy(*hdr + 8, json, json_len);
    free(json);
    *hdr_len = json_len + 8;
    *data = at;
    return true;
}

/* Writes one safetensors file of v[0..m) (sorted by item size here) to fd; messages name
 * `dest`. */
static bool st_write(ckpt_reader *r, int fd, item *v, size_t m, const char *dir,
                     const char *skipped, sink_ctx *sc, const char *dest) {
    char *hdr;
    size_t hdr_len;
    uint64_t data;
    if (!sort_by_itemsize(v, m) || !st_header(v, m, dir, skipped, &hdr, &hdr_len, &data)) {
        cli_error("out of memory");
        return false;
    }
    bool ok = cli_write_all(fd, hdr, hdr_len);
    if (!ok) cli_error("error writing to %s: %s", dest, strerror(errno));
    free(hdr);
    ckpt_error err = {0};
    for (size_t i = 0; ok && i < m; i++) {
        const ckpt_entry *e = v[i].e;
        cli_slice sl;
        cli_slice_full(&sl, ckpt_entry_ndim(e), ckpt_entry_shape(e));
        sc->from = ckpt_entry_dtype(e);
        sc->to = v[i].out;
        if (cli_read_blocks(r, e, &sl, BLOCK, sink, sc, dest, &err) != CKPT_OK) {
            cli_error("%s", err.message);
            ok = false;
        }
    }
    return ok;
}

/* ------------------------------------------------------------------ --max-shard-size */

#define SHARD_INDEX "model.safetensors.index.json"
#define SHARD_SINGLE "model.safetensors"

/* huggingface_hub's split_state_dict_into_shards_factory over v[0..m) in order: shard[i] is
 * the 0-based shard of item i; returns the number of shards.  A tensor larger than `limit`
 * goes into a shard of its own, placed in the list when it is met; the shard being filled is
 * placed when the next tensor would take it past `limit`, or at the end. */
static size_t split_shards(const item *v, size_t m, uint64_t limit, size_t *shard,
                           size_t *open_list) {
    size_t nshards = 0, nopen = 0;
    uint64_t cur = 0;
    for (size_t i = 0; i < m; i++) {
        uint64_t sz = v[i].bytes;
        if (sz > limit) {
            shard[i] = nshards++;
            continue;
        }
        if (cur + sz > limit) {
            for (size_t k = 0; k < nopen; k++)
                shard[open_list[k]] = nshards;
            nshards++;
            nopen = 0;
            cur = 0;
        }
        open_list[nopen++] = i;
        cur += sz;
    }
    if (nopen) {
        for (size_t k = 0; k < nopen; k++)
            shard[open_list[k]] = nshards;
        nshards++;
    }
    return nshards;
}

static void shard_name(char *buf, size_t size, size_t k, size_t n) {
    if (n == 1)
        snprintf(buf, size, SHARD_SINGLE);
    else
        snprintf(buf, size, "model-%05zu-of-%05zu.safetensors", k + 1, n);
}

/* A name a HuggingFace export of another size may have left: model.safetensors, its index,
 * model-NNNNN-of-NNNNN.safetensors. */
static bool hf_export_name(const char *name) {
    if (strcmp(name, SHARD_SINGLE) == 0 || strcmp(name, SHARD_INDEX) == 0) return true;
    if (strlen(name) != strlen("model-00001-of-00001.safetensors")) return false;
    if (strncmp(name, "model-", 6) != 0 || strncmp(name + 11, "-of-", 4) != 0 ||
        strcmp(name + 20, ".safetensors") != 0)
        return false;
    for (int i = 0; i < 5; i++)
        if (name[6 + i] < '0' || name[6 + i] > '9' || name[15 + i] < '0' || name[15 + i] > '9')
            return false;
    return true;
}

static void join(char *buf, size_t size, const char *dir, const char *name) {
    snprintf(buf, size, "%s/%s", dir, name);
}

static int export_sharded(ckpt_reader *r, const char *dir, const char *outdir, item *items,
                          size_t m, const char *skipped, uint64_t limit, sink_ctx *sc,
                          size_t *nshards) {
    if (mkdir(outdir, 0777) != 0 && errno != EEXIST) {
        cli_error("%s: %s", outdir, strerror(errno));
        return CLI_EXIT_FAIL;
    }
    struct stat st;
    if (stat(outdir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        cli_error("%s: not a directory (--max-shard-size writes a directory)", outdir);
        return CLI_EXIT_FAIL;
    }
    size_t *shard = malloc((m ? m : 1) * sizeof *shard);
    size_t *open_list = malloc((m ? m : 1) * sizeof *open_list);
    item *part = malloc((m ? m : 1) * sizeof *part);
    if (!shard || !open_list || !part) {
        free(shard);
        free(open_list);
        free(part);
        cli_error("out of memory");
        return CLI_EXIT_FAIL;
    }
    size_t n = split_shards(items, m, limit, shard, open_list);
    /* the items shard by shard, in order within each (a stable counting sort): shard k is
     * order[first[k] .. first[k + 1]) */
    size_t *order = open_list, *first = calloc(n + 1, sizeof *first);
    char(*tmps)[4096] = calloc(n, sizeof *tmps);
    bool ok = tmps && first;
    if (!ok) cli_error("out of memory");
    for (size_t i = 0; ok && i < m; i++)
        first[shard[i] + 1]++;
    for (size_t k = 0; ok && k < n; k++)
        first[k + 1] += first[k];
    for (size_t i = 0; ok && i < m; i++)
        order[first[shard[i]]++] = i;
    for (size_t k = n; ok && k > 0; k--) /* first[k] moved to the end of shard k: back */
        first[k] = first[k - 1];
    if (ok) first[0] = 0;
    size_t written = 0;
    char name[64], path[4096];
    for (size_t k = 0; ok && k < n; k++) {
        size_t np = 0;
        for (size_t j = first[k]; j < first[k + 1]; j++)
            part[np++] = items[order[j]];
        shard_name(name, sizeof name, k, n);
        join(path, sizeof path, outdir, name);
        int fd = open_out(path, tmps[k], sizeof tmps[k]);
        if (fd < 0) {
            ok = false;
            break;
        }
        written = k + 1;
        sc->fd = fd;
        ok = st_write(r, fd, part, np, dir, skipped, sc, tmps[k]);
        if (ok && fsync(fd) != 0) {
            cli_error("error writing to %s: %s", tmps[k], strerror(errno));
            ok = false;
        }
        if (close(fd) != 0 && ok) {
            cli_error("error writing to %s: %s", tmps[k], strerror(errno));
            ok = false;
        }
    }
    /* every shard written: they take their names, then the index (its appearance marks the
     * export complete, as torch and the mount read a HuggingFace directory) */
    for (size_t k = 0; ok && k < n; k++) {
        shard_name(name, sizeof name, k, n);
        join(path, sizeof path, outdir, name);
        if (rename(tmps[k], path) != 0) {
            cli_error("%s: %s", path, strerror(errno));
            ok = false;
        }
    }
    if (!ok)
        for (size_t k = 0; tmps && k < written; k++)
            unlink(tmps[k]);
    if (ok && n > 1) {
        char tmp[4096];
        join(path, sizeof path, outdir, SHARD_INDEX);
        int fd = open_out(path, tmp, sizeof tmp);
        FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (!f) {
            if (fd >= 0) {
                cli_error("%s: %s", tmp, strerror(errno));
                close(fd);
                unlink(tmp);
            }
            ok = false;
        } else {
            /* json.dump(index, indent=2), as huggingface_hub's save_torch_state_dict writes it:
             * total_size is the tensors' bytes; weight_map shard by shard */
            uint64_t total = 0;
            for (size_t i = 0; i < m; i++)
                total += items[i].bytes;
            fprintf(f, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {",
                    (unsigned long long)total);
            for (size_t k = 0; k < n; k++) {
                shard_name(name, sizeof name, k, n);
                for (size_t j = first[k]; j < first[k + 1]; j++) {
                    fputs(j ? ",\n    " : "\n    ", f);
                    cli_json_string(f, items[order[j]].name);
                    fprintf(f, ": \"%s\"", name);
                }
            }
            fputs("\n  }\n}", f);
            bool wok = fflush(f) == 0 && !ferror(f);
            if (!wok) cli_error("error writing to %s: %s", tmp, strerror(errno));
            int dfd = dup(fileno(f));
            fclose(f);
            ok = close_out(dfd, tmp, path, wok);
        }
    }
    if (ok) { /* what an export of another size left, no longer named by the index */
        DIR *d = opendir(outdir);
        for (struct dirent *de; d && (de = readdir(d));) {
            if (!hf_export_name(de->d_name)) continue;
            bool ours = n > 1 && strcmp(de->d_name, SHARD_INDEX) == 0;
            for (size_t k = 0; !ours && k < n; k++) {
                shard_name(name, sizeof name, k, n);
                ours = strcmp(de->d_name, name) == 0;
            }
            if (ours) continue;
            join(path, sizeof path, outdir, de->d_name);
            if (unlink(path) != 0) cli_error("warning: %s: %s", path, strerror(errno));
        }
        if (d) closedir(d);
    }
    free(tmps);
    free(first);
    free(order);
    free(part);
    free(shard);
    *nshards = n;
    return ok ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}

static int export_safetensors(ckpt_reader *r, const char *dir, const char *out,
                              const selection *sel, ckpt_dtype cast, uint64_t shard_limit,
                              bool quiet) {
    size_t n = ckpt_reader_num_entries(r), m = 0;
    item *items = calloc(n ? n : 1, sizeof *items);
    if (!items) {
        cli_error("out of memory");
        return CLI_EXIT_FAIL;
    }
    int status = CLI_EXIT_OK;
    char *skipped = NULL;
    size_t skipped_len = 0;
    FILE *sk = open_memstream(&skipped, &skipped_len);
    for (size_t i = 0; i < n; i++) {
        const ckpt_entry *e = ckpt_reader_entry(r, i);
        if (ckpt_entry_kind_of(e) != CKPT_ENTRY_TENSOR) continue;
        const char *name = st_name(e, sel->keys);
        if (!name || excluded(sel, e)) continue;
        ckpt_dtype dt = ckpt_entry_dtype(e);
        ckpt_dtype to = cast && is_castable(dt) ? cast : dt;
        if (!ckpt_dtype_safetensors_name(to) || ckpt_entry_problem(e)) {
            if (!quiet)
                cli_error("warning: %s: %s, not exported", ckpt_entry_path(e),
                          ckpt_entry_problem(e) ? ckpt_entry_problem(e)
                                                : "dtype has no safetensors name");
            if (sk) {
                fputs(ftell(sk) ? "," : "[", sk);
                cli_json_string(sk, ckpt_entry_path(e));
            }
            continue;
        }
        uint64_t numel = ckpt_entry_numel(e);
        items[m++] = (item){e, name, to, numel * ckpt_dtype_itemsize(to)};
    }
    if (sk) {
        if (ftell(sk)) fputc(']', sk);
        fclose(sk);
    }
    if (m == 0) {
        cli_error("%s: no tensors%s%s%s", dir, sel->keys[0] ? " under " : "", sel->keys,
                  sel->nexclude ? " (after --exclude)" : "");
        free(skipped);
        free(items);
        return CLI_EXIT_FAIL;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < m; i++)
        total += items[i].bytes;
    cli_progress prog;
    cli_progress_init(&prog, "export");
    if (quiet) prog.tty = false;
    sink_ctx sc = {.total = total, .prog = &prog, .cast = malloc(BLOCK * 2)};
    if (!sc.cast) {
        cli_error("out of memory");
        free(skipped);
        free(items);
        return CLI_EXIT_FAIL;
    }
    char tmp[4096] = "";
    bool ok;
    size_t nshards = 1;
    if (shard_limit) {
        ok = export_sharded(r, dir, out, items, m, skipped, shard_limit, &sc, &nshards) ==
             CLI_EXIT_OK;
    } else {
        int fd = open_out(out, tmp, sizeof tmp);
        ok = fd >= 0;
        if (ok) {
            sc.fd = fd;
            ok = st_write(r, fd, items, m, dir, skipped, &sc, tmp[0] ? tmp : "standard output");
            ok = close_out(fd, tmp, out, ok);
        }
    }
    cli_progress_end(&prog);
    free(sc.cast);
    if (!ok) {
        status = CLI_EXIT_FAIL;
    } else if (!quiet) {
        char hs[32];
        bool to_stdout = !shard_limit && !tmp[0];
        fprintf(to_stdout ? stderr : stdout, "exported %zu tensors (%s) to %s", m,
                cli_human_size(total, hs, sizeof hs), to_stdout ? "standard output" : out);
        if (shard_limit) fprintf(stdout, " in %zu shard%s", nshards, nshards == 1 ? "" : "s");
        fputc('\n', to_stdout ? stderr : stdout);
        if (!to_stdout && !cli_flush_stdout()) status = CLI_EXIT_FAIL;
    }
    free(skipped);
    free(items);
    return status;
}

static int export_run(const char *dir, const char *out, const selection *sel, ckpt_dtype cast,
                      bool by_id, bool torch, uint64_t shard_limit, bool quiet) {
    cli_dir dd;
    if (!(dir = cli_step_dir(dir, &dd))) return CLI_EXIT_FAIL;
    ckpt_reader *r = cli_open(dir);
    if (!r) return CLI_EXIT_FAIL;
    int rc = torch ? export_torch(r, dir, out, sel, by_id, quiet)
                   : export_safetensors(r, dir, out, sel, cast, shard_limit, quiet);
    ckpt_reader_free(r);
    return rc;
}

int cmd_export(int argc, char **argv) {
    cli_parser p;
    cli_parser_init(&p, "export", argc, argv);
    const char *dir = NULL, *out = NULL, *arg;
    ckpt_dtype cast = CKPT_DTYPE_INVALID;
    bool quiet = false, by_id = false;
    const char *format = NULL;
    uint64_t shard_limit = 0;
    /* every --exclude points into argv: at most argc of them */
    selection sel = {.keys = "", .exclude = calloc((size_t)(argc > 0 ? argc : 1), sizeof(char *))};
    if (!sel.exclude) {
        cli_error("out of memory");
        return CLI_EXIT_FAIL;
    }
    int rc = -1;
    for (int id; rc < 0 && (id = cli_next(&p, export_opts, sizeof export_opts / sizeof *export_opts,
                                          &arg));) {
        switch (id) {
        case CLI_OPT_HELP:
            cmd_export_help(stdout);
            rc = cli_flush_stdout() ? 0 : CLI_EXIT_FAIL;
            break;
        case CLI_OPT_ERROR: rc = CLI_EXIT_USAGE; break;
        case CLI_OPT_OPERAND:
            if (!dir)
                dir = arg;
            else if (!out)
                out = arg;
            else
                rc = cli_usage_error("export", "too many arguments ('%s')", arg);
            break;
        case OPT_KEYS: sel.keys = arg; break;
        case OPT_EXCLUDE:
            if (!*arg)
                rc = cli_usage_error("export", "--exclude wants a tree path or key prefix");
            else
                sel.exclude[sel.nexclude++] = arg;
            break;
        case OPT_SHARD:
            if (!parse_shard_size(arg, &shard_limit))
                rc = cli_usage_error("export",
                                     "--max-shard-size wants a size (bytes, 5GB, 500MiB...), "
                                     "not '%s'",
                                     arg);
            break;
        case OPT_DTYPE:
            cast = ckpt_dtype_from_name(arg);
            if (cast == CKPT_DTYPE_INVALID && strcmp(arg, "fp32") == 0) cast = CKPT_DTYPE_FLOAT32;
            if (cast == CKPT_DTYPE_INVALID && strcmp(arg, "fp16") == 0) cast = CKPT_DTYPE_FLOAT16;
            if (cast != CKPT_DTYPE_BFLOAT16 && cast != CKPT_DTYPE_FLOAT16 &&
                cast != CKPT_DTYPE_FLOAT32)
                rc = cli_usage_error("export", "--dtype wants bf16, fp16 or fp32, not '%s'", arg);
            break;
        case OPT_QUIET: quiet = true; break;
        case OPT_BY_ID: by_id = true; break;
        case OPT_FORMAT:
            if (strcmp(arg, "torch") != 0 && strcmp(arg, "safetensors") != 0)
                rc =
                    cli_usage_error("export", "--format wants safetensors or torch, not '%s'", arg);
            else
                format = arg;
            break;
        }
    }
    if (rc < 0 && (!dir || !out))
        rc = cli_usage_error("export", "usage: ckpt export DIR OUT.safetensors");
    if (rc < 0 && by_id && format && strcmp(format, "torch") != 0)
        rc = cli_usage_error("export", "--by-id writes --format torch");
    if (rc < 0) {
        if (by_id) format = "torch";
        if (!format) {
            size_t ol = strlen(out);
            bool pt = !shard_limit && ((ol > 3 && strcmp(out + ol - 3, ".pt") == 0) ||
                                       (ol > 4 && strcmp(out + ol - 4, ".pth") == 0));
            format = pt ? "torch" : "safetensors";
        }
        bool torch = strcmp(format, "torch") == 0;
        if (torch && cast)
            rc = cli_usage_error("export", "--dtype applies to --format safetensors only");
        else if (torch && shard_limit)
            rc = cli_usage_error("export", "--max-shard-size writes safetensors");
        else if (shard_limit && strcmp(out, "-") == 0)
            rc = cli_usage_error("export", "--max-shard-size writes a directory, not '-'");
        else
            rc = export_run(dir, out, &sel, cast, by_id, torch, shard_limit, quiet);
    }
    free(sel.exclude);
    return rc;
}
