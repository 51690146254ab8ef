/* format/writer_pytorch.c: the torch.save zip writer (see writer_pytorch.h).
 * The pickle, every record's offset and padding, and so the file size, are fixed when the
 * writer is planned; tensor bytes then stream through the output buffer while their CRC-32
 * is computed (slicing-by-8, tables in the writer). Local headers carry zero CRC and sizes
 * and a data descriptor follows each record, as miniz writes them for torch. */
#include "format/writer_pytorch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define ALIGN 64 /* torch's kFieldAlignment */
#define U32_MAX 0xFFFFFFFFu
#define PICKLE_BATCH 1000 /* Python's pickler writes dict items in batches of 1000 */

// ---- a growable byte buffer ----

typedef struct buf {
    unsigned char *p;
    size_t n, cap;
    int oom;
} buf;

static void put(buf *b, const void *d, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 4096;
        while (c < b->n + n)
            c *= 2;
        unsigned char *p = realloc(b->p, c);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = c;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void put_u8(buf *b, unsigned v) {
    unsigned char c = (unsigned char)v;
    put(b, &c, 1);
}

static void put_le(buf *b, uint64_t v, int bytes) {
    unsigned char t[8];
    for (int i = 0; i < bytes; i++)
        t[i] = (unsigned char)(v >> (8 * i));
    put(b, t, (size_t)bytes);
}

// ---- the pickle (what Python's protocol-2 pickler emits for torch.save) ----

typedef struct pickler {
    buf b;
    uint32_t memo; /* next memo index */
} pickler;

static void memo_put(pickler *pk) {
    if (pk->memo < 256) {
        put_u8(&pk->b, 'q');
        put_u8(&pk->b, pk->memo);
    } else {
        put_u8(&pk->b, 'r');
        put_le(&pk->b, pk->memo, 4);
    }
    pk->memo++;
}

static void memo_get(pickler *pk, uint32_t idx) {
    if (idx < 256) {
        put_u8(&pk->b, 'h');
        put_u8(&pk->b, idx);
    } else {
        put_u8(&pk->b, 'j');
        put_le(&pk->b, idx, 4);
    }
}

/* GLOBAL "module\nname\n", memoized; returns its memo index. */
static uint32_t pk_global(pickler *pk, const char *mod, const char *name) {
    put_u8(&pk->b, 'c');
    put(&pk->b, mod, strlen(mod));
    put_u8(&pk->b, '\n');
    put(&pk->b, name, strlen(name));
    put_u8(&pk->b, '\n');
    uint32_t idx = pk->memo;
    memo_put(pk);
    return idx;
}

/* BINUNICODE, memoized; returns its memo index. */
static uint32_t pk_str(pickler *pk, const char *s) {
    size_t n = strlen(s);
    put_u8(&pk->b, 'X');
    put_le(&pk->b, n, 4);
    put(&pk->b, s, n);
    uint32_t idx = pk->memo;
    memo_put(pk);
    return idx;
}

/* Python's save_long for protocol 2: BININT1, BININT2, BININT, else LONG1. */
static void pk_int(pickler *pk, int64_t v) {
    if (v >= 0 && v <= 0xff) {
        put_u8(&pk->b, 'K');
        put_u8(&pk->b, (unsigned)v);
    } else if (v >= 0 && v <= 0xffff) {
        put_u8(&pk->b, 'M');
        put_le(&pk->b, (uint64_t)v, 2);
    } else if (v >= -0x80000000LL && v <= 0x7fffffffLL) {
        put_u8(&pk->b, 'J');
        put_le(&pk->b, (uint64_t)v, 4);
    } else {
        /* pickle.encode_long: (bit_length >> 3) + 1 bytes of little-endian two's
         * complement, minus a redundant 0xff for negatives. */
        uint64_t mag = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
        int bits = 0;
        while (bits < 64 && mag >> bits)
            bits++;
        int n = (bits >> 3) + 1;
        if (n > 8) n = 8; /* only 2^63 - 1 < |v| would need 9; v is an int64 */
        if (v < 0 && n > 1 && (((uint64_t)v >> (8 * (n - 1))) & 0xff) == 0xff &&
            (((uint64_t)v >> (8 * (n - 2))) & 0x80))
            n--;
        put_u8(&pk->b, 0x8a);
        put_u8(&pk->b, (unsigned)n);
        put_le(&pk->b, (uint64_t)v, n);
    }
}

/* A tuple of ints: EMPTY_TUPLE (not memoized), TUPLE1..3, or MARK ... TUPLE; memoized. */
static void pk_int_tuple(pickler *pk, const int64_t *v, int n) {
    if (n == 0) {
        put_u8(&pk->b, ')');
        return;
    }
    if (n > 3) put_u8(&pk->b, '(');
    for (int i = 0; i < n; i++)
        pk_int(pk, v[i]);
    put_u8(&pk->b, n == 1 ? 0x85 : n == 2 ? 0x86 : n == 3 ? 0x87 : 't');
    memo_put(pk);
}

static const char *storage_class(mlm_dtype dt) {
    switch (dt) {
    case MLM_DTYPE_BF16: return "BFloat16Storage";
    case MLM_DTYPE_F16: return "HalfStorage";
    case MLM_DTYPE_F32: return "FloatStorage";
    case MLM_DTYPE_F64: return "DoubleStorage";
    case MLM_DTYPE_I64: return "LongStorage";
    case MLM_DTYPE_I32: return "IntStorage";
    case MLM_DTYPE_I16: return "ShortStorage";
    case MLM_DTYPE_I8: return "CharStorage";
    case MLM_DTYPE_U8: return "ByteStorage";
    case MLM_DTYPE_BOOL: return "BoolStorage";
    case MLM_DTYPE_BFP8:
    case MLM_DTYPE_BFP4:
    case MLM_DTYPE_GGML:
    case MLM_DTYPE_COUNT: break;
    }
    return NULL;
}

/* The state dict as torch.save pickles it: memo 0 is collections.OrderedDict, memo 1 the
 * dict; then per tensor: name, _rebuild_tensor_v2(storage pid, 0, size, stride, False,
 * OrderedDict()). Strings 'storage' and 'cpu', the function and the storage classes are
 * pickled once and fetched from the memo afterwards, as Python's pickler does. */
static void build_pickle(pickler *pk, const mlm_tensor_spec *t, int64_t n) {
    uint32_t g_rebuild = U32_MAX, s_storage = U32_MAX, s_cpu = U32_MAX;
    uint32_t g_class[MLM_DTYPE_COUNT];
    for (int i = 0; i < MLM_DTYPE_COUNT; i++)
        g_class[i] = U32_MAX;
    put_u8(&pk->b, 0x80);
    put_u8(&pk->b, 2);
    uint32_t g_od = pk_global(pk, "collections", "OrderedDict");
    put_u8(&pk->b, ')');
    put_u8(&pk->b, 'R');
    memo_put(pk);
    for (int64_t first = 0; first < n; first += PICKLE_BATCH) {
        int64_t batch = n - first < PICKLE_BATCH ? n - first : PICKLE_BATCH;
        if (batch > 1) put_u8(&pk->b, '(');
        for (int64_t i = first; i < first + batch; i++) {
            pk_str(pk, t[i].name);
            if (g_rebuild == U32_MAX)
                g_rebuild = pk_global(pk, "torch._utils", "_rebuild_tensor_v2");
            else
                memo_get(pk, g_rebuild);
            put_u8(&pk->b, '('); /* the argument tuple */
            put_u8(&pk->b, '('); /* the persistent id tuple */
            if (s_storage == U32_MAX)
                s_storage = pk_str(pk, "storage");
            else
                memo_get(pk, s_storage);
            if (g_class[t[i].dtype] == U32_MAX)
                g_class[t[i].dtype] = pk_global(pk, "torch", storage_class(t[i].dtype));
            else
                memo_get(pk, g_class[t[i].dtype]);
            char key[24];
            snprintf(key, sizeof key, "%lld", (long long)i);
            pk_str(pk, key);
            if (s_cpu == U32_MAX)
                s_cpu = pk_str(pk, "cpu");
            else
                memo_get(pk, s_cpu);
            int64_t numel = 1, stride[MLM_MAX_DIMS];
            for (int d = t[i].n_dim - 1; d >= 0; d--) {
                stride[d] = numel;
                numel *= t[i].shape[d];
            }
            pk_int(pk, numel);
            put_u8(&pk->b, 't');
            memo_put(pk);
            put_u8(&pk->b, 'Q'); /* BINPERSID */
            pk_int(pk, 0);       /* storage_offset */
            pk_int_tuple(pk, t[i].shape, t[i].n_dim);
            pk_int_tuple(pk, stride, t[i].n_dim);
            put_u8(&pk->b, 0x89); /* requires_grad = False */
            memo_get(pk, g_od);   /* backward_hooks = OrderedDict() */
            put_u8(&pk->b, ')');
            put_u8(&pk->b, 'R');
            memo_put(pk);
            put_u8(&pk->b, 't');
            memo_put(pk);
            put_u8(&pk->b, 'R');
            memo_put(pk);
        }
        put_u8(&pk->b, batch > 1 ? 'u' : 's');
    }
    put_u8(&pk->b, '.');
}

// ---- zip records ----

typedef struct record {
    char *name;                 /* "<archive>/..." (owned) */
    uint64_t size;              /* data bytes */
    const unsigned char *bytes; /* in-memory content, or NULL for tensor data */
    uint64_t local_off, data_off;
    int zip64;          /* ZIP64 extra in the local header, 24-byte descriptor */
    uint16_t extra_len; /* local extra: ZIP64 field + FB padding field */
    uint32_t crc;
} record;

struct mlm_pytorch_writer {
    char *path;               /* owned */
    char *archive;            /* folder name (owned) */
    mlm_tensor_spec *tensors; /* owned copy (names borrowed) */
    int64_t n_tensors;
    buf pickle;
    record *recs; /* owned: the small records, the tensors, "version" */
    int64_t n_recs;
    uint64_t cd_off, cd_size, total;
    mlm_outfile out;
    int opened;    /* out was opened (it stays so named after sync) */
    int64_t rec;   /* record being written */
    int started;   /* its local header is out */
    uint64_t left; /* its data bytes still to come */
    uint32_t crc;  /* running CRC (pre-inverted) */
    uint64_t written;
    int finished;
    uint32_t crc_table[8][256]; /* slicing-by-8 tables for the reflected 0xEDB88320 CRC */
};

static void crc_init(mlm_pytorch_writer *w) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        w->crc_table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++)
            w->crc_table[t][i] =
                (w->crc_table[t - 1][i] >> 8) ^ w->crc_table[0][w->crc_table[t - 1][i] & 0xff];
}

