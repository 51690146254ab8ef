/* model/vision.c: Llama 3.2 Vision's vision encoder and projector on the kernels (model/vision.h;
 * the arithmetic of vision_ref.c, models.md 6.4), for any precision profile, on a thread pool.
 *
 * The encoder's sequence is every token of every tile slot, pad rows included (valid tokens
 * attend to all of them). It is kept in a permuted order, valid tokens first (tile by tile,
 * CLS then patches) and the invalid ones (pad rows, padding tiles) after them, so that the
 * mask becomes two prefixes: a valid query reads every key, an invalid one the valid keys
 * only. The flash attention kernel then runs non-causally over a prefix (n_ctx), one head per
 * job; everything else works per token and does not care about the order. The valid rows
 * are also the output's rows, in order, so the projector reads them straight.
 * Each product's input is prepared once in the form its kernels read (LayerNorm fused in);
 * products are split over output rows and tokens; epilogues add biases, apply GELU and add
 * the gated residual: the op layer (ops.h) that the decoder shares. Scratch is one block per
 * image, carved in parts (carve). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/ops.h"
#include "model/vision.h"
#include "tensor/dtype.h"
#include "tensor/q8.h"

#define ROW_CHUNK 64  /* output rows per matmul task (4 BFP panels) */
#define TOK_CHUNK 512 /* tokens per matmul task */
#define PREP_CHUNK 8  /* tokens per prepare task */
#define PROJ_ROWS 256 /* projector input rows built at once */

typedef struct venc {
    const mlm_model *m;
    const mlm_vision_config *c;
    mlm_ops ops; /* prepare, matmul and attention on the scratch's activation buffers */
    int64_t D, F, L, n_valid;
    float *x;                 /* (L, D) the residual stream, permuted order */
    float *xn;                /* (L, D) a normed input */
    float *q, *kk, *vv, *att; /* (L, D) heads side by side */
    float *h;                 /* (L, F) the MLP's hidden layer */
    float *inter;             /* (K, L, D) the recorded intermediate inputs */
    float *kh, *vh;           /* (heads, L, head_dim): K and V head-major, for the attention */
    int32_t *tile_of;         /* (L) the tile slot of each sequence position */
    /* the attention job: one pool per head (a head's L entries, one block) */
    mlm_paged_kv *kv;
    int32_t block0;
    int64_t n_q_tiles_valid, n_q_tiles;
} venc;

// ---- pieces ----

static int form_of(const venc *e, const mlm_weight *w) { return mlm_op_forms(&e->ops, w); }

/* Prepares ROWS rows of SRC (COLS wide) for the products of FORMS: LayerNormed by (W, B) into
 * DST first when W is given. */
static void prepare(venc *e, mlm_pool *pool, const float *src, const float *w, const float *b,
                    float *dst, int64_t rows, int64_t cols, int forms) {
    mlm_op_prepare(&e->ops, pool, src, rows, cols, w ? MLM_NORM_LAYER : MLM_NORM_NONE, w, b,
                   e->c->norm_eps, dst, forms, PREP_CHUNK);
}

/* OUT[i] (rows, W[i]->rows) = W[i] . prepared input for the N weights, as one job, then EPI
 * (a gated add goes to the residual stream e->x). */
static void matmul(venc *e, mlm_pool *pool, const mlm_weight *const *w, float *const *out, int n,
                   mlm_epi epi, const float *bias, float gate) {
    mlm_op_matmul(&e->ops, pool, w, out, n,
                  (mlm_epilogue){.kind = epi, .bias = bias, .gate = gate, .x = e->x}, TOK_CHUNK);
}

/* Query tiles of one head: the valid queries read every key, the invalid ones the valid keys. */
static void att_job(void *user, int64_t task, mlm_attn_job *job) {
    const venc *e = user;
    int64_t hd = e->D / e->c->n_head, head = task / e->n_q_tiles, qt = task % e->n_q_tiles;
    int valid = qt < e->n_q_tiles_valid;
    int64_t lo = valid ? 0 : e->n_valid, hi = valid ? e->n_valid : e->L;
    int64_t i0 = lo + (valid ? qt : qt - e->n_q_tiles_valid) * MLM_ATT_QT;
    int64_t nq = hi - i0 < MLM_ATT_QT ? hi - i0 : MLM_ATT_QT;
    /* the job's one query head is HEAD of Q; its keys are the head's own pool (kv_head 0) */
    *job = (mlm_attn_job){.out = e->att + i0 * e->D + head * hd,
                          .out_stride = e->D,
                          .q = e->q + i0 * e->D + head * hd,
                          .q_stride = e->D,
                          .kv = &e->kv[head],
                          .blocks = &e->block0,
                          .q0 = 0,
                          .n_q = (int32_t)nq,
                          .kv_head = 0,
                          .group = 1,
                          .hh0 = 0,
                          .n_hh = 1,
                          .head_dim = (int)hd,
                          .n_ctx = (int32_t)(valid ? e->L : e->n_valid)};
}

