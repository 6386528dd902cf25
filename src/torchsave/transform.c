/* transform.c — owns DCP stream-transform handling: parsing `_StorageInfo.transform_descriptors`
 * (`name[@domain][/version]`, looked up like torch's ExtensionRegistry: the text before the
 * first '/' must match a known name exactly, the version's major part must be supported) and
 * undoing them into memory.  Only "stream.zstd/1" exists in torch; it is decoded with libzstd's
 * streaming API (frames may omit their content size; concatenated and skippable frames are
 * accepted), never producing more than the caller's bound. */
#include "torchsave/transform.h"

#include "util/error.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#include <zstd_errors.h>

#define TS_MAX_TRANSFORMS 16
#define TS_ZSTD_WINDOWLOG_DEFAULT 27 /* ZSTD_WINDOWLOG_LIMIT_DEFAULT */
#define TS_ZSTD_WINDOWLOG_MAX 31     /* ZSTD_WINDOWLOG_MAX_64 */
#define TS_ZSTD_FRAMEHEADER_MAX 18   /* ZSTD_FRAMEHEADERSIZE_MAX */

typedef unsigned long long ull;

typedef enum ts_transform_kind { TS_TRANSFORM_ZSTD = 1 } ts_transform_kind;

typedef struct ts_transform {
    ts_transform_kind kind;
    char text[128]; /* the descriptor, for messages */
} ts_transform;

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static ckpt_status parse_one(const char *d, size_t len, ts_transform *t, ckpt_error *err) {
    int shown = len > 100 ? 100 : (int)len;
    snprintf(t->text, sizeof t->text, "%.*s%s", shown, d, len > 100 ? "..." : "");
    const char *slash = memchr(d, '/', len);
    size_t name_len = slash ? (size_t)(slash - d) : len;
    if (name_len == strlen("stream.zstd") && !memcmp(d, "stream.zstd", name_len)) {
        if (!slash)
            return ck_fail(err, CKPT_E_UNSUPPORTED,
                           "transform '%s' has no version (expected stream.zstd/1)", t->text);
        const char *ver = slash + 1;
        size_t ver_len = len - name_len - 1;
        const char *dot = memchr(ver, '.', ver_len);
        size_t major_len = dot ? (size_t)(dot - ver) : ver_len;
        if (major_len != 1 || ver[0] != '1')
            return ck_fail(err, CKPT_E_UNSUPPORTED,
                           "transform '%s' has an unsupported version (supported: "
                           "stream.zstd/1)",
                           t->text);
        t->kind = TS_TRANSFORM_ZSTD;
        return CKPT_OK;
    }
    return ck_fail(err, CKPT_E_UNSUPPORTED, "unknown transform '%s' (supported: stream.zstd/1)",
                   t->text);
}

static ckpt_status parse_list(const char *list, ts_transform *out, size_t *n, ckpt_error *err) {
    *n = 0;
    if (!list) return CKPT_OK;
    const char *p = list;
    while (is_space(*p))
        p++;
    if (!*p) return CKPT_OK;
    for (;;) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        const char *a = p, *b = end;
        while (a < b && is_space(*a))
            a++;
        while (b > a && is_space(b[-1]))
            b--;
        if (a == b) return ck_fail(err, CKPT_E_FORMAT, "empty transform descriptor in '%s'", list);
        if (*n == TS_MAX_TRANSFORMS)
            return ck_fail(err, CKPT_E_LIMIT, "more than %d transform descriptors in '%s'",
                           TS_MAX_TRANSFORMS, list);
        CK_TRY(parse_one(a, (size_t)(b - a), &out[*n], err));
        (*n)++;
        if (!*end) return CKPT_OK;
        p = end + 1;
    }
}

ckpt_status ts_transform_check(const char *descriptors, ckpt_error *err) {
    ts_transform t[TS_MAX_TRANSFORMS];
    size_t n;
    return parse_list(descriptors, t, &n, err);
}

