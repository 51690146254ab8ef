/* model/forward.c: the Llama 3 decoder forward pass over a flat batch of tokens from any
 * sequences (prefill, decode or both), with attention over paged KV.
 *
 * Activations are f32. Each input of a product is prepared once in the form its kernels read
 * (int8 for BFP weights, bf16 for the AVX512-BF16 products: backend.h), so q, k and v share
 * one preparation, as do gate and up. The pass is a sequence of jobs on the thread pool,
 * each split into tasks that the threads take first come, first served:
 *   per layer: norm + prepare (by tokens); q/k/v as one job over their rows; RoPE and the KV
 *   store (by tokens); flash attention (by sequence, KV head and query tile); wo (a
 *   row-parallel product: its input prepared chunk by chunk, its K chunks summed in order,
 *   the residual add in its epilogue); norm + prepare; gate/up as one job with SiLU(gate) x
 *   up in its epilogue; w2 as wo. Under TP the row-parallel products gather every rank's
 *   chunk partials and sum them in the same order (row_parallel).
 * A job of one task (a decode step's token-wise work) runs on the caller without waking
 * anyone. Every token's numbers are computed the same way whatever else is in the batch and
 * whichever thread computes them, so batched and one-by-one runs agree bit for bit.
 * The products (K-chunked ones too), norms, attention and KV writes run on the op layer
 * (ops.h), which the vision encoder shares; this file schedules them and the mesh's
 * collectives. Scratch comes from the caller (sized by mlm_forward_scratch_size) and is carved into
 * the step's buffers (bufs); nothing is allocated. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "model/forward.h"
#include "model/ops.h"
#include "tensor/dtype.h"
#include "tensor/qpanel.h"
#include "tensor/q8.h"

#define ROW_CHUNK MLM_OP_ROW_CHUNK /* rows per matmul task: 4 BFP panels */
_Static_assert(ROW_CHUNK == MLM_CHUNK_ROWS, "a row-parallel task is one block of its weight");
#define TOK_CHUNK 4  /* tokens per token-wise task */
#define GATHER_TOKENS 64 /* TP: tokens of K-chunk partials per all-gather (bounds its buffer) */

// ---- the step's buffers ----

typedef struct att_tile { /* one attention task, less the layer */
    int32_t t0, q0, n_q;  /* first token in the batch, its KV entry, query count */
    int32_t n_ctx;        /* cross-attention: the image entries its tokens read; 0 causal */
    int16_t kv_head, hh0, n_hh;
} att_tile;

/* One step's buffers for n tokens, l of them asking for logits, carved from the caller's
 * scratch (each part 64-byte aligned). d = n_embd, q = n_head * head_dim, kv = n_kv_head *
 * head_dim, f = n_ff of this rank's shard; pc, hc: the widest prepared row (act_cols). */
typedef struct bufs {
    float *x;                 /* (n, d) the residual stream */
    float *xb;                /* (n, d) a normed input, a product's output */
    float *q, *k, *v;         /* (n, q), (n, kv), (n, kv) */
    float *gate, *up;         /* (n, f) each */
    float *att;               /* (n, q) attention output */
    float *xf;                /* (l, d) the rows that ask for logits */
    int8_t *aq;               /* (n, pc) int8 codes of a prepared input */
    uint8_t *au;              /* (n, pc) */
    float *ad;                /* (n, pc / MLM_Q8_BLOCK) their scales */
    float *as;                /* (n, mlm_q8_sums_len(pc)) their sums */
    uint16_t *ah;             /* (n, hc) bf16 */
    float *att_scratch;       /* (threads, MLM_ATT_SCRATCH) */
    att_tile *tiles, *xtiles; /* (max_att_tiles) self- and (cross layers) cross-attention */
    float *logits_local;      /* TP: (l, this rank's vocabulary slice) */
    float *logits_all;        /* TP: (l, every rank's slices) */
    float *ax;                /* (n, max(q, f)) a row-parallel product's input, chunk-major */
    float *fold;              /* (threads, fold_floats) one chunk's partial of a task */
    float *part;              /* TP: (n, local chunks, d) this rank's chunks' partials */
    float *gath;              /* TP: (tp, GATHER_TOKENS, local chunks, d) every rank's */
} bufs;

static int64_t widest_input(const mlm_config *c) {
    int64_t q = (int64_t)c->n_head * c->head_dim, w = c->n_ff > c->n_embd ? c->n_ff : c->n_embd;
    return q > w ? q : w;
}