/* K and V of a chunk of tokens, token-major (L, D) -> head-major (heads, L, head_dim): each
 * head's keys then lie together, as the kernel reads them. */
static void task_heads(void *ctx, int64_t task, int thread) {
    (void)thread;
    venc *e = ctx;
    int64_t nh = e->c->n_head, hd = e->D / nh, t0 = task * PREP_CHUNK;
    int64_t t1 = t0 + PREP_CHUNK < e->L ? t0 + PREP_CHUNK : e->L;
    for (int64_t t = t0; t < t1; t++)
        for (int64_t h = 0; h < nh; h++) {
            memcpy(e->kh + (h * e->L + t) * hd, e->kk + t * e->D + h * hd, (size_t)hd * 4);
            memcpy(e->vh + (h * e->L + t) * hd, e->vv + t * e->D + h * hd, (size_t)hd * 4);
        }
}

static void attention(venc *e, mlm_pool *pool) {
    mlm_pool_run(pool, (e->L + PREP_CHUNK - 1) / PREP_CHUNK, task_heads, e);
    e->n_q_tiles_valid = (e->n_valid + MLM_ATT_QT - 1) / MLM_ATT_QT;
    e->n_q_tiles = e->n_q_tiles_valid + (e->L - e->n_valid + MLM_ATT_QT - 1) / MLM_ATT_QT;
    mlm_op_attention(&e->ops, pool, e->n_q_tiles * e->c->n_head, att_job, e);
}

/* One encoder layer: x += g_attn * Attn(LN1(x)), x += g_ffn * MLP(LN2(x)). */
static void layer(venc *e, mlm_pool *pool, const mlm_vision_layer *y, float g_attn, float g_ffn) {
    const int64_t L = e->L, D = e->D;
    prepare(e, pool, e->x, y->ln1_w, y->ln1_b, e->xn, L, D,
            form_of(e, &y->wq) | form_of(e, &y->wk) | form_of(e, &y->wv));
    matmul(e, pool, (const mlm_weight *[]){&y->wq, &y->wk, &y->wv}, (float *[]){e->q, e->kk, e->vv},
           3, MLM_EPI_NONE, NULL, 0);
    attention(e, pool);
    prepare(e, pool, e->att, NULL, NULL, NULL, L, D, form_of(e, &y->wo));
    matmul(e, pool, (const mlm_weight *[]){&y->wo}, (float *[]){e->xn}, 1, MLM_EPI_GATED_ADD, NULL,
           g_attn);
    prepare(e, pool, e->x, y->ln2_w, y->ln2_b, e->xn, L, D, form_of(e, &y->fc1));
    matmul(e, pool, (const mlm_weight *[]){&y->fc1}, (float *[]){e->h}, 1, MLM_EPI_BIAS_GELU,
           y->fc1_b, 0);
    prepare(e, pool, e->h, NULL, NULL, NULL, L, e->F, form_of(e, &y->fc2));
    matmul(e, pool, (const mlm_weight *[]){&y->fc2}, (float *[]){e->xn}, 1, MLM_EPI_GATED_ADD,
           y->fc2_b, g_ffn);
}

/* ROW of the embedding table W (f32 or bf16) as f32 into DST. */
static void table_row(const mlm_weight *w, int64_t row, float *dst) {
    if (w->type == MLM_W_F32) {
        memcpy(dst, (const float *)w->data + row * w->cols, (size_t)w->cols * sizeof *dst);
    } else {
        const uint16_t *h = (const uint16_t *)w->data + row * w->cols;
        for (int64_t i = 0; i < w->cols; i++)
            dst[i] = mlm_bf16_to_f32(h[i]);
    }
}

