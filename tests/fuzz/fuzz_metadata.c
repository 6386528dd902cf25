/* fuzz_metadata.c — libFuzzer target: the input is a `.metadata` file; it is indexed with
 * small limits, and every entry is listed and its layout checked (no data files exist, so
 * reads must fail cleanly).  It is indexed twice, by the walk after decoding (one index
 * thread) and by the walk overlapping the decoding (metadata_overlap.c, in lockstep so that
 * runs repeat): both must fail alike or give the same index. */
#include "ckpt.h"
#include "index/reader_i.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static ckpt_status open_with(const uint8_t *data, size_t size, uint32_t threads, unsigned flags,
                             ckpt_reader **r) {
    ckpt_limits lim = {.max_pickle_memory = 64u << 20,
                       .max_items = 1u << 20,
                       .max_depth = 64,
                       .index_threads = threads};
    ckpt_error err;
    return ck_reader_open_buffer("/nonexistent-fuzz-dir", data, size, &lim, flags, r, &err);
}

static bool same_str(const char *a, const char *b) {
    return a == b || (a && b && strcmp(a, b) == 0);
}

static bool same_loc(const ckpt_chunk_info *p, const ckpt_chunk_info *q) {
    return p->file_id == q->file_id && p->file_offset == q->file_offset && p->length == q->length &&
           p->numel == q->numel && same_str(p->problem, q->problem) &&
           same_str(p->transforms, q->transforms);
}

static void same_index(const ckpt_reader *a, const ckpt_reader *b) {
    size_t n = ckpt_reader_num_entries(a);
    if (n != ckpt_reader_num_entries(b)) abort();
    for (size_t i = 0; i < n; i++) {
        const ckpt_entry *x = ckpt_reader_entry(a, i), *y = ckpt_reader_entry(b, i);
        int nd = ckpt_entry_ndim(x);
        if (!same_str(ckpt_entry_key(x), ckpt_entry_key(y)) ||
            !same_str(ckpt_entry_path(x), ckpt_entry_path(y)) ||
            ckpt_entry_kind_of(x) != ckpt_entry_kind_of(y) ||
            ckpt_entry_dtype(x) != ckpt_entry_dtype(y) || nd != ckpt_entry_ndim(y) ||
            !same_str(ckpt_entry_problem(x), ckpt_entry_problem(y)) ||
            ckpt_entry_num_chunks(x) != ckpt_entry_num_chunks(y))
            abort();
        if (nd > 0 && memcmp(ckpt_entry_shape(x), ckpt_entry_shape(y), (size_t)nd * 8) != 0)
            abort();
        size_t nc = ckpt_entry_kind_of(x) == CKPT_ENTRY_OBJECT ? 1 : ckpt_entry_num_chunks(x);
        for (size_t c = 0; c < nc; c++) {
            ckpt_chunk_info p, q;
            if (ckpt_entry_chunk(x, c, &p) != ckpt_entry_chunk(y, c, &q) || !same_loc(&p, &q))
                abort();
            if (nd > 0 && ckpt_entry_kind_of(x) == CKPT_ENTRY_TENSOR &&
                (memcmp(p.offsets, q.offsets, (size_t)nd * 8) != 0 ||
                 memcmp(p.sizes, q.sizes, (size_t)nd * 8) != 0))
                abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ckpt_reader *r = NULL, *ov = NULL;
    ckpt_status s1 = open_with(data, size, 1, 0, &r);
    ckpt_status s2 = open_with(data, size, 2, CKPT_OPEN_LOCKSTEP, &ov);
    if (s1 != s2) abort();
    if (s1 != CKPT_OK) return 0;
    same_index(r, ov);
    ckpt_reader_free(ov);
    ckpt_error err;
    for (size_t i = 0; i < ckpt_reader_num_entries(r); i++) {
        const ckpt_entry *e = ckpt_reader_entry(r, i);
        (void)ckpt_entry_path(e);
        (void)ckpt_entry_check_layout(e, &err);
        if (ckpt_entry_kind_of(e) == CKPT_ENTRY_TENSOR && ckpt_entry_nbytes(e) <= 4096) {
            uint8_t buf[4096];
            (void)ckpt_read_tensor(r, e, buf, sizeof buf, &err);
        }
    }
    ckpt_reader_free(r);
    return 0;
}
