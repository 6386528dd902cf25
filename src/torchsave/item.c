/* item.c — opening one torch.save item: undo stream transforms, open the zip, decode
 * data.pkl (data-only), read the byteorder record. */
#include "torchsave/item.h"

#include "torchsave/transform.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

struct ts_item {
    ck_source src;    /* window in a file, or the decoded buffer below */
    uint8_t *decoded; /* owned: transforms undone into memory */
    char *name;       /* owned copy of the source name */
    zip_archive *zip;
    pk_doc *doc;
    bool big_endian;
};

#define TS_DEFAULT_MAX_DECODED (4ull << 30)
#define TS_DEFAULT_MAX_PICKLE (1ull << 30)

void ts_item_free(ts_item *it) {
    if (!it) return;
    pk_doc_free(it->doc);
    zip_close(it->zip);
    free(it->decoded);
    free(it->name);
    free(it);
}

static ckpt_status read_byteorder(ts_item *it, ckpt_error *err) {
    const zip_record *rec = zip_find(it->zip, "byteorder");
    if (!rec) return CKPT_OK; /* older archives: little-endian */
    uint8_t *buf = NULL;
    size_t len = 0;
    CK_TRY(zip_read_record(it->zip, rec, 16, &buf, &len, err));
    if (len == 3 && memcmp(buf, "big", 3) == 0) {
        it->big_endian = true;
    } else if (!(len == 6 && memcmp(buf, "little", 6) == 0)) {
        free(buf);
        return ck_fail(err, CKPT_E_FORMAT, "%s: byteorder record is neither 'little' nor 'big'",
                       it->name);
    }
    free(buf);
    return CKPT_OK;
}

ckpt_status ts_item_open(const ck_source *src, const ts_open_options *opts, ts_item **out,
                         ckpt_error *err) {
    *out = NULL;
    ts_item *it = calloc(1, sizeof *it);
    if (!it) return ck_fail(err, CKPT_E_NOMEM, "out of memory opening a torch.save item");
    it->name = strdup(src->name ? src->name : "(item)");
    if (!it->name) {
        free(it);
        return ck_fail(err, CKPT_E_NOMEM, "out of memory opening a torch.save item");
    }
    it->src = *src;
    it->src.name = it->name;
    ckpt_status st = CKPT_OK;
    if (opts && opts->transforms && opts->transforms[0]) {
        size_t len = 0;
        uint64_t max = opts->max_decoded_bytes ? opts->max_decoded_bytes : TS_DEFAULT_MAX_DECODED;
        if (opts->max_memory && opts->max_memory < max) max = opts->max_memory;
        CK_TRY_GOTO(st, ts_transform_decode(src, opts->transforms, max, &it->decoded, &len, err),
                    fail);
        it->src.fd = -1;
        it->src.base = 0;
        it->src.len = len;
        it->src.mem = it->decoded;
    }
    CK_TRY_GOTO(st, zip_open(&it->src, &it->zip, err), fail_ctx);
    const zip_record *pkl = zip_find(it->zip, "data.pkl");
    if (!pkl) {
        st = ck_fail(err, CKPT_E_FORMAT, "archive has no %s/data.pkl record", zip_root(it->zip));
        goto fail_ctx;
    }
    uint8_t *pbuf = NULL;
    size_t plen = 0;
    uint64_t pmax = opts && opts->max_pickle_bytes ? opts->max_pickle_bytes : TS_DEFAULT_MAX_PICKLE;
    uint64_t budget = opts ? opts->max_memory : 0, held = it->decoded ? it->src.len : 0;
    if (budget && budget - held < pmax) pmax = budget - held; /* transforms kept within it */
    CK_TRY_GOTO(st, zip_read_record(it->zip, pkl, pmax, &pbuf, &plen, err), fail_ctx);
    pk_limits lim = opts && opts->pickle_limits ? *opts->pickle_limits : (pk_limits){0};
    if (budget) {
        /* what is left, halved: the decoder holds its values and, beside them, its working
         * memory (stack, memo, hash) each within max_bytes, so both together stay within
         * what is left (at least 1 byte: 0 would be the default) */
        uint64_t left = budget > held + plen ? (budget - held - plen) / 2 : 0;
        if (!left) left = 1;
        if (!lim.max_bytes || left < lim.max_bytes) lim.max_bytes = left;
    }
    st = pk_decode(pbuf, plen, &lim, &it->doc, err);
    free(pbuf);
    if (st != CKPT_OK) {
        ck_error_prefix(err, "data.pkl: ");
        goto fail_ctx;
    }
    CK_TRY_GOTO(st, read_byteorder(it, err), fail_ctx);
    *out = it;
    return CKPT_OK;
fail_ctx:
    ck_error_prefix(err, "%s (item at offset %llu%s): ", it->name, (unsigned long long)src->base,
                    it->decoded ? ", after transforms" : "");
fail:
    ts_item_free(it);
    return st;
}

const pk_value *ts_item_root(const ts_item *it) { return pk_doc_root(it->doc); }
const zip_archive *ts_item_zip(const ts_item *it) { return it->zip; }
bool ts_item_big_endian(const ts_item *it) { return it->big_endian; }
const ck_source *ts_item_source(const ts_item *it) { return &it->src; }
bool ts_item_is_decoded(const ts_item *it) { return it->decoded != NULL; }
uint64_t ts_item_memory(const ts_item *it) {
    return (it->decoded ? it->src.len : 0) + pk_doc_bytes_used(it->doc);
}
