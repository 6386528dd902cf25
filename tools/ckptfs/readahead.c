/* readahead.c — page-cache tuning: the read-ahead window of the mount's bdi (page-cache
 * reads, and page faults of mmap in either mode). */
#include "ckptfs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Raises the read-ahead of the mount's backing device info so page-cache reads arrive in
 * 1 MiB requests instead of 128 KiB.  The kernel lowers it to the INIT reply's max_readahead
 * when it receives that reply, so this runs on the first open, after INIT; the device is found
 * through /proc/self/mountinfo (a stat of the mount point would wait on this very daemon). */
/* mountinfo writes space, tab, newline and backslash in paths as \ooo octal escapes. */
static void unescape(char *s) {
    char *w = s;
    for (char *r = s; *r; r++) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
            r[3] >= '0' && r[3] <= '7') {
            *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
            r += 3;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
}

void ckptfs_tune_readahead(ckptfs *fs) {
    if (fs->cfg.readahead_kb == 0) return;
    FILE *f = fopen("/proc/self/mountinfo", "r");
    if (!f) return;
    char line[8192], dev[64] = "";
    while (fgets(line, sizeof line, f)) {
        unsigned id, parent;
        char majmin[64], root[4096], mnt[4096];
        if (sscanf(line, "%u %u %63s %4095s %4095s", &id, &parent, majmin, root, mnt) != 5)
            continue;
        unescape(mnt);
        if (strcmp(mnt, fs->cfg.mountpoint) == 0) snprintf(dev, sizeof dev, "%s", majmin);
    }
    fclose(f);
    if (!dev[0]) return;
    char path[128];
    snprintf(path, sizeof path, "/sys/class/bdi/%s/read_ahead_kb", dev);
    FILE *ra = fopen(path, "w");
    if (!ra || fprintf(ra, "%u\n", fs->cfg.readahead_kb) < 0 || fclose(ra) != 0) {
        if (fs->cfg.readahead_kb != 1024 || errno != EACCES)
            ckptfs_log(fs, "cannot set %s: %s (reads use the kernel default read-ahead)", path,
                       strerror(errno));
    }
}