/* Floats of one thread's fold buffer in a step of N tokens of width D: a row task's block
 * of one chunk (N x ROW_CHUNK), or one token's sum over the gathered chunks (D). */
static int64_t fold_floats(int64_t n, int64_t d) {
    return n * ROW_CHUNK > d ? n * ROW_CHUNK : d;
}

/* Columns of one token's prepared int8 (Q8) or bf16 (BF16) input, the widest of the plain
 * inputs and the chunk-major inputs of wo and w2 (each chunk padded on its own). */
static int64_t act_cols(const mlm_config *c, int bf16) {
    int64_t q = (int64_t)c->n_head * c->head_dim, f = c->n_ff;
    int64_t (*pad)(int64_t) = bf16 ? mlm_bf16_cols : mlm_q8_cols;
    int64_t wo = mlm_wo_chunks(c), w2 = mlm_w2_chunks(c);
    int64_t best = pad(widest_input(c)), a = wo * pad(q / wo), b = w2 * pad(f / w2);
    if (a > best) best = a;
    return b > best ? b : best;
}

static int64_t max_att_tiles(const mlm_config *c, int32_t n) {
    int hh_chunks = (c->n_head / c->n_kv_head + MLM_ATT_HH - 1) / MLM_ATT_HH;
    return (int64_t)(n / MLM_ATT_QT + n) * c->n_kv_head * hh_chunks;
}

/* Carves B from BASE (NULL: only counts) for at most N tokens, L of them wanting logits, C
 * being one rank's shard of TP; returns the bytes. */
static size_t carve(const mlm_config *c, int tp, int32_t n, int32_t l, int n_threads, char *base,
                    bufs *b) {
    size_t d = (size_t)c->n_embd, q = (size_t)c->n_head * c->head_dim,
           kv = (size_t)c->n_kv_head * c->head_dim, f = (size_t)c->n_ff, N = (size_t)n;
    size_t pc = (size_t)act_cols(c, 0), hc = (size_t)act_cols(c, 1), off = 0;
    size_t tiles = (size_t)max_att_tiles(c, n) * sizeof(att_tile);
    int32_t v0, slice;
    mlm_model_vocab_slice(c->n_vocab, 0, tp, &v0, &slice);
    size_t chunks = (size_t)c->n_kv_head; /* this rank's: the most either product has */
    size_t slab = N < GATHER_TOKENS ? N : GATHER_TOKENS;
    b->x = mlm_scratch_part(base, &off, N * d * 4);
    b->xb = mlm_scratch_part(base, &off, N * d * 4);
    b->q = mlm_scratch_part(base, &off, N * q * 4);
    b->k = mlm_scratch_part(base, &off, N * kv * 4);
    b->v = mlm_scratch_part(base, &off, N * kv * 4);
    b->gate = mlm_scratch_part(base, &off, N * f * 4);
    b->up = mlm_scratch_part(base, &off, N * f * 4);
    b->att = mlm_scratch_part(base, &off, N * q * 4);
    b->xf = mlm_scratch_part(base, &off, (size_t)l * d * 4);
    b->aq = mlm_scratch_part(base, &off, N * pc);
    b->au = mlm_scratch_part(base, &off, N * pc);
    b->ad = mlm_scratch_part(base, &off, N * (pc / MLM_Q8_BLOCK) * 4);
    b->as = mlm_scratch_part(base, &off, N * (size_t)mlm_q8_sums_len((int64_t)pc) * 4);
    b->ah = mlm_scratch_part(base, &off, N * hc * 2);
    b->att_scratch = mlm_scratch_part(base, &off, (size_t)n_threads * MLM_ATT_SCRATCH * 4);
    b->tiles = mlm_scratch_part(base, &off, tiles);
    b->xtiles = mlm_scratch_part(base, &off, c->n_cross ? tiles : 0);
    b->logits_local = mlm_scratch_part(base, &off, tp > 1 ? (size_t)l * (size_t)slice * 4 : 0);
    b->logits_all =
        mlm_scratch_part(base, &off, tp > 1 ? (size_t)l * (size_t)slice * (size_t)tp * 4 : 0);
    b->ax = mlm_scratch_part(base, &off, N * (q > f ? q : f) * 4);
    b->fold =
        mlm_scratch_part(base, &off, (size_t)n_threads * (size_t)fold_floats(n, c->n_embd) * 4);
    b->part = mlm_scratch_part(base, &off, tp > 1 ? chunks * N * d * 4 : 0);
    b->gath = mlm_scratch_part(base, &off, tp > 1 ? chunks * (size_t)tp * slab * d * 4 : 0);
    return (off + 63) / 64 * 64;
}

