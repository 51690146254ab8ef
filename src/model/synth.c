/* model/synth.c: `meshlm synth`: checkpoints with a real model's exact configuration and
 * random weights, for tests and benchmarks without downloading a model.
 * Presets embed the real HF config.json / generation_config.json (and, for Llama 3.2
 * Vision, preprocessor_config.json) texts and the Meta params.json values. Llama and Phi-3
 * plans come from one table of per-layer tensors; mllama's (the vision tower, cross-attention
 * layers, the tile tables) from their own section. The plan lists every tensor of every file;
 * values are generated chunk by chunk (1 MiB) while the format writers stream them out, so memory
 * stays a few MB for any model size. A plan may keep only a preset's first layers (every shape
 * stays, the configs say how many), so that a 70B-shaped model fits one machine. See synth.h for
 * how a value is tied to its canonical tensor element. */
#include "model/synth.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/mapfile.h"
#include "format/json.h"
#include "format/writer_pytorch.h"
#include "format/writer_safetensors.h"
#include "model/config.h"

#define CHUNK_BYTES (1u << 20)

// ---- presets ----

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

typedef struct preset {
    const char *name;
    int hidden; /* test-only: not listed by mlm_synth_presets */
    mlm_family family;
    int n_mp; /* Meta model-parallel shards (consolidated.NN.pth files); 0: no Meta form */
    const char *config_json, *generation_json, *params_json;
    const char *preprocessor_json; /* mllama: preprocessor_config.json */
    const char *meta_file;         /* the one Meta file's name when not consolidated.00.pth */
} preset;

/* Llama 3.2 Vision's one Meta file is consolidated.pth, as the Hub's original/ folders hold
 * it and transformers' converter (T6) opens it; multi-shard models use consolidated.NN.pth. */
