/* reshard_util.c — what `ckpt reshard` needs from a source entry in either path: the saver key
 * (flat key + planner_data path), the Shard(dim) box of a rank, and stored non-tensor values:
 * the item's archive bytes copied unchanged, or (transformed items) the decoded value
 * converted back into a saver value. */
#include "cli.h"
#include "reshard.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int reshard_parse_torch(const char *arg, reshard_args *a) {
    char *end;
    errno = 0;
    unsigned long major = strtoul(arg, &end, 10);
    unsigned long minor = 0;
    bool ok = end != arg && *end == '.' && errno == 0;
    if (ok) {
        const char *m = end + 1;
        minor = strtoul(m, &end, 10);
        ok = end != m && errno == 0 &&
             (*end == '\0' || *end == '.' || *end == '+' || *end == 'a' || *end == 'b' ||
              *end == 'r' || *end == 'd');
    }
    if (!ok)
        return cli_usage_error("reshard", "--torch wants a version such as 2.11, not '%s'", arg);
    if (major < 2 || (major == 2 && minor < 4))
        return cli_usage_error("reshard",
                               "--torch %s: torch before 2.4 cannot read the .metadata ckpt "
                               "writes (StorageMeta came in 2.4)",
                               arg);
    a->strides = major > 2 || minor >= 15;
    a->torch_target = major > 2 ? 9999 : (int)(major * 100 + (minor > 99 ? 99 : minor));
    return 0;
}

int reshard_torch_needed(ckpt_reader *r, const reshard_args *a, const char **key, ckpt_dtype *dt) {
    int need = a->strides ? 215 : 204;
    *key = NULL;
    *dt = CKPT_DTYPE_INVALID;
    for (size_t i = 0, n = ckpt_reader_num_entries(r); i < n; i++) {
        const ckpt_entry *e = ckpt_reader_entry(r, i);
        if (ckpt_entry_kind_of(e) != CKPT_ENTRY_TENSOR) continue;
        int v = ckpt_dtype_torch_min(ckpt_entry_dtype(e));
        if (v > need) {
            need = v;
            *key = ckpt_entry_key(e);
            *dt = ckpt_entry_dtype(e);
        }
    }
    return need;
}

ckpt_status reshard_key(const ckpt_entry *e, ckpt_save_key *key, ckpt_save_elem **elems,
                        ckpt_error *err) {
    size_t n = ckpt_entry_path_len(e);
    *elems = calloc(n ? n : 1, sizeof **elems);
    if (!*elems) return cli_fail(err, CKPT_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const char *s = ckpt_entry_path_elem(e, i);
        size_t len = strlen(s);
        bool digits = len > 0 && len < 19 && strspn(s, "0123456789") == len;
        (*elems)[i] =
            digits ? (ckpt_save_elem){NULL, strtoll(s, NULL, 10)} : (ckpt_save_elem){s, 0};
    }
    if (!n) { /* no planner_data: the flat key as the one element */
        (*elems)[0] = (ckpt_save_elem){ckpt_entry_key(e), 0};
        n = 1;
    }
    *key = (ckpt_save_key){.flat = ckpt_entry_key(e), .elems = *elems, .nelems = n};
    return CKPT_OK;
}

#define CK_STR_(x) #x
#define CK_STR(x) CK_STR_(x)

static bool is_dim_alias(const char *t) { return strncmp(t, "dim", 3) == 0 && !strchr(t, '-'); }

uint32_t reshard_nranks(const reshard_args *a, uint32_t world) {
    if (a->ranks) return a->ranks;
    ckpt_layout l;
    if (a->layout_text && !is_dim_alias(a->layout_text) &&
        ckpt_layout_parse(a->layout_text, &l, NULL) == CKPT_OK)
        return ckpt_layout_nranks(&l);
    return world;
}

static int layout_error(bool print, const char *fmt, const char *x, const char *y) {
    if (print) cli_usage_error("reshard", fmt, x, y);
    return CLI_EXIT_USAGE;
}

