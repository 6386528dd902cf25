/* test_torchsave_out.c — torch.save files of a reader's entries (ckpt_torchsave): for every
 * fixture, the streamed archive and the one read by ranges are the same bytes, real CRC-32s
 * of the tensor records included (computed by the ranges when first needed, also by threads
 * at once; zero_crc: the entries' tensors' 0), whatever the ranges (unaligned, across records,
 * past the end), and map's pieces tile each range in order; tensor bytes inside the archive are
 * the reference's; `under` selects a subtree (unknown: CKPT_E_NOTFOUND); what is left out is
 * listed with a reason; the zip writer's pieces have miniz's lengths (no data descriptor after
 * an empty record, 64-bit sizes from a 4 GiB offset or size on). */
#include <criterion/criterion.h>

#include "ckpt.h"
#include "ckpt_save.h"
#include "fixture_ref.h"
#include "save/zip_writer.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static bool put(void *ctx, const void *b, size_t n) {
    buf *o = ctx;
    if (o->n + n > o->cap) {
        o->cap = (o->n + n) * 2;
        o->p = realloc(o->p, o->cap);
        cr_assert_not_null(o->p);
    }
    memcpy(o->p + o->n, b, n);
    o->n += n;
    return true;
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* Zeroes the CRC of every data/N record in a streamed archive (data descriptor and central
 * directory), which is what the ranges serve with zero_crc. */
static void zero_tensor_crcs(uint8_t *a, size_t n) {
    for (size_t at = 0; at + 46 <= n; at++) {
        if (le32(a + at) != 0x02014b50u) continue;
        uint16_t nl = le16(a + at + 28);
        if (at + 46 + nl > n || nl < 13 || memcmp(a + at + 46, "archive/data/", 13) != 0) continue;
        memset(a + at + 16, 0, 4);
        uint64_t lho = le32(a + at + 42), size = le32(a + at + 20);
        cr_assert_neq(lho, 0xffffffffu); /* small fixtures: no Zip64 fields */
        uint16_t lnl = le16(a + lho + 26), lxl = le16(a + lho + 28);
        uint64_t d = lho + 30 + lnl + lxl + size;
        if (size) {
            cr_assert_eq(le32(a + d), 0x08074b50u);
            memset(a + d + 4, 0, 4);
        }
    }
}

typedef struct tile {
    uint64_t next;
    size_t pieces;
} tile;

static ckpt_status check_tile(void *ctx, const ckpt_torchsave_span *s, ckpt_error *err) {
    (void)err;
    tile *t = ctx;
    cr_assert_eq(s->offset, t->next);
    cr_assert_gt(s->len, 0);
    cr_assert((s->mem != NULL) != (s->tensor != NULL));
    if (s->tensor) cr_assert_leq(s->tensor_offset + s->len, ckpt_entry_nbytes(s->tensor));
    t->next += s->len;
    t->pieces++;
    return CKPT_OK;
}

typedef struct crc_reader {
    ckpt_torchsave *t;
    uint8_t *out;
    size_t n, from;
    ckpt_status st;
    ckpt_error err;
} crc_reader;

/* Bytes [from, n) (the tail: the central directory, and descriptors) into out. */
static void *read_half(void *arg) {
    crc_reader *c = arg;
    size_t got = 0;
    c->st = ckpt_torchsave_read(c->t, c->from, c->out, c->n - c->from, &got, &c->err);
    if (c->st == CKPT_OK && got != c->n - c->from) c->st = CKPT_E_IO;
    return NULL;
}

