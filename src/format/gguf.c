/* format/gguf.c: the GGUF reader (see gguf.h for the layout and what is checked).
 * One pass over the header with a bounds-checked cursor: every count is checked against
 * the bytes left before anything is allocated for it, so a hostile header cannot make the
 * reader allocate more than a small multiple of the file size. Keys and tensor names are
 * copied (NUL-terminated) into one owned buffer; values and tensor data stay views. */
#include "format/gguf.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "core/mapfile.h"

struct mlm_gguf {
    mlm_mapfile file; /* owned mapping (or borrowed buffer) */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    mlm_gguf_kv *kv; /* owned, n_kv */
    int64_t n_kv;
    mlm_gguf_tensor *tensors; /* owned, n_tensors */
    int64_t n_tensors;
    char *names; /* owned: every key and tensor name, NUL-separated */
};

// ---- types ----

static const char *const value_type_names[MLM_GGUF_TYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};

/* Bytes of a scalar of type T; 0 for string, array and unknown types. */
static size_t scalar_size(uint32_t t) {
    static const unsigned char sz[MLM_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < MLM_GGUF_TYPE_COUNT ? sz[t] : 0;
}

const char *mlm_gguf_type_name(uint32_t type) {
    return type < MLM_GGUF_TYPE_COUNT ? value_type_names[type] : "?";
}

/* ggml's type table (ggml.c type_traits, gguf-py GGML_QUANT_SIZES): name, block elements,
 * block bytes. Gaps are types llama.cpp removed. */
static const struct {
    const char *name;
    uint16_t block, bytes;
} ggml_types[] = {
    [0] = {"f32", 1, 4},         [1] = {"f16", 1, 2},         [2] = {"q4_0", 32, 18},
    [3] = {"q4_1", 32, 20},      [6] = {"q5_0", 32, 22},      [7] = {"q5_1", 32, 24},
    [8] = {"q8_0", 32, 34},      [9] = {"q8_1", 32, 40},      [10] = {"q2_K", 256, 84},
    [11] = {"q3_K", 256, 110},   [12] = {"q4_K", 256, 144},   [13] = {"q5_K", 256, 176},
    [14] = {"q6_K", 256, 210},   [15] = {"q8_K", 256, 292},   [16] = {"iq2_xxs", 256, 66},
    [17] = {"iq2_xs", 256, 74},  [18] = {"iq3_xxs", 256, 98}, [19] = {"iq1_s", 256, 50},
    [20] = {"iq4_nl", 32, 18},   [21] = {"iq3_s", 256, 110},  [22] = {"iq2_s", 256, 82},
    [23] = {"iq4_xs", 256, 136}, [24] = {"i8", 1, 1},         [25] = {"i16", 1, 2},
    [26] = {"i32", 1, 4},        [27] = {"i64", 1, 8},        [28] = {"f64", 1, 8},
    [29] = {"iq1_m", 256, 56},   [30] = {"bf16", 1, 2},       [34] = {"tq1_0", 256, 54},
    [35] = {"tq2_0", 256, 66},   [39] = {"mxfp4", 32, 17},    [40] = {"nvfp4", 64, 36},
    [41] = {"q1_0", 128, 18},    [42] = {"q2_0", 64, 18},
};
#define N_GGML_TYPES (sizeof ggml_types / sizeof ggml_types[0])

int mlm_ggml_type_block(uint32_t type, uint32_t *block_elems, uint32_t *block_bytes) {
    if (type >= N_GGML_TYPES || !ggml_types[type].name) return 0;
    *block_elems = ggml_types[type].block;
    *block_bytes = ggml_types[type].bytes;
    return 1;
}

const char *mlm_ggml_type_name(uint32_t type) {
    return type < N_GGML_TYPES && ggml_types[type].name ? ggml_types[type].name : "?";
}

// ---- the cursor ----

typedef struct cursor {
    const unsigned char *p;
    uint64_t pos, size;
    const char *file;
} cursor;

static uint64_t rd(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Reads an N-byte little-endian unsigned integer; FORMAT naming WHAT at the end of the file. */
static mlm_status take(cursor *c, int n, uint64_t *v, const char *what, mlm_error *err) {
    *v = 0;
    if (c->size - c->pos < (uint64_t)n)
        return mlm_error_set(
            err, MLM_ERR_FORMAT, "%s: truncated: %s needs %d bytes at offset %llu, file size %llu",
            c->file, what, n, (unsigned long long)c->pos, (unsigned long long)c->size);
    *v = rd(c->p + c->pos, n);
    c->pos += (uint64_t)n;
    return MLM_OK;
}

/* A u64-length string; *S points into the file. */
static mlm_status take_str(cursor *c, const char **s, uint64_t *len, const char *what,
                           mlm_error *err) {
    *s = NULL;
    mlm_status st = take(c, 8, len, what, err);
    if (st) return st;
    if (*len > c->size - c->pos)
        return mlm_error_set(
            err, MLM_ERR_FORMAT,
            "%s: %s: string length %llu at offset %llu exceeds the %llu bytes left", c->file, what,
            (unsigned long long)*len, (unsigned long long)(c->pos - 8),
            (unsigned long long)(c->size - c->pos));
    *s = (const char *)c->p + c->pos;
    c->pos += *len;
    return MLM_OK;
}

// ---- values ----

/* Parses one value of TYPE at the cursor into V (KEY names it in messages). DEPTH counts
 * enclosing arrays. */
static mlm_status parse_value(cursor *c, uint32_t type, int depth, const char *key,
                              mlm_gguf_value *v, mlm_error *err) {
    memset(v, 0, sizeof *v);
    v->type = (mlm_gguf_type)type;
    uint64_t start = c->pos, x;
    mlm_status st;
    size_t sz = scalar_size(type);
    if (sz) {
        if ((st = take(c, (int)sz, &x, key, err))) return st;
        switch (type) {
        case MLM_GGUF_I8: v->i = (int8_t)x; break;
        case MLM_GGUF_I16: v->i = (int16_t)x; break;
        case MLM_GGUF_I32: v->i = (int32_t)x; break;
        case MLM_GGUF_I64: v->i = (int64_t)x; break;
        case MLM_GGUF_F32: {
            uint32_t u32 = (uint32_t)x;
            float f;
            memcpy(&f, &u32, 4);
            v->f = f;
            break;
        }
        case MLM_GGUF_F64: memcpy(&v->f, &x, 8); break;
        case MLM_GGUF_BOOL:
            if (x > 1)
                return mlm_error_set(err, MLM_ERR_FORMAT,
                                     "%s: key '%s': bool byte %llu is not 0 or 1", c->file, key,
                                     (unsigned long long)x);
            v->u = x;
            break;
        default: v->u = x; break;
        }
    } else if (type == MLM_GGUF_STRING) {
        if ((st = take_str(c, &v->str, &v->len, key, err))) return st;
    } else if (type == MLM_GGUF_ARRAY) {
        if (depth >= MLM_GGUF_MAX_DEPTH)
            return mlm_error_set(err, MLM_ERR_FORMAT, "%s: key '%s': arrays nested deeper than %d",
                                 c->file, key, MLM_GGUF_MAX_DEPTH);
        uint64_t et, n;
        if ((st = take(c, 4, &et, key, err)) || (st = take(c, 8, &n, key, err))) return st;
        if (et >= MLM_GGUF_TYPE_COUNT)
            return mlm_error_set(err, MLM_ERR_FORMAT,
                                 "%s: key '%s': array element type %llu unknown", c->file, key,
                                 (unsigned long long)et);
        /* Every element takes at least one byte (strings 8, arrays 12): a count the rest of
         * the file cannot hold is refused before walking it. */
        size_t esz = scalar_size((uint32_t)et);
        uint64_t min = esz ? esz : et == MLM_GGUF_STRING ? 8 : 12;
        if (n > (c->size - c->pos) / min)
            return mlm_error_set(
                err, MLM_ERR_FORMAT,
                "%s: key '%s': array of %llu %s needs at least %llu bytes, %llu left", c->file, key,
                (unsigned long long)n, mlm_gguf_type_name((uint32_t)et),
                (unsigned long long)n * min, (unsigned long long)(c->size - c->pos));
        v->elem_type = (mlm_gguf_type)et;
        v->n = n;
        v->data = c->p + c->pos;
        if (esz && et != MLM_GGUF_BOOL) {
            c->pos += n * esz;
        } else {
            mlm_gguf_value e;
            for (uint64_t i = 0; i < n; i++)
                if ((st = parse_value(c, (uint32_t)et, depth + 1, key, &e, err))) return st;
        }
    } else {
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: key '%s': value type %u unknown", c->file,
                             key, type);
    }
    v->size = c->pos - start;
    return MLM_OK;
}

int mlm_gguf_array_next(const mlm_gguf_value *arr, uint64_t *pos, mlm_gguf_value *elem) {
    if (arr->type != MLM_GGUF_ARRAY || *pos >= arr->size) return 0;
    /* The array's own header (type + count) precedes DATA; positions count from DATA. */
    uint64_t body = arr->size - 12;
    if (*pos >= body) return 0;
    cursor c = {arr->data, *pos, body, ""};
    if (parse_value(&c, arr->elem_type, 1, "", elem, NULL) != MLM_OK) return 0;
    *pos = c.pos;
    return 1;
}

int mlm_gguf_array_get(const mlm_gguf_value *arr, uint64_t i, mlm_gguf_value *elem) {
    size_t sz = scalar_size(arr->elem_type);
    if (arr->type != MLM_GGUF_ARRAY || !sz || i >= arr->n) return 0;
    cursor c = {arr->data + i * sz, 0, sz, ""};
    return parse_value(&c, arr->elem_type, 1, "", elem, NULL) == MLM_OK;
}

// ---- names ----

static int cmp_name(const void *a, const void *b) {
    const char *const *x = a, *const *y = b;
    return strcmp(*x, *y);
}

/* FORMAT when two of the N names NAMES[i] (stride STRIDE bytes, pointer at the start of each
 * element) are equal. WHAT is "key" or "tensor name". */
static mlm_status check_unique(const char *file, const void *items, int64_t n, size_t stride,
                               const char *what, mlm_error *err) {
    if (n < 2) return MLM_OK;
    const char **v = malloc((size_t)n * sizeof *v);
    if (!v) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", file);
    for (int64_t i = 0; i < n; i++)
        memcpy(&v[i], (const char *)items + (size_t)i * stride, sizeof v[i]);
    qsort(v, (size_t)n, sizeof *v, cmp_name);
    mlm_status st = MLM_OK;
    for (int64_t i = 1; i < n && !st; i++)
        if (!strcmp(v[i], v[i - 1]))
            st = mlm_error_set(err, MLM_ERR_FORMAT, "%s: duplicate %s '%s'", file, what, v[i]);
    free(v);
    return st;
}

// ---- tensors ----

typedef struct span {
    uint64_t begin, end;
    int64_t idx;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Shape, type and byte size of tensor T (offset not yet checked). */
static mlm_status check_tensor(const char *file, mlm_gguf_tensor *t, mlm_error *err) {
    uint32_t be, bb;
    if (!mlm_ggml_type_block(t->type, &be, &bb))
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED, "%s: tensor '%s': ggml type %u unknown",
                             file, t->name, t->type);
    uint64_t numel = 1;
    for (int d = 0; d < MLM_GGUF_MAX_DIMS; d++) {
        if (t->ne[d] < 0)
            return mlm_error_set(err, MLM_ERR_FORMAT, "%s: tensor '%s': ne[%d] = %lld is negative",
                                 file, t->name, d, (long long)t->ne[d]);
        if (t->ne[d] && numel > INT64_MAX / (uint64_t)t->ne[d])
            return mlm_error_set(err, MLM_ERR_FORMAT, "%s: tensor '%s': element count overflows",
                                 file, t->name);
        numel *= (uint64_t)t->ne[d];
    }
    if (t->ne[0] % be)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: tensor '%s': %lld elements per row is not a multiple of %s's "
                             "block of %u",
                             file, t->name, (long long)t->ne[0], mlm_ggml_type_name(t->type), be);
    uint64_t blocks = numel / be;
    if (blocks > UINT64_MAX / bb)
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: tensor '%s': byte size overflows", file,
                             t->name);
    t->nbytes = blocks * bb;
    return MLM_OK;
}