static const preset presets[] = {
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

const char *mlm_synth_presets(void) {
    return "llama-3.2-1b llama-3.2-3b llama-3.1-8b llama-3.1-70b llama-3.2-11b-vision phi-4";
}

mlm_synth_params mlm_synth_default_params(void) {
    mlm_synth_params p = {0};
    p.format = MLM_SYNTH_HF;
    p.dtype = MLM_DTYPE_BF16;
    p.max_shard_bytes = MLM_HF_SHARD_BYTES;
    return p;
}

// ---- the plan ----

/* One canonical tensor of a Llama layer or of the model. */
typedef struct canon {
    const char *hf, *meta; /* name suffixes ("self_attn.q_proj.weight", "attention.wq.weight") */
    int64_t rows, cols;    /* cols 0: a vector of RMSNorm weights (length rows) */
    float std;
    int split;           /* Meta shards: 0 replicated, 1 rows (column-parallel), 2 columns */
    int32_t qk_head_dim; /* q/k: Meta stores rows interleaved */
} canon;

/* Appends a zeroed tensor to PL's list (grown by doubling; *CAP its capacity) in *OUT. */
static mlm_status push_tensor(mlm_synth_plan *pl, int64_t *cap, mlm_synth_tensor **out,
                              mlm_error *err) {
    if (pl->n_tensors == *cap) {
        int64_t nc = *cap ? *cap * 2 : 256;
        mlm_synth_tensor *t = realloc(pl->tensors, (size_t)nc * sizeof *t);
        if (!t) return mlm_err_set(err, MLM_ERR_NOMEM, "synth: out of memory");
        pl->tensors = t;
        *cap = nc;
    }
    *out = &pl->tensors[pl->n_tensors++];
    memset(*out, 0, sizeof **out);
    return MLM_OK;
}

static mlm_status add_tensor(mlm_synth_plan *pl, int64_t *cap, const canon *c, const char *name,
                             const char *key, int file, int shard, int n_mp, mlm_error *err) {
    mlm_synth_tensor *t;
    mlm_status st = push_tensor(pl, cap, &t, err);
    if (st) return st;
    snprintf(t->name, sizeof t->name, "%s", name);
    snprintf(t->key, sizeof t->key, "%s", key);
    t->std = c->std;
    t->file = file;
    t->qk_head_dim = pl->format == MLM_SYNTH_META ? c->qk_head_dim : 0;
    if (c->cols == 0) {
        t->n_dim = 1;
        t->shape[0] = t->full_cols = c->rows;
        return MLM_OK;
    }
    t->n_dim = 2;
    t->shape[0] = c->rows;
    t->shape[1] = t->full_cols = c->cols;
    if (n_mp > 1 && c->split == 1) {
        t->shape[0] = c->rows / n_mp;
        t->row_off = shard * t->shape[0];
    } else if (n_mp > 1 && c->split == 2) {
        t->shape[1] = c->cols / n_mp;
        t->col_off = shard * t->shape[1];
    }
    return MLM_OK;
}

/* Llama: HF names and order (per layer: q, k, v, o, gate, up, down, input_layernorm,
 * post_attention_layernorm), or Meta names and order (wq, wk, wv, wo, w1, w2, w3,
 * attention_norm, ffn_norm), shard by shard.
 * Phi-3 (HF only): per layer qkv_proj [q + 2 kv, d] (rows q | k | v), o_proj, gate_up_proj
 * [2 f, d] (rows gate | up), down_proj, the two norms (models.md 5.2); each fused tensor is
 * one canonical tensor with one std, as its parts have the same in_features. */
static mlm_status plan_model(mlm_synth_plan *pl, int n_mp, mlm_error *err) {
    const mlm_config *c = &pl->cfg;
    int64_t d = c->n_embd, q = (int64_t)c->n_head * c->head_dim,
            kv = (int64_t)c->n_kv_head * c->head_dim, f = c->n_ff, v = c->n_vocab;
    float s_d = (float)(1 / sqrt((double)d)), s_q = (float)(1 / sqrt((double)q)),
          s_f = (float)(1 / sqrt((double)f));
    const canon phi3[6] = {
        {"self_attn.qkv_proj.weight", NULL, q + 2 * kv, d, s_d, 0, 0},
        {"self_attn.o_proj.weight", NULL, d, q, s_q, 0, 0},
        {"mlp.gate_up_proj.weight", NULL, 2 * f, d, s_d, 0, 0},
        {"mlp.down_proj.weight", NULL, d, f, s_f, 0, 0},
        {"input_layernorm.weight", NULL, d, 0, 0, 0, 0},
        {"post_attention_layernorm.weight", NULL, d, 0, 0, 0, 0},
    };
    const canon llama[9] = {
        {"self_attn.q_proj.weight", "attention.wq.weight", q, d, s_d, 1, c->head_dim},
        {"self_attn.k_proj.weight", "attention.wk.weight", kv, d, s_d, 1, c->head_dim},
        {"self_attn.v_proj.weight", "attention.wv.weight", kv, d, s_d, 1, 0},
        {"self_attn.o_proj.weight", "attention.wo.weight", d, q, s_q, 2, 0},
        {"mlp.gate_proj.weight", "feed_forward.w1.weight", f, d, s_d, 1, 0},
        {"mlp.up_proj.weight", "feed_forward.w3.weight", f, d, s_d, 1, 0},
        {"mlp.down_proj.weight", "feed_forward.w2.weight", d, f, s_f, 2, 0},
        {"input_layernorm.weight", "attention_norm.weight", d, 0, 0, 0, 0},
        {"post_attention_layernorm.weight", "ffn_norm.weight", d, 0, 0, 0, 0},
    };
    static const int meta_order[9] = {0, 1, 2, 3, 4, 6, 5, 7, 8};
    const canon embed = {"model.embed_tokens.weight", "tok_embeddings.weight", v, d, 0.02f, 1, 0};
    const canon norm = {"model.norm.weight", "norm.weight", d, 0, 0, 0, 0};
    const canon head = {"lm_head.weight", "output.weight", v, d, s_d, 1, 0};
    /* Tied: HF has no lm_head; Meta's output.weight is a copy of the embedding. */
    const canon tied_head = {"model.embed_tokens.weight", "output.weight", v, d, 0.02f, 1, 0};
    int is_phi3 = c->family == MLM_FAMILY_PHI3, n_per_layer = is_phi3 ? 6 : 9;
    const canon *layer = is_phi3 ? phi3 : llama;
    int meta = pl->format == MLM_SYNTH_META;
    if (meta && is_phi3) /* refused by mlm_synth_plan_make */
        return mlm_err_set(err, MLM_ERR_INTERNAL, "synth: %s has no Meta form", pl->preset);
    if (meta && n_mp > 1 &&
        (c->n_head % n_mp || c->n_kv_head % n_mp || v % n_mp || f % n_mp || d % n_mp))
        return mlm_err_set(err, MLM_ERR_INTERNAL, "synth: %s does not split into %d shards",
                           pl->preset, n_mp);
    int64_t cap = 0;
    int shards = meta ? n_mp : 1;
    mlm_status st = MLM_OK;
    char name[96], key[96];
#define ADD(cn, nm, ky)                                                                            \
    do {                                                                                           \
        st = add_tensor(pl, &cap, cn, nm, ky, r, r, shards, err);                                  \
        if (st) return st;                                                                         \
    } while (0)
    for (int r = 0; r < shards; r++) {
        ADD(&embed, meta ? embed.meta : embed.hf, embed.hf);
        for (int i = 0; i < c->n_layer; i++)
            for (int k = 0; k < n_per_layer; k++) {
                const canon *t = &layer[meta ? meta_order[k] : k];
                snprintf(key, sizeof key, "model.layers.%d.%s", i, t->hf);
                if (meta) snprintf(name, sizeof name, "layers.%d.%s", i, t->meta);
                ADD(t, meta ? name : key, key);
            }
        ADD(&norm, meta ? norm.meta : norm.hf, norm.hf);
        if (!c->tied_embeddings)
            ADD(&head, meta ? head.meta : head.hf, head.hf);
        else if (meta)
            ADD(&tied_head, tied_head.meta, tied_head.hf);
    }
#undef ADD
    return st;
}

// ---- the mllama plan ----

/* Values of the tensors the Llama presets lack (models.md 6.4, 6.5): LayerNorm and linear
 * biases std 0.02; class, positional and tile-position embeddings std 0.1 (the Meta tables,
 * from which HF's precomputed ones take their values); every gate mean 0.5, std 0.1 (so
 * within [0.15, 0.85], tanh 0.15 to 0.69): nonzero, so that the image matters
 * (transformers initialises the gates to 0). */
#define BIAS_STD 0.02f
#define POS_STD 0.1f
#define GATE_MEAN 0.5f
#define GATE_STD 0.1f

/* One mllama tensor as both formats hold it. HF is its name in the HF files and the
 * canonical tensor, except for a tile table (TILE): canonical is the Meta table. */
typedef struct mt {
    char hf[96], meta[96];
    int n_dim; /* HF shape */
    int64_t shape[MLM_SYNTH_MAX_DIMS];
    int m_dim; /* Meta shape when it differs (0: HF's) */
    int64_t mshape[MLM_SYNTH_MAX_DIMS];
    float std, mean;   /* std 0: ones */
    int32_t qk;        /* Meta: q/k rows interleaved, head_dim this (self-attention) */
    int64_t m_row_off; /* Meta: its rows start at this row of the canonical tensor */
    int tile;          /* HF: the per-aspect-ratio table precomputed from the Meta one */
} mt;

typedef struct mplan {
    mlm_synth_plan *pl;
    int64_t cap;
    int meta;
    mlm_error *err;
    mlm_status st;
} mplan;

static int64_t cols_of(int n_dim, const int64_t *shape) {
    int64_t c = 1;
    for (int k = 1; k < n_dim; k++)
        c *= shape[k];
    return n_dim == 1 ? shape[0] : c;
}

/* Appends E as the plan's format holds it (the first failure sticks in M->st). */
static void emit(mplan *m, const mt *e) {
    mlm_synth_tensor *t;
    if (m->st || (m->st = push_tensor(m->pl, &m->cap, &t, m->err))) return;
    const mlm_config *c = &m->pl->cfg;
    int meta_shape = m->meta && e->m_dim;
    t->n_dim = meta_shape ? e->m_dim : e->n_dim;
    memcpy(t->shape, meta_shape ? e->mshape : e->shape, sizeof t->shape);
    snprintf(t->name, sizeof t->name, "%s", m->meta ? e->meta : e->hf);
    snprintf(t->key, sizeof t->key, "%s", e->tile ? e->meta : e->hf);
    t->std = e->std;
    t->mean = e->mean;
    if (e->tile) {
        /* canonical: the Meta table [T, T, P, D] read as [T, T * P * D] */
        t->full_cols = cols_of(e->m_dim, e->mshape);
        if (!m->meta) {
            t->tile_max = c->vision.max_tiles;
            t->tile_block = e->shape[1] / c->vision.max_tiles;
            t->tile_n_aspect = c->vision.n_aspect;
            memcpy(t->tile_aspect, c->vision.aspect, sizeof t->tile_aspect);
        }
        return;
    }
    t->full_cols = cols_of(e->n_dim, e->shape);
    if (m->meta) {
        t->qk_head_dim = e->qk;
        t->row_off = e->m_row_off;
    }
}

/* E with name(s) from printf formats (NULL META_FMT: no Meta name). */
static mt *named(mt *e, const char *hf_fmt, const char *meta_fmt, int i) {
    snprintf(e->hf, sizeof e->hf, hf_fmt, i);
    if (meta_fmt) snprintf(e->meta, sizeof e->meta, meta_fmt, i);
    return e;
}

static mt vec(int64_t n, float std, float mean) {
    return (mt){.n_dim = 1, .shape = {n}, .std = std, .mean = mean};
}

static mt mat(int64_t rows, int64_t cols, float std) {
    return (mt){.n_dim = 2, .shape = {rows, cols}, .std = std};
}

static float inv_sqrt(int64_t n) { return (float)(1 / sqrt((double)n)); }

/* Vision layer N of the local (GLOBAL 0) or gated global transformer, in HF order (gates,
 * q, k, v, o, fc1, fc2, the two LayerNorms) or Meta's (gates, wq..wo, ln_1, c_fc, c_proj,
 * ln_2: ImageTransformerBlock's registration order). */
static void vision_layer(mplan *m, int global, int n) {
    const mlm_vision_config *v = &m->pl->cfg.vision;
    int64_t d = v->n_embd, f = v->n_ff;
    const char *hf = global ? "vision_model.global_transformer.layers.%d."
                            : "vision_model.transformer.layers.%d.";
    const char *me = global ? "vision_model.vision_encoder.global_transformer.resblocks.%d."
                            : "vision_model.vision_encoder.transformer.resblocks.%d.";
    static const char *const sfx[12][2] = {
        {"self_attn.q_proj.weight", "attn.wq.weight"},
        {"self_attn.k_proj.weight", "attn.wk.weight"},
        {"self_attn.v_proj.weight", "attn.wv.weight"},
        {"self_attn.o_proj.weight", "attn.wo.weight"},
        {"mlp.fc1.weight", "mlp.c_fc.weight"},
        {"mlp.fc1.bias", "mlp.c_fc.bias"},
        {"mlp.fc2.weight", "mlp.c_proj.weight"},
        {"mlp.fc2.bias", "mlp.c_proj.bias"},
        {"input_layernorm.weight", "ln_1.weight"},
        {"input_layernorm.bias", "ln_1.bias"},
        {"post_attention_layernorm.weight", "ln_2.weight"},
        {"post_attention_layernorm.bias", "ln_2.bias"},
    };
    mt e[12] = {
        mat(d, d, inv_sqrt(d)), mat(d, d, inv_sqrt(d)), mat(d, d, inv_sqrt(d)),
        mat(d, d, inv_sqrt(d)), mat(f, d, inv_sqrt(d)), vec(f, BIAS_STD, 0),
        mat(d, f, inv_sqrt(f)), vec(d, BIAS_STD, 0),    vec(d, 0, 0),
        vec(d, BIAS_STD, 0),    vec(d, 0, 0),           vec(d, BIAS_STD, 0),
    };
    static const int hf_order[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    static const int meta_order[12] = {0, 1, 2, 3, 8, 9, 4, 5, 6, 7, 10, 11};
    char h[96], mm[96];
    if (global) {
        static const char *const g[2][2] = {{"gate_attn", "gate_attn"}, {"gate_ffn", "gate_ffn"}};
        for (int k = 0; k < 2; k++) {
            mt gt = vec(1, GATE_STD, GATE_MEAN);
            snprintf(h, sizeof h, "%s%s", hf, g[k][0]);
            snprintf(mm, sizeof mm, "%s%s", me, g[k][1]);
            emit(m, named(&gt, h, mm, n));
        }
    }
    for (int k = 0; k < 12; k++) {
        int i = (m->meta ? meta_order : hf_order)[k];
        snprintf(h, sizeof h, "%s%s", hf, sfx[i][0]);
        snprintf(mm, sizeof mm, "%s%s", me, sfx[i][1]);
        emit(m, named(&e[i], h, mm, n));
    }
}

/* The vision tower's tensors other than its layers: in HF order (class embedding, patch
 * embedding, gated positional embedding, pre / post tile embeddings, LayerNorms) when
 * PART is 0; Meta's VisionEncoder order is split around the layers: PART 1 before them
 * (own parameters, conv1, ln_post, ln_pre), PART 2 after (the tile embeddings). */
static void vision_top(mplan *m, int part) {
    const mlm_vision_config *v = &m->pl->cfg.vision;
    int64_t d = v->n_embd, t = v->max_tiles, ps = v->patch_size,
            p = (int64_t)(v->image_size / ps) * (v->image_size / ps) + 1,
            k = (int64_t)v->n_channels * ps * ps, ids = v->n_aspect + 1;
    mt e[13];
    e[0] = vec(d, POS_STD, 0);
    named(&e[0], "vision_model.class_embedding", "vision_model.vision_encoder.class_embedding", 0);
    e[1] = (mt){.n_dim = 4,
                .shape = {d, v->n_channels, ps, ps},
                .m_dim = 2,
                .mshape = {d, k},
                .std = inv_sqrt(k)};
    named(&e[1], "vision_model.patch_embedding.weight",
          "vision_model.vision_encoder.conv1._linear.weight", 0);
    e[2] = vec(1, GATE_STD, GATE_MEAN);
    named(&e[2], "vision_model.gated_positional_embedding.gate",
          "vision_model.vision_encoder.gated_positional_embedding_gate", 0);
    e[3] = mat(p, d, POS_STD);
    named(&e[3], "vision_model.gated_positional_embedding.embedding",
          "vision_model.vision_encoder.positional_embedding", 0);
    e[4] = (mt){.n_dim = 2,
                .shape = {ids, t * p * d},
                .m_dim = 4,
                .mshape = {t, t, p, d},
                .std = POS_STD,
                .tile = 1};
    named(&e[4], "vision_model.gated_positional_embedding.tile_embedding.weight",
          "vision_model.vision_encoder.gated_positional_embedding", 0);
    for (int pre = 0; pre < 2; pre++) {
        const char *hn = pre ? "pre" : "post";
        char h[96], mm[96];
        mt *g = &e[pre ? 5 : 7], *tb = &e[pre ? 6 : 8];
        *g = vec(1, GATE_STD, GATE_MEAN);
        snprintf(h, sizeof h, "vision_model.%s_tile_positional_embedding.gate", hn);
        snprintf(mm, sizeof mm, "vision_model.vision_encoder.%s_tile_pos_embed.gate", hn);
        named(g, h, mm, 0);
        *tb = (mt){.n_dim = 2,
                   .shape = {ids, t * d},
                   .m_dim = 4,
                   .mshape = {t, t, 1, d},
                   .std = POS_STD,
                   .tile = 1};
        snprintf(h, sizeof h, "vision_model.%s_tile_positional_embedding.embedding.weight", hn);
        snprintf(mm, sizeof mm, "vision_model.vision_encoder.%s_tile_pos_embed.embedding", hn);
        named(tb, h, mm, 0);
    }
    for (int k2 = 0; k2 < 4; k2++) {
        const char *which = k2 < 2 ? "pre" : "post", *wb = k2 % 2 ? "bias" : "weight";
        char h[96], mm[96];
        e[9 + k2] = vec(d, k2 % 2 ? BIAS_STD : 0, 0);
        snprintf(h, sizeof h, "vision_model.layernorm_%s.%s", which, wb);
        snprintf(mm, sizeof mm, "vision_model.vision_encoder.ln_%s.%s", which, wb);
        named(&e[9 + k2], h, mm, 0);
    }
    static const int hf_order[13] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    /* VisionEncoder: class_embedding, positional_embedding, gated_positional_embedding,
     * its gate, conv1, ln_post, ln_pre | layers | pre_tile_pos_embed, post_tile_pos_embed */
    static const int meta_head[9] = {0, 3, 4, 2, 1, 11, 12, 9, 10}, meta_tail[4] = {6, 5, 8, 7};
    const int *order = part == 0 ? hf_order : part == 1 ? meta_head : meta_tail;
    int n = part == 0 ? 13 : part == 1 ? 9 : 4;
    for (int i = 0; i < n; i++)
        emit(m, &e[order[i]]);
}

/* The projector (HF multi_modal_projector, Meta vision_model.vision_projection). */
static void projector(mplan *m) {
    const mlm_config *c = &m->pl->cfg;
    int64_t o = c->vision.output_dim;
    mt w = mat(c->n_embd, o, inv_sqrt(o)), b = vec(c->n_embd, BIAS_STD, 0);
    emit(m, named(&w, "multi_modal_projector.weight", "vision_model.vision_projection.weight", 0));
    emit(m, named(&b, "multi_modal_projector.bias", "vision_model.vision_projection.bias", 0));
}

/* Decoder layer HF_I: Meta self-attention layer META_I (q/k interleaved) or cross-attention
 * block META_I (not permuted), both in their format's order (HF: MllamaSelfAttentionDecoderLayer
 * / MllamaCrossAttentionDecoderLayer; Meta: TransformerBlock / CrossAttentionTransformerBlock). */
static void text_layer(mplan *m, int cross, int hf_i, int meta_i) {
    const mlm_config *c = &m->pl->cfg;
    int64_t d = c->n_embd, hd = c->head_dim, q = (int64_t)c->n_head * hd,
            kv = (int64_t)c->n_kv_head * hd, f = c->n_ff;
    static const char *const sfx[13][2] = {
        {"cross_attn_attn_gate", "gate_attn"},
        {"cross_attn_mlp_gate", "gate_ffwd"},
        {"q_proj.weight", "attention.wq.weight"},
        {"k_proj.weight", "attention.wk.weight"},
        {"v_proj.weight", "attention.wv.weight"},
        {"o_proj.weight", "attention.wo.weight"},
        {"cross_attn.q_norm.weight", "attention.q_norm.weight"},
        {"cross_attn.k_norm.weight", "attention.k_norm.weight"},
        {"input_layernorm.weight", "attention_norm.weight"},
        {"mlp.gate_proj.weight", "feed_forward.w1.weight"},
        {"mlp.up_proj.weight", "feed_forward.w3.weight"},
        {"mlp.down_proj.weight", "feed_forward.w2.weight"},
        {"post_attention_layernorm.weight", "ffn_norm.weight"},
    };
    mt e[13] = {
        vec(1, GATE_STD, GATE_MEAN),
        vec(1, GATE_STD, GATE_MEAN),
        mat(q, d, inv_sqrt(d)),
        mat(kv, d, inv_sqrt(d)),
        mat(kv, d, inv_sqrt(d)),
        mat(d, q, inv_sqrt(q)),
        vec(hd, 0, 0),
        vec(hd, 0, 0),
        vec(d, 0, 0),
        mat(f, d, inv_sqrt(d)),
        mat(f, d, inv_sqrt(d)),
        mat(d, f, inv_sqrt(f)),
        vec(d, 0, 0),
    };
    if (!cross) e[2].qk = e[3].qk = (int32_t)hd;
    static const int self_hf[9] = {2, 3, 4, 5, 9, 10, 11, 8, 12},
                     self_meta[9] = {2, 3, 4, 5, 9, 11, 10, 8, 12},
                     cross_hf[13] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
                     cross_meta[13] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 10, 12};
    const int *order = cross ? (m->meta ? cross_meta : cross_hf) : (m->meta ? self_meta : self_hf);
    int n = cross ? 13 : 9;
    for (int k = 0; k < n; k++) {
        int i = order[k];
        mt *t = &e[i];
        const char *attn = i >= 2 && i <= 5 ? (cross ? "cross_attn." : "self_attn.") : "";
        snprintf(t->hf, sizeof t->hf, "language_model.model.layers.%d.%s%s", hf_i, attn, sfx[i][0]);
        snprintf(t->meta, sizeof t->meta, "text_model.%s.%d.%s",
                 cross ? "cross_attention_layers" : "layers", meta_i, sfx[i][1]);
        emit(m, t);
    }
}

static int is_cross(const mlm_config *c, int i) {
    for (int k = 0; k < c->n_cross; k++)
        if (c->cross_layers[k] == i) return 1;
    return 0;
}

/* The text model: HF (MllamaForCausalLM: embed_tokens of n_vocab + 8 rows, the decoder
 * layers in HF numbering, norm, lm_head) or Meta (CrossAttentionTransformerText:
 * tok_embeddings, norm, output, learnable_embedding = embed_tokens' last 8 rows, the
 * self-attention layers, then the cross-attention blocks). */
static void text_model(mplan *m) {
    const mlm_config *c = &m->pl->cfg;
    int64_t d = c->n_embd, v = c->n_vocab;
    mt emb = mat(v + 8, d, 0.02f), norm = vec(d, 0, 0), head = mat(v, d, inv_sqrt(d));
    named(&emb, "language_model.model.embed_tokens.weight", "text_model.tok_embeddings.weight", 0);
    named(&norm, "language_model.model.norm.weight", "text_model.norm.weight", 0);
    named(&head, "language_model.lm_head.weight", "text_model.output.weight", 0);
    if (!m->meta) {
        emit(m, &emb);
        for (int i = 0, self = 0, cross = 0; i < c->n_layer; i++) {
            if (is_cross(c, i))
                text_layer(m, 1, i, cross++);
            else
                text_layer(m, 0, i, self++);
        }
        emit(m, &norm);
        emit(m, &head);
        return;
    }
    emb.m_dim = 2;
    emb.mshape[0] = v, emb.mshape[1] = d;
    emit(m, &emb);
    emit(m, &norm);
    emit(m, &head);
    mt learn = emb;
    snprintf(learn.meta, sizeof learn.meta, "text_model.learnable_embedding.weight");
    learn.mshape[0] = 8;
    learn.m_row_off = v;
    emit(m, &learn);
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0, self = 0, cross = 0; i < c->n_layer; i++) {
            int x = is_cross(c, i);
            if (x == pass) text_layer(m, x, i, x ? cross : self);
            if (x)
                cross++;
            else
                self++;
        }
}

