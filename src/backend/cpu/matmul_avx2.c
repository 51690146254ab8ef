/* backend/cpu/matmul_avx2.c: matrix products with AVX2 + FMA: f32 and bf16 weights (bf16
 * widened in registers), f32 activations and accumulation. Same structure as the AVX-512
 * file with 8 lanes: two accumulators over 16 columns a step, an 8-column step, a scalar
 * tail, one reduction; identical for every row and token. */
#include <immintrin.h>
#include <string.h>

#include "backend/backend.h"

#define INLINE static inline __attribute__((always_inline))

INLINE __m256 load_w(const void *w, int64_t k, int bf16) {
    if (!bf16) return _mm256_loadu_ps((const float *)w + k);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

INLINE float scalar_w(const void *w, int64_t k, int bf16) {
    if (!bf16) return ((const float *)w)[k];
    uint32_t u = (uint32_t)((const uint16_t *)w)[k] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

INLINE float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

INLINE void dots(float *res, const char *const *w, int R, const float *x, int64_t cols, int bf16) {
    __m256 a0[4], a1[4];
    float tail[4] = {0, 0, 0, 0};
    for (int i = 0; i < R; i++) a0[i] = a1[i] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= cols; k += 16) {
        __m256 x0 = _mm256_loadu_ps(x + k), x1 = _mm256_loadu_ps(x + k + 8);
        for (int i = 0; i < R; i++) {
            a0[i] = _mm256_fmadd_ps(load_w(w[i], k, bf16), x0, a0[i]);
            a1[i] = _mm256_fmadd_ps(load_w(w[i], k + 8, bf16), x1, a1[i]);
        }
    }
    if (k + 8 <= cols) {
        __m256 x0 = _mm256_loadu_ps(x + k);
        for (int i = 0; i < R; i++) a0[i] = _mm256_fmadd_ps(load_w(w[i], k, bf16), x0, a0[i]);
        k += 8;
    }
    for (; k < cols; k++)
        for (int i = 0; i < R; i++) tail[i] += scalar_w(w[i], k, bf16) * x[k];
    for (int i = 0; i < R; i++) res[i] = hsum(_mm256_add_ps(a0[i], a1[i])) + tail[i];
}

INLINE void matmul(float *out, int64_t out_stride, const void *w, const float *x, int64_t n,
                   int64_t cols, int64_t r0, int64_t r1, int bf16) {
    const char *W = w;
    size_t row_bytes = (size_t)cols * (bf16 ? 2 : 4);
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) {
        const char *rows[4] = {W + r * row_bytes, W + (r + 1) * row_bytes,
                               W + (r + 2) * row_bytes, W + (r + 3) * row_bytes};
        for (int64_t t = 0; t < n; t++) {
            float res[4];
            dots(res, rows, 4, x + t * cols, cols, bf16);
            for (int i = 0; i < 4; i++) out[t * out_stride + r + i] = res[i];
        }
    }
    for (; r < r1; r++) {
        const char *rows[1] = {W + r * row_bytes};
        for (int64_t t = 0; t < n; t++) dots(&out[t * out_stride + r], rows, 1, x + t * cols, cols, bf16);
    }
}

void mlm_matmul_f32_avx2(float *out, int64_t out_stride, const void *w, const float *x, int64_t n,
                         int64_t cols, int64_t r0, int64_t r1) {
    matmul(out, out_stride, w, x, n, cols, r0, r1, 0);
}

void mlm_matmul_bf16_avx2(float *out, int64_t out_stride, const void *w, const float *x,
                          int64_t n, int64_t cols, int64_t r0, int64_t r1) {
    matmul(out, out_stride, w, x, n, cols, r0, r1, 1);
}
