/* test_tokenizer_gguf.c: GGUF vocabularies (tokenizer.ggml.*) and the Hugging Face
 * pre-tokenizer steps they brought (Digits, Split behaviours, vocabularies lacking single
 * bytes), against reference outputs made by tests/fixtures/make_smollm2_tokenizer_fixtures.py:
 * llama.cpp's llama-tokenize on SmolLM2-135M-Instruct's GGUF (both books, the edge-case
 * corpus, texts with bytes it has no token for, chat prompts rendered from its template) and
 * on tiny vocabulary-only GGUFs made there (every tokenizer.ggml.pre name meshlm knows, token
 * types); Hugging Face tokenizers on SmolLM2's vocabulary as tokenizer.json and on variants of
 * the small tokenizer. Malformed GGUF metadata is built here with the GGUF writer. Tests that
 * need models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf (git-ignored, fetched by CI) say SKIP
 * without it; the rest run from the committed fixtures. Paths are relative to the repository
 * root. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/gguf_writer.h"
#include "harness.h"
#include "tokenizer_cases.h"
#include "meshlm.h"
#include "tokenizer/bytelevel.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

#define DATA "tests/data/"
#define SMOL DATA "tokenizer/smollm2"
#define SMOL_GGUF "models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
#define CASE_SEP "\n__meshlm_case__\n"

static const char *const BOOKS[] = {"frankenstein", "tale-of-two-cities"};

static mlm_tokenizer *g_gguf; /* SmolLM2's GGUF, NULL when the file is absent */
static int g_gguf_failed;     /* the file is there but did not load */
static mlm_tokenizer *g_json; /* SmolLM2 as tokenizer.json (+ tokenizer_config.json) */
static char g_dir[64];        /* scratch directory */

// ---- helpers ----

/* Compares ids; prints the first difference. Returns 1 when equal. */
static int same_ids(const char *what, int idx, const mlm_tokens *got, const int32_t *want,
                    int64_t n_want) {
    int64_t i = 0;
    while (i < got->n && i < n_want && got->ids[i] == want[i])
        i++;
    if (i == got->n && i == n_want) return 1;
    printf("  %s %d: %lld ids vs %lld expected; first difference at %lld: %d vs %d\n", what, idx,
           (long long)got->n, (long long)n_want, (long long)i, i < got->n ? (int)got->ids[i] : -1,
           i < n_want ? (int)want[i] : -1);
    return 0;
}

/* Ids of a JSON array into OUT (appended). */
static void json_ids(const json_t *a, mlm_tokens *out) {
    size_t i;
    const json_t *v;
    json_array_foreach(a, i, v) mlm_tokens_push(out, (int32_t)json_integer_value(v));
}

static int same_json_ids(const char *what, int idx, const mlm_tokens *got, const json_t *want) {
    mlm_tokens w;
    mlm_tokens_init(&w);
    json_ids(want, &w);
    int ok = same_ids(what, idx, got, w.ids, w.n);
    mlm_tokens_deinit(&w);
    return ok;
}

static mlm_status encode(const mlm_tokenizer *tok, const char *text, size_t len, int special,
                         int bos, mlm_tokens *out, mlm_error *err) {
    mlm_encode_params p = mlm_encode_default_params();
    p.parse_special = special;
    p.add_bos = bos;
    return mlm_tokenizer_encode(tok, text, len, &p, out, err);
}

/* Encodes every edge case with TOK and compares with OUTP; returns the cases checked. */
static int check_edge_cases(const mlm_tokenizer *tok, const char *outp, int special) {
    cases c;
    id_lines want;
    if (read_cases(DATA "tokenizer/edge_cases.bin", CASE_SEP, &c) != 0 || read_id_lines(outp, &want) != 0) {
        CHECKF(0, "cannot read the edge cases / %s", outp);
        return 0;
    }
    CHECKF(c.n == want.n && c.n > 100, "%d cases, %s: %d lines", c.n, outp, want.n);
    int n = c.n < want.n ? c.n : want.n, bad = 0;
    for (int i = 0; i < n; i++) {
        mlm_tokens got;
        mlm_tokens_init(&got);
        mlm_error err = {0};
        CHECK_OK(encode(tok, c.text[i], c.len[i], special, 0, &got, &err), &err);
        bad += !same_ids(outp, i, &got, want.line[i].ids, want.line[i].n);
        mlm_tokens_deinit(&got);
    }
    CHECKF(bad == 0, "%s: %d of %d cases differ", outp, bad, n);
    free_cases(&c);
    free_id_lines(&want);
    return n;
}

/* Encodes both books with TOK and compares with the .smollm2.ids files (llama-tokenize, which
 * the fixture script checked tokenizers agrees with); decoding gives each book back. */
