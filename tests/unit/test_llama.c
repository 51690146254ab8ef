/* tests/unit/test_llama.c: the Llama 3 decoder against Hugging Face transformers.
 * Fixtures (tests/data/llama, made by tests/fixtures/make_llama_fixtures.py): tiny random
 * LlamaForCausalLM models (GQA 4:1 and 1:1, tied and untied, head_dim 64 and 128, llama3
 * RoPE factor 32 and 8) saved as HF safetensors and as Meta consolidated.NN.pth (one and two
 * shards), with transformers' float32 logits at every position, at positions 9000+, and its
 * 64 greedy tokens. Also: paged KV and thread-count invariance, capacity errors and bad
 * checkpoints. */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <unistd.h>

#include "harness.h"
#include "helpers.h"
#include "meshlm.h"

#define LLAMA "tests/data/llama/"

static char tmpdir[256];

typedef struct fixture {
    char dir[256];
    int vocab, n_tokens;
    int32_t tokens[64];
    float *logits, *logits_high; /* (n_tokens, vocab) */
    int high_start;
    int32_t prompt[64], generated[128];
    int n_prompt, n_generated;
} fixture;

static int ints(const json_t *a, int32_t *out, int max) {
    size_t i;
    const json_t *v;
    json_array_foreach(a, i, v) {
        if ((int)i >= max) return -1;
        out[i] = (int32_t)json_integer_value(v);
    }
    return (int)json_array_size(a);
}

static int fixture_load(fixture *f, const char *name) {
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "tests/data/%s", name);
    char path[512];
    snprintf(path, sizeof path, "%s/reference.json", f->dir);
    json_error_t jerr;
    json_t *j = json_load_file(path, 0, &jerr);
    if (!j) return -1;
    f->vocab = (int)json_integer_value(json_object_get(j, "vocab"));
    f->n_tokens = ints(json_object_get(j, "tokens"), f->tokens, 64);
    json_t *g = json_object_get(j, "greedy"), *h = json_object_get(j, "high");
    f->n_prompt = ints(json_object_get(g, "prompt"), f->prompt, 64);
    f->n_generated = ints(json_object_get(g, "generated"), f->generated, 128);
    f->high_start = (int)json_integer_value(json_object_get(h, "start_pos"));
    size_t n = (size_t)f->n_tokens * (size_t)f->vocab;
    snprintf(path, sizeof path, "%s/%s", f->dir,
             json_string_value(json_object_get(j, "logits_file")));
    f->logits = helper_read_f32(path, n);
    snprintf(path, sizeof path, "%s/%s", f->dir,
             json_string_value(json_object_get(h, "logits_file")));
    f->logits_high = helper_read_f32(path, n);
    json_decref(j);
    return f->logits && f->logits_high && f->n_tokens > 0 && f->n_generated == 64 ? 0 : -1;
}

static void fixture_free(fixture *f) {
    free(f->logits);
    free(f->logits_high);
}

static mlm_model *load(const char *dir, mlm_dtype dtype) {
    mlm_model_params mp = mlm_model_default_params();
    mp.dtype = dtype;
    mlm_model *m = NULL;
    mlm_error err;
    CHECK_OK(mlm_model_load(dir, &mp, &m, &err), &err);
    return m;
}

/* Runs TOKENS[0..n) as one sequence starting at START, in steps of CHUNK tokens, with the
 * given block size and (optionally) a shuffled page table; writes all logits to OUT. */
static mlm_dtype kv_dtype = MLM_DTYPE_F32;
static int n_threads = 2; /* the executor's */

