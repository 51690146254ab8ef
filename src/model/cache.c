/* model/cache.c: the weight cache. One file per model, profile and mesh holds every weight
 * converted to the profile's type in the kernels' layout, and the norms, ready to map:
 *
 *   header   4096 bytes: "MLMCACHE", version, file size, index offset and size
 *   tensors  each at a 4096-aligned offset, in index order
 *   index    the key text (source files with sizes and mtimes, profile types, mesh; its length,
 *            then its bytes NUL-padded to 8), then one entry per tensor: name, type, rows,
 *            cols, offset, bytes, hash of the bytes (8-byte aligned)
 *   trailer  "MLMCEND", hash of header + index
 *
 * Everything is written in one sequential pass to a temporary file that is fsynced and
 * renamed (two builders racing both write whole files; the last rename wins). A load checks
 * the size against the header (truncation), the trailer hash (a corrupt header or index), the
 * key (a stale cache), every entry against the model's config, and every tensor's hash, and
 * reports the first problem so the caller can rebuild. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/hash.h"
#include "core/mapfile.h"
#include "format/checkpoint.h"
#include "tensor/bfp.h"
#include "format/writer_safetensors.h"
#include "model/model.h"

#define VERSION 6 /* 5: wo and w2 in K chunks; 6: native panels, scales first */
#define HEADER_BYTES 4096
#define ALIGN 4096
#define TRAILER_BYTES 64
#define SEED 0x6d6c6d63ull

typedef struct header {
    char magic[8]; /* "MLMCACHE" */
    uint32_t version, header_bytes;
    uint64_t file_bytes, index_offset, index_bytes;
} header;

typedef struct entry {
    char name[24];
    uint32_t type, pad;
    int64_t rows, cols;
    uint64_t offset, bytes, hash;
} entry;

typedef struct trailer {
    char magic[8]; /* "MLMCEND" */
    uint64_t hash; /* of the header and the index */
    char pad[TRAILER_BYTES - 16];
} trailer;

_Static_assert(sizeof(entry) == 72, "cache index entry layout");
_Static_assert(sizeof(trailer) == TRAILER_BYTES, "cache trailer layout");

static uint64_t align_up(uint64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

// ---- key and location ----

static int source_file(const char *name) {
    static const char *suffix[] = {".safetensors", ".safetensors.index.json", ".pth", ".pt",
                                   ".bin", ".gguf"};
    if (!strcmp(name, "config.json") || !strcmp(name, "params.json") ||
        !strcmp(name, "generation_config.json"))
        return 1;
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof suffix / sizeof *suffix; i++) {
        size_t m = strlen(suffix[i]);
        if (n > m && !strcmp(name + n - m, suffix[i])) return 1;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

mlm_status mlm_cache_key(const char *dir, const mlm_profile *p, int tp_rank, int tp_size, char *key,
                         size_t size, mlm_error *err) {
    char real[PATH_MAX];
    if (!realpath(dir, real))
        return mlm_error_set(err, MLM_ERR_IO, "cache: %s: %s", dir, strerror(errno));
    char *names[4096], folder[PATH_MAX];
    int n = 0;
    snprintf(folder, sizeof folder, "%s", real);
    if (mlm_is_file(real)) {
        /* one model file (GGUF): it is the only source; names are relative to its folder */
        const char *slash = strrchr(real, '/');
        if ((names[0] = strdup(slash ? slash + 1 : real))) n = 1;
        mlm_path_dir(real, folder, sizeof folder);
    } else {
        DIR *d = opendir(real);
        if (!d) return mlm_error_set(err, MLM_ERR_IO, "cache: %s: %s", real, strerror(errno));
        for (struct dirent *e; (e = readdir(d)) && n < 4096;)
            if (source_file(e->d_name) && (names[n] = strdup(e->d_name))) n++;
        closedir(d);
    }
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    size_t len = (size_t)snprintf(key, size, "meshlm weight cache v%d\nmodel %s\n", VERSION, real);
    /* Meta shards may sit in a subfolder-free layout only; the sources are DIR's own files. */
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX + 256];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", folder, names[i]);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && len < size)
            len += (size_t)snprintf(key + len, size - len, "file %s %lld %lld.%09ld\n", names[i],
                                    (long long)st.st_size, (long long)st.st_mtim.tv_sec,
                                    st.st_mtim.tv_nsec);
        free(names[i]);
    }
    char types[1024];
    mlm_profile_describe(p, types, sizeof types);
    if (len < size)
        len += (size_t)snprintf(key + len, size - len, "profile %s\ntypes %s\n", p->name, types);
    if (len < size && tp_size == 1)
        len += (size_t)snprintf(key + len, size - len, "mesh 1\n");
    else if (len < size)
        len += (size_t)snprintf(key + len, size - len, "mesh tp %d rank %d\n", tp_size, tp_rank);
    if (len >= size)
        return mlm_error_set(err, MLM_ERR_CAPACITY, "cache: %s: the cache key exceeds %zu bytes",
                             real, size);
    return MLM_OK;
}