size_t mlm_forward_scratch_size(const mlm_config *c, int tp, int32_t max_tokens, int32_t max_logits,
                                int n_threads) {
    bufs b;
    mlm_config shard = mlm_config_shard(c, tp); /* every rank's shard has the same size */
    return carve(&shard, tp, max_tokens, max_logits, n_threads, NULL, &b);
}

// ---- the step's state, shared by the tasks ----

typedef struct fwd {
    const mlm_model *m;
    const mlm_fwd_batch *b;
    const mlm_paged_kv *kv; /* this layer's */
    int32_t n;
    bufs s;
    int64_t n_tiles, n_xtiles; /* the step's self- and cross-attention tasks (plan_attention) */
    mlm_ops ops;               /* prepare, matmul and attention on s's activation buffers */
    const att_tile *run;     /* the tasks of the attention job running */
    const mlm_paged_kv *xkv; /* the cross layer's image K/V */
    float xgate;             /* a cross layer's gated add: tanh of its gate */
    const mlm_layer *layer;  /* the layer running (its biases, q/k norms, cross K/V) */
    const int32_t *xblocks;  /* mlm_forward_cross_kv: the image's page table, first entry */
    int32_t entry0;
    /* TP: the row-parallel product whose gathered partials are being summed (task_fold) */
    const mlm_weight *rw;
    float *rout;           /* (n, rows): the sum, unless added to the residual */
    int ractive;           /* the sum is added to the residual stream */
    int32_t slab0, slab_n; /* the tokens of the slab gathered */
} fwd;

/* The step's state over SCRATCH for N tokens, L logits. */
static void fwd_init(fwd *f, const mlm_model *m, int tp, int32_t n, int32_t l, mlm_pool *pool,
                     void *scratch) {
    memset(f, 0, sizeof *f);
    f->m = m;
    f->n = n;
    carve(&m->local, tp, n, l, mlm_pool_threads(pool), scratch, &f->s);
    f->ops = (mlm_ops){.k = m->kernels,
                       .aq = f->s.aq,
                       .au = f->s.au,
                       .ad = f->s.ad,
                       .as = f->s.as,
                       .ah = f->s.ah,
                       .att_scratch = f->s.att_scratch};
}

// ---- pieces ----

/* The activation forms the kernels of W want. */
static int forms_of(const fwd *f, const mlm_weight *w) { return mlm_op_forms(&f->ops, w); }

/* Prepares ROWS rows of SRC (COLS wide): RMSNormed by NORM into DST when NORM is given, and
 * in FORMS for the products that read it. */
static void prepare(fwd *f, mlm_pool *pool, const float *src, const float *norm, float *dst,
                    int32_t rows, int64_t cols, int forms) {
    mlm_op_prepare(&f->ops, pool, src, rows, cols, norm ? MLM_NORM_RMS : MLM_NORM_NONE, norm, NULL,
                   f->m->local.norm_eps, dst, forms, TOK_CHUNK);
}

/* The products W[i] . prepared input into OUT[i] as one job (with SWIGLU: W[0] gate, W[1]
 * up), every token in each task. */
static void matmul(fwd *f, mlm_pool *pool, const mlm_weight *const *w, float *const *out, int n,
                   mlm_epi epi) {
    mlm_op_matmul(&f->ops, pool, w, out, n, (mlm_epilogue){.kind = epi}, 0);
}

/* The step's q, k, v rows of tokens [T0, T1): the projections' biases added, then q and k
 * RMSNormed per head (Qwen2's biases, Qwen3's norms; layer L has them or not). */
static void qkv_extras(const fwd *f, const mlm_layer *L, int32_t t0, int32_t t1) {
    const mlm_config *c = &f->m->local;
    int64_t hd = c->head_dim, qdim = (int64_t)c->n_head * hd, kvdim = (int64_t)c->n_kv_head * hd;
    for (int32_t t = t0; t < t1; t++) {
        float *q = f->s.q + t * qdim, *k = f->s.k + t * kvdim;
        if (L->bq) {
            mlm_vec_add(q, L->bq, qdim);
            mlm_vec_add(k, L->bk, kvdim);
            mlm_vec_add(f->s.v + t * kvdim, L->bv, kvdim);
        }
        if (L->q_norm) {
            for (int h = 0; h < c->n_head; h++)
                mlm_rmsnorm(q + h * hd, q + h * hd, L->q_norm, hd, c->norm_eps);
            for (int h = 0; h < c->n_kv_head; h++)
                mlm_rmsnorm(k + h * hd, k + h * hd, L->k_norm, hd, c->norm_eps);
        }
    }
}

