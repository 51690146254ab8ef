/* synth/synth_presets.c: the presets of `meshlm synth`: each one's embedded real HF texts
 * (config.json, generation_config.json and, for Llama 3.2 Vision, preprocessor_config.json),
 * its Meta params.json text, and the table that names them (mlm_synth_preset_find).
 * Only data and lookups: the plan that reads these texts is in synth.c and synth_mllama.c.
 * Every text and row is static and immutable; callers borrow them for the process's life. */
#include <stddef.h>
#include <string.h>

#include "synth/synth_internal.h"

// ---- texts ----

/* The HF configs are the real files' texts (tests/data/configs/, line endings made LF):
 *   llama-3.2-1b   Llama-3.2-1B config.json + generation_config.json (base model)
 *   llama-3.2-3b   Llama-3.2-3B-Instruct config.json with the base model's eos_token_id
 *                  128001 in place of [128001, 128008, 128009] (no base 3B config was
 *                  available; the two differ only there); generation_config.json: the 1B
 *                  base one (same release, same transformers version)
 *   llama-3.1-8b   Llama-3.1-8B config.json + generation_config.json (base model)
 *   llama-3.1-70b  Llama-3.1-70B-Instruct config.json; generation_config.json as the 3.1
 *                  Instruct release ships it (bos, do_sample, eos list, temperature 0.6,
 *                  top_p 0.9, transformers 4.42.3; seen for 8B-Instruct)
 *   phi-4          microsoft/phi-4 config.json (tests/data/configs/phi-4/config.json, HF's
 *                  2-space layout); generation_config.json from models.md 5.1: bos 100257,
 *                  eos 100265 and pad 100349 as set by the repo's "Suggested tokenizer changes
 *                  by Unsloth.ai (#21)" commit, with 100257 (<|endoftext|>) added to eos since
 *                  5.1 treats both as stop ids (the file's exact text was not available)
 *   llama-3.2-11b-vision  Llama-3.2-11B-Vision-Instruct (MllamaForConditionalGeneration):
 *                  config.json is tests/data/configs/Llama-3.2-90B-Vision-Instruct/config.json
 *                  (same transformers 4.45.0.dev0 dump, Instruct eos list) with the 11B text
 *                  dims of models.md 6.1 (hidden_size 4096, intermediate_size 14336,
 *                  num_attention_heads 32, num_hidden_layers 40, cross_attention_layers
 *                  [3, 8, ..., 38] = T6's range(k - 1, 40, k + 1), k = ceil(32 / 8)); its
 *                  vision_config is the 90B one, identical between the two (T6 hard-codes
 *                  it). 5068 bytes, the size the Hub lists for the real file.
 *                  generation_config.json: T6's Instruct GenerationConfig (do_sample,
 *                  temperature 0.6, top_p 0.9, bos, eos list, pad 128004) as save_pretrained
 *                  writes it, transformers_version 4.45.0.dev0 (215 bytes, as on the Hub);
 *                  preprocessor_config.json: T6's write_image_processor (models.md 6.1) as
 *                  transformers 4.46.3 saves it (437 bytes, as on the Hub); both checked
 *                  against tests/data/mllama_synth.json (make_mllama_synth_fixture.py)
 * params.json: the Meta values of models.md 1.1 in Meta's key order (Llama only: Phi-4 has
 * no Meta-format checkpoint; the vision model's three vision_* keys last, M3's order, with
 * the Instruct model's vision_chunk_size 560). */

// clang-format off
static const char cfg_1b[] =
    "{\n"
    "  \"architectures\": [\n"
    "    \"LlamaForCausalLM\"\n"
    "  ],\n"
    "  \"attention_bias\": false,\n"
    "  \"attention_dropout\": 0.0,\n"
    "  \"bos_token_id\": 128000,\n"
    "  \"eos_token_id\": 128001,\n"
    "  \"head_dim\": 64,\n"
    "  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 2048,\n"
    "  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 8192,\n"
    "  \"max_position_embeddings\": 131072,\n"
    "  \"mlp_bias\": false,\n"
    "  \"model_type\": \"llama\",\n"
    "  \"num_attention_heads\": 32,\n"
    "  \"num_hidden_layers\": 16,\n"
    "  \"num_key_value_heads\": 8,\n"
    "  \"pretraining_tp\": 1,\n"
    "  \"rms_norm_eps\": 1e-05,\n"
    "  \"rope_scaling\": {\n"
    "    \"factor\": 32.0,\n"
    "    \"high_freq_factor\": 4.0,\n"
    "    \"low_freq_factor\": 1.0,\n"
    "    \"original_max_position_embeddings\": 8192,\n"
    "    \"rope_type\": \"llama3\"\n"
    "  },\n"
    "  \"rope_theta\": 500000.0,\n"
    "  \"tie_word_embeddings\": true,\n"
    "  \"torch_dtype\": \"bfloat16\",\n"
    "  \"transformers_version\": \"4.45.0.dev0\",\n"
    "  \"use_cache\": true,\n"
    "  \"vocab_size\": 128256\n"
    "}\n";

static const char gen_1b[] =
    "{\n"
    "  \"_from_model_config\": true,\n"
    "  \"bos_token_id\": 128000,\n"
    "  \"eos_token_id\": 128001,\n"
    "  \"transformers_version\": \"4.45.0.dev0\",\n"
    "  \"do_sample\": true,\n"
    "  \"temperature\": 0.6,\n"
    "  \"top_p\": 0.9\n"
    "}\n";

