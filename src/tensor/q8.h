/* tensor/q8.h: int8 activations for the BFP kernels. A row of COLS floats is zero-padded to
 * a multiple of 64 and quantized in blocks of 32: d = max|x| / 127, q = round(x / d) (nearest,
 * ties to even), so |q| <= 127 and x ~ q * d. The same codes are also kept plus 128, as the
 * unsigned bytes that VNNI's u8 x s8 dot products take. One scalar routine serves every ISA,
 * so every kernel table sees the same int8 activations. */
#ifndef MESHLM_TENSOR_Q8_H
#define MESHLM_TENSOR_Q8_H

#include <stdint.h>

#define MLM_Q8_BLOCK 32

/* Padded length of a row of COLS values (a multiple of 64, as the BFP layouts). */
static inline int64_t mlm_q8_cols(int64_t cols) { return (cols + 63) / 64 * 64; }

/* Quantizes N rows of COLS floats (row stride COLS) into Q (N x mlm_q8_cols(COLS) int8), U
 * (the same codes + 128 as uint8, or NULL) and D (N x mlm_q8_cols(COLS) / 32 scales). */
void mlm_q8_quantize(const float *x, int64_t n, int64_t cols, int8_t *q, uint8_t *u, float *d);

/* Floats per row of the sums mlm_q8_sums writes: one per 16 columns, then one per 32. */
static inline int64_t mlm_q8_sums_len(int64_t cols) { return 3 * mlm_q8_cols(cols) / 32; }

/* The sums of the codes of N rows (as mlm_q8_quantize wrote them into Q), as floats (exact
 * integers, |S| <= 4064), row t at S + t * mlm_q8_sums_len(COLS): first the sum over each 16
 * columns 16j..16j+15, then over each block of 32. The native kernels take their blocks'
 * code offsets and mins off with them. */
void mlm_q8_sums(const int8_t *q, int64_t n, int64_t cols, float *s);

#endif
