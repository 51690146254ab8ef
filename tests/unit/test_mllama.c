/* tests/unit/test_mllama.c: Llama 3.2 Vision end to end against transformers 4.46.3 (with
 * Meta's row rule for text before the first image). Fixtures (tests/data/mllama, made by
 * tests/fixtures/make_mllama_fixtures.py): a tiny random MllamaForConditionalGeneration in HF
 * safetensors and the same model in Meta's consolidated format, five PNG images of 1 to 4
 * tiles, and per case (1-4 tiles, two images, adjacent images, text before the image, text
 * only) transformers' f32 logits at every position and 16 greedy tokens.
 * Each case runs from the PNG files through meshlm's own decoding, preprocessing, vision
 * encoder, cross-attention K/V and decoder: f32 logits within 1e-4 x max|logit| at every
 * position (whole prompt in one step, and one token a step), greedy tokens identical, for the
 * HF and the Meta checkpoint. Also: the precision profiles' teacher-forced top-1 / top-5, the
 * weight cache, batching two sequences with different images, and the errors (image token
 * without an image and the reverse, too many images, bad image files, a text model). */
#include <jansson.h>
#include <math.h>

#include "exec/exec.h"
#include "harness.h"
#include "helpers.h"
#include "meshlm.h"

#define MLLAMA "tests/data/mllama/"
#define MAX_CASES 16
#define MAX_TOK 64
#define N_GEN 16

static char tmpdir[256];

typedef struct mcase {
    char name[32];
    int32_t tokens[MAX_TOK];
    int n_tokens;
    char images[4][32];
    int32_t image_pos[4];
    int n_images;
    int32_t greedy[N_GEN];
    float *logits; /* (n_tokens, vocab) */
} mcase;

static mcase cases[MAX_CASES];
static int n_cases, vocab, image_token;

static int load_cases(void) {
    json_error_t jerr;
    json_t *j = json_load_file(MLLAMA "reference.json", 0, &jerr);
    if (!j) return -1;
    const json_t *model = json_object_get(j, "model");
    vocab = (int)json_integer_value(json_object_get(model, "vocab"));
    image_token = (int)json_integer_value(json_object_get(model, "image_token_id"));
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(j, "cases"), i, c) {
        if (n_cases == MAX_CASES) break;
        mcase *mc = &cases[n_cases++];
        snprintf(mc->name, sizeof mc->name, "%s", json_string_value(json_object_get(c, "name")));
        size_t k;
        json_t *v;
        json_array_foreach(json_object_get(c, "tokens"), k, v) if (k < MAX_TOK)
            mc->tokens[mc->n_tokens++] = (int32_t)json_integer_value(v);
        json_array_foreach(json_object_get(c, "images"), k, v) if (k < 4)
            snprintf(mc->images[mc->n_images++], sizeof mc->images[0], "%s", json_string_value(v));
        json_array_foreach(json_object_get(c, "image_token_positions"), k, v) if (k < 4)
            mc->image_pos[k] = (int32_t)json_integer_value(v);
        json_array_foreach(json_object_get(c, "greedy"), k, v) if (k < N_GEN) mc->greedy[k] =
            (int32_t)json_integer_value(v);
        char path[256];
        snprintf(path, sizeof path, MLLAMA "%s",
                 json_string_value(json_object_get(c, "logits_file")));
        size_t n;
        mc->logits = (float *)harness_read_file(path, &n);
        if (!mc->logits || n != (size_t)mc->n_tokens * (size_t)vocab * 4) {
            json_decref(j);
            return -1;
        }
    }
    json_decref(j);
    return n_cases ? 0 : -1;
}

/* The case's images opened and encoded for M (NULL entries on failure). */
static void open_images(const mlm_model *m, const mcase *mc, mlm_image **imgs) {
    for (int i = 0; i < mc->n_images; i++) {
        char path[256];
        snprintf(path, sizeof path, MLLAMA "images/%s.png", mc->images[i]);
        mlm_error err;
        imgs[i] = NULL;
        CHECK_OK(mlm_image_open(m, path, &imgs[i], &err), &err);
        if (imgs[i]) CHECK_OK(mlm_image_encode(m, imgs[i], 2, &err), &err);
    }
}

static void free_images(mlm_image **imgs, int n) {
    for (int i = 0; i < n; i++)
        mlm_image_free(imgs[i]);
}

