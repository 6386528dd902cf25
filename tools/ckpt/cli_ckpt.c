/* cli_ckpt.c — opening what a `ckpt` command names: a checkpoint or RUN@STEP of a run
 * directory, an entry by path or key, and describing entries (kinds, sizes, chunks). */
#include "cli.h"

#include "ckpt_save.h"
#include "ckpt_tree.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct step_names {
    char buf[512];
    size_t len, n;
} step_names;

static bool add_step(void *ctx, const char *name, const ckpt_tree_stat *st, uint64_t next) {
    (void)next;
    step_names *s = ctx;
    if (st->type != CKPT_NODE_DIR) return true; /* `latest` */
    if (s->len < sizeof s->buf - 64)
        s->len += (size_t)snprintf(s->buf + s->len, sizeof s->buf - s->len, "%s%s",
                                   s->n ? ", " : "", name);
    else if (s->len < sizeof s->buf - 4)
        s->len += (size_t)snprintf(s->buf + s->len, sizeof s->buf - s->len, ", ...");
    s->n++;
    return true;
}

static void report_leftover(void *ctx, const char *name, ckpt_save_leftover_kind kind,
                            double idle_s, uint64_t bytes) {
    const char *dir = ctx;
    char hs[32];
    cli_human_size(bytes, hs, sizeof hs);
    if (kind == CKPT_SAVE_LEFTOVER_DELETING)
        fprintf(stderr,
                "ckpt: %s/%s: a step retention was deleting when it stopped (%s); safe to "
                "remove\n",
                dir, name, hs);
    else
        fprintf(stderr,
                "ckpt: %s/%s: staging directory of a save that did not finish (%s, nothing "
                "written for %.1f h)%s\n",
                dir, name, hs, idle_s / 3600,
                idle_s >= CKPT_SAVE_STALE_S ? "; safe to remove, and the saver's retention will"
                                            : "; remove it once no save is running");
}

void cli_hint_steps(const char *dir) {
    ckpt_save_leftovers(dir, report_leftover, (void *)dir, NULL);
    ckpt_tree *t = NULL;
    if (ckpt_tree_open(dir, NULL, &t, NULL) != CKPT_OK) return;
    step_names s = {.len = 0};
    char *latest = NULL;
    ckpt_tree_stat st;
    if (!ckpt_tree_reader(t) &&
        ckpt_tree_readdir(t, CKPT_TREE_ROOT, 0, add_step, &s, NULL) == CKPT_OK && s.n &&
        ckpt_tree_lookup(t, CKPT_TREE_ROOT, "latest", &st, NULL) == CKPT_OK &&
        ckpt_tree_readlink(t, st.ino, &latest, NULL) == CKPT_OK) {
        size_t len = strlen(dir);
        while (len > 1 && dir[len - 1] == '/')
            len--;
        fprintf(stderr,
                "ckpt: %s is a directory of %zu checkpoint%s (%s): give one of them, e.g. "
                "%.*s/%s (the latest)\n",
                dir, s.n, s.n == 1 ? "" : "s", s.buf, (int)len, dir, latest);
    }
    free(latest);
    ckpt_tree_free(t);
}

const char *cli_step_dir(const char *arg, cli_dir *out) {
    struct stat st;
    const char *at = strrchr(arg, '@');
    if (!at || stat(arg, &st) == 0) return arg;
    size_t rl = (size_t)(at - arg);
    const char *step = at + 1;
    if (!rl || !*step || strchr(step, '/')) {
        cli_error("%s: no such checkpoint (RUN@STEP wants a run directory and a step name)", arg);
        return NULL;
    }
    char run[4096];
    if (rl >= sizeof run) {
        cli_error("%s: path too long", arg);
        return NULL;
    }
    memcpy(run, arg, rl);
    run[rl] = '\0';
    char *name = NULL;
    if (strcmp(step, "latest") == 0) {
        ckpt_error err = {0};
        if (ckpt_run_latest(run, true, &name, &err) != CKPT_OK) {
            if (err.code == CKPT_E_NOTFOUND)
                cli_error("%s: %s holds no complete step to be the latest", arg, run);
            else
                cli_error("%s: %s", arg, err.message);
            return NULL;
        }
        step = name;
    }
    int n = snprintf(out->buf, sizeof out->buf, "%s/%s", run, step);
    free(name);
    if (n < 0 || (size_t)n >= sizeof out->buf) {
        cli_error("%s: path too long", arg);
        return NULL;
    }
    return out->buf;
}

