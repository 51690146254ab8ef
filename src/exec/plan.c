/* exec/plan.c: memory planning before loading: weights in the profile's types, the KV pool,
 * the step scratch and a first load's conversion buffers, against what the system says is
 * available. Arithmetic on the config (and, for the native profile, the GGUF file's tensor
 * types) plus one read of /proc/meminfo; the executor's parameters are resolved by the same
 * function as mlm_exec_create's and the KV pools counted by the same one as kv.c's. */
#include <stdio.h>
#include <string.h>

#include "config/profile.h"
#include "core/mapfile.h"
#include "exec/exec.h"
#include "kv/kv.h"
#include "model/forward.h"
#include "model/vision.h"

#define PROCESS_ALLOWANCE (64ll << 20) /* code, tokenizer, page tables, libc */
#define WRITER_BUFFER (64ll << 20)     /* the cache writer's conversion buffer (cache.c) */

/* PLAN for one rank of TP ranks (C its part of the config FULL) running profile PROF, with
 * the executor's parameters resolved as mlm_exec_create resolves them. */
static mlm_status plan_profile(const mlm_config *full, const mlm_config *c, int tp,
                               const mlm_profile *prof, const mlm_exec_params *params,
                               mlm_memory_plan *plan, mlm_error *err) {
    mlm_exec_params p = params ? *params : mlm_exec_default_params();
    mlm_status st = mlm_exec_params_resolve(&p, mlm_profile_kv_dtype(prof), full, err);
    if (st) return st;
    memset(plan, 0, sizeof *plan);
    plan->weights = mlm_profile_weight_bytes(prof, c, 1);
    /* a first load copies tensors in blocks of up to 1024 rows through f32 (load.c) and the
     * cache writer converts through its buffer: this is all a conversion holds beyond the
     * weights themselves */
    int64_t widest = c->n_embd > c->n_ff ? c->n_embd : c->n_ff;
    plan->convert = WRITER_BUFFER + 1024 * widest * 4;
    int64_t row = (int64_t)c->n_kv_head * c->head_dim;
    /* cross-attention layers keep no KV of their own tokens */
    plan->kv =
        mlm_kv_pool_bytes(c->n_layer - c->n_cross, row, (mlm_wtype)mlm_wtype_of_dtype(p.kv_dtype),
                          p.block_size, p.max_num_blocks);
    plan->scratch = (int64_t)mlm_forward_scratch_size(full, tp, p.max_step_tokens,
                                                      p.max_step_logits, p.n_threads);
    if (c->family == MLM_FAMILY_MLLAMA && p.max_images > 0) {
        /* the image K/V pool (a tile is n_tok entries in every cross layer), one image's
         * encoder scratch and its projected states (max tiles x n_tok rows) */
        const mlm_vision_config *v = &c->vision;
        int64_t G = v->image_size / v->patch_size, T = G * G + 1;
        plan->images = mlm_kv_pool_bytes(c->n_cross, row, (mlm_wtype)mlm_wtype_of_dtype(p.kv_dtype),
                                         (int32_t)T, p.image_tiles) +
                       mlm_vision_scratch_bytes(c) + (int64_t)v->max_tiles * T * c->n_embd * 4;
    }
    plan->total = plan->weights + plan->kv + plan->scratch + plan->images + plan->convert +
                  PROCESS_ALLOWANCE;
    plan->available = mlm_mem_available();
    return MLM_OK;
}

/* One rank's shard of FULL under TP: its heads, MLP columns and slice of the vocabulary. */
static mlm_config rank_shard(const mlm_config *full, int tp) {
    mlm_config shard = mlm_config_shard(full, tp);
    int32_t v0;
    mlm_model_vocab_slice(full->n_vocab, 0, tp, &v0, &shard.n_vocab);
    return shard;
}

/* PLAN for one rank of TP ranks of config FULL in profile OPTIMIZATIONS; the native profile's
 * types come from the GGUF file at PATH (NULL: none, as for a config alone). */
static mlm_status plan_for(const mlm_config *full, const char *path, int tp,
                           const char *optimizations, const char *decoder_config,
                           const mlm_exec_params *params, mlm_memory_plan *plan,
                           mlm_error *err) {
    if (tp < 1) tp = 1;
    mlm_status st = tp > 1 ? mlm_mesh_check_tp(full, tp, NULL, err) : MLM_OK;
    if (st) return st;
    mlm_config shard = rank_shard(full, tp);
    mlm_profile prof;
    if ((st = mlm_profile_init(&prof, optimizations, full, decoder_config, err))) return st;
    if (path && !strcmp(optimizations, "native"))
        st = mlm_profile_resolve_native(&prof, full, &shard, path, err);
    if (!st) st = plan_profile(full, &shard, tp, &prof, params, plan, err);
    mlm_profile_deinit(&prof);
    return st;
}

mlm_status mlm_memory_plan_tp(const mlm_config *full, int tp, const char *optimizations,
                              const char *decoder_config, const mlm_exec_params *params,
                              mlm_memory_plan *plan, mlm_error *err) {
    return plan_for(full, NULL, tp, optimizations, decoder_config, params, plan, err);
}

mlm_status mlm_memory_plan_at(const char *path, int tp, const char *optimizations,
                              const char *decoder_config, const mlm_exec_params *params,
                              mlm_memory_plan *plan, mlm_error *err) {
    mlm_config full;
    mlm_status st = mlm_config_load(path, &full, err);
    return st ? st : plan_for(&full, path, tp, optimizations, decoder_config, params, plan, err);
}