static void task_rope_store(void *ctx, int64_t task, int thread) {
    (void)thread;
    fwd *f = ctx;
    const mlm_config *c = &f->m->local;
    int64_t qdim = (int64_t)c->n_head * c->head_dim, kvdim = (int64_t)c->n_kv_head * c->head_dim;
    int32_t t0 = (int32_t)task * TOK_CHUNK, t1 = t0 + TOK_CHUNK < f->n ? t0 + TOK_CHUNK : f->n;
    if (f->layer->bq || f->layer->q_norm) qkv_extras(f, f->layer, t0, t1);
    mlm_rope_apply(f->m, f->s.q + t0 * qdim, qdim, t1 - t0, f->b->pos + t0, c->n_head);
    mlm_rope_apply(f->m, f->s.k + t0 * kvdim, kvdim, t1 - t0, f->b->pos + t0, c->n_kv_head);
    for (int32_t t = t0; t < t1; t++)
        mlm_op_kv_store(f->kv, f->b->blocks[t], f->b->kv_idx[t], f->s.k + t * kvdim,
                        f->s.v + t * kvdim);
}

/* Attention task TASK of the job running (f->run) as a kernel job. */
static void att_job(void *user, int64_t task, mlm_attn_job *job) {
    const fwd *f = user;
    const mlm_config *c = &f->m->local;
    const att_tile *a = &f->run[task];
    int64_t qdim = (int64_t)c->n_head * c->head_dim;
    int cross = a->n_ctx > 0; /* the image's entries, not the sequence's own */
    *job = (mlm_attn_job){.out = f->s.att + a->t0 * qdim,
                          .out_stride = qdim,
                          .q = f->s.q + a->t0 * qdim,
                          .q_stride = qdim,
                          .kv = cross ? f->xkv : f->kv,
                          .blocks = cross ? f->b->xblocks[a->t0] : f->b->blocks[a->t0],
                          .q0 = a->q0,
                          .n_q = a->n_q,
                          .kv_head = a->kv_head,
                          .group = c->n_head / c->n_kv_head,
                          .hh0 = a->hh0,
                          .n_hh = a->n_hh,
                          .head_dim = c->head_dim,
                          .n_ctx = a->n_ctx};
}

/* The N attention tasks of TILES as one job. */
static void attention(fwd *f, mlm_pool *pool, const att_tile *tiles, int64_t n) {
    f->run = tiles;
    mlm_op_attention(&f->ops, pool, n, att_job, f);
}

/* Appends the tasks of tokens [S, E) (one query tile) to TILES: times KV heads and head
 * chunks. */
static void add_tiles(const mlm_config *c, const mlm_fwd_batch *b, int32_t s, int32_t e,
                      int32_t n_ctx, att_tile *tiles, int64_t *n) {
    int group = c->n_head / c->n_kv_head;
    for (int kvh = 0; kvh < c->n_kv_head; kvh++)
        for (int hh = 0; hh < group; hh += MLM_ATT_HH)
            tiles[(*n)++] =
                (att_tile){.t0 = s,
                           .q0 = b->kv_idx[s],
                           .n_q = e - s,
                           .n_ctx = n_ctx,
                           .kv_head = (int16_t)kvh,
                           .hh0 = (int16_t)hh,
                           .n_hh = (int16_t)(group - hh < MLM_ATT_HH ? group - hh : MLM_ATT_HH)};
}

/* The attention tasks of the batch: runs of consecutive entries of one sequence, cut into
 * query tiles, times KV heads and head chunks; the latest tiles (the most work) first. The
 * cross-attention tasks: runs of tokens that see the same image entries. */
static void plan_attention(fwd *f) {
    const mlm_config *c = &f->m->local;
    const mlm_fwd_batch *b = f->b;
    f->n_tiles = f->n_xtiles = 0;
    for (int32_t t0 = 0; t0 < b->n;) {
        int32_t t1 = t0 + 1;
        while (t1 < b->n && b->blocks[t1] == b->blocks[t0] && b->kv_idx[t1] == b->kv_idx[t1 - 1] + 1) t1++;
        for (int32_t e = t1; e > t0; e -= MLM_ATT_QT)
            add_tiles(c, b, e - MLM_ATT_QT > t0 ? e - MLM_ATT_QT : t0, e, 0, f->s.tiles,
                      &f->n_tiles);
        t0 = t1;
    }
    if (!b->xn) return;
    for (int32_t t0 = 0; t0 < b->n;) {
        int32_t t1 = t0 + 1;
        while (t1 < b->n && b->xn[t1] == b->xn[t0] && b->xblocks[t1] == b->xblocks[t0])
            t1++;
        for (int32_t s = t0; s < t1 && b->xn[t0] > 0; s += MLM_ATT_QT)
            add_tiles(c, b, s, s + MLM_ATT_QT < t1 ? s + MLM_ATT_QT : t1, b->xn[t0], f->s.xtiles,
                      &f->n_xtiles);
        t0 = t1;
    }
}

