/* format/safetensors.c: the safetensors reader, single files and HF shard sets.
 * Layout: u64 little-endian header length N, N bytes of JSON, then the byte buffer.
 * Every tensor becomes a contiguous row-major view into the mapping; nothing is copied.
 * Validates what the reference reader does: header bounds, dtype, shape x dtype size equal
 * to the offset span, offsets inside the buffer, no overlapping tensors. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "format/checkpoint.h"
#include "format/json.h"
#include "tensor/dtype.h"

#define HEADER_MAX (100u << 20) /* the reference reader's cap */

typedef struct span {
    uint64_t begin, end;
    const char *name;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

/* Parses one header entry NAME -> {dtype, shape, data_offsets}. */
static mlm_status read_entry(mlm_checkpoint *c, int file, const char *name, const json_t *e,
                             uint64_t buf_off, uint64_t buf_len, span *sp, mlm_error *err) {
    const char *path = c->files[file].path;
    if (!json_is_object(e))
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: tensor '%s': entry must be an object, got %s", path, name,
                             mlm_json_type_name(e));
    const json_t *jd = json_object_get(e, "dtype"), *js = json_object_get(e, "shape"),
                 *jo = json_object_get(e, "data_offsets");
    if (!json_is_string(jd))
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: tensor '%s': field 'dtype' %s", path, name,
                             jd ? "must be a string" : "is missing");
    int dt = mlm_dtype_from_safetensors(json_string_value(jd));
    if (dt < 0)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED, "%s: tensor '%s': unknown dtype '%s'", path,
                             name, json_string_value(jd));
    if (!json_is_array(js))
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: tensor '%s': field 'shape' %s", path, name,
                             js ? "must be an array" : "is missing");
    size_t n_dim = json_array_size(js);
    if (n_dim > MLM_MAX_DIMS)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED, "%s: tensor '%s': %zu dims (max %d)", path,
                             name, n_dim, MLM_MAX_DIMS);
    int64_t shape[MLM_MAX_DIMS], stride[MLM_MAX_DIMS];
    for (size_t i = 0; i < n_dim; i++) {
        const json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return mlm_error_set(err, MLM_ERR_FORMAT,
                                 "%s: tensor '%s': shape[%zu] must be a non-negative integer", path,
                                 name, i);
        shape[i] = (int64_t)json_integer_value(d);
    }
    if (!json_is_array(jo) || json_array_size(jo) != 2 ||
        !json_is_integer(json_array_get(jo, 0)) || !json_is_integer(json_array_get(jo, 1)))
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: tensor '%s': field 'data_offsets' must be [begin, end]", path,
                             name);
    json_int_t b = json_integer_value(json_array_get(jo, 0));
    json_int_t e_ = json_integer_value(json_array_get(jo, 1));
    if (b < 0 || e_ < b)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: tensor '%s': data_offsets [%lld, %lld) invalid", path, name,
                             (long long)b, (long long)e_);
    if ((uint64_t)e_ > buf_len)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: tensor '%s': data_offsets [%lld, %lld) exceed the data size %llu",
                             path, name, (long long)b, (long long)e_, (unsigned long long)buf_len);
    int64_t numel;
    size_t nbytes;
    if (!mlm_ckpt_shape_bytes((int)n_dim, shape, mlm_dtype_size((mlm_dtype)dt), &numel, &nbytes))
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: tensor '%s': shape overflows", path, name);
    if ((uint64_t)nbytes != (uint64_t)(e_ - b))
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: tensor '%s': shape x %s needs %zu bytes, data_offsets span %lld",
                             path, name, mlm_dtype_name((mlm_dtype)dt), nbytes,
                             (long long)(e_ - b));
    int64_t s = 1;
    for (int i = (int)n_dim - 1; i >= 0; i--) {
        stride[i] = s;
        s *= shape[i];
    }
    sp->begin = (uint64_t)b;
    sp->end = (uint64_t)e_;
    sp->name = name;
    return mlm_ckpt_add_tensor(c, name, (mlm_dtype)dt, (int)n_dim, shape, stride,
                               c->files[file].data + buf_off + (uint64_t)b, file, err);
}

static mlm_status check_metadata(const char *path, const json_t *m, mlm_error *err) {
    if (!json_is_object(m))
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: '__metadata__' must be an object", path);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)m, k, v) {
        if (!json_is_string(v))
            return mlm_error_set(err, MLM_ERR_FORMAT, "%s: __metadata__ '%s' must be a string",
                                 path, k);
    }
    return MLM_OK;
}