// ---- scratch ----

typedef struct sizes {
    int64_t L, D, F, K, NTGG, CPP, O, act_rows_cols, q_cols, h_cols;
} sizes;

static sizes sizes_of(const mlm_config *cfg) {
    const mlm_vision_config *c = &cfg->vision;
    sizes z;
    int64_t G = c->image_size / c->patch_size, T = G * G + 1, TP = (T + 7) / 8 * 8;
    z.L = c->max_tiles * TP, z.D = c->n_embd, z.F = c->n_ff, z.K = c->n_intermediate;
    z.NTGG = c->max_tiles * G * G, z.CPP = (int64_t)c->n_channels * c->patch_size * c->patch_size;
    z.O = c->output_dim;
    /* the widest prepared input: the MLP's hidden layer, the patches, a projector chunk */
    int64_t a = z.L * mlm_q8_cols(z.F > z.D ? z.F : z.D);
    int64_t p = z.NTGG * mlm_q8_cols(z.CPP), o = PROJ_ROWS * mlm_q8_cols(z.O);
    z.act_rows_cols = a > p ? (a > o ? a : o) : (p > o ? p : o);
    return z;
}

/* The encoder's scratch, carved from one block: the floats (below), the sequence indexes and
 * the activation forms FORMS of the products (int8 and uint8 codes with their scales, bf16). */
typedef struct scratch {
    float *f;     /* 6 (L, D) + (L, F) + (K, L, D) + the patches + a projector chunk + per
                     thread MLM_ATT_SCRATCH */
    int32_t *idx; /* (2, L) */
    int8_t *aq;   /* (act_rows_cols) */
    uint8_t *au;  /* (act_rows_cols) */
    float *ad;    /* (act_rows_cols / MLM_Q8_BLOCK + 1) */
    float *as;    /* (act_rows_cols * 3 / 32 + 3): the codes' sums (mlm_q8_sums_len) */
    uint16_t *ah; /* (act_rows_cols) */
} scratch;

/* Carves S from BASE (NULL: only counts) for N_THREADS threads; returns the bytes. */
static size_t carve(const sizes *z, int n_threads, int forms, char *base, scratch *s) {
    size_t off = 0;
    int64_t A = z->act_rows_cols;
    int q8 = forms & (1 << MLM_ACT_Q8), bf16 = forms & (1 << MLM_ACT_BF16);
    s->f = mlm_scratch_part(base, &off,
                            (6 * z->L * z->D + z->L * z->F + z->K * z->L * z->D + z->NTGG * z->CPP +
                             PROJ_ROWS * z->O + (int64_t)n_threads * MLM_ATT_SCRATCH) *
                                (int64_t)sizeof(float));
    s->idx = mlm_scratch_part(base, &off, 2 * z->L * (int64_t)sizeof(int32_t));
    s->aq = q8 ? mlm_scratch_part(base, &off, A) : NULL;
    s->au = q8 ? mlm_scratch_part(base, &off, A) : NULL;
    s->ad =
        q8 ? mlm_scratch_part(base, &off, (A / MLM_Q8_BLOCK + 1) * (int64_t)sizeof(float)) : NULL;
    s->as = q8 ? mlm_scratch_part(base, &off, (A * 3 / 32 + 3) * (int64_t)sizeof(float)) : NULL;
    s->ah = bf16 ? mlm_scratch_part(base, &off, A * 2) : NULL;
    return off;
}

int64_t mlm_vision_scratch_bytes(const mlm_config *cfg) {
    if (cfg->family != MLM_FAMILY_MLLAMA) return 0;
    sizes z = sizes_of(cfg);
    scratch s;
    return (int64_t)carve(&z, 64, (1 << MLM_ACT_Q8) | (1 << MLM_ACT_BF16), NULL, &s);
}

// ---- the encoder ----