/* The embedding rows of the tokens; under TP this rank holds rows [vocab0, vocab0 +
 * n_vocab_local) and writes zeros for the others, which the all-reduce then fills in exactly
 * (one rank's row plus zeros). */
static void embed(const mlm_model *m, float *x, const int32_t *tokens, int32_t n) {
    const mlm_weight *e = &m->tok_emb;
    for (int32_t t = 0; t < n; t++) {
        float *xt = x + (int64_t)t * e->cols;
        int64_t r = (int64_t)tokens[t] - m->vocab0;
        if (r < 0 || r >= e->rows) { /* e->rows: n_vocab_local, + the image token rows */
            memset(xt, 0, (size_t)e->cols * sizeof *xt);
        } else if (e->type == MLM_W_F32) {
            memcpy(xt, (const float *)e->data + r * e->cols, (size_t)e->cols * sizeof *xt);
        } else if (mlm_wtype_is_native(e->type)) { /* the file's values, exactly */
            mlm_qpanel_decode_row((mlm_qkind)mlm_wtype_qkind(e->type), e->data, e->cols, r, xt);
        } else {
            const uint16_t *row = (const uint16_t *)e->data + r * e->cols;
            for (int64_t i = 0; i < e->cols; i++) xt[i] = mlm_bf16_to_f32(row[i]);
        }
    }
}

// ---- row-parallel products: wo and w2 in K chunks ----

/* A row-parallel product's output is the sum, in chunk order, of each K chunk's product
 * computed from zero by the kernel (model.h): partial 0, plus partial 1, plus ... One process
 * adds them in the product's tasks (the op layer's mlm_op_matmul_chunks); a TP rank computes
 * its own chunks' partials apart, every rank gathers all of them and adds them in the same
 * order (task_fold). So the bits of one process and of every mesh are the same, in every
 * profile. The input is prepared chunk by chunk (mlm_op_prepare_chunks: each chunk quantized
 * as a row of its own), as a rank that holds only some chunks prepares it. */

/* Tokens of the gathered slab (f->slab0 on, f->slab_n of them; rank r's chunks c at
 * ((r * slab_n + t) * chunks + c) * d) summed in the global chunk order r * chunks + c, then
 * added to the residual (f->ractive) or stored in f->rout. */
static void task_fold(void *ctx, int64_t task, int thread) {
    fwd *f = ctx;
    int64_t d = f->rw->rows, sn = f->slab_n;
    int32_t chunks = mlm_weight_chunks(f->rw), tp = f->m->tp_size;
    int64_t t0 = task * TOK_CHUNK, t1 = t0 + TOK_CHUNK < sn ? t0 + TOK_CHUNK : sn;
    float *sum = f->s.fold + (size_t)thread * (size_t)fold_floats(f->n, d);
    for (int64_t t = t0; t < t1; t++) {
        /* rank 0's chunk 0, plus each further chunk in turn: per element, one process's adds */
        memcpy(sum, f->s.gath + t * chunks * d, (size_t)d * sizeof *sum);
        for (int32_t r = 0; r < tp; r++)
            for (int32_t c = r ? 0 : 1; c < chunks; c++)
                mlm_vec_add(sum, f->s.gath + ((r * sn + t) * chunks + c) * d, d);
        float *at = (f->ractive ? f->s.x : f->rout) + (f->slab0 + t) * d;
        if (f->ractive) mlm_vec_add(at, sum, d);
        else memcpy(at, sum, (size_t)d * sizeof *sum);
    }
}

/* OUT (n rows of W->rows) = W . SRC (n rows of W->cols) as the sum of W's K chunks in order
 * (above); with RESIDUAL the result is added to f->s.x instead (OUT is then scratch). Under TP,
 * W holds this rank's chunks: their partials are gathered from every rank (an all-gather of
 * rows x chunks floats per token, GATHER_TOKENS tokens at a time) and summed in the same
 * order on every rank; or, with MLM_TP_SUM, each rank sums its own chunks and the ranks' sums
 * are all-reduced (fewer bytes, but not one process's bits). */
