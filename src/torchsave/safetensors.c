/* safetensors.c — owns safetensors header parsing (see safetensors.h): reading the length and
 * JSON header with at most two reads, mapping dtype strings, validating every entry and the
 * tiling of the data section, and name lookup through a hash table.  Everything a parsed
 * header needs lives in one arena whose budget is proportional to the header length. */
#include "torchsave/safetensors.h"

#include "util/arena.h"
#include "util/error.h"
#include "util/json.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define ST_FIRST_READ 65536u /* first read: length + this much header */
#define ST_JSON_DEPTH 8

typedef unsigned long long ull;

struct ts_safetensors {
    ck_arena *arena;
    uint64_t header_len;
    uint64_t data_start;
    uint64_t data_len;
    size_t n;
    ts_st_tensor *tensors;
    uint32_t *slots; /* index + 1, 0 = empty */
    size_t slot_mask;
    size_t nmeta;
    const char **meta_keys;
    const char **meta_values;
};

typedef struct st_dtype {
    const char *name;
    ckpt_dtype dtype;
    unsigned bits;
} st_dtype;

static const st_dtype st_dtypes[] = {
    {"BOOL", CKPT_DTYPE_BOOL, 8},
    {"U8", CKPT_DTYPE_UINT8, 8},
    {"I8", CKPT_DTYPE_INT8, 8},
    {"F8_E5M2", CKPT_DTYPE_FLOAT8_E5M2, 8},
    {"F8_E4M3", CKPT_DTYPE_FLOAT8_E4M3FN, 8},
    {"F8_E4M3FNUZ", CKPT_DTYPE_FLOAT8_E4M3FNUZ, 8},
    {"F8_E5M2FNUZ", CKPT_DTYPE_FLOAT8_E5M2FNUZ, 8},
    {"F8_E8M0", CKPT_DTYPE_FLOAT8_E8M0FNU, 8},
    {"I16", CKPT_DTYPE_INT16, 16},
    {"U16", CKPT_DTYPE_UINT16, 16},
    {"F16", CKPT_DTYPE_FLOAT16, 16},
    {"BF16", CKPT_DTYPE_BFLOAT16, 16},
    {"I32", CKPT_DTYPE_INT32, 32},
    {"U32", CKPT_DTYPE_UINT32, 32},
    {"F32", CKPT_DTYPE_FLOAT32, 32},
    {"F64", CKPT_DTYPE_FLOAT64, 64},
    {"I64", CKPT_DTYPE_INT64, 64},
    {"U64", CKPT_DTYPE_UINT64, 64},
    {"C64", CKPT_DTYPE_COMPLEX64, 64},
    /* sub-byte formats: no ckpt dtype, but their sizes are still checked */
    {"F4", CKPT_DTYPE_INVALID, 4},
    {"F6_E2M3", CKPT_DTYPE_INVALID, 6},
    {"F6_E3M2", CKPT_DTYPE_INVALID, 6},
};

const char *ckpt_dtype_safetensors_name(ckpt_dtype dt) {
    if (dt == CKPT_DTYPE_INVALID || dt == CKPT_DTYPE_FLOAT8_E8M0FNU) return NULL;
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (st_dtypes[i].dtype == dt) return st_dtypes[i].name;
    return NULL;
}