static const char cfg_3b[] =
    "{\n"
    "  \"architectures\": [\n"
    "    \"LlamaForCausalLM\"\n"
    "  ],\n"
    "  \"attention_bias\": false,\n"
    "  \"attention_dropout\": 0.0,\n"
    "  \"bos_token_id\": 128000,\n"
    "  \"eos_token_id\": 128001,\n"
    "  \"head_dim\": 128,\n"
    "  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 3072,\n"
    "  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 8192,\n"
    "  \"max_position_embeddings\": 131072,\n"
    "  \"mlp_bias\": false,\n"
    "  \"model_type\": \"llama\",\n"
    "  \"num_attention_heads\": 24,\n"
    "  \"num_hidden_layers\": 28,\n"
    "  \"num_key_value_heads\": 8,\n"
    "  \"pretraining_tp\": 1,\n"
    "  \"rms_norm_eps\": 1e-05,\n"
    "  \"rope_scaling\": {\n"
    "    \"factor\": 32.0,\n"
    "    \"high_freq_factor\": 4.0,\n"
    "    \"low_freq_factor\": 1.0,\n"
    "    \"original_max_position_embeddings\": 8192,\n"
    "    \"rope_type\": \"llama3\"\n"
    "  },\n"
    "  \"rope_theta\": 500000.0,\n"
    "  \"tie_word_embeddings\": true,\n"
    "  \"torch_dtype\": \"bfloat16\",\n"
    "  \"transformers_version\": \"4.45.0.dev0\",\n"
    "  \"use_cache\": true,\n"
    "  \"vocab_size\": 128256\n"
    "}\n";

static const char cfg_8b[] =
    "{\n"
    "  \"architectures\": [\n"
    "    \"LlamaForCausalLM\"\n"
    "  ],\n"
    "  \"attention_bias\": false,\n"
    "  \"attention_dropout\": 0.0,\n"
    "  \"bos_token_id\": 128000,\n"
    "  \"eos_token_id\": 128001,\n"
    "  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 4096,\n"
    "  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 14336,\n"
    "  \"max_position_embeddings\": 131072,\n"
    "  \"mlp_bias\": false,\n"
    "  \"model_type\": \"llama\",\n"
    "  \"num_attention_heads\": 32,\n"
    "  \"num_hidden_layers\": 32,\n"
    "  \"num_key_value_heads\": 8,\n"
    "  \"pretraining_tp\": 1,\n"
    "  \"rms_norm_eps\": 1e-05,\n"
    "  \"rope_scaling\": {\n"
    "    \"factor\": 8.0,\n"
    "    \"low_freq_factor\": 1.0,\n"
    "    \"high_freq_factor\": 4.0,\n"
    "    \"original_max_position_embeddings\": 8192,\n"
    "    \"rope_type\": \"llama3\"\n"
    "  },\n"
    "  \"rope_theta\": 500000.0,\n"
    "  \"tie_word_embeddings\": false,\n"
    "  \"torch_dtype\": \"bfloat16\",\n"
    "  \"transformers_version\": \"4.43.0.dev0\",\n"
    "  \"use_cache\": true,\n"
    "  \"vocab_size\": 128256\n"
    "}\n";

static const char gen_8b[] =
    "{\n"
    "  \"do_sample\": true,\n"
    "  \"temperature\": 0.6,\n"
    "  \"top_p\": 0.9,\n"
    "  \"_from_model_config\": true,\n"
    "  \"bos_token_id\": 128000,\n"
    "  \"eos_token_id\": 128001,\n"
    "  \"transformers_version\": \"4.43.0.dev0\"\n"
    "}\n";

static const char cfg_70b[] =
    "{\n"
    "  \"architectures\": [\n"
    "    \"LlamaForCausalLM\"\n"
    "  ],\n"
    "  \"attention_bias\": false,\n"
    "  \"attention_dropout\": 0.0,\n"
    "  \"bos_token_id\": 128000,\n"
    "  \"eos_token_id\": [\n"
    "    128001,\n"
    "    128008,\n"
    "    128009\n"
    "  ],\n"
    "  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 8192,\n"
    "  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 28672,\n"
    "  \"max_position_embeddings\": 131072,\n"
    "  \"mlp_bias\": false,\n"
    "  \"model_type\": \"llama\",\n"
    "  \"num_attention_heads\": 64,\n"
    "  \"num_hidden_layers\": 80,\n"
    "  \"num_key_value_heads\": 8,\n"
    "  \"pretraining_tp\": 1,\n"
    "  \"rms_norm_eps\": 1e-05,\n"
    "  \"rope_scaling\": {\n"
    "    \"factor\": 8.0,\n"
    "    \"low_freq_factor\": 1.0,\n"
    "    \"high_freq_factor\": 4.0,\n"
    "    \"original_max_position_embeddings\": 8192,\n"
    "    \"rope_type\": \"llama3\"\n"
    "  },\n"
    "  \"rope_theta\": 500000.0,\n"
    "  \"tie_word_embeddings\": false,\n"
    "  \"torch_dtype\": \"bfloat16\",\n"
    "  \"transformers_version\": \"4.42.3\",\n"
    "  \"use_cache\": true,\n"
    "  \"vocab_size\": 128256\n"
    "}\n";

static const char gen_70b[] =
    "{\n"
    "  \"bos_token_id\": 128000,\n"
    "  \"do_sample\": true,\n"
    "  \"eos_token_id\": [\n"
    "    128001,\n"
    "    128008,\n"
    "    128009\n"
    "  ],\n"
    "  \"temperature\": 0.6,\n"
    "  \"top_p\": 0.9,\n"
    "  \"transformers_version\": \"4.42.3\"\n"
    "}\n";

