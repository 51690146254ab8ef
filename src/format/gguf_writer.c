/* format/gguf_writer.c: the streaming GGUF writer (see gguf_writer.h).
 * Key-value pairs are serialised as they are added into one growable buffer; tensor infos are
 * kept as a list and serialised when the header is written. Tensor bytes go straight to the
 * mlm_outfile, with zero padding after each tensor. */
#include "format/gguf_writer.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "format/writer_safetensors.h"

typedef struct winfo {
    char *name; /* owned */
    uint32_t type;
    int n_dim;
    int64_t ne[MLM_GGUF_MAX_DIMS];
    uint64_t offset, nbytes;
} winfo;

struct mlm_gguf_writer {
    char *path;        /* owned */
    unsigned char *kv; /* owned: serialised pairs */
    size_t n_kv_bytes, cap_kv;
    uint64_t n_kv;
    char **keys; /* owned: every key, for the duplicate check */
    winfo *t;    /* owned */
    int64_t n_t, cap_t;
    uint32_t alignment;
    uint64_t data_bytes; /* padded data section so far */
    /* an open array */
    int in_array;
    mlm_gguf_type arr_type;
    uint64_t arr_n, arr_done;
    /* writing */
    mlm_outfile out;
    int started, finished, committed;
    int64_t cur;       /* tensor being written */
    uint64_t cur_done; /* its bytes written */
};

static const unsigned char zeros[64];

// ---- buffers ----

static mlm_status grow(mlm_gguf_writer *w, size_t add, mlm_error *err) {
    if (w->cap_kv - w->n_kv_bytes >= add) return MLM_OK;
    size_t cap = w->cap_kv ? w->cap_kv : 4096;
    while (cap - w->n_kv_bytes < add) {
        if (cap > SIZE_MAX / 2)
            return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", w->path);
        cap *= 2;
    }
    unsigned char *p = realloc(w->kv, cap);
    if (!p) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", w->path);
    w->kv = p;
    w->cap_kv = cap;
    return MLM_OK;
}

static void put_le(unsigned char *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static mlm_status emit(mlm_gguf_writer *w, uint64_t v, int n, mlm_error *err) {
    mlm_status st = grow(w, (size_t)n, err);
    if (st) return st;
    put_le(w->kv + w->n_kv_bytes, v, n);
    w->n_kv_bytes += (size_t)n;
    return MLM_OK;
}

static mlm_status emit_str(mlm_gguf_writer *w, const char *s, size_t len, mlm_error *err) {
    mlm_status st = grow(w, 8 + len, err);
    if (st) return st;
    put_le(w->kv + w->n_kv_bytes, len, 8);
    if (len) memcpy(w->kv + w->n_kv_bytes + 8, s, len);
    w->n_kv_bytes += 8 + len;
    return MLM_OK;
}

static size_t scalar_bytes(mlm_gguf_type t) {
    switch (t) {
    case MLM_GGUF_U8:
    case MLM_GGUF_I8:
    case MLM_GGUF_BOOL: return 1;
    case MLM_GGUF_U16:
    case MLM_GGUF_I16: return 2;
    case MLM_GGUF_U32:
    case MLM_GGUF_I32:
    case MLM_GGUF_F32: return 4;
    case MLM_GGUF_U64:
    case MLM_GGUF_I64:
    case MLM_GGUF_F64: return 8;
    default: return 0;
    }
}

// ---- create / free ----

mlm_status mlm_gguf_writer_create(const char *path, mlm_gguf_writer **out, mlm_error *err) {
    *out = NULL;
    mlm_gguf_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", path);
    }
    w->alignment = MLM_GGUF_DEFAULT_ALIGNMENT;
    *out = w;
    return MLM_OK;
}

void mlm_gguf_writer_free(mlm_gguf_writer *w) {
    if (!w) return;
    mlm_outfile_discard(&w->out);
    for (uint64_t i = 0; i < w->n_kv; i++)
        free(w->keys[i]);
    free(w->keys);
    for (int64_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->t);
    free(w->kv);
    free(w->path);
    free(w);
}

// ---- key-value pairs ----

