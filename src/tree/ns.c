/* ns.c — the namespace calls of include/ckpt_tree.h: opening a checkpoint or a directory of
 * checkpoints (with `latest`), resolving inode numbers to what they name in which view, and
 * lookup, getattr, readdir, readlink, xattrs and read over every view. */
#include "index/hf_storage.h"
#include "index/formats.h"
#include "index/metadata_files.h"
#include "run/run.h"
#include "tree/tree_i.h"
#include "util/error.h"
#include "util/source.h"
#include "util/strbuf.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const hidden_dirs[] = {".layout", ".npy", ".raw", ".safetensors", ".torch"};
static const uint32_t hidden_insts[] = {INST_LAYOUT, INST_NPY, INST_RAW, INST_ST, INST_TORCH};
#define NHIDDEN 5u

/* ------------------------------------------------------------------ checkpoints */

static tree_ckpt *slot_new(ckpt_tree *t, const char *dir, const char *name, uint32_t slot) {
    tree_ckpt *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->values = &t->values;
    c->dir = strdup(dir);
    c->name = strdup(name);
    c->slot = slot;
    pthread_mutex_init(&c->open_lock, NULL);
    pthread_mutex_init(&c->spec_lock, NULL);
    pthread_mutex_init(&c->acc_lock, NULL);
    if (!c->dir || !c->name) {
        tree_ckpt_release(c);
        return NULL;
    }
    return c;
}

static int64_t ts_ns(struct timespec a) { return (int64_t)a.tv_sec * 1000000000 + a.tv_nsec; }

/* The signature of a step directory: its entries (stat follows symbolic links; nothing is
 * opened, so a FIFO cannot block), their sizes and the newest change time. */
static void dir_signature(const char *dir, tree_dir_sig *s) {
    memset(s, 0, sizeof *s);
    DIR *d = opendir(dir);
    if (!d) return;
    struct stat st;
    if (fstat(dirfd(d), &st) == 0) s->newest = st.st_ctim;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        s->n++;
        if (fstatat(dirfd(d), de->d_name, &st, 0) != 0) continue;
        s->bytes += (uint64_t)st.st_size;
        if (ts_ns(st.st_ctim) > ts_ns(s->newest)) s->newest = st.st_ctim;
        if (ts_ns(st.st_mtim) > ts_ns(s->newest)) s->newest = st.st_mtim;
    }
    closedir(d);
}

static bool same_sig(const tree_dir_sig *a, const tree_dir_sig *b) {
    return a->n == b->n && a->bytes == b->bytes && ts_ns(a->newest) == ts_ns(b->newest);
}

/* A failed step of a directory is looked at again at most this often. */
#define RETRY_INTERVAL_NS 1000000000LL

/* Builds checkpoint c if it is not built yet, or, when a step of a directory failed and its
 * files changed since (a copy finished), frees what the failed build made and builds it
 * again; the state after (1 ok, 2 failed).  Takes c->open_lock. */
static int build_slot(ckpt_tree *t, tree_ckpt *c) {
    int state = atomic_load(&c->state);
    if (state == 1 || (state == 2 && !t->multi)) return state;
    pthread_mutex_lock(&c->open_lock);
    state = atomic_load(&c->state);
    if (state == 2) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (ts_ns(now) - ts_ns(c->fail_checked) >= RETRY_INTERVAL_NS) {
            c->fail_checked = now;
            tree_dir_sig s;
            dir_signature(c->dir, &s);
            if (!same_sig(&s, &c->fail_sig)) {
                tree_ckpt_clear(c);
                state = 0;
                atomic_store(&c->state, 0);
            }
        }
    }
    if (state == 0) {
        ckpt_error e = {0};
        uint64_t bad = 0;
        /* taken before: a file that arrives during the build changes it */
        tree_dir_sig before = {0};
        if (t->multi) dir_signature(c->dir, &before);
        ckpt_status bs = tree_ckpt_build(c, &t->opts, &e);
        /* a step of a directory is checked as the daemon checks a single checkpoint
         * before mounting: every shard present and long enough */
        if (bs == CKPT_OK && ckpt_reader_check_ranges(c->r, NULL, NULL, &bad) != CKPT_OK)
            bs = ck_fail(&e, CKPT_E_RANGE,
                         "%s: not a complete checkpoint (%llu stored ranges missing or "
                         "outside their files; ckpt verify lists them)",
                         c->dir, (unsigned long long)bad);
        if (bs == CKPT_OK) {
            state = 1;
        } else {
            /* listed, so it exists: a file gone since must not read as "no such entry" */
            if (e.code == CKPT_E_NOTFOUND) e.code = CKPT_E_IO;
            /* a step retried while its copy goes on fails alike each time: logged once */
            if (strcmp(e.message, c->open_error.message) != 0) tree_log(&t->opts, "%s", e.message);
            c->open_error = e;
            state = 2;
            if (t->multi) {
                c->fail_sig = before;
                clock_gettime(CLOCK_MONOTONIC, &c->fail_checked);
            }
        }
        atomic_store(&c->state, state);
    }
    pthread_mutex_unlock(&c->open_lock);
    return state;
}

/* Slot `slot` of a multi tree with a reference taken (put_ckpt gives it back), or NULL when
 * it does not exist or was freed: its step is gone. */
static tree_ckpt *hold_slot(ckpt_tree *t, uint32_t slot) {
    pthread_mutex_lock(&t->lock);
    tree_ckpt *c = slot < t->nslots ? t->slots[slot] : NULL;
    if (c) atomic_fetch_add(&c->refs, 1);
    pthread_mutex_unlock(&t->lock);
    return c;
}

/* Gives back what get_ckpt or hold_slot took (a single tree takes nothing: it is never freed
 * before ckpt_tree_free). */
static void put_ckpt(ckpt_tree *t, tree_ckpt *c) {
    if (c && t->multi) atomic_fetch_sub(&c->refs, 1);
}

/* The built checkpoint of a slot, held until put_ckpt; NULL with err filled when it does not
 * exist or failed. */
static tree_ckpt *get_ckpt(ckpt_tree *t, uint32_t slot, ckpt_error *err) {
    tree_ckpt *c = NULL;
    if (!t->multi) /* one checkpoint, fixed at open: no lock on the read path */
        c = slot == 0 ? t->slots[0] : NULL;
    else
        c = hold_slot(t, slot);
    if (!c) {
        ck_fail(err, CKPT_E_NOTFOUND, "no such inode");
        return NULL;
    }
    if (build_slot(t, c) == 2) {
        if (err) {
            pthread_mutex_lock(&c->open_lock); /* a retry may be rewriting it */
            *err = c->open_error;
            pthread_mutex_unlock(&c->open_lock);
        }
        put_ckpt(t, c);
        return NULL;
    }
    return c;
}

/* Whether dir is a checkpoint, *mtime the time that identifies its contents, and *settled
 * whether they may be indexed now (an unmarked one: not changed for RUN_UNMARKED_SETTLE_S). */
static bool is_checkpoint_dir(const char *dir, struct timespec *mtime, bool *settled) {
    struct timespec now;
    ck_dir_kind k = ck_checkpoint_dir_probe(dir, mtime);
    *settled = true;
    if (k == CK_DIR_UNMARKED) {
        clock_gettime(CLOCK_REALTIME, &now);
        *settled = now.tv_sec - mtime->tv_sec >= RUN_UNMARKED_SETTLE_S;
    }
    return k != CK_DIR_NONE;
}

/* Whether some subdirectory of dir is a checkpoint (of any kind). */
static bool has_checkpoint_subdir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return false;
    bool found = false;
    struct dirent *de;
    while (!found && (de = readdir(d))) {
        char path[4096];
        if (de->d_name[0] == '.' ||
            (size_t)snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= sizeof path)
            continue;
        found = ck_checkpoint_dir_probe(path, NULL) != CK_DIR_NONE;
    }
    closedir(d);
    return found;
}

static int by_version(const void *a, const void *b, void *ctx) {
    ckpt_tree *t = ctx;
    return strverscmp(t->slots[*(const uint32_t *)a]->name, t->slots[*(const uint32_t *)b]->name);
}

/* The run directory's order of steps (run.h): number, then time, then name. */
static bool newer(const tree_ckpt *a, const tree_ckpt *b) {
    return run_step_cmp(a->name, a->mtime, b->name, b->mtime) > 0;
}

static bool ts_after(struct timespec a, struct timespec b) {
    return a.tv_sec != b.tv_sec ? a.tv_sec > b.tv_sec : a.tv_nsec > b.tv_nsec;
}

