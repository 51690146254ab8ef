/* format/pytorch.c: torch.save zip files (Meta consolidated.NN.pth, .refpt references).
 * Finds the archive's top-level folder from its first entry, unpickles <folder>/data.pkl
 * with the restricted unpickler, and turns every tensor into a strided view into the
 * mapped record <folder>/data/<key>, after checking that the view stays inside its
 * storage. Nested dicts are flattened with '.'; ints, bools and strings become values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "format/checkpoint.h"
#include "format/pickle.h"
#include "format/zip.h"

#define MAX_DEPTH 16
#define MAX_NAME 1024

typedef struct pt_reader {
    mlm_checkpoint *c;
    int file;
    const char *path;
    mlm_zip zip;
    const char *prefix; /* "<folder>/" inside the zip, borrowed from the first entry */
    size_t prefix_len;
    mlm_error *err;
} pt_reader;

/* Checks the view against its storage record and adds it. */
static mlm_status add_tensor(pt_reader *r, const char *name, const pk_value *t) {
    const pk_value *s = t->storage;
    char key[64];
    if (s->len == 0 || s->len >= sizeof key - 6)
        return mlm_error_set(r->err, MLM_ERR_FORMAT, "%s: tensor '%s': bad storage key", r->path,
                             name);
    snprintf(key, sizeof key, "data/%.*s", (int)s->len, s->s);
    const mlm_zip_entry *e = mlm_zip_find(&r->zip, r->prefix, r->prefix_len, key);
    if (!e)
        return mlm_error_set(r->err, MLM_ERR_FORMAT,
                             "%s: tensor '%s': storage record '%.*s%s' missing", r->path, name,
                             (int)r->prefix_len, r->prefix, key);
    size_t es = mlm_dtype_size(s->dtype);
    int64_t numel_storage = s->i;
    if ((uint64_t)numel_storage > e->size / es)
        return mlm_error_set(
            r->err, MLM_ERR_FORMAT,
            "%s: tensor '%s': storage of %lld %s elements needs %llu bytes, record "
            "has %llu",
            r->path, name, (long long)numel_storage, mlm_dtype_name(s->dtype),
            (unsigned long long)numel_storage * es, (unsigned long long)e->size);
    int64_t numel;
    size_t nbytes;
    if (!mlm_ckpt_shape_bytes(t->n_dim, t->shape, es, &numel, &nbytes))
        return mlm_error_set(r->err, MLM_ERR_FORMAT, "%s: tensor '%s': bad shape", r->path, name);
    if (t->i < 0)
        return mlm_error_set(r->err, MLM_ERR_FORMAT, "%s: tensor '%s': negative storage offset",
                             r->path, name);
    /* The last element touched: offset + sum (shape-1) * stride, within the storage. */
    if (numel > 0) {
        int64_t last = t->i;
        for (int d = 0; d < t->n_dim; d++) {
            if (t->stride[d] < 0 || t->stride[d] > INT64_MAX / 4 / (t->shape[d] ? t->shape[d] : 1))
                return mlm_error_set(r->err, MLM_ERR_FORMAT, "%s: tensor '%s': bad stride[%d] %lld",
                                     r->path, name, d, (long long)t->stride[d]);
            last += (t->shape[d] - 1) * t->stride[d];
            if (last < 0 || last > INT64_MAX / 4)
                return mlm_error_set(r->err, MLM_ERR_FORMAT, "%s: tensor '%s': view overflows",
                                     r->path, name);
        }
        if (last >= numel_storage)
            return mlm_error_set(r->err, MLM_ERR_FORMAT,
                                 "%s: tensor '%s': view reaches element %lld of a storage of %lld",
                                 r->path, name, (long long)last, (long long)numel_storage);
    } else if (t->i > numel_storage) {
        return mlm_error_set(r->err, MLM_ERR_FORMAT, "%s: tensor '%s': offset past the storage",
                             r->path, name);
    }
    const unsigned char *data = e->data + (size_t)t->i * es;
    return mlm_ckpt_add_tensor(r->c, name, s->dtype, t->n_dim, t->shape, t->stride, data, r->file,
                               r->err);
}

