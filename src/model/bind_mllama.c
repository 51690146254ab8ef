/* model/bind_mllama.c: what Llama 3.2 Vision (mllama) adds to the Llama binder: the text
 * decoder's tensor names in HF's MllamaForConditionalGeneration layout (language_model.*) and
 * Meta's consolidated one (text_model.*), the learnable image-token embedding rows, the
 * cross-attention layers' q/k RMSNorms and gates, and the vision tower and projector
 * (models.md 6.7). Meta's compact tile tables ([NT, NT, ...]) become HF's per-aspect-ratio
 * tables, so one forward serves both. Meta checkpoints are read from one shard (11B). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/bind.h"
#include "tensor/dtype.h"

// ---- names ----

static void MLM_PRINTF(3, 4) fmt(char *buf, size_t size, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, size, f, ap);
    va_end(ap);
}

// ---- pieces ----

/* The value of the one-element tensor NAME (a gate). */
static mlm_status gate(mlm_binder *b, const char *name, float *out) {
    const mlm_tensor_view *t = mlm_bind_find(b, name, 0);
    if (!t) return mlm_error_set(b->err, MLM_ERR_FORMAT, "model: missing tensor '%s'", name);
    if (mlm_tensor_numel(t) != 1)
        return mlm_error_set(b->err, MLM_ERR_FORMAT, "model: gate '%s' has %lld values, not 1",
                             name, (long long)mlm_tensor_numel(t));
    return mlm_tensor_to_f32(t, out, 1, b->err);
}

/* N floats the model owns, zeroed. */
static mlm_status owned_floats(mlm_binder *b, int64_t n, float **out) {
    float *p = calloc((size_t)(n ? n : 1), sizeof *p);
    *out = NULL;
    if (!p) return mlm_error_set(b->err, MLM_ERR_NOMEM, "model: out of memory");
    mlm_status st = mlm_model_own(b->m, p, (size_t)n * sizeof *p, b->err); /* frees p on failure */
    if (!st) *out = p;
    return st;
}

/* Gates A and B (tensor names) into a 2-float vector. */
static mlm_status gate_pair(mlm_binder *b, const char *a, const char *c, const float **out) {
    float *g = NULL;
    mlm_status st = owned_floats(b, 2, &g);
    if (!st) st = gate(b, a, &g[0]);
    if (!st) st = gate(b, c, &g[1]);
    *out = g;
    return st;
}

/* Meta keeps the image token's 8 rows in text_model.learnable_embedding: the embedding
 * becomes (n_vocab + 8, n_embd), in the type it was bound in. */
static mlm_status append_learnable(mlm_binder *b) {
    mlm_model *m = b->m;
    mlm_weight *e = &m->tok_emb;
    int64_t d = e->cols, extra = m->n_emb_extra;
    const char *name = "text_model.learnable_embedding.weight";
    const float *rows;
    mlm_status st = mlm_bind_vector(b, name, extra * d, &rows);
    if (st) return st;
    const mlm_tensor_view *t = mlm_bind_find(b, name, 0);
    if (t->n_dim != 2 || t->shape[0] != extra)
        return mlm_error_set(b->err, MLM_ERR_FORMAT, "model: tensor '%s' must be [%lld, %lld]",
                             name, (long long)extra, (long long)d);
    size_t es = e->type == MLM_W_BF16 ? 2 : 4, old = (size_t)(e->rows * d) * es;
    char *buf = malloc(old + (size_t)(extra * d) * es);
    if (!buf) return mlm_error_set(b->err, MLM_ERR_NOMEM, "model: out of memory for the embedding");
    memcpy(buf, e->data, old);
    for (int64_t i = 0; i < extra * d; i++) {
        if (es == 2)
            ((uint16_t *)(buf + old))[i] = mlm_f32_to_bf16(rows[i]);
        else
            ((float *)(buf + old))[i] = rows[i];
    }
    if ((st = mlm_model_own(m, buf, old + (size_t)(extra * d) * es, b->err))) return st;
    e->data = buf;
    e->rows += extra;
    return MLM_OK;
}

