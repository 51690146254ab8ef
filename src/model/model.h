/* model/model.h: the model's internals. Two groups of files use them: getting weights in
 * (model.c the lifecycle, load.c, bind.c and bind_mllama.c, convert.c, cache.c) and computing
 * with them (ops.c, forward.c, vision.c, rope.c). The model owns its checkpoint (the mapping
 * that zero-copy weights point into), its converted weight buffers and its tables. */
#ifndef MESHLM_MODEL_MODEL_H
#define MESHLM_MODEL_MODEL_H

#include "backend/backend.h"
#include "core/mapfile.h"
#include "core/pool.h"
#include "meshlm.h"
#include "config/profile.h"
#include "tensor/weight.h"

/* Row R of the f32 or bf16 weight W: a pointer into W, or for a chunked W the row gathered
 * into TMP (W->cols elements). convert.c. */
const void *mlm_weight_row(const mlm_weight *w, int64_t r, void *tmp);

/* A decoder layer: self-attention (RoPE, paged KV) or, for Llama 3.2 Vision's
 * cross-attention layers (cross != 0), attention of the text over the vision states: wq/wo
 * as usual, wk/wv reading the projected vision states (no RoPE), RMSNorms over head_dim of
 * q and k, and tanh gates on the attention and MLP outputs (models.md 6.5). */
typedef struct mlm_layer {
    const float *attn_norm; /* (n_embd) */
    const float *ffn_norm;  /* (n_embd) */
    mlm_weight wq;          /* (n_head * head_dim, n_embd), HF half-split row order */
    mlm_weight wk;          /* (n_kv_head * head_dim, n_embd), HF half-split row order */
    mlm_weight wv;          /* (n_kv_head * head_dim, n_embd) */
    mlm_weight wo;          /* (n_embd, n_head * head_dim) in n_kv_head K chunks */
    mlm_weight w1;          /* gate (n_ff, n_embd) */
    mlm_weight w3;          /* up (n_ff, n_embd) */
    mlm_weight w2;          /* down (n_embd, n_ff) in n_kv_head K chunks */
    int cross;              /* a cross-attention layer */
    int32_t kv_layer;       /* its pool: in the self-attention KV, or (cross) the image KV */
    const float *q_norm;    /* cross, or the config's qk_norm: (head_dim), per head */
    const float *k_norm;    /* cross, or the config's qk_norm: (head_dim), per head */
    const float *bq, *bk, *bv; /* the config's qkv_bias: this rank's rows of q, k, v; else NULL */
    const float *gates;     /* cross: (2) raw gate_attn, gate_ffn (tanh at use) */
} mlm_layer;

/* One layer of the vision encoder (models.md 6.4). D = vision n_embd, F = its n_ff; matrices in
 * the profile's vision type, vectors f32. */
typedef struct mlm_vision_layer {
    const float *ln1_w, *ln1_b; /* (D) input_layernorm (LayerNorm with bias) */
    const float *ln2_w, *ln2_b; /* (D) post_attention_layernorm */
    mlm_weight wq, wk, wv, wo;  /* (D, D), no bias */
    mlm_weight fc1;             /* (F, D) */
    const float *fc1_b;         /* (F) */
    mlm_weight fc2;             /* (D, F) */
    const float *fc2_b;         /* (D) */
    const float *gates;         /* global layers: (2) raw gate_attn, gate_ffn; local: NULL */
} mlm_vision_layer;

/* Llama 3.2 Vision's vision tower and projector. A = n_aspect, NT = max_tiles, T = n_tok,
 * O = output_dim, E = the text n_embd. The tile tables are HF's precomputed per-aspect-ratio
 * layout (row 0 and tiles past rows x cols zero), built from Meta's [NT, NT, ...] tables when
 * the checkpoint is Meta's. */
typedef struct mlm_vision_tower {
    int32_t n_grid;         /* patches per tile side */
    int32_t n_tok;          /* T: n_grid^2 patches + CLS */
    int32_t n_tok_pad;      /* T rounded up to 8 (the encoder's rows per tile) */
    mlm_weight patch;       /* (D, C * p * p) the patch embedding, (channel, row, column) order */
    const float *class_emb; /* (D) */
    const float *pos_emb;   /* (T, D) */
    mlm_weight tile_pos;    /* ((A + 1) * NT * T, D) gated tile positional embedding, in the
                               embedding's type */
    const float *pre_tile;  /* ((A + 1) * NT, D) */
    const float *post_tile; /* ((A + 1) * NT, D) */
    const float *gates;     /* (3) raw gates: positional, pre-tile, post-tile */
    const float *ln_pre_w, *ln_pre_b, *ln_post_w, *ln_post_b; /* (D) */
    mlm_vision_layer *layers; /* owned: n_layer local layers, then n_global_layer gated ones */
    mlm_weight proj;          /* (E, O) multi_modal_projector */
    const float *proj_b;      /* (E) */
} mlm_vision_tower;