static mlm_status row_parallel(fwd *f, mlm_pool *pool, const mlm_weight *w, const float *src,
                               float *out, int residual, mlm_error *err) {
    const mlm_model *m = f->m;
    int32_t n = f->n, chunks = mlm_weight_chunks(w);
    int tp = m->tp_size;
    mlm_op_prepare_chunks(&f->ops, pool, w, src, n, f->s.ax, TOK_CHUNK);
    int sum = tp > 1 && m->tp_reduce == MLM_TP_SUM; /* each rank's chunks summed, all-reduced */
    mlm_op_matmul_chunks(&f->ops, pool, tp == 1 || sum ? out : f->s.part, tp == 1 || sum,
                         tp == 1 && residual ? f->s.x : NULL, f->s.fold, fold_floats(n, w->rows));
    if (tp == 1) return MLM_OK;
    if (sum) {
        int64_t nd = (int64_t)n * w->rows;
        mlm_status st = mlm_comm_allreduce_sum(m->tp, out, nd, err);
        if (!st && residual) mlm_vec_add(f->s.x, out, nd);
        return st;
    }
    size_t counts[256];
    if (tp > 256) return mlm_error_set(err, MLM_ERR_CAPACITY, "mesh: TP %d exceeds 256", tp);
    f->rw = w, f->rout = out, f->ractive = residual;
    /* slabs of GATHER_TOKENS tokens: every rank's partials of the slab, then their sum */
    for (int32_t t0 = 0; t0 < n; t0 += GATHER_TOKENS) {
        f->slab0 = t0, f->slab_n = n - t0 < GATHER_TOKENS ? n - t0 : GATHER_TOKENS;
        size_t floats = (size_t)f->slab_n * (size_t)chunks * (size_t)w->rows;
        for (int r = 0; r < tp; r++) counts[r] = floats * sizeof(float);
        mlm_status st =
            mlm_comm_allgatherv(m->tp, f->s.part + (size_t)t0 * (size_t)chunks * (size_t)w->rows,
                                f->s.gath, counts, err);
        if (st) return st;
        mlm_pool_run(pool, (f->slab_n + TOK_CHUNK - 1) / TOK_CHUNK, task_fold, f);
    }
    return MLM_OK;
}

/* LOGITS (N rows of n_vocab) from every rank's slice: each rank's rows of its slice (N x its
 * count) are gathered in rank order into ALL, then laid out by vocabulary id. */
static mlm_status gather_logits(const mlm_model *m, const float *local, float *all, int32_t n,
                                float *logits, mlm_error *err) {
    size_t counts[256];
    int tp = m->tp_size;
    if (tp > 256) return mlm_error_set(err, MLM_ERR_CAPACITY, "mesh: TP %d exceeds 256", tp);
    for (int r = 0; r < tp; r++) {
        int32_t v0, nv;
        mlm_model_vocab_slice(m->cfg.n_vocab, r, tp, &v0, &nv);
        counts[r] = (size_t)n * (size_t)nv * sizeof(float);
    }
    mlm_status st = mlm_comm_allgatherv(m->tp, local, all, counts, err);
    if (st) return st;
    const float *src = all;
    int64_t V = m->cfg.n_vocab;
    for (int r = 0; r < tp; r++) {
        int32_t v0, nv;
        mlm_model_vocab_slice(m->cfg.n_vocab, r, tp, &v0, &nv);
        for (int32_t j = 0; j < n; j++)
            memcpy(logits + j * V + v0, src + (int64_t)j * nv, (size_t)nv * sizeof *logits);
        src += (int64_t)n * nv;
    }
    return MLM_OK;
}

// ---- Llama 3.2 Vision's cross-attention layers ----

/* Per token that sees an image: q RMSNormed per head by q_norm; the others' attention rows
 * zeroed (they skip the layer). */
static void task_cross_q(void *ctx, int64_t task, int thread) {
    (void)thread;
    fwd *f = ctx;
    const mlm_config *c = &f->m->local;
    const mlm_layer *L = f->layer;
    int64_t hd = c->head_dim, qdim = (int64_t)c->n_head * hd;
    int32_t t0 = (int32_t)task * TOK_CHUNK, t1 = t0 + TOK_CHUNK < f->n ? t0 + TOK_CHUNK : f->n;
    for (int32_t t = t0; t < t1; t++) {
        float *q = f->s.q + t * qdim;
        if (f->b->xn[t] > 0)
            for (int h = 0; h < c->n_head; h++)
                mlm_rmsnorm(q + h * hd, q + h * hd, L->q_norm, hd, c->norm_eps);
        else
            memset(f->s.att + t * qdim, 0, (size_t)qdim * sizeof *f->s.att);
    }
}

