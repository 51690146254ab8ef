/* tests/fuzz/fuzz_tokenizer_json.c: libFuzzer target for the Hugging Face tokenizer.json
 * loader and the HF encoding path. Each input is used twice:
 *  1. as a tokenizer.json (mlm_hf_load_json_memory); when it loads, a fixed text is encoded
 *     with and without special parsing (and with the BOS when there is one), checking: ids
 *     are in range, decode succeeds, streaming detok gives the decoded bytes UTF-8-repaired,
 *     the two merge engines agree on the text as one piece, and with no added tokens, no
 *     prefix space, no missing single bytes and no Removed split decoding gives the text back;
 *  2. as text for Phi-4's tokenizer (loaded once from the repository root, where make fuzz
 *     runs), in both special modes: ids in range, and without special parsing decoding
 *     gives the UTF-8-repaired input back (Phi-4's added tokens are all special).
 * A broken invariant traps (libFuzzer reports it as a crash). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/bpe.h"
#include "tokenizer/hf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "fuzz_bpe.h"

#define PHI4 "tests/data/tokenizer/phi4"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static mlm_tokenizer *g_phi4; /* loaded once, read-only */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    mlm_error err = {0};
    if (mlm_tokenizer_load(PHI4, &g_phi4, &err) != MLM_OK)
        fprintf(stderr, "fuzz_tokenizer_json: %s (text part disabled)\n", err.msg);
    return 0;
}

/* Decodes IDS, checks the streaming detokenizer gives the same bytes repaired, and returns
 * the decoded bytes (malloc'd) in *OUT. */
static void decode_checked(const mlm_tokenizer *tok, const mlm_tokens *ids, char **out,
                           size_t *len) {
    mlm_error err;
    for (int64_t i = 0; i < ids->n; i++)
        REQUIRE(ids->ids[i] >= 0 && ids->ids[i] < mlm_tokenizer_n_vocab(tok));
    REQUIRE(mlm_tokenizer_decode(tok, ids->ids, ids->n, out, len, &err) == MLM_OK);
    unsigned char *fixed = NULL;
    size_t flen = 0;
    REQUIRE(mlm_utf8_repair((const unsigned char *)*out, *len, &fixed, &flen, &err) == MLM_OK);
    mlm_detok d;
    mlm_detok_init(&d);
    size_t o = 0;
    char buf[4 * 1024 + 64];
    for (int64_t i = 0; i < ids->n; i++) {
        size_t w = 0;
        REQUIRE(mlm_detok_push(&d, tok, ids->ids[i], buf, sizeof buf, &w, &err) == MLM_OK);
        REQUIRE(o + w <= flen && memcmp(fixed + o, buf, w) == 0);
        o += w;
    }
    o += mlm_detok_flush(&d, buf, sizeof buf);
    REQUIRE(o == flen);
    free(fixed);
}

/* Whether encoding keeps every byte: no added tokens, no prefix space, every single byte a
 * token, no Split step that removes what it matches. */
static int lossless(const mlm_tokenizer *tok) {
    if (tok->specials.n || tok->add_prefix_space || tok->vocab.n_missing_bytes) return 0;
    for (int i = 0; i < tok->pretok.n_steps; i++)
        if (tok->pretok.step[i].behavior == MLM_SPLIT_REMOVED) return 0;
    return 1;
}

static void as_tokenizer_json(const uint8_t *data, size_t size) {
    mlm_tokenizer *tok = NULL;
    mlm_error err;
    if (mlm_hf_load_json_memory(data, size, "fuzz.json", &tok, &err) != MLM_OK) {
        REQUIRE(tok == NULL && err.msg[0] != 0);
        return;
    }
    static const char text[] =
        "Hello world, I'M 12345 \xc3\xa9\xe4\xb8\xad\t\n\n  <|im_end|> [x]  ";
    for (int mode = 0; mode < 3; mode++) {
        if (mode == 2 && mlm_tokenizer_bos_id(tok) < 0) break;
        mlm_tokens ids;
        mlm_tokens_init(&ids);
        mlm_encode_params p = mlm_encode_default_params();
        p.parse_special = mode > 0;
        p.add_bos = mode == 2;
        REQUIRE(mlm_tokenizer_encode(tok, text, sizeof text - 1, &p, &ids, &err) == MLM_OK);
        char *dec = NULL;
        size_t len = 0;
        decode_checked(tok, &ids, &dec, &len);
        if (mode == 0 && lossless(tok))
            REQUIRE(len == sizeof text - 1 && memcmp(dec, text, len) == 0);
        free(dec);
        mlm_tokens_deinit(&ids);
    }
    fuzz_merges_agree(&tok->vocab, &tok->merges, (const unsigned char *)text, sizeof text - 1);
    mlm_tokenizer_free(tok);
}

static void as_text(const uint8_t *data, size_t size) {
    if (!g_phi4) return;
    mlm_error err;
    unsigned char *fixed = NULL;
    size_t flen = 0;
    REQUIRE(mlm_utf8_repair(data, size, &fixed, &flen, &err) == MLM_OK);
    for (int special = 0; special < 2; special++) {
        mlm_tokens ids;
        mlm_tokens_init(&ids);
        mlm_encode_params p = mlm_encode_default_params();
        p.parse_special = special;
        REQUIRE(mlm_tokenizer_encode(g_phi4, (const char *)data, size, &p, &ids, &err) == MLM_OK);
        char *dec = NULL;
        size_t len = 0;
        decode_checked(g_phi4, &ids, &dec, &len);
        if (!special) REQUIRE(len == flen && memcmp(dec, fixed, len) == 0);
        free(dec);
        mlm_tokens_deinit(&ids);
    }
    free(fixed);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    as_tokenizer_json(data, size);
    as_text(data, size);
    return 0;
}
