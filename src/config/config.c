/* config/config.c: Meta params.json and HF config.json (+ generation_config.json) into one
 * mlm_config. The family comes from the file's contents (architectures / model_type), never
 * from a directory name. Every missing or mistyped field is an error naming file and field. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h" /* MLM_ATT_HD: the attention kernels' head_dim limit */
#include "core/error.h"
#include "core/mapfile.h"
#include "format/json.h"
#include "config/config.h"

#define CONFIG_MAX_BYTES (1u << 20)
#define DIM_MAX (1 << 20)

const char *mlm_family_name(mlm_family family) {
    switch (family) {
    case MLM_FAMILY_LLAMA3: return "llama3";
    case MLM_FAMILY_PHI3: return "phi3";
    case MLM_FAMILY_MLLAMA: return "mllama";
    case MLM_FAMILY_QWEN2: return "qwen2";
    case MLM_FAMILY_QWEN3: return "qwen3";
    }
    return "?";
}

/* Meta's FFN size: h = int(2 * 4 * dim / 3); h = int(multiplier * h); round up to multiple_of. */
static int32_t meta_ffn_dim(int64_t dim, double multiplier, int have_mult, int64_t multiple_of) {
    int64_t h = (int64_t)(2.0 * (double)(4 * dim) / 3.0);
    if (have_mult) h = (int64_t)(multiplier * (double)h);
    return (int32_t)(multiple_of * ((h + multiple_of - 1) / multiple_of));
}

mlm_status mlm_config_check(const char *what, mlm_config *c, mlm_error *err) {
    if (c->n_head % c->n_kv_head)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: the number of heads (%d) is not a multiple of the KV heads (%d)",
                             what, c->n_head, c->n_kv_head);
    if (c->head_dim % 2)
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: head_dim %d must be even for RoPE", what,
                             c->head_dim);
    if (c->head_dim > MLM_ATT_HD)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                             "%s: head_dim %d exceeds the attention kernels' limit of %d", what,
                             c->head_dim, MLM_ATT_HD);
    if (!(c->norm_eps > 0) || !(c->rope_theta > 0))
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: norm eps and rope theta must be positive",
                             what);
    return MLM_OK;
}

// ---- Meta params.json ----

