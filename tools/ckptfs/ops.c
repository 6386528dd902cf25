/* ops.c — the low-level FUSE handlers: each translates one kernel request into a ckpt_tree
 * call and its reply.  Reads reply with fd-backed buffers so libfuse can splice shard bytes
 * straight into the kernel; everything that is not a contiguous run of a shard file is
 * assembled in a buffer from the bounded pool.  The mount is read-only. */
#include "ckptfs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define BLKSIZE (1u << 20)

static ckptfs *fs_of(fuse_req_t req) { return fuse_req_userdata(req); }

/* Entry cache lifetime: long for checkpoint contents (they never change under a mount), 1 s
 * for what can change (CKPT_TREE_CHANGES: the top level of a directory of checkpoints,
 * `latest`, `.layout`), so the kernel sees their new mtime and drops listings. */
static double timeout_of(const ckptfs *fs, const ckpt_tree_stat *st) {
    return (st->flags & CKPT_TREE_CHANGES) ? 1.0 : fs->cfg.timeout;
}

/* Attribute cache lifetime: at most -o attr_timeout, so that owners, modes and ACLs follow
 * the sources' (which the tree reads again at most once a second when asked). */
static double attr_timeout_of(const ckptfs *fs, const ckpt_tree_stat *st) {
    double t = timeout_of(fs, st);
    return fs->cfg.attr_timeout < t ? fs->cfg.attr_timeout : t;
}

/* For a negative entry: names in the top level of a directory of checkpoints may appear. */
static double negative_timeout(const ckptfs *fs, fuse_ino_t parent) {
    return fs->multi && parent == FUSE_ROOT_ID ? 1.0 : fs->cfg.timeout;
}

static void to_stat(const ckpt_tree_stat *t, struct stat *st) {
    memset(st, 0, sizeof *st);
    st->st_ino = t->ino;
    st->st_nlink = t->nlink;
    st->st_size = (off_t)t->size;
    st->st_blksize = BLKSIZE;
    st->st_blocks = (blkcnt_t)((t->size + 511) / 512);
    st->st_mtim = t->mtime;
    st->st_ctim = t->mtime;
    st->st_atim = t->mtime;
    /* owner, group and bits that tell the truth about who may read the sources (the kernel
     * enforces them: -o default_permissions) */
    st->st_uid = t->uid;
    st->st_gid = t->gid;
    switch (t->type) {
    case CKPT_NODE_DIR: st->st_mode = S_IFDIR | (t->mode & 0555); break;
    case CKPT_NODE_SYMLINK: st->st_mode = S_IFLNK | 0777; break;
    default: st->st_mode = S_IFREG | (t->mode & 0444); break;
    }
}

static void fail(fuse_req_t req, const ckpt_error *err, const char *what, ckpt_ino ino) {
    int e = ckptfs_errno(err->code);
    if (e != ENOENT && e != EINVAL)
        ckptfs_log(fs_of(req), "%s (inode %llu): %s", what, (unsigned long long)ino, err->message);
    fuse_reply_err(req, e);
}