/* The folder for DIR's caches: PARAMS' cache_dir, $MESHLM_CACHE, DIR/meshlm-cache when DIR is
 * writable, else the user cache folder. */
static mlm_status cache_dir(const char *dir, const mlm_model_params *p, char *out, size_t size,
                            mlm_error *err) {
    const char *env = getenv("MESHLM_CACHE");
    int n;
    /* a model given as one file (GGUF): its caches go beside it */
    char parent[PATH_MAX];
    if (dir && mlm_is_file(dir)) {
        mlm_path_dir(dir, parent, sizeof parent);
        dir = parent;
    }
    if (p && p->cache_dir && p->cache_dir[0]) n = snprintf(out, size, "%s", p->cache_dir);
    else if (env && env[0]) n = snprintf(out, size, "%s", env);
    else if (dir && access(dir, W_OK) == 0) {
        n = snprintf(out, size, "%s/meshlm-cache", dir);
    } else {
        const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        if (xdg && xdg[0]) n = snprintf(out, size, "%s/meshlm", xdg);
        else if (home && home[0]) n = snprintf(out, size, "%s/.cache/meshlm", home);
        else
            return mlm_error_set(err, MLM_ERR_IO,
                                 "cache: %s is read-only and neither MESHLM_CACHE, XDG_CACHE_HOME "
                                 "nor HOME is set",
                                 dir ? dir : "the model folder");
    }
    if (n < 0 || (size_t)n >= size)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "cache: folder name too long");
    return MLM_OK;
}

mlm_status mlm_cache_path_for(const char *dir, const mlm_profile *prof,
                              const mlm_model_params *params, char *path, size_t size,
                              mlm_error *err) {
    char real[PATH_MAX], folder[PATH_MAX], types[1024], id[PATH_MAX + 1100];
    if (!realpath(dir, real))
        return mlm_error_set(err, MLM_ERR_IO, "cache: %s: %s", dir, strerror(errno));
    mlm_status st = cache_dir(dir, params, folder, sizeof folder, err);
    if (st) return st;
    mlm_profile_describe(prof, types, sizeof types);
    snprintf(id, sizeof id, "%s\n%s\nmesh 1", real, types);
    const char *base = strrchr(real, '/');
    base = base && base[1] ? base + 1 : "model";
    unsigned h = (unsigned)(mlm_hash64(id, strlen(id), SEED) & 0xffffffffu);
    /* A TP shard goes to the folder of the seeds' mesh of that many devices (N300/, T3K/, TG/;
     * TPn/ otherwise), one file per rank: a DP lane of TP 2 on T3K shares N300's files. */
    int tp = mlm_comm_size(params ? params->tp : NULL),
        r = mlm_comm_rank(params ? params->tp : NULL);
    int n;
    if (tp == 1) {
        n = snprintf(path, size, "%s/%s.%s.%08x.mlmc", folder, base, prof->name, h);
    } else {
        char mesh[16];
        if (tp == 2 || tp == 8 || tp == 32)
            snprintf(mesh, sizeof mesh, "%s", tp == 2 ? "N300" : tp == 8 ? "T3K" : "TG");
        else
            snprintf(mesh, sizeof mesh, "TP%d", tp);
        n = snprintf(path, size, "%s/%s/%s.%s.%08x.rank%dof%d.mlmc", folder, mesh, base, prof->name,
                     h, r, tp);
    }
    if (n < 0 || (size_t)n >= size)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "cache: path too long");
    return MLM_OK;
}

