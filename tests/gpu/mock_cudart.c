/* mock_cudart.c — a stand-in CUDA runtime for testing the loader's device path on machines
 * without a GPU (test builds only; never installed).  It implements the runtime calls the
 * loader and `ckpt load --device cuda` make, strictly enough to catch the mistakes a real GPU
 * would punish:
 *   - "device memory" is a reserved, inaccessible (PROT_NONE) address range: any host access
 *     to a device pointer crashes; its bytes live in a separate backing mapping;
 *   - allocations are packed as the real allocator packs small ones: 256-byte aligned and
 *     adjacent, with no gap, so a copy that runs from one allocation into the next is
 *     possible, and refused;
 *   - every copy must lie inside one live allocation (device) or one cudaHostAlloc block;
 *     cudaMemcpyAsync host-to-device must come from pinned memory; a copy that breaks these
 *     rules, or names a NULL pointer, is refused as the real runtime refuses it: it returns
 *     cudaErrorInvalidValue ("invalid argument"), queues nothing, and says why on stderr;
 *   - asynchronous copies are deferred: a stream is a queue run only at cudaEventSynchronize
 *     (up to the event) or cudaStreamSynchronize, reading the pinned source *then*, so a
 *     staging buffer reused before its copies completed delivers wrong bytes; cudaMemcpy on
 *     the legacy stream does not wait for non-blocking streams (as on a GPU).
 *   - device-to-host cudaMemcpyAsync (the saver's device sources) must go from inside one
 *     device allocation into pinned memory; with CKPT_MOCK_CUDA_RUNAHEAD=1 a synchronization
 *     runs the whole stream (the GPU ran ahead), so a pinned half refilled before the host
 *     was done with it delivers wrong bytes, while by default a half read before its event
 *     completed does.
 * A process-wide runtime is the thing being imitated, so its state is global (one lock).
 * CKPT_MOCK_CUDA_DEVICES sets the device count (default 2; 0: no device).
 * CKPT_MOCK_CUDA_TALLY=PREFIX: at exit, the process writes how many cudaMemcpyAsync calls it
 * made of each kind to PREFIX.<pid> ("h2d N", "d2d N", "d2h N"), and how many host ranges it
 * registered ("registered N").  cudaHostRegister makes a page-aligned range pinned until
 * cudaHostUnregister (overlapping a live pinned block aborts); CKPT_MOCK_CUDA_NO_REGISTER=1
 * makes it fail, as on systems that cannot register memory.
 * mock_cudart.h: what other stand-ins (mock_nccl.c) need — device memory's bytes, and host
 * work queued on a stream (run in order with its copies). */
#include "mock_cudart.h"

#include <cuda_runtime_api.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define DEV_SPAN ((size_t)4 << 30) /* reserved address space for device memory */
#define MAX_BLOCKS 65536

typedef struct block {
    uintptr_t base;
    size_t size;
    int live;
} block;

typedef struct op {
    int kind; /* 0 copy, 1 event, 2 deferred host work */
    void *dst;
    const void *src;
    size_t n;
    struct mock_event *ev;
    void (*fn)(void *); /* kind 2: fn(dst) */
} op;

struct mock_event {
    int pending;         /* recorded, not yet reached */
    cudaStream_t stream; /* of the last record */
};

struct CUstream_st {
    op *ops;
    size_t head, n, cap;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *dev_base, *dev_back;
static size_t dev_used;
static block dev_blocks[MAX_BLOCKS], host_blocks[MAX_BLOCKS];
static size_t ndev_blocks, nhost_blocks;
static int current_device;
static cudaError_t last_error;
static unsigned long long copies[4];  /* cudaMemcpyAsync calls, by cudaMemcpyKind */
static unsigned long long registered; /* cudaHostRegister calls that succeeded */

__attribute__((destructor)) static void write_tally(void) {
    const char *prefix = getenv("CKPT_MOCK_CUDA_TALLY");
    if (!prefix || !*prefix) return;
    char path[4096];
    snprintf(path, sizeof path, "%s.%ld", prefix, (long)getpid());
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "h2d %llu\nd2d %llu\nd2h %llu\nregistered %llu\n", copies[cudaMemcpyHostToDevice],
            copies[cudaMemcpyDeviceToDevice], copies[cudaMemcpyDeviceToHost], registered);
    fclose(f);
}

static void die(const char *what, const void *p, size_t n) {
    fprintf(stderr, "mock_cudart: %s (pointer %p, %zu bytes)\n", what, p, n);
    abort();
}

static int devices(void) {
    const char *e = getenv("CKPT_MOCK_CUDA_DEVICES");
    return e ? atoi(e) : 2;
}

static cudaError_t fail(cudaError_t e) {
    last_error = e;
    return e;
}

static const block *find(const block *v, size_t n, const void *p, size_t len) {
    uintptr_t a = (uintptr_t)p;
    for (size_t i = 0; i < n; i++)
        if (v[i].live && a >= v[i].base && a - v[i].base <= v[i].size &&
            len <= v[i].size - (a - v[i].base))
            return &v[i];
    return NULL;
}