static void check_books(const mlm_tokenizer *tok) {
    for (size_t b = 0; b < 2; b++) {
        char path[256];
        size_t len = 0, n_ids = 0;
        snprintf(path, sizeof path, DATA "text/%s.txt", BOOKS[b]);
        char *text = harness_read_file(path, &len);
        snprintf(path, sizeof path, SMOL "/%s.smollm2.ids", BOOKS[b]);
        char *raw = harness_read_file(path, &n_ids);
        CHECKF(text && raw && n_ids % 4 == 0, "missing %s", path);
        if (!text || !raw) {
            free(text);
            free(raw);
            continue;
        }
        int32_t *want = malloc(n_ids);
        memcpy(want, raw, n_ids); /* little-endian uint32, as on the machines we run */
        mlm_tokens got;
        mlm_tokens_init(&got);
        mlm_error err = {0};
        CHECK_OK(encode(tok, text, len, 0, 0, &got, &err), &err);
        CHECKF(same_ids(BOOKS[b], 0, &got, want, (int64_t)(n_ids / 4)), "%s", BOOKS[b]);
        char *dec = NULL;
        size_t dlen = 0;
        CHECK_OK(mlm_tokenizer_decode(tok, got.ids, got.n, &dec, &dlen, &err), &err);
        CHECKF(dec && dlen == len && memcmp(dec, text, len) == 0, "%s: round trip", BOOKS[b]);
        free(dec);
        mlm_tokens_deinit(&got);
        free(want);
        free(raw);
        free(text);
    }
}

/* The chat dialogs of chat.json with TOK: "ids" (llama-tokenize of the rendered template). */
static void check_chat(const mlm_tokenizer *tok) {
    json_error_t je;
    json_t *d = json_load_file(SMOL "/chat.json", 0, &je);
    CHECKF(json_is_array(d) && json_array_size(d) >= 6, "chat.json: %s", je.text);
    size_t i;
    json_t *e;
    json_array_foreach(d, i, e) {
        const json_t *msgs = json_object_get(e, "messages");
        mlm_chat_message m[8];
        size_t n = json_array_size(msgs);
        CHECK(n <= 8);
        for (size_t k = 0; k < n && k < 8; k++) {
            m[k].role = json_string_value(json_object_get(json_array_get(msgs, k), "role"));
            m[k].content = json_string_value(json_object_get(json_array_get(msgs, k), "content"));
        }
        mlm_tokens got;
        mlm_tokens_init(&got);
        mlm_error err = {0};
        int gen = json_is_true(json_object_get(e, "add_generation_prompt"));
        CHECK_OK(mlm_tokenizer_encode_chat(tok, m, (int)n, gen, &got, &err), &err);
        CHECKF(same_json_ids("dialog", (int)i, &got, json_object_get(e, "ids")), "dialog %zu: %s",
               i, json_string_value(json_object_get(e, "text")));
        CHECK(same_json_ids("dialog (transformers)", (int)i, &got, json_object_get(e, "hf_ids")));
        mlm_tokens_deinit(&got);
    }
    json_decref(d);
}

/* Texts with bytes SmolLM2 has no token for, against missing_bytes.json's KEY ids. */
static void check_missing_bytes(const mlm_tokenizer *tok, const char *key) {
    json_error_t je;
    json_t *d = json_load_file(SMOL "/missing_bytes.json", 0, &je);
    CHECKF(json_is_array(d) && json_array_size(d) >= 5, "missing_bytes.json: %s", je.text);
    size_t i;
    json_t *e;
    int n_differ = 0;
    json_array_foreach(d, i, e) {
        const json_t *t = json_object_get(e, "text");
        mlm_tokens got;
        mlm_tokens_init(&got);
        mlm_error err = {0};
        CHECK_OK(encode(tok, json_string_value(t), json_string_length(t), 0, 0, &got, &err), &err);
        CHECKF(same_json_ids(key, (int)i, &got, json_object_get(e, key)), "%s: text %zu", key, i);
        n_differ += !json_equal(json_object_get(e, "llama"), json_object_get(e, "hf"));
        mlm_tokens_deinit(&got);
    }
    CHECK(n_differ >= 2); /* the two conventions really differ on these texts */
    json_decref(d);
}

static const int32_t HELLO_X04[] = {28120, 216, 905}; /* llama.cpp on "hello \x04 world" */

// ---- SmolLM2 as tokenizer.json (committed) ----

