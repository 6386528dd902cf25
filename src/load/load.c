/* load.c — the collective loader's public calls: opening over a transport, recording
 * requests, and executing them (choosing the transport, planning locally, the job-wide plan,
 * the exchange rounds, then the requests only this rank can serve), with counters and
 * CKPT_DEBUG logging. */
#include "load/load_i.h"
#include "tensor/mesh.h"
#include "slice/region.h"
#include "tensor/strided.h"
#include "util/error.h"

#include <sched.h>
#include <stddef.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A hash of this host, for telling apart the ranks of one node: the boot id (distinct per
 * booted kernel, so per node, also under containers sharing a hostname), else the hostname. */
static uint64_t host_hash(void) {
    char id[256] = {0};
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f || !fgets(id, sizeof id, f)) gethostname(id, sizeof id - 1);
    if (f) fclose(f);
    uint64_t h = 1469598103934665603ull;
    for (const char *c = id; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    return h;
}

/* The default number of I/O threads (collective): the CPUs this rank may run on, shared among
 * the ranks of its node that may run on the same set, from 2 to 16.  So one unbound rank per
 * GPU gets the node's cores, ranks bound by mpirun to a core each (its default for up to 2
 * ranks) get 2, and ranks bound to K cores each (--map-by slot:PE=K) get K.  The ranks
 * sharing a set are found with one all-gather of (host, CPU set) hashes. */
static ckpt_status auto_io_threads(ckpt_load *l, unsigned *out, ckpt_error *err) {
    cpu_set_t set;
    int cpus = 4;
    uint64_t h = 1469598103934665603ull;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        cpus = CPU_COUNT(&set);
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set)) h = (h ^ (uint64_t)c) * 1099511628211ull;
    }
    uint64_t mine[2] = {host_hash(), h}, *all = malloc((size_t)l->size * sizeof mine);
    ckpt_status s = load_agree(l, all ? CKPT_OK : ck_fail(err, CKPT_E_NOMEM, "out of memory"), err);
    if (s == CKPT_OK)
        s = load_agree(l, load_allgather(l, mine, sizeof mine, all, "all-gather (CPU sets)", err),
                       err);
    int sharing = 0;
    for (int k = 0; s == CKPT_OK && k < l->size; k++)
        sharing += all[2 * k] == mine[0] && all[2 * k + 1] == mine[1];
    free(all);
    int t = cpus / (sharing > 0 ? sharing : 1);
    *out = t < 2 ? 2 : t > 16 ? 16 : (unsigned)t;
    return s;
}

ckpt_status ckpt_load_open_transport(const ckpt_transport *t, const char *dir,
                                     const ckpt_open_options *opts, ckpt_load **out,
                                     ckpt_error *err) {
    ckpt_error local = {0};
    if (!err) err = &local;
    if (out) *out = NULL;
    /* a bad transport or no memory: nothing to agree with (every rank should see the same) */
    ckpt_status s = out ? load_transport_check(t, err)
                        : ck_fail(err, CKPT_E_INVAL, "ckpt_load_open_transport: out is NULL");
    ckpt_load *l = s == CKPT_OK ? calloc(1, sizeof *l) : NULL;
    if (s == CKPT_OK && !l) s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
    if (s != CKPT_OK) {
        if (t && t->destroy) t->destroy(t->ctx);
        return s;
    }
    l->t = *t;
    if (t->device) { /* the hooks are copied too: the caller may reuse both structs */
        l->tdev = *t->device;
        l->t.device = &l->tdev;
    }
    l->rank = t->rank;
    l->size = t->size;
    s = load_transport_init(l, err);
    if (s != CKPT_OK) {
        ckpt_load_free(l);
        return s;
    }
    s = auto_io_threads(l, &l->auto_io_threads, err); /* agreed */
    bool shared = false; /* the metadata read by rank 0 for all: one index everywhere */
    if (s == CKPT_OK) s = load_open_reader(l, dir, opts, &shared, err);
    if (s == CKPT_OK && !shared) { /* every rank must see the same data files in the same order */
        uint64_t h = ckpt_reader_num_files(l->r), v[2];
        for (uint32_t i = 0; i < ckpt_reader_num_files(l->r); i++)
            for (const char *c = ckpt_reader_file_name(l->r, i); *c; c++)
                h = h * 1099511628211ull ^ (unsigned char)*c;
        v[0] = h;
        v[1] = ~h; /* the maximum, as the minimum of the complements */
        s = load_min_u64(l, v, 2, "minimum (metadata check)", err);
        if (s == CKPT_OK && v[0] != ~v[1])
            s = ck_fail(err, CKPT_E_INVAL, "%s: ranks see different checkpoint metadata", dir);
        s = load_agree(l, s, err); /* one message (the dirs may differ) */
    }
    if (s != CKPT_OK) {
        ckpt_load_free(l);
        return s;
    }
    *out = l;
    return CKPT_OK;
}

