/* backend/cpu/gelu_avx512.c: GELU (erf form) in place with AVX-512F, 16 values a vector, bit
 * for bit the arithmetic of gelu_ref.c: both sides of the sign are computed and blended, the
 * tail is a masked vector. */
#include <immintrin.h>

#include "backend/backend.h"
#include "backend/cpu/exp2_avx512.h"

#define INLINE static inline __attribute__((always_inline))

/* The constants, loaded once per call. */
typedef struct consts {
    __m512 q[MLM_GELU_NQ];
} consts;

INLINE __m512 gelu16(__m512 x, const consts *c) {
    __m512 one = _mm512_set1_ps(1.0f);
    __m512 a = _mm512_abs_ps(x);
    __m512 w = _mm512_div_ps(one, _mm512_fmadd_ps(a, _mm512_set1_ps(MLM_GELU_K), one));
    __m512 u = _mm512_sub_ps(one, w), q = c->q[MLM_GELU_NQ - 1];
    _Pragma("GCC unroll 16") for (int i = MLM_GELU_NQ - 2; i >= 0; i--) q =
        _mm512_fmadd_ps(q, u, c->q[i]);
    __m512 e =
        _mm512_fmadd_ps(_mm512_mul_ps(a, a), _mm512_set1_ps(MLM_GELU_C2), _mm512_mul_ps(u, q));
    __m512 h = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), w), mlm_exp2_avx512(e, 0xffff));
    __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ);
    __m512 y = _mm512_mask_fnmadd_ps(x, pos, h, x); /* lanes > 0: x - x h, others: x */
    y = _mm512_mask_mul_ps(y, ~pos, x, h);          /* others: x h */
    __mmask16 hi = _mm512_cmp_ps_mask(x, _mm512_set1_ps(MLM_GELU_HI), _CMP_GT_OQ);
    __mmask16 lo = _mm512_cmp_ps_mask(x, _mm512_set1_ps(MLM_GELU_LO), _CMP_LT_OQ);
    y = _mm512_mask_mov_ps(y, hi, x);
    return _mm512_mask_mov_ps(y, lo, _mm512_set1_ps(-0.0f));
}

void mlm_gelu_avx512(float *x, int64_t n) {
    consts c;
    for (int i = 0; i < MLM_GELU_NQ; i++)
        c.q[i] = _mm512_set1_ps(mlm_gelu_q[i]);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 y0 = gelu16(_mm512_loadu_ps(x + i), &c);
        __m512 y1 = gelu16(_mm512_loadu_ps(x + i + 16), &c);
        _mm512_storeu_ps(x + i, y0);
        _mm512_storeu_ps(x + i + 16, y1);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(x + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i), &c));
    }
}
