/* tokenizer/pretok.h: the regex pre-tokenizer (splits text into pieces before BPE).
 * A compiled PCRE2 pattern (UTF | UCP, JIT when available) is owned by the tokenizer and
 * shared read-only; every encode call owns an iterator with its own match data and, only
 * when a match overflows the default 32 KiB JIT stack, its own larger JIT stack (then the
 * interpreter as a last resort), so long whitespace runs never fail. tiktoken mode: pieces
 * are the consecutive non-overlapping matches, as tiktoken's find_iter yields them.
 * Hugging Face mode (Split with behavior Isolated): the text between matches is a piece
 * too, empty matches only split, and the search after an empty match follows Oniguruma's
 * find_iter (tokenizers' SysRegex); with no pattern each stretch is one piece. */
#ifndef MESHLM_TOKENIZER_PRETOK_H
#define MESHLM_TOKENIZER_PRETOK_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>

#include "meshlm.h"

/* Meta's Llama 3 pattern (spec 4.3), also OpenAI's cl100k_base pattern. */
#define MLM_PRETOK_LLAMA3                                                                          \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "                     \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* GPT-2's pattern: Hugging Face's ByteLevel pre-tokenizer with use_regex = true. */
#define MLM_PRETOK_GPT2                                                                            \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

typedef struct mlm_pretok {
    pcre2_code *code; /* owned; read-only after init; NULL: no splitting (HF mode only) */
    int jit;          /* 1 when JIT-compiled */
    int hf;           /* 1: Hugging Face Split(Isolated) semantics */
} mlm_pretok;

/* Compiles PATTERN (UTF | UCP). Text given to the iterator must be valid UTF-8 (the
 * encoder repairs it first); matching skips PCRE2's own UTF check. FORMAT if the pattern
 * does not compile (with PCRE2's message and offset), NOMEM. */
mlm_status mlm_pretok_init(mlm_pretok *p, const char *pattern, mlm_error *err);
/* Hugging Face mode: PATTERN (a regex, or with LITERAL a plain string) or NULL for no
 * splitting; an empty literal also splits nothing (tokenizers' behaviour). FORMAT names
 * WHAT (the file and field) when the pattern does not compile. */
mlm_status mlm_pretok_init_hf(mlm_pretok *p, const char *pattern, int literal, const char *what,
                              mlm_error *err);
void mlm_pretok_deinit(mlm_pretok *p);

/* Per-call matching state; not shared between threads. */
typedef struct mlm_pretok_iter {
    const mlm_pretok *p;       /* borrowed */
    pcre2_match_data *md;      /* owned */
    pcre2_match_context *mctx; /* owned, created on the first JIT stack overflow */
    pcre2_jit_stack *stack;    /* owned, idem */
    const unsigned char *text; /* borrowed, valid UTF-8 */
    size_t len, pos;
    /* Hugging Face mode: end of the last match (the next gap starts there), the last
     * match's end for the empty-match rule, and a match held while its gap is returned. */
    size_t prev_end, last_end, held_a, held_b;
    int have_last, held;
} mlm_pretok_iter;

/* NOMEM. The iterator must be deinitialised even after a later error. */
mlm_status mlm_pretok_iter_init(mlm_pretok_iter *it, const mlm_pretok *p, mlm_error *err);
void mlm_pretok_iter_deinit(mlm_pretok_iter *it);
/* Starts iterating over TEXT[0..LEN) (borrowed until the next reset). */
void mlm_pretok_iter_reset(mlm_pretok_iter *it, const unsigned char *text, size_t len);

/* The next piece: *FOUND = 1 and [*START, *END) byte offsets into the text (never empty),
 * or *FOUND = 0 at the end. tiktoken mode skips text no alternative matches (never happens
 * with the Llama 3 pattern, which covers every character); HF mode returns it as a piece.
 * INTERNAL if PCRE2 fails outright. */
mlm_status mlm_pretok_next(mlm_pretok_iter *it, size_t *start, size_t *end, int *found,
                           mlm_error *err);

#endif
