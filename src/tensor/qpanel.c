/* tensor/qpanel.c: repacking ggml blocks into the kernels' panels and reading them back (see
 * qpanel.h). Scalar; the kernels in backend/cpu/matmul_q_*.c read the same layout. */
#include "tensor/qpanel.h"

#include <string.h>

#include "format/gguf_quants.h"
#include "tensor/dtype.h"
#include "tensor/q8.h"

const mlm_qtype mlm_qtypes[MLM_QK_COUNT] = {
    [MLM_QK_Q8_0] = {"q8_0", MLM_GGML_T_Q8_0, 32, 34, 8, 0, 0, 0},
    [MLM_QK_Q4_0] = {"q4_0", MLM_GGML_T_Q4_0, 32, 18, 4, 8, 0, 0},
    [MLM_QK_Q4_1] = {"q4_1", MLM_GGML_T_Q4_1, 32, 20, 4, 0, 1, 0},
    [MLM_QK_Q5_0] = {"q5_0", MLM_GGML_T_Q5_0, 32, 22, 5, 16, 0, 0},
    [MLM_QK_Q5_1] = {"q5_1", MLM_GGML_T_Q5_1, 32, 24, 5, 0, 1, 0},
    [MLM_QK_Q4_K] = {"q4_k", MLM_GGML_T_Q4_K, 256, 144, 4, 0, 1, 2},
    [MLM_QK_Q5_K] = {"q5_k", MLM_GGML_T_Q5_K, 256, 176, 5, 0, 1, 2},
    [MLM_QK_Q6_K] = {"q6_k", MLM_GGML_T_Q6_K, 256, 210, 6, 32, 0, 2},
    [MLM_QK_IQ4_NL] = {"iq4_nl", MLM_GGML_T_IQ4_NL, 32, 18, 4, 0, 0, 0},
    [MLM_QK_IQ4_XS] = {"iq4_xs", MLM_GGML_T_IQ4_XS, 256, 136, 4, 0, 0, 1},
};

/* ggml's kvalues_iq4nl */
const int8_t mlm_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};

int mlm_qkind_of_ggml(uint32_t ggml) {
    for (int k = 0; k < MLM_QK_COUNT; k++)
        if (mlm_qtypes[k].ggml == ggml) return k;
    return -1;
}

static int64_t round64(int64_t n) { return (n + 63) / 64 * 64; }

mlm_qgeom mlm_qpanel_geom(mlm_qkind k, int64_t cols) {
    const mlm_qtype *t = &mlm_qtypes[k];
    mlm_qgeom g = {0};
    g.g = t->src_block == 256 && cols % 256 == 0 ? 8 : 2;
    g.units = g.g == 8 ? 1 : g.g;
    int64_t codes = t->bits == 8 ? 512 : 256, high = t->bits == 5 ? 64 : t->bits == 6 ? 128 : 0;
    g.codes = 0;
    g.high = g.g * codes;
    g.subs = g.high + g.g * high;
    g.d = g.subs + g.g * t->sub_bytes * MLM_QP_ROWS;
    g.m = g.d + g.units * 2 * MLM_QP_ROWS;
    g.group_bytes = round64(g.m + (t->has_min ? g.units * 2 * MLM_QP_ROWS : 0));
    g.n_groups = mlm_q8_cols(cols) / (MLM_QP_BLOCK * g.g);
    g.panel_bytes = g.n_groups * g.group_bytes;
    return g;
}

int64_t mlm_qpanel_bytes(mlm_qkind k, int64_t rows, int64_t cols) {
    return (rows + MLM_QP_ROWS - 1) / MLM_QP_ROWS * mlm_qpanel_geom(k, cols).panel_bytes;
}

int mlm_qpanel_fits(mlm_qkind k, int64_t c0, int64_t cols) {
    if (c0 % MLM_QP_BLOCK || cols % MLM_QP_BLOCK || cols <= 0) return 0;
    /* a group of 8 blocks shares one d: it must be one super-block of the file */
    return mlm_qpanel_geom(k, cols).g == 2 || c0 % 256 == 0;
}

static inline uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ggml's get_scale_min_k4 for sub-block S of the 12 scale bytes Q. */
static void scale_min_k4(const uint8_t *q, int s, uint8_t *sc, uint8_t *mn) {
    if (s < 4) {
        *sc = q[s] & 63;
        *mn = q[s + 4] & 63;
    } else {
        *sc = (uint8_t)((q[s + 4] & 0x0f) | ((q[s - 4] >> 2) & 0x30));
        *mn = (uint8_t)((q[s + 4] >> 4) | ((q[s] >> 2) & 0x30));
    }
}

