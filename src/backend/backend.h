/* backend/backend.h: the CPU kernel table. Kernels know nothing of models: they multiply
 * matrices and run attention over paged KV. Each kernel has a scalar _ref twin (cpu/<family>_ref.c)
 * that stays forever and defines its arithmetic; the table is picked once from what the CPU
 * and the OS support (backend/kernels.c).
 * Thread safety: kernels are pure functions of their arguments. */
#ifndef MESHLM_BACKEND_H
#define MESHLM_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "meshlm.h"
#include "tensor/wtype.h"

/* The form of the activations a matmul kernel reads. */
typedef enum mlm_act_kind {
    MLM_ACT_F32 = 0, /* x only */
    MLM_ACT_BF16,    /* h: x rounded to bf16 (nearest even), rows padded with zeros to 32 */
    MLM_ACT_Q8       /* q, u, d, s: tensor/q8.h */
} mlm_act_kind;

/* Columns of a bf16 activation row: COLS rounded up to a multiple of 32. */
static inline int64_t mlm_bf16_cols(int64_t cols) { return (cols + 31) / 32 * 32; }

/* N rows of COLS activations, in the forms the product needs (borrowed). */
typedef struct mlm_acts {
    int64_t n, cols;
    const float *x;    /* (n, cols) */
    const uint16_t *h; /* (n, mlm_bf16_cols(cols)) */
    const int8_t *q;   /* (n, mlm_q8_cols(cols)) */
    const uint8_t *u;  /* (n, mlm_q8_cols(cols)): q + 128 */
    const float *d;    /* (n, mlm_q8_cols(cols) / 32) */
    const float *s;    /* (n, mlm_q8_sums_len(cols)): mlm_q8_sums of q, for the native
                          kernels (NULL where none reads these activations) */
} mlm_acts;

/* OUT[t * out_stride + r] = sum_k W[r, k] * X[t, k], for the X->n tokens t and rows r in
 * [R0, R1); R0 is a multiple of 16 (a BFP panel). Each output is computed in one canonical
 * order whatever n, r0 and r1 are, so results do not depend on batching or threads:
 *   BFP: for each block of 16 columns in order, the exact int32 sum I of code x q, then
 *        acc = fma((float)I * ws, d, acc), with ws = 2^(e - 127) (from the exponent's bits)
 *        times 2^-(bits - 2) and d the token's scale for those columns; acc starts at +0.
 *        This is one order for every ISA level, so all levels agree bit for bit.
 *   bf16 and f32: as each level's _ref twin says (cpu/matmul_ref.c). */
typedef void (*mlm_matmul_fn)(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                              int64_t r0, int64_t r1);

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

/* Flash attention of N_Q query tokens of one sequence for one KV head, in one of two modes:
 *   causal (N_CTX 0): the queries are consecutive, query i sits at KV entry Q0 + i and reads
 *     entries 0..Q0 + i;
 *   non-causal (N_CTX > 0): every query of the job reads entries 0..N_CTX - 1, whatever its
 *     position (cross-attention to image tokens, the vision encoder); Q0 is unused.
 * Its query heads are KV_HEAD * GROUP + HH0 .. + N_HH - 1 (all read the KV head's entries,
 * decoded once per tile for every query and head of the job). Query head h of token i is at
 * Q + i * Q_STRIDE + h * HEAD_DIM, its output at OUT + i * OUT_STRIDE + h * HEAD_DIM.
 * The canonical order (every level, both modes; cpu/attention_flash_ref.c): entries in tiles
 * of MLM_ATT_KT from entry 0, the last tile cut at the query's last entry (Q0 + i, or
 * N_CTX - 1); per (query, head) an online softmax in base 2 over the tiles. A result depends
 * only on its query row and the entries it reads, never on the job's other queries. */