void ckpt_load_free(ckpt_load *l) {
    if (!l) return;
    io_pool_free(l->io);
    nccl_link_free(l->nccl);
    dev_stage_free(l->hooks);
    dev_sink_free(l->dev);
    ckpt_reader_free(l->r);
    free(l->reqs);
    load_transport_fini(l);
    free(l);
}

ckpt_reader *ckpt_load_reader(ckpt_load *l) { return l->r; }

size_t ckpt_load_get_stats(const ckpt_load *l, ckpt_load_stats *out, size_t out_size) {
    /* fields are only ever appended: an older caller's struct is a prefix of this one */
    size_t n = out_size < sizeof l->stats ? out_size : sizeof l->stats;
    if (out && n) memcpy(out, &l->stats, n);
    return sizeof l->stats;
}

bool ckpt_load_has_cuda(void) { return dev_supported(); }

bool ckpt_load_has_nccl(void) { return dev_supported() && nccl_supported(); }

ckpt_status ckpt_load_request(ckpt_load *l, const char *key, const int64_t *start,
                              const int64_t *count, void *dst, size_t dst_size, ckpt_error *err) {
    return ckpt_load_request_mem(l, key, start, count, dst, dst_size, CKPT_LOAD_MEM_AUTO, err);
}

/* Records a request for the box (start, count) of e (both given: e's dims), its destination
 * at dst laid out with dstride (bytes per dim; NULL: C order of the box); `bytes` is the
 * box's size, `span` the destination bytes the strides address (checked by the caller). */
static ckpt_status push_request(ckpt_load *l, const ckpt_entry *e, const int64_t *start,
                                const int64_t *count, const int64_t *dstride, uint8_t *dst,
                                uint64_t bytes, ckpt_load_memory mem, ckpt_error *err) {
    if (l->nreqs == l->reqs_cap) {
        size_t cap = l->reqs_cap ? l->reqs_cap * 2 : 16;
        lreq *m = realloc(l->reqs, cap * sizeof *m);
        if (!m) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
        l->reqs = m;
        l->reqs_cap = cap;
    }
    int nd = ckpt_entry_ndim(e);
    lreq *q = &l->reqs[l->nreqs++];
    memset(q, 0, offsetof(lreq, start));
    q->e = e;
    q->dst = dst;
    q->size = (size_t)bytes;
    q->local = false;
    q->strided = false;
    q->device = mem == CKPT_LOAD_MEM_CUDA || (mem == CKPT_LOAD_MEM_AUTO && bytes &&
                                              dev_supported() && dev_pointer_is_device(dst));
    int64_t acc = (int64_t)ckpt_dtype_itemsize(ckpt_entry_dtype(e));
    for (int d = nd - 1; d >= 0; d--) {
        q->start[d] = start[d];
        q->count[d] = count[d];
        q->dstride[d] = dstride ? dstride[d] : acc;
        q->strided |= q->count[d] > 1 && q->dstride[d] != acc;
        acc *= count[d];
    }
    return CKPT_OK;
}

