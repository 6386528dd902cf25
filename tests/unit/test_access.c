/* test_access.c — who may read what (docs/mount.md "Who can read what"), without a mount:
 * ck_open_regular refuses FIFOs at once; ckpt_path_may_read decides from mode bits along
 * the real path (groups, search bits, symlink targets); the tree names each object's source
 * files (ckpt_tree_sources), shows owners and modes that never grant a class of users more
 * than the sources do, and ckpt_tree_may_read refuses a stranger naming the file. */
#include <criterion/criterion.h>

#include "ckpt_tree.h"
#include "fixture_copy.h"
#include "tree/tree_i.h"
#include "util/source.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

static void need_root(void) {
    if (geteuid() != 0) cr_skip_test("needs root (files owned by other users)");
}

static void write_file(const char *path, mode_t mode) {
    FILE *f = fopen(path, "w");
    cr_assert(f, "%s: %s", path, strerror(errno));
    fputs("hello", f);
    fclose(f);
    cr_assert_eq(chmod(path, mode), 0);
}

/* A FIFO with no writer: refused at once (an open that blocked would hang here until the
 * .timeout, which only guards against that). */
Test(access, open_regular_refuses_fifo_without_blocking, .timeout = 60) {
    char dir[] = "/tmp/ckpt-acc-XXXXXX", path[256];
    cr_assert(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/fifo", dir);
    cr_assert_eq(mkfifo(path, 0600), 0);
    errno = 0;
    cr_assert_eq(ck_open_regular(path, NULL), -1);
    cr_assert_eq(errno, CK_ENOTREG);
    cr_assert(strstr(ck_open_strerror(CK_ENOTREG), "not a regular file"));
    cr_assert_null(ck_fopen_regular(path, false));
    cr_assert_eq(ck_open_regular(dir, NULL), -1, "a directory is no source");
    cr_assert_eq(errno, CK_ENOTREG);
    unlink(path);
    cr_assert_eq(ck_open_regular(path, NULL), -1);
    cr_assert_eq(errno, ENOENT);
    write_file(path, 0644);
    struct stat st;
    int fd = ck_open_regular(path, &st);
    cr_assert_geq(fd, 0);
    cr_assert(S_ISREG(st.st_mode));
    cr_assert_eq(fcntl(fd, F_GETFL) & O_NONBLOCK, 0, "O_NONBLOCK is cleared again");
    close(fd);
    char link[300];
    snprintf(link, sizeof link, "%s/link", dir);
    cr_assert_eq(symlink(path, link), 0);
    FILE *f = ck_fopen_regular(link, false);
    cr_assert_not_null(f);
    fclose(f);
    cr_assert_null(ck_fopen_regular(link, true), "nofollow refuses a symlink");
    cr_assert_eq(errno, ELOOP);
    unlink(link);
    unlink(path);
    rmdir(dir);
}

Test(access, path_may_read_by_mode_bits) {
    need_root();
    char dir[] = "/tmp/ckpt-acc-XXXXXX", f[256], priv[256], hidden[256], link[256];
    cr_assert(mkdtemp(dir));
    cr_assert_eq(chmod(dir, 0755), 0);
    snprintf(f, sizeof f, "%s/f", dir);
    write_file(f, 0640);
    cr_assert_eq(chown(f, 1234, 5678), 0);
    uint32_t other_groups[] = {77, 5678};
    ckpt_tree_cred owner = {.uid = 1234, .gid = 1}, member = {.uid = 999, .gid = 5678},
                   supp = {.uid = 999, .gid = 1, .groups = other_groups, .ngroups = 2},
                   stranger = {.uid = 999, .gid = 1}, root = {0};
    cr_assert(ckpt_path_may_read(f, &owner));
    cr_assert(ckpt_path_may_read(f, &member));
    cr_assert(ckpt_path_may_read(f, &supp));
    cr_assert_not(ckpt_path_may_read(f, &stranger));
    cr_assert(ckpt_path_may_read(f, &root));
    /* a readable file in a directory the caller may not search, reached through a link */
    snprintf(priv, sizeof priv, "%s/priv", dir);
    cr_assert_eq(mkdir(priv, 0700), 0);
    snprintf(hidden, sizeof hidden, "%s/priv/h", dir);
    write_file(hidden, 0644);
    snprintf(link, sizeof link, "%s/link", dir);
    cr_assert_eq(symlink(hidden, link), 0);
    cr_assert_not(ckpt_path_may_read(link, &stranger));
    cr_assert(ckpt_path_may_read(link, &root));
    cr_assert_eq(chown(priv, 999, 1), 0);
    cr_assert(ckpt_path_may_read(link, &stranger), "its owner may search it");
    unlink(link);
    unlink(hidden);
    rmdir(priv);
    unlink(f);
    rmdir(dir);
}

typedef struct names {
    char list[16][512];
    int n;
} names;

static bool collect(void *ctx, const char *path) {
    names *s = ctx;
    cr_assert_lt(s->n, 16);
    snprintf(s->list[s->n++], sizeof s->list[0], "%s", path);
    return true;
}

static bool has_suffix(const names *s, const char *suffix) {
    for (int i = 0; i < s->n; i++) {
        size_t a = strlen(s->list[i]), b = strlen(suffix);
        if (a >= b && strcmp(s->list[i] + a - b, suffix) == 0) return true;
    }
    return false;
}

static ckpt_ino lookup(ckpt_tree *t, ckpt_ino at, const char *path, ckpt_tree_stat *st) {
    char *copy = strdup(path), *save = NULL;
    for (char *el = strtok_r(copy, "/", &save); el; el = strtok_r(NULL, "/", &save)) {
        ckpt_error err = {0};
        cr_assert_eq(ckpt_tree_lookup(t, at, el, st, &err), CKPT_OK, "%s: %s", path, err.message);
        at = st->ino;
    }
    free(copy);
    return at;
}

Test(access, tree_sources_modes_and_may_read) {
    need_root();
    fx_copy c;
    fx_copy_make(&c, "fsdp2_ws2");
    cr_assert_eq(chmod(c.root, 0755), 0);
    const char *files[] = {".metadata", "__0_0.distcp", "__1_0.distcp"};
    for (size_t i = 0; i < 3; i++) {
        char p[512];
        fx_copy_path(&c, files[i], p, sizeof p);
        cr_assert_eq(chown(p, 4242, 4343), 0);
        cr_assert_eq(chmod(p, i == 0 ? 0644 : 0600), 0);
    }
    cr_assert_eq(chown(c.dir, 4242, 4343), 0);
    ckpt_tree *t = NULL;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_tree_open(c.dir, NULL, &t, &err), CKPT_OK, "%s", err.message);

    ckpt_tree_stat st;
    cr_assert_eq(ckpt_tree_getattr(t, CKPT_TREE_ROOT, &st, &err), CKPT_OK);
    cr_assert_eq(st.uid, 4242);
    cr_assert_eq(st.gid, 4343);
    cr_assert_eq(st.mode, 0555, "listing needs the directory and .metadata: %o", st.mode);
    ckpt_ino w = lookup(t, CKPT_TREE_ROOT, "model/output.weight", &st);
    cr_assert_eq(st.mode, 0400, "%o", st.mode);
    ckpt_ino md = lookup(t, CKPT_TREE_ROOT, ".raw/.metadata", &st);
    cr_assert_eq(st.mode, 0444, "%o", st.mode);
    ckpt_ino raw0 = lookup(t, CKPT_TREE_ROOT, ".raw/__0_0.distcp", &st);
    cr_assert_eq(st.mode, 0400, "%o", st.mode);
    ckpt_ino all = lookup(t, CKPT_TREE_ROOT, ".safetensors/@all.safetensors", &st);
    cr_assert_eq(st.mode, 0400, "%o", st.mode);

    names s = {0};
    cr_assert_eq(ckpt_tree_sources(t, w, collect, &s, &err), CKPT_OK);
    cr_assert(has_suffix(&s, "/.metadata"));
    cr_assert(has_suffix(&s, "_0.distcp"));
    for (int i = 0; i < s.n; i++)
        for (int j = 0; j < i; j++)
            cr_assert_str_neq(s.list[i], s.list[j], "each source once");
    memset(&s, 0, sizeof s);
    cr_assert_eq(ckpt_tree_sources(t, raw0, collect, &s, &err), CKPT_OK);
    cr_assert_eq(s.n, 1);
    cr_assert(has_suffix(&s, "/__0_0.distcp"));
    memset(&s, 0, sizeof s);
    cr_assert_eq(ckpt_tree_sources(t, all, collect, &s, &err), CKPT_OK);
    cr_assert_eq(s.n, 3, "the metadata and both shards");

    ckpt_tree_cred owner = {.uid = 4242, .gid = 4343}, stranger = {.uid = 5151, .gid = 5151};
    cr_assert_eq(ckpt_tree_may_read(t, w, &owner, &err), CKPT_OK, "%s", err.message);
    cr_assert_eq(ckpt_tree_may_read(t, md, &stranger, &err), CKPT_OK, "%s", err.message);
    cr_assert_eq(ckpt_tree_may_read(t, w, &stranger, &err), CKPT_E_ACCESS);
    cr_assert(strstr(err.message, ".distcp"), "%s", err.message);
    ckpt_tree_free(t);

    /* the directory private too: nothing for anyone else, even listing */
    cr_assert_eq(chmod(c.dir, 0700), 0);
    cr_assert_eq(ckpt_tree_open(c.dir, NULL, &t, &err), CKPT_OK, "%s", err.message);
    cr_assert_eq(ckpt_tree_getattr(t, CKPT_TREE_ROOT, &st, &err), CKPT_OK);
    cr_assert_eq(st.mode, 0500, "%o", st.mode);
    lookup(t, CKPT_TREE_ROOT, ".raw/.metadata", &st);
    cr_assert_eq(st.mode, 0400, "%o", st.mode);
    ckpt_tree_free(t);
    fx_copy_remove(&c);
}

