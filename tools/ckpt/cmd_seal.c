/* cmd_seal.c — `ckpt seal`: write the integrity manifest of a checkpoint (the XXH3-64 of every
 * stored item and metadata file, docs/manifest.md), hashing with every core. */
#include "ckpt_manifest.h"
#include "cli.h"

#include <stdlib.h>

void cmd_seal_help(FILE *out) {
    fputs("Usage: ckpt seal [options] CHECKPOINT_DIR\n"
          "\n"
          "Hash every stored item (each tensor chunk and each object, as byte ranges of the\n"
          "data files) and the metadata file(s) with XXH3-64, and write the manifest\n"
          "CHECKPOINT_DIR/" CKPT_MANIFEST_FILE " (atomically).  `ckpt verify --data` checks it;\n"
          "the mount option `-o verify` checks each chunk the first time it is read.\n"
          "A checkpoint whose files are missing or short is refused.\n"
          "\n"
          "Options:\n"
          "  -q, --quiet        print nothing on success\n"
          "  -j, --threads N    hashing threads (default: one per CPU)\n"
          "      --help         show this help\n",
          out);
}

enum { OPT_QUIET = 1, OPT_THREADS };
static const cli_opt seal_opts[] = {
    {"quiet", 'q', false, OPT_QUIET},
    {"threads", 'j', true, OPT_THREADS},
};

static void problem(void *ctx, const ckpt_entry *e, const ckpt_error *err) {
    (*(uint64_t *)ctx)++;
    cli_error("%s%s%s", e ? ckpt_entry_key(e) : "", e ? ": " : "", err->message);
}

int cmd_seal(int argc, char **argv) {
    cli_parser p;
    cli_parser_init(&p, "seal", argc, argv);
    const char *dir = NULL, *arg;
    bool quiet = false;
    uint64_t threads = 0;
    for (int id; (id = cli_next(&p, seal_opts, sizeof seal_opts / sizeof *seal_opts, &arg));) {
        switch (id) {
        case CLI_OPT_HELP: cmd_seal_help(stdout); return cli_flush_stdout() ? 0 : CLI_EXIT_FAIL;
        case CLI_OPT_ERROR: return CLI_EXIT_USAGE;
        case CLI_OPT_OPERAND:
            if (dir) return cli_usage_error("seal", "too many arguments ('%s')", arg);
            dir = arg;
            break;
        case OPT_QUIET: quiet = true; break;
        case OPT_THREADS:
            if (!cli_parse_size(arg, &threads) || threads == 0 || threads > 256)
                return cli_usage_error("seal", "--threads wants 1..256, not '%s'", arg);
            break;
        }
    }
    if (!dir) return cli_usage_error("seal", "missing CHECKPOINT_DIR");
    cli_dir dd;
    if (!(dir = cli_step_dir(dir, &dd))) return CLI_EXIT_FAIL;
    ckpt_reader *r = cli_open(dir);
    if (!r) return CLI_EXIT_FAIL;
    uint64_t failures = 0;
    ckpt_reader_check_ranges(r, problem, &failures, NULL);
    if (failures) {
        cli_error("%s: not sealed: %llu stored range%s missing or outside their files", dir,
                  (unsigned long long)failures, failures == 1 ? " is" : "s are");
        ckpt_reader_free(r);
        return CLI_EXIT_FAIL;
    }
    cli_progress prog;
    cli_progress_init(&prog, "seal");
    ckpt_manifest *m = NULL;
    ckpt_error err = {0};
    ckpt_status s = ckpt_manifest_build(r, (unsigned)threads, cli_progress_fn, &prog, &m, &err);
    cli_progress_end(&prog);
    if (s == CKPT_OK) s = ckpt_manifest_save(m, dir, &err);
    int status = CLI_EXIT_OK;
    if (s != CKPT_OK) {
        cli_error("%s", err.message);
        status = CLI_EXIT_FAIL;
    } else if (!quiet) {
        uint64_t bytes = 0;
        for (size_t i = 0; i < ckpt_manifest_num_records(m); i++)
            bytes += ckpt_manifest_record_at(m, i)->length;
        char hs[32];
        printf("sealed %zu items (%s) in %s/%s\n", ckpt_manifest_num_records(m),
               cli_human_size(bytes, hs, sizeof hs), dir, CKPT_MANIFEST_FILE);
        if (!cli_flush_stdout()) status = CLI_EXIT_FAIL;
    }
    ckpt_manifest_free(m);
    ckpt_reader_free(r);
    return status;
}
