/* synth/synth.c: `meshlm synth`: checkpoints with a real model's exact configuration and
 * random weights, for tests and benchmarks without downloading a model.
 * The presets (synth_presets.c) embed the real HF config texts and the Meta params.json
 * values. Llama and Phi-3 plans come from one table of per-layer tensors here; mllama's (the
 * vision tower, cross-attention layers, the tile tables) from synth_mllama.c. The plan lists
 * every tensor of every file; values are generated chunk by chunk (1 MiB) while the format
 * writers stream them out, so memory stays a few MB for any model size. A plan may keep only
 * a preset's first layers (every shape stays, the configs say how many), so that a 70B-shaped
 * model fits one machine. See synth.h for how a value is tied to its canonical tensor element. */
#include "synth/synth.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/mapfile.h"
#include "format/json.h"
#include "format/writer_pytorch.h"
#include "format/writer_safetensors.h"
#include "config/config.h"
#include "synth/synth_internal.h"

#define CHUNK_BYTES (1u << 20)

// ---- the plan ----

/* One canonical tensor of a Llama layer or of the model. */
typedef struct canon {
    const char *hf, *meta; /* name suffixes ("self_attn.q_proj.weight", "attention.wq.weight") */
    int64_t rows, cols;    /* cols 0: a vector of RMSNorm weights (length rows) */
    float std;
    int split;           /* Meta shards: 0 replicated, 1 rows (column-parallel), 2 columns */
    int32_t qk_head_dim; /* q/k: Meta stores rows interleaved */
} canon;

/* Appends a zeroed tensor to PL's list (see synth_internal.h). */
mlm_status mlm_synth_push_tensor(mlm_synth_plan *pl, int64_t *cap, mlm_synth_tensor **out,
                                 mlm_error *err) {
    if (pl->n_tensors == *cap) {
        int64_t nc = *cap ? *cap * 2 : 256;
        mlm_synth_tensor *t = realloc(pl->tensors, (size_t)nc * sizeof *t);
        if (!t) return mlm_error_set(err, MLM_ERR_NOMEM, "synth: out of memory");
        pl->tensors = t;
        *cap = nc;
    }
    *out = &pl->tensors[pl->n_tensors++];
    memset(*out, 0, sizeof **out);
    return MLM_OK;
}

static mlm_status add_tensor(mlm_synth_plan *pl, int64_t *cap, const canon *c, const char *name,
                             const char *key, int file, int shard, int n_mp, mlm_error *err) {
    mlm_synth_tensor *t;
    mlm_status st = mlm_synth_push_tensor(pl, cap, &t, err);
    if (st) return st;
    snprintf(t->name, sizeof t->name, "%s", name);
    snprintf(t->key, sizeof t->key, "%s", key);
    t->std = c->std;
    t->file = file;
    t->qk_head_dim = pl->format == MLM_SYNTH_META ? c->qk_head_dim : 0;
    if (c->cols == 0) {
        t->n_dim = 1;
        t->shape[0] = t->full_cols = c->rows;
        return MLM_OK;
    }
    t->n_dim = 2;
    t->shape[0] = c->rows;
    t->shape[1] = t->full_cols = c->cols;
    if (n_mp > 1 && c->split == 1) {
        t->shape[0] = c->rows / n_mp;
        t->row_off = shard * t->shape[0];
    } else if (n_mp > 1 && c->split == 2) {
        t->shape[1] = c->cols / n_mp;
        t->col_off = shard * t->shape[1];
    }
    return MLM_OK;
}

/* Llama: HF names and order (per layer: q, k, v, o, gate, up, down, input_layernorm,
 * post_attention_layernorm), or Meta names and order (wq, wk, wv, wo, w1, w2, w3,
 * attention_norm, ffn_norm), shard by shard.
 * Phi-3 (HF only): per layer qkv_proj [q + 2 kv, d] (rows q | k | v), o_proj, gate_up_proj
 * [2 f, d] (rows gate | up), down_proj, the two norms (models.md 5.2); each fused tensor is
 * one canonical tensor with one std, as its parts have the same in_features. */