/* The listed step called `name`, or 0. */
static uint32_t find_named(ckpt_tree *t, const uint32_t *order, size_t n, const char *name) {
    for (size_t i = 0; i < n && *name; i++)
        if (strcmp(t->slots[order[i]]->name, name) == 0) return order[i];
    return 0;
}

static int by_newness(const void *a, const void *b, void *ctx) {
    ckpt_tree *t = ctx;
    const tree_ckpt *x = t->slots[*(const uint32_t *)a], *y = t->slots[*(const uint32_t *)b];
    return newer(x, y) ? -1 : newer(y, x) ? 1 : 0;
}

/* Steps tried for `latest` in one scan: each is built (indexed and its ranges checked) first. */
#define LATEST_TRIES 8

/* Sets t->latest to the first complete step among: the ones the run's trackers name
 * (run_tracked: `latest`, `newest`, Megatron's tracker), then the newest (run_step_cmp).  A
 * candidate is built to know: one that fails (a copy still under way) is skipped and leaves the
 * listing (*n shrinks) until its files change.  Caller holds t->lock. */
static void pick_latest(ckpt_tree *t, uint32_t *order, size_t *n) {
    t->latest = 0;
    if (!*n) return;
    uint32_t *cand = malloc((*n + RUN_TRACKERS) * sizeof *cand);
    if (!cand) return;
    size_t nc = 0;
    char tracked[RUN_TRACKERS][RUN_NAME_MAX];
    for (size_t i = 0, nt = run_tracked(t->dir, tracked); i < nt; i++)
        if ((cand[nc] = find_named(t, order, *n, tracked[i]))) nc++;
    memcpy(cand + nc, order, *n * sizeof *cand);
    qsort_r(cand + nc, *n, sizeof *cand, by_newness, t);
    nc += *n;
    for (size_t i = 0, tries = 0; i < nc && !t->latest && tries < LATEST_TRIES; i++) {
        tree_ckpt *c = t->slots[cand[i]];
        int state = atomic_load(&c->state);
        if (state != 1) {
            tries++;
            state = build_slot(t, c);
        }
        if (state == 1) {
            t->latest = cand[i];
        } else { /* not complete: out of the listing */
            size_t k = 0;
            for (size_t j = 0; j < *n; j++)
                if (order[j] != cand[i]) order[k++] = order[j];
            *n = k;
        }
    }
    free(cand);
}

/* Frees the steps that scan `gen` no longer found (removed, or indexed again under a newer
 * slot) and that nothing uses: no call in progress, no read reply pending, no file open
 * through them.  Their slots stay empty (never reused), so an inode the kernel kept of one
 * reads as gone.  Caller holds t->lock, under which alone references are taken. */
static void free_gone(ckpt_tree *t, uint64_t gen) {
    for (uint32_t i = 1; i < t->nslots; i++) {
        tree_ckpt *c = t->slots[i];
        if (!c || c->seen_scan == gen || atomic_load(&c->refs) || atomic_load(&c->opens)) continue;
        t->slots[i] = NULL;
        tree_ckpt_release(c);
    }
}

/* Finds the checkpoints of a multi tree (new ones get new slots; slots are never reused).
 * Caller holds t->lock. */
static ckpt_status scan(ckpt_tree *t, ckpt_error *err) {
    clock_gettime(CLOCK_MONOTONIC, &t->last_scan);
    uint64_t gen = ++t->scan_gen;
    DIR *d = opendir(t->dir);
    if (!d) return ck_fail(err, CKPT_E_IO, "%s: %s", t->dir, strerror(errno));
    uint32_t *order = malloc(((size_t)t->nslots + 64) * sizeof *order);
    size_t n = 0, cap = (size_t)t->nslots + 64;
    struct dirent *de;
    ckpt_status s = CKPT_OK;
    while (order && (de = readdir(d))) {
        if (!run_step_name_ok(de->d_name)) continue; /* hidden, or our `latest` */
        char path[4096];
        struct timespec mt;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", t->dir, de->d_name) >= sizeof path)
            continue;
        bool settled;
        if (!is_checkpoint_dir(path, &mt, &settled)) continue;
        uint32_t slot = 0;
        for (uint32_t i = 1; i < t->nslots; i++) /* the name's newest slot */
            if (t->slots[i] && strcmp(t->slots[i]->name, de->d_name) == 0) slot = i;
        if (!settled && !slot) continue; /* being written: shown once it settles */
        /* one that failed to build (incomplete) stays out of the listing until its files
         * change and it builds */
        if (slot && atomic_load(&t->slots[slot]->state) == 2 &&
            build_slot(t, t->slots[slot]) == 2) {
            t->slots[slot]->seen_scan = gen;
            continue;
        }
        /* rewritten since it was indexed (its mark, or an unmarked step's newest file, has
         * another time): once that settles, a new slot indexes it again (the old one, shown
         * until then, is freed by free_gone once no file opened through it is open) */
        uint32_t old = slot;
        if (slot && settled &&
            (t->slots[slot]->mtime.tv_sec != mt.tv_sec ||
             t->slots[slot]->mtime.tv_nsec != mt.tv_nsec))
            slot = 0;
        if (!slot && t->nslots >= TREE_MAX_SLOTS) { /* no room: keep what it had, if any */
            if (!old) continue;
            slot = old;
        }
        if (!slot) {
            if (t->nslots == t->slots_cap) {
                uint32_t c2 = t->slots_cap * 2;
                tree_ckpt **m = realloc(t->slots, (size_t)c2 * sizeof *m);
                if (!m) {
                    s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
                    break;
                }
                t->slots = m;
                t->slots_cap = c2;
            }
            tree_ckpt *c = slot_new(t, path, de->d_name, t->nslots);
            if (!c) {
                s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
                break;
            }
            c->mtime = mt; /* set once: getattr reads it without the lock */
            slot = t->nslots;
            t->slots[t->nslots++] = c;
        }
        if (n == cap) {
            cap *= 2;
            uint32_t *m = realloc(order, cap * sizeof *m);
            if (!m) {
                free(order);
                order = NULL;
                break;
            }
            order = m;
        }
        order[n++] = slot;
        t->slots[slot]->seen_scan = gen;
    }
    closedir(d);
    if (!order) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    if (s != CKPT_OK) {
        free(order);
        return s;
    }
    free_gone(t, gen);
    uint32_t old_latest = t->latest;
    pick_latest(t, order, &n);
    qsort_r(order, n, sizeof *order, by_version, t);
    bool changed = n != t->norder || (n && memcmp(order, t->order, n * sizeof *order) != 0);
    free(t->order);
    t->order = order;
    t->norder = (uint32_t)n;
    /* The top level's mtime moves whenever what it shows changes (a step completing inside
     * its directory leaves the parent's mtime alone): the kernel keeps listings until the
     * directory's mtime changes (zero-message opendir, tools/ckptfs/ops.c). */
    struct stat st;
    struct timespec m = t->root_mtime;
    if (stat(t->dir, &st) == 0 && ts_after(st.st_mtim, m)) m = st.st_mtim;
    if (changed || t->latest != old_latest) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        if (ts_after(now, m)) {
            m = now;
        } else if (++m.tv_nsec == 1000000000) { /* the clock went back: still move */
            m.tv_sec++;
            m.tv_nsec = 0;
        }
    }
    t->root_mtime = m;
    return CKPT_OK;
}

static void maybe_rescan(ckpt_tree *t) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - t->last_scan.tv_sec >= 1) {
        ckpt_error e = {0};
        if (scan(t, &e) != CKPT_OK) tree_log(&t->opts, "%s", e.message);
        if (t->top_acl) tree_dir_acl(t->dir, t->top_acl); /* a chmod of the top level */
    }
}