static const char cfg_phi4[] =
    "{\n"
    "  \"architectures\": [\n"
    "    \"Phi3ForCausalLM\"\n"
    "  ],\n"
    "  \"attention_bias\": false,\n"
    "  \"attention_dropout\": 0.0,\n"
    "  \"bos_token_id\": 100257,\n"
    "  \"embd_pdrop\": 0.0,\n"
    "  \"eos_token_id\": 100265,\n"
    "  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 5120,\n"
    "  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 17920,\n"
    "  \"max_position_embeddings\": 16384,\n"
    "  \"model_type\": \"phi3\",\n"
    "  \"num_attention_heads\": 40,\n"
    "  \"num_hidden_layers\": 40,\n"
    "  \"num_key_value_heads\": 10,\n"
    "  \"original_max_position_embeddings\": 16384,\n"
    "  \"pad_token_id\": 100349,\n"
    "  \"resid_pdrop\": 0.0,\n"
    "  \"rms_norm_eps\": 1e-05,\n"
    "  \"rope_scaling\": null,\n"
    "  \"rope_theta\": 250000.0,\n"
    "  \"sliding_window\": null,\n"
    "  \"tie_word_embeddings\": false,\n"
    "  \"torch_dtype\": \"bfloat16\",\n"
    "  \"transformers_version\": \"4.47.0\",\n"
    "  \"use_cache\": true,\n"
    "  \"vocab_size\": 100352\n"
    "}\n";

static const char gen_phi4[] =
    "{\n"
    "  \"bos_token_id\": 100257,\n"
    "  \"eos_token_id\": [\n"
    "    100265,\n"
    "    100257\n"
    "  ],\n"
    "  \"pad_token_id\": 100349,\n"
    "  \"transformers_version\": \"4.47.0\"\n"
    "}\n";

/* Test-only presets: two layers, small dims, a 384-token vocabulary. */
static const char cfg_tiny[] =
    "{\n"
    "  \"architectures\": [\n"
    "    \"LlamaForCausalLM\"\n"
    "  ],\n"
    "  \"attention_bias\": false,\n"
    "  \"attention_dropout\": 0.0,\n"
    "  \"bos_token_id\": 1,\n"
    "  \"eos_token_id\": 2,\n"
    "  \"head_dim\": 16,\n"
    "  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 64,\n"
    "  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 192,\n"
    "  \"max_position_embeddings\": 131072,\n"
    "  \"mlp_bias\": false,\n"
    "  \"model_type\": \"llama\",\n"
    "  \"num_attention_heads\": 4,\n"
    "  \"num_hidden_layers\": 2,\n"
    "  \"num_key_value_heads\": 2,\n"
    "  \"pretraining_tp\": 1,\n"
    "  \"rms_norm_eps\": 1e-05,\n"
    "  \"rope_scaling\": {\n"
    "    \"factor\": 32.0,\n"
    "    \"high_freq_factor\": 4.0,\n"
    "    \"low_freq_factor\": 1.0,\n"
    "    \"original_max_position_embeddings\": 8192,\n"
    "    \"rope_type\": \"llama3\"\n"
    "  },\n"
    "  \"rope_theta\": 500000.0,\n"
    "  \"tie_word_embeddings\": false,\n"
    "  \"torch_dtype\": \"bfloat16\",\n"
    "  \"use_cache\": true,\n"
    "  \"vocab_size\": 384\n"
    "}\n";

/* The same model with tied embeddings (its Meta form has two model-parallel shards). */
static const char cfg_tiny_tied[] =
    "{\n"
    "  \"architectures\": [\n"
    "    \"LlamaForCausalLM\"\n"
    "  ],\n"
    "  \"attention_bias\": false,\n"
    "  \"attention_dropout\": 0.0,\n"
    "  \"bos_token_id\": 1,\n"
    "  \"eos_token_id\": 2,\n"
    "  \"head_dim\": 16,\n"
    "  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 64,\n"
    "  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 192,\n"
    "  \"max_position_embeddings\": 131072,\n"
    "  \"mlp_bias\": false,\n"
    "  \"model_type\": \"llama\",\n"
    "  \"num_attention_heads\": 4,\n"
    "  \"num_hidden_layers\": 2,\n"
    "  \"num_key_value_heads\": 2,\n"
    "  \"pretraining_tp\": 1,\n"
    "  \"rms_norm_eps\": 1e-05,\n"
    "  \"rope_scaling\": {\n"
    "    \"factor\": 32.0,\n"
    "    \"high_freq_factor\": 4.0,\n"
    "    \"low_freq_factor\": 1.0,\n"
    "    \"original_max_position_embeddings\": 8192,\n"
    "    \"rope_type\": \"llama3\"\n"
    "  },\n"
    "  \"rope_theta\": 500000.0,\n"
    "  \"tie_word_embeddings\": true,\n"
    "  \"torch_dtype\": \"bfloat16\",\n"
    "  \"use_cache\": true,\n"
    "  \"vocab_size\": 384\n"
    "}\n";

static const char gen_tiny[] =
    "{\n"
    "  \"bos_token_id\": 1,\n"
    "  \"eos_token_id\": 2\n"
    "}\n";

/* Phi-4's structure at test size: fused qkv_proj [4*16 + 2*16, 64] = [96, 64] and
 * gate_up_proj [2*96, 64], GQA 4:1, untied, plain RoPE; stop ids as phi-4's (eos and bos). */
