/* model/vision_ref.c: the mllama vision encoder + multi-modal projector, scalar f32 reference
 * (models.md 6.4, transformers 4.46.3 MllamaVisionModel / Meta VisionEncoder) on a model loaded
 * in the f32 profile. Plain loops, one image per call, read top to bottom; scratch is
 * allocated per call. The fast path (vision.c) is checked against it. Does not preprocess
 * images (image/mllama.c) nor run the cross-attention (the text decoder's job). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/vision.h"

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
/* The f32 data of weight W (the caller checked every vision weight is f32). */
static const float *f32(const mlm_weight *w) { return (const float *)w->data; }

static void encoder_layer(const mlm_vision_config *c, const mlm_vision_layer *y, float g_attn,
                          float g_ffn, scratch *s, int64_t L) {
    const int64_t d = c->n_embd, ff = c->n_ff, nh = c->n_head, hd = d / nh;
    const float scale = 1.0f / sqrtf((float)hd), eps = c->norm_eps;

    // attention: q, k, v (L, D); bias -inf only where query and key are both invalid
    layernorm(s->xn, s->x, y->ln1_w, y->ln1_b, L, d, eps);
    matmul(s->q, s->xn, f32(&y->wq), NULL, L, d, d);
    matmul(s->k, s->xn, f32(&y->wk), NULL, L, d, d);
    matmul(s->vv, s->xn, f32(&y->wv), NULL, L, d, d);
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
    matmul(s->xn, s->att, f32(&y->wo), NULL, L, d, d); /* xn (L, D) = o_proj(att) */
    for (int64_t i = 0; i < L * d; i++)
        s->x[i] += g_attn * s->xn[i];

    // MLP: fc2(GELU(fc1(LN2(x))))
    layernorm(s->xn, s->x, y->ln2_w, y->ln2_b, L, d, eps);
    matmul(s->h, s->xn, f32(&y->fc1), y->fc1_b, L, d, ff);
    for (int64_t i = 0; i < L * ff; i++)
        s->h[i] = gelu(s->h[i]);
    matmul(s->att, s->h, f32(&y->fc2), y->fc2_b, L, ff, d); /* att (L, D) = mlp output */
    for (int64_t i = 0; i < L * d; i++)
        s->x[i] += g_ffn * s->att[i];
}

// ---- forward ----

/* Whether every matrix of the vision tower is f32. */
static int all_f32(const mlm_model *m) {
    const mlm_vision_tower *v = &m->vision;
    const mlm_vision_config *c = &m->cfg.vision;
    int ok =
        v->patch.type == MLM_W_F32 && v->tile_pos.type == MLM_W_F32 && v->proj.type == MLM_W_F32;
    for (int32_t i = 0; ok && i < c->n_layer + c->n_global_layer; i++) {
        const mlm_vision_layer *y = &v->layers[i];
        ok = y->wq.type == MLM_W_F32 && y->wk.type == MLM_W_F32 && y->wv.type == MLM_W_F32 &&
             y->wo.type == MLM_W_F32 && y->fc1.type == MLM_W_F32 && y->fc2.type == MLM_W_F32;
    }
    return ok;
}

mlm_status mlm_vision_encode_ref(const mlm_model *m, const float *pixels, int32_t aspect_ratio_id,
                                 int32_t n_tiles, float *out, float *projected, mlm_error *err) {
    if (!m || !pixels || m->cfg.family != MLM_FAMILY_MLLAMA)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "vision: no image or no vision model");
    if (!all_f32(m))
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                             "vision: the reference runs on f32 weights (the f32 profile), this "
                             "model is loaded in '%s'",
                             m->profile.name);
    const mlm_vision_tower *v = &m->vision;
    const mlm_vision_config *c = &m->cfg.vision;
    if (aspect_ratio_id < 0 || aspect_ratio_id > c->n_aspect)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "vision: aspect_ratio_id %d out of range [0, %d]",
                             (int)aspect_ratio_id, (int)c->n_aspect);
    if (n_tiles < 1 || n_tiles > c->max_tiles)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "vision: n_tiles %d out of range [1, %d]",
                             (int)n_tiles, (int)c->max_tiles);
    const int64_t d = c->n_embd, ff = c->n_ff, nt = c->max_tiles, ch = c->n_channels;
    const int64_t S = c->image_size, ps = c->patch_size, G = v->n_grid;
    const int64_t T = v->n_tok, TP = v->n_tok_pad, L = nt * TP, K = c->n_intermediate;
    const int64_t O = c->output_dim, E = m->cfg.n_embd;
    const float *patch_w = f32(&v->patch), *tile_pos = f32(&v->tile_pos);

    // scratch: one block, sizes in floats
    const int64_t n_float = 6 * L * d + L + L * ff + K * L * d;
    scratch s;
    float *block = malloc((size_t)n_float * sizeof(float) + (size_t)L);
    if (!block)
        return mlm_error_set(err, MLM_ERR_NOMEM,
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
                    const float *w = patch_w + e * ch * ps * ps;
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
    const float g_pre = tanhf(v->gates[1]);
    for (int64_t t = 0; t < nt; t++) {
        const float *e = v->pre_tile + (aspect_ratio_id * nt + t) * d;
        for (int64_t r = 1; r < T; r++)
            for (int64_t j = 0; j < d; j++)
                s.x[(t * TP + r) * d + j] += g_pre * e[j];
    }

    // 3. CLS token, 4. positional embeddings:
    //    x[t, r] += (1 - tanh(g)) * pos[r] (D) + tanh(g) * tile_pos[aid, t, r] (D)
    const float g_pos = tanhf(v->gates[0]);
    for (int64_t t = 0; t < nt; t++) {
        memcpy(s.x + t * TP * d, v->class_emb, (size_t)d * sizeof(float));
        const float *tp = tile_pos + (aspect_ratio_id * nt + t) * T * d;
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
        encoder_layer(c, &v->layers[l], 1.0f, 1.0f, &s, L);
    }

    // 9. ln_post (intermediates are not normed); 10. post-tile embedding on all TP rows
    layernorm(s.x, s.x, v->ln_post_w, v->ln_post_b, L, d, c->norm_eps);
    const float g_post = tanhf(v->gates[2]);
    for (int64_t t = 0; t < nt; t++) {
        const float *e = v->post_tile + (aspect_ratio_id * nt + t) * d;
        for (int64_t r = 0; r < TP; r++)
            for (int64_t j = 0; j < d; j++)
                s.x[(t * TP + r) * d + j] += g_post * e[j];
    }

    // 11. gated global transformer, same mask
    for (int32_t l = 0; l < c->n_global_layer; l++)
        encoder_layer(c, &v->layers[c->n_layer + l], tanhf(v->layers[c->n_layer + l].gates[0]),
                      tanhf(v->layers[c->n_layer + l].gates[1]), &s, L);

    // 12.-13. drop the pad rows; out[t, r] (O) = [x (D), inter interleaved: D + j*K + k]
    float *own = out ? NULL : malloc((size_t)(nt * T * O) * sizeof(float));
    if (!out && !own) {
        free(block);
        return mlm_error_set(err, MLM_ERR_NOMEM, "vision: out of memory");
    }
    if (!out) out = own;
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
    if (projected) matmul(projected, out, f32(&v->proj), v->proj_b, nt * T, O, E);
    free(own);
    free(block);
    return MLM_OK;
}
