/* format/writer_safetensors.c: the streaming safetensors writer (single file and HF shard
 * sets), and the atomic buffered output file every writer uses.
 * Headers are built when the writer is planned, so file sizes are known before writing;
 * tensor bytes then stream through a 4 MiB buffer. Nothing holds more than one buffer. */
#include "format/writer_safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/mapfile.h"

// ---- atomic buffered output files ----

static mlm_status io_fail(const mlm_outfile *f, const char *what, int e, mlm_error *err) {
    return mlm_error_set(err, MLM_ERR_IO, "%s: %s: %s", f->path ? f->path : "?", what, strerror(e));
}

mlm_status mlm_outfile_open(mlm_outfile *f, const char *path, uint64_t expect_size,
                            mlm_error *err) {
    memset(f, 0, sizeof *f);
    const char *slash = strrchr(path, '/');
    size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0;
    const char *base = path + dir_len;
    f->path = strdup(path);
    f->tmp = malloc(strlen(path) + 16);
    f->buf = malloc(MLM_OUTFILE_BUF);
    if (!f->path || !f->tmp || !f->buf) {
        mlm_outfile_discard(f);
        return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", path);
    }
    /* ".<name>.tmp-XXXXXX" in the same directory: rename() stays atomic, and the name
     * matches none of the patterns a checkpoint reader looks for. */
    memcpy(f->tmp, path, dir_len);
    sprintf(f->tmp + dir_len, ".%s.tmp-XXXXXX", base);
    int fd = mkostemp(f->tmp, O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        free(f->tmp);
        f->tmp = NULL;
        mlm_status st = io_fail(f, "cannot create a temporary file next to it", e, err);
        mlm_outfile_discard(f);
        return st;
    }
    f->fd = fd;
    f->is_open = 1;
    if (fchmod(fd, 0644) != 0) {
        mlm_status st = io_fail(f, "cannot set permissions", errno, err);
        mlm_outfile_discard(f);
        return st;
    }
    if (expect_size > 0 && fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)expect_size) != 0) {
        int e = errno;
        /* Filesystems without fallocate are fine; a full disk is not. */
        if (e == ENOSPC || e == EFBIG || e == EDQUOT) {
            mlm_status st = mlm_error_set(err, MLM_ERR_IO, "%s: cannot reserve %llu bytes: %s",
                                          path, (unsigned long long)expect_size, strerror(e));
            mlm_outfile_discard(f);
            return st;
        }
    }
    return MLM_OK;
}

static mlm_status write_all(mlm_outfile *f, const unsigned char *p, size_t n, mlm_error *err) {
    while (n > 0) {
        ssize_t w = write(f->fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return io_fail(f, "write failed", errno, err);
        }
        p += w;
        n -= (size_t)w;
    }
    return MLM_OK;
}

/* Starts writeback of every full WRITEBACK_STEP written so far and waits for the step
 * before it: the disk works while values are generated, the final fsync has little left,
 * and a 140 GB checkpoint does not fill the page cache with dirty pages. */
#define WRITEBACK_STEP (32u << 20)

static void start_writeback(mlm_outfile *f, uint64_t on_disk) {
    while (on_disk - f->wb_started >= WRITEBACK_STEP) {
        sync_file_range(f->fd, (off_t)f->wb_started, WRITEBACK_STEP, SYNC_FILE_RANGE_WRITE);
        if (f->wb_started >= WRITEBACK_STEP)
            sync_file_range(f->fd, (off_t)(f->wb_started - WRITEBACK_STEP), WRITEBACK_STEP,
                            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                SYNC_FILE_RANGE_WAIT_AFTER);
        f->wb_started += WRITEBACK_STEP;
    }
}

static mlm_status flush(mlm_outfile *f, mlm_error *err) {
    mlm_status st = write_all(f, f->buf, f->n_buf, err);
    f->n_buf = 0;
    return st;
}

mlm_status mlm_outfile_write(mlm_outfile *f, const void *data, size_t n, mlm_error *err) {
    if (!f->is_open) return mlm_error_set(err, MLM_ERR_INTERNAL, "%s: write after close", f->path);
    const unsigned char *p = data;
    f->size += n;
    if (f->n_buf + n <= MLM_OUTFILE_BUF) {
        memcpy(f->buf + f->n_buf, p, n);
        f->n_buf += n;
        return MLM_OK;
    }
    mlm_status st = flush(f, err);
    if (!st && n >= MLM_OUTFILE_BUF) {
        st = write_all(f, p, n, err);
        n = 0;
    }
    if (st) return st;
    memcpy(f->buf, p, n);
    f->n_buf = n;
    start_writeback(f, f->size - n);
    return MLM_OK;
}