static mlm_status plan_model(mlm_synth_plan *pl, int n_mp, mlm_error *err) {
    const mlm_config *c = &pl->cfg;
    int64_t d = c->n_embd, q = (int64_t)c->n_head * c->head_dim,
            kv = (int64_t)c->n_kv_head * c->head_dim, f = c->n_ff, v = c->n_vocab;
    float s_d = (float)(1 / sqrt((double)d)), s_q = (float)(1 / sqrt((double)q)),
          s_f = (float)(1 / sqrt((double)f));
    const canon phi3[6] = {
        {"self_attn.qkv_proj.weight", NULL, q + 2 * kv, d, s_d, 0, 0},
        {"self_attn.o_proj.weight", NULL, d, q, s_q, 0, 0},
        {"mlp.gate_up_proj.weight", NULL, 2 * f, d, s_d, 0, 0},
        {"mlp.down_proj.weight", NULL, d, f, s_f, 0, 0},
        {"input_layernorm.weight", NULL, d, 0, 0, 0, 0},
        {"post_attention_layernorm.weight", NULL, d, 0, 0, 0, 0},
    };
    const canon llama[9] = {
        {"self_attn.q_proj.weight", "attention.wq.weight", q, d, s_d, 1, c->head_dim},
        {"self_attn.k_proj.weight", "attention.wk.weight", kv, d, s_d, 1, c->head_dim},
        {"self_attn.v_proj.weight", "attention.wv.weight", kv, d, s_d, 1, 0},
        {"self_attn.o_proj.weight", "attention.wo.weight", d, q, s_q, 2, 0},
        {"mlp.gate_proj.weight", "feed_forward.w1.weight", f, d, s_d, 1, 0},
        {"mlp.up_proj.weight", "feed_forward.w3.weight", f, d, s_d, 1, 0},
        {"mlp.down_proj.weight", "feed_forward.w2.weight", d, f, s_f, 2, 0},
        {"input_layernorm.weight", "attention_norm.weight", d, 0, 0, 0, 0},
        {"post_attention_layernorm.weight", "ffn_norm.weight", d, 0, 0, 0, 0},
    };
    static const int meta_order[9] = {0, 1, 2, 3, 4, 6, 5, 7, 8};
    /* Qwen2: q/k/v biases (std 0.02); Qwen3: per-head RMSNorm weights of q and k (HF only) */
    const canon qwen2[3] = {{"self_attn.q_proj.bias", NULL, q, 0, 0.02f, 0, 0},
                            {"self_attn.k_proj.bias", NULL, kv, 0, 0.02f, 0, 0},
                            {"self_attn.v_proj.bias", NULL, kv, 0, 0.02f, 0, 0}};
    const canon qwen3[2] = {{"self_attn.q_norm.weight", NULL, c->head_dim, 0, 0, 0, 0},
                            {"self_attn.k_norm.weight", NULL, c->head_dim, 0, 0, 0, 0}};
    const canon *extra = c->family == MLM_FAMILY_QWEN2   ? qwen2
                         : c->family == MLM_FAMILY_QWEN3 ? qwen3
                                                         : NULL;
    int n_extra = c->family == MLM_FAMILY_QWEN2 ? 3 : c->family == MLM_FAMILY_QWEN3 ? 2 : 0;
    const canon embed = {"model.embed_tokens.weight", "tok_embeddings.weight", v, d, 0.02f, 1, 0};
    const canon norm = {"model.norm.weight", "norm.weight", d, 0, 0, 0, 0};
    const canon head = {"lm_head.weight", "output.weight", v, d, s_d, 1, 0};
    /* Tied: HF has no lm_head; Meta's output.weight is a copy of the embedding. */
    const canon tied_head = {"model.embed_tokens.weight", "output.weight", v, d, 0.02f, 1, 0};
    int is_phi3 = c->family == MLM_FAMILY_PHI3, n_per_layer = is_phi3 ? 6 : 9;
    const canon *layer = is_phi3 ? phi3 : llama;
    int meta = pl->format == MLM_SYNTH_META;
    if (meta && (is_phi3 || n_extra)) /* refused by mlm_synth_plan_make */
        return mlm_error_set(err, MLM_ERR_INTERNAL, "synth: %s has no Meta form", pl->preset);
    if (meta && n_mp > 1 &&
        (c->n_head % n_mp || c->n_kv_head % n_mp || v % n_mp || f % n_mp || d % n_mp))
        return mlm_error_set(err, MLM_ERR_INTERNAL, "synth: %s does not split into %d shards",
                             pl->preset, n_mp);
    int64_t cap = 0;
    int shards = meta ? n_mp : 1;
    mlm_status st = MLM_OK;
    char name[96], key[96];
#define ADD(cn, nm, ky)                                                                            \
    do {                                                                                           \
        st = add_tensor(pl, &cap, cn, nm, ky, r, r, shards, err);                                  \
        if (st) return st;                                                                         \
    } while (0)
    for (int r = 0; r < shards; r++) {
        ADD(&embed, meta ? embed.meta : embed.hf, embed.hf);
        for (int i = 0; i < c->n_layer; i++)
            for (int k = 0; k < n_per_layer + n_extra; k++) {
                const canon *t = k < n_per_layer ? &layer[meta ? meta_order[k] : k]
                                                 : &extra[k - n_per_layer];
                snprintf(key, sizeof key, "model.layers.%d.%s", i, t->hf);
                if (meta) snprintf(name, sizeof name, "layers.%d.%s", i, t->meta);
                ADD(t, meta ? name : key, key);
            }
        ADD(&norm, meta ? norm.meta : norm.hf, norm.hf);
        if (!c->tied_embeddings)
            ADD(&head, meta ? head.meta : head.hf, head.hf);
        else if (meta)
            ADD(&tied_head, tied_head.meta, tied_head.hf);
    }
#undef ADD
    return st;
}

