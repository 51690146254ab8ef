/* test_tokenizer.c: the Llama 3 (and cl100k) tokenizer against reference outputs.
 * Expected ids come from llama.cpp's vocab test vectors and from tiktoken via
 * tests/fixtures/make_tokenizer_fixtures.py (books, edge cases, chat dialogs, streaming
 * detok). Also: round trips, malformed vocabulary files, BPE heap engine == reference,
 * pre-tokenizer on runs longer than PCRE2's default limits, concurrent encoding.
 * Paths are relative to the repository root (make test runs there). */
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "tokenizer_cases.h"
#include "meshlm.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretok.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

#define DATA "tests/data/"
#define LLAMA3_MODEL DATA "tokenizer/llama3/tokenizer.model"
#define CL100K_MODEL DATA "tokenizer/cl100k_base.tiktoken"

static mlm_tokenizer *g_llama, *g_cl100k; /* loaded once in main, read-only afterwards */

// ---- helpers ----

/* Compares ids; prints the first difference. Returns 1 when equal. */
static int same_ids(const char *what, int idx, const int32_t *got, int64_t n_got,
                    const int32_t *want, int64_t n_want) {
    int64_t i = 0;
    while (i < n_got && i < n_want && got[i] == want[i])
        i++;
    if (i == n_got && i == n_want) return 1;
    printf("  %s case %d: %lld ids vs %lld expected; first difference at %lld: %d vs %d\n", what,
           idx, (long long)n_got, (long long)n_want, (long long)i, i < n_got ? (int)got[i] : -1,
           i < n_want ? (int)want[i] : -1);
    return 0;
}

static mlm_status encode(const mlm_tokenizer *tok, const char *text, size_t len, int special,
                         mlm_tokens *out, mlm_error *err) {
    mlm_encode_params p = mlm_encode_default_params();
    p.parse_special = special;
    return mlm_tokenizer_encode(tok, text, len, &p, out, err);
}

/* Encodes every case of INP and compares with OUT; returns the number of cases checked. */
static int check_vectors(const mlm_tokenizer *tok, const char *inp, const char *sep,
                         const char *outp, int special) {
    cases c;
    id_lines want;
    if (read_cases(inp, sep, &c) != 0 || read_id_lines(outp, &want) != 0) {
        CHECKF(0, "cannot read %s / %s", inp, outp);
        return 0;
    }
    CHECKF(c.n == want.n, "%s: %d cases, %s: %d lines", inp, c.n, outp, want.n);
    int n = c.n < want.n ? c.n : want.n, bad = 0;
    for (int i = 0; i < n; i++) {
        mlm_tokens got;
        mlm_tokens_init(&got);
        mlm_error err = {0};
        CHECK_OK(encode(tok, c.text[i], c.len[i], special, &got, &err), &err);
        if (!same_ids(inp, i, got.ids, got.n, want.line[i].ids, want.line[i].n)) bad++;
        mlm_tokens_deinit(&got);
    }
    CHECKF(bad == 0, "%d of %d cases differ", bad, n);
    free_cases(&c);
    free_id_lines(&want);
    return n;
}

static char *read_ids_file(const char *path, int64_t *n) {
    size_t len;
    char *buf = harness_read_file(path, &len);
    *n = buf ? (int64_t)(len / 4) : 0;
    return buf; /* little-endian uint32, read in place on little-endian hosts */
}

