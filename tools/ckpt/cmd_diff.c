/* cmd_diff.c — `ckpt diff A B`: compares two checkpoints entry by entry, by tree path,
 * whatever their sharding: same / changed (dtype, shape, or values with the largest absolute
 * difference and the relative L2 difference) / only in A / only in B.  Every tensor's bytes
 * are read and compared: a manifest (.ckptfs-manifest) is not evidence about the bytes beside
 * it (a copied or damaged checkpoint carries the original's manifest), so diff never says
 * "same" from hashes.  Exit status like diff(1): 0 same, 1 different, 2 trouble. */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void cmd_diff_help(FILE *out) {
    fputs("Usage: ckpt diff [options] A B\n"
          "\n"
          "Compare two checkpoints entry by entry (matched by tree path, whatever their\n"
          "sharding).  One line per entry that differs (all entries with -a):\n"
          "  changed PATH  max_abs=X rel_l2=Y      values differ (rel_l2 = |A-B| / |A|)\n"
          "  changed PATH  dtype float32 -> bfloat16 (or shape, kind, value)\n"
          "  only-a PATH / only-b PATH\n"
          "  same PATH                              (with -a)\n"
          "and a summary.  Every tensor's bytes are read and compared (manifests are not\n"
          "trusted: a copy carries its original's manifest whatever happened to its data).\n"
          "Exit status: 0 identical, 1 different, 2 trouble (unreadable input, bad usage).\n"
          "\n"
          "Options:\n"
          "  -a, --all      also list identical entries\n"
          "      --json     one JSON object: {\"identical\", \"counts\", \"entries\": [...]}\n"
          "      --help     show this help\n",
          out);
}

enum { OPT_ALL = 1, OPT_JSON };
static const cli_opt diff_opts[] = {
    {"all", 'a', false, OPT_ALL},
    {"json", 0, false, OPT_JSON},
};

#define BLOCK_BYTES ((uint64_t)16 << 20)
enum { EXIT_SAME = 0, EXIT_DIFFERENT = 1, EXIT_TROUBLE = 2 };

typedef struct dctx {
    bool all, json;
    uint64_t same, changed, only_a, only_b;
    bool first;
    bool trouble;
} dctx;

static void line(dctx *d, const char *status, const char *path, const char *detail_text,
                 const char *detail_json) {
    if (d->json) {
        fputs(d->first ? "\n  {\"path\": " : ",\n  {\"path\": ", stdout);
        d->first = false;
        cli_json_string(stdout, path);
        printf(", \"status\": \"%s\"%s%s}", status, detail_json ? ", " : "",
               detail_json ? detail_json : "");
    } else {
        printf("%-8s %s%s%s\n", status, path, detail_text ? "  " : "",
               detail_text ? detail_text : "");
    }
}

typedef struct stats {
    double max_abs, sum_d2, sum_a2;
    bool bits_equal, nan_mismatch;
} stats;

static void accumulate(stats *s, ckpt_dtype dt, const uint8_t *a, const uint8_t *b, size_t n) {
    size_t is = ckpt_dtype_itemsize(dt);
    bool cplx = dt == CKPT_DTYPE_COMPLEX64 || dt == CKPT_DTYPE_COMPLEX128;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *x = a + i * is, *y = b + i * is;
        if (memcmp(x, y, is) == 0) {
            double va = ckpt_elem_to_double(dt, x);
            if (!isnan(va)) s->sum_a2 += va * va;
            continue;
        }
        s->bits_equal = false;
        for (int part = 0; part < (cplx ? 2 : 1); part++) {
            double va, vb;
            if (part == 0) {
                va = ckpt_elem_to_double(dt, x);
                vb = ckpt_elem_to_double(dt, y);
            } else if (dt == CKPT_DTYPE_COMPLEX64) {
                float fa, fb;
                memcpy(&fa, x + 4, 4);
                memcpy(&fb, y + 4, 4);
                va = fa;
                vb = fb;
            } else {
                memcpy(&va, x + 8, 8);
                memcpy(&vb, y + 8, 8);
            }
            if (isnan(va) || isnan(vb)) {
                if (isnan(va) != isnan(vb)) s->nan_mismatch = true;
                continue;
            }
            double d = fabs(va - vb);
            if (isinf(d) || d > s->max_abs) s->max_abs = d;
            s->sum_d2 += d * d;
            s->sum_a2 += va * va;
        }
    }
}

