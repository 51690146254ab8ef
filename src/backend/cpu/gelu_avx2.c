/* backend/cpu/gelu_avx2.c: GELU (erf form) in place with AVX2 + FMA, 8 values a vector, bit for
 * bit the arithmetic of gelu_ref.c: both sides of the sign are computed and blended, the tail
 * goes through maskload/maskstore. */
#include <immintrin.h>

#include "backend/backend.h"
#include "backend/cpu/exp2_avx2.h"

#define INLINE static inline __attribute__((always_inline))

/* The constants, loaded once per call. */
typedef struct consts {
    __m256 q[MLM_GELU_NQ];
} consts;

INLINE __m256 gelu8(__m256 x, const consts *c) {
    __m256 one = _mm256_set1_ps(1.0f);
    __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
    __m256 w = _mm256_div_ps(one, _mm256_fmadd_ps(a, _mm256_set1_ps(MLM_GELU_K), one));
    __m256 u = _mm256_sub_ps(one, w), q = c->q[MLM_GELU_NQ - 1];
    _Pragma("GCC unroll 16") for (int i = MLM_GELU_NQ - 2; i >= 0; i--) q =
        _mm256_fmadd_ps(q, u, c->q[i]);
    __m256 e =
        _mm256_fmadd_ps(_mm256_mul_ps(a, a), _mm256_set1_ps(MLM_GELU_C2), _mm256_mul_ps(u, q));
    __m256 h = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), w),
                             mlm_exp2_avx2(e, _mm256_castsi256_ps(_mm256_set1_epi32(-1))));
    __m256 pos = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ);
    __m256 y = _mm256_blendv_ps(_mm256_mul_ps(x, h), _mm256_fnmadd_ps(x, h, x), pos);
    y = _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, _mm256_set1_ps(MLM_GELU_HI), _CMP_GT_OQ));
    __m256 lo = _mm256_cmp_ps(x, _mm256_set1_ps(MLM_GELU_LO), _CMP_LT_OQ);
    return _mm256_blendv_ps(y, _mm256_set1_ps(-0.0f), lo);
}

void mlm_gelu_avx2(float *x, int64_t n) {
    consts c;
    for (int i = 0; i < MLM_GELU_NQ; i++)
        c.q[i] = _mm256_set1_ps(mlm_gelu_q[i]);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 y0 = gelu8(_mm256_loadu_ps(x + i), &c), y1 = gelu8(_mm256_loadu_ps(x + i + 8), &c);
        _mm256_storeu_ps(x + i, y0);
        _mm256_storeu_ps(x + i + 8, y1);
    }
    for (; i < n; i += 8) {
        int left = n - i >= 8 ? 8 : (int)(n - i);
        __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(left), lane);
        _mm256_maskstore_ps(x + i, m, gelu8(_mm256_maskload_ps(x + i, m), &c));
    }
}
