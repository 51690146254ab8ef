/* model/load.c: mlm_model_load: the config, the TP shard, the profile (for the native profile
 * its types from the file), then the weights: bound from the checkpoint (bind.c,
 * bind_mllama.c) and, for the BFP profiles, converted (convert.c) into the weight cache
 * (cache.c) that later loads map instead. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "core/error.h"
#include "core/mapfile.h"
#include "format/checkpoint.h"
#include "model/bind.h"
#include "model/model.h"

// ---- profiles ----

mlm_status mlm_profile_types_at(const char *path, const char *optimizations,
                                const char *decoder_config, char *buf, size_t size,
                                mlm_error *err) {
    mlm_config cfg;
    mlm_profile p;
    mlm_status st = mlm_config_load(path, &cfg, err);
    if (st || (st = mlm_profile_init(&p, optimizations, &cfg, decoder_config, err))) return st;
    if (!strcmp(optimizations, "native")) st = mlm_profile_resolve_native(&p, &cfg, &cfg, path, err);
    if (!st) mlm_profile_describe(&p, buf, size);
    mlm_profile_deinit(&p);
    return st;
}

// ---- loading ----

/* The number of Meta model-parallel shards ("shard<N>/" prefixes), -1 past 64. */
static int count_shards(const mlm_checkpoint *c) {
    int n = 0;
    char name[64];
    for (;; n++) {
        snprintf(name, sizeof name, "shard%d/tok_embeddings.weight", n);
        if (!mlm_checkpoint_find(c, name)) break;
    }
    return n > 64 ? -1 : n;
}

/* Binds the checkpoint in DIR (open already for a GGUF file): f32/bf16 roles in their types,
 * BFP roles in the source's. */
static mlm_status bind_checkpoint(mlm_model *m, const char *dir, mlm_error *err) {
    mlm_status st = m->ckpt ? MLM_OK : mlm_checkpoint_open(dir, &m->ckpt, err);
    if (st) return st;
    mlm_binder b = {.m = m, .err = err, .source = m->cfg.source, .n_shards = 1};
    b.phi3 = m->cfg.family == MLM_FAMILY_PHI3;
    b.gguf = mlm_checkpoint_format(m->ckpt) == MLM_CKPT_GGUF;
    if (b.gguf) b.source = "its GGUF metadata";
    b.mllama = m->cfg.family == MLM_FAMILY_MLLAMA;
    b.meta = !b.gguf &&
             !mlm_checkpoint_find(m->ckpt, b.mllama ? "language_model.model.embed_tokens.weight"
                                                    : "model.embed_tokens.weight");
    if (b.mllama && b.meta && !mlm_checkpoint_find(m->ckpt, "text_model.tok_embeddings.weight"))
        st = mlm_error_set(err, MLM_ERR_FORMAT,
                           "model: %s: no Llama 3.2 Vision embedding (language_model.model."
                           "embed_tokens.weight or text_model.tok_embeddings.weight; Meta "
                           "checkpoints of several shards are not read for this model)",
                           dir);
    else if (b.gguf && strcmp(m->cfg.source, "gguf"))
        st = mlm_error_set(err, MLM_ERR_FORMAT, "model: %s: a GGUF checkpoint beside %s", dir,
                           m->cfg.source);
    else if (b.meta && !b.mllama && !mlm_checkpoint_find(m->ckpt, "tok_embeddings.weight")) {
        b.n_shards = count_shards(m->ckpt);
        if (b.n_shards <= 0)
            st = mlm_error_set(err, MLM_ERR_FORMAT,
                               "model: %s: no embedding tensor (model.embed_tokens.weight or "
                               "tok_embeddings.weight)",
                               dir);
    }
    if (!st) st = mlm_bind_decoder(&b);
    if (!st && b.mllama) st = mlm_bind_mllama(&b);
    if (st) mlm_error_prefix(err, "%s", dir);
    return st;
}

