/* tree_i.h — private layout of the namespace (include/ckpt_tree.h): one `tree_ckpt` per
 * checkpoint (its plain tree of entries, views and caches) and the inode encoding shared by
 * every file of src/tree. */
#ifndef CK_TREE_TREE_I_H
#define CK_TREE_TREE_I_H

#include "ckpt_manifest.h"
#include "ckpt_save.h"
#include "ckpt_tree.h"
#include "index/reader_i.h"

#include <pthread.h>
#include <stdatomic.h>

/* ------------------------------------------------------------------ inode numbers
 * ino - 1 = slot << 48 | inst << 32 | node.  A slot is one checkpoint (slot 0 in a
 * single-checkpoint tree; in a directory of checkpoints slot 0 is the top level and slot k
 * the k-th checkpoint found).  An instance is one view of a checkpoint; a node indexes that
 * view's objects (plain tree nodes for the plain and .npy views).
 *
 * The objects of `.layout/<spec>/<rank>/` are computed, not stored: bit 47 set, then
 *   ino - 1 = slot << 48 | 1 << 47 | spec << (20 + nb) | rank << nb | node
 * where spec indexes the checkpoint's table of spec directories in use (one entry per spec
 * directory, never per rank), rank < N <= 2^20 (N: the mesh's ranks) and nb = tree_layout_node_bits
 * (enough bits for every plain node).  So any rank of any N resolves in O(1) with no per-rank
 * state. */
enum {
    INST_PLAIN = 0,     /* node: plain tree node (0 = checkpoint root) */
    INST_NPY = 1,       /* node: plain tree node (0 = the `.npy` directory) */
    INST_RAW = 2,       /* node 0: `.raw`, node k: raw file k-1 */
    INST_ST = 3,        /* node 0: `.safetensors`, node k: safetensors file k-1 */
    INST_LAYOUT = 4,    /* node 0: `.layout`, node k: spec directory of spec k-1 */
    INST_TORCH = 5,     /* node 0: `.torch`, node k: torch.save file k-1 */
    INST_RANKS = 0xFFFF /* (not encoded) the objects of a layout rank, see above */
};
#define TREE_MAX_SLOTS 0xFFFFu
#define TREE_LAYOUT_BIT (1ull << 47)
#define TREE_LAYOUT_RANK_BITS 20
#define TREE_LAYOUT_MAX_RANKS (1u << TREE_LAYOUT_RANK_BITS)
/* Spec directories (distinct names) per checkpoint, at most; fewer when the plain
 * tree has over 2^17 nodes (the spec field shares 27 bits with the node). */
#define TREE_LAYOUT_MAX_SPECS 1024u

static inline ckpt_ino tree_ino(uint32_t slot, uint32_t inst, uint32_t node) {
    return (((uint64_t)slot << 48) | ((uint64_t)inst << 32) | node) + 1;
}
static inline void tree_ino_split(ckpt_ino ino, uint32_t *slot, uint32_t *inst, uint32_t *node) {
    uint64_t v = ino - 1;
    *slot = (uint32_t)(v >> 48);
    *inst = (uint32_t)((v >> 32) & 0xFFFF);
    *node = (uint32_t)v;
}
static inline bool tree_ino_is_layout(ckpt_ino ino) {
    return ino != 0 && ((ino - 1) & TREE_LAYOUT_BIT) != 0;
}

/* Entries whose path has more elements are left out of the tree (logged). */
#define TREE_MAX_DEPTH 1024
/* Multi-checkpoint top level: node 0 the root, node TOP_NODE_LATEST + s `latest` while it
 * names slot s (s >= 1).  Its inode number changes with its target, so a target the kernel
 * caches (FUSE_CAP_CACHE_SYMLINKS) is never stale for its inode: the dentry of `latest` is
 * looked up again after 1 s and then finds a new inode when `latest` has moved. */
#define TOP_NODE_LATEST 1u
static inline ckpt_ino tree_latest_ino(uint32_t target_slot) {
    return tree_ino(0, 0, TOP_NODE_LATEST + target_slot);
}

