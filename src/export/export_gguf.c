/* export/export_gguf.c: mlm_export_gguf, a model directory to a GGUF file for llama.cpp.
 *
 * Writes what llama.cpp's convert_hf_to_gguf.py writes for the same model (its LlamaModel,
 * Phi3MiniModel, Qwen2Model and Qwen3Model): the general keys (architecture, type, sampling defaults from
 * generation_config.json, name, size label, file type, quantization version), the
 * architecture's hyper-parameters, the tokenizer (export_gguf_vocab.c) and the tensors:
 *   llama: token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
 *          ffn_gate, ffn_up, ffn_down}, output_norm, output (absent when the embedding is
 *          tied), rope_freqs (llama3 RoPE scaling factors); q and k rows back in Meta's
 *          interleaved order (convert's LlamaModel.permute), since llama.cpp's "llama" RoPE
 *          rotates adjacent pairs;
 *   phi3:  the same names with fused blk.N.attn_qkv (q, k, v rows) and blk.N.ffn_up (gate rows
 *          then up rows), no permutation (llama.cpp's phi3 RoPE rotates half-split pairs);
 *   qwen2: llama's names and rows as they are (half-split RoPE), no rope_freqs, no vocab_size
 *          or rope dimension keys, and f32 blk.N.attn_{q,k,v}.bias;
 *   qwen3: the same without biases, with f32 blk.N.attn_q_norm and attn_k_norm (head_dim).
 * Matrices in the requested dtype (f32, f16 rounded as numpy's astype, bf16 rounded as gguf-py);
 * norms, biases and rope_freqs always f32. Tensors in convert's order: rope_freqs, then by
 * Hugging Face name. The model is loaded in f32 (exact for f16/bf16 checkpoints) and streamed
 * out row by row; the file appears atomically. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/mapfile.h"
#include "format/json.h"
#include "export/export_gguf.h"
#include "model/model.h"
#include "tensor/dtype.h"

// ---- element conversions ----

/* f32 to IEEE half, round to nearest even, overflow to inf, NaN kept NaN (numpy's
 * npy_floatbits_to_halfbits, which astype(np.float16) uses). */
static uint16_t f32_to_f16(float x) {
    uint32_t f;
    memcpy(&f, &x, 4);
    uint16_t sign = (uint16_t)((f & 0x80000000u) >> 16);
    uint32_t exp = f & 0x7f800000u, sig;
    if (exp >= 0x47800000u) {
        if (exp == 0x7f800000u && (f & 0x007fffffu)) {
            uint16_t r = (uint16_t)(0x7c00u + ((f & 0x007fffffu) >> 13));
            return (uint16_t)(sign + (r == 0x7c00u ? r + 1 : r));
        }
        return (uint16_t)(sign + 0x7c00u);
    }
    if (exp <= 0x38000000u) {
        if (exp < 0x33000000u) return sign;
        exp >>= 23;
        sig = 0x00800000u + (f & 0x007fffffu);
        sig >>= (113 - exp);
        if ((sig & 0x00003fffu) != 0x00001000u || (f & 0x000007ffu)) sig += 0x00001000u;
        return (uint16_t)(sign + (sig >> 13));
    }
    uint16_t hexp = (uint16_t)((exp - 0x38000000u) >> 13);
    sig = f & 0x007fffffu;
    if ((sig & 0x00003fffu) != 0x00001000u) sig += 0x00001000u;
    return (uint16_t)(sign + (uint16_t)((sig >> 13) + hexp));
}