static mlm_exec *make_exec(const mlm_model *m, int max_seqs, int max_images, mlm_dtype kv) {
    mlm_exec_params ep = mlm_exec_default_params();
    ep.max_seqs = max_seqs;
    ep.max_seq_len = 128;
    ep.block_size = 16;
    ep.max_step_tokens = 64;
    ep.max_step_logits = 64;
    ep.max_images = max_images;
    ep.kv_dtype = kv;
    ep.n_threads = 2;
    mlm_exec *e = NULL;
    mlm_error err;
    CHECK_OK(mlm_exec_create(m, &ep, &e, &err), &err);
    return e;
}

/* Runs TOKENS[0..n) on sequence SEQ of E with the case's images bound, CHUNK tokens a step,
 * logits of every position into OUT; 0 on success. */
static int run(mlm_exec *e, int32_t seq, const mcase *mc, mlm_image **imgs, const int32_t *tokens,
               int n, int chunk, float *out) {
    mlm_error err;
    if (mlm_exec_seq_reset(e, seq, 0, &err)) return -1;
    if (mc->n_images) {
        mlm_status st = mlm_exec_seq_set_images(e, seq, imgs, mc->image_pos, mc->n_images, &err);
        CHECK_OK(st, &err);
        if (st) return -1;
    }
    int32_t seqs[MAX_TOK + N_GEN], pos[MAX_TOK + N_GEN];
    int8_t want[MAX_TOK + N_GEN];
    for (int i = 0; i < n; i++)
        seqs[i] = seq, pos[i] = i, want[i] = 1;
    for (int i0 = 0; i0 < n; i0 += chunk) {
        int k = n - i0 < chunk ? n - i0 : chunk;
        mlm_batch b = {k, tokens + i0, seqs + i0, pos + i0, want + i0};
        mlm_status st = mlm_exec_step(e, &b, out + (size_t)i0 * (size_t)vocab, &err);
        CHECK_OK(st, &err);
        if (st) return -1;
    }
    return 0;
}

/* max |a - b| / max |b| over N values. */
static double rel(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        double x = fabs((double)a[i] - b[i]);
        if (!(x <= d)) d = x;
        if (fabs((double)b[i]) > r) r = fabs((double)b[i]);
    }
    return d / r;
}

/* Meta's params.json (its fusion schedule, the vision keys and their defaults) gives the
 * config transformers wrote for the same model, but for the file it came from. */
TEST(meta_params_equal_hf_config) {
    mlm_config hf, meta;
    mlm_error err;
    CHECK_OK(mlm_config_load(MLLAMA "hf", &hf, &err), &err);
    CHECK_OK(mlm_config_load(MLLAMA "meta", &meta, &err), &err);
    CHECK(hf.family == MLM_FAMILY_MLLAMA && meta.family == MLM_FAMILY_MLLAMA);
    CHECK(hf.n_cross == 2 && meta.n_cross == hf.n_cross);
    CHECK(!memcmp(hf.cross_layers, meta.cross_layers, sizeof hf.cross_layers));
    CHECK(!memcmp(&hf.vision, &meta.vision, sizeof hf.vision));
    CHECK(hf.n_layer == meta.n_layer && hf.n_embd == meta.n_embd && hf.n_ff == meta.n_ff &&
          hf.n_head == meta.n_head && hf.n_kv_head == meta.n_kv_head &&
          hf.n_vocab == meta.n_vocab && hf.image_token_id == meta.image_token_id &&
          hf.rope_type == meta.rope_type && hf.rope_factor == meta.rope_factor &&
          hf.rope_theta == meta.rope_theta && hf.norm_eps == meta.norm_eps);
    /* Meta's 11B params (models.md 1.1): its schedule in HF numbering and the vision tower
     * Meta's code hard-codes, which the 90B HF config of the same family lists */
    mlm_config v90;
    CHECK_OK(mlm_config_load("tests/data/configs/Llama-3.2-90B-Vision-Instruct", &v90, &err), &err);
    const char *p11 = "{\"dim\": 4096, \"n_layers\": 32, \"n_heads\": 32, \"n_kv_heads\": 8, "
                      "\"vocab_size\": 128256, \"ffn_dim_multiplier\": 1.3, \"multiple_of\": 1024, "
                      "\"norm_eps\": 1e-05, \"rope_theta\": 500000.0, \"use_scaled_rope\": true, "
                      "\"vision_chunk_size\": 560, \"vision_max_num_chunks\": 4, "
                      "\"vision_num_cross_attention_layers\": 8}";
    char path[300];
    snprintf(path, sizeof path, "%s/params.json", tmpdir);
    CHECK(harness_write_file(path, p11, strlen(p11)) == 0);
    mlm_config m11;
    CHECK_OK(mlm_config_load(path, &m11, &err), &err);
    CHECK(m11.n_layer == 40 && m11.n_cross == 8 && m11.n_ff == 14336 &&
          m11.image_token_id == 128256);
    for (int i = 0; i < 8; i++) /* 90B's cross layers are every 5th from 3, as 11B's */
        CHECK(m11.cross_layers[i] == v90.cross_layers[i]);
    CHECK(!memcmp(&m11.vision, &v90.vision, sizeof m11.vision));
}

