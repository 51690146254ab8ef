/* image/image.h: images for the vision models. Decoding of PNG (libpng) and JPEG
 * (libjpeg-turbo) from memory or a file into 8-bit RGB, converted the way Pillow and
 * transformers' convert_to_rgb do it (alpha composited over white); Pillow's BILINEAR resize
 * (Resample.c's fixed-point separable filter, reproduced bit for bit); and the Llama 3.2
 * Vision (mllama) preprocessing of transformers' MllamaImageProcessor: canvas choice among
 * the tile grids, resize, zero padding, rescale + normalize, tiles (spec models.md 6.3).
 * Internal to the library for now (the public API will wrap it). No globals; every function
 * is thread-safe on distinct outputs. Images and tile buffers are owned by the caller's
 * structs and freed by their *_deinit. */
#ifndef MESHLM_IMAGE_IMAGE_H
#define MESHLM_IMAGE_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "meshlm.h"

// ---- decoded images ----

/* The default pixel limit (width x height) for decoding: 2^25 = 33.5 M pixels (8192 x 4096),
 * 100 MiB as RGB. A header over the limit is refused before anything is allocated. */
#define MLM_IMAGE_MAX_PIXELS_DEFAULT ((int64_t)1 << 25)

typedef struct mlm_rgb_image {
    int32_t width, height;
    uint8_t *rgb; /* owned (malloc): (height, width, 3) row-major R, G, B */
} mlm_rgb_image;

typedef enum mlm_image_format {
    MLM_IMAGE_FORMAT_UNKNOWN = 0,
    MLM_IMAGE_FORMAT_PNG,
    MLM_IMAGE_FORMAT_JPEG,
} mlm_image_format;

/* The format named by the first bytes (PNG signature, JPEG SOI + marker); UNKNOWN otherwise. */
mlm_image_format mlm_image_sniff(const void *data, size_t size);

/* Decodes SIZE bytes of PNG or JPEG into *OUT (8-bit RGB, owned by OUT; release with
 * mlm_image_deinit). NAME names the source in messages ("photo.jpg", "messages[0] data URL");
 * NULL means "image". MAX_PIXELS bounds width x height (<= 0: MLM_IMAGE_MAX_PIXELS_DEFAULT).
 * Conversion to RGB follows Pillow + transformers' convert_to_rgb exactly: grayscale is
 * replicated, palettes are looked up, alpha (an alpha channel or a tRNS chunk) is composited
 * over white with Pillow's integer alpha_composite, 16-bit samples keep their high byte
 * (16-bit grayscale is clipped to 255, as Pillow's I;16 -> RGB does), CMYK JPEGs use Adobe's
 * inverted convention and Pillow's CMYK -> RGB. JPEGs decode with libjpeg's defaults (ISLOW
 * IDCT, fancy upsampling), as Pillow does.
 * Errors (message "NAME: FORMAT: what"): FORMAT for an empty, truncated or corrupt file (any
 * libjpeg warning counts as corrupt data), or bytes that are no known image; UNSUPPORTED for a
 * known but unhandled format (GIF, WebP, ...) or variant (12-bit JPEG), and for width x height
 * over MAX_PIXELS (checked on the header, before any allocation); NOMEM. *OUT is zeroed on
 * failure. */
mlm_status mlm_image_decode(const char *name, const void *data, size_t size, int64_t max_pixels,
                            mlm_rgb_image *out, mlm_error *err);

/* Maps PATH and decodes it as above (NAME = PATH). IO when it cannot be read. */
mlm_status mlm_image_load(const char *path, int64_t max_pixels, mlm_rgb_image *out, mlm_error *err);

/* Frees the pixels; safe on a zeroed or already released image. */
void mlm_image_deinit(mlm_rgb_image *img);

// ---- resize ----

/* Which pass of the separable resize runs first. Pillow 13 runs the vertical pass first when
 * the height shrinks by more than twice as many pixels as the width (Resample.c
 * "horizontal_first"); Pillow <= 12 always ran the horizontal pass first. The rounding to
 * uint8 between the passes makes the two differ in the last bit. */
typedef enum mlm_resample_order {
    MLM_RESAMPLE_PILLOW13 = 0, /* the default: Pillow 13's rule */
    MLM_RESAMPLE_HORIZONTAL_FIRST,
} mlm_resample_order;