static void op_init(void *userdata, struct fuse_conn_info *conn) {
    ckptfs *fs = userdata;
    if (conn->capable & FUSE_CAP_SPLICE_WRITE) conn->want |= FUSE_CAP_SPLICE_WRITE;
    if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
    if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
    if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA) conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
    /* the kernel keeps symlink targets: `latest` no longer costs a READLINK per path walked
     * through it.  Safe because its inode number changes with its target (ckpt_tree). */
    if (conn->capable & FUSE_CAP_CACHE_SYMLINKS) conn->want |= FUSE_CAP_CACHE_SYMLINKS;
    fs->no_opendir = (conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT) != 0;
    /* the kernel evaluates the ACL each object shows (system.posix_acl_access): users an ACL
     * of the sources grants get in, as they do on the sources (docs/mount.md).  Only where
     * some object needs one (or -o acl): each object's ACL costs a GETXATTR the first time
     * `ls -l` or a permission check asks for it (then the kernel keeps it with the
     * attributes); without, `ls -l` asks once per mount. */
    if ((conn->capable & FUSE_CAP_POSIX_ACL) &&
        (fs->cfg.acl || ckpt_tree_wants_posix_acl(fs->tree))) {
        conn->want |= FUSE_CAP_POSIX_ACL;
        fs->posix_acl = true;
        ckpt_tree_set_posix_acl(fs->tree, true);
    }
    conn->max_read = fs->cfg.max_read;
    conn->time_gran = 1;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
    ckptfs *fs = fs_of(req);
    ckpt_tree_stat st;
    ckpt_error err = {0};
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    if (ckpt_tree_lookup(fs->tree, parent, name, &st, &err) != CKPT_OK) {
        if (err.code == CKPT_E_NOTFOUND) { /* a cached negative entry */
            e.entry_timeout = negative_timeout(fs, parent);
            fuse_reply_entry(req, &e);
            return;
        }
        fail(req, &err, "lookup", parent);
        return;
    }
    e.ino = st.ino;
    e.generation = 1;
    to_stat(&st, &e.attr);
    e.entry_timeout = timeout_of(fs, &st);
    e.attr_timeout = attr_timeout_of(fs, &st);
    fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)fi;
    ckptfs *fs = fs_of(req);
    ckpt_tree_stat st;
    ckpt_error err = {0};
    if (ckpt_tree_getattr(fs->tree, ino, &st, &err) != CKPT_OK) {
        fail(req, &err, "getattr", ino);
        return;
    }
    struct stat s;
    to_stat(&st, &s);
    fuse_reply_attr(req, &s, attr_timeout_of(fs, &st));
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino) {
    char *target = NULL;
    ckpt_error err = {0};
    if (ckpt_tree_readlink(fs_of(req)->tree, ino, &target, &err) != CKPT_OK) {
        fail(req, &err, "readlink", ino);
        return;
    }
    fuse_reply_readlink(req, target);
    free(target);
}

/* ------------------------------------------------------------------ directories */

typedef struct dir_fill {
    fuse_req_t req;
    ckptfs *fs;
    char *buf;
    size_t size, used;
    bool plus;
} dir_fill;

static bool add_dirent(void *ctx, const char *name, const ckpt_tree_stat *st, uint64_t next) {
    dir_fill *d = ctx;
    size_t n;
    if (d->plus) {
        struct fuse_entry_param e;
        memset(&e, 0, sizeof e);
        e.ino = st->ino;
        e.generation = 1;
        to_stat(st, &e.attr);
        e.entry_timeout = timeout_of(d->fs, st);
        e.attr_timeout = attr_timeout_of(d->fs, st);
        n = fuse_add_direntry_plus(d->req, d->buf + d->used, d->size - d->used, name, &e,
                                   (off_t)next + 2);
    } else {
        struct stat s;
        to_stat(st, &s);
        n = fuse_add_direntry(d->req, d->buf + d->used, d->size - d->used, name, &s,
                              (off_t)next + 2);
    }
    if (n > d->size - d->used) return false;
    d->used += n;
    return true;
}

