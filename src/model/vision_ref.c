/* model/vision.c: the mllama vision encoder + multi-modal projector, scalar f32 reference
 * (models.md 6.4, transformers 4.46.3 MllamaVisionModel / Meta VisionEncoder). Loading copies
 * every vision weight out of the checkpoint into one f32 block owned by mlm_vision; the
 * forward is plain loops, one image per call, read top to bottom. Scratch is allocated per
 * call (this is a reference, not the step loop). Does not preprocess images (image/mllama.c)
 * nor run the cross-attention (the text decoder's job). */
#include "model/vision.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

// ---- loading ----

/* Hands out consecutive f32 regions of one block and fills them from the checkpoint. */
typedef struct loader {
    const mlm_checkpoint *ckpt;
    const char *dir;
    float *next, *end;
    mlm_error *err;
} loader;

static int shape_str(char *buf, size_t size, int n_dim, const int64_t *shape) {
    int w = snprintf(buf, size, "[");
    for (int i = 0; i < n_dim && w < (int)size; i++)
        w += snprintf(buf + w, size - (size_t)w, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (w < (int)size) w += snprintf(buf + w, size - (size_t)w, "]");
    return w;
}

/* Copies the tensor NAME (printf format) of shape SHAPE[0..n_dim) into the next region. */
static mlm_status MLM_PRINTF(5, 6)
    take(loader *l, const float **out, int n_dim, const int64_t *shape, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const mlm_tensor_view *t = mlm_checkpoint_find(l->ckpt, name);
    if (!t) return mlm_err_set(l->err, MLM_ERR_FORMAT, "%s: tensor '%s' is missing", l->dir, name);
    int same = t->n_dim == n_dim;
    for (int i = 0; same && i < n_dim; i++)
        same = t->shape[i] == shape[i];
    if (!same) {
        char have[128], want[128];
        shape_str(have, sizeof have, t->n_dim, t->shape);
        shape_str(want, sizeof want, n_dim, shape);
        return mlm_err_set(l->err, MLM_ERR_FORMAT,
                           "%s: tensor '%s' has shape %s, the vision config implies %s", t->file,
                           name, have, want);
    }
    int64_t n = 1;
    for (int i = 0; i < n_dim; i++)
        n *= shape[i];
    MLM_ASSERT(n <= l->end - l->next); /* the block was sized from the same shapes */
    mlm_status st = mlm_tensor_to_f32(t, l->next, n, l->err);
    if (st) {
        mlm_err_prefix(l->err, "%s: tensor '%s'", t->file, name);
        return st;
    }
    *out = l->next;
    l->next += n;
    return MLM_OK;
}

/* A scalar gate ([1]) into *OUT. */
static mlm_status MLM_PRINTF(3, 4) take_gate(loader *l, float *out, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const int64_t one[1] = {1};
    const float *g;
    mlm_status st = take(l, &g, 1, one, "%s", name);
    if (!st) *out = *g;
    return st;
}

static mlm_status take_layer(loader *l, const char *stack, int32_t i, int gated, int64_t d,
                             int64_t ff, mlm_vision_layer *y) {
    const int64_t vec[1] = {d}, sq[2] = {d, d}, up[2] = {ff, d}, upb[1] = {ff}, dn[2] = {d, ff};
    const char *p = "vision_model";
    mlm_status st;
    if ((st = take(l, &y->ln1_w, 1, vec, "%s.%s.layers.%d.input_layernorm.weight", p, stack, i)) ||
        (st = take(l, &y->ln1_b, 1, vec, "%s.%s.layers.%d.input_layernorm.bias", p, stack, i)) ||
        (st = take(l, &y->wq, 2, sq, "%s.%s.layers.%d.self_attn.q_proj.weight", p, stack, i)) ||
        (st = take(l, &y->wk, 2, sq, "%s.%s.layers.%d.self_attn.k_proj.weight", p, stack, i)) ||
        (st = take(l, &y->wv, 2, sq, "%s.%s.layers.%d.self_attn.v_proj.weight", p, stack, i)) ||
        (st = take(l, &y->wo, 2, sq, "%s.%s.layers.%d.self_attn.o_proj.weight", p, stack, i)) ||
        (st = take(l, &y->ln2_w, 1, vec, "%s.%s.layers.%d.post_attention_layernorm.weight", p,
                   stack, i)) ||
        (st = take(l, &y->ln2_b, 1, vec, "%s.%s.layers.%d.post_attention_layernorm.bias", p, stack,
                   i)) ||
        (st = take(l, &y->fc1_w, 2, up, "%s.%s.layers.%d.mlp.fc1.weight", p, stack, i)) ||
        (st = take(l, &y->fc1_b, 1, upb, "%s.%s.layers.%d.mlp.fc1.bias", p, stack, i)) ||
        (st = take(l, &y->fc2_w, 2, dn, "%s.%s.layers.%d.mlp.fc2.weight", p, stack, i)) ||
        (st = take(l, &y->fc2_b, 1, vec, "%s.%s.layers.%d.mlp.fc2.bias", p, stack, i)))
        return st;
    y->gate_attn = y->gate_ffn = 0;
    if (gated && ((st = take_gate(l, &y->gate_attn, "%s.%s.layers.%d.gate_attn", p, stack, i)) ||
                  (st = take_gate(l, &y->gate_ffn, "%s.%s.layers.%d.gate_ffn", p, stack, i))))
        return st;
    return MLM_OK;
}

static mlm_status load_weights(loader *l, mlm_vision *v) {
    const mlm_vision_config *c = &v->cfg;
    const int64_t d = c->n_embd, nt = c->max_tiles, a1 = c->n_aspect + 1, t = v->n_tok;
    const int64_t vec[1] = {d}, patch[4] = {d, c->n_channels, c->patch_size, c->patch_size};
    const int64_t pos[2] = {t, d}, tile_pos[2] = {a1, nt * t * d}, tile[2] = {a1, nt * d};
    const int64_t proj[2] = {v->n_text_embd, c->output_dim}, proj_b[1] = {v->n_text_embd};
    const char *p = "vision_model";
    mlm_status st;
    if ((st = take(l, &v->patch_w, 4, patch, "%s.patch_embedding.weight", p)) ||
        (st = take(l, &v->class_emb, 1, vec, "%s.class_embedding", p)) ||
        (st = take(l, &v->pos_emb, 2, pos, "%s.gated_positional_embedding.embedding", p)) ||
        (st = take(l, &v->tile_pos, 2, tile_pos,
                   "%s.gated_positional_embedding.tile_embedding.weight", p)) ||
        (st = take_gate(l, &v->pos_gate, "%s.gated_positional_embedding.gate", p)) ||
        (st = take(l, &v->pre_tile, 2, tile, "%s.pre_tile_positional_embedding.embedding.weight",
                   p)) ||
        (st = take_gate(l, &v->pre_tile_gate, "%s.pre_tile_positional_embedding.gate", p)) ||
        (st = take(l, &v->post_tile, 2, tile, "%s.post_tile_positional_embedding.embedding.weight",
                   p)) ||
        (st = take_gate(l, &v->post_tile_gate, "%s.post_tile_positional_embedding.gate", p)) ||
        (st = take(l, &v->ln_pre_w, 1, vec, "%s.layernorm_pre.weight", p)) ||
        (st = take(l, &v->ln_pre_b, 1, vec, "%s.layernorm_pre.bias", p)) ||
        (st = take(l, &v->ln_post_w, 1, vec, "%s.layernorm_post.weight", p)) ||
        (st = take(l, &v->ln_post_b, 1, vec, "%s.layernorm_post.bias", p)) ||
        (st = take(l, &v->proj_w, 2, proj, "multi_modal_projector.weight")) ||
        (st = take(l, &v->proj_b, 1, proj_b, "multi_modal_projector.bias")))
        return st;
    for (int32_t i = 0; i < c->n_layer; i++)
        if ((st = take_layer(l, "transformer", i, 0, d, c->n_ff, &v->local[i]))) return st;
    for (int32_t i = 0; i < c->n_global_layer; i++)
        if ((st = take_layer(l, "global_transformer", i, 1, d, c->n_ff, &v->global[i]))) return st;
    return MLM_OK;
}

mlm_status mlm_vision_load(const char *dir, const mlm_config *cfg, mlm_vision *out,
                           mlm_error *err) {
    if (!dir || !cfg || !out)
        return mlm_err_set(err, MLM_ERR_INVALID_ARG, "mlm_vision_load: NULL argument");
    memset(out, 0, sizeof *out);
    if (cfg->family != MLM_FAMILY_MLLAMA)
        return mlm_err_set(err, MLM_ERR_INVALID_ARG,
                           "%s: the config is family '%s', the vision tower needs 'mllama'", dir,
                           mlm_family_name(cfg->family));
    const mlm_vision_config *c = &cfg->vision;
    /* mlm_config_load validated these; a hand-made config may not have been */
    if (c->n_embd < 1 || c->n_head < 1 || c->n_embd % c->n_head || c->patch_size < 1 ||
        c->image_size % c->patch_size || c->max_tiles < 1 || c->n_channels < 1 || c->n_layer < 1 ||
        c->n_global_layer < 0 || c->n_ff < 1 || c->n_intermediate < 0 || c->n_intermediate > 8 ||
        c->n_aspect < 1 || c->n_aspect > 16 || cfg->n_embd < 1 ||
        c->output_dim != (1 + c->n_intermediate) * c->n_embd)
        return mlm_err_set(err, MLM_ERR_INVALID_ARG,
                           "%s: inconsistent vision config (hidden %d, heads %d, image %d, "
                           "patch %d, output_dim %d)",
                           dir, (int)c->n_embd, (int)c->n_head, (int)c->image_size,
                           (int)c->patch_size, (int)c->output_dim);
    for (int32_t k = 0; k < c->n_intermediate; k++)
        if (c->intermediate[k] < 0 || c->intermediate[k] >= c->n_layer)
            return mlm_err_set(err, MLM_ERR_INVALID_ARG,
                               "%s: vision intermediate layer %d is not below num_hidden_layers %d",
                               dir, (int)c->intermediate[k], (int)c->n_layer);
    mlm_vision v = {.cfg = *c, .n_text_embd = cfg->n_embd};
    v.n_grid = c->image_size / c->patch_size;
    v.n_tok = v.n_grid * v.n_grid + 1;
    v.n_tok_pad = (v.n_tok + 7) / 8 * 8;

    /* the weights' total size, from the same shapes take() checks (int64: config-bounded) */
    const int64_t d = c->n_embd, ff = c->n_ff, nt = c->max_tiles, a1 = c->n_aspect + 1;
    const int64_t layer = 4 * d + 4 * d * d + 2 * ff * d + ff + d + 2;
    int64_t n = d * c->n_channels * c->patch_size * c->patch_size + d + v.n_tok * d +
                a1 * nt * v.n_tok * d + 1 + 2 * (a1 * nt * d + 1) + 4 * d +
                (int64_t)(c->n_layer + c->n_global_layer) * layer +
                (int64_t)cfg->n_embd * c->output_dim + cfg->n_embd;
    if ((uint64_t)n > SIZE_MAX / sizeof(float))
        return mlm_err_set(err, MLM_ERR_NOMEM, "%s: vision weights of %lld floats exceed memory",
                           dir, (long long)n);
    v.data = malloc((size_t)n * sizeof(float));
    v.local = calloc((size_t)(c->n_layer + c->n_global_layer), sizeof *v.local);
    if (!v.data || !v.local) {
        free(v.data);
        free(v.local);
        return mlm_err_set(err, MLM_ERR_NOMEM, "%s: out of memory for %lld bytes of vision weights",
                           dir, (long long)n * 4);
    }
    v.n_data = n;
    v.global = v.local + c->n_layer;

    mlm_checkpoint *ckpt = NULL;
    mlm_status st = mlm_checkpoint_open(dir, &ckpt, err);
    if (!st) {
        loader l = {.ckpt = ckpt, .dir = dir, .next = v.data, .end = v.data + n, .err = err};
        st = load_weights(&l, &v);
    }
    mlm_checkpoint_free(ckpt);
    if (st) {
        mlm_vision_deinit(&v);
        return st;
    }
    *out = v;
    return MLM_OK;
}

void mlm_vision_deinit(mlm_vision *v) {
    if (!v) return;
    free(v->data);
    free(v->local);
    memset(v, 0, sizeof *v);
}

// ---- kernels (plain loops) ----

/* y (n, out) = x (n, in) @ w (out, in)^T + b (out) (b may be NULL). */
static void matmul(float *y, const float *x, const float *w, const float *b, int64_t n, int64_t in,
                   int64_t out) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t o = 0; o < out; o++) {
            const float *xi = x + i * in, *wo = w + o * in;
            float s = 0;
            for (int64_t j = 0; j < in; j++)
                s += xi[j] * wo[j];
            y[i * out + o] = s + (b ? b[o] : 0);
        }
}