TEST(json_api) {
    const mlm_tokenizer *t = g_json;
    if (!t) {
        CHECKF(0, "%s did not load", SMOL);
        return;
    }
    CHECK(mlm_tokenizer_n_vocab(t) == 49152 && mlm_tokenizer_bos_id(t) == -1);
    CHECK(mlm_tokenizer_special_id(t, "<|im_start|>") == 1);
    CHECK(mlm_tokenizer_special_id(t, "<|im_end|>") == 2 && mlm_tokenizer_is_special(t, 2));
    const char *fmt = mlm_tokenizer_chat_format(t); /* from tokenizer_config.json's template */
    CHECK(fmt && strcmp(fmt, "chatml-newline") == 0);
    int32_t stop[4] = {0};
    CHECK(mlm_tokenizer_chat_stop_ids(t, stop, 4) == 3 && stop[0] == 2);
    mlm_tokens got;
    mlm_tokens_init(&got);
    mlm_error err = {0};
    CHECK_OK(encode(t, "hello \x04 world", 13, 0, 0, &got, &err), &err);
    CHECK(same_ids("x04", 0, &got, HELLO_X04, 3));
    mlm_tokens_deinit(&got);
}

TEST(json_books) { check_books(g_json); }

TEST(json_edge_cases) {
    /* llama-tokenize's ids, which the fixture script checked tokenizers agrees with. */
    check_edge_cases(g_json, SMOL "/edge_cases.smollm2.ordinary.out", 0);
    check_edge_cases(g_json, SMOL "/edge_cases.smollm2.special.out", 1);
}

TEST(json_missing_bytes) { check_missing_bytes(g_json, "hf"); }

TEST(json_chat) { check_chat(g_json); }

// ---- pre-tokenizer variants of the small tokenizer against tokenizers ----

/* Applies a fixture patch (top-level keys and "model.KEY"). */
static void apply_patch(json_t *j, const json_t *patch) {
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)patch, key, val) {
        if (strncmp(key, "model.", 6) == 0)
            json_object_set(json_object_get(j, "model"), key + 6, val);
        else
            json_object_set(j, key, val);
    }
}

TEST(pretok_variants_vs_tokenizers) {
    json_error_t je;
    json_t *fx = json_load_file(SMOL "/pretok_variants.json", 0, &je);
    json_t *base =
        fx ? json_load_file(json_string_value(json_object_get(fx, "base")), 0, &je) : NULL;
    if (!fx || !base) {
        CHECKF(0, "pretok_variants.json / base: %s", je.text);
        json_decref(fx);
        return;
    }
    const json_t *texts = json_object_get(fx, "texts");
    size_t v, n_checked = 0;
    json_t *var;
    json_array_foreach(json_object_get(fx, "variants"), v, var) {
        const char *name = json_string_value(json_object_get(var, "name"));
        json_t *j = json_deep_copy(base);
        apply_patch(j, json_object_get(var, "patch"));
        char *doc = json_dumps(j, JSON_COMPACT);
        char path[128];
        snprintf(path, sizeof path, "%s/%s.json", g_dir, name);
        CHECK(harness_write_file(path, doc, strlen(doc)) == 0);
        mlm_tokenizer *t = NULL;
        mlm_error err = {0};
        CHECK_OK(mlm_tokenizer_load(path, &t, &err), &err);
        for (int special = 0; t && special < 2; special++) {
            const json_t *want = json_object_get(var, special ? "special" : "ordinary");
            int bad = 0;
            for (size_t k = 0; k < json_array_size(texts); k++) {
                const json_t *s = json_array_get(texts, k);
                mlm_tokens got;
                mlm_tokens_init(&got);
                CHECK_OK(
                    encode(t, json_string_value(s), json_string_length(s), special, 0, &got, &err),
                    &err);
                bad += !same_json_ids(name, (int)k, &got, json_array_get(want, k));
                mlm_tokens_deinit(&got);
                n_checked++;
            }
            CHECKF(bad == 0, "variant %s, %s: %d texts differ", name,
                   special ? "special" : "ordinary", bad);
        }
        mlm_tokenizer_free(t);
        free(doc);
        json_decref(j);
    }
    CHECKF(n_checked >= 20 * 2 * 20, "%zu encodings checked", n_checked);
    json_decref(base);
    json_decref(fx);
}

// ---- tiny GGUFs against llama.cpp (committed) ----

TEST(tiny_ggufs_vs_llamacpp) {
    json_error_t je;
    json_t *fx = json_load_file(SMOL "/tiny_gguf.json", 0, &je);
    CHECKF(fx != NULL, "tiny_gguf.json: %s", je.text);
    const json_t *texts = json_object_get(fx, "texts");
    size_t f, n_files = 0;
    json_t *file;
    json_array_foreach(json_object_get(fx, "files"), f, file) {
        char path[256];
        snprintf(path, sizeof path, SMOL "/%s", json_string_value(json_object_get(file, "file")));
        mlm_tokenizer *t = NULL;
        mlm_error err = {0};
        CHECK_OK(mlm_tokenizer_load(path, &t, &err), &err);
        if (!t) continue;
        n_files++;
        const char *fmt = mlm_tokenizer_chat_format(t);
        CHECKF(fmt && strcmp(fmt, "chatml-newline") == 0, "%s: chat %s", path, fmt ? fmt : "none");
        static const char *const MODES[] = {"ordinary", "special", "bos"};
        for (int mode = 0; mode < 3; mode++) {
            const json_t *want = json_object_get(file, MODES[mode]);
            int bad = 0;
            for (size_t k = 0; k < json_array_size(texts); k++) {
                const json_t *s = json_array_get(texts, k);
                mlm_tokens got;
                mlm_tokens_init(&got);
                CHECK_OK(encode(t, json_string_value(s), json_string_length(s), mode > 0,
                                mode == 2 && mlm_tokenizer_bos_id(t) >= 0, &got, &err),
                         &err);
                bad += !same_json_ids(path, (int)k, &got, json_array_get(want, k));
                mlm_tokens_deinit(&got);
            }
            CHECKF(bad == 0, "%s, %s: %d texts differ", path, MODES[mode], bad);
        }
        mlm_tokenizer_free(t);
    }
    CHECK(n_files == 7);
    json_decref(fx);
}

