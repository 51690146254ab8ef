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

// ---- matrices: rows interleaved in blocks of 8 (see bfp.h) ----

void mlm_bfp_encode_matrix_row(const float *x, int64_t cols, int bits, int64_t r, uint8_t *w) {
    const int64_t gbytes = bits == 8 ? 68 : 36;
    uint8_t tmp[68 * 64]; /* one row's groups, 4096 columns at a time */
    for (int64_t g0 = 0; g0 * MLM_BFP_GROUP < cols; g0 += 64) {
        int64_t c0 = g0 * MLM_BFP_GROUP, n = cols - c0 < 64 * MLM_BFP_GROUP ? cols - c0 : 64 * MLM_BFP_GROUP;
        mlm_bfp_encode_row(x + c0, n, bits, tmp);
        for (int64_t g = 0; g * MLM_BFP_GROUP < n; g++)
            memcpy(w + mlm_bfp_group_offset(r, g0 + g, cols, bits), tmp + g * gbytes, (size_t)gbytes);
    }
}

void mlm_bfp_decode_matrix_row(const uint8_t *w, int64_t cols, int bits, int64_t r, float *out) {
    const int64_t gbytes = bits == 8 ? 68 : 36;
    uint8_t tmp[68];
    for (int64_t g = 0; g * MLM_BFP_GROUP < cols; g++) {
        int64_t c0 = g * MLM_BFP_GROUP, n = cols - c0 < MLM_BFP_GROUP ? cols - c0 : MLM_BFP_GROUP;
        memcpy(tmp, w + mlm_bfp_group_offset(r, g, cols, bits), (size_t)gbytes);
        mlm_bfp_decode_row(tmp, n, bits, out + c0);
    }
}
