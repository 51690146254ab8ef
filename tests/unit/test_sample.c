/* tests/unit/test_sample.c: the sampler against Hugging Face transformers' logits processors
 * (tests/data/sampling/expected.json, made by tests/fixtures/make_sampling_fixtures.py):
 * draw frequencies match the expected distributions (chi-square; top-p also over a 2048-token
 * vocabulary), filtered tokens are never
 * drawn, greedy ties go to the lowest id like torch.argmax, and a seed repeats exactly. The
 * DRY loop guard against llama.cpp's test vectors (tests/data/llamacpp/dry.json), on a
 * looping stand-in model, with breakers, long repeats and bad parameters. */
#include <jansson.h>

#include "harness.h"
#include "meshlm.h"

static json_t *load_expected(void) {
    json_error_t jerr;
    return json_load_file("tests/data/sampling/expected.json", 0, &jerr);
}

static int floats(const json_t *a, float *out, int max) {
    size_t i;
    const json_t *v;
    json_array_foreach(a, i, v) if ((int)i < max) out[i] = (float)json_number_value(v);
    return (int)json_array_size(a);
}

/* Chi-square of COUNTS against PROBS over tokens with expected count >= 5 (the others
 * pooled), with its degrees of freedom, the draws of filtered (probability 0) tokens, and a
 * limit above the 99.99th percentile for these df: df + 5.5 sqrt(2 df) + 10. */
static double chi_square(const float *probs, const int *counts, int n, int draws, int *df,
                         int *never, double *limit) {
    double chi = 0, pooled_e = 0, pooled_o = 0;
    *df = -1, *never = 0;
    for (int t = 0; t < n; t++) {
        double e = (double)probs[t] * draws;
        if (probs[t] == 0) *never += counts[t];
        else if (e >= 5) chi += (counts[t] - e) * (counts[t] - e) / e, ++*df;
        else pooled_e += e, pooled_o += counts[t];
    }
    if (pooled_e > 0) chi += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e, ++*df;
    *limit = *df + 5.5 * sqrt(2.0 * (*df > 0 ? *df : 1)) + 10;
    return chi;
}

TEST(distributions_match_transformers) {
    json_t *j = load_expected();
    CHECK(j != NULL);
    if (!j) return;
    float logits[64];
    int n = floats(json_object_get(j, "logits"), logits, 64);
    size_t ci;
    json_t *c;
    json_array_foreach(json_object_get(j, "cases"), ci, c) {
        mlm_sampler_params p = mlm_sampler_default_params();
        p.temperature = (float)json_number_value(json_object_get(c, "temperature"));
        p.top_k = (int32_t)json_integer_value(json_object_get(c, "top_k"));
        p.top_p = (float)json_number_value(json_object_get(c, "top_p"));
        p.seed = 1000 + ci;
        float probs[64];
        floats(json_object_get(c, "probs"), probs, 64);
        mlm_sampler s;
        mlm_error err;
        CHECK_OK(mlm_sampler_init(&s, &p, n, &err), &err);
        enum { DRAWS = 200000 };
        int counts[64] = {0};
        for (int i = 0; i < DRAWS; i++) counts[mlm_sampler_sample(&s, logits)]++;
        int df, never;
        double limit, chi = chi_square(probs, counts, n, DRAWS, &df, &never, &limit);
        CHECKF(never == 0, "case %zu: %d draws of filtered tokens", ci, never);
        CHECKF(chi <= limit, "case %zu (T %.2f k %d p %.2f): chi-square %.1f > %.1f (df %d)", ci,
               p.temperature, p.top_k, p.top_p, chi, limit, df);
        mlm_sampler_deinit(&s);
    }
    json_decref(j);
}

/* Top-p over a 2048-token vocabulary (the sampler looks for the nucleus in windows of the
 * best tokens before sorting everything): nuclei of 1, 10 and 103 tokens (windows of 64 and 512), against
 * transformers' TopPLogitsWarper (tests/data/sampling/expected_large.json). */