static mlm_status load_meta(const char *path, const json_t *j, mlm_config *c, mlm_error *err) {
    int64_t dim, n_layer, n_head, n_kv = 0, vocab, multiple_of = 256, ffn = 0;
    double mult = 1, eps = 1e-5, theta = 10000;
    int have_kv, have_mult, have_ffn, scaled = 0;
    mlm_status st;
    if ((st = mlm_json_get_int(path, j, "dim", 1, 1, DIM_MAX, &dim, NULL, err)) ||
        (st = mlm_json_get_int(path, j, "n_layers", 1, 1, 4096, &n_layer, NULL, err)) ||
        (st = mlm_json_get_int(path, j, "n_heads", 1, 1, 4096, &n_head, NULL, err)) ||
        (st = mlm_json_get_int(path, j, "n_kv_heads", 0, 1, 4096, &n_kv, &have_kv, err)) ||
        (st = mlm_json_get_int(path, j, "vocab_size", 1, 1, 1 << 24, &vocab, NULL, err)) ||
        (st = mlm_json_get_int(path, j, "multiple_of", 0, 1, DIM_MAX, &multiple_of, NULL, err)) ||
        (st = mlm_json_get_num(path, j, "ffn_dim_multiplier", 0, &mult, &have_mult, err)) ||
        (st = mlm_json_get_int(path, j, "intermediate_size", 0, 1, DIM_MAX, &ffn, &have_ffn, err)) ||
        (st = mlm_json_get_num(path, j, "norm_eps", 0, &eps, NULL, err)) ||
        (st = mlm_json_get_num(path, j, "rope_theta", 0, &theta, NULL, err)) ||
        (st = mlm_json_get_bool(path, j, "use_scaled_rope", 0, &scaled, NULL, err)))
        return st;
    /* meshlm's extension key (like rope_scaling_factor): Meta's format has head_dim = dim /
     * n_heads, which test fixtures with narrow heads need to override */
    int64_t hd = 0;
    int have_hd = 0;
    if ((st = mlm_json_get_int(path, j, "head_dim", 0, 1, 4096, &hd, &have_hd, err))) return st;
    if (!have_hd && dim % n_head)
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: dim %lld is not a multiple of n_heads %lld",
                             path, (long long)dim, (long long)n_head);
    if (have_mult && !(mult > 0 && mult < 64))
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: field 'ffn_dim_multiplier' = %g is invalid",
                             path, mult);
    c->family = MLM_FAMILY_LLAMA3;
    c->n_embd = (int32_t)dim;
    c->n_layer = (int32_t)n_layer;
    c->n_head = (int32_t)n_head;
    c->n_kv_head = (int32_t)(have_kv ? n_kv : n_head);
    c->head_dim = (int32_t)(have_hd ? hd : dim / n_head);
    c->n_ff = have_ffn ? (int32_t)ffn : meta_ffn_dim(dim, mult, have_mult, multiple_of);
    c->n_vocab = (int32_t)vocab;
    c->norm_eps = (float)eps;
    c->rope_theta = (float)theta;
    if (scaled) {
        /* params.json carries no factor: 3.2-1B/3B (dim < 4096) use 32, the rest 8
         * (models.md 3.2; llama-models' hard-coded 8 is wrong for the small models). */
        double factor = dim < 4096 ? 32 : 8;
        int have_factor;
        if ((st = mlm_json_get_num(path, j, "rope_scaling_factor", 0, &factor, &have_factor, err)))
            return st;
        c->rope_type = MLM_ROPE_LLAMA3;
        c->rope_factor = (float)factor;
        c->rope_low_freq_factor = 1;
        c->rope_high_freq_factor = 4;
        c->rope_orig_ctx = 8192;
    }
    c->n_ctx_train = scaled ? 131072 : 8192;
    /* Meta checkpoints carry their special ids in the tokenizer, not the params. */
    if (vocab == 128256) {
        c->bos_id = 128000;
        int32_t stops[] = {128001, 128008, 128009};
        c->n_stop_ids = 3;
        memcpy(c->stop_ids, stops, sizeof stops);
        c->pad_id = 128004;
    }
    snprintf(c->source, sizeof c->source, "params.json");
    /* Llama 3.2 Vision: its params.json adds the vision tower's vision_* keys */
    if (json_object_get(j, "vision_chunk_size") && (st = mlm_config_mllama_meta(path, j, c, err)))
        return st;
    return mlm_config_check(path, c, err);
}

// ---- HF config.json ----

/* eos_token_id: an int or a list of ints. */
static mlm_status read_ids(const char *path, const json_t *j, const char *key, mlm_config *c,
                           mlm_error *err) {
    const json_t *v = json_object_get(j, key);
    if (!v || json_is_null(v)) return MLM_OK;
    int32_t ids[MLM_MAX_STOP_IDS];
    int n = 0;
    if (json_is_integer(v)) {
        ids[n++] = (int32_t)json_integer_value(v);
    } else if (json_is_array(v) && json_array_size(v) <= MLM_MAX_STOP_IDS) {
        size_t i;
        const json_t *x;
        json_array_foreach(v, i, x) {
            if (!json_is_integer(x)) break;
            ids[n++] = (int32_t)json_integer_value(x);
        }
        if ((size_t)n != json_array_size(v)) n = -1;
    } else {
        n = -1;
    }
    if (n < 0)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: field '%s' must be an integer or a list of at most %d integers",
                             path, key, MLM_MAX_STOP_IDS);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || (c->n_vocab && ids[i] >= c->n_vocab))
            return mlm_error_set(err, MLM_ERR_FORMAT, "%s: field '%s': id %d is outside the vocab",
                                 path, key, ids[i]);
    c->n_stop_ids = n;
    memcpy(c->stop_ids, ids, (size_t)n * sizeof ids[0]);
    return MLM_OK;
}