/* The f32 logits of every case in one step and one token a step, and the greedy tokens. */
static void check_format(const char *dir) {
    mlm_model *m = helper_load_or_fail(dir, "f32", NULL, &harness_case_failed);
    if (!m) return;
    CHECK(mlm_model_image_token(m) == image_token);
    float *out = malloc((size_t)(MAX_TOK + N_GEN) * (size_t)vocab * 4);
    double worst = 0;
    for (int ci = 0; ci < n_cases; ci++) {
        const mcase *mc = &cases[ci];
        mlm_image *imgs[4] = {0};
        open_images(m, mc, imgs);
        mlm_exec *e = make_exec(m, 1, mc->n_images ? mc->n_images : 1, MLM_DTYPE_F32);
        if (!e) break;
        for (int chunk = 64; chunk >= 1; chunk = chunk == 64 ? 1 : 0) {
            if (run(e, 0, mc, imgs, mc->tokens, mc->n_tokens, chunk, out)) break;
            double r = rel(out, mc->logits, (size_t)mc->n_tokens * (size_t)vocab);
            worst = r > worst ? r : worst;
            CHECKF(r <= 1e-4, "%s %s, %d tokens a step: logits %.3g x max|logit| away", dir,
                   mc->name, chunk, r);
        }
        /* greedy: the prompt, then one token a step from the argmax */
        int32_t seq[MAX_TOK + N_GEN];
        memcpy(seq, mc->tokens, (size_t)mc->n_tokens * 4);
        if (!run(e, 0, mc, imgs, seq, mc->n_tokens, 64, out)) {
            mlm_error err;
            int ok = 1;
            for (int g = 0; g < N_GEN && ok; g++) {
                int n = mc->n_tokens + g;
                int32_t next = helper_argmax(out + (size_t)(g ? 0 : n - 1) * (size_t)vocab, vocab);
                CHECKF(next == mc->greedy[g], "%s %s greedy token %d: %d, transformers %d", dir,
                       mc->name, g, next, mc->greedy[g]);
                ok = next == mc->greedy[g];
                int32_t s0 = 0, p = n;
                int8_t w = 1;
                mlm_batch b = {1, &next, &s0, &p, &w};
                if (g + 1 < N_GEN) CHECK_OK(mlm_exec_step(e, &b, out, &err), &err);
            }
        }
        mlm_exec_free(e);
        free_images(imgs, mc->n_images);
    }
    printf("  %s: worst logits difference %.3g x max|logit| over %d cases\n", dir, worst, n_cases);
    free(out);
    mlm_model_free(m);
}

TEST(hf_f32_matches_transformers) {
    if (!n_cases) {
        CHECK(n_cases > 0); /* the fixtures are in the repository */
        return;
    }
    check_format(MLLAMA "hf");
}

TEST(meta_f32_matches_transformers) {
    if (!n_cases) return;
    check_format(MLLAMA "meta");
}

/* Teacher forcing in the seeds' terms, per profile: over every case's prompt and its greedy
 * continuation, how often the profile's top-1 is transformers' f32 argmax and how often that
 * is in the profile's top 5. f32 everywhere; bf16 >= accuracy >= performance on top-1. Each
 * profile runs with its own KV type (bfp8 for the BFP profiles, images included). */