static uint32_t crc_update(const mlm_pytorch_writer *w, uint32_t c, const unsigned char *p,
                           size_t n) {
    const uint32_t(*T)[256] = w->crc_table;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        uint32_t hi =
            (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        c = T[7][lo & 0xff] ^ T[6][(lo >> 8) & 0xff] ^ T[5][(lo >> 16) & 0xff] ^ T[4][lo >> 24] ^
            T[3][hi & 0xff] ^ T[2][(hi >> 8) & 0xff] ^ T[1][(hi >> 16) & 0xff] ^ T[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = T[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

/* torch's getPadding: the FB field pads the data start to a multiple of 64; the local
 * ZIP64 field (sizes when the size reaches 4 GiB, offset when the offset does) comes first. */
static void place(record *r, uint64_t cursor) {
    size_t name_len = strlen(r->name);
    int big_size = r->size >= U32_MAX, big_off = cursor >= U32_MAX;
    uint64_t z64 = big_size || big_off ? 4 + (big_size ? 16 : 0) + (big_off ? 8 : 0) : 0;
    uint64_t start = cursor + 30 + name_len + 4 + z64;
    uint64_t pad = (ALIGN - start % ALIGN) % ALIGN;
    r->local_off = cursor;
    r->zip64 = z64 > 0;
    r->extra_len = (uint16_t)(z64 + 4 + pad);
    r->data_off = start + pad;
}

static uint64_t descriptor_len(const record *r) { return r->zip64 ? 24 : 16; }

/* Central directory entry: ZIP64 extra with the fields that reach 0xFFFFFFFF. */
static uint64_t central_len(const record *r) {
    int n = (r->size >= U32_MAX ? 2 : 0) + (r->local_off >= U32_MAX ? 1 : 0);
    return 46 + strlen(r->name) + (n ? 4 + 8 * (uint64_t)n : 0);
}

static const unsigned char format_version[] = "1", storage_alignment[] = "64",
                           byteorder[] = "little", version[] = "3\n";

mlm_status mlm_pytorch_writer_create(const char *path, const mlm_tensor_spec *tensors, int64_t n,
                                     mlm_pytorch_writer **out, mlm_error *err) {
    *out = NULL;
    if (!path || n < 0 || (n > 0 && !tensors))
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "pytorch writer: bad arguments");
    mlm_pytorch_writer *w = calloc(1, sizeof *w);
    if (!w) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", path);
    crc_init(w);
    w->path = strdup(path);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    w->archive = strdup(base);
    w->tensors = calloc(n ? (size_t)n : 1, sizeof *w->tensors);
    w->n_tensors = n;
    w->n_recs = n + 5;
    w->recs = calloc((size_t)w->n_recs, sizeof *w->recs);
    mlm_status st = MLM_OK;
    if (!w->path || !w->archive || !w->tensors || !w->recs)
        st = mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", path);
    if (!st) {
        char *dot = strrchr(w->archive, '.');
        if (dot && dot != w->archive) *dot = 0;
    }
    for (int64_t i = 0; !st && i < n; i++) {
        w->tensors[i] = tensors[i];
        const mlm_tensor_spec *t = &tensors[i];
        int bad = !t->name || (unsigned)t->dtype >= MLM_DTYPE_COUNT || !storage_class(t->dtype) ||
                  t->n_dim < 0 ||
                  t->n_dim > MLM_MAX_DIMS;
        if (bad) {
            st = mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: tensor %lld: bad spec", path,
                               (long long)i);
            break;
        }
        int empty = 0;
        for (int d = 0; d < t->n_dim; d++)
            empty |= t->shape[d] == 0;
        if (!empty && mlm_tensor_spec_bytes(t) == 0)
            st = mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: tensor '%s': bad shape", path,
                               t->name);
        for (int64_t j = 0; !st && j < i; j++)
            if (!strcmp(tensors[j].name, t->name))
                st = mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: duplicate tensor '%s'", path,
                                   t->name);
    }
    if (!st) {
        pickler pk = {0};
        build_pickle(&pk, w->tensors, n);
        w->pickle = pk.b;
        if (w->pickle.oom) st = mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", path);
    }
    /* Records in torch 2.x's order. */
    struct {
        const char *name;
        const unsigned char *bytes;
        uint64_t size;
    } small[4] = {
        {"data.pkl", w->pickle.p, w->pickle.n},
        {".format_version", format_version, sizeof format_version - 1},
        {".storage_alignment", storage_alignment, sizeof storage_alignment - 1},
        {"byteorder", byteorder, sizeof byteorder - 1},
    };
    uint64_t cursor = 0;
    for (int64_t r = 0; !st && r < w->n_recs; r++) {
        record *rec = &w->recs[r];
        char name[64];
        if (r < 4) {
            snprintf(name, sizeof name, "%s", small[r].name);
            rec->bytes = small[r].bytes;
            rec->size = small[r].size;
        } else if (r < 4 + n) {
            snprintf(name, sizeof name, "data/%lld", (long long)(r - 4));
            rec->size = mlm_tensor_spec_bytes(&w->tensors[r - 4]);
        } else {
            snprintf(name, sizeof name, "version");
            rec->bytes = version;
            rec->size = sizeof version - 1;
        }
        size_t len = strlen(w->archive) + 1 + strlen(name) + 1;
        rec->name = malloc(len);
        if (!rec->name) {
            st = mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", path);
            break;
        }
        snprintf(rec->name, len, "%s/%s", w->archive, name);
        if (strlen(rec->name) > 0xFFFF) {
            st = mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: archive name too long", path);
            break;
        }
        place(rec, cursor);
        cursor = rec->data_off + rec->size + descriptor_len(rec);
    }
    if (!st) {
        w->cd_off = cursor;
        for (int64_t r = 0; r < w->n_recs; r++)
            w->cd_size += central_len(&w->recs[r]);
        w->total = w->cd_off + w->cd_size + 56 + 20 + 22;
    }
    if (st) {
        mlm_pytorch_writer_free(w);
        return st;
    }
    *out = w;
    return MLM_OK;
}