/* Checks the state and KEY, records it, and emits the key and TYPE. */
static mlm_status begin_kv(mlm_gguf_writer *w, const char *key, mlm_gguf_type type,
                           mlm_error *err) {
    if (w->started || w->in_array)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: key '%s' added %s", w->path, key,
                             w->started ? "after the data started" : "inside an open array");
    if (!key[0]) return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: empty key", w->path);
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->keys[i], key))
            return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: key '%s' added twice", w->path,
                                 key);
    if ((w->n_kv & (w->n_kv - 1)) == 0) {
        char **k = realloc(w->keys, (size_t)(w->n_kv ? 2 * w->n_kv : 1) * sizeof *k);
        if (!k) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", w->path);
        w->keys = k;
    }
    if (!(w->keys[w->n_kv] = strdup(key)))
        return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", w->path);
    w->n_kv++;
    mlm_status st = emit_str(w, key, strlen(key), err);
    if (!st) st = emit(w, (uint64_t)type, 4, err);
    return st;
}

static mlm_status scalar_kv(mlm_gguf_writer *w, const char *key, mlm_gguf_type type, uint64_t bits,
                            mlm_error *err) {
    mlm_status st = begin_kv(w, key, type, err);
    return st ? st : emit(w, bits, (int)scalar_bytes(type), err);
}

mlm_status mlm_gguf_writer_u32(mlm_gguf_writer *w, const char *key, uint32_t v, mlm_error *err) {
    if (!strcmp(key, "general.alignment")) {
        if (v == 0 || (v & (v - 1)) || w->n_t)
            return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                                 "%s: general.alignment %u must be a power of two set before any "
                                 "tensor",
                                 w->path, v);
        w->alignment = v;
    }
    return scalar_kv(w, key, MLM_GGUF_U32, v, err);
}

mlm_status mlm_gguf_writer_i32(mlm_gguf_writer *w, const char *key, int32_t v, mlm_error *err) {
    return scalar_kv(w, key, MLM_GGUF_I32, (uint32_t)v, err);
}

mlm_status mlm_gguf_writer_u64(mlm_gguf_writer *w, const char *key, uint64_t v, mlm_error *err) {
    return scalar_kv(w, key, MLM_GGUF_U64, v, err);
}

mlm_status mlm_gguf_writer_f32(mlm_gguf_writer *w, const char *key, float v, mlm_error *err) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    return scalar_kv(w, key, MLM_GGUF_F32, bits, err);
}

mlm_status mlm_gguf_writer_bool(mlm_gguf_writer *w, const char *key, int v, mlm_error *err) {
    return scalar_kv(w, key, MLM_GGUF_BOOL, v ? 1 : 0, err);
}

mlm_status mlm_gguf_writer_str(mlm_gguf_writer *w, const char *key, const char *s, size_t len,
                               mlm_error *err) {
    mlm_status st = begin_kv(w, key, MLM_GGUF_STRING, err);
    return st ? st : emit_str(w, s, len, err);
}

mlm_status mlm_gguf_writer_arr_begin(mlm_gguf_writer *w, const char *key, mlm_gguf_type elem_type,
                                     uint64_t n, mlm_error *err) {
    if (elem_type != MLM_GGUF_STRING && !scalar_bytes(elem_type))
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: key '%s': arrays of %s are not written",
                             w->path, key, mlm_gguf_type_name(elem_type));
    mlm_status st = begin_kv(w, key, MLM_GGUF_ARRAY, err);
    if (!st) st = emit(w, (uint64_t)elem_type, 4, err);
    if (!st) st = emit(w, n, 8, err);
    if (st) return st;
    w->in_array = 1;
    w->arr_type = elem_type;
    w->arr_n = n;
    w->arr_done = 0;
    return MLM_OK;
}

static mlm_status arr_slot(mlm_gguf_writer *w, int is_str, mlm_error *err) {
    if (!w->in_array)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: array element outside an array",
                             w->path);
    if ((w->arr_type == MLM_GGUF_STRING) != is_str)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: key '%s': element is not %s", w->path,
                             w->keys[w->n_kv - 1], mlm_gguf_type_name(w->arr_type));
    if (w->arr_done == w->arr_n)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: key '%s': more than %llu elements",
                             w->path, w->keys[w->n_kv - 1], (unsigned long long)w->arr_n);
    w->arr_done++;
    return MLM_OK;
}

mlm_status mlm_gguf_writer_arr_str(mlm_gguf_writer *w, const char *s, size_t len, mlm_error *err) {
    mlm_status st = arr_slot(w, 1, err);
    return st ? st : emit_str(w, s, len, err);
}