// ---- --layers ----

/* *OUT: a malloc'd copy of the preset's JSON text TEXT whose integer after KEY
 * ("\"num_hidden_layers\": ") is N. INTERNAL when TEXT has no such integer. */
mlm_status mlm_synth_with_layers(const mlm_synth_preset *pr, const char *text, const char *key,
                                 int32_t n, char **out, mlm_error *err) {
    const char *at = strstr(text, key), *num = at ? at + strlen(key) : NULL, *end = num;
    while (end && *end >= '0' && *end <= '9')
        end++;
    if (!at || end == num)
        return mlm_error_set(err, MLM_ERR_INTERNAL,
                             "synth: preset '%s': no %s<integer> in its text", pr->name, key);
    size_t len = strlen(text) + 16;
    if (!(*out = malloc(len))) return mlm_error_set(err, MLM_ERR_NOMEM, "synth: out of memory");
    snprintf(*out, len, "%.*s%d%s", (int)(num - text), text, (int)n, end);
    return MLM_OK;
}

mlm_status mlm_synth_read_config(mlm_synth_plan *pl, const mlm_synth_preset *pr,
                                 const char *text, mlm_error *err) {
    json_t *j;
    mlm_status st = mlm_json_parse(pr->name, text, strlen(text), &j, err);
    if (st) return st;
    st = mlm_config_from_json(pr->name, j, &pl->cfg, err);
    json_decref(j);
    return st;
}

/* Keeps the first N_LAYER of the preset's layers (0 < N_LAYER < its count): config.json and
 * params.json say N_LAYER, every shape stays. The plan's config is read from the HF text
 * written (for the Meta format too: params.json gives the same model). */
static mlm_status keep_layers(mlm_synth_plan *pl, const mlm_synth_preset *pr, int32_t n_layer,
                              mlm_error *err) {
    mlm_status st = mlm_synth_with_layers(pr, pr->config_json, "\"num_hidden_layers\": ", n_layer,
                                          &pl->config_owned, err);
    if (!st && pl->params_json)
        st = mlm_synth_with_layers(pr, pr->params_json, "\"n_layers\": ", n_layer,
                                   &pl->params_owned, err);
    if (st) return st;
    if (pl->config_json) pl->config_json = pl->config_owned;
    if (pl->params_json) pl->params_json = pl->params_owned;
    st = mlm_synth_read_config(pl, pr, pl->config_owned, err);
    if (!st && pl->cfg.n_layer != n_layer)
        st = mlm_error_set(err, MLM_ERR_INTERNAL,
                           "synth: preset '%s': config says %d layers, not %d", pr->name,
                           (int)pl->cfg.n_layer, (int)n_layer);
    return st;
}

mlm_status mlm_synth_plan_make(const mlm_synth_params *p, mlm_synth_plan *pl, mlm_error *err) {
    return mlm_synth_plan_make_layers(p, p->n_layer, pl, err);
}

mlm_status mlm_synth_plan_make_layers(const mlm_synth_params *p, int32_t n_layer,
                                      mlm_synth_plan *pl, mlm_error *err) {
    memset(pl, 0, sizeof *pl);
    const mlm_synth_preset *pr = mlm_synth_preset_find(p->preset);
    if (!pr)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "synth: unknown preset '%s' (presets: %s)",
                             p->preset ? p->preset : "(none)", mlm_synth_presets());
    if (p->format != MLM_SYNTH_HF && p->format != MLM_SYNTH_META)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "synth: format %d is not 0 (hf) or 1 (meta)",
                             p->format);
    if (p->dtype != MLM_DTYPE_BF16 && p->dtype != MLM_DTYPE_F32)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "synth: dtype %s is not bf16 or f32",
                             mlm_dtype_name(p->dtype));
    pl->preset = pr->name;
    pl->format = p->format;
    pl->dtype = p->dtype;
    pl->seed = p->seed;
    mlm_status st = mlm_synth_read_config(pl, pr, pr->config_json, err);
    if (st) return st;
    if (pl->cfg.family != pr->family)
        return mlm_error_set(err, MLM_ERR_INTERNAL, "synth: preset '%s': config is %s, not %s",
                             pr->name, mlm_family_name(pl->cfg.family),
                             mlm_family_name(pr->family));
    if (p->format == MLM_SYNTH_META && pr->n_mp == 0)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "synth: preset '%s' has no Meta format: %s is published only as "
                             "Hugging Face safetensors (there is no Meta-format checkpoint to "
                             "imitate); use the hf format",
                             pr->name, pr->family == MLM_FAMILY_PHI3 ? "Phi-4" : "Qwen");
    if (p->format == MLM_SYNTH_HF) {
        pl->config_json = pr->config_json;
        pl->generation_json = pr->generation_json;
        pl->preprocessor_json = pr->preprocessor_json;
        pl->n_files = 1;
        snprintf(pl->files[0], sizeof pl->files[0], "model");
    } else {
        pl->params_json = pr->params_json;
        pl->n_files = pr->n_mp;
        for (int r = 0; r < pr->n_mp; r++)
            snprintf(pl->files[r], sizeof pl->files[r], "consolidated.%02d.pth", r);
        if (pr->meta_file) snprintf(pl->files[0], sizeof pl->files[0], "%s", pr->meta_file);
    }
    /* the layers kept; 0 or all leave the preset's texts as they are */
    int32_t all = pl->cfg.n_layer;
    int keep = n_layer != 0 && n_layer != all, mllama = pr->family == MLM_FAMILY_MLLAMA;
    if (n_layer < 0 || n_layer > all)
        st = mlm_error_set(err, MLM_ERR_INVALID_ARG,
                           "synth: preset '%s' has %d layers, so %d of them cannot be kept "
                           "(keep 1 to %d; 0 keeps all)",
                           pr->name, (int)all, (int)n_layer, (int)all);
    else if (keep)
        st = mllama ? mlm_synth_keep_layers_mllama(pl, pr, n_layer, err)
                    : keep_layers(pl, pr, n_layer, err);
    if (!st) st = mllama ? mlm_synth_plan_mllama(pl, err) : plan_model(pl, pr->n_mp, err);
    if (st) mlm_synth_plan_free(pl);
    return st;
}