mlm_status mlm_cache_path(const char *dir, const mlm_model_params *params, char *path,
                          size_t size, mlm_error *err) {
    mlm_model_params p = params ? *params : mlm_model_default_params();
    mlm_config cfg;
    mlm_profile prof;
    mlm_status st = mlm_config_load(dir, &cfg, err);
    if (!st) st = mlm_profile_init(&prof, mlm_model_params_profile(&p), &cfg, p.decoder_config, err);
    if (st) return st;
    st = mlm_cache_path_for(dir, &prof, &p, path, size, err);
    mlm_profile_deinit(&prof);
    return st;
}

mlm_status mlm_cache_dirs(const char *dir, char dirs[][1024], int *n, mlm_error *err) {
    *n = 0;
    mlm_status st = cache_dir(dir, NULL, dirs[0], 1024, err);
    if (st) return st;
    *n = 1;
    return MLM_OK;
}

// ---- writing ----

static mlm_status mkdirs(const char *path, mlm_error *err) {
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *s = buf + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return mlm_error_set(err, MLM_ERR_IO, "cache: cannot create %s: %s", buf,
                                 strerror(errno));
        *s = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return mlm_error_set(err, MLM_ERR_IO, "cache: cannot create %s: %s", buf, strerror(errno));
    return MLM_OK;
}

typedef struct plan {
    int n;
    entry *e;
    mlm_weight_ref *w; /* the weights, in entry order after the norms */
    mlm_norm_ref *norms;
    int n_norms;
    uint64_t index_offset, index_bytes, file_bytes;
} plan;

static void plan_free(plan *pl) {
    free(pl->e), free(pl->w), free(pl->norms);
    memset(pl, 0, sizeof *pl);
}

static mlm_status plan_make(mlm_model *m, size_t key_len, plan *pl, mlm_error *err) {
    int n_w_max = mlm_model_n_weights(m), n_v_max = mlm_model_n_norms(m);
    memset(pl, 0, sizeof *pl);
    pl->w = malloc((size_t)n_w_max * sizeof *pl->w);
    pl->norms = malloc((size_t)n_v_max * sizeof *pl->norms);
    pl->e = calloc((size_t)(n_w_max + n_v_max), sizeof *pl->e);
    if (!pl->w || !pl->norms || !pl->e) {
        plan_free(pl);
        return mlm_error_set(err, MLM_ERR_NOMEM, "cache: out of memory");
    }
    pl->n_norms = mlm_model_norms(m, pl->norms);
    int n_w = mlm_model_weights(m, pl->w);
    uint64_t off = HEADER_BYTES;
    for (int i = 0; i < pl->n_norms + n_w; i++) {
        entry *e = &pl->e[pl->n++];
        if (i < pl->n_norms) {
            snprintf(e->name, sizeof e->name, "%s", pl->norms[i].name);
            e->type = MLM_W_F32, e->rows = 1, e->cols = pl->norms[i].len;
            e->bytes = (uint64_t)mlm_wtype_bytes(MLM_W_F32, 1, e->cols);
        } else {
            const mlm_weight_ref *r = &pl->w[i - pl->n_norms];
            snprintf(e->name, sizeof e->name, "%s", r->name);
            e->type = r->want, e->rows = r->w->rows, e->cols = r->w->cols;
            e->bytes = (uint64_t)mlm_chunked_bytes(r->want, e->rows, e->cols, r->w->n_chunks);
        }
        e->offset = off;
        off = align_up(off + e->bytes);
    }
    pl->index_offset = off;
    pl->index_bytes = 8 + (key_len + 7) / 8 * 8 + 8 + (uint64_t)pl->n * sizeof(entry);
    pl->file_bytes = off + pl->index_bytes + TRAILER_BYTES;
    return MLM_OK;
}