/* MllamaForConditionalGeneration's tensors: HF in its state_dict order (vision_model,
 * language_model, multi_modal_projector); Meta in CrossAttentionTransformer's (M6): the
 * vision encoder, the projection, then the text model; one file. */
static mlm_status plan_mllama(mlm_synth_plan *pl, mlm_error *err) {
    mplan m = {.pl = pl, .meta = pl->format == MLM_SYNTH_META, .err = err};
    const mlm_vision_config *v = &pl->cfg.vision;
    if (v->max_tiles < 1 || v->n_aspect > MLM_SYNTH_MAX_ASPECT)
        return mlm_err_set(err, MLM_ERR_INTERNAL, "synth: %s: vision config out of range",
                           pl->preset);
    vision_top(&m, m.meta ? 1 : 0);
    for (int n = 0; n < v->n_layer; n++)
        vision_layer(&m, 0, n);
    for (int n = 0; n < v->n_global_layer; n++)
        vision_layer(&m, 1, n);
    if (m.meta) {
        vision_top(&m, 2);
        projector(&m);
    }
    text_model(&m);
    if (!m.meta) projector(&m);
    return m.st;
}

static const preset *find_preset(const char *name) {
    for (size_t i = 0; name && i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(presets[i].name, name)) return &presets[i];
    return NULL;
}

