/* log.c — the daemon's messages (stderr, or syslog once daemonized) and the errno a library
 * status becomes. */
#include "ckptfs.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <syslog.h>

void ckptfs_log(const ckptfs *fs, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (fs && fs->use_syslog) {
        vsyslog(LOG_ERR, fmt, ap);
    } else {
        fputs("ckptfs: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
    }
    va_end(ap);
}

int ckptfs_errno(ckpt_status s) {
    switch (s) {
    case CKPT_OK: return 0;
    case CKPT_E_NOTFOUND: return ENOENT;
    case CKPT_E_NOMEM: return ENOMEM;
    case CKPT_E_INVAL: return EINVAL;
    default: return EIO;
    }
}