static const char cfg_tiny_phi3[] =
    "{\n"
    "  \"architectures\": [\n"
    "    \"Phi3ForCausalLM\"\n"
    "  ],\n"
    "  \"attention_bias\": false,\n"
    "  \"attention_dropout\": 0.0,\n"
    "  \"bos_token_id\": 1,\n"
    "  \"embd_pdrop\": 0.0,\n"
    "  \"eos_token_id\": 2,\n"
    "  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 64,\n"
    "  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 96,\n"
    "  \"max_position_embeddings\": 16384,\n"
    "  \"model_type\": \"phi3\",\n"
    "  \"num_attention_heads\": 4,\n"
    "  \"num_hidden_layers\": 2,\n"
    "  \"num_key_value_heads\": 1,\n"
    "  \"original_max_position_embeddings\": 16384,\n"
    "  \"pad_token_id\": 383,\n"
    "  \"resid_pdrop\": 0.0,\n"
    "  \"rms_norm_eps\": 1e-05,\n"
    "  \"rope_scaling\": null,\n"
    "  \"rope_theta\": 250000.0,\n"
    "  \"sliding_window\": null,\n"
    "  \"tie_word_embeddings\": false,\n"
    "  \"torch_dtype\": \"bfloat16\",\n"
    "  \"use_cache\": true,\n"
    "  \"vocab_size\": 384\n"
    "}\n";

static const char gen_tiny_phi3[] =
    "{\n"
    "  \"bos_token_id\": 1,\n"
    "  \"eos_token_id\": [\n"
    "    2,\n"
    "    1\n"
    "  ],\n"
    "  \"pad_token_id\": 383\n"
    "}\n";

