/* tensor/bfp.c: BFP8/BFP4 encode and decode, scalar reference (see bfp.h). */
#include "tensor/bfp.h"

#include <math.h>
#include <string.h>

void mlm_bfp_encode_block(const float *x, int bits, uint8_t *exp, uint8_t *codes) {
    const int shift = 25 - bits;
    const uint32_t maxmag = (1u << (bits - 1)) - 1;
    uint32_t u[MLM_BFP_BLOCK], e_max = 0;
    memcpy(u, x, sizeof u);
    for (int i = 0; i < MLM_BFP_BLOCK; i++) {
        uint32_t e = (u[i] >> 23) & 0xff; /* raw: inf/NaN (255) are not special */
        if (e > e_max) e_max = e;
    }
    for (int i = 0; i < MLM_BFP_BLOCK; i++) {
        uint32_t e = (u[i] >> 23) & 0xff;
        if (e == 0) { /* zero and denormals */
            codes[i] = 0;
            continue;
        }
        uint32_t m = (u[i] & 0x7fffffu) | 0x800000u, d = e_max - e;
        m = d >= 32 ? 0 : m >> d; /* truncating alignment, no sticky bit */
        m = (m + (1u << (shift - 1)) - 1 + ((m >> shift) & 1)) >> shift; /* half to even */
        if (m > maxmag) m = maxmag;                                      /* saturate */
        codes[i] = m == 0 ? 0 : (uint8_t)((u[i] >> 31) << (bits - 1) | m);
    }
    *exp = (uint8_t)e_max;
}

float mlm_bfp_decode(uint8_t exp, uint8_t code, int bits) {
    uint32_t mag = code & ((1u << (bits - 1)) - 1);
    if (!mag) return 0.0f;
    float v;
    if (exp) { /* mag x 2^(exp - 127) x 2^-(bits - 2): exact (powers of two, mag < 2^7) */
        uint32_t u = (uint32_t)exp << 23;
        float scale;
        memcpy(&scale, &u, 4);
        v = (float)mag * (scale * (bits == 8 ? 1.0f / 64 : 1.0f / 4));
    } else {
        v = ldexpf((float)mag, -127 - (bits - 2));
    }
    return (code >> (bits - 1)) & 1 ? -v : v;
}

void mlm_bfp_pack_row(const float *x, int64_t n, int bits, uint8_t *exps, uint8_t *codes) {
    for (int64_t b = 0; b < n / MLM_BFP_BLOCK; b++) {
        uint8_t c[MLM_BFP_BLOCK];
        mlm_bfp_encode_block(x + b * MLM_BFP_BLOCK, bits, &exps[b], c);
        if (bits == 8) {
            memcpy(codes + b * MLM_BFP_BLOCK, c, MLM_BFP_BLOCK);
        } else {
            for (int i = 0; i < MLM_BFP_BLOCK; i += 2)
                codes[b * 8 + i / 2] = (uint8_t)(c[i] | c[i + 1] << 4);
        }
    }
}

void mlm_bfp_unpack_row(const uint8_t *exps, const uint8_t *codes, int64_t n, int bits,
                        float *out) {
    for (int64_t i = 0; i < n; i++) {
        uint8_t code = bits == 8 ? codes[i] : (uint8_t)((codes[i / 2] >> (4 * (i & 1))) & 0xf);
        out[i] = mlm_bfp_decode(exps[i / MLM_BFP_BLOCK], code, bits);
    }
}

// ---- the kernels' row layout (see bfp.h) ----

void mlm_bfp_encode_row(const float *x, int64_t cols, int bits, uint8_t *dst) {
    const int64_t gbytes = bits == 8 ? 68 : 36, cbytes = gbytes - 4;
    for (int64_t g = 0; g * MLM_BFP_GROUP < cols; g++, dst += gbytes) {
        float v[MLM_BFP_GROUP] = {0};
        int64_t k0 = g * MLM_BFP_GROUP, k1 = k0 + MLM_BFP_GROUP < cols ? k0 + MLM_BFP_GROUP : cols;
        memcpy(v, x + k0, (size_t)(k1 - k0) * sizeof *v);
        uint8_t c[MLM_BFP_GROUP];
        for (int b = 0; b < 4; b++)
            mlm_bfp_encode_block(v + 16 * b, bits, &dst[cbytes + b], c + 16 * b);
        if (bits == 8) memcpy(dst, c, 64);
        else
            for (int j = 0; j < 32; j++) dst[j] = (uint8_t)(c[j] | c[j + 32] << 4);
    }
}

