/* torchfile.c — torch.save files of a reader's entries (ckpt_save.h, "torch.save files"):
 * the nested state_dict rebuilt from the entries' paths as DCP's set_element does, pickled
 * with the saver's pickle writer (tensors as save_pickle_tensor, values as
 * save_value_pickle), and an archive laid out record by record with the zip writer's piece
 * functions, so that any byte range maps to rendered headers, the pickle, or a byte range of
 * one tensor.  The container tree is temporary; what stays is the pickle, one row per
 * record and the list of what was left out. */
#include "ckpt_save.h"

#include "save/archive.h"
#include "save/crc32.h"
#include "save/save_i.h"
#include "save/zip_writer.h"
#include "slice/linear.h"
#include "util/error.h"
#include "util/htab.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned long long ull;

#define TS_ROOT "archive"
#define TS_BLOCK ((uint64_t)16 << 20)
/* A list position beyond this is not padded with Nones (DCP would; the entry is left out). */
#define TS_MAX_LIST_INDEX (1u << 24)
/* weights_only knows LONG1 only: ints of fewer than 256 bytes (decimal digits, safely). */
#define TS_MAX_BIGINT_DIGITS 600u
/* Tensors inside non-tensor values are kept in memory (read when the archive is laid out):
 * at most this many bytes of them per archive; a value over the budget is left out. */
#define TS_MAX_EMBEDDED ((uint64_t)64 << 20)
/* A tensor record's CRC-32 for ranges (ckpt_torchsave_map) is computed reading this many
 * bytes at a time. */
#define TS_CRC_BLOCK ((size_t)4 << 20)

/* ------------------------------------------------------------------ records */

/* The small records, as torch writes them (archive.c's common and tail records). */
enum { REC_PKL, REC_FORMAT, REC_ALIGN, REC_BYTEORDER, REC_VERSION, REC_SERIAL, NSMALL };
static const char *const small_names[NSMALL] = {
    "data.pkl",  ".format_version", ".storage_alignment",
    "byteorder", "version",         ".data/serialization_id"};

typedef struct ts_rec {
    uint64_t lho;  /* local header offset */
    uint64_t data; /* first data byte */
    uint64_t size;
    uint64_t cdo;        /* central directory entry offset */
    const ckpt_entry *e; /* tensor records: data/<key> */
    const uint8_t *mem;  /* small records */
    uint32_t crc;        /* valid when crc_state is CRC_KNOWN (under crc_lock for e records) */
    uint32_t key;        /* storages: the key; small: index in small_names */
    bool storage;        /* data/<key>: an entry's tensor (e), or an embedded one (mem) */
    uint8_t crc_state;   /* CRC_*: records in memory are known from the layout on */
} ts_rec;

enum { CRC_UNKNOWN, CRC_BUSY, CRC_KNOWN };

typedef struct ts_skip {
    const ckpt_entry *e;
    char *why;
} ts_skip;

struct ckpt_torchsave {
    ckpt_reader *r;
    char *pkl;
    size_t pkl_len;
    char serial[41];
    ts_rec *recs; /* small records first in archive order: pkl, format, align, byteorder,
                     tensors..., version, serial */
    size_t nrecs;
    size_t ntensors, nvalues;
    uint64_t tensor_bytes;
    uint64_t cd_off, cd_size, size;
    ts_skip *skips;
    size_t nskips, skips_cap;
    uint8_t **owned; /* the bytes of embedded tensors */
    size_t nowned;
    uint64_t embedded_bytes;
    /* The CRC-32s of the entries' tensor records, computed when a range first needs one
     * (its data descriptor or central directory entry) and kept: crc_state and crc of those
     * records change under crc_lock; a thread that finds one CRC_BUSY waits on crc_cond. */
    pthread_mutex_t crc_lock;
    pthread_cond_t crc_cond;
    bool crc_sync;             /* crc_lock and crc_cond were initialised */
    bool zero_crc;             /* ckpt_torchsave_options.zero_crc */
    uint64_t max_value_memory; /* ckpt_torchsave_options.max_value_memory */
};

static size_t rec_name(const ts_rec *r, bool tensor, char *out) {
    int n = tensor ? snprintf(out, ZW_NAME_MAX + 1, TS_ROOT "/data/%u", r->key)
                   : snprintf(out, ZW_NAME_MAX + 1, TS_ROOT "/%s", small_names[r->key]);
    return (size_t)n;
}

static bool rec_is_tensor(const ts_rec *r) { return r->storage; }

/* ------------------------------------------------------------------ the container tree */

enum { N_DICT = 1, N_LIST, N_TENSOR, N_VALUE };
#define NONE_KID UINT32_MAX

typedef struct tnode {
    uint8_t kind;
    bool key_int;    /* as a dict key */
    uint32_t parent; /* dict children only (lookup); UINT32_MAX otherwise */
    const char *key; /* dict key text (decimal for int keys) */
    size_t key_len;
    int64_t key_i;
    uint32_t *kids; /* dict: insertion order; list: by position (NONE_KID = None) */
    uint32_t nkids, cap;
    const ckpt_entry *e;
    ckpt_save_value *v; /* N_VALUE: a value without tensors */
    ckpt_object *o;     /* N_VALUE: a value holding tensors (v NULL) */
} tnode;

typedef struct builder {
    ckpt_torchsave *t;
    tnode *nodes;
    uint32_t n, cap;
    ck_htab by_key; /* (parent, key) -> dict child */
    uint32_t root;  /* UINT32_MAX until the first entry */
} builder;

typedef struct elem {
    const char *s;
    size_t len;
    bool is_int;   /* pickled as an int: a list position, or an int dict key */
    bool dict_int; /* an int dict key (ckpt_entry_path_elem_is_int_key): never a list */
    int64_t i;
} elem;

/* The container an element makes of its parent when it is the first to need one. */
static uint8_t container_for(const elem *k) { return k->is_int && !k->dict_int ? N_LIST : N_DICT; }

static uint64_t key_hash(uint32_t parent, const elem *k) {
    uint64_t seed = ((uint64_t)parent << 1 | (k->is_int ? 1u : 0u)) * 0x9e3779b97f4a7c15ull;
    return ck_hash_bytes(k->s, k->len, seed);
}

typedef struct key_probe {
    const builder *b;
    uint32_t parent;
    const elem *k;
} key_probe;

static bool key_eq(const void *ctx, uint64_t v) {
    const key_probe *p = ctx;
    const tnode *n = &p->b->nodes[v];
    return n->parent == p->parent && n->key_int == p->k->is_int && n->key_len == p->k->len &&
           memcmp(n->key, p->k->s, n->key_len) == 0;
}

static ckpt_status new_node(builder *b, uint8_t kind, uint32_t *out, ckpt_error *err) {
    if (b->n == b->cap) {
        uint32_t cap = b->cap ? b->cap * 2 : 64;
        tnode *m = realloc(b->nodes, (size_t)cap * sizeof *m);
        if (!m) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
        b->nodes = m;
        b->cap = cap;
    }
    b->nodes[b->n] = (tnode){.kind = kind, .parent = UINT32_MAX};
    *out = b->n++;
    return CKPT_OK;
}

