/* metadata_dump.c — ckpt_metadata_dump_json: a checkpoint's `.metadata` (or its rank-local
 * `__<r>.metadata` files) decoded with the data-only pickle decoder and rendered as JSON,
 * for `ckpt dump-metadata` (HuggingFace safetensors storage: its headers, hf_storage.c).
 * Independent of the index: it shows the raw pickle tree. */
#include "ckpt.h"

#include "index/hf_storage.h"
#include "index/metadata_files.h"
#include "pickle/pickle.h"
#include "util/error.h"
#include "util/strbuf.h"
#include "value/value.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Reads and renders one metadata file.  CKPT_E_NOTFOUND when it does not exist. */
static ckpt_status dump_file(const char *path, const ckpt_limits *l, char **out, ckpt_error *err) {
    *out = NULL;
    pk_doc *doc = NULL;
    CK_TRY(ck_metadata_decode_file(path, l, &doc, NULL, err));
    ckpt_status s = pk_to_json(pk_doc_root(doc), l->max_depth,
                               pk_json_budget(pk_doc_bytes_used(doc)), out, err);
    if (s != CKPT_OK) ck_error_prefix(err, "%s: ", path);
    pk_doc_free(doc);
    return s;
}

ckpt_status ckpt_metadata_dump_json(const char *dir, const ckpt_open_options *opts, char **out,
                                    ckpt_error *err) {
    if (!out) return ck_fail(err, CKPT_E_INVAL, "ckpt_metadata_dump_json: NULL argument");
    *out = NULL;
    if (!dir) return ck_fail(err, CKPT_E_INVAL, "no checkpoint directory given");
    struct stat st;
    if (stat(dir, &st) < 0)
        return ck_fail(err, errno == ENOENT ? CKPT_E_NOTFOUND : CKPT_E_IO, "%s: %s", dir,
                       strerror(errno));
    if (!S_ISDIR(st.st_mode)) return ck_fail(err, CKPT_E_INVAL, "%s: not a directory", dir);
    ckpt_limits l;
    ck_limits_resolve(&l, opts ? opts->limits : NULL);

    size_t dl = strlen(dir);
    char *path = malloc(dl + 64);
    if (!path) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    snprintf(path, dl + 64, "%s/.metadata", dir);
    ckpt_status s = dump_file(path, &l, out, err);
    if (s != CKPT_E_NOTFOUND) {
        free(path);
        return s;
    }

    long long *ranks = NULL;
    size_t n = 0;
    s = ck_metadata_list_ranks(dir, &ranks, &n, err);
    if (s == CKPT_OK && n == 0) { /* HuggingFace safetensors storage: its headers */
        free(ranks);
        free(path);
        return ck_hf_dump_json(dir, &l, out, err);
    }
    ck_strbuf sb = CK_STRBUF_INIT;
    ck_strbuf_addc(&sb, '{');
    for (size_t i = 0; i < n && s == CKPT_OK; i++) {
        snprintf(path, dl + 64, "%s/__%lld.metadata", dir, ranks[i]);
        char *one = NULL;
        s = dump_file(path, &l, &one, err);
        if (s != CKPT_OK) break;
        ck_strbuf_addf(&sb, "%s\"__%lld.metadata\":", i ? "," : "", ranks[i]);
        ck_strbuf_adds(&sb, one);
        free(one);
    }
    ck_strbuf_addc(&sb, '}');
    if (s == CKPT_OK) s = ck_strbuf_status(&sb, "metadata dump", err);
    if (s == CKPT_OK) {
        *out = ck_strbuf_detach(&sb, NULL);
        if (!*out) s = ck_fail(err, CKPT_E_NOMEM, "out of memory");
    } else {
        ck_strbuf_release(&sb);
    }
    free(ranks);
    free(path);
    return s;
}
