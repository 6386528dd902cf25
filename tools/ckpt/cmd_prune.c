/* cmd_prune.c — `ckpt prune --keep N RUN_DIR`: the saver's keep-N retention applied to a run
 * directory (ckpt_save_retain): the newest N complete steps stay, and never the step the
 * mount's `latest` names (ckpt_run_latest: a `latest`/`newest` file, Megatron's tracker,
 * else the newest complete step); incomplete steps and everything not a step are left alone;
 * leftovers of killed saves idle for a day go too. */
#include "ckpt_save.h"
#include "cli.h"

#include <stdlib.h>
#include <string.h>

void cmd_prune_help(FILE *out) {
    fputs("Usage: ckpt prune --keep N [options] RUN_DIR\n"
          "\n"
          "Delete the oldest complete steps of a run directory (its sub-directories that\n"
          "hold a checkpoint), keeping the newest N, ordered by the number their names end\n"
          "with, as the saver's retention does.  The step `latest` names (as the mount\n"
          "picks it) is never deleted, nor a step that is not complete (being written) nor\n"
          "anything else; a step is renamed to a hidden name before it is removed, so a\n"
          "crash never leaves a visible half-deleted step.  Leftovers of killed saves (a\n"
          "`.<step>.deleting` directory, a staging directory idle for a day) are removed.\n"
          "\n"
          "Options:\n"
          "      --keep N       steps to keep (at least 1)\n"
          "  -q, --quiet        print nothing on success\n"
          "      --help         show this help\n",
          out);
}

enum { OPT_KEEP = 1, OPT_QUIET };
static const cli_opt prune_opts[] = {
    {"keep", 0, true, OPT_KEEP},
    {"quiet", 'q', false, OPT_QUIET},
};

int cmd_prune(int argc, char **argv) {
    cli_parser p;
    cli_parser_init(&p, "prune", argc, argv);
    const char *dir = NULL, *arg;
    uint64_t keep = 0;
    bool quiet = false;
    for (int id; (id = cli_next(&p, prune_opts, sizeof prune_opts / sizeof *prune_opts, &arg));) {
        switch (id) {
        case CLI_OPT_HELP: cmd_prune_help(stdout); return cli_flush_stdout() ? 0 : CLI_EXIT_FAIL;
        case CLI_OPT_ERROR: return CLI_EXIT_USAGE;
        case CLI_OPT_OPERAND:
            if (dir) return cli_usage_error("prune", "too many arguments ('%s')", arg);
            dir = arg;
            break;
        case OPT_KEEP:
            if (!cli_parse_size(arg, &keep) || keep == 0 || keep > 1000000)
                return cli_usage_error("prune", "--keep wants 1..1000000, not '%s'", arg);
            break;
        case OPT_QUIET: quiet = true; break;
        }
    }
    if (!dir) return cli_usage_error("prune", "missing RUN_DIR");
    if (!keep) return cli_usage_error("prune", "--keep N is required");
    char *latest = NULL;
    if (ckpt_run_latest(dir, true, &latest, NULL) != CKPT_OK) {
        cli_error("%s: not a run directory holding a complete step", dir);
        return CLI_EXIT_FAIL;
    }
    ckpt_error err = {0};
    size_t removed = 0;
    ckpt_status s = ckpt_save_retain(dir, (size_t)keep, latest, &removed, &err);
    free(latest);
    if (s != CKPT_OK) {
        cli_error("%s", err.message);
        return CLI_EXIT_FAIL;
    }
    if (!quiet) printf("deleted %zu step%s of %s\n", removed, removed == 1 ? "" : "s", dir);
    return cli_flush_stdout() ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}
