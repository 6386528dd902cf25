/* cli.h — shared pieces of the `ckpt` command-line tool: exit codes, the command table,
 * option parsing, opening a checkpoint with a clean error message, `--slice` parsing, and
 * number/size/JSON formatting helpers used by several commands. */
#ifndef CK_TOOLS_CLI_H
#define CK_TOOLS_CLI_H

#include "ckpt.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit statuses (documented in `ckpt --help` and docs/ckpt.1). */
enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_FAIL = 1,  /* the checkpoint cannot be read, is defective, or verify failed */
    CLI_EXIT_USAGE = 2, /* bad command line: unknown option, missing argument, no such key... */
};

/* ---- commands ---- */

typedef struct cli_command {
    const char *name;
    const char *summary; /* one line for `ckpt --help` */
    int (*run)(int argc, char **argv);
    void (*help)(FILE *out);
} cli_command;

int cmd_ls(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_cat(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_dump_metadata(int argc, char **argv);
int cmd_seal(int argc, char **argv);
int cmd_prune(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_load(int argc, char **argv); /* with MPI only */
int cmd_reshard(int argc, char **argv);
void cmd_ls_help(FILE *out);
void cmd_info_help(FILE *out);
void cmd_cat_help(FILE *out);
void cmd_verify_help(FILE *out);
void cmd_dump_metadata_help(FILE *out);
void cmd_seal_help(FILE *out);
void cmd_prune_help(FILE *out);
void cmd_export_help(FILE *out);
void cmd_diff_help(FILE *out);
void cmd_load_help(FILE *out);
void cmd_reshard_help(FILE *out);

/* ---- messages ---- */

/* "ckpt: <message>\n" on stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "ckpt: <msg>" and "Try 'ckpt <cmd> --help'." and returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Fills err (may be NULL) with `code` and a formatted message; returns code.  The CLI's own
 * counterpart of the library's internal error helper, for the ckpt_status functions of its
 * subcommands. */
ckpt_status cli_fail(ckpt_error *err, ckpt_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Returns from the calling function with the status of `expr` unless it is CKPT_OK. */
#define CLI_TRY(expr)                                                                              \
    do {                                                                                           \
        ckpt_status cli_try_status_ = (expr);                                                      \
        if (cli_try_status_ != CKPT_OK) return cli_try_status_;                                    \
    } while (0)

/* ---- option parsing (no global state; options and operands may be interleaved) ---- */

typedef struct cli_opt {
    const char *long_name; /* without "--", or NULL */
    char short_name;       /* or 0 */
    bool has_arg;
    int id; /* > 0 */
} cli_opt;

enum {
    CLI_OPT_END = 0,      /* no more arguments */
    CLI_OPT_OPERAND = -1, /* *arg is an operand */
    CLI_OPT_ERROR = -2,   /* message printed; exit with CLI_EXIT_USAGE */
    CLI_OPT_HELP = -3,    /* --help seen */
};

typedef struct cli_parser {
    int argc;
    char **argv;
    int i;              /* next argv index */
    int sub;            /* position inside a bundle of short options, 0 if none */
    bool only_operands; /* after "--" */
    const char *cmd;    /* for messages */
} cli_parser;

void cli_parser_init(cli_parser *p, const char *cmd, int argc, char **argv);
/* Returns an option id, CLI_OPT_OPERAND, CLI_OPT_HELP, CLI_OPT_ERROR or CLI_OPT_END.  *arg is
 * set for operands and options with an argument. */
int cli_next(cli_parser *p, const cli_opt *opts, size_t nopts, const char **arg);

/* Parses an unsigned decimal with an optional K/M/G suffix (powers of 1024). */
bool cli_parse_size(const char *s, uint64_t *out);

/* ---- checkpoints ---- */

/* Opens `dir`; on failure prints "ckpt: <library message>" and returns NULL. */
ckpt_reader *cli_open(const char *dir);
/* When `dir` holds checkpoints in subdirectories (a training run's output), says which and
 * names the latest, as the mount's `latest` would (after an open failed with NOTFOUND); and
 * reports the leftovers of saves that did not finish (ckpt_save_leftovers). */
void cli_hint_steps(const char *dir);
/* A checkpoint operand: a directory as given, or, when no such path exists, RUN@STEP (the
 * step directory STEP of a run directory) or RUN@latest (the step the mount's `latest` names
 * there: a `latest` or `newest` file, Megatron's tracker, else the newest complete step). */
typedef struct cli_dir {
    char buf[4096];
} cli_dir;
/* The directory `arg` names (arg itself, or out->buf); NULL after printing why not. */
const char *cli_step_dir(const char *arg, cli_dir *out);

/* How an entry was named on the command line. */
typedef enum { CLI_BY_EITHER, CLI_BY_KEY, CLI_BY_PATH } cli_find_by;
/* Looks up `name` as a flat key and/or a tree path; prints an error when absent, or when (by
 * either) the key of one entry spells another's path (then --key or --path settles it). */
const ckpt_entry *cli_find(const ckpt_reader *r, const char *name, cli_find_by by);
/* Indented lines "    chunk I [a:b, c:d] FILE offset N length M" (objects: "    item ...") for
 * every chunk of `e`. */
void cli_print_chunks(FILE *out, const ckpt_reader *r, const ckpt_entry *e);
/* "tensor" / "object". */
const char *cli_kind_name(ckpt_entry_kind k);
/* Bytes an entry occupies in the checkpoint's terms: numel * itemsize for tensors, the stored
 * item's length for objects. */
uint64_t cli_entry_bytes(const ckpt_entry *e);

/* ---- slices ---- */

/* A box of a tensor selected with Python slice syntax.  `drop[d]` marks dims indexed by a
 * single integer (numpy drops them from the result's shape). */
typedef struct cli_slice {
    int ndim;
    int64_t start[CKPT_MAX_NDIM];
    int64_t count[CKPT_MAX_NDIM];
    bool drop[CKPT_MAX_NDIM];
} cli_slice;

/* The whole tensor. */
void cli_slice_full(cli_slice *s, int ndim, const int64_t *shape);
/* Parses "0:4,:", "-1", "...,2", "" against `shape`.  On error writes a message into
 * msg[msg_size] and returns false. */
bool cli_slice_parse(const char *text, int ndim, const int64_t *shape, cli_slice *s, char *msg,
                     size_t msg_size);
uint64_t cli_slice_numel(const cli_slice *s);

/* Reads the box `s` of tensor `e` in C order, in blocks of at most `limit` bytes (split along
 * the outermost dimensions; never less than one element), handing each block to `sink` in
 * order.  A sink returning false (errno set) stops the read with CKPT_E_IO and "error writing
 * to <dest>: <errno>" in `err` (dest: "standard output", the output file...). */
typedef bool (*cli_block_sink)(void *ctx, const void *buf, size_t len);
ckpt_status cli_read_blocks(ckpt_reader *r, const ckpt_entry *e, const cli_slice *s, uint64_t limit,
                            cli_block_sink sink, void *ctx, const char *dest, ckpt_error *err);

/* ---- progress ---- */

/* A progress line on stderr ("\rLABEL  45%  1.2 GiB of 2.6 GiB  850 MiB/s"), shown only when
 * stderr is a terminal, redrawn at most 10 times a second.  cli_progress_fn matches
 * ckpt_progress_fn; cli_progress_end clears the line. */
typedef struct cli_progress {
    const char *label;
    bool tty;
    double start, last;
} cli_progress;
void cli_progress_init(cli_progress *p, const char *label);
void cli_progress_fn(void *p, uint64_t done, uint64_t total);
void cli_progress_end(cli_progress *p);

/* ---- formatting ---- */

/* "1.5 KiB", "12 B", "3.0 GiB" into buf. */
const char *cli_human_size(uint64_t n, char *buf, size_t size);

/* JSON string literal of s (NUL-terminated) to out; invalid UTF-8 bytes become \ufffd. */
void cli_json_string(FILE *out, const char *s);
/* "[2, 3]" into buf. */
const char *cli_shape_str(int ndim, const int64_t *shape, char *buf, size_t size);
/* Prints the indented form of compact JSON text `json` (strings are respected). */
void cli_json_pretty(FILE *out, const char *json, int indent);

/* Flushes stdout and reports a write error (returns false then). */
bool cli_flush_stdout(void);
/* write(2) loop on fd; false with errno set on failure. */
bool cli_write_all(int fd, const void *buf, size_t len);

#endif