/* Reads both tensors in blocks of leading-dimension rows and compares them. */
static ckpt_status compare_values(ckpt_reader *ra, const ckpt_entry *ea, ckpt_reader *rb,
                                  const ckpt_entry *eb, stats *s, ckpt_error *err) {
    ckpt_dtype dt = ckpt_entry_dtype(ea);
    int nd = ckpt_entry_ndim(ea);
    const int64_t *shape = ckpt_entry_shape(ea);
    size_t is = ckpt_dtype_itemsize(dt);
    uint64_t row = is;
    for (int d = 1; d < nd; d++)
        row *= (uint64_t)shape[d];
    uint64_t rows_total = nd ? (uint64_t)shape[0] : 1;
    if (!row || !rows_total) return CKPT_OK;
    uint64_t per = BLOCK_BYTES / row ? BLOCK_BYTES / row : 1;
    uint8_t *a = malloc(per * row), *b = malloc(per * row);
    ckpt_status st = CKPT_OK;
    if (!a || !b) {
        snprintf(err->message, sizeof err->message, "out of memory");
        st = err->code = CKPT_E_NOMEM;
    }
    int64_t start[CKPT_MAX_NDIM] = {0}, count[CKPT_MAX_NDIM];
    for (int d = 0; d < nd; d++)
        count[d] = shape[d];
    for (uint64_t at = 0; st == CKPT_OK && at < rows_total; at += per) {
        uint64_t k = rows_total - at < per ? rows_total - at : per;
        if (nd) {
            start[0] = (int64_t)at;
            count[0] = (int64_t)k;
        }
        size_t bytes = (size_t)(k * row);
        st = ckpt_read_region(ra, ea, nd ? start : NULL, nd ? count : NULL, a, bytes, err);
        if (st == CKPT_OK)
            st = ckpt_read_region(rb, eb, nd ? start : NULL, nd ? count : NULL, b, bytes, err);
        if (st == CKPT_OK) accumulate(s, dt, a, b, bytes / is);
    }
    free(a);
    free(b);
    return st;
}

static char *object_text(ckpt_reader *r, const ckpt_entry *e, ckpt_error *err) {
    ckpt_object *o = NULL;
    if (ckpt_object_load(r, e, &o, err) != CKPT_OK) return NULL;
    char *t = NULL;
    ckpt_value_to_json(ckpt_object_root(o), &t, err);
    ckpt_object_free(o);
    return t;
}

static void compare_entry(dctx *d, ckpt_reader *a, const ckpt_entry *ea, ckpt_reader *b,
                          const ckpt_entry *eb) {
    const char *path = ckpt_entry_path(ea);
    char text[1100], json[1200];
    ckpt_error err = {0};
    if (ckpt_entry_kind_of(ea) != ckpt_entry_kind_of(eb)) {
        d->changed++;
        bool ta = ckpt_entry_kind_of(ea) == CKPT_ENTRY_TENSOR;
        snprintf(text, sizeof text, "kind %s -> %s", ta ? "tensor" : "object",
                 ta ? "object" : "tensor");
        snprintf(json, sizeof json, "\"detail\": \"%s\"", text);
        line(d, "changed", path, text, json);
        return;
    }
    if (ckpt_entry_kind_of(ea) == CKPT_ENTRY_OBJECT) {
        char *ta = object_text(a, ea, &err), *tb = ta ? object_text(b, eb, &err) : NULL;
        if (!ta || !tb) {
            cli_error("%s: %s", path, err.message);
            d->trouble = true;
        } else if (strcmp(ta, tb) == 0) {
            d->same++;
            if (d->all) line(d, "same", path, NULL, NULL);
        } else {
            d->changed++;
            snprintf(text, sizeof text, "value %.200s -> %.200s", ta, tb);
            size_t jl = strlen(ta) + strlen(tb) + 16;
            char *j = malloc(jl);
            if (j) snprintf(j, jl, "\"a\": %s, \"b\": %s", ta, tb);
            line(d, "changed", path, text, j);
            free(j);
        }
        free(ta);
        free(tb);
        return;
    }
    ckpt_dtype da = ckpt_entry_dtype(ea), db = ckpt_entry_dtype(eb);
    if (da != db) {
        d->changed++;
        snprintf(text, sizeof text, "dtype %s -> %s", ckpt_dtype_name(da), ckpt_dtype_name(db));
        snprintf(json, sizeof json, "\"detail\": \"%s\"", text);
        line(d, "changed", path, text, json);
        return;
    }
    char sa[512], sb[512];
    cli_shape_str(ckpt_entry_ndim(ea), ckpt_entry_shape(ea), sa, sizeof sa);
    cli_shape_str(ckpt_entry_ndim(eb), ckpt_entry_shape(eb), sb, sizeof sb);
    if (strcmp(sa, sb) != 0) {
        d->changed++;
        snprintf(text, sizeof text, "shape %s -> %s", sa, sb);
        snprintf(json, sizeof json, "\"detail\": \"%s\"", text);
        line(d, "changed", path, text, json);
        return;
    }
    stats s = {.bits_equal = true};
    if (compare_values(a, ea, b, eb, &s, &err) != CKPT_OK) {
        cli_error("%s: %s", path, err.message);
        d->trouble = true;
        return;
    }
    if (s.bits_equal) {
        d->same++;
        if (d->all) line(d, "same", path, NULL, NULL);
        return;
    }
    d->changed++;
    double rel = s.sum_a2 > 0 ? sqrt(s.sum_d2) / sqrt(s.sum_a2) : (s.sum_d2 > 0 ? INFINITY : 0);
    snprintf(text, sizeof text, "max_abs=%.6g rel_l2=%.6g%s", s.max_abs, rel,
             s.nan_mismatch ? " nan_mismatch" : "");
    snprintf(json, sizeof json, "\"max_abs\": %.17g, \"rel_l2\": %.17g, \"nan_mismatch\": %s",
             isfinite(s.max_abs) ? s.max_abs : 1e308, isfinite(rel) ? rel : 1e308,
             s.nan_mismatch ? "true" : "false");
    line(d, "changed", path, text, json);
}