TEST(profiles_token_accuracy) {
    static const char *profiles[] = {"f32", "bf16", "accuracy", "performance"};
    int top1[4] = {0}, top5[4] = {0}, total[4] = {0};
    float *out = malloc((size_t)(MAX_TOK + N_GEN) * (size_t)vocab * 4);
    for (int pi = 0; pi < 4 && n_cases; pi++) {
        mlm_model *m = helper_load_or_fail(MLLAMA "hf", profiles[pi], NULL, &harness_case_failed);
        if (!m) break;
        for (int ci = 0; ci < n_cases; ci++) {
            const mcase *mc = &cases[ci];
            mlm_image *imgs[4] = {0};
            open_images(m, mc, imgs);
            mlm_exec *e = make_exec(m, 1, mc->n_images ? mc->n_images : 1, MLM_KV_FROM_PROFILE);
            int32_t seq[MAX_TOK + N_GEN], want[MAX_TOK + N_GEN];
            int n = mc->n_tokens + N_GEN - 1;
            memcpy(seq, mc->tokens, (size_t)mc->n_tokens * 4);
            memcpy(seq + mc->n_tokens, mc->greedy, (N_GEN - 1) * 4);
            for (int t = 0; t < mc->n_tokens; t++)
                want[t] = helper_argmax(mc->logits + (size_t)t * (size_t)vocab, vocab);
            for (int g = 0; g < N_GEN; g++)
                want[mc->n_tokens - 1 + g] = mc->greedy[g];
            if (e && !run(e, 0, mc, imgs, seq, n, 64, out))
                for (int t = 0; t < n; t++) {
                    const float *lo = out + (size_t)t * (size_t)vocab;
                    int above = 0;
                    for (int v = 0; v < vocab; v++)
                        above += lo[v] > lo[want[t]];
                    top1[pi] += helper_argmax(lo, vocab) == want[t];
                    top5[pi] += above < 5;
                    total[pi]++;
                }
            mlm_exec_free(e);
            free_images(imgs, mc->n_images);
        }
        mlm_model_free(m);
    }
    free(out);
    for (int pi = 0; pi < 4; pi++)
        printf("  %-12s top-1 %5.1f%%  top-5 %5.1f%%  (%d positions)\n", profiles[pi],
               100.0 * top1[pi] / (total[pi] ? total[pi] : 1),
               100.0 * top5[pi] / (total[pi] ? total[pi] : 1), total[pi]);
    CHECK(total[0] > 0 && top1[0] == total[0]);
    for (int pi = 1; pi < 4; pi++)
        CHECK(total[pi] == total[0]);
    CHECKF(top1[1] >= top1[2] && top1[2] >= top1[3],
           "top-1 must not rise from bf16 to accuracy to performance: %d %d %d", top1[1], top1[2],
           top1[3]);
    CHECKF(top5[3] >= 0.9 * total[3], "performance top-5 %d of %d", top5[3], total[3]);
}

/* The performance profile through the weight cache (vision tower included): the mapped cache
 * gives the bits of the in-memory conversion. */
TEST(cache_round_trip) {
    if (!n_cases) return;
    const mcase *mc = &cases[1]; /* 2 tiles */
    float *a = malloc((size_t)MAX_TOK * (size_t)vocab * 4),
          *b = malloc((size_t)MAX_TOK * (size_t)vocab * 4);
    mlm_model *mem = helper_load_or_fail(MLLAMA "hf", "performance", NULL, &harness_case_failed);
    mlm_model *built =
        helper_load_or_fail(MLLAMA "hf", "performance", tmpdir, &harness_case_failed);
    mlm_model *mapped =
        helper_load_or_fail(MLLAMA "hf", "performance", tmpdir, &harness_case_failed);
    CHECK(built && mlm_model_cache_built(built) && mapped && !mlm_model_cache_built(mapped));
    mlm_model *ms[] = {mem, mapped};
    float *outs[] = {a, b};
    for (int k = 0; k < 2 && ms[k]; k++) {
        mlm_image *imgs[4] = {0};
        open_images(ms[k], mc, imgs);
        mlm_exec *e = make_exec(ms[k], 1, 1, MLM_KV_FROM_PROFILE);
        if (e) run(e, 0, mc, imgs, mc->tokens, mc->n_tokens, 64, outs[k]);
        mlm_exec_free(e);
        free_images(imgs, mc->n_images);
    }
    CHECK(mem && mapped && !memcmp(a, b, (size_t)mc->n_tokens * (size_t)vocab * 4));
    mlm_model_free(mem), mlm_model_free(built), mlm_model_free(mapped);
    free(a), free(b);
}

