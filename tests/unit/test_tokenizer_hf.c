/* test_tokenizer_hf.c: Hugging Face tokenizers (tokenizer.json, vocab.json + merges.txt)
 * against reference outputs. Expected ids come from Hugging Face tokenizers / transformers
 * via tests/fixtures/make_phi4_tokenizer_fixtures.py: Phi-4's tokenizer.json on both books
 * (chunk checksums), the edge-case corpus, Phi-4 added-token cases and chat dialogs
 * (apply_chat_template); a small trained tokenizer under many pre-tokenizer / model /
 * post-processor variants; the legacy layout through transformers' GPT2Tokenizer; and
 * llama.cpp's cl100k vectors. Also: both merge engines agree with a merges list, round
 * trips, streaming detok, load paths, concurrent encoding. Malformed files are in
 * test_tokenizer_hf_errors.c. Paths are relative to the repository root. */
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "helpers.h"
#include "tokenizer_cases.h"
#include "meshlm.h"
#include "tokenizer/bpe.h"
#include "tokenizer/hf.h"
#include "tokenizer/tokenizer.h"

#define DATA "tests/data/"
#define PHI4 DATA "tokenizer/phi4"
#define SMALL DATA "tokenizer/hf/small.tokenizer.json"

static mlm_tokenizer *g_phi4; /* loaded once in main, read-only afterwards */

// ---- helpers ----

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

/* Compares ids with a JSON array of ids. */
static int same_json_ids(const char *what, int idx, const mlm_tokens *got, const json_t *want) {
    int64_t n = (int64_t)json_array_size(want);
    int32_t *w = malloc((size_t)(n + 1) * sizeof *w);
    for (int64_t k = 0; k < n; k++)
        w[k] = (int32_t)json_integer_value(json_array_get(want, (size_t)k));
    int ok = same_ids(what, idx, got->ids, got->n, w, n);
    free(w);
    return ok;
}

static mlm_status encode(const mlm_tokenizer *tok, const char *text, size_t len, int special,
                         int bos, mlm_tokens *out, mlm_error *err) {
    mlm_encode_params p = mlm_encode_default_params();
    p.parse_special = special;
    p.add_bos = bos;
    return mlm_tokenizer_encode(tok, text, len, &p, out, err);
}

/* Encodes every case of INP and compares with the lines of OUTP; returns the case count. */
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
        CHECK_OK(encode(tok, c.text[i], c.len[i], special, 0, &got, &err), &err);
        if (!same_ids(outp, i, got.ids, got.n, want.line[i].ids, want.line[i].n)) bad++;
        mlm_tokens_deinit(&got);
    }
    CHECKF(bad == 0, "%d of %d cases differ", bad, n);
    free_cases(&c);
    free_id_lines(&want);
    return n;
}

static const char *const BOOKS[] = {"frankenstein", "tale-of-two-cities"};

// ---- Phi-4 ----

TEST(phi4_api) {
    const mlm_tokenizer *t = g_phi4;
    CHECK(mlm_tokenizer_n_vocab(t) == 100352);
    CHECK(mlm_tokenizer_bos_id(t) == -1); /* the post-processor adds nothing */
    CHECK(mlm_tokenizer_special_id(t, "<|dummy_0|>") == 100256);
    CHECK(mlm_tokenizer_special_id(t, "<|endoftext|>") == 100257);
    CHECK(mlm_tokenizer_special_id(t, "<|im_start|>") == 100264);
    CHECK(mlm_tokenizer_special_id(t, "<|im_end|>") == 100265);
    CHECK(mlm_tokenizer_special_id(t, "<|im_sep|>") == 100266);
    CHECK(mlm_tokenizer_special_id(t, "<|endofprompt|>") == 100276);
    CHECK(mlm_tokenizer_special_id(t, "<|dummy_87|>") == 100351);
    CHECK(mlm_tokenizer_special_id(t, "<|eot_id|>") == -1);
    CHECK(mlm_tokenizer_is_special(t, 100265) && mlm_tokenizer_is_special(t, 100256));
    CHECK(!mlm_tokenizer_is_special(t, 100255) && !mlm_tokenizer_is_special(t, 100352));
    size_t len = 0;
    const char *p = mlm_tokenizer_token_bytes(t, 100266, &len);
    CHECK(p && len == 10 && memcmp(p, "<|im_sep|>", 10) == 0);
    p = mlm_tokenizer_token_bytes(t, 220, &len);
    CHECK(p && len == 1 && p[0] == ' ');
    CHECK(mlm_tokenizer_token_bytes(t, 100352, &len) == NULL);
    const char *fmt = mlm_tokenizer_chat_format(t);
    CHECK(fmt && strcmp(fmt, "chatml") == 0);
    int32_t stop[4] = {0};
    CHECK(mlm_tokenizer_chat_stop_ids(t, stop, 4) == 3);
    CHECK(stop[0] == 100265 && stop[1] == 100264 && stop[2] == 100257);
    CHECK(mlm_tokenizer_chat_stop_ids(t, NULL, 0) == 3);
    CHECK(mlm_tokenizer_chat_stop_ids(t, stop, 1) == 3 && stop[0] == 100265);
    mlm_tokens out;
    mlm_tokens_init(&out);
    mlm_error err = {0};
    CHECK(encode(t, "x", 1, 0, 1, &out, &err) == MLM_ERR_INVALID_ARG); /* no BOS */
    mlm_tokens_deinit(&out);
}