ckpt_status ckpt_load_request_mem(ckpt_load *l, const char *key, const int64_t *start,
                                  const int64_t *count, void *dst, size_t dst_size,
                                  ckpt_load_memory mem, ckpt_error *err) {
    CK_ERR_OR_LOCAL(err);
    if (mem != CKPT_LOAD_MEM_AUTO && mem != CKPT_LOAD_MEM_HOST && mem != CKPT_LOAD_MEM_CUDA)
        return ck_fail(err, CKPT_E_INVAL, "'%s': unknown memory kind %d", key, (int)mem);
    if (mem == CKPT_LOAD_MEM_CUDA && !dev_supported())
        return ck_fail(err, CKPT_E_UNSUPPORTED,
                       "'%s': a CUDA destination, but this build has no CUDA support", key);
    const ckpt_entry *e = ckpt_reader_find(l->r, key);
    if (!e) return ck_fail(err, CKPT_E_NOTFOUND, "no entry '%s'", key);
    if (ckpt_entry_kind_of(e) != CKPT_ENTRY_TENSOR)
        return ck_fail(err, CKPT_E_INVAL, "'%s' is not a tensor", key);
    int nd = ckpt_entry_ndim(e);
    uint64_t bytes = ckpt_dtype_itemsize(ckpt_entry_dtype(e));
    int64_t st[CKPT_MAX_NDIM], ct[CKPT_MAX_NDIM];
    for (int d = 0; d < nd; d++) {
        int64_t a = start ? start[d] : 0, c = count ? count[d] : ckpt_entry_shape(e)[d];
        if (a < 0 || c < 0 || a > ckpt_entry_shape(e)[d] - c)
            return ck_fail(err, CKPT_E_RANGE, "'%s': region outside the tensor", key);
        bytes *= (uint64_t)c;
        st[d] = a;
        ct[d] = c;
    }
    if (dst_size < bytes || (!dst && bytes))
        return ck_fail(err, CKPT_E_INVAL, "'%s': buffer of %zu bytes, region needs %llu", key,
                       dst_size, (unsigned long long)bytes);
    return push_request(l, e, st, ct, NULL, dst, bytes, mem, err);
}

ckpt_status ckpt_load_request_shard(ckpt_load *l, const char *key, int dim, uint32_t nranks,
                                    uint32_t rank, void *dst, size_t dst_size, ckpt_error *err) {
    CK_ERR_OR_LOCAL(err);
    const ckpt_entry *e = ckpt_reader_find(l->r, key);
    if (!e || ckpt_entry_kind_of(e) != CKPT_ENTRY_TENSOR)
        return ck_fail(err, CKPT_E_NOTFOUND, "no tensor '%s'", key);
    int64_t start[CKPT_MAX_NDIM], count[CKPT_MAX_NDIM];
    if (ckpt_shard_box(ckpt_entry_ndim(e), ckpt_entry_shape(e), dim, nranks, rank, start, count) !=
        CKPT_OK)
        return ck_fail(err, CKPT_E_INVAL, "'%s': bad shard spec dim %d, rank %u of %u", key, dim,
                       rank, nranks);
    return ckpt_load_request(l, key, start, count, dst, dst_size, err);
}

ckpt_status ckpt_load_request_boxes(ckpt_load *l, const char *key, size_t nboxes,
                                    const int64_t *starts, const int64_t *counts, void *dst,
                                    size_t dst_size, ckpt_load_memory mem, ckpt_error *err) {
    const ckpt_entry *e = ckpt_reader_find(l->r, key);
    if (!e || ckpt_entry_kind_of(e) != CKPT_ENTRY_TENSOR)
        return ck_fail(err, CKPT_E_NOTFOUND, "no tensor '%s'", key);
    int nd = ckpt_entry_ndim(e);
    if (nd && nboxes && (!starts || !counts))
        return ck_fail(err, CKPT_E_INVAL, "'%s': NULL boxes", key);
    size_t keep = l->nreqs, item = ckpt_dtype_itemsize(ckpt_entry_dtype(e)), at = 0;
    ckpt_status s = CKPT_OK;
    for (size_t i = 0; s == CKPT_OK && i < nboxes; i++) {
        const int64_t *st = nd ? starts + i * (size_t)nd : NULL,
                      *ct = nd ? counts + i * (size_t)nd : NULL;
        uint64_t bytes = item;
        for (int d = 0; d < nd; d++)
            bytes *= ct[d] > 0 ? (uint64_t)ct[d] : 0;
        if (bytes > dst_size - at) {
            s = ck_fail(err, CKPT_E_INVAL, "'%s': buffer of %zu bytes, the boxes need more", key,
                        dst_size);
            break;
        }
        s = ckpt_load_request_mem(l, key, st, ct, bytes ? (uint8_t *)dst + at : dst, (size_t)bytes,
                                  mem, err);
        at += (size_t)bytes;
    }
    if (s != CKPT_OK) l->nreqs = keep;
    return s;
}