static int in_dev_span(const void *p) {
    return dev_base && (const uint8_t *)p >= dev_base && (const uint8_t *)p < dev_base + DEV_SPAN;
}

/* Host address of n bytes at p: device pointers map to the backing store. */
static void *host_of(const void *p, size_t n, const char *what) {
    if (in_dev_span(p)) {
        if (!find(dev_blocks, ndev_blocks, p, n)) die(what, p, n);
        return dev_back + ((const uint8_t *)p - dev_base);
    }
    return (void *)(uintptr_t)p;
}

static void run_copy(const op *o) {
    memmove(host_of(o->dst, o->n, "copy to outside any allocation"),
            host_of(o->src, o->n, "copy from outside any allocation"), o->n);
}

/* Runs queued operations up to and including the record of `until` (NULL: all). */
static void drain(cudaStream_t s, struct mock_event *until) {
    while (s->head < s->n) {
        op *o = &s->ops[s->head++];
        if (o->kind == 0) {
            run_copy(o);
        } else if (o->kind == 2) {
            o->fn(o->dst);
        } else {
            o->ev->pending = 0;
            if (o->ev == until) break;
        }
    }
    if (s->head == s->n) s->head = s->n = 0;
}

static void push(cudaStream_t s, op o) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->ops = realloc(s->ops, s->cap * sizeof *s->ops);
        if (!s->ops) die("out of memory", NULL, 0);
    }
    s->ops[s->n++] = o;
}

cudaError_t cudaGetDeviceCount(int *count) {
    *count = devices();
    return *count > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaGetDevice(int *device) {
    if (devices() <= 0) return fail(cudaErrorNoDevice);
    *device = current_device;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= devices()) return fail(cudaErrorInvalidDevice);
    current_device = device;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t size) {
    pthread_mutex_lock(&mu);
    if (!dev_base) {
        dev_base =
            mmap(NULL, DEV_SPAN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        dev_back = mmap(NULL, DEV_SPAN, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (dev_base == MAP_FAILED || dev_back == MAP_FAILED) die("cannot reserve", NULL, 0);
    }
    size_t at = (dev_used + 255) & ~(size_t)255;
    if (ndev_blocks == MAX_BLOCKS || size > DEV_SPAN - at) {
        pthread_mutex_unlock(&mu);
        return fail(cudaErrorMemoryAllocation);
    }
    dev_blocks[ndev_blocks++] = (block){(uintptr_t)(dev_base + at), size, 1};
    memset(dev_back + at, 0xA5, size); /* not zero: unwritten bytes show */
    dev_used = at + size; /* the next block follows at once (256-aligned), as on a GPU */
    *p = dev_base + at;
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

static cudaError_t release(block *v, size_t n, void *p) {
    for (size_t i = 0; i < n; i++)
        if (v[i].live && v[i].base == (uintptr_t)p) {
            v[i].live = 0;
            return cudaSuccess;
        }
    return fail(cudaErrorInvalidValue);
}

cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    pthread_mutex_lock(&mu);
    cudaError_t e = release(dev_blocks, ndev_blocks, p);
    pthread_mutex_unlock(&mu);
    return e;
}

cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&mu);
    void *m = nhost_blocks < MAX_BLOCKS ? malloc(size ? size : 1) : NULL;
    if (m) host_blocks[nhost_blocks++] = (block){(uintptr_t)m, size, 1};
    pthread_mutex_unlock(&mu);
    if (!m) return fail(cudaErrorMemoryAllocation);
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p) {
    pthread_mutex_lock(&mu);
    cudaError_t e = release(host_blocks, nhost_blocks, p);
    pthread_mutex_unlock(&mu);
    if (e == cudaSuccess) free(p);
    return e;
}