/* ------------------------------------------------------------------ plain tree */

typedef struct tnode {
    const char *name;    /* escaped path element ("" for the root) */
    const ckpt_entry *e; /* NULL for directories */
    uint32_t parent;
    uint32_t kids;     /* first index in tree_ckpt.kid_ids */
    uint32_t nkids;    /* sorted by name */
    uint32_t nsubdirs; /* directories among the kids */
} tnode;

/* A spec directory in use (an entry of tree_ckpt.specs): its name (`2x2:S0s2,S0`, or the
 * alias `dim<d>-of-<N>`) and the layout it names; never changed once published. */
typedef struct layout_spec {
    ckpt_layout layout;
    uint32_t n; /* ranks */
    char name[CKPT_LAYOUT_SPEC_MAX];
} layout_spec;

/* A layout view instance: a spec directory (rank -1), or one rank's tree. */
typedef struct layout_inst {
    const layout_spec *def;
    uint32_t n; /* ranks */
    int32_t rank;
    uint32_t spec; /* index in tree_ckpt.specs */
} layout_inst;

/* A virtual safetensors file; its header and tensor table are built on first use. */
typedef struct st_file {
    char *name;         /* "<top>.safetensors" */
    uint32_t top;       /* plain node of the top-level directory, 0 for `@all`, `@root` */
    bool root_only;     /* `@root`: the entries at the root only */
    ckpt_status status; /* of the build */
    char *header;       /* 8-byte length + JSON padded with spaces to a multiple of 8 */
    size_t header_len;
    uint32_t ntensors;
    const ckpt_entry **tensors; /* in data order */
    uint64_t *begin;            /* data offset of each tensor (from the file start) */
    uint64_t size;
} st_file;

/* A virtual torch.save file (`.torch/<top>.pt`, `@all.pt`): its layout (ckpt_torchsave) is
 * built on first use, under the checkpoint's open lock; a failure is remembered with its
 * message. */
typedef struct pt_file {
    char *name;         /* "<top>.pt", "<top>.by-id.pt" */
    uint32_t top;       /* plain node of the top-level directory, 0 for `@all`, `@root` */
    bool root_only;     /* `@root`: the entries at the root only */
    bool by_id;         /* an optimizer state_dict in torch.optim's form (ckpt_torchsave) */
    ckpt_status status; /* of the build */
    char *error;        /* its message when it failed */
    ckpt_torchsave *ts;
} pt_file;

/* The most files and subdirectories besides its own that `.raw/` shows of a checkpoint
 * directory, and the deepest subdirectory it shows (1: a directory of the checkpoint's). */
#define TREE_RAW_OTHERS_MAX 4096
#define TREE_RAW_DEPTH_MAX 32

/* An object under `.raw/`: a file, or a subdirectory of the checkpoint directory (the
 * directories of torch-checkpointing's item files, or any other). */
typedef struct raw_file {
    char *name;      /* the path relative to the checkpoint directory ('/'-separated) */
    uint32_t base;   /* where its last element begins in name */
    uint32_t parent; /* 0: `.raw` itself; k: the subdirectory raw[k-1] */
    int fd;          /* metadata and other files: owned here; data files and directories: -1 (a data
                      * file's is the reader's) */
    int32_t file_id; /* data files: the reader's file; -1 otherwise */
    uint64_t size;
    /* another regular file of the checkpoint directory (config.json, common.pt, a
     * manifest...) or a subdirectory: a source of itself only, readable by the classes its
     * own mode allows */
    bool other;
    bool dir; /* a subdirectory (other too) */
} raw_file;

/* A rendered value text (with its final newline), shared by reference: the cache holds
 * one reference while it keeps the text, each reader one while it copies from it; the last
 * tree_value_put frees it.  Dropped from the cache while a reader holds it, it still counts
 * against the budget (tree_values.held) until freed. */
