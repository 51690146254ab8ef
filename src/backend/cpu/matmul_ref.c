/* backend/cpu/matmul_ref.c: scalar reference matrix products (f32 and bf16 weights, f32
 * activations, f32 accumulation in index order). The SIMD kernels are tested against these. */
#include <string.h>

#include "backend/backend.h"
#include "tensor/dtype.h"

void mlm_matmul_f32_ref(float *out, int64_t out_stride, const void *w, const float *x, int64_t n,
                        int64_t cols, int64_t r0, int64_t r1) {
    const float *W = w;
    for (int64_t t = 0; t < n; t++)
        for (int64_t r = r0; r < r1; r++) {
            const float *wr = W + r * cols, *xt = x + t * cols;
            float acc = 0;
            for (int64_t k = 0; k < cols; k++) acc += wr[k] * xt[k];
            out[t * out_stride + r] = acc;
        }
}

void mlm_matmul_bf16_ref(float *out, int64_t out_stride, const void *w, const float *x, int64_t n,
                         int64_t cols, int64_t r0, int64_t r1) {
    const uint16_t *W = w;
    for (int64_t t = 0; t < n; t++)
        for (int64_t r = r0; r < r1; r++) {
            const uint16_t *wr = W + r * cols;
            const float *xt = x + t * cols;
            float acc = 0;
            for (int64_t k = 0; k < cols; k++) acc += mlm_bf16_to_f32(wr[k]) * xt[k];
            out[t * out_stride + r] = acc;
        }
}