/* Offsets: 0 start, 1 after ".", 2 after "..", 2 + k after the tree's k-th entry. */
static void readdir_common(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus) {
    ckptfs *fs = fs_of(req);
    dir_fill d = {.req = req, .fs = fs, .size = size, .plus = plus};
    d.buf = malloc(size ? size : 1);
    if (!d.buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    ckpt_error err = {0};
    ckpt_tree_stat self;
    if (ckpt_tree_getattr(fs->tree, ino, &self, &err) != CKPT_OK) {
        free(d.buf);
        fail(req, &err, "readdir", ino);
        return;
    }
    if (self.type != CKPT_NODE_DIR) {
        free(d.buf);
        fuse_reply_err(req, ENOTDIR);
        return;
    }
    bool more = true;
    if (off == 0) {
        /* "." and ".." carry no lookup count in readdirplus; the kernel ignores their attrs */
        struct stat s;
        to_stat(&self, &s);
        size_t n = plus ? 0 : fuse_add_direntry(req, d.buf, size, ".", &s, 1);
        if (plus) {
            struct fuse_entry_param e;
            memset(&e, 0, sizeof e);
            e.attr = s;
            n = fuse_add_direntry_plus(req, d.buf, size, ".", &e, 1);
        }
        if (n <= size)
            d.used += n;
        else
            more = false;
        off = 1;
    }
    if (more && off == 1) {
        struct stat s;
        memset(&s, 0, sizeof s);
        s.st_mode = S_IFDIR;
        size_t n;
        if (plus) {
            struct fuse_entry_param e;
            memset(&e, 0, sizeof e);
            e.attr = s;
            n = fuse_add_direntry_plus(req, d.buf + d.used, size - d.used, "..", &e, 2);
        } else {
            n = fuse_add_direntry(req, d.buf + d.used, size - d.used, "..", &s, 2);
        }
        if (n <= size - d.used)
            d.used += n;
        else
            more = false;
        off = 2;
    }
    if (more &&
        ckpt_tree_readdir(fs->tree, ino, (uint64_t)off - 2, add_dirent, &d, &err) != CKPT_OK) {
        free(d.buf);
        fail(req, &err, "readdir", ino);
        return;
    }
    fuse_reply_buf(req, d.buf, d.used);
    free(d.buf);
}

/* Zero-message opendir: the kernel then opens directories itself, with FOPEN_KEEP_CACHE |
 * FOPEN_CACHE_DIR, so listings are kept in its cache (a second `ls -lR` never reaches the
 * daemon) and no OPENDIR/RELEASEDIR round trips are made.  The few directories whose
 * listing changes move their mtime (CKPT_TREE_CHANGES) and the kernel drops a cached listing
 * when a directory's mtime changes.  Kernels without it get the same flags from a reply. */
static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)ino;
    if (fs_of(req)->no_opendir) {
        fuse_reply_err(req, ENOSYS);
        return;
    }
    fi->cache_readdir = 1;
    fi->keep_cache = 1;
    fuse_reply_open(req, fi);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi) {
    (void)fi;
    readdir_common(req, ino, size, off, false);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi) {
    (void)fi;
    readdir_common(req, ino, size, off, true);
}