static mlm_status write_zeros(mlm_outfile *f, uint64_t n, mlm_error *err) {
    static const char zeros[ALIGN];
    mlm_status st = MLM_OK;
    while (n && !st) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        st = mlm_outfile_write(f, zeros, k, err);
        n -= k;
    }
    return st;
}

mlm_status mlm_cache_write(mlm_model *m, const char *path, const char *key,
                           const mlm_model_params *p, mlm_error *err) {
    char folder[PATH_MAX];
    snprintf(folder, sizeof folder, "%s", path);
    char *slash = strrchr(folder, '/');
    if (slash) *slash = 0;
    mlm_status st = slash ? mkdirs(folder, err) : MLM_OK;
    if (st) return st;
    size_t key_len = strlen(key);
    plan pl;
    if ((st = plan_make(m, key_len, &pl, err))) return st;
    mlm_outfile f = {0};
    if ((st = mlm_outfile_open(&f, path, pl.file_bytes, err))) {
        plan_free(&pl);
        return st;
    }
    header h = {.magic = "MLMCACHE", .version = VERSION, .header_bytes = HEADER_BYTES,
                .file_bytes = pl.file_bytes, .index_offset = pl.index_offset,
                .index_bytes = pl.index_bytes};
    unsigned char hbuf[HEADER_BYTES] = {0};
    memcpy(hbuf, &h, sizeof h);
    st = mlm_outfile_write(&f, hbuf, sizeof hbuf, err);
    const size_t chunk_max = 64u << 20;
    size_t chunk_cap = chunk_max;
    void *chunk = malloc(chunk_cap);
    if (!chunk && !st) st = mlm_error_set(err, MLM_ERR_NOMEM, "cache: out of memory");
    uint64_t total = pl.index_offset, done = HEADER_BYTES;
    for (int i = 0; i < pl.n && !st; i++) {
        entry *e = &pl.e[i];
        mlm_hash hs;
        mlm_hash_init(&hs, SEED);
        if (i < pl.n_norms) {
            const float *v = *pl.norms[i].v;
            mlm_hash_update(&hs, v, e->bytes);
            st = mlm_outfile_write(&f, v, e->bytes, err);
        } else {
            const mlm_weight *w = pl.w[i - pl.n_norms].w;
            int64_t row_bytes = mlm_wtype_row_bytes((mlm_wtype)e->type, e->cols);
            /* pieces of whole 16-row panels (BFP matrices keep rows in panels of 16); a chunked
             * weight (wo, w2) piece by piece of its layout: block by block, chunk by chunk */
            int32_t chunks = mlm_weight_chunks(w);
            int64_t rows_per = (int64_t)chunk_max / (row_bytes ? row_bytes : 1) / MLM_BFP_ROWS * MLM_BFP_ROWS;
            if (rows_per < MLM_BFP_ROWS) rows_per = MLM_BFP_ROWS;
            if (chunks > 1) rows_per = MLM_CHUNK_ROWS;
            size_t need = (size_t)mlm_wtype_bytes((mlm_wtype)e->type, rows_per, e->cols);
            if (need > chunk_cap) { /* rows wider than 8 MB: one block at a time still fits */
                void *bigger = realloc(chunk, need);
                if (!bigger) {
                    st = mlm_error_set(err, MLM_ERR_NOMEM, "cache: out of memory");
                    break;
                }
                chunk = bigger, chunk_cap = need;
            }
            int64_t n_pieces = chunks > 1 ? mlm_chunk_blocks(e->rows) * chunks
                                          : (e->rows + rows_per - 1) / rows_per;
            for (int64_t k = 0; k < n_pieces && !st; k++) {
                /* the piece as a plain matrix: rows of W, or block k / chunks, chunk k % chunks */
                mlm_weight piece = *w;
                if (chunks > 1) {
                    piece = mlm_weight_part(w, k / chunks, (int32_t)(k % chunks));
                } else {
                    int64_t r = k * rows_per, r1 = r + rows_per < e->rows ? r + rows_per : e->rows;
                    piece.rows = r1 - r;
                    piece.data = (const char *)w->data + mlm_wtype_bytes(w->type, r, w->cols);
                }
                size_t bytes = (size_t)mlm_wtype_bytes((mlm_wtype)e->type, piece.rows, piece.cols);
                if (w->type == (mlm_wtype)e->type) {
                    mlm_hash_update(&hs, piece.data, bytes);
                    st = mlm_outfile_write(&f, piece.data, bytes, err);
                } else {
                    st = mlm_weight_convert_rows(&piece, (mlm_wtype)e->type, 0, piece.rows, chunk,
                                                 m->load_pool, err);
                    mlm_hash_update(&hs, chunk, bytes);
                    if (!st) st = mlm_outfile_write(&f, chunk, bytes, err);
                }
                done += bytes;
                if (p->on_progress) p->on_progress(p->user, (int64_t)done, (int64_t)total);
            }
        }
        e->hash = mlm_hash_final(&hs);
        if (i >= pl.n_norms) { /* a source view of the checkpoint: its pages are read, done */
            const mlm_weight *w = pl.w[i - pl.n_norms].w;
            size_t src = (size_t)mlm_weight_bytes(w);
            if (m->ckpt && mlm_checkpoint_maps(m->ckpt, w->data, src))
                mlm_mapfile_release(w->data, src);
        }
        uint64_t end = e->offset + e->bytes;
        if (!st) st = write_zeros(&f, align_up(end) - end, err);
        done = align_up(end);
        if (p->on_progress && i + 1 == pl.n) p->on_progress(p->user, (int64_t)total, (int64_t)total);
    }
    free(chunk);
    if (!st) {
        /* the index, then the trailer with the hash of header + index */
        mlm_hash hs;
        mlm_hash_init(&hs, SEED);
        mlm_hash_update(&hs, hbuf, sizeof hbuf);
        uint64_t kl = key_len, ne = (uint64_t)pl.n;
        static const char zeros[8];
        const void *parts[] = {&kl, key, zeros, &ne, pl.e};
        size_t sizes[] = {8, key_len, (key_len + 7) / 8 * 8 - key_len, 8,
                          (size_t)pl.n * sizeof(entry)};
        for (int i = 0; i < 5 && !st; i++) {
            mlm_hash_update(&hs, parts[i], sizes[i]);
            st = mlm_outfile_write(&f, parts[i], sizes[i], err);
        }
        trailer t = {.magic = "MLMCEND", .hash = mlm_hash_final(&hs)};
        if (!st) st = mlm_outfile_write(&f, &t, sizeof t, err);
    }
    if (!st) st = mlm_outfile_sync(&f, err);
    if (!st) st = mlm_outfile_commit(&f, err);
    if (!st && slash) st = mlm_fsync_dir(folder, err);
    mlm_outfile_discard(&f);
    plan_free(&pl);
    if (st) mlm_error_prefix(err, "cache %s", path);
    return st;
}

