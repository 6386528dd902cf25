/* verify.c — the mount's `-o verify`: each stored item is hashed and compared with the
 * checkpoint's manifest the first time a read uses it; the verdict is remembered. */
#include "tree/tree_i.h"
#include "util/error.h"

ckpt_status tree_verify_item(tree_ckpt *c, const ck_loc *loc, ckpt_error *err) {
    if (!c->manifest || loc->file_id < 0) return CKPT_OK;
    const char *file = c->r->files[loc->file_id].name;
    const ckpt_manifest_record *rec = ckpt_manifest_find(c->manifest, file, loc->offset);
    if (!rec || rec->length < loc->length)
        return ck_fail(err, CKPT_E_CHECKSUM, "%s/%s: offset %llu: item not in the manifest", c->dir,
                       file, (unsigned long long)loc->offset);
    size_t i = (size_t)(rec - ckpt_manifest_record_at(c->manifest, 0));
    unsigned char state = atomic_load_explicit(&c->verified[i], memory_order_acquire);
    if (state == 0) {
        int fd = ckpt_reader_file_fd(c->r, (uint32_t)loc->file_id, err);
        if (fd < 0) return err ? err->code : CKPT_E_IO;
        uint64_t h;
        CK_TRY(ckpt_hash_range(fd, file, rec->offset, rec->length, &h, err));
        state = h == rec->hash ? 1 : 2;
        atomic_store_explicit(&c->verified[i], state, memory_order_release);
    }
    if (state == 2)
        return ck_fail(err, CKPT_E_CHECKSUM,
                       "%s/%s: offset %llu: %llu stored bytes do not match the manifest's hash",
                       c->dir, file, (unsigned long long)loc->offset,
                       (unsigned long long)loc->length);
    return CKPT_OK;
}
