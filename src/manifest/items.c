/* items.c — what a manifest covers: every stored item a reader references (each tensor
 * chunk's and each object's byte range in its data file) and the metadata file(s)
 * (HuggingFace storage: each file's header and the index json). */
#include "index/hf_storage.h"
#include "index/metadata_files.h"
#include "index/reader_i.h"
#include "manifest/manifest_i.h"
#include "torchsave/safetensors.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static ckpt_status push(ckpt_manifest_record **v, size_t *n, size_t *cap, ckpt_manifest_record rec,
                        ckpt_error *err) {
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 256;
        ckpt_manifest_record *m = realloc(*v, c * sizeof *m);
        if (!m) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
        *v = m;
        *cap = c;
    }
    (*v)[(*n)++] = rec;
    return CKPT_OK;
}

/* The bytes an item occupies.  A torch.save item is its recorded range; in the safetensors
 * serialization format (torch >= 2.8) every tensor's recorded offset is the start of one
 * blob holding all of the file's tensors and its length is only the tensor's size, so the
 * item is the blob: from that offset to the end of the file. */
static uint64_t item_length(ckpt_reader *r, const ck_loc *loc) {
    if (loc->transforms || loc->raw) return loc->length; /* raw: HuggingFace storage's bytes */
    int fd = ckpt_reader_file_fd(r, (uint32_t)loc->file_id, NULL);
    uint8_t magic[4];
    struct stat st;
    if (fd < 0 || pread(fd, magic, 4, (off_t)loc->offset) != 4 ||
        memcmp(magic, "PK\x03\x04", 4) == 0 || fstat(fd, &st) != 0 ||
        (uint64_t)st.st_size < loc->offset)
        return loc->length;
    return (uint64_t)st.st_size - loc->offset;
}

/* A metadata file's name lives in items->names (the reader stays untouched). */
static ckpt_status push_file(ckpt_reader *r, const char *name, manifest_item_list *l, size_t *cap,
                             ckpt_error *err) {
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", ckpt_reader_dir(r), name);
    if (stat(path, &st) != 0) return CKPT_OK;
    if (l->nnames == sizeof l->names / sizeof *l->names) return CKPT_OK;
    char *copy = strdup(name);
    if (!copy) return ck_fail(err, CKPT_E_NOMEM, "out of memory");
    l->names[l->nnames++] = copy;
    return push(&l->recs, &l->n, cap, (ckpt_manifest_record){copy, 0, (uint64_t)st.st_size, 0},
                err);
}

void manifest_items_release(manifest_item_list *l) {
    free(l->recs);
    for (size_t i = 0; i < l->nnames; i++)
        free(l->names[i]);
    memset(l, 0, sizeof *l);
}

ckpt_status manifest_items(ckpt_reader *r, manifest_item_list *l, ckpt_error *err) {
    memset(l, 0, sizeof *l);
    ckpt_manifest_record *v = NULL;
    size_t cap = 0, *n = &l->n;
    ckpt_status s = CKPT_OK;
    for (size_t i = 0; s == CKPT_OK && i < r->nentries; i++) {
        const ckpt_entry *e = &r->entries[i];
        if (e->kind == CKPT_ENTRY_OBJECT) {
            if (e->loc.file_id >= 0)
                s = push(&v, n, &cap,
                         (ckpt_manifest_record){r->files[e->loc.file_id].name, e->loc.offset,
                                                e->loc.length, 0},
                         err);
            continue;
        }
        for (size_t c = 0; s == CKPT_OK && c < e->nchunks; c++) {
            const ck_loc *loc = &e->chunks[c].loc;
            if (loc->file_id < 0 || !e->chunks[c].numel) continue;
            s = push(&v, n, &cap,
                     (ckpt_manifest_record){r->files[loc->file_id].name, loc->offset,
                                            item_length(r, loc), 0},
                     err);
        }
    }
    if (s == CKPT_OK && r->info.hf_storage) {
        /* no metadata pickle: each file's header (what gives dtypes, shapes and offsets) and
         * the index json stand in for it */
        for (size_t f = 0; s == CKPT_OK && f < r->nfiles; f++) {
            uint8_t head[8];
            int fd = ckpt_reader_file_fd(r, (uint32_t)f, NULL);
            if (fd < 0 || pread(fd, head, 8, 0) != 8) continue;
            uint64_t hl = ts_safetensors_len_prefix(head);
            if (hl > UINT64_MAX - 8) continue;
            s = push(&v, n, &cap, (ckpt_manifest_record){r->files[f].name, 0, 8 + hl, 0}, err);
        }
        l->recs = v;
        if (s == CKPT_OK) s = push_file(r, CK_HF_INDEX_JSON, l, &cap, err);
        v = l->recs;
    } else if (s == CKPT_OK && !r->info.rank_local_metadata) {
        l->recs = v;
        s = push_file(r, ".metadata", l, &cap, err);
        v = l->recs;
    } else if (s == CKPT_OK) {
        long long *ranks = NULL;
        size_t nr = 0;
        s = ck_metadata_list_ranks(ckpt_reader_dir(r), &ranks, &nr, err);
        for (size_t i = 0; s == CKPT_OK && i < nr; i++) {
            char name[64];
            snprintf(name, sizeof name, "__%lld.metadata", ranks[i]);
            l->recs = v;
            s = push_file(r, name, l, &cap, err);
            v = l->recs;
        }
        free(ranks);
    }
    l->recs = v;
    if (s != CKPT_OK) manifest_items_release(l);
    return s;
}
