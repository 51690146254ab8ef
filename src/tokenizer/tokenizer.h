/* tokenizer/tokenizer.h: the mlm_tokenizer handle, internal to the library.
 * A tokenizer is a byte-level BPE vocabulary (ids = tiktoken ranks, a Hugging Face vocab,
 * or a GGUF token list), optionally a merges list (Hugging Face, GGUF), a set of special /
 * added tokens, a pre-tokenizer, a flavour (how it was loaded, hence how it encodes) and a
 * chat format chosen from the chat template or the special tokens present. It owns all of
 * them, keeps no file open, and is immutable after loading: every encode/decode call may
 * run concurrently. */
#ifndef MESHLM_TOKENIZER_TOKENIZER_H
#define MESHLM_TOKENIZER_TOKENIZER_H

#include "meshlm.h"
#include "tokenizer/merges.h"
#include "tokenizer/pretok.h"
#include "tokenizer/specials.h"
#include "tokenizer/vocab.h"

struct mlm_tokenizer {
    mlm_tok_flavour flavour;
    char *name;               /* owned: the file it came from, for messages */
    mlm_vocab vocab;          /* owned: ids 0..vocab.n-1 */
    mlm_special_set specials; /* owned: special / added tokens (may have gaps) */
    mlm_pretok pretok;        /* owned: compiled once, shared read-only */
    mlm_merges merges;        /* owned: MLM_TOK_HF only (slots NULL otherwise) */
    mlm_pretok word;          /* owned: HF with single_word tokens: the \w class, else NULL */
    int ignore_merges;        /* a piece that is a whole token skips merging (tiktoken: 1) */
    int add_prefix_space;     /* HF ByteLevel: a text stretch not starting with ' ' gets one */
    int nfc;                  /* HF normalizer NFC: each stretch between added tokens that are
                                 not normalized is put in Unicode NFC first (Qwen2) */
    int drop_missing_first;   /* HF without unk_token: bytes that are no token are removed
                                 from a piece before merging (tokenizers' merge_word); else
                                 they stay parts that never merge (merges.h) */
    mlm_chat_kind chat;
    int chat_think;    /* ChatML with newlines whose template writes <think> blocks (Qwen3) */
    char *chat_system; /* owned, NULL: the default system message the chat template adds
                          when the first message is not a system one (ChatML with newlines) */
    int32_t n_vocab;   /* highest id + 1 */
    int32_t bos_id;    /* the id add_bos prepends; -1 when there is none */
    int32_t eos_id;    /* GGUF's tokenizer.ggml.eos_token_id (a stop id); -1 when unknown */
};

/* Loads a tiktoken file held in memory, DATA[0..LEN) (only read during the call); NAME is
 * used in messages. Same statuses as mlm_tokenizer_load. Used by the fuzz target. */
mlm_status mlm_tokenizer_load_memory(const void *data, size_t len, const char *name,
                                     mlm_tokenizer **out, mlm_error *err);

/* Loads a GGUF file held in memory, DATA[0..LEN) (only read during the call), as
 * mlm_tokenizer_load does a .gguf path (gguf_vocab.c); NAME is used in messages. Used by
 * the fuzz target and the tests. */
mlm_status mlm_tokenizer_load_gguf_memory(const void *data, size_t len, const char *name,
                                          mlm_tokenizer **out, mlm_error *err);

/* Sets TOK->chat (and chat_system) from the chat template TMPL[0..LEN) when it names a
 * format meshlm writes (Llama 3 headers, ChatML with <|im_sep|> or with newlines), else
 * from the special tokens TOK has; TMPL may be NULL (chat.c). NOMEM. */
mlm_status mlm_chat_detect(mlm_tokenizer *tok, const char *tmpl, size_t len, mlm_error *err);

#endif