typedef struct tree_text {
    uint32_t refs; /* under tree_values.lock */
    bool orphan;   /* dropped while held: counted in tree_values.held */
    size_t len;
    char *data;
    /* while kept (under tree_values.lock): the list, most recently used first, and the
     * object that points to it */
    struct tree_text *prev, *next;
    struct object_text *owner;
} tree_text;

typedef struct object_text {
    tree_text *text; /* kept text, under tree_values.lock; NULL when not kept */
    bool rendering;  /* a thread renders it now (under tree_values.lock): others wait */
    /* the text's length + 1 once rendered (what stat shows stays known when the text is
     * dropped), 0 before */
    _Atomic uint64_t size;
    /* A value over the render budget (CKPT_E_LIMIT, which no retry changes): its message,
     * so that lookups, getattr and reads do not render it again; NULL until then. */
    _Atomic(char *) limit_error;
    /* the decode budget its last render succeeded with (its next render reserves and gets
     * that), 0 before */
    _Atomic uint64_t decode;
} object_text;

/* values.c: the memory of one tree's (every checkpoint of it) value texts within `budget`
 * bytes, one total: the texts kept for reuse (`kept`), texts dropped while a reader still
 * copies from them (`held`) and what the renders in flight may take (`reserved`: each the
 * text, its length when known from an earlier render and the render budget before, plus
 * the memory budget its decode gets, ckpt_object_options.max_memory).  A decode gets first
 * twice the stored pickle plus TREE_DECODE_SLACK (or what its last render succeeded with);
 * one that needs more is tried once again with the most any decode gets: the budget less
 * the text's reservation, at least TREE_DECODE_MIN, so that
 * what a value decodes into (a list of small ints: 2 bytes each stored, ~80 decoded) is
 * bounded by the budget whatever it holds; past that, the value's reads fail (CKPT_E_LIMIT,
 * kept).  A render waits until its reservation fits, the least recently used texts dropped
 * to make room; one that does not fit even alone runs only when nothing else is in flight
 * (the bound is then that one render).  At most TREE_VALUES_RENDERS renders run at once,
 * one per object. */
#define TREE_VALUES_DEFAULT (64ull << 20)
#define TREE_VALUES_RENDERS 4
#define TREE_DECODE_SLACK (1ull << 20)
#define TREE_DECODE_MIN (16ull << 20)
typedef struct tree_values {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* a render ended or a held text was freed */
    uint64_t budget, kept, held, reserved;
    tree_text *mru, *lru;
    uint32_t rendering;
    uint64_t renders, drops, waits, retries; /* so far (statistics, tests) */
    uint64_t peak;                           /* highest kept + held + reserved so far (tests) */
} tree_values;

/* What a step directory holds, cheaply compared: its entries, their total size, the newest
 * modification time among them and the directory's own (ns.c). */
typedef struct tree_dir_sig {
    uint64_t n, bytes;
    struct timespec newest;
} tree_dir_sig;

