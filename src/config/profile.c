/* config/profile.c: the precision profiles and decoder-config overrides (see profile.h). */
#include "config/profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "format/json.h"

const char *const mlm_profile_names[] = {"performance", "accuracy", "bf16", "f32", "native", NULL};

/* The seeds' model_params/Llama-3.1-8B-Instruct/performance_decoder_config.json. */
static const char llama31_8b_performance[] =
    "{\"decoders\": {\"31\": {\"precision_cfg\": {\"FF1_FF3\": \"BFP8\"}, "
    "\"fidelity_cfg\": {\"LI_FF1_FF3\": \"LOFI\"}}}}";

static int is_llama_size(const mlm_config *c, int n_layer, int n_embd) {
    return c->family == MLM_FAMILY_LLAMA3 && c->n_layer == n_layer && c->n_embd == n_embd;
}

static mlm_status parse_type(const char *what, const char *key, const json_t *v, mlm_wtype *out,
                             mlm_error *err) {
    static const struct { const char *name; mlm_wtype t; } types[] = {
        {"BFP4", MLM_W_BFP4}, {"BFP8", MLM_W_BFP8}, {"BF16", MLM_W_BF16}, {"F32", MLM_W_F32}};
    if (json_is_string(v))
        for (size_t i = 0; i < sizeof types / sizeof *types; i++)
            if (!strcasecmp(json_string_value(v), types[i].name)) {
                *out = types[i].t;
                return MLM_OK;
            }
    return mlm_error_set(err, MLM_ERR_FORMAT,
                         "%s: '%s' must be \"BFP4\", \"BFP8\", \"BF16\" or "
                         "\"F32\"",
                         what, key);
}

mlm_status mlm_profile_apply_overrides(mlm_profile *p, const char *what, const json_t *j,
                                  mlm_error *err) {
    const json_t *dec = json_is_object(j) ? json_object_get(j, "decoders") : NULL;
    if (!json_is_object(dec))
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: expected an object with a \"decoders\" "
                             "object",
                             what);
    const char *key;
    json_t *layer;
    json_object_foreach((json_t *)dec, key, layer) {
        char *end;
        long l = strtol(key, &end, 10);
        if (!*key || *end || l < 0 || l >= p->n_layer)
            return mlm_error_set(err, MLM_ERR_FORMAT,
                                 "%s: decoders key '%s' is not a layer index in [0, %d)", what, key,
                                 p->n_layer);
        if (!json_is_object(layer))
            return mlm_error_set(err, MLM_ERR_FORMAT, "%s: decoders.%s must be an object", what,
                                 key);
        const char *k2;
        json_t *v2;
        json_object_foreach(layer, k2, v2) {
            if (!strcmp(k2, "fidelity_cfg")) continue; /* math fidelity: exact here */
            if (strcmp(k2, "precision_cfg") || !json_is_object(v2))
                return mlm_error_set(err, MLM_ERR_FORMAT,
                                     "%s: decoders.%s.%s: expected \"precision_cfg\" or "
                                     "\"fidelity_cfg\" objects",
                                     what, key, k2);
            const char *group;
            json_t *tv;
            json_object_foreach(v2, group, tv) {
                char field[96];
                snprintf(field, sizeof field, "decoders.%s.precision_cfg.%s", key, group);
                if (!strcmp(group, "ACTIVATION")) {
                    if (json_is_null(tv)) continue;
                    return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                                         "%s: %s: activations are always f32 (int8 against BFP "
                                         "weights); only null is accepted",
                                         what, field);
                }
                mlm_wtype t = MLM_W_F32;
                mlm_status st = parse_type(what, field, tv, &t, err);
                if (st) return st;
                mlm_wtype *L = p->layer[l];
                if (!strcmp(group, "FF1_FF3")) L[MLM_ROLE_W1] = L[MLM_ROLE_W3] = t;
                else if (!strcmp(group, "FF2")) L[MLM_ROLE_W2] = t;
                else if (!strcmp(group, "WQKV")) L[MLM_ROLE_WQ] = L[MLM_ROLE_WK] = L[MLM_ROLE_WV] = t;
                else if (!strcmp(group, "WO")) L[MLM_ROLE_WO] = t;
                else if (!strcmp(group, "KV_CACHE")) {
                    if (t == MLM_W_BFP4)
                        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                                             "%s: %s: the KV cache is f32, bf16 or bfp8", what,
                                             field);
                    L[MLM_ROLE_KV] = t;
                } else
                    return mlm_error_set(err, MLM_ERR_FORMAT,
                                         "%s: unknown tensor group '%s' in decoders.%s (expected "
                                         "FF1_FF3, FF2, WQKV, WO, KV_CACHE or ACTIVATION)",
                                         what, group, key);
            }
        }
    }
    return MLM_OK;
}