/* *OUT: a malloc'd copy of the preset's JSON text TEXT whose integer after KEY
 * ("\"num_hidden_layers\": ") is N. INTERNAL when TEXT has no such integer. */
static mlm_status with_layers(const preset *pr, const char *text, const char *key, int32_t n,
                              char **out, mlm_error *err) {
    const char *at = strstr(text, key), *num = at ? at + strlen(key) : NULL, *end = num;
    while (end && *end >= '0' && *end <= '9')
        end++;
    if (!at || end == num)
        return mlm_err_set(err, MLM_ERR_INTERNAL, "synth: preset '%s': no %s<integer> in its text",
                           pr->name, key);
    size_t len = strlen(text) + 16;
    if (!(*out = malloc(len))) return mlm_err_set(err, MLM_ERR_NOMEM, "synth: out of memory");
    snprintf(*out, len, "%.*s%d%s", (int)(num - text), text, (int)n, end);
    return MLM_OK;
}

/* Keeps the first N_LAYER of the preset's layers (0: all): config.json and params.json say
 * N_LAYER, every shape stays. The plan's config is read from the HF text written (for the
 * Meta format too: params.json gives the same model). INVALID_ARG outside [0, the preset's
 * count]. */
static mlm_status keep_layers(mlm_synth_plan *pl, const preset *pr, int32_t n_layer,
                              mlm_error *err) {
    int32_t all = pl->cfg.n_layer;
    if (n_layer < 0 || n_layer > all)
        return mlm_err_set(err, MLM_ERR_INVALID_ARG,
                           "synth: preset '%s' has %d layers, so %d of them cannot be kept "
                           "(keep 1 to %d; 0 keeps all)",
                           pr->name, (int)all, (int)n_layer, (int)all);
    if (n_layer == 0 || n_layer == all) return MLM_OK;
    mlm_status st = with_layers(pr, pr->config_json, "\"num_hidden_layers\": ", n_layer,
                                &pl->config_owned, err);
    if (!st && pl->params_json)
        st = with_layers(pr, pr->params_json, "\"n_layers\": ", n_layer, &pl->params_owned, err);
    if (st) return st;
    if (pl->config_json) pl->config_json = pl->config_owned;
    if (pl->params_json) pl->params_json = pl->params_owned;
    json_t *j;
    st = mlm_json_parse(pr->name, pl->config_owned, strlen(pl->config_owned), &j, err);
    if (st) return st;
    st = mlm_config_from_json(pr->name, j, &pl->cfg, err);
    json_decref(j);
    if (!st && pl->cfg.n_layer != n_layer)
        st = mlm_err_set(err, MLM_ERR_INTERNAL, "synth: preset '%s': config says %d layers, not %d",
                         pr->name, (int)pl->cfg.n_layer, (int)n_layer);
    return st;
}

/* Meta's cross-attention schedule (M6 _init_fusion_schedule) for N_SELF self-attention
 * and N_CROSS cross-attention layers, as HF layer indices (block m runs before self layer
 * s_m: HF index s_m + m) into OUT; the count it places (Meta may place fewer). */
static int meta_cross_schedule(int n_self, int n_cross, int32_t *out) {
    if (n_cross <= 0 || n_self <= 0) return 0;
    int k = (n_self + n_cross - 1) / n_cross, n = 0;
    int32_t s[MLM_MAX_CROSS_LAYERS];
    for (int j = n_self - 1; j >= 0 && n < n_cross && n < MLM_MAX_CROSS_LAYERS; j -= k)
        s[n++] = j;
    for (int m = 0; m < n; m++)
        out[m] = s[n - 1 - m] + m;
    return n;
}

/* Cross-attention layers of C below N (HF numbering) into OUT; their count. */
static int cross_below(const mlm_config *c, int n, int32_t *out) {
    int k = 0;
    for (int i = 0; i < c->n_cross; i++)
        if (c->cross_layers[i] < n) out[k++] = c->cross_layers[i];
    return k;
}

/* Whether the first N decoder layers of C can be written in the Meta format: their
 * cross-attention layers are where Meta's schedule for the kept counts puts them. */
static int meta_can_keep(const mlm_config *c, int n) {
    int32_t hf[MLM_MAX_CROSS_LAYERS], me[MLM_MAX_CROSS_LAYERS];
    int nc = cross_below(c, n, hf);
    return nc > 0 && meta_cross_schedule(n - nc, nc, me) == nc &&
           !memcmp(hf, me, (size_t)nc * sizeof hf[0]);
}