/* Two sequences with different images in one step give each one's own logits, bit for bit. */
TEST(batched_sequences) {
    if (n_cases < 5) return;
    mlm_model *m = helper_load_or_fail(MLLAMA "hf", "f32", NULL, &harness_case_failed);
    if (!m) return;
    const mcase *c0 = &cases[0], *c1 = &cases[4]; /* one image / two images */
    mlm_image *i0[4] = {0}, *i1[4] = {0};
    open_images(m, c0, i0);
    open_images(m, c1, i1);
    mlm_exec *e = make_exec(m, 2, 2, MLM_DTYPE_F32);
    float *alone0 = malloc((size_t)MAX_TOK * (size_t)vocab * 4);
    float *alone1 = malloc((size_t)MAX_TOK * (size_t)vocab * 4);
    float *both = malloc((size_t)2 * MAX_TOK * (size_t)vocab * 4);
    mlm_error err;
    if (e && !run(e, 0, c0, i0, c0->tokens, c0->n_tokens, 64, alone0) &&
        !run(e, 1, c1, i1, c1->tokens, c1->n_tokens, 64, alone1)) {
        CHECK_OK(mlm_exec_seq_reset(e, 0, 0, &err), &err);
        CHECK_OK(mlm_exec_seq_reset(e, 1, 0, &err), &err);
        CHECK_OK(mlm_exec_seq_set_images(e, 0, i0, c0->image_pos, c0->n_images, &err), &err);
        CHECK_OK(mlm_exec_seq_set_images(e, 1, i1, c1->image_pos, c1->n_images, &err), &err);
        /* interleaved: token i of each sequence side by side */
        int32_t tok[2 * MAX_TOK], seq[2 * MAX_TOK], pos[2 * MAX_TOK];
        int8_t want[2 * MAX_TOK];
        int n = 0, n0 = c0->n_tokens, n1 = c1->n_tokens;
        for (int i = 0; i < (n0 > n1 ? n0 : n1); i++)
            for (int s = 0; s < 2; s++)
                if (i < (s ? n1 : n0))
                    tok[n] = (s ? c1 : c0)->tokens[i], seq[n] = s, pos[n] = i, want[n++] = 1;
        mlm_batch b = {n, tok, seq, pos, want};
        CHECK_OK(mlm_exec_step(e, &b, both, &err), &err);
        int same = 1;
        for (int k = 0; k < n; k++) {
            const float *ref = (seq[k] ? alone1 : alone0) + (size_t)pos[k] * (size_t)vocab;
            same &= !memcmp(both + (size_t)k * (size_t)vocab, ref, (size_t)vocab * 4);
        }
        CHECK(same);
    }
    free(alone0), free(alone1), free(both);
    mlm_exec_free(e);
    free_images(i0, c0->n_images);
    free_images(i1, c1->n_images);
    mlm_model_free(m);
}

/* One picture bound to two sequences (opened twice: two mlm_image objects with the same
 * states): the second shares the first's image K/V (the pool's free tiles drop once) and gets
 * the same logits; the tiles return when both are reset. */
TEST(shared_image_kv) {
    if (n_cases < 2) return;
    mlm_model *m = helper_load_or_fail(MLLAMA "hf", "f32", NULL, &harness_case_failed);
    if (!m) return;
    const mcase *mc = &cases[1]; /* one image of 2 tiles */
    mlm_image *imgs[4] = {0}, *again[4] = {0};
    open_images(m, mc, imgs);
    open_images(m, mc, again);
    mlm_exec *e = make_exec(m, 2, 1, MLM_DTYPE_F32);
    size_t bytes = (size_t)mc->n_tokens * (size_t)vocab * 4;
    float *a = malloc(bytes), *b = malloc(bytes);
    int32_t total = 0;
    if (e && imgs[0]) {
        int32_t free0 = mlm_exec_image_tiles(e, &total);
        CHECK(!run(e, 0, mc, imgs, mc->tokens, mc->n_tokens, 64, a));
        int32_t free1 = mlm_exec_image_tiles(e, NULL);
        CHECK(!run(e, 1, mc, again, mc->tokens, mc->n_tokens, 64, b));
        int32_t free2 = mlm_exec_image_tiles(e, NULL);
        printf("  image pool: %d tiles, %d free, %d after one sequence, %d after two\n", total,
               free0, free1, free2);
        CHECK(free0 == total && free1 == total - 2 && free2 == free1);
        CHECK(!memcmp(a, b, bytes));
        mlm_error err;
        CHECK_OK(mlm_exec_seq_reset(e, 0, 0, &err), &err);
        CHECK(mlm_exec_image_tiles(e, NULL) == free1); /* sequence 1 still holds them */
        CHECK_OK(mlm_exec_seq_reset(e, 1, 0, &err), &err);
        CHECK(mlm_exec_image_tiles(e, NULL) == total);
    }
    free(a), free(b);
    mlm_exec_free(e);
    free_images(imgs, mc->n_images);
    free_images(again, mc->n_images);
    mlm_model_free(m);
}

