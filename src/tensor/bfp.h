/* tensor/bfp.h: BFP8 and BFP4 block floating point ("bfloat8_b", "bfloat4_b"), bit-exact to
 * the Tenstorrent host encoder (tt-demos.md section 3): 16 values share the largest raw
 * 8-bit exponent; each keeps a sign and a 7-bit (BFP8) or 3-bit (BFP4) magnitude without
 * hidden bit, aligned by a truncating shift, rounded half to even, saturated; zero and
 * denormal inputs give +0. Scalar reference; the kernels' layouts build on these blocks. */
#ifndef MESHLM_TENSOR_BFP_H
#define MESHLM_TENSOR_BFP_H

#include <stdint.h>

#define MLM_BFP_BLOCK 16

/* Encodes 16 floats: *EXP gets the shared exponent, CODES[i] = sign << (bits-1) | mag. */
void mlm_bfp_encode_block(const float *x, int bits, uint8_t *exp, uint8_t *codes);

/* The value of CODE in a block of shared exponent EXP: mag * 2^(exp - 127 - (bits - 2)). */
float mlm_bfp_decode(uint8_t exp, uint8_t code, int bits);

/* Packs N floats (N a multiple of 16) into N/16 exponent bytes and the codes: one byte each
 * for BFP8, two per byte for BFP4 (element 0 in the low nibble), as the tiles store them. */
void mlm_bfp_pack_row(const float *x, int64_t n, int bits, uint8_t *exps, uint8_t *codes);
/* The inverse: N floats from N/16 exponents and the packed codes. */
void mlm_bfp_unpack_row(const uint8_t *exps, const uint8_t *codes, int64_t n, int bits, float *out);

/* ---- the kernels' row layout ----
 * A weight row of COLS values is zero-padded to a multiple of 64 and stored as groups of 64
 * values (four blocks), each group's codes followed by its four exponent bytes:
 *   BFP8: 64 code bytes, element j in byte j (sign-magnitude, as encoded), then 4 exponents;
 *   BFP4: 32 code bytes, element j in the low nibble and element j + 32 in the high nibble of
 *         byte j, then 4 exponents.
 * So a group is 68 (BFP8) or 36 (BFP4) bytes, rows follow each other with no gap, and the
 * kernels stream every row front to back. The values are those of mlm_bfp_encode_block. */
#define MLM_BFP_GROUP 64

/* Bytes of one row of COLS values (BITS 8 or 4) in the kernels' layout. */
static inline int64_t mlm_bfp_row_bytes(int64_t cols, int bits) {
    return (cols + MLM_BFP_GROUP - 1) / MLM_BFP_GROUP * (bits == 8 ? 68 : 36);
}

/* Matrices interleave their rows in blocks of MLM_BFP_ROWS: block b holds rows 8b..8b+7 as
 * group 0 of each of the 8 rows, then group 1 of each, and so on, so a kernel reading 8 rows
 * at once streams one contiguous run of memory. The row count is padded to a multiple of 8
 * with zero rows. (KV cache entries are single rows: they use the row layout alone.) */
#define MLM_BFP_ROWS 8

/* Bytes of a (ROWS, COLS) matrix: ROWS rounded up to a multiple of 8, times the row bytes. */
static inline int64_t mlm_bfp_matrix_bytes(int64_t rows, int64_t cols, int bits) {
    return (rows + MLM_BFP_ROWS - 1) / MLM_BFP_ROWS * MLM_BFP_ROWS * mlm_bfp_row_bytes(cols, bits);
}

/* Byte offset of group G of row R in a matrix of COLS columns. */
static inline int64_t mlm_bfp_group_offset(int64_t r, int64_t g, int64_t cols, int bits) {
    int64_t gbytes = bits == 8 ? 68 : 36;
    return r / MLM_BFP_ROWS * MLM_BFP_ROWS * mlm_bfp_row_bytes(cols, bits) +
           (g * MLM_BFP_ROWS + r % MLM_BFP_ROWS) * gbytes;
}

/* Encodes COLS floats of X as row R of the matrix at W / decodes row R of it. */
void mlm_bfp_encode_matrix_row(const float *x, int64_t cols, int bits, int64_t r, uint8_t *w);
void mlm_bfp_decode_matrix_row(const uint8_t *w, int64_t cols, int bits, int64_t r, float *out);

/* Encodes COLS floats of X into one row of the kernels' layout at DST. */
void mlm_bfp_encode_row(const float *x, int64_t cols, int bits, uint8_t *dst);
/* Decodes the first COLS values of a kernels'-layout row. */
void mlm_bfp_decode_row(const uint8_t *src, int64_t cols, int bits, float *out);

#endif
