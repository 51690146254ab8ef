/* tokenizer/hf.h: Hugging Face byte-level BPE tokenizers, internal to the library.
 * Two layouts load into the same mlm_tokenizer (flavour MLM_TOK_HF): tokenizer.json
 * (hf_json.c) and the older vocab.json + merges.txt + tokenizer_config.json (hf_legacy.c);
 * GGUF's "gpt2" vocabularies (gguf_vocab.c, flavour MLM_TOK_GGUF) use the same builder.
 * All fill an mlm_hf_builder (hf_build.c), which decodes GPT-2 byte-level spellings,
 * resolves merges to id pairs, assigns added-token ids the way tokenizers does and checks
 * them against the file, and compiles the pre-tokenizer. Everything the builder makes is
 * owned by the tokenizer it returns; nothing refers back to the JSON. */
#ifndef MESHLM_TOKENIZER_HF_H
#define MESHLM_TOKENIZER_HF_H

#include <stddef.h>
#include <stdint.h>

#include "format/json.h"
#include "meshlm.h"
#include "tokenizer/pretok.h"
#include "tokenizer/specials.h"
#include "tokenizer/vocab.h"

/* tokenizer.json at PATH (with the chat template of the tokenizer_config.json beside it,
 * when there is one) / in memory (NAME for messages, no config). FORMAT for malformed
 * content (naming the file and the field), UNSUPPORTED for components meshlm does not
 * implement (naming the component and its type), IO, NOMEM. */
mlm_status mlm_hf_load_json(const char *path, mlm_tokenizer **out, mlm_error *err);
mlm_status mlm_hf_load_json_memory(const void *data, size_t len, const char *name,
                                   mlm_tokenizer **out, mlm_error *err);

/* DIR/vocab.json + DIR/merges.txt (+ DIR/tokenizer_config.json when present), read the way
 * transformers' GPT2Tokenizer reads them. Same statuses. */
mlm_status mlm_hf_load_legacy(const char *dir, mlm_tokenizer **out, mlm_error *err);

// ---- builder (hf_build.c) ----

/* What the pre-tokenizer does before byte-level BPE: its split steps in order (none: each
 * stretch is one piece), then the byte-level mapping. */
typedef struct mlm_hf_pretok {
    int n_steps;
    mlm_pretok_spec step[MLM_PRETOK_MAX_STEPS]; /* patterns borrowed; names point at WHERE
                                                   (or are borrowed) */
    char where[MLM_PRETOK_MAX_STEPS][320];      /* "FILE: FIELD" of each step, for messages */
    int add_prefix_space; /* ByteLevel alone: a stretch not starting with ' ' gets one */
} mlm_hf_pretok;

typedef struct mlm_hf_builder {
    const char *file;          /* borrowed: named in messages */
    mlm_tokenizer *tok;        /* owned until mlm_hfb_finish hands it over */
    unsigned char *bytes;      /* owned staging: decoded token bytes */
    size_t n_bytes, cap_bytes; /*   used / allocated */
    mlm_vocab_tok *at;         /* owned staging: (n_vocab) spans, len 0 = unset */
    int32_t n_vocab;           /* declared vocabulary size */
    unsigned char *buf;        /* owned scratch for decoding merges */
    size_t cap_buf;
    mlm_special_def *added; /* owned: (n_added), texts borrowed from the caller */
    int32_t n_added, cap_added;
    int64_t max_added_id;      /* tokenizers' running max of added ids, -1 when none */
    int keep_ids;              /* GGUF: added tokens keep the file's ids (no renumbering) */
    int merge_keep_first;      /* GGUF: a repeated merge keeps its first rank (llama.cpp) */
    const char *chat_template; /* borrowed until finish, NULL: none */
    size_t chat_template_len;
    int32_t eos_id; /* -1: unknown */
    int32_t unk_id; /* tokenizer.json: model.unk_token's id, -1: none */
    int fuse_unk;   /* tokenizer.json: model.fuse_unk */
} mlm_hf_builder;