TEST(phi4_books_vs_tokenizers) {
    for (size_t b = 0; b < 2; b++) {
        char path[256];
        size_t len;
        snprintf(path, sizeof path, DATA "text/%s.txt", BOOKS[b]);
        char *text = harness_read_file(path, &len);
        snprintf(path, sizeof path, PHI4 "/%s.phi4.sum", BOOKS[b]);
        char *sums = harness_read_file(path, NULL);
        CHECKF(text && sums, "missing %s", path);
        if (!text || !sums) {
            free(text);
            free(sums);
            continue;
        }
        mlm_tokens got;
        mlm_tokens_init(&got);
        mlm_error err = {0};
        CHECK_OK(encode(g_phi4, text, len, 0, 0, &got, &err), &err);
        long long n_want = 0, chunk = 0;
        char *p = sums;
        CHECK(sscanf(p, "%lld %lld", &n_want, &chunk) == 2 && chunk > 0);
        CHECKF(got.n == n_want, "%s: %lld ids, tokenizers %lld", BOOKS[b], (long long)got.n,
               n_want);
        int bad = 0;
        for (int64_t i = 0; chunk > 0 && i < got.n; i += chunk) {
            p = strchr(p, '\n');
            if (!p) break;
            p++;
            unsigned long long want = strtoull(p, NULL, 16);
            int64_t m = got.n - i < chunk ? got.n - i : chunk;
            if (helper_fnv64_ids(got.ids + i, m) != want && bad++ == 0)
                printf("  %s: first differing chunk starts at id %lld\n", BOOKS[b], (long long)i);
        }
        CHECKF(bad == 0, "%s: %d chunks differ", BOOKS[b], bad);
        /* With special parsing on the books give the same ids (no special text in them). */
        mlm_tokens sp;
        mlm_tokens_init(&sp);
        CHECK_OK(encode(g_phi4, text, len, 1, 0, &sp, &err), &err);
        CHECK(same_ids("special", (int)b, sp.ids, sp.n, got.ids, got.n));
        /* Round trip and streaming detok. */
        char *dec = NULL;
        size_t dlen = 0;
        CHECK_OK(mlm_tokenizer_decode(g_phi4, got.ids, got.n, &dec, &dlen, &err), &err);
        CHECK(dec && dlen == len && memcmp(dec, text, len) == 0);
        mlm_detok d;
        mlm_detok_init(&d);
        size_t o = 0;
        int mismatch = 0;
        for (int64_t i = 0; i < got.n && !mismatch; i++) {
            char buf[64 + 1024];
            size_t w = 0;
            CHECK_OK(mlm_detok_push(&d, g_phi4, got.ids[i], buf, sizeof buf, &w, &err), &err);
            mismatch = o + w > len || memcmp(text + o, buf, w) != 0;
            o += w;
        }
        CHECK(!mismatch && o == len);
        free(dec);
        mlm_tokens_deinit(&sp);
        mlm_tokens_deinit(&got);
        free(sums);
        free(text);
    }
}

TEST(phi4_edge_cases) {
    int n = check_vectors(g_phi4, DATA "tokenizer/edge_cases.bin", "\n__meshlm_case__\n",
                          PHI4 "/edge_cases.phi4.ordinary.out", 0);
    CHECKF(n > 100, "%d cases", n);
    n = check_vectors(g_phi4, DATA "tokenizer/edge_cases.bin", "\n__meshlm_case__\n",
                      PHI4 "/edge_cases.phi4.special.out", 1);
    CHECKF(n > 100, "%d cases", n);
}