ckpt_reader *cli_open(const char *dir) {
    ckpt_reader *r = NULL;
    ckpt_error err = {0};
    if (ckpt_reader_open(dir, NULL, &r, &err) != CKPT_OK) {
        cli_error("%s", err.message[0] ? err.message : ckpt_strerror(err.code));
        if (err.code == CKPT_E_NOTFOUND) cli_hint_steps(dir);
        return NULL;
    }
    return r;
}

const ckpt_entry *cli_find(const ckpt_reader *r, const char *name, cli_find_by by) {
    const ckpt_entry *k = by == CLI_BY_PATH ? NULL : ckpt_reader_find_key(r, name);
    const ckpt_entry *p = by == CLI_BY_KEY ? NULL : ckpt_reader_find_path(r, name);
    if (k && p && k != p) {
        cli_error("%s: '%s' is ambiguous: the flat key of '%s' and the tree path of '%s' "
                  "(the key '%s'); say --key or --path",
                  ckpt_reader_dir(r), name, ckpt_entry_path(k), ckpt_entry_path(p),
                  ckpt_entry_key(p));
        return NULL;
    }
    if (!k && !p)
        cli_error("%s: no entry with %s '%s'", ckpt_reader_dir(r),
                  by == CLI_BY_KEY    ? "flat key"
                  : by == CLI_BY_PATH ? "tree path"
                                      : "key or path",
                  name);
    return k ? k : p;
}

const char *cli_kind_name(ckpt_entry_kind k) {
    return k == CKPT_ENTRY_TENSOR ? "tensor" : k == CKPT_ENTRY_OBJECT ? "object" : "?";
}

uint64_t cli_entry_bytes(const ckpt_entry *e) {
    if (ckpt_entry_kind_of(e) == CKPT_ENTRY_TENSOR) return ckpt_entry_nbytes(e);
    ckpt_chunk_info ci;
    if (ckpt_entry_chunk(e, 0, &ci) == CKPT_OK) return ci.length;
    return 0;
}

static void dims_str(int nd, const int64_t *off, const int64_t *sz, char *buf, size_t size) {
    size_t o = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < nd && o < size; d++)
        o += (size_t)snprintf(buf + o, size - o, "%s%lld:%lld", d ? ", " : "", (long long)off[d],
                              (long long)(off[d] + sz[d]));
    if (o < size) snprintf(buf + o, size - o, "]");
}

void cli_print_chunks(FILE *out, const ckpt_reader *r, const ckpt_entry *e) {
    char box[1024];
    bool obj = ckpt_entry_kind_of(e) == CKPT_ENTRY_OBJECT;
    size_t n = obj ? 1 : ckpt_entry_num_chunks(e);
    for (size_t i = 0; i < n; i++) {
        ckpt_chunk_info ci;
        if (ckpt_entry_chunk(e, i, &ci) != CKPT_OK) continue;
        if (obj) {
            fprintf(out, "    item");
        } else {
            dims_str(ckpt_entry_ndim(e), ci.offsets, ci.sizes, box, sizeof box);
            fprintf(out, "    chunk %zu %s", i, box);
        }
        if (ci.file_id >= 0) {
            fprintf(out, " %s offset %llu length %llu",
                    ckpt_reader_file_name(r, (uint32_t)ci.file_id),
                    (unsigned long long)ci.file_offset, (unsigned long long)ci.length);
            if (ci.transforms) fprintf(out, " transforms %s", ci.transforms);
        } else if (!obj && ci.numel == 0) {
            fprintf(out, " (empty, not stored)");
        } else {
            fprintf(out, " (not located: %s)", ci.problem ? ci.problem : "unknown");
        }
        fputc('\n', out);
    }
}
