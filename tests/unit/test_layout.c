/* test_layout.c — ckpt_shard_box against torch.chunk semantics: for every size 0..17 and
 * N 1..9 the boxes of all ranks tile the dimension in rank order, each is ceil(size/N) rows
 * except a shorter last non-empty one, and ranks past the end are empty at size. */
#include <criterion/criterion.h>

#include "ckpt.h"

Test(layout, torch_chunk_semantics) {
    for (int64_t size = 0; size <= 17; size++) {
        for (uint32_t n = 1; n <= 9; n++) {
            int64_t chunk = (size + n - 1) / n, next = 0;
            for (uint32_t r = 0; r < n; r++) {
                int64_t shape[2] = {3, size}, start[2], count[2];
                cr_assert_eq(ckpt_shard_box(2, shape, 1, n, r, start, count), CKPT_OK);
                cr_assert_eq(start[0], 0);
                cr_assert_eq(count[0], 3);
                cr_assert_eq(start[1], next, "size %lld n %u rank %u", (long long)size, n, r);
                int64_t want = size - next < chunk ? size - next : chunk;
                cr_assert_eq(count[1], want, "size %lld n %u rank %u", (long long)size, n, r);
                next += count[1];
            }
            cr_assert_eq(next, size);
        }
    }
}

Test(layout, known_uneven_case) {
    /* torch.chunk(torch.arange(5), 4) -> [0,1] [2,3] [4]  + DTensor pads one empty shard */
    int64_t shape[1] = {5}, start[1], count[1];
    const int64_t want_start[4] = {0, 2, 4, 5}, want_count[4] = {2, 2, 1, 0};
    for (uint32_t r = 0; r < 4; r++) {
        cr_assert_eq(ckpt_shard_box(1, shape, 0, 4, r, start, count), CKPT_OK);
        cr_assert_eq(start[0], want_start[r]);
        cr_assert_eq(count[0], want_count[r]);
    }
}

Test(layout, replicated_and_invalid) {
    int64_t shape[2] = {4, 6}, start[2], count[2];
    cr_assert_eq(ckpt_shard_box(2, shape, 2, 8, 7, start, count), CKPT_OK);
    cr_assert(start[0] == 0 && start[1] == 0 && count[0] == 4 && count[1] == 6);
    cr_assert_eq(ckpt_shard_box(0, NULL, 0, 3, 1, NULL, NULL), CKPT_OK); /* 0-d: replicated */
    cr_assert_eq(ckpt_shard_box(2, shape, 0, 0, 0, start, count), CKPT_E_INVAL);
    cr_assert_eq(ckpt_shard_box(2, shape, 0, 4, 4, start, count), CKPT_E_INVAL);
    cr_assert_eq(ckpt_shard_box(2, shape, -1, 4, 0, start, count), CKPT_E_INVAL);
}