/* f32 to bf16 as gguf-py's BF16.quantize (and ggml): NaN made quiet, round to nearest even. */
static uint16_t f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) u = (u & 0xffff0000u) | (64u << 16);
    return (uint16_t)(((uint64_t)u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

// ---- the tensor plan ----

typedef enum xkind { X_MATRIX, X_VECTOR, X_ROPE } xkind;

/* One GGUF tensor: up to three row-stacked matrices (fused qkv / gate_up), a vector, or the
 * rope factors. */
typedef struct xtensor {
    char name[64]; /* GGUF name */
    char hf[96];   /* Hugging Face name: the sort key */
    xkind kind;
    const mlm_weight *w[3];
    int n_w;
    int permute_heads; /* > 0: undo the half-split with this many heads */
    const float *vec;
    int64_t rows, cols; /* (rows, cols) numpy shape; a vector has rows 1 */
    uint32_t type;      /* ggml type */
} xtensor;

typedef struct plan {
    xtensor *t; /* owned */
    int n, cap;
    float *rope; /* owned: rope factors */
} plan;

static mlm_status add(plan *p, const xtensor *x, mlm_error *err) {
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        xtensor *t = realloc(p->t, (size_t)cap * sizeof *t);
        if (!t) return mlm_error_set(err, MLM_ERR_NOMEM, "export: out of memory");
        p->t = t;
        p->cap = cap;
    }
    p->t[p->n++] = *x;
    return MLM_OK;
}

static xtensor vector(const char *name, const char *hf, const float *v, int64_t n) {
    xtensor x;
    memset(&x, 0, sizeof x);
    snprintf(x.name, sizeof x.name, "%s", name);
    snprintf(x.hf, sizeof x.hf, "%s", hf);
    x.kind = X_VECTOR;
    x.vec = v;
    x.rows = 1;
    x.cols = n;
    x.type = MLM_GGML_F32;
    return x;
}

static xtensor matrix(const char *name, const char *hf, uint32_t type, const mlm_weight *a,
                      const mlm_weight *b, const mlm_weight *c) {
    xtensor x;
    memset(&x, 0, sizeof x);
    snprintf(x.name, sizeof x.name, "%s", name);
    snprintf(x.hf, sizeof x.hf, "%s", hf);
    x.kind = X_MATRIX;
    x.type = type;
    const mlm_weight *ws[3] = {a, b, c};
    for (int i = 0; i < 3 && ws[i]; i++) {
        x.w[x.n_w++] = ws[i];
        x.rows += ws[i]->rows;
        x.cols = ws[i]->cols;
    }
    return x;
}

/* convert's LlamaModel.generate_extra_tensors: per frequency 1 (high), factor (low) or the
 * blend, float32 in its order of operations. */
static mlm_status rope_factors(const mlm_config *c, float **out, mlm_error *err) {
    int half = c->head_dim / 2;
    float *f = malloc((size_t)(half ? half : 1) * sizeof *f);
    if (!f) return mlm_error_set(err, MLM_ERR_NOMEM, "export: out of memory");
    double low_wavelen = (double)c->rope_orig_ctx / c->rope_low_freq_factor;
    double high_wavelen = (double)c->rope_orig_ctx / c->rope_high_freq_factor;
    for (int i = 0; i < half; i++) {
        float freq = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)c->head_dim);
        float wavelen = (float)(2 * M_PI) / freq;
        if (wavelen < (float)high_wavelen) {
            f[i] = 1.0f;
        } else if (wavelen > (float)low_wavelen) {
            f[i] = c->rope_factor;
        } else {
            float smooth = ((float)c->rope_orig_ctx / wavelen - c->rope_low_freq_factor) /
                           (float)((double)c->rope_high_freq_factor - c->rope_low_freq_factor);
            f[i] = 1.0f / ((1.0f - smooth) / c->rope_factor + smooth);
        }
    }
    *out = f;
    return MLM_OK;
}

static int cmp_hf(const void *a, const void *b) {
    const xtensor *x = a, *y = b;
    int rx = x->kind == X_ROPE, ry = y->kind == X_ROPE;
    if (rx != ry) return ry - rx;
    return strcmp(x->hf, y->hf);
}