uint64_t mlm_pytorch_writer_total_bytes(const mlm_pytorch_writer *w) { return w->total; }
uint64_t mlm_pytorch_writer_written(const mlm_pytorch_writer *w) { return w->written; }

// ---- streaming ----

static mlm_status emit(mlm_pytorch_writer *w, const buf *b, mlm_error *err) {
    if (b->oom) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", w->path);
    mlm_status st = mlm_outfile_write(&w->out, b->p, b->n, err);
    if (!st) w->written += b->n;
    return st;
}

static mlm_status local_header(mlm_pytorch_writer *w, const record *r, mlm_error *err) {
    if (w->out.size != r->local_off)
        return mlm_error_set(err, MLM_ERR_INTERNAL, "%s: record '%s' at %llu, planned %llu",
                             w->path, r->name, (unsigned long long)w->out.size,
                             (unsigned long long)r->local_off);
    buf h = {0};
    size_t name_len = strlen(r->name);
    put_le(&h, 0x04034b50u, 4);
    put_le(&h, 0, 2);      /* version needed */
    put_le(&h, 0x0808, 2); /* data descriptor follows; UTF-8 names */
    put_le(&h, 0, 2);      /* stored */
    put_le(&h, 0, 4);      /* time, date */
    put_le(&h, 0, 4);      /* crc */
    put_le(&h, 0, 4);      /* sizes: in the descriptor */
    put_le(&h, 0, 4);
    put_le(&h, name_len, 2);
    put_le(&h, r->extra_len, 2);
    put(&h, r->name, name_len);
    uint16_t pad = r->extra_len - 4;
    if (r->zip64) {
        int big_size = r->size >= U32_MAX, big_off = r->local_off >= U32_MAX;
        uint16_t z = (uint16_t)((big_size ? 16 : 0) + (big_off ? 8 : 0));
        put_le(&h, 1, 2);
        put_le(&h, z, 2);
        if (big_size) {
            put_le(&h, r->size, 8);
            put_le(&h, r->size, 8);
        }
        if (big_off) put_le(&h, r->local_off, 8);
        pad -= 4 + z;
    }
    put(&h, "FB", 2);
    put_le(&h, pad, 2);
    for (uint16_t i = 0; i < pad; i++)
        put_u8(&h, 'Z');
    mlm_status st = emit(w, &h, err);
    free(h.p);
    return st;
}

