/* tests/fuzz/fuzz_grammar.c: libFuzzer target for structured output's JSON Schema compiler and
 * matcher (src/sample/). The input is a schema, a NUL byte, then a document: the schema is
 * compiled (any bytes: a refusal is fine, a crash is not); when it compiles, the document is
 * fed byte by byte, and a refused byte must leave the state as it was (the same answer to
 * "may it end here", the next byte still taken). With the Llama 3 tokenizer present (the fuzzer
 * runs from the repository root), the mask is filled at the start and where the document
 * stops, and its first allowed token must be taken. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "meshlm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(c)                                                                                 \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

static mlm_tokenizer *tok;
static mlm_token_trie *trie;
static uint32_t *mask;

static void setup(void) {
    static int done;
    if (done) return;
    done = 1;
    if (mlm_tokenizer_load("tests/data/tokenizer/llama3/tokenizer.model", &tok, NULL) != MLM_OK)
        return;
    if (mlm_token_trie_create(tok, &trie, NULL) != MLM_OK) return;
    mask = malloc(((size_t)mlm_tokenizer_n_vocab(tok) + 31) / 32 * sizeof *mask);
}

/* The first token MASK allows; -1 when none. */
static int32_t first_allowed(int32_t n_vocab) {
    for (int32_t id = 0; id < n_vocab; id++)
        if (mask[id >> 5] >> (id & 31) & 1) return id;
    return -1;
}

static void check_mask(mlm_matcher *m) {
    if (!trie || !mask) return;
    int32_t n = mlm_matcher_fill_mask(m, mask);
    int32_t id = first_allowed(mlm_tokenizer_n_vocab(tok));
    REQUIRE((n == 0) == (id < 0));
    if (id >= 0) REQUIRE(mlm_matcher_accept_token(m, id));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    const uint8_t *nul = memchr(data, 0, size);
    size_t n_schema = nul ? (size_t)(nul - data) : size;
    const char *doc = nul ? (const char *)nul + 1 : "";
    size_t n_doc = nul ? size - n_schema - 1 : 0;
    mlm_grammar_wrap wrap = {"<a>", "</a>", ";", 1, 2};
    mlm_grammar *g = NULL;
    /* an input whose first byte is '!' is compiled with a wrap, the rest as the schema */
    int wrapped = n_schema > 0 && data[0] == '!';
    if (mlm_grammar_compile((const char *)data + wrapped, n_schema - (size_t)wrapped,
                            wrapped ? &wrap : NULL, &g, NULL) != MLM_OK) {
        REQUIRE(g == NULL);
        return 0;
    }
    mlm_matcher *m = NULL;
    if (mlm_matcher_create(g, trie, &m, NULL) != MLM_OK) {
        mlm_grammar_free(g);
        return 0;
    }
    check_mask(m);
    mlm_matcher_free(m);
    REQUIRE(mlm_matcher_create(g, trie, &m, NULL) == MLM_OK);
    size_t i = 0;
    for (; i < n_doc; i++) {
        int end = mlm_matcher_can_end(m);
        if (!mlm_matcher_accept_bytes(m, doc + i, 1)) {
            REQUIRE(mlm_matcher_can_end(m) == end);
            break;
        }
    }
    check_mask(m);
    mlm_matcher_free(m);
    mlm_grammar_free(g);
    return 0;
}