struct mlm_model {
    mlm_config cfg;
    /* Tensor parallelism: this rank's shard. LOCAL is CFG with n_head, n_kv_head and n_ff
     * divided by tp_size (what the forward pass and the KV cache see); the embedding and the
     * LM head hold vocabulary rows [vocab0, vocab0 + n_vocab_local). Alone: tp_size 1, LOCAL
     * equal to CFG, the whole vocabulary. */
    mlm_comm *tp; /* borrowed from the load params, NULL alone */
    int tp_rank, tp_size;
    mlm_tp_reduce tp_reduce; /* from the load params */
    mlm_config local;
    int32_t vocab0, n_vocab_local;
    mlm_profile profile;  /* owned: each weight's type */
    mlm_checkpoint *ckpt; /* owned; NULL when the weights come from a cache */
    mlm_mapfile cache;    /* owned mapping of the weight cache (.data NULL if none) */
    char cache_path[1024];
    char gguf_path[1024]; /* the GGUF file the model comes from, "" for other formats */
    int cache_built;
    mlm_layer *layers;    /* owned, n_layer */
    int32_t n_self;       /* layers with a self-attention KV pool (n_layer less the cross ones) */
    int32_t n_emb_extra;  /* embedding rows past n_vocab: Llama 3.2 Vision's 8 learnable rows,
                             the image token's (input only; the LM head has n_vocab) */
    mlm_vision_tower vision; /* Llama 3.2 Vision (cfg.family MLLAMA), else zeroed */
    mlm_weight tok_emb;      /* (n_vocab + n_emb_extra, n_embd) */
    mlm_weight output;    /* (n_vocab, n_embd); the embedding when tied */
    const float *norm;    /* (n_embd) */
    float *inv_freq;      /* owned (head_dim / 2): RoPE frequencies after scaling */
    void **owned;         /* owned buffers (converted weights, norms) */
    int n_owned, cap_owned;
    int64_t bytes_owned, bytes_mapped;
    const mlm_kernels *kernels;
    mlm_pool *load_pool; /* owned while loading (conversions, checksums), else NULL */
};

// ---- model.c: the lifecycle and the lists ----

/* Registers a malloc'd buffer for the model to free. */
mlm_status mlm_model_own(mlm_model *m, void *p, size_t bytes, mlm_error *err);

/* C as one rank of TP sees it: n_head, n_kv_head and n_ff divided by TP (which must divide
 * them: mlm_mesh_check_tp); everything else, n_vocab included, as in C. */
mlm_config mlm_config_shard(const mlm_config *c, int tp);

/* Vocabulary rows [*V0, *V0 + *N) of rank R of TP (slices of whole BFP panels, the last
 * one shorter; empty past the end). */
void mlm_model_vocab_slice(int32_t n_vocab, int r, int tp, int32_t *v0, int32_t *n);

/* The profile PARAMS name: optimizations, else the one dtype implies (f32 or bf16). */
const char *mlm_model_params_profile(const mlm_model_params *params);

/* Every weight matrix with its name and the type the profile wants for it (which the bound
 * weight may not have yet): "emb", "head", then per layer "L.wq", ..., "L.w3", then the
 * vision tower's ("v.patch", "v.tile_pos", per vision layer "vL.wq" ... "vL.fc2", "v.proj").
 * Fills mlm_model_n_weights(M) entries and returns the count. The LM head of a tied model is
 * listed separately from the embedding. */
typedef struct mlm_weight_ref {
    char name[24];
    mlm_weight *w;
    mlm_wtype want;
} mlm_weight_ref;
int mlm_model_weights(mlm_model *m, mlm_weight_ref *out);
int mlm_model_n_weights(const mlm_model *m);

/* Every f32 vector (norms, biases, gates, small embeddings) with its length: "norm", then per
 * layer "L.attn_norm", "L.ffn_norm" (and for cross layers "L.q_norm", "L.k_norm",
 * "L.gates"), then the vision tower's. Fills mlm_model_n_norms(M) entries. */