ckpt_status ckpt_load_request_layout(ckpt_load *l, const char *key, const ckpt_layout *layout,
                                     const uint32_t *coord, void *dst, size_t dst_size,
                                     ckpt_load_memory mem, ckpt_error *err) {
    const ckpt_entry *e = ckpt_reader_find(l->r, key);
    if (!e || ckpt_entry_kind_of(e) != CKPT_ENTRY_TENSOR)
        return ck_fail(err, CKPT_E_NOTFOUND, "no tensor '%s'", key);
    ckpt_layout_shard *sh;
    ckpt_status ls =
        ckpt_layout_shard_new(layout, ckpt_entry_ndim(e), ckpt_entry_shape(e), coord, &sh, err);
    if (ls != CKPT_OK) {
        ck_error_suffix(err, " (tensor '%s')", key);
        return ls;
    }
    int nd = ckpt_entry_ndim(e);
    size_t keep = l->nreqs, item = ckpt_dtype_itemsize(ckpt_entry_dtype(e));
    uint64_t need = ckpt_layout_shard_numel(sh) * item, n = slice_shard_num_run_boxes(sh);
    ckpt_status s = CKPT_OK;
    if (dst_size < need || (!dst && need))
        s = ck_fail(err, CKPT_E_INVAL, "'%s': buffer of %zu bytes, its local shard needs %llu", key,
                    dst_size, (unsigned long long)need);
    if (s == CKPT_OK && mem != CKPT_LOAD_MEM_AUTO && mem != CKPT_LOAD_MEM_HOST &&
        mem != CKPT_LOAD_MEM_CUDA)
        s = ck_fail(err, CKPT_E_INVAL, "'%s': unknown memory kind %d", key, (int)mem);
    if (s == CKPT_OK && mem == CKPT_LOAD_MEM_CUDA && !dev_supported())
        s = ck_fail(err, CKPT_E_UNSUPPORTED,
                    "'%s': a CUDA destination, but this build has no CUDA support", key);
    /* one request per run box (tensor/mesh.h), not per box: a _StridedShard on a dim after the
     * first holds a box per index of the dims before it (rows), but only a few runs per dim;
     * each run box is a box of the tensor whose destination has the local tensor's strides */
    const int64_t *local = ckpt_layout_shard_local_shape(sh);
    int64_t lstride[CKPT_MAX_NDIM], acc = (int64_t)item;
    for (int d = nd - 1; d >= 0; d--) {
        lstride[d] = acc;
        acc *= local[d];
    }
    if (s == CKPT_OK && !need) n = 1; /* the one (empty) box */
    for (uint64_t i = 0; s == CKPT_OK && i < n; i++) {
        int64_t st[CKPT_MAX_NDIM], ct[CKPT_MAX_NDIM], lo[CKPT_MAX_NDIM];
        slice_shard_run_box(sh, i, st, ct, lo);
        uint64_t bytes = item, at = 0;
        for (int d = 0; d < nd; d++) {
            bytes *= (uint64_t)ct[d];
            at += (uint64_t)lo[d] * (uint64_t)lstride[d];
        }
        s = push_request(l, e, st, ct, lstride, bytes ? (uint8_t *)dst + at : dst, bytes, mem, err);
    }
    ckpt_layout_shard_free(sh);
    if (s != CKPT_OK) l->nreqs = keep;
    return s;
}

/* This rank's transfers while they are made: one per (request, stored chunk) box, in
 * strided form (dims merged; more outer dims than a piece holds are split off). */
typedef struct local_plan {
    ckpt_load *l;
    uint32_t req;
    bool local; /* the request meets a decoded or byte-swapped chunk */
    gpiece *v;
    size_t n, cap;
} local_plan;

static ckpt_status push_piece(local_plan *x, const gpiece *g, ckpt_error *err) {
    if (x->n == x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 64;
        gpiece *m = realloc(x->v, cap * sizeof *m);
        if (!m) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
        x->v = m;
        x->cap = cap;
    }
    x->v[x->n++] = *g;
    return CKPT_OK;
}