TEST(phi4_added_token_cases) {
    int n = check_vectors(g_phi4, PHI4 "/cases.bin", "\n__meshlm_case__\n",
                          PHI4 "/cases.ordinary.out", 0);
    CHECKF(n >= 28, "%d cases", n);
    n = check_vectors(g_phi4, PHI4 "/cases.bin", "\n__meshlm_case__\n", PHI4 "/cases.special.out",
                      1);
    CHECKF(n >= 28, "%d cases", n);
}

TEST(phi4_llamacpp_dbrx_cl100k) {
    int n = check_vectors(g_phi4, DATA "llamacpp/ggml-vocab-dbrx.gguf.inp",
                          "\n__ggml_vocab_test__\n", DATA "llamacpp/ggml-vocab-dbrx.gguf.out", 0);
    CHECKF(n == 43, "%d cases", n);
}

TEST(phi4_chat_vs_apply_chat_template) {
    json_error_t je;
    json_t *root = json_load_file(PHI4 "/chat.json", 0, &je);
    if (!root) {
        CHECKF(0, "chat.json: %s", je.text);
        return;
    }
    size_t i;
    json_t *dlg;
    int n_special = 0;
    json_array_foreach(root, i, dlg) {
        json_t *msgs = json_object_get(dlg, "messages");
        int gen = json_is_true(json_object_get(dlg, "add_generation_prompt"));
        int special = json_is_true(json_object_get(dlg, "content_has_special_text"));
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
        CHECK_OK(mlm_tokenizer_encode_chat(g_phi4, m, n, gen, &got, &err), &err);
        CHECK(got.n >= 1 && got.ids[0] == 7);
        got.n--;
        memmove(got.ids, got.ids + 1, (size_t)got.n * sizeof *got.ids);
        /* Without special-token text in content: exactly apply_chat_template's ids. With it,
         * meshlm keeps the text plain ("ids"), where HF emits the special ids ("ids_hf"). */
        CHECK(
            same_json_ids("chat", (int)i, &got, json_object_get(dlg, special ? "ids" : "ids_hf")));
        if (special) {
            n_special++;
            json_t *hf = json_object_get(dlg, "ids_hf");
            int same = (int64_t)json_array_size(hf) == got.n;
            for (int64_t k = 0; same && k < got.n; k++)
                same = json_integer_value(json_array_get(hf, (size_t)k)) == got.ids[k];
            CHECK(!same);
        }
        /* The rendered template string, tokenized with special parsing, is HF's own path. */
        const char *r = json_string_value(json_object_get(dlg, "rendered"));
        mlm_tokens whole;
        mlm_tokens_init(&whole);
        CHECK_OK(encode(g_phi4, r, strlen(r), 1, 0, &whole, &err), &err);
        CHECK(same_json_ids("rendered", (int)i, &whole, json_object_get(dlg, "ids_hf")));
        mlm_tokens_deinit(&whole);
        mlm_tokens_deinit(&got);
    }
    CHECK(json_array_size(root) >= 4 && n_special >= 1);
    json_decref(root);
    /* Roles outside the template, and the bare generation prompt. */
    mlm_tokens out;
    mlm_tokens_init(&out);
    mlm_error err = {0};
    mlm_chat_message tool[1] = {{"tool", "x"}};
    CHECK(mlm_tokenizer_encode_chat(g_phi4, tool, 1, 1, &out, &err) == MLM_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "tool") != NULL && out.n == 0);
    CHECK_OK(mlm_tokenizer_encode_chat(g_phi4, NULL, 0, 1, &out, &err), &err);
    CHECK(out.n == 3 && out.ids[0] == 100264 && out.ids[1] == 78191 && out.ids[2] == 100266);
    mlm_tokens_deinit(&out);
}

/* Whitespace runs past PCRE2's default limits through the file's regex (HF mode keeps a
 * limit proportional to the text): 12 MB through the pre-tokenizer, 1 MB encoded whole
 * (the merge of a megabyte-long piece is what takes the time). */
