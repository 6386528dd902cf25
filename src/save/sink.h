/* sink.h — sequential, buffered writing into one file descriptor with the position tracked
 * (the per-rank data file).  Small pieces are gathered in a buffer; large ones go straight
 * from the caller's memory to the file.  Errors name the file and the offset. */
#ifndef CK_SAVE_SINK_H
#define CK_SAVE_SINK_H

#include "ckpt.h"

#include <stddef.h>
#include <stdint.h>

typedef struct save_sink {
    int fd;
    const char *path; /* for messages; owned by the caller */
    uint64_t pos;     /* bytes accepted so far (written + buffered) */
    unsigned char *buf;
    size_t len, cap;
} save_sink;

ckpt_status save_sink_init(save_sink *s, int fd, const char *path, ckpt_error *err);
ckpt_status save_sink_write(save_sink *s, const void *data, size_t len, ckpt_error *err);
ckpt_status save_sink_flush(save_sink *s, ckpt_error *err);
/* Frees the buffer (does not close the fd). */
void save_sink_release(save_sink *s);

#endif
