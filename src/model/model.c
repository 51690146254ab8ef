/* model/model.c: the model's lifecycle and what every part of it asks of the model: the
 * buffers it owns, its weight and norm lists (the cache and the converter walk them), the
 * vision tower's shapes, the TP shard's vocabulary, the default parameters and profile, the
 * getters and mlm_model_free. Loading is load.c; binding bind.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/error.h"
#include "core/mapfile.h"
#include "format/checkpoint.h"
#include "model/model.h"
#include "tensor/bfp.h"

// ---- owned buffers ----

mlm_status mlm_model_own(mlm_model *m, void *p, size_t bytes, mlm_error *err) {
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        void **o = realloc(m->owned, (size_t)cap * sizeof *o);
        if (!o) {
            free(p);
            return mlm_error_set(err, MLM_ERR_NOMEM, "model: out of memory");
        }
        m->owned = o;
        m->cap_owned = cap;
    }
    m->owned[m->n_owned++] = p;
    m->bytes_owned += (int64_t)bytes;
    return MLM_OK;
}

// ---- parameters ----

mlm_model_params mlm_model_default_params(void) {
    mlm_model_params p = {.dtype = MLM_DTYPE_BF16, .use_cache = 1};
    return p;
}

const char *mlm_model_default_profile(const char *path) {
    char gguf[1024];
    return mlm_gguf_model_file(path, gguf, sizeof gguf) ? "native" : "performance";
}

const char *mlm_model_params_profile(const mlm_model_params *p) {
    if (p->optimizations) return p->optimizations;
    return p->dtype == MLM_DTYPE_F32 ? "f32" : "bf16";
}

// ---- weight and norm lists ----

int mlm_model_n_weights(const mlm_model *m) {
    const mlm_vision_config *v = &m->cfg.vision;
    int n = 2 + 7 * m->cfg.n_layer;
    if (m->cfg.family == MLM_FAMILY_MLLAMA) n += 3 + 6 * (v->n_layer + v->n_global_layer);
    return n;
}

int mlm_model_weights(mlm_model *m, mlm_weight_ref *out) {
    int n = 0;
    const mlm_profile *p = &m->profile;
    out[n++] = (mlm_weight_ref){"emb", &m->tok_emb, p->emb};
    out[n++] = (mlm_weight_ref){"head", &m->output, p->head};
    static const char *names[] = {"wq", "wk", "wv", "wo", "w1", "w2", "w3"};
    for (int32_t l = 0; l < m->cfg.n_layer; l++) {
        mlm_layer *L = &m->layers[l];
        mlm_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w1, &L->w2, &L->w3};
        for (int r = 0; r < 7; r++) {
            mlm_weight_ref *ref = &out[n++];
            snprintf(ref->name, sizeof ref->name, "%d.%s", l, names[r]);
            ref->w = ws[r];
            ref->want = p->layer[l][r]; /* mlm_role order: wq wk wv wo w1 w2 w3 */
        }
    }
    if (m->cfg.family != MLM_FAMILY_MLLAMA) return n;
    mlm_vision_tower *v = &m->vision;
    out[n++] = (mlm_weight_ref){"v.patch", &v->patch, p->vision};
    out[n++] = (mlm_weight_ref){"v.tile_pos", &v->tile_pos, p->emb};
    static const char *vnames[] = {"wq", "wk", "wv", "wo", "fc1", "fc2"};
    for (int32_t l = 0; l < m->cfg.vision.n_layer + m->cfg.vision.n_global_layer; l++) {
        mlm_vision_layer *L = &v->layers[l];
        mlm_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->fc1, &L->fc2};
        for (int r = 0; r < 6; r++) {
            mlm_weight_ref *ref = &out[n++];
            snprintf(ref->name, sizeof ref->name, "v%d.%s", l, vnames[r]);
            ref->w = ws[r];
            ref->want = p->vision;
        }
    }
    out[n++] = (mlm_weight_ref){"v.proj", &v->proj, p->vision};
    return n;
}