static ckpt_status push_kid(builder *b, uint32_t at, uint32_t kid, ckpt_error *err) {
    tnode *n = &b->nodes[at];
    if (n->nkids == n->cap) {
        uint32_t cap = n->cap ? n->cap * 2 : 4;
        uint32_t *m = realloc(n->kids, (size_t)cap * sizeof *m);
        if (!m) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
        n->kids = m;
        n->cap = cap;
    }
    n->kids[n->nkids++] = kid;
    return CKPT_OK;
}

/* List `at` padded with None up to position i (inclusive). */
static ckpt_status list_extend(builder *b, uint32_t at, int64_t i, ckpt_error *err) {
    while ((int64_t)b->nodes[at].nkids <= i)
        CK_TRY(push_kid(b, at, NONE_KID, err));
    return CKPT_OK;
}

static uint32_t dict_find(const builder *b, uint32_t at, const elem *k) {
    key_probe p = {b, at, k};
    uint64_t v;
    return ck_htab_find(&b->by_key, key_hash(at, k), key_eq, &p, &v) ? (uint32_t)v : UINT32_MAX;
}

static ckpt_status dict_add(builder *b, uint32_t at, const elem *k, uint32_t kid, ckpt_error *err) {
    tnode *n = &b->nodes[kid];
    n->parent = at;
    n->key = k->s;
    n->key_len = k->len;
    n->key_int = k->is_int;
    n->key_i = k->i;
    if (!ck_htab_insert(&b->by_key, key_hash(at, k), kid))
        return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    return push_kid(b, at, kid, err);
}

/* Outcome of placing an entry: CKPT_OK, or a conflict (*why set) that leaves it out. */
static ckpt_status place(builder *b, const elem *el, size_t m, uint32_t leaf, const char **why,
                         ckpt_error *err) {
    *why = NULL;
    if (m == 0) { /* the entry is the root itself */
        if (b->root != UINT32_MAX) {
            *why = "its path is where another entry's container is";
            return CKPT_OK;
        }
        b->root = leaf;
        return CKPT_OK;
    }
    if (b->root == UINT32_MAX) {
        /* the root's kind is what DCP's set_element makes for the first key under it (a
         * whole state_dict is always a dict: ckpt_torchsave_create makes it one first) */
        CK_TRY(new_node(b, container_for(&el[0]), &b->root, err));
    }
    uint32_t cur = b->root;
    for (size_t i = 0; i < m; i++) {
        const elem *k = &el[i];
        bool last = i + 1 == m;
        uint8_t kind = b->nodes[cur].kind;
        if (kind != N_DICT && kind != N_LIST) {
            *why = "its path passes through another entry's value";
            return CKPT_OK;
        }
        uint32_t next;
        if (kind == N_LIST) {
            if (!k->is_int || k->dict_int) {
                *why = "a dict key under a list";
                return CKPT_OK;
            }
            if (k->i < 0 || k->i >= TS_MAX_LIST_INDEX) {
                *why = "a list position out of range";
                return CKPT_OK;
            }
            CK_TRY(list_extend(b, cur, k->i, err));
            next = b->nodes[cur].kids[k->i];
            if (last) {
                if (next != NONE_KID) {
                    *why = "another entry has the same path";
                    return CKPT_OK;
                }
                b->nodes[cur].kids[k->i] = leaf;
                return CKPT_OK;
            }
            if (next == NONE_KID) {
                CK_TRY(new_node(b, container_for(&el[i + 1]), &next, err));
                b->nodes[cur].kids[k->i] = next;
            }
        } else {
            next = dict_find(b, cur, k);
            if (last) {
                if (next != UINT32_MAX) {
                    *why = "another entry has the same path";
                    return CKPT_OK;
                }
                return dict_add(b, cur, k, leaf, err);
            }
            if (next == UINT32_MAX) {
                CK_TRY(new_node(b, container_for(&el[i + 1]), &next, err));
                CK_TRY(dict_add(b, cur, k, next, err));
            }
        }
        cur = next;
    }
    return CKPT_OK;
}

static void builder_release(builder *b) {
    for (uint32_t i = 0; i < b->n; i++) {
        free(b->nodes[i].kids);
        ckpt_save_value_free(b->nodes[i].v);
        ckpt_object_free(b->nodes[i].o);
    }
    free(b->nodes);
    ck_htab_release(&b->by_key);
}

/* ------------------------------------------------------------------ entries */

static ckpt_status skip(ckpt_torchsave *t, const ckpt_entry *e, const char *fmt, const char *arg,
                        ckpt_error *err) {
    if (t->nskips == t->skips_cap) {
        size_t cap = t->skips_cap ? t->skips_cap * 2 : 16;
        ts_skip *m = realloc(t->skips, cap * sizeof *m);
        if (!m) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
        t->skips = m;
        t->skips_cap = cap;
    }
    char *why = NULL;
    if (asprintf(&why, fmt, arg) < 0) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    t->skips[t->nskips++] = (ts_skip){e, why};
    return CKPT_OK;
}

typedef struct value_scan {
    uint64_t tensor_bytes; /* of the tensors it holds */
    size_t ntensors;
} value_scan;

/* What torch.load(weights_only=True) refuses in a value (or what this writer cannot write
 * again), or NULL; counts the tensors it holds.  `hashed`: inside a dict key or a set. */
static const char *weights_only_refuses(const ckpt_value *v, unsigned depth, bool hashed,
                                        value_scan *sc) {
    if (depth > 10000) return "nesting too deep";
    size_t len = 0;
    switch (ckpt_value_type_of(v)) {
    case CKPT_VALUE_BYTES:
        ckpt_value_str(v, &len);
        return len ? NULL : "empty bytes (pickled as builtins.bytes(), not allowed)";
    case CKPT_VALUE_BIGINT: {
        const char *s = ckpt_value_str(v, NULL);
        return s && strlen(s) > TS_MAX_BIGINT_DIGITS ? "an int of 256 bytes or more" : NULL;
    }
    case CKPT_VALUE_TENSOR: {
        if (hashed) return "a tensor as a dict key or in a set";
        size_t isz = ckpt_dtype_itemsize(ckpt_value_tensor_dtype(v));
        if (!isz) return "a tensor of an unknown dtype";
        uint64_t n = isz;
        const int64_t *shape = ckpt_value_tensor_shape(v);
        for (int d = 0; d < ckpt_value_tensor_ndim(v); d++) {
            if (shape[d] < 0 || (shape[d] && n > TS_MAX_EMBEDDED / (uint64_t)shape[d]))
                return "a tensor larger than the 64 MiB kept in memory";
            n *= (uint64_t)shape[d];
        }
        sc->tensor_bytes += n;
        sc->ntensors++;
        return NULL;
    }
    case CKPT_VALUE_OBJECT: return "an object of another class";
    case CKPT_VALUE_SET:
        if (ckpt_value_set_frozen(v)) return "a frozenset";
        hashed = true;
        /* fall through */
    case CKPT_VALUE_LIST:
    case CKPT_VALUE_TUPLE:
        for (size_t i = 0; i < ckpt_value_len(v); i++) {
            const char *w = weights_only_refuses(ckpt_value_item(v, i), depth + 1, hashed, sc);
            if (w) return w;
        }
        return NULL;
    case CKPT_VALUE_DICT:
        for (size_t i = 0; i < ckpt_value_len(v); i++) {
            const char *w = weights_only_refuses(ckpt_value_dict_key(v, i), depth + 1, true, sc);
            if (!w) w = weights_only_refuses(ckpt_value_dict_val(v, i), depth + 1, hashed, sc);
            if (w) return w;
        }
        return NULL;
    default: return NULL;
    }
}