static ckpt_status plan_box(void *ctx, const slice_box *b, ckpt_error *err) {
    local_plan *x = ctx;
    if (x->local) return CKPT_OK;
    if (b->c->res->kind == CHUNK_IN_MEMORY || (b->c->res->big_endian && b->itemsize > 1)) {
        x->local = true;
        return CKPT_OK;
    }
    int64_t ds[CKPT_MAX_NDIM], ss[CKPT_MAX_NDIM], cnt[CKPT_MAX_NDIM], run;
    memcpy(ds, b->dst_stride, sizeof(int64_t) * (size_t)b->ndim);
    memcpy(ss, b->src_stride, sizeof(int64_t) * (size_t)b->ndim);
    memcpy(cnt, b->count, sizeof(int64_t) * (size_t)b->ndim);
    int n = ck_merge_dims(ds, ss, cnt, b->ndim, b->itemsize, &run);
    for (int d = 0; d < n; d++)
        if (ss[d] < 0 || ds[d] < 0) { /* (never from torch): served by this rank alone */
            x->local = true;
            return CKPT_OK;
        }
    /* the outer dims beyond what a piece holds are walked here (pieces of GPIECE_DIMS dims) */
    int split = n > GPIECE_DIMS ? n - GPIECE_DIMS : 0;
    int64_t idx[CKPT_MAX_NDIM] = {0};
    gpiece g = {.file = b->c->loc.file_id,
                .req = x->req,
                .len = (uint64_t)run,
                .ndim = (uint32_t)(n - split),
                .owner = (uint32_t)x->l->rank};
    for (int d = split; d < n; d++) {
        g.count[d - split] = cnt[d];
        g.sstride[d - split] = ss[d];
        g.dstride[d - split] = ds[d];
    }
    for (;;) {
        g.off = b->src0;
        g.dst = b->dst0;
        for (int d = 0; d < split; d++) {
            g.off += (uint64_t)(idx[d] * ss[d]);
            g.dst += (uint64_t)(idx[d] * ds[d]);
        }
        gpiece_extent(&g);
        CK_TRY(push_piece(x, &g, err));
        int d = split - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < cnt[d]) break;
            idx[d] = 0;
        }
        if (d < 0) return CKPT_OK;
    }
}

/* Plans this rank's requests into transfers; requests that meet decoded or byte-swapped
 * chunks are marked local. */
static ckpt_status plan_local(ckpt_load *l, gpiece **out, size_t *n, ckpt_error *err) {
    local_plan x = {.l = l};
    *out = NULL;
    *n = 0;
    for (size_t i = 0; i < l->nreqs; i++) {
        lreq *q = &l->reqs[i];
        int nd = ckpt_entry_ndim(q->e);
        size_t mark = x.n;
        x.req = (uint32_t)i;
        x.local = false;
        uint64_t bytes;
        ckpt_status ps =
            slice_for_each_box_dst(l->r, q->e, nd ? q->start : NULL, nd ? q->count : NULL,
                                   nd ? q->dstride : NULL, plan_box, &x, &bytes, err);
        if (ps != CKPT_OK) {
            free(x.v);
            return ps;
        }
        if (x.local) {
            q->local = true;
            x.n = mark;
        }
    }
    *out = x.v;
    *n = x.n;
    return CKPT_OK;
}