/* Resizes SRC to WIDTH x HEIGHT into *OUT (owned by OUT) exactly as Pillow's
 * Image.resize(size, Image.BILINEAR) on an RGB image: a triangle filter whose support grows
 * with the downscale factor (antialiasing), coefficients normalized per output pixel and
 * rounded to 22-bit fixed point, one pass per axis with rounding and clipping to uint8 after
 * each. Equal sizes copy. INVALID_ARG for sizes < 1 or over 2^24 per side; NOMEM. */
mlm_status mlm_image_resize_bilinear(const mlm_rgb_image *src, int32_t width, int32_t height,
                                     mlm_resample_order order, mlm_rgb_image *out, mlm_error *err);

// ---- Llama 3.2 Vision (mllama) preprocessing ----

#define MLM_MLLAMA_TILE_SIZE 560
#define MLM_MLLAMA_MAX_TILES 4
#define MLM_MLLAMA_TILES_CAP 16 /* the most max_tiles this code accepts */

typedef struct mlm_mllama_image_params {
    int32_t tile_size; /* vision_config.image_size: 560 */
    int32_t max_tiles; /* vision_config.max_num_tiles / max_image_tiles: 4 */
    double rescale;    /* rescale_factor: 1/255 */
    double mean[3];    /* image_mean (CLIP), used as float32 as numpy does */
    double std[3];     /* image_std (CLIP) */
    mlm_resample_order order;
} mlm_mllama_image_params;

/* The 11B Vision preprocessor_config: tile 560, 4 tiles, 1/255, CLIP mean and std. */
mlm_mllama_image_params mlm_mllama_image_default_params(void);

/* The tile grids for MAX_TILES, in transformers' order (get_all_supported_aspect_ratios):
 * (rows, cols) with rows * cols <= MAX_TILES, rows outer; aspect_ratio_id = index + 1. For 4:
 * (1,1) (1,2) (1,3) (1,4) (2,1) (2,2) (3,1) (4,1). Writes at most CAP pairs into RC; returns
 * how many there are. */
int32_t mlm_mllama_aspect_ratios(int32_t max_tiles, int32_t (*rc)[2], int32_t cap);

/* The canvas for a WIDTH x HEIGHT image (get_optimal_tiled_canvas): per grid the scale
 * min(rows*T/h, cols*T/w); the smallest scale >= 1 if any, else the largest; the smallest
 * area among equal scales, first in order on ties. Writes the grid and its 1-based id.
 * INVALID_ARG for sizes < 1 or bad params. */
mlm_status mlm_mllama_canvas(int64_t width, int64_t height, const mlm_mllama_image_params *p,
                             int32_t *rows, int32_t *cols, int32_t *aspect_ratio_id,
                             mlm_error *err);

/* The resize target inside a CANVAS_W x CANVAS_H canvas (get_image_size_fit_to_canvas): each
 * side clipped into [tile, canvas side], then the aspect ratio kept by the limiting side. */
void mlm_mllama_fit_size(int64_t width, int64_t height, int64_t canvas_w, int64_t canvas_h,
                         int32_t tile_size, int32_t *new_w, int32_t *new_h);

typedef struct mlm_mllama_pixels {
    int32_t max_tiles, tile_size;
    float *pixels; /* owned (malloc): (max_tiles, 3, tile_size, tile_size), tile t = r*cols + c;
                      tiles past n_tiles are 0 */
    int32_t n_tiles, rows, cols;
    int32_t aspect_ratio_id;                         /* 1-based, as transformers' */
    int32_t aspect_ratio_mask[MLM_MLLAMA_TILES_CAP]; /* 1 for t < n_tiles (and t = 0) */
    int32_t resized_width, resized_height;           /* the image inside the canvas */
} mlm_mllama_pixels;

/* MllamaImageProcessor on one RGB image: canvas, resize (Pillow BILINEAR on uint8), pad
 * bottom/right with 0, x = float32(float32(v * rescale) - mean[c]) / std[c] (numpy's
 * float32 arithmetic, so the output equals transformers' bit for bit), split into tiles,
 * pack to max_tiles. *OUT owns its buffer (mlm_mllama_pixels_deinit). If RESIZED is not
 * NULL it receives the uint8 image before padding (owned by it), for tests and tools.
 * INVALID_ARG for an empty image or bad params; NOMEM. */
mlm_status mlm_mllama_preprocess(const mlm_rgb_image *img, const mlm_mllama_image_params *p,
                                 mlm_mllama_pixels *out, mlm_rgb_image *resized, mlm_error *err);
void mlm_mllama_pixels_deinit(mlm_mllama_pixels *px);

#endif