/* The entry's value: a saver value (*v), or, when it holds tensors, the loaded object (*o),
 * or neither, with the entry recorded as left out (*st says whether something worse
 * happened). */
static void load_value(ckpt_torchsave *t, const ckpt_entry *e, ckpt_save_value **v, ckpt_object **o,
                       ckpt_status *st, ckpt_error *err) {
    *st = CKPT_OK;
    *v = NULL;
    *o = NULL;
    ckpt_object *obj = NULL;
    ckpt_error lerr = {0};
    ckpt_object_options oo = {.max_memory = t->max_value_memory};
    ckpt_status s = ckpt_object_load_with(t->r, e, &oo, &obj, &lerr);
    if (s == CKPT_E_IO || s == CKPT_E_NOMEM) {
        if (err) *err = lerr;
        *st = s;
        return;
    }
    if (s != CKPT_OK) {
        *st = skip(t, e, "cannot be decoded: %s", lerr.message, err);
        return;
    }
    value_scan sc = {0};
    const char *why = weights_only_refuses(ckpt_object_root(obj), 0, false, &sc);
    if (!why && sc.ntensors) {
        if (sc.tensor_bytes > TS_MAX_EMBEDDED - t->embedded_bytes) {
            why = "tensors beyond the 64 MiB of embedded tensors kept in memory";
        } else {
            t->embedded_bytes += sc.tensor_bytes;
            *o = obj;
            return;
        }
    }
    if (!why) {
        *v = ckpt_save_value_from(ckpt_object_root(obj), &why);
        if (!*v && !why) why = "a dict key repeats (or out of memory)";
    }
    ckpt_object_free(obj);
    if (!*v) *st = skip(t, e, "the value holds %s", why, err);
}

/* Path elements of e after the first k (its flat key as the one element when it has no
 * planner_data path). */
static ckpt_status entry_elems(const ckpt_entry *e, size_t k, elem **el, size_t *cap, size_t *m,
                               ckpt_error *err) {
    size_t n = ckpt_entry_path_len(e);
    bool flat = n == 0;
    if (flat) n = 1;
    *m = n > k ? n - k : 0;
    if (*m > *cap) {
        elem *p = realloc(*el, *m * sizeof *p);
        if (!p) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
        *el = p;
        *cap = *m;
    }
    for (size_t i = 0; i < *m; i++) {
        const char *s = flat ? ckpt_entry_key(e) : ckpt_entry_path_elem(e, k + i);
        elem *x = &(*el)[i];
        *x = (elem){.s = s, .len = strlen(s)};
        bool int_key = !flat && ckpt_entry_path_elem_is_int_key(e, k + i);
        if (!flat && (int_key || ckpt_entry_path_elem_is_int(e, k + i))) {
            char *end;
            errno = 0;
            long long v = strtoll(s, &end, 10);
            if (*s && !*end && !errno) {
                x->is_int = true;
                x->dict_int = int_key;
                x->i = v;
            }
        }
    }
    return CKPT_OK;
}

/* e is selected: under `under` (the caller checked), at the root when asked, named by no
 * exclude prefix. */
static bool entry_selected(const ckpt_entry *e, const ckpt_torchsave_options *o) {
    if (!o) return true;
    if (o->root_only && !ckpt_entry_at_root(e)) return false;
    for (size_t i = 0; i < o->num_exclude; i++)
        if (ckpt_entry_matches(e, o->exclude[i])) return false;
    return true;
}

/* ------------------------------------------------------------------ optimizer by id */

static uint32_t dict_get(const builder *b, uint32_t at, const char *key) {
    elem k = {.s = key, .len = strlen(key)};
    return dict_find(b, at, &k);
}

typedef struct fqn_probe {
    const char **fqns;
    const char *s;
    size_t len;
} fqn_probe;

static bool fqn_eq(const void *ctx, uint64_t v) {
    const fqn_probe *p = ctx;
    return strlen(p->fqns[v]) == p->len && memcmp(p->fqns[v], p->s, p->len) == 0;
}

typedef struct id_kid {
    int64_t id;
    uint32_t node;
} id_kid;

static int by_id_cmp(const void *a, const void *b) {
    int64_t x = ((const id_kid *)a)->id, y = ((const id_kid *)b)->id;
    return x < y ? -1 : x > y;
}

static ckpt_status not_optim(const char *under, const char *what, ckpt_error *err) {
    return ck_fail(err, CKPT_E_FORMAT,
                   "'%s' is not an optimizer state_dict keyed by parameter FQN: %s",
                   *under ? under : "(the root)", what);
}

/* Rewrites the tree rooted at b->root (an FQN-keyed optimizer state_dict) into
 * torch.optim's form: ids in param_groups order. */