mlm_status mlm_safetensors_read(mlm_checkpoint *c, int file, mlm_error *err) {
    const mlm_mapfile *f = &c->files[file];
    if (f->size < 8)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: %zu bytes is too short for a safetensors file", f->path, f->size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | f->data[i];
    if (n > f->size - 8)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: header length %llu exceeds the file size %zu (not safetensors?)",
                             f->path, (unsigned long long)n, f->size);
    if (n > HEADER_MAX)
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: header length %llu exceeds the limit %u",
                             f->path, (unsigned long long)n, HEADER_MAX);
    if (n < 2 || f->data[8] != '{')
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: header is not a JSON object (bad magic)",
                             f->path);
    json_t *root;
    mlm_status st = mlm_json_parse(f->path, (const char *)f->data + 8, n, &root, err);
    if (st) return st;
    if (!json_is_object(root)) {
        json_decref(root);
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: header must be a JSON object", f->path);
    }
    uint64_t buf_off = 8 + n, buf_len = f->size - buf_off;
    size_t cap = json_object_size(root);
    span *spans = calloc(cap ? cap : 1, sizeof *spans);
    if (!spans) {
        json_decref(root);
        return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", f->path);
    }
    size_t n_spans = 0;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) st = check_metadata(f->path, val, err);
        else st = read_entry(c, file, key, val, buf_off, buf_len, &spans[n_spans++], err);
        if (st) break;
    }
    if (st == MLM_OK && n_spans > 1) {
        qsort(spans, n_spans, sizeof *spans, cmp_span);
        for (size_t i = 1; i < n_spans; i++)
            if (spans[i].begin < spans[i - 1].end && spans[i].begin != spans[i].end) {
                st = mlm_error_set(err, MLM_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap",
                                   f->path, spans[i - 1].name, spans[i].name);
                break;
            }
    }
    free(spans);
    json_decref(root);
    return st;
}

// ---- sharded sets ----

/* A shard file name must stay inside the index's directory. */
static int safe_shard_name(const char *s) {
    return s[0] && s[0] != '/' && !strstr(s, "..") && !strchr(s, '/');
}

mlm_status mlm_safetensors_read_index(mlm_checkpoint *c, const char *path, mlm_error *err) {
    json_t *root;
    mlm_status st = mlm_json_load_file(path, 64u << 20, &root, err);
    if (st) return st;
    const json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map)) {
        json_decref(root);
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: field 'weight_map' %s", path,
                             map ? "must be an object" : "is missing");
    }
    /* The directory part of PATH. */
    char *dir = strdup(path);
    if (!dir) {
        json_decref(root);
        return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", path);
    }
    char *slash = strrchr(dir, '/');
    if (slash) slash[1] = 0;
    else strcpy(dir, "./");

    const char *name;
    json_t *file;
    json_object_foreach((json_t *)map, name, file) {
        if (!json_is_string(file) || !safe_shard_name(json_string_value(file))) {
            st = mlm_error_set(err, MLM_ERR_FORMAT,
                               "%s: weight_map['%s'] must be a file name in the same directory",
                               path, name);
            break;
        }
        const char *fname = json_string_value(file);
        char *fpath = mlm_path_join(dir, fname);
        if (!fpath) {
            st = mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", path);
            break;
        }
        int open = 0;
        for (int i = 0; i < c->n_files; i++) open |= !strcmp(c->files[i].path, fpath);
        if (!open) {
            int idx;
            st = mlm_ckpt_add_file(c, fpath, &idx, err);
            if (st == MLM_OK) st = mlm_safetensors_read(c, idx, err);
        }
        if (st == MLM_OK) {
            const mlm_tensor_view *t = mlm_checkpoint_find(c, name);
            if (!t || strcmp(t->file, fpath))
                st =
                    mlm_error_set(err, MLM_ERR_FORMAT,
                                  "%s: weight_map says tensor '%s' is in '%s', but it is not there",
                                  path, name, fname);
        }
        free(fpath);
        if (st) break;
    }
    if (st == MLM_OK && c->n_files == 0)
        st = mlm_error_set(err, MLM_ERR_FORMAT, "%s: weight_map is empty", path);
    free(dir);
    json_decref(root);
    return st;
}