/* rope_scaling (classic configs) or rope_parameters (written by transformers 5, which also
 * moves rope_theta inside it). */
static mlm_status read_rope_scaling(const char *path, const json_t *j, mlm_config *c,
                                    mlm_error *err) {
    const char *field = json_object_get(j, "rope_parameters") ? "rope_parameters" : "rope_scaling";
    const json_t *rs = json_object_get(j, field);
    if (!rs || json_is_null(rs)) return MLM_OK;
    if (!json_is_object(rs))
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: field '%s' must be an object", path, field);
    char what[600];
    snprintf(what, sizeof what, "%s: %s", path, field);
    double theta;
    int have_theta;
    mlm_status st0 = mlm_json_get_num(what, rs, "rope_theta", 0, &theta, &have_theta, err);
    if (st0) return st0;
    if (have_theta) c->rope_theta = (float)theta;
    const char *type = NULL;
    int found;
    mlm_status st = mlm_json_get_str(what, rs, "rope_type", 0, &type, &found, err);
    if (!st && !found) st = mlm_json_get_str(what, rs, "type", 1, &type, NULL, err);
    if (st) return st;
    if (!strcmp(type, "default")) return MLM_OK;
    if (strcmp(type, "llama3"))
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED, "%s: rope_type '%s' is not supported", what,
                             type);
    double factor, lo, hi;
    int64_t orig;
    if ((st = mlm_json_get_num(what, rs, "factor", 1, &factor, NULL, err)) ||
        (st = mlm_json_get_num(what, rs, "low_freq_factor", 1, &lo, NULL, err)) ||
        (st = mlm_json_get_num(what, rs, "high_freq_factor", 1, &hi, NULL, err)) ||
        (st = mlm_json_get_int(what, rs, "original_max_position_embeddings", 1, 1, 1 << 30, &orig,
                               NULL, err)))
        return st;
    if (!(factor >= 1) || !(lo > 0) || !(hi > lo))
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: needs factor >= 1 and 0 < low_freq_factor < high_freq_factor",
                             what);
    c->rope_type = MLM_ROPE_LLAMA3;
    c->rope_factor = (float)factor;
    c->rope_low_freq_factor = (float)lo;
    c->rope_high_freq_factor = (float)hi;
    c->rope_orig_ctx = (int32_t)orig;
    return MLM_OK;
}

/* Qwen2's q/k/v biases (always, as transformers' Qwen2Attention builds them), Qwen3's q/k norms
 * and its optional attention_bias; a sliding window in use is refused (meshlm attends to the
 * whole context: that would be other numbers), one merely configured is ignored as
 * transformers ignores it. */
static mlm_status read_qwen(const char *path, const json_t *j, mlm_config *c, mlm_error *err) {
    if (c->family != MLM_FAMILY_QWEN2 && c->family != MLM_FAMILY_QWEN3) return MLM_OK;
    int window = 0, bias = c->family == MLM_FAMILY_QWEN2;
    mlm_status st = mlm_json_get_bool(path, j, "use_sliding_window", 0, &window, NULL, err);
    if (!st && c->family == MLM_FAMILY_QWEN3)
        st = mlm_json_get_bool(path, j, "attention_bias", 0, &bias, NULL, err);
    if (st) return st;
    if (window)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                             "%s: use_sliding_window is true: sliding-window attention is not "
                             "supported (every layer attends to the whole context)",
                             path);
    c->qkv_bias = bias;
    c->qk_norm = c->family == MLM_FAMILY_QWEN3;
    return MLM_OK;
}

