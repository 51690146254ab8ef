/* meshlm.h: the public C API of meshlm, and its manual.
 *
 * meshlm is an inference engine for Meta's Llama 3 family and Microsoft Phi-4.
 * This header is the only one the command-line tools include. Conventions:
 *   - Every function that can fail returns an mlm_status and, when given a non-NULL
 *     mlm_error *, fills it with a message naming the file, field or limit.
 *   - Heap handles pair *_load / *_open with *_free; *_free(NULL) is a no-op.
 *   - Caller-owned structs pair *_init with *_deinit.
 *   - Token ids and positions are int32_t, element counts int64_t, byte sizes size_t.
 *   - Handles are immutable after loading and may be shared between threads, except
 *     where a function says otherwise.
 *   - Getters are mlm_<object>_<thing>(object); where mlm_<object>_<thing> is itself a type
 *     (mlm_sched_stats, mlm_exec_params), mlm_<object>_get_<thing>.
 *
 * Part 1, "run a model": errors, types, configs, tokenizers and chat formats, models, images,
 * the executor, sampling, batched generation and the scheduler (what `meshlm generate`,
 * `chat` and `serve` are built on). Part 2, "files and tools": checkpoint files, weight
 * caches, memory planning, the mesh, CPU features, synthetic checkpoints and GGUF export.
 */
#ifndef MESHLM_H
#define MESHLM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ======== Part 1: run a model ======== */

/* A communicator (part 2, the mesh): models take one for tensor parallelism. */
typedef struct mlm_comm mlm_comm;

/* ---- status and errors ---- */

typedef enum mlm_status {
    MLM_OK = 0,
    MLM_ERR_INVALID_ARG, /* a caller passed a bad value (flag, size, id) */
    MLM_ERR_IO,          /* open/read/map/write failed */
    MLM_ERR_FORMAT,      /* a file's contents are malformed */
    MLM_ERR_UNSUPPORTED, /* well-formed, but something meshlm does not handle */
    MLM_ERR_NOMEM,       /* an allocation failed */
    MLM_ERR_CAPACITY,    /* a fixed pool (KV blocks, batch slots) is full */
    MLM_ERR_BACKEND,     /* a compute backend failed */
    MLM_ERR_CANCELLED,   /* the caller cancelled */
    MLM_ERR_INTERNAL     /* a bug in meshlm */
} mlm_status;

#define MLM_ERROR_MSG_MAX 512

/* Filled by a failing call: the status and a one-line message. */
typedef struct mlm_error {
    mlm_status status;
    char msg[MLM_ERROR_MSG_MAX];
} mlm_error;

/* "ok", "invalid argument", "i/o error", "format error", ... (static strings). */
const char *mlm_status_str(mlm_status status);

/* Fills ERR (which may be NULL) with STATUS and a printf-style message, truncated to
 * MLM_ERROR_MSG_MAX - 1 bytes, and returns STATUS: a program's own failing paths fill an
 * error as the library's do (`return mlm_error_set(err, MLM_ERR_IO, "%s: ...", path);`). */
