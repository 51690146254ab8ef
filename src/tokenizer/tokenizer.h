/* tokenizer/tokenizer.h: the mlm_tokenizer handle, internal to the library.
 * A tokenizer is a BPE vocabulary (ranks = ids), a special-token set, a pre-tokenizer and
 * a flavour that selects the chat format. It owns all of them, keeps no file open, and is
 * immutable after loading: every encode/decode call may run concurrently. */
#ifndef MESHLM_TOKENIZER_TOKENIZER_H
#define MESHLM_TOKENIZER_TOKENIZER_H

#include "meshlm.h"
#include "tokenizer/pretok.h"
#include "tokenizer/specials.h"
#include "tokenizer/vocab.h"

struct mlm_tokenizer {
    mlm_tok_flavour flavour;
    char *name;               /* owned: the file it came from, for messages */
    mlm_vocab vocab;          /* owned: ids 0..vocab.n-1 */
    mlm_special_set specials; /* owned: ids vocab.n.. (may have gaps) */
    mlm_pretok pretok;        /* owned: compiled once, shared read-only */
    int32_t n_vocab;          /* highest id + 1 */
    int32_t bos_id;           /* -1 when the flavour has none */
};

/* Loads a tiktoken file held in memory, DATA[0..LEN) (only read during the call); NAME is
 * used in messages. Same statuses as mlm_tokenizer_load. Used by the fuzz target. */
mlm_status mlm_tokenizer_load_memory(const void *data, size_t len, const char *name,
                                     mlm_tokenizer **out, mlm_error *err);

#endif