mlm_status mlm_vision_encode(const mlm_model *m, const float *pixels, int32_t aspect_ratio_id,
                             int32_t n_tiles, float *projected, mlm_pool *pool, mlm_error *err) {
    if (!m || !pixels || !projected || m->cfg.family != MLM_FAMILY_MLLAMA)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "vision: no image or no vision model");
    const mlm_vision_config *c = &m->cfg.vision;
    const mlm_vision_tower *v = &m->vision;
    if (aspect_ratio_id < 0 || aspect_ratio_id > c->n_aspect)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "vision: aspect_ratio_id %d out of range [0, %d]",
                             (int)aspect_ratio_id, (int)c->n_aspect);
    if (n_tiles < 1 || n_tiles > c->max_tiles)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "vision: n_tiles %d out of range [1, %d]",
                             (int)n_tiles, (int)c->max_tiles);
    if (c->n_head > 64 || c->n_ff < 2 * c->n_embd)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                             "vision: %d heads (at most 64) and an MLP %d wide (at least twice the "
                             "width %d) are what this encoder handles",
                             (int)c->n_head, (int)c->n_ff, (int)c->n_embd);
    sizes z = sizes_of(&m->cfg);
    const int64_t D = z.D, L = z.L, K = z.K, O = z.O, E = m->cfg.n_embd, NT = c->max_tiles;
    const int64_t T = v->n_tok, TP = v->n_tok_pad, G = v->n_grid, S = c->image_size;
    const int64_t ps = c->patch_size, ch = c->n_channels;
    int n_threads = mlm_pool_threads(pool);
    venc e = {.m = m,
              .c = c,
              .ops = {.k = m->kernels},
              .D = D,
              .F = z.F,
              .L = L,
              .n_valid = (int64_t)n_tiles * T};
    int forms = form_of(&e, &v->patch) | form_of(&e, &v->proj);
    for (int32_t i = 0; i < c->n_layer + c->n_global_layer; i++) {
        const mlm_vision_layer *y = &v->layers[i];
        forms |= form_of(&e, &y->wq) | form_of(&e, &y->wk) | form_of(&e, &y->wv) |
                 form_of(&e, &y->wo) | form_of(&e, &y->fc1) | form_of(&e, &y->fc2);
    }
    /* scratch */
    scratch s;
    size_t bytes = carve(&z, n_threads, forms, NULL, &s);
    char *block = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!block)
        return mlm_error_set(err, MLM_ERR_NOMEM,
                             "vision: out of memory for %zu bytes of scratch (%lld tokens)", bytes,
                             (long long)L);
    carve(&z, n_threads, forms, block, &s);
    float *f = s.f;
    int32_t *idx = s.idx;
    e.ops.aq = s.aq, e.ops.au = s.au, e.ops.ad = s.ad, e.ops.as = s.as, e.ops.ah = s.ah;
    e.x = f, e.xn = e.x + L * D, e.q = e.xn + L * D, e.kk = e.q + L * D, e.vv = e.kk + L * D;
    e.att = e.vv + L * D, e.h = e.att + L * D, e.inter = e.h + L * z.F;
    float *patches = e.inter + K * L * D, *proj_in = patches + z.NTGG * z.CPP;
    e.ops.att_scratch = proj_in + PROJ_ROWS * O;
    int32_t *pos_of = idx; /* (NT * TP) slot (tile, row) -> sequence position */
    e.tile_of = idx + L;
    /* the MLP's hidden layer is free during the attention: it holds K and V head-major */
    e.kh = e.h, e.vh = e.h + L * D;
    mlm_paged_kv kvs[64];
    int64_t hd = D / c->n_head;
    for (int32_t h = 0; h < c->n_head && h < 64; h++)
        kvs[h] = (mlm_paged_kv){.k = e.kh + h * L * hd,
                                .v = e.vh + h * L * hd,
                                .type = MLM_W_F32,
                                .block_size = (int32_t)L,
                                .row = hd,
                                .row_bytes = hd * 4};
    e.kv = kvs;
    e.block0 = 0;

    // the permutation: valid tokens first, in (tile, row) order, then the invalid ones
    for (int64_t t = 0, inv = e.n_valid; t < NT; t++)
        for (int64_t r = 0; r < TP; r++) {
            int64_t p = t < n_tiles && r < T ? t * T + r : inv++;
            pos_of[t * TP + r] = (int32_t)p;
            e.tile_of[p] = (int32_t)t;
        }

    // 1. patch embedding: patches (NT * G * G, C * p * p) in (channel, row, column) order
    for (int64_t t = 0; t < NT; t++)
        for (int64_t py = 0; py < G; py++)
            for (int64_t px = 0; px < G; px++) {
                float *dst = patches + ((t * G + py) * G + px) * z.CPP;
                for (int64_t cc = 0; cc < ch; cc++)
                    for (int64_t ky = 0; ky < ps; ky++)
                        memcpy(dst + (cc * ps + ky) * ps,
                               pixels + ((t * ch + cc) * S + py * ps + ky) * S + px * ps,
                               (size_t)ps * sizeof(float));
            }
    prepare(&e, pool, patches, NULL, NULL, NULL, z.NTGG, z.CPP, form_of(&e, &v->patch));
    matmul(&e, pool, (const mlm_weight *[]){&v->patch}, (float *[]){e.q}, 1, MLM_EPI_NONE, NULL, 0);

    // 2.-5. pre-tile embedding on the patches, CLS, positional embeddings, ln_pre on the T real
    //    rows; the pad rows stay zero
    const float g_pos = tanhf(v->gates[0]), g_pre = tanhf(v->gates[1]);
    float *tp_row = e.xn; /* one row of the tile table */
    for (int64_t t = 0; t < NT; t++) {
        const float *pre = v->pre_tile + ((int64_t)aspect_ratio_id * NT + t) * D;
        for (int64_t r = 0; r < TP; r++) {
            float *x = e.x + (int64_t)pos_of[t * TP + r] * D;
            if (r >= T) {
                memset(x, 0, (size_t)D * sizeof *x);
                continue;
            }
            if (r == 0) {
                memcpy(x, v->class_emb, (size_t)D * sizeof *x);
            } else {
                const float *pe = e.q + (t * G * G + r - 1) * D;
                for (int64_t j = 0; j < D; j++)
                    x[j] = pe[j] + g_pre * pre[j];
            }
            table_row(&v->tile_pos, ((int64_t)aspect_ratio_id * NT + t) * T + r, tp_row);
            for (int64_t j = 0; j < D; j++)
                x[j] += (1 - g_pos) * v->pos_emb[r * D + j] + g_pos * tp_row[j];
            mlm_layernorm(x, x, v->ln_pre_w, v->ln_pre_b, D, c->norm_eps);
        }
    }

    // 7.-8. local layers; intermediate k = the input of layer intermediate[k]
    for (int32_t l = 0; l < c->n_layer; l++) {
        for (int64_t k = 0; k < K; k++)
            if (c->intermediate[k] == l)
                memcpy(e.inter + k * L * D, e.x, (size_t)(L * D) * sizeof(float));
        layer(&e, pool, &v->layers[l], 1.0f, 1.0f);
    }

    // 9. ln_post; 10. post-tile embedding on every row of each tile slot
    const float g_post = tanhf(v->gates[2]);
    for (int64_t i = 0; i < L; i++) {
        float *x = e.x + i * D;
        const float *post = v->post_tile + ((int64_t)aspect_ratio_id * NT + e.tile_of[i]) * D;
        mlm_layernorm(x, x, v->ln_post_w, v->ln_post_b, D, c->norm_eps);
        for (int64_t j = 0; j < D; j++)
            x[j] += g_post * post[j];
    }

    // 11. gated global layers
    for (int32_t l = c->n_layer; l < c->n_layer + c->n_global_layer; l++)
        layer(&e, pool, &v->layers[l], tanhf(v->layers[l].gates[0]), tanhf(v->layers[l].gates[1]));

    // 12.-14. the valid rows [x (D), intermediates interleaved d * K + k] through the projector
    for (int64_t i0 = 0; i0 < e.n_valid; i0 += PROJ_ROWS) {
        int64_t n = e.n_valid - i0 < PROJ_ROWS ? e.n_valid - i0 : PROJ_ROWS;
        for (int64_t i = 0; i < n; i++) {
            float *o = proj_in + i * O;
            const float *x = e.x + (i0 + i) * D;
            memcpy(o, x, (size_t)D * sizeof *o);
            for (int64_t j = 0; j < D; j++)
                for (int64_t k = 0; k < K; k++)
                    o[D + j * K + k] = e.inter[(k * L + i0 + i) * D + j];
        }
        prepare(&e, pool, proj_in, NULL, NULL, NULL, n, O, form_of(&e, &v->proj));
        matmul(&e, pool, (const mlm_weight *[]){&v->proj}, (float *[]){projected + i0 * E}, 1,
               MLM_EPI_BIAS, v->proj_b, 0);
    }
    free(block);
    return MLM_OK;
}