int cmd_diff(int argc, char **argv) {
    cli_parser p;
    cli_parser_init(&p, "diff", argc, argv);
    const char *da = NULL, *db = NULL, *arg;
    dctx d = {.first = true};
    for (int id; (id = cli_next(&p, diff_opts, sizeof diff_opts / sizeof *diff_opts, &arg));) {
        switch (id) {
        case CLI_OPT_HELP: cmd_diff_help(stdout); return cli_flush_stdout() ? 0 : EXIT_TROUBLE;
        case CLI_OPT_ERROR: return CLI_EXIT_USAGE;
        case CLI_OPT_OPERAND:
            if (!da)
                da = arg;
            else if (!db)
                db = arg;
            else
                return cli_usage_error("diff", "too many arguments ('%s')", arg);
            break;
        case OPT_ALL: d.all = true; break;
        case OPT_JSON: d.json = true; break;
        }
    }
    if (!da || !db) return cli_usage_error("diff", "usage: ckpt diff A B");
    cli_dir dda, ddb;
    if (!(da = cli_step_dir(da, &dda)) || !(db = cli_step_dir(db, &ddb))) return EXIT_TROUBLE;
    ckpt_reader *a = cli_open(da), *b = a ? cli_open(db) : NULL;
    if (!a || !b) {
        ckpt_reader_free(a);
        return EXIT_TROUBLE;
    }
    if (d.json) fputs("{\"entries\": [", stdout);
    for (size_t i = 0; i < ckpt_reader_num_entries(a); i++) {
        const ckpt_entry *ea = ckpt_reader_entry(a, i);
        const ckpt_entry *eb = ckpt_reader_find_path(b, ckpt_entry_path(ea));
        if (eb && strcmp(ckpt_entry_path(eb), ckpt_entry_path(ea)) != 0) eb = NULL;
        if (!eb) {
            d.only_a++;
            line(&d, "only-a", ckpt_entry_path(ea), NULL, NULL);
        } else {
            compare_entry(&d, a, ea, b, eb);
        }
    }
    for (size_t i = 0; i < ckpt_reader_num_entries(b); i++) {
        const ckpt_entry *eb = ckpt_reader_entry(b, i);
        const ckpt_entry *ea = ckpt_reader_find_path(a, ckpt_entry_path(eb));
        if (ea && strcmp(ckpt_entry_path(ea), ckpt_entry_path(eb)) == 0) continue;
        d.only_b++;
        line(&d, "only-b", ckpt_entry_path(eb), NULL, NULL);
    }
    bool identical = !d.changed && !d.only_a && !d.only_b && !d.trouble;
    if (d.json) {
        printf("%s], \"identical\": %s, \"counts\": {\"same\": %llu, \"changed\": %llu, "
               "\"only_a\": %llu, \"only_b\": %llu}}\n",
               d.first ? "" : "\n", identical ? "true" : "false", (unsigned long long)d.same,
               (unsigned long long)d.changed, (unsigned long long)d.only_a,
               (unsigned long long)d.only_b);
    } else {
        printf("%llu same, %llu changed, %llu only in A, %llu only in B\n",
               (unsigned long long)d.same, (unsigned long long)d.changed,
               (unsigned long long)d.only_a, (unsigned long long)d.only_b);
    }
    int status = d.trouble ? EXIT_TROUBLE : identical ? EXIT_SAME : EXIT_DIFFERENT;
    if (!cli_flush_stdout()) status = EXIT_TROUBLE;
    ckpt_reader_free(a);
    ckpt_reader_free(b);
    return status;
}