TEST(phi4_long_runs) {
    size_t n = 12u << 20;
    char *text = malloc(n + 1);
    const char *fills[] = {" ", "\n "};
    mlm_pretok_iter it;
    mlm_error err = {0};
    CHECK_OK(mlm_pretok_iter_init(&it, &g_phi4->pretok, &err), &err);
    for (int f = 0; f < 2; f++) {
        size_t fl = strlen(fills[f]);
        for (size_t i = 0; i < n; i++)
            text[i] = fills[f][i % fl];
        text[n] = 'x';
        mlm_pretok_iter_reset(&it, (const unsigned char *)text, n + 1);
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
        size_t m = 1u << 20;
        text[m] = 'x';
        mlm_tokens ids;
        mlm_tokens_init(&ids);
        CHECK_OK(encode(g_phi4, text, m + 1, 0, 0, &ids, &err), &err);
        char *dec = NULL;
        size_t dlen = 0;
        CHECK_OK(mlm_tokenizer_decode(g_phi4, ids.ids, ids.n, &dec, &dlen, &err), &err);
        CHECKF(dec && dlen == m + 1 && memcmp(dec, text, m + 1) == 0, "fill %d", f);
        free(dec);
        mlm_tokens_deinit(&ids);
    }
    mlm_pretok_iter_deinit(&it);
    free(text);
}

// ---- small tokenizer: variants against tokenizers ----

/* Applies a fixture patch (top-level keys, "model.KEY", and "model.merges": "strings"). */
static void apply_patch(json_t *j, const json_t *patch) {
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)patch, key, val) {
        if (strcmp(key, "model.merges") == 0) {
            json_t *merges = json_object_get(json_object_get(j, "model"), "merges");
            size_t i;
            json_t *m;
            json_array_foreach(merges, i, m) {
                char buf[512];
                snprintf(buf, sizeof buf, "%s %s", json_string_value(json_array_get(m, 0)),
                         json_string_value(json_array_get(m, 1)));
                json_array_set_new(merges, i, json_string(buf));
            }
        } else if (strncmp(key, "model.", 6) == 0) {
            json_object_set(json_object_get(j, "model"), key + 6, val);
        } else {
            json_object_set(j, key, val);
        }
    }
}

TEST(small_variants_vs_tokenizers) {
    json_error_t je;
    json_t *fx = json_load_file(DATA "tokenizer/hf/variants.json", 0, &je);
    json_t *base = json_load_file(SMALL, 0, &je);
    if (!fx || !base) {
        CHECKF(0, "variants.json / small.tokenizer.json: %s", je.text);
        json_decref(fx);
        json_decref(base);
        return;
    }
    json_t *texts = json_object_get(fx, "texts");
    size_t v, n_checked = 0;
    json_t *var;
    json_array_foreach(json_object_get(fx, "variants"), v, var) {
        const char *name = json_string_value(json_object_get(var, "name"));
        json_t *j = json_deep_copy(base);
        apply_patch(j, json_object_get(var, "patch"));
        char *doc = json_dumps(j, JSON_COMPACT);
        mlm_tokenizer *t = NULL;
        mlm_error err = {0};
        CHECK_OK(mlm_hf_load_json_memory(doc, strlen(doc), name, &t, &err), &err);
        static const char *const MODES[] = {"ordinary", "special", "bos"};
        /* tokenizers' add_special_tokens=True adds nothing without a BOS template, where
         * meshlm's add_bos is an error. */
        int has_bos = t && mlm_tokenizer_bos_id(t) >= 0;
        for (int mode = 0; t && mode < 3; mode++) {
            json_t *want = json_object_get(var, MODES[mode]);
            int bad = 0;
            for (size_t k = 0; k < json_array_size(texts); k++) {
                const char *s = json_string_value(json_array_get(texts, k));
                mlm_tokens got;
                mlm_tokens_init(&got);
                CHECK_OK(encode(t, s, strlen(s), mode > 0, mode == 2 && has_bos, &got, &err), &err);
                if (!same_json_ids(name, (int)k, &got, json_array_get(want, k))) bad++;
                mlm_tokens_deinit(&got);
                n_checked++;
            }
            CHECKF(bad == 0, "variant %s, %s: %d texts differ", name, MODES[mode], bad);
        }
        if (t) CHECK(mlm_tokenizer_bos_id(t) == (strcmp(name, "bytelevel_post") ? 603 : -1));
        mlm_tokenizer_free(t);
        free(doc);
        json_decref(j);
    }
    CHECKF(n_checked >= 11 * 3 * 25, "%zu encodings checked", n_checked);
    json_decref(fx);
    json_decref(base);
}