/* *OUT: a malloc'd copy of TEXT with the span [AT, END) replaced by WITH. */
static mlm_status replace_span(const char *text, const char *at, const char *end, const char *with,
                               char **out, mlm_error *err) {
    size_t len = strlen(text) - (size_t)(end - at) + strlen(with) + 1;
    if (!(*out = malloc(len))) return mlm_err_set(err, MLM_ERR_NOMEM, "synth: out of memory");
    snprintf(*out, len, "%.*s%s%s", (int)(at - text), text, with, end);
    return MLM_OK;
}

/* mllama: keeps the first N_LAYER decoder layers (see mlm_synth_plan_make_layers). The
 * config's text_config says N_LAYER and lists the cross-attention layers below it (in the
 * file's layout: one per line); params.json the self- and cross-attention layers kept. */
static mlm_status keep_layers_mllama(mlm_synth_plan *pl, const preset *pr, int32_t n_layer,
                                     mlm_error *err) {
    const mlm_config *c = &pl->cfg;
    int32_t all = c->n_layer, kept[MLM_MAX_CROSS_LAYERS];
    if (n_layer < 0 || n_layer > all)
        return mlm_err_set(err, MLM_ERR_INVALID_ARG,
                           "synth: preset '%s' has %d layers, so %d of them cannot be kept "
                           "(keep 1 to %d; 0 keeps all)",
                           pr->name, (int)all, (int)n_layer, (int)all);
    if (n_layer == 0 || n_layer == all) return MLM_OK;
    int n_cross = cross_below(c, n_layer, kept), n_self = n_layer - n_cross;
    if (pl->format == MLM_SYNTH_META && !meta_can_keep(c, n_layer)) {
        char ok[256] = "", list[160] = "", meta[160] = "";
        int32_t sched[MLM_MAX_CROSS_LAYERS];
        int n_sched = meta_cross_schedule(n_self, n_cross, sched);
        for (int n = 1; n <= all; n++)
            if (meta_can_keep(c, n))
                snprintf(ok + strlen(ok), sizeof ok - strlen(ok), "%s%d", ok[0] ? ", " : "", n);
        for (int i = 0; i < n_cross; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d", i ? ", " : "",
                     (int)kept[i]);
        for (int i = 0; i < n_sched; i++)
            snprintf(meta + strlen(meta), sizeof meta - strlen(meta), "%s%d", i ? ", " : "",
                     (int)sched[i]);
        if (n_cross == 0)
            return mlm_err_set(err, MLM_ERR_INVALID_ARG,
                               "synth: preset '%s' with %d layers cannot be written in the Meta "
                               "format: it keeps no cross-attention layer, and Meta's model "
                               "needs vision_num_cross_attention_layers >= 1 (its schedule "
                               "divides by it); layer counts that work: %s",
                               pr->name, (int)n_layer, ok);
        return mlm_err_set(err, MLM_ERR_INVALID_ARG,
                           "synth: preset '%s' with %d layers cannot be written in the Meta "
                           "format: it keeps %d self-attention and %d cross-attention layers "
                           "(HF layers [%s]), and Meta's fusion schedule for n_layers %d, "
                           "vision_num_cross_attention_layers %d places them at HF layers [%s]; "
                           "layer counts that work: %s (the hf format takes any)",
                           pr->name, (int)n_layer, n_self, n_cross, list, n_self, n_cross, meta,
                           ok);
    }
    /* config.json: text_config's num_hidden_layers and cross_attention_layers */
    const char *tc = strstr(pr->config_json, "\"text_config\"");
    const char *xl = tc ? strstr(tc, "\"cross_attention_layers\": [") : NULL;
    const char *xe = xl ? strchr(xl, ']') : NULL;
    if (!xe)
        return mlm_err_set(err, MLM_ERR_INTERNAL,
                           "synth: preset '%s': no text_config.cross_attention_layers", pr->name);
    char with[512];
    int w = snprintf(with, sizeof with, "\"cross_attention_layers\": [");
    for (int i = 0; i < n_cross; i++)
        w +=
            snprintf(with + w, sizeof with - (size_t)w, "%s\n      %d", i ? "," : "", (int)kept[i]);
    snprintf(with + w, sizeof with - (size_t)w, "%s]", n_cross ? "\n    " : "");
    char *tmp = NULL;
    mlm_status st = replace_span(pr->config_json, xl, xe + 1, with, &tmp, err);
    if (!st) {
        /* the text_config's count: the first one after "text_config" */
        const char *key = "\"num_hidden_layers\": ";
        const char *at = strstr(strstr(tmp, "\"text_config\""), key), *num = at + strlen(key),
                   *end = num;
        while (*end >= '0' && *end <= '9')
            end++;
        snprintf(with, sizeof with, "%s%d", key, (int)n_layer);
        st = end == num ? mlm_err_set(err, MLM_ERR_INTERNAL, "synth: preset '%s': no %s<integer>",
                                      pr->name, key)
                        : replace_span(tmp, at, end, with, &pl->config_owned, err);
    }
    free(tmp);
    if (st) return st;
    /* params.json: the self- and cross-attention layers kept */
    if (pl->params_json) {
        st = with_layers(pr, pr->params_json, "\"n_layers\": ", n_self, &tmp, err);
        if (!st)
            st = with_layers(pr, tmp, "\"vision_num_cross_attention_layers\": ", n_cross,
                             &pl->params_owned, err);
        free(tmp);
        if (st) return st;
        pl->params_json = pl->params_owned;
    }
    if (pl->config_json) pl->config_json = pl->config_owned;
    json_t *j;
    st = mlm_json_parse(pr->name, pl->config_owned, strlen(pl->config_owned), &j, err);
    if (st) return st;
    st = mlm_config_from_json(pr->name, j, &pl->cfg, err);
    json_decref(j);
    if (!st && (pl->cfg.n_layer != n_layer || pl->cfg.n_cross != n_cross))
        st = mlm_err_set(err, MLM_ERR_INTERNAL,
                         "synth: preset '%s': config says %d layers and %d cross-attention "
                         "layers, not %d and %d",
                         pr->name, (int)pl->cfg.n_layer, (int)pl->cfg.n_cross, (int)n_layer,
                         n_cross);
    return st;
}

mlm_status mlm_synth_plan_make(const mlm_synth_params *p, mlm_synth_plan *pl, mlm_error *err) {
    return mlm_synth_plan_make_layers(p, p->n_layer, pl, err);
}

mlm_status mlm_synth_plan_make_layers(const mlm_synth_params *p, int32_t n_layer,
                                      mlm_synth_plan *pl, mlm_error *err) {
    memset(pl, 0, sizeof *pl);
    const preset *pr = find_preset(p->preset);
    if (!pr)
        return mlm_err_set(err, MLM_ERR_INVALID_ARG, "synth: unknown preset '%s' (presets: %s)",
                           p->preset ? p->preset : "(none)", mlm_synth_presets());
    if (p->format != MLM_SYNTH_HF && p->format != MLM_SYNTH_META)
        return mlm_err_set(err, MLM_ERR_INVALID_ARG, "synth: format %d is not 0 (hf) or 1 (meta)",
                           p->format);
    if (p->dtype != MLM_DTYPE_BF16 && p->dtype != MLM_DTYPE_F32)
        return mlm_err_set(err, MLM_ERR_INVALID_ARG, "synth: dtype %s is not bf16 or f32",
                           mlm_dtype_name(p->dtype));
    pl->preset = pr->name;
    pl->format = p->format;
    pl->dtype = p->dtype;
    pl->seed = p->seed;
    json_t *j;
    mlm_status st = mlm_json_parse(pr->name, pr->config_json, strlen(pr->config_json), &j, err);
    if (st) return st;
    st = mlm_config_from_json(pr->name, j, &pl->cfg, err);
    json_decref(j);
    if (st) return st;
    if (pl->cfg.family != pr->family)
        return mlm_err_set(err, MLM_ERR_INTERNAL, "synth: preset '%s': config is %s, not %s",
                           pr->name, mlm_family_name(pl->cfg.family), mlm_family_name(pr->family));
    if (p->format == MLM_SYNTH_META && pr->n_mp == 0)
        return mlm_err_set(err, MLM_ERR_INVALID_ARG,
                           "synth: preset '%s' has no Meta format: Phi-4 is published only as "
                           "Hugging Face safetensors (there is no Meta-format checkpoint to "
                           "imitate); use the hf format",
                           pr->name);
    if (p->format == MLM_SYNTH_HF) {
        pl->config_json = pr->config_json;
        pl->generation_json = pr->generation_json;
        pl->preprocessor_json = pr->preprocessor_json;
        pl->n_files = 1;
        snprintf(pl->files[0], sizeof pl->files[0], "model");
    } else {
        pl->params_json = pr->params_json;
        pl->n_files = pr->n_mp;
        for (int r = 0; r < pr->n_mp; r++)
            snprintf(pl->files[r], sizeof pl->files[r], "consolidated.%02d.pth", r);
        if (pr->meta_file) snprintf(pl->files[0], sizeof pl->files[0], "%s", pr->meta_file);
    }
    if (pr->family == MLM_FAMILY_MLLAMA) {
        st = keep_layers_mllama(pl, pr, n_layer, err);
        if (!st) st = plan_mllama(pl, err);
    } else {
        st = keep_layers(pl, pr, n_layer, err);
        if (!st) st = plan_model(pl, pr->n_mp, err);
    }
    if (st) mlm_synth_plan_free(pl);
    return st;
}

