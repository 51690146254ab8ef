/* synth/synth_mllama.c: the Llama 3.2 Vision (mllama, MllamaForConditionalGeneration) part
 * of the `meshlm synth` plan: the vision tower's, projector's and text model's tensors in HF
 * and Meta order (with Meta's tok_embeddings / learnable_embedding split of HF's
 * embed_tokens), --layers for mllama (cross-attention layers kept, Meta's fusion schedule
 * checked), and the values of HF's per-aspect-ratio tile tables, mapped from Meta's tables.
 * Nothing here writes files: synth.c owns the plan's lifetime and streams what it lists. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "config/config.h"
#include "synth/synth_internal.h"

// ---- the tensors ----

/* Values of the tensors the Llama presets lack (models.md 6.4, 6.5): LayerNorm and linear
 * biases std 0.02; class, positional and tile-position embeddings std 0.1 (the Meta tables,
 * from which HF's precomputed ones take their values); every gate mean 0.5, std 0.1 (so
 * within [0.15, 0.85], tanh 0.15 to 0.69): nonzero, so that the image matters
 * (transformers initialises the gates to 0). */
#define BIAS_STD 0.02f
#define POS_STD 0.1f
#define GATE_MEAN 0.5f
#define GATE_STD 0.1f

/* One mllama tensor as both formats hold it. HF is its name in the HF files and the
 * canonical tensor, except for a tile table (TILE): canonical is the Meta table. */
typedef struct mt {
    char hf[96], meta[96];
    int n_dim; /* HF shape */
    int64_t shape[MLM_SYNTH_MAX_DIMS];
    int m_dim; /* Meta shape when it differs (0: HF's) */
    int64_t mshape[MLM_SYNTH_MAX_DIMS];
    float std, mean;   /* std 0: ones */
    int32_t qk;        /* Meta: q/k rows interleaved, head_dim this (self-attention) */
    int64_t m_row_off; /* Meta: its rows start at this row of the canonical tensor */
    int tile;          /* HF: the per-aspect-ratio table precomputed from the Meta one */
} mt;

typedef struct mplan {
    mlm_synth_plan *pl;
    int64_t cap;
    int meta;
    mlm_error *err;
    mlm_status st;
} mplan;

static int64_t cols_of(int n_dim, const int64_t *shape) {
    int64_t c = 1;
    for (int k = 1; k < n_dim; k++)
        c *= shape[k];
    return n_dim == 1 ? shape[0] : c;
}

/* Appends E as the plan's format holds it (the first failure sticks in M->st). */
static void emit(mplan *m, const mt *e) {
    mlm_synth_tensor *t;
    if (m->st || (m->st = mlm_synth_push_tensor(m->pl, &m->cap, &t, m->err))) return;
    const mlm_config *c = &m->pl->cfg;
    int meta_shape = m->meta && e->m_dim;
    t->n_dim = meta_shape ? e->m_dim : e->n_dim;
    memcpy(t->shape, meta_shape ? e->mshape : e->shape, sizeof t->shape);
    snprintf(t->name, sizeof t->name, "%s", m->meta ? e->meta : e->hf);
    snprintf(t->key, sizeof t->key, "%s", e->tile ? e->meta : e->hf);
    t->std = e->std;
    t->mean = e->mean;
    if (e->tile) {
        /* canonical: the Meta table [T, T, P, D] read as [T, T * P * D] */
        t->full_cols = cols_of(e->m_dim, e->mshape);
        if (!m->meta) {
            t->tile_max = c->vision.max_tiles;
            t->tile_block = e->shape[1] / c->vision.max_tiles;
            t->tile_n_aspect = c->vision.n_aspect;
            memcpy(t->tile_aspect, c->vision.aspect, sizeof t->tile_aspect);
        }
        return;
    }
    t->full_cols = cols_of(e->n_dim, e->shape);
    if (m->meta) {
        t->qk_head_dim = e->qk;
        t->row_off = e->m_row_off;
    }
}

