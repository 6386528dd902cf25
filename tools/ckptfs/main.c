/* main.c — `ckptfs [options] CHECKPOINT_DIR MOUNTPOINT`: parses options, refuses a directory
 * that is not a complete checkpoint (saying why), mounts, daemonizes unless -f, tunes the
 * mount's read-ahead, runs the (multi-threaded) FUSE loop and cleans up on unmount or
 * SIGTERM/SIGINT/SIGHUP. */
#include "ckptfs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <syslog.h>
#include <unistd.h>

#define MAX_READ_BIG (1u << 20) /* one READ per 1 MiB read(2): needs 2 MiB splice pipes */
#define MAX_READ_SMALL 786432u  /* 768 KiB: fits a 1 MiB pipe with room for 61 segments */
#define BIG_PIPE (2ul << 20)    /* the pipe libfuse asks for a 1 MiB reply (rounded up) */
#define DEFAULT_CACHE_SIZE (64ull << 20)
#define STAGING_PER_BUFFER (8ull << 20)

static void usage(const char *prog) {
    printf("usage: %s [options] CHECKPOINT_DIR MOUNTPOINT\n\n"
           "Mounts a PyTorch Distributed Checkpoint read-only: every state_dict entry is a file\n"
           "at its path (tensors: raw C-order little-endian bytes; other values: text), with\n"
           "the views .npy/, .safetensors/, .torch/ (torch.load-able files),\n"
           ".layout/<spec>/<rank>/ and .raw/.\n"
           "CHECKPOINT_DIR may also be a directory of checkpoints (one subdirectory each, plus\n"
           "`latest`).  See ckptfs(1).\n\n"
           "ckptfs options:\n"
           "    -o direct_io           bypass the kernel page cache: the fastest first read\n"
           "                           (default when the kernel allows shared mmap of\n"
           "                           direct-I/O files, Linux 6.6+)\n"
           "    -o page_cache          keep file data in the page cache: faster re-reads,\n"
           "                           a second copy of what was read in memory (default\n"
           "                           on older kernels, where it is what keeps mmap working)\n"
           "    -o cache_size=BYTES    memory for assembling strided replies (default 64M;\n"
           "                           suffixes K, M, G)\n"
           "    -o value_cache=BYTES   rendered texts of non-tensor values kept for reuse\n"
           "                           (default 64M; the least recently used are dropped\n"
           "                           past it and rendered again when read)\n"
           "    -o max_read=BYTES      largest read request (default 1048576 when this\n"
           "                           process may make 2 MiB pipes, else 786432)\n"
           "    -o no_pipe_probe       do not count on splice pipes over 1 MiB (max_read\n"
           "                           then defaults to 786432)\n"
           "    -o readahead_kb=N      read-ahead of the mount for page-cache reads and mmap\n"
           "                           faults (default 1024; 0 leaves the kernel default)\n"
           "    -o timeout=SECONDS     entry cache time (default 86400)\n"
           "    -o attr_timeout=SECONDS  attribute cache time (default 10, at most timeout):\n"
           "                           owners and modes follow the sources within it\n"
           "    -o verify              check each stored item against the checkpoint's\n"
           "                           manifest (ckpt seal) the first time it is read;\n"
           "                           mismatches read as EIO\n"
           "    -o torch_zero_crc      .torch/ archives carry CRC-32 0 for tensor records\n"
           "                           (torch never checks it) instead of computing it\n"
           "                           when first read: opening one then reads no tensor\n"
           "                           bytes (torch.load reads the central directory)\n"
           "    -o no_listxattr        listxattr is not supported (getxattr of the\n"
           "                           user.ckpt.* names still is): `ls -l` of coreutils\n"
           "                           whose ACL check lists every file's xattrs then makes\n"
           "                           no round trip to the daemon per file\n"
           "    -o acl                 let the kernel evaluate POSIX ACLs even where no object\n"
           "                           needs one at mount (always for a directory of\n"
           "                           checkpoints)\n"
           "    -o no_passthrough      read .raw/ files through the daemon even where the\n"
           "                           kernel could read them from their sources itself\n"
           "                           (FUSE passthrough: Linux 6.9+, a root daemon)\n"
           "    -V, --version          print the version\n\n",
           prog);
    fuse_cmdline_help();
    fuse_lowlevel_help();
}

