/* cmd_dump_metadata.c — `ckpt dump-metadata`: the whole `.metadata` pickle (or the rank-local
 * `__<r>.metadata` files; HuggingFace storage: its safetensors headers) as JSON via
 * ckpt_metadata_dump_json — the safe replacement for unpickling it; `--indent N` pretty-prints. */
#include "cli.h"

#include <stdlib.h>

void cmd_dump_metadata_help(FILE *out) {
    fputs("Usage: ckpt dump-metadata [options] CHECKPOINT_DIR\n"
          "\n"
          "Print the checkpoint's whole metadata as JSON, decoded without executing or\n"
          "importing anything: Python objects appear as {\"__object__\": \"module.Class\",\n"
          "\"args\": [...], \"state\": {...}}, bytes as {\"__bytes__\": \"<hex>\"}, dicts with\n"
          "non-string keys as {\"__dict__\": [[key, value], ...]}.  Without '.metadata' the\n"
          "rank-local files are printed as {\"__0.metadata\": ..., \"__1.metadata\": ...};\n"
          "HuggingFace safetensors storage (no metadata pickle) as its headers,\n"
          "{\"<file>.safetensors\": {...}, ..., \"model.safetensors.index.json\": {...}}.\n"
          "\n"
          "Options:\n"
          "      --indent N  pretty-print with N spaces per level (default: compact)\n"
          "      --pretty    same as --indent 2\n"
          "      --help      show this help\n",
          out);
}

enum { OPT_INDENT = 1, OPT_PRETTY };

static const cli_opt dump_opts[] = {
    {"indent", 0, true, OPT_INDENT},
    {"pretty", 0, false, OPT_PRETTY},
};

int cmd_dump_metadata(int argc, char **argv) {
    cli_parser p;
    cli_parser_init(&p, "dump-metadata", argc, argv);
    const char *dir = NULL, *arg;
    int indent = -1;
    for (int id; (id = cli_next(&p, dump_opts, sizeof dump_opts / sizeof dump_opts[0], &arg));) {
        switch (id) {
        case CLI_OPT_HELP:
            cmd_dump_metadata_help(stdout);
            return cli_flush_stdout() ? 0 : CLI_EXIT_FAIL;
        case CLI_OPT_ERROR: return CLI_EXIT_USAGE;
        case CLI_OPT_OPERAND:
            if (dir) return cli_usage_error("dump-metadata", "too many arguments ('%s')", arg);
            dir = arg;
            break;
        case OPT_INDENT: {
            uint64_t v;
            if (!cli_parse_size(arg, &v) || v > 16)
                return cli_usage_error("dump-metadata", "invalid --indent '%s' (0 to 16)", arg);
            indent = (int)v;
            break;
        }
        case OPT_PRETTY: indent = 2; break;
        }
    }
    if (!dir) return cli_usage_error("dump-metadata", "missing CHECKPOINT_DIR");
    cli_dir dd;
    if (!(dir = cli_step_dir(dir, &dd))) return CLI_EXIT_FAIL;
    char *json = NULL;
    ckpt_error err = {0};
    if (ckpt_metadata_dump_json(dir, NULL, &json, &err) != CKPT_OK) {
        cli_error("%s", err.message[0] ? err.message : ckpt_strerror(err.code));
        return CLI_EXIT_FAIL;
    }
    if (indent >= 0) {
        cli_json_pretty(stdout, json, indent);
    } else {
        fputs(json, stdout);
        fputc('\n', stdout);
    }
    free(json);
    return cli_flush_stdout() ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}
