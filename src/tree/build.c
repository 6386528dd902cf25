/* build.c — one checkpoint's part of the namespace: opens its reader, builds the plain tree
 * (one node per escaped path element, children sorted by name), lists its raw files and
 * virtual safetensors files (values.c renders non-tensor entries on first use). */
#include "index/hf_storage.h"
#include "index/formats.h"
#include "index/metadata_files.h"
#include "tree/tree_i.h"
#include "util/error.h"
#include "util/source.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void tree_log(const ckpt_tree_options *o, const char *fmt, ...) {
    if (!o || !o->log) return;
    char msg[CKPT_ERROR_MSG_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    o->log(o->log_ctx, msg);
}

/* ------------------------------------------------------------------ building */

typedef struct builder {
    tree_ckpt *c;
    ck_htab by_name; /* hash(parent, name) -> node */
    uint32_t cap;
} builder;

typedef struct kid_key {
    const tree_ckpt *c;
    uint32_t parent;
    const char *name;
    size_t len;
} kid_key;

static uint64_t kid_hash(uint32_t parent, const char *name, size_t len) {
    return ck_hash_bytes(name, len, 0x9E3779B97F4A7C15ull ^ parent);
}

static bool kid_eq(const void *ctx, uint64_t v) {
    const kid_key *k = ctx;
    const tnode *n = &k->c->nodes[v];
    return n->parent == k->parent && strncmp(n->name, k->name, k->len) == 0 &&
           n->name[k->len] == '\0';
}

static ckpt_status add_node(builder *b, uint32_t parent, const char *name, size_t len,
                            const ckpt_entry *e, uint32_t *out, ckpt_error *err) {
    tree_ckpt *c = b->c;
    if (c->nnodes == UINT32_MAX - 1)
        return ck_fail(err, CKPT_E_LIMIT, "%s: too many tree nodes", c->dir);
    if (c->nnodes == b->cap) {
        uint32_t cap = b->cap ? b->cap * 2 : 64;
        tnode *n = realloc(c->nodes, (size_t)cap * sizeof *n);
        if (!n) return ck_fail(err, CKPT_E_NOMEM, "out of memory building the tree");
        c->nodes = n;
        b->cap = cap;
    }
    char *copy = ck_arena_strndup(c->r->arena, name, len);
    if (!copy) return ck_fail(err, CKPT_E_NOMEM, "out of memory building the tree");
    uint32_t id = c->nnodes++;
    c->nodes[id] = (tnode){.name = copy, .e = e, .parent = parent};
    if (!ck_htab_insert(&b->by_name, kid_hash(parent, name, len), id))
        return ck_fail(err, CKPT_E_NOMEM, "out of memory building the tree");
    *out = id;
    return CKPT_OK;
}

static uint32_t find_node(builder *b, uint32_t parent, const char *name, size_t len) {
    kid_key k = {b->c, parent, name, len};
    uint64_t v;
    return ck_htab_find(&b->by_name, kid_hash(parent, name, len), kid_eq, &k, &v) ? (uint32_t)v
                                                                                  : UINT32_MAX;
}

/* Inserts entry e at its path; conflicts (a file where a directory is needed, or a second
 * entry at the same path) are logged and the later entry is left out of the tree. */
static ckpt_status insert_entry(builder *b, const ckpt_entry *e, const ckpt_tree_options *o,
                                ckpt_error *err) {
    tree_ckpt *c = b->c;
    const char *p = ckpt_entry_path(e);
    if (ckpt_entry_path_len(e) > TREE_MAX_DEPTH) { /* tree walks recurse per level */
        tree_log(o, "%s: entry '%s' is not shown: its path has more than %d elements", c->dir,
                 ckpt_entry_key(e), TREE_MAX_DEPTH);
        return CKPT_OK;
    }
    uint32_t at = 0;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        uint32_t n = find_node(b, at, p, len);
        if (!slash) {
            if (n != UINT32_MAX) {
                tree_log(o, "%s: entry '%s' is not shown: its path '%s' is already taken", c->dir,
                         ckpt_entry_key(e), ckpt_entry_path(e));
                return CKPT_OK;
            }
            return add_node(b, at, p, len, e, &n, err);
        }
        if (n == UINT32_MAX) {
            CK_TRY(add_node(b, at, p, len, NULL, &n, err));
        } else if (c->nodes[n].e) {
            tree_log(o, "%s: entry '%s' is not shown: '%.*s' on its path is a file", c->dir,
                     ckpt_entry_key(e), (int)(slash - ckpt_entry_path(e)), ckpt_entry_path(e));
            return CKPT_OK;
        }
        at = n;
        p = slash + 1;
    }
}