TEST(legacy_layout_vs_transformers) {
    json_error_t je;
    json_t *fx = json_load_file(DATA "tokenizer/hf/legacy/expected.json", 0, &je);
    if (!fx) {
        CHECKF(0, "legacy/expected.json: %s", je.text);
        return;
    }
    mlm_tokenizer *t = NULL;
    mlm_error err = {0};
    CHECK_OK(mlm_tokenizer_load(DATA "tokenizer/hf/legacy", &t, &err), &err);
    json_t *texts = json_object_get(fx, "texts");
    for (int special = 0; t && special < 2; special++) {
        json_t *want = json_object_get(fx, special ? "special" : "ordinary");
        for (size_t k = 0; k < json_array_size(texts); k++) {
            const char *s = json_string_value(json_array_get(texts, k));
            mlm_tokens got;
            mlm_tokens_init(&got);
            CHECK_OK(encode(t, s, strlen(s), special, 0, &got, &err), &err);
            CHECK(same_json_ids(special ? "legacy special" : "legacy", (int)k, &got,
                                json_array_get(want, k)));
            mlm_tokens_deinit(&got);
        }
    }
    if (t) {
        CHECK(mlm_tokenizer_special_id(t, "<|pad|>") == 609); /* added after the decoder's */
        CHECK(mlm_tokenizer_bos_id(t) == -1 && mlm_tokenizer_chat_format(t) == NULL);
    }
    mlm_tokenizer_free(t);
    /* The vocab.json path itself loads the same directory. */
    CHECK_OK(mlm_tokenizer_load(DATA "tokenizer/hf/legacy/vocab.json", &t, &err), &err);
    CHECK(t && mlm_tokenizer_n_vocab(t) == 610);
    mlm_tokenizer_free(t);
    json_decref(fx);
}

// ---- engines ----

/* The reference and heap engines agree with a merges list, on random and long pieces. */
TEST(merge_engines_agree) {
    mlm_tokenizer *small = NULL;
    mlm_error err = {0};
    CHECK_OK(mlm_tokenizer_load(SMALL, &small, &err), &err);
    const mlm_tokenizer *toks[2] = {g_phi4, small};
    mlm_bpe_scratch s;
    mlm_bpe_scratch_init(&s);
    uint64_t rng = 777;
    unsigned char buf[4000];
    const char *words[] = {"the", "ing", " and", "qq", "q", "er", "\xc3\xa9", "  ", "0", "ab"};
    int diff = 0, n_cases = 0;
    for (int ti = 0; ti < 2 && toks[ti]; ti++) {
        const mlm_tokenizer *t = toks[ti];
        for (int c = 0; c < 80; c++) {
            size_t n = c < 30 ? 1 + (size_t)c * 4 : 128 + (size_t)(c - 30) * 60, i = 0;
            while (i < n) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                unsigned r = (unsigned)(rng >> 33);
                if (c % 3 == 0) {
                    buf[i++] = (unsigned char)r;
                } else {
                    const char *w = words[r % 10];
                    for (size_t k = 0; w[k] && i < n; k++)
                        buf[i++] = (unsigned char)w[k];
                }
            }
            mlm_tokens a, b;
            mlm_tokens_init(&a);
            mlm_tokens_init(&b);
            CHECK_OK(mlm_bpe_merge_ref(&t->vocab, &t->merges, buf, n, &s, &a, &err), &err);
            CHECK_OK(mlm_bpe_merge_heap(&t->vocab, &t->merges, buf, n, &s, &b, &err), &err);
            if (!same_ids("engines", c, b.ids, b.n, a.ids, a.n)) diff++;
            char *dec = NULL;
            size_t dlen = 0;
            CHECK_OK(mlm_tokenizer_decode(t, a.ids, a.n, &dec, &dlen, &err), &err);
            CHECK(dec && dlen == n && memcmp(dec, buf, n) == 0);
            free(dec);
            mlm_tokens_deinit(&a);
            mlm_tokens_deinit(&b);
            n_cases++;
        }
    }
    CHECKF(diff == 0 && n_cases == 160, "%d of %d pieces differ", diff, n_cases);
    mlm_bpe_scratch_deinit(&s);
    mlm_tokenizer_free(small);
}

// ---- load paths ----