// ---- reading ----

/* Checks the file's framing (size, header, trailer hash) and returns its key and index. */
static mlm_status read_frame(const mlm_mapfile *f, const char **key, size_t *key_len,
                             const entry **index, uint64_t *n, mlm_error *err);

mlm_status mlm_cache_read_frame(const mlm_mapfile *f, const char **key, size_t *key_len,
                                uint64_t *n_tensors, mlm_error *err) {
    const entry *ix;
    return read_frame(f, key, key_len, &ix, n_tensors, err);
}

static mlm_status read_frame(const mlm_mapfile *f, const char **key, size_t *key_len,
                             const entry **index, uint64_t *n, mlm_error *err) {
    header h;
    if (f->size < HEADER_BYTES + TRAILER_BYTES)
        return mlm_error_set(err, MLM_ERR_FORMAT, "cache %s: truncated (%zu bytes)", f->path,
                             f->size);
    memcpy(&h, f->data, sizeof h);
    if (memcmp(h.magic, "MLMCACHE", 8))
        return mlm_error_set(err, MLM_ERR_FORMAT, "cache %s: not a meshlm weight cache", f->path);
    if (h.version != VERSION)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "cache %s: format version %u, this meshlm writes %d", f->path,
                             h.version, VERSION);
    if (h.file_bytes != f->size)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "cache %s: truncated or extended: %zu bytes, the "
                             "header says %llu",
                             f->path, f->size, (unsigned long long)h.file_bytes);
    if (h.header_bytes != HEADER_BYTES || h.index_offset < HEADER_BYTES ||
        h.index_bytes < 16 || h.index_offset > f->size - TRAILER_BYTES ||
        h.index_bytes != f->size - TRAILER_BYTES - h.index_offset)
        return mlm_error_set(err, MLM_ERR_FORMAT, "cache %s: corrupt header", f->path);
    trailer t;
    memcpy(&t, f->data + f->size - TRAILER_BYTES, sizeof t);
    mlm_hash hs;
    mlm_hash_init(&hs, SEED);
    mlm_hash_update(&hs, f->data, HEADER_BYTES);
    mlm_hash_update(&hs, f->data + h.index_offset, h.index_bytes);
    if (memcmp(t.magic, "MLMCEND", 8) || t.hash != mlm_hash_final(&hs))
        return mlm_error_set(err, MLM_ERR_FORMAT, "cache %s: corrupt (index checksum mismatch)",
                             f->path);
    const unsigned char *ix = f->data + h.index_offset;
    uint64_t kl, ne;
    memcpy(&kl, ix, 8);
    if (kl > h.index_bytes - 16 || (kl + 7) / 8 * 8 > h.index_bytes - 16)
        return mlm_error_set(err, MLM_ERR_FORMAT, "cache %s: corrupt index", f->path);
    uint64_t padded = (kl + 7) / 8 * 8;
    memcpy(&ne, ix + 8 + padded, 8);
    if (ne > (h.index_bytes - 16 - padded) / sizeof(entry) ||
        16 + padded + ne * sizeof(entry) != h.index_bytes || h.index_offset % 8)
        return mlm_error_set(err, MLM_ERR_FORMAT, "cache %s: corrupt index", f->path);
    /* entries are 8-byte aligned in the file (the index starts on a 4096 boundary and the key
     * is padded), so they can be read in place */
    *key = (const char *)ix + 8, *key_len = (size_t)kl;
    *index = (const entry *)(const void *)(ix + 16 + padded), *n = ne;
    return MLM_OK;
}