TEST(top_p_large_vocabulary_matches_transformers) {
    json_error_t jerr;
    json_t *j = json_load_file("tests/data/sampling/expected_large.json", 0, &jerr);
    CHECK(j != NULL);
    if (!j) return;
    enum { V = 2048, DRAWS = 40000 };
    static float logits[V], probs[V];
    static int counts[V];
    CHECK(floats(json_object_get(j, "logits"), logits, V) == V);
    size_t ci;
    json_t *c;
    json_array_foreach(json_object_get(j, "cases"), ci, c) {
        mlm_sampler_params p = mlm_sampler_default_params();
        p.temperature = (float)json_number_value(json_object_get(c, "temperature"));
        p.top_p = (float)json_number_value(json_object_get(c, "top_p"));
        p.seed = 77 + ci;
        memset(probs, 0, sizeof probs);
        memset(counts, 0, sizeof counts);
        size_t i;
        json_t *v;
        json_t *ids = json_object_get(c, "ids"), *ps = json_object_get(c, "probs");
        json_array_foreach(ids, i, v) probs[json_integer_value(v)] = (float)json_number_value(json_array_get(ps, i));
        mlm_sampler s;
        mlm_error err;
        CHECK_OK(mlm_sampler_init(&s, &p, V, &err), &err);
        for (int k = 0; k < DRAWS; k++) counts[mlm_sampler_sample(&s, logits)]++;
        int df, never;
        double limit, chi = chi_square(probs, counts, V, DRAWS, &df, &never, &limit);
        CHECKF(never == 0, "large case %zu: %d draws of filtered tokens", ci, never);
        CHECKF(chi <= limit, "large case %zu (T %.2f p %.3f, %zu kept): chi-square %.1f > %.1f",
               ci, p.temperature, p.top_p, json_array_size(ids), chi, limit);
        mlm_sampler_deinit(&s);
    }
    json_decref(j);
}

TEST(greedy_ties_like_torch_argmax) {
    json_t *j = load_expected();
    CHECK(j != NULL);
    if (!j) return;
    json_t *t = json_object_get(j, "argmax_ties");
    float logits[16];
    int n = floats(json_object_get(t, "logits"), logits, 16);
    mlm_sampler s;
    mlm_error err;
    CHECK_OK(mlm_sampler_init(&s, NULL, n, &err), &err);
    CHECK(mlm_sampler_sample(&s, logits) == json_integer_value(json_object_get(t, "argmax")));
    mlm_sampler_deinit(&s);
    json_decref(j);
}

TEST(seed_repeats_and_differs) {
    float logits[100];
    for (int i = 0; i < 100; i++) logits[i] = (float)((i * 37) % 11) * 0.3f;
    mlm_sampler_params p = mlm_sampler_default_params();
    p.temperature = 1.0f;
    p.top_p = 0.95f;
    int32_t a[200], b[200], c[200];
    mlm_error err;
    for (int run = 0; run < 3; run++) {
        mlm_sampler s;
        p.seed = run == 2 ? 43 : 42;
        CHECK_OK(mlm_sampler_init(&s, &p, 100, &err), &err);
        int32_t *out = run == 0 ? a : run == 1 ? b : c;
        for (int i = 0; i < 200; i++) out[i] = mlm_sampler_sample(&s, logits);
        mlm_sampler_deinit(&s);
    }
    CHECK(!memcmp(a, b, sizeof a));
    CHECK(memcmp(a, c, sizeof a) != 0);
}

