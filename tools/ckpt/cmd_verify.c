/* cmd_verify.c — `ckpt verify`: integrity checks of a checkpoint without loading it: every
 * data file present and every stored byte range inside its file, every tensor's chunks tiling
 * its shape, every chunk's stored item well-formed and matching its metadata, every object
 * decoding, no metadata defect on any entry; optionally (--data) every tensor byte readable.
 * One `FAIL <key>: <message>` line per defect, then a summary; exit status 1 on any defect. */
#include "ckpt_manifest.h"
#include "cli.h"

#include <stdlib.h>
#include <string.h>

void cmd_verify_help(FILE *out) {
    fputs("Usage: ckpt verify [options] CHECKPOINT_DIR\n"
          "\n"
          "Check a checkpoint's integrity: the metadata decodes; every data file exists and\n"
          "every stored byte range lies inside its file; each tensor's chunks tile its shape\n"
          "(no gap, no overlap); each chunk's stored item is a well-formed torch.save zip whose\n"
          "dtype and size agree with the metadata; each object decodes.  Prints one line\n"
          "'FAIL <key>: <message>' per defect ('FAIL: <message>' when no entry is concerned)\n"
          "and a summary 'verified N entries, M chunks: K problems'.  Exits with 1 if any\n"
          "check failed, 0 otherwise.\n"
          "\n"
          "Options:\n"
          "  -q, --quiet    print nothing; only the exit status tells\n"
          "  -v, --verbose  also print 'ok <key>' per sound entry with its chunks' byte ranges\n"
          "      --data     also read every byte of every tensor (decodes compressed chunks)\n"
          "                 and, when the checkpoint has a manifest (ckpt seal), check the\n"
          "                 XXH3 hash of every stored item with every core (a progress line\n"
          "                 on a terminal); without one, says so on stderr\n"
          "  -j, --threads N  hashing threads for --data (default: one per CPU)\n"
          "      --json     print {\"ok\", \"entries\", \"chunks\", \"problems\": [{\"key\",\n"
          "                 \"message\"}]}\n"
          "      --help     show this help\n",
          out);
}

enum { OPT_QUIET = 1, OPT_VERBOSE, OPT_DATA, OPT_JSON, OPT_THREADS };

static const cli_opt verify_opts[] = {
    {"quiet", 'q', false, OPT_QUIET},    {"verbose", 'v', false, OPT_VERBOSE},
    {"data", 0, false, OPT_DATA},        {"json", 0, false, OPT_JSON},
    {"threads", 'j', true, OPT_THREADS},
};

typedef struct vctx {
    bool quiet, verbose, json, data;
    uint64_t problems;
    uint64_t entries, chunks;
    uint64_t hashed; /* items checked against the manifest */
    bool *flagged;   /* per entry index: a defect was already reported */
    size_t nflagged;
} vctx;

static void report(vctx *v, const ckpt_entry *e, const char *message) {
    if (e && ckpt_entry_index(e) < v->nflagged) v->flagged[ckpt_entry_index(e)] = true;
    if (v->quiet) {
        v->problems++;
        return;
    }
    if (v->json) {
        fputs(v->problems ? ",\n  {\"key\": " : "\n  {\"key\": ", stdout);
        if (e)
            cli_json_string(stdout, ckpt_entry_key(e));
        else
            fputs("null", stdout);
        fputs(", \"message\": ", stdout);
        cli_json_string(stdout, message);
        fputc('}', stdout);
    } else if (e) {
        /* library messages often start with "'KEY': "; do not say it twice */
        const char *key = ckpt_entry_key(e);
        size_t kl = strlen(key);
        if (message[0] == '\'' && strncmp(message + 1, key, kl) == 0 &&
            strncmp(message + 1 + kl, "': ", 3) == 0)
            message += kl + 4;
        printf("FAIL %s: %s\n", key, message);
    } else {
        printf("FAIL: %s\n", message);
    }
    v->problems++;
}

