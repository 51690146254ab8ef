/* tensor/q8.c: int8 activation quantization (see q8.h). */
#include "tensor/q8.h"

#include <math.h>

void mlm_q8_sums(const int8_t *q, int64_t n, int64_t cols, float *s) {
    int64_t pc = mlm_q8_cols(cols), len = mlm_q8_sums_len(cols);
    for (int64_t t = 0; t < n; t++) {
        float *st = s + t * len, *s32 = st + pc / 16;
        for (int64_t j = 0; j < pc / 16; j++) {
            int sum = 0;
            for (int k = 0; k < 16; k++) sum += q[t * pc + 16 * j + k];
            st[j] = (float)sum;
        }
        for (int64_t j = 0; j < pc / 32; j++) s32[j] = st[2 * j] + st[2 * j + 1];
    }
}

void mlm_q8_quantize(const float *x, int64_t n, int64_t cols, int8_t *q, uint8_t *u, float *d) {
    int64_t pc = mlm_q8_cols(cols);
    for (int64_t t = 0; t < n; t++) {
        const float *xt = x + t * cols;
        int8_t *qt = q + t * pc;
        float *dt = d + t * (pc / MLM_Q8_BLOCK);
        for (int64_t b = 0; b < pc / MLM_Q8_BLOCK; b++) {
            int64_t k0 = b * MLM_Q8_BLOCK, k1 = k0 + MLM_Q8_BLOCK < cols ? k0 + MLM_Q8_BLOCK : cols;
            float amax = 0;
            for (int64_t k = k0; k < k1; k++) amax = fmaxf(amax, fabsf(xt[k]));
            float scale = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
            dt[b] = scale;
            for (int64_t k = k0; k < k0 + MLM_Q8_BLOCK; k++) {
                float v = k < k1 ? nearbyintf(xt[k] * inv) : 0.0f;
                qt[k] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v == v ? v : 0);
            }
        }
        if (u)
            for (int64_t k = 0; k < pc; k++) u[t * pc + k] = (uint8_t)(qt[k] + 128);
    }
}