/* A folder holding only a .gguf loads its vocabulary; files are told apart by content. */
TEST(gguf_folder_and_magic) {
    char dir[128], path[192], cwd[4096], target[4400];
    snprintf(dir, sizeof dir, "%s/folder", g_dir);
    CHECK(mkdir(dir, 0700) == 0);
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    snprintf(path, sizeof path, "%s/a.gguf", dir); /* sorts first but is no GGUF */
    CHECK(harness_write_file(path, "not a gguf", 10) == 0);
    snprintf(target, sizeof target, "%s/" SMOL "/tiny_smollm.gguf", cwd);
    snprintf(path, sizeof path, "%s/model.Q4_0.gguf", dir);
    CHECK(symlink(target, path) == 0);
    CHECK(mlm_tokenizer_present(dir));
    mlm_tokenizer *t = NULL;
    mlm_error err = {0};
    CHECK_OK(mlm_tokenizer_load(dir, &t, &err), &err);
    CHECK(t && t->flavour == MLM_TOK_GGUF);
    mlm_tokenizer_free(t);
    /* By content, whatever the name: a GGUF called tokenizer.model, a JSON called .model. */
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    CHECK(symlink(target, path) == 0);
    CHECK_OK(mlm_tokenizer_load(path, &t, &err), &err);
    CHECK(t && t->flavour == MLM_TOK_GGUF);
    mlm_tokenizer_free(t);
    /* Not tokenizers: each named for what it is. */
    static const struct {
        const char *bytes;
        size_t len;
        const char *needle;
    } OTHER[] = {{"\x02\x00\x00\x00\x00\x00\x00\x00{}", 10, "safetensors"},
                 {"PK\x03\x04rest", 8, "zip"},
                 {"\x80\x02}q\x00.", 6, "pickle"},
                 {"\x0a\x0b\x0a\x05<unk>\x15\x00\x00", 13, "SentencePiece"},
                 {"\x01\x02\x03\x04", 4, "binary"}};
    for (size_t i = 0; i < sizeof OTHER / sizeof OTHER[0]; i++) {
        snprintf(path, sizeof path, "%s/other%zu.model", g_dir, i);
        CHECK(harness_write_file(path, OTHER[i].bytes, OTHER[i].len) == 0);
        t = (mlm_tokenizer *)1;
        CHECK(mlm_tokenizer_load(path, &t, &err) == MLM_ERR_FORMAT && t == NULL);
        CHECKF(strstr(err.msg, path) && strstr(err.msg, "not a tokenizer") &&
                   strstr(err.msg, OTHER[i].needle),
               "%s", err.msg);
    }
    harness_rmtree(dir);
}

// ---- malformed GGUF metadata ----

/* How the base vocabulary (the 256 bytes, "ab" = 256 with the merge "a b", "!!" = 257 with
 * "! !", control <|im_end|> = 258) is written, one field changed per case. */
typedef struct knobs {
    const char *model, *pre; /* NULL: omit */
    int model_u32, pre_bool, tokens, types, merges, bos, add_bos_u32, tmpl_u32;
    const char *extra_merge, *token_256, *token_0;
} knobs;

enum { TOKENS_OK, TOKENS_NONE, TOKENS_U32 };
enum { TYPES_OK, TYPES_NONE, TYPES_SHORT, TYPES_STR, TYPES_BAD };
enum { MERGES_OK, MERGES_NONE, MERGES_U32 };
enum { BOS_NONE, BOS_OK, BOS_RANGE, BOS_STR };

static knobs base_knobs(void) {
    knobs k = {0};
    k.model = "gpt2";
    k.pre = "smollm";
    return k;
}

