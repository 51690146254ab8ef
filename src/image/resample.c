/* image/resample.c: Pillow's BILINEAR resize of an 8-bit RGB image, bit for bit.
 *
 * What Pillow's ImagingResample (src/libImaging/Resample.c) does, and so what this does:
 * per axis, scale = in / out; the triangle filter's support is 1 * max(scale, 1) (so a
 * downscale averages over every source pixel it covers: antialiasing); output pixel i is
 * centred at (i + 0.5) * scale and takes the source pixels [xmin, xmin + n) with
 * xmin = (int)(centre - support + 0.5), weights tri((j + xmin - centre + 0.5) / max(scale, 1))
 * normalized to sum 1, then rounded to fixed point with 22 fractional bits. Each pass sums
 * pixel * weight in int32 from 2^21 (the rounding half), shifts by 22 and clips to 0..255.
 * The horizontal pass runs first (only over the source rows the vertical pass reads), unless
 * Pillow 13's rule picks the vertical pass first (image.h, mlm_resample_order). An axis whose
 * size does not change is not resampled. Scalar reference code; a 4-tile canvas takes a few
 * tens of milliseconds. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "image/image.h"

#define PRECISION_BITS 22 /* Pillow: 32 - 8 - 2 */
#define MAX_SIDE (1 << 24)
#define MAX_KSIZE (1 << 22)

typedef struct coeffs {
    int32_t ksize;  /* weights per output pixel (a stride; the tail is 0) */
    int32_t *first; /* owned: (out) first source pixel */
    int32_t *count; /* owned: (out) number of source pixels */
    int32_t *k;     /* owned: (out, ksize) fixed-point weights */
} coeffs;

static void coeffs_free(coeffs *c) {
    free(c->first);
    free(c->count);
    free(c->k);
    memset(c, 0, sizeof *c);
}

static inline double triangle(double x) {
    if (x < 0.0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Pillow's precompute_coeffs + normalize_coeffs_8bpc for the box (0, in_size). */
static mlm_status coeffs_make(int32_t in_size, int32_t out_size, coeffs *c, mlm_error *err) {
    memset(c, 0, sizeof *c);
    /* Pillow takes the box as floats: in1 - in0 is computed in float. */
    double scale = (double)((float)in_size - 0.0f) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * filterscale;
    double inv_filterscale = 1.0 / filterscale;
    double ksize_d = ceil(support) * 2 + 1;
    /* MAX_KSIZE keeps the int32 sums of the passes from overflowing (see pass_horizontal). */
    if (ksize_d > MAX_KSIZE || (double)out_size * ksize_d > (double)(INT_MAX / 8))
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "resize: %d -> %d pixels needs %.0f weights per pixel (limit %d)",
                             in_size, out_size, ksize_d, MAX_KSIZE);
    c->ksize = (int32_t)ksize_d;
    double *w = malloc((size_t)c->ksize * sizeof *w);
    c->first = malloc((size_t)out_size * sizeof *c->first);
    c->count = malloc((size_t)out_size * sizeof *c->count);
    c->k = calloc((size_t)out_size * (size_t)c->ksize, sizeof *c->k);
    if (!w || !c->first || !c->count || !c->k) {
        free(w);
        coeffs_free(c);
        return mlm_error_set(err, MLM_ERR_NOMEM, "resize: out of memory for the weights");
    }
    for (int32_t xx = 0; xx < out_size; xx++) {
        double center = 0.0f + (xx + 0.5) * scale;
        double ww = 0.0;
        int32_t xmin = (int32_t)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int32_t xmax = (int32_t)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        for (int32_t x = 0; x < xmax; x++) {
            w[x] = triangle((x + xmin - center + 0.5) * inv_filterscale);
            ww += w[x];
        }
        int32_t *k = c->k + (size_t)xx * c->ksize;
        for (int32_t x = 0; x < xmax; x++) {
            double v = ww != 0.0 ? w[x] / ww : w[x];
            k[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << PRECISION_BITS))
                         : (int32_t)(0.5 + v * (1 << PRECISION_BITS));
        }
        c->first[xx] = xmin;
        c->count[xx] = xmax;
    }
    free(w);
    return MLM_OK;
}

static inline uint8_t clip8(int32_t ss) {
    if (ss < 0) return 0;
    int32_t v = ss >> PRECISION_BITS;
    return v > 255 ? 255 : (uint8_t)v;
}

/* OUT (out_w x n_rows) from rows [row0, row0 + n_rows) of IN (in_w wide), along x.
 * The int32 sums (int, as in Pillow) cannot overflow: a pixel's rounded weights add up to at
 * most 2^22 + ksize / 2, and 255 * (2^22 + 2^21) + 2^21 < 2^31 for ksize <= MAX_KSIZE. */