/* y (n, d) = LayerNorm(x (n, d)) * w + b, biased variance. y may alias x. */
static void layernorm(float *y, const float *x, const float *w, const float *b, int64_t n,
                      int64_t d, float eps) {
    for (int64_t i = 0; i < n; i++) {
        const float *xi = x + i * d;
        float mean = 0, var = 0;
        for (int64_t j = 0; j < d; j++)
            mean += xi[j];
        mean /= (float)d;
        for (int64_t j = 0; j < d; j++)
            var += (xi[j] - mean) * (xi[j] - mean);
        var /= (float)d;
        float inv = 1.0f / sqrtf(var + eps);
        for (int64_t j = 0; j < d; j++)
            y[i * d + j] = (xi[j] - mean) * inv * w[j] + b[j];
    }
}

static float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

/* Scratch for one forward; L = NT * n_tok_pad tokens. */
typedef struct scratch {
    float *x;             /* (L, D) residual stream */
    float *xn;            /* (L, D) normed input of a sub-block */
    float *q, *k, *vv;    /* (L, D) each, heads side by side: head h at columns [h*hd, (h+1)*hd) */
    float *att;           /* (L, D) attention output before o_proj; later the sub-block's output */
    float *score;         /* (L) one query's scores */
    float *h;             /* (L, F) MLP hidden */
    float *inter;         /* (K, L, D) recorded intermediate states */
    unsigned char *valid; /* (L) token is in a real tile and not a pad row */
} scratch;

