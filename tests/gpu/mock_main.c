/* mock_main.c — `ckpt-load-mockcuda load ...`: the `ckpt load` subcommand alone, linked with
 * the loader built for CUDA and the stand-in runtime (mock_cudart.c), so the device path is
 * tested on machines without a GPU. */
#include "cli.h"

#include <string.h>

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "load") != 0) {
        fputs("usage: ckpt-load-mockcuda load [options] CHECKPOINT_DIR\n", stderr);
        return CLI_EXIT_USAGE;
    }
    return cmd_load(argc - 1, argv + 1);
}