Test(torchsave_out, stream_and_ranges_agree_on_every_fixture) {
    char **names;
    size_t nf = ref_list(&names);
    cr_assert_gt(nf, 0);
    for (size_t f = 0; f < nf; f++) {
        ref_fixture fx;
        cr_assert_eq(ref_load(names[f], &fx), 0);
        ckpt_reader *r;
        ckpt_error err = {0};
        cr_assert_eq(ckpt_reader_open(fx.ckpt_dir, NULL, &r, &err), CKPT_OK, "%s", err.message);
        ckpt_torchsave *t;
        cr_assert_eq(ckpt_torchsave_create(r, NULL, &t, &err), CKPT_OK, "%s: %s", names[f],
                     err.message);
        buf out = {0};
        cr_assert_eq(ckpt_torchsave_write(t, 61, put, &out, &err), CKPT_OK, "%s", err.message);
        cr_assert_eq(out.n, ckpt_torchsave_size(t), "%s", names[f]);
        /* every reference tensor's bytes appear in the archive (each is its own record) */
        for (size_t i = 0; i < fx.n; i++) {
            const ref_entry *e = &fx.entries[i];
            if (e->kind != 'T' || e->nbytes < 8) continue;
            cr_assert_not_null(memmem(out.p, out.n, fx.bin + e->offset, e->nbytes), "%s: %s",
                               names[f], e->path);
        }
        uint8_t *got = malloc(out.n + 64);
        size_t n = 0;
        /* the ranges' CRCs: the central directory read first (the CRCs computed), by threads */
        crc_reader cr[4];
        pthread_t th[4];
        for (int k = 0; k < 4; k++) {
            cr[k] = (crc_reader){.t = t, .out = malloc(out.n), .n = out.n, .from = out.n / 2};
            cr_assert_eq(pthread_create(&th[k], NULL, read_half, &cr[k]), 0);
        }
        for (int k = 0; k < 4; k++) {
            pthread_join(th[k], NULL);
            cr_assert_eq(cr[k].st, CKPT_OK, "%s: %s", names[f], cr[k].err.message);
            cr_assert_eq(memcmp(cr[k].out, out.p + out.n / 2, out.n - out.n / 2), 0, "%s",
                         names[f]);
            free(cr[k].out);
        }
        cr_assert_eq(ckpt_torchsave_read(t, 0, got, out.n + 64, &n, &err), CKPT_OK);
        cr_assert_eq(n, out.n);
        cr_assert_eq(memcmp(got, out.p, out.n), 0, "%s", names[f]);
        /* zero_crc: the same bytes but the CRCs of the entries' tensor records (0; embedded
         * tensors, in memory, keep theirs: both sides zeroed here) */
        ckpt_torchsave *t0;
        ckpt_torchsave_options zo = {.zero_crc = true};
        cr_assert_eq(ckpt_torchsave_create(r, &zo, &t0, &err), CKPT_OK, "%s", err.message);
        uint8_t *zeroed = malloc(out.n);
        memcpy(zeroed, out.p, out.n);
        zero_tensor_crcs(zeroed, out.n);
        cr_assert_eq(ckpt_torchsave_read(t0, 0, got, out.n, &n, &err), CKPT_OK);
        zero_tensor_crcs(got, out.n);
        cr_assert_eq(memcmp(got, zeroed, out.n), 0, "%s", names[f]);
        free(zeroed);
        ckpt_torchsave_free(t0);
        srand(7 + (unsigned)f);
        for (int k = 0; k < 300; k++) {
            uint64_t a = (uint64_t)rand() % out.n;
            size_t len = 1 + (size_t)rand() % 5000;
            cr_assert_eq(ckpt_torchsave_read(t, a, got, len, &n, &err), CKPT_OK, "%s", err.message);
            cr_assert_eq(n, a + len > out.n ? out.n - a : len);
            cr_assert_eq(memcmp(got, out.p + a, n), 0, "%s [%llu, +%zu)", names[f],
                         (unsigned long long)a, n);
            tile tl = {a, 0};
            cr_assert_eq(ckpt_torchsave_map(t, a, len, check_tile, &tl, &err), CKPT_OK);
            cr_assert_eq(tl.next, a + n);
        }
        cr_assert_eq(ckpt_torchsave_read(t, out.n, got, 10, &n, &err), CKPT_OK);
        cr_assert_eq(n, 0);
        free(got);
        free(out.p);
        ckpt_torchsave_free(t);
        ckpt_reader_free(r);
        ref_free(&fx);
    }
    ref_free_names(names, nf);
}

static ckpt_reader *open_fixture(const char *name, ref_fixture *fx) {
    cr_assert_eq(ref_load(name, fx), 0);
    ckpt_reader *r;
    ckpt_error err = {0};
    cr_assert_eq(ckpt_reader_open(fx->ckpt_dir, NULL, &r, &err), CKPT_OK, "%s", err.message);
    return r;
}