static void report_err(vctx *v, const ckpt_entry *e, const ckpt_error *err) {
    report(v, e, err->message[0] ? err->message : ckpt_strerror(err->code));
}

static void range_cb(void *ctx, const ckpt_entry *e, const ckpt_error *err) {
    report_err(ctx, e, err);
}

typedef struct hash_ctx { /* one context for both callbacks of ckpt_manifest_verify */
    vctx *v;
    cli_progress prog;
} hash_ctx;

static void manifest_cb(void *ctx, const ckpt_manifest_record *rec, const ckpt_error *err) {
    (void)rec;
    report_err(((hash_ctx *)ctx)->v, NULL, err);
}

static void hash_progress(void *ctx, uint64_t done, uint64_t total) {
    cli_progress_fn(&((hash_ctx *)ctx)->prog, done, total);
}

/* --data with a manifest: every stored item's hash. */
static void check_hashes(ckpt_reader *r, const char *dir, unsigned threads, vctx *v) {
    ckpt_manifest *m = NULL;
    ckpt_error err = {0};
    ckpt_status s = ckpt_manifest_load(dir, &m, &err);
    if (s == CKPT_E_NOTFOUND) {
        if (!v->quiet)
            cli_error("note: %s has no %s: stored bytes were read but not hash-checked "
                      "(ckpt seal writes one)",
                      dir, CKPT_MANIFEST_FILE);
        return;
    }
    if (s != CKPT_OK) {
        report_err(v, NULL, &err);
        return;
    }
    hash_ctx hc = {.v = v};
    cli_progress_init(&hc.prog, "verify");
    if (v->quiet) hc.prog.tty = false;
    uint64_t failures = 0;
    ckpt_manifest_verify(dir, m, r, threads, manifest_cb, hash_progress, &hc, &failures, &err);
    cli_progress_end(&hc.prog);
    if (!failures && err.code != CKPT_OK) report_err(v, NULL, &err);
    v->hashed = ckpt_manifest_num_records(m);
    ckpt_manifest_free(m);
}

static bool discard(void *ctx, const void *buf, size_t len) {
    (void)ctx, (void)buf, (void)len;
    return true;
}

static void check_entry(ckpt_reader *r, const ckpt_entry *e, vctx *v) {
    ckpt_error err = {0};
    size_t idx = ckpt_entry_index(e);
    v->entries++;
    if (ckpt_entry_kind_of(e) == CKPT_ENTRY_TENSOR) {
        for (size_t i = 0; i < ckpt_entry_num_chunks(e); i++) {
            ckpt_chunk_info ci;
            if (ckpt_entry_chunk(e, i, &ci) == CKPT_OK && ci.numel) v->chunks++;
        }
    }
    if (v->flagged[idx]) return; /* its stored ranges are already reported broken */
    if (ckpt_entry_problem(e)) {
        report(v, e, ckpt_entry_problem(e));
        return;
    }
    if (ckpt_entry_kind_of(e) == CKPT_ENTRY_OBJECT) {
        ckpt_object *o = NULL;
        if (ckpt_object_load(r, e, &o, &err) != CKPT_OK) report_err(v, e, &err);
        ckpt_object_free(o);
    } else {
        if (ckpt_entry_check_layout(e, &err) != CKPT_OK) report_err(v, e, &err);
        for (size_t i = 0; i < ckpt_entry_num_chunks(e); i++) {
            ckpt_chunk_info ci;
            if (ckpt_entry_chunk(e, i, &ci) != CKPT_OK || !ci.numel) continue;
            if (ckpt_entry_check_chunk(r, e, i, &err) != CKPT_OK) report_err(v, e, &err);
        }
        if (v->data && !v->flagged[idx]) {
            cli_slice s;
            cli_slice_full(&s, ckpt_entry_ndim(e), ckpt_entry_shape(e));
            if (cli_read_blocks(r, e, &s, (uint64_t)64 << 20, discard, NULL, "nothing", &err) !=
                CKPT_OK)
                report_err(v, e, &err);
        }
    }
    if (v->verbose && !v->json && !v->quiet && !v->flagged[idx]) {
        printf("ok %s\n", ckpt_entry_key(e));
        cli_print_chunks(stdout, r, e);
    }
}