mlm_status mlm_outfile_sync(mlm_outfile *f, mlm_error *err) {
    if (!f->is_open) return mlm_error_set(err, MLM_ERR_INTERNAL, "%s: sync after close", f->path);
    mlm_status st = flush(f, err);
    if (st) return st;
    if (fsync(f->fd) != 0) return io_fail(f, "fsync failed", errno, err);
    int rc = close(f->fd);
    f->is_open = 0;
    if (rc != 0) return io_fail(f, "close failed", errno, err);
    free(f->buf);
    f->buf = NULL;
    return MLM_OK;
}

mlm_status mlm_outfile_commit(mlm_outfile *f, mlm_error *err) {
    if (f->is_open || !f->tmp)
        return mlm_error_set(err, MLM_ERR_INTERNAL, "%s: commit before sync", f->path);
    if (rename(f->tmp, f->path) != 0)
        return io_fail(f, "cannot rename the temporary file onto it", errno, err);
    free(f->tmp);
    f->tmp = NULL;
    return MLM_OK;
}

void mlm_outfile_discard(mlm_outfile *f) {
    if (!f) return;
    if (f->is_open) close(f->fd);
    if (f->tmp) unlink(f->tmp);
    free(f->tmp);
    free(f->path);
    free(f->buf);
    memset(f, 0, sizeof *f);
}

mlm_status mlm_outfile_put(mlm_outfile *f, const char *path, const void *data, size_t len,
                           mlm_error *err) {
    mlm_status st = mlm_outfile_open(f, path, 0, err);
    if (!st) st = mlm_outfile_write(f, data, len, err);
    if (!st) st = mlm_outfile_sync(f, err);
    if (st) mlm_outfile_discard(f);
    return st;
}

mlm_status mlm_fsync_dir(const char *dir, mlm_error *err) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return mlm_error_set(err, MLM_ERR_IO, "%s: cannot open: %s", dir, strerror(errno));
    int rc = fsync(fd), e = errno;
    close(fd);
    /* Some filesystems refuse fsync on directories; the renames are done either way. */
    if (rc != 0 && e != EINVAL && e != EROFS)
        return mlm_error_set(err, MLM_ERR_IO, "%s: fsync failed: %s", dir, strerror(e));
    return MLM_OK;
}

// ---- tensor specs ----

uint64_t mlm_tensor_spec_bytes(const mlm_tensor_spec *t) {
    if (t->n_dim < 0 || t->n_dim > MLM_MAX_DIMS) return 0;
    uint64_t n = mlm_dtype_size(t->dtype);
    for (int i = 0; i < t->n_dim; i++) {
        if (t->shape[i] < 0) return 0;
        if (t->shape[i] && n > UINT64_MAX / 2 / (uint64_t)t->shape[i]) return 0;
        n *= (uint64_t)t->shape[i];
    }
    return n;
}

// ---- safetensors ----

static const char *const st_dtype_names[MLM_DTYPE_COUNT] = {
    [MLM_DTYPE_F32] = "F32",   [MLM_DTYPE_F16] = "F16", [MLM_DTYPE_BF16] = "BF16",
    [MLM_DTYPE_F64] = "F64",   [MLM_DTYPE_I64] = "I64", [MLM_DTYPE_I32] = "I32",
    [MLM_DTYPE_I16] = "I16",   [MLM_DTYPE_I8] = "I8",   [MLM_DTYPE_U8] = "U8",
    [MLM_DTYPE_BOOL] = "BOOL",
};

typedef struct st_shard {
    char *path;       /* final path (owned) */
    int64_t first, n; /* tensors [first, first + n) */
    char *header;     /* u64 length + padded JSON (owned) */
    size_t header_len;
    uint64_t data_bytes; /* tensor bytes */
    mlm_outfile out;
} st_shard;

struct mlm_safetensors_writer {
    mlm_tensor_spec *tensors; /* owned copy of the specs (names borrowed) */
    uint64_t *bytes;          /* per tensor */
    int64_t n_tensors;
    st_shard *shards; /* owned */
    int n_shards;
    char *index_path; /* owned; NULL for a single file */
    char *index_text; /* owned */
    mlm_outfile index_out;
    /* streaming position */
    int64_t cur;       /* tensor being written */
    uint64_t cur_left; /* its bytes still to come */
    int cur_shard;     /* shard open for writing, -1 before the first */
    uint64_t written;
    int finished;
};

