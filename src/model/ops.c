/* model/ops.c: the op layer (ops.h): prepare, matmul with epilogues, attention; the only
 * place in model/ that calls the kernels. */
#include <math.h>
#include <string.h>

#include "model/ops.h"
#include "tensor/dtype.h"
#include "tensor/q8.h"

void *mlm_scratch_part(char *base, size_t *off, size_t bytes) {
    size_t at = (*off + 63) / 64 * 64;
    *off = at + bytes;
    return base ? base + at : NULL;
}

// ---- norms ----

void mlm_rmsnorm(float *y, const float *x, const float *w, int64_t d, float eps) {
    float ss = 0;
    for (int64_t i = 0; i < d; i++)
        ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss / (float)d + eps);
    for (int64_t i = 0; i < d; i++)
        y[i] = x[i] * inv * w[i];
}

void mlm_layernorm(float *y, const float *x, const float *w, const float *b, int64_t d, float eps) {
    float mean = 0, var = 0;
    for (int64_t j = 0; j < d; j++)
        mean += x[j];
    mean /= (float)d;
    for (int64_t j = 0; j < d; j++)
        var += (x[j] - mean) * (x[j] - mean);
    var /= (float)d;
    float inv = 1.0f / sqrtf(var + eps);
    for (int64_t j = 0; j < d; j++)
        y[j] = (x[j] - mean) * inv * w[j] + b[j];
}

// ---- prepare ----

int mlm_op_forms(const mlm_ops *o, const mlm_weight *w) { return 1 << o->k->act[w->type]; }

void mlm_op_prepare_row(const mlm_ops *o, int forms, const float *row, int64_t cols, int64_t at) {
    int64_t pc = mlm_q8_cols(cols), hc = mlm_bf16_cols(cols);
    if (forms & (1 << MLM_ACT_Q8)) {
        o->k->quantize(row, cols, o->aq + at * pc, o->au + at * pc,
                       o->ad + at * (pc / MLM_Q8_BLOCK));
        mlm_q8_sums(o->aq + at * pc, 1, cols, o->as + at * mlm_q8_sums_len(cols));
    }
    if (forms & (1 << MLM_ACT_BF16)) {
        uint16_t *h = o->ah + at * hc;
        for (int64_t i = 0; i < cols; i++)
            h[i] = mlm_f32_to_bf16(row[i]);
        for (int64_t i = cols; i < hc; i++)
            h[i] = 0;
    }
}

static void task_prepare(void *ctx, int64_t task, int thread) {
    (void)thread;
    mlm_ops *o = ctx;
    int64_t t0 = task * o->tok_chunk,
            t1 = t0 + o->tok_chunk < o->rows ? t0 + o->tok_chunk : o->rows;
    int64_t cols = o->cols;
    for (int64_t t = t0; t < t1; t++) {
        const float *row = o->src + t * cols;
        if (o->norm == MLM_NORM_RMS) {
            mlm_rmsnorm(o->dst + t * cols, row, o->w, cols, o->eps);
            row = o->dst + t * cols;
        } else if (o->norm == MLM_NORM_LAYER) {
            mlm_layernorm(o->dst + t * cols, row, o->w, o->b, cols, o->eps);
            row = o->dst + t * cols;
        }
        mlm_op_prepare_row(o, o->forms, row, cols, t);
    }
}

void mlm_op_prepare(mlm_ops *o, mlm_pool *pool, const float *src, int64_t rows, int64_t cols,
                    mlm_norm norm, const float *w, const float *b, float eps, float *dst, int forms,
                    int64_t tok_chunk) {
    o->src = src, o->rows = rows, o->cols = cols, o->norm = norm, o->w = w, o->b = b;
    o->eps = eps, o->dst = dst, o->forms = forms, o->tok_chunk = tok_chunk;
    mlm_pool_run(pool, (rows + tok_chunk - 1) / tok_chunk, task_prepare, o);
    o->acts = (mlm_acts){.n = rows,
                         .cols = cols,
                         .x = norm != MLM_NORM_NONE ? dst : src,
                         .h = o->ah,
                         .q = o->aq,
                         .u = o->au,
                         .d = o->ad,
                         .s = o->as};
}

// ---- matmul ----

void mlm_op_matmul_rows(const mlm_ops *o, const mlm_weight *w, float *out, int64_t out_stride,
                        const mlm_acts *a, int64_t r0, int64_t r1) {
    o->k->matmul[w->type](out, out_stride, w->data, a, r0, r1);
}

static inline float silu(float v) { return v / (1.0f + expf(-v)); }

/* Tokens [T0, T1) of o->acts as their own input (the same forms, from row T0). */
static mlm_acts token_rows(const mlm_ops *o, int64_t t0, int64_t t1) {
    const mlm_acts *a = &o->acts;
    int64_t pc = mlm_q8_cols(a->cols), hc = mlm_bf16_cols(a->cols);
    return (mlm_acts){.n = t1 - t0,
                      .cols = a->cols,
                      .x = a->x + t0 * a->cols,
                      .h = a->h + t0 * hc,
                      .q = a->q + t0 * pc,
                      .u = a->u + t0 * pc,
                      .d = a->d + t0 * (pc / MLM_Q8_BLOCK),
                      .s = a->s + t0 * mlm_q8_sums_len(a->cols)};
}

