/* backend/cpu/matmul_bfp_avx2.c: BFP8 / BFP4 weights against int8 activations with AVX2.
 *
 * A 64-column group of a weight row becomes two vectors of 32 unsigned magnitudes and two of
 * signs; each token's int8 activations take the weight's sign (vpsignb), vpmaddubsw +
 * vpmaddwd give 8 exact int32 sums of 4 columns, lanes 0-3 in the group's first block of 16
 * and lanes 4-7 in its second, and one FMA per 32 columns adds them scaled by
 * (2^(exp - 127 - (bits - 2)) x activation scale) into an 8-lane f32 accumulator. The
 * canonical order per output: groups in column order, the two halves of a group in order,
 * then a fixed horizontal sum. The decode schedule (8 rows x 1 token, many weight streams in
 * flight) and the prefill one (1 row x 4 tokens, each weight group decoded once for 4 tokens)
 * both follow it, so batching and row splits never change a result. */
#include <immintrin.h>

#include "backend/backend.h"
#include "tensor/bfp.h"
#include "tensor/q8.h"

#define INLINE static inline __attribute__((always_inline))

typedef struct wgroup {
    __m256i mag0, mag1;   /* |code| of columns 0-31 and 32-63 */
    __m256i sign0, sign1; /* negative where the code is negative */
    __m256 exp0, exp1;    /* block scales per int32 lane: blocks (0, 1) and (2, 3) */
} wgroup;

INLINE wgroup load_group(const uint8_t *g, int bits) {
    wgroup w;
    const uint8_t *e;
    if (bits == 8) {
        __m256i c0 = _mm256_loadu_si256((const __m256i *)g);
        __m256i c1 = _mm256_loadu_si256((const __m256i *)(g + 32));
        __m256i m7 = _mm256_set1_epi8(0x7f);
        w.mag0 = _mm256_and_si256(c0, m7), w.mag1 = _mm256_and_si256(c1, m7);
        w.sign0 = c0, w.sign1 = c1; /* bit 7 set: negative as an int8 */
        e = g + 64;
    } else {
        __m256i c = _mm256_loadu_si256((const __m256i *)g), m15 = _mm256_set1_epi8(0x0f);
        __m256i lo = _mm256_and_si256(c, m15);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), m15);
        __m256i m7 = _mm256_set1_epi8(7);
        /* +1 for codes 0-7, -1 for 8-15 (sign bit 3) */
        __m256i sgn = _mm256_setr_epi8(1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1, 1,
                                       1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1);
        w.mag0 = _mm256_and_si256(lo, m7), w.mag1 = _mm256_and_si256(hi, m7);
        w.sign0 = _mm256_shuffle_epi8(sgn, lo), w.sign1 = _mm256_shuffle_epi8(sgn, hi);
        e = g + 32;
    }
    int32_t e4;
    __builtin_memcpy(&e4, e, 4);
    __m128i ex = _mm_shuffle_epi8(_mm_cvtsi32_si128(e4),
                                  _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
    /* 2^(exp - 127) from the exponent bits, times 2^-(bits - 2): exact (powers of two) */
    __m256 k = _mm256_set1_ps(bits == 8 ? 1.0f / 64 : 1.0f / 4);
    w.exp0 = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu8_epi32(ex), 23)), k);
    w.exp1 = _mm256_mul_ps(
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(ex, 8)), 23)), k);
    return w;
}

/* ACC + the group's contribution for one token: X its 64 activations, D its 2 scales. */
INLINE __m256 dot_group(const wgroup *w, const int8_t *x, const float *d, __m256 acc) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i x0 = _mm256_loadu_si256((const __m256i *)x);
    __m256i x1 = _mm256_loadu_si256((const __m256i *)(x + 32));
    __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(w->mag0, _mm256_sign_epi8(x0, w->sign0)), ones);
    __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(w->mag1, _mm256_sign_epi8(x1, w->sign1)), ones);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_mul_ps(w->exp0, _mm256_set1_ps(d[0])), acc);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_mul_ps(w->exp1, _mm256_set1_ps(d[1])), acc);
}