/* Builds the shard's header: 8-byte length, compact JSON, spaces up to a multiple of 8. */
static mlm_status build_header(mlm_safetensors_writer *w, st_shard *s, mlm_error *err) {
    json_t *root = json_object(), *meta = json_object();
    if (!root || !meta || json_object_set_new(meta, "format", json_string("pt")) ||
        json_object_set_new(root, "__metadata__", meta)) {
        json_decref(root);
        return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", s->path);
    }
    uint64_t off = 0;
    for (int64_t i = s->first; i < s->first + s->n; i++) {
        const mlm_tensor_spec *t = &w->tensors[i];
        json_t *e = json_object(), *shape = json_array(), *offs = json_array();
        int bad = !e || !shape || !offs;
        for (int d = 0; !bad && d < t->n_dim; d++)
            bad = json_array_append_new(shape, json_integer(t->shape[d]));
        bad = bad || json_array_append_new(offs, json_integer((json_int_t)off)) ||
              json_array_append_new(offs, json_integer((json_int_t)(off + w->bytes[i])));
        bad = bad || json_object_set_new(e, "dtype", json_string(st_dtype_names[t->dtype]));
        bad = bad || json_object_set_new(e, "shape", shape);
        shape = NULL;
        bad = bad || json_object_set_new(e, "data_offsets", offs);
        offs = NULL;
        bad = bad || json_object_set_new(root, t->name, e);
        e = NULL;
        if (bad) {
            json_decref(shape);
            json_decref(offs);
            json_decref(root);
            return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                                 "%s: tensor '%s': cannot add it to the header (name not UTF-8, or "
                                 "out of memory)",
                                 s->path, t->name);
        }
        off += w->bytes[i];
    }
    /* jansson keeps the last of two equal keys: a duplicate would lose a tensor. */
    if (json_object_size(root) != (size_t)s->n + 1) {
        json_decref(root);
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: duplicate tensor names", s->path);
    }
    s->data_bytes = off;
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!text) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", s->path);
    size_t n = strlen(text), padded = (n + 7) & ~(size_t)7;
    s->header = malloc(8 + padded);
    if (!s->header) {
        free(text);
        return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", s->path);
    }
    for (int i = 0; i < 8; i++)
        s->header[i] = (char)((uint64_t)padded >> (8 * i));
    memcpy(s->header + 8, text, n);
    memset(s->header + 8 + n, ' ', padded - n);
    s->header_len = 8 + padded;
    free(text);
    return MLM_OK;
}

/* The HF index: {"metadata": {"total_size": N}, "weight_map": {name: file}}, written like
 * transformers' json.dumps(index, indent=2, sort_keys=True) + "\n". */
static mlm_status build_index(mlm_safetensors_writer *w, mlm_error *err) {
    json_t *root = json_object(), *meta = json_object(), *map = json_object();
    uint64_t total = 0;
    int bad = !root || !meta || !map;
    for (int s = 0; !bad && s < w->n_shards; s++) {
        const char *file = strrchr(w->shards[s].path, '/');
        file = file ? file + 1 : w->shards[s].path;
        total += w->shards[s].data_bytes;
        for (int64_t i = w->shards[s].first; !bad && i < w->shards[s].first + w->shards[s].n; i++)
            bad = json_object_set_new(map, w->tensors[i].name, json_string(file));
    }
    if (!bad && json_object_size(map) != (size_t)w->n_tensors) {
        json_decref(meta);
        json_decref(map);
        json_decref(root);
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: duplicate tensor names across shards",
                             w->index_path);
    }
    bad = bad || json_object_set_new(meta, "total_size", json_integer((json_int_t)total));
    bad = bad || json_object_set_new(root, "metadata", meta);
    meta = NULL;
    bad = bad || json_object_set_new(root, "weight_map", map);
    map = NULL;
    char *text = bad ? NULL : json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(meta);
    json_decref(map);
    json_decref(root);
    if (!text) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", w->index_path);
    size_t n = strlen(text);
    w->index_text = malloc(n + 2);
    if (w->index_text) {
        memcpy(w->index_text, text, n);
        memcpy(w->index_text + n, "\n", 2);
    }
    free(text);
    return w->index_text ? MLM_OK : mlm_error_set(err, MLM_ERR_NOMEM, "out of memory");
}

