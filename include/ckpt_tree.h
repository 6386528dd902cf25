/* ckpt_tree.h — the namespace the ckptfs mount shows, as a library: files and directories
 * over one checkpoint (or a directory of checkpoints), their attributes, extended attributes
 * and contents.  It knows nothing of FUSE: the daemon (tools/ckptfs) is a thin translation of
 * kernel requests into these calls, and tests can drive the same code without a mount.
 *
 * The naming contract (README "The tree"; docs/naming.md):
 *   <path>                        every state_dict entry at its escaped planner_data path;
 *                                 tensors hold raw C-order little-endian bytes, non-tensor
 *                                 entries their text rendering (as `ckpt cat --text`)
 *   .npy/<path>.npy               the tensor with a numpy header (numpy.load, mmap_mode="r")
 *   .safetensors/<top>.safetensors  the tensors under one top-level directory, names relative
 *                                 to it; `@all.safetensors` holds every tensor by its path
 *   .layout/dim<d>-of-<N>/<rank>/<path>  the local shard rank <rank> holds under Shard(d) over
 *                                 N ranks (torch.chunk semantics); objects are replicated
 *   .raw/<file>                   the checkpoint's own files (shards and metadata), read-only
 * With a directory of checkpoints, each complete one (with `.metadata`) is a directory of
 * the root and `latest` is a symlink to the newest.
 *
 * Inode numbers are stable for the life of a tree; 1 is the root.  Every call is safe from
 * several threads at once. */
#ifndef CKPT_TREE_H
#define CKPT_TREE_H

#include "ckpt.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ckpt_tree ckpt_tree;
typedef uint64_t ckpt_ino;

#define CKPT_TREE_ROOT ((ckpt_ino)1)

typedef enum ckpt_node_type {
    CKPT_NODE_DIR = 1,
    CKPT_NODE_FILE = 2,
    CKPT_NODE_SYMLINK = 3,
} ckpt_node_type;

/* ckpt_tree_stat.flags: the object can change while the tree is open (the top level of a
 * directory of checkpoints and its `latest`, `.layout` as specs come into use); its mtime
 * moves when it does.  Everything else never changes. */
#define CKPT_TREE_CHANGES 1u

typedef struct ckpt_tree_stat {
    ckpt_ino ino;
    ckpt_node_type type;
    uint64_t size;  /* bytes (files), target length (symlinks), entries (dirs) */
    uint32_t nlink; /* 2 + subdirectories for dirs, 1 otherwise */
    uint32_t flags; /* CKPT_TREE_CHANGES */
    struct timespec mtime;
    /* Who may read it, told truthfully (see "Who can read what" in docs/mount.md): the owner
     * and group of its source files when they agree, else of the checkpoint directory, and
     * permission bits (0-0777) that grant read (and, for directories, search) to a class of
     * users only if every source file (and every directory on the way to it, symlink targets
     * included) grants it to every user of that class, as the kernel decides (mode bits and
     * POSIX ACLs).  Users an ACL of the sources names get entries of the object's own ACL
     * (the xattr `system.posix_acl_access`, ckpt_tree_getxattr); then the group bits are its
     * mask.  Never a grant the sources would refuse.  Read from the files again at most once
     * a second when asked for. */
    uint32_t uid, gid, mode;
} ckpt_tree_stat;

typedef struct ckpt_tree_options {
    const ckpt_open_options *open; /* limits for every reader (NULL: defaults) */
    /* Called for problems found while building (path conflicts, a checkpoint of a directory
     * that fails to open...), which the tree survives; may be NULL. */
    void (*log)(void *ctx, const char *message);
    void *log_ctx;
    /* Check each stored item against the checkpoint's integrity manifest (ckpt_manifest.h)
     * the first time a read uses it; reads touching a mismatching item fail with
     * CKPT_E_CHECKSUM.  A checkpoint without a manifest then fails to open. */
    bool verify;
    /* Bytes of rendered non-tensor value texts kept for reuse, every checkpoint of the tree
     * together (0: 64 MiB).  Past it the least recently used are dropped and rendered again
     * when next read; their sizes stay known. */
    uint64_t value_cache;
    /* `.torch/` archives carry CRC-32 0 for their tensor records (ckpt_torchsave_options'
     * zero_crc) instead of the real ones, computed when a read first covers one. */
    bool torch_zero_crc;
} ckpt_tree_options;

/* Opens `dir`: a checkpoint (it has `.metadata` or `__0.metadata`), or a directory whose
 * subdirectories are checkpoints.  A single checkpoint is indexed now (errors are returned);
 * the checkpoints of a directory are indexed on first access.  CKPT_E_NOTFOUND when `dir`
 * holds no checkpoint at all. */