static int run_seq(const mlm_model *m, const int32_t *tokens, int n, int start, int chunk,
                   int block_size, int shuffle, float *out) {
    mlm_exec_params ep = mlm_exec_default_params();
    ep.kv_dtype = kv_dtype;
    ep.max_seq_len = 256;
    ep.block_size = block_size;
    ep.max_step_tokens = 128;
    ep.max_step_logits = 128;
    ep.n_threads = n_threads;
    int n_blocks = (ep.max_seq_len + block_size - 1) / block_size;
    ep.max_num_blocks = n_blocks + (shuffle ? 7 : 0);
    mlm_exec *e = NULL;
    mlm_error err;
    CHECK_OK(mlm_exec_create(m, &ep, &e, &err), &err);
    if (!e) return -1;
    CHECK_OK(mlm_exec_seq_reset(e, 0, start, &err), &err);
    if (shuffle) { /* a random disjoint page table, like the demos' */
        int32_t *perm = malloc((size_t)ep.max_num_blocks * sizeof *perm);
        for (int i = 0; i < ep.max_num_blocks; i++)
            perm[i] = i;
        uint64_t r = 12345;
        for (int i = ep.max_num_blocks - 1; i > 0; i--) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            int j = (int)((r >> 33) % (uint64_t)(i + 1));
            int32_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        CHECK_OK(mlm_exec_seq_set_pages(e, 0, perm, n_blocks, &err), &err);
        free(perm);
    }
    int32_t seq[128] = {0}, pos[128];
    int8_t want[128];
    memset(want, 1, sizeof want);
    int rc = 0;
    for (int i = 0; i < n && !rc; i += chunk) {
        int k = n - i < chunk ? n - i : chunk;
        for (int j = 0; j < k; j++)
            pos[j] = start + i + j;
        mlm_batch b = {.n = k, .tokens = tokens + i, .seq = seq, .pos = pos, .logits = want};
        mlm_status st = mlm_exec_step(e, &b, out + (size_t)i * mlm_model_config(m)->n_vocab, &err);
        CHECK_OK(st, &err);
        rc = st ? -1 : 0;
    }
    mlm_exec_free(e);
    return rc;
}

/* max |a - ref| <= 1e-4 * max |ref|, per position. */
static void check_logits(const char *what, const float *a, const float *ref, int n, int vocab) {
    for (int t = 0; t < n; t++) {
        double maxref = 0, maxdiff = 0;
        for (int v = 0; v < vocab; v++) {
            double r = fabs(ref[t * vocab + v]), d = fabs(a[t * vocab + v] - ref[t * vocab + v]);
            if (r > maxref) maxref = r;
            if (d > maxdiff) maxdiff = d;
        }
        CHECKF(maxdiff <= 1e-4 * maxref, "%s position %d: max diff %g, max |logit| %g", what, t,
               maxdiff, maxref);
    }
}

/* Every fixture under tests/data/llama (LlamaForCausalLM), tests/data/phi3 (Phi3ForCausalLM)
 * and tests/data/qwen (Qwen2ForCausalLM, Qwen3ForCausalLM; make_qwen_fixtures.py): the same
 * checks apply to every family. */
static char fixtures[16][128];
static int n_fixtures;

static void find_fixtures(void) {
    const char *families[] = {"llama", "phi3", "qwen"};
    for (int fam = 0; fam < 3; fam++) {
        char dir[64];
        snprintf(dir, sizeof dir, "tests/data/%s", families[fam]);
        DIR *d = opendir(dir);
        if (!d) continue;
        struct dirent *e;
        while ((e = readdir(d)) && n_fixtures < 16) {
            char ref[256];
            snprintf(ref, sizeof ref, "%s/%.100s/reference.json", dir, e->d_name);
            if (e->d_name[0] == '.' || access(ref, R_OK) != 0) continue; /* chat/: no model */
            snprintf(fixtures[n_fixtures++], sizeof fixtures[0], "%s/%.100s", families[fam],
                     e->d_name);
        }
        closedir(d);
    }
}

