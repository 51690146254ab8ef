/* model/ops_chunks.c: the K-chunked products of the op layer (ops.h): a weight stored in K
 * chunks (wo, w2: tensor/weight.h) multiplied by its input chunk by chunk, each chunk's
 * partial computed from zero by the kernel and the partials added in chunk order, so one
 * process and every TP mesh (which gathers the ranks' partials and adds them in that order)
 * get the same bits; and the KV store, which a backend holding its cache elsewhere replaces. */
#include <string.h>

#include "model/ops.h"
#include "tensor/q8.h"

void mlm_vec_add(float *restrict dst, const float *restrict src, int64_t len) {
    int64_t i = 0;
    for (; i + MLM_OP_ROW_CHUNK <= len; i += MLM_OP_ROW_CHUNK)
        for (int r = 0; r < MLM_OP_ROW_CHUNK; r++) dst[i + r] += src[i + r];
    for (; i < len; i++) dst[i] += src[i];
}

/* DST[t * DS + r] += SRC[t * SS + r] for N tokens of NR rows (two separate buffers). */
static void add_rows(float *dst, int64_t ds, const float *src, int64_t ss, int64_t n, int64_t nr) {
    for (int64_t t = 0; t < n; t++) mlm_vec_add(dst + t * ds, src + t * ss, nr);
}

/* Tokens [task * tok_chunk, ...): each row cut in chunks, each chunk prepared as a row of its
 * own, chunk-major (chunk c of token t at row c * n + t of each form). */
static void task_prepare_chunks(void *ctx, int64_t task, int thread) {
    (void)thread;
    const mlm_ops *o = ctx;
    int64_t n = o->cn, kc = o->ckc, t0 = task * o->tok_chunk;
    int64_t t1 = t0 + o->tok_chunk < n ? t0 + o->tok_chunk : n;
    int32_t chunks = mlm_weight_chunks(o->cw);
    for (int64_t t = t0; t < t1; t++)
        for (int32_t c = 0; c < chunks; c++) {
            const float *row = o->csrc + t * o->cw->cols + c * kc;
            int64_t at = c * n + t;
            if (o->cx) memcpy(o->cx + at * kc, row, (size_t)kc * sizeof *row);
            mlm_op_prepare_row(o, o->cforms, row, kc, at);
        }
}

void mlm_op_prepare_chunks(mlm_ops *o, mlm_pool *pool, const mlm_weight *w, const float *src,
                           int64_t n, float *ax, int64_t tok_chunk) {
    int32_t chunks = mlm_weight_chunks(w);
    o->cw = w;
    o->csrc = src;
    o->cn = n;
    o->ckc = w->cols / chunks;
    o->cforms = mlm_op_forms(o, w);
    o->cx = chunks > 1 && (o->cforms & (1 << MLM_ACT_F32)) ? ax : NULL;
    o->tok_chunk = tok_chunk;
    mlm_pool_run(pool, (n + tok_chunk - 1) / tok_chunk, task_prepare_chunks, o);
}

/* Chunk C's prepared input, as its kernel reads it. */
static mlm_acts chunk_acts(const mlm_ops *o, int32_t c) {
    int64_t kc = o->ckc, pc = mlm_q8_cols(kc), hc = mlm_bf16_cols(kc), n = o->cn;
    return (mlm_acts){.n = n,
                      .cols = kc,
                      .x = (o->cx ? o->cx : o->csrc) + c * n * kc,
                      .h = o->ah + c * n * hc,
                      .q = o->aq + c * n * pc,
                      .u = o->au + c * n * pc,
                      .d = o->ad + c * n * (pc / MLM_Q8_BLOCK),
                      .s = o->as + c * n * mlm_q8_sums_len(kc)};
}

/* Rows [r0, r0 + MLM_OP_ROW_CHUNK), block B of every chunk of the weight's storage: partial 0
 * into the output, each further partial into this thread's fold buffer and added; then the
 * residual add. Apart: each chunk's partial token-major in the output (n, chunks, rows). */
static void chunk_block(const mlm_ops *o, int64_t b, int thread) {
    const mlm_weight *w = o->cw;
    int64_t rows = w->rows, r0 = b * MLM_OP_ROW_CHUNK;
    int64_t r1 = r0 + MLM_OP_ROW_CHUNK < rows ? r0 + MLM_OP_ROW_CHUNK : rows, nr = r1 - r0;
    int64_t n = o->cn;
    float *tmp = o->cfold + (size_t)thread * (size_t)o->cfold_floats;
    int32_t chunks = mlm_weight_chunks(w);
    for (int32_t c = 0; c < chunks; c++) {
        mlm_weight k = mlm_weight_part(w, b, c); /* a plain (nr, kc) matrix */
        mlm_acts a = chunk_acts(o, c);
        if (!o->csum) /* token t's chunk c at (t * chunks + c) * rows */
            mlm_op_matmul_rows(o, &k, o->cout + c * rows + r0, chunks * rows, &a, 0, nr);
        else if (c == 0)
            mlm_op_matmul_rows(o, &k, o->cout + r0, rows, &a, 0, nr);
        else {
            mlm_op_matmul_rows(o, &k, tmp, MLM_OP_ROW_CHUNK, &a, 0, nr);
            add_rows(o->cout + r0, rows, tmp, MLM_OP_ROW_CHUNK, n, nr);
        }
    }
    if (o->cres) add_rows(o->cres + r0, rows, o->cout + r0, rows, n, nr);
}

/* Task: a run of o->ctask_rows rows, block by block. */
static void task_chunks(void *ctx, int64_t task, int thread) {
    const mlm_ops *o = ctx;
    int64_t per = o->ctask_rows / MLM_OP_ROW_CHUNK;
    int64_t n_blocks = (o->cw->rows + MLM_OP_ROW_CHUNK - 1) / MLM_OP_ROW_CHUNK;
    for (int64_t b = task * per; b < (task + 1) * per && b < n_blocks; b++)
        chunk_block(o, b, thread);
}

void mlm_op_matmul_chunks(mlm_ops *o, mlm_pool *pool, float *out, int sum, float *residual,
                          float *fold, int64_t fold_floats) {
    o->cout = out;
    o->csum = sum;
    o->cres = sum ? residual : NULL;
    o->cfold = fold;
    o->cfold_floats = fold_floats;
    o->ctask_rows = mlm_op_task_rows(o->cw->rows, o->cn, mlm_pool_threads(pool));
    mlm_pool_run(pool, (o->cw->rows + o->ctask_rows - 1) / o->ctask_rows, task_chunks, o);
}

void mlm_op_kv_store(const mlm_paged_kv *kv, const int32_t *blocks, int32_t idx, const float *k,
                     const float *v) {
    mlm_kv_store(kv, blocks, idx, k, v);
}
