/* image/mllama.c: the Llama 3.2 Vision image preprocessing, as transformers'
 * MllamaImageProcessor (image_processing_mllama.py; spec models.md 6.3): the tile grid (canvas)
 * choice, the resize target, Pillow's BILINEAR resize (image/resample.c), zero padding to the
 * canvas, rescale and normalize in float32 the way numpy computes them, tiles in row-major
 * order packed into max_tiles slots. The float arithmetic mirrors numpy's operation by
 * operation (rescale in float64 then cast, subtract and divide in float32), so the output is
 * bit-identical; the rest is integer or exact double comparisons, as in the reference. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "image/image.h"

#define MAX_TILE_SIZE 4096

mlm_mllama_image_params mlm_mllama_image_default_params(void) {
    mlm_mllama_image_params p = {
        .tile_size = MLM_MLLAMA_TILE_SIZE,
        .max_tiles = MLM_MLLAMA_MAX_TILES,
        .rescale = 1.0 / 255.0,
        /* transformers' OPENAI_CLIP_MEAN / OPENAI_CLIP_STD, as in the 11B preprocessor_config */
        .mean = {0.48145466, 0.4578275, 0.40821073},
        .std = {0.26862954, 0.26130258, 0.27577711},
        .order = MLM_RESAMPLE_PILLOW13,
    };
    return p;
}

int32_t mlm_mllama_aspect_ratios(int32_t max_tiles, int32_t (*rc)[2], int32_t cap) {
    int32_t n = 0;
    for (int32_t a = 1; a <= max_tiles; a++)
        for (int32_t b = 1; b <= max_tiles; b++)
            if (a * b <= max_tiles) {
                if (n < cap) {
                    rc[n][0] = a; /* rows: canvas height = a * tile */
                    rc[n][1] = b; /* cols */
                }
                n++;
            }
    return n;
}

static mlm_status check_params(const mlm_mllama_image_params *p, mlm_error *err) {
    if (!p) return mlm_error_set(err, MLM_ERR_INVALID_ARG, "mllama image: no params");
    if (p->tile_size < 1 || p->tile_size > MAX_TILE_SIZE)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "mllama image: tile_size %d outside 1 .. %d",
                             p->tile_size, MAX_TILE_SIZE);
    if (p->max_tiles < 1 || p->max_tiles > MLM_MLLAMA_TILES_CAP)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "mllama image: max_tiles %d outside 1 .. %d (MLM_MLLAMA_TILES_CAP)",
                             p->max_tiles, MLM_MLLAMA_TILES_CAP);
    for (int c = 0; c < 3; c++)
        if (!((float)p->std[c] != 0.0f) || !isfinite(p->mean[c]) || !isfinite(p->std[c]))
            return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                                 "mllama image: channel %d mean %g std %g", c, p->mean[c],
                                 p->std[c]);
    return MLM_OK;
}

mlm_status mlm_mllama_canvas(int64_t width, int64_t height, const mlm_mllama_image_params *p,
                             int32_t *rows, int32_t *cols, int32_t *aspect_ratio_id,
                             mlm_error *err) {
    mlm_status st = check_params(p, err);
    if (st != MLM_OK) return st;
    if (width < 1 || height < 1)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "mllama image: size %lld x %lld",
                             (long long)width, (long long)height);
    /* With max_tiles <= 16 there are at most 50 grids. */
    int32_t rc[64][2];
    int32_t n = mlm_mllama_aspect_ratios(p->max_tiles, rc, 64);
    double scales[64];
    for (int32_t i = 0; i < n; i++) {
        double sh = (double)(rc[i][0] * p->tile_size) / (double)height;
        double sw = (double)(rc[i][1] * p->tile_size) / (double)width;
        scales[i] = sw > sh ? sh : sw;
    }
    /* The smallest upscale if any grid allows one, else the mildest downscale. */
    int have_up = 0;
    double pick = 0.0;
    for (int32_t i = 0; i < n; i++)
        if (scales[i] >= 1.0 && (!have_up || scales[i] < pick)) {
            pick = scales[i];
            have_up = 1;
        }
    if (!have_up) {
        pick = -1.0;
        for (int32_t i = 0; i < n; i++)
            if (scales[i] > pick) pick = scales[i];
    }
    int32_t best = -1;
    for (int32_t i = 0; i < n; i++)
        if (scales[i] == pick && (best < 0 || rc[i][0] * rc[i][1] < rc[best][0] * rc[best][1]))
            best = i;
    *rows = rc[best][0];
    *cols = rc[best][1];
    *aspect_ratio_id = best + 1;
    return MLM_OK;
}

