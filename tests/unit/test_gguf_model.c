/* tests/unit/test_gguf_model.c: GGUF files as models, against transformers.
 *
 * tests/data/gguf/models/ (tests/fixtures/make_gguf_model_fixtures.py): tiny random Llama and
 * Phi-3 models written as llama.cpp's convert_hf_to_gguf.py lays them out (q/k rows permuted,
 * fused Phi-3 qkv and gate/up), in F32, F16 (with Llama 3.1 rope_freqs), Q8_0, Q4_0, Q4_K and
 * a per-tensor mix. Their f32 logits at every position and 8 greedy tokens come from
 * transformers' from_pretrained(gguf_file=...) (for rope_freqs, which transformers ignores,
 * from LlamaForCausalLM with the llama3 rope_scaling on the same dequantized weights). Bad
 * files, each a valid one broken in one place, must fail with a message naming the field.
 *
 * SmolLM2-135M-Instruct itself (models/smollm2/, fetched by scripts/get-model.sh; SKIP when
 * absent): f32 greedy answers to chat prompts (prompt ids from llama.cpp's tokenizer) equal
 * transformers' on the dequantized GGUF (tests/data/smollm2/chat_greedy.json). */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "helpers.h"
#include "meshlm.h"

#define DIR "tests/data/gguf/models"
#define SMOLLM2 "models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

/* Runs TOKENS[0..N) in one step with logits at every position into LOGITS (N x V). */
static mlm_status forward_all(mlm_exec *x, const int32_t *tokens, int n, float *logits,
                              mlm_error *err) {
    int32_t seq[64] = {0}, pos[64];
    int8_t want[64];
    for (int i = 0; i < n; i++) pos[i] = i, want[i] = 1;
    mlm_batch b = {n, tokens, seq, pos, want};
    return mlm_exec_step(x, &b, logits, err);
}

/* Greedy continuation of PROMPT[0..N) for up to MAX tokens into OUT, stopping after STOP
 * (kept) when STOP >= 0; returns the count. */
static int greedy(mlm_exec *x, const int32_t *prompt, int n, int max, int32_t stop, int32_t *out,
                  mlm_error *err) {
    int32_t V = mlm_model_config(mlm_exec_model(x))->n_vocab;
    float *lg = malloc((size_t)V * sizeof *lg);
    int32_t *seq = calloc((size_t)n, sizeof *seq), *pos = malloc((size_t)n * sizeof *pos);
    int8_t *want = calloc((size_t)n, 1);
    int got = -1;
    if (!lg || !seq || !pos || !want) goto done;
    for (int i = 0; i < n; i++) pos[i] = i;
    want[n - 1] = 1;
    mlm_batch b = {n, prompt, seq, pos, want};
    if (mlm_exec_seq_reset(x, 0, 0, err) || mlm_exec_step(x, &b, lg, err)) goto done;
    got = 0;
    for (int g = 0; g < max; g++) {
        int32_t t = helper_argmax(lg, V), p = n + g;
        out[got++] = t;
        if (t == stop || g + 1 == max) break;
        int8_t one = 1;
        mlm_batch d = {1, &t, seq, &p, &one};
        if (mlm_exec_step(x, &d, lg, err)) {
            got = -1;
            break;
        }
    }
done:
    free(lg), free(seq), free(pos), free(want);
    return got;
}

static int ids_of(const json_t *arr, int32_t *out, int cap) {
    int n = 0;
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) if (n < cap) out[n++] = (int32_t)json_integer_value(v);
    return n;
}

static mlm_status load_f32(const char *path, mlm_model **m, mlm_error *err) {
    return helper_load(path, "f32", NULL, m, err);
}

/* One fixture model in PROFILE: logits within TOL x max|logit| at every position, greedy
 * identical (f32: TOL 1e-4; the native profile multiplies int8 activations in blocks of 32,
 * as llama.cpp does, so its logits stay within a looser TOL). */