#define CKPTFS_OPT(t, p, v)                                                                        \
    { t, offsetof(ckptfs_config, p), v }
static const struct fuse_opt option_spec[] = {CKPTFS_OPT("direct_io", direct_io, 1),
                                              CKPTFS_OPT("page_cache", direct_io, 0),
                                              CKPTFS_OPT("cache_size=%s", cache_size, 0),
                                              CKPTFS_OPT("value_cache=%s", value_cache, 0),
                                              CKPTFS_OPT("readahead_kb=%u", readahead_kb, 0),
                                              CKPTFS_OPT("timeout=%lf", timeout, 0),
                                              CKPTFS_OPT("attr_timeout=%lf", attr_timeout, 0),
                                              CKPTFS_OPT("verify", verify, 1),
                                              CKPTFS_OPT("torch_zero_crc", torch_zero_crc, 1),
                                              CKPTFS_OPT("no_pipe_probe", no_pipe_probe, 1),
                                              CKPTFS_OPT("no_listxattr", no_listxattr, 1),
                                              CKPTFS_OPT("acl", acl, 1),
                                              CKPTFS_OPT("no_passthrough", no_passthrough, 1),
                                              CKPTFS_OPT("-h", show_help, 1),
                                              CKPTFS_OPT("--help", show_help, 1),
                                              CKPTFS_OPT("-V", show_version, 1),
                                              CKPTFS_OPT("--version", show_version, 1),
                                              FUSE_OPT_END};

enum { KEY_MAX_READ = 1 };

/* Non-options: the first is the checkpoint (consumed), the second the mount point (kept for
 * fuse_parse_cmdline).  max_read= is read here and left for the kernel too. */
static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs) {
    (void)outargs;
    ckptfs_config *c = data;
    if (key == FUSE_OPT_KEY_NONOPT && !c->source) {
        c->source = strdup(arg);
        return 0;
    }
    if (key == FUSE_OPT_KEY_OPT && strncmp(arg, "max_read=", 9) == 0) {
        char *end;
        unsigned long v = strtoul(arg + 9, &end, 10);
        if (*end || v < 4096 || v > (1u << 30)) {
            fprintf(stderr, "ckptfs: invalid %s\n", arg);
            return -1;
        }
        c->max_read = (unsigned)v;
        return 0;
    }
    return 1;
}

static int parse_size(const char *s, unsigned long long *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return -1;
    unsigned long long mul = 1;
    switch (*end) {
    case 'k':
    case 'K':
        mul = 1ull << 10;
        end++;
        break;
    case 'm':
    case 'M':
        mul = 1ull << 20;
        end++;
        break;
    case 'g':
    case 'G':
        mul = 1ull << 30;
        end++;
        break;
    default: break;
    }
    if (*end || v > ULLONG_MAX / mul) return -1;
    *out = v * mul;
    return 0;
}

/* The largest splice pipe the loop's threads will get.  libfuse 3.14 (fuse_send_data_iov)
 * grows a thread's pipe with F_SETPIPE_SZ to page·(buffers + 2) + 16 + reply bytes, which the
 * kernel rounds up to a power-of-two number of pages: 2 MiB for a 1 MiB reply.  Above
 * /proc/sys/fs/pipe-max-size (1 MiB by default) that needs CAP_SYS_RESOURCE; if it fails,
 * libfuse copies that and every later large reply through a fresh buffer (4-5x slower), so
 * the daemon asks once, here, with the same credentials the threads will have. */
#define FUSE_SUPER_MAGIC 0x65735546
#define OVERLAYFS_SUPER_MAGIC 0x794c7630

/* Whether `mnt` is the root of a FUSE mount already (its device differs from its parent's):
 * mounting there again would stack a second daemon over the first. */