/* Offsets aligned, inside the data section, not overlapping. */
static mlm_status check_offsets(mlm_gguf *g, mlm_error *err) {
    const char *file = g->file.path;
    uint64_t data_len = g->file.size - g->data_offset;
    span *sp = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *sp);
    if (!sp) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", file);
    mlm_status st = MLM_OK;
    for (int64_t i = 0; i < g->n_tensors && !st; i++) {
        mlm_gguf_tensor *t = &g->tensors[i];
        if (t->offset % g->alignment)
            st = mlm_error_set(err, MLM_ERR_FORMAT,
                               "%s: tensor '%s': offset %llu is not a multiple of the alignment %u",
                               file, t->name, (unsigned long long)t->offset, g->alignment);
        else if (t->offset > data_len || t->nbytes > data_len - t->offset)
            st = mlm_error_set(err, MLM_ERR_FORMAT,
                               "%s: tensor '%s': bytes [%llu, +%llu) exceed the data section of "
                               "%llu bytes (file size %zu)",
                               file, t->name, (unsigned long long)t->offset,
                               (unsigned long long)t->nbytes, (unsigned long long)data_len,
                               g->file.size);
        else {
            t->data = g->file.data + g->data_offset + t->offset;
            sp[i] = (span){t->offset, t->offset + t->nbytes, i};
        }
    }
    if (!st && g->n_tensors > 1) {
        qsort(sp, (size_t)g->n_tensors, sizeof *sp, cmp_span);
        for (int64_t i = 1; i < g->n_tensors && !st; i++)
            if (sp[i].begin < sp[i - 1].end && sp[i].begin != sp[i].end)
                st = mlm_error_set(err, MLM_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap", file,
                                   g->tensors[sp[i - 1].idx].name, g->tensors[sp[i].idx].name);
    }
    free(sp);
    return st;
}