static mlm_status write_tiny(const char *path, const knobs *k, mlm_error *err) {
    mlm_gguf_writer *w = NULL;
    mlm_status st = mlm_gguf_writer_create(path, &w, err);
    const int n = 259;
    char spell[259][16];
    for (int b = 0; b < 256; b++) {
        uint32_t cp = mlm_bytelevel_char((unsigned char)b);
        if (cp < 0x80) {
            spell[b][0] = (char)cp;
            spell[b][1] = 0;
        } else {
            spell[b][0] = (char)(0xC0 | (cp >> 6));
            spell[b][1] = (char)(0x80 | (cp & 0x3F));
            spell[b][2] = 0;
        }
    }
    snprintf(spell[256], 16, "%s", k->token_256 ? k->token_256 : "ab");
    snprintf(spell[257], 16, "!!");
    snprintf(spell[258], 16, "<|im_end|>");
    if (k->token_0) snprintf(spell[0], 16, "%s", k->token_0);
    if (!st && k->model_u32) st = mlm_gguf_writer_u32(w, "tokenizer.ggml.model", 2, err);
    if (!st && k->model && !k->model_u32)
        st = mlm_gguf_writer_str(w, "tokenizer.ggml.model", k->model, strlen(k->model), err);
    if (!st && k->pre_bool) st = mlm_gguf_writer_bool(w, "tokenizer.ggml.pre", 1, err);
    if (!st && k->pre && !k->pre_bool)
        st = mlm_gguf_writer_str(w, "tokenizer.ggml.pre", k->pre, strlen(k->pre), err);
    if (!st && k->tokens == TOKENS_OK) {
        st = mlm_gguf_writer_arr_begin(w, "tokenizer.ggml.tokens", MLM_GGUF_STRING, n, err);
        for (int i = 0; i < n && !st; i++)
            st = mlm_gguf_writer_arr_str(w, spell[i], strlen(spell[i]), err);
        if (!st) st = mlm_gguf_writer_arr_end(w, err);
    } else if (!st && k->tokens == TOKENS_U32) {
        st = mlm_gguf_writer_arr_begin(w, "tokenizer.ggml.tokens", MLM_GGUF_U32, 2, err);
        for (int i = 0; i < 2 && !st; i++)
            st = mlm_gguf_writer_arr_scalar(w, (uint64_t)i, err);
        if (!st) st = mlm_gguf_writer_arr_end(w, err);
    }
    if (!st && k->types == TYPES_STR) {
        st = mlm_gguf_writer_arr_begin(w, "tokenizer.ggml.token_type", MLM_GGUF_STRING, n, err);
        for (int i = 0; i < n && !st; i++)
            st = mlm_gguf_writer_arr_str(w, "1", 1, err);
        if (!st) st = mlm_gguf_writer_arr_end(w, err);
    } else if (!st && k->types != TYPES_NONE) {
        int m = k->types == TYPES_SHORT ? n - 1 : n;
        st = mlm_gguf_writer_arr_begin(w, "tokenizer.ggml.token_type", MLM_GGUF_I32, (uint64_t)m,
                                       err);
        for (int i = 0; i < m && !st; i++) {
            int32_t t = i == 258 ? 3 : 1;
            if (k->types == TYPES_BAD && i == 7) t = 9;
            st = mlm_gguf_writer_arr_scalar(w, (uint32_t)t, err);
        }
        if (!st) st = mlm_gguf_writer_arr_end(w, err);
    }
    if (!st && k->merges == MERGES_OK) {
        int m = k->extra_merge ? 3 : 2;
        static const char *const M[] = {"a b", "! !"};
        st = mlm_gguf_writer_arr_begin(w, "tokenizer.ggml.merges", MLM_GGUF_STRING, (uint64_t)m,
                                       err);
        for (int i = 0; i < m && !st; i++) {
            const char *s = i < 2 ? M[i] : k->extra_merge;
            st = mlm_gguf_writer_arr_str(w, s, strlen(s), err);
        }
        if (!st) st = mlm_gguf_writer_arr_end(w, err);
    } else if (!st && k->merges == MERGES_U32) {
        st = mlm_gguf_writer_u32(w, "tokenizer.ggml.merges", 1, err);
    }
    if (!st && k->bos == BOS_OK)
        st = mlm_gguf_writer_u32(w, "tokenizer.ggml.bos_token_id", 258, err);
    if (!st && k->bos == BOS_RANGE)
        st = mlm_gguf_writer_u32(w, "tokenizer.ggml.bos_token_id", 259, err);
    if (!st && k->bos == BOS_STR)
        st = mlm_gguf_writer_str(w, "tokenizer.ggml.bos_token_id", "1", 1, err);
    if (!st && k->add_bos_u32) st = mlm_gguf_writer_u32(w, "tokenizer.ggml.add_bos_token", 1, err);
    if (!st && k->tmpl_u32) st = mlm_gguf_writer_u32(w, "tokenizer.chat_template", 1, err);
    if (!st) st = mlm_gguf_writer_finish(w, err);
    if (!st) st = mlm_gguf_writer_commit(w, err);
    mlm_gguf_writer_free(w);
    return st;
}