/* Adds the dict D's entries under NAME_PREFIX; recurses into nested dicts. */
static mlm_status walk(pt_reader *r, const pk_value *d, const char *name_prefix, int depth) {
    if (depth > MAX_DEPTH)
        return mlm_error_set(r->err, MLM_ERR_FORMAT, "%s: dicts nested deeper than %d", r->path,
                             MAX_DEPTH);
    for (int64_t i = 0; i + 1 < d->n; i += 2) {
        const pk_value *k = d->items[i], *v = d->items[i + 1];
        char name[MAX_NAME];
        int n;
        if (k->kind == PK_STR)
            n = snprintf(name, sizeof name, "%s%.*s", name_prefix, (int)k->len, k->s);
        else if (k->kind == PK_INT)
            n = snprintf(name, sizeof name, "%s%lld", name_prefix, (long long)k->i);
        else
            return mlm_error_set(r->err, MLM_ERR_UNSUPPORTED,
                                 "%s: dict key under '%s' is not a string or int", r->path,
                                 name_prefix);
        if (n < 0 || (size_t)n >= sizeof name)
            return mlm_error_set(r->err, MLM_ERR_FORMAT, "%s: key '%.64s...' is too long", r->path,
                                 name);
        if (memchr(name, 0, (size_t)n))
            return mlm_error_set(r->err, MLM_ERR_FORMAT, "%s: key with a NUL byte", r->path);
        mlm_status st = MLM_OK;
        switch (v->kind) {
        case PK_TENSOR: st = add_tensor(r, name, v); break;
        case PK_INT:
        case PK_BOOL: st = mlm_ckpt_add_int(r->c, name, v->i, r->err); break;
        case PK_STR: st = mlm_ckpt_add_str(r->c, name, v->s, v->len, r->err); break;
        case PK_DICT: {
            char sub[MAX_NAME + 1];
            snprintf(sub, sizeof sub, "%s.", name);
            st = walk(r, v, sub, depth + 1);
            break;
        }
        default: break; /* floats, None, lists, tuples: not part of a checkpoint's contents */
        }
        if (st) return st;
    }
    return MLM_OK;
}

mlm_status mlm_pytorch_read(mlm_checkpoint *c, int file, const char *prefix, mlm_error *err) {
    pt_reader r = {.c = c, .file = file, .path = c->files[file].path, .err = err};
    const mlm_mapfile *f = &c->files[file];
    mlm_status st = mlm_zip_open(&r.zip, f->path, f->data, f->size, err);
    if (st) return st;
    if (r.zip.n_entries == 0) {
        st = mlm_error_set(err, MLM_ERR_FORMAT, "%s: empty zip archive", f->path);
        mlm_zip_close(&r.zip);
        return st;
    }
    /* The folder is the first entry's name up to its first '/', whatever it is called. */
    const mlm_zip_entry *first = &r.zip.entries[0];
    const char *slash = memchr(first->name, '/', first->name_len);
    if (!slash) {
        st = mlm_error_set(err, MLM_ERR_FORMAT,
                           "%s: zip entry '%.*s' has no top-level folder (not a torch.save file)",
                           f->path, (int)first->name_len, first->name);
        mlm_zip_close(&r.zip);
        return st;
    }
    r.prefix = first->name;
    r.prefix_len = (size_t)(slash - first->name) + 1;
    const mlm_zip_entry *bo = mlm_zip_find(&r.zip, r.prefix, r.prefix_len, "byteorder");
    if (bo && !(bo->size == 6 && !memcmp(bo->data, "little", 6))) {
        st = mlm_error_set(err, MLM_ERR_UNSUPPORTED, "%s: byteorder is not 'little'", f->path);
        mlm_zip_close(&r.zip);
        return st;
    }
    const mlm_zip_entry *pkl = mlm_zip_find(&r.zip, r.prefix, r.prefix_len, "data.pkl");
    if (!pkl) {
        st = mlm_error_set(err, MLM_ERR_FORMAT, "%s: no '%.*sdata.pkl' record", f->path,
                           (int)r.prefix_len, r.prefix);
        mlm_zip_close(&r.zip);
        return st;
    }
    char what[600];
    snprintf(what, sizeof what, "%s: data.pkl", f->path);
    mlm_pickle *pk;
    const pk_value *root;
    st = mlm_pickle_load(what, pkl->data, (size_t)pkl->size, &pk, &root, err);
    if (st == MLM_OK) {
        if (root->kind == PK_DICT) st = walk(&r, root, prefix, 0);
        else if (root->kind == PK_TENSOR) st = add_tensor(&r, prefix[0] ? prefix : "tensor", root);
        else
            st = mlm_error_set(err, MLM_ERR_UNSUPPORTED, "%s: top-level object is not a dict",
                               f->path);
        mlm_pickle_free(pk);
    }
    mlm_zip_close(&r.zip);
    return st;
}