static int by_name(const void *a, const void *b, void *ctx) {
    const tnode *nodes = ctx;
    return strcmp(nodes[*(const uint32_t *)a].name, nodes[*(const uint32_t *)b].name);
}

static ckpt_status link_kids(tree_ckpt *c, ckpt_error *err) {
    c->kid_ids = malloc(((size_t)c->nnodes + 1) * sizeof *c->kid_ids);
    if (!c->kid_ids) return ck_fail(err, CKPT_E_NOMEM, "out of memory building the tree");
    for (uint32_t i = 1; i < c->nnodes; i++) {
        tnode *p = &c->nodes[c->nodes[i].parent];
        p->nkids++;
        if (!c->nodes[i].e) p->nsubdirs++;
    }
    uint32_t at = 0;
    for (uint32_t i = 0; i < c->nnodes; i++) {
        c->nodes[i].kids = at;
        at += c->nodes[i].nkids;
        c->nodes[i].nkids = 0;
    }
    for (uint32_t i = 1; i < c->nnodes; i++) {
        tnode *p = &c->nodes[c->nodes[i].parent];
        c->kid_ids[p->kids + p->nkids++] = i;
    }
    for (uint32_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i].nkids > 1)
            qsort_r(c->kid_ids + c->nodes[i].kids, c->nodes[i].nkids, sizeof(uint32_t), by_name,
                    c->nodes);
    return CKPT_OK;
}