/* Sets a file's POSIX ACL (the xattr form: version 2, then tag, perm, id per entry, in the
 * kernel's order); false where the file system takes none. */
static bool set_acl(const char *path, const uint32_t (*ents)[3], size_t n) {
    unsigned char buf[4 + 8 * 16];
    uint32_t v = 2;
    memcpy(buf, &v, 4);
    for (size_t i = 0; i < n; i++) {
        uint16_t tag = (uint16_t)ents[i][0], perm = (uint16_t)ents[i][1];
        memcpy(buf + 4 + 8 * i, &tag, 2);
        memcpy(buf + 6 + 8 * i, &perm, 2);
        memcpy(buf + 8 + 8 * i, &ents[i][2], 4);
    }
    return setxattr(path, "system.posix_acl_access", buf, 4 + 8 * n, 0) == 0;
}

/* The daemon run as a user decides other users as the kernel would, ACLs included: a user
 * an ACL entry alone grants reads (before: refused, ACLs were "owner only"), a named entry
 * without r refuses although others may read, a mask without r refuses the named user, a
 * group entry lets a member in, and an ACL whose mask is 0 is ignored as the kernel does. */
Test(access, path_may_read_by_acl) {
    need_root();
    char dir[] = "/tmp/ckpt-acc-XXXXXX", f[256];
    cr_assert(mkdtemp(dir));
    cr_assert_eq(chmod(dir, 0755), 0);
    snprintf(f, sizeof f, "%s/f", dir);
    write_file(f, 0640);
    cr_assert_eq(chown(f, 1234, 5678), 0);
    const uint32_t X = 0xFFFFFFFFu;
    const uint32_t grant[][3] = {{1, 6, X},    {2, 4, 2001}, {2, 0, 2002}, {4, 4, X},
                                 {8, 4, 7001}, {0x10, 4, X}, {0x20, 4, X}};
    if (!set_acl(f, grant, 7)) cr_skip_test("this file system takes no ACLs");
    ckpt_tree_cred bob = {.uid = 2001, .gid = 9}, carol = {.uid = 2002, .gid = 9},
                   dave = {.uid = 2003, .gid = 9}, member = {.uid = 2004, .gid = 7001},
                   owner = {.uid = 1234, .gid = 1};
    cr_assert(ckpt_path_may_read(f, &bob), "granted by its ACL entry alone");
    cr_assert_not(ckpt_path_may_read(f, &carol), "a named entry without r refuses");
    cr_assert(ckpt_path_may_read(f, &dave), "others may read");
    cr_assert(ckpt_path_may_read(f, &member), "a named group grants");
    cr_assert(ckpt_path_may_read(f, &owner));
    /* mask without r: the named user and the groups are refused, others still read */
    const uint32_t masked[][3] = {{1, 6, X}, {2, 4, 2001}, {4, 4, X}, {0x10, 2, X}, {0x20, 0, X}};
    cr_assert(set_acl(f, masked, 5));
    cr_assert_not(ckpt_path_may_read(f, &bob), "the mask takes r away");
    cr_assert_not(ckpt_path_may_read(f, &dave));
    /* an ACL on the directory: only its named user may search it */
    cr_assert(set_acl(f, grant, 7));
    cr_assert_eq(chmod(dir, 0750), 0);
    const uint32_t dacl[][3] = {{1, 7, X}, {2, 1, 2001}, {4, 5, X}, {0x10, 5, X}, {0x20, 0, X}};
    cr_assert(set_acl(dir, dacl, 5));
    cr_assert(ckpt_path_may_read(f, &bob), "searches the directory by its ACL entry");
    cr_assert_not(ckpt_path_may_read(f, &dave), "may not search the directory");
    unlink(f);
    rmdir(dir);
}

