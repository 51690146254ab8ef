/* format/gguf_quants.h: scalar dequantization of ggml's tensor types, as gguf-py's
 * gguf.quants.dequantize computes them (bit for bit: the same f16 scales, the same float
 * operations in the same order).
 *
 * Types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (blocks of 32) and the k-quants
 * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (super-blocks of 256), and the non-linear IQ4_NL (blocks of
 * 32) and IQ4_XS (super-blocks of 256). The block structs and their sizes are
 * in gguf_quants.c, checked with static_assert. */
#ifndef MESHLM_FORMAT_GGUF_QUANTS_H
#define MESHLM_FORMAT_GGUF_QUANTS_H

#include <stdint.h>

#include "tensor/qpanel.h"

/* ggml type numbers (ggml.h's enum ggml_type) of the types meshlm reads. */
enum {
    MLM_GGML_T_F32 = 0,
    MLM_GGML_T_F16 = 1,
    MLM_GGML_T_Q4_0 = 2,
    MLM_GGML_T_Q4_1 = 3,
    MLM_GGML_T_Q5_0 = 6,
    MLM_GGML_T_Q5_1 = 7,
    MLM_GGML_T_Q8_0 = 8,
    MLM_GGML_T_Q2_K = 10,
    MLM_GGML_T_Q3_K = 11,
    MLM_GGML_T_Q4_K = 12,
    MLM_GGML_T_Q5_K = 13,
    MLM_GGML_T_Q6_K = 14,
    MLM_GGML_T_IQ4_NL = 20,
    MLM_GGML_T_IQ4_XS = 23,
    MLM_GGML_T_BF16 = 30
};

/* Whether mlm_ggml_dequantize handles ggml type TYPE. */
int mlm_ggml_can_dequantize(uint32_t type);

/* Dequantizes N elements of type TYPE at SRC into DST. N must be a multiple of the type's
 * block (mlm_ggml_type_block in gguf.h) and TYPE one that mlm_ggml_can_dequantize accepts;
 * both are the caller's checks (the GGUF reader has already validated every tensor). SRC
 * (little-endian ggml blocks) needs no alignment; DST receives exactly N floats. No
 * allocation and no state: safe to call from any thread. */
void mlm_ggml_dequantize(uint32_t type, const void *src, int64_t n, float *dst);

/* The native kind (tensor/qpanel.h) of ggml type TYPE, or -1 if it has none; and back. */
int mlm_ggml_qkind(uint32_t type);
/* The native weight type that runs ggml type GGML, or -1. */
int mlm_wtype_of_ggml(uint32_t ggml);
uint32_t mlm_ggml_qkind_type(mlm_qkind k);

/* Repacks columns [C0, C0 + COLS) of one row of TYPE's blocks at ROW (TYPE one with a native
 * kind; C0 and COLS multiples of 32 that mlm_qpanel_fits accepts) as row R of a (rows, COLS)
 * native matrix at DST, whose bytes for that row must be zero beforehand: the file's codes
 * and fields unchanged, so the matrix holds the values mlm_ggml_dequantize gives. */
void mlm_ggml_qpanel_row(uint32_t type, const void *row, int64_t c0, int64_t cols, int64_t r,
                         uint8_t *dst);

#endif
