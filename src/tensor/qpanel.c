/* tensor/qpanel.c: writing blocks into the kernels' panels and reading them back (see
 * qpanel.h). Scalar; the kernels in backend/cpu/matmul_q_*.c read the same layout, and
 * format/gguf_quants.c takes the blocks out of a file's rows. */
#include "tensor/qpanel.h"

#include <string.h>

#include "tensor/dtype.h"
#include "tensor/q8.h"

/* ggml's kvalues_iq4nl */
const int8_t mlm_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};

static int64_t round64(int64_t n) { return (n + 63) / 64 * 64; }

mlm_qgeom mlm_qpanel_geom(mlm_qkind k, int64_t cols) {
    mlm_qgeom g = {0};
    g.g = mlm_qsuper(k) == 256 && cols % 256 == 0 ? 8 : 2;
    g.units = g.g == 8 ? 1 : g.g;
    int bits = mlm_qbits(k);
    int64_t codes = bits == 8 ? 512 : 256, high = bits == 5 ? 64 : bits == 6 ? 128 : 0;
    /* the scales first, then the blocks in column order: one forward stream (see qpanel.h) */
    g.d = 0;
    g.m = g.d + g.units * 2 * MLM_QP_ROWS;
    g.subs = g.m + (mlm_qhas_min(k) ? g.units * 2 * MLM_QP_ROWS : 0);
    g.codes = round64(g.subs + g.g * mlm_qsub_bytes(k) * MLM_QP_ROWS);
    g.high = codes;
    g.blk = codes + high;
    g.group_bytes = g.codes + g.g * g.blk;
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
/* The group holding block B of row R, and R's index in its panel. */
static const uint8_t *group_of(const mlm_qgeom *g, const uint8_t *w, int64_t r, int64_t b) {
    return w + r / MLM_QP_ROWS * g->panel_bytes + b / g->g * g->group_bytes;
}

void mlm_qpanel_put(mlm_qkind k, const mlm_qgeom *g, int64_t r, int64_t b, const mlm_qraw *raw,
                    uint8_t *dst) {
    const int bits = mlm_qbits(k), sub_bytes = mlm_qsub_bytes(k);
    uint8_t *grp = (uint8_t *)group_of(g, dst, r, b);
    int i = (int)(r % MLM_QP_ROWS), bb = (int)(b % g->g), unit = g->units == 1 ? 0 : bb;
    const uint8_t *u = raw->u;
    uint8_t *blk = (uint8_t *)mlm_qpanel_codes(g, grp, bb);
    for (int c = 0; c < 32; c++) {
        if (bits == 8) {
            blk[64 * (c / 4) + 4 * i + c % 4] = u[c];
            continue;
        }
        int h = c % 16 / 4;
        blk[64 * h + 4 * i + c % 4] |= (uint8_t)((u[c] & 15) << (c < 16 ? 0 : 4));
        if (bits == 5)
            blk[g->high + 4 * i + c % 4] |= (uint8_t)(((u[c] >> 4) & 1) << (c / 4));
        if (bits == 6)
            blk[g->high + 64 * (c / 16) + 4 * i + c % 4] |=
                (uint8_t)(((u[c] >> 4) & 3) << (2 * (c / 4 % 4)));
    }
    for (int j = 0; j < sub_bytes; j++) grp[g->subs + bb * 16 * sub_bytes + 16 * j + i] = raw->sub[j];
    uint8_t *d = grp + g->d + unit * 32 + 2 * i, *m = grp + g->m + unit * 32 + 2 * i;
    d[0] = (uint8_t)raw->d, d[1] = (uint8_t)(raw->d >> 8);
    if (mlm_qhas_min(k)) m[0] = (uint8_t)raw->m, m[1] = (uint8_t)(raw->m >> 8);
}

void mlm_qpanel_block(mlm_qkind k, const mlm_qgeom *g, const uint8_t *w, int64_t r, int64_t b,
                      mlm_qblock *out) {
    const int bits = mlm_qbits(k), has_min = mlm_qhas_min(k);
    const uint8_t *grp = group_of(g, w, r, b);
    int i = (int)(r % MLM_QP_ROWS), bb = (int)(b % g->g), unit = g->units == 1 ? 0 : bb;
    const uint8_t *blk = mlm_qpanel_codes(g, grp, bb);
    for (int c = 0; c < 32; c++) {
        if (bits == 8) {
            out->u[c] = blk[64 * (c / 4) + 4 * i + c % 4];
            continue;
        }
        uint8_t byte = blk[64 * (c % 16 / 4) + 4 * i + c % 4];
        unsigned u = c < 16 ? byte & 15 : byte >> 4;
        if (bits == 5) u |= ((blk[g->high + 4 * i + c % 4] >> (c / 4)) & 1) << 4;
        if (bits == 6)
            u |= ((blk[g->high + 64 * (c / 16) + 4 * i + c % 4] >> (2 * (c / 4 % 4))) & 3)
                 << 4;
        out->u[c] = (uint8_t)u;
    }
    float d = mlm_f16_to_f32(le16(grp + g->d + unit * 32 + 2 * i));
    float m = has_min ? mlm_f16_to_f32(le16(grp + g->m + unit * 32 + 2 * i)) : 0.0f;
    const uint8_t *sub = grp + g->subs + bb * 16 * mlm_qsub_bytes(k);
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
    const int has_min = mlm_qhas_min(k);
    const mlm_qgeom g = mlm_qpanel_geom(k, cols);
    for (int64_t b = 0; b < cols / MLM_QP_BLOCK; b++) {
        mlm_qblock q;
        mlm_qpanel_block(k, &g, w, r, b, &q);
        for (int c = 0; c < 32; c++) {
            float p = q.scale[c / 16] * (float)mlm_qcode_value(k, q.u[c]);
            out[32 * b + c] = has_min ? p - q.min : p;
        }
    }
}
