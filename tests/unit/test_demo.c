/* tests/unit/test_demo.c: `meshlm demo` end to end on the embedded default model (real
 * tokenizer, tiny weights), every preset shortened to fit the CI budget: token accuracy
 * against .refpt files made by transformers (f32: top-1 100%; the profiles' order), the
 * ci-eval determinism checks (64 pairs for ci-eval-32), batched outputs equal to one-at-a-time
 * outputs, prompts of different lengths in one batch, the report's JSON fields, --expect, and
 * bad input failing before any compute with a message naming the field. */
#include <jansson.h>

#include "harness.h"

static char out[1 << 16], tmp[256];

#define EXPECT(args, code, needle) HARNESS_EXPECT_MESHLM(out, args, code, needle)

static json_t *report(const char *name) {
    char path[400];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    json_error_t jerr;
    json_t *j = json_load_file(path, 0, &jerr);
    CHECKF(j != NULL, "%s: %s", path, jerr.text);
    return j;
}

static double metric(json_t *r, const char *name) {
    return json_number_value(json_object_get(json_object_get(r, "metrics"), name));
}

TEST(token_accuracy_against_transformers) {
    static const char *profiles[] = {"f32", "bf16", "accuracy", "performance"};
    double top1[4] = {0}, top5[4] = {0};
    char args[1024];
    for (int p = 0; p < 4; p++) {
        snprintf(args, sizeof args,
                 "demo -m models/default --preset token-accuracy --reference tests/data/refpt/models-default.refpt "
                 "--optimizations %s --report %s/acc-%s.json",
                 profiles[p], tmp, profiles[p]);
        EXPECT(args, 0, "token accuracy top-1");
        char name[64];
        snprintf(name, sizeof name, "acc-%s.json", profiles[p]);
        json_t *r = report(name);
        top1[p] = metric(r, "top1"), top5[p] = metric(r, "top5");
        json_decref(r);
        printf("  %-12s top-1 %6.2f%%  top-5 %6.2f%%\n", profiles[p], 100 * top1[p], 100 * top5[p]);
    }
    CHECKF(top1[0] == 1.0 && top5[0] == 1.0, "f32 must match transformers' top-1 everywhere");
    CHECK(top1[1] >= top1[2] && top1[2] >= top1[3]);
    /* `meshlm accuracy` is the same run */
    EXPECT("accuracy -m models/default --reference tests/data/refpt/models-default-128.refpt --optimizations f32", 0,
           "top-1        100.00 %");
}

/* Qwen3 (q/k norms, head_dim != hidden / heads) and Qwen2 (q/k/v biases) fixtures against
 * transformers' references (make_refpt_fixtures.py): the demo's token-accuracy preset in f32
 * matches every top-1 and top-5. */
TEST(token_accuracy_qwen) {
    static const char *models[] = {"qwen3_hd64_tied", "qwen2_gqa_untied"};
    char args[1024];
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args,
                 "demo -m tests/data/qwen/%s/hf --preset token-accuracy --reference "
                 "tests/data/refpt/qwen-%s.refpt --optimizations f32 --report %s/qacc.json",
                 models[i], models[i], tmp);
        EXPECT(args, 0, "token accuracy top-1");
        json_t *r = report("qacc.json");
        CHECKF(metric(r, "top1") == 1.0 && metric(r, "top5") == 1.0, "%s: top-1 %g top-5 %g",
               models[i], metric(r, "top1"), metric(r, "top5"));
        json_decref(r);
    }
}

TEST(determinism_ci_eval) {
    char args[1024];
    snprintf(args, sizeof args,
             "demo -m models/default --preset ci-eval-32 --max-generated-tokens 8 --quiet --report %s/eval32.json", tmp);
    EXPECT(args, 0, "64 pairs of outputs of one prompt compared, all identical");
    snprintf(args, sizeof args, "demo -m models/default --preset ci-eval-1 --max-generated-tokens 12 --quiet");
    EXPECT(args, 0, "all identical");
    json_t *r = report("eval32.json");
    CHECK(json_array_size(json_object_get(r, "users")) == 96);
    CHECK(json_integer_value(json_object_get(json_object_get(r, "metrics"), "determinism_checks")) == 64);
    json_decref(r);
}

