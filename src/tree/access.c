/* access.c — who may read what (docs/mount.md "Who can read what"): the owner, group, mode
 * bits and POSIX ACL each object of the tree shows, and the check of a caller's credentials
 * against an object's source files.  No FUSE here: the daemon asks, with the caller's
 * credentials it got from the kernel.
 *
 * Each source path (a file, and every directory on its real path: symlinks resolved) becomes
 * a rule: who may open it for what it is needed for (read a file, search a directory on the
 * way, read and search the checkpoint directory), as the kernel decides (acl_permission_check,
 * posix_acl_permission): the owner by the owner bits; if the mode's group bits are not 0 and
 * the file has an ACL, a named user by its entry and the mask; a user in a group entry that
 * (with the mask) grants, granted; in any group entry and none grants, refused; others by
 * the other bits.  An object shows the ACL made from the rules of all its sources
 * (tree_acl_of): exactly who may read every source where one ACL can say it, and otherwise
 * less, never more (see tree_acl_of).  Rules are kept per checkpoint and made again from the
 * files at most once a second, when an object's attributes are asked for. */
#include "tree/tree_i.h"
#include "util/error.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>

/* The kernel's ACL xattr format (include/uapi/linux/posix_acl_xattr.h). */
#define XATTR_ACL_VERSION 2u
#define ACL_TAG_USER_OBJ 0x01u
#define ACL_TAG_USER 0x02u
#define ACL_TAG_GROUP_OBJ 0x04u
#define ACL_TAG_GROUP 0x08u
#define ACL_TAG_MASK 0x10u
#define ACL_TAG_OTHER 0x20u
#define ACL_NO_ID 0xFFFFFFFFu

static uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static void put16(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static void put32(unsigned char *p, uint32_t v) {
    put16(p, v);
    put16(p + 2, v >> 16);
}

/* A rule nobody but root passes (a source that does not stat, an ACL too large to follow). */
static void rule_nobody(tree_rule *r) {
    memset(r, 0, sizeof *r);
    r->owner = 0;
}

/* The rule of one path (no symlink left in it) for `need` (4 read, 1 search, 5 both). */
static void rule_of(const char *path, unsigned need, tree_rule *r) {
    struct stat st;
    memset(r, 0, sizeof *r);
    if (stat(path, &st) != 0) return rule_nobody(r);
    unsigned mode = (unsigned)st.st_mode;
    r->owner = (uint32_t)st.st_uid;
    r->owner_ok = ((mode >> 6) & need) == need;
    r->other_ok = (mode & need) == need;
    /* the kernel consults an ACL only when the group (mask) bits are not 0 */
    unsigned char buf[4 + 8 * (2 * TREE_ACL_MAX + 4)];
    ssize_t n = -1;
    if (mode & 070) {
        n = lgetxattr(path, "system.posix_acl_access", buf, sizeof buf);
        if (n < 0 && errno == ERANGE) return rule_nobody(r); /* more entries than followed */
    }
    if (n <= 4 || (n - 4) % 8 || get32(buf) != XATTR_ACL_VERSION) {
        r->ng = 1; /* mode bits: the owning group */
        r->g[0] = (tree_ace){(uint32_t)st.st_gid, ((mode >> 3) & need) == need};
        return;
    }
    unsigned mask = 7;
    for (ssize_t i = 4; i < n; i += 8)
        if (get16(buf + i) == ACL_TAG_MASK) mask = get16(buf + i + 2);
    for (ssize_t i = 4; i < n; i += 8) {
        unsigned tag = get16(buf + i), perm = get16(buf + i + 2), id = get32(buf + i + 4);
        bool ok = (perm & mask & need) == need;
        if (tag == ACL_TAG_GROUP_OBJ) id = (uint32_t)st.st_gid;
        if (tag == ACL_TAG_USER) {
            if (r->nu == TREE_ACL_MAX) return rule_nobody(r);
            r->u[r->nu++] = (tree_ace){id, ok};
        } else if (tag == ACL_TAG_GROUP || tag == ACL_TAG_GROUP_OBJ) {
            if (r->ng == TREE_ACL_MAX) return rule_nobody(r);
            r->g[r->ng++] = (tree_ace){id, ok};
        }
    }
}

/* Whether cred passes rule r: the kernel's decision (root passes everything). */
static bool in_groups(uint32_t gid, const ckpt_tree_cred *c) {
    if (gid == c->gid) return true;
    for (size_t i = 0; i < c->ngroups; i++)
        if (c->groups[i] == gid) return true;
    return false;
}

static bool rule_allows(const tree_rule *r, const ckpt_tree_cred *c) {
    if (c->uid == 0) return true;
    if (c->uid == r->owner) return r->owner_ok;
    for (unsigned i = 0; i < r->nu; i++)
        if (r->u[i].id == c->uid) return r->u[i].ok;
    bool found = false;
    for (unsigned i = 0; i < r->ng; i++)
        if (in_groups(r->g[i].id, c)) {
            if (r->g[i].ok) return true;
            found = true;
        }
    return !found && r->other_ok;
}

/* Every user who is neither the owner nor named passes, whatever their groups. */
static bool rule_generic_all(const tree_rule *r) {
    if (!r->other_ok) return false;
    for (unsigned i = 0; i < r->ng; i++)
        if (!r->g[i].ok) return false;
    return true;
}

/* The rules of a source path: its real path's file for `need`, and search permission on
 * every directory above it.  fn gets each; false if the path does not resolve. */
typedef void (*rule_fn)(void *ctx, const tree_rule *r);

static bool path_rules(const char *path, unsigned need, rule_fn fn, void *ctx) {
    char *real = realpath(path, NULL);
    tree_rule r;
    if (!real) {
        rule_nobody(&r);
        fn(ctx, &r);
        return false;
    }
    rule_of(real, need, &r);
    fn(ctx, &r);
    for (char *slash = strrchr(real, '/'); slash; slash = strrchr(real, '/')) {
        *slash = '\0';
        rule_of(*real ? real : "/", 1, &r);
        fn(ctx, &r);
        if (!*real) break;
    }
    free(real);
    return true;
}

/* ------------------------------------------------------------------ the ACL an object shows */

static bool ace_has(const tree_ace *v, unsigned n, uint32_t id, bool *ok) {
    for (unsigned i = 0; i < n; i++)
        if (v[i].id == id) {
            if (ok) *ok = v[i].ok;
            return true;
        }
    return false;
}

static int ace_cmp(const void *a, const void *b) {
    uint32_t x = ((const tree_ace *)a)->id, y = ((const tree_ace *)b)->id;
    return x < y ? -1 : x > y;
}

/* Adds (id, ok) to v unless there; false when v is full. */
static bool ace_add(tree_ace *v, uint8_t *n, uint32_t id, bool ok) {
    if (ace_has(v, *n, id, NULL)) return true;
    if (*n == TREE_ACL_MAX) return false;
    v[(*n)++] = (tree_ace){id, ok};
    return true;
}

/* For a user u neither root nor the shown owner: +1 a named entry granting (every source
 * lets u in by uid: as its owner or a named user, or lets everyone in), -1 one refusing
 * (some source refuses u by uid), 0 none (u's groups matter: u is judged as anyone else). */
static int decide_user(const tree_rule *const *rules, size_t n, uint32_t u) {
    bool free = true;
    for (size_t i = 0; i < n; i++) {
        const tree_rule *r = rules[i];
        bool ok;
        if (r->owner == u) {
            if (!r->owner_ok) return -1;
        } else if (ace_has(r->u, r->nu, u, &ok)) {
            if (!ok) return -1;
        } else if (!rule_generic_all(r)) {
            free = false;
        }
    }
    return free ? 1 : 0;
}

/* The ACL shown for an object whose sources' rules are rules[0..n), with owner uid and group
 * gid.  A user passes it only if they pass every rule:
 *  - the owner is granted if every rule grants them by uid (or grants everyone);
 *  - a user some rule names (owner, named entry) gets a named entry: refusing if any rule
 *    refuses them by uid, granting if every rule grants them by uid or grants everyone, else
 *    none (judged by their groups below, which is never more than the rules give);
 *  - a group grants only if every rule that does not let everyone in has it as a granting
 *    group entry (so a member passes each); every other group such a rule lists refuses;
 *  - others are granted only if every such rule grants others.
 * Where the sources agree (one ACL on every file, say) this is exactly who may read them all;
 * where they cannot be said by one ACL (readers must be in two groups at once) it is less. */
void tree_acl_of(const tree_rule *const *rules, size_t n, uint32_t uid, uint32_t gid, tree_acl *a) {
    memset(a, 0, sizeof *a);
    a->uid = uid;
    a->gid = gid;
    /* the rules that do not let everyone in */
    size_t nt = 0;
    for (size_t i = 0; i < n; i++)
        nt += !rule_generic_all(rules[i]);
    a->other_ok = true;
    tree_ace grant[TREE_ACL_MAX], deny[TREE_ACL_MAX];
    uint8_t ngrant = 0, ndeny = 0;
    bool first = true, overflow = false;
    for (size_t i = 0; i < n; i++) {
        const tree_rule *r = rules[i];
        if (rule_generic_all(r)) continue;
        a->other_ok &= r->other_ok;
        if (first) {
            for (unsigned k = 0; k < r->ng; k++)
                if (r->g[k].ok) ace_add(grant, &ngrant, r->g[k].id, true);
            first = false;
        } else {
            uint8_t keep = 0;
            for (unsigned k = 0; k < ngrant; k++) {
                bool ok;
                if (ace_has(r->g, r->ng, grant[k].id, &ok) && ok) grant[keep++] = grant[k];
            }
            ngrant = keep;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const tree_rule *r = rules[i];
        if (rule_generic_all(r)) continue;
        for (unsigned k = 0; k < r->ng; k++)
            if (!ace_has(grant, ngrant, r->g[k].id, NULL))
                overflow |= !ace_add(deny, &ndeny, r->g[k].id, false);
    }
    if (nt == 0) {
        a->group_ok = true;
    } else {
        a->group_ok = ace_has(grant, ngrant, gid, NULL);
        unsigned nd = 0;
        for (unsigned k = 0; k < ndeny; k++)
            nd += deny[k].id != gid;
        if (overflow || nd > TREE_ACL_MAX) { /* too many groups to name: refuse all of them */
            a->other_ok = false;
            ngrant = ndeny = 0;
            a->group_ok = false;
        }
        /* refusals first: dropping a grant is safe, dropping a refusal is not */
        for (unsigned k = 0; k < ndeny; k++)
            if (deny[k].id != gid) a->g[a->ng++] = deny[k];
        for (unsigned k = 0; k < ngrant; k++)
            if (grant[k].id != gid && a->ng < TREE_ACL_MAX) a->g[a->ng++] = grant[k];
    }
    a->owner_ok = decide_user(rules, n, uid) == 1;
    /* named users: refusals must all be kept (else refuse everyone but the owner), grants
     * as room allows */
    tree_ace ugrant[TREE_ACL_MAX];
    uint8_t nug = 0;
    bool deny_overflow = false;
    for (size_t i = 0; i < n; i++) {
        const tree_rule *r = rules[i];
        for (unsigned k = 0; k <= r->nu; k++) {
            uint32_t u = k < r->nu ? r->u[k].id : r->owner;
            if (u == 0 || u == uid || ace_has(a->u, a->nu, u, NULL) ||
                ace_has(ugrant, nug, u, NULL))
                continue;
            int d = decide_user(rules, n, u);
            if (d < 0 && !ace_add(a->u, &a->nu, u, false)) deny_overflow = true;
            if (d > 0) ace_add(ugrant, &nug, u, true);
        }
    }
    if (deny_overflow) {
        a->nu = a->ng = 0;
        a->other_ok = a->group_ok = false;
    } else {
        for (unsigned k = 0; k < nug && a->nu < TREE_ACL_MAX; k++)
            a->u[a->nu++] = ugrant[k];
    }
    /* named entries that change nothing: everyone but the owner is refused anyway */
    bool any = a->group_ok || a->other_ok;
    for (unsigned k = 0; k < a->nu; k++)
        any |= a->u[k].ok;
    for (unsigned k = 0; k < a->ng; k++)
        any |= a->g[k].ok;
    if (!any) a->nu = a->ng = 0;
    qsort(a->u, a->nu, sizeof *a->u, ace_cmp);
    qsort(a->g, a->ng, sizeof *a->g, ace_cmp);
}

void tree_acl_plain(tree_acl *a) {
    bool user_refused = false;
    for (unsigned k = 0; k < a->nu; k++)
        user_refused |= !a->u[k].ok;
    /* a refused user may be in the group or among the others; a member of a refusing group
     * among the others */
    if (user_refused) a->group_ok = a->other_ok = false;
    if (a->ng) a->other_ok = false;
    a->nu = a->ng = 0;
}

uint32_t tree_acl_mode(const tree_acl *a, bool dir) {
    uint32_t bits = dir ? 5 : 4, m = 0;
    bool ext = a->nu || a->ng;
    if (a->owner_ok) m |= bits << 6;
    if (ext || a->group_ok) m |= bits << 3; /* with an ACL: the mask */
    if (a->other_ok) m |= bits;
    return m;
}

size_t tree_acl_xattr(const tree_acl *a, bool dir, unsigned char *out) {
    if (!a->nu && !a->ng) return 0;
    unsigned bits = dir ? 5 : 4;
    unsigned char *p = out;
    put32(p, XATTR_ACL_VERSION);
    p += 4;
#define ACE(tag, perm, id) (put16(p, tag), put16(p + 2, perm), put32(p + 4, id), p += 8)
    ACE(ACL_TAG_USER_OBJ, a->owner_ok ? bits : 0, ACL_NO_ID);
    for (unsigned k = 0; k < a->nu; k++)
        ACE(ACL_TAG_USER, a->u[k].ok ? bits : 0, a->u[k].id);
    ACE(ACL_TAG_GROUP_OBJ, a->group_ok ? bits : 0, ACL_NO_ID);
    for (unsigned k = 0; k < a->ng; k++)
        ACE(ACL_TAG_GROUP, a->g[k].ok ? bits : 0, a->g[k].id);
    ACE(ACL_TAG_MASK, bits, ACL_NO_ID);
    ACE(ACL_TAG_OTHER, a->other_ok ? bits : 0, ACL_NO_ID);
#undef ACE
    return (size_t)(p - out);
}

/* ------------------------------------------------------------------ rules of a checkpoint */

typedef struct rule_collect {
    tree_access *a;
    uint64_t mask;
} rule_collect;

/* Interns r in a's table; a full table maps to its last slot, which refuses everyone. */
static void collect_rule(void *ctx, const tree_rule *r) {
    rule_collect *rc = ctx;
    tree_access *a = rc->a;
    uint32_t i = 0;
    for (; i < a->nrules; i++)
        if (memcmp(&a->rules[i], r, sizeof *r) == 0) break;
    if (i == a->nrules) {
        if (a->nrules == TREE_RULES_MAX - 1) {
            i = TREE_RULES_MAX - 1;
            rule_nobody(&a->rules[i]);
        } else {
            a->rules[a->nrules++] = *r;
        }
    }
    rc->mask |= 1ull << i;
}

static uint64_t path_mask(tree_access *a, const char *path, unsigned need) {
    rule_collect rc = {a, 0};
    path_rules(path, need, collect_rule, &rc);
    return rc.mask;
}

void tree_access_acl(const tree_access *a, uint64_t mask, tree_acl *out) {
    const tree_rule *v[TREE_RULES_MAX];
    size_t n = 0;
    for (uint32_t i = 0; i < TREE_RULES_MAX; i++)
        if (mask >> i & 1) v[n++] = &a->rules[i];
    tree_acl_of(v, n, a->uid, a->gid, out);
}

/* dir/name, or "" where that does not fit in cap: a path that does not stat, so the source
 * gets the rule nobody but root passes (a cut path could name another file). */
static void join_path(char *path, size_t cap, const char *dir, const char *name) {
    int n = snprintf(path, cap, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= cap) path[0] = '\0';
}

static void metadata_path(const tree_ckpt *c, uint32_t i, char *path, size_t cap) {
    join_path(path, cap, ckpt_reader_dir(c->r), c->raw[i].name);
}

static void data_path(const tree_ckpt *c, uint32_t id, char *path, size_t cap) {
    join_path(path, cap, ckpt_reader_dir(c->r), ckpt_reader_file_name(c->r, id));
}

void tree_access_free(tree_access *a) {
    if (!a) return;
    free(a->rules);
    free(a->file);
    free(a->raw);
    free(a);
}

/* Reads the rules of every source of c from the files as they are now. */
static tree_access *access_make(const tree_ckpt *c, ckpt_error *err) {
    size_t nfiles = ckpt_reader_num_files(c->r);
    tree_access *a = calloc(1, sizeof *a);
    if (a) {
        a->rules = calloc(TREE_RULES_MAX, sizeof *a->rules);
        a->file = calloc(nfiles ? nfiles : 1, sizeof *a->file);
        a->raw = calloc(c->nraw ? c->nraw : 1, sizeof *a->raw);
    }
    if (!a || !a->rules || !a->file || !a->raw) {
        tree_access_free(a);
        ck_fail(err, CKPT_E_NOMEM, "out of memory");
        return NULL;
    }
    clock_gettime(CLOCK_MONOTONIC, &a->at);
    /* the owner shown: the sources' when they all agree, else the directory's */
    struct stat st;
    char path[PATH_MAX + 256];
    bool first = true, same_uid = true, same_gid = true;
    uint32_t uid = 0, gid = 0;
    for (uint32_t i = 0; i < c->nraw; i++) {
        if (c->raw[i].other) continue;
        if (c->raw[i].file_id < 0)
            metadata_path(c, i, path, sizeof path);
        else
            data_path(c, (uint32_t)c->raw[i].file_id, path, sizeof path);
        if (stat(path, &st) != 0) continue;
        if (first) uid = st.st_uid, gid = st.st_gid, first = false;
        same_uid &= st.st_uid == uid;
        same_gid &= st.st_gid == gid;
    }
    /* the sources' directory (for a torch.save file, the one holding it) */
    const char *dir = ckpt_reader_dir(c->r);
    if (stat(dir, &st) != 0) {
        ck_fail(err, CKPT_E_IO, "%s: %s", dir, strerror(errno));
        tree_access_free(a);
        return NULL;
    }
    a->uid = !first && same_uid ? uid : st.st_uid;
    a->gid = !first && same_gid ? gid : st.st_gid;
    a->base = path_mask(a, dir, 5);
    for (uint32_t i = 0; i < c->nraw; i++)
        if (c->raw[i].file_id < 0) {
            metadata_path(c, i, path, sizeof path);
            a->raw[i] = path_mask(a, path, c->raw[i].dir ? 5 : 4);
            if (!c->raw[i].other) a->base |= a->raw[i];
        }
    /* shards side by side share their directories' rules: read them once per directory */
    char last_dir[PATH_MAX] = "";
    uint64_t last_mask = 0;
    for (uint32_t id = 0; id < nfiles; id++) {
        data_path(c, id, path, sizeof path);
        char *real = realpath(path, NULL);
        char *slash = real ? strrchr(real, '/') : NULL;
        if (!slash || slash == real || (size_t)(slash - real) >= sizeof last_dir) {
            a->file[id] = path_mask(a, path, 4);
        } else {
            *slash = '\0';
            if (strcmp(real, last_dir) != 0) {
                last_mask = path_mask(a, real, 1);
                snprintf(last_dir, sizeof last_dir, "%s", real);
            }
            *slash = '/';
            tree_rule r;
            rule_of(real, 4, &r);
            rule_collect rc = {a, last_mask};
            collect_rule(&rc, &r);
            a->file[id] = rc.mask;
        }
        free(real);
    }
    for (uint32_t i = 0; i < c->nraw; i++)
        if (c->raw[i].file_id >= 0) a->raw[i] = a->file[c->raw[i].file_id];
    return a;
}

ckpt_status tree_access_build(tree_ckpt *c, ckpt_error *err) {
    tree_access *a = access_make(c, err);
    if (!a) return err ? err->code : CKPT_E_IO;
    tree_access_free(c->acc);
    c->acc = a;
    return CKPT_OK;
}

/* Reads the rules again when they are a second old (one thread does, the others go on with
 * the old ones meanwhile): a chmod, chown or setfacl of a source shows within a second of
 * the kernel asking for the attributes again. */
static void access_refresh(tree_ckpt *c) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    pthread_mutex_lock(&c->acc_lock);
    const tree_access *a = c->acc;
    bool stale = a && !c->acc_busy &&
                 (now.tv_sec - a->at.tv_sec) * 1000000000ll + (now.tv_nsec - a->at.tv_nsec) >=
                     TREE_ACCESS_TTL_NS;
    if (stale) c->acc_busy = true;
    pthread_mutex_unlock(&c->acc_lock);
    if (!stale) return;
    tree_access *n = access_make(c, NULL);
    pthread_mutex_lock(&c->acc_lock);
    if (n) {
        tree_access_free(c->acc);
        c->acc = n;
    } else {
        c->acc->at = now; /* try again in a second */
    }
    c->acc_busy = false;
    pthread_mutex_unlock(&c->acc_lock);
}

typedef struct any_acl {
    const tree_ckpt *c;
    bool any;
} any_acl;

static bool mask_has_acl(const tree_access *a, uint64_t m) {
    tree_acl x;
    tree_access_acl(a, m, &x);
    return x.nu || x.ng;
}

static void any_acl_in(void *ctx, const tree_access *a) {
    any_acl *q = ctx;
    size_t nfiles = ckpt_reader_num_files(q->c->r);
    uint64_t all = a->base, last = 0;
    bool any = mask_has_acl(a, a->base);
    for (size_t i = 0; !any && i < nfiles; i++) {
        all |= a->file[i];
        if (a->file[i] != last) any = mask_has_acl(a, a->base | a->file[i]);
        last = a->file[i];
    }
    for (uint32_t i = 0; !any && i < q->c->nraw; i++)
        any = mask_has_acl(a, a->base | a->raw[i]);
    q->any = any || mask_has_acl(a, all);
}

bool tree_access_any_acl(tree_ckpt *c) {
    any_acl q = {c, false};
    tree_access_get(c, any_acl_in, &q);
    return q.any;
}

void tree_access_get(tree_ckpt *c, tree_access_fn fn, void *ctx) {
    access_refresh(c);
    pthread_mutex_lock(&c->acc_lock);
    if (c->acc) fn(ctx, c->acc);
    pthread_mutex_unlock(&c->acc_lock);
}

/* ------------------------------------------------------------------ single paths */

typedef struct rule_list {
    tree_rule *v;
    size_t n, cap;
    bool nomem;
} rule_list;

static void list_rule(void *ctx, const tree_rule *r) {
    rule_list *l = ctx;
    for (size_t i = 0; i < l->n; i++)
        if (memcmp(&l->v[i], r, sizeof *r) == 0) return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        tree_rule *v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            l->nomem = true;
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *r;
}

void tree_dir_acl(const char *dir, tree_acl *out) {
    struct stat st;
    memset(out, 0, sizeof *out);
    if (stat(dir, &st) != 0) return;
    rule_list l = {0};
    path_rules(dir, 5, list_rule, &l);
    if (l.nomem) {
        free(l.v);
        out->uid = st.st_uid;
        out->gid = st.st_gid;
        return;
    }
    const tree_rule *v[64];
    size_t n = l.n < 64 ? l.n : 64;
    for (size_t i = 0; i < n; i++)
        v[i] = &l.v[i];
    tree_acl_of(v, n, st.st_uid, st.st_gid, out);
    if (l.n > 64) *out = (tree_acl){.uid = st.st_uid, .gid = st.st_gid};
    free(l.v);
}

bool ckpt_path_may_read(const char *path, const ckpt_tree_cred *cred) {
    if (cred->uid == 0) return true;
    rule_list l = {0};
    bool ok = path_rules(path, 4, list_rule, &l) && !l.nomem;
    for (size_t i = 0; ok && i < l.n; i++)
        ok = rule_allows(&l.v[i], cred);
    free(l.v);
    return ok;
}
