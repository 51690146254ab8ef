/* exec/image.c: images for Llama 3.2 Vision (exec/image.h): the public mlm_image (decoding
 * and preprocessing in src/image/, the vision encoder in model/vision.c), and the executor's
 * image K/V: a pool with one block per tile (n_tok entries) and one layer per
 * cross-attention layer, each sequence's images and which of them each of its tokens sees. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/hash.h"
#include "exec/image.h"
#include "image/image.h"
#include "model/forward.h"
#include "model/vision.h"

struct mlm_image {
    const mlm_model *model; /* borrowed: the model it was preprocessed for */
    uint64_t id;            /* once encoded: a hash of its states, so that sequences bound to
                               the same image (the same states) share its K/V */
    int32_t width, height;
    mlm_mllama_pixels px; /* owned pixels (freed once encoded) */
    float *embeds;        /* owned after encoding: (n_tiles * n_tok, n_embd) */
};

// ---- the public image ----

static int is_vision(const mlm_model *m) { return m && m->cfg.family == MLM_FAMILY_MLLAMA; }

int32_t mlm_model_image_token(const mlm_model *m) {
    return is_vision(m) ? m->cfg.image_token_id : -1;
}

/* Preprocesses the decoded RGB for M's vision tower into a new image. */
static mlm_status prepare(const mlm_model *m, const char *name, mlm_rgb_image *rgb, mlm_image **out,
                          mlm_error *err) {
    const mlm_vision_config *v = &m->cfg.vision;
    mlm_mllama_image_params p = mlm_mllama_image_default_params();
    p.tile_size = v->image_size;
    p.max_tiles = v->max_tiles;
    mlm_image *img = calloc(1, sizeof *img);
    if (!img) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", name);
    img->model = m, img->width = rgb->width, img->height = rgb->height;
    mlm_status st = mlm_mllama_preprocess(rgb, &p, &img->px, NULL, err);
    /* the grid's id among the model's own aspect ratios (the processor lists them in
     * transformers' order, which a config may not) */
    int32_t id = 0;
    for (int32_t i = 0; !st && i < v->n_aspect; i++)
        if (v->aspect[i][0] == img->px.rows && v->aspect[i][1] == img->px.cols) id = i + 1;
    if (!st && !id)
        st = mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                           "%s: the tile grid %d x %d is not among the model's supported aspect "
                           "ratios",
                           name, img->px.rows, img->px.cols);
    if (st) {
        mlm_image_free(img);
        return st;
    }
    img->px.aspect_ratio_id = id;
    *out = img;
    return MLM_OK;
}

static mlm_status check_model(const mlm_model *m, const char *name, mlm_error *err) {
    if (!is_vision(m))
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                             "%s: the model takes no images (only Llama 3.2 Vision does)", name);
    return MLM_OK;
}

mlm_status mlm_image_open(const mlm_model *m, const char *path, mlm_image **out, mlm_error *err) {
    *out = NULL;
    mlm_status st = check_model(m, path, err);
    mlm_rgb_image rgb = {0};
    if (!st) st = mlm_image_load(path, MLM_IMAGE_MAX_PIXELS, &rgb, err);
    if (!st) st = prepare(m, path, &rgb, out, err);
    mlm_image_deinit(&rgb);
    return st;
}

mlm_status mlm_image_open_memory(const mlm_model *m, const char *name, const void *data,
                                 size_t size, mlm_image **out, mlm_error *err) {
    *out = NULL;
    if (!name) name = "image";
    mlm_status st = check_model(m, name, err);
    mlm_rgb_image rgb = {0};
    if (!st) st = mlm_image_decode(name, data, size, MLM_IMAGE_MAX_PIXELS, &rgb, err);
    if (!st) st = prepare(m, name, &rgb, out, err);
    mlm_image_deinit(&rgb);
    return st;
}

void mlm_image_free(mlm_image *img) {
    if (!img) return;
    mlm_mllama_pixels_deinit(&img->px);
    free(img->embeds);
    free(img);
}

