/* config/config_gguf.c: a GGUF file's metadata into an mlm_config, as llama.cpp reads it.
 *
 * Architectures: "llama" (Llama 3.x, SmolLM2, ...) and "phi3" (Phi-4). Keys are
 * "<arch>.<name>": block_count, embedding_length, feed_forward_length, attention.head_count,
 * attention.head_count_kv (default: head_count), attention.key_length / value_length (head
 * dim; default embedding_length / head_count), rope.dimension_count (must be the head dim:
 * partial rotary is not supported), rope.freq_base (default 10000),
 * attention.layer_norm_rms_epsilon, context_length, vocab_size (default: the tokenizer's
 * token count, else the embedding's rows). Rope scaling: a "rope_freqs.weight" tensor
 * (Llama 3.1, per-frequency divisors) or rope.scaling.type "none"/"linear" with factor 1;
 * anything else is refused by name. Tied embeddings: no "output.weight" tensor. Token ids:
 * tokenizer.ggml.bos/eos/eot/eom/padding_token_id. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/mapfile.h"
#include "format/gguf.h"
#include "format/gguf_quants.h"
#include "config/config.h"

int mlm_gguf_model_file(const char *path, char *out, size_t size) {
    if (!path) return 0;
    if (mlm_gguf_is_file(path)) {
        snprintf(out, size, "%s", path);
        return 1;
    }
    if (!mlm_is_dir(path)) return 0;
    static const char *others[] = {"config.json", "params.json"};
    for (int i = 0; i < 2; i++) {
        char *p = mlm_path_join(path, others[i]);
        int there = p && mlm_is_file(p);
        free(p);
        if (there) return 0;
    }
    char *found = mlm_gguf_find_in_dir(path);
    if (found) snprintf(out, size, "%s", found);
    free(found);
    return found != NULL;
}

typedef struct reader {
    const mlm_gguf *g;
    const char *path;
    char arch[16];
    mlm_error *err;
} reader;

/* "<arch>.KEY" as an unsigned integer in [LO, HI]; *OUT keeps its value when absent and
 * not REQUIRED. */
static mlm_status get_u(const reader *r, const char *key, int required, int64_t lo, int64_t hi,
                        int64_t *out) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", r->arch, key);
    if (!mlm_gguf_find(r->g, full)) {
        if (!required) return MLM_OK;
        return mlm_error_set(r->err, MLM_ERR_FORMAT, "%s: missing key '%s'", r->path, full);
    }
    int64_t v;
    mlm_status st = mlm_gguf_get_int(r->g, full, &v, r->err);
    if (st)
        return mlm_error_set(r->err, MLM_ERR_FORMAT, "%s: key '%s' is not an integer", r->path,
                             full);
    if (v < lo || v > hi)
        return mlm_error_set(r->err, MLM_ERR_FORMAT, "%s: key '%s' is %lld, outside [%lld, %lld]",
                             r->path, full, (long long)v, (long long)lo, (long long)hi);
    *out = v;
    return MLM_OK;
}

static mlm_status get_f(const reader *r, const char *key, int required, double *out) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", r->arch, key);
    if (!mlm_gguf_find(r->g, full)) {
        if (!required) return MLM_OK;
        return mlm_error_set(r->err, MLM_ERR_FORMAT, "%s: missing key '%s'", r->path, full);
    }
    if (mlm_gguf_get_float(r->g, full, out, r->err))
        return mlm_error_set(r->err, MLM_ERR_FORMAT, "%s: key '%s' is not a float", r->path, full);
    return MLM_OK;
}

/* tokenizer.ggml.KEY as a token id in [0, n_vocab), or -1 when absent. */
static mlm_status get_id(const reader *r, const char *key, int32_t n_vocab, int32_t *out) {
    char full[128];
    snprintf(full, sizeof full, "tokenizer.ggml.%s", key);
    *out = -1;
    if (!mlm_gguf_find(r->g, full)) return MLM_OK;
    int64_t v;
    if (mlm_gguf_get_int(r->g, full, &v, r->err) || v < 0 || v >= n_vocab)
        return mlm_error_set(r->err, MLM_ERR_FORMAT, "%s: key '%s' is not a token id below %d",
                             r->path, full, n_vocab);
    *out = (int32_t)v;
    return MLM_OK;
}