void mlm_synth_plan_free(mlm_synth_plan *pl) {
    if (!pl) return;
    free(pl->tensors);
    free(pl->config_owned);
    free(pl->params_owned);
    memset(pl, 0, sizeof *pl);
}

// ---- values ----

#define GOLDEN 0x9E3779B97F4A7C15ull
/* Standard deviation of the sum of four uniform 16-bit integers: 2 * sqrt((2^32 - 1) / 12). */
#define SUM4_STD 37837.22669716126
#define SUM4_MEAN 131070 /* 4 * 65535 / 2 */

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The SplitMix64 stream of canonical tensor KEY: element k is mix64(base + (k+1) * GOLDEN),
 * so any element can be generated on its own. */
static uint64_t stream_base(uint64_t seed, const char *key) {
    uint64_t h = 0xCBF29CE484222325ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        h = (h ^ *p) * 0x100000001B3ull;
    return mix64(h ^ mix64(seed + GOLDEN));
}

static inline float value_of(uint64_t z, float scale) {
    int32_t s = (int32_t)((z & 0xFFFF) + ((z >> 16) & 0xFFFF) + ((z >> 32) & 0xFFFF) + (z >> 48));
    return (float)(s - SUM4_MEAN) * scale;
}

static inline uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFF + ((u >> 16) & 1); /* round to nearest even; no NaNs here */
    return (uint16_t)(u >> 16);
}

/* N consecutive elements of the stream from element K0, plus MEAN. Blocks of a fixed 16
 * elements let the compiler vectorise the hash at -O2 (about 2x faster than the plain loop). */
#define GEN_BLOCK 16
void mlm_synth_gen_run(uint64_t base, uint64_t k0, int64_t n, float scale, float mean,
                       mlm_dtype dtype, void *dst) {
    uint64_t x = base + (k0 + 1) * GOLDEN;
    int64_t i = 0;
    if (dtype == MLM_DTYPE_BF16) {
        uint16_t *o = dst;
        for (; i + GEN_BLOCK <= n; i += GEN_BLOCK, x += GEN_BLOCK * GOLDEN)
            for (int j = 0; j < GEN_BLOCK; j++)
                o[i + j] = to_bf16(value_of(mix64(x + (uint64_t)j * GOLDEN), scale) + mean);
        for (; i < n; i++, x += GOLDEN)
            o[i] = to_bf16(value_of(mix64(x), scale) + mean);
    } else {
        float *o = dst;
        for (; i + GEN_BLOCK <= n; i += GEN_BLOCK, x += GEN_BLOCK * GOLDEN)
            for (int j = 0; j < GEN_BLOCK; j++)
                o[i + j] = value_of(mix64(x + (uint64_t)j * GOLDEN), scale) + mean;
        for (; i < n; i++, x += GOLDEN)
            o[i] = value_of(mix64(x), scale) + mean;
    }
}

/* Elements of T per row: the product of its dims after the first (1-D: its length). */
static int64_t row_len(const mlm_synth_tensor *t) {
    int64_t c = t->n_dim == 1 ? t->shape[0] : 1;
    for (int k = 1; k < t->n_dim; k++)
        c *= t->shape[k];
    return c;
}