TEST(f32_logits_match_transformers) {
    for (int fi = 0; fi < n_fixtures; fi++) {
        fixture f;
        CHECK(fixture_load(&f, fixtures[fi]) == 0);
        const char *formats[] = {"hf", "meta", "meta2"};
        float *first = NULL;
        for (int k = 0; k < 3; k++) {
            char dir[300], what[400];
            snprintf(dir, sizeof dir, "%s/%s", f.dir, formats[k]);
            if (!mlm_checkpoint_present(dir)) continue;
            mlm_model *m = load(dir, MLM_DTYPE_F32);
            if (!m) continue;
            float *out = calloc((size_t)f.n_tokens * (size_t)f.vocab, 4);
            snprintf(what, sizeof what, "%.120s/%s prefill", fixtures[fi], formats[k]);
            if (run_seq(m, f.tokens, f.n_tokens, 0, 128, 16, 0, out) == 0)
                check_logits(what, out, f.logits, f.n_tokens, f.vocab);
            /* Meta and HF files of the same weights give identical logits. */
            if (!first)
                first = out;
            else {
                CHECKF(!memcmp(first, out, (size_t)f.n_tokens * (size_t)f.vocab * 4),
                       "%s: %s logits differ from hf", fixtures[fi], formats[k]);
                free(out);
            }
            mlm_model_free(m);
        }
        CHECK(first != NULL);
        free(first);
        fixture_free(&f);
    }
}

TEST(f32_greedy_matches_generate) {
    for (int fi = 0; fi < n_fixtures; fi++) {
        fixture f;
        CHECK(fixture_load(&f, fixtures[fi]) == 0);
        char dir[300];
        snprintf(dir, sizeof dir, "%s/hf", f.dir);
        mlm_model *m = load(dir, MLM_DTYPE_F32);
        if (!m) continue;
        mlm_exec *e = NULL;
        mlm_error err;
        CHECK_OK(mlm_exec_create(m, NULL, &e, &err), &err);
        float *logits = malloc((size_t)f.vocab * 4);
        int32_t pos[64], seq[64] = {0}, got[64];
        for (int i = 0; i < f.n_prompt; i++)
            pos[i] = i;
        int8_t want[64] = {0};
        want[f.n_prompt - 1] = 1;
        mlm_batch b = {.n = f.n_prompt, .tokens = f.prompt, .seq = seq, .pos = pos, .logits = want};
        CHECK_OK(mlm_exec_step(e, &b, logits, &err), &err);
        int match = 0;
        for (int i = 0; i < 64; i++) {
            got[i] = helper_argmax(logits, f.vocab);
            match += got[i] == f.generated[i];
            int32_t p = f.n_prompt + i;
            int8_t one = 1;
            mlm_batch d = {.n = 1, .tokens = &got[i], .seq = seq, .pos = &p, .logits = &one};
            if (i < 63) CHECK_OK(mlm_exec_step(e, &d, logits, &err), &err);
        }
        CHECKF(match == 64, "%s: %d of 64 greedy tokens match generate()", fixtures[fi], match);
        free(logits);
        mlm_exec_free(e);
        mlm_model_free(m);
        fixture_free(&f);
    }
}

TEST(high_positions_rope_scaling) {
    for (int fi = 0; fi < n_fixtures; fi++) {
        fixture f;
        CHECK(fixture_load(&f, fixtures[fi]) == 0);
        char dir[300], what[300];
        snprintf(dir, sizeof dir, "%s/hf", f.dir);
        mlm_model *m = load(dir, MLM_DTYPE_F32);
        if (!m) continue;
        float *out = calloc((size_t)f.n_tokens * (size_t)f.vocab, 4);
        snprintf(what, sizeof what, "%.120s at %d", fixtures[fi], f.high_start);
        CHECK(f.high_start > 8192);
        if (run_seq(m, f.tokens, f.n_tokens, f.high_start, 5, 16, 0, out) == 0)
            check_logits(what, out, f.logits_high, f.n_tokens, f.vocab);
        free(out);
        mlm_model_free(m);
        fixture_free(&f);
    }
}

/* bf16 weights: top-1 agreement with transformers' f32 argmax on the fixed sequence and on
 * the greedy continuation (teacher forced). */