/* Writes LEN bytes to DIR/NAME; returns the path (static). */
static const char *write_file(const char *name, const void *data, size_t len) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, len, f);
        fclose(f);
    }
    return path;
}

TEST(bad_images_and_tokens) {
    if (!n_cases) return;
    mlm_model *m = helper_load_or_fail(MLLAMA "hf", "f32", NULL, &harness_case_failed);
    if (!m) return;
    mlm_error err;
    mlm_image *img = NULL;
    /* a truncated PNG, bytes that are no image, a header of 100000 x 100000 pixels */
    size_t n;
    char *png = harness_read_file(MLLAMA "images/a_1tile.png", &n);
    CHECK(png && n > 100);
    if (png) {
        mlm_status st = mlm_image_open(m, write_file("cut.png", png, n / 2), &img, &err);
        CHECKF(st == MLM_ERR_FORMAT && strstr(err.msg, "cut.png"), "%s", err.msg);
        st = mlm_image_open_memory(m, "notes.txt", "hello, world", 12, &img, &err);
        CHECKF(st == MLM_ERR_FORMAT && strstr(err.msg, "notes.txt"), "%s", err.msg);
        unsigned char huge[64];
        memcpy(huge, png, sizeof huge); /* IHDR width and height at bytes 16..23, CRC at 29 */
        harness_put_be32(huge + 16, 100000);
        harness_put_be32(huge + 20, 100000);
        harness_put_be32(huge + 29, harness_crc32(huge + 12, 17));
        st = mlm_image_open_memory(m, "huge.png", huge, sizeof huge, &img, &err);
        CHECKF(st != MLM_OK && strstr(err.msg, "100000"), "%s", err.msg);
        st = mlm_image_open_memory(m, "gif", "GIF89a\x01\x00\x01\x00", 10, &img, &err);
        CHECKF(st == MLM_ERR_UNSUPPORTED || st == MLM_ERR_FORMAT, "%s", err.msg);
        CHECK(img == NULL);
        free(png);
    }
    const mcase *mc = &cases[0]; /* [I] + 15 text */
    mlm_image *imgs[4] = {0};
    open_images(m, mc, imgs);
    mlm_exec *e = make_exec(m, 1, 1, MLM_DTYPE_F32);
    if (e && imgs[0]) {
        int32_t seq0 = 0, p0 = 0, tok = image_token;
        int8_t w = 1;
        float *out = malloc((size_t)vocab * 4);
        mlm_batch b = {1, &tok, &seq0, &p0, &w};
        /* the image token without an image */
        CHECK_OK(mlm_exec_seq_reset(e, 0, 0, &err), &err);
        mlm_status st = mlm_exec_step(e, &b, out, &err);
        CHECKF(st == MLM_ERR_INVALID_ARG && strstr(err.msg, "no image"), "%s", err.msg);
        /* an image where the token is text */
        CHECK_OK(mlm_exec_seq_set_images(e, 0, imgs, &p0, 1, &err), &err);
        tok = 5;
        st = mlm_exec_step(e, &b, out, &err);
        CHECKF(st == MLM_ERR_INVALID_ARG && strstr(err.msg, "image is bound"), "%s", err.msg);
        /* more images than the executor takes; an image not encoded */
        CHECK_OK(mlm_exec_seq_reset(e, 0, 0, &err), &err);
        mlm_image *two[2] = {imgs[0], imgs[0]};
        int32_t pos2[2] = {0, 3};
        st = mlm_exec_seq_set_images(e, 0, two, pos2, 2, &err);
        CHECKF(st == MLM_ERR_INVALID_ARG && strstr(err.msg, "max_images"), "%s", err.msg);
        mlm_image *raw = NULL;
        CHECK_OK(mlm_image_open(m, MLLAMA "images/b_2tile.png", &raw, &err), &err);
        st = mlm_exec_seq_set_images(e, 0, &raw, &p0, 1, &err);
        CHECKF(st == MLM_ERR_INVALID_ARG && strstr(err.msg, "not encoded"), "%s", err.msg);
        mlm_image_free(raw);
        free(out);
    }
    mlm_exec_free(e);
    /* an executor taking more images than meshlm's limit */
    mlm_exec_params ep = mlm_exec_default_params();
    ep.max_images = MLM_MAX_IMAGES + 1;
    mlm_exec *bad = NULL;
    mlm_status st = mlm_exec_create(m, &ep, &bad, &err);
    CHECKF(st == MLM_ERR_INVALID_ARG && strstr(err.msg, "MLM_MAX_IMAGES"), "%s", err.msg);
    free_images(imgs, mc->n_images);
    mlm_model_free(m);
    /* a model without vision takes no images */
    mlm_model *text = helper_load_or_fail("models/default", "f32", NULL, &harness_case_failed);
    if (text) {
        st = mlm_image_open(text, MLLAMA "images/a_1tile.png", &img, &err);
        CHECKF(st == MLM_ERR_UNSUPPORTED && strstr(err.msg, "no images"), "%s", err.msg);
        CHECK(mlm_model_image_token(text) == -1);
        mlm_model_free(text);
    }
}

