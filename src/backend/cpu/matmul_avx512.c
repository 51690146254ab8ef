/* backend/cpu/matmul_avx512.c: matrix products with AVX-512 for row-major f32 and bf16
 * weights.
 *   - f32 weights (and bf16 widened to f32, which is exact) against f32 activations: each
 *     dot product has one 16-lane accumulator over the columns 16 at a time, a masked tail,
 *     then _mm512_reduce_add_ps; tiles of 4 rows x 6 tokens share each load.
 *   - bf16 weights against bf16 activations with vpdpbf16ps (AVX512-BF16): 16 lanes of pairs,
 *     32 columns a step, the weights' tail masked, the lanes summed 8+8, 4+4, 2+2, 1+1 --
 *     exactly mlm_matmul_bf16_bf16_ref. Tiles of 4 rows x 6 tokens.
 * Every output is computed the same way whatever the tile, the batch and the row range. */
#include <immintrin.h>

#include "backend/backend.h"

#define INLINE static inline __attribute__((always_inline))
#define RT 4 /* rows per tile */
#define TT 6 /* tokens per tile */

// ---- f32 activations ----

INLINE __m512 load_w(const void *w, int64_t k, __mmask16 m, int bf16) {
    if (!bf16) return _mm512_maskz_loadu_ps(m, (const float *)w + k);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w + k);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

INLINE void tile_f32(float *out, int64_t os, const char *W, size_t row_bytes, const float *x,
                     int64_t cols, int64_t r, int R, int64_t t, int T, int bf16) {
    __m512 acc[RT][TT];
    _Pragma("GCC unroll 16")
    for (int i = 0; i < R; i++)
        _Pragma("GCC unroll 16")
        for (int j = 0; j < T; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < cols; k += 16) {
        __mmask16 m = cols - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (cols - k)) - 1);
        __m512 xv[TT];
        _Pragma("GCC unroll 16")
        for (int j = 0; j < T; j++) xv[j] = _mm512_maskz_loadu_ps(m, x + (t + j) * cols + k);
        _Pragma("GCC unroll 16")
        for (int i = 0; i < R; i++) {
            __m512 wv = load_w(W + (size_t)(r + i) * row_bytes, k, m, bf16);
            _Pragma("GCC unroll 16")
            for (int j = 0; j < T; j++) acc[i][j] = _mm512_fmadd_ps(wv, xv[j], acc[i][j]);
        }
    }
    _Pragma("GCC unroll 16")
    for (int i = 0; i < R; i++)
        _Pragma("GCC unroll 16")
        for (int j = 0; j < T; j++) out[(t + j) * os + r + i] = _mm512_reduce_add_ps(acc[i][j]);
}

#define F32_FN(R, T)                                                                            \
    static void f32_##R##x##T(float *out, int64_t os, const char *W, size_t rb, const float *x, \
                              int64_t cols, int64_t r, int64_t t, int bf16) {                  \
        if (bf16) tile_f32(out, os, W, rb, x, cols, r, R, t, T, 1);                           \
        else tile_f32(out, os, W, rb, x, cols, r, R, t, T, 0);                                \
    }
F32_FN(4, 6)
F32_FN(4, 1)
F32_FN(1, 6)
F32_FN(1, 1)

static void matmul_f32(float *out, int64_t os, const void *w, const mlm_acts *a, int64_t r0,
                       int64_t r1, int bf16) {
    const char *W = w;
    size_t rb = (size_t)a->cols * (bf16 ? 2 : 4);
    for (int64_t r = r0; r < r1; r += RT) {
        int four = r1 - r >= RT;
        int64_t t = 0;
        for (; t + TT <= a->n; t += TT) {
            if (four) f32_4x6(out, os, W, rb, a->x, a->cols, r, t, bf16);
            else
                for (int64_t i = r; i < r1; i++) f32_1x6(out, os, W, rb, a->x, a->cols, i, t, bf16);
        }
        for (; t < a->n; t++) {
            if (four) f32_4x1(out, os, W, rb, a->x, a->cols, r, t, bf16);
            else
                for (int64_t i = r; i < r1; i++) f32_1x1(out, os, W, rb, a->x, a->cols, i, t, bf16);
        }
    }
}

void mlm_matmul_f32_avx512(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                           int64_t r0, int64_t r1) {
    matmul_f32(out, out_stride, w, x, r0, r1, 0);
}

void mlm_matmul_bf16_avx512(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                            int64_t r0, int64_t r1) {
    matmul_f32(out, out_stride, w, x, r0, r1, 1);
}

// ---- bf16 activations (AVX512-BF16) ----

/* 8+8, 4+4, 2+2, 1+1, as the reference sums its lanes. */
INLINE float lanes_sum(__m512 v) {
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v),
                              _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
}

INLINE void tile_bf16(float *out, int64_t os, const uint16_t *W, const uint16_t *h, int64_t cols,
                      int64_t hc, int64_t r, int R, int64_t t, int T) {
    __m512 acc[RT][TT];
    _Pragma("GCC unroll 16")
    for (int i = 0; i < R; i++)
        _Pragma("GCC unroll 16")
        for (int j = 0; j < T; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < hc; k += 32) {
        __mmask32 m = cols - k >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << (cols - k)) - 1);
        __m512bh xv[TT];
        _Pragma("GCC unroll 16")
        for (int j = 0; j < T; j++) xv[j] = (__m512bh)_mm512_loadu_si512((const void *)(h + (t + j) * hc + k));
        /* one token (decode): the rows are short streams, so fetch the next tile's ahead */
        if (T == 1)
            _Pragma("GCC unroll 16")
            for (int i = 0; i < R; i++)
                _mm_prefetch((const char *)(W + (r + 2 * R + i) * cols + k), _MM_HINT_T0);
        _Pragma("GCC unroll 16")
        for (int i = 0; i < R; i++) {
            __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(m, W + (r + i) * cols + k);
            _Pragma("GCC unroll 16")
            for (int j = 0; j < T; j++) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], wv, xv[j]);
        }
    }
    _Pragma("GCC unroll 16")
    for (int i = 0; i < R; i++)
        _Pragma("GCC unroll 16")
        for (int j = 0; j < T; j++) out[(t + j) * os + r + i] = lanes_sum(acc[i][j]);
}

#define BF16_FN(R, T)                                                                           \
    static void bf16_##R##x##T(float *out, int64_t os, const uint16_t *W, const uint16_t *h,   \
                               int64_t cols, int64_t hc, int64_t r, int64_t t) {               \
        tile_bf16(out, os, W, h, cols, hc, r, R, t, T);                                         \
    }
BF16_FN(4, 6)
BF16_FN(4, 1)
BF16_FN(1, 6)
BF16_FN(1, 1)

void mlm_matmul_bf16_bf16_avx512(float *out, int64_t os, const void *w, const mlm_acts *a,
                                 int64_t r0, int64_t r1) {
    const uint16_t *W = w;
    const int64_t cols = a->cols, hc = mlm_bf16_cols(cols);
    for (int64_t r = r0; r < r1; r += RT) {
        int four = r1 - r >= RT;
        int64_t t = 0;
        for (; t + TT <= a->n; t += TT) {
            if (four) bf16_4x6(out, os, W, a->h, cols, hc, r, t);
            else
                for (int64_t i = r; i < r1; i++) bf16_1x6(out, os, W, a->h, cols, hc, i, t);
        }
        for (; t < a->n; t++) {
            if (four) bf16_4x1(out, os, W, a->h, cols, hc, r, t);
            else
                for (int64_t i = r; i < r1; i++) bf16_1x1(out, os, W, a->h, cols, hc, i, t);
        }
    }
}
