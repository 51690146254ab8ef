/* backend/backend.h: the CPU kernel table. Kernels know nothing of models: they multiply
 * matrices, normalize rows and run attention over paged KV. Each kernel has a scalar _ref
 * twin (cpu/matmul_ref.c and friends) that stays forever; the table is filled once from CPU features.
 * Thread safety: kernels are pure functions of their arguments. */
#ifndef MESHLM_BACKEND_H
#define MESHLM_BACKEND_H

#include <stddef.h>
#include <stdint.h>

/* Weight element types the kernels take. f32 and bf16 weights multiply f32 activations;
 * BFP8 and BFP4 weights (rows in tensor/bfp.h's kernel layout) multiply int8 activations
 * (tensor/q8.h). */
typedef enum mlm_wtype { MLM_W_F32 = 0, MLM_W_BF16, MLM_W_BFP8, MLM_W_BFP4, MLM_W_COUNT } mlm_wtype;

/* "f32", "bf16", "bfp8", "bfp4". */
const char *mlm_wtype_name(mlm_wtype t);
/* Bytes of a (ROWS, COLS) matrix of type T in the kernels' layout (BFP matrices interleave
 * rows in blocks of 8 and pad the row count to a multiple of 8), and of one lone row (a KV
 * entry). */
int64_t mlm_wtype_bytes(mlm_wtype t, int64_t rows, int64_t cols);
int64_t mlm_wtype_row_bytes(mlm_wtype t, int64_t cols);

/* OUT[t * out_stride + r] = sum_k W[r, k] * X[t * cols + k], for tokens t in [0, n) and rows
 * r in [r0, r1). W is row-major (rows, cols) of type WTYPE. Every output element is computed
 * the same way whatever n, r0 and r1 are, so results do not depend on batching or threads. */
typedef void (*mlm_matmul_fn)(float *out, int64_t out_stride, const void *w, const float *x,
                              int64_t n, int64_t cols, int64_t r0, int64_t r1);

/* The same contract for BFP weights (W a BFP matrix, rows interleaved by 8 (tensor/bfp.h); MLM_W_BFP8 or MLM_W_BFP4 by
 * table slot) against int8 activations: token t's are XQ + t * mlm_q8_cols(cols) with scales
 * XD + t * mlm_q8_cols(cols) / 32. Integer block sums are exact; each output is
 * sum over blocks of isum * (weight scale * activation scale), in a fixed order per kernel. */
typedef void (*mlm_matmul_q8_fn)(float *out, int64_t out_stride, const void *w, const int8_t *xq,
                                 const float *xd, int64_t n, int64_t cols, int64_t r0, int64_t r1);

/* One layer's paged KV pools: K and V each (n_blocks, block_size) entries of ROW =
 * n_kv_head * head_dim values, in f32, bf16 or BFP8 (an entry is then one row in the BFP
 * row layout: ROW_BYTES = mlm_bfp_row_bytes(row, 8)). Which blocks a sequence uses is its
 * page table. */
typedef struct mlm_paged_kv {
    void *k, *v;
    mlm_wtype type; /* MLM_W_F32, MLM_W_BF16 or MLM_W_BFP8 */
    int32_t block_size;
    int64_t row;
    int64_t row_bytes;
} mlm_paged_kv;

/* Byte offset of entry IDX of a sequence with page table BLOCKS inside a K or V pool. */
static inline size_t mlm_kv_entry_offset(const mlm_paged_kv *kv, const int32_t *blocks,
                                         int32_t idx) {
    int64_t block = blocks[idx / kv->block_size], slot = idx % kv->block_size;
    return (size_t)((block * kv->block_size + slot) * kv->row_bytes);
}

/* Stores K_ROW and V_ROW (row floats each) as entry IDX of the sequence with page table BLOCKS. */
void mlm_kv_store(const mlm_paged_kv *kv, const int32_t *blocks, int32_t idx, const float *k_row,
                  const float *v_row);