int mlm_model_n_norms(const mlm_model *m) {
    const mlm_config *c = &m->cfg;
    int n = 1 + 2 * c->n_layer;
    if (c->family == MLM_FAMILY_MLLAMA)
        n += 3 * c->n_cross + 10 + 6 * (c->vision.n_layer + c->vision.n_global_layer) +
             c->vision.n_global_layer;
    return n;
}

/* Appends vector NAME (a printf format with one int, or none) of LEN floats at *V. */
static void vec(mlm_norm_ref *out, int *n, const char *name, int i, const float **v, int64_t len) {
    mlm_norm_ref *r = &out[(*n)++];
    snprintf(r->name, sizeof r->name, name, i);
    r->v = v;
    r->len = len;
}

int mlm_model_norms(mlm_model *m, mlm_norm_ref *out) {
    const mlm_config *c = &m->cfg;
    int n = 0;
    int64_t d = c->n_embd, hd = c->head_dim;
    vec(out, &n, "norm", 0, &m->norm, d);
    for (int32_t l = 0; l < c->n_layer; l++) {
        mlm_layer *L = &m->layers[l];
        vec(out, &n, "%d.attn_norm", l, &L->attn_norm, d);
        vec(out, &n, "%d.ffn_norm", l, &L->ffn_norm, d);
        if (!L->cross) continue;
        vec(out, &n, "%d.q_norm", l, &L->q_norm, hd);
        vec(out, &n, "%d.k_norm", l, &L->k_norm, hd);
        vec(out, &n, "%d.gates", l, &L->gates, 2);
    }
    if (c->family != MLM_FAMILY_MLLAMA) return n;
    const mlm_vision_config *vc = &c->vision;
    mlm_vision_tower *v = &m->vision;
    int64_t D = vc->n_embd, T = v->n_tok, tiles = (int64_t)(vc->n_aspect + 1) * vc->max_tiles;
    vec(out, &n, "v.class_emb", 0, &v->class_emb, D);
    vec(out, &n, "v.pos_emb", 0, &v->pos_emb, T * D);
    vec(out, &n, "v.pre_tile", 0, &v->pre_tile, tiles * D);
    vec(out, &n, "v.post_tile", 0, &v->post_tile, tiles * D);
    vec(out, &n, "v.gates", 0, &v->gates, 3);
    vec(out, &n, "v.ln_pre_w", 0, &v->ln_pre_w, D);
    vec(out, &n, "v.ln_pre_b", 0, &v->ln_pre_b, D);
    vec(out, &n, "v.ln_post_w", 0, &v->ln_post_w, D);
    vec(out, &n, "v.ln_post_b", 0, &v->ln_post_b, D);
    for (int32_t l = 0; l < vc->n_layer + vc->n_global_layer; l++) {
        mlm_vision_layer *L = &v->layers[l];
        vec(out, &n, "v%d.ln1_w", l, &L->ln1_w, D);
        vec(out, &n, "v%d.ln1_b", l, &L->ln1_b, D);
        vec(out, &n, "v%d.ln2_w", l, &L->ln2_w, D);
        vec(out, &n, "v%d.ln2_b", l, &L->ln2_b, D);
        vec(out, &n, "v%d.fc1_b", l, &L->fc1_b, vc->n_ff);
        vec(out, &n, "v%d.fc2_b", l, &L->fc2_b, D);
        if (l >= vc->n_layer) vec(out, &n, "v%d.gates", l, &L->gates, 2);
    }
    vec(out, &n, "v.proj_b", 0, &v->proj_b, d);
    return n;
}

// ---- shapes ----