ckpt_status ckpt_tree_open(const char *dir, const ckpt_tree_options *opts, ckpt_tree **out,
                           ckpt_error *err) {
    *out = NULL;
    ckpt_tree *t = calloc(1, sizeof *t);
    if (!t) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    if (opts) t->opts = *opts;
    pthread_mutex_init(&t->lock, NULL);
    tree_values_init(&t->values, t->opts.value_cache);
    t->dir = strdup(dir);
    t->slots = calloc(16, sizeof *t->slots);
    t->slots_cap = 16;
    ckpt_status s = CKPT_OK;
    if (!t->dir || !t->slots) {
        s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
        goto fail;
    }
    struct stat st;
    if (stat(dir, &st) != 0) {
        s = ck_fail(err, errno == ENOENT ? CKPT_E_NOTFOUND : CKPT_E_IO, "%s: %s", dir,
                    strerror(errno));
        goto fail;
    }
    bool file = S_ISREG(st.st_mode); /* a torch.save file: one checkpoint */
    if (!S_ISDIR(st.st_mode) && !file) {
        s = ck_fail(err, CKPT_E_INVAL, "%s: not a directory or a torch.save file", dir);
        goto fail;
    }
    t->root_mtime = st.st_mtim;
    /* a directory with bare *.safetensors files (an export, say) beside steps is a
     * directory of checkpoints */
    ck_dir_kind kind = file ? CK_DIR_MARKED : ck_checkpoint_dir_probe(dir, NULL);
    if (kind == CK_DIR_MARKED || (kind == CK_DIR_UNMARKED && !has_checkpoint_subdir(dir))) {
        tree_ckpt *c = slot_new(t, dir, "", 0);
        if (!c) {
            s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
            goto fail;
        }
        t->slots[0] = c;
        t->nslots = 1;
        s = tree_ckpt_build(c, &t->opts, err);
        if (s != CKPT_OK) goto fail;
        atomic_store(&c->state, 1);
    } else {
        t->multi = true;
        t->nslots = 1; /* slot 0: the top level */
        t->top_acl = malloc(sizeof *t->top_acl);
        if (!t->top_acl) {
            s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
            goto fail;
        }
        tree_dir_acl(dir, t->top_acl);
        s = scan(t, err);
        if (s != CKPT_OK) goto fail;
        if (t->norder == 0) {
            /* a HuggingFace index that does not parse or names a missing file: say so */
            char idx[4096];
            struct stat ist;
            ckpt_reader *r = NULL;
            if ((size_t)snprintf(idx, sizeof idx, "%s/%s", dir, CK_HF_INDEX_JSON) < sizeof idx &&
                stat(idx, &ist) == 0 &&
                (s = ckpt_reader_open(dir, t->opts.open, &r, err)) != CKPT_OK)
                goto fail;
            ckpt_reader_free(r);
            s = ck_fail(err, CKPT_E_NOTFOUND,
                        "%s: not a checkpoint (no .metadata, __0.metadata or *.safetensors) "
                        "and no subdirectory is one",
                        dir);
            goto fail;
        }
    }
    *out = t;
    return CKPT_OK;
fail:
    ckpt_tree_free(t);
    return s;
}

void ckpt_tree_free(ckpt_tree *t) {
    if (!t) return;
    for (uint32_t i = 0; i < t->nslots; i++)
        if (t->slots[i]) tree_ckpt_release(t->slots[i]);
    free(t->slots);
    free(t->order);
    free(t->dir);
    free(t->top_acl);
    pthread_mutex_destroy(&t->lock);
    tree_values_destroy(&t->values);
    free(t);
}

bool ckpt_tree_wants_posix_acl(ckpt_tree *t) {
    if (t->multi) return true; /* steps yet to come may need them */
    return t->nslots && t->slots[0] && tree_access_any_acl(t->slots[0]);
}

void ckpt_tree_set_posix_acl(ckpt_tree *t, bool on) { atomic_store(&t->posix_acl, on); }

ckpt_reader *ckpt_tree_reader(ckpt_tree *t) {
    return t->multi || !t->nslots ? NULL : t->slots[0]->r;
}

void ckpt_tree_get_totals(ckpt_tree *t, ckpt_tree_totals *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&t->lock);
    for (uint32_t i = 0; i < t->nslots; i++) {
        tree_ckpt *c = t->slots[i];
        if (c && atomic_load(&c->state) == 1) {
            out->bytes += c->tensor_bytes;
            out->files += c->nnodes;
        }
    }
    pthread_mutex_unlock(&t->lock);
}

/* ------------------------------------------------------------------ resolving inodes */

typedef enum obj_kind {
    O_TOPROOT, /* multi: the mount root */
    O_LATEST,  /* multi: the `latest` symlink */
    O_DIR,     /* a directory of the plain tree in a view (plain, npy, layout rank) */
    O_ENTRY,   /* an entry's file in a view */
    O_RAWDIR,  /* `.raw` */
    O_RAWFILE, /* a file under `.raw` */
    O_RAWSUB,  /* a subdirectory under `.raw` */
    O_STDIR,
    O_STFILE,
    O_PTDIR,     /* `.torch` */
    O_PTFILE,    /* `.torch/<top>.pt` */
    O_LAYOUTDIR, /* `.layout` */
    O_SPECDIR,   /* `.layout/<spec>` */
} obj_kind;

typedef enum view_kind { V_PLAIN, V_NPY, V_LAYOUT } view_kind;

typedef struct obj {
    obj_kind kind;
    view_kind view;
    tree_ckpt *c;
    uint32_t slot, inst, node;
    layout_inst li; /* V_LAYOUT and O_SPECDIR */
    const ckpt_entry *e;
} obj;

static ckpt_status not_found(ckpt_error *err) {
    return ck_fail(err, CKPT_E_NOTFOUND, "no such file or directory");
}

static ckpt_status resolve_in(ckpt_tree *t, ckpt_ino ino, obj *o, ckpt_error *err);

/* Gives back the checkpoint a resolve() held. */
static void obj_put(ckpt_tree *t, obj *o) {
    put_ckpt(t, o->c);
    o->c = NULL;
}

/* What inode `ino` names; on success o->c (when set) is held until obj_put. */
static ckpt_status resolve(ckpt_tree *t, ckpt_ino ino, obj *o, ckpt_error *err) {
    ckpt_status s = resolve_in(t, ino, o, err);
    if (s != CKPT_OK) obj_put(t, o);
    return s;
}

static ckpt_status resolve_in(ckpt_tree *t, ckpt_ino ino, obj *o, ckpt_error *err) {
    memset(o, 0, sizeof *o);
    if (ino == 0) return not_found(err);
    tree_ino_split(ino, &o->slot, &o->inst, &o->node);
    if (t->multi && o->slot == 0) {
        if (o->inst != 0) return not_found(err);
        if (o->node == 0) {
            o->kind = O_TOPROOT;
            return CKPT_OK;
        }
        if (o->node > TOP_NODE_LATEST) { /* `latest` as it named slot node - 1 */
            pthread_mutex_lock(&t->lock);
            uint32_t to = o->node - TOP_NODE_LATEST;
            bool known = to < t->nslots && t->slots[to];
            pthread_mutex_unlock(&t->lock);
            if (!known) return not_found(err);
            o->kind = O_LATEST;
            return CKPT_OK;
        }
        return not_found(err);
    }
    o->c = get_ckpt(t, o->slot, err);
    if (!o->c) return err ? err->code : CKPT_E_IO;
    tree_ckpt *c = o->c;
    if (tree_ino_is_layout(ino)) { /* .layout/<spec>/<rank>/...: computed, see tree_i.h */
        if (!tree_layout_decode(c, ino, &o->li, &o->node)) return not_found(err);
        o->inst = INST_RANKS;
        o->view = V_LAYOUT;
    } else {
        switch (o->inst) {
        case INST_PLAIN: o->view = V_PLAIN; break;
        case INST_NPY: o->view = V_NPY; break;
        case INST_RAW:
            if (o->node > c->nraw) return not_found(err);
            o->kind = !o->node ? O_RAWDIR : c->raw[o->node - 1].dir ? O_RAWSUB : O_RAWFILE;
            return CKPT_OK;
        case INST_ST:
            if (o->node > c->nst) return not_found(err);
            o->kind = o->node ? O_STFILE : O_STDIR;
            return CKPT_OK;
        case INST_TORCH:
            if (o->node > c->npt) return not_found(err);
            o->kind = o->node ? O_PTFILE : O_PTDIR;
            return CKPT_OK;
        case INST_LAYOUT:
            if (o->node == 0) {
                o->kind = O_LAYOUTDIR;
                return CKPT_OK;
            }
            if (!tree_layout_spec_get(c, o->node - 1, &o->li)) return not_found(err);
            o->kind = O_SPECDIR;
            return CKPT_OK;
        default: return not_found(err);
        }
    }
    if (o->node >= c->nnodes) return not_found(err);
    o->e = c->nodes[o->node].e;
    o->kind = o->e ? O_ENTRY : O_DIR;
    if (o->view == V_NPY && o->e && ckpt_entry_kind_of(o->e) != CKPT_ENTRY_TENSOR)
        return not_found(err);
    return CKPT_OK;
}

