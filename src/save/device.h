/* device.h — CUDA device sources of the saver: telling device pointers from host ones, and
 * the staging pipeline that brings device bytes to the host block by block through two
 * pinned halves (device.c with the cuda feature; nodevice.c without: no pointer is a device
 * pointer and a pipeline cannot be made). */
#ifndef CK_SAVE_DEVICE_H
#define CK_SAVE_DEVICE_H

#include "ckpt.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Default of ckpt_save_options.device_staging_bytes (both halves), and its minimum. */
#define SAVE_DEV_STAGING ((uint64_t)16 << 20)
#define SAVE_DEV_STAGING_MIN ((uint64_t)512)

typedef struct save_dev save_dev;

bool save_dev_supported(void);
/* true when the CUDA runtime says `p` is device memory (never in builds without CUDA). */
bool save_dev_is_device(const void *p);
/* A pipeline with `staging_bytes` of pinned memory in two halves and its own stream. */
ckpt_status save_dev_create(uint64_t staging_bytes, save_dev **out, ckpt_error *err);
void save_dev_free(save_dev *d);

/* Receives the next `n` bytes of the source, in order, in pinned host memory that stays valid
 * until it returns. */
typedef ckpt_status (*save_dev_emit)(void *ctx, const void *block, size_t n, ckpt_error *err);
/* Copies `n` bytes at device address `src` to the host in blocks of one half, the copy of
 * the next block running while `emit` consumes the current one; every copy is complete when
 * it returns (also on failure). */
ckpt_status save_dev_stream(save_dev *d, const void *src, uint64_t n, save_dev_emit emit, void *ctx,
                            ckpt_error *err);

#endif