static mlm_status make_plan(const mlm_model *m, uint32_t type, plan *p, mlm_error *err) {
    const mlm_config *c = &m->cfg;
    int phi3 = c->family == MLM_FAMILY_PHI3;
    int qwen = c->family == MLM_FAMILY_QWEN2 || c->family == MLM_FAMILY_QWEN3;
    mlm_status st = MLM_OK;
    char name[64], hf[96];
    if (!phi3 && !qwen && c->rope_type == MLM_ROPE_LLAMA3) {
        if ((st = rope_factors(c, &p->rope, err))) return st;
        xtensor x = vector("rope_freqs.weight", "", p->rope, c->head_dim / 2);
        x.kind = X_ROPE;
        if ((st = add(p, &x, err))) return st;
    }
    xtensor x =
        matrix("token_embd.weight", "model.embed_tokens.weight", type, &m->tok_emb, NULL, NULL);
    if ((st = add(p, &x, err))) return st;
    x = vector("output_norm.weight", "model.norm.weight", m->norm, c->n_embd);
    if ((st = add(p, &x, err))) return st;
    if (m->output.data != m->tok_emb.data) {
        x = matrix("output.weight", "lm_head.weight", type, &m->output, NULL, NULL);
        if ((st = add(p, &x, err))) return st;
    }
    for (int l = 0; l < c->n_layer && !st; l++) {
        const mlm_layer *L = &m->layers[l];
#define HF(s) (snprintf(hf, sizeof hf, "model.layers.%d.%s.weight", l, s), hf)
#define GG(s) (snprintf(name, sizeof name, "blk.%d.%s.weight", l, s), name)
#define HB(s) (snprintf(hf, sizeof hf, "model.layers.%d.%s.bias", l, s), hf)
#define GB(s) (snprintf(name, sizeof name, "blk.%d.%s.bias", l, s), name)
        const int64_t q_rows = (int64_t)c->n_head * c->head_dim,
                      kv_rows = (int64_t)c->n_kv_head * c->head_dim;
        xtensor v[14];
        int n = 0;
        v[n++] = vector(GG("attn_norm"), HF("input_layernorm"), L->attn_norm, c->n_embd);
        v[n++] = vector(GG("ffn_norm"), HF("post_attention_layernorm"), L->ffn_norm, c->n_embd);
        v[n++] = matrix(GG("attn_output"), HF("self_attn.o_proj"), type, &L->wo, NULL, NULL);
        v[n++] = matrix(GG("ffn_down"), HF("mlp.down_proj"), type, &L->w2, NULL, NULL);
        if (phi3) {
            v[n++] = matrix(GG("attn_qkv"), HF("self_attn.qkv_proj"), type, &L->wq, &L->wk, &L->wv);
            v[n++] = matrix(GG("ffn_up"), HF("mlp.gate_up_proj"), type, &L->w1, &L->w3, NULL);
        } else {
            /* Qwen's RoPE rotates half-split pairs as HF's does: rows as they are */
            v[n] = matrix(GG("attn_q"), HF("self_attn.q_proj"), type, &L->wq, NULL, NULL);
            v[n++].permute_heads = qwen ? 0 : c->n_head;
            v[n] = matrix(GG("attn_k"), HF("self_attn.k_proj"), type, &L->wk, NULL, NULL);
            v[n++].permute_heads = qwen ? 0 : c->n_kv_head;
            v[n++] = matrix(GG("attn_v"), HF("self_attn.v_proj"), type, &L->wv, NULL, NULL);
            v[n++] = matrix(GG("ffn_gate"), HF("mlp.gate_proj"), type, &L->w1, NULL, NULL);
            v[n++] = matrix(GG("ffn_up"), HF("mlp.up_proj"), type, &L->w3, NULL, NULL);
        }
        if (c->qkv_bias) {
            v[n++] = vector(GB("attn_q"), HB("self_attn.q_proj"), L->bq, q_rows);
            v[n++] = vector(GB("attn_k"), HB("self_attn.k_proj"), L->bk, kv_rows);
            v[n++] = vector(GB("attn_v"), HB("self_attn.v_proj"), L->bv, kv_rows);
        }
        if (c->qk_norm) {
            v[n++] = vector(GG("attn_q_norm"), HF("self_attn.q_norm"), L->q_norm, c->head_dim);
            v[n++] = vector(GG("attn_k_norm"), HF("self_attn.k_norm"), L->k_norm, c->head_dim);
        }
#undef HF
#undef GG
#undef HB
#undef GB
        for (int i = 0; i < n && !st; i++)
            st = add(p, &v[i], err);
    }
    if (st) return st;
    for (int i = 0; i < p->n; i++) {
        const xtensor *t = &p->t[i];
        for (int k = 0; k < t->n_w; k++)
            if ((t->w[k]->type != MLM_W_F32 && t->w[k]->type != MLM_W_BF16) || !t->w[k]->data ||
                t->w[k]->cols != t->cols || t->w[k]->type != t->w[0]->type)
                return mlm_error_set(err, MLM_ERR_INTERNAL,
                                     "export: tensor '%s': the model has a %s weight", t->name,
                                     mlm_wtype_name(t->w[k]->type));
        if ((t->kind != X_MATRIX && !t->vec) ||
            (t->permute_heads && t->rows % (2 * t->permute_heads)))
            return mlm_error_set(err, MLM_ERR_INTERNAL, "export: tensor '%s' cannot be written",
                                 t->name);
    }
    qsort(p->t, (size_t)p->n, sizeof *p->t, cmp_hf);
    return MLM_OK;
}