void mlm_image_get_info(const mlm_image *img, mlm_image_info *out) {
    memset(out, 0, sizeof *out);
    if (!img) return;
    out->width = img->width, out->height = img->height;
    out->rows = img->px.rows, out->cols = img->px.cols, out->n_tiles = img->px.n_tiles;
    out->aspect_ratio_id = img->px.aspect_ratio_id;
    out->n_tokens = img->px.n_tiles * img->model->vision.n_tok;
    out->encoded = img->embeds != NULL;
}

mlm_status mlm_image_encode(const mlm_model *m, mlm_image *img, int n_threads, mlm_error *err) {
    if (!img || img->model != m)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "image: encoded with another model");
    if (img->embeds) return MLM_OK;
    int64_t rows = (int64_t)img->px.n_tiles * m->vision.n_tok;
    float *embeds = malloc((size_t)(rows * m->cfg.n_embd) * sizeof *embeds);
    if (!embeds)
        return mlm_error_set(err, MLM_ERR_NOMEM, "image: out of memory for %lld vision states",
                             (long long)rows);
    mlm_pool *pool = NULL;
    mlm_status st = mlm_pool_create(n_threads > 0 ? n_threads : mlm_cpu_count(), &pool, err);
    if (!st)
        st = mlm_vision_encode(m, img->px.pixels, img->px.aspect_ratio_id, img->px.n_tiles, embeds,
                               pool, err);
    mlm_pool_free(pool);
    if (st) {
        free(embeds);
        return st;
    }
    img->embeds = embeds;
    img->id = mlm_hash64(embeds, (size_t)(rows * m->cfg.n_embd) * sizeof *embeds,
                         0x696d6167ull ^ (uint64_t)img->px.n_tiles);
    free(img->px.pixels); /* the encoder's output is all that is read from now on */
    img->px.pixels = NULL;
    return MLM_OK;
}

// ---- the executor's image K/V ----

mlm_status mlm_exec_images_init(const mlm_model *m, mlm_exec_params *p, mlm_kv *xkv,
                                seq_images **images, mlm_error *err) {
    *images = NULL;
    if (!is_vision(m) || p->max_images == 0) return MLM_OK;
    const mlm_config *c = &m->cfg;
    int32_t tiles_per_seq = p->max_images * c->vision.max_tiles;
    mlm_wtype t = (mlm_wtype)mlm_wtype_of_dtype(p->kv_dtype); /* resolved: f32, bf16, bfp8 */
    mlm_status st =
        mlm_kv_init(xkv, c->n_cross, (int64_t)c->n_kv_head * c->head_dim, t, m->vision.n_tok,
                    p->image_tiles, p->max_seqs, tiles_per_seq * m->vision.n_tok, err);
    if (st) return st;
    if (!(*images = calloc((size_t)p->max_seqs, sizeof **images))) {
        mlm_kv_deinit(xkv);
        return mlm_error_set(err, MLM_ERR_NOMEM, "executor: out of memory");
    }
    return MLM_OK;
}

void mlm_exec_images_deinit(mlm_kv *xkv, seq_images *images) {
    if (!images) return;
    mlm_kv_deinit(xkv);
    free(images);
}

void mlm_exec_images_reset(mlm_kv *xkv, seq_images *si, int32_t seq) {
    mlm_kv_reset(xkv, seq, 0);
    memset(si, 0, sizeof *si);
}

mlm_status mlm_exec_images_check(const seq_images *si, int32_t seq, int32_t tok, int32_t pos,
                                 int32_t image_token, mlm_error *err) {
    int bound = 0;
    for (int32_t i = 0; i < si->n; i++)
        bound |= si->pos[i] == pos;
    if (tok == image_token && !bound)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "executor: sequence %d: the image token %d at position %d has no "
                             "image (%d bound)",
                             seq, tok, pos, si->n);
    if (tok != image_token && bound)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "executor: sequence %d: an image is bound at position %d, where the "
                             "token is %d, not the image token %d",
                             seq, pos, tok, image_token);
    return MLM_OK;
}

void mlm_exec_images_view(const seq_images *si, const mlm_kv_seq *xs, int32_t pos, int32_t n_tok,
                          const int32_t **blocks, int32_t *n) {
    int32_t lo = 0, hi = si->n - 1; /* the images seen are a run [lo, hi] */
    while (lo < si->n && si->ends[lo] <= pos)
        lo++;
    while (hi >= 0 && si->pos[hi] > pos)
        hi--;
    if (lo > hi) {
        *blocks = NULL, *n = 0;
        return;
    }
    *blocks = xs->blocks + si->tile_off[lo];
    *n = (si->tile_off[hi + 1] - si->tile_off[lo]) * n_tok;
}