int reshard_layouts(reshard_args *a, uint32_t nranks, bool print) {
    char spec[CKPT_LAYOUT_SPEC_MAX + 32], msg[96];
    const char *text = a->layout_text ? a->layout_text : "dim0";
    if (is_dim_alias(text)) {
        char *end;
        long d = strtol(text + 3, &end, 10);
        if (d < 0 || d >= CKPT_MAX_NDIM || *end || end == text + 3)
            return layout_error(print, "--layout '%s': %s", text,
                                "dimD wants D below " CK_STR(CKPT_MAX_NDIM));
        snprintf(spec, sizeof spec, "%u:S%ld", (unsigned)nranks, d);
        text = spec;
    }
    ckpt_error err = {0};
    if (ckpt_layout_parse(text, &a->layout, &err) != CKPT_OK)
        return layout_error(print, "--layout '%s': %s", a->layout_text, err.message);
    if (ckpt_layout_nranks(&a->layout) != nranks) {
        snprintf(msg, sizeof msg, "has %u ranks, but %u are written (--ranks or mpirun -np)",
                 ckpt_layout_nranks(&a->layout), (unsigned)nranks);
        return layout_error(print, "--layout '%s' %s", a->layout_text, msg);
    }
    if (!a->map_file) return CLI_EXIT_OK;
    FILE *f = fopen(a->map_file, "rb");
    if (!f) return layout_error(print, "--layout-map %s: %s", a->map_file, strerror(errno));
    char *json = malloc(CKPT_LAYOUT_MAP_MAX_BYTES + 1);
    size_t len = json ? fread(json, 1, CKPT_LAYOUT_MAP_MAX_BYTES + 1, f) : 0;
    bool rerr = ferror(f);
    fclose(f);
    if (!json || rerr || len > CKPT_LAYOUT_MAP_MAX_BYTES) {
        free(json);
        return layout_error(print, "--layout-map %s: %s", a->map_file,
                            !json  ? "out of memory"
                            : rerr ? "read error"
                                   : "larger than 64 MiB");
    }
    ckpt_status st = ckpt_layout_map_parse(json, len, nranks, &a->map, &err);
    free(json);
    if (st != CKPT_OK) return layout_error(print, "--layout-map %s: %s", a->map_file, err.message);
    if (ckpt_layout_map_default(a->map)) a->layout = *ckpt_layout_map_default(a->map);
    return CLI_EXIT_OK;
}

void reshard_layout_desc(const reshard_args *a, char *buf, size_t size) {
    char spec[CKPT_LAYOUT_SPEC_MAX];
    ckpt_layout_format(&a->layout, spec, sizeof spec);
    if (a->map)
        snprintf(buf, size, "%s + --layout-map %s", spec, a->map_file);
    else
        snprintf(buf, size, "%s", spec);
}

ckpt_status reshard_share_of(const reshard_args *a, const ckpt_entry *e, uint32_t rank,
                             reshard_share *out, ckpt_error *err) {
    memset(out, 0, sizeof *out);
    if (ckpt_entry_problem(e))
        return cli_fail(err, CKPT_E_FORMAT, "key '%s': %s", ckpt_entry_key(e),
                        ckpt_entry_problem(e));
    const ckpt_layout *lay = ckpt_layout_map_find(a->map, e, &a->layout);
    out->ndim = ckpt_entry_ndim(e);
    out->shape = ckpt_entry_shape(e);
    out->itemsize = ckpt_dtype_itemsize(ckpt_entry_dtype(e));
    bool empty = false;
    uint64_t bytes = out->itemsize;
    for (int d = 0; d < out->ndim; d++) {
        if (out->shape[d] <= 0) empty = true;
        if (!empty && __builtin_mul_overflow(bytes, (uint64_t)out->shape[d], &bytes))
            return cli_fail(err, CKPT_E_FORMAT, "key '%s': the tensor's size overflows",
                            ckpt_entry_key(e));
    }
    uint32_t coord[CKPT_LAYOUT_MAX_MESH_NDIM];
    if (ckpt_layout_coord(lay, rank, coord) != CKPT_OK)
        return cli_fail(err, CKPT_E_INVAL, "key '%s': rank %u is outside its layout's mesh",
                        ckpt_entry_key(e), rank);
    /* a replica: the lowest rank holding it stores it (coordinate 0 along every mesh dim that
     * replicates this tensor) */
    for (int i = 0; i < lay->mesh_ndim; i++) {
        const ckpt_placement *p = &lay->placements[i];
        if ((p->kind == CKPT_PLACEMENT_REPLICATE || p->dim >= out->ndim) && coord[i] != 0)
            return CKPT_OK;
    }
    ckpt_status st = ckpt_layout_shard_new(lay, out->ndim, out->shape, coord, &out->sh, err);
    if (st != CKPT_OK) {
        char why[sizeof err->message];
        snprintf(why, sizeof why, "%s", err->message);
        return cli_fail(err, st, "key '%s': %s", ckpt_entry_key(e), why);
    }
    if (!empty) {
        out->nboxes =
            ckpt_layout_shard_numel(out->sh) ? ckpt_layout_shard_num_run_boxes(out->sh) : 0;
        return CKPT_OK;
    }
    /* a tensor without elements: rank 0's box (the tensor is in .metadata) and each box that
     * is not empty along a dim the layout shards (as `dcp.save` of the DTensor; a shard left
     * without rows would repeat another's box) */
    const int64_t *local = ckpt_layout_shard_local_shape(out->sh);
    bool keep = rank == 0;
    if (!keep) {
        keep = true;
        for (int i = 0; i < lay->mesh_ndim; i++) {
            const ckpt_placement *p = &lay->placements[i];
            if (p->kind != CKPT_PLACEMENT_REPLICATE && p->dim < out->ndim && !local[p->dim])
                keep = false;
        }
    }
    out->nboxes = keep;
    return CKPT_OK;
}