TEST(load_paths_hf) {
    mlm_error err = {0};
    char dir[64], cwd[4096], target[4300], link[128];
    CHECK(harness_tmpdir(dir, sizeof dir, "tokhf") == 0);
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK(!mlm_tokenizer_present(dir));
    /* vocab.json alone is not a tokenizer; with merges.txt it is. */
    snprintf(target, sizeof target, "%s/" DATA "tokenizer/hf/legacy/vocab.json", cwd);
    snprintf(link, sizeof link, "%s/vocab.json", dir);
    CHECK(symlink(target, link) == 0);
    CHECK(!mlm_tokenizer_present(dir));
    snprintf(target, sizeof target, "%s/" DATA "tokenizer/hf/legacy/merges.txt", cwd);
    snprintf(link, sizeof link, "%s/merges.txt", dir);
    CHECK(symlink(target, link) == 0);
    CHECK(mlm_tokenizer_present(dir));
    mlm_tokenizer *t = NULL;
    /* No tokenizer_config.json: GPT2Tokenizer's defaults add <|endoftext|> as a special. */
    CHECK_OK(mlm_tokenizer_load(dir, &t, &err), &err);
    CHECK(t && mlm_tokenizer_n_vocab(t) == 604);
    CHECK(t && mlm_tokenizer_special_id(t, "<|endoftext|>") == 603);
    mlm_tokenizer_free(t);
    /* tokenizer.json wins over vocab.json. */
    snprintf(target, sizeof target, "%s/" SMALL, cwd);
    snprintf(link, sizeof link, "%s/tokenizer.json", dir);
    CHECK(symlink(target, link) == 0);
    t = NULL;
    CHECK_OK(mlm_tokenizer_load(dir, &t, &err), &err);
    CHECK(t && mlm_tokenizer_n_vocab(t) == 612 && mlm_tokenizer_bos_id(t) == 603);
    mlm_tokenizer_free(t);
    /* tokenizer.model wins over both. */
    snprintf(target, sizeof target, "%s/" DATA "tokenizer/cl100k_base.tiktoken", cwd);
    snprintf(link, sizeof link, "%s/tokenizer.model", dir);
    CHECK(symlink(target, link) == 0);
    t = NULL;
    CHECK_OK(mlm_tokenizer_load(dir, &t, &err), &err);
    CHECK(t && mlm_tokenizer_n_vocab(t) == 100277);
    mlm_tokenizer_free(t);
    harness_rmtree(dir);
}

// ---- threads ----

typedef struct job {
    const char *text;
    size_t len;
    mlm_tokens out;
    mlm_status st;
} job;

static void *encode_thread(void *arg) {
    job *j = arg;
    mlm_error err = {0};
    j->st = encode(g_phi4, j->text, j->len, (int)(j->len % 2), 0, &j->out, &err);
    return NULL;
}

TEST(concurrent_encode_hf) {
    size_t len;
    char *text = harness_read_file(PHI4 "/cases.bin", &len);
    if (!text) SKIP("no cases.bin");
    job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i].text = text;
        jobs[i].len = len - (size_t)i;
        mlm_tokens_init(&jobs[i].out);
        CHECK(pthread_create(&th[i], NULL, encode_thread, &jobs[i]) == 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        mlm_tokens want;
        mlm_tokens_init(&want);
        mlm_error err = {0};
        CHECK_OK(encode(g_phi4, text, jobs[i].len, (int)(jobs[i].len % 2), 0, &want, &err), &err);
        CHECK(jobs[i].st == MLM_OK);
        CHECK(same_ids("thread", i, jobs[i].out.ids, jobs[i].out.n, want.ids, want.n));
        mlm_tokens_deinit(&want);
        mlm_tokens_deinit(&jobs[i].out);
    }
    free(text);
}

int main(void) {
    mlm_error err = {0};
    if (mlm_tokenizer_load(PHI4, &g_phi4, &err) != MLM_OK) {
        printf("cannot load %s: %s\n", PHI4, err.msg);
        printf("0 passed, 1 failed, 0 skipped\n");
        return 1;
    }
    RUN(phi4_api);
    RUN(phi4_books_vs_tokenizers);
    RUN(phi4_edge_cases);
    RUN(phi4_added_token_cases);
    RUN(phi4_llamacpp_dbrx_cl100k);
    RUN(phi4_chat_vs_apply_chat_template);
    RUN(phi4_long_runs);
    RUN(small_variants_vs_tokenizers);
    RUN(legacy_layout_vs_transformers);
    RUN(merge_engines_agree);
    RUN(load_paths_hf);
    RUN(concurrent_encode_hf);
    mlm_tokenizer_free(g_phi4);
    return HARNESS_END();
}