/* A batch of 4 different prompts (different lengths) gives each prompt what it gets alone. */
TEST(batched_equals_alone) {
    char args[1024];
    snprintf(args, sizeof args,
             "demo -m models/default --batch-size 4 --max-generated-tokens 12 --quiet --report %s/b4.json", tmp);
    EXPECT(args, 0, "decode total");
    json_t *b4 = report("b4.json");
    json_t *users = json_object_get(b4, "users");
    CHECK(json_array_size(users) == 4);
    for (int u = 0; u < 4; u++) {
        /* prompt u alone: a one-prompt file */
        char file[400];
        snprintf(file, sizeof file, "%s/one.json", tmp);
        json_t *all = json_load_file("prompts/input_data_questions_prefill_128.json", 0, NULL);
        json_t *one = json_array();
        json_array_append(one, json_array_get(all, (size_t)u));
        json_dump_file(one, file, 0);
        json_decref(one), json_decref(all);
        snprintf(args, sizeof args,
                 "demo -m models/default --input-prompts %s --max-generated-tokens 12 --quiet --report %s/b1.json",
                 file, tmp);
        EXPECT(args, 0, "decode total");
        json_t *b1 = report("b1.json");
        const char *alone = json_string_value(
            json_object_get(json_array_get(json_object_get(b1, "users"), 0), "output"));
        const char *batched = json_string_value(json_object_get(json_array_get(users, (size_t)u), "output"));
        CHECKF(alone && batched && !strcmp(alone, batched), "prompt %d: alone '%s' vs batched '%s'",
               u, alone, batched);
        json_decref(b1);
    }
    json_decref(b4);
}

/* Every preset runs (shortened), and the report's JSON has every field. */
TEST(presets_and_report_fields) {
    static const char *fast[] = {"batch-1", "batch-32", "ci-1", "ci-32"};
    char args[1400];
    for (int i = 0; i < 4; i++) {
        snprintf(args, sizeof args,
                 "demo -m models/default --preset %s --max-generated-tokens 6 --quiet --report %s/p.json", fast[i], tmp);
        EXPECT(args, 0, fast[i]);
        json_t *r = report("p.json");
        static const char *fields[] = {"preset", "model", "optimizations", "batch_size",
                                       "max_seq_len", "max_generated_tokens", "repeat_batches",
                                       "instruct", "stop_at_eos", "page_params", "sampling",
                                       "metrics", "users", "failures"};
        for (size_t f = 0; f < sizeof fields / sizeof *fields; f++)
            CHECKF(json_object_get(r, fields[f]) != NULL, "%s: report lacks '%s'", fast[i], fields[f]);
        static const char *ms[] = {"load_s", "ttft_ms", "prefill_tps", "decode_tps_user",
                                   "decode_tps", "decode_step_ms", "peak_memory_gb"};
        for (size_t f = 0; f < sizeof ms / sizeof *ms; f++)
            CHECKF(json_is_number(json_object_get(json_object_get(r, "metrics"), ms[f])),
                   "%s: metrics lack '%s'", fast[i], ms[f]);
        CHECK(metric(r, "decode_tps") > 0 && metric(r, "ttft_ms") > 0);
        json_decref(r);
    }
    /* the long-context presets, with their contexts clipped to a few thousand characters */
    static const char *lc[] = {"16k", "32k", "64k"};
    for (int i = 0; i < 3; i++) {
        char file[400];
        snprintf(file, sizeof file, "%s/lc.json", tmp);
        char src[128];
        snprintf(src, sizeof src, "prompts/input_data_long_%s.json", lc[i]);
        json_t *p = json_load_file(src, 0, NULL);
        json_t *o = json_array_get(p, 0);
        char ctx[600];
        snprintf(ctx, sizeof ctx, "%s/prompts/%s", getenv("PWD") ? getenv("PWD") : ".",
                 json_string_value(json_object_get(o, "context")));
        json_object_set_new(o, "context", json_string(ctx));
        json_object_set_new(o, "max_length", json_integer(3000));
        json_dump_file(p, file, 0);
        json_decref(p);
        snprintf(args, sizeof args,
                 "demo -m models/default --preset long-context-%s --input-prompts %s --max-generated-tokens 4 "
                 "--quiet",
                 lc[i], file);
        EXPECT(args, 0, "long-context");
    }
}

TEST(expect_targets) {
    char args[1024], file[400];
    snprintf(file, sizeof file, "%s/expect.json", tmp);
    const char *hard = "{\"batch-1\": {\"decode_tps_user\": 1e9, \"peak_memory_gb\": 100}}";
    harness_write_file(file, hard, strlen(hard));
    snprintf(args, sizeof args, "demo -m models/default --max-generated-tokens 4 --quiet --expect %s", file);
    EXPECT(args, 1, "decode_tps_user");
    const char *easy = "{\"batch-1\": {\"decode_tps_user\": 0.001}}";
    harness_write_file(file, easy, strlen(easy));
    EXPECT(args, 0, "decode total");
}