/* E with name(s) from printf formats (NULL META_FMT: no Meta name). */
static mt *named(mt *e, const char *hf_fmt, const char *meta_fmt, int i) {
    snprintf(e->hf, sizeof e->hf, hf_fmt, i);
    if (meta_fmt) snprintf(e->meta, sizeof e->meta, meta_fmt, i);
    return e;
}

static mt vec(int64_t n, float std, float mean) {
    return (mt){.n_dim = 1, .shape = {n}, .std = std, .mean = mean};
}

static mt mat(int64_t rows, int64_t cols, float std) {
    return (mt){.n_dim = 2, .shape = {rows, cols}, .std = std};
}

static float inv_sqrt(int64_t n) { return (float)(1 / sqrt((double)n)); }

/* Vision layer N of the local (GLOBAL 0) or gated global transformer, in HF order (gates,
 * q, k, v, o, fc1, fc2, the two LayerNorms) or Meta's (gates, wq..wo, ln_1, c_fc, c_proj,
 * ln_2: ImageTransformerBlock's registration order). */
static void vision_layer(mplan *m, int global, int n) {
    const mlm_vision_config *v = &m->pl->cfg.vision;
    int64_t d = v->n_embd, f = v->n_ff;
    const char *hf = global ? "vision_model.global_transformer.layers.%d."
                            : "vision_model.transformer.layers.%d.";
    const char *me = global ? "vision_model.vision_encoder.global_transformer.resblocks.%d."
                            : "vision_model.vision_encoder.transformer.resblocks.%d.";
    static const char *const sfx[12][2] = {
        {"self_attn.q_proj.weight", "attn.wq.weight"},
        {"self_attn.k_proj.weight", "attn.wk.weight"},
        {"self_attn.v_proj.weight", "attn.wv.weight"},
        {"self_attn.o_proj.weight", "attn.wo.weight"},
        {"mlp.fc1.weight", "mlp.c_fc.weight"},
        {"mlp.fc1.bias", "mlp.c_fc.bias"},
        {"mlp.fc2.weight", "mlp.c_proj.weight"},
        {"mlp.fc2.bias", "mlp.c_proj.bias"},
        {"input_layernorm.weight", "ln_1.weight"},
        {"input_layernorm.bias", "ln_1.bias"},
        {"post_attention_layernorm.weight", "ln_2.weight"},
        {"post_attention_layernorm.bias", "ln_2.bias"},
    };
    mt e[12] = {
        mat(d, d, inv_sqrt(d)), mat(d, d, inv_sqrt(d)), mat(d, d, inv_sqrt(d)),
        mat(d, d, inv_sqrt(d)), mat(f, d, inv_sqrt(d)), vec(f, BIAS_STD, 0),
        mat(d, f, inv_sqrt(f)), vec(d, BIAS_STD, 0),    vec(d, 0, 0),
        vec(d, BIAS_STD, 0),    vec(d, 0, 0),           vec(d, BIAS_STD, 0),
    };
    static const int hf_order[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    static const int meta_order[12] = {0, 1, 2, 3, 8, 9, 4, 5, 6, 7, 10, 11};
    char h[96], mm[96];
    if (global) {
        static const char *const g[2][2] = {{"gate_attn", "gate_attn"}, {"gate_ffn", "gate_ffn"}};
        for (int k = 0; k < 2; k++) {
            mt gt = vec(1, GATE_STD, GATE_MEAN);
            snprintf(h, sizeof h, "%s%s", hf, g[k][0]);
            snprintf(mm, sizeof mm, "%s%s", me, g[k][1]);
            emit(m, named(&gt, h, mm, n));
        }
    }
    for (int k = 0; k < 12; k++) {
        int i = (m->meta ? meta_order : hf_order)[k];
        snprintf(h, sizeof h, "%s%s", hf, sfx[i][0]);
        snprintf(mm, sizeof mm, "%s%s", me, sfx[i][1]);
        emit(m, named(&e[i], h, mm, n));
    }
}

/* The vision tower's tensors other than its layers: in HF order (class embedding, patch
 * embedding, gated positional embedding, pre / post tile embeddings, LayerNorms) when
 * PART is 0; Meta's VisionEncoder order is split around the layers: PART 1 before them
 * (own parameters, conv1, ln_post, ln_pre), PART 2 after (the tile embeddings). */
static void vision_top(mplan *m, int part) {
    const mlm_vision_config *v = &m->pl->cfg.vision;
    int64_t d = v->n_embd, t = v->max_tiles, ps = v->patch_size,
            p = (int64_t)(v->image_size / ps) * (v->image_size / ps) + 1,
            k = (int64_t)v->n_channels * ps * ps, ids = v->n_aspect + 1;
    mt e[13];
    e[0] = vec(d, POS_STD, 0);
    named(&e[0], "vision_model.class_embedding", "vision_model.vision_encoder.class_embedding", 0);
    e[1] = (mt){.n_dim = 4,
                .shape = {d, v->n_channels, ps, ps},
                .m_dim = 2,
                .mshape = {d, k},
                .std = inv_sqrt(k)};
    named(&e[1], "vision_model.patch_embedding.weight",
          "vision_model.vision_encoder.conv1._linear.weight", 0);
    e[2] = vec(1, GATE_STD, GATE_MEAN);
    named(&e[2], "vision_model.gated_positional_embedding.gate",
          "vision_model.vision_encoder.gated_positional_embedding_gate", 0);
    e[3] = mat(p, d, POS_STD);
    named(&e[3], "vision_model.gated_positional_embedding.embedding",
          "vision_model.vision_encoder.positional_embedding", 0);
    e[4] = (mt){.n_dim = 2,
                .shape = {ids, t * p * d},
                .m_dim = 4,
                .mshape = {t, t, p, d},
                .std = POS_STD,
                .tile = 1};
    named(&e[4], "vision_model.gated_positional_embedding.tile_embedding.weight",
          "vision_model.vision_encoder.gated_positional_embedding", 0);
    for (int pre = 0; pre < 2; pre++) {
        const char *hn = pre ? "pre" : "post";
        char h[96], mm[96];
        mt *g = &e[pre ? 5 : 7], *tb = &e[pre ? 6 : 8];
        *g = vec(1, GATE_STD, GATE_MEAN);
        snprintf(h, sizeof h, "vision_model.%s_tile_positional_embedding.gate", hn);
        snprintf(mm, sizeof mm, "vision_model.vision_encoder.%s_tile_pos_embed.gate", hn);
        named(g, h, mm, 0);
        *tb = (mt){.n_dim = 2,
                   .shape = {ids, t * d},
                   .m_dim = 4,
                   .mshape = {t, t, 1, d},
                   .std = POS_STD,
                   .tile = 1};
        snprintf(h, sizeof h, "vision_model.%s_tile_positional_embedding.embedding.weight", hn);
        snprintf(mm, sizeof mm, "vision_model.vision_encoder.%s_tile_pos_embed.embedding", hn);
        named(tb, h, mm, 0);
    }
    for (int k2 = 0; k2 < 4; k2++) {
        const char *which = k2 < 2 ? "pre" : "post", *wb = k2 % 2 ? "bias" : "weight";
        char h[96], mm[96];
        e[9 + k2] = vec(d, k2 % 2 ? BIAS_STD : 0, 0);
        snprintf(h, sizeof h, "vision_model.layernorm_%s.%s", which, wb);
        snprintf(mm, sizeof mm, "vision_model.vision_encoder.ln_%s.%s", which, wb);
        named(&e[9 + k2], h, mm, 0);
    }
    static const int hf_order[13] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    /* VisionEncoder: class_embedding, positional_embedding, gated_positional_embedding,
     * its gate, conv1, ln_post, ln_pre | layers | pre_tile_pos_embed, post_tile_pos_embed */
    static const int meta_head[9] = {0, 3, 4, 2, 1, 11, 12, 9, 10}, meta_tail[4] = {6, 5, 8, 7};
    const int *order = part == 0 ? hf_order : part == 1 ? meta_head : meta_tail;
    int n = part == 0 ? 13 : part == 1 ? 9 : 4;
    for (int i = 0; i < n; i++)
        emit(m, &e[order[i]]);
}

/* The projector (HF multi_modal_projector, Meta vision_model.vision_projection). */
static void projector(mplan *m) {
    const mlm_config *c = &m->pl->cfg;
    int64_t o = c->vision.output_dim;
    mt w = mat(c->n_embd, o, inv_sqrt(o)), b = vec(c->n_embd, BIAS_STD, 0);
    emit(m, named(&w, "multi_modal_projector.weight", "vision_model.vision_projection.weight", 0));
    emit(m, named(&b, "multi_modal_projector.bias", "vision_model.vision_projection.bias", 0));
}

/* Decoder layer HF_I: Meta self-attention layer META_I (q/k interleaved) or cross-attention
 * block META_I (not permuted), both in their format's order (HF: MllamaSelfAttentionDecoderLayer
 * / MllamaCrossAttentionDecoderLayer; Meta: TransformerBlock / CrossAttentionTransformerBlock). */
static void text_layer(mplan *m, int cross, int hf_i, int meta_i) {
    const mlm_config *c = &m->pl->cfg;
    int64_t d = c->n_embd, hd = c->head_dim, q = (int64_t)c->n_head * hd,
            kv = (int64_t)c->n_kv_head * hd, f = c->n_ff;
    static const char *const sfx[13][2] = {
        {"cross_attn_attn_gate", "gate_attn"},
        {"cross_attn_mlp_gate", "gate_ffwd"},
        {"q_proj.weight", "attention.wq.weight"},
        {"k_proj.weight", "attention.wk.weight"},
        {"v_proj.weight", "attention.wv.weight"},
        {"o_proj.weight", "attention.wo.weight"},
        {"cross_attn.q_norm.weight", "attention.q_norm.weight"},
        {"cross_attn.k_norm.weight", "attention.k_norm.weight"},
        {"input_layernorm.weight", "attention_norm.weight"},
        {"mlp.gate_proj.weight", "feed_forward.w1.weight"},
        {"mlp.up_proj.weight", "feed_forward.w3.weight"},
        {"mlp.down_proj.weight", "feed_forward.w2.weight"},
        {"post_attention_layernorm.weight", "ffn_norm.weight"},
    };
    mt e[13] = {
        vec(1, GATE_STD, GATE_MEAN),
        vec(1, GATE_STD, GATE_MEAN),
        mat(q, d, inv_sqrt(d)),
        mat(kv, d, inv_sqrt(d)),
        mat(kv, d, inv_sqrt(d)),
        mat(d, q, inv_sqrt(q)),
        vec(hd, 0, 0),
        vec(hd, 0, 0),
        vec(d, 0, 0),
        mat(f, d, inv_sqrt(d)),
        mat(f, d, inv_sqrt(d)),
        mat(d, f, inv_sqrt(f)),
        vec(d, 0, 0),
    };
    if (!cross) e[2].qk = e[3].qk = (int32_t)hd;
    static const int self_hf[9] = {2, 3, 4, 5, 9, 10, 11, 8, 12},
                     self_meta[9] = {2, 3, 4, 5, 9, 11, 10, 8, 12},
                     cross_hf[13] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
                     cross_meta[13] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 10, 12};
    const int *order = cross ? (m->meta ? cross_meta : cross_hf) : (m->meta ? self_meta : self_hf);
    int n = cross ? 13 : 9;
    for (int k = 0; k < n; k++) {
        int i = order[k];
        mt *t = &e[i];
        const char *attn = i >= 2 && i <= 5 ? (cross ? "cross_attn." : "self_attn.") : "";
        snprintf(t->hf, sizeof t->hf, "language_model.model.layers.%d.%s%s", hf_i, attn, sfx[i][0]);
        snprintf(t->meta, sizeof t->meta, "text_model.%s.%d.%s",
                 cross ? "cross_attention_layers" : "layers", meta_i, sfx[i][1]);
        emit(m, t);
    }
}

