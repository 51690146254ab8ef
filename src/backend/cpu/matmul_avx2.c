/* backend/cpu/matmul_avx2.c: matrix products with AVX2 + FMA: f32 and bf16 weights (bf16
 * widened to f32, which is exact), f32 activations and accumulation.
 *
 * Every dot product is computed in one canonical order: one 8-lane accumulator over the
 * columns in chunks of 8, a fixed horizontal sum, then the scalar tail of cols % 8 columns.
 * Two schedules share that order, so results never depend on batching or thread splits:
 *   - few tokens (decode): 8 weight rows at once, bf16 widened in registers, streaming the
 *     weights once (memory bound);
 *   - many tokens (prefill): for each block of 48 tokens, 4 weight rows at a time widened into
 *     a small f32 panel on the stack, then a 4 x 3 register block (rows x tokens) over it
 *     (compute bound). Accumulators live in a stack buffer between column blocks, which
 *     changes nothing in the order of the sums. */
#include <immintrin.h>
#include <string.h>

#include "backend/backend.h"

#define INLINE static inline __attribute__((always_inline))

enum {
    KB = 512,  /* columns per panel block */
    TB = 48,   /* tokens per block in the prefill schedule (a multiple of 3) */
    DECODE_MAX = 3 /* at most this many tokens use the decode schedule */
};

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

/* The canonical finish: hsum of the accumulator, then the tail columns in order. */
INLINE float finish(__m256 acc, const void *w, const float *x, int64_t k0, int64_t cols, int bf16) {
    float s = hsum(acc);
    for (int64_t k = k0; k < cols; k++) s += scalar_w(w, k, bf16) * x[k];
    return s;
}

// ---- decode schedule: R rows, one token ----

/* AHEAD > 0: also prefetches the rows AHEAD bytes further on (the next tiles): a row is a short
 * stream that the hardware prefetcher barely starts on before it ends. */
INLINE void dots_rows(float *out, int64_t stride, const char *const *w, int R, const float *x,
                      int64_t cols, int bf16, size_t ahead) {
    __m256 acc[8];
    _Pragma("GCC unroll 8")
    for (int i = 0; i < R; i++) acc[i] = _mm256_setzero_ps();
    int64_t k8 = cols & ~(int64_t)7, line = bf16 ? 32 : 16;
    for (int64_t k = 0; k < k8; k += 8) {
        if (ahead && k % line == 0)
            _Pragma("GCC unroll 8")
            for (int i = 0; i < R; i++)
                _mm_prefetch(w[i] + ahead + (size_t)k * (bf16 ? 2 : 4), _MM_HINT_T0);
        __m256 xv = _mm256_loadu_ps(x + k);
        _Pragma("GCC unroll 8")
        for (int i = 0; i < R; i++) acc[i] = _mm256_fmadd_ps(load_w(w[i], k, bf16), xv, acc[i]);
    }
    _Pragma("GCC unroll 8")
    for (int i = 0; i < R; i++) out[i * stride] = finish(acc[i], w[i], x, k8, cols, bf16);
}

INLINE void decode(float *out, int64_t out_stride, const char *W, size_t row_bytes,
                   const float *x, int64_t n, int64_t cols, int64_t r0, int64_t r1, int bf16) {
    for (int64_t t = 0; t < n; t++) {
        int64_t r = r0;
        for (; r + 8 <= r1; r += 8) {
            const char *rows[8];
            _Pragma("GCC unroll 8")
            for (int i = 0; i < 8; i++) rows[i] = W + (size_t)(r + i) * row_bytes;
            dots_rows(out + t * out_stride + r, 1, rows, 8, x + t * cols, cols, bf16,
                      16 * row_bytes);
        }
        for (; r < r1; r++) {
            const char *rows[1] = {W + (size_t)r * row_bytes};
            dots_rows(out + t * out_stride + r, 1, rows, 1, x + t * cols, cols, bf16, 0);
        }
    }
}

// ---- prefill schedule: 4-row f32 panels, 4 x T register blocks ----

