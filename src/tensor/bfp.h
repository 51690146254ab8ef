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

/* ---- the row layout (KV cache entries) ----
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

/* ---- the matrix (panel) layout ----
 * Weight matrices are stored for the kernels, not as rows: rows go in panels of 16 (the row
 * count padded with zero rows), columns in groups of 64 (zero-padded), and a panel holds its
 * groups in column order. A group is four blocks of 16 columns, then its 64 exponents:
 *   BFP8, 1088 bytes: block b (256 bytes) is 4 quads of 64 bytes; in quad q, bytes 4i..4i+3
 *         are row i's codes for columns 16b + 4q + 0..3, each as the signed int8 value it
 *         denotes (sign-magnitude +-mag -> two's complement; -0 is 0);
 *   BFP4, 576 bytes: block b (128 bytes) is 2 halves of 64 bytes; in half h, byte 4i + j holds
 *         row i's column 16b + 8h + j in its low nibble and column 16b + 8h + 4 + j in its
 *         high nibble, as the 4-bit sign-magnitude code;
 *   then 64 exponent bytes: block b's 16 rows at 16b + 0..15.
 * So one 64-byte vector holds 16 rows x 4 columns: a VNNI dot product feeds 16 rows at once,
 * and a block is exactly an AMX B tile (4 rows of 64 bytes). 8.5 (BFP8) and 4.5 (BFP4) bits
 * per weight, as the row layout. The values are those of mlm_bfp_encode_block. */
#define MLM_BFP_ROWS 16

/* Bytes of one (panel, group): 1088 (BFP8) or 576 (BFP4). */
static inline int64_t mlm_bfp_group_bytes(int bits) { return bits == 8 ? 1088 : 576; }

/* Bytes of one panel of a matrix of COLS columns. */
static inline int64_t mlm_bfp_panel_bytes(int64_t cols, int bits) {
    return (cols + MLM_BFP_GROUP - 1) / MLM_BFP_GROUP * mlm_bfp_group_bytes(bits);
}

/* Bytes of a (ROWS, COLS) matrix: ROWS rounded up to a multiple of 16 panels' worth. */
static inline int64_t mlm_bfp_matrix_bytes(int64_t rows, int64_t cols, int bits) {
    return (rows + MLM_BFP_ROWS - 1) / MLM_BFP_ROWS * mlm_bfp_panel_bytes(cols, bits);
}

/* Encodes COLS floats of X as row R of the matrix at W / decodes row R of it. */
void mlm_bfp_encode_matrix_row(const float *x, int64_t cols, int bits, int64_t r, uint8_t *w);
void mlm_bfp_decode_matrix_row(const uint8_t *w, int64_t cols, int bits, int64_t r, float *out);

/* The signed value of a sign-magnitude code of BITS (8 or 4). */
static inline int mlm_bfp_code_value(unsigned code, int bits) {
    int mag = (int)(code & ((1u << (bits - 1)) - 1));
    return (code >> (bits - 1)) & 1 ? -mag : mag;
}

/* Encodes COLS floats of X into one row of the kernels' layout at DST. */
void mlm_bfp_encode_row(const float *x, int64_t cols, int bits, uint8_t *dst);
/* Decodes the first COLS values of a kernels'-layout row. */
void mlm_bfp_decode_row(const uint8_t *src, int64_t cols, int bits, float *out);

#endif