/* A rule: owner (ok), named users and groups as {id, ok} pairs, other. */
static tree_rule mk_rule(uint32_t owner, bool owner_ok, const uint32_t (*u)[2], size_t nu,
                         const uint32_t (*g)[2], size_t ng, bool other) {
    tree_rule r;
    memset(&r, 0, sizeof r);
    r.owner = owner;
    r.owner_ok = owner_ok;
    r.other_ok = other;
    for (size_t i = 0; i < nu; i++)
        r.u[r.nu++] = (tree_ace){u[i][0], (uint8_t)u[i][1]};
    for (size_t i = 0; i < ng; i++)
        r.g[r.ng++] = (tree_ace){g[i][0], (uint8_t)g[i][1]};
    return r;
}

static int acl_user(const tree_acl *a, uint32_t uid) {
    for (unsigned i = 0; i < a->nu; i++)
        if (a->u[i].id == uid) return a->u[i].ok ? 1 : -1;
    return 0;
}

/* The ACL an object shows from its sources' rules: exact where the sources agree, fewer
 * users where one ACL cannot say who may read them all, never more. */
Test(access, acl_of_sources) {
    const uint32_t bob_r[][2] = {{2001, 1}}, carol_no[][2] = {{2002, 0}};
    const uint32_t grp_r[][2] = {{500, 1}}, grp_no[][2] = {{500, 0}}, grp_b[][2] = {{600, 1}};
    /* a file u:bob:r, u:carol:---, group 500 r, other ---, in a directory everyone searches */
    tree_rule f = mk_rule(1000, true, (const uint32_t(*)[2])bob_r, 1, grp_r, 1, false);
    f.u[f.nu++] = (tree_ace){2002, 0};
    tree_rule d = mk_rule(0, true, NULL, 0, (const uint32_t(*)[2])grp_no, 0, true);
    const tree_rule *v[] = {&f, &d};
    tree_acl a;
    tree_acl_of(v, 2, 1000, 500, &a);
    cr_assert(a.owner_ok && a.group_ok && !a.other_ok);
    cr_assert_eq(acl_user(&a, 2001), 1, "bob: granted by uid on every source");
    cr_assert_eq(acl_user(&a, 2002), -1, "carol: refused by her entry");
    cr_assert_eq(a.ng, 0);
    cr_assert_eq(tree_acl_mode(&a, false), 0440);
    unsigned char x[TREE_ACL_XATTR_MAX];
    cr_assert_eq(tree_acl_xattr(&a, false, x), 4 + 8 * 6u, "user::, 2 users, group::, mask, other");
    /* two shards, one for group 500, one for group 600: no group can be granted (a reader
     * must be in both), and others are refused; bob, granted by uid on both, stays */
    tree_rule s1 = mk_rule(1000, true, bob_r, 1, grp_r, 1, false);
    tree_rule s2 = mk_rule(1000, true, bob_r, 1, grp_b, 1, false);
    const tree_rule *w[] = {&s1, &s2, &d};
    tree_acl_of(w, 3, 1000, 500, &a);
    cr_assert(!a.group_ok && !a.other_ok);
    cr_assert_eq(acl_user(&a, 2001), 1);
    for (unsigned i = 0; i < a.ng; i++)
        cr_assert_not(a.g[i].ok, "group %u granted", a.g[i].id);
    /* bob granted by uid on one shard but judged by groups on the other: no named grant */
    tree_rule s3 = mk_rule(1000, true, NULL, 0, grp_r, 1, false);
    const tree_rule *y[] = {&s1, &s3, &d};
    tree_acl_of(y, 3, 1000, 500, &a);
    cr_assert_neq(acl_user(&a, 2001), 1);
    cr_assert(a.group_ok, "group 500 reads both");
    /* a named refusal under other r: kept, with a mask that makes the kernel consult it */
    tree_rule o = mk_rule(1000, true, carol_no, 1, grp_r, 1, true);
    const tree_rule *z[] = {&o, &d};
    tree_acl_of(z, 2, 1000, 500, &a);
    cr_assert(a.other_ok);
    cr_assert_eq(acl_user(&a, 2002), -1);
    cr_assert_eq(tree_acl_mode(&a, false) & 0070, 0040, "the mask is not 0");
}
