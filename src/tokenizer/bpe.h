/* tokenizer/bpe.h: byte-pair merging of one pre-tokenized piece.
 * Start with one part per byte; repeatedly merge the adjacent pair of lowest priority
 * (ties: leftmost); stop when no adjacent pair merges. Two priority sources share the
 * engines: tiktoken's (M == NULL: a pair's priority and merged id are the rank of its
 * concatenated bytes, any concatenation that is a token merges) and Hugging Face's merges
 * list (M != NULL: only listed pairs merge, priority = position in the list, merged id
 * from the list; HF Word::merge_all). Two engines give identical results: a direct
 * O(n^2) reference (tiktoken's _byte_pair_merge) and a heap + linked-list version for long
 * pieces. Callers own a scratch area reused across pieces so that encoding does not
 * allocate per piece. */
#ifndef MESHLM_TOKENIZER_BPE_H
#define MESHLM_TOKENIZER_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "meshlm.h"
#include "tokenizer/merges.h"
#include "tokenizer/vocab.h"

/* Pieces at least this long use the heap engine. */
#define MLM_BPE_HEAP_MIN 128

/* Reusable per-call working memory (not shared between threads). All arrays owned. */
typedef struct mlm_bpe_scratch {
    size_t cap;         /* entries in each array below */
    uint32_t *start;    /* reference: part start offsets (n + 1 with the end sentinel) */
    int32_t *rank;      /* priority of the pair starting at a part (INT32_MAX: no merge) */
    int32_t *nid;       /* id the pair starting at a part merges into */
    int32_t *tok;       /* token id of a part (heap: -1 once merged away) */
    uint32_t *next;     /* heap engine: next part's start */
    uint32_t *prev;     /* heap engine: previous part's start */
    uint64_t *heap;     /* heap engine: (rank << 32 | start) entries */
    mlm_vocab_key *key; /* reference engine: the initial pairs' hashed keys */
} mlm_bpe_scratch;

void mlm_bpe_scratch_init(mlm_bpe_scratch *s);
void mlm_bpe_scratch_deinit(mlm_bpe_scratch *s);

/* The merge alone, without the whole-piece lookup: the reference engine below
 * MLM_BPE_HEAP_MIN bytes, the heap engine above. */
mlm_status mlm_bpe_merge(const mlm_vocab *v, const mlm_merges *m, const unsigned char *p, size_t n,
                         mlm_bpe_scratch *s, mlm_tokens *out, mlm_error *err);

/* The two merge engines (exposed for tests). */
mlm_status mlm_bpe_merge_ref(const mlm_vocab *v, const mlm_merges *m, const unsigned char *p,
                             size_t n, mlm_bpe_scratch *s, mlm_tokens *out, mlm_error *err);
mlm_status mlm_bpe_merge_heap(const mlm_vocab *v, const mlm_merges *m, const unsigned char *p,
                              size_t n, mlm_bpe_scratch *s, mlm_tokens *out, mlm_error *err);

#endif
