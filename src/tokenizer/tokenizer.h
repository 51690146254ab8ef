/* tokenizer/tokenizer.h: the mlm_tokenizer handle, internal to the library.
 * A tokenizer is a byte-level BPE vocabulary (ids = tiktoken ranks, or a Hugging Face
 * vocab), optionally a merges list (Hugging Face), a set of special / added tokens, a
 * pre-tokenizer, a flavour (how it was loaded, hence how it encodes) and a chat format
 * chosen from the special tokens present. It owns all of them, keeps no file open, and is
 * immutable after loading: every encode/decode call may run concurrently. */
#ifndef MESHLM_TOKENIZER_TOKENIZER_H
#define MESHLM_TOKENIZER_TOKENIZER_H

#include "meshlm.h"
#include "tokenizer/merges.h"
#include "tokenizer/pretok.h"
#include "tokenizer/specials.h"
#include "tokenizer/vocab.h"

/* The chat format mlm_tokenizer_encode_chat uses (chat.c). */
typedef enum mlm_chat_kind {
    MLM_CHAT_NONE = 0,
    MLM_CHAT_LLAMA3, /* <|start_header_id|> role <|end_header_id|> "\n\n" content <|eot_id|> */
    MLM_CHAT_CHATML  /* <|im_start|> role <|im_sep|> content <|im_end|> (Phi-4) */
} mlm_chat_kind;

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
    mlm_chat_kind chat;
    int32_t n_vocab; /* highest id + 1 */
    int32_t bos_id;  /* -1 when there is none */
};

/* Loads a tiktoken file held in memory, DATA[0..LEN) (only read during the call); NAME is
 * used in messages. Same statuses as mlm_tokenizer_load. Used by the fuzz target. */
mlm_status mlm_tokenizer_load_memory(const void *data, size_t len, const char *name,
                                     mlm_tokenizer **out, mlm_error *err);

/* Sets TOK->chat from the special tokens it has (chat.c). */
void mlm_chat_detect(mlm_tokenizer *tok);

#endif