/* The first line where the stored key and the wanted one differ, for the message. */
static void key_diff(const char *have, size_t have_len, const char *want, char *out, size_t size) {
    size_t i = 0;
    while (i < have_len && want[i] && have[i] == want[i]) i++;
    size_t s = i;
    while (s > 0 && want[s - 1] != '\n') s--;
    const char *nl = strchr(want + s, '\n');
    int len = nl ? (int)(nl - (want + s)) : (int)strlen(want + s);
    snprintf(out, size, "%.*s", len > 120 ? 120 : len, want + s);
}

/* Sets the weights' shapes from the config, as the binder would. */
static void set_shapes(mlm_model *m) {
    const mlm_config *c = &m->local; /* this rank's shard */
    int64_t d = c->n_embd, q = (int64_t)c->n_head * c->head_dim,
            kv = (int64_t)c->n_kv_head * c->head_dim, f = c->n_ff;
    m->output = (mlm_weight){.rows = m->n_vocab_local, .cols = d};
    m->tok_emb = (mlm_weight){.rows = m->n_vocab_local + m->n_emb_extra, .cols = d};
    for (int32_t l = 0; l < c->n_layer; l++) {
        mlm_layer *L = &m->layers[l];
        L->wq = (mlm_weight){.rows = q, .cols = d};
        L->wk = (mlm_weight){.rows = kv, .cols = d};
        L->wv = (mlm_weight){.rows = kv, .cols = d};
        L->wo = (mlm_weight){.rows = d, .cols = q, .n_chunks = mlm_wo_chunks(c)};
        L->w1 = (mlm_weight){.rows = f, .cols = d};
        L->w3 = (mlm_weight){.rows = f, .cols = d};
        L->w2 = (mlm_weight){.rows = d, .cols = f, .n_chunks = mlm_w2_chunks(c)};
    }
    mlm_model_vision_shapes(m);
}

