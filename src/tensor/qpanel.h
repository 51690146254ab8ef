/* tensor/qpanel.h: GGUF quantized weights at their own bits, repacked for the kernels (the
 * "native" profile). Each ggml type keeps its values exactly (as gguf-py dequantizes them);
 * only the arrangement changes, so one vector load feeds 16 rows.
 *
 * The values. Every type is, per row and block of 32 columns, codes u (unsigned, BITS wide)
 * with a signed value c = val(u), a block scale and, for some types, a block min:
 *   type     bits  c            scale            min (w = scale * c - min)
 *   q8_0     8     (int8)u      d                -
 *   q4_0     4     u - 8        d                -
 *   q4_1     4     u            d                -m
 *   q5_0     5     u - 16       d                -
 *   q5_1     5     u            d                -m
 *   q4_k     4     u            d * sc           dmin * mn
 *   q5_k     5     u            d * sc           dmin * mn
 *   q6_k     6     u - 32       d * sc (per 16)  -
 *   iq4_nl   4     kv[u]        d                -
 *   iq4_xs   4     kv[u]        d * (ls - 32)    -
 * with d, m, dmin the file's f16 fields (per block of 32, or per super-block of 256 for the
 * k-quants and iq4_xs), sc, mn, ls its 6-bit sub-scales and kv the iq4 table. Every scale and
 * min is exact in f32 (an 11-bit significand times at most 8 bits).
 *
 * The layout. Rows go in panels of 16 (the row count padded with zero rows), columns in groups
 * of G blocks of 32: G = 8 (one super-block, one d per row) for a k-quant or iq4_xs matrix
 * whose columns are a multiple of 256, else G = 2 (each block its own d; a k-quant matrix cut
 * off a super-block boundary, as a K chunk can be, repeats the super-block's d per block).
 * The columns are padded with zero blocks to a multiple of 64 (the int8 activations' padding).
 * A panel holds its groups in column order; a group is its scales, then its blocks, so that
 * decode reads each panel as one forward stream (scales that sat after the codes, read with a
 * group's first block, cost the k-quants half their streaming speed on AMD Zen 4):
 *   d      per d-unit (the group, or each block) 16 f16, one per row;
 *   m      likewise the f16 m or dmin (types with a min);
 *   subs   per block 16 rows of: sc then mn bytes (q4_k, q5_k: 32 bytes), the int8 scales
 *          of columns 0-15 then 16-31 (q6_k: 32 bytes), ls - 32 as int8 (iq4_xs: 16 bytes);
 *   then zero bytes to a multiple of 64, and G blocks of BLK bytes, each:
 *   codes  4-bit types 256 bytes: 4 vectors of 64 bytes, byte 4i + j of vector h holding
 *          row i's code of column 4h + j in its low nibble and of column 16 + 4h + j in its
 *          high nibble (bits 0-3 for 5- and 6-bit codes); q8_0 512 bytes: 8 vectors, byte
 *          4i + j of vector h the code of row i, column 4h + j;
 *   high   5-bit: 64 bytes, bit h of byte 4i + j = bit 4 of row i's code of column 4h + j;
 *          6-bit: 128 bytes, two vectors, bits 2k..2k+1 of byte 4i + j of vector v = bits
 *          4-5 of row i's code of column 4(4v + k) + j.
 * So a 64-byte vector of codes is 16 rows x 4 columns: a VNNI dot product feeds 16 rows. */
#ifndef MESHLM_TENSOR_QPANEL_H
#define MESHLM_TENSOR_QPANEL_H

#include <stdint.h>

#define MLM_QP_ROWS 16  /* rows per panel */
#define MLM_QP_BLOCK 32 /* columns per block */

/* The native types, in tensor/wtype.h's mlm_wtype order from MLM_W_Q8_0. */
typedef enum mlm_qkind {
    MLM_QK_Q8_0 = 0, MLM_QK_Q4_0, MLM_QK_Q4_1, MLM_QK_Q5_0, MLM_QK_Q5_1, MLM_QK_Q4_K,
    MLM_QK_Q5_K, MLM_QK_Q6_K, MLM_QK_IQ4_NL, MLM_QK_IQ4_XS, MLM_QK_COUNT
} mlm_qkind;

/* iq4_nl / iq4_xs values of the 16 codes. */
extern const int8_t mlm_iq4_values[16];

/* A matrix's geometry: which parts sit where in a group. */
typedef struct mlm_qgeom {
    int g;                  /* blocks per group: 2 or 8 */
    int units;              /* d units per group: 1 (one super-block) or g */
    int64_t d, m, subs;     /* byte offsets of the scale parts in a group */
    int64_t codes, blk;     /* the first block's offset in a group, and bytes per block */
    int64_t high;           /* byte offset of the high bits in a block */
    int64_t group_bytes;
    int64_t n_groups;       /* per panel */
    int64_t panel_bytes;
} mlm_qgeom;

mlm_qgeom mlm_qpanel_geom(mlm_qkind k, int64_t cols);