mlm_status mlm_gguf_writer_arr_scalar(mlm_gguf_writer *w, uint64_t bits, mlm_error *err) {
    mlm_status st = arr_slot(w, 0, err);
    return st ? st : emit(w, bits, (int)scalar_bytes(w->arr_type), err);
}

mlm_status mlm_gguf_writer_arr_end(mlm_gguf_writer *w, mlm_error *err) {
    if (!w->in_array)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: array end without a begin", w->path);
    w->in_array = 0;
    if (w->arr_done != w->arr_n)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: key '%s': %llu of %llu elements given",
                             w->path, w->keys[w->n_kv - 1], (unsigned long long)w->arr_done,
                             (unsigned long long)w->arr_n);
    return MLM_OK;
}

// ---- tensors ----

static uint64_t pad_to(uint64_t n, uint32_t a) { return (n + a - 1) / a * a; }

mlm_status mlm_gguf_writer_tensor(mlm_gguf_writer *w, const char *name, uint32_t type, int n_dim,
                                  const int64_t *ne, mlm_error *err) {
    size_t len = strlen(name);
    uint32_t be, bb;
    if (w->started)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "%s: tensor '%s' declared after the data "
                             "started",
                             w->path, name);
    if (len == 0 || len > MLM_GGUF_MAX_NAME)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: tensor name '%s' must be 1..%d bytes",
                             w->path, name, MLM_GGUF_MAX_NAME);
    if (!mlm_ggml_type_block(type, &be, &bb))
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: tensor '%s': ggml type %u unknown",
                             w->path, name, type);
    if (n_dim < 1 || n_dim > MLM_GGUF_MAX_DIMS)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: tensor '%s': %d dims (1..%d)", w->path,
                             name, n_dim, MLM_GGUF_MAX_DIMS);
    for (int64_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name))
            return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: tensor '%s' declared twice",
                                 w->path, name);
    uint64_t numel = 1;
    for (int d = 0; d < n_dim; d++) {
        if (ne[d] < 0 || (ne[d] && numel > (UINT64_MAX >> 8) / (uint64_t)ne[d]))
            return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: tensor '%s': bad dim %lld", w->path,
                                 name, (long long)ne[d]);
        numel *= (uint64_t)ne[d];
    }
    if (ne[0] % be)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "%s: tensor '%s': row of %lld is not a whole number of %u-blocks",
                             w->path, name, (long long)ne[0], be);
    if (w->n_t == w->cap_t) {
        int64_t cap = w->cap_t ? 2 * w->cap_t : 64;
        winfo *t = realloc(w->t, (size_t)cap * sizeof *t);
        if (!t) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", w->path);
        w->t = t;
        w->cap_t = cap;
    }
    winfo *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name)))
        return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", w->path);
    t->type = type;
    t->n_dim = n_dim;
    for (int d = 0; d < MLM_GGUF_MAX_DIMS; d++)
        t->ne[d] = d < n_dim ? ne[d] : 1;
    t->nbytes = numel / be * bb;
    t->offset = w->data_bytes;
    w->data_bytes += pad_to(t->nbytes, w->alignment);
    w->n_t++;
    return MLM_OK;
}

static uint64_t header_bytes(const mlm_gguf_writer *w) {
    uint64_t n = 4 + 4 + 8 + 8 + w->n_kv_bytes;
    for (int64_t i = 0; i < w->n_t; i++)
        n += 8 + strlen(w->t[i].name) + 4 + 8 * (uint64_t)w->t[i].n_dim + 4 + 8;
    return n;
}

uint64_t mlm_gguf_writer_total_bytes(const mlm_gguf_writer *w) {
    return pad_to(header_bytes(w), w->alignment) + w->data_bytes;
}

// ---- data ----