static int64_t clip64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

void mlm_mllama_fit_size(int64_t width, int64_t height, int64_t canvas_w, int64_t canvas_h,
                         int32_t tile_size, int32_t *new_w, int32_t *new_h) {
    int64_t tw = clip64(width, tile_size, canvas_w), th = clip64(height, tile_size, canvas_h);
    double sh = (double)th / (double)height, sw = (double)tw / (double)width;
    int64_t w, h;
    if (sw < sh) {
        w = tw;
        h = (int64_t)floor((double)height * sw);
        if (h == 0) h = 1;
        if (h > th) h = th;
    } else {
        h = th;
        w = (int64_t)floor((double)width * sh);
        if (w == 0) w = 1;
        if (w > tw) w = tw;
    }
    *new_w = (int32_t)w;
    *new_h = (int32_t)h;
}

mlm_status mlm_mllama_preprocess(const mlm_rgb_image *img, const mlm_mllama_image_params *p,
                                 mlm_mllama_pixels *out, mlm_rgb_image *resized, mlm_error *err) {
    memset(out, 0, sizeof *out);
    if (resized) memset(resized, 0, sizeof *resized);
    if (!img || !img->rgb || img->width < 1 || img->height < 1)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "mllama image: empty image");
    int32_t rows, cols, id;
    mlm_status st = mlm_mllama_canvas(img->width, img->height, p, &rows, &cols, &id, err);
    if (st != MLM_OK) return st;
    const int32_t T = p->tile_size;
    int32_t new_w, new_h;
    mlm_mllama_fit_size(img->width, img->height, (int64_t)cols * T, (int64_t)rows * T, T, &new_w,
                        &new_h);

    mlm_rgb_image rs;
    st = mlm_image_resize_bilinear(img, new_w, new_h, p->order, &rs, err);
    if (st != MLM_OK) return st;
    size_t tile_elems = (size_t)3 * T * T;
    out->pixels = calloc((size_t)p->max_tiles * tile_elems, sizeof *out->pixels);
    if (!out->pixels) {
        mlm_image_deinit(&rs);
        return mlm_error_set(err, MLM_ERR_NOMEM, "mllama image: out of memory for %d tiles",
                             p->max_tiles);
    }
    out->max_tiles = p->max_tiles;
    out->tile_size = T;
    out->rows = rows;
    out->cols = cols;
    out->n_tiles = rows * cols;
    out->aspect_ratio_id = id;
    out->resized_width = new_w;
    out->resized_height = new_h;
    for (int32_t t = 0; t < MLM_MLLAMA_TILES_CAP; t++)
        out->aspect_ratio_mask[t] = t < p->max_tiles && (t < out->n_tiles || t == 0);

    /* (v * rescale) in float64, cast to float32; then (x - mean) / std in float32. */
    float lut[3][256];
    for (int c = 0; c < 3; c++) {
        float mean = (float)p->mean[c], sd = (float)p->std[c];
        for (int v = 0; v < 256; v++) {
            float x = (float)((double)v * p->rescale);
            lut[c][v] = (x - mean) / sd;
        }
    }
    /* Tile t = r * cols + c covers canvas rows [r*T, r*T + T) and columns [c*T, c*T + T);
       canvas pixels outside the resized image are the padding value 0. */
    for (int32_t t = 0; t < out->n_tiles; t++) {
        int32_t r0 = (t / cols) * T, c0 = (t % cols) * T;
        float *tile = out->pixels + (size_t)t * tile_elems;
        for (int c = 0; c < 3; c++) {
            float pad = lut[c][0];
            for (int32_t y = 0; y < T; y++) {
                float *dst = tile + ((size_t)c * T + y) * T;
                int32_t Y = r0 + y;
                int32_t x_in = Y < new_h ? new_w - c0 : 0;
                if (x_in < 0) x_in = 0;
                if (x_in > T) x_in = T;
                if (x_in > 0) {
                    const uint8_t *src = rs.rgb + ((size_t)Y * new_w + c0) * 3 + c;
                    for (int32_t x = 0; x < x_in; x++)
                        dst[x] = lut[c][src[3 * (size_t)x]];
                }
                for (int32_t x = x_in; x < T; x++)
                    dst[x] = pad;
            }
        }
    }
    if (resized)
        *resized = rs;
    else
        mlm_image_deinit(&rs);
    return MLM_OK;
}

void mlm_mllama_pixels_deinit(mlm_mllama_pixels *px) {
    if (!px) return;
    free(px->pixels);
    memset(px, 0, sizeof *px);
}
