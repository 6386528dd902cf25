/* data_file.c — one rank's data file `__<rank>_0.distcp` (ckpt_save_file_*): validates each
 * piece, appends its torch.save archive (device pieces through the file's staging pipeline,
 * made at the first one) and records it in the rank's description. */
#include "save/archive.h"
#include "save/device.h"
#include "save/save_i.h"
#include "save/sink.h"
#include "util/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct ckpt_save_file {
    char *path;
    int fd;
    bool no_fsync;
    bool failed; /* a write failed: the file is inconsistent, later calls refuse */
    bool finished;
    save_sink sink;
    ckpt_save_desc *desc;
    uint64_t serial;
    uint64_t staging_bytes; /* of the device pipeline */
    save_dev *dev;          /* NULL until the first device piece */
    uint64_t bytes_device;
    int torch_target; /* ckpt_save_options.torch_target */
};

bool ckpt_save_has_cuda(void) { return save_dev_supported(); }

uint64_t save_file_bytes_device(const ckpt_save_file *f) { return f ? f->bytes_device : 0; }

ckpt_status save_memory_check(ckpt_save_memory m, ckpt_error *err) {
    if (m != CKPT_SAVE_MEM_AUTO && m != CKPT_SAVE_MEM_HOST && m != CKPT_SAVE_MEM_CUDA)
        return ck_fail(err, CKPT_E_INVAL, "invalid memory kind %d", (int)m);
    if (m == CKPT_SAVE_MEM_CUDA && !save_dev_supported())
        return ck_fail(err, CKPT_E_UNSUPPORTED,
                       "a CUDA device buffer, but this build has no CUDA support");
    return CKPT_OK;
}

ckpt_status save_options_check(const ckpt_save_options *opts, ckpt_error *err) {
    if (!opts || !opts->torch_target) return CKPT_OK;
    int t = opts->torch_target;
    if (t < 204)
        return ck_fail(err, CKPT_E_INVAL,
                       "target torch %d.%d: releases before 2.4 cannot read the .metadata the "
                       "saver writes (StorageMeta came in 2.4)",
                       t / 100, t % 100);
    if (opts->tensor_properties_strides && t < 215)
        return ck_fail(err, CKPT_E_INVAL,
                       "target torch %d.%d cannot read TensorProperties with strides "
                       "(tensor_properties_strides needs 2.15)",
                       t / 100, t % 100);
    return CKPT_OK;
}

ckpt_status save_dtype_check(int torch_target, ckpt_dtype dt, const char *key, ckpt_error *err) {
    int need = ckpt_dtype_torch_min(dt);
    if (!torch_target || need <= torch_target) return CKPT_OK;
    return ck_fail(err, CKPT_E_UNSUPPORTED,
                   "key '%s': torch %d.%d cannot load a %s tensor (needs torch %d.%d or later)",
                   key, torch_target / 100, torch_target % 100, ckpt_dtype_name(dt), need / 100,
                   need % 100);
}

void ckpt_save_desc_free(ckpt_save_desc *d) {
    if (!d) return;
    for (size_t i = 0; i < d->n; i++)
        save_item_release(&d->items[i]);
    free(d->items);
    free(d->file);
    free(d);
}

uint32_t ckpt_save_desc_rank(const ckpt_save_desc *d) { return d->rank; }