TEST(bf16_top1_agreement) {
    int agree = 0, total = 0;
    for (int fi = 0; fi < n_fixtures; fi++) {
        fixture f;
        CHECK(fixture_load(&f, fixtures[fi]) == 0);
        char dir[300];
        snprintf(dir, sizeof dir, "%s/hf", f.dir);
        mlm_model *m = load(dir, MLM_DTYPE_BF16);
        if (!m) continue;
        float *out = calloc((size_t)128 * (size_t)f.vocab, 4);
        if (run_seq(m, f.tokens, f.n_tokens, 0, 128, 16, 0, out) == 0)
            for (int t = 0; t < f.n_tokens; t++, total++)
                agree += helper_argmax(out + t * f.vocab, f.vocab) ==
                         helper_argmax(f.logits + t * f.vocab, f.vocab);
        int32_t seqtok[128];
        memcpy(seqtok, f.prompt, (size_t)f.n_prompt * 4);
        memcpy(seqtok + f.n_prompt, f.generated, 64 * 4);
        if (run_seq(m, seqtok, f.n_prompt + 63, 0, 128, 16, 0, out) == 0)
            for (int i = 0; i < 64; i++, total++)
                agree +=
                    helper_argmax(out + (f.n_prompt - 1 + i) * f.vocab, f.vocab) == f.generated[i];
        free(out);
        mlm_model_free(m);
        fixture_free(&f);
    }
    printf("  bf16 top-1 agreement: %d of %d positions\n", agree, total);
    CHECK(total > 0 && agree >= 0.99 * total);
}

/* Teacher forcing in the seeds' terms, per precision profile: over the fixed sequence and the
 * greedy continuation of every fixture, how often the profile's top-1 is transformers' f32
 * argmax, and how often that argmax is in the profile's top 5. f32 must agree everywhere;
 * accuracy at least as often as performance, bf16 at least as often as accuracy. Each
 * profile runs with its own KV cache type (bfp8 for the BFP profiles). */
TEST(profiles_token_accuracy) {
    static const char *profiles[] = {"f32", "bf16", "accuracy", "performance"};
    int top1[4] = {0}, top5[4] = {0}, total[4] = {0};
    kv_dtype = MLM_KV_FROM_PROFILE;
    for (int pi = 0; pi < 4; pi++)
        for (int fi = 0; fi < n_fixtures; fi++) {
            fixture f;
            CHECK(fixture_load(&f, fixtures[fi]) == 0);
            char dir[300];
            snprintf(dir, sizeof dir, "%s/hf", f.dir);
            mlm_model *m = helper_load_or_fail(dir, profiles[pi], NULL, &harness_case_failed);
            if (!m) continue;
            float *out = calloc((size_t)128 * (size_t)f.vocab, 4);
            int32_t seqtok[128], want[128];
            int n = 0;
            if (run_seq(m, f.tokens, f.n_tokens, 0, 128, 16, 0, out) == 0)
                for (int t = 0; t < f.n_tokens; t++)
                    want[t] = helper_argmax(f.logits + t * f.vocab, f.vocab);
            for (int pass = 0; pass < 2; pass++) {
                if (pass == 1) {
                    memcpy(seqtok, f.prompt, (size_t)f.n_prompt * 4);
                    memcpy(seqtok + f.n_prompt, f.generated, 64 * 4);
                    if (run_seq(m, seqtok, f.n_prompt + 63, 0, 128, 16, 0, out)) break;
                }
                int first = pass ? f.n_prompt - 1 : 0, count = pass ? 64 : f.n_tokens;
                for (int i = 0; i < count; i++, n++) {
                    const float *lo = out + (first + i) * f.vocab;
                    int ref = pass ? f.generated[i] : want[i], above = 0;
                    for (int v = 0; v < f.vocab; v++) above += lo[v] > lo[ref];
                    top1[pi] += helper_argmax(lo, f.vocab) == ref;
                    top5[pi] += above < 5;
                }
            }
            total[pi] += n;
            free(out);
            mlm_model_free(m);
            fixture_free(&f);
        }
    kv_dtype = MLM_DTYPE_F32;
    for (int pi = 0; pi < 4; pi++)
        printf("  %-12s top-1 %5.1f%%  top-5 %5.1f%%  (%d positions)\n", profiles[pi],
               100.0 * top1[pi] / (total[pi] ? total[pi] : 1),
               100.0 * top5[pi] / (total[pi] ? total[pi] : 1), total[pi]);
    CHECK(total[0] > 0 && top1[0] == total[0]);
    for (int pi = 1; pi < 4; pi++) CHECK(total[pi] == total[0]);
    CHECKF(top1[1] >= top1[2] && top1[2] >= top1[3],
           "top-1 must not rise from bf16 to accuracy to performance: %d %d %d", top1[1], top1[2],
           top1[3]);
}