void mlm_synth_plan_free(mlm_synth_plan *pl) {
    if (!pl) return;
    free(pl->tensors);
    free(pl->config_owned);
    free(pl->params_owned);
    memset(pl, 0, sizeof *pl);
}

// ---- values ----

#define GOLDEN 0x9E3779B97F4A7C15ull
/* Standard deviation of the sum of four uniform 16-bit integers: 2 * sqrt((2^32 - 1) / 12). */
#define SUM4_STD 37837.22669716126
#define SUM4_MEAN 131070 /* 4 * 65535 / 2 */

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The SplitMix64 stream of canonical tensor KEY: element k is mix64(base + (k+1) * GOLDEN),
 * so any element can be generated on its own. */
static uint64_t stream_base(uint64_t seed, const char *key) {
    uint64_t h = 0xCBF29CE484222325ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        h = (h ^ *p) * 0x100000001B3ull;
    return mix64(h ^ mix64(seed + GOLDEN));
}

static inline float value_of(uint64_t z, float scale) {
    int32_t s = (int32_t)((z & 0xFFFF) + ((z >> 16) & 0xFFFF) + ((z >> 32) & 0xFFFF) + (z >> 48));
    return (float)(s - SUM4_MEAN) * scale;
}

static inline uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFF + ((u >> 16) & 1); /* round to nearest even; no NaNs here */
    return (uint16_t)(u >> 16);
}

/* N consecutive elements of the stream from element K0, plus MEAN. Blocks of a fixed 16
 * elements let the compiler vectorise the hash at -O2 (about 2x faster than the plain loop). */
#define GEN_BLOCK 16
static void gen_run(uint64_t base, uint64_t k0, int64_t n, float scale, float mean, mlm_dtype dtype,
                    void *dst) {
    uint64_t x = base + (k0 + 1) * GOLDEN;
    int64_t i = 0;
    if (dtype == MLM_DTYPE_BF16) {
        uint16_t *o = dst;
        for (; i + GEN_BLOCK <= n; i += GEN_BLOCK, x += GEN_BLOCK * GOLDEN)
            for (int j = 0; j < GEN_BLOCK; j++)
                o[i + j] = to_bf16(value_of(mix64(x + (uint64_t)j * GOLDEN), scale) + mean);
        for (; i < n; i++, x += GOLDEN)
            o[i] = to_bf16(value_of(mix64(x), scale) + mean);
    } else {
        float *o = dst;
        for (; i + GEN_BLOCK <= n; i += GEN_BLOCK, x += GEN_BLOCK * GOLDEN)
            for (int j = 0; j < GEN_BLOCK; j++)
                o[i + j] = value_of(mix64(x + (uint64_t)j * GOLDEN), scale) + mean;
        for (; i < n; i++, x += GOLDEN)
            o[i] = value_of(mix64(x), scale) + mean;
    }
}

/* Elements of T per row: the product of its dims after the first (1-D: its length). */
static int64_t row_len(const mlm_synth_tensor *t) {
    int64_t c = t->n_dim == 1 ? t->shape[0] : 1;
    for (int k = 1; k < t->n_dim; k++)
        c *= t->shape[k];
    return c;
}

/* A tile table's elements [FIRST, FIRST + N): per tile, a run of the Meta table or zeros. */
static void fill_tiles(const mlm_synth_tensor *t, uint64_t base, float scale, mlm_dtype dtype,
                       int64_t first, int64_t n, char *out) {
    size_t es = mlm_dtype_size(dtype);
    int64_t cols = row_len(t), pd = t->tile_block, tm = t->tile_max;
    while (n > 0) {
        int64_t a = first / cols, j = first % cols, tile = j / pd, rem = j % pd;
        int64_t len = pd - rem < n ? pd - rem : n;
        int64_t rows = 0, cc = 1;
        if (a >= 1 && a <= t->tile_n_aspect) {
            rows = t->tile_aspect[a - 1][0];
            cc = t->tile_aspect[a - 1][1];
        }
        if (tile < rows * cc) {
            /* Meta element [tile / cols, tile % cols, rem] of the [T, T, P * D] table */
            int64_t k = ((tile / cc) * tm + tile % cc) * pd + rem;
            gen_run(base, (uint64_t)k, len, scale, t->mean, dtype, out);
        } else {
            memset(out, 0, (size_t)len * es);
        }
        out += (size_t)len * es;
        first += len;
        n -= len;
    }
}

void mlm_synth_fill(const mlm_synth_tensor *t, uint64_t seed, mlm_dtype dtype, int64_t first,
                    int64_t n, void *dst) {
    size_t es = mlm_dtype_size(dtype);
    if (t->std == 0) {
        for (int64_t i = 0; i < n; i++) {
            if (dtype == MLM_DTYPE_BF16)
                ((uint16_t *)dst)[i] = 0x3F80;
            else
                ((float *)dst)[i] = 1.0f;
        }
        return;
    }
    uint64_t base = stream_base(seed, t->key);
    float scale = (float)(t->std / SUM4_STD);
    if (t->tile_block > 0) {
        fill_tiles(t, base, scale, dtype, first, n, dst);
        return;
    }
    int64_t cols = row_len(t);
    char *out = dst;
    while (n > 0) {
        int64_t row = first / cols, col = first % cols, len = cols - col;
        if (len > n) len = n;
        int64_t r = t->row_off + row;
        if (t->qk_head_dim > 0) {
            /* Meta row h*hd + 2i + j holds HF row h*hd + j*hd/2 + i (models.md 3.3). */
            int64_t hd = t->qk_head_dim, h = r / hd, rem = r % hd;
            r = h * hd + (rem % 2) * (hd / 2) + rem / 2;
        }
        gen_run(base, (uint64_t)(r * t->full_cols + t->col_off + col), len, scale, t->mean, dtype,
                out);
        out += (size_t)len * es;
        first += len;
        n -= len;
    }
}

// ---- writing ----

typedef struct small_file {
    const char *name; /* in out_dir */
    const char *text;
} small_file;

/* A tokenizer file copied into out_dir. */
typedef struct tok_file {
    char *src;        /* owned */
    const char *name; /* static: its name in out_dir */
    int64_t size;
} tok_file;

#define MAX_SMALL                                                                                  \
    3             /* config.json, generation_config.json (+ preprocessor_config.json), or          \
                     params.json */
#define MAX_TOK 3 /* Phi-4: tokenizer.json, tokenizer_config.json, special_tokens_map.json */

/* Everything one mlm_synth call writes, planned before the first byte. */
typedef struct job {
    const mlm_synth_params *p;
    mlm_synth_plan plan;
    mlm_tensor_spec *specs;                      /* owned; names borrowed from plan.tensors */
    mlm_safetensors_writer *st;                  /* HF */
    mlm_pytorch_writer *pt[MLM_SYNTH_MAX_FILES]; /* Meta */
    small_file small[MAX_SMALL];
    int n_small;
    tok_file tok[MAX_TOK];
    int n_tok;
    mlm_outfile small_out[MAX_SMALL + MAX_TOK]; /* the small files, then the tokenizer's */
    int64_t total, done;
    void *chunk; /* owned, CHUNK_BYTES */
} job;

