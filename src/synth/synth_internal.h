/* synth/synth_internal.h: what the three files of mlm_synth share, and nothing the tests use
 * (those internals are in synth.h): the preset table's row type and accessor
 * (synth_presets.c), the tensor list and value helpers of the generic plan and writer
 * (synth.c), and the Llama 3.2 Vision (mllama) plan, --layers logic and tile-table values
 * (synth_mllama.c). Presets are static and immutable; every text they point to is a static
 * string. */
#ifndef MESHLM_MODEL_SYNTH_INTERNAL_H
#define MESHLM_MODEL_SYNTH_INTERNAL_H

#include "synth/synth.h"

/* One preset: its real configuration texts (static) and how the Meta format shards it. */
typedef struct mlm_synth_preset {
    const char *name;
    int hidden; /* test-only: not listed by mlm_synth_presets */
    mlm_family family;
    int n_mp; /* Meta model-parallel shards (consolidated.NN.pth files); 0: no Meta form */
    const char *config_json, *generation_json, *params_json;
    const char *preprocessor_json; /* mllama: preprocessor_config.json */
    const char *meta_file;         /* the one Meta file's name when not consolidated.00.pth */
} mlm_synth_preset;

// ---- synth_presets.c ----

/* synth_presets_qwen.c: the Qwen3 and Qwen2.5 rows (hidden test ones included). */
extern const mlm_synth_preset mlm_synth_qwen_presets[];
extern const size_t mlm_synth_n_qwen_presets;

/* The preset named NAME (hidden ones included), a static row; NULL for NULL or an unknown
 * name. */
const mlm_synth_preset *mlm_synth_preset_find(const char *name);

// ---- synth.c ----

/* Appends a zeroed tensor to PL's list (grown by doubling; *CAP its capacity, 0 for an
 * empty list) in *OUT, a pointer into PL->tensors valid until the next append. NOMEM. */
mlm_status mlm_synth_push_tensor(mlm_synth_plan *pl, int64_t *cap, mlm_synth_tensor **out,
                                 mlm_error *err);

/* *OUT: a malloc'd copy (caller frees) of the preset's JSON text TEXT whose integer after KEY
 * ("\"num_hidden_layers\": ") is N. INTERNAL when TEXT has no such integer, NOMEM. */
mlm_status mlm_synth_with_layers(const mlm_synth_preset *pr, const char *text, const char *key,
                                 int32_t n, char **out, mlm_error *err);

/* PL->cfg read from TEXT, a config.json text of preset PR (the preset's own, or one
 * rewritten for fewer layers). The codes of mlm_json_parse and mlm_config_from_json. */
mlm_status mlm_synth_read_config(mlm_synth_plan *pl, const mlm_synth_preset *pr,
                                 const char *text, mlm_error *err);

/* Writes N consecutive elements of the SplitMix64 stream BASE from element K0, each times
 * SCALE plus MEAN, to DST as DTYPE (bf16 or f32). */
void mlm_synth_gen_run(uint64_t base, uint64_t k0, int64_t n, float scale, float mean,
                       mlm_dtype dtype, void *dst);

// ---- synth_mllama.c ----

/* mllama: keeps the first N_LAYER decoder layers of PL, 0 < N_LAYER < the preset's count
 * (the caller, mlm_synth_plan_make_layers, checks the range), rewriting PL's config /
 * params texts into config_owned / params_owned and re-reading PL->cfg. INVALID_ARG for a
 * count the Meta format cannot hold; INTERNAL when the preset's texts lack a key; NOMEM. */
mlm_status mlm_synth_keep_layers_mllama(mlm_synth_plan *pl, const mlm_synth_preset *pr,
                                        int32_t n_layer, mlm_error *err);

/* Appends MllamaForConditionalGeneration's tensors in PL->format's order to PL's (empty)
 * list. INTERNAL for a vision config out of range; NOMEM. */
mlm_status mlm_synth_plan_mllama(mlm_synth_plan *pl, mlm_error *err);

/* A tile table T's elements [FIRST, FIRST + N) into OUT as DTYPE: per tile, a run of the
 * Meta table's stream BASE (times SCALE plus T->mean) or zeros (see mlm_synth_tensor). */
void mlm_synth_fill_tiles(const mlm_synth_tensor *t, uint64_t base, float scale, mlm_dtype dtype,
                          int64_t first, int64_t n, char *out);

#endif