/* The speculative pass (--draft-model, --draft-ngram). The model drafting for itself in its
 * own profile has every draft kept: verification computes each token as plain decoding does
 * (llama.cpp's verification, batched differently, keeps 54% of such drafts on the synthetic
 * 1B). Greedy users are compared with the plain pass (anchored to transformers by the tests
 * above and test_sched's); sampled users are counted, not compared. */
TEST(speculative_pass) {
    char args[1024];
    snprintf(args, sizeof args,
             "demo -m models/default --batch-size 4 --sampling-params 0,1 --stop-at-eos 0 "
             "--max-generated-tokens 24 --quiet --optimizations bf16 --draft-model models/default "
             "--draft-optimizations bf16 --report %s/spec.json",
             tmp);
    EXPECT(args, 0, "4 greedy outputs compared, all identical");
    json_t *r = report("spec.json");
    json_t *sp = json_object_get(json_object_get(r, "metrics"), "speculative");
    CHECKF(json_is_object(sp), "the report lacks metrics.speculative");
    long long drafted = json_integer_value(json_object_get(sp, "draft_tokens"));
    CHECKF(drafted > 0 && json_integer_value(json_object_get(sp, "draft_accepted")) == drafted,
           "drafted %lld, accepted %lld", drafted,
           json_integer_value(json_object_get(sp, "draft_accepted")));
    CHECK(json_number_value(json_object_get(sp, "speedup")) > 0);
    CHECK(json_integer_value(json_object_get(sp, "compared")) == 4);
    CHECK(!strcmp(json_string_value(json_object_get(sp, "method")), "draft-model"));
    json_decref(r);
    EXPECT("demo -m models/default --batch-size 4 --sampling-params 0,1 --max-generated-tokens 16 "
           "--quiet --draft-ngram",
           0, "prompt lookup");
    CHECK(strstr(out, "4 greedy outputs compared, all identical") != NULL);
    /* batch-32 samples per user (the seeds' linspace): a cheaper draft, nothing compared */
    EXPECT("demo -m models/default --preset batch-32 --max-generated-tokens 6 --quiet "
           "--draft-model models/default --draft-optimizations performance",
           0, "outputs not compared");
    EXPECT("demo --preset vision-batch-1 --draft-ngram", 2, "text presets");
    EXPECT("demo --draft-p-min 0.5", 2, "need --draft-model");
    EXPECT("demo --draft-model models/default --draft-ngram", 2, "exclude each other");
}

TEST(bad_input_fails_before_compute) {
    char args[1024], file[400];
    snprintf(file, sizeof file, "%s/bad.json", tmp);
    harness_write_file(file, "[{\"prompt\": \"hi\"", strlen("[{\"prompt\": \"hi\""));
    snprintf(args, sizeof args, "demo -m models/default --input-prompts %s", file);
    EXPECT(args, 1, "bad.json");
    harness_write_file(file, "[{\"prompt\": 3}]", strlen("[{\"prompt\": 3}]"));
    EXPECT(args, 1, "\"prompt\" must be a string");
    harness_write_file(file, "[{\"prompt\": \"q\", \"context\": \"no/such/file.txt\"}]",
                       strlen("[{\"prompt\": \"q\", \"context\": \"no/such/file.txt\"}]"));
    EXPECT(args, 1, "context file");
    EXPECT("demo --batch-size 3", 2, "--batch-size");
    EXPECT("demo --page-params 32,16", 2, "--page-params");
    EXPECT("demo --sampling-params 0.5,1.5", 2, "--sampling-params");
    EXPECT("demo --sampling-params -1,0.9", 2, "--sampling-params");
    EXPECT("demo --preset nope", 2, "unknown preset");
    EXPECT("demo --max-generated-tokens 2000", 2, "--max-generated-tokens");
    /* memory planning refuses, before loading, what cannot fit, naming what would */
    EXPECT("demo -m tests/data/configs/Llama-3.1-8B-Instruct --batch-size 32 --max-seq-len 131072 "
           "--page-params 32,131072",
           1, "--max-seq-len");
    CHECKF(strstr(out, "would fit") && strstr(out, "KV cache"), "%s", out);
}

int main(void) {
    if (harness_tmpdir(tmp, sizeof tmp, "demo")) return 1;
    RUN(token_accuracy_against_transformers);
    RUN(token_accuracy_qwen);
    RUN(determinism_ci_eval);
    RUN(batched_equals_alone);
    RUN(presets_and_report_fields);
    RUN(expect_targets);
    RUN(speculative_pass);
    RUN(bad_input_fails_before_compute);
    harness_rmtree(tmp);
    return HARNESS_END();
}