/* Any block size, one token or many per step, and a shuffled page table give the same bits,
 * with f32, bf16 and BFP8 KV entries (the last with the performance profile's weights). */
TEST(paged_kv_invariance) {
    for (int kvt = 0; kvt < 3; kvt++) {
        kv_dtype = kvt == 2 ? MLM_DTYPE_BFP8 : kvt ? MLM_DTYPE_BF16 : MLM_DTYPE_F32;
        fixture f;
        CHECK(fixture_load(&f, "llama/gqa4_hd64_tied_r32") == 0);
        char dir[300];
        snprintf(dir, sizeof dir, "%s/hf", f.dir);
        mlm_model *m = kvt == 2
                           ? helper_load_or_fail(dir, "performance", NULL, &harness_case_failed)
                           : load(dir, MLM_DTYPE_F32);
        if (m) {
            size_t n = (size_t)f.n_tokens * (size_t)f.vocab;
            float *ref = calloc(n, 4), *out = calloc(n, 4);
            run_seq(m, f.tokens, f.n_tokens, 0, 128, 16, 0, ref);
            const int cases[][3] = {{1, 1, 0}, {3, 5, 0}, {7, 24, 1}, {16, 1, 1}, {64, 3, 1}};
            for (int c = 0; c < 5; c++) {
                memset(out, 0, n * 4);
                run_seq(m, f.tokens, f.n_tokens, 0, cases[c][1], cases[c][0], cases[c][2], out);
                CHECKF(!memcmp(ref, out, n * 4), "block %d chunk %d shuffle %d differs",
                       cases[c][0], cases[c][1], cases[c][2]);
            }
            free(ref);
            free(out);
            mlm_model_free(m);
        }
        fixture_free(&f);
    }
    kv_dtype = MLM_DTYPE_F32;
}

/* The thread count does not change a bit: 1, 2 and 3 threads (more threads than cores, so
 * tasks land on threads in changing orders) give the same logits, in f32, bf16 and the two
 * BFP profiles, for a prefill in chunks and single-token decode steps. */
TEST(threads_invariance) {
    static const char *profiles[] = {"f32", "bf16", "accuracy", "performance"};
    fixture f;
    CHECK(fixture_load(&f, "llama/gqa4_hd64_tied_r32") == 0);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/hf", f.dir);
    size_t n = (size_t)f.n_tokens * (size_t)f.vocab;
    float *ref = calloc(n, 4), *out = calloc(n, 4);
    for (int p = 0; p < 4; p++) {
        mlm_model *m = helper_load_or_fail(dir, profiles[p], NULL, &harness_case_failed);
        if (!m) continue;
        n_threads = 1;
        run_seq(m, f.tokens, f.n_tokens, 0, 9, 16, 0, ref);
        for (int t = 2; t <= 3; t++) {
            n_threads = t;
            for (int chunk = 1; chunk <= 9; chunk += 8) { /* decode steps, prefill chunks */
                memset(out, 0, n * 4);
                run_seq(m, f.tokens, f.n_tokens, 0, chunk, 16, 0, out);
                CHECKF(!memcmp(ref, out, n * 4), "%s: %d threads (steps of %d) differ from 1",
                       profiles[p], t, chunk);
            }
        }
        mlm_model_free(m);
    }
    n_threads = 2;
    free(ref), free(out);
    fixture_free(&f);
}