/* The cross-attention layers' q/k norms (head_dim) and gates. */
static mlm_status bind_cross(mlm_binder *b) {
    mlm_model *m = b->m;
    char q[160], k[160], ga[160], gf[160];
    for (int32_t l = 0; l < m->cfg.n_layer; l++) {
        mlm_layer *L = &m->layers[l];
        if (!L->cross) continue;
        if (b->meta) {
            const char *p = "text_model.cross_attention_layers";
            fmt(q, sizeof q, "%s.%d.attention.q_norm.weight", p, L->kv_layer);
            fmt(k, sizeof k, "%s.%d.attention.k_norm.weight", p, L->kv_layer);
            fmt(ga, sizeof ga, "%s.%d.gate_attn", p, L->kv_layer);
            fmt(gf, sizeof gf, "%s.%d.gate_ffwd", p, L->kv_layer);
        } else {
            const char *p = "language_model.model.layers";
            fmt(q, sizeof q, "%s.%d.cross_attn.q_norm.weight", p, l);
            fmt(k, sizeof k, "%s.%d.cross_attn.k_norm.weight", p, l);
            fmt(ga, sizeof ga, "%s.%d.cross_attn_attn_gate", p, l);
            fmt(gf, sizeof gf, "%s.%d.cross_attn_mlp_gate", p, l);
        }
        mlm_status st;
        if ((st = mlm_bind_vector(b, q, m->cfg.head_dim, &L->q_norm)) ||
            (st = mlm_bind_vector(b, k, m->cfg.head_dim, &L->k_norm)) ||
            (st = gate_pair(b, ga, gf, &L->gates)))
            return st;
    }
    return MLM_OK;
}

// ---- the vision tower ----

/* Matrix NAME (ROWS, COLS; a contiguous tensor of more dimensions is read flat) in the
 * profile's vision type. */
static mlm_status vmat(mlm_binder *b, const char *name, int64_t rows, int64_t cols,
                       mlm_weight *out) {
    mlm_bind_slice s = {0, rows, rows, 0, cols, cols, 1};
    return mlm_bind_tensor(b, name, b->m->profile.vision, s, 0, 0, out);
}

/* Meta's compact table E (NT, NT, ROWS_PER, D) -> HF's per-aspect-ratio table
 * (A + 1, NT, ROWS_PER, D): for id a = i + 1 with grid (r, c) = aspect[i], tile t < r * c
 * holds E[t / c, t % c]; row 0 and the other tiles are zero (models.md 6.7). DST is zeroed. */
static void aspect_table(const mlm_vision_config *v, const float *e, int64_t per, float *dst) {
    int64_t nt = v->max_tiles;
    for (int32_t i = 0; i < v->n_aspect; i++) {
        int32_t rows = v->aspect[i][0], cols = v->aspect[i][1];
        for (int32_t t = 0; t < rows * cols && t < nt; t++)
            memcpy(dst + ((int64_t)(i + 1) * nt + t) * per,
                   e + ((int64_t)(t / cols) * nt + t % cols) * per, (size_t)per * sizeof *dst);
    }
}

/* Meta's compact table NAME, [NT, NT, per / D, D], as HF's table (see aspect_table) of f32. */
static mlm_status meta_table(mlm_binder *b, const char *name, int64_t per, float **out) {
    const mlm_vision_config *v = &b->m->cfg.vision;
    int64_t nt = v->max_tiles;
    const float *e = NULL;
    float *dst = NULL;
    mlm_status st = mlm_bind_vector(b, name, nt * nt * per, &e);
    if (!st) st = owned_floats(b, (int64_t)(v->n_aspect + 1) * nt * per, &dst);
    if (st) return st;
    const mlm_tensor_view *t = mlm_bind_find(b, name, 0);
    if (t->n_dim < 2 || t->shape[0] != nt || t->shape[1] != nt)
        return mlm_error_set(b->err, MLM_ERR_FORMAT,
                             "model: tensor '%s' must start with [%lld, %lld] (max tiles)", name,
                             (long long)nt, (long long)nt);
    aspect_table(v, e, per, dst);
    *out = dst;
    return MLM_OK;
}