#define MLM_ATT_KT 64  /* KV entries per tile */
#define MLM_ATT_QT 16  /* at most this many query tokens per job */
#define MLM_ATT_HH 8   /* at most this many query heads per job */
#define MLM_ATT_HD 256 /* head_dim at most this (and a multiple of 16) */
typedef struct mlm_attn_job {
    float *out;             /* n_q rows of out_stride: only the job's heads are written */
    int64_t out_stride;
    const float *q;         /* n_q rows of q_stride (borrowed) */
    int64_t q_stride;
    const mlm_paged_kv *kv; /* borrowed */
    const int32_t *blocks;  /* the sequence's page table (borrowed) */
    int32_t q0, n_q;        /* n_q in 1..MLM_ATT_QT */
    /* 0: causal, query i reads entries 0..q0+i; > 0: every query of the job reads entries
     * 0..n_ctx-1 (cross-attention and the vision encoder; q0 is unused) */
    int32_t n_ctx;
    int kv_head, group, hh0, n_hh, head_dim;
} mlm_attn_job;
/* Floats of scratch one attention job needs (the same bound for every context length). */
#define MLM_ATT_SCRATCH \
    (2 * MLM_ATT_KT * MLM_ATT_HD + MLM_ATT_QT * MLM_ATT_HH * (2 * MLM_ATT_HD + MLM_ATT_KT + 2))
typedef void (*mlm_attention_fn)(const mlm_attn_job *job, float *scratch);

/* The naive attention of one query token over entries 0..N_CTX-1, every head (softmax with
 * max subtraction, expf, in f32): the oracle the flash kernels are tested against. SCRATCH
 * holds N_CTX floats. */
void mlm_attention_naive(float *out, const float *q, const mlm_paged_kv *kv,
                         const int32_t *blocks, int32_t n_ctx, int n_head, int n_kv_head,
                         int head_dim, float *scratch);

/* Quantizes one row of COLS activations to int8 into Q, U (q + 128, or NULL) and D exactly as
 * mlm_q8_quantize does (tensor/q8.h): every level gives the same bits. */
typedef void (*mlm_quantize_fn)(const float *x, int64_t cols, int8_t *q, uint8_t *u, float *d);
void mlm_quantize_q8_ref(const float *x, int64_t cols, int8_t *q, uint8_t *u, float *d);
void mlm_quantize_q8_avx2(const float *x, int64_t cols, int8_t *q, uint8_t *u, float *d);
void mlm_quantize_q8_avx512(const float *x, int64_t cols, int8_t *q, uint8_t *u, float *d);

/* GELU in its exact (erf) form, in place over N floats: x = 0.5 * x * (1 + erf(x / sqrt(2))),
 * as torch.nn.functional.gelu (approximate='none') and transformers' "gelu" compute it, within
 * 2e-7 * max(1, |x|); gelu(x) = x for large x, -0 for very negative x, NaN stays NaN. Every
 * level gives the bits of mlm_gelu_ref, whose header comment (cpu/gelu_ref.c) is the
 * arithmetic; these are its constants. */
typedef void (*mlm_gelu_fn)(float *x, int64_t n);
void mlm_gelu_ref(float *x, int64_t n);
void mlm_gelu_avx2(float *x, int64_t n);
void mlm_gelu_avx512(float *x, int64_t n);
#define MLM_GELU_K 0.35f          /* u = 1 - 1 / (1 + K |x|) */
#define MLM_GELU_C2 (-0.72134752f) /* -log2(e) / 2 */
#define MLM_GELU_HI 8.0f          /* above: x */
#define MLM_GELU_LO (-14.0f)      /* below: -0 */
#define MLM_GELU_NQ 12
extern const float mlm_gelu_q[MLM_GELU_NQ]; /* the polynomial in u, lowest degree first */

/* cpu/matmul_q_ref.c and its SIMD twins: native GGUF weights (tensor/qpanel.h) against int8
 * activations. Per row and block of 32 columns, with the exact int32 sums I = sum c * q
 * (I0, I1 over columns 0-15 and 16-31) and S = sum q of the token's codes q:
 *   q6_k:            v = fma((float)I1, scale1, (float)I0 * scale0)
 *   types with a min: v = fma((float)I, scale, -((float)S * min))
 *   the others:       v = (float)I * scale
 * then acc = fma(v, d, acc) over the blocks in column order, d the token's scale of the
 * block, acc from +0. One order for every level: all levels agree bit for bit. */
#define MLM_Q_DECLARE(T, t, isa)                                                                \
    void mlm_matmul_##t##_q8_##isa(float *out, int64_t out_stride, const void *w,               \
                                   const mlm_acts *x, int64_t r0, int64_t r1);
