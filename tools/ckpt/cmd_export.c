/* cmd_export.c — `ckpt export`: writes the tensors of a checkpoint (or of one subtree) as a
 * safetensors file, streaming each tensor in bounded blocks (memory stays at a few blocks
 * however large the checkpoint), optionally casting floating tensors to bf16/fp16/fp32 the
 * way torch's `.to(dtype)` rounds, with a progress line on a terminal; or, with --format
 * torch, the nested state_dict (tensors and plain values) as a torch.save file that
 * torch.load reads (ckpt_torchsave_write streams it).  The file appears atomically (written
 * as OUT.tmp-<pid>, then renamed); `-` writes to standard output. */
#include "ckpt_save.h"
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cmd_export_help(FILE *out) {
    fputs("Usage: ckpt export [options] CHECKPOINT_DIR OUT.safetensors\n"
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
          "Options:\n"
          "      --format F      safetensors (default) or torch\n"
          "      --keys PATH     export only the subtree PATH (a tree path or directory)\n"
          "      --by-id         the optimizer state at PATH with parameter ids (torch)\n"
          "      --dtype T       cast floating tensors (float64/32/16, bfloat16) to T: bf16,\n"
          "                      fp16 or fp32 (rounding as torch's .to(T)); others unchanged\n"
          "                      (safetensors only)\n"
          "  -q, --quiet         no progress line and no summary\n"
          "      --help          show this help\n",
          out);
}

enum { OPT_KEYS = 1, OPT_DTYPE, OPT_QUIET, OPT_FORMAT, OPT_BY_ID };
static const cli_opt export_opts[] = {
    {"keys", 0, true, OPT_KEYS},   {"format", 0, true, OPT_FORMAT},  {"by-id", 0, false, OPT_BY_ID},
    {"dtype", 0, true, OPT_DTYPE}, {"quiet", 'q', false, OPT_QUIET},
};

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

