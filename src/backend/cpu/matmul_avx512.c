/* backend/cpu/matmul_avx512.c: matrix products with AVX-512 (F, BW, VL): f32 and bf16
 * weights (bf16 widened to f32 in registers), f32 activations, f32 accumulation.
 * Each dot product uses two 16-lane accumulators over 32 columns a step, a 16-column step
 * and a masked tail, then one reduction: the same for every row and token, so results do not
 * depend on how rows are split between threads or how many tokens are batched.
 * Four rows are processed together so that each activation load serves four weight rows. */
#include <immintrin.h>

#include "backend/backend.h"

#define INLINE static inline __attribute__((always_inline))

/* 16 weights from row W at column K, widened to f32 (BF16 is a compile-time constant). */
INLINE __m512 load_w(const void *w, int64_t k, int bf16) {
    if (!bf16) return _mm512_loadu_ps((const float *)w + k);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + k));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

INLINE __m512 load_w_mask(const void *w, int64_t k, __mmask16 m, int bf16) {
    if (!bf16) return _mm512_maskz_loadu_ps(m, (const float *)w + k);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w + k);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* RES[i] = dot(row W[i], X) for R rows (1 or 4); ESIZE bytes per weight. */
INLINE void dots(float *res, const char *const *w, int R, const float *x, int64_t cols, int bf16) {
    __m512 a0[4], a1[4];
    _Pragma("GCC unroll 8")
    for (int i = 0; i < R; i++) a0[i] = a1[i] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= cols; k += 32) {
        __m512 x0 = _mm512_loadu_ps(x + k), x1 = _mm512_loadu_ps(x + k + 16);
        _Pragma("GCC unroll 8")
        for (int i = 0; i < R; i++) {
            a0[i] = _mm512_fmadd_ps(load_w(w[i], k, bf16), x0, a0[i]);
            a1[i] = _mm512_fmadd_ps(load_w(w[i], k + 16, bf16), x1, a1[i]);
        }
    }
    if (k + 16 <= cols) {
        __m512 x0 = _mm512_loadu_ps(x + k);
        _Pragma("GCC unroll 8")
        for (int i = 0; i < R; i++) a0[i] = _mm512_fmadd_ps(load_w(w[i], k, bf16), x0, a0[i]);
        k += 16;
    }
    if (k < cols) {
        __mmask16 m = (__mmask16)((1u << (cols - k)) - 1);
        __m512 x0 = _mm512_maskz_loadu_ps(m, x + k);
        _Pragma("GCC unroll 8")
        for (int i = 0; i < R; i++) a1[i] = _mm512_fmadd_ps(load_w_mask(w[i], k, m, bf16), x0, a1[i]);
    }
    _Pragma("GCC unroll 8")
    for (int i = 0; i < R; i++) res[i] = _mm512_reduce_add_ps(_mm512_add_ps(a0[i], a1[i]));
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
            _Pragma("GCC unroll 8")
            for (int i = 0; i < 4; i++) out[t * out_stride + r + i] = res[i];
        }
    }
    for (; r < r1; r++) {
        const char *rows[1] = {W + r * row_bytes};
        for (int64_t t = 0; t < n; t++) dots(&out[t * out_stride + r], rows, 1, x + t * cols, cols, bf16);
    }
}

void mlm_matmul_f32_avx512(float *out, int64_t out_stride, const void *w, const float *x,
                           int64_t n, int64_t cols, int64_t r0, int64_t r1) {
    matmul(out, out_stride, w, x, n, cols, r0, r1, 0);
}

void mlm_matmul_bf16_avx512(float *out, int64_t out_stride, const void *w, const float *x,
                            int64_t n, int64_t cols, int64_t r0, int64_t r1) {
    matmul(out, out_stride, w, x, n, cols, r0, r1, 1);
}