static void log_stats(const ckpt_load *l) {
    const char *dbg = getenv("CKPT_DEBUG");
    if (!dbg || !*dbg || *dbg == '0') return;
    const ckpt_load_stats *s = &l->stats;
    fprintf(stderr,
            "ckpt_load rank %d/%d: requested %llu B, read %llu B in %llu preads (planned %llu B; "
            "metadata %llu B, received %llu B; %llu chunks' headers adopted), sent %llu B, "
            "received %llu B, "
            "local %llu B, to device %llu B, union %llu B, %u rounds, over %s (NCCL sent %llu B, "
            "received %llu B); %u I/O threads; setup %.3f s (NCCL init %.3f s), plan %.3f s, "
            "read %.3f s, exchange %.3f s, total %.3f s\n",
            l->rank, l->size, (unsigned long long)s->bytes_requested,
            (unsigned long long)s->bytes_read, (unsigned long long)s->preads,
            (unsigned long long)s->bytes_read_plan, (unsigned long long)s->bytes_read_metadata,
            (unsigned long long)s->bytes_received_metadata, (unsigned long long)s->chunks_adopted,
            (unsigned long long)s->bytes_sent, (unsigned long long)s->bytes_received,
            (unsigned long long)s->bytes_local, (unsigned long long)s->bytes_device,
            (unsigned long long)s->union_bytes, s->rounds,
            s->transport == CKPT_LOAD_TRANSPORT_NCCL     ? "NCCL"
            : s->transport == CKPT_LOAD_TRANSPORT_DEVICE ? "the transport's device hooks"
                                                         : "the host transport",
            (unsigned long long)s->bytes_sent_nccl, (unsigned long long)s->bytes_received_nccl,
            s->io_threads, s->seconds_setup, s->seconds_nccl_init, s->seconds_plan, s->seconds_read,
            s->seconds_exchange, s->seconds_total);
}

/* The pinned device staging of an execute: a quarter of the budget, at most 32 MiB (tiny
 * budgets, down to 512 bytes, are for tests).  Pinning is part of every load's time (about
 * 12 ms for 32 MiB, 21-32 ms for 64 MiB on an H200 machine), and two 16 MiB halves already
 * keep the reads and the copies at the same rate as two of 32 MiB (docs/benchmarks.md). */
static uint64_t device_staging(uint64_t budget) {
    uint64_t d = budget / 4;
    if (d > (32ull << 20)) d = 32ull << 20;
    if (d < 512) d = 512;
    return d;
}

/* Makes (or keeps) this rank's device sink when it has device destinations. */
static ckpt_status prepare_device(ckpt_load *l, bool mine, uint64_t bytes, ckpt_error *err) {
    if (!mine || (l->dev && dev_sink_bytes(l->dev) == bytes)) return CKPT_OK;
    dev_sink_free(l->dev);
    l->dev = NULL;
    return dev_sink_create(bytes, &l->dev, err);
}

/* Collective: the stage of the device hooks (made by the first execute that uses them, kept);
 * the hooks' device must be the current one.  The agreed status. */
static ckpt_status prepare_hooks(ckpt_load *l, ckpt_error *err) {
    int cur = dev_current();
    ckpt_status s = cur != l->tdev.device
                        ? ck_fail(err, CKPT_E_INVAL,
                                  "transport device hooks: their device is %d, the current "
                                  "device is %d",
                                  l->tdev.device, cur)
                    : l->hooks ? CKPT_OK
                               : dev_stage_create(&l->hooks, err);
    return load_agree(l, s, err);
}

/* A region read by the reader library (decoded chunks, the independent mode). */
static ckpt_status read_whole(ckpt_load *l, const lreq *q, ckpt_error *err) {
    if (q->device) return load_region_to_device(l, q, err);
    int nd = ckpt_entry_ndim(q->e);
    if (q->strided)
        return slice_read_region_dst(l->r, q->e, q->start, q->count, q->dstride, q->dst, err);
    return ckpt_read_region(l->r, q->e, nd ? q->start : NULL, nd ? q->count : NULL, q->dst, q->size,
                            err);
}