typedef struct check_job {
    const uint8_t *data;
    const entry *ix;
    _Atomic int bad; /* the first tensor whose checksum fails, or -1 */
} check_job;

static void check_task(void *ctx, int64_t i, int thread) {
    (void)thread;
    check_job *j = ctx;
    if (mlm_hash64(j->data + j->ix[i].offset, j->ix[i].bytes, SEED) == j->ix[i].hash) return;
    int want = atomic_load(&j->bad);
    while ((want < 0 || i < want) && !atomic_compare_exchange_weak(&j->bad, &want, (int)i)) {
    }
}

mlm_status mlm_cache_map(mlm_model *m, const char *path, const char *key, mlm_error *err) {
    mlm_mapfile f = {0};
    mlm_status st = mlm_mapfile_open(&f, path, err);
    if (st) return st;
    const char *have;
    size_t have_len;
    const entry *ix;
    uint64_t n;
    plan pl = {0};
    st = read_frame(&f, &have, &have_len, &ix, &n, err);
    if (!st && (have_len != strlen(key) || memcmp(have, key, have_len))) {
        char line[160];
        key_diff(have, have_len, key, line, sizeof line);
        st = mlm_error_set(err, MLM_ERR_FORMAT, "cache %s is stale (changed: %s)", path, line);
    }
    if (!st) {
        set_shapes(m);
        st = plan_make(m, have_len, &pl, err);
    }
    if (!st && n != (uint64_t)pl.n)
        st = mlm_error_set(err, MLM_ERR_FORMAT, "cache %s: %llu tensors, the model has %d", path,
                           (unsigned long long)n, pl.n);
    for (int i = 0; !st && i < pl.n; i++) {
        const entry *e = &ix[i], *want = &pl.e[i];
        if (memcmp(e->name, want->name, sizeof e->name) || e->type != want->type ||
            e->rows != want->rows || e->cols != want->cols || e->bytes != want->bytes ||
            e->offset % ALIGN || e->offset > f.size || e->bytes > f.size - e->offset)
            st = mlm_error_set(err, MLM_ERR_FORMAT,
                               "cache %s: entry %d ('%.24s') does not match "
                               "the model",
                               path, i, e->name);
    }
    /* where it fits, the file moves into memory on huge pages (core/mapfile.h says why) */
    if (!st && mlm_mapfile_memory_wanted(f.size) && !mlm_mapfile_to_memory(&f, m->load_pool))
        st = read_frame(&f, &have, &have_len, &ix, &n, err);
    /* every tensor's checksum, in parallel: this also brings a mapped file into memory */
    check_job cj = {f.data, ix, -1};
    if (!st) mlm_pool_run(m->load_pool, pl.n, check_task, &cj);
    int bad = (int)atomic_load(&cj.bad);
    if (!st && bad >= 0)
        st = mlm_error_set(err, MLM_ERR_FORMAT, "cache %s: tensor '%.24s' fails its checksum", path,
                           ix[bad].name);
    if (!st) {
        for (int i = 0; i < pl.n_norms; i++) *pl.norms[i].v = (const float *)(f.data + ix[i].offset);
        for (int i = pl.n_norms; i < pl.n; i++) {
            mlm_weight *w = pl.w[i - pl.n_norms].w;
            w->type = (mlm_wtype)ix[i].type;
            w->data = f.data + ix[i].offset;
        }
        m->cache = f;
    } else {
        mlm_mapfile_close(&f);
    }
    plan_free(&pl);
    return st;
}