/* The tile positional table as a ((A + 1) * NT * T, D) matrix in the embedding's type. */
static mlm_status bind_tile_pos(mlm_binder *b, const char *name, mlm_weight *out) {
    mlm_model *m = b->m;
    const mlm_vision_config *v = &m->cfg.vision;
    int64_t d = v->n_embd, T = m->vision.n_tok, nt = v->max_tiles, a1 = v->n_aspect + 1;
    mlm_tensor_view view;
    if (b->meta) { /* built from the compact table, in f32 (or bf16 for a bf16 embedding) */
        float *table = NULL;
        mlm_status st = meta_table(b, name, T * d, &table);
        if (st) return st;
        view = (mlm_tensor_view){.name = name,
                                 .dtype = MLM_DTYPE_F32,
                                 .n_dim = 2,
                                 .shape = {a1 * nt * T, d},
                                 .stride = {d, 1},
                                 .data = table,
                                 .file = name};
    } else {
        const mlm_tensor_view *t = mlm_bind_find(b, name, 0);
        if (!t) return mlm_error_set(b->err, MLM_ERR_FORMAT, "model: missing tensor '%s'", name);
        if (t->n_dim != 2 || t->shape[0] != a1 || t->shape[1] != nt * T * d || t->stride[1] != 1 ||
            t->stride[0] != nt * T * d || t->dtype == MLM_DTYPE_GGML)
            return mlm_error_set(b->err, MLM_ERR_FORMAT,
                                 "model: tensor '%s' must be a contiguous [%lld, %lld] table (the "
                                 "vision config's aspect ratios + 1, tiles x tokens x width)",
                                 name, (long long)a1, (long long)(nt * T * d));
        view = *t; /* read as (A + 1) * NT * T rows of D */
        view.shape[0] = a1 * nt * T, view.shape[1] = d, view.stride[0] = d;
    }
    return mlm_bind_view(b, name, &view, m->profile.emb, out);
}

static mlm_status bind_vision_layer(mlm_binder *b, int32_t i, mlm_vision_layer *y) {
    const mlm_vision_config *v = &b->m->cfg.vision;
    int global = i >= v->n_layer;
    int32_t n = global ? i - v->n_layer : i;
    int64_t d = v->n_embd, ff = v->n_ff;
    char p[96], nm[9][200];
    /* HF / Meta names of: ln1 w, ln1 b, ln2 w, ln2 b, wq, wk, wv, wo, fc1, fc2 (+ .bias) */
    static const char *hf[] = {
        "input_layernorm",  "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
        "self_attn.v_proj", "self_attn.o_proj",         "mlp.fc1",          "mlp.fc2"};
    static const char *mt[] = {"ln_1",    "ln_2",    "attn.wq",  "attn.wk",
                               "attn.wv", "attn.wo", "mlp.c_fc", "mlp.c_proj"};
    if (b->meta)
        fmt(p, sizeof p, "vision_model.vision_encoder.%s.resblocks.%d",
            global ? "global_transformer" : "transformer", n);
    else
        fmt(p, sizeof p, "vision_model.%s.layers.%d", global ? "global_transformer" : "transformer",
            n);
    const char **names = b->meta ? mt : hf;
    for (int k = 0; k < 8; k++)
        fmt(nm[k], sizeof nm[k], "%s.%s", p, names[k]);
    char w[220], bias[220];
    mlm_status st = MLM_OK;
#define NAMES(k) (fmt(w, sizeof w, "%s.weight", nm[k]), fmt(bias, sizeof bias, "%s.bias", nm[k]))
    NAMES(0);
    if (!st) st = mlm_bind_vector(b, w, d, &y->ln1_w);
    if (!st) st = mlm_bind_vector(b, bias, d, &y->ln1_b);
    NAMES(1);
    if (!st) st = mlm_bind_vector(b, w, d, &y->ln2_w);
    if (!st) st = mlm_bind_vector(b, bias, d, &y->ln2_b);
    mlm_weight *qkvo[4] = {&y->wq, &y->wk, &y->wv, &y->wo};
    for (int k = 0; k < 4 && !st; k++) {
        NAMES(2 + k);
        st = vmat(b, w, d, d, qkvo[k]);
    }
    NAMES(6);
    if (!st) st = vmat(b, w, ff, d, &y->fc1);
    if (!st) st = mlm_bind_vector(b, bias, ff, &y->fc1_b);
    NAMES(7);
    if (!st) st = vmat(b, w, d, ff, &y->fc2);
    if (!st) st = mlm_bind_vector(b, bias, d, &y->fc2_b);
#undef NAMES
    if (!st && global) {
        char ga[160], gf[160];
        fmt(ga, sizeof ga, "%s.gate_attn", p);
        fmt(gf, sizeof gf, "%s.gate_ffn", p);
        st = gate_pair(b, ga, gf, &y->gates);
    }
    return st;
}

