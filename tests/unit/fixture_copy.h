/* fixture_copy.h — test helper: private copies of a torch-written fixture, damaged at run
 * time in one way each (bytes patched, files removed), and the checks the damage tests share:
 * a whole-file defect fails the open naming the file; a defect of one tensor fails that
 * tensor alone, every other tensor still reading bit-exactly what torch read (the fixture's
 * reference). */
#ifndef CK_TEST_FIXTURE_COPY_H
#define CK_TEST_FIXTURE_COPY_H

#include "ckpt.h"
#include "fixture_ref.h"

#include <criterion/criterion.h>
#include <stdbool.h>
#include <string.h>

#define expect_has(msg, needle)                                                                    \
    cr_expect(strstr((msg), (needle)) != NULL, "message \"%s\" should mention \"%s\"", (msg),      \
              (needle))

typedef struct fx_copy {
    char root[256]; /* private: holds decoys beside the copy */
    char dir[300];  /* root/ckpt: the copy */
    ref_fixture ref;
} fx_copy;

/* A private copy of fixture `name`'s checkpoint (its files; no subdirectories). */
void fx_copy_make(fx_copy *t, const char *name);
/* Removes the copy, the decoys beside it and the loaded reference. */
void fx_copy_remove(fx_copy *t);
void fx_copy_path(const fx_copy *t, const char *file, char *out, size_t cap);
void fx_copy_unlink(const fx_copy *t, const char *file);
/* Replaces the first occurrence of from[0, len) after the first `anchor` (a string; NULL:
 * from the start) in `file` by to[0, len). */
void fx_copy_patch_after(const fx_copy *t, const char *file, const char *anchor, const void *from,
                         const void *to, size_t len);
/* Replaces the first occurrence of from[0, len) in `file` by to[0, len). */
void fx_copy_patch_bytes(const fx_copy *t, const char *file, const void *from, const void *to,
                         size_t len);
/* The same for NUL-terminated strings of one length. */
void fx_copy_patch(const fx_copy *t, const char *file, const char *from, const char *to);

ckpt_status fx_copy_open(const fx_copy *t, ckpt_reader **r, ckpt_error *err);
/* Opens the copy, failing the test if it does not open. */
ckpt_reader *fx_copy_open_ok(const fx_copy *t);
/* Reads every tensor of the reference: those in `gone` must not be indexed, those in `bad`
 * must fail with `code`, the message naming them, the others read bit-exactly (lists
 * NULL-terminated, or NULL).  Returns how many read. */
size_t fx_expect_reads(const fx_copy *t, ckpt_reader *r, const char *const *bad, ckpt_status code,
                       const char *const *gone);
/* The open fails with `code`, its message naming each of `words` (NULL-terminated). */
void fx_expect_open_fails(const fx_copy *t, ckpt_status code, const char *const *words);
/* The copy opens; `key` alone has a problem that names each of `words` and fails to read
 * (CKPT_E_FORMAT), every other tensor reads as torch read it. */
void fx_expect_entry_problem(const fx_copy *t, const char *key, const char *const *words);

#endif