static void job_free(job *jb) {
    mlm_safetensors_writer_free(jb->st);
    for (int i = 0; i < MLM_SYNTH_MAX_FILES; i++)
        mlm_pytorch_writer_free(jb->pt[i]);
    for (int i = 0; i < MAX_SMALL + MAX_TOK; i++)
        mlm_outfile_discard(&jb->small_out[i]);
    for (int i = 0; i < jb->n_tok; i++)
        free(jb->tok[i].src);
    mlm_synth_plan_free(&jb->plan);
    free(jb->specs);
    free(jb->chunk);
    memset(jb, 0, sizeof *jb);
}

/* The tokenizer files of each family: those a model directory holds (models.md 4.1, 5.3). */
typedef struct tok_name {
    const char *name;
    int required;
} tok_name;
static const tok_name llama_tok[] = {{"tokenizer.model", 1}};
static const tok_name phi3_tok[] = {
    {"tokenizer.json", 1}, {"tokenizer_config.json", 0}, {"special_tokens_map.json", 0}};

/* Plans the copy of p->tokenizer: Llama 3 takes its tokenizer.model file (or a directory
 * holding one); Phi-4 a directory, whose tokenizer.json is copied with tokenizer_config.json
 * and special_tokens_map.json when present. IO for a missing path or required file. */
static mlm_status plan_tokenizer(job *jb, mlm_error *err) {
    const char *src = jb->p->tokenizer;
    int phi3 = jb->plan.cfg.family == MLM_FAMILY_PHI3;
    const tok_name *names = phi3 ? phi3_tok : llama_tok;
    int n_names = phi3 ? 3 : 1;
    struct stat sb;
    if (stat(src, &sb) != 0)
        return mlm_err_set(err, MLM_ERR_IO, "%s: tokenizer to copy: %s", src, strerror(errno));
    if (!S_ISDIR(sb.st_mode) && !S_ISREG(sb.st_mode))
        return mlm_err_set(err, MLM_ERR_IO, "%s: tokenizer to copy: not a regular file", src);
    if (S_ISREG(sb.st_mode)) {
        if (phi3)
            return mlm_err_set(err, MLM_ERR_INVALID_ARG,
                               "%s: tokenizer to copy: preset '%s' needs a directory holding "
                               "tokenizer.json (and tokenizer_config.json, "
                               "special_tokens_map.json), not a file",
                               src, jb->plan.preset);
        jb->tok[0] = (tok_file){strdup(src), names[0].name, sb.st_size};
        if (!jb->tok[0].src) return mlm_err_set(err, MLM_ERR_NOMEM, "synth: out of memory");
        jb->n_tok = 1;
        jb->total += sb.st_size;
        return MLM_OK;
    }
    for (int i = 0; i < n_names; i++) {
        char *path = mlm_path_join(src, names[i].name);
        if (!path) return mlm_err_set(err, MLM_ERR_NOMEM, "synth: out of memory");
        struct stat fs;
        int found = stat(path, &fs) == 0, e = errno, ok = found && S_ISREG(fs.st_mode);
        if (!ok && names[i].required) {
            mlm_status st = mlm_err_set(err, MLM_ERR_IO, "%s: tokenizer to copy: %s", path,
                                        found ? "not a regular file" : strerror(e));
            free(path);
            return st;
        }
        if (!ok) {
            free(path);
            continue;
        }
        jb->tok[jb->n_tok++] = (tok_file){path, names[i].name, fs.st_size};
        jb->total += fs.st_size;
    }
    return MLM_OK;
}

static char *out_path(const job *jb, const char *name) {
    return mlm_path_join(jb->p->out_dir, name);
}

static mlm_status job_prepare(const mlm_synth_params *p, int32_t n_layer, job *jb, mlm_error *err) {
    memset(jb, 0, sizeof *jb);
    jb->p = p;
    if (!p->out_dir || !p->out_dir[0])
        return mlm_err_set(err, MLM_ERR_INVALID_ARG, "synth: no output directory given");
    if (p->max_shard_bytes < 0)
        return mlm_err_set(err, MLM_ERR_INVALID_ARG, "synth: max_shard_bytes %lld is negative",
                           (long long)p->max_shard_bytes);
    mlm_status st = mlm_synth_plan_make_layers(p, n_layer, &jb->plan, err);
    if (st) return st;
    const mlm_synth_plan *pl = &jb->plan;
    jb->specs = calloc((size_t)pl->n_tensors, sizeof *jb->specs);
    if (!jb->specs) return mlm_err_set(err, MLM_ERR_NOMEM, "synth: out of memory");
    for (int64_t i = 0; i < pl->n_tensors; i++) {
        const mlm_synth_tensor *t = &pl->tensors[i];
        mlm_tensor_spec *s = &jb->specs[i];
        s->name = t->name;
        s->dtype = pl->dtype;
        s->n_dim = t->n_dim;
        for (int k = 0; k < t->n_dim; k++)
            s->shape[k] = t->shape[k];
    }
    if (pl->format == MLM_SYNTH_HF) {
        st = mlm_safetensors_writer_create(p->out_dir, pl->files[0], jb->specs, pl->n_tensors,
                                           p->max_shard_bytes, &jb->st, err);
        if (st) return st;
        jb->total += (int64_t)mlm_safetensors_writer_total_bytes(jb->st);
        jb->small[jb->n_small++] = (small_file){"config.json", pl->config_json};
        jb->small[jb->n_small++] = (small_file){"generation_config.json", pl->generation_json};
        if (pl->preprocessor_json)
            jb->small[jb->n_small++] =
                (small_file){"preprocessor_config.json", pl->preprocessor_json};
    } else {
        int64_t first = 0;
        for (int r = 0; r < pl->n_files; r++) {
            int64_t n = 0;
            while (first + n < pl->n_tensors && pl->tensors[first + n].file == r)
                n++;
            char *path = out_path(jb, pl->files[r]);
            if (!path) return mlm_err_set(err, MLM_ERR_NOMEM, "synth: out of memory");
            st = mlm_pytorch_writer_create(path, jb->specs + first, n, &jb->pt[r], err);
            free(path);
            if (st) return st;
            jb->total += (int64_t)mlm_pytorch_writer_total_bytes(jb->pt[r]);
            first += n;
        }
        jb->small[jb->n_small++] = (small_file){"params.json", pl->params_json};
    }
    for (int i = 0; i < jb->n_small; i++)
        jb->total += (int64_t)strlen(jb->small[i].text);
    return p->tokenizer ? plan_tokenizer(jb, err) : MLM_OK;
}

static void progress(job *jb, int64_t done) {
    jb->done = done;
    if (jb->p->progress) jb->p->progress(jb->p->progress_ctx, done, jb->total);
}

/* Creates DIR and its missing parents. */
static mlm_status make_dirs(const char *dir, mlm_error *err) {
    char *p = strdup(dir);
    if (!p) return mlm_err_set(err, MLM_ERR_NOMEM, "synth: out of memory");
    for (char *s = p + 1;; s++) {
        int end = *s == 0;
        if (*s == '/' || end) {
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                mlm_status st = mlm_err_set(err, MLM_ERR_IO, "%s: cannot create directory: %s", p,
                                            strerror(errno));
                free(p);
                return st;
            }
            if (end) break;
            *s = '/';
        }
    }
    free(p);
    if (!mlm_is_dir(dir))
        return mlm_err_set(err, MLM_ERR_IO, "%s: exists and is not a directory", dir);
    return MLM_OK;
}

// ---- the generator thread ----

/* Values are generated on a second thread into a ring of chunks while this one writes the
 * previous ones, so generation overlaps the write syscalls and the disk. A chunk holds
 * part of one tensor; the ring bounds memory to RING x CHUNK_BYTES. */
#define RING 4

typedef struct ring {
    const mlm_synth_plan *plan;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned char *buf[RING]; /* owned */
    size_t len[RING];
    int file[RING]; /* the plan file the chunk belongs to */
    int64_t produced, consumed;
    int done, stop;
} ring;

