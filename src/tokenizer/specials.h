/* tokenizer/specials.h: special and other added tokens: ids with a literal text that is
 * matched in raw input before pre-tokenization, and that they decode to. A tiktoken
 * flavour picks its set (Llama 3's 256 tokens, or cl100k_base's five); a Hugging Face file
 * lists its own added tokens, with flags (added.c matches those the HF way). The set owns
 * its table and names and is immutable afterwards. Also finds special-token text inside
 * input for parse_special encoding of tiktoken flavours. */
#ifndef MESHLM_TOKENIZER_SPECIALS_H
#define MESHLM_TOKENIZER_SPECIALS_H

#include <stddef.h>
#include <stdint.h>

#include "meshlm.h"

/* Which vocabulary family a tokenizer belongs to; decides its specials and how it encodes.
 * tiktoken files are told apart by their rank count; Hugging Face files (tokenizer.json,
 * vocab.json + merges.txt) list their added tokens and merges themselves. The chat format
 * is chosen separately, from the special tokens present (chat.c). */
typedef enum mlm_tok_flavour {
    MLM_TOK_PLAIN = 0, /* any other rank count: no special tokens */
    MLM_TOK_LLAMA3,    /* 128000 ranks + 256 specials 128000..128255 */
    MLM_TOK_CL100K,    /* 100256 ranks + cl100k_base's 5 specials (100257..100276) */
    MLM_TOK_HF,        /* Hugging Face byte-level BPE: merges list + added tokens (hf_*.c) */
    MLM_TOK_GGUF       /* llama.cpp's "gpt2" vocabulary in a GGUF file (gguf_vocab.c):
                          merges list, special tokens matched as llama.cpp does */
} mlm_tok_flavour;

/* Added-token flags (Hugging Face AddedToken fields; tiktoken specials are SPECIAL only). */
enum {
    MLM_ADDED_SPECIAL = 1,     /* a special token: matched only with parse_special */
    MLM_ADDED_LSTRIP = 2,      /* absorbs the whitespace on its left */
    MLM_ADDED_RSTRIP = 4,      /* absorbs the whitespace on its right */
    MLM_ADDED_SINGLE_WORD = 8, /* matches only where no word character touches it */
    MLM_ADDED_NORMALIZED = 16  /* matched in the second (normalized) pass */
};

typedef struct mlm_special {
    int32_t id;
    const char *text; /* borrowed from the set's NAMES, NUL-terminated */
    size_t len;
    unsigned flags; /* MLM_ADDED_* */
} mlm_special;

typedef struct mlm_special_set {
    int32_t n;
    mlm_special *tok; /* owned: (n), sorted by id */
    int32_t *by_len;  /* owned: (n) indices into TOK, longest text first, then by id
                         (llama.cpp's matching order); mlm_specials_build only, else NULL */
    char *names;      /* owned: every text, NUL-separated */
    int32_t max_id;   /* -1 when empty */
    size_t max_len;
    unsigned char first[256]; /* 1 for bytes some special's text starts with */
    int only_first;           /* the one byte every text starts with, or -1 */
    unsigned any_flags;       /* the union of every token's flags */
} mlm_special_set;

/* One added token to build a set from (the text is copied). */
typedef struct mlm_special_def {
    int32_t id;
    const char *text;
    size_t len;
    unsigned flags;
} mlm_special_def;

/* The flavour implied by a tiktoken file of N_RANKS ranks. */
mlm_tok_flavour mlm_specials_flavour_for(int32_t n_ranks);

/* Builds FLAVOUR's specials into S. NOMEM. */
mlm_status mlm_specials_init(mlm_special_set *s, mlm_tok_flavour flavour, mlm_error *err);
void mlm_specials_deinit(mlm_special_set *s);

/* Builds S from N definitions with distinct ids and distinct non-empty texts (the caller
 * checks both). NOMEM. */
mlm_status mlm_specials_build(mlm_special_set *s, const mlm_special_def *defs, int32_t n,
                              mlm_error *err);

/* The special with id ID, or NULL. */
const mlm_special *mlm_specials_by_id(const mlm_special_set *s, int32_t id);
/* The special whose text is exactly TEXT[0..LEN), or NULL. */
const mlm_special *mlm_specials_by_text(const mlm_special_set *s, const char *text, size_t len);

/* The first position in P[0..N) where a special's text starts (longest text wins at a
 * position, as tiktoken's allowed_special="all"): returns it and sets *AT, or NULL. */
const mlm_special *mlm_specials_find(const mlm_special_set *s, const unsigned char *p, size_t n,
                                     size_t *at);

#endif