/* Starts building a tokenizer for FILE (borrowed, must outlive the builder). NOMEM. */
mlm_status mlm_hfb_init(mlm_hf_builder *b, const char *file, mlm_error *err);
/* Frees whatever the builder still owns (after a failure, or instead of finishing). */
void mlm_hfb_deinit(mlm_hf_builder *b);

/* Declares N vocabulary entries, then sets each: KEY[0..LEN) is the byte-level spelling
 * and ID must be in 0..N-1, each once. WHERE names the field in messages. FORMAT. */
mlm_status mlm_hfb_vocab_begin(mlm_hf_builder *b, int64_t n, const char *where, mlm_error *err);
mlm_status mlm_hfb_vocab_set(mlm_hf_builder *b, const char *key, size_t len, int64_t id,
                             const char *where, mlm_error *err);
/* Sets id ID to the raw bytes BYTES[0..LEN) (no byte-level decoding: GGUF's control and
 * user-defined tokens are stored as their text). FORMAT as mlm_hfb_vocab_set. */
mlm_status mlm_hfb_vocab_set_raw(mlm_hf_builder *b, const char *bytes, size_t len, int64_t id,
                                 const char *where, mlm_error *err);
/* Checks every id was set and builds the lookup table. FORMAT. */
mlm_status mlm_hfb_vocab_end(mlm_hf_builder *b, const char *where, mlm_error *err);

/* Sizes the merges table for up to N merges. */
mlm_status mlm_hfb_merges_begin(mlm_hf_builder *b, int64_t n, mlm_error *err);
/* Merge number RANK of A and B (byte-level spellings): both and their concatenation must
 * be vocabulary tokens. WHERE names the entry ("model.merges[17]"). A pair listed again
 * takes the new rank (tokenizers), or keeps the first with merge_keep_first (llama.cpp).
 * FORMAT. */
mlm_status mlm_hfb_merge(mlm_hf_builder *b, int32_t rank, const char *a, size_t la, const char *bb,
                         size_t lb, const char *where, mlm_error *err);

/* An added token, in file order: CONTENT[0..LEN) (borrowed until mlm_hfb_finish) with
 * MLM_ADDED_* FLAGS. ID is the id the file gives it, or -1 to take whatever tokenizers
 * assigns. tokenizers ignores the file's ids and assigns them itself (the vocabulary id
 * when CONTENT is a vocabulary token, else the next id past the vocabulary and the added
 * tokens so far); a file id that differs is refused (FORMAT) rather than silently
 * renumbered. With keep_ids (GGUF) ID is used as given. Empty content is skipped as
 * tokenizers does; repeated content is FORMAT. */
/* Reads the MLM_ADDED_* flags of an added-token object E (special, lstrip, rstrip,
 * single_word: default false; normalized: default true, as tokenizers' AddedToken);
 * messages name "FILE: WHERE". */
mlm_status mlm_hfb_added_flags(const char *file, const char *where, const json_t *e,
                               unsigned *flags, mlm_error *err);
mlm_status mlm_hfb_added(mlm_hf_builder *b, int64_t id, const char *content, size_t len,
                         unsigned flags, const char *where, mlm_error *err);
/* The id tokenizers gives CONTENT: an added token's, else a vocabulary token's, else -1. */
int32_t mlm_hfb_id_of(const mlm_hf_builder *b, const char *content, size_t len);

/* Takes the chat template of a tokenizer_config.json, CFG (read from CONFIG, named in
 * messages; borrowed until finish): its "chat_template" string, or from a list of
 * {name, template} the one named "default". Absent or null: none. FORMAT for other types. */
mlm_status mlm_hfb_config_template(mlm_hf_builder *b, const char *config, const json_t *cfg,
                                   mlm_error *err);

/* Finishes: compiles the pre-tokenizer, builds the added-token set and the chat format
 * (from chat_template when set). BOS_ID is the id add_bos prepends (-1: none). On success
 * *OUT owns everything and the builder is empty; on failure the builder still needs
 * mlm_hfb_deinit. */
mlm_status mlm_hfb_finish(mlm_hf_builder *b, const mlm_hf_pretok *pre, int ignore_merges,
                          int32_t bos_id, mlm_tokenizer **out, mlm_error *err);

#endif