static void say(const mlm_model_params *p, const char *fmt, const char *a, const char *b) {
    if (!p->on_message) return;
    char msg[MLM_ERROR_MSG_MAX + 1200];
    snprintf(msg, sizeof msg, fmt, a, b);
    p->on_message(p->user, msg);
}

/* Which layers are cross-attention layers, and the KV pool of each (m->n_self). */
static void layer_kinds(mlm_model *m) {
    const mlm_config *c = &m->cfg;
    int32_t n_self = 0, n_cross = 0;
    for (int32_t l = 0; l < c->n_layer; l++) {
        mlm_layer *L = &m->layers[l];
        L->cross = 0;
        for (int32_t i = 0; i < c->n_cross; i++)
            L->cross |= c->cross_layers[i] == l;
        L->kv_layer = L->cross ? n_cross++ : n_self++;
    }
    m->n_self = n_self;
}

/* BFP profiles: map the cache when it is valid, else convert the checkpoint and write it
 * (or, without a cache, convert into memory). */
static mlm_status load_bfp(mlm_model *m, const char *dir, const mlm_model_params *p,
                           mlm_error *err) {
    if (!p->use_cache) {
        mlm_status st = bind_checkpoint(m, dir, err);
        return st ? st : mlm_model_convert(m, p, err);
    }
    char key[4096];
    mlm_status st = mlm_cache_key(dir, &m->profile, m->tp_rank, m->tp_size, key, sizeof key, err);
    if (!st) st = mlm_cache_path_for(dir, &m->profile, p, m->cache_path, sizeof m->cache_path, err);
    if (st) return st;
    mlm_error why = {0};
    if (mlm_is_file(m->cache_path)) {
        if (!mlm_cache_map(m, m->cache_path, key, &why)) {
            mlm_checkpoint_free(m->ckpt); /* a GGUF file's: the cache holds every weight */
            m->ckpt = NULL;
            return MLM_OK;
        }
        say(p, "%s; rebuilding it%s", why.msg, "");
        /* an invalid cache is worth nothing: free its space before writing the new one */
        unlink(m->cache_path);
    }
    if ((st = bind_checkpoint(m, dir, err)) || (st = mlm_cache_write(m, m->cache_path, key, p, err)))
        return st;
    /* Drop the source binding and map what was written, as a later run will. */
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    m->n_owned = 0;
    m->bytes_owned = m->bytes_mapped = 0;
    mlm_checkpoint_free(m->ckpt);
    m->ckpt = NULL;
    memset(m->layers, 0, (size_t)m->cfg.n_layer * sizeof *m->layers);
    layer_kinds(m);
    if ((st = mlm_cache_map(m, m->cache_path, key, err))) return st;
    m->cache_built = 1;
    return MLM_OK;
}

/* This rank's shard of M's dimensions under the TP communicator TP (NULL: all of them). */
static mlm_status shard_init(mlm_model *m, mlm_comm *tp, mlm_error *err) {
    m->tp = tp;
    m->tp_rank = mlm_comm_rank(tp);
    m->tp_size = mlm_comm_size(tp);
    m->local = m->cfg;
    mlm_model_vocab_slice(m->cfg.n_vocab, m->tp_rank, m->tp_size, &m->vocab0, &m->n_vocab_local);
    if (m->tp_size == 1) return MLM_OK;
    mlm_status st = mlm_mesh_check_tp(&m->cfg, m->tp_size, NULL, err);
    if (!st) m->local = mlm_config_shard(&m->cfg, m->tp_size);
    return st;
}

/* The layers' kinds; for Llama 3.2 Vision the learnable embedding rows and the vision
 * tower's layers. */