mlm_status mlm_profile_init(mlm_profile *p, const char *name, const mlm_config *c,
                            const char *decoder_config, mlm_error *err) {
    memset(p, 0, sizeof *p);
    mlm_wtype mat, ff13, kv, emb, head;
    if (!strcmp(name, "performance") || !strcmp(name, "accuracy")) {
        int perf = !strcmp(name, "performance") || is_llama_size(c, 80, 8192); /* 70B: seeds */
        mat = MLM_W_BFP8, ff13 = perf ? MLM_W_BFP4 : MLM_W_BFP8, kv = MLM_W_BFP8;
        emb = MLM_W_BF16, head = MLM_W_BFP8;
    } else if (!strcmp(name, "bf16") || !strcmp(name, "f32") || !strcmp(name, "native")) {
        /* native: bf16 until the loader gives each matrix its file's type (model/load.c) */
        mat = ff13 = kv = emb = head = name[0] == 'f' ? MLM_W_F32 : MLM_W_BF16;
    } else {
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "optimizations '%s' is not one of performance, accuracy, bf16, f32, "
                             "native",
                             name);
    }
    snprintf(p->name, sizeof p->name, "%s", name);
    p->emb = emb, p->head = head, p->n_layer = c->n_layer;
    p->has_vision = c->family == MLM_FAMILY_MLLAMA;
    p->vision = mat; /* BFP8 in both BFP profiles, else the profile's type */
    p->layer = calloc((size_t)(c->n_layer > 0 ? c->n_layer : 1), sizeof *p->layer);
    if (!p->layer) return mlm_error_set(err, MLM_ERR_NOMEM, "profile: out of memory");
    for (int32_t l = 0; l < c->n_layer; l++) {
        mlm_wtype *L = p->layer[l];
        L[MLM_ROLE_WQ] = L[MLM_ROLE_WK] = L[MLM_ROLE_WV] = L[MLM_ROLE_WO] = L[MLM_ROLE_W2] = mat;
        L[MLM_ROLE_W1] = L[MLM_ROLE_W3] = ff13;
        L[MLM_ROLE_KV] = kv;
    }
    mlm_status st = MLM_OK;
    json_t *j = NULL;
    if (decoder_config) {
        st = mlm_json_load_file(decoder_config, 1 << 20, &j, err);
        if (!st) st = mlm_profile_apply_overrides(p, decoder_config, j, err);
        const char *base = strrchr(decoder_config, '/');
        snprintf(p->overrides, sizeof p->overrides, "%s", base ? base + 1 : decoder_config);
    } else if (!strcmp(name, "performance") && is_llama_size(c, 32, 4096)) {
        const char *what = "built-in Llama-3.1-8B performance_decoder_config.json";
        st = mlm_json_parse(what, llama31_8b_performance, sizeof llama31_8b_performance - 1, &j,
                            err);
        if (!st) st = mlm_profile_apply_overrides(p, what, j, err);
        snprintf(p->overrides, sizeof p->overrides, "Llama-3.1-8B built-in");
    }
    json_decref(j);
    if (st) mlm_profile_deinit(p);
    return st;
}

void mlm_profile_deinit(mlm_profile *p) {
    free(p->layer);
    p->layer = NULL;
}

int mlm_profile_has_bfp(const mlm_profile *p) {
    if (p->emb >= MLM_W_BFP8 || p->head >= MLM_W_BFP8) return 1;
    if (p->has_vision && p->vision >= MLM_W_BFP8) return 1;
    for (int32_t l = 0; l < p->n_layer; l++)
        for (int r = 0; r < MLM_ROLE_KV; r++)
            if (p->layer[l][r] >= MLM_W_BFP8) return 1;
    return 0;
}