/* Writes the base with K, loads it and expects WANT with the file name and N1, N2 (when not
 * NULL) in the message. Returns the tokenizer when it loads (the caller frees it). */
static mlm_tokenizer *expect(const char *what, const knobs *k, mlm_status want, const char *n1,
                             const char *n2) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s.gguf", g_dir, what);
    mlm_error err = {0};
    CHECK_OK(write_tiny(path, k, &err), &err);
    mlm_tokenizer *t = (mlm_tokenizer *)1;
    mlm_status st = mlm_tokenizer_load(path, &t, &err);
    CHECKF(st == want, "%s: status %s, want %s (%s)", what, mlm_status_str(st),
           mlm_status_str(want), err.msg);
    CHECKF(st == MLM_OK || (t == NULL && strstr(err.msg, path)), "%s: '%s'", what, err.msg);
    CHECKF(!n1 || strstr(err.msg, n1), "%s: no '%s' in '%s'", what, n1, err.msg);
    CHECKF(!n2 || strstr(err.msg, n2), "%s: no '%s' in '%s'", what, n2, err.msg);
    if (st != MLM_OK) return NULL;
    return t;
}

#define FMT MLM_ERR_FORMAT
#define UNSUP MLM_ERR_UNSUPPORTED

TEST(gguf_base_loads) {
    knobs k = base_knobs();
    mlm_tokenizer *t = expect("base", &k, MLM_OK, NULL, NULL);
    if (!t) return;
    CHECK(t->flavour == MLM_TOK_GGUF && mlm_tokenizer_n_vocab(t) == 259);
    CHECK(mlm_tokenizer_bos_id(t) == -1); /* smollm: no add_bos by default */
    CHECK(mlm_tokenizer_special_id(t, "<|im_end|>") == 258 && mlm_tokenizer_is_special(t, 258));
    CHECK(mlm_tokenizer_chat_format(t) == NULL); /* no <|im_start|>, no template */
    mlm_tokens ids;
    mlm_tokens_init(&ids);
    mlm_error err = {0};
    /* "abab" merges per "a b"; "!!" per "! !"; control text only with parse_special. */
    CHECK_OK(encode(t, "abab !!<|im_end|>", 17, 1, 0, &ids, &err), &err);
    CHECK(ids.n == 5 && ids.ids[0] == 256 && ids.ids[1] == 256 && ids.ids[2] == ' ' &&
          ids.ids[3] == 257 && ids.ids[4] == 258);
    mlm_tokens_deinit(&ids);
    mlm_tokenizer_free(t);
    /* A bos id with add_bos_token left to the default (false for smollm, true for llama-bpe). */
    k.bos = BOS_OK;
    t = expect("bos_smollm", &k, MLM_OK, NULL, NULL);
    CHECK(t && mlm_tokenizer_bos_id(t) == -1);
    mlm_tokenizer_free(t);
    k.pre = "llama-bpe";
    t = expect("bos_llama", &k, MLM_OK, NULL, NULL);
    CHECK(t && mlm_tokenizer_bos_id(t) == 258);
    mlm_tokenizer_free(t);
    /* A vocabulary lacking the byte 0x00 (its token renamed) loads; the byte is dropped. */
    k = base_knobs();
    k.token_0 = "zq";
    t = expect("missing_byte", &k, MLM_OK, NULL, NULL);
    if (t) {
        mlm_tokens_init(&ids);
        CHECK_OK(encode(t, "!\0!", 3, 0, 0, &ids, &err), &err);
        CHECK(ids.n == 2 && ids.ids[0] == '!' && ids.ids[1] == '!'); /* llama.cpp: no merge */
        mlm_tokens_deinit(&ids);
    }
    mlm_tokenizer_free(t);
}

