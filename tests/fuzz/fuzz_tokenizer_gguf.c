/* tests/fuzz/fuzz_tokenizer_gguf.c: libFuzzer target for the GGUF vocabulary loader
 * (mlm_tokenizer_load_gguf_memory) and the GGUF encoding path. The input is one .gguf file;
 * when it loads, fixed texts are encoded with and without special parsing (and with the BOS
 * when there is one), checking: ids are in range, decode succeeds and equals the streaming
 * detokenizer's bytes UTF-8-repaired, the two merge engines agree on a text as one piece,
 * and a chat prompt encodes when there is a chat format. A broken invariant traps (libFuzzer
 * reports it as a crash). Seeds: tests/fuzz/corpus/tokenizer_gguf (made by
 * tests/fixtures/make_smollm2_tokenizer_fixtures.py). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "fuzz_bpe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_decode(const mlm_tokenizer *tok, const mlm_tokens *ids) {
    mlm_error err;
    for (int64_t i = 0; i < ids->n; i++)
        REQUIRE(ids->ids[i] >= 0 && ids->ids[i] < mlm_tokenizer_n_vocab(tok));
    char *dec = NULL;
    size_t len = 0;
    REQUIRE(mlm_tokenizer_decode(tok, ids->ids, ids->n, &dec, &len, &err) == MLM_OK);
    unsigned char *fixed = NULL;
    size_t flen = 0;
    REQUIRE(mlm_utf8_repair((const unsigned char *)dec, len, &fixed, &flen, &err) == MLM_OK);
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
    free(dec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mlm_tokenizer *tok = NULL;
    mlm_error err;
    if (mlm_tokenizer_load_gguf_memory(data, size, "fuzz.gguf", &tok, &err) != MLM_OK) {
        REQUIRE(tok == NULL && err.msg[0] != 0);
        return 0;
    }
    static const char text[] = "Hello world, I'M 12345 \xc3\xa9\xe4\xb8\xad\x04!\x04! \t\n\n  "
                               "<|im_start|>user\n[u] <|endoftext|> $100 a+b ";
    for (int mode = 0; mode < 3; mode++) {
        if (mode == 2 && mlm_tokenizer_bos_id(tok) < 0) break;
        mlm_tokens ids;
        mlm_tokens_init(&ids);
        mlm_encode_params p = mlm_encode_default_params();
        p.parse_special = mode > 0;
        p.add_bos = mode == 2;
        REQUIRE(mlm_tokenizer_encode(tok, text, sizeof text - 1, &p, &ids, &err) == MLM_OK);
        check_decode(tok, &ids);
        mlm_tokens_deinit(&ids);
    }
    fuzz_merges_agree(&tok->vocab, &tok->merges, (const unsigned char *)text, sizeof text - 1);
    if (mlm_tokenizer_chat_format(tok)) {
        mlm_chat_message m[2] = {{"user", "Hi 42"}, {"assistant", "ok"}};
        mlm_tokens ids;
        mlm_tokens_init(&ids);
        REQUIRE(mlm_tokenizer_encode_chat(tok, m, 2, 1, &ids, &err) == MLM_OK);
        check_decode(tok, &ids);
        mlm_tokens_deinit(&ids);
    }
    mlm_tokenizer_free(tok);
    return 0;
}