static int32_t le32(const char *p) {
    const unsigned char *u = (const unsigned char *)p;
    return (int32_t)((uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 |
                     (uint32_t)u[3] << 24);
}

/* Whether P[0..N) is valid UTF-8: a checker independent of src/tokenizer/utf8.c. */
static int independent_utf8_ok(const unsigned char *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        uint32_t cp;
        size_t k;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            k = 1;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3;
            cp = c & 0x07;
        } else
            return 0;
        if (i + k >= n) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((p[i + j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (p[i + j] & 0x3F);
        }
        static const uint32_t min_cp[4] = {0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += k + 1;
    }
    return 1;
}

static const char *const BOOKS[] = {"frankenstein", "tale-of-two-cities"};

// ---- reference vectors ----

TEST(llamacpp_llama_bpe) {
    int n =
        check_vectors(g_llama, DATA "llamacpp/ggml-vocab-llama-bpe.gguf.inp",
                      "\n__ggml_vocab_test__\n", DATA "llamacpp/ggml-vocab-llama-bpe.gguf.out", 0);
    CHECKF(n == 44, "%d cases", n);
}

TEST(llamacpp_dbrx_cl100k) {
    if (!g_cl100k) SKIP("cl100k_base.tiktoken did not load");
    int n = check_vectors(g_cl100k, DATA "llamacpp/ggml-vocab-dbrx.gguf.inp",
                          "\n__ggml_vocab_test__\n", DATA "llamacpp/ggml-vocab-dbrx.gguf.out", 0);
    CHECKF(n == 43, "%d cases", n);
}

TEST(edge_cases_ordinary) {
    int n = check_vectors(g_llama, DATA "tokenizer/edge_cases.bin", "\n__meshlm_case__\n",
                          DATA "tokenizer/edge_cases.llama3.ordinary.out", 0);
    CHECKF(n > 100, "%d cases", n);
}

TEST(edge_cases_special) {
    int n = check_vectors(g_llama, DATA "tokenizer/edge_cases.bin", "\n__meshlm_case__\n",
                          DATA "tokenizer/edge_cases.llama3.special.out", 1);
    CHECKF(n > 100, "%d cases", n);
}

TEST(books_vs_tiktoken) {
    for (size_t b = 0; b < 2; b++) {
        char path[256];
        size_t len;
        snprintf(path, sizeof path, DATA "text/%s.txt", BOOKS[b]);
        char *text = harness_read_file(path, &len);
        snprintf(path, sizeof path, DATA "tokenizer/%s.llama3.ids", BOOKS[b]);
        int64_t n_want;
        char *raw = read_ids_file(path, &n_want);
        CHECKF(text && raw, "missing %s", path);
        if (!text || !raw) {
            free(text);
            free(raw);
            continue;
        }
        int32_t *want = malloc((size_t)n_want * sizeof *want);
        for (int64_t i = 0; i < n_want; i++)
            want[i] = le32(raw + 4 * i);
        mlm_tokens got;
        mlm_tokens_init(&got);
        mlm_error err = {0};
        CHECK_OK(encode(g_llama, text, len, 0, &got, &err), &err);
        CHECK(same_ids(BOOKS[b], 0, got.ids, got.n, want, n_want));
        /* Round trip: the books are valid UTF-8, so decoding gives the text back. */
        char *dec = NULL;
        size_t dlen = 0;
        CHECK_OK(mlm_tokenizer_decode(g_llama, got.ids, got.n, &dec, &dlen, &err), &err);
        CHECK(dec && dlen == len && memcmp(dec, text, len) == 0);
        free(dec);
        mlm_tokens_deinit(&got);
        free(want);
        free(raw);
        free(text);
    }
}

/* decode(encode(x)) == x for valid UTF-8; for invalid input it equals Python's repaired
 * text, which is what tiktoken's ids (computed from the repaired string) decode to. */
TEST(round_trip_edge_cases) {
    cases c;
    id_lines want;
    CHECK(read_cases(DATA "tokenizer/edge_cases.bin", "\n__meshlm_case__\n", &c) == 0);
    CHECK(read_id_lines(DATA "tokenizer/edge_cases.llama3.ordinary.out", &want) == 0);
    int n_valid = 0, n_invalid = 0;
    for (int i = 0; i < c.n && i < want.n; i++) {
        mlm_error err = {0};
        for (int special = 0; special < 2; special++) {
            mlm_tokens got;
            mlm_tokens_init(&got);
            CHECK_OK(encode(g_llama, c.text[i], c.len[i], special, &got, &err), &err);
            char *dec = NULL;
            size_t dlen = 0;
            CHECK_OK(mlm_tokenizer_decode(g_llama, got.ids, got.n, &dec, &dlen, &err), &err);
            if (independent_utf8_ok((const unsigned char *)c.text[i], c.len[i])) {
                CHECKF(dlen == c.len[i] && memcmp(dec, c.text[i], dlen) == 0, "case %d", i);
                n_valid += !special;
            } else {
                char *ref = NULL;
                size_t rlen = 0;
                CHECK_OK(mlm_tokenizer_decode(g_llama, want.line[i].ids, want.line[i].n, &ref,
                                              &rlen, &err),
                         &err);
                CHECKF(ref && dlen == rlen && memcmp(dec, ref, dlen) == 0, "case %d", i);
                unsigned char *fixed = NULL;
                size_t flen = 0;
                CHECK_OK(mlm_utf8_repair((const unsigned char *)c.text[i], c.len[i], &fixed, &flen,
                                         &err),
                         &err);
                CHECKF(ref && flen == rlen && memcmp(fixed, ref, flen) == 0, "repair case %d", i);
                free(fixed);
                free(ref);
                n_invalid += !special;
            }
            free(dec);
            mlm_tokens_deinit(&got);
        }
    }
    CHECKF(n_valid > 80 && n_invalid > 15, "%d valid, %d invalid cases", n_valid, n_invalid);
    free_cases(&c);
    free_id_lines(&want);
}

// ---- streaming detok ----

TEST(detok_books_streaming) {
    for (size_t b = 0; b < 2; b++) {
        char path[256];
        size_t len;
        snprintf(path, sizeof path, DATA "text/%s.txt", BOOKS[b]);
        char *text = harness_read_file(path, &len);
        snprintf(path, sizeof path, DATA "tokenizer/%s.llama3.ids", BOOKS[b]);
        int64_t n;
        char *raw = read_ids_file(path, &n);
        CHECK(text && raw);
        if (!text || !raw) {
            free(text);
            free(raw);
            continue;
        }
        char *acc = malloc(len + 64);
        size_t o = 0;
        int partial = 0, overflow = 0;
        mlm_detok d;
        mlm_detok_init(&d);
        for (int64_t i = 0; i < n && !overflow; i++) {
            char buf[64 + 256];
            size_t w = 0;
            mlm_error err = {0};
            CHECK_OK(mlm_detok_push(&d, g_llama, le32(raw + 4 * i), buf, sizeof buf, &w, &err),
                     &err);
            if (!independent_utf8_ok((unsigned char *)buf, w)) partial++;
            if (o + w > len)
                overflow = 1;
            else
                memcpy(acc + o, buf, w);
            o += w;
        }
        char tail[8];
        size_t t = mlm_detok_flush(&d, tail, sizeof tail);
        CHECKF(t == 0, "%s: %zu bytes left at the end", BOOKS[b], t);
        CHECKF(!overflow && o == len && memcmp(acc, text, len) == 0, "%s: %zu bytes vs %zu",
               BOOKS[b], o, len);
        CHECKF(partial == 0, "%s: %d chunks were not whole UTF-8", BOOKS[b], partial);
        free(acc);
        free(raw);
        free(text);
    }
}

static int hexval(char c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

TEST(detok_cases_vs_python) {
    json_error_t je;
    json_t *root = json_load_file(DATA "tokenizer/detok_cases.json", 0, &je);
    if (!root) {
        CHECKF(0, "detok_cases.json: %s", je.text);
        return;
    }
    size_t i;
    json_t *c;
    json_array_foreach(root, i, c) {
        json_t *ids = json_object_get(c, "ids");
        const char *hex = json_string_value(json_object_get(c, "expected_hex"));
        size_t nh = strlen(hex), k;
        char want[1024], got[4096];
        size_t nw = nh / 2, o = 0;
        for (k = 0; k < nw; k++)
            want[k] = (char)(hexval(hex[2 * k]) << 4 | hexval(hex[2 * k + 1]));
        mlm_detok d;
        mlm_detok_init(&d);
        json_t *id;
        int partial = 0;
        json_array_foreach(ids, k, id) {
            size_t w = 0;
            mlm_error err = {0};
            CHECK_OK(mlm_detok_push(&d, g_llama, (int32_t)json_integer_value(id), got + o,
                                    sizeof got - o, &w, &err),
                     &err);
            if (!independent_utf8_ok((unsigned char *)got + o, w)) partial++;
            o += w;
        }
        o += mlm_detok_flush(&d, got + o, sizeof got - o);
        CHECKF(o == nw && memcmp(got, want, nw) == 0, "case %zu: %zu bytes vs %zu", i, o, nw);
        CHECKF(partial == 0, "case %zu emitted a partial sequence", i);
    }
    CHECK(json_array_size(root) > 40);
    json_decref(root);
}

TEST(detok_errors) {
    mlm_detok d;
    mlm_detok_init(&d);
    char buf[4];
    size_t w = 99;
    mlm_error err = {0};
    CHECK(mlm_detok_push(&d, g_llama, -1, buf, sizeof buf, &w, &err) == MLM_ERR_INVALID_ARG);
    CHECK(w == 0);
    CHECK(mlm_detok_push(&d, g_llama, mlm_tokenizer_n_vocab(g_llama), buf, sizeof buf, &w, &err) ==
          MLM_ERR_INVALID_ARG);
    /* "<|eot_id|>" does not fit in 4 bytes: CAPACITY, state unchanged. */
    CHECK(mlm_detok_push(&d, g_llama, mlm_tokenizer_special_id(g_llama, "<|eot_id|>"), buf,
                         sizeof buf, &w, &err) == MLM_ERR_CAPACITY);
    CHECK(d.n_pending == 0);
}

// ---- chat ----

TEST(chat_llama3_vs_fixture) {
    json_error_t je;
    json_t *root = json_load_file(DATA "tokenizer/chat.llama3.json", 0, &je);
    if (!root) {
        CHECKF(0, "chat.llama3.json: %s", je.text);
        return;
    }
    size_t i;
    json_t *dlg;
    json_array_foreach(root, i, dlg) {
        json_t *msgs = json_object_get(dlg, "messages"), *ids = json_object_get(dlg, "ids");
        int gen = json_is_true(json_object_get(dlg, "add_generation_prompt"));
        int n = (int)json_array_size(msgs);
        mlm_chat_message m[8];
        for (int k = 0; k < n && k < 8; k++) {
            json_t *jm = json_array_get(msgs, (size_t)k);
            m[k].role = json_string_value(json_object_get(jm, "role"));
            m[k].content = json_string_value(json_object_get(jm, "content"));
        }
        mlm_tokens got;
        mlm_tokens_init(&got);
        mlm_tokens_push(&got, 7); /* encode_chat appends */
        mlm_error err = {0};
        CHECK_OK(mlm_tokenizer_encode_chat(g_llama, m, n, gen, &got, &err), &err);
        int64_t nw = (int64_t)json_array_size(ids);
        int32_t *want = malloc((size_t)(nw + 1) * sizeof *want);
        for (int64_t k = 0; k < nw; k++)
            want[k] = (int32_t)json_integer_value(json_array_get(ids, (size_t)k));
        CHECK(got.n >= 1 && got.ids[0] == 7);
        CHECK(same_ids("chat", (int)i, got.ids + 1, got.n - 1, want, nw));
        free(want);
        mlm_tokens_deinit(&got);
    }
    CHECK(json_array_size(root) >= 3);
    json_decref(root);
}

TEST(chat_errors) {
    mlm_tokens out;
    mlm_tokens_init(&out);
    mlm_error err = {0};
    mlm_chat_message bad[2] = {{"user", "hi"}, {"robot", "beep"}};
    CHECK(mlm_tokenizer_encode_chat(g_llama, bad, 2, 1, &out, &err) == MLM_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "robot") != NULL);
    CHECK(out.n == 0);
    mlm_chat_message null_content[1] = {{"user", NULL}};
    CHECK(mlm_tokenizer_encode_chat(g_llama, null_content, 1, 1, &out, &err) ==
          MLM_ERR_INVALID_ARG);
    if (g_cl100k) {
        CHECK(mlm_tokenizer_encode_chat(g_cl100k, bad, 1, 1, &out, &err) == MLM_ERR_UNSUPPORTED);
        CHECK(out.n == 0);
    }
    mlm_tokens_deinit(&out);
}

// ---- API ----

TEST(api_basics) {
    const mlm_tokenizer *t = g_llama;
    CHECK(mlm_tokenizer_n_vocab(t) == 128256);
    CHECK(mlm_tokenizer_bos_id(t) == 128000);
    CHECK(mlm_tokenizer_special_id(t, "<|begin_of_text|>") == 128000);
    CHECK(mlm_tokenizer_special_id(t, "<|eot_id|>") == 128009);
    CHECK(mlm_tokenizer_special_id(t, "<|reserved_special_token_2|>") == 128005);
    CHECK(mlm_tokenizer_special_id(t, "<|reserved_special_token_3|>") == 128011);
    CHECK(mlm_tokenizer_special_id(t, "<|reserved_special_token_247|>") == 128255);
    CHECK(mlm_tokenizer_special_id(t, "<|reserved_special_token_248|>") == -1);
    CHECK(mlm_tokenizer_special_id(t, "hello") == -1);
    CHECK(mlm_tokenizer_is_special(t, 128009) && !mlm_tokenizer_is_special(t, 127999));
    CHECK(!mlm_tokenizer_is_special(t, 128256) && !mlm_tokenizer_is_special(t, -1));
    size_t len = 0;
    const char *p = mlm_tokenizer_token_bytes(t, 128009, &len);
    CHECK(p && len == 10 && memcmp(p, "<|eot_id|>", 10) == 0);
    CHECK(mlm_tokenizer_token_bytes(t, 128256, &len) == NULL);
    CHECK(mlm_tokenizer_token_bytes(t, -5, &len) == NULL);
    p = mlm_tokenizer_token_bytes(t, 0, &len);
    CHECK(p && len == 1 && p[0] == '!');

    mlm_error err = {0};
    mlm_tokens out;
    mlm_tokens_init(&out);
    mlm_encode_params ep = mlm_encode_default_params();
    CHECK(ep.add_bos == 0 && ep.parse_special == 0);
    ep.add_bos = 1;
    CHECK_OK(mlm_tokenizer_encode(t, "", 0, &ep, &out, &err), &err);
    CHECK(out.n == 1 && out.ids[0] == 128000);
    CHECK_OK(mlm_tokenizer_encode(t, NULL, 0, NULL, &out, &err), &err);
    CHECK(out.n == 1);
    CHECK(mlm_tokenizer_encode(t, NULL, 3, NULL, &out, &err) == MLM_ERR_INVALID_ARG);

    int32_t bad_ids[2] = {1, 128256};
    char *dec = (char *)1;
    CHECK(mlm_tokenizer_decode(t, bad_ids, 2, &dec, &len, &err) == MLM_ERR_INVALID_ARG);
    CHECK(dec == NULL && strstr(err.msg, "128256") != NULL);
    CHECK_OK(mlm_tokenizer_decode(t, bad_ids, 0, &dec, &len, &err), &err);
    CHECK(dec && len == 0 && dec[0] == 0);
    free(dec);
    mlm_tokens_deinit(&out);
}

TEST(cl100k_vocab) {
    if (!g_cl100k) SKIP("cl100k_base.tiktoken did not load");
    const mlm_tokenizer *t = g_cl100k;
    CHECK(mlm_tokenizer_n_vocab(t) == 100277);
    CHECK(mlm_tokenizer_bos_id(t) == -1);
    CHECK(mlm_tokenizer_special_id(t, "<|endoftext|>") == 100257);
    CHECK(mlm_tokenizer_special_id(t, "<|endofprompt|>") == 100276);
    CHECK(mlm_tokenizer_special_id(t, "<|eot_id|>") == -1);
    CHECK(mlm_tokenizer_token_bytes(t, 100256, NULL) == NULL); /* a gap in cl100k */
    mlm_tokens out;
    mlm_tokens_init(&out);
    mlm_error err = {0};
    CHECK_OK(encode(t, "a<|fim_prefix|>b<|endoftext|>", 29, 1, &out, &err), &err);
    CHECK(out.n == 4 && out.ids[1] == 100258 && out.ids[3] == 100257);
    mlm_encode_params ep = mlm_encode_default_params();
    ep.add_bos = 1;
    CHECK(mlm_tokenizer_encode(t, "x", 1, &ep, &out, &err) == MLM_ERR_INVALID_ARG);
    mlm_tokens_deinit(&out);
}

TEST(load_paths) {
    mlm_tokenizer *t = NULL;
    mlm_error err = {0};
    /* A model directory with tokenizer.model directly inside. */
    CHECK_OK(mlm_tokenizer_load(DATA "tokenizer/llama3", &t, &err), &err);
    CHECK(t && mlm_tokenizer_n_vocab(t) == 128256);
    mlm_tokenizer_free(t);
    /* A directory with original/tokenizer.model (HF layout), made here. */
    char dir[] = "/tmp/meshlm_tok_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char sub[64], cwd[4096];
    snprintf(sub, sizeof sub, "%s/original", dir);
    CHECK(mkdir(sub, 0700) == 0);
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    char target[4200], linkp[128];
    snprintf(target, sizeof target, "%s/" LLAMA3_MODEL, cwd);
    snprintf(linkp, sizeof linkp, "%s/tokenizer.model", sub);
    CHECK(symlink(target, linkp) == 0);
    t = NULL;
    CHECK_OK(mlm_tokenizer_load(dir, &t, &err), &err);
    CHECK(t && mlm_tokenizer_bos_id(t) == 128000);
    mlm_tokenizer_free(t);
    unlink(linkp);
    rmdir(sub);
    /* An empty directory, a missing file. */
    t = (mlm_tokenizer *)1;
    CHECK(mlm_tokenizer_load(dir, &t, &err) == MLM_ERR_IO);
    CHECK(t == NULL && strstr(err.msg, dir) != NULL);
    rmdir(dir);
    CHECK(mlm_tokenizer_load("/nonexistent/tokenizer.model", &t, &err) == MLM_ERR_IO);
    mlm_tokenizer_free(NULL);
}

// ---- malformed vocabulary files ----

/* A small valid vocabulary: the 256 single bytes (ranks 0..255), then "ab" (256). */
static char *small_vocab(size_t *len) {
    static const char B64C[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *buf = malloc(256 * 16 + 64);
    size_t o = 0;
    for (int b = 0; b < 256; b++)
        o += (size_t)sprintf(buf + o, "%c%c== %d\n", B64C[b >> 2], B64C[(b & 3) << 4], b);
    o += (size_t)sprintf(buf + o, "YWI= 256\n");
    *len = o;
    return buf;
}

/* Writes CONTENT to a temp file and loads it; checks FORMAT, the file name and "line N". */
static void expect_bad(const char *what, const char *content, size_t len, int line) {
    char path[] = "/tmp/meshlm_badtok_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    CHECK(write(fd, content, len) == (ssize_t)len);
    close(fd);
    mlm_tokenizer *t = (mlm_tokenizer *)1;
    mlm_error err = {0};
    mlm_status st = mlm_tokenizer_load(path, &t, &err);
    char want_line[32];
    snprintf(want_line, sizeof want_line, "line %d:", line);
    CHECKF(st == MLM_ERR_FORMAT, "%s: status %s (%s)", what, mlm_status_str(st), err.msg);
    CHECKF(t == NULL, "%s: handle not NULL", what);
    CHECKF(strstr(err.msg, path) != NULL, "%s: no file name in '%s'", what, err.msg);
    CHECKF(strstr(err.msg, want_line) != NULL, "%s: no '%s' in '%s'", what, want_line, err.msg);
    if (st == MLM_OK) mlm_tokenizer_free(t);
    unlink(path);
}

/* CONTENT = the small vocabulary with line LINE (1-based) replaced by REPL; the error
 * must name line WANT_LINE. */
static void expect_bad_line2(const char *what, int line, const char *repl, int want_line) {
    size_t len;
    char *v = small_vocab(&len);
    char *out = malloc(len + strlen(repl) + 16);
    size_t o = 0;
    const char *p = v;
    for (int l = 1; p < v + len; l++) {
        const char *nl = strchr(p, '\n');
        if (l == line) {
            o += (size_t)sprintf(out + o, "%s\n", repl);
        } else {
            memcpy(out + o, p, (size_t)(nl - p + 1));
            o += (size_t)(nl - p + 1);
        }
        p = nl + 1;
    }
    expect_bad(what, out, o, want_line);
    free(out);
    free(v);
}

static void expect_bad_line(const char *what, int line, const char *repl) {
    expect_bad_line2(what, line, repl, line);
}

TEST(bad_vocab_files) {
    size_t len;
    char *v = small_vocab(&len);
    mlm_tokenizer *t = NULL;
    mlm_error err = {0};
    CHECK_OK(mlm_tokenizer_load_memory(v, len, "small", &t, &err), &err);
    CHECK(t && mlm_tokenizer_n_vocab(t) == 257 && mlm_tokenizer_bos_id(t) == -1);
    mlm_tokens out;
    mlm_tokens_init(&out);
    CHECK_OK(encode(t, "abab", 4, 1, &out, &err), &err);
    CHECK(out.n == 2 && out.ids[0] == 256 && out.ids[1] == 256);
    mlm_tokens_deinit(&out);
    mlm_tokenizer_free(t);

    expect_bad_line("bad base64 char", 3, "Q!== 2");
    expect_bad_line("bad base64 length", 5, "QQ= 4");
    expect_bad_line("data after padding", 5, "Q=Q= 4");
    expect_bad_line("non-canonical padding", 5, "QR== 4");
    expect_bad_line("missing rank", 10, "CQ==");
    expect_bad_line("non-numeric rank", 10, "CQ== 9x");
    expect_bad_line("negative rank", 10, "CQ== -9");
    expect_bad_line("duplicate rank", 10, "CQ== 3");
    expect_bad_line("rank out of range", 257, "YWI= 257");
    expect_bad_line("huge rank", 257, "YWI= 99999999999999999999999");
    expect_bad_line("duplicate token", 257, "AA== 256");
    expect_bad_line("binary line", 100, "\x01\xff\xfe\x80 99");
    expect_bad_line("non-UTF-8 in token", 100, "Y\xc3\xa9Q= 99");
    expect_bad_line("trailing text", 100, "Yw== 99 100");
    /* A missing single byte: reported at the end of the file. */
    expect_bad_line2("byte without rank", 10, "YWJj 9", 257);
    expect_bad("empty file", "", 0, 1);
    expect_bad("blank file", "\n \n\r\n", 5, 1);
    /* Truncated in the middle of a line. */
    expect_bad("truncated mid-token", v, len - 4, 257);
    expect_bad("truncated before the rank", v, len - 5, 257);
    const char *line101 = v;
    for (int l = 1; l < 101; l++)
        line101 = strchr(line101, '\n') + 1;
    expect_bad("truncated early", v, (size_t)(line101 - v) + 2, 101);
    free(v);
}

// ---- engines and pieces ----

TEST(bpe_heap_equals_reference) {
    const mlm_vocab *v = &g_llama->vocab;
    mlm_bpe_scratch s;
    mlm_bpe_scratch_init(&s);
    uint64_t rng = 12345;
    int n_cases = 0, n_diff = 0;
    unsigned char buf[6000];
    /* Long pieces: random bytes, letters, words glued together, repeated patterns; plus
     * short ones near the engine switch. */
    const char *words[] = {"the",      "ing",          " and", "tion", "er", "Hello",
                           "\xc3\xa9", "\xe4\xb8\xad", "  ",   "0",    "ab"};
    for (int c = 0; c < 120; c++) {
        size_t n = c < 40 ? 2 + (size_t)c * 5 : 128 + (size_t)(c - 40) * 70;
        int kind = c % 4;
        size_t i = 0;
        while (i < n) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            unsigned r = (unsigned)(rng >> 33);
            if (kind == 0)
                buf[i++] = (unsigned char)r;
            else if (kind == 1)
                buf[i++] = (unsigned char)('a' + r % 26);
            else if (kind == 2) {
                const char *w = words[r % (sizeof words / sizeof words[0])];
                for (size_t k = 0; w[k] && i < n; k++)
                    buf[i++] = (unsigned char)w[k];
            } else {
                buf[i] = (unsigned char)"abcab"[i % 5];
                i++;
            }
        }
        mlm_tokens a, b;
        mlm_tokens_init(&a);
        mlm_tokens_init(&b);
        mlm_error err = {0};
        CHECK_OK(mlm_bpe_merge_ref(v, NULL, buf, n, &s, &a, &err), &err);
        CHECK_OK(mlm_bpe_merge_heap(v, NULL, buf, n, &s, &b, &err), &err);
        if (!same_ids("bpe", c, b.ids, b.n, a.ids, a.n)) n_diff++;
        /* The merge never loses bytes. */
        char *dec = NULL;
        size_t dlen = 0;
        CHECK_OK(mlm_tokenizer_decode(g_llama, b.ids, b.n, &dec, &dlen, &err), &err);
        CHECK(dec && dlen == n && memcmp(dec, buf, n) == 0);
        free(dec);
        mlm_tokens_deinit(&a);
        mlm_tokens_deinit(&b);
        n_cases++;
    }
    CHECKF(n_diff == 0, "%d of %d pieces differ", n_diff, n_cases);
    mlm_bpe_scratch_deinit(&s);
}

/* Runs of whitespace past PCRE2's default JIT stack and match limits. */
TEST(pretok_long_runs) {
    mlm_pretok_iter it;
    mlm_error err = {0};
    CHECK_OK(mlm_pretok_iter_init(&it, &g_llama->pretok, &err), &err);
    size_t n = 12u << 20;
    unsigned char *text = malloc(n + 1);
    const char *fills[] = {" ", "\t ", "\n", " \n"};
    for (int f = 0; f < 4; f++) {
        size_t fl = strlen(fills[f]);
        for (size_t i = 0; i < n; i++)
            text[i] = (unsigned char)fills[f][i % fl];
        text[n] = 'x';
        mlm_pretok_iter_reset(&it, text, n + 1);
        size_t a, b, covered = 0, pieces = 0;
        int found;
        for (;;) {
            mlm_status st = mlm_pretok_next(&it, &a, &b, &found, &err);
            CHECKF(st == MLM_OK, "fill %d: %s", f, err.msg);
            if (st != MLM_OK || !found) break;
            CHECK(a == covered);
            covered = b;
            pieces++;
        }
        CHECKF(covered == n + 1 && pieces <= 3, "fill %d: %zu bytes in %zu pieces", f, covered,
               pieces);
    }
    free(text);
    mlm_pretok_iter_deinit(&it);
}

// ---- threads ----

typedef struct thread_job {
    const char *text;
    size_t len;
    mlm_tokens out;
    mlm_status st;
} thread_job;

static void *encode_thread(void *arg) {
    thread_job *j = arg;
    mlm_error err = {0};
    j->st = encode(g_llama, j->text, j->len, j->len % 2, &j->out, &err);
    return NULL;
}

TEST(concurrent_encode) {
    size_t len;
    char *text = harness_read_file(DATA "text/frankenstein.txt", &len);
    if (!text) SKIP("no frankenstein.txt");
    mlm_tokens want;
    mlm_tokens_init(&want);
    mlm_error err = {0};
    thread_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i].text = text;
        jobs[i].len = len - (size_t)i; /* odd lengths also parse specials */
        mlm_tokens_init(&jobs[i].out);
        CHECK(pthread_create(&th[i], NULL, encode_thread, &jobs[i]) == 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        mlm_tokens_init(&want);
        CHECK_OK(encode(g_llama, text, jobs[i].len, (int)(jobs[i].len % 2), &want, &err), &err);
        CHECK(jobs[i].st == MLM_OK);
        CHECK(same_ids("thread", i, jobs[i].out.ids, jobs[i].out.n, want.ids, want.n));
        mlm_tokens_deinit(&want);
        mlm_tokens_deinit(&jobs[i].out);
    }
    free(text);
}

int main(void) {
    mlm_error err = {0};
    if (mlm_tokenizer_load(LLAMA3_MODEL, &g_llama, &err) != MLM_OK) {
        printf("cannot load %s: %s\n", LLAMA3_MODEL, err.msg);
        printf("0 passed, 1 failed, 0 skipped\n");
        return 1;
    }
    if (mlm_tokenizer_load(CL100K_MODEL, &g_cl100k, &err) != MLM_OK)
        printf("note: %s: %s\n", CL100K_MODEL, err.msg);
    RUN(api_basics);
    RUN(load_paths);
    RUN(llamacpp_llama_bpe);
    RUN(llamacpp_dbrx_cl100k);
    RUN(cl100k_vocab);
    RUN(books_vs_tiktoken);
    RUN(edge_cases_ordinary);
    RUN(edge_cases_special);
    RUN(round_trip_edge_cases);
    RUN(detok_books_streaming);
    RUN(detok_cases_vs_python);
    RUN(detok_errors);
    RUN(chat_llama3_vs_fixture);
    RUN(chat_errors);
    RUN(bad_vocab_files);
    RUN(bpe_heap_equals_reference);
    RUN(pretok_long_runs);
    RUN(concurrent_encode);
    mlm_tokenizer_free(g_llama);
    mlm_tokenizer_free(g_cl100k);
    return HARNESS_END();
}