static int is_cross(const mlm_config *c, int i) {
    for (int k = 0; k < c->n_cross; k++)
        if (c->cross_layers[k] == i) return 1;
    return 0;
}

/* The text model: HF (MllamaForCausalLM: embed_tokens of n_vocab + 8 rows, the decoder
 * layers in HF numbering, norm, lm_head) or Meta (CrossAttentionTransformerText:
 * tok_embeddings, norm, output, learnable_embedding = embed_tokens' last 8 rows, the
 * self-attention layers, then the cross-attention blocks). */
static void text_model(mplan *m) {
    const mlm_config *c = &m->pl->cfg;
    int64_t d = c->n_embd, v = c->n_vocab;
    mt emb = mat(v + 8, d, 0.02f), norm = vec(d, 0, 0), head = mat(v, d, inv_sqrt(d));
    named(&emb, "language_model.model.embed_tokens.weight", "text_model.tok_embeddings.weight", 0);
    named(&norm, "language_model.model.norm.weight", "text_model.norm.weight", 0);
    named(&head, "language_model.lm_head.weight", "text_model.output.weight", 0);
    if (!m->meta) {
        emit(m, &emb);
        for (int i = 0, self = 0, cross = 0; i < c->n_layer; i++) {
            if (is_cross(c, i))
                text_layer(m, 1, i, cross++);
            else
                text_layer(m, 0, i, self++);
        }
        emit(m, &norm);
        emit(m, &head);
        return;
    }
    emb.m_dim = 2;
    emb.mshape[0] = v, emb.mshape[1] = d;
    emit(m, &emb);
    emit(m, &norm);
    emit(m, &head);
    mt learn = emb;
    snprintf(learn.meta, sizeof learn.meta, "text_model.learnable_embedding.weight");
    learn.mshape[0] = 8;
    learn.m_row_off = v;
    emit(m, &learn);
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0, self = 0, cross = 0; i < c->n_layer; i++) {
            int x = is_cross(c, i);
            if (x == pass) text_layer(m, x, i, x ? cross : self);
            if (x)
                cross++;
            else
                self++;
        }
}

