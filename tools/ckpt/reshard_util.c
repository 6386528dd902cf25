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

ckpt_status reshard_box(const ckpt_entry *e, int dim, uint32_t nranks, uint32_t rank,
                        int64_t *start, int64_t *count, uint64_t *bytes, ckpt_error *err) {
    *bytes = 0;
    if (ckpt_entry_problem(e))
        return cli_fail(err, CKPT_E_FORMAT, "key '%s': %s", ckpt_entry_key(e),
                        ckpt_entry_problem(e));
    int nd = ckpt_entry_ndim(e);
    ckpt_status st = ckpt_shard_box(nd, ckpt_entry_shape(e), dim, nranks, rank, start, count);
    if (st != CKPT_OK)
        return cli_fail(err, st, "key '%s': cannot split it over %u ranks along dim %d",
                        ckpt_entry_key(e), nranks, dim);
    uint64_t b = ckpt_dtype_itemsize(ckpt_entry_dtype(e));
    for (int d = 0; d < nd; d++) {
        if (count[d] < 0 || (count[d] && b > UINT64_MAX / (uint64_t)count[d]))
            return cli_fail(err, CKPT_E_FORMAT, "key '%s': share of rank %u is too large",
                            ckpt_entry_key(e), rank);
        b *= (uint64_t)count[d];
    }
    *bytes = b;
    return CKPT_OK;
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