static char *shard_path(const char *dir, const char *basename, int k, int n) {
    char name[512];
    if (n == 1)
        snprintf(name, sizeof name, "%s.safetensors", basename);
    else
        snprintf(name, sizeof name, "%s-%05d-of-%05d.safetensors", basename, k + 1, n);
    return mlm_path_join(dir, name);
}

mlm_status mlm_safetensors_writer_create(const char *dir, const char *basename,
                                         const mlm_tensor_spec *tensors, int64_t n,
                                         int64_t max_shard_bytes, mlm_safetensors_writer **out,
                                         mlm_error *err) {
    *out = NULL;
    if (n < 0 || (n > 0 && !tensors) || max_shard_bytes < 0)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "safetensors writer: bad arguments");
    mlm_safetensors_writer *w = calloc(1, sizeof *w);
    if (!w) return mlm_error_set(err, MLM_ERR_NOMEM, "safetensors writer: out of memory");
    w->cur_shard = -1;
    w->n_tensors = n;
    w->tensors = calloc(n ? (size_t)n : 1, sizeof *w->tensors);
    w->bytes = calloc(n ? (size_t)n : 1, sizeof *w->bytes);
    w->shards = calloc(n ? (size_t)n : 1, sizeof *w->shards); /* at most one per tensor */
    mlm_status st = MLM_OK;
    if (!w->tensors || !w->bytes || !w->shards)
        st = mlm_error_set(err, MLM_ERR_NOMEM, "safetensors writer: out of memory");
    for (int64_t i = 0; !st && i < n; i++) {
        const mlm_tensor_spec *t = &tensors[i];
        w->tensors[i] = *t;
        if (!t->name || !t->name[0] || (unsigned)t->dtype >= MLM_DTYPE_COUNT ||
            !st_dtype_names[t->dtype] || t->n_dim < 0 ||
            t->n_dim > MLM_MAX_DIMS)
            st = mlm_error_set(err, MLM_ERR_INVALID_ARG,
                               "safetensors writer: tensor %lld: bad spec", (long long)i);
        else if (!strcmp(t->name, "__metadata__"))
            st = mlm_error_set(err, MLM_ERR_INVALID_ARG,
                               "safetensors writer: '__metadata__' is not a tensor name");
        w->bytes[i] = st ? 0 : mlm_tensor_spec_bytes(t);
        if (!st && w->bytes[i] == 0 && mlm_dtype_size(t->dtype)) {
            int empty = 0;
            for (int d = 0; d < t->n_dim; d++)
                empty |= t->shape[d] == 0;
            if (!empty)
                st = mlm_error_set(err, MLM_ERR_INVALID_ARG,
                                   "safetensors writer: tensor '%s': bad shape", t->name);
        }
    }
    /* HF's split: close a shard when the next tensor would take it past the limit. */
    uint64_t in_shard = 0;
    for (int64_t i = 0; !st && i < n; i++) {
        st_shard *s = &w->shards[w->n_shards ? w->n_shards - 1 : 0];
        if (w->n_shards == 0 || (max_shard_bytes > 0 && s->n > 0 &&
                                 in_shard + w->bytes[i] > (uint64_t)max_shard_bytes)) {
            s = &w->shards[w->n_shards++];
            s->first = i;
            in_shard = 0;
        }
        s->n++;
        in_shard += w->bytes[i];
    }
    if (!st && w->n_shards == 0) w->n_shards = 1; /* an empty state dict: one file */
    for (int k = 0; !st && k < w->n_shards; k++) {
        w->shards[k].path = shard_path(dir, basename, k, w->n_shards);
        if (!w->shards[k].path)
            st = mlm_error_set(err, MLM_ERR_NOMEM, "out of memory");
        else
            st = build_header(w, &w->shards[k], err);
    }
    if (!st && w->n_shards > 1) {
        char name[512];
        snprintf(name, sizeof name, "%s.safetensors.index.json", basename);
        w->index_path = mlm_path_join(dir, name);
        st = w->index_path ? build_index(w, err)
                           : mlm_error_set(err, MLM_ERR_NOMEM, "out of memory");
    }
    if (st) {
        mlm_safetensors_writer_free(w);
        return st;
    }
    w->cur = 0;
    w->cur_left = n > 0 ? w->bytes[0] : 0;
    *out = w;
    return MLM_OK;
}