static ckpt_status number_params(builder *b, const char *under, ckpt_error *err) {
    uint32_t root = b->root;
    if (b->nodes[root].kind != N_DICT) return not_optim(under, "not a dict", err);
    uint32_t st = dict_get(b, root, "state"), pg = dict_get(b, root, "param_groups");
    if (pg == UINT32_MAX || b->nodes[pg].kind != N_LIST)
        return not_optim(under, "no param_groups list", err);
    if (st != UINT32_MAX && b->nodes[st].kind != N_DICT)
        return not_optim(under, "its state is not a dict", err);
    if (st == UINT32_MAX) { /* no parameter has state yet: torch.optim still wants "state" */
        static const elem state_key = {.s = "state", .len = 5};
        CK_TRY(new_node(b, N_DICT, &st, err));
        CK_TRY(dict_add(b, root, &state_key, st, err));
        tnode *r = &b->nodes[root]; /* first, as torch.optim's state_dict has it */
        memmove(r->kids + 1, r->kids, (r->nkids - 1) * sizeof *r->kids);
        r->kids[0] = st;
    }
    ckpt_status s = CKPT_OK;
    const char **fqns = NULL;
    size_t nf = 0, cap = 0;
    ckpt_object **objs = NULL;
    size_t nobj = 0;
    ck_htab by_fqn = {0};
    id_kid *kids = NULL;
    if (!ck_htab_init(&by_fqn, 64)) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    objs = calloc(b->nodes[pg].nkids ? b->nodes[pg].nkids : 1, sizeof *objs);
    if (!objs) {
        s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
        goto done;
    }
    for (uint32_t i = 0; i < b->nodes[pg].nkids; i++) {
        uint32_t gi = b->nodes[pg].kids[i];
        if (gi == NONE_KID || b->nodes[gi].kind != N_DICT) {
            s = not_optim(under, "a param group that is not a dict", err);
            goto done;
        }
        uint32_t pi = dict_get(b, gi, "params");
        if (pi == UINT32_MAX || b->nodes[pi].kind != N_VALUE) {
            s = not_optim(under, "a param group without a params list", err);
            goto done;
        }
        ckpt_error lerr = {0};
        ckpt_object_options oo = {.max_memory = b->t->max_value_memory};
        s = ckpt_object_load_with(b->t->r, b->nodes[pi].e, &oo, &objs[nobj], &lerr);
        if (s != CKPT_OK) {
            if (err) *err = lerr;
            goto done;
        }
        const ckpt_value *v = ckpt_object_root(objs[nobj++]);
        ckpt_value_type vt = ckpt_value_type_of(v);
        if (vt != CKPT_VALUE_LIST && vt != CKPT_VALUE_TUPLE) {
            s = not_optim(under, "a params value that is not a list", err);
            goto done;
        }
        ckpt_save_value *ids = ckpt_save_value_list();
        for (size_t k = 0; ids && k < ckpt_value_len(v); k++) {
            const ckpt_value *x = ckpt_value_item(v, k);
            if (ckpt_value_type_of(x) != CKPT_VALUE_STRING) {
                ckpt_save_value_free(ids);
                s = not_optim(under,
                              "a params list holding something else than FQNs "
                              "(already numbered?)",
                              err);
                goto done;
            }
            const char *fqn = ckpt_value_str(x, NULL);
            fqn_probe fp = {fqns, fqn, strlen(fqn)};
            uint64_t h = ck_hash_bytes(fqn, fp.len, 0), dup;
            if (ck_htab_find(&by_fqn, h, fqn_eq, &fp, &dup)) {
                ckpt_save_value_free(ids);
                s = ck_fail(err, CKPT_E_FORMAT, "'%s': parameter '%s' is in two param groups",
                            under, fqn);
                goto done;
            }
            if (nf == cap) {
                cap = cap ? cap * 2 : 64;
                const char **m = realloc(fqns, cap * sizeof *m);
                if (!m) {
                    ckpt_save_value_free(ids);
                    s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
                    goto done;
                }
                fqns = m;
            }
            fqns[nf] = fqn;
            if (!ck_htab_insert(&by_fqn, h, nf) ||
                ckpt_save_value_append(ids, ckpt_save_value_int((int64_t)nf)) != CKPT_OK) {
                ckpt_save_value_free(ids);
                s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
                goto done;
            }
            nf++;
        }
        if (!ids) {
            s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
            goto done;
        }
        ckpt_save_value_free(b->nodes[pi].v);
        b->nodes[pi].v = ids;
    }
    if (st != UINT32_MAX) {
        tnode *sn = &b->nodes[st];
        kids = calloc(sn->nkids ? sn->nkids : 1, sizeof *kids);
        if (!kids) {
            s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
            goto done;
        }
        for (uint32_t i = 0; i < sn->nkids; i++) {
            tnode *k = &b->nodes[sn->kids[i]];
            fqn_probe fp = {fqns, k->key, k->key_len};
            uint64_t id;
            if (k->key_int ||
                !ck_htab_find(&by_fqn, ck_hash_bytes(k->key, k->key_len, 0), fqn_eq, &fp, &id)) {
                s = ck_fail(err, CKPT_E_FORMAT,
                            "'%s': the state of '%.*s' belongs to no param group", under,
                            (int)k->key_len, k->key);
                goto done;
            }
            k->key_int = true;
            k->key_i = (int64_t)id;
            kids[i] = (id_kid){(int64_t)id, sn->kids[i]};
        }
        qsort(kids, sn->nkids, sizeof *kids, by_id_cmp);
        for (uint32_t i = 0; i < sn->nkids; i++)
            sn->kids[i] = kids[i].node;
    }
done:
    free(kids);
    free(fqns);
    for (size_t i = 0; i < nobj; i++)
        ckpt_object_free(objs[i]);
    free(objs);
    ck_htab_release(&by_fqn);
    return s;
}

/* ------------------------------------------------------------------ pickling */

typedef struct pickler {
    pkw w;
    builder *b;
    ckpt_torchsave *t;
    ts_rec *tensors; /* storages in pickle order */
    size_t ntensors, cap;
    ckpt_status st; /* the first failure (embedded tensors: reading, memory) */
    ckpt_error *err;
} pickler;

/* The next storage record (data/<key>, key = its index); NULL when out of memory. */
static ts_rec *new_storage(pickler *p, char key[24]) {
    if (p->ntensors == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        ts_rec *m = realloc(p->tensors, cap * sizeof *m);
        if (!m) return NULL;
        p->tensors = m;
        p->cap = cap;
    }
    snprintf(key, 24, "%zu", p->ntensors);
    ts_rec *r = &p->tensors[p->ntensors];
    *r = (ts_rec){.storage = true, .key = (uint32_t)p->ntensors};
    p->ntensors++;
    return r;
}

static bool holds_tensor(const ckpt_value *v) {
    switch (ckpt_value_type_of(v)) {
    case CKPT_VALUE_TENSOR: return true;
    case CKPT_VALUE_LIST:
    case CKPT_VALUE_TUPLE:
        for (size_t i = 0; i < ckpt_value_len(v); i++)
            if (holds_tensor(ckpt_value_item(v, i))) return true;
        return false;
    case CKPT_VALUE_DICT:
        for (size_t i = 0; i < ckpt_value_len(v); i++)
            if (holds_tensor(ckpt_value_dict_val(v, i))) return true;
        return false;
    default: return false;
    }
}

/* A plain value (no tensor in it) through the saver's value pickler. */
static void pickle_plain(pickler *p, const ckpt_value *v) {
    const char *why = NULL;
    ckpt_save_value *sv = ckpt_save_value_from(v, &why);
    if (!sv) {
        if (p->st == CKPT_OK)
            p->st = ck_fail(p->err, why ? CKPT_E_UNSUPPORTED : CKPT_E_NOMEM,
                            "a value could not be pickled again: %s", why ? why : "no memory");
        pkw_none(&p->w);
        return;
    }
    save_value_pickle(&p->w, sv);
    ckpt_save_value_free(sv);
}

/* A value holding tensors (checked by weights_only_refuses): containers as Python pickles
 * them (save_value_pickle's opcodes), tensors as their own storages, read now. */