// ---- the header ----

/* Appends S[0..LEN) + NUL to the names buffer at *AT (sized up front) and returns it. */
static const char *put_name(mlm_gguf *g, size_t *at, const char *s, uint64_t len) {
    char *d = g->names + *at;
    memcpy(d, s, len);
    d[len] = 0;
    *at += len + 1;
    return d;
}

static mlm_status parse(mlm_gguf *g, mlm_error *err) {
    const char *file = g->file.path;
    cursor c = {g->file.data, 0, g->file.size, file};
    uint64_t version, n_tensors, n_kv;
    mlm_status st;
    if (g->file.size < 4 || rd(g->file.data, 4) != MLM_GGUF_MAGIC)
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: bad magic (not a GGUF file)", file);
    c.pos = 4;
    if ((st = take(&c, 4, &version, "version", err))) return st;
    if (version < 2 || version > MLM_GGUF_VERSION)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                             "%s: GGUF version %llu is not supported (only 2 and 3)", file,
                             (unsigned long long)version);
    g->version = (uint32_t)version;
    if ((st = take(&c, 8, &n_tensors, "tensor count", err)) ||
        (st = take(&c, 8, &n_kv, "key-value count", err)))
        return st;
    /* A key-value pair takes at least 8 + 4 + 1 bytes, a tensor info 8 + 4 + 4 + 8. */
    uint64_t left = c.size - c.pos;
    if (n_kv > left / 13)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: key-value count %llu cannot fit in the %llu bytes left", file,
                             (unsigned long long)n_kv, (unsigned long long)left);
    if (n_tensors > left / 24)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: tensor count %llu cannot fit in the %llu bytes left", file,
                             (unsigned long long)n_tensors, (unsigned long long)left);
    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    /* Names are at most the file's bytes plus one NUL each. */
    g->names = malloc(g->file.size + n_kv + n_tensors + 1);
    if (!g->kv || !g->tensors || !g->names)
        return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", file);
    size_t at = 0;

    for (uint64_t i = 0; i < n_kv; i++) {
        char what[48];
        snprintf(what, sizeof what, "key %llu", (unsigned long long)i);
        const char *k;
        uint64_t klen, type;
        if ((st = take_str(&c, &k, &klen, what, err))) return st;
        if (klen == 0)
            return mlm_error_set(err, MLM_ERR_FORMAT, "%s: key %llu is empty", file,
                                 (unsigned long long)i);
        if (memchr(k, 0, klen))
            return mlm_error_set(err, MLM_ERR_FORMAT, "%s: key %llu contains a NUL byte", file,
                                 (unsigned long long)i);
        mlm_gguf_kv *kv = &g->kv[i];
        kv->key = put_name(g, &at, k, klen);
        g->n_kv = (int64_t)i + 1;
        if ((st = take(&c, 4, &type, kv->key, err))) return st;
        if (type >= MLM_GGUF_TYPE_COUNT)
            return mlm_error_set(err, MLM_ERR_FORMAT, "%s: key '%s': value type %llu unknown", file,
                                 kv->key, (unsigned long long)type);
        if ((st = parse_value(&c, (uint32_t)type, 0, kv->key, &kv->value, err))) return st;
    }
    if ((st = check_unique(file, g->kv, g->n_kv, sizeof *g->kv, "key", err))) return st;

    g->alignment = MLM_GGUF_DEFAULT_ALIGNMENT;
    const mlm_gguf_kv *al = mlm_gguf_find(g, "general.alignment");
    if (al) {
        if (al->value.type != MLM_GGUF_U32)
            return mlm_error_set(err, MLM_ERR_FORMAT, "%s: general.alignment must be u32, not %s",
                                 file, mlm_gguf_type_name(al->value.type));
        if (al->value.u == 0 || (al->value.u & (al->value.u - 1)))
            return mlm_error_set(err, MLM_ERR_FORMAT,
                                 "%s: general.alignment %llu is not a power of two", file,
                                 (unsigned long long)al->value.u);
        g->alignment = (uint32_t)al->value.u;
    }

    for (uint64_t i = 0; i < n_tensors; i++) {
        char what[48];
        snprintf(what, sizeof what, "tensor %llu name", (unsigned long long)i);
        const char *nm;
        uint64_t nlen, n_dim, type;
        if ((st = take_str(&c, &nm, &nlen, what, err))) return st;
        if (nlen == 0 || nlen > MLM_GGUF_MAX_NAME || memchr(nm, 0, nlen))
            return mlm_error_set(
                err, MLM_ERR_FORMAT, "%s: tensor %llu: name of %llu bytes (must be 1..%d, no NUL)",
                file, (unsigned long long)i, (unsigned long long)nlen, MLM_GGUF_MAX_NAME);
        mlm_gguf_tensor *t = &g->tensors[i];
        t->name = put_name(g, &at, nm, nlen);
        g->n_tensors = (int64_t)i + 1;
        if ((st = take(&c, 4, &n_dim, t->name, err))) return st;
        if (n_dim > MLM_GGUF_MAX_DIMS)
            return mlm_error_set(err, MLM_ERR_FORMAT, "%s: tensor '%s': %llu dims (at most %d)",
                                 file, t->name, (unsigned long long)n_dim, MLM_GGUF_MAX_DIMS);
        t->n_dim = (int)n_dim;
        for (int d = 0; d < MLM_GGUF_MAX_DIMS; d++)
            t->ne[d] = 1;
        for (int d = 0; d < t->n_dim; d++) {
            uint64_t ne;
            if ((st = take(&c, 8, &ne, t->name, err))) return st;
            t->ne[d] = (int64_t)ne;
        }
        if ((st = take(&c, 4, &type, t->name, err)) || (st = take(&c, 8, &t->offset, t->name, err)))
            return st;
        t->type = (uint32_t)type;
        if ((st = check_tensor(file, t, err))) return st;
    }
    if ((st = check_unique(file, g->tensors, g->n_tensors, sizeof *g->tensors, "tensor name", err)))
        return st;

    /* The data section starts at the next multiple of the alignment (the file may end right
     * after the header when there are no tensors). */
    uint64_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
    if (n_tensors && pad > c.size - c.pos)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: truncated: the data section should start at offset %llu, file "
                             "size %llu",
                             file, (unsigned long long)(c.pos + pad), (unsigned long long)c.size);
    g->data_offset = n_tensors ? c.pos + pad : c.pos;
    return check_offsets(g, err);
}

