/* cli_args.c — the `ckpt` commands' messages (errors, usage errors, cli_fail) and their option
 * parser (short and long options, operands, sizes with suffixes). */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("ckpt: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

ckpt_status cli_fail(ckpt_error *err, ckpt_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return code;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("ckpt: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (cmd)
        fprintf(stderr, "Try 'ckpt %s --help' for more information.\n", cmd);
    else
        fputs("Try 'ckpt --help' for more information.\n", stderr);
    return CLI_EXIT_USAGE;
}

/* ------------------------------------------------------------------ options */

void cli_parser_init(cli_parser *p, const char *cmd, int argc, char **argv) {
    *p = (cli_parser){.argc = argc, .argv = argv, .i = 1, .cmd = cmd};
}

static const cli_opt *find_short(const cli_opt *opts, size_t n, char c) {
    for (size_t k = 0; k < n; k++)
        if (opts[k].short_name && opts[k].short_name == c) return &opts[k];
    return NULL;
}

static const cli_opt *find_long(const cli_opt *opts, size_t n, const char *name, size_t len) {
    for (size_t k = 0; k < n; k++)
        if (opts[k].long_name && strlen(opts[k].long_name) == len &&
            memcmp(opts[k].long_name, name, len) == 0)
            return &opts[k];
    return NULL;
}

static int next_short(cli_parser *p, const cli_opt *opts, size_t nopts, const char **arg) {
    const char *a = p->argv[p->i];
    char c = a[p->sub];
    const cli_opt *o = find_short(opts, nopts, c);
    if (!o) {
        cli_usage_error(p->cmd, "unknown option '-%c'", c);
        return CLI_OPT_ERROR;
    }
    p->sub++;
    if (o->has_arg) {
        if (a[p->sub]) {
            *arg = a + p->sub;
            p->i++;
        } else if (p->i + 1 < p->argc) {
            *arg = p->argv[p->i + 1];
            p->i += 2;
        } else {
            cli_usage_error(p->cmd, "option '-%c' needs an argument", c);
            return CLI_OPT_ERROR;
        }
        p->sub = 0;
    } else if (!a[p->sub]) {
        p->sub = 0;
        p->i++;
    }
    return o->id;
}

int cli_next(cli_parser *p, const cli_opt *opts, size_t nopts, const char **arg) {
    *arg = NULL;
    if (p->sub) return next_short(p, opts, nopts, arg);
    if (p->i >= p->argc) return CLI_OPT_END;
    const char *a = p->argv[p->i];
    if (p->only_operands || a[0] != '-' || a[1] == '\0') {
        p->i++;
        *arg = a;
        return CLI_OPT_OPERAND;
    }
    if (strcmp(a, "--") == 0) {
        p->only_operands = true;
        p->i++;
        return cli_next(p, opts, nopts, arg);
    }
    if (a[1] != '-') {
        p->sub = 1;
        return next_short(p, opts, nopts, arg);
    }
    const char *name = a + 2, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    if (len == 4 && memcmp(name, "help", 4) == 0 && !eq) {
        p->i++;
        return CLI_OPT_HELP;
    }
    const cli_opt *o = find_long(opts, nopts, name, len);
    if (!o) {
        cli_usage_error(p->cmd, "unknown option '--%.*s'", (int)len, name);
        return CLI_OPT_ERROR;
    }
    p->i++;
    if (o->has_arg) {
        if (eq) {
            *arg = eq + 1;
        } else if (p->i < p->argc) {
            *arg = p->argv[p->i++];
        } else {
            cli_usage_error(p->cmd, "option '--%s' needs an argument", o->long_name);
            return CLI_OPT_ERROR;
        }
    } else if (eq) {
        cli_usage_error(p->cmd, "option '--%s' takes no argument", o->long_name);
        return CLI_OPT_ERROR;
    }
    return o->id;
}

bool cli_parse_size(const char *s, uint64_t *out) {
    if (!s || *s < '0' || *s > '9') return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return false;
    unsigned shift = 0;
    switch (*end) {
    case '\0': break;
    case 'k':
    case 'K': shift = 10; break;
    case 'm':
    case 'M': shift = 20; break;
    case 'g':
    case 'G': shift = 30; break;
    default: return false;
    }
    if (*end && end[1] != '\0' && strcmp(end + 1, "iB") != 0 && strcmp(end + 1, "B") != 0)
        return false;
    if (shift && v > (UINT64_MAX >> shift)) return false;
    *out = (uint64_t)v << shift;
    return true;
}
