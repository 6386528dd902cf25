/* access.c — who may open what through the mount (docs/mount.md "Who can read what"): a file
 * opens for a caller only if the caller may read every source file it draws bytes from
 * (ckpt_tree_sources).
 *
 * Root daemon: the kernel decides, exactly (owner, group, mode, ACLs, every directory on the
 * way, symlink targets): the handling thread takes the caller's fs uid, fs gid and groups
 * (setfsuid/setfsgid and the raw setgroups system call are per thread on Linux, unlike
 * glibc's setgroups, which changes every thread), asks faccessat(R_OK, AT_EACCESS) of each
 * source path, and takes the daemon's credentials back; if that fails the daemon aborts
 * rather than go on serving with a caller's credentials.
 *
 * Other daemons: the caller with the daemon's uid may open everything (the daemon reads the
 * files as that user anyway); anyone else is decided from mode bits by ckpt_tree_may_read
 * (conservative: a file with a POSIX ACL is granted to its owner only). */
#include "ckptfs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_CALLER_GROUPS 256
#define GROUPS_SLOTS 64
#define GROUPS_TTL_NS 1000000000ll

/* A caller's supplementary groups as read at `at` (CLOCK_MONOTONIC ns); n < 0: empty slot. */
struct caller_groups {
    pid_t pid;
    uid_t uid;
    gid_t gid;
    int n;
    long long at;
    gid_t g[MAX_CALLER_GROUPS];
};

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* The caller's supplementary groups (the first MAX_CALLER_GROUPS of them), remembered for one
 * second per (pid, uid, gid): reading them (/proc/<pid>/status) is most of the cost of an
 * open check, and a process opening many files pays for it once a second.  (A process whose
 * groups change, which needs CAP_SETGID, or a new process reusing the pid within that second
 * with the same uid and gid, is judged with the groups read before.) */
static int caller_groups(ckptfs *fs, fuse_req_t req, const struct fuse_ctx *ctx, gid_t *out) {
    long long t = now_ns();
    struct caller_groups *slot = &fs->groups_cache[(unsigned)ctx->pid % GROUPS_SLOTS];
    pthread_mutex_lock(&fs->groups_lock);
    if (slot->n >= 0 && slot->pid == ctx->pid && slot->uid == ctx->uid && slot->gid == ctx->gid &&
        t - slot->at < GROUPS_TTL_NS) {
        int n = slot->n;
        memcpy(out, slot->g, (size_t)n * sizeof *out);
        pthread_mutex_unlock(&fs->groups_lock);
        return n;
    }
    pthread_mutex_unlock(&fs->groups_lock);
    int n = fuse_req_getgroups(req, MAX_CALLER_GROUPS, out);
    if (n < 0) return n;
    if (n > MAX_CALLER_GROUPS) n = MAX_CALLER_GROUPS;
    pthread_mutex_lock(&fs->groups_lock);
    slot->pid = ctx->pid;
    slot->uid = ctx->uid;
    slot->gid = ctx->gid;
    slot->n = n;
    slot->at = t;
    memcpy(slot->g, out, (size_t)n * sizeof *out);
    pthread_mutex_unlock(&fs->groups_lock);
    return n;
}

int ckptfs_access_init(ckptfs *fs) {
    pthread_mutex_init(&fs->groups_lock, NULL);
    fs->groups_cache = malloc(GROUPS_SLOTS * sizeof *fs->groups_cache);
    if (!fs->groups_cache) return -1;
    for (int i = 0; i < GROUPS_SLOTS; i++)
        fs->groups_cache[i].n = -1;
    fs->uid = geteuid();
    fs->gid = getegid();
    int n = getgroups(0, NULL);
    if (n < 0) n = 0;
    fs->groups = malloc(((size_t)n + 1) * sizeof *fs->groups);
    if (!fs->groups) return -1;
    n = getgroups(n, fs->groups);
    fs->ngroups = n < 0 ? 0 : n;
    return 0;
}