uint64_t mlm_safetensors_writer_total_bytes(const mlm_safetensors_writer *w) {
    uint64_t total = w->index_text ? strlen(w->index_text) : 0;
    for (int k = 0; k < w->n_shards; k++)
        total += w->shards[k].header_len + w->shards[k].data_bytes;
    return total;
}

int mlm_safetensors_writer_n_files(const mlm_safetensors_writer *w) { return w->n_shards; }

uint64_t mlm_safetensors_writer_written(const mlm_safetensors_writer *w) { return w->written; }

/* Opens shards up to and including K (each written in full before the next opens). */
static mlm_status open_shard(mlm_safetensors_writer *w, int k, mlm_error *err) {
    while (w->cur_shard < k) {
        if (w->cur_shard >= 0) {
            mlm_status st = mlm_outfile_sync(&w->shards[w->cur_shard].out, err);
            if (st) return st;
        }
        st_shard *s = &w->shards[++w->cur_shard];
        mlm_status st = mlm_outfile_open(&s->out, s->path, s->header_len + s->data_bytes, err);
        if (!st) st = mlm_outfile_write(&s->out, s->header, s->header_len, err);
        if (st) return st;
        w->written += s->header_len;
    }
    return MLM_OK;
}

/* The shard holding tensor I. */
static int shard_of(const mlm_safetensors_writer *w, int64_t i) {
    int k = w->cur_shard < 0 ? 0 : w->cur_shard;
    while (k + 1 < w->n_shards && i >= w->shards[k + 1].first)
        k++;
    return k;
}

/* Moves past finished (and empty) tensors. */
static void advance(mlm_safetensors_writer *w) {
    while (w->cur < w->n_tensors && w->cur_left == 0) {
        w->cur++;
        if (w->cur < w->n_tensors) w->cur_left = w->bytes[w->cur];
    }
}

mlm_status mlm_safetensors_writer_write(mlm_safetensors_writer *w, const void *data, size_t n,
                                        mlm_error *err) {
    const unsigned char *p = data;
    if (w->finished)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "safetensors writer: write after finish");
    while (n > 0) {
        advance(w);
        if (w->cur >= w->n_tensors)
            return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                                 "safetensors writer: %zu bytes past the last tensor", n);
        mlm_status st = open_shard(w, shard_of(w, w->cur), err);
        if (st) return st;
        size_t k = n < w->cur_left ? n : (size_t)w->cur_left;
        st = mlm_outfile_write(&w->shards[w->cur_shard].out, p, k, err);
        if (st) return st;
        w->cur_left -= k;
        w->written += k;
        p += k;
        n -= k;
    }
    return MLM_OK;
}

mlm_status mlm_safetensors_writer_finish(mlm_safetensors_writer *w, mlm_error *err) {
    advance(w);
    if (w->cur < w->n_tensors)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "safetensors writer: tensor '%s' is missing %llu bytes",
                             w->tensors[w->cur].name, (unsigned long long)w->cur_left);
    /* Shards whose tensors are all empty, or an empty set, still get their header. */
    mlm_status st = open_shard(w, w->n_shards - 1, err);
    if (!st) st = mlm_outfile_sync(&w->shards[w->n_shards - 1].out, err);
    if (!st && w->index_path) {
        st = mlm_outfile_put(&w->index_out, w->index_path, w->index_text, strlen(w->index_text),
                             err);
        if (!st) w->written += strlen(w->index_text);
    }
    if (!st) w->finished = 1;
    return st;
}

mlm_status mlm_safetensors_writer_commit(mlm_safetensors_writer *w, mlm_error *err) {
    if (!w->finished)
        return mlm_error_set(err, MLM_ERR_INTERNAL, "safetensors writer: commit before finish");
    for (int k = 0; k < w->n_shards; k++) {
        mlm_status st = mlm_outfile_commit(&w->shards[k].out, err);
        if (st) return st;
    }
    return w->index_path ? mlm_outfile_commit(&w->index_out, err) : MLM_OK;
}

void mlm_safetensors_writer_free(mlm_safetensors_writer *w) {
    if (!w) return;
    for (int k = 0; k < w->n_shards; k++) {
        mlm_outfile_discard(&w->shards[k].out);
        free(w->shards[k].path);
        free(w->shards[k].header);
    }
    mlm_outfile_discard(&w->index_out);
    free(w->shards);
    free(w->index_path);
    free(w->index_text);
    free(w->tensors);
    free(w->bytes);
    free(w);
}
