/* model/ops.h: the op layer under the decoder (forward.c) and the vision encoder (vision.c):
 * prepare a product's input (normalized or not, in the forms its kernels read), multiply it
 * by weights with an epilogue, run attention jobs. The kernels are called here and nowhere
 * else in model/: this is the seam another backend plugs into. Each op is a job on the
 * thread pool split into tasks; a token's numbers never depend on the split. The caller owns
 * every buffer; the ops allocate nothing. */
#ifndef MESHLM_MODEL_OPS_H
#define MESHLM_MODEL_OPS_H

#include "backend/backend.h"
#include "core/pool.h"
#include "tensor/weight.h"

#define MLM_OP_ROW_CHUNK 64 /* output rows per matmul task: 4 BFP panels, a chunked block */
/* Tasks per thread for a product of a few tokens (memory-bound decode): rows go in runs of
 * about rows / (threads x this), whole MLM_OP_ROW_CHUNK blocks, so each thread streams long
 * stretches of the weight (64-row tasks, 64 a thread on a 8192-row matrix, read 7-25% below
 * what a run of the whole half did: bench/matmul from memory, 2 threads, AMD Zen 4,
 * 2026-12-07) while the last tasks stay small enough that the threads finish together (4 a
 * thread decoded the 8B Q4_K_M 7% slower on 2 threads than 8 or 16, the idle end of each
 * product; 8 and 4 equal on one thread: bench/decode, same machine and day). */
#define MLM_OP_DECODE_TASKS 8
/* Prefill (more tokens than this) keeps 64-row tasks: it is compute-bound, the tile reads
 * 4 panels at a time. */
#define MLM_OP_DECODE_TOKENS 4

/* The rows a matmul task takes: a multiple of MLM_OP_ROW_CHUNK (see MLM_OP_DECODE_TASKS). */
int64_t mlm_op_task_rows(int64_t rows, int64_t n_tokens, int threads);

typedef enum mlm_norm { MLM_NORM_NONE, MLM_NORM_RMS, MLM_NORM_LAYER } mlm_norm;

/* What a product's result gets, row by row, once its rows are computed. */
typedef enum mlm_epi {
    MLM_EPI_NONE,
    MLM_EPI_SWIGLU,    /* out[0] = SiLU(out[0]) * out[1]: weights 0 (gate) and 1 (up) */
    MLM_EPI_BIAS,      /* out += bias */
    MLM_EPI_BIAS_GELU, /* out = GELU(out + bias) */
    MLM_EPI_GATED_ADD  /* x += gate * (out + bias): the gated residual (bias may be NULL) */
} mlm_epi;

typedef struct mlm_epilogue {
    mlm_epi kind;
    const float *bias; /* (rows) */
    float gate;
    float *x; /* GATED_ADD: the residual stream (tokens, rows) */
} mlm_epilogue;

/* The prepared-input buffers (borrowed; each holds the most rows a caller prepares, in the
 * widest layout: mlm_q8_cols / mlm_bf16_cols of the columns) and the job state. */
typedef struct mlm_ops {
    const mlm_kernels *k;
    int8_t *aq;         /* int8 codes */
    uint8_t *au;        /* their unsigned form */
    float *ad;          /* one scale per MLM_Q8_BLOCK */
    float *as;          /* the code sums (mlm_q8_sums) */
    uint16_t *ah;       /* bf16 rows, padded with zeros */
    float *att_scratch; /* per thread MLM_ATT_SCRATCH floats */
    mlm_acts acts;      /* the last prepared input */
    /* the prepare job */
    const float *src, *w, *b;
    float *dst;
    int64_t rows, cols, tok_chunk;
    mlm_norm norm;
    float eps;
    int forms;
    /* the matmul job */
    const mlm_weight *mw[3];
    float *out[3];
    int n_w;
    int64_t n_row_chunks[3], task_rows[3], n_tok_chunks, mm_tok_chunk;
    mlm_epilogue epi;
    /* the attention job */
    void (*make_job)(void *user, int64_t task, mlm_attn_job *job);
    void *user;
    /* the K-chunked product (ops_chunks.c): its weight, input and chunk-major f32 slices,
     * tokens, columns a chunk, forms; the output, sum or apart, residual, fold scratch */
    const mlm_weight *cw;
    const float *csrc;
    float *cx;
    int64_t cn, ckc, ctask_rows;
    int cforms, csum;
    float *cout, *cres, *cfold;
    int64_t cfold_floats;
} mlm_ops;