/* acc[(i * TB + t)] (8 floats each) += panel rows i . x[t] over the panel's KN columns. */
INLINE void block_4xT(__m256 *acc, const float *panel, const float *x, int64_t x_stride,
                      int64_t kn, int T) {
    __m256 a[4][3];
    _Pragma("GCC unroll 8")
    for (int i = 0; i < 4; i++)
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) a[i][t] = acc[i * TB + t];
    for (int64_t k = 0; k < kn; k += 8) {
        __m256 xv[3];
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) xv[t] = _mm256_loadu_ps(x + t * x_stride + k);
        _Pragma("GCC unroll 8")
        for (int i = 0; i < 4; i++) {
            __m256 wv = _mm256_load_ps(panel + i * KB + k);
            _Pragma("GCC unroll 8")
            for (int t = 0; t < T; t++) a[i][t] = _mm256_fmadd_ps(wv, xv[t], a[i][t]);
        }
    }
    _Pragma("GCC unroll 8")
    for (int i = 0; i < 4; i++)
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) acc[i * TB + t] = a[i][t];
}

INLINE void prefill(float *out, int64_t out_stride, const char *W, size_t row_bytes,
                    const float *x, int64_t n, int64_t cols, int64_t r0, int64_t r1, int bf16) {
    _Alignas(32) float panel[4 * KB];
    _Alignas(32) __m256 acc[4 * TB];
    int64_t k8 = cols & ~(int64_t)7;
    int64_t r4 = r0 + (r1 - r0) / 4 * 4; /* rows [r4, r1) take the decode schedule */
    /* tokens outermost: a block of TB tokens' activations stays in cache while every group of
     * 4 rows passes over it (rows outermost re-read all N tokens from memory per group) */
    for (int64_t t0 = 0; t0 < n; t0 += TB) {
        int64_t tn = n - t0 < TB ? n - t0 : TB;
        for (int64_t r = r0; r < r4; r += 4) {
            const char *rows[4];
            _Pragma("GCC unroll 8")
            for (int i = 0; i < 4; i++) rows[i] = W + (size_t)(r + i) * row_bytes;
            for (int i = 0; i < 4 * TB; i++) acc[i] = _mm256_setzero_ps();
            for (int64_t k0 = 0; k0 < k8; k0 += KB) {
                int64_t kn = k8 - k0 < KB ? k8 - k0 : KB;
                _Pragma("GCC unroll 8")
                for (int i = 0; i < 4; i++)
                    for (int64_t k = 0; k < kn; k += 8)
                        _mm256_store_ps(panel + i * KB + k, load_w(rows[i], k0 + k, bf16));
                const float *xb = x + t0 * cols + k0;
                int64_t t = 0;
                for (; t + 3 <= tn; t += 3) block_4xT(acc + t, panel, xb + t * cols, cols, kn, 3);
                if (tn - t == 2) block_4xT(acc + t, panel, xb + t * cols, cols, kn, 2);
                if (tn - t == 1) block_4xT(acc + t, panel, xb + t * cols, cols, kn, 1);
            }
            _Pragma("GCC unroll 8")
            for (int i = 0; i < 4; i++)
                for (int64_t t = 0; t < tn; t++)
                    out[(t0 + t) * out_stride + r + i] =
                        finish(acc[i * TB + t], rows[i], x + (t0 + t) * cols, k8, cols, bf16);
        }
    }
    if (r4 < r1) decode(out, out_stride, W, row_bytes, x, n, cols, r4, r1, bf16);
}

INLINE void matmul(float *out, int64_t out_stride, const void *w, const float *x, int64_t n,
                   int64_t cols, int64_t r0, int64_t r1, int bf16) {
    size_t row_bytes = (size_t)cols * (bf16 ? 2 : 4);
    if (n <= DECODE_MAX) decode(out, out_stride, w, row_bytes, x, n, cols, r0, r1, bf16);
    else prefill(out, out_stride, w, row_bytes, x, n, cols, r0, r1, bf16);
}

void mlm_matmul_f32_avx2(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                         int64_t r0, int64_t r1) {
    matmul(out, out_stride, w, x->x, x->n, x->cols, r0, r1, 0);
}

void mlm_matmul_bf16_avx2(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                          int64_t r0, int64_t r1) {
    matmul(out, out_stride, w, x->x, x->n, x->cols, r0, r1, 1);
}