/* This thread's fs credentials and groups: the caller's, or (back) the daemon's. */
static int set_fs_creds(uid_t uid, gid_t gid, const gid_t *groups, int n) {
    if (syscall(SYS_setgroups, (size_t)n, groups) != 0) return -1;
    syscall(SYS_setfsgid, gid);
    syscall(SYS_setfsuid, uid);
    /* setfsuid/setfsgid report no error: read the values back (-1 changes nothing) */
    if ((uid_t)syscall(SYS_setfsuid, (uid_t)-1) != uid) return -1;
    if ((gid_t)syscall(SYS_setfsgid, (gid_t)-1) != gid) return -1;
    return 0;
}

/* The source paths of an object, gathered before the credentials are switched (so that
 * nothing is indexed or opened with a caller's credentials). */
typedef struct path_list {
    char **v;
    size_t n, cap;
    bool nomem;
} path_list;

static bool add_path(void *ctx, const char *path) {
    path_list *l = ctx;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v) return !(l->nomem = true);
        l->v = v;
        l->cap = cap;
    }
    if (!(l->v[l->n] = strdup(path))) return !(l->nomem = true);
    l->n++;
    return true;
}

static void free_paths(path_list *l) {
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
}

/* faccessat(R_OK, AT_EACCESS) by the kernel itself (faccessat2): glibc would emulate it with
 * stat and the effective uid where the system call is missing, which ignores the fs uid. */
static int may_read_as_current_fs_creds(const char *path) {
    long r = syscall(SYS_faccessat2, AT_FDCWD, path, R_OK, AT_EACCESS);
    if (r == 0) return 0;
    return errno == ENOENT || errno == ENOSYS ? EACCES : errno;
}

int ckptfs_may_open(ckptfs *fs, fuse_req_t req, fuse_ino_t ino) {
    const struct fuse_ctx *ctx = fuse_req_ctx(req);
    if (ctx->uid == fs->uid || ctx->uid == 0) return 0;
    gid_t groups[MAX_CALLER_GROUPS];
    int n = caller_groups(fs, req, ctx, groups);
    if (n < 0) return EACCES; /* cannot know the caller's groups: refuse */
    ckpt_error err = {0};
    if (fs->uid != 0) {
        uint32_t g32[MAX_CALLER_GROUPS];
        for (int i = 0; i < n; i++)
            g32[i] = groups[i];
        ckpt_tree_cred cred = {
            .uid = ctx->uid, .gid = ctx->gid, .groups = g32, .ngroups = (size_t)n};
        ckpt_status s = ckpt_tree_may_read(fs->tree, ino, &cred, &err);
        if (s == CKPT_OK) return 0;
        if (s == CKPT_E_ACCESS) {
            if (fs->debug)
                ckptfs_log(fs, "open of inode %llu: %s", (unsigned long long)ino, err.message);
            return EACCES;
        }
        return ckptfs_errno(s);
    }
    path_list l = {0};
    ckpt_status s = ckpt_tree_sources(fs->tree, ino, add_path, &l, &err);
    if (s != CKPT_OK || l.nomem) {
        free_paths(&l);
        return s != CKPT_OK ? ckptfs_errno(s) : ENOMEM;
    }
    if (set_fs_creds(ctx->uid, ctx->gid, groups, n) != 0) {
        /* a half-switched thread must not go on: back to the daemon's, or stop */
        if (set_fs_creds(fs->uid, fs->gid, fs->groups, fs->ngroups) != 0) abort();
        free_paths(&l);
        return EACCES;
    }
    int e = 0;
    size_t i = 0;
    for (; i < l.n && !e; i++)
        e = may_read_as_current_fs_creds(l.v[i]);
    if (set_fs_creds(fs->uid, fs->gid, fs->groups, fs->ngroups) != 0) {
        ckptfs_log(fs, "cannot restore the daemon's credentials after an access check: abort");
        abort();
    }
    if (e && fs->debug)
        ckptfs_log(fs, "open of inode %llu by uid %u: %s: %s", (unsigned long long)ino,
                   (unsigned)ctx->uid, l.v[i - 1], strerror(e));
    free_paths(&l);
    return e;
}