TEST(bad_params) {
    mlm_sampler s;
    mlm_error err;
    mlm_sampler_params p = mlm_sampler_default_params();
    p.top_p = 1.5f;
    CHECK(mlm_sampler_init(&s, &p, 10, &err) == MLM_ERR_INVALID_ARG && strstr(err.msg, "top_p"));
    p = mlm_sampler_default_params();
    p.temperature = -1;
    CHECK(mlm_sampler_init(&s, &p, 10, &err) == MLM_ERR_INVALID_ARG &&
          strstr(err.msg, "temperature"));
    p = mlm_sampler_default_params();
    p.top_k = -2;
    CHECK(mlm_sampler_init(&s, &p, 10, &err) == MLM_ERR_INVALID_ARG && strstr(err.msg, "top_k"));
}

/* DRY against llama.cpp's own test vectors (tests/data/llamacpp/dry.json): the logits are
 * the log of the given probabilities, and the softmax after DRY must give llama.cpp's. */
TEST(dry_matches_llamacpp) {
    json_error_t jerr;
    json_t *j = json_load_file("tests/data/llamacpp/dry.json", 0, &jerr);
    CHECKF(j != NULL, "dry.json: %s", jerr.text);
    if (!j) return;
    size_t ci;
    json_t *c;
    int n_cases = 0;
    json_array_foreach(json_object_get(j, "cases"), ci, c) {
        float probs[8], expected[8], logits[8];
        int32_t tokens[16];
        uint8_t breakers[8] = {0};
        int n = floats(json_object_get(c, "probs"), probs, 8);
        CHECK(floats(json_object_get(c, "expected"), expected, 8) == n);
        size_t i;
        json_t *v;
        int32_t n_tok = 0;
        json_array_foreach(json_object_get(c, "tokens"), i, v) tokens[n_tok++] = (int32_t)json_integer_value(v);
        json_array_foreach(json_object_get(c, "breakers"), i, v) breakers[json_integer_value(v)] = 1;
        mlm_dry_params p = mlm_dry_default_params();
        p.multiplier = (float)json_number_value(json_object_get(c, "multiplier"));
        p.base = (float)json_number_value(json_object_get(c, "base"));
        p.allowed_length = (int32_t)json_integer_value(json_object_get(c, "allowed_length"));
        p.last_n = (int32_t)json_integer_value(json_object_get(c, "last_n"));
        p.breakers = breakers;
        for (int t = 0; t < n; t++) logits[t] = logf(probs[t]);
        mlm_error err;
        CHECK_OK(mlm_dry_check(&p, &err), &err);
        CHECK_OK(mlm_dry_apply(&p, tokens, n_tok, logits, n, &err), &err);
        double sum = 0;
        for (int t = 0; t < n; t++) sum += exp(logits[t]);
        for (int t = 0; t < n; t++)
            CHECKF(fabs(exp(logits[t]) / sum - expected[t]) < 1e-5,
                   "case %zu token %d: %.6f, llama.cpp %.6f", ci, t, exp(logits[t]) / sum,
                   expected[t]);
        n_cases++;
    }
    CHECK(n_cases == 5);
    json_decref(j);
}

/* A stand-in model that loves a cycle: after token T it favours (T + 1) % 5 by 2 logits, and
 * the end token 7 always scores 1.5. Greedy loops 0 1 2 3 4 0 1 ... forever; with the guard at
 * chat's settings the growing penalty lets the end token through once the cycle has been
 * repeated, and with the guard off (multiplier 0) every id is plain greedy's. */
static void cycle_logits(int32_t last, float *logits) {
    for (int t = 0; t < 8; t++) logits[t] = 0;
    logits[(last + 1) % 5] = 2;
    logits[7] = 1.5f;
}

static int32_t run_cycle(const mlm_dry_params *p, int32_t *seq, int32_t max) {
    mlm_sampler s;
    mlm_error err;
    if (mlm_sampler_init(&s, NULL, 8, &err)) return -1;
    int32_t n = 1;
    seq[0] = 0;
    while (n < max && seq[n - 1] != 7) {
        float logits[8];
        cycle_logits(seq[n - 1], logits);
        if (p && mlm_dry_apply(p, seq, n, logits, 8, &err)) break;
        seq[n] = mlm_sampler_sample(&s, logits);
        n++;
    }
    mlm_sampler_deinit(&s);
    return n;
}