void reshard_share_box(const reshard_share *s, uint64_t i, int64_t *start, int64_t *count,
                       uint64_t *bytes) {
    ckpt_layout_shard_run_box(s->sh, i, start, count, NULL); /* an empty shard: its one box */
    uint64_t b = s->itemsize; /* a run box is within the tensor, whose bytes fit */
    for (int d = 0; d < s->ndim; d++)
        b *= (uint64_t)count[d];
    *bytes = b;
}

void reshard_share_release(reshard_share *s) {
    ckpt_layout_shard_free(s->sh);
    memset(s, 0, sizeof *s);
}

/* The stored bytes of object entry `e` (one torch.save archive), read from its file. */
static ckpt_status read_item(ckpt_reader *r, const ckpt_entry *e, const ckpt_chunk_info *ci,
                             void **out, size_t *len, ckpt_error *err) {
    *out = NULL;
    *len = 0;
    int fd = ckpt_reader_file_fd(r, (uint32_t)ci->file_id, err);
    if (fd < 0) return err && err->code ? err->code : CKPT_E_IO;
    if (ci->length > SIZE_MAX / 2)
        return cli_fail(err, CKPT_E_LIMIT, "key '%s': item too large", ckpt_entry_key(e));
    unsigned char *b = malloc(ci->length ? (size_t)ci->length : 1);
    if (!b) return cli_fail(err, CKPT_E_NOMEM, "key '%s': out of memory", ckpt_entry_key(e));
    for (uint64_t done = 0; done < ci->length;) {
        ssize_t k =
            pread(fd, b + done, (size_t)(ci->length - done), (off_t)(ci->file_offset + done));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            free(b);
            return cli_fail(err, CKPT_E_IO, "key '%s': reading %s at %llu: %s", ckpt_entry_key(e),
                            ckpt_reader_file_name(r, (uint32_t)ci->file_id),
                            (unsigned long long)(ci->file_offset + done),
                            k < 0 ? strerror(errno) : "unexpected end of file");
        }
        done += (uint64_t)k;
    }
    *out = b;
    *len = (size_t)ci->length;
    return CKPT_OK;
}

ckpt_status reshard_value(ckpt_reader *r, const ckpt_entry *e, reshard_val *out, ckpt_error *err) {
    memset(out, 0, sizeof *out);
    ckpt_object *o;
    CLI_TRY(ckpt_object_load(r, e, &o, err)); /* it decodes: a sound item */
    ckpt_chunk_info ci;
    ckpt_status s = ckpt_entry_chunk(e, 0, &ci);
    if (s == CKPT_OK && ci.file_id >= 0 && !ci.transforms) {
        /* a plain stored archive: copied unchanged, whatever it holds */
        ckpt_object_free(o);
        return read_item(r, e, &ci, &out->archive, &out->len, err);
    }
    /* a transformed item (zstd ...): its bytes cannot be referenced without the transform
     * descriptors, so the decoded value is pickled again */
    const char *why = NULL;
    out->v = ckpt_save_value_from(ckpt_object_root(o), &why);
    ckpt_object_free(o);
    if (out->v) return CKPT_OK;
    if (why)
        return cli_fail(err, CKPT_E_UNSUPPORTED,
                        "key '%s': the value holds %s, which the saver cannot write again "
                        "from a transformed (%s) item",
                        ckpt_entry_key(e), why, ci.transforms ? ci.transforms : "unstored");
    return cli_fail(err, CKPT_E_NOMEM, "key '%s': out of memory (or a repeated dict key)",
                    ckpt_entry_key(e));
}

void reshard_val_release(reshard_val *v) {
    ckpt_save_value_free(v->v);
    free(v->archive);
    memset(v, 0, sizeof *v);
}

void reshard_note_torch(ckpt_reader *r, const reshard_args *a) {
    const char *key;
    ckpt_dtype dt;
    int need = a->torch_target ? 0 : reshard_torch_needed(r, a, &key, &dt);
    if (need > 204 && key && !a->quiet)
        fprintf(stderr,
                "ckpt reshard: note: torch %d.%d or later will be needed to load the result "
                "(key '%s' is %s); --torch VER checks a target release\n",
                need / 100, need % 100, key, ckpt_dtype_name(dt));
}