/* The local shard a layout rank holds of tensor e (ckpt_layout_shard_free it). */
static ckpt_status layout_shard(const layout_inst *li, const ckpt_entry *e, ckpt_layout_shard **out,
                                ckpt_error *err) {
    uint32_t coord[CKPT_LAYOUT_MAX_MESH_NDIM];
    if (ckpt_layout_coord(&li->def->layout, (uint32_t)li->rank, coord) != CKPT_OK)
        return ck_fail(err, CKPT_E_INVAL, "rank %d outside layout %s", li->rank, li->def->name);
    return ckpt_layout_shard_new(&li->def->layout, ckpt_entry_ndim(e), ckpt_entry_shape(e), coord,
                                 out, err);
}

/* Bytes [off, off + len) of a layout rank's file of tensor e, into the reply: the
 * concatenation of its shard's boxes. */
static ckpt_status read_layout(tree_read *x, const layout_inst *li, const ckpt_entry *e,
                               uint64_t off, uint64_t len, ckpt_error *err) {
    ckpt_layout_shard *sh;
    CK_TRY(layout_shard(li, e, &sh, err));
    uint64_t item = ckpt_dtype_itemsize(ckpt_entry_dtype(e)), dst = 0;
    ckpt_status s = CKPT_OK;
    for (uint64_t i = ckpt_layout_shard_find_box(sh, off / item); s == CKPT_OK && len; i++) {
        int64_t start[CKPT_MAX_NDIM], count[CKPT_MAX_NDIM];
        uint64_t at, n = item;
        ckpt_layout_shard_box(sh, i, start, count, &at);
        for (int d = 0; d < ckpt_entry_ndim(e); d++)
            n *= (uint64_t)count[d];
        uint64_t in = off - at * item, k = n - in < len ? n - in : len;
        s = tree_read_tensor(x, e, start, count, in, k, dst, err);
        off += k;
        dst += k;
        len -= k;
    }
    ckpt_layout_shard_free(sh);
    return s;
}

static ckpt_status entry_size(const obj *o, uint64_t *size, ckpt_error *err) {
    const ckpt_entry *e = o->e;
    if (ckpt_entry_kind_of(e) != CKPT_ENTRY_TENSOR) {
        ckpt_error oerr = {0};
        if (tree_value_size(o->c, e, size, &oerr) != CKPT_OK) *size = 0; /* read reports it */
        (void)err;
        return CKPT_OK;
    }
    switch (o->view) {
    case V_PLAIN: *size = ckpt_entry_nbytes(e); break;
    case V_NPY: {
        char hdr[TREE_NPY_HEADER_MAX];
        *size = tree_npy_header(e, hdr) + ckpt_entry_nbytes(e);
        break;
    }
    case V_LAYOUT: {
        ckpt_layout_shard *sh;
        CK_TRY(layout_shard(&o->li, e, &sh, err));
        *size = ckpt_layout_shard_numel(sh) * ckpt_dtype_itemsize(ckpt_entry_dtype(e));
        ckpt_layout_shard_free(sh);
        break;
    }
    }
    return CKPT_OK;
}

/* The rules (bits of tree_access) of every source of entry e: the listing's and its chunks'
 * files. */
static uint64_t entry_mask(const tree_ckpt *c, const tree_access *a, const ckpt_entry *e) {
    uint64_t m = a->base;
    size_t nfiles = ckpt_reader_num_files(c->r);
    if (e->loc.file_id >= 0 && (size_t)e->loc.file_id < nfiles) m |= a->file[e->loc.file_id];
    for (size_t i = 0; i < e->nchunks; i++) {
        int32_t id = e->chunks[i].loc.file_id;
        if (id >= 0 && (size_t)id < nfiles) m |= a->file[id];
    }
    return m;
}

typedef struct acl_ask {
    const obj *o;
    tree_acl *out;
} acl_ask;

static void obj_acl_in(void *ctx, const tree_access *a) {
    acl_ask *q = ctx;
    const obj *o = q->o;
    const tree_ckpt *c = o->c;
    uint64_t m = a->base;
    switch (o->kind) {
    case O_ENTRY: m = entry_mask(c, a, o->e); break;
    case O_RAWFILE:
    case O_RAWSUB: m |= a->raw[o->node - 1]; break;
    case O_STFILE: /* a view over shards: every shard */
    case O_PTFILE:
        for (size_t i = 0; i < ckpt_reader_num_files(c->r); i++)
            m |= a->file[i];
        break;
    default: break;
    }
    tree_access_acl(a, m, q->out);
}

/* The owner, group and ACL o shows (docs/mount.md "Who can read what"). */
static void obj_acl(ckpt_tree *t, const obj *o, tree_acl *out) {
    if (!o->c) { /* the top level of a directory of checkpoints, `latest` */
        pthread_mutex_lock(&t->lock);
        if (t->top_acl) *out = *t->top_acl;
        pthread_mutex_unlock(&t->lock);
        return;
    }
    acl_ask q = {o, out};
    tree_access_get(o->c, obj_acl_in, &q);
}

static void obj_access(ckpt_tree *t, const obj *o, ckpt_tree_stat *st) {
    tree_acl a;
    memset(&a, 0, sizeof a);
    obj_acl(t, o, &a);
    if (!atomic_load(&t->posix_acl)) tree_acl_plain(&a);
    st->uid = a.uid;
    st->gid = a.gid;
    st->mode = o->kind == O_LATEST ? 0777 : tree_acl_mode(&a, st->type == CKPT_NODE_DIR);
}

static ckpt_status stat_obj_raw(ckpt_tree *t, const obj *o, ckpt_ino ino, ckpt_tree_stat *st,
                                ckpt_error *err);

static ckpt_status stat_obj(ckpt_tree *t, const obj *o, ckpt_ino ino, ckpt_tree_stat *st,
                            ckpt_error *err) {
    ckpt_status s = stat_obj_raw(t, o, ino, st, err);
    if (s == CKPT_OK) obj_access(t, o, st);
    return s;
}