TEST(dry_breaks_a_greedy_loop) {
    int32_t plain[64], off[64], on[64];
    int32_t n_plain = run_cycle(NULL, plain, 64);
    CHECK(n_plain == 64 && plain[63] != 7); /* the loop runs to the limit */
    mlm_dry_params p = mlm_dry_default_params();
    CHECK(run_cycle(&p, off, 64) == n_plain && !memcmp(plain, off, sizeof plain));
    p.multiplier = 0.8f;
    int32_t n_on = run_cycle(&p, on, 64);
    CHECKF(n_on < 16 && on[n_on - 1] == 7, "the guard ended the loop after %d tokens", n_on);
    /* the first pass through the cycle is untouched: only repeats are penalized */
    CHECK(n_on > 6 && !memcmp(on, plain, 6 * sizeof *on));
    /* a breaker (token 1) cuts the repeat: the loop runs further before the guard bites */
    uint8_t breakers[8] = {0, 1, 0, 0, 0, 0, 0, 0};
    p.breakers = breakers;
    int32_t with_breaker[64];
    int32_t n_br = run_cycle(&p, with_breaker, 64);
    CHECKF(n_br > n_on, "with a breaker %d tokens, without %d", n_br, n_on);
}

TEST(dry_long_repeats_stay_finite) {
    int32_t seq[600];
    for (int i = 0; i < 600; i++) seq[i] = i % 3;
    float logits[4] = {0, 0, 0, 0};
    mlm_dry_params p = mlm_dry_default_params();
    p.multiplier = 0.8f;
    p.base = 2.0f;
    mlm_error err;
    CHECK_OK(mlm_dry_apply(&p, seq, 600, logits, 4, &err), &err);
    for (int t = 0; t < 3; t++) CHECKF(isfinite(logits[t]), "token %d: %g", t, logits[t]);
    CHECK(logits[0] < -1e30f && logits[1] == 0 && logits[2] == 0 && logits[3] == 0);
    /* last_n bounds the look-back: a window of 2 tokens holds no repeat */
    p.last_n = 2;
    float fresh[4] = {0, 0, 0, 0};
    CHECK_OK(mlm_dry_apply(&p, seq, 600, fresh, 4, &err), &err);
    CHECK(fresh[0] == 0 && fresh[1] == 0 && fresh[2] == 0);
}

TEST(dry_bad_params) {
    mlm_error err;
    mlm_dry_params p = mlm_dry_default_params();
    p.multiplier = -1;
    CHECK(mlm_dry_check(&p, &err) == MLM_ERR_INVALID_ARG && strstr(err.msg, "multiplier"));
    p = mlm_dry_default_params();
    p.base = 0.5f;
    CHECK(mlm_dry_check(&p, &err) == MLM_ERR_INVALID_ARG && strstr(err.msg, "base"));
    p = mlm_dry_default_params();
    p.allowed_length = 0;
    CHECK(mlm_dry_check(&p, &err) == MLM_ERR_INVALID_ARG && strstr(err.msg, "allowed_length"));
    p = mlm_dry_default_params();
    p.last_n = -3;
    CHECK(mlm_dry_check(&p, &err) == MLM_ERR_INVALID_ARG && strstr(err.msg, "last_n"));
}

int main(void) {
    RUN(distributions_match_transformers);
    RUN(top_p_large_vocabulary_matches_transformers);
    RUN(greedy_ties_like_torch_argmax);
    RUN(seed_repeats_and_differs);
    RUN(bad_params);
    RUN(dry_matches_llamacpp);
    RUN(dry_breaks_a_greedy_loop);
    RUN(dry_long_repeats_stay_finite);
    RUN(dry_bad_params);
    return HARNESS_END();
}