INLINE float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Outputs of rows [r, r + R) for tokens [t, t + T); DS holds the tokens' activation scales,
 * (n, pc / 32). */
INLINE void tile(float *out, int64_t out_stride, const uint8_t *W, int64_t row_bytes,
                 const int8_t *xq, const float *ds, int64_t pc, int64_t r, int R, int64_t t,
                 int T, int bits) {
    const int64_t gbytes = bits == 8 ? 68 : 36;
    __m256 acc[8][8];
    _Pragma("GCC unroll 8") for (int i = 0; i < R; i++)
        _Pragma("GCC unroll 8") for (int j = 0; j < T; j++) acc[i][j] = _mm256_setzero_ps();
    for (int64_t g = 0; g < pc / MLM_BFP_GROUP; g++) {
        _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) {
            /* rows interleaved by 8: the 8 rows of a decode tile are one stream */
            const uint8_t *grp = W + ((r + i) / MLM_BFP_ROWS) * MLM_BFP_ROWS * row_bytes +
                                 (g * MLM_BFP_ROWS + (r + i) % MLM_BFP_ROWS) * gbytes;
            wgroup w = load_group(grp, bits);
            _Pragma("GCC unroll 8") for (int j = 0; j < T; j++)
                acc[i][j] = dot_group(&w, xq + (t + j) * pc + g * MLM_BFP_GROUP,
                                      ds + (t + j) * (pc / MLM_Q8_BLOCK) + 2 * g, acc[i][j]);
        }
    }
    _Pragma("GCC unroll 8") for (int i = 0; i < R; i++)
        _Pragma("GCC unroll 8") for (int j = 0; j < T; j++)
            out[(t + j) * out_stride + r + i] = hsum(acc[i][j]);
}

/* The prefill tile: 1 row x 4 tokens keeps 4 accumulators, the row's decoded group and the
 * activations in the 16 AVX2 registers (wider tiles spilled; measured with bench/matmul). */
#define PR 1
#define PT 4

INLINE void matmul_bfp(float *out, int64_t out_stride, const void *w, const int8_t *xq,
                       const float *xd, int64_t n, int64_t cols, int64_t r0, int64_t r1, int bits) {
    const int64_t pc = mlm_q8_cols(cols), row_bytes = mlm_bfp_row_bytes(cols, bits);
    const uint8_t *W = w;
    int64_t t = 0;
    /* prefill: PR rows x PT tokens per tile, the accumulators in registers */
    for (; t + PT <= n; t += PT) {
        int64_t r = r0;
        for (; r + PR <= r1; r += PR) tile(out, out_stride, W, row_bytes, xq, xd, pc, r, PR, t, PT, bits);
        for (; r < r1; r++) tile(out, out_stride, W, row_bytes, xq, xd, pc, r, 1, t, PT, bits);
    }
    /* decode and the remaining tokens: 8 rows x 1 token, many weight streams in flight */
    for (; t < n; t++) {
        int64_t r = r0;
        for (; r + 8 <= r1; r += 8) tile(out, out_stride, W, row_bytes, xq, xd, pc, r, 8, t, 1, bits);
        for (; r < r1; r++) tile(out, out_stride, W, row_bytes, xq, xd, pc, r, 1, t, 1, bits);
    }
}

void mlm_matmul_bfp8_q8_avx2(float *out, int64_t out_stride, const void *w, const int8_t *xq,
                             const float *xd, int64_t n, int64_t cols, int64_t r0, int64_t r1) {
    matmul_bfp(out, out_stride, w, xq, xd, n, cols, r0, r1, 8);
}

void mlm_matmul_bfp4_q8_avx2(float *out, int64_t out_stride, const void *w, const int8_t *xq,
                             const float *xd, int64_t n, int64_t cols, int64_t r0, int64_t r1) {
    matmul_bfp(out, out_stride, w, xq, xd, n, cols, r0, r1, 4);
}