mlm_status mlm_error_set(mlm_error *err, mlm_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* The library version, "MAJOR.MINOR.PATCH". */
const char *mlm_version(void);

/* ---- dtypes ---- */

/* Element types of checkpoint tensors. Append-only: values are stable. */
typedef enum mlm_dtype {
    MLM_DTYPE_F32 = 0,
    MLM_DTYPE_F16,
    MLM_DTYPE_BF16,
    MLM_DTYPE_F64,
    MLM_DTYPE_I64,
    MLM_DTYPE_I32,
    MLM_DTYPE_I16,
    MLM_DTYPE_I8,
    MLM_DTYPE_U8,
    MLM_DTYPE_BOOL,
    MLM_DTYPE_BFP8, /* block floating point: not a checkpoint dtype; names KV cache types */
    MLM_DTYPE_BFP4,
    MLM_DTYPE_GGML, /* a ggml block-quantized type (GGUF): the view's ggml_type says which */
    MLM_DTYPE_COUNT
} mlm_dtype;

/* "f32", "bf16", ... ; "?" for out-of-range values. */
const char *mlm_dtype_name(mlm_dtype dtype);
/* Bytes per element (0 for out-of-range values). */
size_t mlm_dtype_size(mlm_dtype dtype);

/* ---- model configuration ---- */

typedef enum mlm_family {
    MLM_FAMILY_LLAMA3 = 0, /* LlamaForCausalLM / Meta params.json */
    MLM_FAMILY_PHI3,       /* Phi3ForCausalLM (Phi-4) */
    MLM_FAMILY_MLLAMA,     /* MllamaForConditionalGeneration (Llama 3.2 Vision): a Llama 3
                              decoder with cross-attention layers over a vision tower */
    MLM_FAMILY_QWEN2,      /* Qwen2ForCausalLM (Qwen2, Qwen2.5): Llama-shaped, q/k/v biases */
    MLM_FAMILY_QWEN3       /* Qwen3ForCausalLM (dense): Llama-shaped, q/k RMSNorm per head */
} mlm_family;

#define MLM_MAX_CROSS_LAYERS 32
/* The vision tower of Llama 3.2 Vision (HF vision_config; models.md 6.1). */
typedef struct mlm_vision_config {
    int32_t n_embd;          /* hidden_size (1280) */
    int32_t n_ff;            /* intermediate_size (5120) */
    int32_t n_layer;         /* local layers, num_hidden_layers (32) */
    int32_t n_global_layer;  /* gated global layers, num_global_layers (8) */
    int32_t n_head;          /* attention_heads (16) */
    int32_t n_channels;      /* 3 */
    int32_t image_size;      /* tile side in pixels (560) */
    int32_t patch_size;      /* 14 */
    int32_t max_tiles;       /* max_num_tiles (4) */
    int32_t output_dim;      /* vision_output_dim: (1 + n_intermediate) x n_embd (7680) */
    float norm_eps;
    int32_t n_intermediate;  /* intermediate_layers_indices */
    int32_t intermediate[8];
    int32_t n_aspect;        /* supported_aspect_ratios, (rows, cols) each */
    int32_t aspect[16][2];
} mlm_vision_config;

typedef enum mlm_rope_type {
    MLM_ROPE_NONE = 0, /* plain RoPE */
    MLM_ROPE_LLAMA3,   /* Llama 3.1 frequency scaling */
    MLM_ROPE_FACTORS   /* per-frequency divisors from the model file (GGUF rope_freqs) */
} mlm_rope_type;

#define MLM_MAX_STOP_IDS 8

/* One model's hyper-parameters, read from Meta params.json or HF config.json
 * (+ generation_config.json). Plain data, no pointers. */
typedef struct mlm_config {
    mlm_family family;
    int32_t n_embd;      /* hidden size (dim) */
    int32_t n_layer;
    int32_t n_head;
    int32_t n_kv_head;
    int32_t head_dim;
    int32_t n_ff;        /* MLP hidden size (Meta formula where not given) */
    int32_t n_vocab;
    int32_t n_ctx_train; /* max_position_embeddings (0 if unknown) */
    float norm_eps;
    float rope_theta;
    mlm_rope_type rope_type;
    float rope_factor;          /* llama3 scaling: factor */
    float rope_low_freq_factor;
    float rope_high_freq_factor;
    int32_t rope_orig_ctx;      /* original_max_position_embeddings */
    int tied_embeddings;        /* LM head shares the embedding matrix */
    int qkv_bias;               /* q, k and v projections have biases (Qwen2; Qwen3's
                                   attention_bias) */
    int qk_norm;                /* q and k RMSNormed per head before RoPE (Qwen3) */
    int32_t bos_id;             /* -1 if none */
    int32_t n_stop_ids;
    int32_t stop_ids[MLM_MAX_STOP_IDS]; /* eos ids, config order */
    int32_t pad_id;             /* -1 if none */
    char source[16];            /* "params.json" or "config.json" */
    /* MLM_FAMILY_MLLAMA: the decoder layers that are cross-attention layers (of n_layer, HF
     * numbering), the image token, the vision tower. n_cross 0 and image_token_id -1 else. */
    int32_t n_cross;
    int32_t cross_layers[MLM_MAX_CROSS_LAYERS];
    int32_t image_token_id;
    mlm_vision_config vision;
} mlm_config;

/* Reads DIR/params.json (Meta) or DIR/config.json (HF, plus DIR/generation_config.json
 * when present; its eos ids take precedence). PATH may also name the json file itself, or
 * a GGUF file (told by its magic), or a folder holding one (and no config.json): then the
 * metadata is read as llama.cpp does (architectures llama and phi3), source "gguf".
 * The family comes from the file contents, never from the directory name.
 * FORMAT on missing or mistyped fields, naming the file and the field. */
mlm_status mlm_config_load(const char *path, mlm_config *out, mlm_error *err);

/* "llama3", "phi3", "mllama", "qwen2", "qwen3". */
const char *mlm_family_name(mlm_family family);

/* Parameter count implied by the config (embedding, layers, norms, LM head if untied); for
 * mllama the text decoder's, cross-attention layers included, without the vision tower. */
int64_t mlm_config_n_params(const mlm_config *cfg);

/* ---- tokenizer ---- */

typedef struct mlm_tokenizer mlm_tokenizer;

/* A caller-owned growable list of token ids. */
typedef struct mlm_tokens {
    int32_t *ids; /* owned */
    int64_t n;
    int64_t cap;
} mlm_tokens;

void mlm_tokens_init(mlm_tokens *t);
void mlm_tokens_deinit(mlm_tokens *t);
/* Appends one id (NOMEM on allocation failure). */
mlm_status mlm_tokens_push(mlm_tokens *t, int32_t id);

/* Loads a tokenizer from a file or a model directory. A file is told by its content, not
 * its name: a GGUF file (magic "GGUF": the vocabulary llama.cpp reads from tokenizer.ggml.*,
 * model "gpt2" with pre "llama-bpe", "dbrx", "smollm", "gpt-2", "qwen2" or "default", tokenized as
 * llama.cpp tokenizes it, chat format from tokenizer.chat_template), a Hugging Face
 * tokenizer.json (byte-level BPE: Phi-4, SmolLM2, Llama 3 HF repos, GPT-2 style; the chat
 * template of a tokenizer_config.json beside it picks the chat format), vocab.json (with
 * merges.txt and tokenizer_config.json beside it, read as transformers' GPT2Tokenizer), or a
 * tiktoken BPE file (Llama 3 "tokenizer.model": base64 token, space, rank per line; for
 * Llama 3 the 256 special tokens 128000..128255 are added after the 128000 ranks). A
 * directory is searched for tokenizer.model, original/tokenizer.model, tokenizer.json,
 * vocab.json + merges.txt, then the first *.gguf file (by name) holding a GGUF. Byte-level
 * vocabularies may lack single bytes (SmolLM2 lacks 21): such a byte in the input is
 * dropped, as the file's own tokenizer drops it (llama.cpp after merging, tokenizers before,
 * or as its unk_token). FORMAT names the file and the line, key or field of a bad entry, or
 * says what a file that is no tokenizer looks like (a safetensors checkpoint, a
 * SentencePiece model, ...); UNSUPPORTED names a component meshlm does not implement (a
 * tokenizer.json WordPiece or Unigram model, a normalizer, another pre-tokenizer; a GGUF
 * tokenizer.ggml.model or tokenizer.ggml.pre it does not know) and its type: nothing is
 * tokenized approximately. */
mlm_status mlm_tokenizer_load(const char *path, mlm_tokenizer **out, mlm_error *err);
void mlm_tokenizer_free(mlm_tokenizer *tok);

/* Whether PATH is a file, or a model directory holding a tokenizer file (or GGUF file)
 * that mlm_tokenizer_load would use (see there). */
int mlm_tokenizer_present(const char *path);

/* Vocabulary size including special tokens. */
int32_t mlm_tokenizer_n_vocab(const mlm_tokenizer *tok);
int32_t mlm_tokenizer_bos_id(const mlm_tokenizer *tok);
/* The id of a special token by its text ("<|eot_id|>"), or -1. */
int32_t mlm_tokenizer_special_id(const mlm_tokenizer *tok, const char *text);
/* Whether ID is a special token (for Hugging Face files: an added token marked special). */
int mlm_tokenizer_is_special(const mlm_tokenizer *tok, int32_t id);

typedef struct mlm_encode_params {
    int add_bos;       /* prepend the BOS id (default 0); the BOS is Llama 3's
                          <|begin_of_text|>, for Hugging Face files the token the
                          post-processor puts before the text (none for Phi-4), for GGUF
                          files tokenizer.ggml.bos_token_id when tokenizer.ggml.add_bos_token
                          is true (absent: llama.cpp's default, true only for llama-bpe) */
    int parse_special; /* special-token text in the input becomes its id (default 0:
                          it is encoded as plain text, like Meta's encoder). For Hugging
                          Face files 0 is tokenizers' split_special_tokens=True: added
                          tokens marked special stay text, other added tokens are always
                          matched, and a matched token's lstrip/rstrip absorb whitespace;
                          for GGUF files llama.cpp's parse_special: control tokens only
                          with 1, user-defined ones always */
} mlm_encode_params;

mlm_encode_params mlm_encode_default_params(void);

/* Encodes LEN bytes of TEXT and appends the ids to OUT. Invalid UTF-8 is replaced by
 * U+FFFD first (maximal subparts, as Python's bytes.decode(errors="replace")).
 * Thread-safe for concurrent calls on one tokenizer. */
mlm_status mlm_tokenizer_encode(const mlm_tokenizer *tok, const char *text, size_t len,
                                const mlm_encode_params *params, mlm_tokens *out,
                                mlm_error *err);

/* The raw bytes of token ID (special tokens give their text). NULL for an invalid id. */
const char *mlm_tokenizer_token_bytes(const mlm_tokenizer *tok, int32_t id, size_t *len);

/* Decodes N ids into a malloc'd, NUL-terminated byte string (*OUT, length *LEN). The bytes
 * are the exact concatenation of the tokens' bytes (not UTF-8 repaired). INVALID_ARG for an
 * id outside the vocabulary. */
mlm_status mlm_tokenizer_decode(const mlm_tokenizer *tok, const int32_t *ids, int64_t n,
                                char **out, size_t *len, mlm_error *err);

/* Streaming decode: feed ids one at a time, get back only complete UTF-8 characters;
 * an incomplete multi-byte sequence is held until its continuation arrives, and an
 * invalid one is emitted as U+FFFD. Caller-owned. */
typedef struct mlm_detok {
    unsigned char pending[8];
    int n_pending;
} mlm_detok;

void mlm_detok_init(mlm_detok *d);
/* Appends the printable bytes of token ID to BUF (capacity CAP, at least 64 + the longest
 * token); *N gets the count written. */
mlm_status mlm_detok_push(mlm_detok *d, const mlm_tokenizer *tok, int32_t id, char *buf,
                          size_t cap, size_t *n, mlm_error *err);
/* Emits whatever is held (as U+FFFD) and resets. */
size_t mlm_detok_flush(mlm_detok *d, char *buf, size_t cap);

/* ---- chat formats ---- */

typedef struct mlm_chat_message {
    const char *role;    /* "system", "user", "assistant", "ipython"/"tool" */
    const char *content; /* UTF-8 text */
} mlm_chat_message;

/* Encodes a dialog in the tokenizer's chat format and appends to OUT. The format follows
 * from the chat template when the tokenizer has one, else from the special tokens
 * (mlm_tokenizer_chat_format); the template itself is not run. Llama 3 is Meta's
 * ChatFormat: BOS, then per message <|start_header_id|>role<|end_header_id|>\n\n content
 * <|eot_id|>. ChatML (Phi-4) is per message <|im_start|>role<|im_sep|>content<|im_end|>, no
 * BOS, no newlines (roles: system, user, assistant). ChatML with newlines (SmolLM2, Qwen) is
 * per message <|im_start|>role\ncontent<|im_end|>\n, the generation prompt
 * <|im_start|>assistant\n, and when the template holds a fixed system message (SmolLM2's
 * "You are a helpful AI assistant named SmolLM, trained by Hugging Face") it comes first
 * when the first message is not a system one (roles: system, user, assistant, tool). Each
 * text between two special tokens is encoded as one piece, whitespace next to those tokens
 * absorbed as Hugging Face's lstrip/rstrip flags do, and special-token text in content
 * stays plain text; with ADD_GENERATION_PROMPT an open assistant header follows.
 * UNSUPPORTED when the tokenizer has no chat format; INVALID_ARG for an unknown role. */
mlm_status mlm_tokenizer_encode_chat(const mlm_tokenizer *tok, const mlm_chat_message *msgs,
                                     int n_msgs, int add_generation_prompt, mlm_tokens *out,
                                     mlm_error *err);

/* How a dialog is framed beyond its messages. */
typedef enum mlm_chat_thinking {
    MLM_THINK_DEFAULT = 0, /* the template's default (Qwen3: thinking on) */
    MLM_THINK_ON,
    MLM_THINK_OFF /* Qwen3's enable_thinking=False: the generation prompt closes an empty
                     <think></think> block, so the model answers at once */
} mlm_chat_thinking;

typedef struct mlm_chat_opts {
    int add_generation_prompt;
    mlm_chat_thinking thinking;   /* read by formats that think, ignored by the others */
    const char *const *reasoning; /* NULL, or one entry per message: an assistant message's
                                     reasoning (OpenAI-style reasoning_content) or NULL; read
                                     by formats that think */
} mlm_chat_opts;

/* mlm_tokenizer_encode_chat with OPTS (NULL: a generation prompt, the default thinking).
 * A format that thinks (Qwen3's template: ChatML with newlines whose template switches
 * <think> blocks on enable_thinking) writes what that template writes: no default system
 * message; an assistant message's reasoning is its entry in OPTS->reasoning, else the text
 * of its content between "<think>" and the first "</think>" (newlines trimmed), its content
 * what follows the last "</think>"; a <think> block is written for the assistant messages after the last
 * user query (a user message that is not one <tool_response> block) when the message is
 * the last one or has reasoning, and only the content elsewhere; with thinking off the
 * generation prompt is <|im_start|>assistant\n<think>\n\n</think>\n\n. */
mlm_status mlm_tokenizer_encode_chat_opts(const mlm_tokenizer *tok, const mlm_chat_message *msgs,
                                          int n_msgs, const mlm_chat_opts *opts,
                                          mlm_tokens *out, mlm_error *err);

/* Whether the chat format thinks: its template writes <think> blocks and takes a thinking
 * switch (Qwen3), and the vocabulary has the <think> and </think> tokens. */
int mlm_tokenizer_chat_thinks(const mlm_tokenizer *tok);

/* Where a reply of a format that thinks holds its reasoning and its content. */
typedef struct mlm_reasoning_split {
    int has_reasoning;        /* the reply opens a <think> block (after leading whitespace) */
    size_t reasoning_begin;   /* the reasoning is [reasoning_begin, reasoning_end): the text */
    size_t reasoning_end;     /* after "<think>" up to "</think>" or the end */
    size_t content_begin;     /* the content is [content_begin, settled): all of the reply
                                 without a <think> block, else what follows "</think>" */
    size_t settled;           /* how much of the reply has a known place: a reply still being
                                 generated holds back what may be the start of a tag */
} mlm_reasoning_split;

/* Splits the reply TEXT[0..LEN) as vLLM's qwen3 reasoning parser does for a model that
 * writes its own <think>: a reply that starts (after whitespace) with "<think>" has the
 * reasoning up to "</think>" and the content after it (a reply cut off before "</think>"
 * is all reasoning); any other reply is all content. With FINAL 0 the reply is still
 * growing: a leading stretch that may still become "<think>" and a trailing one that may
 * become "</think>" are not settled. */
void mlm_chat_split_reasoning(const char *text, size_t len, int final, mlm_reasoning_split *out);

/* One piece of a message's content: text, or (TEXT NULL) a token id put in as it is, as
 * the image token of a vision model (mlm_model_image_token) where an image goes. */
typedef struct mlm_chat_part {
    const char *text;
    int32_t token;
} mlm_chat_part;

/* A message whose content is a list of parts. */
typedef struct mlm_chat_parts {
    const char *role;
    const mlm_chat_part *parts;
    int32_t n_parts;
} mlm_chat_parts;

/* mlm_tokenizer_encode_chat with each message's content as parts, in the Llama 3 format (the
 * vision model's; UNSUPPORTED for other formats): as Meta's ChatFormat does with a message's
 * items, each text part is encoded on its own and each token part put in as it is (an image
 * item becomes the image token). */
mlm_status mlm_tokenizer_encode_chat_parts(const mlm_tokenizer *tok, const mlm_chat_parts *msgs,
                                           int n_msgs, int add_generation_prompt, mlm_tokens *out,
                                           mlm_error *err);

/* The chat format encode_chat uses: "llama3", "chatml" (Phi-4's <|im_sep|> form),
 * "chatml-newline", or NULL when there is none. */
const char *mlm_tokenizer_chat_format(const mlm_tokenizer *tok);

/* The same as an enum: what the tool-call calls below dispatch on. */
typedef enum mlm_chat_kind {
    MLM_CHAT_NONE = 0,
    MLM_CHAT_LLAMA3,   /* "llama3": <|start_header_id|> role <|end_header_id|> "\n\n" content
                          <|eot_id|> */
    MLM_CHAT_CHATML,   /* "chatml": <|im_start|> role <|im_sep|> content <|im_end|> (Phi-4) */
    MLM_CHAT_CHATML_NL /* "chatml-newline": <|im_start|> role "\n" content <|im_end|> "\n"
                          (SmolLM2, Qwen) */
} mlm_chat_kind;
mlm_chat_kind mlm_tokenizer_chat_kind(const mlm_tokenizer *tok);

/* The fixed system message the chat template adds when a dialog has none (ChatML with
 * newlines, e.g. SmolLM2's), or NULL. */
const char *mlm_tokenizer_chat_system(const mlm_tokenizer *tok);

/* The chat format's end-of-turn ids, those the tokenizer has: Llama 3 <|eot_id|>,
 * <|eom_id|>, <|end_of_text|>; ChatML <|im_end|>, <|im_start|>, <|endoftext|>; then a GGUF
 * file's tokenizer.ggml.eos_token_id when the list lacks it. Writes at
 * most MAX of them into IDS (which may be NULL when MAX is 0) and returns how many there
 * are (0 without a chat format). */
int32_t mlm_tokenizer_chat_stop_ids(const mlm_tokenizer *tok, int32_t *ids, int32_t max);

/* ---- tool calls ----
 *
 * OpenAI-style tools in the chat formats, as the models' own chat templates write them and
 * as vLLM's parsers read the replies:
 *   MLM_CHAT_LLAMA3     Llama 3.1/3.2 Instruct's template: the tools (JSON, indent 4) in the
 *                       first user message, a call written {"name": N, "parameters": ARGS},
 *                       a tool result as role ipython holding the result as a JSON string
 *                       (vLLM's llama3_json parser)
 *   MLM_CHAT_CHATML_NL  Hermes style (Qwen2.5's and Qwen3's templates, vLLM's hermes parser):
 *   MLM_CHAT_CHATML     the tools in the system message, calls as <tool_call>\n{"name": N,
 *                       "arguments": ARGS}\n</tool_call>, results as <tool_response> blocks
 *                       in a user turn
 * Tools are OpenAI's "tools" array as JSON text ([{"type": "function", "function": {"name":
 * ..., "description": ..., "parameters": {...}}}, ...]). */

/* One call: in a dialog's assistant message, or found in a reply. */
typedef struct mlm_tool_call {
    const char *id;        /* the call's id (no template writes it; may be NULL in a dialog) */
    const char *name;      /* the function's name */
    const char *arguments; /* the arguments object as JSON text */
} mlm_tool_call;

/* A dialog message with what tools add to it. */
typedef struct mlm_chat_turn {
    const char *role;           /* "system", "user", "assistant", "tool" ("ipython" is Llama 3's
                                   name for it) */
    const char *content;        /* UTF-8 text; NULL: none ("") */
    const char *reasoning;      /* an assistant message's reasoning (reasoning_content), or
                                   NULL (mlm_chat_opts's reasoning) */
    const mlm_tool_call *calls; /* an assistant message's calls, N_CALLS of them */
    int32_t n_calls;
} mlm_chat_turn;

typedef struct mlm_chat_dialog {
    const mlm_chat_turn *msgs;
    int32_t n_msgs;
    const char *tools; /* OpenAI's "tools" array as JSON text, or NULL: no tools */
    int add_generation_prompt;
    mlm_chat_thinking thinking;
} mlm_chat_dialog;

/* Encodes DIALOG in the tokenizer's chat format and appends to OUT. Without tools it is
 * mlm_tokenizer_encode_chat_opts of the messages' role and content (calls are not written).
 * With tools, the messages are first rewritten as the format's template does with tools:
 *   llama3: a system message "Environment: ipython\nCutting Knowledge Date: December 2023\n
 *     Today Date: 26 Jul 2024\n\n" + the first message's content trimmed when it is a system
 *     one (always this date: the template's own when strftime_now is absent); then a user
 *     message with the tool instructions, each tool as Python's json.dumps(indent=4) + "\n\n"
 *     and the next message's content trimmed (whatever its role, as the template does); then
 *     per message: a call (one per message) as {"name": "N", "parameters": ARGS}, a tool
 *     result as role "ipython" holding json.dumps(content), any other message trimmed.
 *   chatml-newline, chatml: a system message: the first message's content when it is a
 *     system one, else the template's default system message (mlm_tokenizer_chat_system)
 *     + "\n\n" when there is one, + the tool instructions with each tool as
 *     json.dumps(tool); then per message: an assistant message's calls as <tool_call> blocks
 *     after its content, consecutive tool results joined into one user message of
 *     <tool_response> blocks, any other message as it is.
 * Trimming is Python's str.strip() (Unicode White_Space), JSON is written as
 * json.dumps(ensure_ascii=False) writes it, and a call's arguments are parsed and dumped
 * again (the template gets a dict; text that is no JSON goes in as a JSON string).
 * UNSUPPORTED when the tokenizer has no chat format; INVALID_ARG with a message that starts
 * with the field at fault in the OpenAI request's terms and ": " ("messages", "messages[I]",
 * "messages[I].tool_calls", "tools"): an unknown role, tools that are not a JSON array,
 * and what the llama3 template refuses (no message after the system one, more than one call
 * in a message); NOMEM. */
mlm_status mlm_tokenizer_encode_dialog(const mlm_tokenizer *tok, const mlm_chat_dialog *dialog,
                                       mlm_tokens *out, mlm_error *err);

/* The calls found in a reply. */
typedef struct mlm_tool_reply {
    char *content;        /* the reply's text when it holds no call (as it is, "" for an
                             empty reply); with calls, the text before the first one (ChatML
                             forms, right-trimmed), NULL when there is none or only whitespace
                             (always NULL for llama3) */
    mlm_tool_call *calls; /* N_CALLS calls in reply order, their strings owned by the reply:
                             ID "call_" + 24 random [A-Za-z0-9], NAME a declared function,
                             ARGUMENTS the arguments object as compact JSON (Python's
                             json.dumps(ensure_ascii=False, separators=(",", ":")), key order
                             kept) */
    int32_t n_calls;
} mlm_tool_reply;

/* Finds the tool calls in TEXT (LEN bytes), a finished reply in format KIND, into OUT
 * (zeroed first), as vLLM's llama3_json and hermes parsers do:
 *   llama3: the reply, trimmed (an optional leading "<|python_tag|>" skipped), is one or more
 *     JSON objects {"name": N, "parameters" (or "arguments"): {...}}, separated by ';' and/or
 *     whitespace, nothing else.
 *   chatml-newline, chatml: each <tool_call>...</tool_call> block (the last may lack its
 *     </tool_call>) holds {"name": N, "arguments" (or "parameters"): {...}}; text after the
 *     last block is dropped.
 * Only functions declared in TOOLS (JSON text; NULL: none) count: when any would-be call has
 * an undeclared name, unparsable JSON, or arguments that are no object, the reply holds no
 * call and is all content; a format without tool calls (MLM_CHAT_NONE) finds none. RNG (a
 * caller-owned state, any seed; NULL: a fixed one) makes the ids and is advanced.
 * INVALID_ARG ("tools: ...") when TOOLS is not a JSON array; NOMEM (OUT then holds nothing). */
mlm_status mlm_tool_reply_parse(mlm_chat_kind kind, const char *tools, const char *text,
                                size_t len, uint64_t *rng, mlm_tool_reply *out, mlm_error *err);
void mlm_tool_reply_deinit(mlm_tool_reply *reply);

/* For streaming: of TEXT (LEN bytes), the reply generated so far in format KIND, how many
 * leading bytes are surely content, whatever comes next; the rest may be, or may become, a
 * tool call and is held back until more text or the end (then mlm_tool_reply_parse
 * decides). llama3: 0 while the reply is only whitespace, starts with '{' or with (a prefix
 * of) "<|python_tag|>" after whitespace, else LEN. ChatML forms: up to the first
 * "<tool_call>", or up to a tail that may still grow into one ("<", "<tool", ...), less the
 * whitespace just before it (the content the parse gives is right-trimmed). A character cut
 * short at the end is held back too. It never decreases as TEXT grows. MLM_CHAT_NONE: LEN. */
size_t mlm_tool_reply_settled(mlm_chat_kind kind, const char *text, size_t len);

/* What constrained decoding of calls needs in format KIND: *SCHEMA (malloc'd JSON text) the
 * JSON Schema one call must satisfy: per allowed function {"type": "object", "properties":
 * {"name": {"const": N}, KEY: PARAMS}, "required": ["name", KEY], "additionalProperties":
 * false}, KEY "parameters" (llama3) or "arguments" (ChatML), PARAMS a copy of the
 * function's "parameters" ({"type": "object", "properties": {}} when it has none); the one
 * object when one function is allowed, else {"anyOf": [...]}. Allowed: every function
 * declared in TOOLS, or only the one named ONLY when it is not NULL. *WRAP (may be NULL):
 * the text the format puts around a call for mlm_grammar_compile (ChatML: "<tool_call>\n"
 * before, "\n</tool_call>" after, "\n" between, one call: raise max_values for parallel
 * calls), all zero for a format that writes a call bare (llama3). INVALID_ARG ("tools: ...")
 * when TOOLS is not an array or no declared function is allowed; UNSUPPORTED for
 * MLM_CHAT_NONE; NOMEM. */
struct mlm_grammar_wrap;
mlm_status mlm_tool_call_schema(mlm_chat_kind kind, const char *tools, const char *only,
                                char **schema, struct mlm_grammar_wrap *wrap, mlm_error *err);

/* ---- models ---- */

/* A loaded model: config, weights bound in the compute layout, RoPE tables. Immutable after
 * loading and shareable by any number of executors (threads included).
 *
 * Precision profiles (tt-demos.md section 2) choose each weight's type:
 *   "performance"  attention, w2 and LM head in BFP8, w1/w3 in BFP4, KV cache BFP8
 *   "accuracy"     every matrix BFP8 (the seeds keep Llama 3.1-70B's w1/w3 in BFP4), KV BFP8
 *   "bf16", "f32"  everything in that type
 * The embedding is bf16 in both BFP profiles. Per-layer overrides come from a decoder-config
 * JSON in the seeds' shape ({"decoders": {"31": {"precision_cfg": {"FF1_FF3": "BFP8"}}}});
 * Llama-3.1-8B's performance profile carries the seeds' built-in one.
 *
 * bf16 and f32 weights stay zero-copy views of the mapped checkpoint where it already has
 * that dtype and layout. BFP profiles go through the weight cache: the first load converts
 * the checkpoint (quantize, reorder for the kernels) and writes one cache file atomically;
 * later loads map it read-only. A stale (source files changed), truncated or corrupt cache is
 * detected (key, sizes, checksums of the index and of every tensor) and rebuilt. */
typedef struct mlm_model mlm_model;

typedef enum mlm_tp_reduce { MLM_TP_EXACT = 0, MLM_TP_SUM } mlm_tp_reduce;

typedef struct mlm_model_params {
    const char *optimizations; /* "performance", "accuracy", "bf16", "f32"; NULL = by dtype */
    mlm_dtype dtype;           /* with optimizations NULL: MLM_DTYPE_BF16 (default) or F32 */
    const char *decoder_config; /* per-layer overrides (JSON file), NULL for built-in ones */
    int use_cache;    /* BFP profiles: 1 (default) map/build the cache file, 0 convert in memory */
    const char *cache_dir; /* NULL: $MESHLM_CACHE, else DIR/meshlm-cache, else the user cache
                              dir ($XDG_CACHE_HOME or ~/.cache)/meshlm when DIR is read-only */
    int n_threads;    /* threads for loading conversions; 0 = all cores */
    /* Tensor parallelism (borrowed; NULL or a communicator of one rank: the whole model).
     * Rank r of TP = size binds only its shard: heads [r H/TP, (r+1) H/TP) of q/k/v and
     * their wo columns, rows [r F/TP, ...) of w1/w3 and those columns of w2, and a slice of
     * the LM head's vocabulary; its cache file holds only that shard. The forward pass then
     * gathers every rank's partials of wo and w2 (one per K chunk, a KV head's share of the
     * columns) and sums them in chunk order, as one process does, and gathers the logits: so
     * every rank gets them all, bit-identical to one process's in every profile. */
    mlm_comm *tp;
    /* How the ranks combine the row-parallel products: MLM_TP_EXACT (default) gathers every
     * K chunk's partial and sums them in chunk order, one process's bits in every profile;
     * MLM_TP_SUM all-reduces each rank's own sum of its chunks in rank order: n_kv_head / 2
     * times fewer bytes (for a network between the ranks), but the last bits, and after a
     * rounding step a token, may differ from one process's. Ignored alone. */
    mlm_tp_reduce tp_reduce;
    /* Optional: told what loading does ("cache ...: stale (...); rebuilding") and how far a
     * conversion has got (DONE of TOTAL bytes). Called from the loading thread. */
    void (*on_message)(void *user, const char *message);
    void (*on_progress)(void *user, int64_t done, int64_t total);
    void *user;
} mlm_model_params;

mlm_model_params mlm_model_default_params(void);

/* Loads the model in DIR: HF (config.json + *.safetensors) or Meta (params.json +
 * consolidated.NN.pth, several shards merged). Meta q/k rows are permuted to HF order so one
 * RoPE kernel serves both. A tensor missing, of the wrong shape or of a non-float dtype fails
 * with FORMAT naming the tensor and both shapes. */
mlm_status mlm_model_load(const char *dir, const mlm_model_params *params, mlm_model **out,
                          mlm_error *err);
void mlm_model_free(mlm_model *model);

/* The types profile OPTIMIZATIONS (with DECODER_CONFIG overrides, or NULL) gives the weights of
 * the model at PATH, described in words into BUF, without loading anything: the native
 * profile's types are its file's. */
mlm_status mlm_profile_types_at(const char *path, const char *optimizations,
                                const char *decoder_config, char *buf, size_t size,
                                mlm_error *err);

/* The profile to run the model at PATH in when the user names none: "native" for a GGUF file
 * (each matrix at the file's own bits, q4_k, q6_k, q8_0, ...: BFP would round them a second
 * time, bf16 reads 2 bytes a weight), else "performance" (the seeds' default). Optimizations
 * "native" is only for GGUF files. */
const char *mlm_model_default_profile(const char *path);

/* The model's config (borrowed). */
const mlm_config *mlm_model_config(const mlm_model *model);
/* Bytes of weights the model reads per token (all matrices + embedding row). */
int64_t mlm_model_weight_bytes(const mlm_model *model);
/* Name of the kernel table in use ("avx512", "avx2", "ref"). */
const char *mlm_model_kernels(const mlm_model *model);
/* The profile's name (static to the model); mlm_profile_types_at describes its types. */
const char *mlm_model_profile(const mlm_model *model);
/* The KV cache type the profile asks for: MLM_DTYPE_F32, MLM_DTYPE_BF16 or MLM_DTYPE_BFP8. */
mlm_dtype mlm_model_kv_dtype(const mlm_model *model);
/* The cache file the weights were mapped from ("" if none) and whether this load built it. */
const char *mlm_model_cache_path(const mlm_model *model);
int mlm_model_cache_built(const mlm_model *model);

/* ---- images (Llama 3.2 Vision) ---- */

/* An image for a vision model: decoded (PNG or JPEG: grayscale, RGB, RGBA composited over
 * white, palette), preprocessed as the model's MllamaImageProcessor does (the tile grid with
 * the best fit among the model's aspect ratios, Pillow's BILINEAR resize, zero padding, CLIP
 * normalization, up to max_tiles tiles of image_size pixels; models.md 6.3), and once
 * encoded, the vision encoder's output projected to the text width (n_tiles x tokens per
 * tile rows). Heap handle; mlm_image_free releases it. One image may be bound to any number
 * of sequences. Not thread-safe while mlm_image_encode runs on it. */

#define MLM_MAX_IMAGES 16 /* images one sequence may hold, at most (meshlm's limit) */
#define MLM_IMAGE_MAX_PIXELS ((int64_t)1 << 25) /* width x height accepted, at most */

typedef struct mlm_image mlm_image;

typedef struct mlm_image_info {
    int32_t width, height;   /* as decoded */
    int32_t rows, cols;      /* the tile grid */
    int32_t n_tiles;         /* rows x cols */
    int32_t aspect_ratio_id; /* 1 + the grid's index in the model's supported_aspect_ratios */
    int32_t n_tokens;        /* vision tokens the text attends to: n_tiles x tokens per tile */
    int encoded;
} mlm_image_info;

/* Decodes the image file PATH, or SIZE bytes at DATA (NAME names them in messages: a file
 * name, "messages[0].content[1]"), and preprocesses it for MODEL's vision tower. FORMAT for
 * an empty, truncated or corrupt file, or bytes that are no image; UNSUPPORTED for another
 * format (GIF, WebP, ...), width x height over MLM_IMAGE_MAX_PIXELS (checked on the header,
 * before decoding) or a model without vision; IO when PATH cannot be read; NOMEM. */
mlm_status mlm_image_open(const mlm_model *model, const char *path, mlm_image **out,
                          mlm_error *err);
mlm_status mlm_image_open_memory(const mlm_model *model, const char *name, const void *data,
                                 size_t size, mlm_image **out, mlm_error *err);
void mlm_image_free(mlm_image *image);
void mlm_image_get_info(const mlm_image *image, mlm_image_info *out);

/* Runs the vision encoder and the projector on IMAGE (once; a second call does nothing) with
 * N_THREADS threads (0 = all cores), in the precision profile the model was loaded in. Its
 * pixels are freed after. NOMEM for the encoder's scratch (mlm_memory_plan.images). */
mlm_status mlm_image_encode(const mlm_model *model, mlm_image *image, int n_threads,
                            mlm_error *err);

/* The token that stands for an image in a vision model's prompts (128256 for Llama 3.2
 * Vision: its tokenizer's <|image|>), or -1 for models without vision. */
int32_t mlm_model_image_token(const mlm_model *model);

/* ---- executor ---- */

/* An executor runs steps of a model over a paged KV cache: a pool of max_num_blocks blocks
 * of block_size tokens, and a page table per sequence. One step takes any mix of prefill and
 * decode tokens from any sequences. Not thread-safe: one executor per thread of control. */
typedef struct mlm_exec mlm_exec;

#define MLM_KV_FROM_PROFILE MLM_DTYPE_COUNT

typedef struct mlm_exec_params {
    int32_t max_seqs;       /* sequences (batch slots), default 1 */
    int32_t max_seq_len;    /* positions per sequence, default 4096 */
    int32_t block_size;     /* tokens per KV block, default 64 */
    int32_t max_num_blocks; /* KV pool size; 0 = max_seqs * ceil(max_seq_len / block_size) */
    int32_t max_step_tokens; /* tokens per step, default 512 (a longer prompt takes several) */
    int32_t max_step_logits; /* tokens per step that may ask for logits, default = max_seqs */
    mlm_dtype kv_dtype;     /* KV cache entries: MLM_DTYPE_F32, _BF16 or _BFP8; default
                               MLM_KV_FROM_PROFILE: the model's profile decides */
    int n_threads;          /* 0 = all cores */
    /* Llama 3.2 Vision: images one sequence may hold (default 1; at most MLM_MAX_IMAGES),
     * and the image K/V pool in tiles (0 = max_seqs x max_images x the model's max tiles).
     * Other models ignore both. */
    int32_t max_images;
    int32_t image_tiles;
    /* Under TP (the model was loaded with a TP communicator): 1 = this rank (TP rank 0)
     * leads: each step sends its batch and page tables to the other ranks of the group,
     * which run mlm_exec_follow with the same parameters. 0 (default): every rank calls
     * mlm_exec_step itself with the same batches (programs whose ranks all compute alike). */
    int lead;
} mlm_exec_params;

mlm_exec_params mlm_exec_default_params(void);

mlm_status mlm_exec_create(const mlm_model *model, const mlm_exec_params *params,
                           mlm_exec **out, mlm_error *err);
void mlm_exec_free(mlm_exec *exec);

/* On a TP rank other than 0 whose rank 0 leads (mlm_exec_params.lead): runs every step the
 * leader sends, storing K/V in the pages it names, until the leader's executor is freed;
 * returns MLM_OK then. BACKEND when the communicator fails. */
mlm_status mlm_exec_follow(mlm_exec *exec, mlm_error *err);

/* One step's tokens: token I of sequence SEQ[I] at position POS[I]. Positions of a sequence
 * must be written in order without gaps from its start position. With LOGITS non-NULL,
 * LOGITS[I] != 0 asks for token I's next-token logits. */
typedef struct mlm_batch {
    int32_t n;
    const int32_t *tokens;
    const int32_t *seq;
    const int32_t *pos;
    const int8_t *logits;
} mlm_batch;

/* Runs one step. OUT receives one row of n_vocab floats per token that asked for logits, in
 * batch order. CAPACITY when the KV pool runs out (nothing is written for that step's
 * failing sequence), INVALID_ARG for a bad token, sequence or position. */
mlm_status mlm_exec_step(mlm_exec *exec, const mlm_batch *batch, float *out, mlm_error *err);

/* Forgets sequence SEQ (its KV blocks return to the pool); its next position is START. */
mlm_status mlm_exec_seq_reset(mlm_exec *exec, int32_t seq, int32_t start, mlm_error *err);
/* Forgets SEQ's positions from POS on (speculative tokens that were not accepted): its next
 * position is POS, and pages past it return to the pool. Nothing is copied. INVALID_ARG for a
 * POS outside the sequence's positions or at or before one of its images. */
mlm_status mlm_exec_seq_truncate(mlm_exec *exec, int32_t seq, int32_t pos, mlm_error *err);
/* Gives sequence SEQ (after a reset) the pages BLOCKS[0..N) in that order instead of taking
 * free blocks as it grows, like the demos' random page tables. The blocks must be free. */
mlm_status mlm_exec_seq_set_pages(mlm_exec *exec, int32_t seq, const int32_t *blocks, int32_t n,
                                  mlm_error *err);
/* The next position sequence SEQ expects. */
int32_t mlm_exec_seq_len(const mlm_exec *exec, int32_t seq);

/* Llama 3.2 Vision: binds N encoded images (mlm_image_encode) to sequence SEQ, image I at
 * position POS[I] (strictly increasing, not before the sequence's next position), where the
 * sequence's tokens will hold the model's image token (mlm_model_image_token). Their
 * cross-attention keys and values are computed here, once, into the executor's image pool and
 * kept with the sequence until it is reset; decode never recomputes them. An image whose
 * encoded states equal those of an image another sequence of the executor holds (the same
 * mlm_image, or the same picture opened twice) shares that sequence's K/V blocks (no compute,
 * no new tiles; they return to the pool when the last holder is reset; matched by a 64-bit
 * hash of the states). Which images a token
 * sees follows Hugging Face's processor (get_cross_attention_token_mask): image I from its
 * position up to the next image's (consecutive image tokens all extend to the end), the last
 * one to the end of the sequence; a token that sees no image (text before the first image)
 * passes the cross-attention layers unchanged (Meta's reference; models.md 6.6). Call it
 * once per sequence, after mlm_exec_seq_reset and before the steps that reach POS[0].
 * Statuses: INVALID_ARG (a model without vision, an image of another model or not encoded,
 * positions out of order or already written, N over max_images), CAPACITY (the image pool
 * has too few free tiles; nothing is bound). The images are only read during the call. */
mlm_status mlm_exec_seq_set_images(mlm_exec *exec, int32_t seq, mlm_image *const *images,
                                   const int32_t *pos, int32_t n, mlm_error *err);
/* The executor's parameters with the defaults resolved, and its model (borrowed). */
const mlm_exec_params *mlm_exec_get_params(const mlm_exec *exec);
const mlm_model *mlm_exec_model(const mlm_exec *exec);

/* ---- sampling ---- */

typedef struct mlm_sampler_params {
    float temperature; /* 0 = greedy (argmax, ties to the lowest id) */
    int32_t top_k;     /* 0 = off */
    float top_p;       /* 1 = off */
    uint64_t seed;
} mlm_sampler_params;

mlm_sampler_params mlm_sampler_default_params(void);

/* A sampler's state: parameters, RNG and scratch for a vocabulary of N_VOCAB. Caller-owned. */
typedef struct mlm_sampler {
    mlm_sampler_params params;
    uint64_t rng[4];
    int32_t n_vocab;
    float *probs;  /* owned scratch */
    int32_t *idx;  /* owned scratch */
} mlm_sampler;

mlm_status mlm_sampler_init(mlm_sampler *s, const mlm_sampler_params *params, int32_t n_vocab,
                            mlm_error *err);
void mlm_sampler_deinit(mlm_sampler *s);
/* Picks the next token from LOGITS (n_vocab floats; not modified). HF order: temperature,
 * then top-k, then top-p, then a draw from the renormalized distribution. */
int32_t mlm_sampler_sample(mlm_sampler *s, const float *logits);

/* DRY ("don't repeat yourself"), llama.cpp's loop guard: a token that would extend a stretch
 * of the sequence already seen earlier, LENGTH tokens long with LENGTH >= allowed_length,
 * loses multiplier * base^(LENGTH - allowed_length) from its logit (the longest such stretch
 * counts; exponents are clamped so the power stays a float). Stretches are cut at the last
 * sequence breaker, and breakers are never penalized. Same semantics and defaults as
 * llama.cpp's sampler, whose test vectors tests/unit/test_sample.c checks. */
typedef struct mlm_dry_params {
    float multiplier;        /* 0 = off (the default); llama.cpp's suggested value is 0.8 */
    float base;              /* >= 1 (default 1.75) */
    int32_t allowed_length;  /* >= 1: repeats this long are free (default 2) */
    int32_t last_n;          /* tokens looked back over: -1 = the whole sequence (default),
                                0 = off */
    const uint8_t *breakers; /* N_VOCAB flags, 1 = a sequence breaker (mlm_dry_breakers);
                                borrowed; NULL = none */
} mlm_dry_params;

mlm_dry_params mlm_dry_default_params(void);
/* INVALID_ARG naming the field for a negative or non-finite multiplier, a base under 1, an
 * allowed_length under 1, a last_n under -1. */
mlm_status mlm_dry_check(const mlm_dry_params *p, mlm_error *err);
/* Lowers LOGITS (N_VOCAB floats) of the tokens that would extend a repeat in TOKENS (the
 * sequence so far, N ids; its last LAST_N count). NOMEM for its scratch (N pairs). */
mlm_status mlm_dry_apply(const mlm_dry_params *p, const int32_t *tokens, int32_t n,
                         float *logits, int32_t n_vocab, mlm_error *err);
/* Fills OUT (mlm_tokenizer_n_vocab bytes) with the sequence breakers of TOK: the tokens whose
 * text holds one of the N strings STRS (STRS NULL: llama.cpp's defaults "\n", ":", "\"",
 * "*"), and the special tokens (a chat format's own tags, which repeat by design).
 * llama.cpp's DRY also matches a multi-character breaker split over several tokens; here a
 * breaker is one token that holds it whole. INVALID_ARG for an empty string. */
mlm_status mlm_dry_breakers(const mlm_tokenizer *tok, const char *const *strs, int32_t n,
                            uint8_t *out, mlm_error *err);

/* Log-probabilities from raw logits, as OpenAI's logprobs report them: the log-softmax of
 * LOGITS (N_VOCAB floats; the max subtracted, the sum taken in double) at TOKEN into
 * *LOGPROB, and the K most likely tokens (best first, ties to the lower id; K is capped at
 * N_VOCAB) into TOP_IDS with theirs into TOP_LOGPROBS (K entries each; NULL when K is 0).
 * Returns the number of top entries written. */
int32_t mlm_logprobs(const float *logits, int32_t n_vocab, int32_t token, int32_t k,
                     double *logprob, int32_t *top_ids, double *top_logprobs);

/* ---- structured output: JSON Schema constrained decoding ---- */

/* A compiled JSON Schema: what documents may be written. Immutable, shareable between
 * threads and requests. The subset: type (object, array, string, number, integer, boolean,
 * null, or a list of them), properties, required, additionalProperties (false, or absent:
 * only declared properties are written either way), items, enum, const, anyOf, minItems,
 * maxItems, minLength, maxLength, minimum / maximum / exclusiveMinimum / exclusiveMaximum
 * beside type integer (a real bound rounds inward; elsewhere they are refused), $ref to
 * "#", "#/$defs/..." or "#/definitions/...", and
 * the annotations (title, description, default, examples, format, $schema, $id, $comment,
 * deprecated, readOnly, writeOnly), which constrain nothing. Objects write their properties
 * in the schema's order, required ones always, optional ones or not. Numbers are JSON
 * numbers with at most 16 integer digits, 16 fraction digits and 3 exponent digits
 * (llama.cpp's bounds); whitespace between tokens is at most 20 bytes a gap, none before or
 * after the document. */
typedef struct mlm_grammar mlm_grammar;

/* What comes around the document: BEFORE value AFTER, MIN_VALUES..MAX_VALUES times with SEP
 * between (tool calls: "<tool_call>\n", "\n</tool_call>", "\n"). NULL: one bare value. */
typedef struct mlm_grammar_wrap {
    const char *before, *after, *sep; /* NULL = "" */
    int32_t min_values, max_values;   /* >= 1 */
} mlm_grammar_wrap;

/* Compiles the JSON Schema SCHEMA (LEN bytes of JSON text; NULL: any JSON object, as
 * OpenAI's json_object format). INVALID_ARG when SCHEMA is not JSON or not a schema;
 * UNSUPPORTED for a keyword outside the subset, a $ref elsewhere, or a limit passed (nesting
 * 64, 256 properties an object), the message naming the keyword and where it is (a JSON
 * pointer). */
mlm_status mlm_grammar_compile(const char *schema, size_t len, const mlm_grammar_wrap *wrap,
                               mlm_grammar **out, mlm_error *err);
void mlm_grammar_free(mlm_grammar *g);

/* Every token's bytes in a trie, built once per tokenizer (special tokens are left out:
 * they never continue a document). Immutable and shareable. */
typedef struct mlm_token_trie mlm_token_trie;
mlm_status mlm_token_trie_create(const mlm_tokenizer *tok, mlm_token_trie **out,
                                 mlm_error *err);
void mlm_token_trie_free(mlm_token_trie *t);

/* Where one document is: the grammar, the bytes so far. One per request; one thread at a
 * time. Masks of states seen before come from a small cache. */
typedef struct mlm_matcher mlm_matcher;
/* G and T are borrowed and must outlive the matcher (T may be NULL when only bytes are fed). */
mlm_status mlm_matcher_create(const mlm_grammar *g, const mlm_token_trie *t, mlm_matcher **out,
                              mlm_error *err);
void mlm_matcher_free(mlm_matcher *m);
/* Feeds bytes: 1 when they continue a valid document (the state moves on), 0 when they
 * cannot (the state is unchanged). */
int mlm_matcher_accept_bytes(mlm_matcher *m, const char *bytes, size_t len);
/* Feeds token ID's bytes (the trie's tokenizer); 0 for a token the mask would refuse. */
int mlm_matcher_accept_token(mlm_matcher *m, int32_t id);
/* Whether the bytes so far are a whole document (the output may end here). */
int mlm_matcher_can_end(const mlm_matcher *m);
/* Sets bit (ID & 31) of MASK[ID >> 5] for every token that may come next, clears the others
 * ((n_vocab + 31) / 32 words); returns how many are set. Tokens that end the output (stop
 * ids) are the caller's: allow them when mlm_matcher_can_end. */
int32_t mlm_matcher_fill_mask(mlm_matcher *m, uint32_t *mask);
/* The vocabulary size of the matcher's trie (0 without one). */
int32_t mlm_matcher_n_vocab(const mlm_matcher *m);

/* ---- batched generation ---- */

/* One user of a batched generation: a prompt, its own sampling, its own stop ids. */
typedef struct mlm_gen_user {
    const int32_t *prompt; /* borrowed, N_PROMPT >= 1 tokens */
    int32_t n_prompt;
    mlm_sampler_params sampling;
    int32_t max_new_tokens; /* tokens to generate at most (the prefill's token included) */
    const int32_t *stop_ids; /* borrowed; generation stops after one of these (NULL: never) */
    int32_t n_stop_ids;
    /* Llama 3.2 Vision: encoded images bound in order to the prompt's image tokens (borrowed;
     * NULL / 0: none). */
    mlm_image *const *images;
    int32_t n_images;
} mlm_gen_user;

/* What one user got: the generated tokens (stop token included) and why it stopped. */
typedef struct mlm_gen_output {
    int32_t *tokens; /* owned (free with mlm_gen_output_deinit) */
    int32_t n;
    int stopped; /* 1: a stop id, 0: max_new_tokens */
} mlm_gen_output;
void mlm_gen_output_deinit(mlm_gen_output *o);

/* Timings of a batched generation, as the demos define their metrics. */
typedef struct mlm_gen_stats {
    double prefill_s;      /* all users' prompts, up to the first token of each */
    int64_t prefill_tokens;
    double first_decode_s; /* decode iteration 0 (excluded from the decode rates) */
    double decode_s;       /* decode iterations 1..steps-1 */
    int32_t decode_steps;  /* iterations run (every step decodes one token of each live user) */
    int64_t decode_tokens; /* tokens produced by iterations 1..steps-1 */
} mlm_gen_stats;

/* Generates for N_USERS users at once on sequences 0..N_USERS-1 of EXEC (which needs
 * max_seqs >= N_USERS). PAGES, when non-NULL, gives user u the page table PAGES[u] of
 * N_PAGES blocks (disjoint, like the demos' random page tables); NULL lets the pool hand out
 * blocks. Prefill runs every prompt in flat steps of up to max_step_tokens tokens (users of
 * any lengths together, no padding), each user's last prompt token giving its first token;
 * then each decode step feeds every live user's last token at its own position. Each user
 * samples with its own sampler and stops at its own stop ids or max_new_tokens. OUT[u]
 * receives user u's tokens; STATS the timings. Results do not depend on N_USERS, the order of
 * the users or the pages (every token is computed the same way whatever else is in the step). */
mlm_status mlm_exec_generate(mlm_exec *exec, const mlm_gen_user *users, int32_t n_users,
                             const int32_t *const *pages, int32_t n_pages, mlm_gen_output *out,
                             mlm_gen_stats *stats, mlm_error *err);

/* ---- scheduler: continuous batching ---- */

/* A scheduler serves many independent requests on one executor it owns: a bounded queue of
 * waiting requests, up to max_batch running sequences, and a step loop. Every step it admits
 * waiting requests while batch slots and KV blocks allow, then runs one executor step over all
 * running sequences: one decode token for each sequence that is generating, plus prompt
 * chunks of admitted sequences up to prefill_chunk tokens in all, so that running streams keep
 * their pace while a long prompt is read. Tokens are reported as they are sampled.
 *
 * Prefix cache: every full KV block of a prompt or of generated text is kept, keyed by a hash
 * of the whole token prefix it ends (and checked against its tokens), reference counted and
 * shared between sequences. A new request starts from the longest cached prefix of its
 * prompt; blocks no sequence holds are evicted least recently used first. A finished
 * sequence's last, partly filled block is kept too (a tail) and taken whole by a request that
 * goes on from exactly those tokens, so a conversation's next turn computes only its new
 * tokens. Because a token's numbers never depend on what else is in the step, a cached result
 * is bit-identical to an uncached one.
 *
 * When a step needs KV blocks that no eviction can free, the most recently admitted running
 * sequence is preempted: its blocks are released (full ones stay in the prefix cache) and it
 * returns to the front of the queue, to be recomputed from its prompt and the tokens it had
 * generated; its output is unchanged by that. A running sequence is never corrupted.
 *
 * Threads: mlm_sched_submit, mlm_sched_cancel, mlm_sched_stats and mlm_sched_wake may be
 * called from any thread; mlm_sched_step and mlm_sched_wait from one thread only (the engine
 * loop). Callbacks run on the engine loop's thread, inside mlm_sched_step. */
typedef struct mlm_sched mlm_sched;

/* Speculative decoding: each decode step of a request drafts a few tokens and verifies them
 * in the same step, keeping the ones the model itself picks, and its own token after them.
 * The drafts come from the scheduler's draft model (mlm_sched_params.draft_model: a smaller
 * model, or the same one at a cheaper profile, sharing the tokenizer) or, without one, from
 * prompt lookup (llama.cpp's lookup, vLLM's n-gram proposer): the tokens that followed the
 * latest earlier occurrence of the sequence's last N tokens (N from ngram_max down to
 * ngram_min, prompt and generated text alike). The steps are batch-invariant, so greedy ids,
 * logprobs and text equal plain decoding's bit for bit; only the speed changes. A request
 * that samples (temperature > 0) speculates with a draft model only, by the rejection scheme
 * that keeps the model's distribution exactly (Leviathan et al. 2023): the tokens are then
 * distributed as plain sampling's, though not the same draws for a seed. Requests with
 * presence or frequency penalties, the loop guard or structured output when they sample, and
 * requests holding images, decode one token a step. */
typedef struct mlm_draft_params {
    int32_t max;       /* tokens drafted per step at most (0 = off, the default; capped by
                          the scheduler's max_draft) */
    int32_t ngram_min; /* shortest suffix that may match (default 2) */
    int32_t ngram_max; /* longest suffix tried first (default 4) */
} mlm_draft_params;

/* Off (max 0), suffixes of 4 down to 2 tokens; mlm_request_default_params holds these. */
mlm_draft_params mlm_draft_default_params(void);

typedef struct mlm_sched_params {
    int32_t max_batch;     /* running sequences at once (default 32) */
    int32_t max_seq_len;   /* positions per sequence, prompt included (default 4096) */
    int32_t kv_blocks;     /* KV pool size in blocks; 0 = max_batch * max_seq_len / block_size */
    int32_t block_size;    /* tokens per KV block (default 16) */
    int32_t prefill_chunk; /* prompt tokens per step over all sequences (default 256) */
    int32_t max_queue;     /* waiting requests; past it submit fails with CAPACITY (default 64) */
    int prefix_cache;      /* 1 (default): share full KV blocks by prefix; 0: off */
    int32_t max_logprobs;  /* most top logprobs a request may ask for (default 20) */
    mlm_dtype kv_dtype;    /* default MLM_KV_FROM_PROFILE */
    int n_threads;         /* 0 = all cores */
    int32_t max_images;    /* Llama 3.2 Vision: images per request (default 1) */
    int32_t image_tiles;   /* its image K/V pool in tiles (0: min(max_batch, 4) x max_images x
                              the model's max tiles); a request waits for free tiles */
    int32_t max_draft;     /* speculative tokens a sequence may verify in one step (default 0:
                              requests cannot speculate; mlm_request_params.draft) */
    /* The draft model (borrowed; it must outlive the scheduler; NULL, the default: prompt
     * lookup): same vocabulary as the model, text only, run without TP (under TP only the
     * leading rank has one). It keeps its own paged KV cache (kv_blocks plus each slot's
     * drafted tokens). Drafting stops where its most likely token's probability is under
     * draft_p_min (default 0: never, as llama.cpp's --draft-p-min). Needs max_draft >= 1. */
    const mlm_model *draft_model;
    float draft_p_min;
    /* Under TP: this rank (0) leads the other ranks of the group, which create their
     * scheduler with the same parameters and run mlm_sched_follow (mlm_exec_params.lead). */
    int lead;
} mlm_sched_params;

mlm_sched_params mlm_sched_default_params(void);

/* Why a request ended. */
typedef enum mlm_finish {
    MLM_FINISH_NONE = 0,  /* not yet */
    MLM_FINISH_STOP,      /* a stop id was sampled, or the callback asked to stop */
    MLM_FINISH_LENGTH,    /* max_new_tokens, or the sequence reached max_seq_len */
    MLM_FINISH_CANCELLED, /* mlm_sched_cancel, or the scheduler was freed */
    MLM_FINISH_ERROR      /* the step failed; the event's error says why */
} mlm_finish;

/* What a callback is told. Pointers are valid during the call only. */
typedef struct mlm_sched_event {
    uint64_t id;
    int32_t token;     /* the sampled token, or -1 on a final event that carries none */
    int is_stop_id;    /* the token is one of the request's stop ids (its text is not output) */
    double logprob;    /* with logprobs >= 0: log-softmax of the raw logits at the token */
    int32_t n_top;     /* top_ids / top_logprobs: the N_TOP most likely tokens, best first */
    const int32_t *top_ids;
    const double *top_logprobs;
    mlm_finish finish; /* not NONE on the last event of the request */
    int32_t n_prompt;     /* prompt tokens */
    int32_t n_cached;     /* prompt tokens taken from the prefix cache at admission */
    int32_t n_generated;  /* tokens generated so far, this one included */
    const char *error;    /* MLM_FINISH_ERROR: the message */
} mlm_sched_event;

/* Called for every sampled token and once more, last, with finish set (possibly together with
 * a token). Returning nonzero from a non-final event ends the request with MLM_FINISH_STOP
 * (e.g. a stop string matched): a final event with token -1 follows. After the final event the
 * scheduler never uses USER again. Must not call mlm_sched_step. */
typedef int (*mlm_sched_callback)(void *user, const mlm_sched_event *ev);

typedef struct mlm_request_params {
    const int32_t *prompt; /* N_PROMPT >= 1 ids (copied) */
    int32_t n_prompt;
    int32_t max_new_tokens;  /* >= 1; prompt + max_new_tokens may not exceed max_seq_len */
    mlm_sampler_params sampling;
    float presence_penalty;  /* OpenAI's: subtracted from the logit of every token generated */
    float frequency_penalty; /* OpenAI's: times the count of the token generated so far */
    /* The loop guard (off by default, as in OpenAI's API): applied after the penalties to the
     * request's whole sequence, prompt and tokens generated (its breakers borrowed until the
     * final event). */
    mlm_dry_params dry;
    mlm_draft_params draft; /* speculative decoding (off by default) */
    const int32_t *stop_ids; /* generating one ends the request (copied; NULL: none) */
    int32_t n_stop_ids;
    int32_t logprobs;        /* -1: none; K >= 0: each token's logprob and the top K */
    /* Llama 3.2 Vision: encoded images (mlm_image_encode), bound in order to the prompt's
     * image tokens (one each). Borrowed until the request's final event: a preempted request
     * computes their K/V again when it is admitted again. Image requests do not use or fill
     * the prefix cache (their blocks depend on the images, not only on the tokens). */
    mlm_image *const *images;
    int32_t n_images;
    mlm_sched_callback on_event;
    void *user;
    /* Structured output: every sampled token is one the matcher allows (the logits of the
     * others are set to -inf before penalties' and the sampler's work; greedy picks the best
     * allowed token), and a stop id only where the document may end; when it may end and no
     * byte can continue it, a stop id is forced, or without stop ids the request ends
     * (MLM_FINISH_STOP). Borrowed until the final event; NULL: none. */
    mlm_matcher *matcher;
    /* Seeds the prefix cache's keys (0, the default, shares with every request): requests of
     * different salts share no cached blocks, as vLLM's cache_salt (a conversation that
     * starts over, a tenant). */
    uint64_t cache_salt;
} mlm_request_params;

mlm_request_params mlm_request_default_params(void);

/* Creates a scheduler (and its executor) for MODEL (borrowed; it must outlive the scheduler). */
mlm_status mlm_sched_create(const mlm_model *model, const mlm_sched_params *params,
                            mlm_sched **out, mlm_error *err);
/* Cancels every request (each gets its final event) and frees everything. A leading
 * scheduler (params.lead) also ends its followers' mlm_sched_follow. */
void mlm_sched_free(mlm_sched *s);
/* On TP ranks other than 0 of a leading scheduler's group: runs the leader's steps until it
 * is freed (mlm_exec_follow). Nothing is ever submitted to a following scheduler. */
mlm_status mlm_sched_follow(mlm_sched *s, mlm_error *err);

/* Queues a request and gives its id (> 0). INVALID_ARG for a bad request: a prompt longer than
 * max_seq_len - 1 (the message names both), a token outside the vocabulary, prompt +
 * max_new_tokens over max_seq_len, logprobs over max_logprobs, bad sampling values.
 * CAPACITY when max_queue requests already wait. */
mlm_status mlm_sched_submit(mlm_sched *s, const mlm_request_params *req, uint64_t *id,
                            mlm_error *err);
/* Cancels request ID: it is taken out of the queue or its sequence is stopped and its blocks
 * freed at the next step; its final event has MLM_FINISH_CANCELLED. Unknown or finished ids
 * are ignored. */
void mlm_sched_cancel(mlm_sched *s, uint64_t id);

/* Admits, runs one step and reports its tokens. *DID_WORK = 0 when there was nothing to do.
 * A failing executor step ends the requests in it with MLM_FINISH_ERROR and returns OK; other
 * statuses are scheduler bugs. */
mlm_status mlm_sched_step(mlm_sched *s, int *did_work, mlm_error *err);
/* Blocks until there is work (a request waiting or running, a cancel) or mlm_sched_wake, or
 * TIMEOUT_MS passes. */
void mlm_sched_wait(mlm_sched *s, int timeout_ms);
/* Wakes mlm_sched_wait. */
void mlm_sched_wake(mlm_sched *s);

/* Counters and gauges, for /metrics. Totals count since creation. */
typedef struct mlm_sched_stats {
    int32_t waiting, running;
    int32_t kv_blocks_total, kv_blocks_used, kv_blocks_cached; /* cached: held by the prefix
                                                                   cache only (evictable) */
    int64_t prompt_tokens;     /* prompt tokens of admitted requests */
    int64_t computed_tokens;   /* prompt tokens computed (cache misses and recomputation) */
    int64_t prefix_hit_tokens; /* prompt tokens taken from the prefix cache */
    int64_t generated_tokens;
    int64_t preemptions;
    int64_t steps;
    int64_t draft_tokens;      /* speculative tokens verified */
    int64_t draft_accepted;    /* of them, the ones kept (each saves a step) */
    int64_t finished[5];       /* by mlm_finish */
} mlm_sched_stats;

void mlm_sched_get_stats(mlm_sched *s, mlm_sched_stats *out);
/* The parameters with defaults resolved. */
const mlm_sched_params *mlm_sched_get_params(const mlm_sched *s);
/* The executor parameters mlm_sched_create gives its executor for a model of config CFG and
 * parameters P (as given, before defaults: kv_blocks 0 stays 0), for planning memory before
 * loading (mlm_memory_plan_at). */
void mlm_sched_exec_params(const mlm_config *cfg, const mlm_sched_params *p, mlm_exec_params *xp);

/* Default sampling for requests that name none, as vLLM takes it: temperature, top_p and top_k
 * from the model's generation_config.json (HF folders), else OpenAI's temperature 1, top_p 1,
 * top_k 0. */
mlm_status mlm_generation_defaults(const char *path, mlm_sampler_params *out, mlm_error *err);

/* ======== Part 2: files and tools ======== */

/* ---- checkpoints ---- */

/* A checkpoint: every tensor of a safetensors file, a sharded safetensors set
 * (model.safetensors.index.json), a PyTorch zip file written by torch.save, or a set
 * of Meta consolidated.NN.pth shards. All tensors are zero-copy views into read-only
 * mappings owned by the checkpoint. Nested dicts in a torch.save file are flattened
 * with '.' ("metadata.model"); non-tensor ints and strings are kept as values. */
typedef struct mlm_checkpoint mlm_checkpoint;

typedef enum mlm_ckpt_format {
    MLM_CKPT_SAFETENSORS = 0, /* *.safetensors, single or sharded */
    MLM_CKPT_PYTORCH,         /* torch.save zip files (*.pth, *.pt, *.refpt, *.bin) */
    MLM_CKPT_GGUF             /* a llama.cpp GGUF file (*.gguf) */
} mlm_ckpt_format;

#define MLM_MAX_DIMS 8

/* One tensor view. Element (i0, i1, ...) lives at
 * (const char *)data + (i0*stride[0] + i1*stride[1] + ...) * mlm_dtype_size(dtype).
 * A GGUF tensor of a block-quantized type has dtype MLM_DTYPE_GGML: its rows (the last dim)
 * are contiguous runs of ggml_type's blocks, row after row, and stride is unused; read it
 * with mlm_tensor_to_f32. GGUF shapes are given outermost first like every other view
 * (GGUF's ne[] reversed). Borrowed: valid while the checkpoint is open. */
typedef struct mlm_tensor_view {
    const char *name;
    mlm_dtype dtype;
    int n_dim;
    int64_t shape[MLM_MAX_DIMS];
    int64_t stride[MLM_MAX_DIMS]; /* in elements */
    const void *data;             /* element (0, ..., 0) */
    const char *file;             /* path of the file holding the bytes */
    uint32_t ggml_type;           /* GGUF: the ggml type number (0 f32, 1 f16, 8 q8_0, ...) */
} mlm_tensor_view;

/* Opens PATH: a file (.safetensors, .pth/.pt/.refpt/.bin zip, model.safetensors.index.json,
 * a GGUF file told by its magic) or a directory (index.json, else *.safetensors, else
 * consolidated.*.pth, else *.pth/.pt/.bin, else one *.gguf). For Meta
 * multi-shard directories the shards are opened side by side and each tensor name
 * appears once per shard with the prefix "shard<N>/" (merging is the model's job).
 * Statuses: IO (missing/unreadable), FORMAT (malformed, with the file and field),
 * UNSUPPORTED (e.g. a pickle global that is not allowed), NOMEM. */
mlm_status mlm_checkpoint_open(const char *path, mlm_checkpoint **out, mlm_error *err);
void mlm_checkpoint_free(mlm_checkpoint *ckpt);

/* Whether PATH is a file, or a directory holding checkpoint files that
 * mlm_checkpoint_open would look for (it does not validate them). */
int mlm_checkpoint_present(const char *path);

mlm_ckpt_format mlm_checkpoint_format(const mlm_checkpoint *ckpt);
/* Number of files mapped. */
int mlm_checkpoint_n_files(const mlm_checkpoint *ckpt);
/* Path and size of file I (0 <= I < n_files). */
const char *mlm_checkpoint_file(const mlm_checkpoint *ckpt, int i, size_t *size);

/* Number of tensors, and tensor I in file order. */
int64_t mlm_checkpoint_n_tensors(const mlm_checkpoint *ckpt);
const mlm_tensor_view *mlm_checkpoint_tensor(const mlm_checkpoint *ckpt, int64_t i);
/* The tensor named NAME, or NULL. */
const mlm_tensor_view *mlm_checkpoint_find(const mlm_checkpoint *ckpt, const char *name);

/* Non-tensor values of a torch.save dict (e.g. a .refpt's "prompt_len" and
 * "metadata.*"). MLM_ERR_INVALID_ARG when absent or of another type. */
mlm_status mlm_checkpoint_get_int(const mlm_checkpoint *ckpt, const char *name, int64_t *out,
                                  mlm_error *err);
mlm_status mlm_checkpoint_get_str(const mlm_checkpoint *ckpt, const char *name, const char **out,
                                  mlm_error *err);
/* Number of non-tensor values, and the name of value I. */
int64_t mlm_checkpoint_n_values(const mlm_checkpoint *ckpt);
const char *mlm_checkpoint_value_name(const mlm_checkpoint *ckpt, int64_t i);

/* The view's element type by name: its dtype's ("f32", "bf16", ...) or, for MLM_DTYPE_GGML,
 * the ggml type's ("q4_1", "q6_k", ...). */
const char *mlm_tensor_type_name(const mlm_tensor_view *t);
/* Bytes the view's data takes in its file (ggml types: whole blocks). */
int64_t mlm_tensor_nbytes(const mlm_tensor_view *t);
/* Number of elements of a view (product of its shape). */
int64_t mlm_tensor_numel(const mlm_tensor_view *t);
/* Copies a view (any strides) into DST as N = numel f32 values in row-major order,
 * converting from its dtype. INVALID_ARG if n != numel. */
mlm_status mlm_tensor_to_f32(const mlm_tensor_view *t, float *dst, int64_t n, mlm_error *err);
/* Same, to int64 (integer and bool dtypes only; UNSUPPORTED for floats). */
mlm_status mlm_tensor_to_i64(const mlm_tensor_view *t, int64_t *dst, int64_t n, mlm_error *err);

/* ---- weight caches ---- */

/* The cache file that mlm_model_load would use for DIR with PARAMS (the profile resolved,
 * the location chosen as documented above), without loading anything. */
mlm_status mlm_cache_path(const char *dir, const mlm_model_params *params, char *path, size_t size,
                          mlm_error *err);

/* One cache file found by mlm_cache_list. */
typedef struct mlm_cache_entry {
    char path[1024];
    int64_t bytes;
    char model[512]; /* the model directory it was built from */
    char profile[16];
    int tp_rank, tp_size; /* the TP shard it holds (0 of 1: the whole model) */
    int valid;            /* header and index intact, and the model's files unchanged */
    char why[160];        /* when not valid: what is wrong */
} mlm_cache_entry;

/* Lists the cache files (*.mlmc) in the folder CACHE_DIR and its mesh folders (N300/, T3K/,
 * TG/, TPn/: TP shards, one file per rank) (checking each one's header, index
 * and key; not the tensor data). Returns a malloc'd array in *OUT (free it), count in *N. */
mlm_status mlm_cache_list(const char *cache_dir, mlm_cache_entry **out, int *n, mlm_error *err);
/* The folder the caches of the model in DIR go to by default (DIR NULL: $MESHLM_CACHE, else
 * the user cache folder), in DIRS[0]; *N = 1. */
mlm_status mlm_cache_dirs(const char *dir, char dirs[][1024], int *n, mlm_error *err);

/* ---- memory planning ---- */

/* What running a model takes, in bytes, before anything is loaded. */
typedef struct mlm_memory_plan {
    int64_t weights;   /* all weights in the profile's types (mapped or converted) */
    int64_t kv;        /* the KV pool: every block of every layer */
    int64_t scratch;   /* the executor's step scratch */
    int64_t images;    /* Llama 3.2 Vision: the image K/V pool, one image's encoder scratch
                          and projected states (0 for other models) */
    int64_t convert;   /* what a first load holds beyond the weights while it converts them
                          (blocks of rows in f32, the cache writer's buffer) */
    int64_t total;     /* weights + kv + scratch + images + convert + a fixed allowance */
    int64_t available; /* memory the system reports available now (MemAvailable), or -1 */
} mlm_memory_plan;

/* Fills PLAN for one rank of a TP group of TP ranks (1: the whole model) of CFG run in the
 * precision profile OPTIMIZATIONS (with DECODER_CONFIG overrides, or NULL) and executor
 * parameters EP (NULL: the defaults): its shard of the weights, its KV heads, its scratch.
 * INVALID_ARG or FORMAT for a bad profile name or decoder config; INVALID_ARG when TP does
 * not divide the heads (mlm_mesh_check_tp). */
mlm_status mlm_memory_plan_tp(const mlm_config *cfg, int tp, const char *optimizations,
                              const char *decoder_config, const mlm_exec_params *ep,
                              mlm_memory_plan *plan, mlm_error *err);
/* The same for the model at PATH, whose config it reads: for the native profile, each matrix
 * in the type its GGUF file stores it in (the others need only the config). */
mlm_status mlm_memory_plan_at(const char *path, int tp, const char *optimizations,
                              const char *decoder_config, const mlm_exec_params *ep,
                              mlm_memory_plan *plan, mlm_error *err);

/* ---- the mesh: communicators ----
 * A mesh is a set of processes (MPI ranks) that run one model together: TP ranks of a lane
 * each hold 1/TP of the weights (heads and MLP columns) and all-reduce after the attention
 * output and MLP down projections; DP lanes are independent TP groups serving their own
 * users. The communicator is MPI's (OpenMPI) under mpirun, else this process alone (rank 0
 * of 1), where every collective is the identity. Collectives are called by every rank of
 * the communicator in the same order. */

typedef struct mlm_comm mlm_comm;

/* Whether this process was started by an MPI launcher (mpirun sets OMPI_COMM_WORLD_SIZE). */
int mlm_comm_launched(void);
/* The world: MPI_COMM_WORLD under a launcher (MPI initialized here, thread level
 * SERIALIZED), else a single-process communicator. UNSUPPORTED under a launcher when meshlm
 * was built without MPI. Free it last (it finalizes MPI). */
mlm_status mlm_comm_world(mlm_comm **out, mlm_error *err);
int mlm_comm_rank(const mlm_comm *comm);         /* NULL: 0 */
int mlm_comm_size(const mlm_comm *comm);         /* NULL: 1 */
const char *mlm_comm_kind(const mlm_comm *comm); /* "mpi" or "single" */
/* Splits COMM (collective): ranks with the same COLOR form a new communicator, ordered by
 * KEY; a negative COLOR joins none (*OUT NULL). */
mlm_status mlm_comm_split(mlm_comm *comm, int color, int key, mlm_comm **out, mlm_error *err);
/* BUF (N floats) becomes the sum over the ranks, added in rank order 0, 1, ... for every
 * element, the same bits on every rank and in every run. NULL COMM: nothing to do. */
mlm_status mlm_comm_allreduce_sum(mlm_comm *comm, float *buf, int64_t n, mlm_error *err);
/* RECV gets every rank's SEND: rank r's COUNTS[r] bytes after those of ranks before it. */
mlm_status mlm_comm_allgatherv(mlm_comm *comm, const void *send, void *recv, const size_t *counts,
                               mlm_error *err);
/* The same with BYTES from every rank (RECV holds size x BYTES). */
mlm_status mlm_comm_allgather(mlm_comm *comm, const void *send, size_t bytes, void *recv,
                              mlm_error *err);
/* Rank ROOT's BYTES of BUF to every rank. */
mlm_status mlm_comm_bcast(mlm_comm *comm, void *buf, size_t bytes, int root, mlm_error *err);
mlm_status mlm_comm_barrier(mlm_comm *comm, mlm_error *err);
/* Ends every process of the job with exit status CODE (MPI_Abort); alone: exit(CODE). For a
 * failure that other ranks cannot know of, so none of them waits for ever. */
void mlm_comm_abort(mlm_comm *comm, int code) __attribute__((noreturn));
void mlm_comm_free(mlm_comm *comm);

/* Time and bytes spent in COMM's all-reduces and gathers since it was made (this rank's
 * view: the wait for slower ranks included). */
typedef struct mlm_comm_stats {
    int64_t allreduce_calls, allreduce_bytes;
    double allreduce_s;
    int64_t gather_calls, gather_bytes;
    double gather_s;
} mlm_comm_stats;
void mlm_comm_get_stats(const mlm_comm *comm, mlm_comm_stats *out);

/* A mesh: the seeds' presets N150 (1 device), N300 (2), T3K (8), TG (32, an 8 x 4 mesh), or
 * --tp/--dp, as TP ranks per lane x DP lanes. Rank r is TP rank r % tp of lane r / tp. */
typedef struct mlm_mesh {
    char name[8]; /* the preset, "" for --tp/--dp */
    int tp, dp, devices;
} mlm_mesh;

/* The devices of preset NAME (0 if unknown). */
int mlm_mesh_devices(const char *name);
/* Resolves preset NAME (or NULL) with TP and DP (0 = from the preset) for the model CFG (NULL:
 * no head checks) on a world of WORLD ranks. A preset alone is one TP group, except TG: TP 8
 * and 4 lanes where 8 divides the heads (Llama 3), else TP 2 and 16 lanes (Phi-4). DP alone
 * gives TP = devices / DP (the seeds' ci-b1-DP-N). INVALID_ARG, naming both, when TP does not
 * divide n_head, n_kv_head and n_ff, or the world does not match the mesh: FAKE (the seeds'
 * FAKE_DEVICE) allows a larger world, whose ranks past the mesh sit out. */
mlm_status mlm_mesh_resolve(const char *name, int tp, int dp, const mlm_config *cfg, int world,
                            int fake, mlm_mesh *out, mlm_error *err);
/* INVALID_ARG naming the counts and a mesh that works when TP does not divide CFG's heads
 * and n_ff, or (TP > 1) when n_ff does not cut into one K chunk per KV head: the mesh sums
 * the row-parallel products' chunks in one order to give one process's bits. MESH names the
 * preset in the message (or NULL). */
mlm_status mlm_mesh_check_tp(const mlm_config *cfg, int tp, const char *mesh, mlm_error *err);

/* This rank's place in a mesh (mlm_mesh_join): MESH holds the mesh's ranks, TP this rank's
 * lane; both NULL (lane -1) for a rank past the mesh, which has nothing to do. */
typedef struct mlm_mesh_comms {
    mlm_comm *mesh, *tp; /* owned */
    int lane, tp_rank;
} mlm_mesh_comms;
mlm_status mlm_mesh_join(mlm_comm *world, const mlm_mesh *mesh, mlm_mesh_comms *out,
                         mlm_error *err);
void mlm_mesh_leave(mlm_mesh_comms *comms);

/* ---- CPU features ---- */

/* Instruction-set extensions found at start-up, as a space-separated list, then the register
 * state the OS saves ("avx2 fma f16c avx_vnni avx512f ... amx_int8 (os saves: ymm zmm amx
 * tiles)"), static string. MESHLM_CPU_DISABLE=feature,... hides features (avx512, amx,
 * avx_vnni, avx2, ...), to try the lower kernel levels on any machine. */
const char *mlm_cpu_features(void);
/* The CPU's brand string, or "unknown" (static). */
const char *mlm_cpu_name(void);

/* One kernel level: the ISA a kernel table needs, best first amx, avx512, avxvnni, avx2, ref
 * (the scalar twins). BFP products and attention give the same bits on every level; bf16 and
 * f32 products differ between levels by rounding. */
typedef struct mlm_kernel_level {
    const char *name;
    int available;       /* this CPU and OS run it */
    const char *missing; /* when not: the missing CPU or OS feature (static text) */
    /* the matmul kernel of each weight type: weight_type[i] ("f32", "bf16", "bfp8", "bfp4",
     * then the native GGUF types "q8_0" ... "iq4_xs") runs matmul[i]; n_matmul entries */
    int n_matmul;
    const char *weight_type[16];
    const char *matmul[16];
    const char *attention; /* the attention kernel */
    const char *gelu;      /* the GELU kernel (the vision encoder's MLP) */
} mlm_kernel_level;

/* Levels 0..N-1, best first; returns N. */
int mlm_kernel_levels_count(void);
void mlm_kernel_level_info(int i, mlm_kernel_level *out);
/* The level models load with: MESHLM_KERNELS=name if set (UNSUPPORTED naming the missing
 * feature when this machine cannot run it, INVALID_ARG for an unknown name), else the best
 * available one. */
mlm_status mlm_kernels_chosen(const char **name, mlm_error *err);

/* ---- synthetic checkpoints ---- */

/* Output formats of mlm_synth. */
enum {
    MLM_SYNTH_HF = 0,  /* config.json, generation_config.json, model.safetensors or an HF
                          shard set (model-0000K-of-0000N.safetensors + index), HF names */
    MLM_SYNTH_META = 1 /* params.json, consolidated.NN.pth (torch.save zips), Meta names */
};

/* What mlm_synth writes. Strings are borrowed for the call. */
typedef struct mlm_synth_params {
    const char *preset;  /* a name from mlm_synth_presets() */
    const char *out_dir; /* created if missing; files of the same names are replaced */
    int format;          /* MLM_SYNTH_HF (default) or MLM_SYNTH_META */
    mlm_dtype dtype;     /* MLM_DTYPE_BF16 (default) or MLM_DTYPE_F32 */
    uint64_t seed;       /* same seed, same preset, same format and dtype: same bytes */
    int32_t n_layer;     /* 1 to the preset's layer count: only the first N_LAYER layers, with
                            every shape the preset's and config.json / params.json saying
                            N_LAYER (Meta presets keep their shards); 0 (default): all */
    const char *tokenizer; /* the tokenizer to copy into out_dir, or NULL for none: Llama
                              presets: a tokenizer.model file (or a directory holding one);
                              phi-4: a directory holding tokenizer.json (required),
                              tokenizer_config.json and special_tokens_map.json (copied when
                              present) */
    int64_t max_shard_bytes; /* HF: most tensor bytes per shard (default 5e9, HF's "5GB");
                                0: always one model.safetensors */
    /* Called after every chunk written (about 1 MiB) and at the end; may be NULL. */
    void (*progress)(void *ctx, int64_t done_bytes, int64_t total_bytes);
    void *progress_ctx;
} mlm_synth_params;

mlm_synth_params mlm_synth_default_params(void);

/* Writes a checkpoint with a real model's exact configuration and random weights,
 * approximately normal: std 0.02 for the embedding, 1/sqrt(in_features) for every
 * projection (activations keep their scale through a forward pass); RMSNorm weights 1.
 * The HF and Meta outputs of one seed hold the same model: Meta q/k rows are in Meta's
 * interleaved order, and the 70B's 8 Meta shards are the row/column blocks of the full
 * tensors (models.md 7.1). Values are generated while writing: a few MB of memory whatever
 * the size. Every file goes to a temporary name, is fsynced, and all are renamed only when
 * all are complete: a failure leaves no partial file, and its message names the file.
 * phi-4 is written in the HF format only (Phi3ForCausalLM names, fused qkv_proj and
 * gate_up_proj): Microsoft publishes no Meta-format checkpoint of it.
 * INVALID_ARG for an unknown preset, format or dtype, an n_layer outside [0, the preset's
 * layer count] (the message names the count), Meta for phi-4, or a tokenizer file where a
 * directory is needed; IO for files (the tokenizer too). */
mlm_status mlm_synth(const mlm_synth_params *p, mlm_error *err);

/* The bytes mlm_synth(P) would write, over all files, without writing anything. */
mlm_status mlm_synth_total_bytes(const mlm_synth_params *p, int64_t *total, mlm_error *err);

/* The preset names, space-separated (static string):
 * "llama-3.2-1b llama-3.2-3b llama-3.1-8b llama-3.1-70b llama-3.2-11b-vision phi-4 qwen3-0.6b
 * ... qwen2.5-32b". */
const char *mlm_synth_presets(void);

/* Where a preset's tokenizer comes from when the caller names none (mlm_synth_params'
 * tokenizer): the environment variable ENV, else REL inside meshlm's source tree. */
typedef struct mlm_synth_tokenizer {
    const char *what; /* for messages: "Llama 3 tokenizer.model", ... */
    const char *env;  /* "MESHLM_TOKENIZER", "MESHLM_PHI4_TOKENIZER", "MESHLM_QWEN_TOKENIZER" */
    const char *rel;  /* the file (Llama 3's tokenizer.model) or directory (Phi-4, Qwen) */
    const char *need; /* the file a directory must hold ("tokenizer.json"); NULL for a file */
} mlm_synth_tokenizer;

/* Fills *OUT for preset NAME (hidden test presets too; static strings); 0 when the preset has
 * no tokenizer source or NAME is none. Qwen's is a stand-in (tests/data/qwen/chat/): Qwen's
 * pre-tokenizer, NFC, special tokens and real chat template over a small vocabulary. */
int mlm_synth_preset_tokenizer(const char *name, mlm_synth_tokenizer *out);

/* ---- GGUF export ---- */

/* Writes the model in MODEL_DIR (as mlm_model_load reads it, plus its tokenizer) to OUT_PATH
 * as a GGUF v3 file for llama.cpp, with the keys, tensor names, layouts and tokenizer that
 * llama.cpp's convert_hf_to_gguf.py writes for the same model: architecture "llama" (Llama 3:
 * q/k rows in Meta's interleaved order, rope_freqs for llama3 RoPE scaling, no output tensor
 * when the embedding is tied), "phi3" (Phi-4: fused attn_qkv and ffn_up = gate then up),
 * "qwen2" (q/k/v biases) or "qwen3" (q/k norms); tokenizer "gpt2" with pre "llama-bpe"
 * (Llama 3), "dbrx" (Phi-4) or "qwen2" (Qwen's pattern), tokens, types, merges, special ids
 * and chat template. DTYPE (MLM_DTYPE_F32, _F16 or _BF16) is the matrices' type; norms,
 * biases and rope_freqs are f32. UNSUPPORTED for Llama 3.2 Vision. A bf16 checkpoint is read zero-copy (mapped) and converted row
 * by row; other checkpoints are held in f32 while writing (4 bytes a parameter).
 * The file is written to a temporary name and renamed when complete. INVALID_ARG for another
 * dtype; IO (no tokenizer, unwritable path), FORMAT, UNSUPPORTED (a pre-tokenizer llama.cpp
 * has no name for) or NOMEM with a message naming the file. */
mlm_status mlm_export_gguf(const char *model_dir, const char *out_path, mlm_dtype dtype,
                           mlm_error *err);

#ifdef __cplusplus
}
#endif
#endif