typedef struct tree_ckpt {
    char *dir;
    char *name; /* directory name in a tree of checkpoints; "" otherwise */
    uint32_t slot;
    /* built once (state: 0 not yet, 1 ok, 2 failed) under `open_lock` */
    pthread_mutex_t open_lock;
    atomic_int state;
    ckpt_error open_error;
    ckpt_reader *r;
    struct timespec mtime;
    tnode *nodes;
    uint32_t nnodes;
    uint32_t *kid_ids;
    object_text *objects; /* per entry index */
    tree_values *values;  /* the tree's (shared by every checkpoint of it) */
    raw_file *raw;
    uint32_t nraw;
    st_file *st;
    uint32_t nst;
    pt_file *pt;
    uint32_t npt;
    uint64_t tensor_bytes;
    /* who may read (access.c): the rules of every source, read at build and again at most
     * once a second when attributes are asked for (tree_access_get); under acc_lock */
    pthread_mutex_t acc_lock;
    struct tree_access *acc;
    bool acc_busy; /* a thread is reading them again */
    /* -o verify: the manifest and, per record, 0 unchecked / 1 good / 2 bad */
    ckpt_manifest *manifest;
    _Atomic unsigned char *verified;
    /* layout specs in use: TREE_LAYOUT_MAX_SPECS slots allocated on first use; entries are
     * written under spec_lock before nspecs is raised, and read without it */
    pthread_mutex_t spec_lock;
    _Atomic(layout_spec *) specs;
    _Atomic uint32_t nspecs;
    _Atomic uint64_t layout_mtime_ns; /* CLOCK_REALTIME of the last spec added; 0: none */
    /* a step of a directory that failed to build (state 2): its files as they were when the
     * build began, and when they were last compared (under open_lock); once they differ, the
     * step is built again in place (ns.c) */
    tree_dir_sig fail_sig;
    struct timespec fail_checked; /* CLOCK_MONOTONIC */
    /* a step of a directory (multi tree) is freed once it is no longer shown (removed, or
     * indexed again under a new slot) and nothing uses it: `refs` counts calls in progress
     * and reads whose reply still draws on its file descriptors (ckpt_tree_read_end),
     * `opens` files opened through it and not yet released (ckpt_tree_release_file); both
     * are raised only under the tree's lock, and scan() frees under it (ns.c) */
    _Atomic uint32_t refs, opens;
    uint64_t seen_scan; /* the last scan that found it shown or named (under the tree's lock) */
} tree_ckpt;

struct ckpt_tree {
    char *dir;
    ckpt_tree_options opts;
    bool multi;
    struct timespec root_mtime;
    /* slots: [0] is the checkpoint itself in a single tree, unused in a multi tree */
    pthread_mutex_t lock; /* guards the slot list and rescans (multi) */
    tree_ckpt **slots;
    uint32_t nslots, slots_cap;
    struct timespec last_scan;
    uint64_t scan_gen; /* scans so far (tree_ckpt.seen_scan) */
    uint32_t *order;   /* multi: slots of complete checkpoints in name order */
    uint32_t norder;
    uint32_t latest; /* slot of the newest complete checkpoint, 0 when none */
    /* multi: the top level's owner and ACL (access.c), at open and at each rescan (under
     * the lock) */
    struct tree_acl *top_acl;
    /* the kernel evaluates the ACLs objects show (ckpt_tree_set_posix_acl) */
    atomic_bool posix_acl;
    tree_values values; /* rendered value texts */
};

/* access.c: who may read what.  An entry of a rule or an ACL: a user or group id and
 * whether it grants. */
#define TREE_ACL_MAX 32
typedef struct tree_ace {
    uint32_t id;
    uint8_t ok;
} tree_ace;
/* Who may open one path (no symlinks in it) for what it is needed for (read, search, both),
 * as the kernel decides: owner; named users (entry and mask); groups (the owning group and
 * named ones: any that grants lets a member in, a member of only refusing ones is refused);
 * others.  A path without an ACL (or whose group bits are 0, when the kernel ignores it)
 * has its owning group as its one group.  Zero-filled, so rules compare with memcmp. */
typedef struct tree_rule {
    uint32_t owner;
    uint8_t owner_ok, other_ok, nu, ng;
    tree_ace u[TREE_ACL_MAX], g[TREE_ACL_MAX];
} tree_rule;
/* What an object shows: owner uid and group gid with whether they are granted, named users
 * and groups (sorted by id), others.  No named entries: plain mode bits; else a POSIX ACL
 * whose mask grants (so that its refusing entries count: the kernel ignores an ACL whose
 * mask is 0). */
typedef struct tree_acl {
    uint32_t uid, gid;
    uint8_t owner_ok, group_ok, other_ok, nu, ng;
    tree_ace u[TREE_ACL_MAX], g[TREE_ACL_MAX];
} tree_acl;
/* The ACL that lets in only users every rule lets in (exactly them where one ACL can say
 * it); owner uid, group gid. */
void tree_acl_of(const tree_rule *const *rules, size_t n, uint32_t uid, uint32_t gid,
                 tree_acl *out);