ckpt_status ckpt_tree_open(const char *dir, const ckpt_tree_options *opts, ckpt_tree **out,
                           ckpt_error *err);
void ckpt_tree_free(ckpt_tree *t);

/* The reader of a single-checkpoint tree (NULL for a directory of checkpoints). */
ckpt_reader *ckpt_tree_reader(ckpt_tree *t);

/* Attributes; CKPT_E_NOTFOUND for unknown names and inode numbers. */
ckpt_status ckpt_tree_lookup(ckpt_tree *t, ckpt_ino parent, const char *name, ckpt_tree_stat *out,
                             ckpt_error *err);
ckpt_status ckpt_tree_getattr(ckpt_tree *t, ckpt_ino ino, ckpt_tree_stat *out, ckpt_error *err);

/* Lists directory `dir` from position `cookie` (0 = start; "." and ".." are not included).
 * fn receives each entry and the cookie of the entry after it, and returns false to stop
 * (for instance when a reply buffer is full).  Hidden view directories are listed too. */
typedef bool (*ckpt_tree_dirent_fn)(void *ctx, const char *name, const ckpt_tree_stat *st,
                                    uint64_t next_cookie);
ckpt_status ckpt_tree_readdir(ckpt_tree *t, ckpt_ino dir, uint64_t cookie, ckpt_tree_dirent_fn fn,
                              void *ctx, ckpt_error *err);

/* Checks that a file can be read before it is opened: a non-tensor value that cannot be
 * decoded (or fails verification) is reported here, since its size shows as 0.  On success
 * the file counts as open until ckpt_tree_release_file: in a directory of checkpoints a step
 * that is removed (or saved again in place) stays readable through the files opened before,
 * as a removed file does on a local file system, and its index and shard file descriptors
 * are freed once the last of them is released. */
ckpt_status ckpt_tree_open_file(ckpt_tree *t, ckpt_ino ino, ckpt_error *err);
/* Ends one successful ckpt_tree_open_file of `ino` (the kernel's RELEASE). */
void ckpt_tree_release_file(ckpt_tree *t, ckpt_ino ino);

/* The file descriptor holding `ino`'s bytes at the same offsets, the whole file and nothing
 * else (a file under `.raw/`), and the size the tree shows for it; -1 for every other object,
 * whose bytes are assembled from pieces.  Owned by the tree (do not close), valid while `ino`
 * is open (ckpt_tree_open_file .. ckpt_tree_release_file).  For a front end that lets the
 * kernel read such a file itself (FUSE passthrough). */
int ckpt_tree_file_fd(ckpt_tree *t, ckpt_ino ino, uint64_t *size);

/* ---------------------------------------------------------------- who may read what */

/* Calls fn with the full path of every source file that `ino` draws bytes from, each once:
 * the checkpoint's metadata files (`.metadata`, `__<r>.metadata`, the HuggingFace index) for
 * everything whose structure comes from them, the shard files holding a tensor's chunks or a
 * value's bytes, every shard for a `.safetensors` view, the file itself under `.raw`; for a
 * directory, the checkpoint directory itself and its metadata files.  The paths are as the
 * checkpoint names them (symlinks not resolved), so that an access check of each path
 * (faccessat) decides as the kernel would for a direct open.  fn returns false to stop. */
typedef bool (*ckpt_tree_source_fn)(void *ctx, const char *path);
ckpt_status ckpt_tree_sources(ckpt_tree *t, ckpt_ino ino, ckpt_tree_source_fn fn, void *ctx,
                              ckpt_error *err);

/* A caller's credentials: user, primary group, supplementary groups. */
typedef struct ckpt_tree_cred {
    uint32_t uid, gid;
    const uint32_t *groups;
    size_t ngroups;
} ckpt_tree_cred;

/* Whether `cred` may read every source of `ino` (ckpt_tree_sources), decided as the kernel
 * decides from mode bits and POSIX ACLs, without switching credentials: search permission on
 * every directory of each source's real path (symlinks resolved), read permission on the
 * file (capabilities aside: uid 0 may read everything).  CKPT_OK or CKPT_E_ACCESS naming the
 * first file refused. */
ckpt_status ckpt_tree_may_read(ckpt_tree *t, ckpt_ino ino, const ckpt_tree_cred *cred,
                               ckpt_error *err);