static mlm_status bind_vision(mlm_binder *b) {
    mlm_model *m = b->m;
    const mlm_vision_config *v = &m->cfg.vision;
    mlm_vision_tower *t = &m->vision;
    int64_t d = v->n_embd, T = t->n_tok, nt = v->max_tiles, a1 = v->n_aspect + 1;
    int64_t pix = (int64_t)v->n_channels * v->patch_size * v->patch_size;
    float *gates = NULL;
    mlm_status st = owned_floats(b, 3, &gates);
    if (st) return st;
    t->gates = gates;
    if (b->meta) {
        const char *p = "vision_model.vision_encoder";
        char n[160];
        float *pre = NULL, *post = NULL;
#define N(s) (fmt(n, sizeof n, "%s.%s", p, s), n)
        if ((st = vmat(b, N("conv1._linear.weight"), d, pix, &t->patch)) ||
            (st = mlm_bind_vector(b, N("class_embedding"), d, &t->class_emb)) ||
            (st = mlm_bind_vector(b, N("positional_embedding"), T * d, &t->pos_emb)) ||
            (st = bind_tile_pos(b, N("gated_positional_embedding"), &t->tile_pos)) ||
            (st = gate(b, N("gated_positional_embedding_gate"), &gates[0])) ||
            (st = meta_table(b, N("pre_tile_pos_embed.embedding"), d, &pre)) ||
            (st = gate(b, N("pre_tile_pos_embed.gate"), &gates[1])) ||
            (st = meta_table(b, N("post_tile_pos_embed.embedding"), d, &post)) ||
            (st = gate(b, N("post_tile_pos_embed.gate"), &gates[2])) ||
            (st = mlm_bind_vector(b, N("ln_pre.weight"), d, &t->ln_pre_w)) ||
            (st = mlm_bind_vector(b, N("ln_pre.bias"), d, &t->ln_pre_b)) ||
            (st = mlm_bind_vector(b, N("ln_post.weight"), d, &t->ln_post_w)) ||
            (st = mlm_bind_vector(b, N("ln_post.bias"), d, &t->ln_post_b)) ||
            (st = vmat(b, "vision_model.vision_projection.weight", m->cfg.n_embd, v->output_dim,
                       &t->proj)) ||
            (st = mlm_bind_vector(b, "vision_model.vision_projection.bias", m->cfg.n_embd,
                                  &t->proj_b)))
            return st;
#undef N
        t->pre_tile = pre, t->post_tile = post;
    } else {
        const char *p = "vision_model";
        char n[160];
#define N(s) (fmt(n, sizeof n, "%s.%s", p, s), n)
        if ((st = vmat(b, N("patch_embedding.weight"), d, pix, &t->patch)) ||
            (st = mlm_bind_vector(b, N("class_embedding"), d, &t->class_emb)) ||
            (st = mlm_bind_vector(b, N("gated_positional_embedding.embedding"), T * d,
                                  &t->pos_emb)) ||
            (st = bind_tile_pos(b, N("gated_positional_embedding.tile_embedding.weight"),
                                &t->tile_pos)) ||
            (st = gate(b, N("gated_positional_embedding.gate"), &gates[0])) ||
            (st = mlm_bind_vector(b, N("pre_tile_positional_embedding.embedding.weight"),
                                  a1 * nt * d, &t->pre_tile)) ||
            (st = gate(b, N("pre_tile_positional_embedding.gate"), &gates[1])) ||
            (st = mlm_bind_vector(b, N("post_tile_positional_embedding.embedding.weight"),
                                  a1 * nt * d, &t->post_tile)) ||
            (st = gate(b, N("post_tile_positional_embedding.gate"), &gates[2])) ||
            (st = mlm_bind_vector(b, N("layernorm_pre.weight"), d, &t->ln_pre_w)) ||
            (st = mlm_bind_vector(b, N("layernorm_pre.bias"), d, &t->ln_pre_b)) ||
            (st = mlm_bind_vector(b, N("layernorm_post.weight"), d, &t->ln_post_w)) ||
            (st = mlm_bind_vector(b, N("layernorm_post.bias"), d, &t->ln_post_b)) ||
            (st =
                 vmat(b, "multi_modal_projector.weight", m->cfg.n_embd, v->output_dim, &t->proj)) ||
            (st = mlm_bind_vector(b, "multi_modal_projector.bias", m->cfg.n_embd, &t->proj_b)))
            return st;
#undef N
    }
    for (int32_t i = 0; i < v->n_layer + v->n_global_layer; i++)
        if ((st = bind_vision_layer(b, i, &t->layers[i]))) return st;
    return MLM_OK;
}

mlm_status mlm_bind_mllama(mlm_binder *b) {
    mlm_status st = b->meta ? append_learnable(b) : MLM_OK;
    if (!st) st = bind_cross(b);
    if (!st) st = bind_vision(b);
    return st;
}

