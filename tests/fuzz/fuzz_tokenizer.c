/* tests/fuzz/fuzz_tokenizer.c: libFuzzer target for the tokenizer. Each input is used twice:
 *  1. as a tiktoken vocabulary file (mlm_tokenizer_load_memory); when it loads, a short text
 *     is encoded, decoded and streamed through the detokenizer with it;
 *  2. as text for the real Llama 3 tokenizer (loaded once, from the repository root where
 *     make fuzz runs), in both special modes, checking: encode succeeds, ids are in range,
 *     decode gives the UTF-8-repaired input back, streaming detok gives the same bytes, and
 *     the two BPE engines agree on the input taken as one piece.
 * A broken invariant traps (libFuzzer reports it as a crash). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "fuzz_bpe.h"

#define LLAMA3_MODEL "tests/data/tokenizer/llama3/tokenizer.model"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static mlm_tokenizer *g_real; /* loaded once, read-only */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    mlm_error err = {0};
    if (mlm_tokenizer_load(LLAMA3_MODEL, &g_real, &err) != MLM_OK)
        fprintf(stderr, "fuzz_tokenizer: %s (text part disabled)\n", err.msg);
    return 0;
}

/* Streams IDS through the detokenizer and checks the bytes equal WANT[0..N). */
static void check_detok(const mlm_tokenizer *tok, const mlm_tokens *ids, const char *want,
                        size_t n) {
    mlm_detok d;
    mlm_detok_init(&d);
    size_t o = 0;
    char buf[4 * 1024 + 64];
    for (int64_t i = 0; i < ids->n; i++) {
        size_t w = 0;
        mlm_error err;
        REQUIRE(mlm_detok_push(&d, tok, ids->ids[i], buf, sizeof buf, &w, &err) == MLM_OK);
        REQUIRE(mlm_utf8_valid_prefix((const unsigned char *)buf, w) == w);
        REQUIRE(o + w <= n && memcmp(want + o, buf, w) == 0);
        o += w;
    }
    o += mlm_detok_flush(&d, buf, sizeof buf);
    REQUIRE(o == n);
}

static void as_vocab_file(const uint8_t *data, size_t size) {
    mlm_tokenizer *tok = NULL;
    mlm_error err;
    if (mlm_tokenizer_load_memory(data, size, "fuzz.model", &tok, &err) != MLM_OK) {
        REQUIRE(tok == NULL && err.msg[0] != 0);
        return;
    }
    static const char text[] = "Hello world, I'm 12345 \xc3\xa9\xe4\xb8\xad\t\n\n  <|eot_id|>";
    for (int special = 0; special < 2; special++) {
        mlm_tokens ids;
        mlm_tokens_init(&ids);
        mlm_encode_params p = mlm_encode_default_params();
        p.parse_special = special;
        REQUIRE(mlm_tokenizer_encode(tok, text, sizeof text - 1, &p, &ids, &err) == MLM_OK);
        char *dec = NULL;
        size_t len = 0;
        REQUIRE(mlm_tokenizer_decode(tok, ids.ids, ids.n, &dec, &len, &err) == MLM_OK);
        REQUIRE(len == sizeof text - 1 && memcmp(dec, text, len) == 0);
        check_detok(tok, &ids, dec, len);
        free(dec);
        mlm_tokens_deinit(&ids);
    }
    mlm_tokenizer_free(tok);
}

static void as_text(const uint8_t *data, size_t size) {
    if (!g_real) return;
    mlm_error err;
    unsigned char *fixed = NULL;
    size_t flen = 0;
    REQUIRE(mlm_utf8_repair(data, size, &fixed, &flen, &err) == MLM_OK);
    for (int special = 0; special < 2; special++) {
        mlm_tokens ids;
        mlm_tokens_init(&ids);
        mlm_encode_params p = mlm_encode_default_params();
        p.parse_special = special;
        REQUIRE(mlm_tokenizer_encode(g_real, (const char *)data, size, &p, &ids, &err) == MLM_OK);
        for (int64_t i = 0; i < ids.n; i++)
            REQUIRE(ids.ids[i] >= 0 && ids.ids[i] < mlm_tokenizer_n_vocab(g_real));
        char *dec = NULL;
        size_t len = 0;
        REQUIRE(mlm_tokenizer_decode(g_real, ids.ids, ids.n, &dec, &len, &err) == MLM_OK);
        REQUIRE(len == flen && memcmp(dec, fixed, len) == 0);
        check_detok(g_real, &ids, dec, len);
        free(dec);
        mlm_tokens_deinit(&ids);
    }
    /* The two merge engines on the whole input as one piece (bounded: the reference one is
     * quadratic). */
    if (size >= 2 && size <= 512) fuzz_merges_agree(&g_real->vocab, NULL, data, size);
    free(fixed);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    as_vocab_file(data, size);
    as_text(data, size);
    return 0;
}
