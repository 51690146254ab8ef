/* backend/cpu/matmul_q_ref.c: native GGUF weights (tensor/qpanel.h) against int8 activations
 * (tensor/q8.h), scalar reference. It defines the canonical order every SIMD level follows
 * (backend.h): per block of 32 columns the exact integer sums, one float value v of the block
 * from them, then acc = fma(v, d, acc) over the blocks in column order. */
#include <math.h>

#include "backend/backend.h"
#include "tensor/q8.h"
#include "tensor/qpanel.h"

static void matmul_q_ref(mlm_qkind k, float *out, int64_t out_stride, const void *w,
                         const mlm_acts *x, int64_t r0, int64_t r1) {
    const int64_t pc = mlm_q8_cols(x->cols);
    const int has_min = mlm_qhas_min(k);
    const mlm_qgeom g = mlm_qpanel_geom(k, x->cols);
    for (int64_t t = 0; t < x->n; t++) {
        const int8_t *q = x->q + t * pc;
        const float *d = x->d + t * (pc / MLM_Q8_BLOCK);
        for (int64_t r = r0; r < r1; r++) {
            float acc = 0;
            for (int64_t b = 0; b < pc / MLM_QP_BLOCK; b++) {
                mlm_qblock blk;
                mlm_qpanel_block(k, &g, w, r, b, &blk);
                int32_t isum[2] = {0, 0}, s = 0;
                for (int c = 0; c < 32; c++) {
                    isum[c / 16] += mlm_qcode_value(k, blk.u[c]) * q[32 * b + c];
                    s += q[32 * b + c];
                }
                float v;
                if (k == MLM_QK_Q6_K)
                    v = fmaf((float)isum[1], blk.scale[1], (float)isum[0] * blk.scale[0]);
                else if (has_min)
                    v = fmaf((float)(isum[0] + isum[1]), blk.scale[0], -((float)s * blk.min));
                else
                    v = (float)(isum[0] + isum[1]) * blk.scale[0];
                acc = fmaf(v, d[b], acc);
            }
            out[t * out_stride + r] = acc;
        }
    }
}

#define Q_REF(T, t, _)                                                                          \
    void mlm_matmul_##t##_q8_ref(float *out, int64_t out_stride, const void *w,                 \
                                 const mlm_acts *x, int64_t r0, int64_t r1) {                   \
        matmul_q_ref((mlm_qkind)(MLM_W_##T - MLM_W_Q8_0), out, out_stride, w, x, r0, r1);       \
    }
MLM_NATIVE_TYPES(Q_REF, _)
