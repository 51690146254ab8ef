/* backend/cpu/gelu_ref.c: GELU in its exact (erf) form, gelu(x) = x * Phi(x) = 0.5 * x * (1 +
 * erf(x / sqrt(2))), scalar. It defines the arithmetic every SIMD twin reproduces bit for bit,
 * in f32, with fmaf where they use an FMA:
 *   a = |x|; w = 1 / fmaf(a, K, 1); u = 1 - w                          (K = MLM_GELU_K)
 *   q = Horner in u over mlm_gelu_q, highest degree first: q = fmaf(q, u, q_i)
 *   e = fmaf(a * a, C2, u * q)                                        (C2 = -log2(e) / 2)
 *   h = (0.5 * w) * exp2(e)                  (h = Phi(-a) = 0.5 * erfc(a / sqrt(2)))
 *   x > 0: fmaf(-x, h, x) (x - x Phi(-x) in one rounding); otherwise x * h;
 *   x > MLM_GELU_HI: x (+inf too); x < MLM_GELU_LO: -0 (-inf too); NaN gives NaN.
 * u * q fits log2(2 h / w) - C2 a^2, which is smooth in u, for a in [0, 14]: least squares
 * on 800 Chebyshev nodes against mpmath's erfc, the coefficients rounded to f32 from the
 * highest degree down with the lower ones refitted; 2.7e-8 at most, in log2 units. The
 * exponential and its range reduction are exp2.h's (0 below -126). Error against the
 * double-precision GELU, over every float: 0.43 x 2e-7 * max(1, |x|) at most
 * (tests/kernels/test_gelu.c checks the bound). fmaf as an instruction or a libm call gives
 * the same bits. */
#include <math.h>

#include "backend/backend.h"
#include "backend/cpu/exp2.h"

const float mlm_gelu_q[MLM_GELU_NQ] = {
    -1.846173882e+00f, -4.277334809e-01f, 2.487976253e-01f,  2.852014899e-01f,
    5.176373199e-02f,  2.171033993e-02f,  -5.552238822e-01f, 1.064025164e+00f,
    -1.837614775e+00f, 2.069397449e+00f,  -1.175548315e+00f, 2.610912323e-01f,
};

static float gelu1(float x) {
    if (x > MLM_GELU_HI) return x;
    if (x < MLM_GELU_LO) return -0.0f;
    float a = fabsf(x), w = 1.0f / fmaf(a, MLM_GELU_K, 1.0f), u = 1.0f - w;
    float q = mlm_gelu_q[MLM_GELU_NQ - 1];
    for (int i = MLM_GELU_NQ - 2; i >= 0; i--) q = fmaf(q, u, mlm_gelu_q[i]);
    float e = fmaf(a * a, MLM_GELU_C2, u * q);
    float h = (0.5f * w) * mlm_exp2c(e);
    return x > 0 ? fmaf(-x, h, x) : x * h;
}

void mlm_gelu_ref(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = gelu1(x[i]);
}
