/* fsutil.c — the saver's file-system helpers: joined paths, directory fsync, removing a
 * staging tree. */
#include "save/save_i.h"

#include "util/error.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *save_path_join(const char *a, const char *b) {
    char *p;
    if (asprintf(&p, "%s/%s", a, b) < 0) return NULL;
    return p;
}

ckpt_status save_fsync_dir(const char *dir, ckpt_error *err) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ck_fail(err, CKPT_E_IO, "%s: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0) return ck_fail(err, CKPT_E_IO, "%s: fsync: %s", dir, strerror(e));
    return CKPT_OK;
}

ckpt_status save_remove_tree(const char *dir, ckpt_error *err) {
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return CKPT_OK;
        return ck_fail(err, CKPT_E_IO, "%s: %s", dir, strerror(errno));
    }
    ckpt_status s = CKPT_OK;
    struct dirent *de;
    while (s == CKPT_OK && (de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        char *p = save_path_join(dir, de->d_name);
        if (!p) {
            s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
            break;
        }
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            s = save_remove_tree(p, err);
        else if (unlink(p) != 0 && errno != ENOENT)
            s = ck_fail(err, CKPT_E_IO, "%s: unlink: %s", p, strerror(errno));
        free(p);
    }
    closedir(d);
    if (s == CKPT_OK && rmdir(dir) != 0 && errno != ENOENT)
        s = ck_fail(err, CKPT_E_IO, "%s: rmdir: %s", dir, strerror(errno));
    return s;
}