TEST(capacity_and_bad_batches) {
    mlm_model *m = load(LLAMA "gqa4_hd64_tied_r32/hf", MLM_DTYPE_F32);
    if (!m) return;
    mlm_exec_params ep = mlm_exec_default_params();
    ep.block_size = 4;
    ep.max_num_blocks = 2;
    ep.max_seq_len = 64;
    mlm_exec *e = NULL;
    mlm_error err;
    CHECK_OK(mlm_exec_create(m, &ep, &e, &err), &err);
    int32_t toks[12] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, seq[12] = {0}, pos[12];
    for (int i = 0; i < 12; i++)
        pos[i] = i;
    mlm_batch b = {.n = 12, .tokens = toks, .seq = seq, .pos = pos};
    CHECK(mlm_exec_step(e, &b, NULL, &err) == MLM_ERR_CAPACITY);
    CHECKF(strstr(err.msg, "out of blocks") != NULL, "%s", err.msg);
    b.n = 8; /* exactly the pool: fits */
    CHECK_OK(mlm_exec_step(e, &b, NULL, &err), &err);
    int32_t p8 = 8;
    mlm_batch one = {.n = 1, .tokens = toks, .seq = seq, .pos = &p8};
    CHECK(mlm_exec_step(e, &one, NULL, &err) == MLM_ERR_CAPACITY);
    int32_t wrong = 3;
    one.pos = &wrong;
    CHECK(mlm_exec_step(e, &one, NULL, &err) == MLM_ERR_INVALID_ARG);
    CHECKF(strstr(err.msg, "expects position 8") != NULL, "%s", err.msg);
    int32_t bad_tok = 99999;
    one.pos = &p8;
    one.tokens = &bad_tok;
    CHECK(mlm_exec_step(e, &one, NULL, &err) == MLM_ERR_INVALID_ARG);
    CHECK_OK(mlm_exec_seq_reset(e, 0, 0, &err), &err);
    CHECK_OK(mlm_exec_step(e, &b, NULL, &err), &err); /* the pages came back */
    mlm_exec_free(e);
    mlm_model_free(m);
}

/* Copies the HF fixture to tmp, applies an edit, expects the load to fail naming NEEDLE. */
static void expect_load_fail(const char *edit_cmd, const char *n1, const char *n2) {
    char cmd[1024], dir[300];
    snprintf(dir, sizeof dir, "%s/bad", tmpdir);
    snprintf(cmd, sizeof cmd,
             "rm -rf %s && cp -r " LLAMA "mha_hd128_untied_r8/hf %s && cd %s && %s", dir, dir, dir,
             edit_cmd);
    CHECK(system(cmd) == 0);
    mlm_model *m = NULL;
    mlm_error err = {0};
    mlm_status st = mlm_model_load(dir, NULL, &m, &err);
    CHECKF(st == MLM_ERR_FORMAT && !m, "%s: got %s", edit_cmd, mlm_status_str(st));
    CHECKF(strstr(err.msg, n1) && (!n2 || strstr(err.msg, n2)), "message '%s' lacks '%s'/'%s'",
           err.msg, n1, n2 ? n2 : "");
    mlm_model_free(m);
}

TEST(bad_checkpoints_name_the_tensor) {
    /* config disagrees with the tensors: wrong shape (both shapes named), missing layer */
    expect_load_fail(
        "sed -i 's/\"intermediate_size\": 256/\"intermediate_size\": 384/' config.json",
        "model.layers.0.mlp.gate_proj.weight", "[384, 128]");
    expect_load_fail("sed -i 's/\"num_hidden_layers\": 2/\"num_hidden_layers\": 3/' config.json",
                     "missing tensor 'model.layers.2.", NULL);
    /* wrong dtype: the first BF16 in the header becomes I16 (same length, bytes still fit) */
    expect_load_fail("sed -i '0,/\"BF16\"/s//\"I16\" /' model.safetensors", "dtype i16", NULL);
}

int main(void) {
    if (harness_tmpdir(tmpdir, sizeof tmpdir, "llama") != 0) return 1;
    find_fixtures();
    printf("  %d model fixtures\n", n_fixtures);
    RUN(f32_logits_match_transformers);
    RUN(f32_greedy_matches_generate);
    RUN(high_positions_rope_scaling);
    RUN(bf16_top1_agreement);
    RUN(profiles_token_accuracy);
    RUN(paged_kv_invariance);
    RUN(threads_invariance);
    RUN(capacity_and_bad_batches);
    RUN(bad_checkpoints_name_the_tensor);
    harness_rmtree(tmpdir);
    return HARNESS_END();
}