/* Block BB's codes in group GRP (its high bits g->high bytes on). */
static inline const uint8_t *mlm_qpanel_codes(const mlm_qgeom *g, const uint8_t *grp, int bb) {
    return grp + g->codes + bb * g->blk;
}

/* Decode kernels: a block's share of a group's bytes, in whole cache lines. */
static inline int64_t mlm_qpanel_block_share(const mlm_qgeom *g) {
    return (g->group_bytes / g->g + 63) / 64 * 64;
}

/* Decode kernels: prefetches, for each of N panels side by side from PANEL0, the SHARE bytes
 * AHEAD bytes past block BB of group GI, so each stream runs ahead a block at a time. */
static inline void mlm_qpanel_prefetch(const uint8_t *panel0, const mlm_qgeom *g, int n,
                                       int64_t gi, int bb, int64_t share, int64_t ahead) {
    for (int p = 0; p < n; p++) {
        const uint8_t *at = panel0 + p * g->panel_bytes + gi * g->group_bytes + bb * share + ahead;
        for (int64_t c = 0; c < share; c += 64) __builtin_prefetch(at + c, 0, 2);
    }
}

/* Bytes of a (ROWS, COLS) matrix. */
int64_t mlm_qpanel_bytes(mlm_qkind k, int64_t rows, int64_t cols);

/* Whether a matrix of COLS columns cut out of a file's rows at column C0 can be repacked:
 * both multiples of 32 (and of the file's block when that is 256, unless G = 2 repeats d). */
int mlm_qpanel_fits(mlm_qkind k, int64_t c0, int64_t cols);

/* One row's block of 32 as its file holds it (format/gguf_quants.c reads it out of the ggml
 * blocks): the codes, the f16 fields and the sub-scale bytes (the subs part's, for one row). */
typedef struct mlm_qraw {
    uint8_t u[MLM_QP_BLOCK];
    uint16_t d, m; /* f16 bits: d, and m or dmin (0 without) */
    uint8_t sub[2];
} mlm_qraw;

/* Writes RAW as block B of row R of the matrix (geometry G) at DST, whose bytes for that
 * block must be zero beforehand (codes are or-ed in). */
void mlm_qpanel_put(mlm_qkind k, const mlm_qgeom *g, int64_t r, int64_t b, const mlm_qraw *raw,
                    uint8_t *dst);

/* One row and block of the layout, unpacked: the codes, the exact scales and the min. */
typedef struct mlm_qblock {
    uint8_t u[MLM_QP_BLOCK]; /* codes */
    float scale[2];          /* columns 0-15 and 16-31 (equal but for q6_k) */
    float min;               /* 0 for types without one */
} mlm_qblock;

/* Block B (of mlm_q8_cols(cols) / 32) of row R of the matrix (geometry G) at W. */
void mlm_qpanel_block(mlm_qkind k, const mlm_qgeom *g, const uint8_t *w, int64_t r, int64_t b,
                      mlm_qblock *out);

/* A kind's facts, as constant expressions of a constant K (the kernels specialize on them):
 * the columns one d covers in the file (32, or a super-block of 256), the code width, whether
 * blocks have a min, the sub-scale bytes per row and block, the code offset. */
static inline int mlm_qsuper(mlm_qkind k) {
    return k == MLM_QK_Q4_K || k == MLM_QK_Q5_K || k == MLM_QK_Q6_K || k == MLM_QK_IQ4_XS ? 256 : 32;
}
static inline int mlm_qbits(mlm_qkind k) {
    switch (k) {
    case MLM_QK_Q8_0: return 8;
    case MLM_QK_Q5_0: case MLM_QK_Q5_1: case MLM_QK_Q5_K: return 5;
    case MLM_QK_Q6_K: return 6;
    default: return 4;
    }
}
static inline int mlm_qhas_min(mlm_qkind k) {
    return k == MLM_QK_Q4_1 || k == MLM_QK_Q5_1 || k == MLM_QK_Q4_K || k == MLM_QK_Q5_K;
}
static inline int mlm_qsub_bytes(mlm_qkind k) {
    return k == MLM_QK_Q4_K || k == MLM_QK_Q5_K || k == MLM_QK_Q6_K ? 2 : k == MLM_QK_IQ4_XS;
}
static inline int mlm_qoff(mlm_qkind k) {
    return k == MLM_QK_Q4_0 ? 8 : k == MLM_QK_Q5_0 ? 16 : k == MLM_QK_Q6_K ? 32 : 0;
}

/* The signed value of code U of kind K. */
static inline int mlm_qcode_value(mlm_qkind k, unsigned u) {
    switch (k) {
    case MLM_QK_Q8_0: return (int8_t)u;
    case MLM_QK_IQ4_NL:
    case MLM_QK_IQ4_XS: return mlm_iq4_values[u & 15];
    default: return (int)u - mlm_qoff(k);
    }
}

/* Row R of the matrix at W as COLS floats, each exactly the file's value (gguf-py's). */
void mlm_qpanel_decode_row(mlm_qkind k, const uint8_t *w, int64_t cols, int64_t r, float *out);

#endif