/* MllamaForConditionalGeneration's tensors: HF in its state_dict order (vision_model,
 * language_model, multi_modal_projector); Meta in CrossAttentionTransformer's (M6): the
 * vision encoder, the projection, then the text model; one file. */
mlm_status mlm_synth_plan_mllama(mlm_synth_plan *pl, mlm_error *err) {
    mplan m = {.pl = pl, .meta = pl->format == MLM_SYNTH_META, .err = err};
    const mlm_vision_config *v = &pl->cfg.vision;
    if (v->max_tiles < 1 || v->n_aspect > MLM_SYNTH_MAX_ASPECT)
        return mlm_error_set(err, MLM_ERR_INTERNAL, "synth: %s: vision config out of range",
                             pl->preset);
    vision_top(&m, m.meta ? 1 : 0);
    for (int n = 0; n < v->n_layer; n++)
        vision_layer(&m, 0, n);
    for (int n = 0; n < v->n_global_layer; n++)
        vision_layer(&m, 1, n);
    if (m.meta) {
        vision_top(&m, 2);
        projector(&m);
    }
    text_model(&m);
    if (!m.meta) projector(&m);
    return m.st;
}

// ---- --layers ----

/* Meta's cross-attention schedule (M6 _init_fusion_schedule) for N_SELF self-attention
 * and N_CROSS cross-attention layers, as HF layer indices (block m runs before self layer
 * s_m: HF index s_m + m) into OUT; the count it places (Meta may place fewer). */
