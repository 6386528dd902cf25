/* cli_slice.c — `--slice` (numpy basic slicing: start:stop per dim, no steps) into boxes of
 * a tensor. */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void cli_slice_full(cli_slice *s, int ndim, const int64_t *shape) {
    memset(s, 0, sizeof *s);
    s->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        s->count[d] = shape[d];
}

uint64_t cli_slice_numel(const cli_slice *s) {
    uint64_t n = 1;
    for (int d = 0; d < s->ndim; d++)
        n *= (uint64_t)s->count[d];
    return n;
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
    return s;
}

/* An optional integer: empty -> *present = false. */
static bool parse_int(char *text, bool *present, int64_t *v) {
    char *t = trim(text);
    *present = *t != '\0';
    if (!*present) return true;
    errno = 0;
    char *end;
    long long x = strtoll(t, &end, 10);
    if (errno || *end || end == t) return false;
    *v = x;
    return true;
}

static int64_t clamp_bound(int64_t v, int64_t n) {
    if (v < 0) {
        v += n;
        if (v < 0) v = 0;
    }
    return v > n ? n : v;
}

/* One comma-separated item applied to dim d of size n. */
static bool slice_item(char *item, int d, int64_t n, cli_slice *s, char *msg, size_t msg_size) {
    char *c1 = strchr(item, ':');
    if (!c1) {
        bool present;
        int64_t i = 0;
        if (!parse_int(item, &present, &i) || !present) {
            snprintf(msg, msg_size, "invalid index '%s' (expected an integer or start:stop)",
                     trim(item));
            return false;
        }
        int64_t j = i < 0 ? i + n : i;
        if (j < 0 || j >= n) {
            snprintf(msg, msg_size, "index %lld is out of bounds for dimension %d with size %lld",
                     (long long)i, d, (long long)n);
            return false;
        }
        s->start[d] = j;
        s->count[d] = 1;
        s->drop[d] = true;
        return true;
    }
    *c1 = '\0';
    char *rest = c1 + 1, *c2 = strchr(rest, ':');
    if (c2) {
        *c2 = '\0';
        bool present;
        int64_t step = 1;
        if (strchr(c2 + 1, ':') || !parse_int(c2 + 1, &present, &step)) {
            snprintf(msg, msg_size, "invalid slice step '%s'", c2 + 1);
            return false;
        }
        if (present && step != 1) {
            snprintf(msg, msg_size,
                     step == 0 ? "slice step cannot be zero (dimension %d)"
                               : "slice steps are not supported (dimension %d): use start:stop",
                     d);
            return false;
        }
    }
    bool has_start, has_stop;
    int64_t a = 0, b = n;
    if (!parse_int(item, &has_start, &a)) {
        snprintf(msg, msg_size, "invalid slice start '%s'", trim(item));
        return false;
    }
    if (!parse_int(rest, &has_stop, &b)) {
        snprintf(msg, msg_size, "invalid slice stop '%s'", trim(rest));
        return false;
    }
    a = has_start ? clamp_bound(a, n) : 0;
    b = has_stop ? clamp_bound(b, n) : n;
    s->start[d] = a;
    s->count[d] = b > a ? b - a : 0;
    s->drop[d] = false;
    return true;
}

bool cli_slice_parse(const char *text, int ndim, const int64_t *shape, cli_slice *s, char *msg,
                     size_t msg_size) {
    cli_slice_full(s, ndim, shape);
    size_t tl = strlen(text);
    char *buf = malloc(tl + 1);
    if (!buf) {
        snprintf(msg, msg_size, "out of memory");
        return false;
    }
    memcpy(buf, text, tl + 1);
    bool ok = false;
    char *items[CKPT_MAX_NDIM + 2];
    int nitems = 0, ellipsis = -1;
    if (*trim(buf) != '\0') {
        char *p = buf;
        for (;;) {
            char *comma = strchr(p, ',');
            if (comma) *comma = '\0';
            if (nitems == CKPT_MAX_NDIM + 1) {
                snprintf(msg, msg_size, "too many indices for a tensor of %d dimensions", ndim);
                goto out;
            }
            char *it = trim(p);
            if (!*it) {
                snprintf(msg, msg_size, "empty item in slice '%s'", text);
                goto out;
            }
            if (strcmp(it, "...") == 0) {
                if (ellipsis >= 0) {
                    snprintf(msg, msg_size, "a slice can only have a single ellipsis ('...')");
                    goto out;
                }
                ellipsis = nitems;
            }
            items[nitems++] = it;
            if (!comma) break;
            p = comma + 1;
        }
    }
    int used = nitems - (ellipsis >= 0);
    if (used > ndim) {
        snprintf(msg, msg_size,
                 "too many indices for tensor: tensor is %d-dimensional, but %d were indexed", ndim,
                 used);
        goto out;
    }
    int d = 0;
    for (int k = 0; k < nitems; k++) {
        if (k == ellipsis) {
            d += ndim - used; /* those dims stay whole */
            continue;
        }
        if (!slice_item(items[k], d, shape[d], s, msg, msg_size)) goto out;
        d++;
    }
    ok = true;
out:
    free(buf);
    return ok;
}

