/* model/forward.c: the Llama 3 decoder forward pass over a flat batch of tokens from any
 * sequences (prefill, decode or both), with attention over paged KV.
 * Activations are f32; weights f32 or bf16 through the backend's matmul kernels, or BFP8/BFP4
 * against the activations quantized to int8 once per input (q, k and v share one quantization,
 * as do gate and up); the pass splits the rows between
 * threads (OpenMP). Every token's numbers are computed the same
 * way whatever else is in the batch, so batched and one-by-one runs agree bit for bit.
 * Scratch comes from the caller (sized by mlm_forward_scratch_size); nothing is allocated. */
#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "model/forward.h"
#include "tensor/dtype.h"
#include "tensor/q8.h"

// ---- scratch ----

#define N_PARTS 9

/* Float counts of the scratch arrays for at most N tokens (L of them wanting logits). */
static void scratch_layout(const mlm_config *c, int32_t n, int32_t l, int32_t max_ctx,
                           int n_threads, size_t sizes[N_PARTS]) {
    size_t d = (size_t)c->n_embd, q = (size_t)c->n_head * c->head_dim,
           kv = (size_t)c->n_kv_head * c->head_dim;
    sizes[0] = (size_t)n * d;                        /* x: residual stream */
    sizes[1] = (size_t)n * d;                        /* xb: normalized input */
    sizes[2] = (size_t)n * q;                        /* q, later the attention output */
    sizes[3] = (size_t)n * kv;                       /* k */
    sizes[4] = (size_t)n * kv;                       /* v */
    sizes[5] = (size_t)n * (size_t)c->n_ff;          /* gate */
    sizes[6] = (size_t)n * (size_t)c->n_ff + (size_t)n * q; /* up; attention output */
    sizes[7] = (size_t)n_threads * (size_t)max_ctx * (size_t)(c->n_head / c->n_kv_head) +
               (size_t)l * d; /* scores; final norm */
    /* int8 activations and their scales for the widest input (d, q or n_ff) */
    int64_t widest = c->n_ff > c->n_embd ? c->n_ff : c->n_embd;
    if ((int64_t)q > widest) widest = (int64_t)q;
    size_t pc = (size_t)mlm_q8_cols(widest);
    sizes[8] = (size_t)n * (pc / 4 + pc / MLM_Q8_BLOCK);
}

size_t mlm_forward_scratch_size(const mlm_config *c, int32_t max_tokens, int32_t max_logits,
                                int32_t max_ctx, int n_threads) {
    size_t sizes[N_PARTS], total = 0;
    scratch_layout(c, max_tokens, max_logits, max_ctx, n_threads, sizes);
    for (int i = 0; i < N_PARTS; i++) total += (sizes[i] + 15) / 16 * 16; /* 64-byte aligned parts */
    return total * sizeof(float);
}

// ---- pieces ----

/* Y = X * rsqrt(mean(X^2) + eps) * W, for N rows of D. */
static void rmsnorm(float *y, const float *x, const float *w, int64_t n, int64_t d, float eps) {
    for (int64_t t = 0; t < n; t++) {
        const float *xt = x + t * d;
        float ss = 0;
        for (int64_t i = 0; i < d; i++) ss += xt[i] * xt[i];
        float inv = 1.0f / sqrtf(ss / (float)d + eps);
        for (int64_t i = 0; i < d; i++) y[t * d + i] = xt[i] * inv * w[i];
    }
}

static int is_bfp(const mlm_weight *w) { return w->type == MLM_W_BFP8 || w->type == MLM_W_BFP4; }

/* Quantizes the N rows of X (COLS wide) to int8 into Q8 (scales first, then the codes), once
 * for every BFP product that reads X. */
static void quantize(const float *x, int64_t n, int64_t cols, float *q8, int n_threads) {
    int64_t pc = mlm_q8_cols(cols);
    int8_t *xq = (int8_t *)(q8 + n * (pc / MLM_Q8_BLOCK));
#pragma omp parallel for num_threads(n_threads) schedule(static) if (n > 1)
    for (int64_t t = 0; t < n; t++)
        mlm_q8_quantize(x + t * cols, 1, cols, xq + t * pc, q8 + t * (pc / MLM_Q8_BLOCK));
}

/* OUT (n, w->rows) = X (n, w->cols) . W^T, rows split between threads. For BFP weights Q8
 * must hold X quantized (quantize()). */
static void matmul(const mlm_model *m, float *out, const mlm_weight *w, const float *x, int64_t n,
                   int n_threads, const float *q8) {
    int64_t rows = w->rows, cols = w->cols;
    /* Chunks of 16 rows keep each thread's work a multiple of the kernels' 4-row blocks; they
     * are handed out dynamically, so a thread the OS delays does not hold the others at the
     * barrier (every chunk computes the same numbers whichever thread runs it). */
    int64_t n_chunks = (rows + 15) / 16, pc = mlm_q8_cols(cols);
    const int8_t *xq = (const int8_t *)(q8 + n * (pc / MLM_Q8_BLOCK));
    int bfp = is_bfp(w);
    mlm_matmul_fn fn = bfp ? NULL : m->kernels->matmul[w->type];
    mlm_matmul_q8_fn fq = bfp ? m->kernels->matmul_q8[w->type] : NULL;
#pragma omp parallel for num_threads(n_threads) schedule(dynamic, 4) if (n * rows * cols > 32768)
    for (int64_t ch = 0; ch < n_chunks; ch++) {
        int64_t r0 = ch * 16, r1 = r0 + 16 < rows ? r0 + 16 : rows;
        if (bfp) fq(out, rows, w->data, xq, q8, n, cols, r0, r1);
        else fn(out, rows, w->data, x, n, cols, r0, r1);
    }
}

