/* backend/cpu/quantize_avx512.c: int8 activations (tensor/q8.h) with AVX-512F/BW, bit for bit
 * mlm_q8_quantize: the block maximum of |x| (a NaN never wins, as with fmaxf), the same
 * division for the scale and its inverse, x * inv rounded to nearest even, NaN to 0, clamped
 * to +-127, and the +128 unsigned copy. One row of COLS values per call. */
#include <immintrin.h>

#include "backend/backend.h"
#include "tensor/q8.h"

void mlm_quantize_q8_avx512(const float *x, int64_t cols, int8_t *q, uint8_t *u, float *d) {
    const int64_t pc = mlm_q8_cols(cols);
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (int64_t k = 0; k < pc; k += MLM_Q8_BLOCK) {
        __m512 v[2], amax = _mm512_setzero_ps();
        for (int h = 0; h < 2; h++) {
            int64_t left = cols - (k + 16 * h);
            __mmask16 m = left >= 16 ? 0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
            v[h] = _mm512_maskz_loadu_ps(m, x + k + 16 * h);
            amax = _mm512_max_ps(_mm512_and_ps(v[h], absmask), amax); /* NaN: keeps amax */
        }
        float a = _mm512_reduce_max_ps(amax), inv = a > 0 ? 127.0f / a : 0.0f;
        d[k / MLM_Q8_BLOCK] = a / 127.0f;
        __m512 iv = _mm512_set1_ps(inv);
        for (int h = 0; h < 2; h++) {
            __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(v[h], iv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(r, r, _CMP_ORD_Q), r); /* NaN -> 0 */
            r = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
            __m128i b = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r));
            _mm_storeu_si128((__m128i *)(q + k + 16 * h), b);
            if (u) _mm_storeu_si128((__m128i *)(u + k + 16 * h), _mm_xor_si128(b, _mm_set1_epi8((char)0x80)));
        }
    }
}