uint32_t tree_find_kid(const tree_ckpt *c, uint32_t dir, const char *name, size_t len) {
    const tnode *d = &c->nodes[dir];
    size_t lo = 0, hi = d->nkids;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint32_t k = c->kid_ids[d->kids + mid];
        const char *kn = c->nodes[k].name;
        int cmp = strncmp(kn, name, len);
        if (cmp == 0) cmp = kn[len] ? 1 : 0;
        if (cmp == 0) return k;
        if (cmp < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return UINT32_MAX;
}

/* ------------------------------------------------------------------ raw files */

/* Index (1-based, as `.raw` nodes count) of the raw object named `name` (its first len
 * bytes), or 0. */
static uint32_t raw_find(const tree_ckpt *c, const char *name, size_t len) {
    for (uint32_t i = 0; i < c->nraw; i++)
        if (strlen(c->raw[i].name) == len && memcmp(c->raw[i].name, name, len) == 0) return i + 1;
    return 0;
}

static bool raw_has(const tree_ckpt *c, const char *name) {
    return raw_find(c, name, strlen(name)) != 0;
}

static ckpt_status raw_push(tree_ckpt *c, const char *name, size_t len, uint32_t parent, raw_file f,
                            ckpt_error *err) {
    raw_file *n = realloc(c->raw, ((size_t)c->nraw + 1) * sizeof *n);
    if (!n) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    c->raw = n;
    char *copy = strndup(name, len);
    if (!copy) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    const char *slash = memrchr(copy, '/', len);
    f.name = copy;
    f.base = slash ? (uint32_t)(slash + 1 - copy) : 0;
    f.parent = parent;
    c->raw[c->nraw++] = f;
    return CKPT_OK;
}

/* The `.raw` node of subdirectory `rel` (its first len bytes; 0 for none: `.raw` itself),
 * added with the directories above it when not yet shown. */
static ckpt_status raw_dir(tree_ckpt *c, const char *rel, size_t len, uint32_t *out,
                           ckpt_error *err) {
    *out = 0;
    for (size_t at = 0; at < len;) {
        const char *slash = memchr(rel + at, '/', len - at);
        size_t end = slash ? (size_t)(slash - rel) : len;
        uint32_t k = raw_find(c, rel, end);
        if (!k) {
            CK_TRY(raw_push(c, rel, end, *out,
                            (raw_file){.fd = -1, .file_id = -1, .other = true, .dir = true}, err));
            k = c->nraw;
        }
        *out = k;
        at = end + 1;
    }
    return CKPT_OK;
}

static ckpt_status add_raw(tree_ckpt *c, const char *name, int fd, int32_t file_id,
                           const ckpt_tree_options *o, ckpt_error *err) {
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        tree_log(o, "%s/%s: not shown under .raw: cannot open it", c->dir, name);
        return CKPT_OK;
    }
    const char *slash = strrchr(name, '/');
    uint32_t parent = 0;
    if (slash) CK_TRY(raw_dir(c, name, (size_t)(slash - name), &parent, err));
    return raw_push(
        c, name, strlen(name), parent,
        (raw_file){.fd = file_id < 0 ? fd : -1, .file_id = file_id, .size = (uint64_t)st.st_size},
        err);
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

typedef struct raw_walk {
    tree_ckpt *c;
    const ckpt_tree_options *o;
    size_t shown;  /* other files and directories so far */
    bool capped;   /* TREE_RAW_OTHERS_MAX reached */
    bool too_deep; /* a directory below TREE_RAW_DEPTH_MAX left out (logged once) */
} raw_walk;

/* The names in directory dfd (closed here), sorted; "." and ".." left out; at most max
 * (*capped then). */
static ckpt_status dir_names(int dfd, size_t max, char ***out, size_t *nout, bool *capped,
                             ckpt_error *err) {
    *out = NULL;
    *nout = 0;
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return ck_fail(err, CKPT_E_IO, "%s", strerror(errno));
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    ckpt_status s = CKPT_OK;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (n == max) {
            *capped = true;
            break;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) {
                s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
                break;
            }
            names = nn;
        }
        if (!(names[n] = strdup(de->d_name))) {
            s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
            break;
        }
        n++;
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, name_cmp);
    *out = names;
    *nout = n;
    return s;
}

/* Every regular file and subdirectory of directory dfd (closed here), the checkpoint
 * directory's subdirectory `rel` ("" for the directory itself) at `depth` (0 for it), not
 * shown yet.  In the checkpoint directory itself a symbolic link to a regular file is shown
 * as that file (as ever); below it, and for directories anywhere, no symbolic link is
 * followed (ck_open_regular_below, O_NOFOLLOW), so nothing outside the directory shows. */