// ---- writing the data ----

/* Row R of tensor T (a pointer into the model, or gathered into TMP from a chunked weight):
 * f32, or bf16 when *BF16 is set. */
static const void *row_of(const xtensor *t, int64_t r, int *bf16, void *tmp) {
    *bf16 = 0;
    if (t->kind != X_MATRIX) return t->vec;
    if (t->permute_heads) {
        /* GGUF row h*hd + i*2 + j holds HF row h*hd + j*hd/2 + i (convert's permute) */
        int64_t hd = t->rows / t->permute_heads, h = r / hd, k = r % hd;
        r = h * hd + (k % 2) * (hd / 2) + k / 2;
    }
    for (int k = 0; k < t->n_w; k++) {
        if (r < t->w[k]->rows) {
            *bf16 = t->w[k]->type == MLM_W_BF16;
            return mlm_weight_row(t->w[k], r, tmp);
        }
        r -= t->w[k]->rows;
    }
    return NULL;
}

static mlm_status write_data(mlm_gguf_writer *w, const plan *p, mlm_error *err) {
    int64_t max_cols = 1;
    for (int i = 0; i < p->n; i++)
        if (p->t[i].cols > max_cols) max_cols = p->t[i].cols;
    unsigned char *buf = malloc((size_t)max_cols * 4), *gather = malloc((size_t)max_cols * 4);
    float *wide = malloc((size_t)max_cols * 4);
    if (!buf || !wide || !gather) {
        free(buf), free(wide), free(gather);
        return mlm_error_set(err, MLM_ERR_NOMEM, "export: out of memory");
    }
    mlm_status st = MLM_OK;
    for (int i = 0; i < p->n && !st; i++) {
        const xtensor *t = &p->t[i];
        for (int64_t r = 0; r < t->rows && !st; r++) {
            int bf16;
            const void *row = row_of(t, r, &bf16, gather);
            size_t bytes;
            if (bf16 && t->type == MLM_GGML_BF16) { /* the checkpoint's own bits */
                st = mlm_gguf_writer_write(w, row, (size_t)t->cols * 2, err);
                continue;
            }
            const float *src = row;
            if (bf16) { /* widening bf16 is exact: the same values an f32 load gives */
                for (int64_t k = 0; k < t->cols; k++)
                    wide[k] = mlm_bf16_to_f32(((const uint16_t *)row)[k]);
                src = wide;
            }
            if (t->type == MLM_GGML_F32) {
                memcpy(buf, src, (size_t)t->cols * 4);
                bytes = (size_t)t->cols * 4;
            } else {
                uint16_t *d = (uint16_t *)buf;
                for (int64_t k = 0; k < t->cols; k++)
                    d[k] = t->type == MLM_GGML_F16 ? f32_to_f16(src[k]) : f32_to_bf16(src[k]);
                bytes = (size_t)t->cols * 2;
            }
            st = mlm_gguf_writer_write(w, buf, bytes, err);
        }
    }
    free(buf), free(wide), free(gather);
    return st;
}

// ---- general keys ----