// ---- open / free ----

static mlm_status finish_open(mlm_gguf *g, mlm_gguf **out, mlm_error *err) {
    mlm_status st = parse(g, err);
    if (st) {
        mlm_gguf_free(g);
        return st;
    }
    *out = g;
    return MLM_OK;
}

mlm_status mlm_gguf_open(const char *path, mlm_gguf **out, mlm_error *err) {
    *out = NULL;
    mlm_gguf *g = calloc(1, sizeof *g);
    if (!g) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", path);
    mlm_status st = mlm_mapfile_open(&g->file, path, err);
    if (st) {
        free(g);
        return st;
    }
    return finish_open(g, out, err);
}

mlm_status mlm_gguf_open_memory(const void *data, size_t size, const char *name, mlm_gguf **out,
                                mlm_error *err) {
    *out = NULL;
    mlm_gguf *g = calloc(1, sizeof *g);
    if (!g) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", name);
    mlm_status st = mlm_mapfile_borrow(&g->file, name, data, size, err);
    if (st) {
        free(g);
        return st;
    }
    return finish_open(g, out, err);
}

void mlm_gguf_free(mlm_gguf *g) {
    if (!g) return;
    mlm_mapfile_close(&g->file);
    free(g->kv);
    free(g->tensors);
    free(g->names);
    free(g);
}