static const char cfg_11b_vision[] =
    "{\n"
    "  \"architectures\": [\n"
    "    \"MllamaForConditionalGeneration\"\n"
    "  ],\n"
    "  \"image_token_index\": 128256,\n"
    "  \"model_type\": \"mllama\",\n"
    "  \"text_config\": {\n"
    "    \"_name_or_path\": \"\",\n"
    "    \"add_cross_attention\": false,\n"
    "    \"architectures\": null,\n"
    "    \"bad_words_ids\": null,\n"
    "    \"begin_suppress_tokens\": null,\n"
    "    \"bos_token_id\": 128000,\n"
    "    \"chunk_size_feed_forward\": 0,\n"
    "    \"cross_attention_hidden_size\": null,\n"
    "    \"cross_attention_layers\": [\n"
    "      3,\n"
    "      8,\n"
    "      13,\n"
    "      18,\n"
    "      23,\n"
    "      28,\n"
    "      33,\n"
    "      38\n"
    "    ],\n"
    "    \"decoder_start_token_id\": null,\n"
    "    \"diversity_penalty\": 0.0,\n"
    "    \"do_sample\": false,\n"
    "    \"dropout\": 0,\n"
    "    \"early_stopping\": false,\n"
    "    \"encoder_no_repeat_ngram_size\": 0,\n"
    "    \"eos_token_id\": [\n"
    "      128001,\n"
    "      128008,\n"
    "      128009\n"
    "    ],\n"
    "    \"exponential_decay_length_penalty\": null,\n"
    "    \"finetuning_task\": null,\n"
    "    \"forced_bos_token_id\": null,\n"
    "    \"forced_eos_token_id\": null,\n"
    "    \"hidden_act\": \"silu\",\n"
    "    \"hidden_size\": 4096,\n"
    "    \"id2label\": {\n"
    "      \"0\": \"LABEL_0\",\n"
    "      \"1\": \"LABEL_1\"\n"
    "    },\n"
    "    \"initializer_range\": 0.02,\n"
    "    \"intermediate_size\": 14336,\n"
    "    \"is_decoder\": false,\n"
    "    \"is_encoder_decoder\": false,\n"
    "    \"label2id\": {\n"
    "      \"LABEL_0\": 0,\n"
    "      \"LABEL_1\": 1\n"
    "    },\n"
    "    \"length_penalty\": 1.0,\n"
    "    \"max_length\": 20,\n"
    "    \"max_position_embeddings\": 131072,\n"
    "    \"min_length\": 0,\n"
    "    \"model_type\": \"mllama_text_model\",\n"
    "    \"no_repeat_ngram_size\": 0,\n"
    "    \"num_attention_heads\": 32,\n"
    "    \"num_beam_groups\": 1,\n"
    "    \"num_beams\": 1,\n"
    "    \"num_hidden_layers\": 40,\n"
    "    \"num_key_value_heads\": 8,\n"
    "    \"num_return_sequences\": 1,\n"
    "    \"output_attentions\": false,\n"
    "    \"output_hidden_states\": false,\n"
    "    \"output_scores\": false,\n"
    "    \"pad_token_id\": 128004,\n"
    "    \"prefix\": null,\n"
    "    \"problem_type\": null,\n"
    "    \"pruned_heads\": {},\n"
    "    \"remove_invalid_values\": false,\n"
    "    \"repetition_penalty\": 1.0,\n"
    "    \"return_dict\": true,\n"
    "    \"return_dict_in_generate\": false,\n"
    "    \"rms_norm_eps\": 1e-05,\n"
    "    \"rope_scaling\": {\n"
    "      \"factor\": 8.0,\n"
    "      \"high_freq_factor\": 4.0,\n"
    "      \"low_freq_factor\": 1.0,\n"
    "      \"original_max_position_embeddings\": 8192,\n"
    "      \"rope_type\": \"llama3\"\n"
    "    },\n"
    "    \"rope_theta\": 500000.0,\n"
    "    \"sep_token_id\": null,\n"
    "    \"suppress_tokens\": null,\n"
    "    \"task_specific_params\": null,\n"
    "    \"temperature\": 1.0,\n"
    "    \"tf_legacy_loss\": false,\n"
    "    \"tie_encoder_decoder\": false,\n"
    "    \"tie_word_embeddings\": false,\n"
    "    \"tokenizer_class\": null,\n"
    "    \"top_k\": 50,\n"
    "    \"top_p\": 1.0,\n"
    "    \"torch_dtype\": \"bfloat16\",\n"
    "    \"torchscript\": false,\n"
    "    \"typical_p\": 1.0,\n"
    "    \"use_bfloat16\": false,\n"
    "    \"use_cache\": true,\n"
    "    \"vocab_size\": 128256\n"
    "  },\n"
    "  \"torch_dtype\": \"bfloat16\",\n"
    "  \"transformers_version\": \"4.45.0.dev0\",\n"
    "  \"vision_config\": {\n"
    "    \"_name_or_path\": \"\",\n"
    "    \"add_cross_attention\": false,\n"
    "    \"architectures\": null,\n"
    "    \"attention_heads\": 16,\n"
    "    \"bad_words_ids\": null,\n"
    "    \"begin_suppress_tokens\": null,\n"
    "    \"bos_token_id\": null,\n"
    "    \"chunk_size_feed_forward\": 0,\n"
    "    \"cross_attention_hidden_size\": null,\n"
    "    \"decoder_start_token_id\": null,\n"
    "    \"diversity_penalty\": 0.0,\n"
    "    \"do_sample\": false,\n"
    "    \"early_stopping\": false,\n"
    "    \"encoder_no_repeat_ngram_size\": 0,\n"
    "    \"eos_token_id\": null,\n"
    "    \"exponential_decay_length_penalty\": null,\n"
    "    \"finetuning_task\": null,\n"
    "    \"forced_bos_token_id\": null,\n"
    "    \"forced_eos_token_id\": null,\n"
    "    \"hidden_act\": \"gelu\",\n"
    "    \"hidden_size\": 1280,\n"
    "    \"id2label\": {\n"
    "      \"0\": \"LABEL_0\",\n"
    "      \"1\": \"LABEL_1\"\n"
    "    },\n"
    "    \"image_size\": 560,\n"
    "    \"intermediate_layers_indices\": [\n"
    "      3,\n"
    "      7,\n"
    "      15,\n"
    "      23,\n"
    "      30\n"
    "    ],\n"
    "    \"intermediate_size\": 5120,\n"
    "    \"is_decoder\": false,\n"
    "    \"is_encoder_decoder\": false,\n"
    "    \"label2id\": {\n"
    "      \"LABEL_0\": 0,\n"
    "      \"LABEL_1\": 1\n"
    "    },\n"
    "    \"length_penalty\": 1.0,\n"
    "    \"max_length\": 20,\n"
    "    \"max_num_tiles\": 4,\n"
    "    \"min_length\": 0,\n"
    "    \"model_type\": \"mllama_vision_model\",\n"
    "    \"no_repeat_ngram_size\": 0,\n"
    "    \"norm_eps\": 1e-05,\n"
    "    \"num_beam_groups\": 1,\n"
    "    \"num_beams\": 1,\n"
    "    \"num_channels\": 3,\n"
    "    \"num_global_layers\": 8,\n"
    "    \"num_hidden_layers\": 32,\n"
    "    \"num_return_sequences\": 1,\n"
    "    \"output_attentions\": false,\n"
    "    \"output_hidden_states\": false,\n"
    "    \"output_scores\": false,\n"
    "    \"pad_token_id\": null,\n"
    "    \"patch_size\": 14,\n"
    "    \"prefix\": null,\n"
    "    \"problem_type\": null,\n"
    "    \"pruned_heads\": {},\n"
    "    \"remove_invalid_values\": false,\n"
    "    \"repetition_penalty\": 1.0,\n"
    "    \"return_dict\": true,\n"
    "    \"return_dict_in_generate\": false,\n"
    "    \"sep_token_id\": null,\n"
    "    \"supported_aspect_ratios\": [\n"
    "      [\n"
    "        1,\n"
    "        1\n"
    "      ],\n"
    "      [\n"
    "        1,\n"
    "        2\n"
    "      ],\n"
    "      [\n"
    "        1,\n"
    "        3\n"
    "      ],\n"
    "      [\n"
    "        1,\n"
    "        4\n"
    "      ],\n"
    "      [\n"
    "        2,\n"
    "        1\n"
    "      ],\n"
    "      [\n"
    "        2,\n"
    "        2\n"
    "      ],\n"
    "      [\n"
    "        3,\n"
    "        1\n"
    "      ],\n"
    "      [\n"
    "        4,\n"
    "        1\n"
    "      ]\n"
    "    ],\n"
    "    \"suppress_tokens\": null,\n"
    "    \"task_specific_params\": null,\n"
    "    \"temperature\": 1.0,\n"
    "    \"tf_legacy_loss\": false,\n"
    "    \"tie_encoder_decoder\": false,\n"
    "    \"tie_word_embeddings\": true,\n"
    "    \"tokenizer_class\": null,\n"
    "    \"top_k\": 50,\n"
    "    \"top_p\": 1.0,\n"
    "    \"torch_dtype\": \"bfloat16\",\n"
    "    \"torchscript\": false,\n"
    "    \"typical_p\": 1.0,\n"
    "    \"use_bfloat16\": false,\n"
    "    \"vision_output_dim\": 7680\n"
    "  }\n"
    "}\n";

