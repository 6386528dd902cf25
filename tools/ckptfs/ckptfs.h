/* ckptfs.h — the FUSE daemon's shared state: configuration, the namespace (libckpt's
 * ckpt_tree) and the bounded pool of assembly buffers.  The one mutable context of the
 * program, passed to every handler as the session's userdata. */
#ifndef CKPTFS_H
#define CKPTFS_H

#define FUSE_USE_VERSION 312 /* fuse_loop_config objects and max_threads need the 3.12 API */
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "ckpt_tree.h"

/* A fixed number of assembly buffers; a read that finds none free waits for one, so the
 * memory used to assemble replies is bounded however large the checkpoint or busy the mount. */
typedef struct scratch_pool {
    pthread_mutex_t lock;
    pthread_cond_t freed;
    ckpt_tree_scratch *items;
    bool *busy;
    size_t n;
} scratch_pool;

int pool_init(scratch_pool *p, size_t n);
ckpt_tree_scratch *pool_get(scratch_pool *p);
void pool_put(scratch_pool *p, ckpt_tree_scratch *s);
void pool_release(scratch_pool *p);

typedef struct ckptfs_config {
    char *source; /* CHECKPOINT_DIR, made absolute */
    char *mountpoint;
    char *cache_size;      /* -o cache_size=BYTES[KMG] */
    char *value_cache;     /* -o value_cache=BYTES[KMG] */
    int direct_io;         /* -o direct_io (1) / -o page_cache (0); -1 (default): direct I/O
                            * when the kernel allows shared mmap of such files, else the page
                            * cache (see ckptfs_direct_io) */
    unsigned max_read;     /* -o max_read= (also passed to the kernel); 0: chosen at start */
    int no_pipe_probe;     /* -o no_pipe_probe: count on 1 MiB splice pipes at most */
    unsigned readahead_kb; /* -o readahead_kb= for the mount's bdi (page-cache reads, mmap) */
    double timeout;        /* -o timeout= entry cache seconds */
    double attr_timeout;   /* -o attr_timeout= attribute cache seconds (at most timeout): the
                            * shown owners and modes follow the sources within it */
    int verify;            /* -o verify: check items against the manifest on first read */
    int torch_zero_crc;    /* -o torch_zero_crc: .torch/ tensor records carry CRC-32 0 */
    int no_listxattr;      /* -o no_listxattr: LISTXATTR answers ENOSYS (getxattr still works) */
    int acl;               /* -o acl: ask for FUSE_CAP_POSIX_ACL even where no object needs an
                            * ACL at mount (a setfacl of a source later then shows) */
    int no_passthrough;    /* -o no_passthrough: .raw/ files are read through the daemon even
                            * where the kernel could read them itself (passthrough.c) */
    int show_help, show_version;
} ckptfs_config;

typedef struct ckptfs {
    ckptfs_config cfg;
    ckpt_tree *tree;
    bool multi;      /* a directory of checkpoints: the root changes */
    size_t max_segs; /* buffers per reply that libfuse can splice (fd and memory) */
    size_t min_fd_run;
    scratch_pool pool;
    bool use_syslog;
    bool debug;                    /* -d */
    bool no_opendir;               /* the kernel opens directories itself (set by INIT) */
    bool posix_acl;                /* the kernel evaluates the ACLs objects show (INIT) */
    atomic_bool readahead_tuned;   /* set by the first open (see readahead.c) */
    _Atomic uint64_t init_unique;  /* the kernel's INIT request, while its reply is due */
    atomic_bool direct_io_mmap;    /* INIT asked for shared mmap of direct-I/O files */
    _Atomic uint32_t init_offered; /* what the kernel's INIT offered that init_ext.c asks for */
    /* FUSE passthrough of `.raw/` files (passthrough.c): asked for in INIT and not refused */
    atomic_bool passthrough;
    unsigned pt_depth; /* the INIT reply's max_stack_depth: 2 where the source is on a stacked
                        * file system (overlayfs), else 1 */
    int dev_fd;        /* the session's /dev/fuse descriptor (backing-file ioctls) */
    pthread_mutex_t pt_lock;
    struct pt_inode **pt_table; /* per inode open in passthrough: its backing id and opens */
    /* the daemon's own credentials, read at start (access.c): a root daemon checks each open
     * with the caller's, switching its handling thread's fs credentials and back */
    uid_t uid;
    gid_t gid;
    gid_t *groups;
    int ngroups;
    /* callers' supplementary groups, remembered for a second per (pid, uid, gid): reading
     * them (/proc/<pid>/status) is most of the cost of an open check */
    pthread_mutex_t groups_lock;
    struct caller_groups *groups_cache;
} ckptfs;

extern const struct fuse_lowlevel_ops ckptfs_ops;

/* Whether files are opened with direct I/O (bypassing the page cache): as -o says, else
 * when INIT allowed shared mmap of direct-I/O files (init_ext.c), so that mmap keeps working
 * and first reads take the fast path. */
static inline bool ckptfs_direct_io(ckptfs *fs) {
    return fs->cfg.direct_io < 0 ? atomic_load(&fs->direct_io_mmap) : fs->cfg.direct_io != 0;
}
/* Whether a file of `size` bytes is opened with direct I/O.  By default a file that one read
 * request returns whole (size <= max_read) goes through the page cache even where direct I/O
 * is the mode: the kernel then knows where it ends, so `cat` costs OPEN + one READ (direct
 * I/O adds a READ only to learn EOF, and every re-read is a round trip), and the copy it
 * keeps is small.  -o direct_io and -o page_cache apply to every file. */
static inline bool ckptfs_direct_io_for(ckptfs *fs, uint64_t size) {
    if (fs->cfg.direct_io < 0 && size <= fs->cfg.max_read) return false;
    return ckptfs_direct_io(fs);
}

/* Logs to stderr, or to syslog once daemonized. */
void ckptfs_log(const ckptfs *fs, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Raises the mount's read-ahead to cfg.readahead_kb (page-cache reads and mmap faults, in
 * either mode); once, after INIT. */
void ckptfs_tune_readahead(ckptfs *fs);
/* Routes the session's I/O through init_ext.c, which asks the kernel to allow shared mmap
 * of direct-I/O files (FUSE_DIRECT_IO_ALLOW_MMAP) and FUSE passthrough (unless -o
 * no_passthrough) when it offers them; 0 or -errno.  Call
 * after fuse_session_mount, before the loop. */
int ckptfs_init_ext(struct fuse_session *se);
/* Serves the OPEN of ino by passthrough when the kernel and the file allow it (a `.raw/` file,
 * the caller already checked): true when the reply is sent, false to open it as usual. */
bool ckptfs_passthrough_open(ckptfs *fs, fuse_req_t req, fuse_ino_t ino);
/* Ends an open served by ckptfs_passthrough_open (any other fi is ignored). */
void ckptfs_passthrough_release(ckptfs *fs, fuse_ino_t ino, const struct fuse_file_info *fi);
void ckptfs_passthrough_free(ckptfs *fs);
/* Reads the daemon's credentials into fs (before the loop); 0 or -1 (out of memory). */
int ckptfs_access_init(ckptfs *fs);
/* Whether the caller of req may read every source file of ino (docs/mount.md "Who can read
 * what"): 0, or EACCES (logged with the file refused when -d) or another errno. */
int ckptfs_may_open(ckptfs *fs, fuse_req_t req, fuse_ino_t ino);

/* errno for a libckpt status. */
int ckptfs_errno(ckpt_status s);

#endif