static bool fuse_mounted_at(const char *mnt) {
    struct statfs sf;
    struct stat st, up;
    char parent[PATH_MAX];
    if (statfs(mnt, &sf) != 0 || sf.f_type != FUSE_SUPER_MAGIC || stat(mnt, &st) != 0) return false;
    if ((size_t)snprintf(parent, sizeof parent, "%s/..", mnt) >= sizeof parent) return false;
    return stat(parent, &up) == 0 && up.st_dev != st.st_dev;
}

static unsigned long pipe_limit(bool probe) {
    unsigned long pipe_max = 1ul << 20;
    FILE *f = fopen("/proc/sys/fs/pipe-max-size", "r");
    if (f) {
        if (fscanf(f, "%lu", &pipe_max) != 1) pipe_max = 1ul << 20;
        fclose(f);
    }
    if (!probe) return pipe_max < (1ul << 20) ? pipe_max : 1ul << 20;
    if (pipe_max >= BIG_PIPE) return pipe_max;
    int p[2];
    if (pipe(p) != 0) return pipe_max;
    int got = fcntl(p[0], F_SETPIPE_SZ, (int)BIG_PIPE);
    close(p[0]);
    close(p[1]);
    return got >= (int)BIG_PIPE ? (unsigned long)got : pipe_max;
}

/* Buffers (fd and memory) a reply of max_read bytes may have and still pass libfuse's test
 * page·(buffers + 2) + 16 + bytes ≤ pipe size; 0 when even one would not. */
static size_t segments_for(unsigned max_read, unsigned long pipe) {
    unsigned long page = (unsigned long)sysconf(_SC_PAGESIZE);
    unsigned long need = (unsigned long)max_read + 16 + 2 * page;
    return pipe > need ? (pipe - need) / page : 0;
}

typedef struct report_ctx {
    unsigned long shown;
} report_ctx;

static void report_problem(void *ctx, const ckpt_entry *e, const ckpt_error *err) {
    report_ctx *r = ctx;
    if (r->shown++ < 20)
        fprintf(stderr, "  %s%s%s\n", e ? ckpt_entry_key(e) : "", e ? ": " : "", err->message);
}

static void log_to_stderr(void *ctx, const char *msg) { ckptfs_log(ctx, "%s", msg); }