static mlm_status read_rope(const reader *r, mlm_config *c) {
    char full[128];
    snprintf(full, sizeof full, "%s.rope.scaling.type", r->arch);
    if (mlm_gguf_find(r->g, full)) {
        const char *s;
        uint64_t n;
        if (mlm_gguf_get_str(r->g, full, &s, &n, r->err))
            return mlm_error_set(r->err, MLM_ERR_FORMAT, "%s: key '%s' is not a string", r->path,
                                 full);
        double factor = 1;
        mlm_status st = get_f(r, "rope.scaling.factor", 0, &factor);
        if (st) return st;
        int plain = (n == 4 && !memcmp(s, "none", 4)) ||
                    (n == 6 && !memcmp(s, "linear", 6) && factor == 1.0);
        if (!plain)
            return mlm_error_set(
                r->err, MLM_ERR_UNSUPPORTED,
                "%s: rope scaling '%.*s' (factor %g) is not supported (Llama 3.1's "
                "comes as a rope_freqs tensor)",
                r->path, (int)(n > 32 ? 32 : n), s, factor);
    }
    if (mlm_gguf_find_tensor(r->g, "rope_factors_long.weight") ||
        mlm_gguf_find_tensor(r->g, "rope_factors_short.weight"))
        return mlm_error_set(r->err, MLM_ERR_UNSUPPORTED,
                             "%s: longrope scaling (rope_factors_long/short) is not supported",
                             r->path);
    const mlm_gguf_tensor *t = mlm_gguf_find_tensor(r->g, "rope_freqs.weight");
    if (t) {
        if (t->type != MLM_GGML_T_F32 || t->n_dim != 1 || t->ne[0] != c->head_dim / 2)
            return mlm_error_set(r->err, MLM_ERR_FORMAT,
                                 "%s: tensor 'rope_freqs.weight' must be f32 [%d] (head_dim / 2)",
                                 r->path, c->head_dim / 2);
        c->rope_type = MLM_ROPE_FACTORS;
    }
    return MLM_OK;
}