/* The largest buffer we will ever need: max_out + 1 bytes (one more detects overflow). */
static size_t out_limit(uint64_t max_out) {
    return max_out >= (uint64_t)SIZE_MAX - 1 ? SIZE_MAX - 1 : (size_t)max_out + 1;
}

static ckpt_status zstd_decode(const ck_source *in, uint64_t max_out, const char *what,
                               uint8_t **out, size_t *out_len, ckpt_error *err) {
    if (in->len == 0) return ck_fail(err, CKPT_E_FORMAT, "%s: empty zstd stream", what);
    ckpt_status st = CKPT_OK;
    const size_t limit = out_limit(max_out);
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    uint8_t *inbuf = NULL, *obuf = NULL;
    if (!dctx) return ck_fail(err, CKPT_E_NOMEM, "%s: cannot create a zstd context", what);

    /* Windows never need to exceed the output bound. */
    int wlog = TS_ZSTD_WINDOWLOG_DEFAULT;
    while (wlog < TS_ZSTD_WINDOWLOG_MAX && ((uint64_t)1 << wlog) < max_out)
        wlog++;
    ZSTD_DCtx_setParameter(dctx, ZSTD_d_windowLogMax, wlog);

    uint8_t head[TS_ZSTD_FRAMEHEADER_MAX];
    size_t head_len = in->len < sizeof head ? (size_t)in->len : sizeof head;
    const uint8_t *hp = in->mem;
    if (!hp) {
        CK_TRY_GOTO(st, ck_source_read(in, 0, head, head_len, err), done);
        hp = head;
    }
    unsigned long long csize = ZSTD_getFrameContentSize(hp, head_len);
    size_t cap;
    if (csize != ZSTD_CONTENTSIZE_UNKNOWN && csize != ZSTD_CONTENTSIZE_ERROR) {
        if (csize > max_out) {
            st = ck_fail(err, CKPT_E_LIMIT,
                         "%s: zstd frame declares %llu decoded bytes, more than the %llu "
                         "allowed",
                         what, csize, (ull)max_out);
            goto done;
        }
        cap = (size_t)csize + 1;
    } else {
        cap = in->len > (SIZE_MAX / 4) ? limit : (size_t)in->len * 4;
        if (cap < 65536) cap = 65536;
    }
    if (cap > limit) cap = limit;
    obuf = malloc(cap);
    if (!obuf) {
        st = ck_fail(err, CKPT_E_NOMEM, "%s: out of memory (%zu bytes)", what, cap);
        goto done;
    }

    size_t chunk = ZSTD_DStreamInSize();
    if (!in->mem) {
        inbuf = malloc(chunk);
        if (!inbuf) {
            st = ck_fail(err, CKPT_E_NOMEM, "%s: out of memory", what);
            goto done;
        }
    }
    ZSTD_inBuffer ib = {in->mem, in->mem ? (size_t)in->len : 0, 0};
    uint64_t in_off = in->mem ? in->len : 0; /* bytes of the source handed to ib so far */
    ZSTD_outBuffer ob = {obuf, cap, 0};
    size_t ret = 1;
    for (;;) {
        if (ib.pos == ib.size && in_off < in->len) {
            size_t want = in->len - in_off < chunk ? (size_t)(in->len - in_off) : chunk;
            CK_TRY_GOTO(st, ck_source_read(in, in_off, inbuf, want, err), done);
            ib.src = inbuf;
            ib.size = want;
            ib.pos = 0;
            in_off += want;
        }
        if (ob.pos == ob.size) {
            if (ob.size >= limit) {
                st = ck_fail(err, CKPT_E_LIMIT,
                             "%s: zstd stream decodes to more than the %llu bytes allowed", what,
                             (ull)max_out);
                goto done;
            }
            size_t ncap = ob.size > limit / 2 ? limit : ob.size * 2;
            uint8_t *nb = realloc(obuf, ncap);
            if (!nb) {
                st = ck_fail(err, CKPT_E_NOMEM, "%s: out of memory (%zu bytes)", what, ncap);
                goto done;
            }
            obuf = nb;
            ob.dst = nb;
            ob.size = ncap;
        }
        ret = ZSTD_decompressStream(dctx, &ob, &ib);
        if (ZSTD_isError(ret)) {
            /* A window larger than the output bound allows is a limit, not corruption. */
            bool window = ZSTD_getErrorCode(ret) == ZSTD_error_frameParameter_windowTooLarge;
            st = ck_fail(err, window ? CKPT_E_LIMIT : CKPT_E_FORMAT,
                         "%s: zstd error near input offset %llu: %s", what,
                         (ull)(in_off - (ib.size - ib.pos)), ZSTD_getErrorName(ret));
            goto done;
        }
        if (ob.pos > max_out) {
            st = ck_fail(err, CKPT_E_LIMIT,
                         "%s: zstd stream decodes to more than the %llu bytes allowed", what,
                         (ull)max_out);
            goto done;
        }
        /* All input handed over and the decoder left room: everything is flushed. */
        if (ib.pos == ib.size && in_off == in->len && ob.pos < ob.size) break;
    }
    if (ret != 0) {
        st = ck_fail(err, CKPT_E_FORMAT, "%s: zstd stream is truncated (%llu input bytes)", what,
                     (ull)in->len);
        goto done;
    }
    if (ob.pos + 1 < ob.size / 2) { /* give back a large overestimate */
        uint8_t *nb = realloc(obuf, ob.pos + 1);
        if (nb) obuf = nb;
    }
    *out = obuf;
    *out_len = ob.pos;
    obuf = NULL;
done:
    free(obuf);
    free(inbuf);
    ZSTD_freeDCtx(dctx);
    return st;
}