int cmd_verify(int argc, char **argv) {
    cli_parser p;
    cli_parser_init(&p, "verify", argc, argv);
    vctx v = {0};
    const char *dir = NULL, *arg;
    uint64_t threads = 0;
    for (int id;
         (id = cli_next(&p, verify_opts, sizeof verify_opts / sizeof verify_opts[0], &arg));) {
        switch (id) {
        case CLI_OPT_HELP: cmd_verify_help(stdout); return cli_flush_stdout() ? 0 : CLI_EXIT_FAIL;
        case CLI_OPT_ERROR: return CLI_EXIT_USAGE;
        case CLI_OPT_OPERAND:
            if (dir) return cli_usage_error("verify", "too many arguments ('%s')", arg);
            dir = arg;
            break;
        case OPT_QUIET: v.quiet = true; break;
        case OPT_VERBOSE: v.verbose = true; break;
        case OPT_DATA: v.data = true; break;
        case OPT_JSON: v.json = true; break;
        case OPT_THREADS:
            if (!cli_parse_size(arg, &threads) || threads == 0 || threads > 256)
                return cli_usage_error("verify", "--threads wants 1..256, not '%s'", arg);
            break;
        }
    }
    if (!dir) return cli_usage_error("verify", "missing CHECKPOINT_DIR");
    cli_dir dd;
    if (!(dir = cli_step_dir(dir, &dd))) return CLI_EXIT_FAIL;

    if (v.json && !v.quiet) fputs("{\"problems\": [", stdout);
    ckpt_reader *r = NULL;
    ckpt_error err = {0};
    if (ckpt_reader_open(dir, NULL, &r, &err) != CKPT_OK) {
        report_err(&v, NULL, &err);
        if (err.code == CKPT_E_NOTFOUND && !v.json) cli_hint_steps(dir);
    } else {
        size_t n = ckpt_reader_num_entries(r);
        v.flagged = calloc(n ? n : 1, sizeof *v.flagged);
        if (!v.flagged) {
            cli_error("out of memory");
            ckpt_reader_free(r);
            return CLI_EXIT_FAIL;
        }
        v.nflagged = n;
        ckpt_reader_check_ranges(r, range_cb, &v, NULL);
        for (size_t i = 0; i < n; i++)
            check_entry(r, ckpt_reader_entry(r, i), &v);
        if (v.data) check_hashes(r, dir, (unsigned)threads, &v);
    }
    if (!v.quiet) {
        if (v.json) {
            printf("%s], \"ok\": %s, \"entries\": %llu, \"chunks\": %llu, \"hashed\": %llu}\n",
                   v.problems ? "\n" : "", v.problems ? "false" : "true",
                   (unsigned long long)v.entries, (unsigned long long)v.chunks,
                   (unsigned long long)v.hashed);
        } else {
            printf("verified %llu %s, %llu %s", (unsigned long long)v.entries,
                   v.entries == 1 ? "entry" : "entries", (unsigned long long)v.chunks,
                   v.chunks == 1 ? "chunk" : "chunks");
            if (v.hashed) printf(", %llu hashed items", (unsigned long long)v.hashed);
            printf(": %llu %s\n", (unsigned long long)v.problems,
                   v.problems == 1 ? "problem" : "problems");
        }
    }
    int status = v.problems ? CLI_EXIT_FAIL : CLI_EXIT_OK;
    if (!cli_flush_stdout()) status = CLI_EXIT_FAIL;
    free(v.flagged);
    ckpt_reader_free(r);
    return status;
}
