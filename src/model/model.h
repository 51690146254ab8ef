/* model/model.h: the model's internals, shared by the loader (load.c), the RoPE tables
 * (rope.c) and the forward pass (forward.c). The model owns its checkpoint (the mapping
 * that zero-copy weights point into), its converted weight buffers and its tables. */
#ifndef MESHLM_MODEL_MODEL_H
#define MESHLM_MODEL_MODEL_H

#include "backend/backend.h"
#include "meshlm.h"

/* A weight matrix in compute layout: row-major (rows = out features, cols = in features). */
typedef struct mlm_weight {
    mlm_wtype type;
    int64_t rows, cols;
    const void *data; /* borrowed from the checkpoint mapping or from model->owned */
} mlm_weight;

typedef struct mlm_layer {
    const float *attn_norm; /* (n_embd) */
    const float *ffn_norm;  /* (n_embd) */
    mlm_weight wq;          /* (n_head * head_dim, n_embd), HF half-split row order */
    mlm_weight wk;          /* (n_kv_head * head_dim, n_embd), HF half-split row order */
    mlm_weight wv;          /* (n_kv_head * head_dim, n_embd) */
    mlm_weight wo;          /* (n_embd, n_head * head_dim) */
    mlm_weight w1;          /* gate (n_ff, n_embd) */
    mlm_weight w3;          /* up (n_ff, n_embd) */
    mlm_weight w2;          /* down (n_embd, n_ff) */
} mlm_layer;

struct mlm_model {
    mlm_config cfg;
    mlm_wtype wtype;
    mlm_checkpoint *ckpt; /* owned */
    mlm_layer *layers;    /* owned, n_layer */
    mlm_weight tok_emb;   /* (n_vocab, n_embd) */
    mlm_weight output;    /* (n_vocab, n_embd); the embedding when tied */
    const float *norm;    /* (n_embd) */
    float *inv_freq;      /* owned (head_dim / 2): RoPE frequencies after scaling */
    void **owned;         /* owned buffers (converted weights, norms) */
    int n_owned, cap_owned;
    int64_t bytes_owned, bytes_mapped;
    const mlm_kernels *kernels;
};

/* Fills model->inv_freq from the config (plain RoPE or llama3 scaling), float32 as the
 * references compute it. */
mlm_status mlm_rope_init(mlm_model *m, mlm_error *err);

/* Rotates the first N_HEAD * head_dim values of each of the N rows of X (stride STRIDE) in
 * place by the angles of positions POS (HF half-split pairs (i, i + head_dim/2)). */
void mlm_rope_apply(const mlm_model *m, float *x, int64_t stride, int n, const int32_t *pos,
                    int n_head);

#endif