/* Path p lies under directory `dir` (element boundary): the rest, else NULL. */
static const char *under(const char *p, const char *dir) {
    size_t n = strlen(dir);
    while (n && dir[n - 1] == '/')
        n--;
    if (n == 0) return p;
    if (strncmp(p, dir, n) != 0) return NULL;
    if (p[n] == '/') return p + n + 1;
    if (p[n] == '\0') return strrchr(p, '/') ? strrchr(p, '/') + 1 : p; /* a single tensor */
    return NULL;
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
    snprintf(tmp, tmp_size, "%s.tmp-%ld", out, (long)getpid());
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

static int export_torch(ckpt_reader *r, const char *dir, const char *out, const char *keys,
                        bool by_id, bool quiet) {
    ckpt_torchsave_options o = {.under = keys, .by_id = by_id};
    ckpt_torchsave *t = NULL;
    ckpt_error err = {0};
    if (ckpt_torchsave_create(r, &o, &t, &err) != CKPT_OK) {
        if (err.code == CKPT_E_NOTFOUND)
            cli_error("%s: no entries under %s", dir, keys);
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

int cmd_export(int argc, char **argv) {
    cli_parser p;
    cli_parser_init(&p, "export", argc, argv);
    const char *dir = NULL, *out = NULL, *keys = "", *arg;
    ckpt_dtype cast = CKPT_DTYPE_INVALID;
    bool quiet = false, by_id = false;
    const char *format = NULL;
    for (int id;
         (id = cli_next(&p, export_opts, sizeof export_opts / sizeof *export_opts, &arg));) {
        switch (id) {
        case CLI_OPT_HELP: cmd_export_help(stdout); return cli_flush_stdout() ? 0 : CLI_EXIT_FAIL;
        case CLI_OPT_ERROR: return CLI_EXIT_USAGE;
        case CLI_OPT_OPERAND:
            if (!dir)
                dir = arg;
            else if (!out)
                out = arg;
            else
                return cli_usage_error("export", "too many arguments ('%s')", arg);
            break;
        case OPT_KEYS: keys = arg; break;
        case OPT_DTYPE:
            cast = ckpt_dtype_from_name(arg);
            if (cast == CKPT_DTYPE_INVALID && strcmp(arg, "fp32") == 0) cast = CKPT_DTYPE_FLOAT32;
            if (cast == CKPT_DTYPE_INVALID && strcmp(arg, "fp16") == 0) cast = CKPT_DTYPE_FLOAT16;
            if (cast != CKPT_DTYPE_BFLOAT16 && cast != CKPT_DTYPE_FLOAT16 &&
                cast != CKPT_DTYPE_FLOAT32)
                return cli_usage_error("export", "--dtype wants bf16, fp16 or fp32, not '%s'", arg);
            break;
        case OPT_QUIET: quiet = true; break;
        case OPT_BY_ID: by_id = true; break;
        case OPT_FORMAT:
            if (strcmp(arg, "torch") != 0 && strcmp(arg, "safetensors") != 0)
                return cli_usage_error("export", "--format wants safetensors or torch, not '%s'",
                                       arg);
            format = arg;
            break;
        }
    }
    if (!dir || !out) return cli_usage_error("export", "usage: ckpt export DIR OUT.safetensors");
    if (by_id && format && strcmp(format, "torch") != 0)
        return cli_usage_error("export", "--by-id writes --format torch");
    if (by_id) format = "torch";
    if (!format) {
        size_t ol = strlen(out);
        bool pt = (ol > 3 && strcmp(out + ol - 3, ".pt") == 0) ||
                  (ol > 4 && strcmp(out + ol - 4, ".pth") == 0);
        format = pt ? "torch" : "safetensors";
    }
    bool torch = strcmp(format, "torch") == 0;
    if (torch && cast)
        return cli_usage_error("export", "--dtype applies to --format safetensors only");
    cli_dir dd;
    if (!(dir = cli_step_dir(dir, &dd))) return CLI_EXIT_FAIL;
    ckpt_reader *r = cli_open(dir);
    if (!r) return CLI_EXIT_FAIL;
    if (torch) {
        int rc = export_torch(r, dir, out, keys, by_id, quiet);
        ckpt_reader_free(r);
        return rc;
    }
    size_t n = ckpt_reader_num_entries(r), m = 0;
    item *items = calloc(n ? n : 1, sizeof *items);
    if (!items) {
        cli_error("out of memory");
        ckpt_reader_free(r);
        return CLI_EXIT_FAIL;
    }
    int status = CLI_EXIT_OK;
    char *skipped = NULL;
    size_t skipped_len = 0;
    FILE *sk = open_memstream(&skipped, &skipped_len);
    for (size_t i = 0; i < n; i++) {
        const ckpt_entry *e = ckpt_reader_entry(r, i);
        if (ckpt_entry_kind_of(e) != CKPT_ENTRY_TENSOR) continue;
        const char *name = under(ckpt_entry_path(e), keys);
        if (!name) continue;
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
        cli_error("%s: no tensors%s%s", dir, keys[0] ? " under " : "", keys);
        status = CLI_EXIT_FAIL;
        goto done;
    }
    /* data order: item size 16 down to 1 (every tensor aligned to its item size), stable */
    item *sorted = malloc(m * sizeof *sorted);
    if (!sorted) {
        cli_error("out of memory");
        status = CLI_EXIT_FAIL;
        goto done;
    }
    size_t k = 0;
    for (size_t size = 16; size >= 1; size /= 2)
        for (size_t i = 0; i < m; i++)
            if (order_size(&items[i]) == size) sorted[k++] = items[i];
    memcpy(items, sorted, m * sizeof *items);
    free(sorted);

    char *hdr = NULL;
    size_t hdr_len = 0;
    FILE *h = open_memstream(&hdr, &hdr_len);
    if (!h) {
        cli_error("out of memory");
        status = CLI_EXIT_FAIL;
        goto done;
    }
    fputs("{\"__metadata__\":{\"format\":\"pt\",\"ckptfs.source\":", h);
    cli_json_string(h, dir);
    if (skipped && skipped_len) {
        fputs(",\"ckptfs.skipped\":", h);
        cli_json_string(h, skipped);
    }
    fputc('}', h);
    uint64_t at = 0;
    for (size_t i = 0; i < m; i++) {
        fputc(',', h);
        cli_json_string(h, items[i].name);
        fprintf(h, ":{\"dtype\":\"%s\",\"shape\":[", ckpt_dtype_safetensors_name(items[i].out));
        for (int d = 0; d < ckpt_entry_ndim(items[i].e); d++)
            fprintf(h, "%s%lld", d ? "," : "", (long long)ckpt_entry_shape(items[i].e)[d]);
        fprintf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                (unsigned long long)(at + items[i].bytes));
        at += items[i].bytes;
    }
    fputc('}', h);
    while (ftell(h) % 8)
        fputc(' ', h);
    fclose(h);

    char tmp[4096];
    int fd = open_out(out, tmp, sizeof tmp);
    if (fd < 0) {
        free(hdr);
        status = CLI_EXIT_FAIL;
        goto done;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)hdr_len >> (8 * i));
    cli_progress prog;
    cli_progress_init(&prog, "export");
    if (quiet) prog.tty = false;
    sink_ctx sc = {.fd = fd, .total = at, .prog = &prog, .cast = malloc(BLOCK * 2)};
    bool ok = sc.cast != NULL;
    if (!ok) cli_error("out of memory");
    if (ok && !(cli_write_all(fd, len8, 8) && cli_write_all(fd, hdr, hdr_len))) {
        cli_error("error writing to %s: %s", tmp[0] ? tmp : "standard output", strerror(errno));
        ok = false;
    }
    free(hdr);
    ckpt_error err = {0};
    for (size_t i = 0; ok && i < m; i++) {
        const ckpt_entry *e = items[i].e;
        cli_slice s;
        cli_slice_full(&s, ckpt_entry_ndim(e), ckpt_entry_shape(e));
        sc.from = ckpt_entry_dtype(e);
        sc.to = items[i].out;
        if (cli_read_blocks(r, e, &s, BLOCK, sink, &sc, tmp[0] ? tmp : "standard output", &err) !=
            CKPT_OK) {
            cli_error("%s", err.message);
            ok = false;
        }
    }
    cli_progress_end(&prog);
    free(sc.cast);
    ok = close_out(fd, tmp, out, ok);
    if (!ok) {
        status = CLI_EXIT_FAIL;
    } else if (!quiet) {
        char hs[32];
        fprintf(tmp[0] ? stdout : stderr, "exported %zu tensors (%s) to %s\n", m,
                cli_human_size(at, hs, sizeof hs), tmp[0] ? out : "standard output");
        if (tmp[0] && !cli_flush_stdout()) status = CLI_EXIT_FAIL;
    }
done:
    free(skipped);
    free(items);
    ckpt_reader_free(r);
    return status;
}