void mlm_synth_fill(const mlm_synth_tensor *t, uint64_t seed, mlm_dtype dtype, int64_t first,
                    int64_t n, void *dst) {
    size_t es = mlm_dtype_size(dtype);
    if (t->std == 0) {
        for (int64_t i = 0; i < n; i++) {
            if (dtype == MLM_DTYPE_BF16)
                ((uint16_t *)dst)[i] = 0x3F80;
            else
                ((float *)dst)[i] = 1.0f;
        }
        return;
    }
    uint64_t base = stream_base(seed, t->key);
    float scale = (float)(t->std / SUM4_STD);
    if (t->tile_block > 0) {
        mlm_synth_fill_tiles(t, base, scale, dtype, first, n, dst);
        return;
    }
    int64_t cols = row_len(t);
    char *out = dst;
    while (n > 0) {
        int64_t row = first / cols, col = first % cols, len = cols - col;
        if (len > n) len = n;
        int64_t r = t->row_off + row;
        if (t->qk_head_dim > 0) {
            /* Meta row h*hd + 2i + j holds HF row h*hd + j*hd/2 + i (models.md 3.3). */
            int64_t hd = t->qk_head_dim, h = r / hd, rem = r % hd;
            r = h * hd + (rem % 2) * (hd / 2) + rem / 2;
        }
        mlm_synth_gen_run(base, (uint64_t)(r * t->full_cols + t->col_off + col), len, scale,
                          t->mean, dtype, out);
        out += (size_t)len * es;
        first += len;
        n -= len;
    }
}

// ---- writing ----

typedef struct small_file {
    const char *name; /* in out_dir */
    const char *text;
} small_file;

/* A tokenizer file copied into out_dir. */
typedef struct tok_file {
    char *src;        /* owned */
    const char *name; /* static: its name in out_dir */
    int64_t size;
} tok_file;

#define MAX_SMALL                                                                                  \
    3             /* config.json, generation_config.json (+ preprocessor_config.json), or          \
                     params.json */
#define MAX_TOK 3 /* Phi-4: tokenizer.json, tokenizer_config.json, special_tokens_map.json */

/* Everything one mlm_synth call writes, planned before the first byte. */
typedef struct job {
    const mlm_synth_params *p;
    mlm_synth_plan plan;
    mlm_tensor_spec *specs;                      /* owned; names borrowed from plan.tensors */
    mlm_safetensors_writer *st;                  /* HF */
    mlm_pytorch_writer *pt[MLM_SYNTH_MAX_FILES]; /* Meta */
    small_file small[MAX_SMALL];
    int n_small;
    tok_file tok[MAX_TOK];
    int n_tok;
    mlm_outfile small_out[MAX_SMALL + MAX_TOK]; /* the small files, then the tokenizer's */
    int64_t total, done;
    void *chunk; /* owned, CHUNK_BYTES */
} job;

static void job_free(job *jb) {
    mlm_safetensors_writer_free(jb->st);
    for (int i = 0; i < MLM_SYNTH_MAX_FILES; i++)
        mlm_pytorch_writer_free(jb->pt[i]);
    for (int i = 0; i < MAX_SMALL + MAX_TOK; i++)
        mlm_outfile_discard(&jb->small_out[i]);
    for (int i = 0; i < jb->n_tok; i++)
        free(jb->tok[i].src);
    mlm_synth_plan_free(&jb->plan);
    free(jb->specs);
    free(jb->chunk);
    memset(jb, 0, sizeof *jb);
}

/* The tokenizer files of each family: those a model directory holds (models.md 4.1, 5.3). */
typedef struct tok_name {
    const char *name;
    int required;
} tok_name;
static const tok_name llama_tok[] = {{"tokenizer.model", 1}};
static const tok_name phi3_tok[] = { /* Qwen's too */
    {"tokenizer.json", 1}, {"tokenizer_config.json", 0}, {"special_tokens_map.json", 0}};

/* Plans the copy of p->tokenizer: Llama 3 takes its tokenizer.model file (or a directory
 * holding one); Phi-4 and Qwen a directory, whose tokenizer.json is copied with tokenizer_config.json
 * and special_tokens_map.json when present. IO for a missing path or required file. */
static mlm_status plan_tokenizer(job *jb, mlm_error *err) {
    const char *src = jb->p->tokenizer;
    mlm_family fam = jb->plan.cfg.family;
    int phi3 = fam == MLM_FAMILY_PHI3 || fam == MLM_FAMILY_QWEN2 || fam == MLM_FAMILY_QWEN3;
    const tok_name *names = phi3 ? phi3_tok : llama_tok;
    int n_names = phi3 ? 3 : 1;
    struct stat sb;
    if (stat(src, &sb) != 0)
        return mlm_error_set(err, MLM_ERR_IO, "%s: tokenizer to copy: %s", src, strerror(errno));
    if (!S_ISDIR(sb.st_mode) && !S_ISREG(sb.st_mode))
        return mlm_error_set(err, MLM_ERR_IO, "%s: tokenizer to copy: not a regular file", src);
    if (S_ISREG(sb.st_mode)) {
        if (phi3)
            return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                                 "%s: tokenizer to copy: preset '%s' needs a directory holding "
                                 "tokenizer.json (and tokenizer_config.json, "
                                 "special_tokens_map.json), not a file",
                                 src, jb->plan.preset);
        jb->tok[0] = (tok_file){strdup(src), names[0].name, sb.st_size};
        if (!jb->tok[0].src) return mlm_error_set(err, MLM_ERR_NOMEM, "synth: out of memory");
        jb->n_tok = 1;
        jb->total += sb.st_size;
        return MLM_OK;
    }
    for (int i = 0; i < n_names; i++) {
        char *path = mlm_path_join(src, names[i].name);
        if (!path) return mlm_error_set(err, MLM_ERR_NOMEM, "synth: out of memory");
        struct stat fs;
        int found = stat(path, &fs) == 0, e = errno, ok = found && S_ISREG(fs.st_mode);
        if (!ok && names[i].required) {
            mlm_status st = mlm_error_set(err, MLM_ERR_IO, "%s: tokenizer to copy: %s", path,
                                          found ? "not a regular file" : strerror(e));
            free(path);
            return st;
        }
        if (!ok) {
            free(path);
            continue;
        }
        jb->tok[jb->n_tok++] = (tok_file){path, names[i].name, fs.st_size};
        jb->total += fs.st_size;
    }
    return MLM_OK;
}