typedef struct mlm_norm_ref {
    char name[24];
    const float **v;
    int64_t len;
} mlm_norm_ref;
int mlm_model_norms(mlm_model *m, mlm_norm_ref *out);
int mlm_model_n_norms(const mlm_model *m);

/* The shapes of every weight of M's config (cache.c maps a cache file into them), the vision
 * tower's layers allocated. */
mlm_status mlm_model_alloc_vision(mlm_model *m, mlm_error *err);
void mlm_model_vision_shapes(mlm_model *m);

// ---- bind.c ----

/* The native profile's types for the GGUF model in DIR (config CFG, LOCAL a rank's shard of
 * it), set in P: each matrix the type its file stores it in. */
mlm_status mlm_profile_resolve_native(mlm_profile *p, const mlm_config *cfg,
                                      const mlm_config *local, const char *dir, mlm_error *err);
/* The same from the GGUF checkpoint CK already open (a model's load); DIR for messages. */
mlm_status mlm_profile_resolve_native_ckpt(mlm_profile *p, const mlm_config *cfg,
                                           const mlm_config *local, const mlm_checkpoint *ck,
                                           const char *dir, mlm_error *err);

// ---- convert.c ----

/* Converts rows [R0, R1) of SRC (f32 or bf16) to type TO into DST (which holds those rows
 * only, in TO's layout, mlm_wtype_bytes(TO, R1 - R0, cols) bytes), on POOL's threads (NULL:
 * the caller's alone). For BFP types R0 must be a multiple of 16 (a panel). */
mlm_status mlm_weight_convert_rows(const mlm_weight *src, mlm_wtype to, int64_t r0, int64_t r1,
                                   void *dst, mlm_pool *pool, mlm_error *err);

/* Converts the whole weight SRC (f32 or bf16) to type TO into DST (mlm_chunked_bytes of TO,
 * the same chunks), on POOL's threads: a chunked one block by block and chunk by chunk. */
mlm_status mlm_weight_convert(const mlm_weight *src, mlm_wtype to, void *dst, mlm_pool *pool,
                              mlm_error *err);

/* Converts every weight whose bound type differs from the profile's into owned buffers
 * (the in-memory path, without a cache). */
mlm_status mlm_model_convert(mlm_model *m, const mlm_model_params *p, mlm_error *err);

// ---- cache.c ----

/* Loads the weights from the cache file PATH if it is valid for KEY; otherwise returns
 * FORMAT with the reason in ERR (the caller rebuilds). */
mlm_status mlm_cache_map(mlm_model *m, const char *path, const char *key, mlm_error *err);
/* Writes the model's weights, converted to the profile's types, as the cache file PATH for
 * KEY (temp file, fsync, rename). */
mlm_status mlm_cache_write(mlm_model *m, const char *path, const char *key,
                           const mlm_model_params *p, mlm_error *err);
/* Checks a cache file's framing (size against the header, trailer checksum over header and
 * index, index bounds) and returns its key text and tensor count (for fuzzing and listing). */
mlm_status mlm_cache_read_frame(const mlm_mapfile *f, const char **key, size_t *key_len,
                                uint64_t *n_tensors, mlm_error *err);
/* The cache file for the model in DIR with the resolved profile PROF (mlm_cache_path without
 * reading the config again). */
mlm_status mlm_cache_path_for(const char *dir, const mlm_profile *prof,
                              const mlm_model_params *params, char *path, size_t size,
                              mlm_error *err);
/* The cache key of the model in DIR with profile P: source file names, sizes and mtimes,
 * the profile's types, the mesh and the format version. */
mlm_status mlm_cache_key(const char *dir, const mlm_profile *p, int tp_rank, int tp_size, char *key,
                         size_t size, mlm_error *err);

// ---- rope.c ----

/* Fills model->inv_freq from the config (plain RoPE or llama3 scaling), float32 as the
 * references compute it. */
mlm_status mlm_rope_init(mlm_model *m, mlm_error *err);

/* Rotates the first N_HEAD * head_dim values of each of the N rows of X (stride STRIDE) in
 * place by the angles of positions POS (HF half-split pairs (i, i + head_dim/2)). */
void mlm_rope_apply(const mlm_model *m, float *x, int64_t stride, int n, const int32_t *pos,
                    int n_head);

#endif