/* ------------------------------------------------------------------ files */

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    ckptfs *fs = fs_of(req);
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
        fuse_reply_err(req, EROFS);
        return;
    }
    ckpt_tree_stat st;
    ckpt_error err = {0};
    if (ckpt_tree_getattr(fs->tree, ino, &st, &err) != CKPT_OK) {
        fail(req, &err, "open", ino);
        return;
    }
    if (st.type == CKPT_NODE_DIR) {
        fuse_reply_err(req, EISDIR);
        return;
    }
    /* the caller must be allowed to read every source file (access.c) */
    int denied = ckptfs_may_open(fs, req, ino);
    if (denied) {
        fuse_reply_err(req, denied);
        return;
    }
    if (ckpt_tree_open_file(fs->tree, ino, &err) != CKPT_OK) {
        ckptfs_log(fs, "open of inode %llu: %s", (unsigned long long)ino, err.message);
        fuse_reply_err(req, ckptfs_errno(err.code) == ENOMEM ? ENOMEM : EIO);
        return;
    }
    if (!atomic_exchange(&fs->readahead_tuned, true)) ckptfs_tune_readahead(fs);
    if (ckptfs_passthrough_open(fs, req, ino)) return; /* `.raw/`: the kernel reads it */
    fi->direct_io = ckptfs_direct_io_for(fs, st.size);
    /* a file's bytes never change: pages cached (page-cache reads, or mmap in either mode)
     * stay valid across opens */
    fi->keep_cache = 1;
    fi->noflush = 1;
    /* -ENOENT: the open was interrupted, no RELEASE will come */
    if (fuse_reply_open(req, fi) == -ENOENT) ckpt_tree_release_file(fs->tree, ino);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi) {
    (void)fi;
    ckptfs *fs = fs_of(req);
    ckpt_tree_scratch *s = pool_get(&fs->pool);
    const ckpt_tree_seg *segs;
    size_t nsegs = 0;
    ckpt_error err = {0};
    if (ckpt_tree_read(fs->tree, ino, (uint64_t)off, size, fs->max_segs, fs->min_fd_run, s, &segs,
                       &nsegs, &err) != CKPT_OK) {
        pool_put(&fs->pool, s);
        ckptfs_log(fs, "read of inode %llu at offset %lld (%zu bytes): %s", (unsigned long long)ino,
                   (long long)off, size, err.message);
        fuse_reply_err(req, ckptfs_errno(err.code) == ENOMEM ? ENOMEM : EIO);
        return;
    }
    struct {
        struct fuse_bufvec v;
        struct fuse_buf more[7];
    } small;
    struct fuse_bufvec *bv = &small.v;
    if (nsegs > 8) {
        bv = malloc(sizeof *bv + (nsegs - 1) * sizeof(struct fuse_buf));
        if (!bv) {
            ckpt_tree_read_end(fs->tree, s);
            pool_put(&fs->pool, s);
            fuse_reply_err(req, ENOMEM);
            return;
        }
    }
    memset(bv, 0, sizeof *bv);
    bv->count = nsegs;
    for (size_t i = 0; i < nsegs; i++) {
        struct fuse_buf *b = &bv->buf[i];
        memset(b, 0, sizeof *b);
        b->size = segs[i].len;
        if (segs[i].fd >= 0) {
            b->flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
            b->fd = segs[i].fd;
            b->pos = (off_t)segs[i].pos;
        } else {
            b->mem = (void *)segs[i].mem;
        }
    }
    if (nsegs == 0) {
        fuse_reply_buf(req, NULL, 0);
    } else {
        int r = fuse_reply_data(req, bv, FUSE_BUF_SPLICE_MOVE);
        if (r < 0 && r != -ENOENT)
            ckptfs_log(fs, "reply to a read of inode %llu: %s", (unsigned long long)ino,
                       strerror(-r));
    }
    if (bv != &small.v) free(bv);
    ckpt_tree_read_end(fs->tree, s); /* the reply is sent: its fds may close */
    pool_put(&fs->pool, s);
}

/* Ends an open: a step removed from a directory of checkpoints is freed once its last open
 * file is released (ckpt_tree_open_file). */
static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    ckptfs_passthrough_release(fs_of(req), ino, fi);
    ckpt_tree_release_file(fs_of(req)->tree, ino);
    fuse_reply_err(req, 0);
}

/* ------------------------------------------------------------------ xattrs, statfs */

