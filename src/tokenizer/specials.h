/* tokenizer/specials.h: special (added) tokens: ids outside the BPE ranks, each with the
 * literal text it decodes to. A tokenizer flavour picks its set (Llama 3's 256 tokens, or
 * cl100k_base's five); the set owns its table and names and is immutable afterwards. Also
 * finds special-token text inside input for parse_special encoding. */
#ifndef MESHLM_TOKENIZER_SPECIALS_H
#define MESHLM_TOKENIZER_SPECIALS_H

#include <stddef.h>
#include <stdint.h>

#include "meshlm.h"

/* Which vocabulary family a tokenizer belongs to; decides its specials and chat format.
 * Today every flavour is a tiktoken file told apart by its rank count; a Hugging Face
 * tokenizer.json flavour (Phi-4) would add a value here and its own loader. */
typedef enum mlm_tok_flavour {
    MLM_TOK_PLAIN = 0, /* any other rank count: no special tokens, no chat format */
    MLM_TOK_LLAMA3,    /* 128000 ranks + 256 specials 128000..128255 */
    MLM_TOK_CL100K     /* 100256 ranks + cl100k_base's 5 specials (100257..100276) */
} mlm_tok_flavour;

typedef struct mlm_special {
    int32_t id;
    const char *text; /* borrowed from the set's NAMES, NUL-terminated */
    size_t len;
} mlm_special;

typedef struct mlm_special_set {
    int32_t n;
    mlm_special *tok; /* owned: (n), sorted by id */
    char *names;      /* owned: every text, NUL-separated */
    int32_t max_id;   /* -1 when empty */
    size_t max_len;
    unsigned char first[256]; /* 1 for bytes some special's text starts with */
} mlm_special_set;

/* The flavour implied by a tiktoken file of N_RANKS ranks. */
mlm_tok_flavour mlm_specials_flavour_for(int32_t n_ranks);

/* Builds FLAVOUR's specials into S. NOMEM. */
mlm_status mlm_specials_init(mlm_special_set *s, mlm_tok_flavour flavour, mlm_error *err);
void mlm_specials_deinit(mlm_special_set *s);

/* The special with id ID, or NULL. */
const mlm_special *mlm_specials_by_id(const mlm_special_set *s, int32_t id);
/* The special whose text is exactly TEXT[0..LEN), or NULL. */
const mlm_special *mlm_specials_by_text(const mlm_special_set *s, const char *text, size_t len);

/* The first position in P[0..N) where a special's text starts (longest text wins at a
 * position, as tiktoken's allowed_special="all"): returns it and sets *AT, or NULL. */
const mlm_special *mlm_specials_find(const mlm_special_set *s, const unsigned char *p, size_t n,
                                     size_t *at);

#endif
