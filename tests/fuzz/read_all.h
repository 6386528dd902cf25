/* read_all.h — what the fuzz targets do with a checkpoint that opened: every range checked,
 * every tensor's layout checked, tensors of at most 1 MiB read whole and every one through a
 * region of its first element, every value loaded and rendered as text. */
#ifndef CK_FUZZ_READ_ALL_H
#define CK_FUZZ_READ_ALL_H

#include "ckpt.h"

void fuzz_read_all(ckpt_reader *r);

#endif
