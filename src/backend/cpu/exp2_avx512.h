/* backend/cpu/exp2_avx512.h: exp2.h's base-2 exponential on 16 lanes with AVX-512F, the same
 * bits as mlm_exp2c: for the attention kernels' softmax and the GELU kernel. Include only from
 * files compiled with the AVX-512 flags (the *_avx512.c rule). */
#ifndef MESHLM_BACKEND_CPU_EXP2_AVX512_H
#define MESHLM_BACKEND_CPU_EXP2_AVX512_H

#include <immintrin.h>

#include "backend/cpu/exp2.h"

/* 2^x on the lanes of VALID; lanes outside it, below -126 or NaN give 0. */
static inline __attribute__((always_inline)) __m512 mlm_exp2_avx512(__m512 x, __mmask16 valid) {
    valid &= _mm512_cmp_ps_mask(x, _mm512_set1_ps(MLM_EXP2_MIN), _CMP_GE_OQ);
    __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(x, n), p = _mm512_set1_ps(MLM_EXP2_P0);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(MLM_EXP2_P1));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(MLM_EXP2_P2));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(MLM_EXP2_P3));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(MLM_EXP2_P4));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(MLM_EXP2_P5));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_maskz_mul_ps(valid, p, _mm512_castsi512_ps(_mm512_slli_epi32(e, 23)));
}

#endif