/* The file's block of 32 at column C (a multiple of 32) of row SRC: codes U, the f16 fields
 * D and M, the sub-scale bytes SUB (qpanel.h's subs part, one row's worth). */
static void unpack(mlm_qkind k, const uint8_t *src, int64_t c, uint8_t u[32], uint16_t *d,
                   uint16_t *m, uint8_t sub[2]) {
    const mlm_qtype *t = &mlm_qtypes[k];
    const uint8_t *b = src + c / t->src_block * t->src_bytes;
    int s = (int)(c % t->src_block / 32); /* sub-block of a super-block */
    *d = *m = 0;
    sub[0] = sub[1] = 0;
    switch (k) {
    case MLM_QK_Q8_0:
        *d = le16(b);
        memcpy(u, b + 2, 32);
        break;
    case MLM_QK_Q4_0:
    case MLM_QK_IQ4_NL:
    case MLM_QK_Q4_1: {
        const uint8_t *qs = b + (k == MLM_QK_Q4_1 ? 4 : 2);
        *d = le16(b);
        if (k == MLM_QK_Q4_1) *m = le16(b + 2);
        for (int j = 0; j < 16; j++) u[j] = qs[j] & 15, u[j + 16] = qs[j] >> 4;
        break;
    }
    case MLM_QK_Q5_0:
    case MLM_QK_Q5_1: {
        int one = k == MLM_QK_Q5_1;
        *d = le16(b);
        if (one) *m = le16(b + 2);
        uint32_t qh = le32(b + 2 + 2 * one);
        const uint8_t *qs = b + 6 + 2 * one;
        for (int j = 0; j < 16; j++) {
            u[j] = (uint8_t)((qs[j] & 15) | ((qh >> j) & 1) << 4);
            u[j + 16] = (uint8_t)((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
        }
        break;
    }
    case MLM_QK_Q4_K:
    case MLM_QK_Q5_K: {
        int five = k == MLM_QK_Q5_K;
        *d = le16(b);
        *m = le16(b + 2);
        scale_min_k4(b + 4, s, &sub[0], &sub[1]);
        const uint8_t *qh = b + 16, *qs = b + (five ? 48 : 16);
        for (int l = 0; l < 32; l++) {
            int lo = (qs[(s / 2) * 32 + l] >> (4 * (s % 2))) & 15;
            u[l] = (uint8_t)(lo | (five ? ((qh[l] >> s) & 1) << 4 : 0));
        }
        break;
    }
    case MLM_QK_Q6_K: {
        const uint8_t *ql = b, *qh = b + 128;
        *d = le16(b + 208);
        sub[0] = b[192 + 2 * s];
        sub[1] = b[192 + 2 * s + 1];
        for (int l = 0; l < 32; l++) {
            int e = 32 * s + l, h = e / 128, r = e % 128;
            int lo = (ql[h * 64 + r % 64] >> (4 * (r / 64))) & 15;
            int hi = (qh[h * 32 + r % 32] >> (2 * (r / 32))) & 3;
            u[l] = (uint8_t)(lo | hi << 4);
        }
        break;
    }
    case MLM_QK_IQ4_XS: {
        *d = le16(b);
        int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 15) | ((le16(b + 2) >> (2 * s)) & 3) << 4;
        sub[0] = (uint8_t)(int8_t)(ls - 32);
        const uint8_t *qs = b + 8 + 16 * s;
        for (int j = 0; j < 16; j++) u[j] = qs[j] & 15, u[j + 16] = qs[j] >> 4;
        break;
    }
    default: break;
    }
}

/* The group holding block B of row R, and R's index in its panel. */
static const uint8_t *group_of(const mlm_qgeom *g, const uint8_t *w, int64_t r, int64_t b) {
    return w + r / MLM_QP_ROWS * g->panel_bytes + b / g->g * g->group_bytes;
}

void mlm_qpanel_pack_row(mlm_qkind k, const void *src, int64_t c0, int64_t cols, int64_t r,
                         uint8_t *dst) {
    const mlm_qtype *t = &mlm_qtypes[k];
    mlm_qgeom g = mlm_qpanel_geom(k, cols);
    int i = (int)(r % MLM_QP_ROWS);
    for (int64_t b = 0; b < cols / MLM_QP_BLOCK; b++) {
        uint8_t u[32], sub[2];
        uint16_t d = 0, m = 0;
        unpack(k, src, c0 + 32 * b, u, &d, &m, sub);
        uint8_t *grp = (uint8_t *)group_of(&g, dst, r, b);
        int bb = (int)(b % g.g), unit = g.units == 1 ? 0 : bb;
        for (int c = 0; c < 32; c++) {
            if (t->bits == 8) {
                grp[bb * 512 + 64 * (c / 4) + 4 * i + c % 4] = u[c];
                continue;
            }
            int h = c % 16 / 4;
            grp[bb * 256 + 64 * h + 4 * i + c % 4] |= (uint8_t)((u[c] & 15) << (c < 16 ? 0 : 4));
            if (t->bits == 5)
                grp[g.high + bb * 64 + 4 * i + c % 4] |= (uint8_t)(((u[c] >> 4) & 1) << (c / 4));
            if (t->bits == 6)
                grp[g.high + bb * 128 + 64 * (c / 16) + 4 * i + c % 4] |=
                    (uint8_t)(((u[c] >> 4) & 3) << (2 * (c / 4 % 4)));
        }
        if (t->sub_bytes == 2) {
            grp[g.subs + bb * 32 + i] = sub[0];
            grp[g.subs + bb * 32 + 16 + i] = sub[1];
        } else if (t->sub_bytes == 1) {
            grp[g.subs + bb * 16 + i] = sub[0];
        }
        grp[g.d + unit * 32 + 2 * i] = (uint8_t)d, grp[g.d + unit * 32 + 2 * i + 1] = (uint8_t)(d >> 8);
        if (t->has_min)
            grp[g.m + unit * 32 + 2 * i] = (uint8_t)m, grp[g.m + unit * 32 + 2 * i + 1] = (uint8_t)(m >> 8);
    }
}

void mlm_qpanel_block(mlm_qkind k, const uint8_t *w, int64_t cols, int64_t r, int64_t b,
                      mlm_qblock *out) {
    const mlm_qtype *t = &mlm_qtypes[k];
    mlm_qgeom g = mlm_qpanel_geom(k, cols);
    const uint8_t *grp = group_of(&g, w, r, b);
    int i = (int)(r % MLM_QP_ROWS), bb = (int)(b % g.g), unit = g.units == 1 ? 0 : bb;
    for (int c = 0; c < 32; c++) {
        if (t->bits == 8) {
            out->u[c] = grp[bb * 512 + 64 * (c / 4) + 4 * i + c % 4];
            continue;
        }
        uint8_t byte = grp[bb * 256 + 64 * (c % 16 / 4) + 4 * i + c % 4];
        unsigned u = c < 16 ? byte & 15 : byte >> 4;
        if (t->bits == 5) u |= ((grp[g.high + bb * 64 + 4 * i + c % 4] >> (c / 4)) & 1) << 4;
        if (t->bits == 6)
            u |= ((grp[g.high + bb * 128 + 64 * (c / 16) + 4 * i + c % 4] >> (2 * (c / 4 % 4))) & 3)
                 << 4;
        out->u[c] = (uint8_t)u;
    }
    float d = mlm_f16_to_f32(le16(grp + g.d + unit * 32 + 2 * i));
    float m = t->has_min ? mlm_f16_to_f32(le16(grp + g.m + unit * 32 + 2 * i)) : 0.0f;
    const uint8_t *sub = grp + g.subs + bb * 16 * t->sub_bytes;
    out->scale[0] = out->scale[1] = d;
    out->min = 0;
    switch (k) {
    case MLM_QK_Q4_1:
    case MLM_QK_Q5_1: out->min = -m; break;
    case MLM_QK_Q4_K:
    case MLM_QK_Q5_K:
        out->scale[0] = out->scale[1] = d * (float)sub[i];
        out->min = m * (float)sub[16 + i];
        break;
    case MLM_QK_Q6_K:
        out->scale[0] = d * (float)(int8_t)sub[i];
        out->scale[1] = d * (float)(int8_t)sub[16 + i];
        break;
    case MLM_QK_IQ4_XS: out->scale[0] = out->scale[1] = d * (float)(int8_t)sub[i]; break;
    default: break;
    }
}

void mlm_qpanel_decode_row(mlm_qkind k, const uint8_t *w, int64_t cols, int64_t r, float *out) {
    int has_min = mlm_qtypes[k].has_min;
    for (int64_t b = 0; b < cols / MLM_QP_BLOCK; b++) {
        mlm_qblock q;
        mlm_qpanel_block(k, w, cols, r, b, &q);
        for (int c = 0; c < 32; c++) {
            float p = q.scale[c / 16] * (float)mlm_qcode_value(k, q.u[c]);
            out[32 * b + c] = has_min ? p - q.min : p;
        }
    }
}