/* Python's str.title() for ASCII: a letter after a non-letter is upper-cased, others lower. */
static void title_word(char *s, size_t n) {
    int prev_alpha = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        int alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
        if (alpha) s[i] = (char)(prev_alpha ? (ch | 0x20) : (ch & ~0x20));
        prev_alpha = alpha;
    }
}

static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

/* The regex ^(v\d+(?:\.\d+)*|\d.*)$ of id_to_title, on P[0..N). */
static int is_version(const char *p, size_t n) {
    if (n && is_digit(p[0])) return 1;
    if (n < 2 || p[0] != 'v') return 0;
    size_t i = 1;
    for (;;) {
        if (i >= n || !is_digit(p[i])) return 0;
        while (i < n && is_digit(p[i]))
            i++;
        if (i == n) return 1;
        if (p[i++] != '.') return 0;
    }
}

/* gguf-py's Metadata.id_to_title: '-' to spaces, and each all-lowercase word that is not a
 * version ("v1.2") and does not start with a digit title-cased (ASCII letters only). */
static void id_to_title(const char *id, char *out, size_t cap) {
    size_t k = 0;
    const char *p = id;
    while (*p && k + 1 < cap) {
        while (*p == ' ' || *p == '-' || *p == '\t' || *p == '\n')
            p++;
        if (!*p) break;
        const char *e = p;
        while (*e && *e != ' ' && *e != '-' && *e != '\t' && *e != '\n')
            e++;
        size_t n = (size_t)(e - p);
        if (k) out[k++] = ' ';
        if (k + n + 1 > cap) n = cap - k - 1;
        memcpy(out + k, p, n);
        int lower = 0, upper = 0;
        for (size_t i = 0; i < n; i++) {
            lower |= p[i] >= 'a' && p[i] <= 'z';
            upper |= p[i] >= 'A' && p[i] <= 'Z';
        }
        if (lower && !upper && !is_version(p, n)) title_word(out + k, n);
        k += n;
        p = e;
    }
    out[k] = 0;
}

/* gguf-py's model_weight_count_rounded_notation(n, min_digits=2). */
static void size_label(int64_t n, char *out, size_t cap) {
    double x;
    const char *suffix;
    if (n > 1e12)
        x = n * 1e-12, suffix = "T";
    else if (n > 1e9)
        x = n * 1e-9, suffix = "B";
    else if (n > 1e6)
        x = n * 1e-6, suffix = "M";
    else
        x = n * 1e-3, suffix = "K";
    double r = nearbyint(x); /* Python's round(): half to even */
    int digits = 0;
    for (double v = r; v >= 1; v /= 10)
        digits++;
    int fix = digits < 2 ? 2 - digits : 0;
    snprintf(out, cap, "%.*f%s", fix, x, suffix);
}

/* generation_config.json's sampling defaults, as gguf-py's Metadata copies them. */
static mlm_status write_sampling(mlm_gguf_writer *w, const json_t *g, mlm_error *err) {
    static const struct {
        const char *json, *key;
        char kind; /* s string, i int32, f float32 */
    } keys[] = {
        {"sequence", "general.sampling.sequence", 's'},
        {"top_k", "general.sampling.top_k", 'i'},
        {"top_p", "general.sampling.top_p", 'f'},
        {"min_p", "general.sampling.min_p", 'f'},
        {"xtc_probability", "general.sampling.xtc_probability", 'f'},
        {"xtc_threshold", "general.sampling.xtc_threshold", 'f'},
        {"temperature", "general.sampling.temp", 'f'},
        {"penalty_last_n", "general.sampling.penalty_last_n", 'i'},
        {"penalty_repeat", "general.sampling.penalty_repeat", 'f'},
        {"mirostat", "general.sampling.mirostat", 'i'},
        {"mirostat_tau", "general.sampling.mirostat_tau", 'f'},
        {"mirostat_eta", "general.sampling.mirostat_eta", 'f'},
    };
    mlm_status st = MLM_OK;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0] && !st; i++) {
        const json_t *v = json_object_get(g, keys[i].json);
        if (keys[i].kind == 's' && json_is_string(v))
            st = mlm_gguf_writer_str(w, keys[i].key, json_string_value(v), json_string_length(v),
                                     err);
        else if (keys[i].kind == 'i' && json_is_integer(v))
            st = mlm_gguf_writer_i32(w, keys[i].key, (int32_t)json_integer_value(v), err);
        else if (keys[i].kind == 'f' && json_is_number(v))
            st = mlm_gguf_writer_f32(w, keys[i].key, (float)json_number_value(v), err);
    }
    return st;
}