static int meta_cross_schedule(int n_self, int n_cross, int32_t *out) {
    if (n_cross <= 0 || n_self <= 0) return 0;
    int k = (n_self + n_cross - 1) / n_cross, n = 0;
    int32_t s[MLM_MAX_CROSS_LAYERS];
    for (int j = n_self - 1; j >= 0 && n < n_cross && n < MLM_MAX_CROSS_LAYERS; j -= k)
        s[n++] = j;
    for (int m = 0; m < n; m++)
        out[m] = s[n - 1 - m] + m;
    return n;
}

/* Cross-attention layers of C below N (HF numbering) into OUT; their count. */
static int cross_below(const mlm_config *c, int n, int32_t *out) {
    int k = 0;
    for (int i = 0; i < c->n_cross; i++)
        if (c->cross_layers[i] < n) out[k++] = c->cross_layers[i];
    return k;
}

/* Whether the first N decoder layers of C can be written in the Meta format: their
 * cross-attention layers are where Meta's schedule for the kept counts puts them. */
static int meta_can_keep(const mlm_config *c, int n) {
    int32_t hf[MLM_MAX_CROSS_LAYERS], me[MLM_MAX_CROSS_LAYERS];
    int nc = cross_below(c, n, hf);
    return nc > 0 && meta_cross_schedule(n - nc, nc, me) == nc &&
           !memcmp(hf, me, (size_t)nc * sizeof hf[0]);
}