/* x += gate * xb for the tokens that see an image. */
static void task_gated_add(void *ctx, int64_t task, int thread) {
    (void)thread;
    fwd *f = ctx;
    int64_t d = f->m->local.n_embd;
    int32_t t0 = (int32_t)task * TOK_CHUNK, t1 = t0 + TOK_CHUNK < f->n ? t0 + TOK_CHUNK : f->n;
    for (int32_t t = t0; t < t1; t++)
        if (f->b->xn[t] > 0)
            for (int64_t i = 0; i < d; i++)
                f->s.x[t * d + i] += f->xgate * f->s.xb[t * d + i];
}

/* The K/V rows of the current chunk: k RMSNormed per head, both stored. */
static void task_cross_store(void *ctx, int64_t task, int thread) {
    (void)thread;
    fwd *f = ctx;
    const mlm_config *c = &f->m->local;
    int64_t hd = c->head_dim, kvdim = (int64_t)c->n_kv_head * hd;
    int32_t t0 = (int32_t)task * TOK_CHUNK, t1 = t0 + TOK_CHUNK < f->n ? t0 + TOK_CHUNK : f->n;
    for (int32_t t = t0; t < t1; t++) {
        float *k = f->s.k + t * kvdim;
        for (int h = 0; h < c->n_kv_head; h++)
            mlm_rmsnorm(k + h * hd, k + h * hd, f->layer->k_norm, hd, c->norm_eps);
        mlm_op_kv_store(f->xkv, f->xblocks, f->entry0 + t, k, f->s.v + t * kvdim);
    }
}

// ---- the layers' two blocks, shared by self- and cross-attention layers ----

/* The attention block of layer L. Self-attention: x += wo(Attn(RoPE(wq, wk, wv of norm(x))))
 * over the paged KV, the step's keys stored before any query reads (causality comes from
 * each query reading entries 0..kv_idx of its own sequence). Cross-attention (models.md 6.5),
 * for the tokens that see an image: x += tanh(gate_attn) * wo(Attn(q_norm(wq(norm(x))),
 * image K/V)); the others pass unchanged (Meta's row mask). */
static mlm_status attention_block(fwd *f, mlm_pool *pool, const mlm_layer *L, mlm_error *err) {
    int32_t n = f->n;
    int64_t d = f->m->local.n_embd;
    if (!L->cross) {
        prepare(f, pool, f->s.x, L->attn_norm, f->s.xb, n, d,
                forms_of(f, &L->wq) | forms_of(f, &L->wk) | forms_of(f, &L->wv));
        matmul(f, pool, (const mlm_weight *[]){&L->wq, &L->wk, &L->wv},
               (float *[]){f->s.q, f->s.k, f->s.v}, 3, MLM_EPI_NONE);
        f->layer = L;
        mlm_pool_run(pool, (n + TOK_CHUNK - 1) / TOK_CHUNK, task_rope_store, f);
        attention(f, pool, f->s.tiles, f->n_tiles);
        return row_parallel(f, pool, &L->wo, f->s.att, f->s.xb, 1, err);
    }
    f->layer = L;
    f->xkv = &f->b->xkv[L->kv_layer];
    prepare(f, pool, f->s.x, L->attn_norm, f->s.xb, n, d, forms_of(f, &L->wq));
    matmul(f, pool, (const mlm_weight *[]){&L->wq}, (float *[]){f->s.q}, 1, MLM_EPI_NONE);
    mlm_pool_run(pool, (n + TOK_CHUNK - 1) / TOK_CHUNK, task_cross_q, f);
    attention(f, pool, f->s.xtiles, f->n_xtiles);
    mlm_status st = row_parallel(f, pool, &L->wo, f->s.att, f->s.xb, 0, err);
    if (st) return st;
    f->xgate = tanhf(L->gates[0]);
    mlm_pool_run(pool, (n + TOK_CHUNK - 1) / TOK_CHUNK, task_gated_add, f);
    return MLM_OK;
}

/* The MLP block of layer L: x += w2(SiLU(w1(norm(x))) * w3(norm(x))); in a cross-attention
 * layer x += tanh(gate_ffn) * that, for the tokens that see an image. */