ckpt_status ckpt_load_execute(ckpt_load *l, const ckpt_load_options *opts, ckpt_error *err) {
    CK_ERR_OR_LOCAL(err);
    ckpt_error local = {0};
    if (!err) err = &local;
    ckpt_load_options o = opts ? *opts : (ckpt_load_options){0};
    if (!o.staging_bytes) o.staging_bytes = 256ull << 20;
    if (!o.direct_min_bytes) o.direct_min_bytes = LOAD_DIRECT_MIN;
    if (!o.io_threads) o.io_threads = l->auto_io_threads;
    if (o.io_threads > 64) o.io_threads = 64;
    l->io_piece = o.io_piece_bytes ? o.io_piece_bytes : LOAD_IO_PIECE;
    memset(&l->stats, 0, sizeof l->stats);
    ckpt_reader_stats io0;
    ckpt_reader_get_stats(l->r, &io0);
    double t0 = now();
    int dev_here = 0, host_here = 0;
    for (size_t i = 0; i < l->nreqs; i++) {
        l->stats.bytes_requested += l->reqs[i].size;
        dev_here |= l->reqs[i].device;
        host_here |= !l->reqs[i].device;
    }
    /* the staging split and the transport must be the same on every rank (the rounds'
     * windows depend on them): any rank with device destinations, with host ones, without
     * device ones, without device hooks; the transport asked for (largest and smallest) */
    bool hooks_here = l->t.device && dev_supported();
    uint64_t want[6] = {(uint64_t)dev_here,    (uint64_t)host_here,   (uint64_t)!dev_here,
                        (uint64_t)!hooks_here, (uint64_t)o.transport, (uint64_t)o.transport};
    int job[6] = {0};
    for (int i = 0; i < 5; i++) /* maxima, as minima of the complements; then a minimum */
        want[i] = ~want[i];
    ckpt_status ms = load_min_u64(l, want, 6, "minimum (execute options)", err);
    for (int i = 0; ms == CKPT_OK && i < 6; i++)
        job[i] = i == 5 ? -(int)want[i] : (int)~want[i];
    if (ms != CKPT_OK) {
        l->nreqs = 0;
        return ms; /* the handle is broken: no agreement is possible */
    }
    int dev_job = job[0];
    bool all_device = !job[1] && !job[2], all_hooks = !job[3];
    uint64_t dev_bytes = dev_job ? device_staging(o.staging_bytes) : 0;
    uint64_t exch_bytes = o.staging_bytes - dev_bytes; /* device_staging <= budget / 4 */
    if (o.staging_bytes < dev_bytes) exch_bytes = 0;
    bool forced_dev =
        o.transport == CKPT_LOAD_TRANSPORT_NCCL || o.transport == CKPT_LOAD_TRANSPORT_DEVICE;
    const char *tname = o.transport == CKPT_LOAD_TRANSPORT_NCCL ? "nccl" : "device";
    ckpt_status s =
        job[4] != -job[5] ? ck_fail(err, CKPT_E_INVAL, "ranks asked for different transports")
        : (unsigned)o.transport > CKPT_LOAD_TRANSPORT_DEVICE
            ? ck_fail(err, CKPT_E_INVAL, "unknown transport %d", (int)o.transport)
        : o.transport == CKPT_LOAD_TRANSPORT_NCCL && !ckpt_load_has_nccl()
            ? ck_fail(err, CKPT_E_UNSUPPORTED, "transport nccl: this build has no NCCL support")
        : o.transport == CKPT_LOAD_TRANSPORT_DEVICE && !dev_supported()
            ? ck_fail(err, CKPT_E_UNSUPPORTED, "transport device: this build has no CUDA support")
        : o.transport == CKPT_LOAD_TRANSPORT_DEVICE && !all_hooks
            ? ck_fail(err, CKPT_E_UNSUPPORTED,
                      "transport device: the transport has no device hooks "
                      "(ckpt_transport.device) on some rank")
        : forced_dev && job[1] ? ck_fail(err, CKPT_E_UNSUPPORTED,
                                         "transport %s: every destination must be device memory, "
                                         "and a rank has host destinations",
                                         tname)
                               : CKPT_OK;
    /* auto: device to device when every rank has device destinations only, over the
     * transport's hooks when every rank's transport has them, else over NCCL */
    bool collective = o.mode == CKPT_LOAD_COLLECTIVE;
    bool auto_dev = o.transport == CKPT_LOAD_TRANSPORT_AUTO && all_device;
    l->use_hooks = collective && (o.transport == CKPT_LOAD_TRANSPORT_DEVICE ||
                                  (auto_dev && all_hooks && dev_supported()));
    l->use_nccl = collective && (o.transport == CKPT_LOAD_TRANSPORT_NCCL ||
                                 (auto_dev && !l->use_hooks && ckpt_load_has_nccl()));
    l->dx = NULL;
    if (s == CKPT_OK) s = prepare_device(l, dev_here, dev_bytes, err);
    if (s == CKPT_OK && (!l->io || io_pool_threads(l->io) != o.io_threads)) {
        io_pool_free(l->io);
        l->io = NULL;
        s = io_pool_create(o.io_threads, &l->io, err);
    }
    s = load_agree(l, s, err);
    if (s == CKPT_OK && (l->use_nccl || l->use_hooks)) {
        double ti = now();
        bool made = !l->nccl;
        s = l->use_hooks ? prepare_hooks(l, err) : nccl_link_open(l, err); /* agreed */
        if (l->use_nccl && made && l->nccl) l->stats.seconds_nccl_init = now() - ti;
        if (s != CKPT_OK && o.transport == CKPT_LOAD_TRANSPORT_AUTO) {
            if (l->rank == 0 && getenv("CKPT_DEBUG") && *getenv("CKPT_DEBUG") != '0')
                fprintf(stderr, "ckpt_load: %s unavailable, using the host transport: %s\n",
                        l->use_hooks ? "the device hooks" : "NCCL transport", err->message);
            ck_error_clear(err);
            l->use_nccl = l->use_hooks = false;
            s = CKPT_OK;
        }
    }
    if (s == CKPT_OK)
        l->dx = l->use_hooks ? l->hooks : l->use_nccl ? nccl_link_staging(l->nccl) : NULL;
    l->stats.transport = l->use_hooks  ? CKPT_LOAD_TRANSPORT_DEVICE
                         : l->use_nccl ? CKPT_LOAD_TRANSPORT_NCCL
                                       : CKPT_LOAD_TRANSPORT_MPI;
    l->stats.io_threads = o.io_threads;
    double t_setup = now();
    l->stats.seconds_setup = t_setup - t0;
    if (s != CKPT_OK) {
        l->nreqs = 0;
        return s;
    }
    if (o.mode == CKPT_LOAD_INDEPENDENT) {
        for (size_t i = 0; s == CKPT_OK && i < l->nreqs; i++) {
            s = read_whole(l, &l->reqs[i], err);
        }
        if (s == CKPT_OK && dev_here) s = dev_sink_finish(l->dev, err);
        l->stats.seconds_read = now() - t_setup;
        s = load_agree(l, s, err);
    } else {
        gpiece *mine = NULL;
        size_t nmine = 0;
        s = load_share_chunks(l, err); /* agreed: each chunk's headers read by one rank */
        if (s == CKPT_OK) s = load_agree(l, plan_local(l, &mine, &nmine, err), err);
        load_plan p = {0};
        if (s == CKPT_OK) s = load_plan_build(l, mine, nmine, o.direct_min_bytes, &p, err);
        free(mine);
        l->stats.seconds_plan = now() - t_setup;
        if (s == CKPT_OK) {
            l->stats.union_bytes = p.union_bytes;
            l->stats.plan_transfers = p.npieces;
            l->stats.plan_ranges = p.nranges;
            l->stats.plan_rows = p.nrows;
            l->stats.plan_memory = p.memory;
            s = load_exchange(l, &p, exch_bytes, err);
            load_plan_release(&p, l->size);
        }
        if (l->use_nccl) nccl_link_release(l->nccl); /* waits for its stream */
        if (l->use_hooks) dev_stage_release(l->hooks);
        l->dx = NULL;
        ckpt_status ls = CKPT_OK;
        for (size_t i = 0; s == CKPT_OK && ls == CKPT_OK && i < l->nreqs; i++) {
            lreq *q = &l->reqs[i];
            if (!q->local) continue;
            ls = read_whole(l, q, err);
            l->stats.bytes_local += q->size;
        }
        if (s == CKPT_OK && ls == CKPT_OK && dev_here) ls = dev_sink_finish(l->dev, err);
        if (s == CKPT_OK) s = load_agree(l, ls, err);
    }
    /* a failed load may leave copies in flight into the caller's buffers: wait for them */
    if (s != CKPT_OK && dev_here) {
        ckpt_error ignored = {0};
        dev_sink_finish(l->dev, &ignored);
    }
    l->nreqs = 0;
    ckpt_reader_stats io1;
    ckpt_reader_get_stats(l->r, &io1);
    l->stats.bytes_read = io1.bytes_read - io0.bytes_read;
    l->stats.preads = io1.preads - io0.preads;
    l->stats.bytes_read_metadata = io1.bytes_read_metadata;
    l->stats.bytes_received_metadata = l->meta_received;
    l->stats.seconds_total = now() - t0;
    log_stats(l);
    return s;
}