int main(int argc, char **argv) {
#ifdef M_MMAP_THRESHOLD
    /* Value texts and the objects they are rendered from (up to 16 MiB each) come and go
     * from every FUSE thread: mapped and unmapped, so that their bytes leave the daemon
     * when freed.  glibc's default threshold rises to 32 MiB after the first such free,
     * and each thread's arena then keeps what it freed (issue #22: 16 threads reading 16
     * MiB values held 215 MiB where -o value_cache allowed 64). */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
    /* Every shard and every regular file .raw/ lists is an open descriptor of the daemon
     * from indexing on (up to 4096 per checkpoint): the soft limit of open files (1024 by
     * default) raised to the hard one, as file servers do. */
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &nofile);
    }
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    ckptfs fs;
    memset(&fs, 0, sizeof fs);
    fs.cfg.direct_io = -1;
    fs.cfg.readahead_kb = 1024;
    fs.cfg.timeout = 86400.0;
    fs.cfg.attr_timeout = 10.0;
    int ret = 1;
    struct fuse_session *se = NULL;
    struct fuse_cmdline_opts opts;
    memset(&opts, 0, sizeof opts);

    if (fuse_opt_parse(&args, &fs.cfg, option_spec, opt_proc) != 0) goto out;
    if (fs.cfg.show_help) {
        usage(argv[0]);
        ret = 0;
        goto out;
    }
    if (fs.cfg.show_version) {
        printf("ckptfs %s (libfuse %s)\n", CKPT_VERSION_STRING, fuse_pkgversion());
        ret = 0;
        goto out;
    }
    if (fuse_parse_cmdline(&args, &opts) != 0) goto out;
    if (!fs.cfg.source || !opts.mountpoint) {
        fprintf(stderr, "usage: %s [options] CHECKPOINT_DIR MOUNTPOINT (see --help)\n", argv[0]);
        goto out;
    }
    fs.cfg.mountpoint = opts.mountpoint;
    fs.debug = opts.debug;
    if (fuse_mounted_at(opts.mountpoint)) {
        fprintf(stderr,
                "ckptfs: cannot mount on %s: a FUSE file system is mounted there already "
                "(fusermount3 -u %s first)\n",
                opts.mountpoint, opts.mountpoint);
        goto out;
    }
    char *abs = realpath(fs.cfg.source, NULL);
    if (!abs) {
        fprintf(stderr, "ckptfs: cannot mount %s: %s\n", fs.cfg.source, strerror(errno));
        goto out;
    }
    free(fs.cfg.source);
    fs.cfg.source = abs;

    /* 1 MiB reads in one request each when the splice pipes can hold them; -o max_read wins.
     * (The kernel's requests are at most max_pages = 256 pages whatever max_read says.) */
    unsigned long pipe_bytes = pipe_limit(!fs.cfg.no_pipe_probe);
    if (!fs.cfg.max_read) fs.cfg.max_read = pipe_bytes >= BIG_PIPE ? MAX_READ_BIG : MAX_READ_SMALL;
    unsigned eff_read = fs.cfg.max_read < MAX_READ_BIG ? fs.cfg.max_read : MAX_READ_BIG;
    fs.max_segs = segments_for(eff_read, pipe_bytes);
    fs.min_fd_run = 4096;
    if (!fs.max_segs)
        fprintf(stderr,
                "ckptfs: warning: max_read=%u replies do not fit the %lu-byte splice pipes this "
                "process may make; libfuse will copy them (slower)\n",
                fs.cfg.max_read, pipe_bytes);
    if (opts.debug)
        fprintf(stderr,
                "ckptfs: max_read %u, splice pipes up to %lu bytes, %zu buffers per reply\n",
                fs.cfg.max_read, pipe_bytes, fs.max_segs);

    unsigned long long cache = DEFAULT_CACHE_SIZE;
    if (fs.cfg.cache_size && parse_size(fs.cfg.cache_size, &cache) != 0) {
        fprintf(stderr, "ckptfs: invalid cache_size=%s\n", fs.cfg.cache_size);
        goto out;
    }
    size_t nbuf = (size_t)(cache / (fs.cfg.max_read + STAGING_PER_BUFFER));
    if (nbuf < 1) nbuf = 1;
    if (pool_init(&fs.pool, nbuf) != 0) {
        fprintf(stderr, "ckptfs: out of memory\n");
        goto out;
    }

    if (ckptfs_access_init(&fs) != 0) {
        fprintf(stderr, "ckptfs: out of memory\n");
        goto out;
    }

    /* open and check the checkpoint before mounting, so errors reach the terminal */
    unsigned long long values = 0; /* the library's default */
    if (fs.cfg.value_cache) {
        if (parse_size(fs.cfg.value_cache, &values) != 0) {
            fprintf(stderr, "ckptfs: invalid value_cache=%s\n", fs.cfg.value_cache);
            goto out;
        }
        if (!values) values = 1; /* keep none: every text is at least its newline */
    }
    ckpt_tree_options topts = {.log = log_to_stderr,
                               .log_ctx = &fs,
                               .verify = fs.cfg.verify,
                               .value_cache = values,
                               .torch_zero_crc = fs.cfg.torch_zero_crc};
    ckpt_error err = {0};
    if (ckpt_tree_open(fs.cfg.source, &topts, &fs.tree, &err) != CKPT_OK) {
        fprintf(stderr, "ckptfs: cannot mount %s: %s\n", fs.cfg.source, err.message);
        goto out;
    }
    ckpt_reader *r = ckpt_tree_reader(fs.tree);
    fs.multi = r == NULL;
    if (r) {
        report_ctx rc = {0};
        uint64_t failures = 0;
        if (ckpt_reader_check_ranges(r, report_problem, &rc, &failures) != CKPT_OK) {
            fprintf(stderr,
                    "ckptfs: cannot mount %s: not a complete checkpoint (%llu problem%s%s)\n",
                    fs.cfg.source, (unsigned long long)failures, failures == 1 ? "" : "s",
                    rc.shown > 20 ? ", first 20 shown above" : " shown above");
            goto out;
        }
    }

    char opt[64];
    snprintf(opt, sizeof opt, "-omax_read=%u", fs.cfg.max_read);
    if (fuse_opt_add_arg(&args, opt) != 0 || fuse_opt_add_arg(&args, "-oro") != 0 ||
        fuse_opt_add_arg(&args, "-odefault_permissions") != 0)
        goto out;
    char fsname[4200];
    snprintf(fsname, sizeof fsname, "-ofsname=%s", fs.cfg.source);
    if (!strchr(fs.cfg.source, ',')) fuse_opt_add_arg(&args, fsname);

    /* passthrough's max_stack_depth: the backing files' file system must be shallower */
    struct statfs ssf;
    fs.pt_depth = statfs(fs.cfg.source, &ssf) == 0 && ssf.f_type == OVERLAYFS_SUPER_MAGIC ? 2 : 1;
    pthread_mutex_init(&fs.pt_lock, NULL);

    se = fuse_session_new(&args, &ckptfs_ops, sizeof ckptfs_ops, &fs);
    if (!se) goto out;
    if (fuse_set_signal_handlers(se) != 0) goto out_session;
    if (fuse_session_mount(se, opts.mountpoint) != 0) goto out_signals;
    fs.dev_fd = fuse_session_fd(se);
    int e = ckptfs_init_ext(se);
    if (e != 0) /* libfuse's own I/O stays: only shared mmap of direct-I/O files is lost */
        fprintf(stderr, "ckptfs: warning: cannot filter INIT (%s): no shared mmap with direct_io\n",
                strerror(-e));
    if (fuse_daemonize(opts.foreground) != 0) goto out_unmount;
    if (!opts.foreground) {
        openlog("ckptfs", LOG_PID, LOG_DAEMON);
        fs.use_syslog = true;
    }

    if (opts.singlethread) {
        ret = fuse_session_loop(se);
    } else {
        struct fuse_loop_config *lc = fuse_loop_cfg_create();
        if (!lc) goto out_unmount;
        fuse_loop_cfg_set_clone_fd(lc, opts.clone_fd);
        /* Idle threads are kept (libfuse 3.14 destroys them beyond max_idle_threads, which
         * would cost a thread, a /dev/fuse clone and a splice pipe per request): the idle
         * limit is the thread limit unless -o max_idle_threads= says otherwise. */
        unsigned mt = opts.max_threads, idle = opts.max_idle_threads;
        mt = mt && mt <= 1024 ? mt : 16;
        fuse_loop_cfg_set_max_threads(lc, mt);
        fuse_loop_cfg_set_idle_threads(lc, idle && idle <= mt ? idle : mt);
        ret = fuse_session_loop_mt(se, lc);
        fuse_loop_cfg_destroy(lc);
    }
    /* 0, or the signal that ended the loop: clean; so is a connection the kernel aborted
     * because `fusermount3 -u` detached the mount while threads were waiting to read */
    ret = ret < 0 && ret != -ECONNABORTED;
out_unmount:
    fuse_session_unmount(se);
out_signals:
    fuse_remove_signal_handlers(se);
out_session:
    fuse_session_destroy(se);
out:
    ckptfs_passthrough_free(&fs);
    ckpt_tree_free(fs.tree);
    if (fs.pool.items) pool_release(&fs.pool);
    free(opts.mountpoint);
    free(fs.cfg.source);
    free(fs.cfg.cache_size);
    free(fs.cfg.value_cache);
    free(fs.groups);
    free(fs.groups_cache);
    fuse_opt_free_args(&args);
    if (fs.use_syslog) closelog();
    return ret;
}
