/* backend/cpu/exp2_avx2.h: exp2.h's base-2 exponential on 8 lanes with AVX2 + FMA, the same
 * bits as mlm_exp2c: for the attention kernels' softmax and the GELU kernel. Include only from
 * files compiled with the AVX2 flags (the *_avx2.c rule). */
#ifndef MESHLM_BACKEND_CPU_EXP2_AVX2_H
#define MESHLM_BACKEND_CPU_EXP2_AVX2_H

#include <immintrin.h>

#include "backend/cpu/exp2.h"

/* 2^x on the lanes of VALID (all ones or zeros); others, below -126 or NaN give 0. */
static inline __attribute__((always_inline)) __m256 mlm_exp2_avx2(__m256 x, __m256 valid) {
    valid = _mm256_and_ps(valid, _mm256_cmp_ps(x, _mm256_set1_ps(MLM_EXP2_MIN), _CMP_GE_OQ));
    __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(x, n), p = _mm256_set1_ps(MLM_EXP2_P0);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(MLM_EXP2_P1));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(MLM_EXP2_P2));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(MLM_EXP2_P3));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(MLM_EXP2_P4));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(MLM_EXP2_P5));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    e = _mm256_slli_epi32(e, 23);
    return _mm256_and_ps(valid, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

#endif