static const char gen_11b_vision[] =
    "{\n"
    "  \"bos_token_id\": 128000,\n"
    "  \"do_sample\": true,\n"
    "  \"eos_token_id\": [\n"
    "    128001,\n"
    "    128008,\n"
    "    128009\n"
    "  ],\n"
    "  \"pad_token_id\": 128004,\n"
    "  \"temperature\": 0.6,\n"
    "  \"top_p\": 0.9,\n"
    "  \"transformers_version\": \"4.45.0.dev0\"\n"
    "}\n";

static const char pre_11b_vision[] =
    "{\n"
    "  \"do_convert_rgb\": true,\n"
    "  \"do_normalize\": true,\n"
    "  \"do_pad\": true,\n"
    "  \"do_rescale\": true,\n"
    "  \"do_resize\": true,\n"
    "  \"image_mean\": [\n"
    "    0.48145466,\n"
    "    0.4578275,\n"
    "    0.40821073\n"
    "  ],\n"
    "  \"image_processor_type\": \"MllamaImageProcessor\",\n"
    "  \"image_std\": [\n"
    "    0.26862954,\n"
    "    0.26130258,\n"
    "    0.27577711\n"
    "  ],\n"
    "  \"max_image_tiles\": 4,\n"
    "  \"resample\": 2,\n"
    "  \"rescale_factor\": 0.00392156862745098,\n"
    "  \"size\": {\n"
    "    \"height\": 560,\n"
    "    \"width\": 560\n"
    "  }\n"
    "}\n";

/* The mllama structure at test size: 6 decoder layers, cross-attention at [1, 4] (Meta: 4
 * self-attention layers, 2 cross-attention ones: schedule [1, 3]); vision tower of 56-pixel
 * tiles of 14-pixel patches (17 tokens a tile), width 32, 6 local + 2 global layers,
 * intermediate layers [1, 3, 4] -> output 128; image token 384. */
static const char cfg_tiny_mllama[] =
    "{\n"
    "  \"architectures\": [\n"
    "    \"MllamaForConditionalGeneration\"\n"
    "  ],\n"
    "  \"image_token_index\": 384,\n"
    "  \"model_type\": \"mllama\",\n"
    "  \"text_config\": {\n"
    "    \"bos_token_id\": 1,\n"
    "    \"cross_attention_layers\": [\n"
    "      1,\n"
    "      4\n"
    "    ],\n"
    "    \"eos_token_id\": 2,\n"
    "    \"hidden_act\": \"silu\",\n"
    "    \"hidden_size\": 64,\n"
    "    \"intermediate_size\": 192,\n"
    "    \"max_position_embeddings\": 131072,\n"
    "    \"model_type\": \"mllama_text_model\",\n"
    "    \"num_attention_heads\": 4,\n"
    "    \"num_hidden_layers\": 6,\n"
    "    \"num_key_value_heads\": 2,\n"
    "    \"pad_token_id\": 0,\n"
    "    \"rms_norm_eps\": 1e-05,\n"
    "    \"rope_scaling\": {\n"
    "      \"factor\": 8.0,\n"
    "      \"high_freq_factor\": 4.0,\n"
    "      \"low_freq_factor\": 1.0,\n"
    "      \"original_max_position_embeddings\": 8192,\n"
    "      \"rope_type\": \"llama3\"\n"
    "    },\n"
    "    \"rope_theta\": 500000.0,\n"
    "    \"tie_word_embeddings\": false,\n"
    "    \"vocab_size\": 384\n"
    "  },\n"
    "  \"torch_dtype\": \"bfloat16\",\n"
    "  \"vision_config\": {\n"
    "    \"attention_heads\": 2,\n"
    "    \"hidden_act\": \"gelu\",\n"
    "    \"hidden_size\": 32,\n"
    "    \"image_size\": 56,\n"
    "    \"intermediate_layers_indices\": [\n"
    "      1,\n"
    "      3,\n"
    "      4\n"
    "    ],\n"
    "    \"intermediate_size\": 128,\n"
    "    \"max_num_tiles\": 4,\n"
    "    \"model_type\": \"mllama_vision_model\",\n"
    "    \"norm_eps\": 1e-05,\n"
    "    \"num_channels\": 3,\n"
    "    \"num_global_layers\": 2,\n"
    "    \"num_hidden_layers\": 6,\n"
    "    \"patch_size\": 14,\n"
    "    \"supported_aspect_ratios\": [\n"
    "      [\n"
    "        1,\n"
    "        1\n"
    "      ],\n"
    "      [\n"
    "        1,\n"
    "        2\n"
    "      ],\n"
    "      [\n"
    "        1,\n"
    "        3\n"
    "      ],\n"
    "      [\n"
    "        1,\n"
    "        4\n"
    "      ],\n"
    "      [\n"
    "        2,\n"
    "        1\n"
    "      ],\n"
    "      [\n"
    "        2,\n"
    "        2\n"
    "      ],\n"
    "      [\n"
    "        3,\n"
    "        1\n"
    "      ],\n"
    "      [\n"
    "        4,\n"
    "        1\n"
    "      ]\n"
    "    ],\n"
    "    \"vision_output_dim\": 128\n"
    "  }\n"
    "}\n";

/* tiny-mllama with Llama 3's vocabulary, its image token and special ids: a small vision model
 * that runs with the real tokenizer (the chat format, the server, the demo), HF format only. */