static mlm_status mlp_block(fwd *f, mlm_pool *pool, const mlm_layer *L, mlm_error *err) {
    int32_t n = f->n;
    int64_t d = f->m->local.n_embd;
    prepare(f, pool, f->s.x, L->ffn_norm, f->s.xb, n, d, forms_of(f, &L->w1) | forms_of(f, &L->w3));
    matmul(f, pool, (const mlm_weight *[]){&L->w1, &L->w3}, (float *[]){f->s.gate, f->s.up}, 2,
           MLM_EPI_SWIGLU);
    mlm_status st = row_parallel(f, pool, &L->w2, f->s.gate, f->s.xb, !L->cross, err);
    if (st || !L->cross) return st;
    f->xgate = tanhf(L->gates[1]);
    mlm_pool_run(pool, (n + TOK_CHUNK - 1) / TOK_CHUNK, task_gated_add, f);
    return MLM_OK;
}

void mlm_forward_cross_kv(const mlm_model *m, const float *x, int64_t n, const mlm_paged_kv *xkv,
                          const int32_t *blocks, int32_t entry0, int32_t max_tokens, void *scratch,
                          mlm_pool *pool) {
    const mlm_config *c = &m->local;
    fwd f;
    fwd_init(&f, m, 1, max_tokens, 0, pool, scratch);
    f.xblocks = blocks;
    int forms = 0;
    for (int32_t l = 0; l < c->n_layer; l++)
        if (m->layers[l].cross)
            forms |= forms_of(&f, &m->layers[l].wk) | forms_of(&f, &m->layers[l].wv);
    for (int64_t r0 = 0; r0 < n; r0 += max_tokens) {
        int32_t rows = (int32_t)(n - r0 < max_tokens ? n - r0 : max_tokens);
        prepare(&f, pool, x + r0 * c->n_embd, NULL, NULL, rows, c->n_embd, forms);
        f.n = rows;
        f.entry0 = entry0 + (int32_t)r0;
        for (int32_t l = 0; l < c->n_layer; l++) {
            const mlm_layer *L = &m->layers[l];
            if (!L->cross) continue;
            f.layer = L;
            f.xkv = &xkv[L->kv_layer];
            matmul(&f, pool, (const mlm_weight *[]){&L->wk, &L->wv}, (float *[]){f.s.k, f.s.v}, 2,
                   MLM_EPI_NONE);
            mlm_pool_run(pool, (rows + TOK_CHUNK - 1) / TOK_CHUNK, task_cross_store, &f);
        }
    }
}

// ---- the pass ----

mlm_status mlm_forward(const mlm_model *m, const mlm_fwd_batch *b, const mlm_paged_kv *kv,
                       void *scratch, mlm_pool *pool, float *logits, mlm_error *err) {
    const mlm_config *c = &m->local; /* this rank's shard: its heads and MLP columns */
    int32_t n = b->n, n_logits = 0;
    int tp = m->tp_size;
    for (int32_t t = 0; t < n; t++) n_logits += b->want_logits && b->want_logits[t];
    fwd f;
    fwd_init(&f, m, tp, n, n_logits, pool, scratch);
    f.b = b;
    int64_t d = c->n_embd;
    mlm_status st = MLM_OK;
    plan_attention(&f);

    embed(m, f.s.x, b->tokens, n);
    if (tp > 1 && (st = mlm_comm_allreduce_sum(m->tp, f.s.x, n * d, err))) return st;
    for (int l = 0; l < c->n_layer && !st; l++) {
        const mlm_layer *L = &m->layers[l];
        if (L->cross && !f.n_xtiles) continue; /* no token sees an image */
        f.kv = L->cross ? NULL : &kv[L->kv_layer];
        st = attention_block(&f, pool, L, err);
        if (!st) st = mlp_block(&f, pool, L, err);
    }
    if (st || !n_logits) return st;
    /* Final norm and LM head only for the tokens that asked. */
    int32_t j = 0;
    for (int32_t t = 0; t < n; t++)
        if (b->want_logits[t])
            memcpy(f.s.xf + (j++) * d, f.s.x + t * d, (size_t)d * sizeof *f.s.xf);
    prepare(&f, pool, f.s.xf, m->norm, f.s.xf, n_logits, d, forms_of(&f, &m->output));
    float *head_out = tp > 1 ? f.s.logits_local : logits;
    matmul(&f, pool, (const mlm_weight *[]){&m->output}, (float *[]){head_out}, 1, MLM_EPI_NONE);
    return tp > 1 ? gather_logits(m, f.s.logits_local, f.s.logits_all, n_logits, logits, err)
                  : MLM_OK;
}
