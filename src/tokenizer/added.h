/* tokenizer/added.h: finding Hugging Face added tokens in raw text (tokenizers'
 * AddedVocabulary::find_matches). Leftmost-longest, non-overlapping matches of the tokens
 * of one pass (normalized or not); a special token is left as text when special parsing
 * is off (tokenizers' encode_special_tokens); single_word drops a match touching a word
 * character; lstrip / rstrip widen a match over the whitespace beside it (never back over
 * what an earlier match took). The result covers the text with token and text splits.
 * GGUF files use llama.cpp's partition instead (mlm_added_partition).
 * Also the Unicode White_Space test (Rust's \s) that stripping and the chat format use. */
#ifndef MESHLM_TOKENIZER_ADDED_H
#define MESHLM_TOKENIZER_ADDED_H

#include <stddef.h>
#include <stdint.h>

#include "meshlm.h"
#include "tokenizer/pretok.h"
#include "tokenizer/specials.h"

/* A stretch of the text: an added token (ID >= 0) or text to pre-tokenize (ID == -1). */
typedef struct mlm_added_split {
    int32_t id;
    size_t a, b; /* [a, b) byte offsets into the text */
} mlm_added_split;

/* A caller-owned growable list of splits (reused across calls: set n = 0). */
typedef struct mlm_added_splits {
    mlm_added_split *v; /* owned */
    size_t n, cap;
} mlm_added_splits;

void mlm_added_splits_deinit(mlm_added_splits *l);

/* Rust regex \w (Unicode: Alphabetic, marks, decimal digits, connector punctuation,
 * Join_Control), for single_word tokens. */
#define MLM_ADDED_WORD_CLASS "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]"

/* Appends the splits of TEXT[0..LEN) (valid UTF-8) for the tokens of S whose
 * MLM_ADDED_NORMALIZED flag equals NORMALIZED_PASS (0 or MLM_ADDED_NORMALIZED). WORD is the
 * compiled MLM_ADDED_WORD_CLASS (needed only when some token is single_word). Text splits
 * are never empty; with no match the whole text is one text split. NOMEM. */
mlm_status mlm_added_find(const mlm_special_set *s, const mlm_pretok *word,
                          const unsigned char *text, size_t len, unsigned normalized_pass,
                          int parse_special, mlm_added_splits *out, mlm_error *err);

/* llama.cpp's special-token partition (tokenizer_st_partition), used for GGUF files: the
 * tokens of S longest first (S->by_len; among equal lengths by id), each splitting every
 * text stretch left so far at each of its occurrences, left to right. Tokens flagged
 * MLM_ADDED_SPECIAL (llama.cpp's control and unknown tokens) take part only with
 * PARSE_SPECIAL, the others (user-defined) always; nothing is stripped. OUT is overwritten
 * with the splits covering TEXT[0..LEN); TMP is scratch. NOMEM. */
mlm_status mlm_added_partition(const mlm_special_set *s, const unsigned char *text, size_t len,
                               int parse_special, mlm_added_splits *out, mlm_added_splits *tmp,
                               mlm_error *err);

/* Whether CP has the Unicode White_Space property (Rust's char::is_whitespace and \s). */
int mlm_is_white_space(uint32_t cp);

/* Bytes of White_Space characters at the start of P[0..N) (valid UTF-8). */
size_t mlm_ws_prefix(const unsigned char *p, size_t n);
/* Where the run of White_Space characters that ends P[0..N) starts (N if none). */
size_t mlm_ws_suffix(const unsigned char *p, size_t n);

#endif