/* x += gate * Attn(LN1(x)), then x += gate * MLP(LN2(x)) (gate 1 for local layers). */
static void encoder_layer(const mlm_vision *v, const mlm_vision_layer *y, float g_attn, float g_ffn,
                          scratch *s, int64_t L) {
    const int64_t d = v->cfg.n_embd, ff = v->cfg.n_ff, nh = v->cfg.n_head, hd = d / nh;
    const float scale = 1.0f / sqrtf((float)hd), eps = v->cfg.norm_eps;

    // attention: q, k, v (L, D); bias -inf only where query and key are both invalid
    layernorm(s->xn, s->x, y->ln1_w, y->ln1_b, L, d, eps);
    matmul(s->q, s->xn, y->wq, NULL, L, d, d);
    matmul(s->k, s->xn, y->wk, NULL, L, d, d);
    matmul(s->vv, s->xn, y->wv, NULL, L, d, d);
    for (int64_t h = 0; h < nh; h++)
        for (int64_t i = 0; i < L; i++) {
            const float *qi = s->q + i * d + h * hd;
            float mx = -INFINITY;
            for (int64_t j = 0; j < L; j++) {
                if (!s->valid[i] && !s->valid[j]) {
                    s->score[j] = -INFINITY;
                    continue;
                }
                const float *kj = s->k + j * d + h * hd;
                float dot = 0;
                for (int64_t e = 0; e < hd; e++)
                    dot += qi[e] * kj[e];
                s->score[j] = dot * scale;
                if (s->score[j] > mx) mx = s->score[j];
            }
            float sum = 0; /* tile 0 is always valid, so mx is finite */
            for (int64_t j = 0; j < L; j++) {
                s->score[j] = expf(s->score[j] - mx);
                sum += s->score[j];
            }
            float *oi = s->att + i * d + h * hd;
            for (int64_t e = 0; e < hd; e++)
                oi[e] = 0;
            for (int64_t j = 0; j < L; j++) {
                const float p = s->score[j] / sum, *vj = s->vv + j * d + h * hd;
                for (int64_t e = 0; e < hd; e++)
                    oi[e] += p * vj[e];
            }
        }
    matmul(s->xn, s->att, y->wo, NULL, L, d, d); /* xn (L, D) = o_proj(att) */
    for (int64_t i = 0; i < L * d; i++)
        s->x[i] += g_attn * s->xn[i];

    // MLP: fc2(GELU(fc1(LN2(x))))
    layernorm(s->xn, s->x, y->ln2_w, y->ln2_b, L, d, eps);
    matmul(s->h, s->xn, y->fc1_w, y->fc1_b, L, d, ff);
    for (int64_t i = 0; i < L * ff; i++)
        s->h[i] = gelu(s->h[i]);
    matmul(s->att, s->h, y->fc2_w, y->fc2_b, L, ff, d); /* att (L, D) = mlp output */
    for (int64_t i = 0; i < L * d; i++)
        s->x[i] += g_ffn * s->att[i];
}