static void reply_xattr_value(fuse_req_t req, const char *v, size_t len, size_t size) {
    if (size == 0)
        fuse_reply_xattr(req, len);
    else if (size < len)
        fuse_reply_err(req, ERANGE);
    else
        fuse_reply_buf(req, v, len);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size) {
    /* Only the user namespace exists here.  EOPNOTSUPP (not ENODATA) for security labels and
     * ACLs lets `ls -l` (coreutils, gnulib) mark the whole mount as unsupported after one
     * call instead of asking twice per file: the kernel caches no xattrs for FUSE, so every
     * question is a round trip to the daemon. */
    bool acl = strcmp(name, "system.posix_acl_access") == 0 && fs_of(req)->posix_acl;
    if (strncmp(name, "user.", 5) != 0 && !acl) {
        /* where the kernel evaluates ACLs: no default ACL (nothing is created here) */
        bool dflt = strcmp(name, "system.posix_acl_default") == 0 && fs_of(req)->posix_acl;
        fuse_reply_err(req, dflt ? ENODATA : EOPNOTSUPP);
        return;
    }
    char *v = NULL;
    size_t len = 0;
    ckpt_error err = {0};
    if (ckpt_tree_getxattr(fs_of(req)->tree, ino, name, &v, &len, &err) != CKPT_OK) {
        fuse_reply_err(req, err.code == CKPT_E_NOTFOUND ? ENODATA : ckptfs_errno(err.code));
        return;
    }
    reply_xattr_value(req, v, len, size);
    free(v);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
    /* -o no_listxattr: ENOSYS makes the kernel answer every later listxattr on this mount
     * with EOPNOTSUPP itself.  Newer gnulib (coreutils' `ls -l`) checks ACLs by listing each
     * file's xattrs, one round trip per file since FUSE caches none; EOPNOTSUPP makes it stop
     * asking for the whole device. */
    if (fs_of(req)->cfg.no_listxattr) {
        fuse_reply_err(req, ENOSYS);
        return;
    }
    char *v = NULL;
    size_t len = 0;
    ckpt_error err = {0};
    if (ckpt_tree_listxattr(fs_of(req)->tree, ino, &v, &len, &err) != CKPT_OK) {
        fail(req, &err, "listxattr", ino);
        return;
    }
    if (!fs_of(req)->posix_acl) { /* the ACL's name, only where the kernel asks for it */
        size_t w = 0;
        for (size_t r = 0; r < len;) {
            size_t n = strlen(v + r) + 1;
            if (strcmp(v + r, "system.posix_acl_access") != 0) memmove(v + w, v + r, n), w += n;
            r += n;
        }
        len = w;
    }
    reply_xattr_value(req, v, len, size);
    free(v);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino) {
    (void)ino;
    ckpt_tree_totals t;
    ckpt_tree_get_totals(fs_of(req)->tree, &t);
    struct statvfs s;
    memset(&s, 0, sizeof s);
    s.f_bsize = BLKSIZE;
    s.f_frsize = BLKSIZE;
    s.f_blocks = (t.bytes + BLKSIZE - 1) / BLKSIZE;
    s.f_files = t.files;
    s.f_namemax = 255;
    s.f_flag = ST_RDONLY;
    fuse_reply_statfs(req, &s);
}

/* ------------------------------------------------------------------ writes: read-only */

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi) {
    (void)ino, (void)attr, (void)to_set, (void)fi;
    fuse_reply_err(req, EROFS);
}
static void op_mknod(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m, dev_t r) {
    (void)p, (void)n, (void)m, (void)r;
    fuse_reply_err(req, EROFS);
}
static void op_mkdir(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m) {
    (void)p, (void)n, (void)m;
    fuse_reply_err(req, EROFS);
}
static void op_unlink(fuse_req_t req, fuse_ino_t p, const char *n) {
    (void)p, (void)n;
    fuse_reply_err(req, EROFS);
}
static void op_create(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m,
                      struct fuse_file_info *fi) {
    (void)p, (void)n, (void)m, (void)fi;
    fuse_reply_err(req, EROFS);
}
static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *n, const char *v, size_t s,
                        int f) {
    (void)ino, (void)n, (void)v, (void)s, (void)f;
    fuse_reply_err(req, EROFS);
}
static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *n) {
    (void)ino, (void)n;
    fuse_reply_err(req, EROFS);
}

const struct fuse_lowlevel_ops ckptfs_ops = {
    .init = op_init,
    .lookup = op_lookup,
    .getattr = op_getattr,
    .readlink = op_readlink,
    .open = op_open,
    .read = op_read,
    .release = op_release,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .readdirplus = op_readdirplus,
    .getxattr = op_getxattr,
    .listxattr = op_listxattr,
    .statfs = op_statfs,
    .setattr = op_setattr,
    .mknod = op_mknod,
    .mkdir = op_mkdir,
    .unlink = op_unlink,
    .rmdir = op_unlink,
    .create = op_create,
    .setxattr = op_setxattr,
    .removexattr = op_removexattr,
};