static mlm_status layers_init(mlm_model *m, mlm_error *err) {
    const mlm_config *c = &m->cfg;
    layer_kinds(m);
    if (c->family != MLM_FAMILY_MLLAMA) return MLM_OK;
    m->n_emb_extra = 8;
    if (c->image_token_id < c->n_vocab || c->image_token_id >= c->n_vocab + m->n_emb_extra)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "model: image token %d is not one of the embedding's learnable rows "
                             "[%d, %d)",
                             c->image_token_id, c->n_vocab, c->n_vocab + m->n_emb_extra);
    return mlm_model_alloc_vision(m, err);
}

mlm_status mlm_model_load(const char *dir, const mlm_model_params *params, mlm_model **out,
                          mlm_error *err) {
    *out = NULL;
    mlm_model_params p = params ? *params : mlm_model_default_params();
    if (!p.optimizations && p.dtype != MLM_DTYPE_F32 && p.dtype != MLM_DTYPE_BF16)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "model: dtype %s is not a compute dtype (f32, bf16)",
                             mlm_dtype_name(p.dtype));
    const char *name = mlm_model_params_profile(&p);
    mlm_model *m = calloc(1, sizeof *m);
    if (!m) return mlm_error_set(err, MLM_ERR_NOMEM, "model: out of memory");
    mlm_status st = mlm_kernels_pick(&m->kernels, err);
    /* a GGUF file is parsed once: its checkpoint's parse gives the config (and the native
     * profile's types, the rope factors and the bound tensors); other formats read their
     * config.json / params.json here and their weights in bind_checkpoint */
    if (!st && !mlm_gguf_model_file(dir, m->gguf_path, sizeof m->gguf_path)) m->gguf_path[0] = 0;
    if (!st && m->gguf_path[0]) {
        st = mlm_checkpoint_open(m->gguf_path, &m->ckpt, err);
        if (!st) st = mlm_config_from_gguf_file(mlm_ckpt_gguf(m->ckpt), m->gguf_path, &m->cfg, err);
    } else if (!st) {
        st = mlm_config_load(dir, &m->cfg, err);
    }
    if (!st && m->cfg.family == MLM_FAMILY_MLLAMA && mlm_comm_size(p.tp) > 1)
        st = mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                           "model: %s is Llama 3.2 Vision: meshlm runs it on one device (TP 1), "
                           "not on a mesh of %d",
                           dir, mlm_comm_size(p.tp));
    if (!st && p.tp_reduce != MLM_TP_EXACT && p.tp_reduce != MLM_TP_SUM)
        st = mlm_error_set(err, MLM_ERR_INVALID_ARG,
                           "model: tp_reduce %d is neither exact (0) nor "
                           "sum (1)",
                           (int)p.tp_reduce);
    m->tp_reduce = p.tp_reduce;
    if (!st) st = shard_init(m, p.tp, err);
    if (!st) st = mlm_profile_init(&m->profile, name, &m->cfg, p.decoder_config, err);
    if (!st && !strcmp(name, "native"))
        st = mlm_profile_resolve_native_ckpt(&m->profile, &m->cfg, &m->local, m->ckpt, dir, err);
    if (!st) st = mlm_rope_init(m, err); /* before a BFP cache's mapping lets the file go */
    if (!st) {
        m->layers = calloc((size_t)m->cfg.n_layer, sizeof *m->layers);
        if (!m->layers) st = mlm_error_set(err, MLM_ERR_NOMEM, "model: out of memory");
    }
    if (!st) st = layers_init(m, err);
    /* threads for the conversions and checksums of this load, gone when it returns */
    if (!st) st = mlm_pool_create(p.n_threads ? p.n_threads : mlm_cpu_count(), &m->load_pool, err);
    if (!st) st = mlm_profile_has_bfp(&m->profile) ? load_bfp(m, dir, &p, err)
                                                   : bind_checkpoint(m, dir, err);
    mlm_pool_free(m->load_pool);
    m->load_pool = NULL;
    if (st) {
        mlm_model_free(m);
        return st;
    }
    *out = m;
    return MLM_OK;
}