static void check_model_at(const char *dir, const char *name, const json_t *entry,
                           const char *profile, float tol) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, json_string_value(json_object_get(entry, "json")));
    json_error_t jerr;
    json_t *fx = json_load_file(path, 0, &jerr);
    CHECKF(fx != NULL, "%s: %s", path, jerr.text);
    if (!fx) return;
    int32_t tokens[64], gen_want[64], gen[64];
    int n = ids_of(json_object_get(fx, "tokens"), tokens, 64);
    json_t *greedy_fx = json_object_get(fx, "greedy");
    int n_gen = ids_of(json_object_get(greedy_fx, "generated"), gen_want, 64);
    int32_t V = (int32_t)json_integer_value(json_object_get(fx, "vocab"));
    snprintf(path, sizeof path, "%s/%s", dir, json_string_value(json_object_get(fx, "logits_file")));
    size_t len = 0;
    float *want = (float *)harness_read_file(path, &len);
    CHECKF(want && len == (size_t)n * (size_t)V * sizeof(float), "%s: %zu bytes", path, len);
    snprintf(path, sizeof path, "%s/%s", dir, json_string_value(json_object_get(entry, "file")));
    mlm_error err = {0};
    mlm_model *m = NULL;
    mlm_exec *x = NULL;
    mlm_exec_params xp = mlm_exec_default_params();
    xp.max_seq_len = 128;
    xp.max_step_logits = 64;
    float *got = malloc((size_t)n * (size_t)V * sizeof *got);
    if (!want || !got) goto done;
    CHECK_OK(helper_load(path, profile, NULL, &m, &err), &err);
    if (!m) goto done;
    CHECKF(mlm_model_config(m)->n_vocab == V, "%s: n_vocab %d, want %d", name,
           mlm_model_config(m)->n_vocab, V);
    CHECK_OK(mlm_exec_create(m, &xp, &x, &err), &err);
    if (!x) goto done;
    CHECK_OK(forward_all(x, tokens, n, got, &err), &err);
    float amax = 0, dmax = 0;
    int64_t worst = 0;
    for (int64_t i = 0; i < (int64_t)n * V; i++) {
        if (fabsf(want[i]) > amax) amax = fabsf(want[i]);
        float d = fabsf(got[i] - want[i]);
        if (d > dmax) dmax = d, worst = i;
    }
    CHECKF(dmax <= tol * amax, "%s %s: logits differ by %g (max |logit| %g) at position %lld id %lld",
           name, profile, dmax, amax, (long long)(worst / V), (long long)(worst % V));
    int k = greedy(x, tokens, n, n_gen, -1, gen, &err);
    if (!strcmp(profile, "f32")) {
        CHECKF(k == n_gen && !memcmp(gen, gen_want, (size_t)n_gen * sizeof *gen),
               "%s: greedy tokens differ from transformers' (first: %d vs %d)", name,
               k > 0 ? gen[0] : -1, gen_want[0]);
    } else {
        int same = 0;
        while (same < k && same < n_gen && gen[same] == gen_want[same]) same++;
        printf("  %-22s %s: logits within %.4f of max|logit|, greedy equal for %d of %d tokens\n",
               name, profile, (double)(dmax / amax), same, n_gen);
        CHECKF(k == n_gen && same == n_gen, "%s %s: greedy tokens differ from transformers' "
               "from token %d", name, profile, same);
    }
done:
    mlm_exec_free(x);
    mlm_model_free(m);
    free(got), free(want);
    json_decref(fx);
}

static void check_model_in(const char *name, const json_t *entry, const char *profile, float tol) {
    check_model_at(DIR, name, entry, profile, tol);
}

static json_t *index_json(void);

/* The native profile on every fixture model: each matrix in the file's own type (q4_0, q4_k,
 * q8_0, ... as packed; f32 tensors as f32), near transformers' logits on the dequantized
 * weights. */
TEST(native_profile_near_transformers) {
    json_t *j = index_json();
    CHECK(j != NULL);
    const char *name;
    json_t *entry;
    json_object_foreach(json_object_get(j, "models"), name, entry)
        check_model_in(name, entry, "native", 0.04f);
    json_decref(j);
}

static json_t *index_json(void) {
    json_error_t jerr;
    json_t *j = json_load_file(DIR "/index.json", 0, &jerr);
    if (!j) printf("  %s: %s\n", DIR "/index.json", jerr.text);
    return j;
}

TEST(models_match_transformers) {
    json_t *j = index_json();
    CHECK(j != NULL);
    const char *name;
    json_t *entry;
    int n = 0;
    json_object_foreach(json_object_get(j, "models"), name, entry) {
        check_model_in(name, entry, "f32", 1e-4f);
        n++;
    }
    CHECKF(n >= 6, "only %d fixture models", n);
    json_decref(j);
}

