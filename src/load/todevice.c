/* todevice.c — reads whose destination is device memory, through the device sink: byte
 * ranges of the shard files are read (by the I/O threads) straight into the pinned half
 * being filled, then copied asynchronously to their places while the next batch is read;
 * a region read by the reader library (decoded or byte-swapped chunks, the independent mode)
 * goes in slabs that fit a half, each slab contiguous in the destination.  No CUDA call is
 * made here: the sink owns them (device.c). */
#include "load/load_i.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

ckpt_status load_read_to_device(ckpt_load *l, const io_job *jobs, size_t njobs, ckpt_error *err) {
    size_t cap = 64;
    io_job *batch = malloc(cap * sizeof *batch);
    uint8_t **dsts = malloc(cap * sizeof *dsts);
    ckpt_status s = batch && dsts ? CKPT_OK : ck_fail(err, CKPT_E_NOMEM, "out of memory");
    size_t i = 0;
    uint64_t at = 0; /* bytes of jobs[i] already placed */
    while (s == CKPT_OK && i < njobs) {
        uint64_t avail;
        uint8_t *room = dev_sink_room(l->dev, jobs[i].len - at, &avail, err);
        if (!room) {
            s = err && err->code ? err->code : CKPT_E_IO;
            break;
        }
        /* a batch: the next jobs (the last one maybe in part) laid out in the room */
        size_t nb = 0;
        uint64_t used = 0;
        while (i < njobs && used < avail) {
            if (nb == cap) {
                cap *= 2;
                io_job *m1 = realloc(batch, cap * sizeof *m1);
                if (m1) batch = m1;
                uint8_t **m2 = m1 ? realloc(dsts, cap * sizeof *m2) : NULL;
                if (m2) dsts = m2;
                if (!m1 || !m2) {
                    s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
                    break;
                }
            }
            uint64_t take = jobs[i].len - at;
            if (take > avail - used) take = avail - used;
            batch[nb] = (io_job){jobs[i].file, jobs[i].off + at, take, room + used, jobs[i].buf};
            dsts[nb++] = jobs[i].dst + at;
            used += take;
            at += take;
            if (at == jobs[i].len) {
                i++;
                at = 0;
            }
        }
        if (s == CKPT_OK) s = io_pool_read(l->io, l->r, batch, nb, l->io_piece, err);
        for (size_t k = 0; s == CKPT_OK && k < nb; k++) {
            s = dev_sink_fill(l->dev, batch[k].buf, dsts[k], batch[k].len, err);
            l->stats.bytes_device += batch[k].len;
        }
    }
    free(batch);
    free(dsts);
    return s;
}

ckpt_status load_region_to_device(ckpt_load *l, const lreq *q, ckpt_error *err) {
    int nd = ckpt_entry_ndim(q->e);
    uint64_t item = ckpt_dtype_itemsize(ckpt_entry_dtype(q->e));
    if (nd == 0 || q->size == 0) { /* a scalar or nothing: one slab */
        uint64_t avail;
        uint8_t *room = dev_sink_room(l->dev, q->size ? q->size : 1, &avail, err);
        if (!room) return err && err->code ? err->code : CKPT_E_IO;
        if (q->size) CK_TRY(ckpt_read_region(l->r, q->e, NULL, NULL, room, (size_t)q->size, err));
        l->stats.bytes_device += q->size;
        return dev_sink_fill(l->dev, q->dst, q->dst, q->size, err);
    }
    uint64_t half = dev_sink_bytes(l->dev) / 2;
    /* d: the outermost dimension whose inner block (dims after d, whole) fits a half */
    uint64_t inner[CKPT_MAX_NDIM];
    inner[nd - 1] = item;
    for (int k = nd - 2; k >= 0; k--)
        inner[k] = inner[k + 1] * (uint64_t)q->count[k + 1];
    /* cdim: dims from cdim on are laid out in the destination as in the box's C order (all
     * of them for a plain request; a strided one sits in a larger buffer), so a slab must
     * keep dims < cdim fixed and may span several indices of dim d only when d >= cdim */
    int cdim = 0;
    for (int j = nd - 1; j >= 0; j--)
        if (q->count[j] > 1 && (uint64_t)q->dstride[j] != inner[j]) {
            cdim = j + 1;
            break;
        }
    int d = 0;
    while (d < nd - 1 && inner[d] > half)
        d++;
    if (d < cdim - 1) d = cdim - 1;
    uint64_t per = d < cdim ? 1 : half / inner[d] ? half / inner[d] : 1; /* indices of d per slab */
    int64_t idx[CKPT_MAX_NDIM] = {0}, start[CKPT_MAX_NDIM], count[CKPT_MAX_NDIM];
    for (;;) {
        /* the slab: idx fixed on dims < d, [idx[d], idx[d]+k) on d, whole after */
        uint64_t k = (uint64_t)(q->count[d] - idx[d]);
        if (k > per) k = per;
        uint64_t at = 0;
        for (int j = 0; j <= d; j++)
            at += (uint64_t)idx[j] * (uint64_t)q->dstride[j];
        for (int j = 0; j < nd; j++) {
            start[j] = q->start[j] + (j <= d ? idx[j] : 0);
            count[j] = j < d ? 1 : j == d ? (int64_t)k : q->count[j];
        }
        uint64_t bytes = k * inner[d];
        uint64_t avail;
        uint8_t *room = dev_sink_room(l->dev, bytes, &avail, err);
        if (!room) return err && err->code ? err->code : CKPT_E_IO;
        if (avail < bytes) /* cannot happen: a slab fits an empty half */
            return ck_fail(err, CKPT_E_LIMIT, "'%s': slab of %llu bytes over the staging half",
                           ckpt_entry_key(q->e), (unsigned long long)bytes);
        CK_TRY(ckpt_read_region(l->r, q->e, start, count, room, (size_t)bytes, err));
        CK_TRY(dev_sink_fill(l->dev, q->dst, q->dst + at, bytes, err));
        l->stats.bytes_device += bytes;
        /* next: advance idx[d] by k, carrying into outer dims */
        idx[d] += (int64_t)k;
        int j = d;
        while (j > 0 && idx[j] >= q->count[j]) {
            idx[j] = 0;
            idx[--j]++;
        }
        if (idx[0] >= q->count[0]) break;
    }
    return CKPT_OK;
}