cudaError_t cudaHostRegister(void *p, size_t size, unsigned int flags) {
    (void)flags;
    const char *no = getenv("CKPT_MOCK_CUDA_NO_REGISTER");
    if (no && atoi(no) > 0) return fail(cudaErrorNotSupported);
    if (!p || !size || (uintptr_t)p % 4096) die("cudaHostRegister of an unaligned range", p, size);
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < nhost_blocks; i++)
        if (host_blocks[i].live && (uintptr_t)p < host_blocks[i].base + host_blocks[i].size &&
            host_blocks[i].base < (uintptr_t)p + size)
            die("cudaHostRegister of a range overlapping pinned memory", p, size);
    if (nhost_blocks == MAX_BLOCKS) die("too many pinned blocks", p, size);
    host_blocks[nhost_blocks++] = (block){(uintptr_t)p, size, 1};
    registered++;
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t cudaHostUnregister(void *p) {
    pthread_mutex_lock(&mu);
    cudaError_t e = release(host_blocks, nhost_blocks, p);
    pthread_mutex_unlock(&mu);
    return e;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
    memset(a, 0, sizeof *a);
    pthread_mutex_lock(&mu);
    if (in_dev_span(p) && find(dev_blocks, ndev_blocks, p, 0)) {
        a->type = cudaMemoryTypeDevice;
        a->device = current_device;
        a->devicePointer = (void *)(uintptr_t)p;
    } else if (find(host_blocks, nhost_blocks, p, 0)) {
        a->type = cudaMemoryTypeHost;
        a->hostPointer = (void *)(uintptr_t)p;
    } else {
        a->type = cudaMemoryTypeUnregistered;
    }
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

/* A copy the real runtime refuses: cudaErrorInvalidValue, and why on stderr. */
static cudaError_t refuse(const char *call, const char *why, const void *p, size_t n) {
    fprintf(stderr, "mock_cudart: %s refused: %s (pointer %p, %zu bytes)\n", call, why, p, n);
    return fail(cudaErrorInvalidValue);
}

static int in_device_block(const void *p, size_t n) {
    return in_dev_span(p) && find(dev_blocks, ndev_blocks, p, n);
}

/* Checks a copy (lock held): cudaSuccess or the refusal.  `pinned`: a host side must be
 * pinned (asynchronous copies).  Both sides of every kind must lie inside one allocation:
 * a device range inside one live cudaMalloc block, a pinned one inside one pinned block. */
static cudaError_t check_copy(const char *call, void *dst, const void *src, size_t n,
                              enum cudaMemcpyKind kind, int pinned) {
    if (!dst || !src) return refuse(call, "NULL pointer", dst ? src : dst, n);
    int dev_dst = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    int dev_src = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToHost &&
        kind != cudaMemcpyDeviceToDevice)
        return refuse(call, "a copy kind this stand-in does not model", dst, n);
    if (dev_dst && !in_device_block(dst, n))
        return refuse(call, "destination not inside one device allocation", dst, n);
    if (dev_src && !in_device_block(src, n))
        return refuse(call, "source not inside one device allocation", src, n);
    if (!dev_dst && in_dev_span(dst))
        return refuse(call, "host destination is device memory", dst, n);
    if (!dev_src && in_dev_span(src)) return refuse(call, "host source is device memory", src, n);
    if (pinned && !dev_src && !find(host_blocks, nhost_blocks, src, n))
        return refuse(call, "host source not inside one pinned block", src, n);
    if (pinned && !dev_dst && !find(host_blocks, nhost_blocks, dst, n))
        return refuse(call, "host destination not inside one pinned block", dst, n);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    pthread_mutex_lock(&mu);
    cudaError_t e = check_copy("cudaMemcpy", dst, src, n, kind, 0);
    if (e == cudaSuccess) {
        op o = {0, dst, src, n, NULL, NULL};
        run_copy(&o);
    }
    pthread_mutex_unlock(&mu);
    return e;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t s) {
    pthread_mutex_lock(&mu);
    if (!s) die("cudaMemcpyAsync on the legacy stream", dst, n);
    cudaError_t e = check_copy("cudaMemcpyAsync", dst, src, n, kind, 1);
    if (e == cudaSuccess) {
        copies[kind]++;
        push(s, (op){0, dst, src, n, NULL, NULL});
    }
    pthread_mutex_unlock(&mu);
    return e;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    (void)flags;
    *s = calloc(1, sizeof **s);
    return *s ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    pthread_mutex_lock(&mu);
    drain(s, NULL);
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (!s) return fail(cudaErrorInvalidValue);
    pthread_mutex_lock(&mu);
    if (s->head < s->n) die("stream destroyed with work queued", NULL, s->n - s->head);
    pthread_mutex_unlock(&mu);
    free(s->ops);
    free(s);
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    (void)flags;
    *e = (cudaEvent_t)calloc(1, sizeof(struct mock_event));
    return *e ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    struct mock_event *m = (struct mock_event *)e;
    pthread_mutex_lock(&mu);
    if (!s) die("cudaEventRecord on the legacy stream", NULL, 0);
    m->pending = 1;
    m->stream = s;
    push(s, (op){1, NULL, NULL, 0, m, NULL});
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

static int run_ahead(void) {
    const char *e = getenv("CKPT_MOCK_CUDA_RUNAHEAD");
    return e && atoi(e) > 0;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    struct mock_event *m = (struct mock_event *)e;
    pthread_mutex_lock(&mu);
    if (m->pending) drain(m->stream, run_ahead() ? NULL : m);
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
    free((void *)e);
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error (mock)";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected (mock)";
    case cudaErrorMemoryAllocation: return "out of memory (mock)";
    case cudaErrorInvalidValue: return "invalid argument (mock)";
    default: return "error (mock)";
    }
}

void *mock_cuda_device_bytes(const void *p, size_t n) {
    pthread_mutex_lock(&mu);
    void *h = in_dev_span(p) && find(dev_blocks, ndev_blocks, p, n)
                  ? dev_back + ((const uint8_t *)p - dev_base)
                  : NULL;
    pthread_mutex_unlock(&mu);
    return h;
}

void mock_cuda_stream_defer(cudaStream_t s, void (*fn)(void *), void *arg) {
    pthread_mutex_lock(&mu);
    if (!s) die("work queued on the legacy stream", NULL, 0);
    push(s, (op){2, arg, NULL, 0, NULL, fn});
    pthread_mutex_unlock(&mu);
}
