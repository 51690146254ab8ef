/* tokenizer/pretok.h: the regex pre-tokenizer (splits text into pieces before BPE).
 * Compiled PCRE2 patterns (UTF | UCP, JIT when available) are owned by the tokenizer and
 * shared read-only; every encode call owns an iterator with its own match data and, only
 * when a match overflows the default 32 KiB JIT stack, its own larger JIT stack (then the
 * interpreter as a last resort), so long whitespace runs never fail.
 *
 * tiktoken mode: one pattern; pieces are the consecutive non-overlapping matches, as
 * tiktoken's find_iter yields them. Split mode (Hugging Face, llama.cpp): a sequence of up
 * to MLM_PRETOK_MAX_STEPS steps, each splitting every piece the step before it made, the
 * way tokenizers' Sequence of Split pre-tokenizers and llama.cpp's list of regexes do. A
 * step's matches and the gaps between them are segments (tokenizers' find_matches: empty
 * matches included, the search after an empty match following Oniguruma's find_iter); its
 * behaviour (tokenizers' SplitDelimiterBehavior) and invert flag decide which segments are
 * pieces, joined how; empty pieces are dropped. With no step each stretch is one piece. */
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

/* Qwen2's pattern (Qwen2, Qwen2.5, Qwen3 tokenizer.json): Llama 3's with single digits. */
#define MLM_PRETOK_QWEN2                                                                           \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "                          \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* GPT-2's pattern: Hugging Face's ByteLevel pre-tokenizer with use_regex = true. */
#define MLM_PRETOK_GPT2                                                                            \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* How a step's segments become pieces (tokenizers' SplitDelimiterBehavior). */
typedef enum mlm_split_behavior {
    MLM_SPLIT_ISOLATED = 0, /* every match and every gap is a piece */
    MLM_SPLIT_REMOVED,      /* gaps are pieces, matches are dropped */
    MLM_SPLIT_MERGED_PREV,  /* a match joins the gap before it */
    MLM_SPLIT_MERGED_NEXT,  /* a match joins the gap after it */
    MLM_SPLIT_CONTIGUOUS    /* consecutive matches (or consecutive gaps) form one piece */
} mlm_split_behavior;

#define MLM_PRETOK_MAX_STEPS 8

/* A step to compile: PATTERN (a regex, or with LITERAL a plain string; NULL or an empty
 * literal splits nothing), its behaviour, and INVERT (matches count as gaps and gaps as
 * matches). WHERE names the step in messages ("tokenizer.json: pre_tokenizer..."). */
typedef struct mlm_pretok_spec {
    const char *pattern; /* borrowed */
    int literal;
    mlm_split_behavior behavior;
    int invert;
    const char *where; /* borrowed */
} mlm_pretok_spec;

typedef struct mlm_pretok_step {
    pcre2_code *code; /* owned; read-only after init; NULL: the step splits nothing */
    int jit;          /* 1 when JIT-compiled */
    mlm_split_behavior behavior;
    int invert;
} mlm_pretok_step;

typedef struct mlm_pretok {
    int hf;      /* 1: split mode (Hugging Face / llama.cpp), 0: tiktoken mode */
    int n_steps; /* tiktoken mode: 1; split mode: 0 (no splitting) .. MLM_PRETOK_MAX_STEPS */
    mlm_pretok_step step[MLM_PRETOK_MAX_STEPS];
} mlm_pretok;

/* tiktoken mode: compiles PATTERN (UTF | UCP). Text given to the iterator must be valid
 * UTF-8 (the encoder repairs it first); matching skips PCRE2's own UTF check. FORMAT if the
 * pattern does not compile (with PCRE2's message and offset), NOMEM. */
mlm_status mlm_pretok_init(mlm_pretok *p, const char *pattern, mlm_error *err);
/* Split mode with one Isolated step: PATTERN (a regex, or with LITERAL a plain string) or
 * NULL for no splitting; an empty literal also splits nothing (tokenizers' behaviour).
 * FORMAT names WHAT (the file and field) when the pattern does not compile. */
mlm_status mlm_pretok_init_hf(mlm_pretok *p, const char *pattern, int literal, const char *what,
                              mlm_error *err);
/* Split mode with N steps (0..MLM_PRETOK_MAX_STEPS), applied in order. FORMAT names the
 * step's WHERE when its pattern does not compile; INVALID_ARG for too many steps. */
mlm_status mlm_pretok_init_steps(mlm_pretok *p, const mlm_pretok_spec *specs, int n,
                                 mlm_error *err);
void mlm_pretok_deinit(mlm_pretok *p);

/* One step's matching state inside an iterator (split mode). Offsets are absolute. */
typedef struct mlm_pretok_level {
    pcre2_match_data *md; /* owned */
    int active;           /* splitting the piece [base, end) */
    size_t base, end;
    size_t pos, prev_end, last_end; /* next search start; end of the last segment; end of
                                       the last match (Oniguruma's empty-match rule) */
    int have_last, raw_done;
    int held; /* a match found after a gap, returned next */
    size_t held_a, held_b;
    int pend, pend_match, prev_match; /* the behaviour's piece waiting for the next segment */
    size_t pend_a, pend_b;
} mlm_pretok_level;

/* Per-call matching state; not shared between threads. */
typedef struct mlm_pretok_iter {
    const mlm_pretok *p;       /* borrowed */
    pcre2_match_context *mctx; /* owned, created on the first JIT stack overflow */
    pcre2_jit_stack *stack;    /* owned, idem */
    const unsigned char *text; /* borrowed, valid UTF-8 */
    size_t len, pos;           /* pos: tiktoken mode's next search start */
    int top_done;              /* split mode: the whole text was handed to the first step */
    mlm_pretok_level lv[MLM_PRETOK_MAX_STEPS];
} mlm_pretok_iter;

/* NOMEM. The iterator must be deinitialised even after a later error. */
mlm_status mlm_pretok_iter_init(mlm_pretok_iter *it, const mlm_pretok *p, mlm_error *err);
void mlm_pretok_iter_deinit(mlm_pretok_iter *it);
/* Starts iterating over TEXT[0..LEN) (borrowed until the next reset). */
void mlm_pretok_iter_reset(mlm_pretok_iter *it, const unsigned char *text, size_t len);

/* The next piece: *FOUND = 1 and [*START, *END) byte offsets into the text (never empty),
 * or *FOUND = 0 at the end. tiktoken mode skips text no alternative matches (never happens
 * with the Llama 3 pattern, which covers every character); split mode returns it as a
 * piece unless a behaviour drops it. INTERNAL if PCRE2 fails outright; UNSUPPORTED when a
 * split-mode pattern backtracks catastrophically. */
mlm_status mlm_pretok_next(mlm_pretok_iter *it, size_t *start, size_t *end, int *found,
                           mlm_error *err);

#endif
