/* metadata_overlap.h — indexing a `.metadata` while it is still being decoded: the pairs of
 * the state_dict_metadata, planner_data and storage_data dicts are walked on a thread of
 * their own as the decoder finishes each SETITEMS batch, so that on two or more CPUs the walk
 * costs (almost) no time after the last byte is decoded; that thread also decodes part of the
 * batches (pk_watch.split), sharing the decoding itself between two CPUs. */
#ifndef CK_INDEX_METADATA_OVERLAP_H
#define CK_INDEX_METADATA_OVERLAP_H

#include "index/reader_i.h"
#include "pickle/pickle.h"

#include <stdbool.h>

typedef struct ck_overlap ck_overlap;

/* An overlapped walk into r, whose index must be empty (no entries, no files); messages name
 * `file`, which must outlive it.  NULL when out of memory (then decode and walk in turn).
 * No thread runs until the decoder hands over the first pairs.  `only_file`: no other
 * metadata file follows (then the entries' paths are settled while storage_data is still
 * being decoded: index_paths).  `lockstep` (tests): the decoder waits at every
 * hand-over until the walker has walked it. */
ck_overlap *ck_overlap_new(ckpt_reader *r, const char *file, bool only_file, bool lockstep);
/* The watch to decode the metadata pickle with (pk_decode_watched). */
const pk_watch *ck_overlap_watch(ck_overlap *o);
/* After decoding: waits for the walker and frees o.  *complete is true when r now holds the
 * index of `doc` exactly as ck_walk_doc(r, file, doc) would have made it; false
 * when the pickle did not allow it (a hand-made pickle that changed a handed-over value, keys
 * out of order, the dicts not where the walk looks, a defect the walk reports) or decoding
 * failed (doc NULL): r's index is then empty again and the caller walks doc itself.
 * Fails only when out of memory. */
ckpt_status ck_overlap_finish(ck_overlap *o, const pk_doc *doc, bool *complete, ckpt_error *err);

#endif