void mlm_bfp_decode_row(const uint8_t *src, int64_t cols, int bits, float *out) {
    const int64_t gbytes = bits == 8 ? 68 : 36, cbytes = gbytes - 4;
    for (int64_t k = 0; k < cols; k++) {
        const uint8_t *g = src + k / MLM_BFP_GROUP * gbytes;
        int j = (int)(k % MLM_BFP_GROUP);
        uint8_t code = bits == 8 ? g[j] : (uint8_t)(j < 32 ? g[j] & 0xf : g[j - 32] >> 4);
        out[k] = mlm_bfp_decode(g[cbytes + j / 16], code, bits);
    }
}

// ---- matrices: panels of 16 rows (see bfp.h) ----

/* Byte of group G of the panel holding row R, and row R's place in it. */
static uint8_t *group_at(const uint8_t *w, int64_t r, int64_t g, int64_t cols, int bits) {
    return (uint8_t *)w + r / MLM_BFP_ROWS * mlm_bfp_panel_bytes(cols, bits) +
           g * mlm_bfp_group_bytes(bits);
}

/* Offset of column J (0..63) of row I (0..15) inside a group: its code byte. */
static int64_t code_at(int i, int j, int bits) {
    int b = j / 16, c = j % 16;
    if (bits == 8) return b * 256 + (c / 4) * 64 + 4 * i + c % 4;
    return b * 128 + (c / 8) * 64 + 4 * i + c % 4; /* nibble: (c / 4) % 2 */
}

void mlm_bfp_encode_matrix_row(const float *x, int64_t cols, int bits, int64_t r, uint8_t *w) {
    const int i = (int)(r % MLM_BFP_ROWS), ebase = bits == 8 ? 1024 : 512;
    for (int64_t g = 0; g * MLM_BFP_GROUP < cols; g++) {
        float v[MLM_BFP_GROUP] = {0};
        int64_t k0 = g * MLM_BFP_GROUP, k1 = k0 + MLM_BFP_GROUP < cols ? k0 + MLM_BFP_GROUP : cols;
        memcpy(v, x + k0, (size_t)(k1 - k0) * sizeof *v);
        uint8_t *grp = group_at(w, r, g, cols, bits), c[MLM_BFP_BLOCK];
        for (int b = 0; b < 4; b++) {
            mlm_bfp_encode_block(v + 16 * b, bits, &grp[ebase + 16 * b + i], c);
            for (int j = 0; j < 16; j++) {
                uint8_t *at = grp + code_at(i, 16 * b + j, bits);
                if (bits == 8) {
                    *at = (uint8_t)(int8_t)mlm_bfp_code_value(c[j], 8);
                } else {
                    int hi = (j / 4) % 2;
                    *at = (uint8_t)((*at & (hi ? 0x0f : 0xf0)) | c[j] << (hi ? 4 : 0));
                }
            }
        }
    }
}

void mlm_bfp_decode_matrix_row(const uint8_t *w, int64_t cols, int bits, int64_t r, float *out) {
    const int i = (int)(r % MLM_BFP_ROWS), ebase = bits == 8 ? 1024 : 512;
    for (int64_t k = 0; k < cols; k++) {
        const uint8_t *grp = group_at(w, r, k / MLM_BFP_GROUP, cols, bits);
        int j = (int)(k % MLM_BFP_GROUP);
        uint8_t e = grp[ebase + 16 * (j / 16) + i], at = grp[code_at(i, j, bits)];
        if (bits == 8) {
            int v = (int8_t)at; /* back to sign-magnitude for the decoder */
            out[k] = mlm_bfp_decode(e, (uint8_t)(v < 0 ? 0x80 | -v : v), 8);
        } else {
            out[k] = mlm_bfp_decode(e, (uint8_t)((j % 16 / 4) % 2 ? at >> 4 : at & 0xf), 4);
        }
    }
}