static void pickle_embedded(pickler *p, const ckpt_value *v) {
    if (!holds_tensor(v)) {
        pickle_plain(p, v);
        return;
    }
    size_t n = ckpt_value_len(v);
    switch (ckpt_value_type_of(v)) {
    case CKPT_VALUE_TENSOR: {
        ckpt_dtype dt = ckpt_value_tensor_dtype(v);
        int nd = ckpt_value_tensor_ndim(v);
        const int64_t *shape = ckpt_value_tensor_shape(v);
        uint64_t bytes = ckpt_dtype_itemsize(dt);
        for (int d = 0; d < nd; d++)
            bytes *= (uint64_t)shape[d];
        char key[24];
        ts_rec *r = new_storage(p, key);
        uint8_t *data = malloc(bytes ? (size_t)bytes : 1);
        uint8_t **owned = realloc(p->t->owned, (p->t->nowned + 1) * sizeof *owned);
        if (owned) p->t->owned = owned;
        if (!r || !data || !owned) {
            free(data);
            if (p->st == CKPT_OK) p->st = ck_fail(p->err, CKPT_E_NOMEM, "out of memory");
            return;
        }
        p->t->owned[p->t->nowned++] = data;
        if (p->st == CKPT_OK) p->st = ckpt_value_tensor_read(v, data, (size_t)bytes, p->err);
        r->mem = data;
        r->size = bytes;
        save_pickle_tensor(&p->w, dt, nd, shape, key);
        return;
    }
    case CKPT_VALUE_LIST:
        pkw_op(&p->w, PKO_EMPTY_LIST);
        pkw_memoize(&p->w);
        for (size_t i = 0; i < n; i++) {
            pkw_batch_item_begin(&p->w, i, n);
            pickle_embedded(p, ckpt_value_item(v, i));
            pkw_batch_item_end(&p->w, i, n, false);
        }
        return;
    case CKPT_VALUE_TUPLE:
        pkw_tuple_begin(&p->w, n);
        for (size_t i = 0; i < n; i++)
            pickle_embedded(p, ckpt_value_item(v, i));
        pkw_tuple_end(&p->w, n);
        pkw_memoize(&p->w);
        return;
    case CKPT_VALUE_DICT:
        pkw_op(&p->w, PKO_EMPTY_DICT);
        pkw_memoize(&p->w);
        for (size_t i = 0; i < n; i++) {
            pkw_batch_item_begin(&p->w, i, n);
            pickle_plain(p, ckpt_value_dict_key(v, i));
            pickle_embedded(p, ckpt_value_dict_val(v, i));
            pkw_batch_item_end(&p->w, i, n, true);
        }
        return;
    default: pickle_plain(p, v); return;
    }
}

static void pickle_node(pickler *p, uint32_t at, unsigned depth);

static void pickle_key(pickler *p, const tnode *n) {
    if (n->key_int)
        pkw_int(&p->w, n->key_i);
    else
        pkw_str(&p->w, n->key, n->key_len, true);
}

static void pickle_node(pickler *p, uint32_t at, unsigned depth) {
    if (at == NONE_KID) {
        pkw_none(&p->w);
        return;
    }
    const tnode *n = &p->b->nodes[at];
    switch (n->kind) {
    case N_DICT:
    case N_LIST: {
        bool dict = n->kind == N_DICT;
        pkw_op(&p->w, dict ? PKO_EMPTY_DICT : PKO_EMPTY_LIST);
        pkw_memoize(&p->w);
        for (uint32_t i = 0; i < n->nkids; i++) {
            pkw_batch_item_begin(&p->w, i, n->nkids);
            /* (re-read: nodes do not move while pickling) */
            if (dict) pickle_key(p, &p->b->nodes[n->kids[i]]);
            pickle_node(p, n->kids[i], depth + 1);
            pkw_batch_item_end(&p->w, i, n->nkids, dict);
        }
        return;
    }
    case N_TENSOR: {
        const ckpt_entry *e = n->e;
        char key[24];
        ts_rec *r = new_storage(p, key);
        if (!r) {
            if (p->st == CKPT_OK) p->st = ck_fail(p->err, CKPT_E_NOMEM, "out of memory");
            return;
        }
        r->e = e;
        r->size = ckpt_entry_nbytes(e);
        save_pickle_tensor(&p->w, ckpt_entry_dtype(e), ckpt_entry_ndim(e), ckpt_entry_shape(e),
                           key);
        return;
    }
    case N_VALUE:
        if (n->v)
            save_value_pickle(&p->w, n->v);
        else
            pickle_embedded(p, ckpt_object_root(n->o));
        return;
    }
}

/* ------------------------------------------------------------------ layout */

static ckpt_status lay_out(ckpt_torchsave *t, ts_rec *tensors, size_t ntensors, ckpt_error *err) {
    static const char fmt[] = "1", align[] = "64", order[] = "little", version[] = "3\n";
    t->nrecs = NSMALL + ntensors;
    t->recs = calloc(t->nrecs, sizeof *t->recs);
    if (!t->recs) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    /* the serialization id: 40 digits from the content (torch writes a per-save id) */
    uint64_t h1 = ck_hash_bytes(t->pkl, t->pkl_len, 0x746f726368ull);
    uint64_t h2 = ck_hash_bytes(t->pkl, t->pkl_len, h1 ^ t->tensor_bytes);
    snprintf(t->serial, sizeof t->serial, "%020llu%020llu", (ull)(h1 % 10000000000000000000ull),
             (ull)(h2 % 10000000000000000000ull));
    struct {
        const void *p;
        size_t n;
    } small[NSMALL] = {{t->pkl, t->pkl_len}, {fmt, 1},     {align, 2},
                       {order, 6},           {version, 2}, {t->serial, 40}};
    size_t k = 0;
    for (int i = 0; i <= REC_BYTEORDER; i++)
        t->recs[k++] = (ts_rec){.mem = small[i].p, .size = small[i].n, .key = (uint32_t)i};
    for (size_t i = 0; i < ntensors; i++)
        t->recs[k++] = tensors[i];
    t->ntensors = ntensors;
    for (int i = REC_VERSION; i < NSMALL; i++)
        t->recs[k++] = (ts_rec){.mem = small[i].p, .size = small[i].n, .key = (uint32_t)i};
    uint64_t cursor = 0;
    char name[ZW_NAME_MAX + 1];
    for (size_t i = 0; i < t->nrecs; i++) {
        ts_rec *r = &t->recs[i];
        if (r->mem) { /* small records and embedded tensors: in memory already */
            r->crc = save_crc32(0, r->mem, (size_t)r->size);
            r->crc_state = CRC_KNOWN;
        } else if (t->zero_crc) {
            r->crc = 0;
            r->crc_state = CRC_KNOWN;
        }
        size_t nl = rec_name(r, rec_is_tensor(r), name);
        r->lho = cursor;
        r->data = cursor + zw_local_header(NULL, name, nl, cursor, r->size);
        cursor = r->data + r->size + zw_descriptor(NULL, r->lho, r->size, 0);
    }
    t->cd_off = cursor;
    for (size_t i = 0; i < t->nrecs; i++) {
        ts_rec *r = &t->recs[i];
        size_t nl = rec_name(r, rec_is_tensor(r), name);
        r->cdo = cursor;
        cursor += zw_central(NULL, name, nl, r->lho, r->size, 0);
    }
    t->cd_size = cursor - t->cd_off;
    t->size = cursor + ZW_TRAILER_LEN;
    return CKPT_OK;
}