static mlm_status descriptor(mlm_pytorch_writer *w, const record *r, mlm_error *err) {
    buf h = {0};
    put_le(&h, 0x08074b50u, 4);
    put_le(&h, r->crc, 4);
    put_le(&h, r->size, r->zip64 ? 8 : 4);
    put_le(&h, r->size, r->zip64 ? 8 : 4);
    mlm_status st = emit(w, &h, err);
    free(h.p);
    return st;
}

/* Writes records until one has tensor bytes pending (or all are done). */
static mlm_status pump(mlm_pytorch_writer *w, mlm_error *err) {
    mlm_status st = MLM_OK;
    if (!w->opened) {
        st = mlm_outfile_open(&w->out, w->path, w->total, err);
        if (st) return st;
        w->opened = 1;
    }
    while (w->rec < w->n_recs) {
        record *r = &w->recs[w->rec];
        if (!w->started) {
            if ((st = local_header(w, r, err))) return st;
            w->started = 1;
            w->left = r->size;
            w->crc = U32_MAX;
            if (r->bytes) {
                if ((st = mlm_outfile_write(&w->out, r->bytes, r->size, err))) return st;
                w->crc = crc_update(w, w->crc, r->bytes, r->size);
                w->written += r->size;
                w->left = 0;
            }
        }
        if (w->left > 0) return MLM_OK;
        r->crc = w->crc ^ U32_MAX;
        if ((st = descriptor(w, r, err))) return st;
        w->rec++;
        w->started = 0;
    }
    return MLM_OK;
}

