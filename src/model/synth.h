/* model/synth.h: the internals of mlm_synth (meshlm.h) that its tests use: the plan (every
 * file and tensor a preset produces, without writing anything) and the value generator.
 *
 * Values are a pure function of (seed, canonical tensor, element): the canonical tensor is
 * the unsharded HF-layout tensor, named by its HF name. A Meta file's tensor maps each of
 * its elements back to the canonical one (q/k rows from Meta's interleaved order to HF's
 * half-split order, model-parallel shards to their row/column block), so the HF and Meta
 * outputs of one seed hold the same model, and the bf16 output is the f32 one rounded. */
#ifndef MESHLM_MODEL_SYNTH_H
#define MESHLM_MODEL_SYNTH_H

#include "meshlm.h"

#define MLM_SYNTH_MAX_FILES 16 /* weight files of the Meta format (the 70B preset has 8) */

typedef struct mlm_synth_tensor {
    char name[80];            /* name in its file */
    char key[80];             /* the canonical tensor (HF name) whose values it holds */
    int n_dim;                /* 1 or 2 */
    int64_t shape[2];         /* this tensor's shape (shape[1] unused for vectors) */
    int64_t full_cols;        /* columns of the canonical tensor (length for vectors) */
    int64_t row_off, col_off; /* this tensor's block in the canonical tensor (Meta shards) */
    int32_t qk_head_dim;      /* > 0: rows in Meta's interleaved q/k order, head_dim this */
    float std;                /* 0: every value is 1.0 (RMSNorm weights) */
    int file;                 /* index into the plan's files */
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
    const char *params_json;
    char *config_owned; /* owned: the preset's texts saying n_layer layers (NULL: all kept) */
    char *params_owned;
    int n_files;                         /* HF: 1 (a set the writer may shard); Meta: shards */
    char files[MLM_SYNTH_MAX_FILES][32]; /* Meta: "consolidated.00.pth", ...; HF: "model" */
    mlm_synth_tensor *tensors;           /* owned, file by file, in file order */
    int64_t n_tensors;
} mlm_synth_plan;

/* Plans P's output (preset, format, dtype, seed are read; nothing is written). Accepts the
 * hidden test presets "tiny-test" (2 layers, untied), "tiny-test-mp2" (tied, 2 Meta
 * shards) and "tiny-phi3" (Phi3ForCausalLM, fused qkv_proj / gate_up_proj, HF only).
 * INVALID_ARG for an unknown preset, format or dtype, and for the Meta format of a Phi-3
 * preset (Phi-4 has no Meta-format checkpoint). */
mlm_status mlm_synth_plan_make(const mlm_synth_params *p, mlm_synth_plan *plan, mlm_error *err);
/* The same with only the first N_LAYER layers (0: all): every shape is the preset's, and
 * config.json / params.json say N_LAYER ("num_hidden_layers", "n_layers"); Meta presets keep
 * their shard count. INVALID_ARG, naming the preset's count, outside [0, that count]. */
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
 * with mean 0 and standard deviation T->std (the sum of four 16-bit uniforms of one
 * SplitMix64 output, so within +-3.46 std), or exactly 1 when T->std is 0. */
void mlm_synth_fill(const mlm_synth_tensor *t, uint64_t seed, mlm_dtype dtype, int64_t first,
                    int64_t n, void *dst);

#endif
