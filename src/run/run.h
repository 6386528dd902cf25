/* run.h — a run directory: its steps (sub-directories holding a checkpoint), their order, and
 * the step its trackers name.  The one rule the mount (src/tree/ns.c), the saver's retention
 * (src/save/steps.c) and the CLI (RUN@latest, ckpt prune: ckpt_run_latest) share. */
#ifndef CK_RUN_RUN_H
#define CK_RUN_RUN_H

#include "ckpt.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* The number a step's name ends with ("step-120" -> 120, "iter_0000123" -> 123); false when
 * it ends with no digit or with more than 19. */
bool run_step_number(const char *name, uint64_t *num);

/* The order of steps, oldest first: by the number their names end with (a name without one
 * is older than every numbered one), then by modification time, then by name.  < 0 when a
 * is older than b. */
int run_step_cmp(const char *a, struct timespec a_mtime, const char *b, struct timespec b_mtime);

/* Tracker files of a run directory, most authoritative first. */
enum { RUN_TRACKERS = 3, RUN_NAME_MAX = 256 };
/* The step names its trackers give: `latest` (this saver, DeepSpeed), `newest` (SageMaker),
 * Megatron's `latest_checkpointed_iteration.txt` (N names `iter_%07d`, or `release`).  Only
 * regular files, opened without following a symlink and without blocking on a FIFO, first
 * line trimmed.  Returns how many names out[0..) holds (at most RUN_TRACKERS). */
size_t run_tracked(const char *run, char out[RUN_TRACKERS][RUN_NAME_MAX]);

/* Whether name is a step name at all (not hidden, not a tracker, one path element). */
bool run_step_name_ok(const char *name);

/* What probing run/name found: not a step, complete by its writer's mark (DCP `.metadata`,
 * `__0.metadata`, a HuggingFace index json whose files all exist), or bare safetensors
 * files nothing marks complete.  *mtime (may be NULL): the time that identifies its
 * contents.  no_symlink: a symlinked step directory is not a step (retention must never
 * follow one). */
typedef enum { RUN_STEP_NONE = 0, RUN_STEP_MARKED, RUN_STEP_UNMARKED } run_step_kind;
run_step_kind run_step_probe(const char *run, const char *name, bool no_symlink,
                             struct timespec *mtime);

/* A step nothing marks complete is taken as complete once none of its files has changed for
 * this long (a save in progress keeps touching them). */
#define RUN_UNMARKED_SETTLE_S 3

/* A run directory's complete steps (marked; with_unmarked: also unmarked ones settled for
 * RUN_UNMARKED_SETTLE_S), newest first (run_step_cmp), malloc'ed names in a malloc'ed array;
 * free with run_steps_free. */
typedef struct run_step {
    char *name;
    struct timespec mtime;
} run_step;
ckpt_status run_list_steps(const char *run, bool no_symlink, bool with_unmarked, run_step **out,
                           size_t *n, ckpt_error *err);
void run_steps_free(run_step *v, size_t n);

#endif
