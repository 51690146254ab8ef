/* backend/cpu/matmul_ref.c: scalar reference matrix products for f32 and bf16 weights (row
 * major). f32 activations: f32 accumulation in index order. bf16 activations (the AVX512-BF16
 * level's form): the arithmetic of vpdpbf16ps, spelled out so the SIMD kernel can be checked
 * bit for bit: 16 lanes, lane j taking columns 32c + 2j and 32c + 2j + 1 of each chunk c of
 * 32, odd column first, each step one fused multiply-add with denormal inputs read as zero
 * and denormal results flushed to zero (as the instruction does), then the lanes summed as
 * 8 + 8, 4 + 4, 2 + 2, 1 + 1. */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "tensor/dtype.h"

void mlm_matmul_f32_ref(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                        int64_t r0, int64_t r1) {
    const float *W = w;
    for (int64_t t = 0; t < x->n; t++)
        for (int64_t r = r0; r < r1; r++) {
            const float *wr = W + r * x->cols, *xt = x->x + t * x->cols;
            float acc = 0;
            for (int64_t k = 0; k < x->cols; k++) acc += wr[k] * xt[k];
            out[t * out_stride + r] = acc;
        }
}

void mlm_matmul_bf16_ref(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                         int64_t r0, int64_t r1) {
    const uint16_t *W = w;
    for (int64_t t = 0; t < x->n; t++)
        for (int64_t r = r0; r < r1; r++) {
            const uint16_t *wr = W + r * x->cols;
            const float *xt = x->x + t * x->cols;
            float acc = 0;
            for (int64_t k = 0; k < x->cols; k++) acc += mlm_bf16_to_f32(wr[k]) * xt[k];
            out[t * out_stride + r] = acc;
        }
}

static inline float flush(float v) { return fabsf(v) < 0x1p-126f ? copysignf(0.0f, v) : v; }

/* One vpdpbf16ps lane step: ACC + a1 * b1, then + a0 * b0. */
static inline float dp_step(float acc, uint16_t a0, uint16_t a1, uint16_t b0, uint16_t b1) {
    acc = flush(fmaf(flush(mlm_bf16_to_f32(a1)), flush(mlm_bf16_to_f32(b1)), acc));
    return flush(fmaf(flush(mlm_bf16_to_f32(a0)), flush(mlm_bf16_to_f32(b0)), acc));
}

void mlm_matmul_bf16_bf16_ref(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                              int64_t r0, int64_t r1) {
    const uint16_t *W = w;
    const int64_t cols = x->cols, hc = mlm_bf16_cols(cols);
    for (int64_t t = 0; t < x->n; t++)
        for (int64_t r = r0; r < r1; r++) {
            const uint16_t *wr = W + r * cols, *xt = x->h + t * hc;
            float lane[16] = {0};
            for (int64_t k = 0; k < hc; k += 32)
                for (int j = 0; j < 16; j++) {
                    int64_t k0 = k + 2 * j, k1 = k0 + 1;
                    /* the weight row has no padding: columns past the end read as zero */
                    uint16_t w0 = k0 < cols ? wr[k0] : 0, w1 = k1 < cols ? wr[k1] : 0;
                    lane[j] = dp_step(lane[j], w0, w1, xt[k0], xt[k1]);
                }
            for (int width = 8; width >= 1; width /= 2)
                for (int j = 0; j < width; j++) lane[j] += lane[j + width];
            out[t * out_stride + r] = lane[0];
        }
}