/* Task: one run of mlm_op_task_rows rows of one weight (with SWIGLU: of gate and up) for
 * one chunk of tokens, then the epilogue on it. */
static void task_matmul(void *ctx, int64_t task, int thread) {
    (void)thread;
    mlm_ops *o = ctx;
    int64_t tc = task % o->n_tok_chunks, rc = task / o->n_tok_chunks;
    int s = 0;
    while (rc >= o->n_row_chunks[s])
        rc -= o->n_row_chunks[s++];
    int64_t n = o->acts.n, t0 = 0, t1 = n;
    if (o->mm_tok_chunk)
        t0 = tc * o->mm_tok_chunk, t1 = t0 + o->mm_tok_chunk < n ? t0 + o->mm_tok_chunk : n;
    mlm_acts part = o->mm_tok_chunk ? token_rows(o, t0, t1) : o->acts;
    int64_t rows = o->mw[s]->rows, r0 = rc * o->task_rows[s];
    int64_t r1 = r0 + o->task_rows[s] < rows ? r0 + o->task_rows[s] : rows;
    int n_run = o->epi.kind == MLM_EPI_SWIGLU ? 2 : 1; /* gate and up: the same rows of both */
    for (int i = 0; i < n_run; i++)
        mlm_op_matmul_rows(o, o->mw[s + i], o->out[s + i] + t0 * rows, rows, &part, r0, r1);
    const mlm_epilogue *e = &o->epi;
    float *out = o->out[s] + t0 * rows;
    for (int64_t t = 0; t < t1 - t0; t++) {
        float *y = out + t * rows;
        switch (e->kind) {
        case MLM_EPI_NONE: break;
        case MLM_EPI_SWIGLU: {
            const float *up = o->out[s + 1] + (t0 + t) * rows;
            for (int64_t r = r0; r < r1; r++)
                y[r] = silu(y[r]) * up[r];
            break;
        }
        case MLM_EPI_BIAS:
            for (int64_t r = r0; r < r1; r++)
                y[r] += e->bias[r];
            break;
        case MLM_EPI_BIAS_GELU:
            for (int64_t r = r0; r < r1; r++)
                y[r] += e->bias[r];
            o->k->gelu(y + r0, r1 - r0);
            break;
        case MLM_EPI_GATED_ADD: {
            float *x = e->x + (t0 + t) * rows;
            for (int64_t r = r0; r < r1; r++)
                x[r] += e->gate * (e->bias ? y[r] + e->bias[r] : y[r]);
            break;
        }
        }
    }
}

int64_t mlm_op_task_rows(int64_t rows, int64_t n_tokens, int threads) {
    if (n_tokens > MLM_OP_DECODE_TOKENS || threads < 1) return MLM_OP_ROW_CHUNK;
    int64_t per = (rows + (int64_t)threads * MLM_OP_DECODE_TASKS - 1) /
                  ((int64_t)threads * MLM_OP_DECODE_TASKS);
    per = (per + MLM_OP_ROW_CHUNK - 1) / MLM_OP_ROW_CHUNK * MLM_OP_ROW_CHUNK;
    return per > MLM_OP_ROW_CHUNK ? per : MLM_OP_ROW_CHUNK;
}

void mlm_op_matmul(mlm_ops *o, mlm_pool *pool, const mlm_weight *const *w, float *const *out, int n,
                   mlm_epilogue epi, int64_t tok_chunk) {
    int64_t total = 0;
    o->n_w = n, o->epi = epi, o->mm_tok_chunk = tok_chunk;
    o->n_tok_chunks = tok_chunk ? (o->acts.n + tok_chunk - 1) / tok_chunk : 1;
    for (int i = 0; i < n; i++) {
        o->mw[i] = w[i], o->out[i] = out[i];
        o->task_rows[i] = mlm_op_task_rows(w[i]->rows, o->acts.n, mlm_pool_threads(pool));
        /* with SWIGLU up's rows go with gate's tasks */
        o->n_row_chunks[i] = epi.kind == MLM_EPI_SWIGLU && i == 1
                                 ? 0
                                 : (w[i]->rows + o->task_rows[i] - 1) / o->task_rows[i];
        total += o->n_row_chunks[i];
    }
    mlm_pool_run(pool, total * o->n_tok_chunks, task_matmul, o);
}

// ---- attention ----

static void task_attention(void *ctx, int64_t task, int thread) {
    mlm_ops *o = ctx;
    mlm_attn_job job;
    o->make_job(o->user, task, &job);
    o->k->attention(&job, o->att_scratch + (size_t)thread * MLM_ATT_SCRATCH);
}

void mlm_op_attention(mlm_ops *o, mlm_pool *pool, int64_t n_tasks,
                      void (*make_job)(void *user, int64_t task, mlm_attn_job *job), void *user) {
    o->make_job = make_job, o->user = user;
    mlm_pool_run(pool, n_tasks, task_attention, o);
}
