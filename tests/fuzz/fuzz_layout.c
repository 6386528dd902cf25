/* fuzz_layout.c — libFuzzer target: layout specs as the mount gets them from file names.  The
 * input is a spec, then optionally '\n' and bytes giving a tensor shape (first byte: ndim % 5,
 * then one byte per dim: size % 24).  Parsing must fail cleanly or give a layout whose canonical
 * spec parses back to it; for small meshes and tensors every rank's boxes must lie inside the
 * tensor, add up to its local shape, agree with their element offsets and find_box, and all
 * ranks together must hold every element exactly as often as the mesh replicates it. */
#include "ckpt.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_shards(const ckpt_layout *l, int nd, const int64_t *shape) {
    uint32_t n = ckpt_layout_nranks(l);
    uint64_t numel = 1, copies = 1;
    for (int d = 0; d < nd; d++)
        numel *= (uint64_t)shape[d];
    for (int i = 0; i < l->mesh_ndim; i++)
        if (l->placements[i].kind == CKPT_PLACEMENT_REPLICATE || l->placements[i].dim >= nd)
            copies *= l->mesh[i];
    if (n > 64 || numel > 4096) return;
    uint32_t *seen = calloc(numel ? numel : 1, sizeof *seen);
    if (!seen) abort();
    for (uint32_t r = 0; r < n; r++) {
        uint32_t coord[CKPT_LAYOUT_MAX_MESH_NDIM];
        if (ckpt_layout_coord(l, r, coord) != CKPT_OK) abort();
        ckpt_layout_shard *s;
        if (ckpt_layout_shard_new(l, nd, shape, coord, &s, NULL) != CKPT_OK) abort();
        const int64_t *ls = ckpt_layout_shard_local_shape(s);
        uint64_t lnum = 1, at = 0;
        for (int d = 0; d < nd; d++)
            lnum *= (uint64_t)ls[d];
        if (lnum != ckpt_layout_shard_numel(s)) abort();
        for (uint64_t b = 0; b < ckpt_layout_shard_num_boxes(s); b++) {
            int64_t st[8], ct[8];
            uint64_t eo, bn = 1;
            ckpt_layout_shard_box(s, b, st, ct, &eo);
            if (eo != at) abort();
            for (int d = 0; d < nd; d++) {
                if (st[d] < 0 || ct[d] < 0 || st[d] > shape[d] - ct[d]) abort();
                bn *= (uint64_t)ct[d];
            }
            for (uint64_t e = 0; e < bn; e++) { /* mark the elements */
                uint64_t rem = e, flat = 0, mul = 1;
                for (int d = nd - 1; d >= 0; d--) {
                    flat += ((uint64_t)st[d] + rem % (uint64_t)ct[d]) * mul;
                    rem /= (uint64_t)ct[d];
                    mul *= (uint64_t)shape[d];
                }
                seen[flat]++;
                if (ckpt_layout_shard_find_box(s, at + e) != b) abort();
            }
            at += bn;
        }
        if (at != lnum) abort();
        ckpt_layout_shard_free(s);
    }
    for (uint64_t i = 0; i < numel; i++)
        if (seen[i] != copies) abort();
    free(seen);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char spec[256];
    size_t k = 0;
    while (k < size && k < sizeof spec - 1 && data[k] != '\n') {
        spec[k] = (char)data[k];
        k++;
    }
    spec[k] = '\0';
    ckpt_layout l;
    ckpt_error err = {0};
    if (ckpt_layout_parse(spec, &l, &err) != CKPT_OK) {
        if (!err.message[0] || (err.code != CKPT_E_INVAL && err.code != CKPT_E_LIMIT)) abort();
        return 0;
    }
    char buf[CKPT_LAYOUT_SPEC_MAX * 2];
    size_t n = ckpt_layout_format(&l, buf, sizeof buf);
    ckpt_layout back;
    if (n >= sizeof buf || ckpt_layout_parse(buf, &back, NULL) != CKPT_OK) abort();
    if (back.mesh_ndim != l.mesh_ndim) abort();
    for (int i = 0; i < l.mesh_ndim; i++)
        if (back.mesh[i] != l.mesh[i] || back.placements[i].kind != l.placements[i].kind ||
            (l.placements[i].kind != CKPT_PLACEMENT_REPLICATE &&
             (back.placements[i].dim != l.placements[i].dim ||
              back.placements[i].split_factor != l.placements[i].split_factor)))
            abort();
    int64_t shape[8] = {8, 3};
    int nd = 2;
    if (k < size && k + 1 < size) {
        const uint8_t *p = data + k + 1;
        size_t left = size - k - 1;
        nd = p[0] % 5;
        for (int d = 0; d < nd; d++)
            shape[d] = (size_t)d + 1 < left ? p[d + 1] % 24 : 3;
    }
    check_shards(&l, nd, shape);
    return 0;
}