static char *out_path(const job *jb, const char *name) {
    return mlm_path_join(jb->p->out_dir, name);
}

static mlm_status job_prepare(const mlm_synth_params *p, int32_t n_layer, job *jb, mlm_error *err) {
    memset(jb, 0, sizeof *jb);
    jb->p = p;
    if (!p->out_dir || !p->out_dir[0])
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "synth: no output directory given");
    if (p->max_shard_bytes < 0)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "synth: max_shard_bytes %lld is negative",
                             (long long)p->max_shard_bytes);
    mlm_status st = mlm_synth_plan_make_layers(p, n_layer, &jb->plan, err);
    if (st) return st;
    const mlm_synth_plan *pl = &jb->plan;
    jb->specs = calloc((size_t)pl->n_tensors, sizeof *jb->specs);
    if (!jb->specs) return mlm_error_set(err, MLM_ERR_NOMEM, "synth: out of memory");
    for (int64_t i = 0; i < pl->n_tensors; i++) {
        const mlm_synth_tensor *t = &pl->tensors[i];
        mlm_tensor_spec *s = &jb->specs[i];
        s->name = t->name;
        s->dtype = pl->dtype;
        s->n_dim = t->n_dim;
        for (int k = 0; k < t->n_dim; k++)
            s->shape[k] = t->shape[k];
    }
    if (pl->format == MLM_SYNTH_HF) {
        st = mlm_safetensors_writer_create(p->out_dir, pl->files[0], jb->specs, pl->n_tensors,
                                           p->max_shard_bytes, &jb->st, err);
        if (st) return st;
        jb->total += (int64_t)mlm_safetensors_writer_total_bytes(jb->st);
        jb->small[jb->n_small++] = (small_file){"config.json", pl->config_json};
        if (pl->generation_json) /* none for Qwen (synth_presets_qwen.c) */
            jb->small[jb->n_small++] =
                (small_file){"generation_config.json", pl->generation_json};
        if (pl->preprocessor_json)
            jb->small[jb->n_small++] =
                (small_file){"preprocessor_config.json", pl->preprocessor_json};
    } else {
        int64_t first = 0;
        for (int r = 0; r < pl->n_files; r++) {
            int64_t n = 0;
            while (first + n < pl->n_tensors && pl->tensors[first + n].file == r)
                n++;
            char *path = out_path(jb, pl->files[r]);
            if (!path) return mlm_error_set(err, MLM_ERR_NOMEM, "synth: out of memory");
            st = mlm_pytorch_writer_create(path, jb->specs + first, n, &jb->pt[r], err);
            free(path);
            if (st) return st;
            jb->total += (int64_t)mlm_pytorch_writer_total_bytes(jb->pt[r]);
            first += n;
        }
        jb->small[jb->n_small++] = (small_file){"params.json", pl->params_json};
    }
    for (int i = 0; i < jb->n_small; i++)
        jb->total += (int64_t)strlen(jb->small[i].text);
    return p->tokenizer ? plan_tokenizer(jb, err) : MLM_OK;
}

static void progress(job *jb, int64_t done) {
    jb->done = done;
    if (jb->p->progress) jb->p->progress(jb->p->progress_ctx, done, jb->total);
}

/* Creates DIR and its missing parents. */
static mlm_status make_dirs(const char *dir, mlm_error *err) {
    char *p = strdup(dir);
    if (!p) return mlm_error_set(err, MLM_ERR_NOMEM, "synth: out of memory");
    for (char *s = p + 1;; s++) {
        int end = *s == 0;
        if (*s == '/' || end) {
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                mlm_status st = mlm_error_set(err, MLM_ERR_IO, "%s: cannot create directory: %s", p,
                                              strerror(errno));
                free(p);
                return st;
            }
            if (end) break;
            *s = '/';
        }
    }
    free(p);
    if (!mlm_is_dir(dir))
        return mlm_error_set(err, MLM_ERR_IO, "%s: exists and is not a directory", dir);
    return MLM_OK;
}