/* Causal attention of one query token over entries 0..N_CTX-1 of a sequence's paged KV:
 * for each of N_HEAD heads (query head h reads KV head h / (n_head / n_kv_head)),
 * OUT[h*hd..] = softmax(q_h . k / sqrt(hd)) . v, in f32 with max subtraction (BFP8 entries
 * are decoded exactly to f32 first). SCRATCH holds at least N_CTX * (n_head / n_kv_head)
 * floats. */
typedef void (*mlm_attention_fn)(float *out, const float *q, const mlm_paged_kv *kv,
                                 const int32_t *blocks, int32_t n_ctx, int n_head, int n_kv_head,
                                 int head_dim, float *scratch);
void mlm_attention_ref(float *out, const float *q, const mlm_paged_kv *kv, const int32_t *blocks,
                       int32_t n_ctx, int n_head, int n_kv_head, int head_dim, float *scratch);
void mlm_attention_avx2(float *out, const float *q, const mlm_paged_kv *kv, const int32_t *blocks,
                        int32_t n_ctx, int n_head, int n_kv_head, int head_dim, float *scratch);

typedef struct mlm_kernels {
    const char *name; /* "ref", "avx2", "avx512" */
    mlm_matmul_fn matmul[MLM_W_COUNT];       /* f32 activations: F32 and BF16 slots */
    mlm_matmul_q8_fn matmul_q8[MLM_W_COUNT]; /* int8 activations: BFP8 and BFP4 slots */
    mlm_attention_fn attention;
} mlm_kernels;

/* The best kernels for this CPU (filled once; immutable). MESHLM_KERNELS=ref|avx2|avx512 in
 * the environment forces a table (one this CPU supports) for testing and benchmarks. */
const mlm_kernels *mlm_kernels_best(void);
/* A specific table, or NULL if this CPU cannot run it. */
const mlm_kernels *mlm_kernels_get(const char *name);

/* Reference kernels (cpu/matmul_ref.c). */
void mlm_matmul_f32_ref(float *out, int64_t out_stride, const void *w, const float *x, int64_t n,
                        int64_t cols, int64_t r0, int64_t r1);
void mlm_matmul_bf16_ref(float *out, int64_t out_stride, const void *w, const float *x, int64_t n,
                         int64_t cols, int64_t r0, int64_t r1);
/* BFP weights against int8 activations (cpu/matmul_bfp_ref.c, cpu/matmul_bfp_avx2.c). */
void mlm_matmul_bfp8_q8_ref(float *out, int64_t out_stride, const void *w, const int8_t *xq,
                            const float *xd, int64_t n, int64_t cols, int64_t r0, int64_t r1);
void mlm_matmul_bfp4_q8_ref(float *out, int64_t out_stride, const void *w, const int8_t *xq,
                            const float *xd, int64_t n, int64_t cols, int64_t r0, int64_t r1);
void mlm_matmul_bfp8_q8_avx2(float *out, int64_t out_stride, const void *w, const int8_t *xq,
                             const float *xd, int64_t n, int64_t cols, int64_t r0, int64_t r1);
void mlm_matmul_bfp4_q8_avx2(float *out, int64_t out_stride, const void *w, const int8_t *xq,
                             const float *xd, int64_t n, int64_t cols, int64_t r0, int64_t r1);
/* AVX2 + FMA (cpu/matmul_avx2.c) and AVX-512F (cpu/matmul_avx512.c). */
void mlm_matmul_f32_avx2(float *out, int64_t out_stride, const void *w, const float *x, int64_t n,
                         int64_t cols, int64_t r0, int64_t r1);
void mlm_matmul_bf16_avx2(float *out, int64_t out_stride, const void *w, const float *x,
                          int64_t n, int64_t cols, int64_t r0, int64_t r1);
void mlm_matmul_f32_avx512(float *out, int64_t out_stride, const void *w, const float *x,
                           int64_t n, int64_t cols, int64_t r0, int64_t r1);
void mlm_matmul_bf16_avx512(float *out, int64_t out_stride, const void *w, const float *x,
                            int64_t n, int64_t cols, int64_t r0, int64_t r1);

#endif