/* *OUT: a malloc'd copy of TEXT with the span [AT, END) replaced by WITH. */
static mlm_status replace_span(const char *text, const char *at, const char *end, const char *with,
                               char **out, mlm_error *err) {
    size_t len = strlen(text) - (size_t)(end - at) + strlen(with) + 1;
    if (!(*out = malloc(len))) return mlm_error_set(err, MLM_ERR_NOMEM, "synth: out of memory");
    snprintf(*out, len, "%.*s%s%s", (int)(at - text), text, with, end);
    return MLM_OK;
}

/* mllama: keeps the first N_LAYER decoder layers, 0 < N_LAYER < the preset's count (see
 * mlm_synth_plan_make_layers). The
 * config's text_config says N_LAYER and lists the cross-attention layers below it (in the
 * file's layout: one per line); params.json the self- and cross-attention layers kept. */
mlm_status mlm_synth_keep_layers_mllama(mlm_synth_plan *pl, const mlm_synth_preset *pr,
                                        int32_t n_layer, mlm_error *err) {
    const mlm_config *c = &pl->cfg;
    int32_t all = c->n_layer, kept[MLM_MAX_CROSS_LAYERS];
    int n_cross = cross_below(c, n_layer, kept), n_self = n_layer - n_cross;
    if (pl->format == MLM_SYNTH_META && !meta_can_keep(c, n_layer)) {
        char ok[256] = "", list[160] = "", meta[160] = "";
        int32_t sched[MLM_MAX_CROSS_LAYERS];
        int n_sched = meta_cross_schedule(n_self, n_cross, sched);
        for (int n = 1; n <= all; n++)
            if (meta_can_keep(c, n))
                snprintf(ok + strlen(ok), sizeof ok - strlen(ok), "%s%d", ok[0] ? ", " : "", n);
        for (int i = 0; i < n_cross; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d", i ? ", " : "",
                     (int)kept[i]);
        for (int i = 0; i < n_sched; i++)
            snprintf(meta + strlen(meta), sizeof meta - strlen(meta), "%s%d", i ? ", " : "",
                     (int)sched[i]);
        if (n_cross == 0)
            return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                                 "synth: preset '%s' with %d layers cannot be written in the Meta "
                                 "format: it keeps no cross-attention layer, and Meta's model "
                                 "needs vision_num_cross_attention_layers >= 1 (its schedule "
                                 "divides by it); layer counts that work: %s",
                                 pr->name, (int)n_layer, ok);
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "synth: preset '%s' with %d layers cannot be written in the Meta "
                             "format: it keeps %d self-attention and %d cross-attention layers "
                             "(HF layers [%s]), and Meta's fusion schedule for n_layers %d, "
                             "vision_num_cross_attention_layers %d places them at HF layers [%s]; "
                             "layer counts that work: %s (the hf format takes any)",
                             pr->name, (int)n_layer, n_self, n_cross, list, n_self, n_cross, meta,
                             ok);
    }
    /* config.json: text_config's num_hidden_layers and cross_attention_layers */
    const char *tc = strstr(pr->config_json, "\"text_config\"");
    const char *xl = tc ? strstr(tc, "\"cross_attention_layers\": [") : NULL;
    const char *xe = xl ? strchr(xl, ']') : NULL;
    if (!xe)
        return mlm_error_set(err, MLM_ERR_INTERNAL,
                             "synth: preset '%s': no text_config.cross_attention_layers", pr->name);
    char with[512];
    int w = snprintf(with, sizeof with, "\"cross_attention_layers\": [");
    for (int i = 0; i < n_cross; i++)
        w +=
            snprintf(with + w, sizeof with - (size_t)w, "%s\n      %d", i ? "," : "", (int)kept[i]);
    snprintf(with + w, sizeof with - (size_t)w, "%s]", n_cross ? "\n    " : "");
    char *tmp = NULL;
    mlm_status st = replace_span(pr->config_json, xl, xe + 1, with, &tmp, err);
    if (!st) {
        /* the text_config's count: the first one after "text_config" */
        const char *key = "\"num_hidden_layers\": ";
        const char *at = strstr(strstr(tmp, "\"text_config\""), key), *num = at + strlen(key),
                   *end = num;
        while (*end >= '0' && *end <= '9')
            end++;
        snprintf(with, sizeof with, "%s%d", key, (int)n_layer);
        st = end == num ? mlm_error_set(err, MLM_ERR_INTERNAL, "synth: preset '%s': no %s<integer>",
                                        pr->name, key)
                        : replace_span(tmp, at, end, with, &pl->config_owned, err);
    }
    free(tmp);
    if (st) return st;
    /* params.json: the self- and cross-attention layers kept */
    if (pl->params_json) {
        st = mlm_synth_with_layers(pr, pr->params_json, "\"n_layers\": ", n_self, &tmp, err);
        if (!st)
            st = mlm_synth_with_layers(pr, tmp, "\"vision_num_cross_attention_layers\": ", n_cross,
                                       &pl->params_owned, err);
        free(tmp);
        if (st) return st;
        pl->params_json = pl->params_owned;
    }
    if (pl->config_json) pl->config_json = pl->config_owned;
    st = mlm_synth_read_config(pl, pr, pl->config_owned, err);
    if (!st && (pl->cfg.n_layer != n_layer || pl->cfg.n_cross != n_cross))
        st = mlm_error_set(err, MLM_ERR_INTERNAL,
                           "synth: preset '%s': config says %d layers and %d cross-attention "
                           "layers, not %d and %d",
                           pr->name, (int)pl->cfg.n_layer, (int)pl->cfg.n_cross, (int)n_layer,
                           n_cross);
    return st;
}

