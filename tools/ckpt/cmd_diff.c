/* cmd_diff.c — `ckpt diff A B`: compares two checkpoints entry by entry, by tree path,
 * whatever their sharding: same / changed (dtype, shape, or values with the largest absolute
 * difference and the relative L2 difference) / only in A / only in B.  When both checkpoints
 * are sealed and a tensor is stored in identically laid out chunks, equal chunk hashes prove
 * it unchanged without reading it.  Exit status like diff(1): 0 same, 1 different, 2 trouble. */
#include "ckpt_manifest.h"
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
          "and a summary.  When both checkpoints carry a manifest (ckpt seal) and a tensor's\n"
          "chunks are laid out alike, equal hashes settle it without reading the data.\n"
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

typedef struct side {
    ckpt_reader *r;
    ckpt_manifest *m; /* NULL when not sealed */
} side;

typedef struct dctx {
    bool all, json;
    uint64_t same, changed, only_a, only_b, by_hash;
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

/* Chunks laid out alike in both and every stored item's hash equal. */
static bool same_by_hash(const side *a, const ckpt_entry *ea, const side *b, const ckpt_entry *eb) {
    if (!a->m || !b->m || ckpt_entry_num_chunks(ea) != ckpt_entry_num_chunks(eb)) return false;
    int nd = ckpt_entry_ndim(ea);
    for (size_t i = 0; i < ckpt_entry_num_chunks(ea); i++) {
        ckpt_chunk_info ca, cb;
        if (ckpt_entry_chunk(ea, i, &ca) != CKPT_OK || ckpt_entry_chunk(eb, i, &cb) != CKPT_OK)
            return false;
        if (ca.numel != cb.numel) return false;
        for (int k = 0; k < nd; k++)
            if (ca.offsets[k] != cb.offsets[k] || ca.sizes[k] != cb.sizes[k]) return false;
        if (!ca.numel) continue;
        if (ca.file_id < 0 || cb.file_id < 0 || ca.transforms || cb.transforms) return false;
        const ckpt_manifest_record *ra = ckpt_manifest_find(
            a->m, ckpt_reader_file_name(a->r, (uint32_t)ca.file_id), ca.file_offset);
        const ckpt_manifest_record *rb = ckpt_manifest_find(
            b->m, ckpt_reader_file_name(b->r, (uint32_t)cb.file_id), cb.file_offset);
        if (!ra || !rb || ra->length < ca.length || rb->length < cb.length || ra->hash != rb->hash)
            return false;
    }
    return true;
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

static void compare_entry(dctx *d, side *a, const ckpt_entry *ea, side *b, const ckpt_entry *eb) {
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
        char *ta = object_text(a->r, ea, &err), *tb = ta ? object_text(b->r, eb, &err) : NULL;
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
    if (same_by_hash(a, ea, b, eb)) {
        d->same++;
        d->by_hash++;
        if (d->all) line(d, "same", path, "(by hash)", "\"by_hash\": true");
        return;
    }
    stats s = {.bits_equal = true};
    if (compare_values(a->r, ea, b->r, eb, &s, &err) != CKPT_OK) {
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

static void open_side(side *s, const char *dir) {
    s->r = cli_open(dir);
    ckpt_error err = {0};
    if (s->r && ckpt_manifest_load(dir, &s->m, &err) != CKPT_OK) s->m = NULL;
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
    side a = {0}, b = {0};
    open_side(&a, da);
    if (a.r) open_side(&b, db);
    if (!a.r || !b.r) {
        ckpt_reader_free(a.r);
        ckpt_manifest_free(a.m);
        return EXIT_TROUBLE;
    }
    if (d.json) fputs("{\"entries\": [", stdout);
    for (size_t i = 0; i < ckpt_reader_num_entries(a.r); i++) {
        const ckpt_entry *ea = ckpt_reader_entry(a.r, i);
        const ckpt_entry *eb = ckpt_reader_find_path(b.r, ckpt_entry_path(ea));
        if (eb && strcmp(ckpt_entry_path(eb), ckpt_entry_path(ea)) != 0) eb = NULL;
        if (!eb) {
            d.only_a++;
            line(&d, "only-a", ckpt_entry_path(ea), NULL, NULL);
        } else {
            compare_entry(&d, &a, ea, &b, eb);
        }
    }
    for (size_t i = 0; i < ckpt_reader_num_entries(b.r); i++) {
        const ckpt_entry *eb = ckpt_reader_entry(b.r, i);
        const ckpt_entry *ea = ckpt_reader_find_path(a.r, ckpt_entry_path(eb));
        if (ea && strcmp(ckpt_entry_path(ea), ckpt_entry_path(eb)) == 0) continue;
        d.only_b++;
        line(&d, "only-b", ckpt_entry_path(eb), NULL, NULL);
    }
    bool identical = !d.changed && !d.only_a && !d.only_b && !d.trouble;
    if (d.json) {
        printf("%s], \"identical\": %s, \"counts\": {\"same\": %llu, \"changed\": %llu, "
               "\"only_a\": %llu, \"only_b\": %llu, \"same_by_hash\": %llu}}\n",
               d.first ? "" : "\n", identical ? "true" : "false", (unsigned long long)d.same,
               (unsigned long long)d.changed, (unsigned long long)d.only_a,
               (unsigned long long)d.only_b, (unsigned long long)d.by_hash);
    } else {
        printf("%llu same (%llu by hash), %llu changed, %llu only in A, %llu only in B\n",
               (unsigned long long)d.same, (unsigned long long)d.by_hash,
               (unsigned long long)d.changed, (unsigned long long)d.only_a,
               (unsigned long long)d.only_b);
    }
    int status = d.trouble ? EXIT_TROUBLE : identical ? EXIT_SAME : EXIT_DIFFERENT;
    if (!cli_flush_stdout()) status = EXIT_TROUBLE;
    ckpt_manifest_free(a.m);
    ckpt_manifest_free(b.m);
    ckpt_reader_free(a.r);
    ckpt_reader_free(b.r);
    return status;
}