// ---- listing ----

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* The mesh folders caches of TP shards go to (mlm_cache_path_for). */
static int mesh_folder(const char *name) {
    return !strcmp(name, "N300") || !strcmp(name, "T3K") || !strcmp(name, "TG") ||
           (!strncmp(name, "TP", 2) && name[2] >= '1' && name[2] <= '9');
}

/* Adds FOLDER's caches to *LIST (*N of them), and with DEPTH > 0 those of its mesh
 * folders. */
static mlm_status list_folder(const char *folder, int depth, mlm_cache_entry **listp, int *np,
                              mlm_error *err) {
    DIR *d = opendir(folder);
    if (!d) {
        if (errno == ENOENT) return MLM_OK;
        return mlm_error_set(err, MLM_ERR_IO, "cache: %s: %s", folder, strerror(errno));
    }
    mlm_cache_entry *list = *listp;
    int n = *np;
    for (struct dirent *de; (de = readdir(d));) {
        if (depth > 0 && mesh_folder(de->d_name)) {
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/%s", folder, de->d_name);
            *listp = list, *np = n;
            list_folder(sub, depth - 1, listp, np, NULL);
            list = *listp, n = *np;
            continue;
        }
        if (!ends_with(de->d_name, ".mlmc") || de->d_name[0] == '.') continue;
        mlm_cache_entry *grown = realloc(list, (size_t)(n + 1) * sizeof *list);
        if (!grown) break;
        list = grown;
        mlm_cache_entry *c = &list[n++];
        memset(c, 0, sizeof *c);
        snprintf(c->path, sizeof c->path, "%s/%s", folder, de->d_name);
        mlm_mapfile f = {0};
        mlm_error e = {0};
        const char *key;
        size_t kl;
        const entry *ix;
        uint64_t ne;
        if (mlm_mapfile_open(&f, c->path, &e) || read_frame(&f, &key, &kl, &ix, &ne, &e)) {
            snprintf(c->why, sizeof c->why, "%.159s", e.msg);
            if (f.data) c->bytes = (int64_t)f.size;
            mlm_mapfile_close(&f);
            continue;
        }
        c->bytes = (int64_t)f.size;
        /* "model PATH", "profile NAME" and "mesh tp T rank R" lines of the key */
        char *k = strndup(key, kl);
        int tp = 1, rank = 0;
        for (char *line = k ? strtok(k, "\n") : NULL; line; line = strtok(NULL, "\n")) {
            if (!strncmp(line, "model ", 6)) snprintf(c->model, sizeof c->model, "%s", line + 6);
            if (!strncmp(line, "profile ", 8)) snprintf(c->profile, sizeof c->profile, "%s", line + 8);
            if (sscanf(line, "mesh tp %d rank %d", &tp, &rank) != 2) tp = tp > 1 ? tp : 1;
        }
        c->tp_size = tp, c->tp_rank = rank;
        free(k);
        /* still valid for the model as it is now? */
        mlm_config cfg;
        mlm_profile prof;
        char want[8192];
        c->valid = 0;
        if (mlm_config_load(c->model, &cfg, &e))
            snprintf(c->why, sizeof c->why, "model folder unreadable");
        else if (mlm_profile_init(&prof, c->profile, &cfg, NULL, &e))
            snprintf(c->why, sizeof c->why, "unknown profile");
        else {
            if (mlm_cache_key(c->model, &prof, rank, tp, want, sizeof want, &e))
                snprintf(c->why, sizeof c->why, "%.159s", e.msg);
            else if (strlen(want) != kl || memcmp(want, key, kl)) {
                char line[120];
                key_diff(key, kl, want, line, sizeof line);
                snprintf(c->why, sizeof c->why, "stale (changed: %s)", line);
            } else
                c->valid = 1;
            mlm_profile_deinit(&prof);
        }
        mlm_mapfile_close(&f);
    }
    closedir(d);
    *listp = list, *np = n;
    return MLM_OK;
}

mlm_status mlm_cache_list(const char *folder, mlm_cache_entry **out, int *count, mlm_error *err) {
    *out = NULL, *count = 0;
    return list_folder(folder, 1, out, count, err);
}