static mlm_status read_config(reader *r, mlm_config *c) {
    const char *s;
    uint64_t n;
    if (!mlm_gguf_find(r->g, "general.architecture"))
        return mlm_error_set(r->err, MLM_ERR_FORMAT, "%s: missing key 'general.architecture'",
                             r->path);
    if (mlm_gguf_get_str(r->g, "general.architecture", &s, &n, r->err))
        return mlm_error_set(r->err, MLM_ERR_FORMAT,
                             "%s: key 'general.architecture' is not a string", r->path);
    if (n == 5 && !memcmp(s, "llama", 5)) c->family = MLM_FAMILY_LLAMA3;
    else if (n == 4 && !memcmp(s, "phi3", 4)) c->family = MLM_FAMILY_PHI3;
    else if (n == 5 && !memcmp(s, "qwen2", 5)) c->family = MLM_FAMILY_QWEN2;
    else if (n == 5 && !memcmp(s, "qwen3", 5)) c->family = MLM_FAMILY_QWEN3;
    else
        return mlm_error_set(r->err, MLM_ERR_UNSUPPORTED,
                             "%s: architecture '%.*s' is not supported (llama, phi3, qwen2, qwen3)",
                             r->path, (int)(n > 64 ? 64 : n), s);
    memcpy(r->arch, s, n);
    r->arch[n] = 0;
    int64_t dim, n_layer, n_head, n_kv = -1, ffn, hd = -1, vd = -1, rot = -1, ctx = 0, vocab = -1;
    double eps, theta = 10000;
    mlm_status st;
    if ((st = get_u(r, "block_count", 1, 1, 4096, &n_layer)) ||
        (st = get_u(r, "embedding_length", 1, 1, 1 << 20, &dim)) ||
        (st = get_u(r, "feed_forward_length", 1, 1, 1 << 20, &ffn)) ||
        (st = get_u(r, "attention.head_count", 1, 1, 4096, &n_head)) ||
        (st = get_u(r, "attention.head_count_kv", 0, 1, 4096, &n_kv)) ||
        (st = get_u(r, "attention.key_length", 0, 2, 1 << 16, &hd)) ||
        (st = get_u(r, "attention.value_length", 0, 2, 1 << 16, &vd)) ||
        (st = get_u(r, "rope.dimension_count", 0, 2, 1 << 16, &rot)) ||
        (st = get_u(r, "context_length", 0, 0, 1 << 30, &ctx)) ||
        (st = get_u(r, "vocab_size", 0, 1, 1 << 24, &vocab)) ||
        (st = get_f(r, "attention.layer_norm_rms_epsilon", 1, &eps)) ||
        (st = get_f(r, "rope.freq_base", 0, &theta)))
        return st;
    if (hd < 0) {
        if (dim % n_head)
            return mlm_error_set(r->err, MLM_ERR_FORMAT,
                                 "%s: %s.embedding_length %lld is not a multiple of "
                                 "%s.attention.head_count %lld",
                                 r->path, r->arch, (long long)dim, r->arch, (long long)n_head);
        hd = dim / n_head;
    }
    if (vd >= 0 && vd != hd)
        return mlm_error_set(r->err, MLM_ERR_UNSUPPORTED,
                             "%s: %s.attention.value_length %lld differs from key_length %lld",
                             r->path, r->arch, (long long)vd, (long long)hd);
    if (rot >= 0 && rot != hd)
        return mlm_error_set(r->err, MLM_ERR_UNSUPPORTED,
                             "%s: %s.rope.dimension_count %lld is not the head dim %lld (partial "
                             "rotary is not supported)",
                             r->path, r->arch, (long long)rot, (long long)hd);
    const mlm_gguf_tensor *emb = mlm_gguf_find_tensor(r->g, "token_embd.weight");
    if (vocab < 0) {
        const mlm_gguf_kv *tok = mlm_gguf_find(r->g, "tokenizer.ggml.tokens");
        if (tok && tok->value.type == MLM_GGUF_ARRAY) vocab = (int64_t)tok->value.n;
        else if (emb && emb->n_dim == 2) vocab = emb->ne[1];
        else
            return mlm_error_set(r->err, MLM_ERR_FORMAT,
                                 "%s: no vocabulary size (%s.vocab_size, tokenizer.ggml.tokens or "
                                 "token_embd.weight)",
                                 r->path, r->arch);
        if (vocab < 1 || vocab > (1 << 24))
            return mlm_error_set(r->err, MLM_ERR_FORMAT, "%s: vocabulary size %lld out of range",
                                 r->path, (long long)vocab);
    }
    c->n_embd = (int32_t)dim;
    c->n_layer = (int32_t)n_layer;
    c->n_head = (int32_t)n_head;
    c->n_kv_head = (int32_t)(n_kv > 0 ? n_kv : n_head);
    c->head_dim = (int32_t)hd;
    c->n_ff = (int32_t)ffn;
    c->n_vocab = (int32_t)vocab;
    c->n_ctx_train = (int32_t)ctx;
    c->norm_eps = (float)eps;
    c->rope_theta = (float)theta;
    c->tied_embeddings = !mlm_gguf_find_tensor(r->g, "output.weight");
    /* Qwen2's q/k/v biases (Qwen3's when the file has them: its attention_bias), Qwen3's
     * per-head q/k norms, as llama.cpp's qwen2 / qwen3 graphs read them */
    c->qkv_bias = c->family == MLM_FAMILY_QWEN2 ||
                  (c->family == MLM_FAMILY_QWEN3 && mlm_gguf_find_tensor(r->g, "blk.0.attn_q.bias"));
    c->qk_norm = c->family == MLM_FAMILY_QWEN3;
    if ((st = read_rope(r, c))) return st;
    int32_t id;
    if ((st = get_id(r, "bos_token_id", c->n_vocab, &c->bos_id)) ||
        (st = get_id(r, "padding_token_id", c->n_vocab, &c->pad_id)))
        return st;
    static const char *stops[] = {"eos_token_id", "eot_token_id", "eom_token_id"};
    for (int i = 0; i < 3; i++) {
        if ((st = get_id(r, stops[i], c->n_vocab, &id))) return st;
        int dup = 0;
        for (int k = 0; k < c->n_stop_ids; k++) dup |= c->stop_ids[k] == id;
        if (id >= 0 && !dup && c->n_stop_ids < MLM_MAX_STOP_IDS) c->stop_ids[c->n_stop_ids++] = id;
    }
    snprintf(c->source, sizeof c->source, "gguf");
    return mlm_config_check(r->path, c, r->err);
}

mlm_status mlm_config_from_gguf_file(const mlm_gguf *g, const char *path, mlm_config *out,
                                     mlm_error *err) {
    memset(out, 0, sizeof *out);
    out->bos_id = out->pad_id = out->image_token_id = -1;
    reader r = {.g = g, .path = path, .err = err};
    return read_config(&r, out);
}

mlm_status mlm_config_from_gguf(const char *path, mlm_config *out, mlm_error *err) {
    mlm_gguf *g;
    mlm_status st = mlm_gguf_open(path, &g, err);
    if (st) return st;
    st = mlm_config_from_gguf_file(g, path, out, err);
    mlm_gguf_free(g);
    return st;
}

mlm_status mlm_gguf_rope_factors(const mlm_gguf *g, const char *path, float *out, int n,
                                 mlm_error *err) {
    const mlm_gguf_tensor *t = g ? mlm_gguf_find_tensor(g, "rope_freqs.weight") : NULL;
    if (!t || t->type != MLM_GGML_T_F32 || t->ne[0] != n)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: tensor 'rope_freqs.weight' must be f32 [%d]", path, n);
    mlm_ggml_dequantize(MLM_GGML_T_F32, t->data, n, out);
    return MLM_OK;
}