/* a without named entries, for a kernel that evaluates no ACL: a class that holds a refused
 * user loses its grant (fewer users, never more). */
void tree_acl_plain(tree_acl *a);
/* Permission bits shown for a: r-- (files) or r-x (directories) per class, the mask as the
 * group bits when a has named entries. */
uint32_t tree_acl_mode(const tree_acl *a, bool dir);
/* a as the kernel's system.posix_acl_access value; 0 when a has no named entries (no ACL).
 * out holds TREE_ACL_XATTR_MAX bytes. */
#define TREE_ACL_XATTR_MAX (4 + 8 * (2 * TREE_ACL_MAX + 4))
size_t tree_acl_xattr(const tree_acl *a, bool dir, unsigned char *out);
/* The rules of a checkpoint's sources: bit i of a mask is rules[i].  A rule table that
 * would hold more gives its last slot, which refuses everyone but root, to the rest. */
#define TREE_RULES_MAX 64
#define TREE_ACCESS_TTL_NS 1000000000ll
typedef struct tree_access {
    uint32_t uid, gid; /* the owner shown: the sources' when they agree, else the directory's */
    uint32_t nrules;
    tree_rule *rules;
    uint64_t base;      /* the listing: the directory (read and search), its metadata files */
    uint64_t *file;     /* per data file */
    uint64_t *raw;      /* per `.raw` file: its own rules */
    struct timespec at; /* CLOCK_MONOTONIC when read */
} tree_access;
/* The ACL of an object drawing on the sources of `mask`. */
void tree_access_acl(const tree_access *a, uint64_t mask, tree_acl *out);
/* Reads c's rules (after the reader and .raw are built). */
ckpt_status tree_access_build(tree_ckpt *c, ckpt_error *err);
void tree_access_free(tree_access *a);
/* Calls fn with c's rules, read again first when a second old; fn runs under c's lock. */
typedef void (*tree_access_fn)(void *ctx, const tree_access *a);
void tree_access_get(tree_ckpt *c, tree_access_fn fn, void *ctx);
/* Whether some object of c shows named entries (an entry file, a view, .raw, the listing). */
bool tree_access_any_acl(tree_ckpt *c);
/* A directory's owner and the ACL for listing it (multi top level, unbuilt steps). */
void tree_dir_acl(const char *dir, tree_acl *out);

/* build.c */
ckpt_status tree_ckpt_build(tree_ckpt *c, const ckpt_tree_options *opts, ckpt_error *err);
void tree_ckpt_release(tree_ckpt *c);
/* Frees what tree_ckpt_build made (c keeps its directory, name, slot and locks), so that it can
 * be built again; only for a checkpoint no reader can reach (state 0 or 2). */
void tree_ckpt_clear(tree_ckpt *c);
/* Index of the kid of `dir` named `name` (exact), or UINT32_MAX. */
uint32_t tree_find_kid(const tree_ckpt *c, uint32_t dir, const char *name, size_t len);
/* values.c */
void tree_values_init(tree_values *v, uint64_t budget);
void tree_values_destroy(tree_values *v);
/* The text of value entry e, rendered unless kept, with a reference for the caller (give it
 * back with tree_value_put); NULL with err filled on failure. */
const tree_text *tree_value_get(tree_ckpt *c, const ckpt_entry *e, ckpt_error *err);
void tree_value_put(tree_ckpt *c, const tree_text *t);
/* Its text's length: known once rendered, else rendered (and kept like any text). */
ckpt_status tree_value_size(tree_ckpt *c, const ckpt_entry *e, uint64_t *size, ckpt_error *err);
/* Drops every text of c the cache keeps (before c->objects is freed). */
void tree_values_forget(tree_ckpt *c);
/* Memory for value decodes beside the texts (the .torch/ view's layout): reserves, out of
 * the budget, what one decode may take — the budget less a text's render reservation, at
 * least TREE_DECODE_MIN — waiting (and dropping least recently used texts) until it fits or
 * nothing else is in flight, and returns it; tree_values_unreserve gives it back. */