/* The model's name: config.json's _name_or_path when it is a model id ("org/name"), else the
 * directory's name, title-cased as gguf-py does. */
static void model_name(const mlm_export_files *f, char *out, size_t cap) {
    const char *id = json_string_value(json_object_get(f->config, "_name_or_path"));
    int slashes = 0;
    for (const char *s = id; s && *s; s++)
        slashes += *s == '/';
    if (!id || !*id || slashes > 1) {
        size_t n = strlen(f->dir);
        while (n > 1 && f->dir[n - 1] == '/')
            n--;
        size_t b = n;
        while (b > 0 && f->dir[b - 1] != '/')
            b--;
        char base[256];
        snprintf(base, sizeof base, "%.*s", (int)(n - b), f->dir + b);
        if (!strcmp(base, ".") || !base[0]) {
            snprintf(out, cap, "%s", f->dir);
            return;
        }
        id_to_title(base, out, cap);
        return;
    }
    if (strchr(id, ' ')) {
        snprintf(out, cap, "%s", id);
        return;
    }
    const char *slash = strchr(id, '/');
    id_to_title(slash ? slash + 1 : id, out, cap);
}

static mlm_status write_general(mlm_gguf_writer *w, const mlm_export_files *f, const char *arch,
                                int64_t n_params, mlm_error *err) {
    char name[256], label[32];
    model_name(f, name, sizeof name);
    size_label(n_params, label, sizeof label);
    mlm_status st;
    if ((st = mlm_gguf_writer_str(w, "general.architecture", arch, strlen(arch), err)) ||
        (st = mlm_gguf_writer_str(w, "general.type", "model", 5, err)) ||
        (st = write_sampling(w, f->generation, err)) ||
        (st = mlm_gguf_writer_str(w, "general.name", name, strlen(name), err)))
        return st;
    return mlm_gguf_writer_str(w, "general.size_label", label, strlen(label), err);
}

// ---- architecture keys ----

static uint32_t file_type(mlm_dtype d) {
    return d == MLM_DTYPE_F32 ? 0 : d == MLM_DTYPE_F16 ? 1 : 32;
}

/* The GGUF architecture of FAMILY (mllama is refused before). */
static const char *arch_name(mlm_family family) {
    return family == MLM_FAMILY_PHI3    ? "phi3"
           : family == MLM_FAMILY_QWEN2 ? "qwen2"
           : family == MLM_FAMILY_QWEN3 ? "qwen3"
                                        : "llama";
}

/* ARCH.KEY as a u32 / f32. */
static mlm_status arch_u32(mlm_gguf_writer *w, const char *arch, const char *key, uint32_t v,
                           mlm_error *err) {
    char k[96];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    return mlm_gguf_writer_u32(w, k, v, err);
}

static mlm_status arch_f32(mlm_gguf_writer *w, const char *arch, const char *key, float v,
                           mlm_error *err) {
    char k[96];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    return mlm_gguf_writer_f32(w, k, v, err);
}

/* llama, qwen2 and qwen3 (the text model's keys of convert's TextModel; LlamaModel adds the
 * vocabulary size and the rope dimension count after the file type). */
