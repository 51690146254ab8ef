/* format/checkpoint.c: the public checkpoint API. Detects what a path holds (a
 * safetensors file or shard set, a torch.save zip, Meta consolidated.NN.pth shards),
 * runs the matching reader, and serves tensor views and values by name.
 * Views are zero-copy: they point into read-only mappings the checkpoint owns. */
#include "format/checkpoint.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_quants.h"
#include "tensor/dtype.h"

// ---- building ----

/* Adds a file: mapped from PATH, or the caller's DATA when it is non-NULL. */
static mlm_status add_file(mlm_checkpoint *c, const char *path, const void *data, size_t size,
                           int *idx, mlm_error *err) {
    mlm_mapfile *f = realloc(c->files, (size_t)(c->n_files + 1) * sizeof *f);
    if (!f) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", path);
    c->files = f;
    mlm_status st = data ? mlm_mapfile_borrow(&c->files[c->n_files], path, data, size, err)
                         : mlm_mapfile_open(&c->files[c->n_files], path, err);
    if (st) return st;
    *idx = c->n_files++;
    return MLM_OK;
}

mlm_status mlm_ckpt_add_file(mlm_checkpoint *c, const char *path, int *idx, mlm_error *err) {
    return add_file(c, path, NULL, 0, idx, err);
}

mlm_status mlm_ckpt_add_buffer(mlm_checkpoint *c, const char *name, const void *data, size_t size,
                               int *idx, mlm_error *err) {
    static const char empty[1];
    return add_file(c, name, data ? data : empty, size, idx, err);
}

int mlm_ckpt_shape_bytes(int n_dim, const int64_t *shape, size_t elem, int64_t *numel,
                         size_t *nbytes) {
    uint64_t n = 1;
    for (int i = 0; i < n_dim; i++) {
        if (shape[i] < 0) return 0;
        if (shape[i] != 0 && n > (UINT64_MAX >> 2) / (uint64_t)shape[i]) return 0;
        n *= (uint64_t)shape[i];
    }
    if (n > (uint64_t)INT64_MAX / 16 || (elem && n > SIZE_MAX / elem)) return 0;
    *numel = (int64_t)n;
    *nbytes = (size_t)n * elem;
    return 1;
}

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Rebuilds the name index at twice the tensor capacity (load factor <= 1/2). */
static mlm_status index_rebuild(mlm_checkpoint *c, mlm_error *err) {
    int64_t n = 16;
    while (n < 2 * c->cap_tensors) n *= 2;
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    if (!idx) return mlm_error_set(err, MLM_ERR_NOMEM, "checkpoint: out of memory");
    for (int64_t i = 0; i < n; i++) idx[i] = -1;
    for (int64_t t = 0; t < c->n_tensors; t++) {
        uint64_t h = hash_name(c->tensors[t].name) & (uint64_t)(n - 1);
        while (idx[h] >= 0) h = (h + 1) & (uint64_t)(n - 1);
        idx[h] = t;
    }
    free(c->index);
    c->index = idx;
    c->n_index = n;
    return MLM_OK;
}

const mlm_tensor_view *mlm_checkpoint_find(const mlm_checkpoint *c, const char *name) {
    if (!c || !c->index || !name) return NULL;
    uint64_t mask = (uint64_t)c->n_index - 1;
    for (uint64_t h = hash_name(name) & mask;; h = (h + 1) & mask) {
        int64_t t = c->index[h];
        if (t < 0) return NULL;
        if (!strcmp(c->tensors[t].name, name)) return &c->tensors[t];
    }
}

mlm_status mlm_ckpt_add_tensor(mlm_checkpoint *c, const char *name, mlm_dtype dtype, int n_dim,
                               const int64_t *shape, const int64_t *stride, const void *data,
                               int file, mlm_error *err) {
    if (n_dim < 0 || n_dim > MLM_MAX_DIMS)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED, "%s: tensor '%s' has %d dims (max %d)",
                             c->files[file].path, name, n_dim, MLM_MAX_DIMS);
    if (mlm_checkpoint_find(c, name))
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: duplicate tensor '%s'", c->files[file].path,
                             name);
    if (c->n_tensors == c->cap_tensors) {
        int64_t cap = c->cap_tensors ? 2 * c->cap_tensors : 64;
        mlm_tensor_view *t = realloc(c->tensors, (size_t)cap * sizeof *t);
        if (!t) return mlm_error_set(err, MLM_ERR_NOMEM, "checkpoint: out of memory");
        c->tensors = t;
        c->cap_tensors = cap;
    }
    mlm_tensor_view *v = &c->tensors[c->n_tensors];
    memset(v, 0, sizeof *v);
    char *copy = strdup(name);
    if (!copy) return mlm_error_set(err, MLM_ERR_NOMEM, "checkpoint: out of memory");
    v->name = copy;
    v->dtype = dtype;
    v->n_dim = n_dim;
    v->data = data;
    v->file = c->files[file].path;
    for (int i = 0; i < n_dim; i++) {
        v->shape[i] = shape[i];
        v->stride[i] = stride[i];
    }
    c->n_tensors++;
    /* Grow the index when the table grew; otherwise insert the new entry directly. */
    if (!c->index || c->n_index < 2 * c->cap_tensors) return index_rebuild(c, err);
    uint64_t mask = (uint64_t)c->n_index - 1, h = hash_name(name) & mask;
    while (c->index[h] >= 0) h = (h + 1) & mask;
    c->index[h] = c->n_tensors - 1;
    return MLM_OK;
}