static ckpt_status walk_raw(raw_walk *w, int dfd, const char *rel, unsigned depth,
                            ckpt_error *err) {
    tree_ckpt *c = w->c;
    int own = dup(dfd);
    if (own < 0) {
        close(dfd);
        tree_log(w->o, "%s/%s: .raw does not show its files: %s", c->dir, rel, strerror(errno));
        return CKPT_OK;
    }
    char **names;
    size_t n;
    ckpt_error lerr = {0};
    /* (the checkpoint's own files are among them, and are not counted) */
    ckpt_status s =
        dir_names(own, TREE_RAW_OTHERS_MAX + (size_t)c->nraw, &names, &n, &w->capped, &lerr);
    if (s == CKPT_E_NOMEM) {
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
        close(dfd);
        if (err) *err = lerr;
        return s;
    }
    if (s != CKPT_OK)
        tree_log(w->o, "%s%s%s: .raw does not show all its files: %s", c->dir, *rel ? "/" : "", rel,
                 lerr.message);
    s = CKPT_OK;
    size_t i = 0;
    for (; i < n && s == CKPT_OK && w->shown < TREE_RAW_OTHERS_MAX; i++) {
        char relp[4096];
        if ((size_t)snprintf(relp, sizeof relp, "%s%s%s", rel, *rel ? "/" : "", names[i]) >=
            sizeof relp)
            continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", c->dir, relp);
        struct stat ls;
        if (fstatat(dfd, names[i], &ls, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (S_ISDIR(ls.st_mode)) {
            uint32_t k = raw_find(c, relp, strlen(relp));
            if (k && !c->raw[k - 1].dir) continue;
            if (depth + 1 > TREE_RAW_DEPTH_MAX) {
                if (!w->too_deep)
                    tree_log(w->o, "%s: not shown under .raw: more than %d directories deep", path,
                             TREE_RAW_DEPTH_MAX);
                w->too_deep = true;
                continue;
            }
            if (!k) {
                uint32_t parent;
                s = raw_dir(c, relp, strlen(relp), &parent, err);
                if (s != CKPT_OK) break;
                w->shown++;
            }
            int sub = openat(dfd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub < 0) {
                tree_log(w->o, "%s: .raw does not show its files: %s", path, strerror(errno));
                continue;
            }
            s = walk_raw(w, sub, relp, depth + 1, err);
            continue;
        }
        if (raw_has(c, relp)) continue;
        if (S_ISLNK(ls.st_mode) && depth) {
            tree_log(w->o,
                     "%s: not shown under .raw: a symbolic link below the checkpoint "
                     "directory",
                     path);
            continue;
        }
        struct stat st = {0};
        int fd = depth ? ck_open_regular_below(c->dir, relp, &st) : ck_open_regular(path, &st);
        if (fd < 0) {
            /* a link to a directory is left out silently, as it is not followed */
            if (!(errno == CK_ENOTREG && S_ISDIR(st.st_mode)))
                tree_log(w->o, "%s: not shown under .raw: %s", path, ck_open_strerror(errno));
            continue;
        }
        uint32_t before = c->nraw;
        s = add_raw(c, relp, fd, -1, w->o, err);
        if (c->nraw == before) {
            close(fd);
        } else {
            c->raw[c->nraw - 1].other = true;
            w->shown++;
        }
    }
    if (i < n && s == CKPT_OK) w->capped = true;
    for (i = 0; i < n; i++)
        free(names[i]);
    free(names);
    close(dfd);
    return s;
}

/* Every other regular file of the checkpoint directory and of its subdirectories, at any
 * depth up to TREE_RAW_DEPTH_MAX (Megatron's common.pt and metadata.json, HuggingFace's
 * config.json and tokenizer files, the manifest, torch-checkpointing's item files in
 * subdirectories and what lies beside them), so that a copy through `.raw/` is a checkpoint
 * its framework loads; sorted by name within a directory, at most TREE_RAW_OTHERS_MAX files
 * and directories.  FIFOs, devices and sockets are never opened for reading
 * (ck_open_regular) and are logged. */
static ckpt_status list_raw_others(tree_ckpt *c, const ckpt_tree_options *o, ckpt_error *err) {
    int d = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d < 0) {
        tree_log(o, "%s: .raw shows only the checkpoint's files: %s", c->dir, strerror(errno));
        return CKPT_OK;
    }
    raw_walk w = {.c = c, .o = o};
    CK_TRY(walk_raw(&w, d, "", 0, err));
    if (w.capped)
        tree_log(o, "%s: .raw shows the first %d other files and directories only", c->dir,
                 TREE_RAW_OTHERS_MAX);
    return CKPT_OK;
}

static ckpt_status list_raw(tree_ckpt *c, const ckpt_tree_options *o, ckpt_error *err) {
    char path[4096];
    ckpt_reader_info info;
    ckpt_reader_get_info(c->r, &info);
    /* a torch.save file has no metadata file: its data file is the whole of it */
    if (!info.num_metadata_files && !info.hf_storage) goto data;
    if (!info.rank_local_metadata) {
        /* HuggingFace storage has no metadata pickle; its index, when it has one */
        const char *md = info.hf_storage ? CK_HF_INDEX_JSON : ".metadata";
        snprintf(path, sizeof path, "%s/%s", c->dir, md);
        int fd = ck_open_regular(path, NULL);
        /* none: HuggingFace storage without an index; a format whose metadata is no DCP
         * `.metadata` (torch-checkpointing: metadata.pkl is listed with the other files) */
        if (fd < 0 && errno == ENOENT && (info.hf_storage || !info.root_class)) goto data;
        ckpt_status s = add_raw(c, md, fd, -1, o, err);
        if (s != CKPT_OK || (c->nraw && c->raw[c->nraw - 1].fd != fd)) {
            if (fd >= 0) close(fd);
            CK_TRY(s);
        }
    } else {
        long long *ranks = NULL;
        size_t nranks = 0;
        CK_TRY(ck_metadata_list_ranks(c->dir, &ranks, &nranks, err));
        for (size_t i = 0; i < nranks; i++) {
            char name[64];
            snprintf(name, sizeof name, "__%lld.metadata", ranks[i]);
            snprintf(path, sizeof path, "%s/%s", c->dir, name);
            int fd = ck_open_regular(path, NULL);
            uint32_t before = c->nraw;
            ckpt_status s = add_raw(c, name, fd, -1, o, err);
            if (c->nraw == before && fd >= 0) close(fd);
            if (s != CKPT_OK) {
                free(ranks);
                return s;
            }
        }
        free(ranks);
    }
data:
    for (uint32_t i = 0; i < ckpt_reader_num_files(c->r); i++) {
        ckpt_error ferr = {0};
        int fd = ckpt_reader_file_fd(c->r, i, &ferr);
        if (fd < 0) tree_log(o, "%s", ferr.message);
        /* (a torch-checkpointing item file may be in a subdirectory: shown there) */
        CK_TRY(add_raw(c, ckpt_reader_file_name(c->r, i), fd, (int32_t)i, o, err));
    }
    /* a torch.save file's directory is not the checkpoint's own */
    if (!info.num_metadata_files && !info.hf_storage) return CKPT_OK;
    return list_raw_others(c, o, err);
}

/* ------------------------------------------------------------------ safetensors files */

/* The name of a view file of top-level directory `top` (0: `base`, "@all" or "@root"), with
 * `ext`: a directory's name whose first byte is '@' is written with "%40" there, so that no
 * directory's file is taken for `@all` or `@root`; in `.torch/` (ext ".pt"), a name ending in
 * ".by-id" is written with that '.' as "%2E", so that no directory's file is taken for
 * another's `.by-id.pt` (escaping writes "%2E" only for a whole element ".", never inside a
 * name; docs/naming.md, "Views"). */
static char *view_name(const tree_ckpt *c, uint32_t top, const char *base, const char *ext) {
    static const char by_id[] = ".by-id";
    const char *name = top ? c->nodes[top].name : base;
    bool at = top && name[0] == '@';
    size_t n = strlen(name), bl = sizeof by_id - 1;
    bool dot = top && strcmp(ext, ".pt") == 0 && n > bl && strcmp(name + n - bl, by_id) == 0;
    size_t len = n + strlen(ext) + (at ? 3 : 0) + (dot ? 2 : 0) + 1;
    char *s = malloc(len);
    if (s)
        snprintf(s, len, "%s%.*s%s%s", at ? "%40" : "", (int)(n - (at ? 1 : 0) - (dot ? bl : 0)),
                 name + (at ? 1 : 0), dot ? "%2Eby-id" : "", ext);
    return s;
}

/* Some entry sits at the root (not under a top-level directory): `@root` files exist. */
static bool root_has_entries(const tree_ckpt *c) {
    const tnode *root = &c->nodes[0];
    for (uint32_t i = 0; i < root->nkids; i++)
        if (c->nodes[c->kid_ids[root->kids + i]].e) return true;
    return false;
}

static ckpt_status list_st(tree_ckpt *c, ckpt_error *err) {
    const tnode *root = &c->nodes[0];
    c->st = calloc((size_t)root->nsubdirs + 2, sizeof *c->st);
    if (!c->st) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    for (uint32_t i = 0; i < root->nkids; i++) {
        uint32_t k = c->kid_ids[root->kids + i];
        if (c->nodes[k].e) continue;
        st_file *f = &c->st[c->nst];
        f->name = view_name(c, k, NULL, ".safetensors");
        if (!f->name) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
        f->top = k;
        c->nst++;
    }
    st_file *all = &c->st[c->nst++];
    all->name = view_name(c, 0, "@all", ".safetensors");
    if (!all->name) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    if (!root_has_entries(c)) return CKPT_OK;
    st_file *flat = &c->st[c->nst++];
    flat->name = view_name(c, 0, "@root", ".safetensors");
    if (!flat->name) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    flat->root_only = true;
    return CKPT_OK;
}

/* ------------------------------------------------------------------ torch.save files */

/* Directory `top` looks like an FQN-keyed optimizer state_dict: a `param_groups` directory
 * whose groups (directories) each hold a `params` entry, and no `state` that is not a
 * directory (the by-id build checks the rest). */
static bool optim_shaped(const tree_ckpt *c, uint32_t top) {
    uint32_t pg = tree_find_kid(c, top, "param_groups", 12);
    uint32_t st = tree_find_kid(c, top, "state", 5);
    if (pg == UINT32_MAX || c->nodes[pg].e || !c->nodes[pg].nkids) return false;
    if (st != UINT32_MAX && c->nodes[st].e) return false;
    const tnode *n = &c->nodes[pg];
    for (uint32_t i = 0; i < n->nkids; i++) {
        uint32_t g = c->kid_ids[n->kids + i];
        uint32_t p = c->nodes[g].e ? UINT32_MAX : tree_find_kid(c, g, "params", 6);
        if (p == UINT32_MAX || !c->nodes[p].e) return false;
    }
    return true;
}

static ckpt_status add_pt(tree_ckpt *c, uint32_t top, const char *base, bool by_id,
                          ckpt_error *err) {
    pt_file *f = &c->pt[c->npt];
    f->name = view_name(c, top, base, by_id ? ".by-id.pt" : ".pt");
    if (!f->name) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    f->top = top;
    f->by_id = by_id;
    f->root_only = !top && base && strcmp(base, "@root") == 0;
    c->npt++;
    return CKPT_OK;
}

static ckpt_status list_pt(tree_ckpt *c, ckpt_error *err) {
    const tnode *root = &c->nodes[0];
    c->pt = calloc(2 * (size_t)root->nsubdirs + 2, sizeof *c->pt);
    if (!c->pt) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    for (uint32_t i = 0; i < root->nkids; i++) {
        uint32_t k = c->kid_ids[root->kids + i];
        if (c->nodes[k].e) continue;
        if (optim_shaped(c, k)) CK_TRY(add_pt(c, k, NULL, true, err));
        CK_TRY(add_pt(c, k, NULL, false, err));
    }
    CK_TRY(add_pt(c, 0, "@all", false, err));
    return root_has_entries(c) ? add_pt(c, 0, "@root", false, err) : CKPT_OK;
}

/* ------------------------------------------------------------------ the checkpoint */

ckpt_status tree_ckpt_build(tree_ckpt *c, const ckpt_tree_options *o, ckpt_error *err) {
    CK_TRY(ckpt_reader_open(c->dir, o ? o->open : NULL, &c->r, err));
    struct stat st;
    /* a step of a directory of checkpoints got its time from the scan that found it */
    if (!c->mtime.tv_sec && !c->mtime.tv_nsec &&
        ck_checkpoint_dir_probe(c->dir, &c->mtime) == CK_DIR_NONE) {
        if (stat(c->dir, &st) != 0)
            return ck_fail(err, CKPT_E_IO, "%s: %s", c->dir, strerror(errno));
        c->mtime = st.st_mtim;
    }

    size_t n = ckpt_reader_num_entries(c->r);
    builder b = {.c = c};
    if (!ck_htab_init(&b.by_name, n * 2 + 16))
        return ck_fail(err, CKPT_E_NOMEM, "out of memory building the tree");
    uint32_t root;
    ckpt_status s = add_node(&b, 0, "", 0, NULL, &root, err);
    for (size_t i = 0; s == CKPT_OK && i < n; i++) {
        const ckpt_entry *e = ckpt_reader_entry(c->r, i);
        if (ckpt_entry_kind_of(e) == CKPT_ENTRY_TENSOR) c->tensor_bytes += ckpt_entry_nbytes(e);
        s = insert_entry(&b, e, o, err);
    }
    ck_htab_release(&b.by_name);
    CK_TRY(s);
    CK_TRY(link_kids(c, err));
    c->objects = calloc(n ? n : 1, sizeof *c->objects);
    if (!c->objects) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    CK_TRY(list_raw(c, o, err));
    CK_TRY(list_st(c, err));
    CK_TRY(list_pt(c, err));
    CK_TRY(tree_access_build(c, err));
    if (o && o->verify) {
        ckpt_status ms = ckpt_manifest_load(c->dir, &c->manifest, err);
        if (ms == CKPT_E_NOTFOUND)
            return ck_fail(err, ms, "%s: verify: no %s (ckpt seal writes it)", c->dir,
                           CKPT_MANIFEST_FILE);
        CK_TRY(ms);
        size_t nrec = ckpt_manifest_num_records(c->manifest);
        c->verified = calloc(nrec ? nrec : 1, 1);
        if (!c->verified) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    }
    return CKPT_OK;
}

void tree_ckpt_clear(tree_ckpt *c) {
    if (c->objects) {
        tree_values_forget(c);
        for (size_t i = 0; c->r && i < ckpt_reader_num_entries(c->r); i++)
            free(atomic_load(&c->objects[i].limit_error));
        free(c->objects);
    }
    for (uint32_t i = 0; i < c->nraw; i++) {
        if (c->raw[i].fd >= 0) close(c->raw[i].fd);
        free(c->raw[i].name);
    }
    free(c->raw);
    for (uint32_t i = 0; i < c->nst; i++) {
        free(c->st[i].name);
        free(c->st[i].header);
        free(c->st[i].tensors);
        free(c->st[i].begin);
    }
    free(c->st);
    for (uint32_t i = 0; i < c->npt; i++) {
        free(c->pt[i].name);
        free(c->pt[i].error);
        ckpt_torchsave_free(c->pt[i].ts);
    }
    free(c->pt);
    tree_access_free(c->acc);
    free(c->nodes);
    free(c->kid_ids);
    free(atomic_load(&c->specs));
    ckpt_manifest_free(c->manifest);
    free((void *)c->verified);
    ckpt_reader_free(c->r);
    c->objects = NULL;
    c->raw = NULL;
    c->nraw = 0;
    c->st = NULL;
    c->nst = 0;
    c->pt = NULL;
    c->npt = 0;
    c->acc = NULL;
    c->nodes = NULL;
    c->nnodes = 0;
    c->kid_ids = NULL;
    atomic_store(&c->specs, NULL);
    atomic_store(&c->nspecs, 0);
    atomic_store(&c->layout_mtime_ns, 0);
    c->manifest = NULL;
    c->verified = NULL;
    c->r = NULL;
    c->tensor_bytes = 0;
}

void tree_ckpt_release(tree_ckpt *c) {
    if (!c) return;
    tree_ckpt_clear(c);
    pthread_mutex_destroy(&c->open_lock);
    pthread_mutex_destroy(&c->spec_lock);
    pthread_mutex_destroy(&c->acc_lock);
    free(c->dir);
    free(c->name);
    free(c);
}
