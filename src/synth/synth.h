/* synth/synth.h: the internals of mlm_synth (meshlm.h) that its tests use: the plan (every
 * file and tensor a preset produces, without writing anything) and the value generator.
 *
 * Values are a pure function of (seed, canonical tensor, element): the canonical tensor is
 * the unsharded HF-layout tensor, named by its HF name. A Meta file's tensor maps each of
 * its elements back to the canonical one (q/k rows from Meta's interleaved order to HF's
 * half-split order, model-parallel shards to their row/column block, mllama's
 * tok_embeddings / learnable_embedding to the rows of HF's embed_tokens), so the HF and Meta
 * outputs of one seed hold the same model, and the bf16 output is the f32 one rounded. One
 * exception: mllama's three tile-position tables are canonical in Meta's [T, T, P, D]
 * layout (named by their Meta names), and HF's per-aspect-ratio tables map each element to
 * one Meta element or to 0, as transformers' converter precomputes them (models.md 6.7). */
#ifndef MESHLM_MODEL_SYNTH_H
#define MESHLM_MODEL_SYNTH_H

#include "meshlm.h"

#define MLM_SYNTH_MAX_FILES 16 /* weight files of the Meta format (the 70B preset has 8) */
#define MLM_SYNTH_MAX_DIMS 4   /* mllama: HF patch_embedding, Meta's tile tables */
#define MLM_SYNTH_MAX_ASPECT 16

/* A tensor's elements are read as a matrix [shape[0], product of the other dims]; element
 * (r, c) holds canonical element (row_off + r, col_off + c) of a canonical tensor of
 * full_cols columns (q/k rows permuted first), except for a tile table (tile_block > 0). */
typedef struct mlm_synth_tensor {
    char name[96];                     /* name in its file */
    char key[96];                      /* the canonical tensor whose values it holds */
    int n_dim;                         /* 1 to MLM_SYNTH_MAX_DIMS */
    int64_t shape[MLM_SYNTH_MAX_DIMS]; /* this tensor's shape (unused dims 0) */
    int64_t full_cols;                 /* columns of the canonical tensor (1-D: length) */
    int64_t row_off, col_off;          /* its block in the canonical tensor */
    int32_t qk_head_dim;               /* > 0: rows in Meta's interleaved q/k order */
    float std;                         /* 0: every value is 1.0 (norm weights) */
    float mean;                        /* added to every value when std > 0 (gates) */
    /* tile_block > 0: an HF per-aspect-ratio table [n_aspect + 1, tile_max * tile_block]
     * built from KEY, a Meta table [tile_max, tile_max, P, D] (tile_block = P * D): row a,
     * tile t of aspect ratio (rows, cols) = tile_aspect[a - 1] holds Meta block
     * [t / cols, t % cols] for t < rows * cols; row 0 and the other tiles are 0. */
    int64_t tile_block;
    int32_t tile_max;
    int32_t tile_n_aspect;
    int32_t tile_aspect[MLM_SYNTH_MAX_ASPECT][2];
    int file; /* index into the plan's files */
} mlm_synth_tensor;

typedef struct mlm_synth_plan {
    const char *preset; /* static name */
    mlm_config cfg;     /* read from the preset's config.json text */
    int format;         /* MLM_SYNTH_HF or MLM_SYNTH_META */
    mlm_dtype dtype;
    uint64_t seed;
    const char *config_json; /* static texts, or config_owned / params_owned when the plan
                                keeps fewer layers; NULL where the format has none */
    const char *generation_json;
    const char *preprocessor_json; /* mllama's preprocessor_config.json (HF), else NULL */
    const char *params_json;
    char *config_owned; /* owned: the preset's texts saying n_layer layers (NULL: all kept) */
    char *params_owned;
    int n_files;                         /* HF: 1 (a set the writer may shard); Meta: shards */
    char files[MLM_SYNTH_MAX_FILES][32]; /* Meta: "consolidated.00.pth", ... (one-file mllama:
                                            "consolidated.pth"); HF: "model" */
    mlm_synth_tensor *tensors;           /* owned, file by file, in file order */
    int64_t n_tensors;
} mlm_synth_plan;

/* Plans P's output (preset, format, dtype, seed are read; nothing is written). Accepts the
 * hidden test presets "tiny-test" (2 layers, untied), "tiny-test-mp2" (tied, 2 Meta
 * shards), "tiny-phi3" (Phi3ForCausalLM, fused qkv_proj / gate_up_proj, HF only) and
 * "tiny-mllama" (MllamaForConditionalGeneration at toy size: 6 decoder layers, cross-attention
 * at [1, 4], a 6 + 2 layer vision tower of 56-pixel tiles).
 * INVALID_ARG for an unknown preset, format or dtype, and for the Meta format of a Phi-3
 * preset (Phi-4 has no Meta-format checkpoint). */
mlm_status mlm_synth_plan_make(const mlm_synth_params *p, mlm_synth_plan *plan, mlm_error *err);
/* The same with only the first N_LAYER layers (0: all): every shape is the preset's, and
 * config.json / params.json say N_LAYER ("num_hidden_layers", "n_layers"); Meta presets keep
 * their shard count. INVALID_ARG, naming the preset's count, outside [0, that count].
 * mllama: the first N_LAYER decoder layers in HF numbering, cross-attention layers among them
 * kept (config.json's cross_attention_layers filtered), the vision tower whole; params.json
 * says the self- and cross-attention layers kept (n_layers, vision_num_cross_attention_layers).
 * Meta places cross-attention layers by a schedule computed from those two counts
 * (models.md 6.2), so the Meta format takes only an N_LAYER whose kept HF cross-attention
 * layers are where that schedule puts them (11B: multiples of 5); INVALID_ARG for another,
 * naming the counts that work. */
mlm_status mlm_synth_plan_make_layers(const mlm_synth_params *p, int32_t n_layer,
                                      mlm_synth_plan *plan, mlm_error *err);
void mlm_synth_plan_free(mlm_synth_plan *plan);

/* mlm_synth and mlm_synth_total_bytes (meshlm.h) with only the first N_LAYER layers, as
 * mlm_synth_plan_make_layers plans them (0: all, the public functions' behaviour). What
 * `meshlm synth --layers` needs; the public mlm_synth_params has no field for it yet. */
mlm_status mlm_synth_layers(const mlm_synth_params *p, int32_t n_layer, mlm_error *err);
mlm_status mlm_synth_total_bytes_layers(const mlm_synth_params *p, int32_t n_layer, int64_t *total,
                                        mlm_error *err);

/* Writes N values of T, elements [FIRST, FIRST + N) in T's row-major order, to DST as
 * DTYPE (bf16: round-to-nearest-even of the f32 value). Values are approximately normal
 * with mean T->mean and standard deviation T->std (the sum of four 16-bit uniforms of one
 * SplitMix64 output, so within +-3.46 std of the mean), or exactly 1 when T->std is 0; the
 * zeros of a tile table are 0. */
void mlm_synth_fill(const mlm_synth_tensor *t, uint64_t seed, mlm_dtype dtype, int64_t first,
                    int64_t n, void *dst);

#endif