static const char cfg_tiny_mllama_llama3[] =
    "{\"architectures\": [\"MllamaForConditionalGeneration\"], \"image_token_index\": 128256, "
    "\"model_type\": \"mllama\", \"text_config\": {\"bos_token_id\": 128000, "
    "\"cross_attention_layers\": [1, 4], \"eos_token_id\": [128001, 128008, 128009], "
    "\"hidden_act\": \"silu\", \"hidden_size\": 64, \"intermediate_size\": 192, "
    "\"max_position_embeddings\": 131072, \"model_type\": \"mllama_text_model\", "
    "\"num_attention_heads\": 4, \"num_hidden_layers\": 6, \"num_key_value_heads\": 2, "
    "\"pad_token_id\": 128004, \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 8.0, "
    "\"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, \"original_max_position_embeddings\": "
    "8192, \"rope_type\": \"llama3\"}, \"rope_theta\": 500000.0, \"tie_word_embeddings\": false, "
    "\"vocab_size\": 128256}, \"torch_dtype\": \"bfloat16\", \"vision_config\": "
    "{\"attention_heads\": 2, \"hidden_act\": \"gelu\", \"hidden_size\": 32, \"image_size\": 56, "
    "\"intermediate_layers_indices\": [1, 3, 4], \"intermediate_size\": 128, \"max_num_tiles\": 4, "
    "\"model_type\": \"mllama_vision_model\", \"norm_eps\": 1e-05, \"num_channels\": 3, "
    "\"num_global_layers\": 2, \"num_hidden_layers\": 6, \"patch_size\": 14, "
    "\"supported_aspect_ratios\": [[1, 1], [1, 2], [1, 3], [1, 4], [2, 1], [2, 2], [3, 1], [4, 1]], "
    "\"vision_output_dim\": 128}}\n";

static const char pre_tiny_mllama[] =
    "{\n"
    "  \"do_convert_rgb\": true,\n"
    "  \"do_normalize\": true,\n"
    "  \"do_pad\": true,\n"
    "  \"do_rescale\": true,\n"
    "  \"do_resize\": true,\n"
    "  \"image_mean\": [\n"
    "    0.48145466,\n"
    "    0.4578275,\n"
    "    0.40821073\n"
    "  ],\n"
    "  \"image_processor_type\": \"MllamaImageProcessor\",\n"
    "  \"image_std\": [\n"
    "    0.26862954,\n"
    "    0.26130258,\n"
    "    0.27577711\n"
    "  ],\n"
    "  \"max_image_tiles\": 4,\n"
    "  \"resample\": 2,\n"
    "  \"rescale_factor\": 0.00392156862745098,\n"
    "  \"size\": {\n"
    "    \"height\": 56,\n"
    "    \"width\": 56\n"
    "  }\n"
    "}\n";

/* Meta params.json, one line as Meta ships it. The formula of models.md 1.2 gives each
 * model's FFN size from ffn_dim_multiplier and multiple_of. */
static const char params_1b[] =
    "{\"dim\": 2048, \"n_layers\": 16, \"n_heads\": 32, \"n_kv_heads\": 8, \"vocab_size\": 128256, "
    "\"ffn_dim_multiplier\": 1.5, \"multiple_of\": 256, \"norm_eps\": 1e-05, \"rope_theta\": "
    "500000.0, \"use_scaled_rope\": true}\n";
static const char params_3b[] =
    "{\"dim\": 3072, \"n_layers\": 28, \"n_heads\": 24, \"n_kv_heads\": 8, \"vocab_size\": 128256, "
    "\"ffn_dim_multiplier\": 1.0, \"multiple_of\": 256, \"norm_eps\": 1e-05, \"rope_theta\": "
    "500000.0, \"use_scaled_rope\": true}\n";
static const char params_8b[] =
    "{\"dim\": 4096, \"n_layers\": 32, \"n_heads\": 32, \"n_kv_heads\": 8, \"vocab_size\": 128256, "
    "\"ffn_dim_multiplier\": 1.3, \"multiple_of\": 1024, \"norm_eps\": 1e-05, \"rope_theta\": "
    "500000.0, \"use_scaled_rope\": true}\n";
static const char params_70b[] =
    "{\"dim\": 8192, \"n_layers\": 80, \"n_heads\": 64, \"n_kv_heads\": 8, \"vocab_size\": 128256, "
    "\"ffn_dim_multiplier\": 1.3, \"multiple_of\": 4096, \"norm_eps\": 1e-05, \"rope_theta\": "
    "500000.0, \"use_scaled_rope\": true}\n";
static const char params_tiny[] =
    "{\"dim\": 64, \"n_layers\": 2, \"n_heads\": 4, \"n_kv_heads\": 2, \"vocab_size\": 384, "
    "\"ffn_dim_multiplier\": 1.0, \"multiple_of\": 32, \"norm_eps\": 1e-05, \"rope_theta\": "
    "500000.0, \"use_scaled_rope\": true}\n";
static const char params_11b_vision[] =
    "{\"dim\": 4096, \"n_layers\": 32, \"n_heads\": 32, \"n_kv_heads\": 8, \"vocab_size\": 128256, "
    "\"ffn_dim_multiplier\": 1.3, \"multiple_of\": 1024, \"norm_eps\": 1e-05, \"rope_theta\": "
    "500000.0, \"use_scaled_rope\": true, \"vision_chunk_size\": 560, \"vision_max_num_chunks\": 4, "
    "\"vision_num_cross_attention_layers\": 8}\n";
/* tiny-mllama's, with meshlm's extension keys for what Meta's code hard-codes or derives
 * from dim (the RoPE factor, the vision tower's shape), as config.c reads them. */
static const char params_tiny_mllama[] =
    "{\"dim\": 64, \"n_layers\": 4, \"n_heads\": 4, \"n_kv_heads\": 2, \"vocab_size\": 384, "
    "\"ffn_dim_multiplier\": 1.0, \"multiple_of\": 32, \"norm_eps\": 1e-05, \"rope_theta\": "
    "500000.0, \"use_scaled_rope\": true, \"vision_chunk_size\": 56, \"vision_max_num_chunks\": 4, "
    "\"vision_num_cross_attention_layers\": 2, \"rope_scaling_factor\": 8.0, \"vision_width\": 32, "
    "\"vision_layers\": 6, \"vision_global_layers\": 2, \"vision_heads\": 2, "
    "\"vision_return_intermediate\": [1, 3, 4]}\n";