mlm_status mlm_pytorch_writer_write(mlm_pytorch_writer *w, const void *data, size_t n,
                                    mlm_error *err) {
    const unsigned char *p = data;
    if (w->finished)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: write after finish", w->path);
    while (n > 0) {
        mlm_status st = pump(w, err);
        if (st) return st;
        if (w->rec >= w->n_recs || w->recs[w->rec].bytes)
            return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: %zu bytes past the last tensor",
                                 w->path, n);
        size_t k = n < w->left ? n : (size_t)w->left;
        if ((st = mlm_outfile_write(&w->out, p, k, err))) return st;
        w->crc = crc_update(w, w->crc, p, k);
        w->left -= k;
        w->written += k;
        p += k;
        n -= k;
    }
    return pump(w, err);
}

mlm_status mlm_pytorch_writer_finish(mlm_pytorch_writer *w, mlm_error *err) {
    mlm_status st = pump(w, err);
    if (st) return st;
    if (w->rec < w->n_recs)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: record '%s' is missing %llu bytes",
                             w->path, w->recs[w->rec].name, (unsigned long long)w->left);
    if (w->out.size != w->cd_off)
        return mlm_error_set(err, MLM_ERR_INTERNAL, "%s: central directory at %llu, planned %llu",
                             w->path, (unsigned long long)w->out.size,
                             (unsigned long long)w->cd_off);
    buf h = {0};
    for (int64_t i = 0; i < w->n_recs; i++) {
        const record *r = &w->recs[i];
        int big_size = r->size >= U32_MAX, big_off = r->local_off >= U32_MAX;
        int nz = (big_size ? 2 : 0) + (big_off ? 1 : 0);
        size_t name_len = strlen(r->name);
        put_le(&h, 0x02014b50u, 4);
        put_le(&h, 0, 2);      /* version made by */
        put_le(&h, 0, 2);      /* version needed */
        put_le(&h, 0x0808, 2); /* flags */
        put_le(&h, 0, 2);      /* stored */
        put_le(&h, 0, 4);      /* time, date */
        put_le(&h, r->crc, 4);
        put_le(&h, big_size ? U32_MAX : r->size, 4);
        put_le(&h, big_size ? U32_MAX : r->size, 4);
        put_le(&h, name_len, 2);
        put_le(&h, nz ? 4 + 8 * (unsigned)nz : 0, 2);
        put_le(&h, 0, 2); /* comment */
        put_le(&h, 0, 2); /* disk */
        put_le(&h, 0, 2); /* internal attributes */
        put_le(&h, 0, 4); /* external attributes */
        put_le(&h, big_off ? U32_MAX : r->local_off, 4);
        put(&h, r->name, name_len);
        if (nz) {
            put_le(&h, 1, 2);
            put_le(&h, 8 * (unsigned)nz, 2);
            if (big_size) {
                put_le(&h, r->size, 8);
                put_le(&h, r->size, 8);
            }
            if (big_off) put_le(&h, r->local_off, 8);
        }
    }
    uint64_t n = (uint64_t)w->n_recs, eocd64 = w->cd_off + w->cd_size;
    /* ZIP64 end of central directory record, its locator, then the classic record with
     * the fields that do not fit saturated. */
    put_le(&h, 0x06064b50u, 4);
    put_le(&h, 44, 8);
    put_le(&h, 0x031e, 2);
    put_le(&h, 0x002d, 2);
    put_le(&h, 0, 4);
    put_le(&h, 0, 4);
    put_le(&h, n, 8);
    put_le(&h, n, 8);
    put_le(&h, w->cd_size, 8);
    put_le(&h, w->cd_off, 8);
    put_le(&h, 0x07064b50u, 4);
    put_le(&h, 0, 4);
    put_le(&h, eocd64, 8);
    put_le(&h, 1, 4);
    put_le(&h, 0x06054b50u, 4);
    put_le(&h, 0, 2);
    put_le(&h, 0, 2);
    put_le(&h, n < 0xFFFF ? n : 0xFFFF, 2);
    put_le(&h, n < 0xFFFF ? n : 0xFFFF, 2);
    put_le(&h, w->cd_size < U32_MAX ? w->cd_size : U32_MAX, 4);
    put_le(&h, w->cd_off < U32_MAX ? w->cd_off : U32_MAX, 4);
    put_le(&h, 0, 2);
    st = emit(w, &h, err);
    free(h.p);
    if (!st && w->out.size != w->total)
        st = mlm_error_set(err, MLM_ERR_INTERNAL, "%s: wrote %llu bytes, planned %llu", w->path,
                           (unsigned long long)w->out.size, (unsigned long long)w->total);
    if (!st) st = mlm_outfile_sync(&w->out, err);
    if (!st) w->finished = 1;
    return st;
}

mlm_status mlm_pytorch_writer_commit(mlm_pytorch_writer *w, mlm_error *err) {
    if (!w->finished)
        return mlm_error_set(err, MLM_ERR_INTERNAL, "%s: commit before finish", w->path);
    return mlm_outfile_commit(&w->out, err);
}

void mlm_pytorch_writer_free(mlm_pytorch_writer *w) {
    if (!w) return;
    mlm_outfile_discard(&w->out);
    for (int64_t i = 0; i < w->n_recs; i++)
        free(w->recs[i].name);
    free(w->recs);
    free(w->pickle.p);
    free(w->tensors);
    free(w->archive);
    free(w->path);
    free(w);
}
