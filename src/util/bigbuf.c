/* bigbuf.c — large working buffers on transparent huge pages (bigbuf.h). */
#include "util/bigbuf.h"

#include <stdlib.h>
#include <sys/mman.h>

#define CK_HUGE_PAGE ((size_t)2 << 20)

void *ck_big_alloc(size_t n) {
    if (n < CK_HUGE_PAGE) return malloc(n ? n : 1);
    void *p = NULL;
    if (posix_memalign(&p, CK_HUGE_PAGE, n) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    /* (advice only: where THP is off or "never" the pages stay 4 KiB) */
    (void)madvise(p, n & ~(CK_HUGE_PAGE - 1), MADV_HUGEPAGE);
#endif
    return p;
}
