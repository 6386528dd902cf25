/* access.c — who may read what (docs/mount.md "Who can read what"): the owner, group and
 * permission bits each object of the tree shows, and the mode-bit check of a caller's
 * credentials against an object's source files.  No FUSE here: the daemon asks, with the
 * caller's credentials it got from the kernel.
 *
 * Shown bits are conservative: a class of users (relative to the owner and group shown) gets
 * a read bit only if every user of that class may read every source file and search every
 * directory on the way to it (its real path: symlink targets included), judged from mode
 * bits; a file or directory carrying a POSIX ACL grants nothing beyond its owner here. */
#include "tree/tree_i.h"
#include "util/error.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>

static bool has_acl(const char *path) {
    return lgetxattr(path, "system.posix_acl_access", NULL, 0) > 0;
}

/* The classes whose every user has `need` (bits of rwx: 4, 1, 5) on an object with
 * attributes st, relative to owner uid and group gid. */
static unsigned cls_of(const struct stat *st, bool acl, unsigned need, uint32_t uid, uint32_t gid) {
    bool o = ((st->st_mode >> 6) & need) == need, g = ((st->st_mode >> 3) & need) == need,
         x = (st->st_mode & need) == need;
    bool owner = st->st_uid == uid; /* the shown owner owns it */
    unsigned r = 0;
    /* the shown owner: its owner bits, else group or other bits (either may apply) */
    if (owner ? o : !acl && g && x) r |= TREE_CLS_OWNER;
    if (acl) return r;
    /* any other user may be its owner (unless that is the shown owner), in its group or not */
    bool as_owner = owner || o;
    if (as_owner && (st->st_gid == gid ? g : g && x)) r |= TREE_CLS_GROUP;
    if (as_owner && (st->st_gid == gid || g) && x) r |= TREE_CLS_OTHER;
    return r;
}

unsigned tree_path_cls(const char *path, unsigned need, uint32_t uid, uint32_t gid) {
    char *real = realpath(path, NULL);
    if (!real) return 0;
    struct stat st;
    unsigned cls = 0;
    if (stat(real, &st) == 0) cls = cls_of(&st, has_acl(real), need, uid, gid);
    /* every directory on the way: search permission */
    for (char *slash = strrchr(real, '/'); cls && slash; slash = strrchr(real, '/')) {
        *slash = '\0';
        const char *dir = *real ? real : "/";
        if (stat(dir, &st) != 0)
            cls = 0;
        else
            cls &= cls_of(&st, has_acl(dir), 1, uid, gid);
        if (!*real) break;
    }
    free(real);
    return cls;
}

uint32_t tree_cls_mode(unsigned cls, bool dir) {
    uint32_t bits = dir ? 5 : 4, m = 0;
    if (cls & TREE_CLS_OWNER) m |= bits << 6;
    if (cls & TREE_CLS_GROUP) m |= bits << 3;
    if (cls & TREE_CLS_OTHER) m |= bits;
    return m;
}

void tree_dir_access(const char *dir, uint32_t *uid, uint32_t *gid, uint8_t *cls) {
    struct stat st;
    *uid = *gid = 0;
    *cls = 0;
    if (stat(dir, &st) != 0) return;
    *uid = st.st_uid;
    *gid = st.st_gid;
    *cls = (uint8_t)tree_path_cls(dir, 5, *uid, *gid);
}

static void metadata_path(const tree_ckpt *c, uint32_t i, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", ckpt_reader_dir(c->r), c->raw[i].name);
}

static void data_path(const tree_ckpt *c, uint32_t id, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", ckpt_reader_dir(c->r), ckpt_reader_file_name(c->r, id));
}

ckpt_status tree_access_build(tree_ckpt *c, ckpt_error *err) {
    size_t nfiles = ckpt_reader_num_files(c->r);
    c->file_cls = calloc(nfiles ? nfiles : 1, 1);
    if (!c->file_cls) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
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
    if (stat(dir, &st) != 0) return ck_fail(err, CKPT_E_IO, "%s: %s", dir, strerror(errno));
    c->own_uid = !first && same_uid ? uid : st.st_uid;
    c->own_gid = !first && same_gid ? gid : st.st_gid;
    unsigned base = tree_path_cls(dir, 5, c->own_uid, c->own_gid);
    for (uint32_t i = 0; i < c->nraw; i++)
        if (c->raw[i].file_id < 0 && !c->raw[i].other) {
            metadata_path(c, i, path, sizeof path);
            base &= tree_path_cls(path, 4, c->own_uid, c->own_gid);
        }
    c->base_cls = (uint8_t)base;
    for (uint32_t i = 0; i < c->nraw; i++)
        if (c->raw[i].other) {
            metadata_path(c, i, path, sizeof path);
            c->raw[i].cls = (uint8_t)tree_path_cls(path, 4, c->own_uid, c->own_gid);
        }
    for (uint32_t id = 0; id < nfiles; id++) {
        data_path(c, id, path, sizeof path);
        c->file_cls[id] = (uint8_t)tree_path_cls(path, 4, c->own_uid, c->own_gid);
    }
    return CKPT_OK;
}

bool ckpt_path_may_read(const char *path, const ckpt_tree_cred *cred) {
    if (cred->uid == 0) return true;
    char *real = realpath(path, NULL);
    if (!real) return false;
    bool ok = true;
    unsigned need = 4;
    for (;;) {
        const char *p = *real ? real : "/";
        struct stat st;
        if (stat(p, &st) != 0) {
            ok = false;
            break;
        }
        unsigned shift = 0; /* other */
        if (st.st_uid == cred->uid) {
            shift = 6;
        } else if (has_acl(p)) {
            ok = false; /* not evaluated: refused */
            break;
        } else {
            bool in = st.st_gid == cred->gid;
            for (size_t i = 0; !in && i < cred->ngroups; i++)
                in = st.st_gid == cred->groups[i];
            if (in) shift = 3;
        }
        if (((st.st_mode >> shift) & need) != need) {
            ok = false;
            break;
        }
        char *slash = strrchr(real, '/');
        if (!slash || !*real) break;
        *slash = '\0';
        need = 1; /* directories on the way: search */
    }
    free(real);
    return ok;
}