// ---- the generator thread ----

/* Values are generated on a second thread into a ring of chunks while this one writes the
 * previous ones, so generation overlaps the write syscalls and the disk. A chunk holds
 * part of one tensor; the ring bounds memory to RING x CHUNK_BYTES. */
#define RING 4

typedef struct ring {
    const mlm_synth_plan *plan;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned char *buf[RING]; /* owned */
    size_t len[RING];
    int file[RING]; /* the plan file the chunk belongs to */
    int64_t produced, consumed;
    int done, stop;
} ring;

static void *generate(void *arg) {
    ring *rg = arg;
    const mlm_synth_plan *pl = rg->plan;
    size_t es = mlm_dtype_size(pl->dtype);
    int64_t per_chunk = (int64_t)(CHUNK_BYTES / es);
    for (int64_t i = 0; i < pl->n_tensors; i++) {
        const mlm_synth_tensor *t = &pl->tensors[i];
        int64_t numel = 1;
        for (int k = 0; k < t->n_dim; k++)
            numel *= t->shape[k];
        for (int64_t e = 0; e < numel; e += per_chunk) {
            pthread_mutex_lock(&rg->mu);
            while (!rg->stop && rg->produced - rg->consumed == RING)
                pthread_cond_wait(&rg->cv, &rg->mu);
            int stop = rg->stop;
            pthread_mutex_unlock(&rg->mu);
            if (stop) return NULL;
            int slot = (int)(rg->produced % RING);
            int64_t k = numel - e < per_chunk ? numel - e : per_chunk;
            mlm_synth_fill(t, pl->seed, pl->dtype, e, k, rg->buf[slot]);
            rg->len[slot] = (size_t)k * es;
            rg->file[slot] = t->file;
            pthread_mutex_lock(&rg->mu);
            rg->produced++;
            pthread_cond_broadcast(&rg->cv);
            pthread_mutex_unlock(&rg->mu);
        }
    }
    pthread_mutex_lock(&rg->mu);
    rg->done = 1;
    pthread_cond_broadcast(&rg->cv);
    pthread_mutex_unlock(&rg->mu);
    return NULL;
}

/* Finishes weight file R: the safetensors set (R 0 of 1) or consolidated file R. */
static mlm_status finish_file(job *jb, int r, mlm_error *err) {
    return jb->st ? mlm_safetensors_writer_finish(jb->st, err)
                  : mlm_pytorch_writer_finish(jb->pt[r], err);
}

/* Bytes of weight files written so far. */
static int64_t weights_written(const job *jb) {
    if (jb->st) return (int64_t)mlm_safetensors_writer_written(jb->st);
    int64_t n = 0;
    for (int r = 0; r < jb->plan.n_files; r++)
        n += (int64_t)mlm_pytorch_writer_written(jb->pt[r]);
    return n;
}

/* Writes every weight file: chunks come from the generator thread in plan order. */
static mlm_status write_weights(job *jb, mlm_error *err) {
    ring rg = {.plan = &jb->plan};
    mlm_status st = MLM_OK;
    pthread_mutex_init(&rg.mu, NULL);
    pthread_cond_init(&rg.cv, NULL);
    for (int i = 0; i < RING; i++)
        if (!(rg.buf[i] = malloc(CHUNK_BYTES)))
            st = mlm_error_set(err, MLM_ERR_NOMEM, "synth: out of memory");
    pthread_t th;
    int started = 0;
    if (!st) {
        if (pthread_create(&th, NULL, generate, &rg) != 0)
            st = mlm_error_set(err, MLM_ERR_INTERNAL, "synth: cannot start a thread");
        else
            started = 1;
    }
    int file = 0;
    while (!st) {
        pthread_mutex_lock(&rg.mu);
        while (rg.consumed == rg.produced && !rg.done)
            pthread_cond_wait(&rg.cv, &rg.mu);
        int have = rg.consumed < rg.produced;
        pthread_mutex_unlock(&rg.mu);
        if (!have) break;
        int slot = (int)(rg.consumed % RING);
        while (!st && file < rg.file[slot])
            st = finish_file(jb, file++, err);
        if (!st)
            st = jb->st ? mlm_safetensors_writer_write(jb->st, rg.buf[slot], rg.len[slot], err)
                        : mlm_pytorch_writer_write(jb->pt[file], rg.buf[slot], rg.len[slot], err);
        pthread_mutex_lock(&rg.mu);
        rg.consumed++;
        pthread_cond_broadcast(&rg.cv);
        pthread_mutex_unlock(&rg.mu);
        if (!st) progress(jb, weights_written(jb));
    }
    while (!st && file < jb->plan.n_files)
        st = finish_file(jb, file++, err);
    if (started) {
        pthread_mutex_lock(&rg.mu);
        rg.stop = 1;
        pthread_cond_broadcast(&rg.cv);
        pthread_mutex_unlock(&rg.mu);
        pthread_join(th, NULL);
    }
    pthread_mutex_destroy(&rg.mu);
    pthread_cond_destroy(&rg.cv);
    for (int i = 0; i < RING; i++)
        free(rg.buf[i]);
    if (!st) progress(jb, weights_written(jb));
    return st;
}