/* ------------------------------------------------------------------ create */

ckpt_status ckpt_torchsave_create(ckpt_reader *r, const ckpt_torchsave_options *opts,
                                  ckpt_torchsave **out, ckpt_error *err) {
    CK_ERR_OR_LOCAL(err);
    if (!out || !r) return ck_fail(err, CKPT_E_INVAL, "ckpt_torchsave_create: NULL argument");
    *out = NULL;
    const char *under = opts && opts->under ? opts->under : "";
    size_t ulen = strlen(under);
    while (ulen && under[ulen - 1] == '/')
        ulen--;
    size_t k = 0; /* path elements the prefix spans */
    if (ulen) {
        k = 1;
        for (size_t i = 0; i < ulen; i++)
            k += under[i] == '/';
    }
    ckpt_torchsave *t = calloc(1, sizeof *t);
    if (!t) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    t->r = r;
    t->zero_crc = opts && opts->zero_crc;
    t->max_value_memory = opts ? opts->max_value_memory : 0;
    if (pthread_mutex_init(&t->crc_lock, NULL) != 0) {
        free(t);
        return ck_fail(err, CKPT_E_NOMEM, "out of memory (a mutex)");
    }
    if (pthread_cond_init(&t->crc_cond, NULL) != 0) {
        pthread_mutex_destroy(&t->crc_lock);
        free(t);
        return ck_fail(err, CKPT_E_NOMEM, "out of memory (a condition variable)");
    }
    t->crc_sync = true;
    builder b = {.t = t, .root = UINT32_MAX};
    elem *el = NULL;
    size_t elcap = 0, nsel = 0;
    pickler p = {.b = &b, .t = t};
    ckpt_status st = CKPT_OK;
    size_t n = ckpt_reader_num_entries(r);
    if (!ck_htab_init(&b.by_key, n * 2 + 16)) {
        st = ck_fail(err, CKPT_E_NOMEM, "out of memory");
        goto done;
    }
    if (!ulen) CK_TRY_GOTO(st, new_node(&b, N_DICT, &b.root, err), done); /* a state_dict */
    for (size_t i = 0; i < n; i++) {
        const ckpt_entry *e = ckpt_reader_entry(r, i);
        if (!ckpt_entry_under(e, under) || !entry_selected(e, opts)) continue;
        nsel++;
        uint32_t leaf = 0;
        if (ckpt_entry_kind_of(e) == CKPT_ENTRY_TENSOR) {
            if (ckpt_entry_problem(e)) {
                CK_TRY_GOTO(st, skip(t, e, "%s", ckpt_entry_problem(e), err), done);
                continue;
            }
            if (!ckpt_dtype_itemsize(ckpt_entry_dtype(e))) {
                CK_TRY_GOTO(st, skip(t, e, "%s", "its dtype is unknown", err), done);
                continue;
            }
            CK_TRY_GOTO(st, new_node(&b, N_TENSOR, &leaf, err), done);
            b.nodes[leaf].e = e;
        } else {
            ckpt_save_value *v;
            ckpt_object *o;
            load_value(t, e, &v, &o, &st, err);
            if (st != CKPT_OK) goto done;
            if (!v && !o) continue;
            st = new_node(&b, N_VALUE, &leaf, err);
            if (st != CKPT_OK) {
                ckpt_save_value_free(v);
                ckpt_object_free(o);
                goto done;
            }
            b.nodes[leaf].v = v;
            b.nodes[leaf].o = o;
            b.nodes[leaf].e = e;
        }
        size_t m;
        CK_TRY_GOTO(st, entry_elems(e, k, &el, &elcap, &m, err), done);
        const char *why;
        CK_TRY_GOTO(st, place(&b, el, m, leaf, &why, err), done);
        if (why) {
            CK_TRY_GOTO(st, skip(t, e, "%s", why, err), done);
            b.nodes[leaf].kind = 0; /* unreachable; its value is freed with the builder */
            continue;
        }
        if (b.nodes[leaf].kind == N_TENSOR)
            t->ntensors++;
        else
            t->nvalues++;
    }
    if (!nsel) {
        if (ulen)
            st = ck_fail(err, CKPT_E_NOTFOUND, "no entry under '%.*s'", (int)ulen, under);
        else
            st = ck_fail(err, CKPT_E_NOTFOUND, "no entry selected");
        goto done;
    }
    if (b.root == UINT32_MAX) CK_TRY_GOTO(st, new_node(&b, N_DICT, &b.root, err), done);

    if (opts && opts->by_id) CK_TRY_GOTO(st, number_params(&b, under, err), done);
    p.err = err;
    pkw_init(&p.w, 2);
    pickle_node(&p, b.root, 0);
    if (p.st != CKPT_OK) {
        pkw_release(&p.w);
        st = p.st;
        goto done;
    }
    CK_TRY_GOTO(st, pkw_finish(&p.w, &t->pkl, &t->pkl_len, err), done);
    t->tensor_bytes = 0;
    for (size_t i = 0; i < p.ntensors; i++)
        t->tensor_bytes += p.tensors[i].size;
    CK_TRY_GOTO(st, lay_out(t, p.tensors, p.ntensors, err), done);
done:
    free(p.tensors);
    free(el);
    builder_release(&b);
    if (st != CKPT_OK) {
        ckpt_torchsave_free(t);
        return st;
    }
    *out = t;
    return CKPT_OK;
}

void ckpt_torchsave_free(ckpt_torchsave *t) {
    if (!t) return;
    free(t->pkl);
    free(t->recs);
    for (size_t i = 0; i < t->nskips; i++)
        free(t->skips[i].why);
    free(t->skips);
    for (size_t i = 0; i < t->nowned; i++)
        free(t->owned[i]);
    free(t->owned);
    if (t->crc_sync) {
        pthread_cond_destroy(&t->crc_cond);
        pthread_mutex_destroy(&t->crc_lock);
    }
    free(t);
}

uint64_t ckpt_torchsave_size(const ckpt_torchsave *t) { return t->size; }
size_t ckpt_torchsave_num_tensors(const ckpt_torchsave *t) { return t->ntensors; }
size_t ckpt_torchsave_num_values(const ckpt_torchsave *t) { return t->nvalues; }
uint64_t ckpt_torchsave_tensor_bytes(const ckpt_torchsave *t) { return t->tensor_bytes; }
size_t ckpt_torchsave_num_skipped(const ckpt_torchsave *t) { return t->nskips; }

const ckpt_entry *ckpt_torchsave_skipped(const ckpt_torchsave *t, size_t i, const char **why) {
    if (i >= t->nskips) return NULL;
    if (why) *why = t->skips[i].why;
    return t->skips[i].e;
}