// ---- access ----

uint32_t mlm_gguf_version(const mlm_gguf *g) { return g->version; }
uint32_t mlm_gguf_alignment(const mlm_gguf *g) { return g->alignment; }
uint64_t mlm_gguf_data_offset(const mlm_gguf *g) { return g->data_offset; }
int64_t mlm_gguf_n_kv(const mlm_gguf *g) { return g->n_kv; }
int64_t mlm_gguf_n_tensors(const mlm_gguf *g) { return g->n_tensors; }

const mlm_gguf_kv *mlm_gguf_kv_at(const mlm_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? &g->kv[i] : NULL;
}

const mlm_gguf_tensor *mlm_gguf_tensor_at(const mlm_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const mlm_gguf_kv *mlm_gguf_find(const mlm_gguf *g, const char *key) {
    for (int64_t i = 0; i < g->n_kv; i++)
        if (!strcmp(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

const mlm_gguf_tensor *mlm_gguf_find_tensor(const mlm_gguf *g, const char *name) {
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

static mlm_status get(const mlm_gguf *g, const char *key, const char *want, int ok_type_mask,
                      const mlm_gguf_value **v, mlm_error *err) {
    const mlm_gguf_kv *kv = mlm_gguf_find(g, key);
    if (!kv) return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: no key '%s'", g->file.path, key);
    if (!(ok_type_mask >> kv->value.type & 1))
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: key '%s' is %s, not %s", g->file.path,
                             key, mlm_gguf_type_name(kv->value.type), want);
    *v = &kv->value;
    return MLM_OK;
}

#define BIT(t) (1 << (t))
#define UNSIGNED_TYPES                                                                             \
    (BIT(MLM_GGUF_U8) | BIT(MLM_GGUF_U16) | BIT(MLM_GGUF_U32) | BIT(MLM_GGUF_U64))
#define SIGNED_TYPES (BIT(MLM_GGUF_I8) | BIT(MLM_GGUF_I16) | BIT(MLM_GGUF_I32) | BIT(MLM_GGUF_I64))

mlm_status mlm_gguf_get_uint(const mlm_gguf *g, const char *key, uint64_t *out, mlm_error *err) {
    const mlm_gguf_value *v;
    mlm_status st = get(g, key, "an unsigned integer", UNSIGNED_TYPES, &v, err);
    if (st == MLM_OK) *out = v->u;
    return st;
}

mlm_status mlm_gguf_get_int(const mlm_gguf *g, const char *key, int64_t *out, mlm_error *err) {
    const mlm_gguf_value *v;
    mlm_status st = get(g, key, "an integer", UNSIGNED_TYPES | SIGNED_TYPES, &v, err);
    if (st) return st;
    if ((UNSIGNED_TYPES >> v->type & 1) && v->u > INT64_MAX)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: key '%s': %llu does not fit int64",
                             g->file.path, key, (unsigned long long)v->u);
    *out = (UNSIGNED_TYPES >> v->type & 1) ? (int64_t)v->u : v->i;
    return MLM_OK;
}

mlm_status mlm_gguf_get_float(const mlm_gguf *g, const char *key, double *out, mlm_error *err) {
    const mlm_gguf_value *v;
    mlm_status st = get(g, key, "a float", BIT(MLM_GGUF_F32) | BIT(MLM_GGUF_F64), &v, err);
    if (st == MLM_OK) *out = v->f;
    return st;
}

mlm_status mlm_gguf_get_bool(const mlm_gguf *g, const char *key, int *out, mlm_error *err) {
    const mlm_gguf_value *v;
    mlm_status st = get(g, key, "a bool", BIT(MLM_GGUF_BOOL), &v, err);
    if (st == MLM_OK) *out = (int)v->u;
    return st;
}

mlm_status mlm_gguf_get_str(const mlm_gguf *g, const char *key, const char **str, uint64_t *len,
                            mlm_error *err) {
    const mlm_gguf_value *v;
    mlm_status st = get(g, key, "a string", BIT(MLM_GGUF_STRING), &v, err);
    if (st == MLM_OK) {
        *str = v->str;
        *len = v->len;
    }
    return st;
}

mlm_status mlm_gguf_get_array(const mlm_gguf *g, const char *key, const mlm_gguf_value **arr,
                              mlm_error *err) {
    return get(g, key, "an array", BIT(MLM_GGUF_ARRAY), arr, err);
}

// ---- finding GGUF files ----

int mlm_gguf_is_file(const char *path) {
    if (!mlm_is_file(path)) return 0;
    FILE *f = fopen(path, "rb");
    char m[4];
    int ok = f && fread(m, 1, 4, f) == 4 && memcmp(m, "GGUF", 4) == 0;
    if (f) fclose(f);
    return ok;
}

char *mlm_gguf_find_in_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char *best = NULL, *best_name = NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcasecmp(e->d_name + n - 5, ".gguf") != 0) continue;
        if (best_name && strcmp(e->d_name, best_name) >= 0) continue;
        char *path = mlm_path_join(dir, e->d_name);
        char *name = strdup(e->d_name);
        if (path && name && mlm_gguf_is_file(path)) {
            free(best);
            free(best_name);
            best = path;
            best_name = name;
        } else {
            free(path);
            free(name);
        }
    }
    closedir(d);
    free(best_name);
    return best;
}