/* `meshlm generate --image` on the fixture (no tokenizer: --prompt-ids, each image token
 * binding the next --image): transformers' greedy tokens for the two-image case, and the
 * errors of the command line. */
TEST(cli_generate_images) {
    if (n_cases < 5) return;
    const mcase *mc = &cases[4]; /* two_images: e_2tile, then a_1tile */
    char ids[1024] = "", args[2048], out[8192];
    for (int i = 0; i < mc->n_tokens; i++)
        snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%d", i ? "," : "", mc->tokens[i]);
    snprintf(args, sizeof args,
             "generate -m " MLLAMA "hf --optimizations f32 --prompt-ids %s --image " MLLAMA
             "images/%s.png --image " MLLAMA "images/%s.png -n %d --ignore-eos --json",
             ids, mc->images[0], mc->images[1], N_GEN);
    HARNESS_EXPECT_MESHLM(out, args, 0, "\"generated_ids\":[");
    char want[512] = "\"generated_ids\":[";
    for (int g = 0; g < N_GEN; g++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%d", g ? "," : "",
                 mc->greedy[g]);
    CHECKF(strstr(out, want) != NULL, "want %s in %.600s", want, out);
    CHECK(strstr(out, "\"images\":2") != NULL);
    /* one --image for two image tokens; a corrupt file; a text model */
    snprintf(args, sizeof args,
             "generate -m " MLLAMA "hf --optimizations f32 --prompt-ids %s --image " MLLAMA
             "images/%s.png -n 2",
             ids, mc->images[0]);
    HARNESS_EXPECT_MESHLM(out, args, 1, "2 image tokens");
    snprintf(args, sizeof args,
             "generate -m " MLLAMA "hf --optimizations f32 --prompt-ids 512,5 --image " MLLAMA
             "reference.json -n 2");
    HARNESS_EXPECT_MESHLM(out, args, 1, "reference.json");
    HARNESS_EXPECT_MESHLM(out,
                          "generate -m models/default -p hi --image " MLLAMA "images/a_1tile.png",
                          2, "takes no images");
}

int main(void) {
    if (harness_tmpdir(tmpdir, sizeof tmpdir, "mllama") != 0) return 1;
    if (load_cases()) printf("  the mllama fixtures could not be read\n");
    RUN(meta_params_equal_hf_config);
    RUN(hf_f32_matches_transformers);
    RUN(meta_f32_matches_transformers);
    RUN(profiles_token_accuracy);
    RUN(cache_round_trip);
    RUN(batched_sequences);
    RUN(shared_image_kv);
    RUN(bad_images_and_tokens);
    RUN(cli_generate_images);
    for (int i = 0; i < n_cases; i++)
        free(cases[i].logits);
    harness_rmtree(tmpdir);
    return HARNESS_END();
}