/* The forms (1 << mlm_act_kind) the kernels of W read. */
int mlm_op_forms(const mlm_ops *o, const mlm_weight *w);

/* ROW (COLS values) in FORMS, as row AT of each form's buffer. */
void mlm_op_prepare_row(const mlm_ops *o, int forms, const float *row, int64_t cols, int64_t at);

/* Prepares ROWS rows of SRC (COLS wide), TOK_CHUNK rows a task: normalized by NORM (weight W,
 * bias B for LayerNorm, EPS) into DST first unless NORM is none, then in FORMS; o->acts
 * describes the result. */
void mlm_op_prepare(mlm_ops *o, mlm_pool *pool, const float *src, int64_t rows, int64_t cols,
                    mlm_norm norm, const float *w, const float *b, float eps, float *dst, int forms,
                    int64_t tok_chunk);

/* OUT[i] (acts.n, W[i]->rows) = W[i] . o->acts for the N (1 to 3) weights as one job of
 * mlm_op_task_rows rows by TOK_CHUNK tokens a task (0: all), then EPI on each task's part. */
void mlm_op_matmul(mlm_ops *o, mlm_pool *pool, const mlm_weight *const *w, float *const *out, int n,
                   mlm_epilogue epi, int64_t tok_chunk);

/* Rows [R0, R1) of W . A into OUT (row stride OUT_STRIDE): the one call of the matmul
 * kernels, for products that schedule their own tasks (forward.c's K-chunked ones). */
void mlm_op_matmul_rows(const mlm_ops *o, const mlm_weight *w, float *out, int64_t out_stride,
                        const mlm_acts *a, int64_t r0, int64_t r1);

/* K-chunked products (ops_chunks.c): W stored in K chunks (tensor/weight.h: wo and w2) times
 * its input, each chunk's partial computed from zero by the kernel. First the input: N rows of
 * SRC (W->cols wide) cut in W's chunks, each chunk prepared as a row of its own, chunk-major
 * (chunk c of token t at row c * N + t of each form), TOK_CHUNK tokens a task; with several
 * chunks and kernels that read f32, the f32 slices are copied to AX (N x W->cols floats). */
void mlm_op_prepare_chunks(mlm_ops *o, mlm_pool *pool, const mlm_weight *w, const float *src,
                           int64_t n, float *ax, int64_t tok_chunk);

/* Then the product of the input prepared last, mlm_op_task_rows rows a task (each
 * MLM_OP_ROW_CHUNK block of them in turn): with SUM, OUT
 * (n, rows) = partial 0 + partial 1 + ... in chunk order (FOLD: FOLD_FLOATS floats of
 * scratch per thread, at least n x MLM_OP_ROW_CHUNK), then added to RESIDUAL (n, rows) when
 * it is given; else OUT (n, chunks, rows) token-major holds each chunk's partial apart, for a
 * mesh to gather and add in the same order. */
void mlm_op_matmul_chunks(mlm_ops *o, mlm_pool *pool, float *out, int sum, float *residual,
                          float *fold, int64_t fold_floats);

/* DST[i] += SRC[i] for LEN floats (separate buffers), in blocks the compiler vectorizes. */
void mlm_vec_add(float *restrict dst, const float *restrict src, int64_t len);

/* Stores K and V as entry IDX of the sequence with page table BLOCKS in the paged cache KV
 * (backend.h's mlm_kv_store): the decoder's KV writes go through here. */
void mlm_op_kv_store(const mlm_paged_kv *kv, const int32_t *blocks, int32_t idx, const float *k,
                     const float *v);

/* N_TASKS attention jobs, task I's made by MAKE_JOB(USER, I, &job), on the pool. */
void mlm_op_attention(mlm_ops *o, mlm_pool *pool, int64_t n_tasks,
                      void (*make_job)(void *user, int64_t task, mlm_attn_job *job), void *user);

/* Carving a scratch block: the next part of BYTES bytes at a 64-byte boundary after *OFF,
 * which moves past it; NULL when BASE is (a pass that only counts the bytes). */
void *mlm_scratch_part(char *base, size_t *off, size_t bytes);

/* Y = X * rsqrt(mean(X^2) + eps) * W, for one row of D (Y may be X). */
void mlm_rmsnorm(float *y, const float *x, const float *w, int64_t d, float eps);
/* Y = LayerNorm(X) * W + B (biased variance, as the references), for one row of D (Y may be
 * X). */
void mlm_layernorm(float *y, const float *x, const float *w, const float *b, int64_t d, float eps);

#endif