static mlm_status copy_tokenizer(job *jb, const tok_file *tf, mlm_outfile *out, mlm_error *err) {
    const char *src = tf->src;
    char *dst = out_path(jb, tf->name);
    if (!dst) return mlm_error_set(err, MLM_ERR_NOMEM, "synth: out of memory");
    int fd = open(src, O_RDONLY | O_CLOEXEC);
    mlm_status st =
        fd < 0 ? mlm_error_set(err, MLM_ERR_IO, "%s: cannot open: %s", src, strerror(errno))
               : mlm_outfile_open(out, dst, (uint64_t)tf->size, err);
    int64_t copied = 0;
    while (!st) {
        ssize_t n = read(fd, jb->chunk, CHUNK_BYTES);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) st = mlm_error_set(err, MLM_ERR_IO, "%s: read failed: %s", src, strerror(errno));
        if (n <= 0) break;
        st = mlm_outfile_write(out, jb->chunk, (size_t)n, err);
        copied += n;
        progress(jb, jb->done + n);
    }
    if (!st && copied != tf->size)
        st = mlm_error_set(err, MLM_ERR_IO, "%s: changed size while being copied", src);
    if (!st) st = mlm_outfile_sync(out, err);
    if (fd >= 0) close(fd);
    free(dst);
    return st;
}

static mlm_status run(job *jb, mlm_error *err) {
    const mlm_synth_plan *pl = &jb->plan;
    mlm_status st = make_dirs(jb->p->out_dir, err);
    if (st) return st;
    jb->chunk = malloc(CHUNK_BYTES);
    if (!jb->chunk) return mlm_error_set(err, MLM_ERR_NOMEM, "synth: out of memory");
    progress(jb, 0);
    if ((st = write_weights(jb, err))) return st;
    for (int i = 0; i < jb->n_small; i++) {
        char *path = out_path(jb, jb->small[i].name);
        if (!path) return mlm_error_set(err, MLM_ERR_NOMEM, "synth: out of memory");
        size_t len = strlen(jb->small[i].text);
        st = mlm_outfile_put(&jb->small_out[i], path, jb->small[i].text, len, err);
        free(path);
        if (st) return st;
        progress(jb, jb->done + (int64_t)len);
    }
    for (int i = 0; i < jb->n_tok; i++)
        if ((st = copy_tokenizer(jb, &jb->tok[i], &jb->small_out[MAX_SMALL + i], err))) return st;
    /* Everything is complete on disk under temporary names: now give them their names. */
    if (jb->st) st = mlm_safetensors_writer_commit(jb->st, err);
    for (int r = 0; !st && r < pl->n_files && jb->pt[r]; r++)
        st = mlm_pytorch_writer_commit(jb->pt[r], err);
    for (int i = 0; !st && i < MAX_SMALL + MAX_TOK; i++)
        if (jb->small_out[i].tmp) st = mlm_outfile_commit(&jb->small_out[i], err);
    if (!st) st = mlm_fsync_dir(jb->p->out_dir, err);
    if (!st) progress(jb, jb->total);
    return st;
}

// ---- public API ----

mlm_synth_params mlm_synth_default_params(void) {
    mlm_synth_params p = {0};
    p.format = MLM_SYNTH_HF;
    p.dtype = MLM_DTYPE_BF16;
    p.max_shard_bytes = MLM_HF_SHARD_BYTES;
    return p;
}

mlm_status mlm_synth_total_bytes_layers(const mlm_synth_params *p, int32_t n_layer, int64_t *total,
                                        mlm_error *err) {
    *total = 0;
    if (!p) return mlm_error_set(err, MLM_ERR_INVALID_ARG, "synth: no parameters");
    job jb;
    mlm_status st = job_prepare(p, n_layer, &jb, err);
    if (!st) *total = jb.total;
    job_free(&jb);
    return st;
}

mlm_status mlm_synth_layers(const mlm_synth_params *p, int32_t n_layer, mlm_error *err) {
    if (!p) return mlm_error_set(err, MLM_ERR_INVALID_ARG, "synth: no parameters");
    job jb;
    mlm_status st = job_prepare(p, n_layer, &jb, err);
    if (!st) st = run(&jb, err);
    job_free(&jb); /* removes every temporary file left by a failure */
    return st;
}

mlm_status mlm_synth_total_bytes(const mlm_synth_params *p, int64_t *total, mlm_error *err) {
    return mlm_synth_total_bytes_layers(p, p ? p->n_layer : 0, total, err);
}

mlm_status mlm_synth(const mlm_synth_params *p, mlm_error *err) {
    return mlm_synth_layers(p, p ? p->n_layer : 0, err);
}
