/* tokenizer/vocab.h: a byte-level BPE vocabulary: token bytes <-> rank (= token id).
 * Parsed from tiktoken text ("<base64> <rank>" per line, Llama 3 tokenizer.model and
 * cl100k_base.tiktoken), or built from decoded tokens (Hugging Face byte-level files,
 * hf_*.c). The vocabulary owns a copy of every token's bytes and a hash
 * table with open addressing (linear probing) from bytes to rank; it does not keep the file.
 * Immutable after parsing, so lookups may run concurrently. Special tokens live elsewhere. */
#ifndef MESHLM_TOKENIZER_VOCAB_H
#define MESHLM_TOKENIZER_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "meshlm.h"

/* The longest token accepted in a vocabulary file (Llama 3 and cl100k: 128 bytes). */
#define MLM_VOCAB_MAX_TOKEN_BYTES 1024

typedef struct mlm_vocab_tok {
    uint32_t off; /* into bytes */
    uint32_t len;
} mlm_vocab_tok;

/* A hash slot holds the token's first 8 bytes (zero-padded) and length, so that a lookup
 * of a key up to 8 bytes long (90% of pieces in English text) touches one cache line. */
typedef struct mlm_vocab_slot {
    uint64_t head; /* the first min(len, 8) bytes, little-endian, zero-padded */
    int32_t rank;  /* -1: empty */
    uint32_t len;
} mlm_vocab_slot;

typedef struct mlm_vocab {
    int32_t n;             /* ranks are 0..n-1, dense */
    unsigned char *bytes;  /* owned: every token's bytes, file order */
    mlm_vocab_tok *tok;    /* owned: (n) where token R's bytes lie in BYTES */
    mlm_vocab_slot *slots; /* owned: (mask + 1) hash slots, at most half full */
    uint32_t mask;
    int32_t byte_rank[256]; /* rank of each single byte; -1 for a byte that is no token
                               (mlm_vocab_build only; tiktoken files have all 256) */
    int n_missing_bytes;    /* bytes with byte_rank -1 */
    size_t max_token_len;
} mlm_vocab;

/* Parses tiktoken text DATA[0..LEN) into V (which it initialises). NAME is used in
 * messages only. Rules: blank lines (spaces, tabs, CR) are skipped; every other line is
 * strict standard base64 (padded, non-empty), blanks, a decimal rank, optional trailing
 * blanks/CR. Ranks must be unique and below the number of entries (so dense 0..n-1); token
 * bytes must be unique; all 256 single bytes must have a rank. FORMAT names NAME and the
 * line ("tokenizer.model: line 7: ..."); NOMEM. On failure V is left empty. */
mlm_status mlm_vocab_parse(mlm_vocab *v, const unsigned char *data, size_t len, const char *name,
                           mlm_error *err);

/* Builds V from N tokens already decoded: token I's bytes are BYTES[TOK[I].off ..
 * + TOK[I].len). Takes ownership of BYTES and TOK (freed on failure too). Checks that no
 * token is empty or longer than MLM_VOCAB_MAX_TOKEN_BYTES and that no two ids share bytes.
 * Single bytes may be missing (SmolLM2 has 235 of 256): their byte_rank is -1 and the
 * encoder drops them the way the file's own tokenizer does. FORMAT messages start with
 * WHAT (e.g. "tokenizer.json: model.vocab"); NOMEM. On failure V is left empty. */
mlm_status mlm_vocab_build(mlm_vocab *v, unsigned char *bytes, mlm_vocab_tok *tok, int32_t n,
                           const char *what, mlm_error *err);

/* Frees what V owns; V may be zeroed or half-built. */
void mlm_vocab_deinit(mlm_vocab *v);

/* The rank of the N bytes at P, or -1 if they are not a token. */
int32_t mlm_vocab_rank(const mlm_vocab *v, const unsigned char *p, size_t n);

/* A key hashed ahead of its lookup: making it also prefetches its first hash slot, so
 * that other work (matching the next piece, hashing the next pair) hides the cache miss. */
typedef struct mlm_vocab_key {
    uint64_t head;
    uint32_t slot;
} mlm_vocab_key;

mlm_vocab_key mlm_vocab_key_make(const mlm_vocab *v, const unsigned char *p, size_t n);
/* mlm_vocab_rank for bytes P[0..N) whose key K was made from them. */
int32_t mlm_vocab_rank_key(const mlm_vocab *v, const unsigned char *p, size_t n, mlm_vocab_key k);

/* Bytes of rank R (0 <= R < n), borrowed from V. */
static inline const unsigned char *mlm_vocab_bytes(const mlm_vocab *v, int32_t r, size_t *len) {
    *len = v->tok[r].len;
    return v->bytes + v->tok[r].off;
}

#endif