// ---- forward ----

mlm_status mlm_vision_forward(const mlm_vision *v, const float *pixels, int32_t aspect_ratio_id,
                              int32_t n_tiles, float *out, float *projected, mlm_error *err) {
    if (!v || !v->data || !pixels || !out)
        return mlm_err_set(err, MLM_ERR_INVALID_ARG, "mlm_vision_forward: NULL argument");
    const mlm_vision_config *c = &v->cfg;
    if (aspect_ratio_id < 0 || aspect_ratio_id > c->n_aspect)
        return mlm_err_set(err, MLM_ERR_INVALID_ARG,
                           "vision: aspect_ratio_id %d out of range [0, %d]", (int)aspect_ratio_id,
                           (int)c->n_aspect);
    if (n_tiles < 1 || n_tiles > c->max_tiles)
        return mlm_err_set(err, MLM_ERR_INVALID_ARG, "vision: n_tiles %d out of range [1, %d]",
                           (int)n_tiles, (int)c->max_tiles);
    const int64_t d = c->n_embd, ff = c->n_ff, nt = c->max_tiles, ch = c->n_channels;
    const int64_t S = c->image_size, ps = c->patch_size, G = v->n_grid;
    const int64_t T = v->n_tok, TP = v->n_tok_pad, L = nt * TP, K = c->n_intermediate;
    const int64_t O = c->output_dim, E = v->n_text_embd;

    // scratch: one block, sizes in floats
    const int64_t n_float = 6 * L * d + L + L * ff + K * L * d;
    scratch s;
    float *block = malloc((size_t)n_float * sizeof(float) + (size_t)L);
    if (!block)
        return mlm_err_set(err, MLM_ERR_NOMEM,
                           "vision: out of memory for %lld bytes of scratch (%lld tokens)",
                           (long long)n_float * 4 + (long long)L, (long long)L);
    s.x = block;
    s.xn = s.x + L * d;
    s.q = s.xn + L * d;
    s.k = s.q + L * d;
    s.vv = s.k + L * d;
    s.att = s.vv + L * d;
    s.score = s.att + L * d;
    s.h = s.score + L;
    s.inter = s.h + L * ff;
    s.valid = (unsigned char *)(s.inter + K * L * d);
    for (int64_t t = 0; t < nt; t++)
        for (int64_t r = 0; r < TP; r++)
            s.valid[t * TP + r] = t < n_tiles && r < T;

    // 1. patch embedding: x[t, 1 + py*G + px] (D) = W_patch (D, C*p*p) . patch (C, p, p)
    //    token 0 of each tile is the CLS slot; rows [T, TP) are the zero pad rows
    memset(s.x, 0, (size_t)(L * d) * sizeof(float));
    for (int64_t t = 0; t < nt; t++)
        for (int64_t py = 0; py < G; py++)
            for (int64_t px = 0; px < G; px++) {
                float *xi = s.x + (t * TP + 1 + py * G + px) * d;
                for (int64_t e = 0; e < d; e++) {
                    const float *w = v->patch_w + e * ch * ps * ps;
                    float sum = 0;
                    for (int64_t cc = 0; cc < ch; cc++)
                        for (int64_t ky = 0; ky < ps; ky++) {
                            const float *row =
                                pixels + ((t * ch + cc) * S + py * ps + ky) * S + px * ps;
                            const float *wr = w + (cc * ps + ky) * ps;
                            for (int64_t kx = 0; kx < ps; kx++)
                                sum += wr[kx] * row[kx];
                        }
                    xi[e] = sum;
                }
            }

    // 2. pre-tile embedding on the patches: x[t, 1..T) += tanh(g_pre) * pre_tile[aid, t] (D)
    const float g_pre = tanhf(v->pre_tile_gate);
    for (int64_t t = 0; t < nt; t++) {
        const float *e = v->pre_tile + (aspect_ratio_id * nt + t) * d;
        for (int64_t r = 1; r < T; r++)
            for (int64_t j = 0; j < d; j++)
                s.x[(t * TP + r) * d + j] += g_pre * e[j];
    }

    // 3. CLS token, 4. positional embeddings:
    //    x[t, r] += (1 - tanh(g)) * pos[r] (D) + tanh(g) * tile_pos[aid, t, r] (D)
    const float g_pos = tanhf(v->pos_gate);
    for (int64_t t = 0; t < nt; t++) {
        memcpy(s.x + t * TP * d, v->class_emb, (size_t)d * sizeof(float));
        const float *tp = v->tile_pos + (aspect_ratio_id * nt + t) * T * d;
        for (int64_t r = 0; r < T; r++)
            for (int64_t j = 0; j < d; j++)
                s.x[(t * TP + r) * d + j] +=
                    (1 - g_pos) * v->pos_emb[r * d + j] + g_pos * tp[r * d + j];
    }

    // 5. ln_pre on the T real rows of every tile; 6. the pad rows stay zero
    for (int64_t t = 0; t < nt; t++)
        layernorm(s.x + t * TP * d, s.x + t * TP * d, v->ln_pre_w, v->ln_pre_b, T, d, c->norm_eps);

    // 7.-8. local transformer over all L tokens; intermediate k = the INPUT of layer
    //    intermediate[k] (Meta's return_intermediate, transformers 4.46)
    for (int32_t l = 0; l < c->n_layer; l++) {
        for (int64_t k = 0; k < K; k++)
            if (c->intermediate[k] == l)
                memcpy(s.inter + k * L * d, s.x, (size_t)(L * d) * sizeof(float));
        encoder_layer(v, &v->local[l], 1.0f, 1.0f, &s, L);
    }

    // 9. ln_post (intermediates are not normed); 10. post-tile embedding on all TP rows
    layernorm(s.x, s.x, v->ln_post_w, v->ln_post_b, L, d, c->norm_eps);
    const float g_post = tanhf(v->post_tile_gate);
    for (int64_t t = 0; t < nt; t++) {
        const float *e = v->post_tile + (aspect_ratio_id * nt + t) * d;
        for (int64_t r = 0; r < TP; r++)
            for (int64_t j = 0; j < d; j++)
                s.x[(t * TP + r) * d + j] += g_post * e[j];
    }

    // 11. gated global transformer, same mask
    for (int32_t l = 0; l < c->n_global_layer; l++)
        encoder_layer(v, &v->global[l], tanhf(v->global[l].gate_attn), tanhf(v->global[l].gate_ffn),
                      &s, L);

    // 12.-13. drop the pad rows; out[t, r] (O) = [x (D), inter interleaved: D + j*K + k]
    for (int64_t t = 0; t < nt; t++)
        for (int64_t r = 0; r < T; r++) {
            const int64_t src = (t * TP + r) * d;
            float *o = out + (t * T + r) * O;
            memcpy(o, s.x + src, (size_t)d * sizeof(float));
            for (int64_t j = 0; j < d; j++)
                for (int64_t k = 0; k < K; k++)
                    o[d + j * K + k] = s.inter[k * L * d + src + j];
        }

    // 14. projector: projected (NT*T, E) = out (NT*T, O) @ proj_w^T + proj_b
    if (projected) matmul(projected, out, v->proj_w, v->proj_b, nt * T, O, E);
    free(block);
    return MLM_OK;
}
