/* tests/fuzz/fuzz_bpe.h: what the tokenizer fuzz targets share: REQUIRE, which traps on a
 * broken invariant (libFuzzer reports it as a crash), and the check that the two BPE merge
 * engines agree on a text taken as one piece. */
#ifndef MESHLM_FUZZ_BPE_H
#define MESHLM_FUZZ_BPE_H

#include <stdio.h>
#include <string.h>

#include "tokenizer/bpe.h"

#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond);                             \
            __builtin_trap();                                                                      \
        }                                                                                          \
    } while (0)

/* mlm_bpe_merge_ref and mlm_bpe_merge_heap give the same ids for TEXT[0..LEN) with VOCAB and
 * MERGES (NULL: tiktoken ranks). The reference engine is quadratic: keep LEN small. */
static inline void fuzz_merges_agree(const mlm_vocab *vocab, const mlm_merges *merges,
                                     const unsigned char *text, size_t len) {
    mlm_error err;
    mlm_bpe_scratch s;
    mlm_bpe_scratch_init(&s);
    mlm_tokens a, b;
    mlm_tokens_init(&a);
    mlm_tokens_init(&b);
    REQUIRE(mlm_bpe_merge_ref(vocab, merges, text, len, &s, &a, &err) == MLM_OK);
    REQUIRE(mlm_bpe_merge_heap(vocab, merges, text, len, &s, &b, &err) == MLM_OK);
    REQUIRE(a.n == b.n && memcmp(a.ids, b.ids, (size_t)a.n * sizeof *a.ids) == 0);
    mlm_tokens_deinit(&a);
    mlm_tokens_deinit(&b);
    mlm_bpe_scratch_deinit(&s);
}

#endif
