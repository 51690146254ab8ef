/* backend/cpu/exp2.h: the constants of the attention kernels' base-2 exponential, shared by
 * the reference and every SIMD twin so that all compute the same bits: for x >= -126,
 * n = round-to-nearest-even(x), f = x - n (exact), 2^f by this degree-6 polynomial in Horner
 * form with fused multiply-adds (Cephes' exp2f coefficients), times 2^n from the exponent
 * bits; below -126 the result is 0. */
#ifndef MESHLM_BACKEND_CPU_EXP2_H
#define MESHLM_BACKEND_CPU_EXP2_H

#define MLM_EXP2_MIN (-126.0f)
#define MLM_EXP2_P0 1.535336188319500e-4f
#define MLM_EXP2_P1 1.339887440266574e-3f
#define MLM_EXP2_P2 9.618437357674640e-3f
#define MLM_EXP2_P3 5.550332471162809e-2f
#define MLM_EXP2_P4 2.402264791363012e-1f
#define MLM_EXP2_P5 6.931472028550421e-1f
/* log2(e) / sqrt(head_dim) scales the queries, so scores are in base 2 */
#define MLM_LOG2E 1.4426950408889634f

#include <math.h>
#include <stdint.h>
#include <string.h>

/* The scalar exp2 of the kernels, for x <= 0 (scores minus their running maximum). Every file
 * that includes it computes the same bits, whether fmaf is an instruction or a libm call. */
static inline float mlm_exp2c(float x) {
    if (!(x >= MLM_EXP2_MIN)) return 0.0f;
    float n = nearbyintf(x), f = x - n, p = MLM_EXP2_P0;
    p = fmaf(p, f, MLM_EXP2_P1);
    p = fmaf(p, f, MLM_EXP2_P2);
    p = fmaf(p, f, MLM_EXP2_P3);
    p = fmaf(p, f, MLM_EXP2_P4);
    p = fmaf(p, f, MLM_EXP2_P5);
    p = fmaf(p, f, 1.0f);
    uint32_t u = (uint32_t)((int)n + 127) << 23;
    float s;
    memcpy(&s, &u, 4);
    return p * s;
}

#endif