uint64_t tree_values_reserve_decode(tree_values *v);
void tree_values_unreserve(tree_values *v, uint64_t n);
void tree_log(const ckpt_tree_options *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* verify.c: checks the stored item at `loc` against the manifest (once; no-op without one). */
ckpt_status tree_verify_item(tree_ckpt *c, const ck_loc *loc, ckpt_error *err);

/* layout.c */
/* Index of the spec directory `name` (a layout spec, ckpt_layout_parse) in c->specs, added on
 * first use; CKPT_E_NOTFOUND when name is not a spec, CKPT_E_LIMIT when the table (or the
 * inode encoding) has no room for another. */
ckpt_status tree_layout_spec(tree_ckpt *c, const char *name, uint32_t *spec, ckpt_error *err);
/* Spec `spec` as an instance with rank -1, or false. */
bool tree_layout_spec_get(tree_ckpt *c, uint32_t spec, layout_inst *out);
/* Specs in use (the table never holds anything per rank). */
uint32_t tree_layout_nspecs(tree_ckpt *c);
/* `.layout`'s mtime in ns: when the last spec was added (never before the checkpoint's
 * mtime), 0 while none is. */
uint64_t tree_layout_mtime_ns(tree_ckpt *c);
/* The inode of plain node `node` under `.layout/<spec>/<rank>/` (node 0: the rank dir). */
ckpt_ino tree_layout_ino(const tree_ckpt *c, uint32_t spec, uint32_t rank, uint32_t node);
/* Decodes a layout inode (tree_ino_is_layout) of checkpoint c; false if it names nothing. */
bool tree_layout_decode(tree_ckpt *c, ckpt_ino ino, layout_inst *li, uint32_t *node);

/* npy.c: the header of `.npy/<path>.npy` (at most TREE_NPY_HEADER_MAX bytes). */
#define TREE_NPY_HEADER_MAX 4096
size_t tree_npy_header(const ckpt_entry *e, char *out);

/* st_view.c */
ckpt_status tree_st_build(tree_ckpt *c, st_file *f, ckpt_error *err);
/* pt_view.c: builds f once (the file's size and layout); a failure is remembered. */
ckpt_status tree_pt_build(tree_ckpt *c, pt_file *f, const ckpt_tree_options *o, ckpt_error *err);

/* ------------------------------------------------------------------ reading (read.c) */

typedef struct tree_read {
    tree_ckpt *c;
    ckpt_reader *r;
    ckpt_tree_scratch *s;
    uint64_t len;    /* bytes of the reply */
    size_t max_segs; /* segments (fd and memory) allowed in the reply */
    size_t min_run;  /* shortest fd segment */
    bool mem_only;   /* budget exceeded: everything is gathered */
    size_t npieces;  /* fd pieces so far (in s->pieces) */
} tree_read;

/* Copies `len` bytes from `src` to reply offset `dst`. */
ckpt_status tree_read_mem(tree_read *x, uint64_t dst, const void *src, size_t len, ckpt_error *err);
/* A whole-file window [pos, pos+len) of fd (file `name` of the checkpoint, for messages) →
 * reply offset dst (an fd segment). */
ckpt_status tree_read_fd(tree_read *x, uint64_t dst, int fd, const char *name, uint64_t pos,
                         uint64_t len, ckpt_error *err);
/* Bytes [off, off+len) of the C-order flattening of the box (origin, extent) of tensor `e`
 * (origin/extent NULL: the whole tensor) → reply offset dst. */
/* Orders the recorded pieces into the reply's segments (in x->s->segs). */
ckpt_status tree_read_finish(tree_read *x, size_t *nsegs, ckpt_error *err);
ckpt_status tree_read_tensor(tree_read *x, const ckpt_entry *e, const int64_t *origin,
                             const int64_t *extent, uint64_t off, uint64_t len, uint64_t dst,
                             ckpt_error *err);

#endif