// ---- tile-table values ----

/* A tile table's elements [FIRST, FIRST + N): per tile, a run of the Meta table or zeros. */
void mlm_synth_fill_tiles(const mlm_synth_tensor *t, uint64_t base, float scale, mlm_dtype dtype,
                          int64_t first, int64_t n, char *out) {
    size_t es = mlm_dtype_size(dtype);
    int64_t cols = cols_of(t->n_dim, t->shape), pd = t->tile_block, tm = t->tile_max;
    while (n > 0) {
        int64_t a = first / cols, j = first % cols, tile = j / pd, rem = j % pd;
        int64_t len = pd - rem < n ? pd - rem : n;
        int64_t rows = 0, cc = 1;
        if (a >= 1 && a <= t->tile_n_aspect) {
            rows = t->tile_aspect[a - 1][0];
            cc = t->tile_aspect[a - 1][1];
        }
        if (tile < rows * cc) {
            /* Meta element [tile / cols, tile % cols, rem] of the [T, T, P * D] table */
            int64_t k = ((tile / cc) * tm + tile % cc) * pd + rem;
            mlm_synth_gen_run(base, (uint64_t)k, len, scale, t->mean, dtype, out);
        } else {
            memset(out, 0, (size_t)len * es);
        }
        out += (size_t)len * es;
        first += len;
        n -= len;
    }
}
