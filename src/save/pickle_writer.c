/* pickle_writer.c — opcode emission, content memo and protocol-4 framing (pickle_writer.h). */
#include "save/pickle_writer.h"

#include "util/error.h"

#include <stdlib.h>
#include <string.h>

#define FRAME_TARGET 65536u
#define BATCH 1000u

static void put(pkw *w, const void *p, size_t n) {
    if (!ck_strbuf_add(&w->out, p, n)) w->nomem = true;
}
static void put1(pkw *w, unsigned char c) { put(w, &c, 1); }
static void put_le(pkw *w, uint64_t v, int n) {
    unsigned char b[8];
    for (int i = 0; i < n; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    put(w, b, (size_t)n);
}

static void open_frame(pkw *w) {
    put1(w, 0x95);
    put_le(w, 0, 8); /* length patched when the frame is closed */
    w->frame_start = w->out.len;
}

static void close_frame(pkw *w) {
    if (w->proto < 4 || w->nomem || !w->out.buf) return;
    uint64_t n = w->out.len - w->frame_start;
    for (int i = 0; i < 8; i++)
        w->out.buf[w->frame_start - 8 + i] = (char)(n >> (8 * i));
}

void pkw_init(pkw *w, int proto) {
    memset(w, 0, sizeof *w);
    w->proto = proto;
    if (!ck_htab_init(&w->memo_index, 64)) w->nomem = true;
    put1(w, 0x80);
    put1(w, (unsigned char)proto);
    if (proto >= 4) open_frame(w);
}

void pkw_release(pkw *w) {
    ck_strbuf_release(&w->out);
    ck_htab_release(&w->memo_index);
    for (size_t i = 0; i < w->nmemo; i++)
        free(w->memo[i].text);
    free(w->memo);
    w->memo = NULL;
    w->nmemo = w->memo_cap = 0;
}

void pkw_maybe_frame(pkw *w) {
    if (w->proto < 4 || w->nomem) return;
    if (w->out.len - w->frame_start >= FRAME_TARGET) {
        close_frame(w);
        open_frame(w);
    }
}

ckpt_status pkw_finish(pkw *w, char **out, size_t *len, ckpt_error *err) {
    put1(w, PKO_STOP);
    close_frame(w);
    if (w->nomem) {
        pkw_release(w);
        return ck_fail(err, CKPT_E_NOMEM, "pickle writer: out of memory");
    }
    size_t n = w->out.len;
    /* CPython drops an empty trailing frame; ours always holds at least STOP. */
    char *p = ck_strbuf_detach(&w->out, NULL);
    pkw_release(w);
    if (!p) return ck_fail(err, CKPT_E_NOMEM, "pickle writer: out of memory");
    *out = p;
    *len = n;
    return CKPT_OK;
}

void pkw_op(pkw *w, unsigned char op) { put1(w, op); }
void pkw_none(pkw *w) { put1(w, 'N'); }
void pkw_bool(pkw *w, bool v) { put1(w, v ? 0x88 : 0x89); }

void pkw_int(pkw *w, int64_t v) {
    if (v >= 0 && v <= 0xff) {
        put1(w, 'K');
        put_le(w, (uint64_t)v, 1);
    } else if (v >= 0 && v <= 0xffff) {
        put1(w, 'M');
        put_le(w, (uint64_t)v, 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        put1(w, 'J');
        put_le(w, (uint64_t)(uint32_t)(int32_t)v, 4);
    } else {
        /* LONG1: minimal little-endian two's complement, as pickle.encode_long. */
        unsigned char b[8];
        int n = 8;
        for (int i = 0; i < 8; i++)
            b[i] = (unsigned char)((uint64_t)v >> (8 * i));
        while (n > 1) {
            bool drop =
                (b[n - 1] == 0x00 && !(b[n - 2] & 0x80)) || (b[n - 1] == 0xff && (b[n - 2] & 0x80));
            if (!drop) break;
            n--;
        }
        put1(w, 0x8a);
        put1(w, (unsigned char)n);
        put(w, b, (size_t)n);
    }
}

void pkw_long_bytes(pkw *w, const unsigned char *le, size_t n) {
    if (n < 256) {
        put1(w, 0x8a); /* LONG1 */
        put1(w, (unsigned char)n);
    } else {
        put1(w, 0x8b); /* LONG4 */
        put_le(w, (uint64_t)n, 4);
    }
    put(w, le, n);
}

void pkw_float(pkw *w, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    unsigned char b[9];
    b[0] = 'G';
    for (int i = 0; i < 8; i++)
        b[1 + i] = (unsigned char)(u >> (56 - 8 * i));
    put(w, b, 9);
}

static void memo_store(pkw *w) {
    uint32_t idx = w->next_memo++;
    if (w->proto >= 4) {
        put1(w, 0x94); /* MEMOIZE */
    } else if (idx < 256) {
        put1(w, 'q');
        put_le(w, idx, 1);
    } else {
        put1(w, 'r');
        put_le(w, idx, 4);
    }
}

void pkw_memoize(pkw *w) { memo_store(w); }

static void memo_get(pkw *w, uint32_t idx) {
    if (idx < 256) {
        put1(w, 'h');
        put_le(w, idx, 1);
    } else {
        put1(w, 'j');
        put_le(w, idx, 4);
    }
}

typedef struct memo_key {
    const pkw *w;
    const char *text;
    size_t len;
} memo_key;

static bool memo_eq(const void *ctx, uint64_t v) {
    const memo_key *k = ctx;
    const pkw_memo_ent *e = &k->w->memo[v];
    return e->len == k->len && memcmp(e->text, k->text, k->len) == 0;
}

/* Emits BINGET and returns true when `text` was memoised. */
static bool memo_find(pkw *w, const char *text, size_t len) {
    if (w->nomem) return false;
    uint64_t h = ck_hash_bytes(text, len, 0x5a17);
    memo_key k = {w, text, len};
    uint64_t pos;
    if (!ck_htab_find(&w->memo_index, h, memo_eq, &k, &pos)) return false;
    memo_get(w, w->memo[pos].index);
    return true;
}

/* Memoises the value just emitted under `text`. */
static void memo_put(pkw *w, const char *text, size_t len) {
    if (w->nomem) return;
    if (w->nmemo == w->memo_cap) {
        size_t c = w->memo_cap ? w->memo_cap * 2 : 64;
        pkw_memo_ent *m = realloc(w->memo, c * sizeof *m);
        if (!m) {
            w->nomem = true;
            return;
        }
        w->memo = m;
        w->memo_cap = c;
    }
    char *copy = malloc(len + 1);
    if (!copy) {
        w->nomem = true;
        return;
    }
    memcpy(copy, text, len);
    copy[len] = 0;
    uint64_t h = ck_hash_bytes(text, len, 0x5a17);
    w->memo[w->nmemo] = (pkw_memo_ent){copy, len, w->next_memo};
    if (!ck_htab_insert(&w->memo_index, h, w->nmemo)) {
        free(copy);
        w->nomem = true;
        return;
    }
    w->nmemo++;
    memo_store(w);
}

static void str_raw(pkw *w, const char *s, size_t len) {
    if (w->proto >= 4 && len <= 0xff) {
        put1(w, 0x8c);
        put1(w, (unsigned char)len);
    } else if (w->proto >= 4 && (uint64_t)len > 0xffffffffu) {
        put1(w, 0x8d);
        put_le(w, len, 8);
    } else {
        put1(w, 'X');
        put_le(w, len, 4);
    }
    put(w, s, len);
}

void pkw_str(pkw *w, const char *s, size_t len, bool memo) {
    if (!memo) {
        str_raw(w, s, len);
        return;
    }
    char stack[256];
    char *key = len + 1 <= sizeof stack ? stack : malloc(len + 1);
    if (!key) {
        w->nomem = true;
        return;
    }
    key[0] = 's';
    memcpy(key + 1, s, len);
    if (!memo_find(w, key, len + 1)) {
        str_raw(w, s, len);
        memo_put(w, key, len + 1);
    }
    if (key != stack) free(key);
}

void pkw_global(pkw *w, const char *module, const char *name) {
    size_t ml = strlen(module), nl = strlen(name);
    char *key = malloc(ml + nl + 3);
    if (!key) {
        w->nomem = true;
        return;
    }
    key[0] = 'g';
    memcpy(key + 1, module, ml);
    key[1 + ml] = '\n';
    memcpy(key + 2 + ml, name, nl);
    if (memo_find(w, key, ml + nl + 2)) {
        free(key);
        return;
    }
    if (w->proto >= 4) {
        pkw_str(w, module, ml, true);
        pkw_str(w, name, nl, true);
        put1(w, 0x93); /* STACK_GLOBAL */
    } else {
        put1(w, 'c');
        put(w, module, ml);
        put1(w, '\n');
        put(w, name, nl);
        put1(w, '\n');
    }
    memo_put(w, key, ml + nl + 2);
    free(key);
}

void pkw_tuple_begin(pkw *w, size_t n) {
    if (n > 3) put1(w, PKO_MARK);
}

void pkw_tuple_end(pkw *w, size_t n) {
    static const unsigned char small[4] = {')', 0x85, 0x86, 0x87};
    put1(w, n <= 3 ? small[n] : PKO_TUPLE);
}

/* As CPython's C pickler (batch_list_exact / batch_dict_exact), which pickle.dump and
 * torch.save use: a container of one item gets APPEND / SETITEM; otherwise every batch of up
 * to 1000 items is MARK ... APPENDS / SETITEMS, a trailing batch of one item included, and a
 * dict whose size is a multiple of 1000 ends with an empty MARK SETITEMS. */
void pkw_batch_item_begin(pkw *w, size_t i, size_t n) {
    if (i % BATCH == 0 && n > 1) put1(w, PKO_MARK);
}

void pkw_batch_item_end(pkw *w, size_t i, size_t n, bool dict) {
    bool last_in_batch = (i + 1) % BATCH == 0 || i + 1 == n;
    if (!last_in_batch) return;
    if (dict)
        put1(w, n == 1 ? PKO_SETITEM : PKO_SETITEMS);
    else
        put1(w, n == 1 ? PKO_APPEND : PKO_APPENDS);
    if (dict && i + 1 == n && n % BATCH == 0) {
        put1(w, PKO_MARK);
        put1(w, PKO_SETITEMS);
    }
}

static char *tag_key(pkw *w, const char *tag, size_t *len) {
    size_t n = strlen(tag);
    char *key = malloc(n + 2);
    if (!key) {
        w->nomem = true;
        return NULL;
    }
    key[0] = 'o';
    memcpy(key + 1, tag, n + 1);
    *len = n + 1;
    return key;
}

bool pkw_memo_begin(pkw *w, const char *tag) {
    size_t n;
    char *key = tag_key(w, tag, &n);
    bool hit = key && memo_find(w, key, n);
    free(key);
    return hit;
}

void pkw_memo_end(pkw *w, const char *tag) {
    size_t n;
    char *key = tag_key(w, tag, &n);
    if (key) memo_put(w, key, n);
    free(key);
}