static mlm_status add_value(mlm_checkpoint *c, const char *name, ckpt_value **out,
                            mlm_error *err) {
    for (int64_t i = 0; i < c->n_values; i++)
        if (!strcmp(c->values[i].name, name))
            return mlm_error_set(err, MLM_ERR_FORMAT, "checkpoint: duplicate value '%s'", name);
    if (c->n_values == c->cap_values) {
        int64_t cap = c->cap_values ? 2 * c->cap_values : 16;
        ckpt_value *v = realloc(c->values, (size_t)cap * sizeof *v);
        if (!v) return mlm_error_set(err, MLM_ERR_NOMEM, "checkpoint: out of memory");
        c->values = v;
        c->cap_values = cap;
    }
    ckpt_value *v = &c->values[c->n_values];
    memset(v, 0, sizeof *v);
    v->name = strdup(name);
    if (!v->name) return mlm_error_set(err, MLM_ERR_NOMEM, "checkpoint: out of memory");
    c->n_values++;
    *out = v;
    return MLM_OK;
}

mlm_status mlm_ckpt_add_int(mlm_checkpoint *c, const char *name, int64_t x, mlm_error *err) {
    ckpt_value *v;
    mlm_status st = add_value(c, name, &v, err);
    if (st) return st;
    v->kind = CKPT_VALUE_INT;
    v->i = x;
    return MLM_OK;
}

mlm_status mlm_ckpt_add_str(mlm_checkpoint *c, const char *name, const char *s, size_t len,
                            mlm_error *err) {
    ckpt_value *v;
    mlm_status st = add_value(c, name, &v, err);
    if (st) return st;
    v->kind = CKPT_VALUE_STR;
    v->s = malloc(len + 1);
    if (!v->s) return mlm_error_set(err, MLM_ERR_NOMEM, "checkpoint: out of memory");
    memcpy(v->s, s, len);
    v->s[len] = 0;
    return MLM_OK;
}

// ---- opening ----

static int has_suffix(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static int is_pytorch_name(const char *s) {
    return has_suffix(s, ".pth") || has_suffix(s, ".pt") || has_suffix(s, ".refpt") ||
           has_suffix(s, ".bin");
}

static mlm_status open_file(mlm_checkpoint *c, const char *path, const char *prefix,
                            mlm_error *err) {
    int idx = -1;
    mlm_status st = mlm_ckpt_add_file(c, path, &idx, err);
    if (st) return st;
    const mlm_mapfile *f = &c->files[idx];
    /* A zip (torch.save) starts with a local header "PK\3\4"; safetensors with a u64. */
    if (f->size >= 4 && !memcmp(f->data, "PK\3\4", 4)) {
        c->format = MLM_CKPT_PYTORCH;
        return mlm_pytorch_read(c, idx, prefix, err);
    }
    if (f->size >= 4 && !memcmp(f->data, "GGUF", 4)) {
        c->format = MLM_CKPT_GGUF;
        return mlm_gguf_ckpt_read(c, idx, err);
    }
    /* The legacy format opens with a pickled magic number: PROTO 2, LONG1 of 10 bytes. */
    if (f->size >= 4 && !memcmp(f->data, "\x80\x02\x8a\x0a", 4))
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                             "%s: legacy (non-zip) torch.save format; re-save it with torch >= 1.6 "
                             "(_use_new_zipfile_serialization=True)",
                             path);
    if (is_pytorch_name(path))
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: not a zip archive (bad magic)", path);
    c->format = MLM_CKPT_SAFETENSORS;
    return mlm_safetensors_read(c, idx, err);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Lists names in DIR accepted by KEEP, sorted. Caller frees each name and the array. */
static mlm_status list_dir(const char *dir, int (*keep)(const char *), char ***out, int *n,
                           mlm_error *err) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return mlm_error_set(err, MLM_ERR_IO, "%s: cannot open directory", dir);
    struct dirent *e;
    int cap = 0;
    mlm_status st = MLM_OK;
    while ((e = readdir(d))) {
        if (!keep(e->d_name)) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 8;
            char **p = realloc(*out, (size_t)cap * sizeof *p);
            if (!p) {
                st = mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", dir);
                break;
            }
            *out = p;
        }
        (*out)[*n] = strdup(e->d_name);
        if (!(*out)[*n]) {
            st = mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", dir);
            break;
        }
        (*n)++;
    }
    closedir(d);
    if (*n) qsort(*out, (size_t)*n, sizeof **out, cmp_str);
    return st;
}

