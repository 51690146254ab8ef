/* backend/cpu/quantize_avx2.c: int8 activations (tensor/q8.h) with AVX2, bit for bit
 * mlm_q8_quantize (see quantize_avx512.c for the steps). One row of COLS values per call. */
#include <immintrin.h>
#include <string.h>

#include "backend/backend.h"
#include "tensor/q8.h"

void mlm_quantize_q8_avx2(const float *x, int64_t cols, int8_t *q, uint8_t *u, float *d) {
    const int64_t pc = mlm_q8_cols(cols);
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t k = 0; k < pc; k += MLM_Q8_BLOCK) {
        float buf[MLM_Q8_BLOCK] = {0};
        int64_t n = cols - k < MLM_Q8_BLOCK ? (cols - k > 0 ? cols - k : 0) : MLM_Q8_BLOCK;
        memcpy(buf, x + k, (size_t)n * sizeof *buf);
        __m256 v[4], amax = _mm256_setzero_ps();
        for (int h = 0; h < 4; h++) {
            v[h] = _mm256_loadu_ps(buf + 8 * h);
            amax = _mm256_max_ps(_mm256_and_ps(v[h], absmask), amax); /* NaN: keeps amax */
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        float a = _mm_cvtss_f32(m4), inv = a > 0 ? 127.0f / a : 0.0f;
        d[k / MLM_Q8_BLOCK] = a / 127.0f;
        __m256 iv = _mm256_set1_ps(inv);
        __m256i w[4];
        for (int h = 0; h < 4; h++) {
            __m256 r = _mm256_round_ps(_mm256_mul_ps(v[h], iv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            r = _mm256_and_ps(r, _mm256_cmp_ps(r, r, _CMP_ORD_Q)); /* NaN -> 0 */
            r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
            w[h] = _mm256_cvtps_epi32(r);
        }
        /* 32 int32 -> 32 int8 in order (the packs work per 128-bit lane; fix the order) */
        __m256i p16a = _mm256_packs_epi32(w[0], w[1]), p16b = _mm256_packs_epi32(w[2], w[3]);
        __m256i p8 = _mm256_packs_epi16(p16a, p16b);
        p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(q + k), p8);
        if (u) _mm256_storeu_si256((__m256i *)(u + k), _mm256_xor_si256(p8, _mm256_set1_epi8((char)0x80)));
    }
}