Test(torchsave_out, subtrees_and_what_is_left_out) {
    ref_fixture fx;
    ckpt_reader *r = open_fixture("fsdp2_ws4", &fx);
    ckpt_error err = {0};
    ckpt_torchsave *t = NULL;
    ckpt_torchsave_options o = {.under = "model"};
    cr_assert_eq(ckpt_torchsave_create(r, &o, &t, &err), CKPT_OK);
    size_t model = ckpt_torchsave_num_tensors(t);
    cr_assert_gt(model, 0);
    cr_assert_eq(ckpt_torchsave_num_values(t), 0);
    ckpt_torchsave_free(t);
    o.under = "optim/param_groups/";
    cr_assert_eq(ckpt_torchsave_create(r, &o, &t, &err), CKPT_OK);
    cr_assert_eq(ckpt_torchsave_num_tensors(t), 0);
    cr_assert_gt(ckpt_torchsave_num_values(t), 5);
    ckpt_torchsave_free(t);
    o.under = "model/output.weight"; /* a tensor as the root */
    cr_assert_eq(ckpt_torchsave_create(r, &o, &t, &err), CKPT_OK);
    cr_assert_eq(ckpt_torchsave_num_tensors(t), 1);
    ckpt_torchsave_free(t);
    o.under = "mod"; /* a prefix of a name is not a path */
    t = (ckpt_torchsave *)1;
    cr_assert_eq(ckpt_torchsave_create(r, &o, &t, &err), CKPT_E_NOTFOUND);
    cr_assert_null(t);
    cr_assert_eq(ckpt_torchsave_create(r, NULL, &t, &err), CKPT_OK);
    cr_assert_eq(ckpt_torchsave_num_skipped(t), 0);
    cr_assert_gt(ckpt_torchsave_num_tensors(t), model);
    ckpt_torchsave_free(t);
    ckpt_torchsave_free(NULL);
    ckpt_reader_free(r);
    ref_free(&fx);

    r = open_fixture("noflatten_per_item", &fx);
    cr_assert_eq(ckpt_torchsave_create(r, NULL, &t, &err), CKPT_OK);
    /* cfg holds two tensors: their own records, beside the two entries' */
    cr_assert_eq(ckpt_torchsave_num_skipped(t), 0);
    cr_assert_eq(ckpt_torchsave_num_tensors(t), 4);
    cr_assert_null(ckpt_torchsave_skipped(t, 0, NULL));
    ckpt_torchsave_free(t);
    ckpt_reader_free(r);
    ref_free(&fx);
}

Test(torchsave_out, zip_pieces_have_minizs_lengths) {
    const char *nm = "archive/data/0";
    size_t nl = strlen(nm);
    uint8_t b[ZW_LOCAL_MAX];
    /* a local header pads the data to a multiple of 64 from the archive start */
    for (uint64_t cur = 0; cur < 200; cur += 7) {
        size_t hl = zw_local_header(b, nm, nl, cur, 10);
        cr_assert_eq((cur + hl) % 64, 0);
        cr_assert_eq(hl, zw_local_header(NULL, nm, nl, cur, 10));
        cr_assert_eq(le16(b + 6), 0x0808);
    }
    cr_assert_eq(zw_local_header(b, nm, nl, 0, 0) % 64, 0);
    cr_assert_eq(le16(b + 6), 0x0800); /* an empty record: no data descriptor */
    cr_assert_eq(zw_descriptor(b, 0, 0, 0), 0);
    cr_assert_eq(zw_descriptor(b, 0, 12, 0x1234), 16);
    cr_assert_eq(le32(b + 4), 0x1234);
    cr_assert_eq(zw_descriptor(b, 1ull << 32, 12, 0), 24);   /* past 4 GiB */
    cr_assert_eq(zw_descriptor(b, 0, 0xffffffffull, 0), 24); /* 4 GiB - 1 and more */
    cr_assert_eq(zw_central(b, nm, nl, 0, 12, 0), 46 + nl);
    cr_assert_eq(zw_central(b, nm, nl, 1ull << 32, 12, 0), 46 + nl + 12);
    cr_assert_eq(le32(b + 42), 0xffffffffu);
    cr_assert_eq(zw_central(b, nm, nl, 1ull << 32, 1ull << 32, 0), 46 + nl + 28);
    cr_assert_eq(le16(b + 6), 0); /* version needed: 0, as miniz */
    uint8_t tr[ZW_TRAILER_LEN];
    cr_assert_eq(zw_trailer(tr, 3, 100, 200), ZW_TRAILER_LEN);
    cr_assert_eq(le32(tr), 0x06064b50u);
    cr_assert_eq(le32(tr + 56), 0x07064b50u);
    cr_assert_eq(le32(tr + 76), 0x06054b50u);
}