/* POSIX ACLs.  Objects whose readers take named users or groups to say show an ACL
 * (`system.posix_acl_access`) once ckpt_tree_set_posix_acl(t, true) says the kernel
 * evaluates them (a FUSE daemon that got FUSE_CAP_POSIX_ACL); until then, and without it,
 * they show plain mode bits that grant no class holding a user the sources refuse (fewer
 * users, never more).  ckpt_tree_wants_posix_acl: whether any object needs one now (always
 * for a directory of checkpoints, whose steps come later). */
bool ckpt_tree_wants_posix_acl(ckpt_tree *t);
void ckpt_tree_set_posix_acl(ckpt_tree *t, bool on);

/* Whether `cred` may read the file at `path` by the rules of ckpt_tree_may_read. */
bool ckpt_path_may_read(const char *path, const ckpt_tree_cred *cred);

/* A symlink's target (malloc'ed). */
ckpt_status ckpt_tree_readlink(ckpt_tree *t, ckpt_ino ino, char **target, ckpt_error *err);

/* Extended attributes: `names` receives the NUL-separated list (malloc'ed, *len bytes, may be
 * empty); getxattr returns the value (malloc'ed, not NUL-counted in *len) or CKPT_E_NOTFOUND.
 * `system.posix_acl_access` (the kernel's binary form) is there for an object whose readers
 * take named users or groups to say (ckpt_tree_stat.mode). */
ckpt_status ckpt_tree_listxattr(ckpt_tree *t, ckpt_ino ino, char **names, size_t *len,
                                ckpt_error *err);
ckpt_status ckpt_tree_getxattr(ckpt_tree *t, ckpt_ino ino, const char *name, char **value,
                               size_t *len, ckpt_error *err);

/* ---------------------------------------------------------------- reading */

/* One part of a read reply, in order: `len` bytes either at `pos` of file descriptor `fd`
 * (owned by the tree; for zero-copy splicing), or at `mem` (fd == -1). */
typedef struct ckpt_tree_seg {
    int fd;
    uint64_t pos;
    size_t len;
    const void *mem;
} ckpt_tree_seg;

/* Per-call working memory, reused across calls by one thread at a time (the FUSE front end
 * keeps a bounded pool of them).  Zero-initialise; release with ckpt_tree_scratch_release. */
typedef struct ckpt_tree_scratch {
    uint8_t *buf; /* assembly buffer: memory segments point here */
    size_t cap;
    uint8_t *slab; /* staging for finely strided chunks */
    size_t slab_cap;
    ckpt_tree_seg *segs;
    size_t segs_cap;
    struct ckpt_tree_piece *pieces; /* private */
    size_t pieces_cap;
    void *held; /* private: the checkpoint the last read's fd segments belong to */
} ckpt_tree_scratch;
/* Frees the scratch's memory; call ckpt_tree_read_end first if a read used it. */
void ckpt_tree_scratch_release(ckpt_tree_scratch *s);

/* Reads [off, off+len) of file `ino` (clamped at its size).  Pieces that lie contiguously in
 * a shard file, are at least `min_fd_run` bytes long and need no byte swapping come back as fd
 * segments; everything else is assembled in s->buf and comes back as memory segments between
 * them.  The reply has at most `max_segs` segments in all (fd and memory: libfuse sizes its
 * splice pipe by the number of buffers); one that would need more is gathered into a single
 * memory segment instead.  Pass 0 to always get one memory segment.  *segs points into `s`;
 * *nsegs may be 0 at end of file. */
ckpt_status ckpt_tree_read(ckpt_tree *t, ckpt_ino ino, uint64_t off, size_t len, size_t max_segs,
                           size_t min_fd_run, ckpt_tree_scratch *s, const ckpt_tree_seg **segs,
                           size_t *nsegs, ckpt_error *err);
/* Says that the segments of the last ckpt_tree_read with `s` are no longer used (the reply is
 * sent): their file descriptors may be closed from now on, when their checkpoint is gone
 * from a directory of checkpoints.  Until then they stay open.  Harmless when nothing is
 * held; a new ckpt_tree_read with `s` ends the previous one itself. */
void ckpt_tree_read_end(ckpt_tree *t, ckpt_tree_scratch *s);

/* Totals for statfs. */
typedef struct ckpt_tree_totals {
    uint64_t bytes; /* sum of tensor bytes of the open checkpoints */
    uint64_t files; /* entries of the open checkpoints */
} ckpt_tree_totals;
void ckpt_tree_get_totals(ckpt_tree *t, ckpt_tree_totals *out);

#ifdef __cplusplus
}
#endif
#endif /* CKPT_TREE_H */