static ckpt_status read_all(const ck_source *src, uint64_t max_out, uint8_t **out, size_t *out_len,
                            ckpt_error *err) {
    if (src->len > max_out || src->len >= SIZE_MAX)
        return ck_fail(err, CKPT_E_LIMIT, "item of %llu bytes is larger than the %llu allowed",
                       (ull)src->len, (ull)max_out);
    uint8_t *p = malloc(src->len ? (size_t)src->len : 1);
    if (!p) return ck_fail(err, CKPT_E_NOMEM, "out of memory (%llu bytes)", (ull)src->len);
    ckpt_status st = ck_source_read(src, 0, p, src->len, err);
    if (st != CKPT_OK) {
        free(p);
        return st;
    }
    *out = p;
    *out_len = (size_t)src->len;
    return CKPT_OK;
}

ckpt_status ts_transform_decode(const ck_source *src, const char *descriptors, uint64_t max_out,
                                uint8_t **out, size_t *out_len, ckpt_error *err) {
    if (!src || !out || !out_len)
        return ck_fail(err, CKPT_E_INVAL, "ts_transform_decode: NULL argument");
    *out = NULL;
    *out_len = 0;
    ts_transform t[TS_MAX_TRANSFORMS];
    size_t n;
    CK_TRY(parse_list(descriptors, t, &n, err));
    if (n == 0) return read_all(src, max_out, out, out_len, err);

    uint8_t *cur = NULL;
    size_t cur_len = 0;
    ck_source mem = {.fd = -1, .name = src->name};
    for (size_t i = 0; i < n; i++) {
        const ck_source *in = src;
        if (i > 0) {
            mem.mem = cur;
            mem.len = cur_len;
            in = &mem;
        }
        uint8_t *next = NULL;
        size_t next_len = 0;
        char what[160];
        snprintf(what, sizeof what, "transform '%s'", t[i].text);
        ckpt_status st = zstd_decode(in, max_out, what, &next, &next_len, err);
        free(cur);
        if (st != CKPT_OK) return st;
        cur = next;
        cur_len = next_len;
    }
    *out = cur;
    *out_len = cur_len;
    return CKPT_OK;
}
