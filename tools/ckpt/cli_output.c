/* cli_output.c — writing `ckpt` output: JSON strings and pretty-printing, and flushing and
 * writing that report errors (a full disk is an error, not silence). */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cli_json_string(FILE *out, const char *s) {
    /* the library's escaper, so the CLI's JSON strings are the mount's and the dumps' */
    char *q = ckpt_json_string(s, strlen(s));
    fputs(q ? q : "\"\"", out); /* out of memory: still valid JSON */
    free(q);
}

static void newline_indent(FILE *out, int indent, int level) {
    fputc('\n', out);
    for (int k = 0; k < indent * level; k++)
        fputc(' ', out);
}

void cli_json_pretty(FILE *out, const char *json, int indent) {
    int level = 0;
    bool in_str = false;
    for (const char *p = json; *p; p++) {
        char c = *p;
        if (in_str) {
            fputc(c, out);
            if (c == '\\' && p[1]) {
                fputc(*++p, out);
            } else if (c == '"') {
                in_str = false;
            }
            continue;
        }
        switch (c) {
        case '"':
            in_str = true;
            fputc(c, out);
            break;
        case '{':
        case '[': {
            const char *q = p + 1;
            while (*q == ' ' || *q == '\n' || *q == '\t' || *q == '\r')
                q++;
            if (*q == (c == '{' ? '}' : ']')) {
                fputc(c, out);
                fputc(*q, out);
                p = q;
                break;
            }
            fputc(c, out);
            newline_indent(out, indent, ++level);
            break;
        }
        case '}':
        case ']':
            newline_indent(out, indent, --level);
            fputc(c, out);
            break;
        case ',':
            fputc(',', out);
            newline_indent(out, indent, level);
            break;
        case ':': fputs(": ", out); break;
        case ' ':
        case '\n':
        case '\t':
        case '\r': break;
        default: fputc(c, out);
        }
    }
    fputc('\n', out);
}

bool cli_flush_stdout(void) {
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_error("error writing to standard output: %s", strerror(errno));
        return false;
    }
    return true;
}

bool cli_write_all(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len) {
        size_t n = len > ((size_t)1 << 30) ? (size_t)1 << 30 : len;
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        p += w;
        len -= (size_t)w;
    }
    return true;
}
