/* cli_progress.c — the progress line of long commands (seal, verify --data) on a terminal. */
#include "cli.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void cli_progress_init(cli_progress *p, const char *label) {
    p->label = label;
    p->tty = isatty(STDERR_FILENO);
    p->start = now();
    p->last = 0;
}

void cli_progress_fn(void *ctx, uint64_t done, uint64_t total) {
    cli_progress *p = ctx;
    if (!p->tty) return;
    double t = now();
    if (t - p->last < 0.1 && done < total) return;
    p->last = t;
    char a[32], b[32], c[32];
    double rate = t > p->start ? (double)done / (t - p->start) : 0;
    fprintf(stderr, "\r%s %3d%%  %s of %s  %s/s   ", p->label,
            total ? (int)(100.0 * (double)done / (double)total) : 100,
            cli_human_size(done, a, sizeof a), cli_human_size(total, b, sizeof b),
            cli_human_size((uint64_t)rate, c, sizeof c));
    fflush(stderr);
}

void cli_progress_end(cli_progress *p) {
    if (p->tty && p->last > 0) fputs("\r\033[K", stderr);
}
