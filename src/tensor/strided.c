/* strided.c — N-d strided copies with dimension merging, and byte swapping. */
#include "tensor/strided.h"

#include "ckpt.h"

#include <string.h>

int ck_merge_dims(int64_t *ds, int64_t *ss, int64_t *cnt, int ndim, size_t itemsize, int64_t *run) {
    int out = 0;
    for (int d = 0; d < ndim; d++) {
        if (cnt[d] == 1) continue;
        ds[out] = ds[d];
        ss[out] = ss[d];
        cnt[out] = cnt[d];
        out++;
    }
    /* merge from the inside out */
    int n = out;
    while (n >= 2 && ds[n - 2] == ds[n - 1] * cnt[n - 1] && ss[n - 2] == ss[n - 1] * cnt[n - 1]) {
        cnt[n - 2] *= cnt[n - 1];
        ds[n - 2] = ds[n - 1];
        ss[n - 2] = ss[n - 1];
        n--;
    }
    *run = (int64_t)itemsize;
    if (n >= 1 && ds[n - 1] == (int64_t)itemsize && ss[n - 1] == (int64_t)itemsize) {
        *run = cnt[n - 1] * (int64_t)itemsize;
        n--;
    }
    return n;
}

void ck_strided_copy(void *dst, const int64_t *dst_stride, const void *src,
                     const int64_t *src_stride, const int64_t *count, int ndim, size_t itemsize) {
    int64_t ds[CKPT_MAX_NDIM], ss[CKPT_MAX_NDIM], cnt[CKPT_MAX_NDIM], idx[CKPT_MAX_NDIM];
    for (int d = 0; d < ndim; d++) {
        if (count[d] == 0) return;
        ds[d] = dst_stride[d];
        ss[d] = src_stride[d];
        cnt[d] = count[d];
    }
    int64_t run;
    int n = ck_merge_dims(ds, ss, cnt, ndim, itemsize, &run);
    uint8_t *dp = dst;
    const uint8_t *sp = src;
    if (n == 0) {
        memcpy(dp, sp, (size_t)run);
        return;
    }
    memset(idx, 0, sizeof(idx[0]) * (size_t)n);
    int64_t doff = 0, soff = 0;
    for (;;) {
        /* innermost remaining dim as a tight loop */
        const int64_t inner_ds = ds[n - 1], inner_ss = ss[n - 1], inner_n = cnt[n - 1];
        if (run == 4 && inner_n > 1) {
            for (int64_t i = 0; i < inner_n; i++)
                memcpy(dp + doff + i * inner_ds, sp + soff + i * inner_ss, 4);
        } else {
            for (int64_t i = 0; i < inner_n; i++)
                memcpy(dp + doff + i * inner_ds, sp + soff + i * inner_ss, (size_t)run);
        }
        int d = n - 2;
        for (; d >= 0; d--) {
            idx[d]++;
            doff += ds[d];
            soff += ss[d];
            if (idx[d] < cnt[d]) break;
            doff -= ds[d] * cnt[d];
            soff -= ss[d] * cnt[d];
            idx[d] = 0;
        }
        if (d < 0) return;
    }
}

void ck_bswap_elems(void *buf, uint64_t n, size_t elem_size) {
    uint8_t *p = buf;
    for (uint64_t i = 0; i < n; i++, p += elem_size) {
        for (size_t a = 0, b = elem_size - 1; a < b; a++, b--) {
            uint8_t t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
    }
}

void ck_strided_bswap(void *buf, const int64_t *stride, const int64_t *count, int ndim,
                      size_t itemsize, size_t swap_unit) {
    int64_t idx[CKPT_MAX_NDIM] = {0};
    for (int d = 0; d < ndim; d++)
        if (count[d] == 0) return;
    uint8_t *p = buf;
    for (;;) {
        int64_t off = 0;
        for (int d = 0; d < ndim; d++)
            off += idx[d] * stride[d];
        ck_bswap_elems(p + off, itemsize / swap_unit, swap_unit);
        int d = ndim - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < count[d]) break;
            idx[d] = 0;
        }
        if (d < 0) return;
    }
}
