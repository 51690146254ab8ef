/* config/config.h: the config reader's internal entry point (the public one is
 * mlm_config_load in meshlm.h). */
#ifndef MESHLM_MODEL_CONFIG_H
#define MESHLM_MODEL_CONFIG_H

#include <jansson.h>

#include "meshlm.h"

/* Fills OUT from a parsed params.json (Meta, has "dim") or config.json (HF) object.
 * WHAT names the source in messages. Does not read generation_config.json. */
mlm_status mlm_config_from_json(const char *what, const json_t *j, mlm_config *out,
                                mlm_error *err);

/* The text decoder's fields of an HF config object J (LlamaForCausalLM's, or an mllama
 * "text_config"), family from its architectures / model_type when it names one, else Llama. */
mlm_status mlm_config_hf_text(const char *what, const json_t *j, mlm_config *c, mlm_error *err);
/* An MllamaForConditionalGeneration config.json (config_mllama.c). */
mlm_status mlm_config_mllama(const char *what, const json_t *j, mlm_config *c, mlm_error *err);
/* The vision keys of a Llama 3.2 Vision params.json (Meta) over C, which holds its text
 * decoder as a Llama config of n_layers self-attention layers: the cross-attention layers
 * (Meta's fusion schedule, in HF numbering), the image token and the vision tower
 * (config_mllama.c). */
mlm_status mlm_config_mllama_meta(const char *what, const json_t *j, mlm_config *c, mlm_error *err);

/* Checks a filled config's shapes (heads divide, head_dim even and within the kernels'
 * limit, eps and theta positive); FORMAT / UNSUPPORTED naming WHAT. */
mlm_status mlm_config_check(const char *what, mlm_config *c, mlm_error *err);

/* Whether PATH is a GGUF model: a file that starts with "GGUF", or a folder without
 * config.json / params.json that holds one (mlm_gguf_find_in_dir). *OUT gets the file. */
int mlm_gguf_model_file(const char *path, char *out, size_t size);
/* Fills OUT from the GGUF file PATH's metadata (config/config_gguf.c). */
mlm_status mlm_config_from_gguf(const char *path, mlm_config *out, mlm_error *err);
struct mlm_gguf;
/* The same from the parsed file G (a GGUF checkpoint's, mlm_ckpt_gguf); PATH for messages. */
mlm_status mlm_config_from_gguf_file(const struct mlm_gguf *g, const char *path, mlm_config *out,
                                     mlm_error *err);
/* The N per-frequency RoPE divisors of G's rope_freqs.weight tensor (MLM_ROPE_FACTORS); PATH
 * for messages. */
mlm_status mlm_gguf_rope_factors(const struct mlm_gguf *g, const char *path, float *out, int n,
                                 mlm_error *err);

#endif