ckpt_status ckpt_save_file_open(const char *dir, uint32_t rank, const ckpt_save_options *opts,
                                ckpt_save_file **out, ckpt_error *err) {
    *out = NULL;
    if (!dir) return ck_fail(err, CKPT_E_INVAL, "no directory");
    CK_TRY(save_options_check(opts, err));
    ckpt_save_file *f = calloc(1, sizeof *f);
    if (!f) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    f->fd = -1;
    f->no_fsync = opts && opts->no_fsync;
    f->torch_target = opts ? opts->torch_target : 0;
    f->staging_bytes =
        opts && opts->device_staging_bytes ? opts->device_staging_bytes : SAVE_DEV_STAGING;
    f->desc = calloc(1, sizeof *f->desc);
    char name[32];
    snprintf(name, sizeof name, "__%u_0.distcp", rank);
    if (!f->desc || !(f->desc->file = strdup(name)) || asprintf(&f->path, "%s/%s", dir, name) < 0) {
        f->path = NULL;
        ckpt_save_file_free(f);
        return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    }
    f->desc->rank = rank;
    f->fd = open(f->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (f->fd < 0) {
        ckpt_status s = ck_fail(err, CKPT_E_IO, "%s: %s", f->path, strerror(errno));
        ckpt_save_file_free(f);
        return s;
    }
    ckpt_status s = save_sink_init(&f->sink, f->fd, f->path, err);
    if (s != CKPT_OK) {
        ckpt_save_file_free(f);
        return s;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    f->serial = ((uint64_t)ts.tv_sec * 1000000007ull) ^ ((uint64_t)ts.tv_nsec << 20) ^ rank;
    *out = f;
    return CKPT_OK;
}

void ckpt_save_file_free(ckpt_save_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    save_dev_free(f->dev);
    save_sink_release(&f->sink);
    ckpt_save_desc_free(f->desc);
    free(f->path);
    free(f);
}

static ckpt_status usable(ckpt_save_file *f, ckpt_error *err) {
    if (!f) return ck_fail(err, CKPT_E_INVAL, "no file");
    if (f->finished) return ck_fail(err, CKPT_E_INVAL, "%s: already finished", f->path);
    if (f->failed) return ck_fail(err, CKPT_E_INVAL, "%s: an earlier write failed", f->path);
    return CKPT_OK;
}

static bool mul_ok(uint64_t a, uint64_t b, uint64_t *r) { return !__builtin_mul_overflow(a, b, r); }

/* Takes back the item just pushed (its key and dims freed) and returns s. */
static ckpt_status drop_item(ckpt_save_file *f, save_item *it, ckpt_status s) {
    save_item_release(it);
    f->desc->n--;
    return s;
}

/* The end of writing item `it`: a failed write leaves the file unusable, and the error names
 * the key. */
static ckpt_status written(ckpt_save_file *f, const save_item *it, ckpt_status s, ckpt_error *err) {
    if (s != CKPT_OK) {
        f->failed = true;
        ck_error_suffix(err, " (key '%s')", it->key);
    }
    return s;
}

ckpt_status ckpt_save_file_add_tensor(ckpt_save_file *f, const ckpt_save_key *key,
                                      const ckpt_save_tensor *t, ckpt_error *err) {
    CK_TRY(usable(f, err));
    if (!t) return ck_fail(err, CKPT_E_INVAL, "no tensor");
    CK_TRY(save_memory_check(t->memory, err));
    size_t isz = ckpt_dtype_itemsize(t->dtype);
    if (!isz) return ck_fail(err, CKPT_E_INVAL, "invalid dtype %d", (int)t->dtype);
    if (t->ndim < 0 || t->ndim > CKPT_MAX_NDIM || (t->ndim && !t->global_shape))
        return ck_fail(err, CKPT_E_INVAL, "invalid ndim %d or missing shape", t->ndim);
    save_item *it = save_desc_push(f->desc);
    if (!it) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    ckpt_status s = save_key_resolve(key, it, err);
    if (s == CKPT_OK) s = save_dtype_check(f->torch_target, t->dtype, it->key, err);
    int nd = t->ndim;
    uint64_t numel = 1, nbytes = 0;
    if (s == CKPT_OK && nd) {
        it->dims = malloc(3 * (size_t)nd * sizeof *it->dims);
        if (!it->dims) s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
    }
    for (int d = 0; s == CKPT_OK && d < nd; d++) {
        int64_t g = t->global_shape[d], o = t->offsets ? t->offsets[d] : 0;
        int64_t z = t->sizes ? t->sizes[d] : g;
        if (g < 0 || o < 0 || z < 0 || o > g || z > g - o)
            s = ck_fail(err, CKPT_E_INVAL,
                        "key '%s': dim %d: box [%lld, +%lld) outside global size %lld", it->key, d,
                        (long long)o, (long long)z, (long long)g);
        else if (!mul_ok(numel, (uint64_t)z, &numel))
            s = ck_fail(err, CKPT_E_INVAL, "key '%s': size overflows", it->key);
        else {
            it->dims[d] = g;
            it->dims[nd + d] = o;
            it->dims[2 * nd + d] = z;
        }
    }
    if (s == CKPT_OK && !mul_ok(numel, isz, &nbytes))
        s = ck_fail(err, CKPT_E_INVAL, "key '%s': size overflows", it->key);
    if (s == CKPT_OK && (t->data_size != nbytes || (nbytes && !t->data)))
        s = ck_fail(err, CKPT_E_INVAL, "key '%s': %zu bytes of data for a box of %llu bytes",
                    it->key, t->data_size, (unsigned long long)nbytes);
    if (s != CKPT_OK) return drop_item(f, it, s);
    it->kind = SAVE_ITEM_TENSOR;
    it->dtype = t->dtype;
    it->ndim = nd;
    it->stored = t->replica_id == 0;
    if (!it->stored) return CKPT_OK;
    bool dev = nbytes && (t->memory == CKPT_SAVE_MEM_CUDA ||
                          (t->memory == CKPT_SAVE_MEM_AUTO && save_dev_is_device(t->data)));
    if (dev && !f->dev && (s = save_dev_create(f->staging_bytes, &f->dev, err)) != CKPT_OK) {
        /* nothing written: the file stays usable */
        ck_error_suffix(err, " (key '%s')", it->key);
        return drop_item(f, it, s);
    }
    it->offset = f->sink.pos;
    s = save_archive_tensor(&f->sink, t->dtype, nd, nd ? it->dims + 2 * nd : NULL, t->data, nbytes,
                            dev ? f->dev : NULL, f->serial++, &it->length, err);
    if (s == CKPT_OK && dev) f->bytes_device += nbytes;
    return written(f, it, s, err);
}

ckpt_status ckpt_save_file_add_value(ckpt_save_file *f, const ckpt_save_key *key,
                                     const ckpt_save_value *v, uint32_t replica_id,
                                     ckpt_error *err) {
    CK_TRY(usable(f, err));
    if (!v) return ck_fail(err, CKPT_E_INVAL, "no value");
    save_item *it = save_desc_push(f->desc);
    if (!it) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    ckpt_status s = save_key_resolve(key, it, err);
    if (s != CKPT_OK) return drop_item(f, it, s);
    it->kind = SAVE_ITEM_VALUE;
    it->stored = replica_id == 0;
    if (!it->stored) return CKPT_OK;
    it->offset = f->sink.pos;
    s = save_archive_value(&f->sink, v, f->serial++, &it->length, err);
    return written(f, it, s, err);
}

ckpt_status ckpt_save_file_add_value_archive(ckpt_save_file *f, const ckpt_save_key *key,
                                             const void *archive, size_t len, uint32_t replica_id,
                                             ckpt_error *err) {
    CK_TRY(usable(f, err));
    const unsigned char *a = archive;
    save_item *it = save_desc_push(f->desc);
    if (!it) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    ckpt_status s = save_key_resolve(key, it, err);
    if (s == CKPT_OK && (!a || len < 52 || memcmp(a, "PK\x03\x04", 4) != 0 ||
                         memcmp(a + len - 22, "PK\x05\x06", 4) != 0 || a[len - 2] || a[len - 1]))
        s = ck_fail(err, CKPT_E_FORMAT, "key '%s': %zu bytes that are not a zip archive", it->key,
                    len);
    if (s != CKPT_OK) return drop_item(f, it, s);
    it->kind = SAVE_ITEM_VALUE;
    it->stored = replica_id == 0;
    if (!it->stored) return CKPT_OK;
    it->offset = f->sink.pos;
    it->length = len;
    s = save_sink_write(&f->sink, a, len, err);
    return written(f, it, s, err);
}

ckpt_status ckpt_save_file_finish(ckpt_save_file *f, ckpt_save_desc **out, ckpt_error *err) {
    *out = NULL;
    CK_TRY(usable(f, err));
    ckpt_status s = save_sink_flush(&f->sink, err);
    if (s == CKPT_OK && !f->no_fsync && fsync(f->fd) != 0)
        s = ck_fail(err, CKPT_E_IO, "%s: fsync: %s", f->path, strerror(errno));
    int fd = f->fd;
    f->fd = -1;
    if (close(fd) != 0 && s == CKPT_OK)
        s = ck_fail(err, CKPT_E_IO, "%s: close: %s", f->path, strerror(errno));
    if (s != CKPT_OK) {
        f->failed = true;
        return s;
    }
    f->finished = true;
    *out = f->desc;
    f->desc = NULL;
    return CKPT_OK;
}