static uint64_t sat_mul(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

ckpt_status cli_read_blocks(ckpt_reader *r, const ckpt_entry *e, const cli_slice *s, uint64_t limit,
                            cli_block_sink sink, void *ctx, const char *dest, ckpt_error *err) {
    size_t item = ckpt_dtype_itemsize(ckpt_entry_dtype(e));
    int nd = s->ndim;
    if (item == 0) {
        /* let the library say why (unknown dtype, metadata defect...) */
        ckpt_status st = ckpt_read_region(r, e, s->start, s->count, NULL, 0, err);
        if (st != CKPT_OK) return st;
        snprintf(err->message, sizeof err->message, "'%s': unsupported dtype", ckpt_entry_key(e));
        return err->code = CKPT_E_UNSUPPORTED;
    }
    if (cli_slice_numel(s) == 0) return CKPT_OK;
    if (limit < item) limit = item;
    /* inner[d]: bytes of one index step along dim d-1 (inner[nd] = one element); the block
     * splits dim k, the outermost whose step fits the limit: dims < k advance one index at a
     * time, dim k `rows` indices per block, dims > k are whole. */
    uint64_t inner[CKPT_MAX_NDIM + 1];
    inner[nd] = item;
    for (int d = nd - 1; d >= 0; d--)
        inner[d] = sat_mul(inner[d + 1], (uint64_t)s->count[d]);
    int k = 0;
    while (k < nd && inner[k + 1] > limit)
        k++;
    uint64_t rows = 1;
    if (nd) {
        rows = limit / inner[k + 1];
        if (rows > (uint64_t)s->count[k]) rows = (uint64_t)s->count[k];
        if (!rows) rows = 1;
    }
    uint64_t bufsize = nd ? rows * inner[k + 1] : item;
    void *buf = malloc(bufsize);
    if (!buf) {
        snprintf(err->message, sizeof err->message, "out of memory (block of %llu bytes)",
                 (unsigned long long)bufsize);
        return err->code = CKPT_E_NOMEM;
    }
    ckpt_status st = CKPT_OK;
    if (nd == 0) {
        st = ckpt_read_region(r, e, NULL, NULL, buf, bufsize, err);
        if (st == CKPT_OK && !sink(ctx, buf, bufsize)) goto sink_failed;
        free(buf);
        return st;
    }
    int64_t idx[CKPT_MAX_NDIM] = {0}, start[CKPT_MAX_NDIM], count[CKPT_MAX_NDIM];
    for (;;) {
        for (int64_t row = 0; row < s->count[k]; row += (int64_t)rows) {
            for (int d = 0; d < nd; d++) {
                if (d < k) {
                    start[d] = s->start[d] + idx[d];
                    count[d] = 1;
                } else if (d == k) {
                    start[d] = s->start[d] + row;
                    int64_t left = s->count[d] - row;
                    count[d] = left < (int64_t)rows ? left : (int64_t)rows;
                } else {
                    start[d] = s->start[d];
                    count[d] = s->count[d];
                }
            }
            size_t n = (size_t)((uint64_t)count[k] * inner[k + 1]);
            st = ckpt_read_region(r, e, start, count, buf, n, err);
            if (st != CKPT_OK) goto out;
            if (!sink(ctx, buf, n)) goto sink_failed;
        }
        int d = k - 1; /* odometer over dims < k */
        while (d >= 0 && ++idx[d] == s->count[d])
            idx[d--] = 0;
        if (d < 0) break;
    }
out:
    free(buf);
    return st;
sink_failed:
    snprintf(err->message, sizeof err->message, "error writing to %s: %s", dest, strerror(errno));
    free(buf);
    return err->code = CKPT_E_IO;
}