static mlm_status write_llama(mlm_gguf_writer *w, const mlm_export_files *f, const mlm_config *c,
                              const char *arch, mlm_dtype dtype, mlm_error *err) {
    mlm_status st;
    /* key/value lengths only when config.json names head_dim (Meta params.json never does, but
     * its Hugging Face conversion writes it) */
    int head_dim_key = !f->config || json_object_get(f->config, "head_dim");
    if ((st = arch_u32(w, arch, "block_count", (uint32_t)c->n_layer, err)) ||
        (c->n_ctx_train > 0 &&
         (st = arch_u32(w, arch, "context_length", (uint32_t)c->n_ctx_train, err))) ||
        (st = arch_u32(w, arch, "embedding_length", (uint32_t)c->n_embd, err)) ||
        (st = arch_u32(w, arch, "feed_forward_length", (uint32_t)c->n_ff, err)) ||
        (st = arch_u32(w, arch, "attention.head_count", (uint32_t)c->n_head, err)) ||
        (st = arch_u32(w, arch, "attention.head_count_kv", (uint32_t)c->n_kv_head, err)) ||
        (st = arch_f32(w, arch, "rope.freq_base", c->rope_theta, err)) ||
        (st = arch_f32(w, arch, "attention.layer_norm_rms_epsilon", c->norm_eps, err)))
        return st;
    if (head_dim_key &&
        ((st = arch_u32(w, arch, "attention.key_length", (uint32_t)c->head_dim, err)) ||
         (st = arch_u32(w, arch, "attention.value_length", (uint32_t)c->head_dim, err))))
        return st;
    if ((st = mlm_gguf_writer_u32(w, "general.file_type", file_type(dtype), err))) return st;
    if (c->family != MLM_FAMILY_LLAMA3) return MLM_OK;
    if ((st = arch_u32(w, arch, "vocab_size", (uint32_t)c->n_vocab, err))) return st;
    return arch_u32(w, arch, "rope.dimension_count", (uint32_t)c->head_dim, err);
}

static mlm_status write_phi3(mlm_gguf_writer *w, const mlm_export_files *f, const mlm_config *c,
                             mlm_dtype dtype, mlm_error *err) {
    mlm_status st;
    const json_t *orig = json_object_get(f->config, "original_max_position_embeddings");
    const json_t *swa = json_object_get(f->config, "sliding_window");
    if ((st = mlm_gguf_writer_u32(w, "phi3.context_length", (uint32_t)c->n_ctx_train, err)) ||
        (json_is_integer(orig) &&
         (st = mlm_gguf_writer_u32(w, "phi3.rope.scaling.original_context_length",
                                   (uint32_t)json_integer_value(orig), err))) ||
        (st = mlm_gguf_writer_u32(w, "phi3.embedding_length", (uint32_t)c->n_embd, err)) ||
        (st = mlm_gguf_writer_u32(w, "phi3.feed_forward_length", (uint32_t)c->n_ff, err)) ||
        (st = mlm_gguf_writer_u32(w, "phi3.block_count", (uint32_t)c->n_layer, err)) ||
        (st = mlm_gguf_writer_u32(w, "phi3.attention.head_count", (uint32_t)c->n_head, err)) ||
        (st =
             mlm_gguf_writer_u32(w, "phi3.attention.head_count_kv", (uint32_t)c->n_kv_head, err)) ||
        (st = mlm_gguf_writer_f32(w, "phi3.attention.layer_norm_rms_epsilon", c->norm_eps, err)) ||
        (st = mlm_gguf_writer_u32(w, "phi3.rope.dimension_count", (uint32_t)(c->n_embd / c->n_head),
                                  err)) ||
        (st = mlm_gguf_writer_f32(w, "phi3.rope.freq_base", c->rope_theta, err)) ||
        (st = mlm_gguf_writer_u32(w, "general.file_type", file_type(dtype), err)))
        return st;
    /* 0 when absent tells llama.cpp's phi3 "no sliding window" (Phi-4) */
    return mlm_gguf_writer_u32(w, "phi3.attention.sliding_window",
                               json_is_integer(swa) ? (uint32_t)json_integer_value(swa) : 0, err);
}

// ---- the export ----

/* Whether every tensor of the checkpoint in DIR is bf16. */
static int all_bf16(const char *dir) {
    mlm_checkpoint *ck;
    if (mlm_checkpoint_open(dir, &ck, NULL)) return 0;
    int ok = mlm_checkpoint_n_tensors(ck) > 0;
    for (int64_t i = 0; ok && i < mlm_checkpoint_n_tensors(ck); i++)
        ok = mlm_checkpoint_tensor(ck, i)->dtype == MLM_DTYPE_BF16;
    mlm_checkpoint_free(ck);
    return ok;
}