static mlm_status hf_family(const char *path, const json_t *j, mlm_family *fam, mlm_error *err) {
    const json_t *arch = json_object_get(j, "architectures");
    const char *name = NULL;
    if (json_is_array(arch) && json_is_string(json_array_get(arch, 0)))
        name = json_string_value(json_array_get(arch, 0));
    const char *type = NULL;
    int found;
    mlm_status st = mlm_json_get_str(path, j, "model_type", 0, &type, &found, err);
    if (st) return st;
    if ((name && !strcmp(name, "LlamaForCausalLM")) || (!name && type && !strcmp(type, "llama"))) {
        *fam = MLM_FAMILY_LLAMA3;
        return MLM_OK;
    }
    if ((name && !strcmp(name, "Phi3ForCausalLM")) || (!name && type && !strcmp(type, "phi3"))) {
        *fam = MLM_FAMILY_PHI3;
        return MLM_OK;
    }
    if ((name && !strcmp(name, "MllamaForConditionalGeneration")) ||
        (!name && type && !strcmp(type, "mllama"))) {
        *fam = MLM_FAMILY_MLLAMA;
        return MLM_OK;
    }
    if ((name && !strcmp(name, "Qwen2ForCausalLM")) || (!name && type && !strcmp(type, "qwen2"))) {
        *fam = MLM_FAMILY_QWEN2;
        return MLM_OK;
    }
    if ((name && !strcmp(name, "Qwen3ForCausalLM")) || (!name && type && !strcmp(type, "qwen3"))) {
        *fam = MLM_FAMILY_QWEN3;
        return MLM_OK;
    }
    if (!name && type && !strcmp(type, "mllama_text_model")) { /* an mllama text_config */
        *fam = MLM_FAMILY_LLAMA3;
        return MLM_OK;
    }
    if (!name && !type)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: missing field 'architectures' (or 'model_type')", path);
    return mlm_error_set(
        err, MLM_ERR_UNSUPPORTED,
        "%s: architecture '%s' is not supported (LlamaForCausalLM, Phi3ForCausalLM, "
        "MllamaForConditionalGeneration, Qwen2ForCausalLM, Qwen3ForCausalLM)",
        path, name ? name : type);
}

static mlm_status load_hf(const char *path, const json_t *j, mlm_config *c, mlm_error *err) {
    mlm_status st = hf_family(path, j, &c->family, err);
    if (st) return st;
    return c->family == MLM_FAMILY_MLLAMA ? mlm_config_mllama(path, j, c, err)
                                          : mlm_config_hf_text(path, j, c, err);
}