static mlm_status start(mlm_gguf_writer *w, mlm_error *err) {
    if (w->in_array)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: key '%s': array not ended", w->path,
                             w->keys[w->n_kv - 1]);
    mlm_status st = mlm_outfile_open(&w->out, w->path, mlm_gguf_writer_total_bytes(w), err);
    if (st) return st;
    w->started = 1;
    unsigned char h[24];
    put_le(h, MLM_GGUF_MAGIC, 4);
    put_le(h + 4, MLM_GGUF_VERSION, 4);
    put_le(h + 8, (uint64_t)w->n_t, 8);
    put_le(h + 16, w->n_kv, 8);
    st = mlm_outfile_write(&w->out, h, sizeof h, err);
    if (!st && w->n_kv_bytes) st = mlm_outfile_write(&w->out, w->kv, w->n_kv_bytes, err);
    for (int64_t i = 0; i < w->n_t && !st; i++) {
        const winfo *t = &w->t[i];
        size_t len = strlen(t->name);
        unsigned char b[4 + 8 * MLM_GGUF_MAX_DIMS + 4 + 8], n8[8];
        size_t k = 0;
        put_le(n8, len, 8);
        st = mlm_outfile_write(&w->out, n8, 8, err);
        if (!st) st = mlm_outfile_write(&w->out, t->name, len, err);
        put_le(b + k, (uint64_t)t->n_dim, 4), k += 4;
        for (int d = 0; d < t->n_dim; d++)
            put_le(b + k, (uint64_t)t->ne[d], 8), k += 8;
        put_le(b + k, t->type, 4), k += 4;
        put_le(b + k, t->offset, 8), k += 8;
        if (!st) st = mlm_outfile_write(&w->out, b, k, err);
    }
    uint64_t h_bytes = header_bytes(w), pad = pad_to(h_bytes, w->alignment) - h_bytes;
    while (!st && pad) {
        size_t n = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
        st = mlm_outfile_write(&w->out, zeros, n, err);
        pad -= n;
    }
    return st;
}

/* Pads tensor CUR (complete) to the alignment and moves to the next one. */
static mlm_status next_tensor(mlm_gguf_writer *w, mlm_error *err) {
    uint64_t pad = pad_to(w->t[w->cur].nbytes, w->alignment) - w->t[w->cur].nbytes;
    mlm_status st = MLM_OK;
    while (!st && pad) {
        size_t n = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
        st = mlm_outfile_write(&w->out, zeros, n, err);
        pad -= n;
    }
    w->cur++;
    w->cur_done = 0;
    return st;
}

mlm_status mlm_gguf_writer_write(mlm_gguf_writer *w, const void *data, size_t n, mlm_error *err) {
    mlm_status st = MLM_OK;
    if (w->finished)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: write after finish", w->path);
    if (!w->started && (st = start(w, err))) return st;
    const unsigned char *p = data;
    while (n > 0) {
        /* Zero-byte tensors are complete as soon as they are reached. */
        while (w->cur < w->n_t && w->cur_done == w->t[w->cur].nbytes)
            if ((st = next_tensor(w, err))) return st;
        if (w->cur == w->n_t)
            return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: %zu bytes past the last tensor",
                                 w->path, n);
        uint64_t room = w->t[w->cur].nbytes - w->cur_done;
        size_t k = room < n ? (size_t)room : n;
        if ((st = mlm_outfile_write(&w->out, p, k, err))) return st;
        w->cur_done += k;
        p += k;
        n -= k;
    }
    return MLM_OK;
}

mlm_status mlm_gguf_writer_finish(mlm_gguf_writer *w, mlm_error *err) {
    mlm_status st = MLM_OK;
    if (w->finished) return MLM_OK;
    if (!w->started && (st = start(w, err))) return st;
    while (w->cur < w->n_t && w->cur_done == w->t[w->cur].nbytes)
        if ((st = next_tensor(w, err))) return st;
    if (w->cur < w->n_t)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: tensor '%s': %llu of %llu bytes given",
                             w->path, w->t[w->cur].name, (unsigned long long)w->cur_done,
                             (unsigned long long)w->t[w->cur].nbytes);
    if ((st = mlm_outfile_sync(&w->out, err))) return st;
    w->finished = 1;
    return MLM_OK;
}

mlm_status mlm_gguf_writer_commit(mlm_gguf_writer *w, mlm_error *err) {
    if (!w->finished)
        return mlm_error_set(err, MLM_ERR_INTERNAL, "%s: commit before finish", w->path);
    if (w->committed) return MLM_OK;
    mlm_status st = mlm_outfile_commit(&w->out, err);
    if (st) return st;
    w->committed = 1;
    char *dir = strdup(w->path);
    if (!dir) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", w->path);
    char *slash = strrchr(dir, '/');
    if (slash) slash == dir ? (void)(slash[1] = 0) : (void)(*slash = 0);
    st = mlm_fsync_dir(slash ? dir : ".", err);
    free(dir);
    return st;
}