static void free_list(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

static int keep_safetensors(const char *s) { return has_suffix(s, ".safetensors"); }
static int keep_consolidated(const char *s) {
    return !strncmp(s, "consolidated.", 13) && has_suffix(s, ".pth");
}
static int keep_pytorch(const char *s) { return is_pytorch_name(s); }
static int keep_gguf(const char *s) { return has_suffix(s, ".gguf"); }

/* Opens every file of NAMES in DIR; Meta shards get "shard<N>/" prefixes when several. */
static mlm_status open_list(mlm_checkpoint *c, const char *dir, char **names, int n,
                            int shard_prefix, mlm_error *err) {
    for (int i = 0; i < n; i++) {
        char *path = mlm_path_join(dir, names[i]);
        if (!path) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", dir);
        char prefix[32] = "";
        if (shard_prefix && n > 1) snprintf(prefix, sizeof prefix, "shard%d/", i);
        mlm_status st = open_file(c, path, prefix, err);
        free(path);
        if (st) return st;
    }
    return MLM_OK;
}

static mlm_status open_dir(mlm_checkpoint *c, const char *dir, mlm_error *err) {
    char *index = mlm_path_join(dir, "model.safetensors.index.json");
    if (!index) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", dir);
    if (mlm_is_file(index)) {
        c->format = MLM_CKPT_SAFETENSORS;
        mlm_status st = mlm_safetensors_read_index(c, index, err);
        free(index);
        return st;
    }
    free(index);
    int (*kinds[])(const char *) = {keep_safetensors, keep_consolidated, keep_pytorch, keep_gguf};
    for (int k = 0; k < 4; k++) {
        char **names;
        int n;
        mlm_status st = list_dir(dir, kinds[k], &names, &n, err);
        if (st == MLM_OK && n > 0) {
            if (kinds[k] == keep_gguf && n > 1) {
                st = mlm_error_set(err, MLM_ERR_FORMAT,
                                   "%s: %d GGUF files (e.g. '%s', '%s'): name the one to load", dir,
                                   n, names[0], names[1]);
            } else if (kinds[k] == keep_pytorch && n > 1) {
                st = mlm_error_set(err, MLM_ERR_FORMAT,
                                   "%s: %d PyTorch files (e.g. '%s', '%s') and no "
                                   "consolidated.NN.pth naming: cannot tell which to load",
                                   dir, n, names[0], names[1]);
            } else {
                st = open_list(c, dir, names, n, kinds[k] == keep_consolidated, err);
            }
        }
        free_list(names, n);
        if (st || n > 0) return st;
    }
    return mlm_error_set(err, MLM_ERR_IO,
                         "%s: no checkpoint found (looked for model.safetensors.index.json, "
                         "*.safetensors, consolidated.*.pth, *.pth/*.pt/*.bin, *.gguf)",
                         dir);
}

int mlm_checkpoint_present(const char *path) {
    if (!path) return 0;
    if (!mlm_is_dir(path)) return mlm_is_file(path);
    char *index = mlm_path_join(path, "model.safetensors.index.json");
    int found = index && mlm_is_file(index);
    free(index);
    int (*kinds[])(const char *) = {keep_safetensors, keep_consolidated, keep_pytorch, keep_gguf};
    for (int k = 0; k < 4 && !found; k++) {
        char **names;
        int n;
        if (list_dir(path, kinds[k], &names, &n, NULL) == MLM_OK) found = n > 0;
        free_list(names, n);
    }
    return found;
}

mlm_status mlm_checkpoint_open(const char *path, mlm_checkpoint **out, mlm_error *err) {
    *out = NULL;
    if (!path) return mlm_error_set(err, MLM_ERR_INVALID_ARG, "checkpoint: no path given");
    mlm_checkpoint *c = calloc(1, sizeof *c);
    if (!c) return mlm_error_set(err, MLM_ERR_NOMEM, "checkpoint: out of memory");
    mlm_status st;
    if (mlm_is_dir(path)) {
        st = open_dir(c, path, err);
    } else if (has_suffix(path, ".index.json")) {
        c->format = MLM_CKPT_SAFETENSORS;
        st = mlm_safetensors_read_index(c, path, err);
    } else {
        st = open_file(c, path, "", err);
    }
    if (st == MLM_OK && !c->index) st = index_rebuild(c, err);
    if (st) {
        mlm_checkpoint_free(c);
        return st;
    }
    *out = c;
    return MLM_OK;
}

const struct mlm_gguf *mlm_ckpt_gguf(const mlm_checkpoint *c) { return c ? c->gguf : NULL; }

void mlm_checkpoint_free(mlm_checkpoint *c) {
    if (!c) return;
    for (int64_t i = 0; i < c->n_tensors; i++) free((char *)c->tensors[i].name);
    free(c->tensors);
    for (int64_t i = 0; i < c->n_values; i++) {
        free(c->values[i].name);
        free(c->values[i].s);
    }
    free(c->values);
    for (int i = 0; i < c->n_files; i++) mlm_mapfile_close(&c->files[i]);
    free(c->files);
    free(c->index);
    mlm_gguf_free(c->gguf);
    free(c);
}

// ---- queries ----

mlm_ckpt_format mlm_checkpoint_format(const mlm_checkpoint *c) { return c->format; }
int mlm_checkpoint_n_files(const mlm_checkpoint *c) { return c->n_files; }

int mlm_checkpoint_mapped(const mlm_checkpoint *c) {
    for (int i = 0; i < c->n_files; i++)
        if (!c->files[i].mapped || c->files[i].borrowed) return 0;
    return 1;
}

int mlm_checkpoint_maps(const mlm_checkpoint *c, const void *p, size_t n) {
    const unsigned char *q = p;
    for (int i = 0; c && i < c->n_files; i++) {
        const mlm_mapfile *f = &c->files[i];
        if (f->mapped && !f->borrowed && q >= f->data && n <= f->size &&
            (size_t)(q - f->data) <= f->size - n)
            return 1;
    }
    return 0;
}

const char *mlm_checkpoint_file(const mlm_checkpoint *c, int i, size_t *size) {
    if (i < 0 || i >= c->n_files) return NULL;
    if (size) *size = c->files[i].size;
    return c->files[i].path;
}

int64_t mlm_checkpoint_n_tensors(const mlm_checkpoint *c) { return c->n_tensors; }

const mlm_tensor_view *mlm_checkpoint_tensor(const mlm_checkpoint *c, int64_t i) {
    return i >= 0 && i < c->n_tensors ? &c->tensors[i] : NULL;
}

int64_t mlm_checkpoint_n_values(const mlm_checkpoint *c) { return c->n_values; }

const char *mlm_checkpoint_value_name(const mlm_checkpoint *c, int64_t i) {
    return i >= 0 && i < c->n_values ? c->values[i].name : NULL;
}

static const ckpt_value *find_value(const mlm_checkpoint *c, const char *name) {
    for (int64_t i = 0; i < c->n_values; i++)
        if (!strcmp(c->values[i].name, name)) return &c->values[i];
    return NULL;
}

mlm_status mlm_checkpoint_get_int(const mlm_checkpoint *c, const char *name, int64_t *out,
                                  mlm_error *err) {
    const ckpt_value *v = find_value(c, name);
    if (!v) return mlm_error_set(err, MLM_ERR_INVALID_ARG, "checkpoint: no value '%s'", name);
    if (v->kind != CKPT_VALUE_INT)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "checkpoint: value '%s' is not an integer",
                             name);
    *out = v->i;
    return MLM_OK;
}