mlm_status mlm_model_alloc_vision(mlm_model *m, mlm_error *err) {
    const mlm_vision_config *v = &m->cfg.vision;
    mlm_vision_tower *t = &m->vision;
    if (v->patch_size < 1 || v->image_size % v->patch_size || v->n_layer < 1 ||
        v->n_global_layer < 0 || v->n_head < 1 || v->n_embd % v->n_head || v->max_tiles < 1 ||
        v->n_aspect < 1 || v->n_aspect > 16)
        return mlm_error_set(err, MLM_ERR_FORMAT, "model: inconsistent vision config");
    t->n_grid = v->image_size / v->patch_size;
    t->n_tok = t->n_grid * t->n_grid + 1;
    t->n_tok_pad = (t->n_tok + 7) / 8 * 8;
    t->layers = calloc((size_t)(v->n_layer + v->n_global_layer), sizeof *t->layers);
    if (!t->layers) return mlm_error_set(err, MLM_ERR_NOMEM, "model: out of memory");
    return MLM_OK;
}

void mlm_model_vision_shapes(mlm_model *m) {
    if (m->cfg.family != MLM_FAMILY_MLLAMA) return;
    const mlm_vision_config *v = &m->cfg.vision;
    mlm_vision_tower *t = &m->vision;
    int64_t d = v->n_embd, ff = v->n_ff;
    int64_t pix = (int64_t)v->n_channels * v->patch_size * v->patch_size;
    t->patch = (mlm_weight){.rows = d, .cols = pix};
    t->tile_pos =
        (mlm_weight){.rows = (int64_t)(v->n_aspect + 1) * v->max_tiles * t->n_tok, .cols = d};
    t->proj = (mlm_weight){.rows = m->cfg.n_embd, .cols = v->output_dim};
    for (int32_t i = 0; i < v->n_layer + v->n_global_layer; i++) {
        mlm_vision_layer *y = &t->layers[i];
        y->wq = y->wk = y->wv = y->wo = (mlm_weight){.rows = d, .cols = d};
        y->fc1 = (mlm_weight){.rows = ff, .cols = d};
        y->fc2 = (mlm_weight){.rows = d, .cols = ff};
    }
}

void mlm_model_vocab_slice(int32_t n_vocab, int r, int tp, int32_t *v0, int32_t *n) {
    int32_t part = (n_vocab + tp - 1) / tp;
    part = (part + MLM_BFP_ROWS - 1) / MLM_BFP_ROWS * MLM_BFP_ROWS;
    int64_t lo = (int64_t)part * r, hi = lo + part;
    if (lo > n_vocab) lo = n_vocab;
    if (hi > n_vocab) hi = n_vocab;
    *v0 = (int32_t)lo;
    *n = (int32_t)(hi - lo);
}

mlm_config mlm_config_shard(const mlm_config *c, int tp) {
    mlm_config s = *c;
    if (tp > 1) s.n_head /= tp, s.n_kv_head /= tp, s.n_ff /= tp;
    return s;
}

// ---- freeing and getters ----

void mlm_model_free(mlm_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    free(m->vision.layers);
    free(m->inv_freq);
    mlm_profile_deinit(&m->profile);
    mlm_checkpoint_free(m->ckpt);
    if (m->cache.data) mlm_mapfile_close(&m->cache);
    free(m);
}

const mlm_config *mlm_model_config(const mlm_model *m) { return &m->cfg; }
const char *mlm_model_kernels(const mlm_model *m) { return m->kernels->name; }
const char *mlm_model_profile(const mlm_model *m) { return m->profile.name; }
const char *mlm_model_cache_path(const mlm_model *m) { return m->cache.data ? m->cache_path : ""; }
int mlm_model_cache_built(const mlm_model *m) { return m->cache_built; }

mlm_dtype mlm_model_kv_dtype(const mlm_model *m) { return mlm_profile_kv_dtype(&m->profile); }

int64_t mlm_model_weight_bytes(const mlm_model *m) {
    mlm_config shard = m->local; /* this rank's: its heads, MLP columns and vocabulary */
    shard.n_vocab = m->n_vocab_local;
    return mlm_profile_weight_bytes(&m->profile, &shard, 0);
}