static void embed(const mlm_model *m, float *x, const int32_t *tokens, int32_t n) {
    const mlm_weight *e = &m->tok_emb;
    for (int32_t t = 0; t < n; t++) {
        float *xt = x + (int64_t)t * e->cols;
        if (e->type == MLM_W_F32) {
            memcpy(xt, (const float *)e->data + (int64_t)tokens[t] * e->cols,
                   (size_t)e->cols * sizeof *xt);
        } else {
            const uint16_t *row = (const uint16_t *)e->data + (int64_t)tokens[t] * e->cols;
            for (int64_t i = 0; i < e->cols; i++) xt[i] = mlm_bf16_to_f32(row[i]);
        }
    }
}

static inline float silu(float v) { return v / (1.0f + expf(-v)); }

// ---- the pass ----

void mlm_forward(const mlm_model *m, const mlm_fwd_batch *b, const mlm_paged_kv *kv,
                 void *scratch, int32_t max_ctx, int n_threads, float *logits) {
    const mlm_config *c = &m->cfg;
    int32_t n = b->n, n_logits = 0;
    for (int32_t t = 0; t < n; t++) n_logits += b->want_logits && b->want_logits[t];
    size_t sizes[N_PARTS];
    scratch_layout(c, n, n_logits, max_ctx, n_threads, sizes);
    float *part[N_PARTS], *p = scratch;
    for (int i = 0; i < N_PARTS; i++) {
        part[i] = p;
        p += (sizes[i] + 15) / 16 * 16;
    }
    float *x = part[0], *xb = part[1], *q = part[2], *k = part[3], *v = part[4], *gate = part[5],
          *up = part[6], *att = part[6] + (size_t)n * c->n_ff, *scores = part[7], *q8 = part[8];
    int64_t d = c->n_embd, hd = c->head_dim, qdim = (int64_t)c->n_head * hd,
            kvdim = (int64_t)c->n_kv_head * hd, f = c->n_ff;
    size_t per_thread = (size_t)max_ctx * (size_t)(c->n_head / c->n_kv_head); /* scores */

    embed(m, x, b->tokens, n);
    for (int l = 0; l < c->n_layer; l++) {
        const mlm_layer *L = &m->layers[l];
        /* attention block */
        rmsnorm(xb, x, L->attn_norm, n, d, c->norm_eps);
        if (is_bfp(&L->wq) || is_bfp(&L->wk) || is_bfp(&L->wv)) quantize(xb, n, d, q8, n_threads);
        matmul(m, q, &L->wq, xb, n, n_threads, q8);
        matmul(m, k, &L->wk, xb, n, n_threads, q8);
        matmul(m, v, &L->wv, xb, n, n_threads, q8);
        mlm_rope_apply(m, q, qdim, n, b->pos, c->n_head);
        mlm_rope_apply(m, k, kvdim, n, b->pos, c->n_kv_head);
        /* All of the step's keys are stored before any query reads: causality comes from
         * each query reading entries 0..kv_idx of its own sequence. */
        for (int32_t t = 0; t < n; t++)
            mlm_kv_store(&kv[l], b->blocks[t], b->kv_idx[t], k + t * kvdim, v + t * kvdim);
#pragma omp parallel for num_threads(n_threads) schedule(dynamic, 1) if (n > 1)
        for (int32_t t = 0; t < n; t++) {
#ifdef _OPENMP
            int tid = omp_get_thread_num();
#else
            int tid = 0;
#endif
            m->kernels->attention(att + t * qdim, q + t * qdim, &kv[l], b->blocks[t],
                                  b->kv_idx[t] + 1, c->n_head, c->n_kv_head, (int)hd,
                                  scores + (size_t)tid * per_thread);
        }
        if (is_bfp(&L->wo)) quantize(att, n, qdim, q8, n_threads);
        matmul(m, xb, &L->wo, att, n, n_threads, q8);
        for (int64_t i = 0; i < n * d; i++) x[i] += xb[i];
        /* MLP block */
        rmsnorm(xb, x, L->ffn_norm, n, d, c->norm_eps);
        if (is_bfp(&L->w1) || is_bfp(&L->w3)) quantize(xb, n, d, q8, n_threads);
        matmul(m, gate, &L->w1, xb, n, n_threads, q8);
        matmul(m, up, &L->w3, xb, n, n_threads, q8);
        for (int64_t i = 0; i < n * f; i++) gate[i] = silu(gate[i]) * up[i];
        if (is_bfp(&L->w2)) quantize(gate, n, f, q8, n_threads);
        matmul(m, xb, &L->w2, gate, n, n_threads, q8);
        for (int64_t i = 0; i < n * d; i++) x[i] += xb[i];
    }
    if (!n_logits) return;
    /* Final norm and LM head only for the tokens that asked. */
    float *xf = scores + (size_t)n_threads * per_thread;
    int32_t j = 0;
    for (int32_t t = 0; t < n; t++)
        if (b->want_logits[t]) rmsnorm(xf + (j++) * d, x + t * d, m->norm, 1, d, c->norm_eps);
    if (is_bfp(&m->output)) quantize(xf, n_logits, d, q8, n_threads);
    matmul(m, logits, &m->output, xf, n_logits, n_threads, q8);
}