/* The first tile block of image ID in another sequence than SEQ that holds it, or -1; *FROM
 * gets that sequence. */
static int32_t held_elsewhere(const mlm_kv *xkv, const seq_images *all, int32_t n_seqs, int32_t seq,
                              uint64_t id, int32_t *from) {
    for (int32_t s = 0; s < n_seqs; s++)
        for (int32_t i = 0; s != seq && i < all[s].n; i++)
            if (all[s].ids[i] == id && xkv->seqs[s].n_blocks >= all[s].tile_off[i + 1]) {
                *from = s;
                return all[s].tile_off[i];
            }
    return -1;
}

mlm_status mlm_exec_images_bind(const mlm_model *m, const mlm_exec_params *p, mlm_kv *xkv,
                                seq_images *all, int32_t seq, int32_t next,
                                mlm_image *const *images, const int32_t *pos, int32_t n,
                                void *scratch, mlm_pool *pool, mlm_error *err) {
    seq_images *si = &all[seq];
    if (si->n)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "executor: sequence %d already holds %d images (reset it first)", seq,
                             si->n);
    if (n < 1 || n > p->max_images)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "executor: %d images for one sequence, the executor takes 1 to %d "
                             "(max_images)",
                             n, p->max_images);
    int32_t fresh = 0, from;
    for (int32_t i = 0; i < n; i++) {
        const mlm_image *img = images[i];
        if (!img || img->model != m || !img->embeds)
            return mlm_error_set(err, MLM_ERR_INVALID_ARG, "executor: image %d is %s", i,
                                 !img              ? "missing"
                                 : img->model != m ? "another model's"
                                                   : "not encoded (mlm_image_encode)");
        if (pos[i] < next || (i && pos[i] <= pos[i - 1]))
            return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                                 "executor: sequence %d: image %d at position %d: positions must "
                                 "increase from the next one, %d",
                                 seq, i, pos[i], next);
        if (held_elsewhere(xkv, all, p->max_seqs, seq, img->id, &from) < 0)
            fresh += img->px.n_tiles;
    }
    if (fresh > xkv->n_free)
        return mlm_error_set(
            err, MLM_ERR_CAPACITY,
            "executor: the image pool has %d free tiles of %d, these images need %d "
            "(image_tiles)",
            xkv->n_free, xkv->max_num_blocks, fresh);
    /* an image another sequence holds shares its tile blocks (their K/V are the same);
     * the others get new blocks and their K/V computed */
    int32_t T = m->vision.n_tok;
    si->tile_off[0] = 0;
    for (int32_t i = 0; i < n; i++) {
        const mlm_image *img = images[i];
        int32_t tiles = img->px.n_tiles,
                first = held_elsewhere(xkv, all, p->max_seqs, seq, img->id, &from);
        if (first >= 0) {
            mlm_kv_share(xkv, seq, xkv->seqs[from].blocks + first, tiles);
        } else {
            int32_t len = xkv->seqs[seq].len;
            mlm_kv_grow(xkv, seq, len + tiles * T);
            xkv->seqs[seq].len = len + tiles * T;
            mlm_forward_cross_kv(m, img->embeds, (int64_t)tiles * T, xkv->layers,
                                 xkv->seqs[seq].blocks, len, p->max_step_tokens, scratch, pool);
        }
        si->pos[i] = pos[i];
        si->ids[i] = img->id;
        si->tile_off[i + 1] = si->tile_off[i] + tiles;
    }
    si->n = n;
    /* Hugging Face's ranges (get_cross_attention_token_mask): each image up to the next one's
     * position, the last to the end; a run of consecutive image tokens all extend to the end
     * of the run's last range */
    int32_t last = INT32_MAX;
    for (int32_t i = n - 1; i >= 0; i--) {
        si->ends[i] = i + 1 < n ? pos[i + 1] : INT32_MAX;
        if (si->pos[i] + 1 == si->ends[i]) si->ends[i] = last;
        last = si->ends[i];
    }
    return MLM_OK;
}