/* ------------------------------------------------------------------ ranges */

/* Emits the part of piece [a, a+n) that overlaps [*off, end) and advances *off. */
typedef struct emitter {
    uint64_t off, end;
    ckpt_torchsave_span_fn fn;
    void *ctx;
} emitter;

static ckpt_status emit_piece(emitter *x, uint64_t a, uint64_t n, const void *mem,
                              const ckpt_entry *e, ckpt_error *err) {
    if (x->off >= a + n || x->off >= x->end || x->off < a) return CKPT_OK;
    uint64_t skip_n = x->off - a;
    uint64_t len = a + n - x->off;
    if (len > x->end - x->off) len = x->end - x->off;
    ckpt_torchsave_span s = {.offset = x->off, .len = len};
    if (mem)
        s.mem = (const uint8_t *)mem + skip_n;
    else {
        s.tensor = e;
        s.tensor_offset = skip_n;
    }
    x->off += len;
    return x->fn(x->ctx, &s, err);
}

/* Index of the last row whose `field` offset is <= off (rows sorted by it). */
static size_t find_rec(const ckpt_torchsave *t, uint64_t off, bool central) {
    size_t lo = 0, hi = t->nrecs;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t at = central ? t->recs[mid].cdo : t->recs[mid].lho;
        if (at <= off)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static ckpt_status tensor_bytes(ckpt_reader *r, const ckpt_entry *e, uint64_t off, uint64_t len,
                                uint8_t *dst, ckpt_error *err);

typedef struct write_ctx {
    ckpt_torchsave_write_fn fn;
    void *ctx;
} write_ctx;

static ckpt_status put(write_ctx *w, const void *p, size_t n, ckpt_error *err) {
    if (n && !w->fn(w->ctx, p, n))
        return ck_fail(err, CKPT_E_IO, "writing the torch.save archive failed");
    return CKPT_OK;
}

/* Tensor record r's C-order bytes read into buf (bufsize bytes, > 0) a block at a time: their
 * CRC-32 in *crc, and each block handed on to w unless w is NULL.  A failed read's message
 * names the tensor (and `what` it was read for). */
static ckpt_status tensor_blocks(const ckpt_torchsave *t, const ts_rec *r, uint8_t *buf,
                                 size_t bufsize, write_ctx *w, const char *what, uint32_t *crc,
                                 ckpt_error *err) {
    *crc = 0;
    for (uint64_t done = 0; done < r->size;) {
        size_t n = (size_t)(r->size - done < bufsize ? r->size - done : bufsize);
        ckpt_status st = tensor_bytes(t->r, r->e, done, n, buf, err);
        if (st != CKPT_OK) {
            ck_error_prefix(err, "'%s'%s: ", ckpt_entry_path(r->e), what);
            return st;
        }
        *crc = save_crc32(*crc, buf, n);
        if (w) CK_TRY(put(w, buf, n, err));
        done += n;
    }
    return CKPT_OK;
}

/* CRC-32 of tensor record r, read TS_CRC_BLOCK bytes at a time. */
static ckpt_status hash_tensor(const ckpt_torchsave *t, const ts_rec *r, uint32_t *out,
                               ckpt_error *err) {
    size_t bs = (size_t)(r->size < TS_CRC_BLOCK ? r->size : TS_CRC_BLOCK);
    uint8_t *buf = malloc(bs ? bs : 1);
    if (!buf) return ck_fail(err, CKPT_E_NOMEM, "out of memory (a %zu-byte block)", bs);
    ckpt_status st = tensor_blocks(t, r, buf, bs ? bs : 1, NULL, " (its CRC-32)", out, err);
    free(buf);
    return st;
}

/* The CRC-32 of record i: known from the layout, or computed now (once: the result is kept;
 * a failure is not, so a later range tries again). */
static ckpt_status rec_crc(const ckpt_torchsave *ct, size_t i, uint32_t *out, ckpt_error *err) {
    ckpt_torchsave *t = (ckpt_torchsave *)ct; /* the cache is the handle's own, under its lock */
    ts_rec *r = &t->recs[i];
    if (!r->e) { /* in memory: set by lay_out, never changed */
        *out = r->crc;
        return CKPT_OK;
    }
    pthread_mutex_lock(&t->crc_lock);
    while (r->crc_state == CRC_BUSY)
        pthread_cond_wait(&t->crc_cond, &t->crc_lock);
    if (r->crc_state == CRC_KNOWN) {
        *out = r->crc;
        pthread_mutex_unlock(&t->crc_lock);
        return CKPT_OK;
    }
    r->crc_state = CRC_BUSY;
    pthread_mutex_unlock(&t->crc_lock);
    uint32_t crc = 0;
    ckpt_status st = hash_tensor(t, r, &crc, err);
    pthread_mutex_lock(&t->crc_lock);
    if (st == CKPT_OK) r->crc = crc;
    r->crc_state = st == CKPT_OK ? CRC_KNOWN : CRC_UNKNOWN;
    pthread_cond_broadcast(&t->crc_cond);
    pthread_mutex_unlock(&t->crc_lock);
    *out = crc;
    return st;
}

ckpt_status ckpt_torchsave_map(const ckpt_torchsave *t, uint64_t off, uint64_t len,
                               ckpt_torchsave_span_fn fn, void *ctx, ckpt_error *err) {
    CK_ERR_OR_LOCAL(err);
    if (off >= t->size || !len) return CKPT_OK;
    emitter x = {off, len > t->size - off ? t->size : off + len, fn, ctx};
    unsigned char buf[ZW_CENTRAL_MAX > ZW_LOCAL_MAX ? ZW_CENTRAL_MAX : ZW_LOCAL_MAX];
    char name[ZW_NAME_MAX + 1];
    if (x.off < t->cd_off) {
        for (size_t i = find_rec(t, x.off, false); i < t->nrecs && x.off < x.end; i++) {
            const ts_rec *r = &t->recs[i];
            size_t nl = rec_name(r, rec_is_tensor(r), name);
            if (x.off < r->data) {
                size_t hl = zw_local_header(buf, name, nl, r->lho, r->size);
                CK_TRY(emit_piece(&x, r->lho, hl, buf, NULL, err));
            }
            if (x.off < r->data + r->size && x.off < x.end)
                CK_TRY(emit_piece(&x, r->data, r->size, r->mem, r->e, err));
            uint64_t dend = i + 1 < t->nrecs ? t->recs[i + 1].lho : t->cd_off;
            if (x.off < dend && x.off < x.end) {
                uint32_t crc;
                CK_TRY(rec_crc(t, i, &crc, err));
                size_t dl = zw_descriptor(buf, r->lho, r->size, crc);
                CK_TRY(emit_piece(&x, r->data + r->size, dl, buf, NULL, err));
            }
        }
    }
    if (x.off < x.end && x.off < t->cd_off + t->cd_size) {
        for (size_t i = find_rec(t, x.off, true); i < t->nrecs && x.off < x.end; i++) {
            const ts_rec *r = &t->recs[i];
            size_t nl = rec_name(r, rec_is_tensor(r), name);
            uint32_t crc;
            CK_TRY(rec_crc(t, i, &crc, err));
            size_t cl = zw_central(buf, name, nl, r->lho, r->size, crc);
            CK_TRY(emit_piece(&x, r->cdo, cl, buf, NULL, err));
        }
    }
    if (x.off < x.end) {
        unsigned char tr[ZW_TRAILER_LEN];
        size_t tl = zw_trailer(tr, t->nrecs, t->cd_off, t->cd_size);
        CK_TRY(emit_piece(&x, t->cd_off + t->cd_size, tl, tr, NULL, err));
    }
    return CKPT_OK;
}

/* ------------------------------------------------------------------ tensor byte ranges */

typedef struct lin_ctx {
    ckpt_reader *r;
    const ckpt_entry *e;
    uint8_t *dst; /* the window's first byte */
} lin_ctx;

static ckpt_status lin_box(void *ctx, const int64_t *start, const int64_t *count, uint64_t dst,
                           ckpt_error *err) {
    lin_ctx *l = ctx;
    size_t n = ckpt_dtype_itemsize(ckpt_entry_dtype(l->e));
    for (int d = 0; d < ckpt_entry_ndim(l->e); d++)
        n *= (size_t)count[d];
    return ckpt_read_region(l->r, l->e, start, count, l->dst + dst, n, err);
}

/* Part of one element: read whole into tmp, then copied. */
static ckpt_status lin_part(void *ctx, const int64_t *start, const int64_t *count, size_t skip,
                            size_t n, uint64_t dst, ckpt_error *err) {
    lin_ctx *l = ctx;
    uint8_t tmp[16];
    CK_TRY(ckpt_read_region(l->r, l->e, start, count, tmp,
                            ckpt_dtype_itemsize(ckpt_entry_dtype(l->e)), err));
    memcpy(l->dst + dst, tmp + skip, n);
    return CKPT_OK;
}

/* Bytes [off, off+len) of tensor e's C-order bytes into dst. */
static ckpt_status tensor_bytes(ckpt_reader *r, const ckpt_entry *e, uint64_t off, uint64_t len,
                                uint8_t *dst, ckpt_error *err) {
    static const slice_linear_ops ops = {.box = lin_box, .part = lin_part};
    lin_ctx l = {r, e, dst};
    return slice_linear(ckpt_entry_ndim(e), NULL, ckpt_entry_shape(e),
                        ckpt_dtype_itemsize(ckpt_entry_dtype(e)), off, len, &ops, &l, err);
}

typedef struct read_ctx {
    const ckpt_torchsave *t;
    uint8_t *dst;
    uint64_t base;
} read_ctx;

static ckpt_status read_span(void *ctx, const ckpt_torchsave_span *s, ckpt_error *err) {
    read_ctx *c = ctx;
    uint8_t *d = c->dst + (s->offset - c->base);
    if (s->mem) {
        memcpy(d, s->mem, (size_t)s->len);
        return CKPT_OK;
    }
    return tensor_bytes(c->t->r, s->tensor, s->tensor_offset, s->len, d, err);
}

ckpt_status ckpt_torchsave_read(const ckpt_torchsave *t, uint64_t off, void *dst, size_t len,
                                size_t *got, ckpt_error *err) {
    CK_ERR_OR_LOCAL(err);
    if (got) *got = 0;
    if (off >= t->size) return CKPT_OK;
    if (len > t->size - off) len = (size_t)(t->size - off);
    read_ctx c = {t, dst, off};
    CK_TRY(ckpt_torchsave_map(t, off, len, read_span, &c, err));
    if (got) *got = len;
    return CKPT_OK;
}

/* ------------------------------------------------------------------ streaming */

ckpt_status ckpt_torchsave_write(const ckpt_torchsave *t, uint64_t block,
                                 ckpt_torchsave_write_fn fn, void *ctx, ckpt_error *err) {
    CK_ERR_OR_LOCAL(err);
    if (!block) block = TS_BLOCK;
    if (block > ((uint64_t)1 << 30)) block = (uint64_t)1 << 30;
    write_ctx w = {fn, ctx};
    uint32_t *crcs = calloc(t->nrecs, sizeof *crcs);
    uint8_t *buf = NULL;
    uint64_t max_size = 0;
    for (size_t i = 0; i < t->nrecs; i++)
        if (t->recs[i].e && t->recs[i].size > max_size) max_size = t->recs[i].size;
    size_t bufsize = (size_t)(max_size < block ? max_size : block);
    if (crcs && bufsize) buf = malloc(bufsize);
    if (!crcs || (bufsize && !buf)) {
        free(crcs);
        return ck_fail(err, CKPT_E_NOMEM, "out of memory (a %zu-byte block)", bufsize);
    }
    ckpt_status st = CKPT_OK;
    unsigned char hb[ZW_CENTRAL_MAX > ZW_LOCAL_MAX ? ZW_CENTRAL_MAX : ZW_LOCAL_MAX];
    char name[ZW_NAME_MAX + 1];
    uint64_t at = 0;
    for (size_t i = 0; i < t->nrecs && st == CKPT_OK; i++) {
        const ts_rec *r = &t->recs[i];
        size_t nl = rec_name(r, rec_is_tensor(r), name);
        size_t hl = zw_local_header(hb, name, nl, r->lho, r->size);
        if (at != r->lho || at + hl != r->data) {
            st = ck_fail(err, CKPT_E_INVAL, "torch.save layout: record %zu out of place", i);
            break;
        }
        CK_TRY_GOTO(st, put(&w, hb, hl, err), done);
        uint32_t crc = 0;
        if (r->mem) { /* its crc set by the layout, never changed (tensor records' are) */
            crc = r->crc;
            CK_TRY_GOTO(st, put(&w, r->mem, (size_t)r->size, err), done);
        } else {
            CK_TRY_GOTO(st, tensor_blocks(t, r, buf, bufsize, &w, "", &crc, err), done);
        }
        crcs[i] = crc;
        size_t dl = zw_descriptor(hb, r->lho, r->size, crc);
        CK_TRY_GOTO(st, put(&w, hb, dl, err), done);
        at = r->data + r->size + dl;
    }
    for (size_t i = 0; i < t->nrecs && st == CKPT_OK; i++) {
        const ts_rec *r = &t->recs[i];
        size_t nl = rec_name(r, rec_is_tensor(r), name);
        size_t cl = zw_central(hb, name, nl, r->lho, r->size, crcs[i]);
        CK_TRY_GOTO(st, put(&w, hb, cl, err), done);
    }
    if (st == CKPT_OK) {
        unsigned char tr[ZW_TRAILER_LEN];
        size_t tl = zw_trailer(tr, t->nrecs, t->cd_off, t->cd_size);
        st = put(&w, tr, tl, err);
    }
done:
    free(buf);
    free(crcs);
    return st;
}