/* Qwen2 and Qwen3 GGUF files (tests/data/gguf/qwen, make_gguf_qwen_fixtures.py: q/k/v biases,
 * Qwen3's q/k norms and head_dim 128 over a 64-wide model, q/k rows in HF order as llama.cpp
 * leaves them, tokenizer.ggml.pre "qwen2") against transformers loading the same file, in f32
 * and native; the file's tokenizer (Qwen2's split) gives the fixture's prompt ids (the
 * tokenizers library's, with GPT-2's split, which agrees on that digit-free text). */
TEST(qwen_models_match_transformers) {
    const char *qdir = "tests/data/gguf/qwen";
    json_error_t jerr;
    json_t *j = json_load_file("tests/data/gguf/qwen/index.json", 0, &jerr);
    CHECKF(j != NULL, "tests/data/gguf/qwen/index.json: %s", jerr.text);
    const char *name;
    json_t *entry;
    int n = 0;
    json_object_foreach(json_object_get(j, "models"), name, entry) {
        check_model_at(qdir, name, entry, "f32", 1e-4f);
        check_model_at(qdir, name, entry, "native", 0.04f);
        char path[512];
        snprintf(path, sizeof path, "%s/%s", qdir, json_string_value(json_object_get(entry, "json")));
        json_t *fx = json_load_file(path, 0, &jerr);
        snprintf(path, sizeof path, "%s/%s", qdir, json_string_value(json_object_get(entry, "file")));
        mlm_tokenizer *tok = NULL;
        mlm_error err = {0};
        CHECK_OK(mlm_tokenizer_load(path, &tok, &err), &err);
        const char *text = json_string_value(json_object_get(fx, "prompt_text"));
        int32_t want[64];
        int nw = ids_of(json_object_get(fx, "tokens"), want, 64);
        mlm_tokens ids;
        mlm_tokens_init(&ids);
        mlm_encode_params ep = mlm_encode_default_params(); /* the file: add_bos_token false */
        if (tok && text) CHECK_OK(mlm_tokenizer_encode(tok, text, strlen(text), &ep, &ids, &err), &err);
        /* the fixture's prompt is the BOS and the text's ids */
        CHECKF(nw > 1 && ids.n == nw - 1 && !memcmp(ids.ids, want + 1, (size_t)(nw - 1) * 4),
               "%s: the file's tokenizer gives %lld ids for the prompt text, the fixture %d",
               name, (long long)ids.n, nw - 1);
        mlm_tokens_deinit(&ids);
        mlm_tokenizer_free(tok);
        json_decref(fx);
        n++;
    }
    CHECKF(n == 2, "%d Qwen GGUF models", n);
    json_decref(j);
}

/* A folder holding the file works as -m does, and the config reads the metadata. */
TEST(folder_and_config) {
    char tmp[128], link[256];
    CHECK(harness_tmpdir(tmp, sizeof tmp, "gguf-dir") == 0);
    char real[4096];
    CHECK(realpath(DIR "/llama-q8_0.gguf", real) != NULL);
    snprintf(link, sizeof link, "%s/model.gguf", tmp);
    CHECK(symlink(real, link) == 0);
    mlm_config c;
    mlm_error err = {0};
    CHECK_OK(mlm_config_load(tmp, &c, &err), &err);
    CHECK(!strcmp(c.source, "gguf") && c.family == MLM_FAMILY_LLAMA3);
    CHECK(c.n_layer == 2 && c.n_embd == 64 && c.n_head == 4 && c.n_kv_head == 2 && c.head_dim == 16);
    CHECK(c.n_ff == 160 && c.n_vocab == 320 && !c.tied_embeddings);
    CHECK(c.rope_theta == 40000.0f && fabsf(c.norm_eps - 6e-4f) < 1e-9f);
    CHECK(c.bos_id == 1 && c.n_stop_ids >= 1 && c.stop_ids[0] == 2);
    mlm_model *m = NULL;
    CHECK_OK(load_f32(tmp, &m, &err), &err);
    mlm_model_free(m);
    CHECK_OK(mlm_config_load(DIR "/phi3-mix.gguf", &c, &err), &err);
    CHECK(c.family == MLM_FAMILY_PHI3 && !c.tied_embeddings && c.n_ff == 128);
    CHECK_OK(mlm_config_load(DIR "/llama-f16-rope-llama3.gguf", &c, &err), &err);
    CHECK(c.rope_type == MLM_ROPE_FACTORS);
    CHECK(!strcmp(mlm_model_default_profile(DIR "/llama-q4_0.gguf"), "native"));
    CHECK(!strcmp(mlm_model_default_profile("models/default"), "performance"));
    harness_rmtree(tmp);
}