static void pass_horizontal(const uint8_t *in, int32_t in_w, int32_t row0, int32_t n_rows,
                            uint8_t *out, int32_t out_w, const coeffs *c) {
    for (int32_t yy = 0; yy < n_rows; yy++) {
        const uint8_t *src = in + (size_t)(yy + row0) * in_w * 3;
        uint8_t *dst = out + (size_t)yy * out_w * 3;
        for (int32_t xx = 0; xx < out_w; xx++) {
            const int32_t *k = c->k + (size_t)xx * c->ksize;
            const uint8_t *p = src + (size_t)c->first[xx] * 3;
            int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
            for (int32_t x = 0; x < c->count[xx]; x++) {
                s0 += p[3 * x] * k[x];
                s1 += p[3 * x + 1] * k[x];
                s2 += p[3 * x + 2] * k[x];
            }
            dst[3 * xx] = clip8(s0);
            dst[3 * xx + 1] = clip8(s1);
            dst[3 * xx + 2] = clip8(s2);
        }
    }
}

/* OUT (w x out_h) from IN (w wide), along y; C's first rows are relative to IN's row 0. */
static void pass_vertical(const uint8_t *in, int32_t w, uint8_t *out, int32_t out_h,
                          const coeffs *c, int32_t row_shift) {
    size_t stride = (size_t)w * 3;
    for (int32_t yy = 0; yy < out_h; yy++) {
        const int32_t *k = c->k + (size_t)yy * c->ksize;
        const uint8_t *src = in + (size_t)(c->first[yy] - row_shift) * stride;
        uint8_t *dst = out + (size_t)yy * stride;
        int32_t n = c->count[yy];
        for (size_t i = 0; i < stride; i++) {
            int32_t s = 1 << (PRECISION_BITS - 1);
            for (int32_t y = 0; y < n; y++)
                s += src[(size_t)y * stride + i] * k[y];
            dst[i] = clip8(s);
        }
    }
}

mlm_status mlm_image_resize_bilinear(const mlm_rgb_image *src, int32_t width, int32_t height,
                                     mlm_resample_order order, mlm_rgb_image *out, mlm_error *err) {
    memset(out, 0, sizeof *out);
    if (!src || !src->rgb || src->width < 1 || src->height < 1 || src->width > MAX_SIDE ||
        src->height > MAX_SIDE)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "resize: bad source image %d x %d",
                             src ? src->width : 0, src ? src->height : 0);
    if (width < 1 || height < 1 || width > MAX_SIDE || height > MAX_SIDE)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "resize: target %d x %d outside 1 .. %d per side", width, height,
                             MAX_SIDE);
    int32_t in_w = src->width, in_h = src->height;
    size_t out_bytes = (size_t)width * (size_t)height * 3;
    out->rgb = malloc(out_bytes);
    if (!out->rgb)
        return mlm_error_set(err, MLM_ERR_NOMEM, "resize: out of memory for %d x %d", width,
                             height);
    out->width = width;
    out->height = height;
    int need_h = width != in_w, need_v = height != in_h;
    if (!need_h && !need_v) {
        memcpy(out->rgb, src->rgb, out_bytes);
        return MLM_OK;
    }
    /* Pillow 13: vertical first when the height loses more than twice the pixels the
       width loses (in int arithmetic, as there). */
    int horizontal_first = 1;
    if (order == MLM_RESAMPLE_PILLOW13)
        horizontal_first =
            !((int64_t)in_h - height > 0 && (int64_t)in_h - height > ((int64_t)in_w - width) * 2);

    coeffs ch = {0}, cv = {0};
    uint8_t *tmp = NULL;
    mlm_status st = MLM_OK;
    if (need_v || (need_h && horizontal_first)) st = coeffs_make(in_h, height, &cv, err);
    if (st == MLM_OK && need_h) st = coeffs_make(in_w, width, &ch, err);
    if (st != MLM_OK) goto done;

    if (horizontal_first) {
        /* Only the source rows that the vertical pass reads. */
        int32_t row0 = cv.first[0];
        int32_t row1 = cv.first[height - 1] + cv.count[height - 1];
        if (need_h && need_v) {
            tmp = malloc((size_t)width * (size_t)(row1 - row0) * 3);
            if (!tmp) {
                st = mlm_error_set(err, MLM_ERR_NOMEM, "resize: out of memory");
                goto done;
            }
            pass_horizontal(src->rgb, in_w, row0, row1 - row0, tmp, width, &ch);
            pass_vertical(tmp, width, out->rgb, height, &cv, row0);
        } else if (need_h) {
            pass_horizontal(src->rgb, in_w, 0, height, out->rgb, width, &ch);
        } else {
            pass_vertical(src->rgb, in_w, out->rgb, height, &cv, 0);
        }
    } else {
        if (need_h) {
            tmp = malloc((size_t)in_w * (size_t)height * 3);
            if (!tmp) {
                st = mlm_error_set(err, MLM_ERR_NOMEM, "resize: out of memory");
                goto done;
            }
            pass_vertical(src->rgb, in_w, tmp, height, &cv, 0);
            pass_horizontal(tmp, in_w, 0, height, out->rgb, width, &ch);
        } else {
            pass_vertical(src->rgb, in_w, out->rgb, height, &cv, 0);
        }
    }
done:
    free(tmp);
    coeffs_free(&ch);
    coeffs_free(&cv);
    if (st != MLM_OK) mlm_image_deinit(out);
    return st;
}