mlm_status mlm_config_hf_text(const char *path, const json_t *j, mlm_config *c, mlm_error *err) {
    int64_t dim, n_layer, n_head, n_kv = 0, head_dim = 0, ffn, vocab, ctx = 0, bos = -1, pad = -1;
    double eps = 1e-6, theta = 10000;
    int have_kv, have_hd, tied = 0;
    mlm_status st;
    if ((st = hf_family(path, j, &c->family, err)) ||
        (st = mlm_json_get_int(path, j, "hidden_size", 1, 1, DIM_MAX, &dim, NULL, err)) ||
        (st = mlm_json_get_int(path, j, "num_hidden_layers", 1, 1, 4096, &n_layer, NULL, err)) ||
        (st = mlm_json_get_int(path, j, "num_attention_heads", 1, 1, 4096, &n_head, NULL, err)) ||
        (st = mlm_json_get_int(path, j, "num_key_value_heads", 0, 1, 4096, &n_kv, &have_kv, err)) ||
        (st = mlm_json_get_int(path, j, "head_dim", 0, 1, 4096, &head_dim, &have_hd, err)) ||
        (st = mlm_json_get_int(path, j, "intermediate_size", 1, 1, DIM_MAX, &ffn, NULL, err)) ||
        (st = mlm_json_get_int(path, j, "vocab_size", 1, 1, 1 << 24, &vocab, NULL, err)) ||
        (st = mlm_json_get_int(path, j, "max_position_embeddings", 0, 1, 1 << 30, &ctx, NULL,
                               err)) ||
        (st = mlm_json_get_num(path, j, "rms_norm_eps", 1, &eps, NULL, err)) ||
        (st = mlm_json_get_num(path, j, "rope_theta", 0, &theta, NULL, err)) ||
        (st = mlm_json_get_bool(path, j, "tie_word_embeddings", 0, &tied, NULL, err)) ||
        (st = mlm_json_get_int(path, j, "bos_token_id", 0, 0, vocab - 1, &bos, NULL, err)) ||
        (st = mlm_json_get_int(path, j, "pad_token_id", 0, 0, vocab - 1, &pad, NULL, err)))
        return st;
    if (!have_hd && c->family == MLM_FAMILY_QWEN3) {
        head_dim = 128; /* transformers' Qwen3Config default */
    } else if (!have_hd) {
        if (dim % n_head)
            return mlm_error_set(
                err, MLM_ERR_FORMAT,
                "%s: hidden_size %lld is not a multiple of num_attention_heads %lld "
                "and head_dim is not given",
                path, (long long)dim, (long long)n_head);
        head_dim = dim / n_head;
    }
    c->n_embd = (int32_t)dim;
    c->n_layer = (int32_t)n_layer;
    c->n_head = (int32_t)n_head;
    c->n_kv_head = (int32_t)(have_kv ? n_kv : n_head);
    c->head_dim = (int32_t)head_dim;
    c->n_ff = (int32_t)ffn;
    c->n_vocab = (int32_t)vocab;
    c->n_ctx_train = (int32_t)ctx;
    c->norm_eps = (float)eps;
    c->rope_theta = (float)theta;
    c->tied_embeddings = tied;
    c->bos_id = (int32_t)bos;
    c->pad_id = (int32_t)pad;
    if ((st = read_ids(path, j, "eos_token_id", c, err)) || (st = read_rope_scaling(path, j, c, err)) ||
        (st = read_qwen(path, j, c, err)))
        return st;
    snprintf(c->source, sizeof c->source, "config.json");
    return mlm_config_check(path, c, err);
}

/* generation_config.json: its bos/eos ids take precedence when present. */
static mlm_status load_generation(const char *path, mlm_config *c, mlm_error *err) {
    json_t *j;
    mlm_status st = mlm_json_load_file(path, CONFIG_MAX_BYTES, &j, err);
    if (st) return st;
    int64_t bos = c->bos_id;
    if (!json_is_object(j))
        st = mlm_error_set(err, MLM_ERR_FORMAT, "%s: must be a JSON object", path);
    if (!st) st = mlm_json_get_int(path, j, "bos_token_id", 0, 0, c->n_vocab - 1, &bos, NULL, err);
    if (!st) st = read_ids(path, j, "eos_token_id", c, err);
    c->bos_id = (int32_t)bos;
    json_decref(j);
    return st;
}

mlm_status mlm_config_from_json(const char *what, const json_t *j, mlm_config *out,
                                mlm_error *err) {
    memset(out, 0, sizeof *out);
    out->bos_id = out->pad_id = out->image_token_id = -1;
    if (!json_is_object(j))
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: must be a JSON object", what);
    /* Meta params.json has "dim"; HF config.json has "hidden_size". */
    if (json_object_get(j, "dim") && !json_object_get(j, "hidden_size"))
        return load_meta(what, j, out, err);
    return load_hf(what, j, out, err);
}

