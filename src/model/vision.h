/* model/vision.h: the Llama 3.2 Vision (mllama) vision encoder and multi-modal projector,
 * scalar f32 reference (models.md 6.4). One image at a time: its max_tiles tile slots go
 * through the patch embedding, the gated tile / positional embeddings, the local and the gated
 * global transformer, and the projector into the text width. Weights are f32 copies owned by
 * the mlm_vision struct (the checkpoint is closed after loading); the forward allocates its
 * own scratch and is thread-safe on one loaded struct. No threads, no SIMD: this is the
 * reference the fast paths are checked against. Internal to the library. */
#ifndef MESHLM_MODEL_VISION_H
#define MESHLM_MODEL_VISION_H

#include <stdint.h>

#include "meshlm.h"

/* One encoder layer (HF vision_model.{transformer,global_transformer}.layers.N). All pointers
 * are borrowed from mlm_vision.data. D = n_embd, F = n_ff. */
typedef struct mlm_vision_layer {
    const float *ln1_w, *ln1_b;     /* (D) input_layernorm */
    const float *wq, *wk, *wv, *wo; /* (D, D) self_attn.{q,k,v,o}_proj, no bias */
    const float *ln2_w, *ln2_b;     /* (D) post_attention_layernorm */
    const float *fc1_w, *fc1_b;     /* (F, D), (F) mlp.fc1 */
    const float *fc2_w, *fc2_b;     /* (D, F), (D) mlp.fc2 */
    float gate_attn, gate_ffn;      /* raw gates (tanh applied at use); global layers only */
} mlm_vision_layer;

/* The loaded vision tower. A = n_aspect, NT = max_tiles, T = n_tok, C = n_channels,
 * p = patch_size, O = output_dim, E = n_text_embd. */
typedef struct mlm_vision {
    mlm_vision_config cfg; /* copied from the mlm_config */
    int32_t n_text_embd;   /* E: the projector's output width (text hidden size) */
    int32_t n_grid;        /* patches per tile side: image_size / patch_size */
    int32_t n_tok;         /* T: tokens per tile, n_grid^2 patches + CLS (1601) */
    int32_t n_tok_pad;     /* tokens per tile inside the encoder, T rounded up to 8 (1608) */

    const float *patch_w;   /* (D, C, p, p) patch_embedding.weight (conv, no bias) */
    const float *class_emb; /* (D) class_embedding */
    const float *pos_emb;   /* (T, D) gated_positional_embedding.embedding */
    const float *tile_pos;  /* (A + 1, NT, T, D) gated_positional_embedding.tile_embedding */
    float pos_gate;         /* gated_positional_embedding.gate (raw) */
    const float *pre_tile;  /* (A + 1, NT, D) pre_tile_positional_embedding.embedding */
    float pre_tile_gate;
    const float *post_tile; /* (A + 1, NT, D) post_tile_positional_embedding.embedding */
    float post_tile_gate;
    const float *ln_pre_w, *ln_pre_b;   /* (D) layernorm_pre */
    const float *ln_post_w, *ln_post_b; /* (D) layernorm_post */
    mlm_vision_layer *local;            /* owned: (n_layer) transformer.layers */
    mlm_vision_layer *global;           /* borrowed from local's allocation: (n_global_layer) */
    const float *proj_w;                /* (E, O) multi_modal_projector.weight */
    const float *proj_b;                /* (E) multi_modal_projector.bias */

    float *data;    /* owned (malloc): every weight above, back to back */
    int64_t n_data; /* floats in data */
} mlm_vision;

/* Reads the vision tower and projector of the mllama checkpoint in DIR (HF safetensors names,
 * models.md 6.7) into *OUT as f32, checking every shape against CFG (family MLLAMA; its
 * vision config and text n_embd). On failure *OUT is left zeroed (mlm_vision_deinit is a
 * no-op on it). Statuses: INVALID_ARG (not an mllama config), IO / FORMAT from the
 * checkpoint, FORMAT for a missing tensor or a shape that disagrees with the config (the
 * message names the tensor and both shapes), NOMEM. */
mlm_status mlm_vision_load(const char *dir, const mlm_config *cfg, mlm_vision *out, mlm_error *err);
/* Frees what V owns and zeroes it; a zeroed struct is a no-op. */
void mlm_vision_deinit(mlm_vision *v);

/* One image through the encoder and the projector (models.md 6.4).
 *   pixels        (NT, C, S, S) normalized f32 pixels, S = image_size; every one of the NT =
 *                 max_tiles slots is read (the processor leaves slots >= n_tiles all zero)
 *   aspect_ratio_id  0..n_aspect: HF's id, 1 + index into supported_aspect_ratios (selects the
 *                 tile embeddings; 0 = none)
 *   n_tiles       1..NT: tiles t < n_tiles are valid (HF aspect_ratio_mask); the others and
 *                 the pad rows are invalid, and a pair of tokens is masked only when both are
 *   out           (NT, T, O): the encoder output before the projector, features
 *                 [0, D) the global encoder, D + d*K + k intermediate k of feature d
 *   projected     (NT, T, E): out @ proj_w^T + proj_b, or NULL to skip the projector
 * All NT slots are computed (valid tokens attend to the padding tiles). The caller owns the
 * buffers. Statuses: INVALID_ARG (NULL pointers, ids or tile counts out of range), NOMEM
 * (scratch). Thread-safe: V is only read. */
mlm_status mlm_vision_forward(const mlm_vision *v, const float *pixels, int32_t aspect_ratio_id,
                              int32_t n_tiles, float *out, float *projected, mlm_error *err);

#endif