void mlm_profile_describe(const mlm_profile *p, char *buf, size_t size) {
    static const char *roles[] = {"wq", "wk", "wv", "wo", "w1", "w2", "w3", "kv"};
    size_t n = (size_t)snprintf(buf, size, "emb %s, head %s", mlm_wtype_name(p->emb),
                                mlm_wtype_name(p->head));
    if (p->has_vision && n < size)
        n += (size_t)snprintf(buf + n, size - n, ", vision %s", mlm_wtype_name(p->vision));
    /* runs of layers with equal types */
    for (int32_t l0 = 0; l0 < p->n_layer && n < size;) {
        int32_t l1 = l0;
        while (l1 + 1 < p->n_layer && !memcmp(p->layer[l1 + 1], p->layer[l0], sizeof p->layer[0]))
            l1++;
        if (l0 == l1) n += (size_t)snprintf(buf + n, size - n, "; layer %d:", l0);
        else n += (size_t)snprintf(buf + n, size - n, "; layers %d-%d:", l0, l1);
        for (int r = 0; r < MLM_ROLE_LAYER_COUNT && n < size; r++)
            n += (size_t)snprintf(buf + n, size - n, " %s %s", roles[r],
                                  mlm_wtype_name(p->layer[l0][r]));
        l0 = l1 + 1;
    }
}

int64_t mlm_profile_weight_bytes(const mlm_profile *p, const mlm_config *c, int resident) {
    int64_t d = c->n_embd, q = (int64_t)c->n_head * c->head_dim,
            kv = (int64_t)c->n_kv_head * c->head_dim, f = c->n_ff, V = c->n_vocab;
    int64_t total = (2 * (int64_t)c->n_layer + 1) * d * 4; /* norms, f32 */
    for (int32_t l = 0; l < c->n_layer; l++) {
        const mlm_wtype *L = p->layer[l];
        total += mlm_wtype_bytes(L[MLM_ROLE_WQ], q, d) + mlm_wtype_bytes(L[MLM_ROLE_WK], kv, d) +
                 mlm_wtype_bytes(L[MLM_ROLE_WV], kv, d) +
                 mlm_chunked_bytes(L[MLM_ROLE_WO], d, q, mlm_wo_chunks(c)) +
                 mlm_wtype_bytes(L[MLM_ROLE_W1], f, d) + mlm_wtype_bytes(L[MLM_ROLE_W3], f, d) +
                 mlm_chunked_bytes(L[MLM_ROLE_W2], d, f, mlm_w2_chunks(c));
    }
    int shared = c->tied_embeddings && p->head == p->emb;
    total += mlm_wtype_bytes(p->head, V, d);
    int64_t emb_rows = V + (c->family == MLM_FAMILY_MLLAMA ? 8 : 0);
    if (!shared || !resident)
        total += resident ? mlm_wtype_bytes(p->emb, emb_rows, d) : mlm_wtype_row_bytes(p->emb, d);
    if (c->family == MLM_FAMILY_MLLAMA) {
        /* cross layers' q/k norms and gates; what a text token reads of them is in the above */
        total += (int64_t)c->n_cross * (2 * c->head_dim + 2) * 4;
        if (resident) total += mlm_profile_vision_bytes(p, c);
    }
    return total;
}

mlm_wtype mlm_profile_kv_type(const mlm_profile *p) {
    return p->n_layer ? p->layer[0][MLM_ROLE_KV] : MLM_W_F32;
}

mlm_dtype mlm_profile_kv_dtype(const mlm_profile *p) {
    return mlm_wtype_dtype(mlm_profile_kv_type(p));
}

int64_t mlm_profile_vision_bytes(const mlm_profile *p, const mlm_config *c) {
    if (c->family != MLM_FAMILY_MLLAMA) return 0;
    const mlm_vision_config *v = &c->vision;
    int64_t D = v->n_embd, F = v->n_ff, NT = v->max_tiles, A1 = v->n_aspect + 1;
    int64_t G = v->image_size / (v->patch_size ? v->patch_size : 1), T = G * G + 1;
    int64_t pix = (int64_t)v->n_channels * v->patch_size * v->patch_size;
    int64_t total = mlm_wtype_bytes(p->vision, D, pix) + mlm_wtype_bytes(p->emb, A1 * NT * T, D) +
                    mlm_wtype_bytes(p->vision, c->n_embd, v->output_dim);
    int64_t layer = 4 * mlm_wtype_bytes(p->vision, D, D) + mlm_wtype_bytes(p->vision, F, D) +
                    mlm_wtype_bytes(p->vision, D, F) + (5 * D + F + 2) * 4;
    total += (int64_t)(v->n_layer + v->n_global_layer) * layer;
    /* class and positional embeddings, tile tables, gates, layer norms, projector bias */
    total += (D + T * D + 2 * A1 * NT * D + 3 + 4 * D + c->n_embd) * 4;
    return total;
}