static const st_dtype *find_dtype(const char *s) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (!strcmp(st_dtypes[i].name, s)) return &st_dtypes[i];
    return NULL;
}

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static int cmp_begin(const void *a, const void *b) {
    const ts_st_tensor *x = *(const ts_st_tensor *const *)a, *y = *(const ts_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static ckpt_status get_u64(const ck_json *v, uint64_t *out) {
    if (!v || v->type != CK_JSON_NUMBER || !v->is_int || v->u.num.i < 0) return CKPT_E_FORMAT;
    *out = (uint64_t)v->u.num.i;
    return CKPT_OK;
}

/* Fills t from entry `m`; X is the blob offset for messages. */
static ckpt_status parse_entry(ts_safetensors *st, const ck_json_member *m, ts_st_tensor *t,
                               uint64_t X, ckpt_error *err) {
    const ck_json *v = &m->value;
    t->name = m->key;
    t->name_len = m->key_len;
    if (v->type != CK_JSON_OBJECT)
        return ck_fail(err, CKPT_E_FORMAT,
                       "safetensors at offset %llu: entry '%s' is not an object", (ull)X, m->key);
    const ck_json *dt = ck_json_get(v, "dtype"), *shape = ck_json_get(v, "shape"),
                  *offs = ck_json_get(v, "data_offsets");
    if (!dt || dt->type != CK_JSON_STRING)
        return ck_fail(err, CKPT_E_FORMAT,
                       "safetensors at offset %llu: tensor '%s' has no dtype string", (ull)X,
                       m->key);
    if (!shape || shape->type != CK_JSON_ARRAY)
        return ck_fail(err, CKPT_E_FORMAT,
                       "safetensors at offset %llu: tensor '%s' has no shape array", (ull)X,
                       m->key);
    if (!offs || offs->type != CK_JSON_ARRAY || offs->len != 2 ||
        get_u64(&offs->u.items[0], &t->begin) || get_u64(&offs->u.items[1], &t->end))
        return ck_fail(err, CKPT_E_FORMAT,
                       "safetensors at offset %llu: tensor '%s' needs data_offsets [begin, end] "
                       "of non-negative integers",
                       (ull)X, m->key);
    if (t->begin > t->end)
        return ck_fail(err, CKPT_E_FORMAT,
                       "safetensors at offset %llu: tensor '%s' has data_offsets [%llu, %llu) "
                       "ending before they begin",
                       (ull)X, m->key, (ull)t->begin, (ull)t->end);
    if (shape->len > CKPT_MAX_NDIM)
        return ck_fail(err, CKPT_E_LIMIT,
                       "safetensors at offset %llu: tensor '%s' has %zu dimensions (at most %d)",
                       (ull)X, m->key, shape->len, CKPT_MAX_NDIM);
    t->dtype_name = dt->u.str;
    t->ndim = (int)shape->len;
    t->numel = 1;
    bool overflow = false, has_zero = false;
    if (shape->len) {
        int64_t *dims = ck_arena_alloc(st->arena, shape->len * sizeof *dims);
        if (!dims) return CKPT_E_NOMEM;
        for (size_t d = 0; d < shape->len; d++) {
            uint64_t x;
            if (get_u64(&shape->u.items[d], &x))
                return ck_fail(err, CKPT_E_FORMAT,
                               "safetensors at offset %llu: tensor '%s' has a shape entry "
                               "that is not a non-negative integer",
                               (ull)X, m->key);
            dims[d] = (int64_t)x;
            if (x == 0) has_zero = true;
            if (x && t->numel > UINT64_MAX / x) overflow = true;
            t->numel *= x;
        }
        t->shape = dims;
    }
    if (has_zero) { /* a zero dimension wins over an overflow */
        overflow = false;
        t->numel = 0;
    }
    t->size = t->end - t->begin;
    const st_dtype *info = find_dtype(dt->u.str);
    t->dtype = info ? info->dtype : CKPT_DTYPE_INVALID;
    if (info) {
        if (overflow || t->numel > UINT64_MAX / info->bits)
            return ck_fail(err, CKPT_E_FORMAT,
                           "safetensors at offset %llu: tensor '%s' has too many elements", (ull)X,
                           m->key);
        uint64_t nbits = t->numel * info->bits;
        if (nbits % 8 || nbits / 8 != t->size)
            return ck_fail(err, CKPT_E_FORMAT,
                           "safetensors at offset %llu: tensor '%s' (%s, %llu elements) needs "
                           "%llu%s bytes but data_offsets [%llu, %llu) hold %llu",
                           (ull)X, m->key, dt->u.str, (ull)t->numel, (ull)(nbits / 8),
                           nbits % 8 ? "+" : "", (ull)t->begin, (ull)t->end, (ull)t->size);
    }
    return CKPT_OK;
}

static ckpt_status parse_header(ts_safetensors *st, const ck_json *root, uint64_t X,
                                ckpt_error *err) {
    if (root->type != CK_JSON_OBJECT)
        return ck_fail(err, CKPT_E_FORMAT, "safetensors at offset %llu: header is not an object",
                       (ull)X);
    size_t ntensors = 0;
    const ck_json *meta = NULL;
    for (size_t i = 0; i < root->len; i++) {
        const ck_json_member *m = &root->u.members[i];
        if (m->key_len == 12 && !memcmp(m->key, "__metadata__", 12)) {
            if (meta)
                return ck_fail(err, CKPT_E_FORMAT,
                               "safetensors at offset %llu: duplicate __metadata__", (ull)X);
            meta = &m->value;
        } else {
            ntensors++;
        }
    }
    if (meta && meta->type == CK_JSON_OBJECT) {
        st->nmeta = meta->len;
        st->meta_keys = ck_arena_alloc(st->arena, (meta->len + 1) * sizeof(char *));
        st->meta_values = ck_arena_alloc(st->arena, (meta->len + 1) * sizeof(char *));
        if (!st->meta_keys || !st->meta_values) return CKPT_E_NOMEM;
        for (size_t i = 0; i < meta->len; i++) {
            const ck_json_member *m = &meta->u.members[i];
            if (m->value.type != CK_JSON_STRING)
                return ck_fail(err, CKPT_E_FORMAT,
                               "safetensors at offset %llu: __metadata__ value '%s' is a %s, "
                               "not a string",
                               (ull)X, m->key, ck_json_type_name(m->value.type));
            st->meta_keys[i] = m->key;
            st->meta_values[i] = m->value.u.str;
        }
    } else if (meta && meta->type != CK_JSON_NULL) {
        return ck_fail(err, CKPT_E_FORMAT,
                       "safetensors at offset %llu: __metadata__ is a %s, not an object", (ull)X,
                       ck_json_type_name(meta->type));
    }

    size_t nslots = 16;
    while (nslots < 2 * ntensors)
        nslots *= 2;
    st->n = ntensors;
    st->tensors = ck_arena_alloc(st->arena, (ntensors + 1) * sizeof *st->tensors);
    st->slots = ck_arena_alloc(st->arena, nslots * sizeof *st->slots);
    ts_st_tensor **order = ck_arena_alloc(st->arena, (ntensors + 1) * sizeof *order);
    if (!st->tensors || !st->slots || !order) return CKPT_E_NOMEM;
    st->slot_mask = nslots - 1;
    size_t k = 0;
    for (size_t i = 0; i < root->len; i++) {
        const ck_json_member *m = &root->u.members[i];
        if (&m->value == meta) continue;
        ts_st_tensor *t = &st->tensors[k];
        CK_TRY(parse_entry(st, m, t, X, err));
        size_t slot = (size_t)hash_bytes(t->name, t->name_len) & st->slot_mask;
        while (st->slots[slot]) {
            const ts_st_tensor *o = &st->tensors[st->slots[slot] - 1];
            if (o->name_len == t->name_len && !memcmp(o->name, t->name, t->name_len))
                return ck_fail(err, CKPT_E_FORMAT,
                               "safetensors at offset %llu: duplicate tensor '%s'", (ull)X,
                               t->name);
            slot = (slot + 1) & st->slot_mask;
        }
        st->slots[slot] = (uint32_t)(k + 1);
        order[k] = t;
        k++;
    }
    /* The tensors must tile [0, data_len) exactly, as the safetensors crate requires. */
    qsort(order, ntensors, sizeof *order, cmp_begin);
    uint64_t end = 0;
    for (size_t i = 0; i < ntensors; i++) {
        if (order[i]->begin != end)
            return ck_fail(err, CKPT_E_FORMAT,
                           "safetensors at offset %llu: tensor '%s' starts at data offset %llu; "
                           "expected %llu (tensors must tile the data without gaps or overlaps)",
                           (ull)X, order[i]->name, (ull)order[i]->begin, (ull)end);
        end = order[i]->end;
    }
    st->data_len = end;
    for (size_t i = 0; i < ntensors; i++)
        st->tensors[i].data_offset = st->data_start + st->tensors[i].begin;
    return CKPT_OK;
}

static ckpt_status open_blob(const ck_source *src, uint64_t offset, uint64_t max_header,
                             bool check_data, ts_safetensors **out, ckpt_error *err) {
    if (!out) return ck_fail(err, CKPT_E_INVAL, "ts_safetensors_open: out is NULL");
    *out = NULL;
    if (!src) return ck_fail(err, CKPT_E_INVAL, "ts_safetensors_open: no source");
    const uint64_t X = offset;
    if (!max_header) max_header = TS_SAFETENSORS_MAX_HEADER;
    if (offset > src->len || src->len - offset < 8)
        return ck_fail(err, CKPT_E_RANGE,
                       "safetensors at offset %llu: no room for the 8-byte header length in a "
                       "%llu-byte source",
                       (ull)X, (ull)src->len);
    uint64_t avail = src->len - offset;
    uint8_t *owned = NULL;
    const uint8_t *buf;
    uint64_t have = avail < 8 + (uint64_t)ST_FIRST_READ ? avail : 8 + (uint64_t)ST_FIRST_READ;
    ckpt_status s;
    if (src->mem) {
        buf = src->mem + offset;
    } else {
        owned = malloc((size_t)have);
        if (!owned) return ck_fail(err, CKPT_E_NOMEM, "safetensors: out of memory");
        s = ck_source_read(src, offset, owned, have, err);
        if (s != CKPT_OK) {
            free(owned);
            return s;
        }
        buf = owned;
    }
    uint64_t n = ts_safetensors_len_prefix(buf);
    if (n > max_header) {
        free(owned);
        return ck_fail(err, CKPT_E_LIMIT,
                       "safetensors at offset %llu: not a safetensors file (its 8-byte header "
                       "length exceeds the %llu-byte limit)",
                       (ull)X, (ull)max_header);
    }
    if (n > avail - 8) {
        free(owned);
        return ck_fail(err, CKPT_E_RANGE,
                       "safetensors at offset %llu: not a safetensors file (its 8-byte header "
                       "length passes the end of the %llu-byte source)",
                       (ull)X, (ull)src->len);
    }
    if (owned && 8 + n > have) {
        uint8_t *bigger = realloc(owned, (size_t)(8 + n));
        if (!bigger) {
            free(owned);
            return ck_fail(err, CKPT_E_NOMEM, "safetensors: out of memory for the header");
        }
        owned = bigger;
        s = ck_source_read(src, offset + have, owned + have, 8 + n - have, err);
        if (s != CKPT_OK) {
            free(owned);
            return s;
        }
        buf = owned;
    }

    ts_safetensors *st = calloc(1, sizeof *st);
    /* A parsed node takes <= 32 bytes per 2 header bytes; no real header comes close. */
    ck_arena *arena = ck_arena_new(n < (UINT64_MAX >> 6) ? 32 * n + (1u << 20) : 0);
    if (!st || !arena) {
        free(st);
        ck_arena_free(arena);
        free(owned);
        return ck_fail(err, CKPT_E_NOMEM, "safetensors: out of memory");
    }
    st->arena = arena;
    st->header_len = n;
    st->data_start = offset + 8 + n;
    const ck_json *root;
    s = ck_json_parse(arena, (const char *)buf + 8, (size_t)n, ST_JSON_DEPTH, &root, err);
    if (s != CKPT_OK) {
        ck_error_prefix(err, "safetensors at offset %llu: header ", (ull)X);
    } else {
        s = parse_header(st, root, X, err);
        if (s == CKPT_E_NOMEM)
            s = ck_fail(err, ck_arena_over_budget(arena) ? CKPT_E_LIMIT : CKPT_E_NOMEM,
                        "safetensors at offset %llu: out of memory for the header", (ull)X);
    }
    free(owned);
    if (s == CKPT_OK && check_data && st->data_len > src->len - st->data_start)
        s = ck_fail(err, CKPT_E_RANGE,
                    "safetensors at offset %llu: data section of %llu bytes at %llu passes the "
                    "end of the %llu-byte source",
                    (ull)X, (ull)st->data_len, (ull)st->data_start, (ull)src->len);
    if (s != CKPT_OK) {
        ts_safetensors_free(st);
        return s;
    }
    *out = st;
    return CKPT_OK;
}

ckpt_status ts_safetensors_open(const ck_source *src, uint64_t offset, uint64_t max_header,
                                ts_safetensors **out, ckpt_error *err) {
    return open_blob(src, offset, max_header, true, out, err);
}

ckpt_status ts_safetensors_open_header(const ck_source *src, uint64_t offset, uint64_t max_header,
                                       ts_safetensors **out, ckpt_error *err) {
    return open_blob(src, offset, max_header, false, out, err);
}

void ts_safetensors_free(ts_safetensors *st) {
    if (!st) return;
    ck_arena_free(st->arena);
    free(st);
}

uint64_t ts_safetensors_header_len(const ts_safetensors *st) { return st->header_len; }
uint64_t ts_safetensors_data_start(const ts_safetensors *st) { return st->data_start; }
uint64_t ts_safetensors_data_len(const ts_safetensors *st) { return st->data_len; }
size_t ts_safetensors_num_tensors(const ts_safetensors *st) { return st->n; }

const ts_st_tensor *ts_safetensors_tensor(const ts_safetensors *st, size_t i) {
    return i < st->n ? &st->tensors[i] : NULL;
}

const ts_st_tensor *ts_safetensors_find(const ts_safetensors *st, const char *name) {
    if (!name) return NULL;
    size_t len = strlen(name);
    for (size_t slot = (size_t)hash_bytes(name, len) & st->slot_mask; st->slots[slot];
         slot = (slot + 1) & st->slot_mask) {
        const ts_st_tensor *t = &st->tensors[st->slots[slot] - 1];
        if (t->name_len == len && !memcmp(t->name, name, len)) return t;
    }
    return NULL;
}

size_t ts_safetensors_num_metadata(const ts_safetensors *st) { return st->nmeta; }
const char *ts_safetensors_metadata_key(const ts_safetensors *st, size_t i) {
    return i < st->nmeta ? st->meta_keys[i] : NULL;
}
const char *ts_safetensors_metadata_value(const ts_safetensors *st, size_t i) {
    return i < st->nmeta ? st->meta_values[i] : NULL;
}

const char *ts_safetensors_metadata(const ts_safetensors *st, const char *key) {
    if (!key) return NULL;
    for (size_t i = st->nmeta; i-- > 0;)
        if (!strcmp(st->meta_keys[i], key)) return st->meta_values[i];
    return NULL;
}