MLM_NATIVE_TYPES(MLM_Q_DECLARE, ref)
MLM_NATIVE_TYPES(MLM_Q_DECLARE, avx2)
MLM_NATIVE_TYPES(MLM_Q_DECLARE, avxvnni)
MLM_NATIVE_TYPES(MLM_Q_DECLARE, avx512)

/* A kernel table: one ISA level. */
typedef struct mlm_kernels {
    const char *name;                      /* "ref", "avx2", "avxvnni", "avx512", "amx" */
    mlm_matmul_fn matmul[MLM_W_COUNT];     /* by weight type */
    mlm_act_kind act[MLM_W_COUNT];         /* the activations each one reads */
    const char *matmul_name[MLM_W_COUNT];  /* e.g. "bfp8_q8_avx512" */
    mlm_attention_fn attention;
    const char *attention_name;
    mlm_quantize_fn quantize;
    mlm_gelu_fn gelu;
    const char *gelu_name; /* "gelu_avx512" */
} mlm_kernels;

/* The kernel table to use: MESHLM_KERNELS=ref|avx2|avxvnni|avx512|amx in the environment
 * forces one (UNSUPPORTED naming the missing CPU or OS feature if this machine cannot run
 * it, INVALID_ARG for an unknown name); otherwise the best this machine runs, highest level
 * first. Decided once per process; the tables are immutable. */
mlm_status mlm_kernels_pick(const mlm_kernels **out, mlm_error *err);
/* A specific table, or NULL if this machine cannot run it (then WHY, if not NULL, names the
 * missing feature: static text). */
const mlm_kernels *mlm_kernels_get(const char *name, const char **why);
/* Every level's name, best first, NULL-terminated. */
extern const char *const mlm_kernel_levels[];

// ---- the kernels (one family per file per ISA) ----

/* cpu/matmul_ref.c: f32 and bf16 weights against f32 activations, in index order; bf16
 * weights against bf16 activations in the avx512 level's order (lanes of 16 pairs). */
void mlm_matmul_f32_ref(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                        int64_t r0, int64_t r1);
void mlm_matmul_bf16_ref(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                         int64_t r0, int64_t r1);
void mlm_matmul_bf16_bf16_ref(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                              int64_t r0, int64_t r1);
/* cpu/matmul_bfp_ref.c and its SIMD twins. */
void mlm_matmul_bfp8_q8_ref(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                            int64_t r0, int64_t r1);
void mlm_matmul_bfp4_q8_ref(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                            int64_t r0, int64_t r1);
void mlm_matmul_bfp8_q8_avx2(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                             int64_t r0, int64_t r1);
void mlm_matmul_bfp4_q8_avx2(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                             int64_t r0, int64_t r1);
void mlm_matmul_bfp8_q8_avxvnni(float *out, int64_t out_stride, const void *w,
                                const mlm_acts *x, int64_t r0, int64_t r1);
void mlm_matmul_bfp4_q8_avxvnni(float *out, int64_t out_stride, const void *w,
                                const mlm_acts *x, int64_t r0, int64_t r1);
void mlm_matmul_bfp8_q8_avx512(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                               int64_t r0, int64_t r1);
void mlm_matmul_bfp4_q8_avx512(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                               int64_t r0, int64_t r1);
void mlm_matmul_bfp8_q8_amx(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                            int64_t r0, int64_t r1);
void mlm_matmul_bfp4_q8_amx(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                            int64_t r0, int64_t r1);
/* cpu/matmul_avx2.c (AVX2 + FMA) and cpu/matmul_avx512.c (AVX-512F, AVX512-BF16). */
void mlm_matmul_f32_avx2(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                         int64_t r0, int64_t r1);
void mlm_matmul_bf16_avx2(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                          int64_t r0, int64_t r1);
void mlm_matmul_f32_avx512(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                           int64_t r0, int64_t r1);
void mlm_matmul_bf16_avx512(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                            int64_t r0, int64_t r1);
void mlm_matmul_bf16_bf16_avx512(float *out, int64_t out_stride, const void *w,
                                 const mlm_acts *x, int64_t r0, int64_t r1);

/* cpu/attention_flash_ref.c and its SIMD twins. */
void mlm_attention_flash_ref(const mlm_attn_job *job, float *scratch);
void mlm_attention_flash_avx2(const mlm_attn_job *job, float *scratch);
void mlm_attention_flash_avx512(const mlm_attn_job *job, float *scratch);

#endif
