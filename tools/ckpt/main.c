/* main.c — entry point of the `ckpt` tool: global --help/--version and dispatch to the
 * subcommands (one file each: cmd_ls.c, cmd_info.c, cmd_cat.c, cmd_verify.c, cmd_seal.c,
 * cmd_export.c, cmd_diff.c, cmd_reshard.c, cmd_load.c (MPI builds), cmd_dump_metadata.c). */
#include "cli.h"

#include <string.h>

static const cli_command commands[] = {
    {"ls", "list the entries of a checkpoint as a tree", cmd_ls, cmd_ls_help},
    {"info", "summarise a checkpoint (format, sizes, counts)", cmd_info, cmd_info_help},
    {"cat", "write a tensor's bytes (or values, or an object) to stdout", cmd_cat, cmd_cat_help},
    {"verify", "check a checkpoint's integrity without loading it", cmd_verify, cmd_verify_help},
    {"seal", "write the integrity manifest (XXH3 of every stored item)", cmd_seal, cmd_seal_help},
    {"export", "write the tensors as one safetensors or torch.save file (streaming)", cmd_export,
     cmd_export_help},
    {"diff", "compare two checkpoints entry by entry", cmd_diff, cmd_diff_help},
    {"prune", "delete the oldest steps of a run directory, keeping N", cmd_prune, cmd_prune_help},
    {"reshard", "write a copy laid out for M ranks (one process, or under mpirun)", cmd_reshard,
     cmd_reshard_help},
#ifdef CKPT_WITH_MPI
    {"load", "load into a new layout across MPI ranks (each byte read once)", cmd_load,
     cmd_load_help},
#endif
    {"dump-metadata", "print the whole .metadata as JSON (no unpickling)", cmd_dump_metadata,
     cmd_dump_metadata_help},
};
#define NUM_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *out) {
    fputs("Usage: ckpt <command> [options] CHECKPOINT_DIR [args]\n"
          "       ckpt <command> --help\n"
          "       ckpt --help | --version\n"
          "\n"
          "Inspect PyTorch Distributed Checkpoint (DCP) directories without Python: nothing\n"
          "in the checkpoint is ever executed.\n"
          "\n"
          "Commands:\n",
          out);
    for (size_t i = 0; i < NUM_COMMANDS; i++)
        fprintf(out, "  %-15s %s\n", commands[i].name, commands[i].summary);
    fputs("\n"
          "Exit status:\n"
          "  0  success\n"
          "  1  the checkpoint cannot be read or is defective (verify found problems)\n"
          "  2  usage error (bad option or argument, no such key)\n"
          "\n"
          "Errors are printed to stderr as 'ckpt: <message>'.  See ckpt(1).\n",
          out);
}

static const cli_command *find_command(const char *name) {
    for (size_t i = 0; i < NUM_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    if (strcmp(name, "dump_metadata") == 0) return find_command("dump-metadata");
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *a = argv[1];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
        usage(stdout);
        return cli_flush_stdout() ? CLI_EXIT_OK : CLI_EXIT_FAIL;
    }
    if (strcmp(a, "--version") == 0 || strcmp(a, "-V") == 0) {
        printf("ckpt (ckptfs) %s\n", CKPT_VERSION_STRING);
        return cli_flush_stdout() ? CLI_EXIT_OK : CLI_EXIT_FAIL;
    }
    if (strcmp(a, "help") == 0) {
        if (argc < 3) {
            usage(stdout);
            return cli_flush_stdout() ? CLI_EXIT_OK : CLI_EXIT_FAIL;
        }
        const cli_command *c = find_command(argv[2]);
        if (!c) return cli_usage_error(NULL, "unknown command '%s'", argv[2]);
        c->help(stdout);
        return cli_flush_stdout() ? CLI_EXIT_OK : CLI_EXIT_FAIL;
    }
    if (a[0] == '-') return cli_usage_error(NULL, "unknown option '%s'", a);
    const cli_command *c = find_command(a);
    if (!c) return cli_usage_error(NULL, "unknown command '%s'", a);
    return c->run(argc - 1, argv + 1);
}
