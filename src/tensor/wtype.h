/* tensor/wtype.h: the weight types: one enum for every matrix layout the kernels take (f32,
 * bf16, BFP8/BFP4 panels, the native GGUF block types), their names and their sizes. Which
 * kernels multiply them is the backend's table (backend/kernels.c); how a profile picks them is
 * config/profile.c. */
#ifndef MESHLM_TENSOR_WTYPE_H
#define MESHLM_TENSOR_WTYPE_H

#include <stdint.h>

#include "meshlm.h"

/* Weight element types the kernels take. f32 and bf16 matrices are row-major; BFP8 and BFP4
 * matrices are in tensor/bfp.h's panel layout; the native GGUF types (Q8_0 .. IQ4_XS, in
 * tensor/qpanel.h's mlm_qkind order) in tensor/qpanel.h's. BFP and native matrices multiply
 * int8 activations (tensor/q8.h). */
/* The native types, one row each, in tensor/qpanel.h's mlm_qkind order: X(TYPE, name, ARG)
 * for every one. The enum below, the names (tensor/wtype.c), the kernel tables (kernels.c) and each
 * level's kernel declarations and definitions all expand it, so a new type is one row here
 * plus its kernels. */
#define MLM_NATIVE_TYPES(X, ARG)                                                                \
    X(Q8_0, q8_0, ARG) X(Q4_0, q4_0, ARG) X(Q4_1, q4_1, ARG) X(Q5_0, q5_0, ARG)                 \
    X(Q5_1, q5_1, ARG) X(Q4_K, q4_k, ARG) X(Q5_K, q5_k, ARG) X(Q6_K, q6_k, ARG)                 \
    X(IQ4_NL, iq4_nl, ARG) X(IQ4_XS, iq4_xs, ARG)

#define MLM_W_ENUM(T, t, _) MLM_W_##T,
typedef enum mlm_wtype {
    MLM_W_F32 = 0, MLM_W_BF16, MLM_W_BFP8, MLM_W_BFP4,
    MLM_NATIVE_TYPES(MLM_W_ENUM, _)
    MLM_W_COUNT
} mlm_wtype;

/* Whether T is a native GGUF type, and its tensor/qpanel.h kind (an int to keep this header
 * free of the layout's). */
static inline int mlm_wtype_is_native(mlm_wtype t) { return t >= MLM_W_Q8_0 && t < MLM_W_COUNT; }
static inline int mlm_wtype_qkind(mlm_wtype t) { return (int)t - (int)MLM_W_Q8_0; }

/* "f32", "bf16", "bfp8", "bfp4", "q4_k", ... ("?" for a value out of range). tensor/wtype.c */
const char *mlm_wtype_name(mlm_wtype t);
/* The public dtype that names T (MLM_DTYPE_GGML for the native types), and the plain or BFP
 * type a dtype names (-1 for others: a KV cache is f32, bf16 or bfp8). */
mlm_dtype mlm_wtype_dtype(mlm_wtype t);
int mlm_wtype_of_dtype(mlm_dtype d);
/* Bytes of a (ROWS, COLS) matrix of type T in the kernels' layout (BFP and native matrices
 * pad the row count to a multiple of 16), and of one lone row in the row layout (a KV entry;
 * for a native type, what one row of a panel costs). */
int64_t mlm_wtype_bytes(mlm_wtype t, int64_t rows, int64_t cols);
int64_t mlm_wtype_row_bytes(mlm_wtype t, int64_t cols);

#endif
