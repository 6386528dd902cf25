/* passthrough.c — FUSE passthrough for the files under `.raw/` (Linux 6.9+, protocol 7.40):
 * the kernel reads and maps such a file from its backing file itself, so no READ reaches the
 * daemon and the bytes move at the source file's own speed.  libfuse has an API for it from
 * 3.17; with 3.14 (Debian 12) the daemon does what that API does: init_ext.c asks for
 * FUSE_PASSTHROUGH in the INIT reply, a backing file is registered with the
 * FUSE_DEV_IOC_BACKING_OPEN ioctl on /dev/fuse, and the OPEN reply, sent here, carries
 * FOPEN_PASSTHROUGH and the backing id.
 *
 * Only a file whose bytes are one source file's, all of it at the same offsets, can be read
 * so (ckpt_tree_file_fd: `.raw/` files); entry files and the views are stitched from pieces.
 * The caller's right to read is checked at OPEN as for every file (access.c); the kernel then
 * reads with the daemon's credentials, as the daemon's own preads did.
 *
 * The kernel wants every open of an inode in passthrough mode to name the same backing file,
 * so each inode has one backing id, shared by its opens and closed with the last RELEASE; an
 * inode whose registration failed stays on daemon reads for the mount's lifetime.
 * Registering needs CAP_SYS_ADMIN: a daemon of an ordinary user gets EPERM once and then
 * serves every file itself. */
#include "ckptfs.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

/* The protocol's names (linux/fuse.h of 6.9+; Debian 12's headers are older). */
#define PT_FOPEN_NOFLUSH (1u << 5)
#define PT_FOPEN_PASSTHROUGH (1u << 7)
struct pt_backing_map {
    int32_t fd;
    uint32_t flags;
    uint64_t padding;
};
#define PT_IOC_MAGIC 229
#define PT_IOC_BACKING_OPEN _IOW(PT_IOC_MAGIC, 1, struct pt_backing_map)
#define PT_IOC_BACKING_CLOSE _IOW(PT_IOC_MAGIC, 2, uint32_t)
struct pt_open_out { /* fuse_open_out of 7.40: the padding became backing_id */
    uint64_t fh;
    uint32_t open_flags;
    int32_t backing_id;
};
/* fi->fh of an open served by passthrough (others keep 0), so RELEASE knows it */
#define PT_FH 1u

#define PT_BUCKETS 1024u

struct pt_inode {
    fuse_ino_t ino;
    int32_t backing_id; /* -1: refused, read through the daemon */
    uint32_t opens;
    struct pt_inode *next;
};

static struct pt_inode **bucket(ckptfs *fs, fuse_ino_t ino) {
    return &fs->pt_table[(ino * 0x9E3779B97F4A7C15ull) >> 54 & (PT_BUCKETS - 1)];
}

static struct pt_inode *find(ckptfs *fs, fuse_ino_t ino) {
    for (struct pt_inode *p = *bucket(fs, ino); p; p = p->next)
        if (p->ino == ino) return p;
    return NULL;
}

static void unlink_inode(ckptfs *fs, struct pt_inode *p) {
    for (struct pt_inode **q = bucket(fs, p->ino); *q; q = &(*q)->next)
        if (*q == p) {
            *q = p->next;
            free(p);
            return;
        }
}

/* Registers the backing file of ino (or takes the id its other opens share): the backing id,
 * or -1 when the file is read through the daemon. */
static int32_t acquire(ckptfs *fs, fuse_ino_t ino, int fd) {
    pthread_mutex_lock(&fs->pt_lock);
    int32_t id = -1;
    struct pt_inode *p = fs->pt_table ? find(fs, ino) : NULL;
    if (p) {
        if (p->backing_id >= 0) p->opens++;
        id = p->backing_id;
        goto out;
    }
    if (!fs->pt_table && !(fs->pt_table = calloc(PT_BUCKETS, sizeof *fs->pt_table))) goto out;
    if (!(p = calloc(1, sizeof *p))) goto out;
    struct pt_backing_map map = {.fd = fd};
    int r = ioctl(fs->dev_fd, PT_IOC_BACKING_OPEN, &map);
    if (r < 0 && errno == EPERM) { /* not allowed to this daemon: for every file */
        int e = errno;
        free(p);
        atomic_store(&fs->passthrough, false);
        ckptfs_log(fs, "passthrough not allowed (%s): .raw/ files are read through the daemon",
                   strerror(e));
        goto out;
    }
    if (r < 0 && fs->debug)
        ckptfs_log(fs, "passthrough of inode %llu refused (%s): read through the daemon",
                   (unsigned long long)ino, strerror(errno));
    p->ino = ino;
    p->backing_id = r < 0 ? -1 : r;
    p->opens = r < 0 ? 0 : 1;
    p->next = *bucket(fs, ino);
    *bucket(fs, ino) = p;
    id = p->backing_id;
out:
    pthread_mutex_unlock(&fs->pt_lock);
    return id;
}

bool ckptfs_passthrough_open(ckptfs *fs, fuse_req_t req, fuse_ino_t ino) {
    if (!atomic_load(&fs->passthrough)) return false;
    uint64_t size = 0;
    int fd = ckpt_tree_file_fd(fs->tree, ino, &size);
    struct stat st;
    /* (a file whose size moved since indexing would show other bytes than its stat) */
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size)
        return false;
    int32_t id = acquire(fs, ino, fd);
    if (id < 0) return false;
    struct pt_open_out out = {
        .fh = PT_FH, .open_flags = PT_FOPEN_PASSTHROUGH | PT_FOPEN_NOFLUSH, .backing_id = id};
    /* -ENOENT: the open was interrupted, no RELEASE will come */
    if (fuse_reply_buf(req, (const char *)&out, sizeof out) == -ENOENT) {
        struct fuse_file_info fi = {.fh = PT_FH};
        ckptfs_passthrough_release(fs, ino, &fi);
        ckpt_tree_release_file(fs->tree, ino);
    }
    return true;
}

void ckptfs_passthrough_release(ckptfs *fs, fuse_ino_t ino, const struct fuse_file_info *fi) {
    if (fi->fh != PT_FH) return;
    pthread_mutex_lock(&fs->pt_lock);
    struct pt_inode *p = fs->pt_table ? find(fs, ino) : NULL;
    if (p && p->backing_id >= 0 && p->opens && --p->opens == 0) {
        uint32_t id = (uint32_t)p->backing_id;
        if (ioctl(fs->dev_fd, PT_IOC_BACKING_CLOSE, &id) < 0 && fs->debug)
            ckptfs_log(fs, "closing backing id %u of inode %llu: %s", id, (unsigned long long)ino,
                       strerror(errno));
        unlink_inode(fs, p);
    }
    pthread_mutex_unlock(&fs->pt_lock);
}

void ckptfs_passthrough_free(ckptfs *fs) {
    if (!fs->pt_table) return;
    for (size_t i = 0; i < PT_BUCKETS; i++)
        for (struct pt_inode *p = fs->pt_table[i], *next; p; p = next) {
            next = p->next;
            free(p);
        }
    free(fs->pt_table);
    fs->pt_table = NULL;
}