mlm_status mlm_checkpoint_get_str(const mlm_checkpoint *c, const char *name, const char **out,
                                  mlm_error *err) {
    const ckpt_value *v = find_value(c, name);
    if (!v) return mlm_error_set(err, MLM_ERR_INVALID_ARG, "checkpoint: no value '%s'", name);
    if (v->kind != CKPT_VALUE_STR)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "checkpoint: value '%s' is not a string",
                             name);
    *out = v->s;
    return MLM_OK;
}

// ---- element access ----

const char *mlm_tensor_type_name(const mlm_tensor_view *t) {
    return t->dtype == MLM_DTYPE_GGML ? mlm_ggml_type_name(t->ggml_type) : mlm_dtype_name(t->dtype);
}

int64_t mlm_tensor_nbytes(const mlm_tensor_view *t) {
    int64_t n = mlm_tensor_numel(t);
    if (t->dtype != MLM_DTYPE_GGML) return n * (int64_t)mlm_dtype_size(t->dtype);
    uint32_t be = 0, bb = 0;
    if (!mlm_ggml_type_block(t->ggml_type, &be, &bb) || !be) return 0;
    return n / be * bb;
}

int64_t mlm_tensor_numel(const mlm_tensor_view *t) {
    int64_t n = 1;
    for (int i = 0; i < t->n_dim; i++) n *= t->shape[i];
    return n;
}