// clang-format on

// ---- the table ----

/* Llama 3.2 Vision's one Meta file is consolidated.pth, as the Hub's original/ folders hold
 * it and transformers' converter (T6) opens it; multi-shard models use consolidated.NN.pth. */
static const mlm_synth_preset presets[] = {
    {"llama-3.2-1b", 0, MLM_FAMILY_LLAMA3, 1, cfg_1b, gen_1b, params_1b, NULL, NULL},
    {"llama-3.2-3b", 0, MLM_FAMILY_LLAMA3, 1, cfg_3b, gen_1b, params_3b, NULL, NULL},
    {"llama-3.1-8b", 0, MLM_FAMILY_LLAMA3, 1, cfg_8b, gen_8b, params_8b, NULL, NULL},
    {"llama-3.1-70b", 0, MLM_FAMILY_LLAMA3, 8, cfg_70b, gen_70b, params_70b, NULL, NULL},
    {"llama-3.2-11b-vision", 0, MLM_FAMILY_MLLAMA, 1, cfg_11b_vision, gen_11b_vision,
     params_11b_vision, pre_11b_vision, "consolidated.pth"},
    {"phi-4", 0, MLM_FAMILY_PHI3, 0, cfg_phi4, gen_phi4, NULL, NULL, NULL},
    {"tiny-test", 1, MLM_FAMILY_LLAMA3, 1, cfg_tiny, gen_tiny, params_tiny, NULL, NULL},
    {"tiny-test-mp2", 1, MLM_FAMILY_LLAMA3, 2, cfg_tiny_tied, gen_tiny, params_tiny, NULL, NULL},
    {"tiny-phi3", 1, MLM_FAMILY_PHI3, 0, cfg_tiny_phi3, gen_tiny_phi3, NULL, NULL, NULL},
    {"tiny-mllama", 1, MLM_FAMILY_MLLAMA, 1, cfg_tiny_mllama, gen_tiny, params_tiny_mllama,
     pre_tiny_mllama, "consolidated.pth"},
    {"tiny-mllama-llama3", 1, MLM_FAMILY_MLLAMA, 0, cfg_tiny_mllama_llama3, gen_11b_vision, NULL,
     pre_tiny_mllama, NULL},
};

/* Where each family's presets take their tokenizer from (mlm_synth_preset_tokenizer), by
 * name prefix, the last match winning. */
static const struct {
    const char *prefix;
    mlm_synth_tokenizer t;
} tokenizers[] = {
    {"llama-", {"Llama 3 tokenizer.model", "MESHLM_TOKENIZER",
                "tests/data/tokenizer/llama3/tokenizer.model", NULL}},
    {"phi-4", {"Phi-4 tokenizer (tokenizer.json)", "MESHLM_PHI4_TOKENIZER",
               "tests/data/tokenizer/phi4", "tokenizer.json"}},
    {"tiny-mllama-llama3", {"Llama 3 tokenizer.model", "MESHLM_TOKENIZER",
                            "tests/data/tokenizer/llama3/tokenizer.model", NULL}},
    {"qwen3-", {"Qwen3 tokenizer (tokenizer.json)", "MESHLM_QWEN_TOKENIZER",
                "tests/data/qwen/chat/qwen3", "tokenizer.json"}},
    {"tiny-qwen3", {"Qwen3 tokenizer (tokenizer.json)", "MESHLM_QWEN_TOKENIZER",
                    "tests/data/qwen/chat/qwen3", "tokenizer.json"}},
    {"qwen2.5-", {"Qwen2.5 tokenizer (tokenizer.json)", "MESHLM_QWEN_TOKENIZER",
                  "tests/data/qwen/chat/qwen2.5", "tokenizer.json"}},
    {"tiny-qwen2", {"Qwen2.5 tokenizer (tokenizer.json)", "MESHLM_QWEN_TOKENIZER",
                    "tests/data/qwen/chat/qwen2.5", "tokenizer.json"}},
};

int mlm_synth_preset_tokenizer(const char *name, mlm_synth_tokenizer *out) {
    int found = 0;
    for (size_t i = 0; name && out && i < sizeof tokenizers / sizeof tokenizers[0]; i++)
        if (!strncmp(name, tokenizers[i].prefix, strlen(tokenizers[i].prefix))) {
            *out = tokenizers[i].t;
            found = 1;
        }
    return found;
}

const char *mlm_synth_presets(void) {
    return "llama-3.2-1b llama-3.2-3b llama-3.1-8b llama-3.1-70b llama-3.2-11b-vision phi-4 "
           "qwen3-0.6b qwen3-1.7b qwen3-4b qwen3-8b qwen3-14b qwen3-32b qwen2.5-0.5b "
           "qwen2.5-1.5b-instruct qwen2.5-3b qwen2.5-7b qwen2.5-14b qwen2.5-32b "
           "qwen2.5-72b-instruct";
}

const mlm_synth_preset *mlm_synth_preset_find(const char *name) {
    for (size_t i = 0; name && i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(presets[i].name, name)) return &presets[i];
    for (size_t i = 0; name && i < mlm_synth_n_qwen_presets; i++)
        if (!strcmp(mlm_synth_qwen_presets[i].name, name)) return &mlm_synth_qwen_presets[i];
    return NULL;
}