static ckpt_status stat_obj_raw(ckpt_tree *t, const obj *o, ckpt_ino ino, ckpt_tree_stat *st,
                                ckpt_error *err) {
    memset(st, 0, sizeof *st);
    st->ino = ino;
    st->nlink = 1;
    if (o->c) st->mtime = o->c->mtime; /* the top level's under t->lock below */
    switch (o->kind) {
    case O_TOPROOT:
        st->type = CKPT_NODE_DIR;
        st->flags = CKPT_TREE_CHANGES;
        pthread_mutex_lock(&t->lock);
        maybe_rescan(t); /* at most once a second: the mtime tells the kernel what changed */
        st->mtime = t->root_mtime;
        st->nlink = 2 + t->norder;
        st->size = t->norder + (t->latest ? 1 : 0);
        pthread_mutex_unlock(&t->lock);
        return CKPT_OK;
    case O_LATEST:
        st->type = CKPT_NODE_SYMLINK;
        st->flags = CKPT_TREE_CHANGES;
        pthread_mutex_lock(&t->lock);
        st->mtime = t->root_mtime;
        const tree_ckpt *to = t->slots[o->node - TOP_NODE_LATEST];
        if (to) st->size = strlen(to->name);
        pthread_mutex_unlock(&t->lock);
        return to ? CKPT_OK : not_found(err);
    case O_DIR: {
        const tnode *n = &o->c->nodes[o->node];
        st->type = CKPT_NODE_DIR;
        st->nlink = 2 + n->nsubdirs;
        st->size = n->nkids;
        if (o->inst == INST_PLAIN && o->node == 0) {
            st->nlink += NHIDDEN;
            st->size += NHIDDEN;
            /* a step of a directory of checkpoints is indexed again when rewritten (a new
             * slot under the same name, scan()): its name must be looked up again soon */
            if (t->multi) st->flags = CKPT_TREE_CHANGES;
        }
        return CKPT_OK;
    }
    case O_ENTRY: st->type = CKPT_NODE_FILE; return entry_size(o, &st->size, err);
    case O_RAWDIR:
        st->type = CKPT_NODE_DIR;
        st->nlink = 2;
        st->size = o->c->nraw;
        return CKPT_OK;
    case O_RAWFILE:
        st->type = CKPT_NODE_FILE;
        st->size = o->c->raw[o->node - 1].size;
        return CKPT_OK;
    case O_RAWSUB:
        st->type = CKPT_NODE_DIR;
        st->nlink = 2;
        return CKPT_OK;
    case O_STDIR:
        st->type = CKPT_NODE_DIR;
        st->nlink = 2;
        st->size = o->c->nst;
        return CKPT_OK;
    case O_STFILE: {
        st_file *f = &o->c->st[o->node - 1];
        st->type = CKPT_NODE_FILE;
        CK_TRY(tree_st_build(o->c, f, err));
        st->size = f->size;
        return CKPT_OK;
    }
    case O_PTDIR:
        st->type = CKPT_NODE_DIR;
        st->nlink = 2;
        st->size = o->c->npt;
        return CKPT_OK;
    case O_PTFILE: {
        pt_file *f = &o->c->pt[o->node - 1];
        st->type = CKPT_NODE_FILE;
        CK_TRY(tree_pt_build(o->c, f, &t->opts, err));
        st->size = ckpt_torchsave_size(f->ts);
        return CKPT_OK;
    }
    case O_LAYOUTDIR: { /* lists the specs in use: its mtime is when the last one was added */
        st->type = CKPT_NODE_DIR;
        st->flags = CKPT_TREE_CHANGES;
        st->nlink = 2;
        uint64_t ns = tree_layout_mtime_ns(o->c);
        if (ns) st->mtime = (struct timespec){(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
        return CKPT_OK;
    }
    case O_SPECDIR:
        st->type = CKPT_NODE_DIR;
        st->nlink = 2 + o->li.n;
        st->size = o->li.n;
        return CKPT_OK;
    }
    return not_found(err);
}

ckpt_status ckpt_tree_getattr(ckpt_tree *t, ckpt_ino ino, ckpt_tree_stat *out, ckpt_error *err) {
    CK_ERR_OR_LOCAL(err);
    uint32_t slot, inst, node;
    tree_ino_split(ino, &slot, &inst, &node);
    if (t->multi && slot > 0 && inst == 0 && node == 0) { /* a checkpoint's root: no build */
        tree_ckpt *c = hold_slot(t, slot);
        if (!c) return not_found(err);
        bool built = atomic_load(&c->state) == 1;
        if (!built) {
            *out = (ckpt_tree_stat){.ino = ino,
                                    .type = CKPT_NODE_DIR,
                                    .nlink = 2,
                                    .mtime = c->mtime,
                                    .flags = CKPT_TREE_CHANGES};
            tree_acl a;
            tree_dir_acl(c->dir, &a);
            if (!atomic_load(&t->posix_acl)) tree_acl_plain(&a);
            out->uid = a.uid;
            out->gid = a.gid;
            out->mode = tree_acl_mode(&a, true);
        }
        put_ckpt(t, c);
        if (!built) return CKPT_OK;
    }
    obj o;
    CK_TRY(resolve(t, ino, &o, err));
    ckpt_status s = stat_obj(t, &o, ino, out, err);
    obj_put(t, &o);
    return s;
}

/* ------------------------------------------------------------------ lookup */

/* The inode of plain node `node` in the view of directory p (plain, .npy or a layout rank). */
static ckpt_ino view_ino(const obj *p, uint32_t node) {
    if (p->view == V_LAYOUT) return tree_layout_ino(p->c, p->li.spec, (uint32_t)p->li.rank, node);
    return tree_ino(p->slot, p->inst, node);
}

static bool parse_rank(const char *s, uint32_t n, int32_t *rank) {
    if (!*s || (s[0] == '0' && s[1])) return false;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return false;
        v = v * 10 + (uint64_t)(*s - '0');
        if (v >= n) return false;
    }
    *rank = (int32_t)v;
    return true;
}

static ckpt_status lookup_ino(ckpt_tree *t, const obj *p, const char *name, ckpt_ino *out,
                              ckpt_error *err) {
    size_t len = strlen(name);
    switch (p->kind) {
    case O_TOPROOT: {
        ckpt_status s = CKPT_E_NOTFOUND;
        pthread_mutex_lock(&t->lock);
        maybe_rescan(t); /* at most once a second: new steps and a new `latest` */
        {
            if (t->latest && strcmp(name, "latest") == 0) {
                *out = tree_latest_ino(t->latest);
                s = CKPT_OK;
            }
            for (uint32_t i = 0; i < t->norder && s != CKPT_OK; i++)
                if (strcmp(t->slots[t->order[i]]->name, name) == 0) {
                    *out = tree_ino(t->order[i], 0, 0);
                    s = CKPT_OK;
                }
            /* a step that failed to build is not listed, but named it is there and reads
             * as EIO with the reason (never as a missing directory): its newest slot */
            for (uint32_t i = t->nslots; i-- > 1 && s != CKPT_OK;)
                if (t->slots[i] && strcmp(t->slots[i]->name, name) == 0) {
                    if (atomic_load(&t->slots[i]->state) == 2) {
                        *out = tree_ino(i, 0, 0);
                        s = CKPT_OK;
                    }
                    break;
                }
        }
        pthread_mutex_unlock(&t->lock);
        return s == CKPT_OK ? s : not_found(err);
    }
    case O_DIR: {
        if (p->inst == INST_PLAIN && p->node == 0)
            for (uint32_t i = 0; i < NHIDDEN; i++)
                if (strcmp(name, hidden_dirs[i]) == 0) {
                    *out = tree_ino(p->slot, hidden_insts[i], 0);
                    return CKPT_OK;
                }
        uint32_t k = tree_find_kid(p->c, p->node, name, len);
        if (p->view == V_NPY) {
            if (k != UINT32_MAX && p->c->nodes[k].e) k = UINT32_MAX; /* files end in .npy */
            if (k == UINT32_MAX && len > 4 && strcmp(name + len - 4, ".npy") == 0) {
                k = tree_find_kid(p->c, p->node, name, len - 4);
                if (k != UINT32_MAX && (!p->c->nodes[k].e ||
                                        ckpt_entry_kind_of(p->c->nodes[k].e) != CKPT_ENTRY_TENSOR))
                    k = UINT32_MAX;
            }
        }
        if (k == UINT32_MAX) return not_found(err);
        *out = view_ino(p, k);
        return CKPT_OK;
    }
    case O_RAWDIR:
    case O_RAWSUB: /* the objects whose parent is this directory */
        for (uint32_t i = 0; i < p->c->nraw; i++) {
            const raw_file *f = &p->c->raw[i];
            if (f->parent == p->node && strcmp(f->name + f->base, name) == 0) {
                *out = tree_ino(p->slot, INST_RAW, i + 1);
                return CKPT_OK;
            }
        }
        return not_found(err);
    case O_STDIR:
        for (uint32_t i = 0; i < p->c->nst; i++)
            if (strcmp(p->c->st[i].name, name) == 0) {
                *out = tree_ino(p->slot, INST_ST, i + 1);
                return CKPT_OK;
            }
        return not_found(err);
    case O_PTDIR:
        for (uint32_t i = 0; i < p->c->npt; i++)
            if (strcmp(p->c->pt[i].name, name) == 0) {
                *out = tree_ino(p->slot, INST_TORCH, i + 1);
                return CKPT_OK;
            }
        return not_found(err);
    case O_LAYOUTDIR: {
        uint32_t spec;
        CK_TRY(tree_layout_spec(p->c, name, &spec, err));
        *out = tree_ino(p->slot, INST_LAYOUT, spec + 1);
        return CKPT_OK;
    }
    case O_SPECDIR: {
        int32_t rank;
        if (!parse_rank(name, p->li.n, &rank)) return not_found(err);
        *out = tree_layout_ino(p->c, p->li.spec, (uint32_t)rank, 0);
        return CKPT_OK;
    }
    default: return ck_fail(err, CKPT_E_INVAL, "not a directory");
    }
}

ckpt_status ckpt_tree_lookup(ckpt_tree *t, ckpt_ino parent, const char *name, ckpt_tree_stat *out,
                             ckpt_error *err) {
    CK_ERR_OR_LOCAL(err);
    obj p;
    CK_TRY(resolve(t, parent, &p, err));
    ckpt_ino ino = 0;
    ckpt_status s = lookup_ino(t, &p, name, &ino, err);
    if (s == CKPT_OK) s = ckpt_tree_getattr(t, ino, out, err);
    obj_put(t, &p);
    return s;
}

/* ------------------------------------------------------------------ readdir */

/* One directory entry with its attributes (an entry whose attributes cannot be had, e.g. a
 * checkpoint that fails to index, is still listed). */
static bool emit(ckpt_tree *t, ckpt_tree_dirent_fn fn, void *ctx, const char *name, ckpt_ino ino,
                 uint64_t next) {
    ckpt_tree_stat st;
    ckpt_error e = {0};
    if (ckpt_tree_getattr(t, ino, &st, &e) != CKPT_OK)
        st = (ckpt_tree_stat){.ino = ino, .type = CKPT_NODE_FILE, .nlink = 1};
    return fn(ctx, name, &st, next);
}

static ckpt_status readdir_obj(ckpt_tree *t, const obj *po, uint64_t cookie, ckpt_tree_dirent_fn fn,
                               void *ctx, ckpt_error *err) {
    const obj p = *po;
    ckpt_status s = CKPT_OK;
    switch (p.kind) {
    case O_TOPROOT: {
        pthread_mutex_lock(&t->lock);
        if (cookie == 0) maybe_rescan(t);
        uint64_t i = cookie;
        uint64_t base = t->latest ? 1 : 0;
        if (i == 0 && t->latest) {
            ckpt_ino latest = tree_latest_ino(t->latest);
            pthread_mutex_unlock(&t->lock);
            if (!emit(t, fn, ctx, "latest", latest, 1)) return s;
            pthread_mutex_lock(&t->lock);
            i = 1;
        }
        for (; i - base < t->norder; i++) {
            uint32_t slot = t->order[i - base]; /* c may be freed once the lock is let go */
            char name[256];
            snprintf(name, sizeof name, "%s", t->slots[slot]->name);
            pthread_mutex_unlock(&t->lock);
            bool more = emit(t, fn, ctx, name, tree_ino(slot, 0, 0), i + 1);
            pthread_mutex_lock(&t->lock);
            if (!more) break;
        }
        pthread_mutex_unlock(&t->lock);
        return s;
    }
    case O_DIR: {
        const tnode *n = &p.c->nodes[p.node];
        uint64_t base = (p.inst == INST_PLAIN && p.node == 0) ? NHIDDEN : 0;
        for (uint64_t i = cookie; i < base + n->nkids; i++) {
            if (i < base) {
                if (!emit(t, fn, ctx, hidden_dirs[i], tree_ino(p.slot, hidden_insts[i], 0), i + 1))
                    return s;
                continue;
            }
            uint32_t k = p.c->kid_ids[n->kids + (i - base)];
            const tnode *kn = &p.c->nodes[k];
            const char *name = kn->name;
            char *tmp = NULL;
            if (p.view == V_NPY && kn->e) {
                if (ckpt_entry_kind_of(kn->e) != CKPT_ENTRY_TENSOR) continue;
                size_t len = strlen(name);
                tmp = malloc(len + 5);
                if (!tmp) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
                memcpy(tmp, name, len);
                memcpy(tmp + len, ".npy", 5);
                name = tmp;
            }
            bool more = emit(t, fn, ctx, name, view_ino(&p, k), i + 1);
            free(tmp);
            if (!more) return s;
        }
        return s;
    }
    case O_RAWDIR:
    case O_RAWSUB:
        for (uint64_t i = cookie; i < p.c->nraw; i++) {
            const raw_file *f = &p.c->raw[i];
            if (f->parent != p.node) continue;
            if (!emit(t, fn, ctx, f->name + f->base, tree_ino(p.slot, INST_RAW, (uint32_t)i + 1),
                      i + 1))
                return s;
        }
        return s;
    case O_STDIR:
        for (uint64_t i = cookie; i < p.c->nst; i++)
            if (!emit(t, fn, ctx, p.c->st[i].name, tree_ino(p.slot, INST_ST, (uint32_t)i + 1),
                      i + 1))
                return s;
        return s;
    case O_PTDIR:
        for (uint64_t i = cookie; i < p.c->npt; i++)
            if (!emit(t, fn, ctx, p.c->pt[i].name, tree_ino(p.slot, INST_TORCH, (uint32_t)i + 1),
                      i + 1))
                return s;
        return s;
    case O_LAYOUTDIR: /* the specs in use so far (any other can be looked up) */
        for (uint64_t i = cookie; i < tree_layout_nspecs(p.c); i++) {
            layout_inst li;
            if (!tree_layout_spec_get(p.c, (uint32_t)i, &li)) return s;
            if (!emit(t, fn, ctx, li.def->name, tree_ino(p.slot, INST_LAYOUT, (uint32_t)i + 1),
                      i + 1))
                return s;
        }
        return s;
    case O_SPECDIR: /* every rank; nothing is stored per rank */
        for (uint64_t i = cookie; i < p.li.n; i++) {
            char name[16];
            snprintf(name, sizeof name, "%llu", (unsigned long long)i);
            if (!emit(t, fn, ctx, name, tree_layout_ino(p.c, p.li.spec, (uint32_t)i, 0), i + 1))
                return s;
        }
        return s;
    default: return ck_fail(err, CKPT_E_INVAL, "not a directory");
    }
}

ckpt_status ckpt_tree_readdir(ckpt_tree *t, ckpt_ino dir, uint64_t cookie, ckpt_tree_dirent_fn fn,
                              void *ctx, ckpt_error *err) {
    CK_ERR_OR_LOCAL(err);
    obj p;
    CK_TRY(resolve(t, dir, &p, err));
    ckpt_status s = readdir_obj(t, &p, cookie, fn, ctx, err);
    obj_put(t, &p);
    return s;
}

ckpt_status ckpt_tree_open_file(ckpt_tree *t, ckpt_ino ino, ckpt_error *err) {
    CK_ERR_OR_LOCAL(err);
    obj o;
    CK_TRY(resolve(t, ino, &o, err));
    ckpt_status s = CKPT_OK;
    if (o.kind == O_ENTRY && ckpt_entry_kind_of(o.e) != CKPT_ENTRY_TENSOR) {
        uint64_t len;
        s = tree_value_size(o.c, o.e, &len, err);
    }
    /* counted while still held: free_gone never frees a step with a file open */
    if (s == CKPT_OK && o.c && t->multi) atomic_fetch_add(&o.c->opens, 1);
    obj_put(t, &o);
    return s;
}

void ckpt_tree_release_file(ckpt_tree *t, ckpt_ino ino) {
    if (!t || !t->multi) return;
    uint32_t slot, inst, node;
    tree_ino_split(ino, &slot, &inst, &node);
    if (slot == 0) return; /* the top level: nothing counted */
    tree_ckpt *c = hold_slot(t, slot);
    if (!c) return;
    uint32_t n = atomic_load(&c->opens);
    while (n && !atomic_compare_exchange_weak(&c->opens, &n, n - 1)) {
    }
    put_ckpt(t, c);
}

int ckpt_tree_file_fd(ckpt_tree *t, ckpt_ino ino, uint64_t *size) {
    ckpt_error err = {0};
    obj o;
    if (!t || resolve(t, ino, &o, &err) != CKPT_OK) return -1;
    int fd = -1;
    if (o.kind == O_RAWFILE) {
        const raw_file *f = &o.c->raw[o.node - 1];
        fd = f->file_id >= 0 ? ckpt_reader_file_fd(o.c->r, (uint32_t)f->file_id, &err) : f->fd;
        if (size) *size = f->size;
    }
    obj_put(t, &o);
    return fd;
}

/* ------------------------------------------------------------------ sources */

typedef struct src_walk {
    ckpt_tree_source_fn fn;
    void *ctx;
    bool stopped;
} src_walk;

static void emit_path(src_walk *w, const char *dir, const char *name) {
    if (w->stopped) return;
    char path[8192];
    int n = name ? snprintf(path, sizeof path, "%s/%s", dir, name)
                 : snprintf(path, sizeof path, "%s", dir);
    /* a path cut short could name another file: "" is refused by every access check */
    if (n < 0 || (size_t)n >= sizeof path) path[0] = '\0';
    if (!w->fn(w->ctx, path)) w->stopped = true;
}

static ckpt_status sources_obj(ckpt_tree *t, const obj *po, ckpt_tree_source_fn fn, void *ctx,
                               ckpt_error *err) {
    const obj o = *po;
    src_walk w = {.fn = fn, .ctx = ctx};
    if (!o.c) {
        if (o.kind == O_TOPROOT) emit_path(&w, t->dir, NULL);
        return CKPT_OK;
    }
    tree_ckpt *c = o.c;
    size_t nfiles = ckpt_reader_num_files(c->r);
    /* the sources' directory (a torch.save file's: the one holding it) */
    const char *src_dir = ckpt_reader_dir(c->r);
    bool is_dir =
        o.kind != O_ENTRY && o.kind != O_RAWFILE && o.kind != O_STFILE && o.kind != O_PTFILE;
    if (is_dir) emit_path(&w, src_dir, NULL);
    if (o.kind == O_RAWSUB) emit_path(&w, src_dir, c->raw[o.node - 1].name); /* and itself */
    int32_t raw_id = o.kind == O_RAWFILE ? c->raw[o.node - 1].file_id : -1;
    /* a data file under .raw draws from itself only; everything else from the metadata */
    if (o.kind != O_RAWFILE || raw_id < 0)
        for (uint32_t i = 0; i < c->nraw; i++)
            if (c->raw[i].file_id < 0 && (o.kind == O_RAWFILE ? i == o.node - 1 : !c->raw[i].other))
                emit_path(&w, src_dir, c->raw[i].name);
    if (raw_id >= 0) emit_path(&w, src_dir, ckpt_reader_file_name(c->r, (uint32_t)raw_id));
    if (o.kind == O_STFILE || o.kind == O_PTFILE) {
        for (uint32_t i = 0; i < nfiles; i++)
            emit_path(&w, src_dir, ckpt_reader_file_name(c->r, i));
    } else if (o.kind == O_ENTRY) {
        /* each file once, in the order first used (a tensor may have thousands of chunks) */
        const ckpt_entry *e = o.e;
        uint8_t *seen = calloc(nfiles ? nfiles : 1, 1);
        if (!seen) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
        for (size_t i = 0; i <= e->nchunks; i++) {
            int32_t id = i < e->nchunks ? e->chunks[i].loc.file_id : e->loc.file_id;
            if (id < 0 || (size_t)id >= nfiles || seen[id]) continue;
            seen[id] = 1;
            emit_path(&w, src_dir, ckpt_reader_file_name(c->r, (uint32_t)id));
        }
        free(seen);
    }
    return CKPT_OK;
}

ckpt_status ckpt_tree_sources(ckpt_tree *t, ckpt_ino ino, ckpt_tree_source_fn fn, void *ctx,
                              ckpt_error *err) {
    obj o;
    CK_TRY(resolve(t, ino, &o, err));
    ckpt_status s = sources_obj(t, &o, fn, ctx, err);
    obj_put(t, &o);
    return s;
}

static bool check_one(void *ctx, const char *path) {
    void **a = ctx;
    const ckpt_tree_cred *cred = a[0];
    if (ckpt_path_may_read(path, cred)) return true;
    ck_fail(a[1], CKPT_E_ACCESS, "%s: uid %u may not read it", path, (unsigned)cred->uid);
    a[2] = (void *)1;
    return false;
}

ckpt_status ckpt_tree_may_read(ckpt_tree *t, ckpt_ino ino, const ckpt_tree_cred *cred,
                               ckpt_error *err) {
    ckpt_error local = {0};
    void *a[3] = {(void *)cred, err ? err : &local, NULL};
    CK_TRY(ckpt_tree_sources(t, ino, check_one, a, err));
    return a[2] ? CKPT_E_ACCESS : CKPT_OK;
}

ckpt_status ckpt_tree_readlink(ckpt_tree *t, ckpt_ino ino, char **target, ckpt_error *err) {
    CK_ERR_OR_LOCAL(err);
    obj o;
    CK_TRY(resolve(t, ino, &o, err));
    if (o.kind != O_LATEST) {
        obj_put(t, &o);
        return ck_fail(err, CKPT_E_INVAL, "not a symlink");
    }
    /* the step this inode of `latest` names (tree_latest_ino): fixed, so the kernel may cache
     * it; `latest` moving gives it a new inode */
    pthread_mutex_lock(&t->lock);
    const tree_ckpt *to = t->slots[o.node - TOP_NODE_LATEST];
    *target = to ? strdup(to->name) : NULL;
    pthread_mutex_unlock(&t->lock);
    if (!to) return not_found(err);
    return *target ? CKPT_OK : ck_fail(err, CKPT_E_NOMEM, "out of memory");
}

/* ------------------------------------------------------------------ xattrs */

static void add_shape(ck_strbuf *sb, int nd, const int64_t *shape) {
    ck_strbuf_addc(sb, '[');
    for (int d = 0; d < nd; d++)
        ck_strbuf_addf(sb, "%s%lld", d ? ", " : "", (long long)shape[d]);
    ck_strbuf_addc(sb, ']');
}

/* Fills sb with the value of xattr `name` of an entry file; false if it has none. */
static bool entry_xattr(const obj *o, const char *name, ck_strbuf *sb) {
    const ckpt_entry *e = o->e;
    bool tensor = ckpt_entry_kind_of(e) == CKPT_ENTRY_TENSOR;
    if (strcmp(name, "user.ckpt.key") == 0) return ck_strbuf_adds(sb, ckpt_entry_key(e)), true;
    if (!tensor) return false;
    if (strcmp(name, "user.ckpt.dtype") == 0)
        return ck_strbuf_adds(sb, ckpt_dtype_name(ckpt_entry_dtype(e))), true;
    if (strcmp(name, "user.ckpt.chunks") == 0) {
        size_t n = 0;
        for (size_t i = 0; i < ckpt_entry_num_chunks(e); i++) {
            ckpt_chunk_info ci;
            if (ckpt_entry_chunk(e, i, &ci) == CKPT_OK && ci.numel) n++;
        }
        return ck_strbuf_addf(sb, "%zu", n), true;
    }
    if (o->view != V_LAYOUT) {
        if (strcmp(name, "user.ckpt.shape") != 0) return false;
        add_shape(sb, ckpt_entry_ndim(e), ckpt_entry_shape(e));
        return true;
    }
    if (strcmp(name, "user.ckpt.global_shape") == 0) {
        add_shape(sb, ckpt_entry_ndim(e), ckpt_entry_shape(e));
        return true;
    }
    bool shape = strcmp(name, "user.ckpt.shape") == 0;
    ckpt_layout_shard *sh;
    if ((!shape && strcmp(name, "user.ckpt.offset") != 0) ||
        layout_shard(&o->li, e, &sh, NULL) != CKPT_OK)
        return false;
    /* the local shape, and torch's global offset (compute_local_shape_and_global_offset) */
    add_shape(sb, ckpt_entry_ndim(e),
              shape ? ckpt_layout_shard_local_shape(sh) : ckpt_layout_shard_global_offset(sh));
    ckpt_layout_shard_free(sh);
    return true;
}

static const char *const xattr_names[] = {"user.ckpt.key",    "user.ckpt.dtype",
                                          "user.ckpt.shape",  "user.ckpt.chunks",
                                          "user.ckpt.offset", "user.ckpt.global_shape"};

#define ACL_XATTR "system.posix_acl_access"

static bool obj_is_dir(const obj *o) {
    switch (o->kind) {
    case O_ENTRY:
    case O_RAWFILE:
    case O_STFILE:
    case O_PTFILE:
    case O_LATEST: return false;
    default: return true;
    }
}

/* The ACL o shows as the kernel's xattr value (out: TREE_ACL_XATTR_MAX bytes); 0: none. */
static size_t obj_acl_xattr(ckpt_tree *t, const obj *o, unsigned char *out) {
    if (o->kind == O_LATEST) return 0;
    tree_acl a;
    memset(&a, 0, sizeof a);
    obj_acl(t, o, &a);
    if (!atomic_load(&t->posix_acl)) return 0;
    return tree_acl_xattr(&a, obj_is_dir(o), out);
}

ckpt_status ckpt_tree_listxattr(ckpt_tree *t, ckpt_ino ino, char **names, size_t *len,
                                ckpt_error *err) {
    CK_ERR_OR_LOCAL(err);
    obj o;
    CK_TRY(resolve(t, ino, &o, err));
    ck_strbuf sb = CK_STRBUF_INIT, v = CK_STRBUF_INIT;
    ck_strbuf_add(&sb, "", 0);
    if (o.kind == O_ENTRY)
        for (size_t i = 0; i < sizeof xattr_names / sizeof *xattr_names; i++) {
            ck_strbuf_reset(&v);
            if (entry_xattr(&o, xattr_names[i], &v))
                ck_strbuf_add(&sb, xattr_names[i], strlen(xattr_names[i]) + 1);
        }
    unsigned char acl[TREE_ACL_XATTR_MAX];
    if (obj_acl_xattr(t, &o, acl)) ck_strbuf_add(&sb, ACL_XATTR, sizeof ACL_XATTR);
    ck_strbuf_release(&v);
    obj_put(t, &o);
    CK_TRY(ck_strbuf_status(&sb, "listxattr", err));
    *names = ck_strbuf_detach(&sb, len);
    return *names ? CKPT_OK : ck_fail(err, CKPT_E_NOMEM, "out of memory");
}

ckpt_status ckpt_tree_getxattr(ckpt_tree *t, ckpt_ino ino, const char *name, char **value,
                               size_t *len, ckpt_error *err) {
    CK_ERR_OR_LOCAL(err);
    obj o;
    CK_TRY(resolve(t, ino, &o, err));
    ck_strbuf sb = CK_STRBUF_INIT;
    ck_strbuf_add(&sb, "", 0);
    bool found = o.kind == O_ENTRY && entry_xattr(&o, name, &sb);
    if (strcmp(name, ACL_XATTR) == 0) {
        unsigned char acl[TREE_ACL_XATTR_MAX];
        size_t n = obj_acl_xattr(t, &o, acl);
        if (n) ck_strbuf_add(&sb, (const char *)acl, n);
        found = n > 0;
    }
    obj_put(t, &o);
    if (!found) {
        ck_strbuf_release(&sb);
        return ck_fail(err, CKPT_E_NOTFOUND, "no attribute %s", name);
    }
    CK_TRY(ck_strbuf_status(&sb, "getxattr", err));
    *value = ck_strbuf_detach(&sb, len);
    return *value ? CKPT_OK : ck_fail(err, CKPT_E_NOMEM, "out of memory");
}

/* ------------------------------------------------------------------ read */

static ckpt_status read_st(tree_read *x, tree_ckpt *c, st_file *f, uint64_t off, uint64_t len,
                           ckpt_error *err) {
    CK_TRY(tree_st_build(c, f, err));
    uint64_t dst = 0;
    if (off < f->header_len) {
        uint64_t n = f->header_len - off < len ? f->header_len - off : len;
        CK_TRY(tree_read_mem(x, 0, f->header + off, n, err));
        dst += n;
        off += n;
        len -= n;
    }
    /* first tensor whose data ends after off */
    size_t lo = 0, hi = f->ntensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (f->begin[mid] + ckpt_entry_nbytes(f->tensors[mid]) <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; len && i < f->ntensors; i++) {
        uint64_t b = f->begin[i], nb = ckpt_entry_nbytes(f->tensors[i]);
        if (off >= b + nb) continue;
        uint64_t n = b + nb - off < len ? b + nb - off : len;
        ckpt_status s = tree_read_tensor(x, f->tensors[i], NULL, NULL, off - b, n, dst, err);
        if (s != CKPT_OK) return s;
        dst += n;
        off += n;
        len -= n;
    }
    return CKPT_OK;
}

typedef struct pt_read {
    tree_read *x;
    uint64_t off; /* the reply's first byte in the archive */
} pt_read;

static ckpt_status pt_span(void *ctx, const ckpt_torchsave_span *s, ckpt_error *err) {
    pt_read *pr = ctx;
    uint64_t dst = s->offset - pr->off;
    if (s->mem) return tree_read_mem(pr->x, dst, s->mem, (size_t)s->len, err);
    return tree_read_tensor(pr->x, s->tensor, NULL, NULL, s->tensor_offset, s->len, dst, err);
}

static ckpt_status read_pt(tree_read *x, ckpt_tree *t, tree_ckpt *c, pt_file *f, uint64_t off,
                           uint64_t len, ckpt_error *err) {
    CK_TRY(tree_pt_build(c, f, &t->opts, err));
    pt_read pr = {x, off};
    return ckpt_torchsave_map(f->ts, off, len, pt_span, &pr, err);
}

static ckpt_status read_obj(ckpt_tree *t, const obj *po, ckpt_ino ino, uint64_t off, size_t len,
                            size_t max_segs, size_t min_fd_run, ckpt_tree_scratch *s,
                            const ckpt_tree_seg **segs, size_t *nsegs, ckpt_error *err);

void ckpt_tree_read_end(ckpt_tree *t, ckpt_tree_scratch *s) {
    if (!s || !s->held) return;
    put_ckpt(t, s->held);
    s->held = NULL;
}

ckpt_status ckpt_tree_read(ckpt_tree *t, ckpt_ino ino, uint64_t off, size_t len, size_t max_segs,
                           size_t min_fd_run, ckpt_tree_scratch *s, const ckpt_tree_seg **segs,
                           size_t *nsegs, ckpt_error *err) {
    CK_ERR_OR_LOCAL(err);
    *segs = NULL;
    *nsegs = 0;
    ckpt_tree_read_end(t, s);
    obj o;
    CK_TRY(resolve(t, ino, &o, err));
    ckpt_status rs = read_obj(t, &o, ino, off, len, max_segs, min_fd_run, s, segs, nsegs, err);
    if (rs == CKPT_OK && *nsegs && o.c && t->multi)
        s->held = o.c; /* its fds serve the reply: given back by ckpt_tree_read_end */
    else
        obj_put(t, &o);
    return rs;
}

static ckpt_status read_obj(ckpt_tree *t, const obj *po, ckpt_ino ino, uint64_t off, size_t len,
                            size_t max_segs, size_t min_fd_run, ckpt_tree_scratch *s,
                            const ckpt_tree_seg **segs, size_t *nsegs, ckpt_error *err) {
    const obj o = *po;
    ckpt_tree_stat st;
    CK_TRY(stat_obj(t, &o, ino, &st, err));
    if (st.type != CKPT_NODE_FILE) return ck_fail(err, CKPT_E_INVAL, "not a file");
    if (o.kind == O_ENTRY && ckpt_entry_kind_of(o.e) != CKPT_ENTRY_TENSOR)
        /* a value that cannot be rendered has size 0 in getattr; reading it is an error */
        CK_TRY(tree_value_size(o.c, o.e, &st.size, err));
    if (off >= st.size || !len) return CKPT_OK;
    if (len > st.size - off) len = (size_t)(st.size - off);
    if (s->cap < len) {
        uint8_t *b = realloc(s->buf, len);
        if (!b) return ck_fail(err, CKPT_E_NOMEM, "out of memory for a %zu-byte read", len);
        s->buf = b;
        s->cap = len;
    }
    tree_read x = {.c = o.c,
                   .r = o.c->r,
                   .s = s,
                   .len = len,
                   .max_segs = max_segs,
                   .min_run = min_fd_run ? min_fd_run : 1,
                   .mem_only = max_segs == 0};
    ckpt_status rs = CKPT_OK;
    switch (o.kind) {
    case O_ENTRY:
        if (ckpt_entry_kind_of(o.e) != CKPT_ENTRY_TENSOR) {
            /* held while copied: another thread may drop it from the cache meanwhile */
            const tree_text *text = tree_value_get(o.c, o.e, err);
            if (!text) return err ? err->code : CKPT_E_IO;
            size_t tl = text->len;
            if (off < tl) {
                if (len > tl - off) len = tl - (size_t)off, x.len = len;
                rs = tree_read_mem(&x, 0, text->data + off, len, err);
            }
            tree_value_put(o.c, text);
            if (off >= tl) return CKPT_OK;
        } else if (o.view == V_PLAIN) {
            rs = tree_read_tensor(&x, o.e, NULL, NULL, off, len, 0, err);
        } else if (o.view == V_NPY) {
            char hdr[TREE_NPY_HEADER_MAX];
            uint64_t hl = tree_npy_header(o.e, hdr), dst = 0;
            if (off < hl) {
                uint64_t n = hl - off < len ? hl - off : len;
                rs = tree_read_mem(&x, 0, hdr + off, n, err);
                dst = n;
            }
            uint64_t toff = off < hl ? 0 : off - hl;
            if (rs == CKPT_OK)
                rs = tree_read_tensor(&x, o.e, NULL, NULL, toff, len - dst, dst, err);
        } else {
            rs = read_layout(&x, &o.li, o.e, off, len, err);
        }
        break;
    case O_RAWFILE: {
        const raw_file *f = &o.c->raw[o.node - 1];
        int fd = f->fd;
        if (f->file_id >= 0) fd = ckpt_reader_file_fd(o.c->r, (uint32_t)f->file_id, err);
        if (fd < 0) return err ? err->code : CKPT_E_IO;
        rs = tree_read_fd(&x, 0, fd, f->name, off, len, err);
        break;
    }
    case O_STFILE: rs = read_st(&x, o.c, &o.c->st[o.node - 1], off, len, err); break;
    case O_PTFILE: rs = read_pt(&x, t, o.c, &o.c->pt[o.node - 1], off, len, err); break;
    default: return ck_fail(err, CKPT_E_INVAL, "not a file");
    }
    CK_TRY(rs);
    CK_TRY(tree_read_finish(&x, nsegs, err));
    *segs = s->segs;
    return CKPT_OK;
}
