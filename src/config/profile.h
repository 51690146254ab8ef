/* config/profile.h: precision profiles as data. A profile maps each weight role of each layer
 * (and the KV cache) plus the embedding and the LM head to a kernel weight type. The named
 * rows are the seeds' (tt-demos.md section 2):
 *   performance  wq wk wv wo w2 bfp8, w1 w3 bfp4, KV bfp8, LM head bfp8, embedding bf16
 *   accuracy     every matrix bfp8 (Llama 3.1-70B: w1 w3 bfp4, as the seeds), KV bfp8
 *   bf16, f32    everything in that type
 *   native       (GGUF files) every matrix in the type its file stores it in: the native
 *                GGUF types at their own bits, F32 as f32, F16/BF16 as bf16; KV bf16. The
 *                loader fills in the types from the file (model/load.c).
 * Llama 3.2 Vision's vision tower (encoder and projector) takes BFP8 in both BFP profiles, its
 * tile positional table the embedding's bf16; its cross-attention layers are decoder layers
 * like the others.
 * Per-layer overrides come from a decoder-config JSON in the seeds' shape:
 *   {"decoders": {"31": {"precision_cfg": {"FF1_FF3": "BFP8"}, "fidelity_cfg": {...}}}}
 * with tensor groups FF1_FF3 (w1 w3), FF2 (w2), WQKV, WO, KV_CACHE and values BFP4, BFP8,
 * BF16 (and F32). fidelity_cfg is accepted and ignored: the CPU kernels compute exactly.
 * Llama-3.1-8B's performance profile carries the seeds' own override (layer 31 FF1_FF3 in
 * BFP8) unless a decoder config is given. */
#ifndef MESHLM_MODEL_PROFILE_H
#define MESHLM_MODEL_PROFILE_H

#include <jansson.h>
#include <stddef.h>

#include "meshlm.h"
#include "tensor/weight.h"
#include "tensor/wtype.h"

typedef enum mlm_role {
    MLM_ROLE_WQ = 0, MLM_ROLE_WK, MLM_ROLE_WV, MLM_ROLE_WO, MLM_ROLE_W1, MLM_ROLE_W2, MLM_ROLE_W3,
    MLM_ROLE_KV,
    MLM_ROLE_LAYER_COUNT /* roles above are per layer */
} mlm_role;

typedef struct mlm_profile {
    char name[16];                          /* "performance", "accuracy", "bf16", "f32" */
    mlm_wtype emb, head;                    /* embedding, LM head */
    int has_vision;                         /* Llama 3.2 Vision: the vision tower's types */
    mlm_wtype vision;                       /* its matrices (the tile table takes emb's) */
    int32_t n_layer;
    mlm_wtype (*layer)[MLM_ROLE_LAYER_COUNT]; /* owned (n_layer) */
    char overrides[64];                     /* where overrides came from, "" if none */
} mlm_profile;

/* The K chunks of wo and of w2 for a rank whose shard of the config is LOCAL (the whole
 * config alone): one per KV head, which every legal TP divides; w2 in one chunk where n_ff
 * does not cut per KV head (mlm_mesh_check_tp refuses a mesh for such a model). */
static inline int32_t mlm_wo_chunks(const mlm_config *local) { return local->n_kv_head; }
static inline int32_t mlm_w2_chunks(const mlm_config *local) {
    return local->n_ff % local->n_kv_head ? 1 : local->n_kv_head;
}

/* The profiles' names, NULL-terminated. */
extern const char *const mlm_profile_names[];

/* Resolves profile NAME for the model with config C, applying DECODER_CONFIG (a JSON file,
 * or NULL for the built-in per-model overrides). INVALID_ARG for an unknown name, FORMAT for
 * a malformed decoder config (naming the file and the field). */
mlm_status mlm_profile_init(mlm_profile *p, const char *name, const mlm_config *c,
                            const char *decoder_config, mlm_error *err);
void mlm_profile_deinit(mlm_profile *p);

/* Applies the "decoders" overrides of a parsed decoder config J (WHAT names it in messages). */
mlm_status mlm_profile_apply_overrides(mlm_profile *p, const char *what, const json_t *j,
                                       mlm_error *err);

/* Whether any matrix is stored in a BFP type (the weights then need converting). */
int mlm_profile_has_bfp(const mlm_profile *p);

/* Bytes of the weights of a model with config C in profile P: every matrix in its type, the
 * norms, and the embedding whole (RESIDENT) or one row of it (what a token reads). A tied LM
 * head in the embedding's type is the embedding itself and counts once. */
int64_t mlm_profile_weight_bytes(const mlm_profile *p, const mlm_config *c, int resident);
/* Bytes of Llama 3.2 Vision's vision tower and projector in profile P (0 for other models). */
int64_t mlm_profile_vision_bytes(const mlm_profile *p, const mlm_config *c);
/* The KV cache's type (layer 0's: KV_CACHE overrides apply per layer). */
mlm_wtype mlm_profile_kv_type(const mlm_profile *p);
/* The same as the public dtype (f32, bf16 or bfp8) an executor's kv_dtype names. */
mlm_dtype mlm_profile_kv_dtype(const mlm_profile *p);

/* A compact description of the types, e.g. "emb bf16, head bfp8, layers 0-30: wq bfp8 ...;
 * layer 31: ...", written to BUF (always terminated). Equal descriptions mean equal
 * profiles, so it also keys the weight cache. */
void mlm_profile_describe(const mlm_profile *p, char *buf, size_t size);

#endif