/* Returns the byte address of the element at IDX and advances IDX in row-major order. */
static const unsigned char *elem_next(const mlm_tensor_view *t, int64_t *idx) {
    int64_t off = 0;
    for (int d = 0; d < t->n_dim; d++) off += idx[d] * t->stride[d];
    for (int d = t->n_dim - 1; d >= 0; d--) {
        if (++idx[d] < t->shape[d]) break;
        idx[d] = 0;
    }
    return (const unsigned char *)t->data + off * (int64_t)mlm_dtype_size(t->dtype);
}

static double load_elem(mlm_dtype dt, const unsigned char *p) {
    union {
        float f;
        double d;
        int64_t i64;
        int32_t i32;
        int16_t i16;
        uint16_t u16;
    } u;
    switch (dt) {
    case MLM_DTYPE_F32: memcpy(&u.f, p, 4); return u.f;
    case MLM_DTYPE_F64: memcpy(&u.d, p, 8); return u.d;
    case MLM_DTYPE_F16: memcpy(&u.u16, p, 2); return mlm_f16_to_f32(u.u16);
    case MLM_DTYPE_BF16: memcpy(&u.u16, p, 2); return mlm_bf16_to_f32(u.u16);
    case MLM_DTYPE_I64: memcpy(&u.i64, p, 8); return (double)u.i64;
    case MLM_DTYPE_I32: memcpy(&u.i32, p, 4); return u.i32;
    case MLM_DTYPE_I16: memcpy(&u.i16, p, 2); return u.i16;
    case MLM_DTYPE_I8: return (signed char)p[0];
    case MLM_DTYPE_U8:
    case MLM_DTYPE_BOOL: return p[0];
    case MLM_DTYPE_BFP8:
    case MLM_DTYPE_BFP4: /* never a checkpoint dtype */
    case MLM_DTYPE_GGML: /* rows of blocks: see mlm_tensor_to_f32 */
    case MLM_DTYPE_COUNT: break;
    }
    return 0;
}

mlm_status mlm_tensor_to_f32(const mlm_tensor_view *t, float *dst, int64_t n, mlm_error *err) {
    if (n != mlm_tensor_numel(t))
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "tensor '%s': %lld elements, buffer of %lld",
                             t->name, (long long)mlm_tensor_numel(t), (long long)n);
    if (t->dtype == MLM_DTYPE_GGML) {
        if (!mlm_ggml_can_dequantize(t->ggml_type))
            return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                                 "tensor '%s': ggml type %s is not supported", t->name,
                                 mlm_ggml_type_name(t->ggml_type));
        mlm_ggml_dequantize(t->ggml_type, t->data, n, dst); /* rows are contiguous */
        return MLM_OK;
    }
    int64_t idx[MLM_MAX_DIMS] = {0};
    for (int64_t k = 0; k < n; k++) dst[k] = (float)load_elem(t->dtype, elem_next(t, idx));
    return MLM_OK;
}

mlm_status mlm_tensor_to_i64(const mlm_tensor_view *t, int64_t *dst, int64_t n, mlm_error *err) {
    if (n != mlm_tensor_numel(t))
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "tensor '%s': %lld elements, buffer of %lld",
                             t->name, (long long)mlm_tensor_numel(t), (long long)n);
    if (t->dtype == MLM_DTYPE_F32 || t->dtype == MLM_DTYPE_F16 || t->dtype == MLM_DTYPE_BF16 ||
        t->dtype == MLM_DTYPE_F64 || t->dtype == MLM_DTYPE_GGML)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                             "tensor '%s': dtype %s is not an integer type", t->name,
                             mlm_dtype_name(t->dtype));
    int64_t idx[MLM_MAX_DIMS] = {0};
    for (int64_t k = 0; k < n; k++) {
        const unsigned char *p = elem_next(t, idx);
        if (t->dtype == MLM_DTYPE_I64) memcpy(&dst[k], p, 8); /* exact beyond 2^53 */
        else dst[k] = (int64_t)load_elem(t->dtype, p);
    }
    return MLM_OK;
}
