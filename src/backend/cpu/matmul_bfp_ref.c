/* backend/cpu/matmul_bfp_ref.c: BFP8 / BFP4 weights (tensor/bfp.h panel layout) against int8
 * activations (tensor/q8.h), scalar reference. It defines the canonical order every SIMD level
 * follows (backend.h): per block of 16 columns the exact integer sum I of code x activation,
 * then acc = fma((float)I * ws, d, acc) over the blocks in column order. */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "tensor/bfp.h"
#include "tensor/q8.h"

/* The block scale of exponent byte E: its bits as a float exponent, times 2^-(bits - 2). */
static inline float weight_scale(uint8_t e, int bits) {
    uint32_t u = (uint32_t)e << 23;
    float f;
    memcpy(&f, &u, 4);
    return f * (bits == 8 ? 1.0f / 64 : 1.0f / 4);
}

/* Code of row I, column J (0..63) of a group, as its signed value. */
static inline int code(const uint8_t *grp, int i, int j, int bits) {
    int b = j / 16, c = j % 16;
    if (bits == 8) return (int8_t)grp[b * 256 + (c / 4) * 64 + 4 * i + c % 4];
    uint8_t byte = grp[b * 128 + (c / 8) * 64 + 4 * i + c % 4];
    return mlm_bfp_code_value((c / 4) % 2 ? byte >> 4 : byte & 0xfu, 4);
}

static void matmul_bfp_ref(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                           int64_t r0, int64_t r1, int bits) {
    const int64_t pc = mlm_q8_cols(x->cols), gbytes = mlm_bfp_group_bytes(bits);
    const int64_t pbytes = mlm_bfp_panel_bytes(x->cols, bits), ebase = bits == 8 ? 1024 : 512;
    for (int64_t t = 0; t < x->n; t++) {
        const int8_t *q = x->q + t * pc;
        const float *d = x->d + t * (pc / MLM_Q8_BLOCK);
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *panel = (const uint8_t *)w + r / MLM_BFP_ROWS * pbytes;
            int i = (int)(r % MLM_BFP_ROWS);
            float acc = 0;
            for (int64_t g = 0; g < pc / MLM_BFP_GROUP; g++) {
                const uint8_t *grp = panel + g * gbytes;
                for (int b = 0; b < 4; b++) {
                    int32_t isum = 0;
                    for (int j = 16 * b; j < 16 * b + 16; j++)
                        isum += code(grp, i, j, bits) * q[g * MLM_BFP_GROUP + j];
                    float p = (float)isum * weight_scale(grp[ebase + 16 * b + i], bits);
                    acc = fmaf(p, d[g * 2 + b / 2], acc);
                }
            }
            out[t * out_stride + r] = acc;
        }
    }
}

void mlm_matmul_bfp8_q8_ref(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                            int64_t r0, int64_t r1) {
    matmul_bfp_ref(out, out_stride, w, x, r0, r1, 8);
}

void mlm_matmul_bfp4_q8_ref(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                            int64_t r0, int64_t r1) {
    matmul_bfp_ref(out, out_stride, w, x, r0, r1, 4);
}