mlm_status mlm_export_gguf(const char *model_dir, const char *out_path, mlm_dtype dtype,
                           mlm_error *err) {
    if (!model_dir || !out_path)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "export: NULL model directory or output path");
    if (dtype != MLM_DTYPE_F32 && dtype != MLM_DTYPE_F16 && dtype != MLM_DTYPE_BF16)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "export: dtype %s is not f32, f16 or bf16",
                             mlm_dtype_name(dtype));
    if (!mlm_is_dir(model_dir))
        return mlm_error_set(err, MLM_ERR_IO, "export: %s is not a directory", model_dir);
    mlm_export_files f = {model_dir, NULL, NULL};
    mlm_model *m = NULL;
    mlm_gguf_writer *w = NULL;
    plan p = {0};
    char *path;
    mlm_status st = MLM_OK;
    for (int i = 0; i < 2 && !st; i++) {
        path = mlm_path_join(model_dir, i ? "generation_config.json" : "config.json");
        if (!path)
            st = mlm_error_set(err, MLM_ERR_NOMEM, "export: out of memory");
        else if (mlm_is_file(path))
            st = mlm_json_load_file(path, 16u << 20, i ? &f.generation : &f.config, err);
        free(path);
    }
    /* A bf16 checkpoint is bound zero-copy in bf16 (2 bytes a parameter, mapped) and widened
     * row by row; anything else is held in f32 (4 bytes a parameter). Both give the same bits. */
    mlm_model_params mp = mlm_model_default_params();
    mp.dtype = st ? MLM_DTYPE_F32 : all_bf16(model_dir) ? MLM_DTYPE_BF16 : MLM_DTYPE_F32;
    if (!st) st = mlm_model_load(model_dir, &mp, &m, err);
    if (!st && m->cfg.family == MLM_FAMILY_MLLAMA)
        st = mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                           "export: %s is a %s model; GGUF export writes Llama 3, Phi-4, Qwen2 "
                           "and Qwen3 (architectures llama, phi3, qwen2 and qwen3) only",
                           model_dir, mlm_family_name(m->cfg.family));
    uint32_t type = dtype == MLM_DTYPE_F32   ? MLM_GGML_F32
                    : dtype == MLM_DTYPE_F16 ? MLM_GGML_F16
                                             : MLM_GGML_BF16;
    if (!st) st = make_plan(m, type, &p, err);
    if (!st) st = mlm_gguf_writer_create(out_path, &w, err);
    int64_t n_params = 0;
    for (int i = 0; i < p.n; i++)
        n_params += p.t[i].rows * p.t[i].cols;
    if (!st) {
        const mlm_config *c = &m->cfg;
        const char *arch = arch_name(c->family);
        st = write_general(w, &f, arch, n_params, err);
        if (!st)
            st = c->family == MLM_FAMILY_PHI3 ? write_phi3(w, &f, c, dtype, err)
                                              : write_llama(w, &f, c, arch, dtype, err);
        if (!st) st = mlm_gguf_writer_u32(w, "general.quantization_version", 2, err);
        if (!st) st = mlm_export_vocab(w, &f, c, err);
    }
    for (int i = 0; i < p.n && !st; i++) {
        const xtensor *t = &p.t[i];
        int64_t ne[2] = {t->cols, t->rows};
        st = mlm_gguf_writer_tensor(w, t->name, t->type, t->kind == X_MATRIX ? 2 : 1, ne, err);
    }
    if (!st) st = write_data(w, &p, err);
    if (!st) st = mlm_gguf_writer_finish(w, err);
    if (!st) st = mlm_gguf_writer_commit(w, err);
    mlm_gguf_writer_free(w);
    free(p.t);
    free(p.rope);
    mlm_model_free(m);
    json_decref(f.config);
    json_decref(f.generation);
    return st;
}