TEST(gguf_bad_metadata) {
    knobs k = base_knobs();
    k.model = NULL;
    expect("no_model", &k, FMT, "tokenizer.ggml.model", "missing");
    k = base_knobs();
    k.model_u32 = 1;
    expect("model_u32", &k, FMT, "tokenizer.ggml.model", "string");
    k = base_knobs();
    k.model = "llama";
    expect("model_llama", &k, UNSUP, "tokenizer.ggml.model", "'llama'");
    k = base_knobs();
    k.pre = "command-r";
    expect("pre_command_r", &k, UNSUP, "tokenizer.ggml.pre", "'command-r'");
    k = base_knobs();
    k.pre_bool = 1;
    expect("pre_bool", &k, FMT, "tokenizer.ggml.pre", "string");
    k = base_knobs();
    k.tokens = TOKENS_NONE;
    expect("no_tokens", &k, FMT, "tokenizer.ggml.tokens", "missing");
    k = base_knobs();
    k.tokens = TOKENS_U32;
    expect("tokens_u32", &k, FMT, "tokenizer.ggml.tokens", "u32");
    k = base_knobs();
    k.types = TYPES_SHORT;
    expect("types_short", &k, FMT, "tokenizer.ggml.token_type", "tokenizer.ggml.tokens");
    k = base_knobs();
    k.types = TYPES_STR;
    expect("types_str", &k, FMT, "tokenizer.ggml.token_type", "string");
    k = base_knobs();
    k.types = TYPES_BAD;
    expect("types_bad", &k, FMT, "tokenizer.ggml.token_type[7]", "9");
    k = base_knobs();
    k.merges = MERGES_NONE;
    expect("no_merges", &k, FMT, "tokenizer.ggml.merges", "missing");
    k = base_knobs();
    k.merges = MERGES_U32;
    expect("merges_u32", &k, FMT, "tokenizer.ggml.merges", "array");
    k = base_knobs();
    k.extra_merge = "a zz";
    expect("merge_absent", &k, FMT, "tokenizer.ggml.merges[2]", "zz");
    k = base_knobs();
    k.extra_merge = "b a";
    expect("merge_result_absent", &k, FMT, "tokenizer.ggml.merges[2]", "merged token");
    k = base_knobs();
    k.extra_merge = "ab";
    expect("merge_no_space", &k, FMT, "tokenizer.ggml.merges[2]", "space");
    k = base_knobs();
    k.bos = BOS_RANGE;
    expect("bos_range", &k, FMT, "tokenizer.ggml.bos_token_id", "259");
    k = base_knobs();
    k.bos = BOS_STR;
    expect("bos_str", &k, FMT, "tokenizer.ggml.bos_token_id", "string");
    k = base_knobs();
    k.add_bos_u32 = 1;
    expect("add_bos_u32", &k, FMT, "tokenizer.ggml.add_bos_token", "bool");
    k = base_knobs();
    k.tmpl_u32 = 1;
    expect("template_u32", &k, FMT, "tokenizer.chat_template", "string");
    k = base_knobs();
    k.token_256 = "a"; /* the same bytes as token 97 */
    expect("dup_token", &k, FMT, "tokenizer.ggml.tokens", "same bytes");
    k = base_knobs();
    k.token_256 = "a b"; /* a NORMAL token must be byte-level: no raw space */
    expect("raw_space", &k, FMT, "tokenizer.ggml.tokens[256]", "byte-level");
    /* A GGUF file that is no GGUF after its magic. */
    char path[128];
    snprintf(path, sizeof path, "%s/truncated.gguf", g_dir);
    CHECK(harness_write_file(path, "GGUF\x03\x00\x00\x00", 8) == 0);
    mlm_tokenizer *t = (mlm_tokenizer *)1;
    mlm_error err = {0};
    CHECK(mlm_tokenizer_load(path, &t, &err) == FMT && t == NULL && strstr(err.msg, path));
    CHECK(mlm_tokenizer_load_gguf_memory("GGUF", 4, "mem", &t, &err) == FMT && t == NULL);
}

// ---- SmolLM2's GGUF (models/, may be absent) ----

#define NEED_GGUF()                                                                                \
    do {                                                                                           \
        if (g_gguf_failed) {                                                                       \
            CHECKF(0, "%s is there but did not load", SMOL_GGUF);                                  \
            return;                                                                                \
        }                                                                                          \
        if (!g_gguf) SKIP("%s is absent (git-ignored; CI fetches it)", SMOL_GGUF);                 \
    } while (0)

TEST(smollm2_api) {
    NEED_GGUF();
    const mlm_tokenizer *t = g_gguf;
    CHECK(t->flavour == MLM_TOK_GGUF && mlm_tokenizer_n_vocab(t) == 49152);
    CHECK(mlm_tokenizer_bos_id(t) == -1); /* tokenizer.ggml.add_bos_token false */
    CHECK(mlm_tokenizer_special_id(t, "<|im_start|>") == 1 && mlm_tokenizer_is_special(t, 1));
    CHECK(mlm_tokenizer_special_id(t, "<|endoftext|>") == 0);
    const char *fmt = mlm_tokenizer_chat_format(t);
    CHECK(fmt && strcmp(fmt, "chatml-newline") == 0);
    CHECK(t->chat_system && strstr(t->chat_system, "named SmolLM, trained by Hugging Face"));
    int32_t stop[8] = {0};
    int32_t n = mlm_tokenizer_chat_stop_ids(t, stop, 8);
    int has_im_end = 0, has_eos = 0;
    for (int32_t i = 0; i < n; i++) {
        has_im_end |= stop[i] == 2;
        has_eos |= stop[i] == t->eos_id;
    }
    CHECK(n == 3 && has_im_end && has_eos && t->eos_id == 2);
    size_t len = 0;
    const char *p = mlm_tokenizer_token_bytes(t, 1, &len);
    CHECK(p && len == 12 && memcmp(p, "<|im_start|>", 12) == 0);
    p = mlm_tokenizer_token_bytes(t, 216, &len);
    CHECK(p && len == 1 && p[0] == ' ');
    mlm_tokens got;
    mlm_tokens_init(&got);
    mlm_error err = {0};
    CHECK_OK(encode(t, "hello \x04 world", 13, 0, 0, &got, &err), &err);
    CHECK(same_ids("x04", 0, &got, HELLO_X04, 3));
    mlm_tokens_deinit(&got);
}

