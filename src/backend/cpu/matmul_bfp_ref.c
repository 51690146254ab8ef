/* backend/cpu/matmul_bfp_ref.c: BFP8 / BFP4 weights (tensor/bfp.h matrix layout) against int8
 * activations (tensor/q8.h), scalar reference. For each block of 16 columns the integer sum
 * of code x activation is exact; the output is the sum over blocks, in column order, of
 * isum * (2^(exp - 127 - (bits - 2)) * activation scale). */
#include <math.h>

#include "backend/backend.h"
#include "tensor/bfp.h"
#include "tensor/q8.h"

/* Signed value of code C (sign-magnitude, BITS wide). */
static inline int code_value(unsigned c, int bits) {
    int mag = (int)(c & ((1u << (bits - 1)) - 1));
    return (c >> (bits - 1)) & 1 ? -mag : mag;
}

static void matmul_bfp_ref(float *out, int64_t out_stride, const void *w, const int8_t *xq,
                           const float *xd, int64_t n, int64_t cols, int64_t r0, int64_t r1,
                           int bits) {
    const int64_t pc = mlm_q8_cols(cols), cbytes = (bits == 8 ? 68 : 36) - 4;
    for (int64_t t = 0; t < n; t++) {
        const int8_t *q = xq + t * pc;
        const float *d = xd + t * (pc / MLM_Q8_BLOCK);
        for (int64_t r = r0; r < r1; r++) {
            float acc = 0;
            for (int64_t g = 0; g < pc / MLM_BFP_GROUP; g++) {
                const uint8_t *grp = (const uint8_t *)w + mlm_bfp_group_offset(r, g, cols, bits);
                for (int b = 0; b < 4; b++) {
                    int32_t isum = 0;
                    for (int j = 16 * b; j < 16 * b + 16; j++) {
                        unsigned c = bits == 8 ? grp[j] : j < 32 ? grp[j] & 0xfu : grp[j - 32] >> 4;
                        isum += code_value(c, bits) * q[g * MLM_BFP_GROUP + j];
                    }
                    float ws = ldexpf(1.0f, grp[cbytes + b] - 127 - (bits - 2));
                    acc += (float)isum * (ws * d[g * 2 + b / 2]);
                }
            }
            out[t * out_stride + r] = acc;
        }
    }
}

void mlm_matmul_bfp8_q8_ref(float *out, int64_t out_stride, const void *w, const int8_t *xq,
                            const float *xd, int64_t n, int64_t cols, int64_t r0, int64_t r1) {
    matmul_bfp_ref(out, out_stride, w, xq, xd, n, cols, r0, r1, 8);
}

void mlm_matmul_bfp4_q8_ref(float *out, int64_t out_stride, const void *w, const int8_t *xq,
                            const float *xd, int64_t n, int64_t cols, int64_t r0, int64_t r1) {
    matmul_bfp_ref(out, out_stride, w, xq, xd, n, cols, r0, r1, 4);
}