/* A BFP profile goes through the weight cache beside the file, like any checkpoint, and the
 * second load maps what the first wrote. */
TEST(bfp_cache) {
    char tmp[128], dst[256];
    CHECK(harness_tmpdir(tmp, sizeof tmp, "gguf-cache") == 0);
    size_t len;
    char *data = harness_read_file(DIR "/llama-q4_0.gguf", &len);
    CHECK(data != NULL);
    if (!data) return;
    snprintf(dst, sizeof dst, "%s/tiny.gguf", tmp);
    CHECK(harness_write_file(dst, data, len) == 0);
    free(data);
    mlm_model_params p = mlm_model_default_params();
    p.optimizations = "accuracy";
    mlm_error err = {0};
    mlm_model *m = NULL;
    CHECK_OK(mlm_model_load(dst, &p, &m, &err), &err);
    if (m) {
        CHECK(mlm_model_cache_built(m) && strstr(mlm_model_cache_path(m), tmp) != NULL);
        mlm_model_free(m);
    }
    CHECK_OK(mlm_model_load(dst, &p, &m, &err), &err);
    if (m) CHECK(!mlm_model_cache_built(m) && mlm_model_cache_path(m)[0]);
    mlm_model_free(m);
    harness_rmtree(tmp);
}

/* Every bad file fails, loading as meshlm does (model, then tokenizer), with a message
 * naming the field; the valid file they come from loads. */
TEST(bad_files_name_the_field) {
    json_t *j = index_json();
    CHECK(j != NULL);
    const char *name;
    json_t *entry;
    int n = 0;
    json_object_foreach(json_object_get(j, "bad"), name, entry) {
        char path[512];
        snprintf(path, sizeof path, DIR "/bad/%s", name);
        /* "blk.0.attn_q.weight (type 99)": the name before the parenthesis */
        char field_buf[256] = "", *field = NULL;
        if (json_is_string(json_object_get(entry, "error_names"))) {
            snprintf(field_buf, sizeof field_buf, "%s",
                     json_string_value(json_object_get(entry, "error_names")));
            char *paren = strstr(field_buf, " (");
            if (paren) *paren = 0;
            field = field_buf;
        }
        mlm_error err = {0};
        mlm_model *m = NULL;
        mlm_tokenizer *tok = NULL;
        mlm_status st = load_f32(path, &m, &err);
        if (!st) st = mlm_tokenizer_load(path, &tok, &err);
        mlm_model_free(m);
        mlm_tokenizer_free(tok);
        if (!field) {
            CHECKF(st == MLM_OK, "%s should load: %s", name, err.msg);
            continue;
        }
        n++;
        CHECKF(st != MLM_OK, "%s loaded", name);
        CHECKF(st == MLM_OK || strstr(err.msg, field), "%s: message does not name '%s': %s", name,
               field, err.msg);
        CHECKF(st == MLM_OK || strstr(err.msg, name), "%s: message does not name the file: %s",
               name, err.msg);
    }
    CHECKF(n >= 10, "only %d bad files", n);
    json_decref(j);
}

/* The memory plan counts the native profile's matrices at the file's own bits: a 4-bit file
 * well under its bf16 size, an F32 file exactly its f32 size, an F16 file its bf16 size. */
