/* test_run.c — run directories (src/run/): the step order, the trackers, and ckpt_run_latest,
 * the one rule the mount's `latest`, RUN@latest, `ckpt prune` and the saver's retention share
 * (their own behaviour is checked in tests/mount, tests/cli and tests/save). */
#include "ckpt.h"
#include "ckpt_save.h"
#include "fixture_ref.h"
#include "run/run.h"
#include "test_util.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const struct timespec T0 = {100, 0}, T1 = {200, 0};

Test(run, step_number) {
    uint64_t n = 0;
    cr_assert(run_step_number("step-120", &n) && n == 120);
    cr_assert(run_step_number("iter_0000123", &n) && n == 123);
    cr_assert(run_step_number("9999999999999999999", &n) && n == UINT64_C(9999999999999999999));
    cr_assert(!run_step_number("12345678901234567890", &n), "20 digits are no step number");
    cr_assert(!run_step_number("final", &n));
    cr_assert(!run_step_number("", &n));
}

Test(run, step_order) {
    /* number first, whatever the times; a name without a number is older than any */
    cr_assert_lt(run_step_cmp("step-9", T1, "step-10", T0), 0);
    cr_assert_gt(run_step_cmp("step-10", T0, "step-9", T1), 0);
    cr_assert_lt(run_step_cmp("final", T1, "step-0", T0), 0);
    /* same number: time, then name */
    cr_assert_lt(run_step_cmp("a-5", T0, "b-05", T1), 0);
    cr_assert_gt(run_step_cmp("a-5", T1, "b-05", T0), 0);
    cr_assert_lt(run_step_cmp("a-5", T0, "b-5", T0), 0);
    cr_assert_eq(run_step_cmp("a-5", T0, "a-5", T0), 0);
}

/* A run directory in /tmp with steps copied from fixture fsdp2_ws2. */
typedef struct run_dir {
    char dir[64];
    ref_fixture ref;
} run_dir;

static void run_make(run_dir *r) {
    cr_assert_eq(ref_load("fsdp2_ws2", &r->ref), 0, "fixture missing in %s", ref_fixtures_dir());
    snprintf(r->dir, sizeof r->dir, "/tmp/ckpt-run-XXXXXX");
    cr_assert(mkdtemp(r->dir));
}

/* Adds step `name`, complete or (metadata = false) without `.metadata`, its files dated t. */
static void add_step(run_dir *r, const char *name, bool metadata, time_t t) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", r->dir, name);
    cr_assert_eq(mkdir(p, 0755), 0, "%s: %s", p, strerror(errno));
    tu_copy_files(r->ref.ckpt_dir, p);
    char m[4200];
    snprintf(m, sizeof m, "%s/.metadata", p);
    if (!metadata) cr_assert_eq(unlink(m), 0);
    struct timespec ts[2] = {{t, 0}, {t, 0}};
    if (metadata) cr_assert_eq(utimensat(AT_FDCWD, m, ts, 0), 0);
}

static void write_tracker(run_dir *r, const char *file, const char *text) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", r->dir, file);
    tu_write_file(p, text, strlen(text));
}

static void run_remove(run_dir *r) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", r->dir);
    cr_assert_eq(system(cmd), 0);
    ref_free(&r->ref);
}

static void expect_latest(run_dir *r, bool verify, const char *want) {
    char *name = NULL;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_run_latest(r->dir, verify, &name, &err), CKPT_OK, "%s", err.message);
    cr_expect_str_eq(name, want);
    free(name);
}

Test(run, latest_by_number_then_trackers) {
    run_dir r;
    run_make(&r);
    char *name = (char *)"x";
    ckpt_error err = {0};
    cr_assert_eq(ckpt_run_latest(r.dir, false, &name, &err), CKPT_E_NOTFOUND);
    cr_assert_null(name);
    cr_expect(strstr(err.message, r.dir), "%s", err.message);
    add_step(&r, "step-9", true, 2000);
    add_step(&r, "step-10", true, 1000);  /* older files, higher number: the newest */
    add_step(&r, "step-11", false, 3000); /* no .metadata: not a step */
    expect_latest(&r, false, "step-10");
    /* Megatron's tracker, then SageMaker's `newest`, then `latest`, each more authoritative */
    write_tracker(&r, "latest_checkpointed_iteration.txt", "9\n"); /* iter_0000009: absent */
    expect_latest(&r, false, "step-10");
    write_tracker(&r, "newest", "step-9\n");
    expect_latest(&r, false, "step-9");
    write_tracker(&r, "latest", "step-11\n"); /* names an incomplete step: skipped */
    expect_latest(&r, false, "step-9");
    write_tracker(&r, "latest", "step-10  \r\n");
    expect_latest(&r, false, "step-10");
    run_remove(&r);
}

Test(run, latest_verify_skips_a_step_that_does_not_open) {
    run_dir r;
    run_make(&r);
    add_step(&r, "step-1", true, 1000);
    add_step(&r, "step-2", true, 2000);
    char p[4096];
    snprintf(p, sizeof p, "%s/step-2/__1_0.distcp", r.dir); /* a copy still under way */
    cr_assert_eq(unlink(p), 0);
    expect_latest(&r, false, "step-2");
    /* the missing shard only shows when a read needs it; a truncated .metadata fails the open */
    snprintf(p, sizeof p, "%s/step-2/.metadata", r.dir);
    tu_write_file(p, "\x80\x02", 2);
    expect_latest(&r, false, "step-2");
    expect_latest(&r, true, "step-1");
    run_remove(&r);
}

Test(run, retention_keeps_newest_and_tracked) {
    run_dir r;
    run_make(&r);
    add_step(&r, "step-1", true, 5000);
    add_step(&r, "step-2", true, 4000);
    add_step(&r, "step-3", true, 3000);
    add_step(&r, "step-4", true, 2000);
    write_tracker(&r, "newest", "step-1\n");
    size_t removed = 0;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_save_retain(r.dir, 2, NULL, &removed, &err), CKPT_OK, "%s", err.message);
    cr_expect_eq(removed, 1);
    struct stat st;
    char p[4096];
    const char *want[] = {"step-1", "step-3", "step-4"}; /* step-1: tracked */
    for (size_t i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", r.dir, want[i]);
        cr_expect_eq(stat(p, &st), 0, "%s removed", want[i]);
    }
    snprintf(p, sizeof p, "%s/step-2", r.dir);
    cr_expect_neq(stat(p, &st), 0, "step-2 kept");
    run_remove(&r);
}
