/* init_ext.c — INIT flags libfuse 3.14 cannot ask for: FUSE_DIRECT_IO_ALLOW_MMAP (Linux 6.6+,
 * init flags bit 36), which lets a direct-I/O file be mapped shared (numpy.memmap,
 * safetensors.safe_open; without it such an mmap fails with ENODEV), and FUSE_PASSTHROUGH
 * (Linux 6.9+, bit 37, with the reply's max_stack_depth), which lets the kernel read `.raw/`
 * files from their sources itself (passthrough.c).  libfuse 3.14 has no capability bits for
 * them and sends flags2 as 0, so the daemon passes the session's traffic through its own I/O
 * functions (fuse_session_custom_io): the kernel's INIT request is noted on the way in and,
 * for what the kernel offered, the INIT reply carries the flags on the way out.  Every other
 * message goes through unchanged, splice included. */
#include "ckptfs.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define INIT_ALLOW_MMAP2 (1u << (36 - 32))  /* FUSE_DIRECT_IO_ALLOW_MMAP, in flags2 */
#define INIT_PASSTHROUGH2 (1u << (37 - 32)) /* FUSE_PASSTHROUGH, in flags2 */
#define INIT_WRITEBACK_CACHE (1u << 16)     /* (passthrough is refused beside it) */
/* Bytes of fuse_init_in up to its flags2 (protocol 7.36), and of fuse_init_out up to its
 * flags2 and its max_stack_depth (7.40). */
#define INIT_IN_FLAGS2_END 20u
#define INIT_OUT_FLAGS2_END 36u
#define INIT_OUT_DEPTH_END 40u
#define INIT_OUT_MAX 256u

static ssize_t ext_read(int fd, void *buf, size_t len, void *userdata) {
    ssize_t n = read(fd, buf, len);
    ckptfs *fs = userdata;
    struct fuse_in_header h;
    if (n < (ssize_t)sizeof h) return n;
    memcpy(&h, buf, sizeof h);
    if (h.opcode != FUSE_INIT) return n;
    uint32_t offered = 0; /* (kernels before 7.36 send no flags2) */
    if (n >= (ssize_t)(sizeof h + INIT_IN_FLAGS2_END)) {
        const uint8_t *in = (const uint8_t *)buf + sizeof h;
        uint32_t flags, flags2;
        memcpy(&flags, in + 12, 4);
        memcpy(&flags2, in + 16, 4);
        if (flags & FUSE_INIT_EXT)
            offered =
                flags2 & (INIT_ALLOW_MMAP2 | (fs->cfg.no_passthrough ? 0 : INIT_PASSTHROUGH2));
    }
    atomic_store(&fs->init_offered, offered);
    atomic_store(&fs->init_unique, offered ? h.unique : 0);
    if (fs->debug && !(offered & INIT_PASSTHROUGH2))
        fprintf(stderr, "ckptfs: no FUSE passthrough%s: .raw/ files are read through the daemon\n",
                fs->cfg.no_passthrough ? " (-o no_passthrough)" : " offered by the kernel");
    offered &= INIT_ALLOW_MMAP2;
    if (fs->debug && !offered)
        fprintf(stderr,
                "ckptfs: the kernel does not allow shared mmap of direct-I/O files: "
                "files use %s\n",
                fs->cfg.direct_io == 1 ? "direct I/O (private mmap only)" : "the page cache");
    return n;
}

static ssize_t ext_writev(int fd, struct iovec *iov, int count, void *userdata) {
    ckptfs *fs = userdata;
    uint64_t want = atomic_load_explicit(&fs->init_unique, memory_order_relaxed);
    struct fuse_out_header h;
    if (!want || count != 2 || iov[0].iov_len != sizeof h || iov[1].iov_len < INIT_OUT_FLAGS2_END ||
        iov[1].iov_len > INIT_OUT_MAX)
        return writev(fd, iov, count);
    memcpy(&h, iov[0].iov_base, sizeof h);
    if (h.unique != want || h.error != 0) return writev(fd, iov, count);
    /* the INIT reply: a copy with the flags set (libfuse's buffer stays as it was) */
    uint32_t offered = atomic_load(&fs->init_offered);
    uint8_t out[INIT_OUT_MAX];
    memcpy(out, iov[1].iov_base, iov[1].iov_len);
    uint32_t flags, flags2;
    memcpy(&flags, out + 12, 4);
    memcpy(&flags2, out + 32, 4);
    bool mmap = offered & INIT_ALLOW_MMAP2;
    bool pt = (offered & INIT_PASSTHROUGH2) && iov[1].iov_len >= INIT_OUT_DEPTH_END &&
              !(flags & INIT_WRITEBACK_CACHE);
    flags |= FUSE_INIT_EXT;
    if (mmap) flags2 |= INIT_ALLOW_MMAP2;
    if (pt) {
        uint32_t depth = fs->pt_depth;
        flags2 |= INIT_PASSTHROUGH2;
        memcpy(out + 36, &depth, 4);
    }
    memcpy(out + 12, &flags, 4);
    memcpy(out + 32, &flags2, 4);
    struct iovec copy[2] = {iov[0], {.iov_base = out, .iov_len = iov[1].iov_len}};
    /* Set before the reply goes: the kernel releases the requests waiting for INIT as it
     * takes the reply, and other threads may open files before writev returns here. */
    atomic_store(&fs->init_unique, 0);
    atomic_store(&fs->direct_io_mmap, mmap);
    atomic_store(&fs->passthrough, pt);
    if (fs->debug && mmap)
        fprintf(stderr, "ckptfs: shared mmap of direct-I/O files allowed: files use %s\n",
                fs->cfg.direct_io == 0 ? "the page cache" : "direct I/O");
    if (fs->debug && pt)
        fprintf(stderr,
                "ckptfs: FUSE passthrough asked for (max_stack_depth %u): the kernel "
                "reads .raw/ files itself\n",
                fs->pt_depth);
    ssize_t n = writev(fd, copy, 2);
    if (n < 0) { /* (the session ends anyway) */
        atomic_store(&fs->direct_io_mmap, false);
        atomic_store(&fs->passthrough, false);
    }
    return n;
}

static ssize_t ext_splice_receive(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
                                  unsigned int flags, void *userdata) {
    (void)userdata;
    return splice(fdin, offin, fdout, offout, len, flags);
}

static ssize_t ext_splice_send(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
                               unsigned int flags, void *userdata) {
    (void)userdata;
    return splice(fdin, offin, fdout, offout, len, flags);
}

int ckptfs_init_ext(struct fuse_session *se) {
    static const struct fuse_custom_io io = {.read = ext_read,
                                             .writev = ext_writev,
                                             .splice_receive = ext_splice_receive,
                                             .splice_send = ext_splice_send};
    return fuse_session_custom_io(se, &io, fuse_session_fd(se));
}