static void *generate(void *arg) {
    ring *rg = arg;
    const mlm_synth_plan *pl = rg->plan;
    size_t es = mlm_dtype_size(pl->dtype);
    int64_t per_chunk = (int64_t)(CHUNK_BYTES / es);
    for (int64_t i = 0; i < pl->n_tensors; i++) {
        const mlm_synth_tensor *t = &pl->tensors[i];
        int64_t numel = 1;
        for (int k = 0; k < t->n_dim; k++)
            numel *= t->shape[k];
        for (int64_t e = 0; e < numel; e += per_chunk) {
            pthread_mutex_lock(&rg->mu);
            while (!rg->stop && rg->produced - rg->consumed == RING)
                pthread_cond_wait(&rg->cv, &rg->mu);
            int stop = rg->stop;
            pthread_mutex_unlock(&rg->mu);
            if (stop) return NULL;
            int slot = (int)(rg->produced % RING);
            int64_t k = numel - e < per_chunk ? numel - e : per_chunk;
            mlm_synth_fill(t, pl->seed, pl->dtype, e, k, rg->buf[slot]);
            rg->len[slot] = (size_t)k * es;
            rg->file[slot] = t->file;
            pthread_mutex_lock(&rg->mu);
            rg->produced++;
            pthread_cond_broadcast(&rg->cv);
            pthread_mutex_unlock(&rg->mu);
        }
    }
    pthread_mutex_lock(&rg->mu);
    rg->done = 1;
    pthread_cond_broadcast(&rg->cv);
    pthread_mutex_unlock(&rg->mu);
    return NULL;
}

/* Finishes weight file R: the safetensors set (R 0 of 1) or consolidated file R. */
static mlm_status finish_file(job *jb, int r, mlm_error *err) {
    return jb->st ? mlm_safetensors_writer_finish(jb->st, err)
                  : mlm_pytorch_writer_finish(jb->pt[r], err);
}

/* Bytes of weight files written so far. */
static int64_t weights_written(const job *jb) {
    if (jb->st) return (int64_t)mlm_safetensors_writer_written(jb->st);
    int64_t n = 0;
    for (int r = 0; r < jb->plan.n_files; r++)
        n += (int64_t)mlm_pytorch_writer_written(jb->pt[r]);
    return n;
}

/* Writes every weight file: chunks come from the generator thread in plan order. */
static mlm_status write_weights(job *jb, mlm_error *err) {
    ring rg = {.plan = &jb->plan};
    mlm_status st = MLM_OK;
    pthread_mutex_init(&rg.mu, NULL);
    pthread_cond_init(&rg.cv, NULL);
    for (int i = 0; i < RING; i++)
        if (!(rg.buf[i] = malloc(CHUNK_BYTES)))
            st = mlm_err_set(err, MLM_ERR_NOMEM, "synth: out of memory");
    pthread_t th;
    int started = 0;
    if (!st) {
        if (pthread_create(&th, NULL, generate, &rg) != 0)
            st = mlm_err_set(err, MLM_ERR_INTERNAL, "synth: cannot start a thread");
        else
            started = 1;
    }
    int file = 0;
    while (!st) {
        pthread_mutex_lock(&rg.mu);
        while (rg.consumed == rg.produced && !rg.done)
            pthread_cond_wait(&rg.cv, &rg.mu);
        int have = rg.consumed < rg.produced;
        pthread_mutex_unlock(&rg.mu);
        if (!have) break;
        int slot = (int)(rg.consumed % RING);
        while (!st && file < rg.file[slot])
            st = finish_file(jb, file++, err);
        if (!st)
            st = jb->st ? mlm_safetensors_writer_write(jb->st, rg.buf[slot], rg.len[slot], err)
                        : mlm_pytorch_writer_write(jb->pt[file], rg.buf[slot], rg.len[slot], err);
        pthread_mutex_lock(&rg.mu);
        rg.consumed++;
        pthread_cond_broadcast(&rg.cv);
        pthread_mutex_unlock(&rg.mu);
        if (!st) progress(jb, weights_written(jb));
    }
    while (!st && file < jb->plan.n_files)
        st = finish_file(jb, file++, err);
    if (started) {
        pthread_mutex_lock(&rg.mu);
        rg.stop = 1;
        pthread_cond_broadcast(&rg.cv);
        pthread_mutex_unlock(&rg.mu);
        pthread_join(th, NULL);
    }
    pthread_mutex_destroy(&rg.mu);
    pthread_cond_destroy(&rg.cv);
    for (int i = 0; i < RING; i++)
        free(rg.buf[i]);
    if (!st) progress(jb, weights_written(jb));
    return st;
}

static mlm_status copy_tokenizer(job *jb, const tok_file *tf, mlm_outfile *out, mlm_error *err) {
    const char *src = tf->src;
    char *dst = out_path(jb, tf->name);
    if (!dst) return mlm_err_set(err, MLM_ERR_NOMEM, "synth: out of memory");
    int fd = open(src, O_RDONLY | O_CLOEXEC);
    mlm_status st = fd < 0
                        ? mlm_err_set(err, MLM_ERR_IO, "%s: cannot open: %s", src, strerror(errno))
                        : mlm_outfile_open(out, dst, (uint64_t)tf->size, err);
    int64_t copied = 0;
    while (!st) {
        ssize_t n = read(fd, jb->chunk, CHUNK_BYTES);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) st = mlm_err_set(err, MLM_ERR_IO, "%s: read failed: %s", src, strerror(errno));
        if (n <= 0) break;
        st = mlm_outfile_write(out, jb->chunk, (size_t)n, err);
        copied += n;
        progress(jb, jb->done + n);
    }
    if (!st && copied != tf->size)
        st = mlm_err_set(err, MLM_ERR_IO, "%s: changed size while being copied", src);
    if (!st) st = mlm_outfile_sync(out, err);
    if (fd >= 0) close(fd);
    free(dst);
    return st;
}

static mlm_status run(job *jb, mlm_error *err) {
    const mlm_synth_plan *pl = &jb->plan;
    mlm_status st = make_dirs(jb->p->out_dir, err);
    if (st) return st;
    jb->chunk = malloc(CHUNK_BYTES);
    if (!jb->chunk) return mlm_err_set(err, MLM_ERR_NOMEM, "synth: out of memory");
    progress(jb, 0);
    if ((st = write_weights(jb, err))) return st;
    for (int i = 0; i < jb->n_small; i++) {
        char *path = out_path(jb, jb->small[i].name);
        if (!path) return mlm_err_set(err, MLM_ERR_NOMEM, "synth: out of memory");
        size_t len = strlen(jb->small[i].text);
        st = mlm_outfile_put(&jb->small_out[i], path, jb->small[i].text, len, err);
        free(path);
        if (st) return st;
        progress(jb, jb->done + (int64_t)len);
    }
    for (int i = 0; i < jb->n_tok; i++)
        if ((st = copy_tokenizer(jb, &jb->tok[i], &jb->small_out[MAX_SMALL + i], err))) return st;
    /* Everything is complete on disk under temporary names: now give them their names. */
    if (jb->st) st = mlm_safetensors_writer_commit(jb->st, err);
    for (int r = 0; !st && r < pl->n_files && jb->pt[r]; r++)
        st = mlm_pytorch_writer_commit(jb->pt[r], err);
    for (int i = 0; !st && i < MAX_SMALL + MAX_TOK; i++)
        if (jb->small_out[i].tmp) st = mlm_outfile_commit(&jb->small_out[i], err);
    if (!st) st = mlm_fsync_dir(jb->p->out_dir, err);
    if (!st) progress(jb, jb->total);
    return st;
}

// ---- public API ----

mlm_status mlm_synth_total_bytes_layers(const mlm_synth_params *p, int32_t n_layer, int64_t *total,
                                        mlm_error *err) {
    *total = 0;
    if (!p) return mlm_err_set(err, MLM_ERR_INVALID_ARG, "synth: no parameters");
    job jb;
    mlm_status st = job_prepare(p, n_layer, &jb, err);
    if (!st) *total = jb.total;
    job_free(&jb);
    return st;
}

mlm_status mlm_synth_layers(const mlm_synth_params *p, int32_t n_layer, mlm_error *err) {
    if (!p) return mlm_err_set(err, MLM_ERR_INVALID_ARG, "synth: no parameters");
    job jb;
    mlm_status st = job_prepare(p, n_layer, &jb, err);
    if (!st) st = run(&jb, err);
    job_free(&jb); /* removes every temporary file left by a failure */
    return st;
}

mlm_status mlm_synth_total_bytes(const mlm_synth_params *p, int64_t *total, mlm_error *err) {
    return mlm_synth_total_bytes_layers(p, p ? p->n_layer : 0, total, err);
}

mlm_status mlm_synth(const mlm_synth_params *p, mlm_error *err) {
    return mlm_synth_layers(p, p ? p->n_layer : 0, err);
}