TEST(plan_counts_the_files_types) {
    mlm_error err = {0};
    mlm_memory_plan nat, ref;
    CHECK_OK(mlm_memory_plan_at(DIR "/llama-q4_k_m.gguf", 1, "native", NULL, NULL, &nat, &err),
             &err);
    CHECK_OK(mlm_memory_plan_at(DIR "/llama-q4_k_m.gguf", 1, "bf16", NULL, NULL, &ref, &err), &err);
    CHECKF(nat.weights > 0 && nat.weights * 2 < ref.weights, "q4_k_m native %lld, bf16 %lld",
           (long long)nat.weights, (long long)ref.weights);
    CHECK(nat.total - nat.weights == ref.total - ref.weights + (nat.kv - ref.kv));
    CHECK_OK(mlm_memory_plan_at(DIR "/llama-f32.gguf", 1, "native", NULL, NULL, &nat, &err), &err);
    CHECK_OK(mlm_memory_plan_at(DIR "/llama-f32.gguf", 1, "f32", NULL, NULL, &ref, &err), &err);
    CHECKF(nat.weights == ref.weights, "f32 file: native %lld, f32 %lld", (long long)nat.weights,
           (long long)ref.weights);
    CHECK_OK(mlm_memory_plan_at(DIR "/llama-f16-rope-llama3.gguf", 1, "native", NULL, NULL, &nat,
                                &err),
             &err);
    CHECK_OK(mlm_memory_plan_at(DIR "/llama-f16-rope-llama3.gguf", 1, "bf16", NULL, NULL, &ref,
                                &err),
             &err);
    CHECKF(nat.weights == ref.weights, "f16 file: native %lld, bf16 %lld", (long long)nat.weights,
           (long long)ref.weights);
    /* native is for GGUF files only: a safetensors checkpoint is refused by name */
    CHECK(mlm_memory_plan_at("tests/data/llama/gqa4_hd64_tied_r32/hf", 1, "native", NULL, NULL,
                             &nat, &err) != MLM_OK);
    CHECKF(strstr(err.msg, "GGUF") != NULL, "%s", err.msg);
}

/* `meshlm info` shows the file's own types and what the default profile makes of them. */
TEST(info_shows_types) {
    char out[8192];
    HARNESS_EXPECT_MESHLM(out, "info -m " DIR "/phi3-mix.gguf", 0, "format:     gguf");
    CHECK(strstr(out, "q8_0") && strstr(out, "q4_0") && strstr(out, "f16"));
    CHECK(strstr(out, "profile:    native by default") != NULL);
    CHECK(strstr(out, "wq q8_0") || strstr(out, "w1 q4_0")); /* the file's own types */
    HARNESS_EXPECT_MESHLM(out, "info -m " DIR "/bad/bad-iq2_xxs.gguf", 0, "iq2_xxs");
    HARNESS_EXPECT_MESHLM(out, "generate -m " DIR "/bad/bad-iq2_xxs.gguf -p hi", 1,
                          "blk.0.ffn_down.weight");
}

TEST(smollm2_f32_greedy_equals_transformers) {
    if (access(SMOLLM2, R_OK) != 0)
        SKIP("%s is absent (scripts/get-model.sh fetches it)", SMOLLM2);
    json_error_t jerr;
    json_t *fx = json_load_file("tests/data/smollm2/chat_greedy.json", 0, &jerr);
    CHECKF(fx != NULL, "%s", jerr.text);
    if (!fx) return;
    mlm_error err = {0};
    mlm_model *m = NULL;
    mlm_exec *x = NULL;
    CHECK_OK(load_f32(SMOLLM2, &m, &err), &err);
    mlm_exec_params xp = mlm_exec_default_params();
    xp.max_seq_len = 512;
    if (m) CHECK_OK(mlm_exec_create(m, &xp, &x, &err), &err);
    int32_t eos = (int32_t)json_integer_value(json_object_get(fx, "eos_token_id"));
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(fx, "cases"), i, c) {
        if (!x) break;
        int32_t prompt[512], want[64], got[64];
        int n = ids_of(json_object_get(c, "prompt_ids"), prompt, 512);
        int nw = ids_of(json_object_get(c, "generated_ids"), want, 64);
        int k = greedy(x, prompt, n, nw, eos, got, &err);
        int first = 0;
        while (first < k && first < nw && got[first] == want[first]) first++;
        CHECKF(k == nw && first == nw, "%s: f32 greedy differs from transformers' at token %d of %d",
               json_string_value(json_object_get(c, "name")), first, nw);
    }
    mlm_exec_free(x);
    mlm_model_free(m);
    json_decref(fx);
}

int main(void) {
    RUN(models_match_transformers);
    RUN(native_profile_near_transformers);
    RUN(qwen_models_match_transformers);
    RUN(folder_and_config);
    RUN(bfp_cache);
    RUN(bad_files_name_the_field);
    RUN(plan_counts_the_files_types);
    RUN(info_shows_types);
    RUN(smollm2_f32_greedy_equals_transformers);
    return HARNESS_END();
}
