/* bigbuf.h — large working buffers backed by transparent huge pages where the kernel offers
 * them (THP "madvise" mode, the default of many distributions): a 16 MiB exchange buffer is
 * then 8 page faults, not 4096, and its first touch costs a fraction.  Free with free(). */
#ifndef CK_UTIL_BIGBUF_H
#define CK_UTIL_BIGBUF_H

#include <stddef.h>

/* n bytes (uninitialised), 2 MiB-aligned and advised MADV_HUGEPAGE when n >= 2 MiB, else a
 * plain malloc; NULL when out of memory.  Release with free(). */
void *ck_big_alloc(size_t n);

#endif