TEST(smollm2_books) {
    NEED_GGUF();
    check_books(g_gguf);
}

TEST(smollm2_edge_cases) {
    NEED_GGUF();
    check_edge_cases(g_gguf, SMOL "/edge_cases.smollm2.ordinary.out", 0);
    check_edge_cases(g_gguf, SMOL "/edge_cases.smollm2.special.out", 1);
}

TEST(smollm2_missing_bytes) {
    NEED_GGUF();
    check_missing_bytes(g_gguf, "llama");
}

TEST(smollm2_chat) {
    NEED_GGUF();
    check_chat(g_gguf);
}

/* decode(encode(x)) is x, less the bytes without a token, for every edge case; streaming
 * detok gives the same bytes, UTF-8-repaired. */
TEST(smollm2_round_trip) {
    NEED_GGUF();
    cases c;
    CHECK(read_cases(DATA "tokenizer/edge_cases.bin", CASE_SEP, &c) == 0);
    int n_exact = 0;
    for (int i = 0; i < c.n; i++) {
        mlm_error err = {0};
        unsigned char *fixed = NULL;
        size_t flen = 0;
        CHECK_OK(mlm_utf8_repair((const unsigned char *)c.text[i], c.len[i], &fixed, &flen, &err),
                 &err);
        size_t k = 0; /* the repaired text less the bytes SmolLM2 has no token for */
        for (size_t j = 0; j < flen; j++)
            if (g_gguf->vocab.byte_rank[fixed[j]] >= 0) fixed[k++] = fixed[j];
        n_exact += k == flen;
        mlm_tokens got;
        mlm_tokens_init(&got);
        CHECK_OK(encode(g_gguf, c.text[i], c.len[i], 0, 0, &got, &err), &err);
        char *dec = NULL;
        size_t dlen = 0;
        CHECK_OK(mlm_tokenizer_decode(g_gguf, got.ids, got.n, &dec, &dlen, &err), &err);
        CHECKF(dec && dlen == k && memcmp(dec, fixed, k) == 0, "case %d", i);
        mlm_detok d;
        mlm_detok_init(&d);
        char buf[4096];
        size_t o = 0, w = 0;
        int ok = 1;
        for (int64_t j = 0; j < got.n && ok; j++) {
            ok = mlm_detok_push(&d, g_gguf, got.ids[j], buf, sizeof buf, &w, &err) == MLM_OK &&
                 o + w <= k && memcmp(fixed + o, buf, w) == 0;
            o += w;
        }
        o += mlm_detok_flush(&d, buf, sizeof buf);
        CHECKF(ok && o == k, "detok case %d", i);
        free(dec);
        free(fixed);
        mlm_tokens_deinit(&got);
    }
    CHECK(n_exact > 100);
    free_cases(&c);
}

int main(void) {
    if (harness_tmpdir(g_dir, sizeof g_dir, "tokgguf") != 0) {
        printf("cannot make a scratch directory\n0 passed, 1 failed, 0 skipped\n");
        return 1;
    }
    mlm_error err = {0};
    if (mlm_tokenizer_load(SMOL, &g_json, &err) != MLM_OK) printf("note: %s\n", err.msg);
    if (access(SMOL_GGUF, R_OK) == 0 && mlm_tokenizer_load(SMOL_GGUF, &g_gguf, &err) != MLM_OK) {
        printf("note: %s: %s\n", SMOL_GGUF, err.msg);
        g_gguf_failed = 1;
    }
    RUN(json_api);
    RUN(json_books);
    RUN(json_edge_cases);
    RUN(json_missing_bytes);
    RUN(json_chat);
    RUN(pretok_variants_vs_tokenizers);
    RUN(tiny_ggufs_vs_llamacpp);
    RUN(gguf_folder_and_magic);
    RUN(gguf_base_loads);
    RUN(gguf_bad_metadata);
    RUN(smollm2_api);
    RUN(smollm2_books);
    RUN(smollm2_edge_cases);
    RUN(smollm2_missing_bytes);
    RUN(smollm2_chat);
    RUN(smollm2_round_trip);
    mlm_tokenizer_free(g_json);
    mlm_tokenizer_free(g_gguf);
    harness_rmtree(g_dir);
    return HARNESS_END();
}