mlm_status mlm_config_load(const char *path, mlm_config *out, mlm_error *err) {
    char gguf[4096];
    if (mlm_gguf_model_file(path, gguf, sizeof gguf)) return mlm_config_from_gguf(gguf, out, err);
    memset(out, 0, sizeof *out);
    out->bos_id = out->pad_id = out->image_token_id = -1;
    char *file = NULL, *dir = NULL;
    if (mlm_is_dir(path)) {
        dir = strdup(path);
        file = mlm_path_join(path, "config.json");
        if (file && !mlm_is_file(file)) {
            free(file);
            file = mlm_path_join(path, "params.json");
        }
        if (file && !mlm_is_file(file)) {
            mlm_status st =
                mlm_error_set(err, MLM_ERR_IO, "%s: no config.json or params.json", path);
            free(file);
            free(dir);
            return st;
        }
    } else {
        file = strdup(path);
        dir = strdup(path);
        char *slash = dir ? strrchr(dir, '/') : NULL;
        if (slash) *slash = 0;
        else if (dir) strcpy(dir, ".");
    }
    if (!file || !dir) {
        free(file);
        free(dir);
        return mlm_error_set(err, MLM_ERR_NOMEM, "config: out of memory");
    }
    json_t *j;
    mlm_status st = mlm_json_load_file(file, CONFIG_MAX_BYTES, &j, err);
    if (st == MLM_OK) {
        st = mlm_config_from_json(file, j, out, err);
        json_decref(j);
    }
    if (st == MLM_OK && !strcmp(out->source, "config.json")) {
        char *gen = mlm_path_join(dir, "generation_config.json");
        if (!gen)
            st = mlm_error_set(err, MLM_ERR_NOMEM, "config: out of memory");
        else if (mlm_is_file(gen)) st = load_generation(gen, out, err);
        free(gen);
    }
    free(file);
    free(dir);
    return st;
}

int64_t mlm_config_n_params(const mlm_config *c) {
    int64_t d = c->n_embd, q = (int64_t)c->n_head * c->head_dim,
            kv = (int64_t)c->n_kv_head * c->head_dim;
    int64_t layer = d * q + 2 * d * kv + q * d + 3 * d * c->n_ff + 2 * d;
    if (c->qkv_bias) layer += q + 2 * kv;
    if (c->qk_norm) layer += 2 * (int64_t)c->head_dim;
    int64_t n = (int64_t)c->n_vocab * d + c->n_layer * layer + d;
    if (!c->tied_embeddings) n += (int64_t)c->n_vocab * d;
    /* mllama: a cross-attention layer adds q/k RMSNorms over head_dim and two scalar gates;
     * the embedding has 8 more rows (the image token's learnable ones) */
    if (c->family == MLM_FAMILY_MLLAMA) n += c->n_cross * (2 * (int64_t)c->head_dim + 2) + 8 * d;
    return n;
}

mlm_status mlm_generation_defaults(const char *path, mlm_sampler_params *out, mlm_error *err) {
    *out = mlm_sampler_default_params();
    out->temperature = 1; /* OpenAI's default when the model names none */
    if (!mlm_is_dir(path)) return MLM_OK; /* a GGUF file or a config file: no generation config */
    char *gen = mlm_path_join(path, "generation_config.json");
    if (!gen) return mlm_error_set(err, MLM_ERR_NOMEM, "config: out of memory");
    mlm_status st = MLM_OK;
    if (mlm_is_file(gen)) {
        json_t *j;
        st = mlm_json_load_file(gen, CONFIG_MAX_BYTES, &j, err);
        if (!st && !json_is_object(j))
            st = mlm_error_set(err, MLM_ERR_FORMAT, "%s: must be a JSON object", gen);
        double t = out->temperature, p = out->top_p;
        int64_t k = 0;
        if (!st) st = mlm_json_get_num(gen, j, "temperature", 0, &t, NULL, err);
        if (!st) st = mlm_json_get_num(gen, j, "top_p", 0, &p, NULL, err);
        if (!st) st = mlm_json_get_int(gen, j, "top_k", 0, -1, INT32_MAX, &k, NULL, err);
        if (!st && (!(t >= 0) || !(p > 0 && p <= 1)))
            st = mlm_error_set(err, MLM_ERR_FORMAT,
                               "%s: temperature %g must be >= 0 and top_p %g in (0, 1]", gen, t, p);
        if (!st) {
            out->temperature = (float)t;
            out->top_p = (float)p;
            out->top_k = k > 0 ? (int32_t)k : 0;
        }
        if (j) json_decref(j);
    }
    free(gen);
    return st;
}
