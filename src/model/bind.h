/* model/bind.h: the checkpoint binder (bind.c) that load.c runs and bind_mllama.c extends: it finds a
 * checkpoint's tensors by name (HF, Meta with its model-parallel shards, GGUF), checks their
 * shapes and binds them as weights in the compute layout (zero-copy views where the dtype and
 * layout already fit, else buffers the model owns). Internal to src/model/. */
#ifndef MESHLM_MODEL_BIND_H
#define MESHLM_MODEL_BIND_H

#include "model/model.h"

typedef struct mlm_binder {
    mlm_model *m;
    int meta;
    int phi3;           /* fused Phi-3 projections */
    int gguf;           /* GGUF names; for llama q/k rows in Meta's interleaved order */
    int mllama;         /* Llama 3.2 Vision names (language_model.* / text_model.*) */
    int n_shards;       /* Meta model-parallel shards ("shard<N>/" prefixes), else 1 */
    const char *source; /* the config file name, for messages */
    mlm_error *err;
} mlm_binder;

/* The part of a tensor to bind: rows [ROW0, ROW0 + ROWS) of TOTAL_ROWS and columns
 * [COL0, COL0 + COLS) of TOTAL_COLS of the merged tensor (TOTAL_ROWS > ROWS for Phi-3's fused
 * qkv_proj and gate_up_proj, and for a TP shard's rows; TOTAL_COLS > COLS for a TP shard of
 * wo and w2). */
typedef struct mlm_bind_slice {
    int64_t row0, rows, total_rows, col0, cols, total_cols;
    int32_t chunks; /* > 1: bind the COLS columns as that many K chunks (mlm_weight) */
} mlm_bind_slice;

/* Tensor NAME of shard SHARD (the only one when there are no shards), or NULL. */
const mlm_tensor_view *mlm_bind_find(const mlm_binder *b, const char *name, int shard);

/* Binds slice S of tensor NAME as OUT, in type WANT when WANT is f32 or bf16, else (a BFP
 * type, converted later) in the source's exact values (bf16 stays bf16, others f32). A tensor
 * of more than 2 dimensions is read as (its first dimension, the product of the others) when
 * contiguous. Meta shards are concatenated on dim 0, or dim 1 with SPLIT_COLS; PERM_HEADS > 0
 * reorders each head's rows from Meta's interleaved to HF's half-split order. FORMAT names the
 * tensor and both shapes. */
mlm_status mlm_bind_tensor(mlm_binder *b, const char *name, mlm_wtype want, mlm_bind_slice s,
                           int split_cols, int perm_heads, mlm_weight *out);

/* Binds the whole 2-D view V (contiguous rows; a checked or reshaped view of tensor NAME, no
 * shards) as OUT, typed as mlm_bind_tensor does. */
mlm_status mlm_bind_view(mlm_binder *b, const char *name, const mlm_tensor_view *v, mlm_wtype want,
                         mlm_weight *out);

/* Binds tensor NAME (any shape with LEN elements; shard 0) as an f32 vector the model owns. */
mlm_status mlm_bind_vector(mlm_binder *b, const char *name, int64_t len, const float **out);

/* Binds the text decoder: the embedding, every layer's norms, attention and MLP, the final
 * norm and the LM head (or the tied embedding). FORMAT names a missing or misshapen tensor. */
mlm_status mlm_bind_decoder(mlm_binder *b);

/* Llama 3.2 Vision (bind_mllama.c), after mlm_bind_decoder: the learnable embedding rows
 * (Meta keeps them apart), the cross layers' q/k norms and gates, and the vision tower. */
mlm_status mlm_bind_mllama(mlm_binder *b);

#endif
