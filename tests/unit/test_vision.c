/* tests/unit/test_vision.c: the mllama vision encoder + projector (model/vision.c) against
 * transformers 4.46.3. Fixtures (tests/data/mllama, made by
 * tests/fixtures/make_mllama_fixtures.py): a tiny random MllamaForConditionalGeneration (tile
 * 56, patch 14: 17 tokens per tile, 6 local + 2 global layers, intermediates [1, 3, 4]) and,
 * per image, the processor's pixel values, the encoder output [4, 17, 128] and the projected
 * states [4, 17, 64]. The stored pixels are fed (preprocessing is test_image's job). Also: the
 * aspect ratio id, the tile count, the pixels and the tile order must all move the output,
 * argument checks, and shape / missing-tensor errors naming the tensor. */
#include <jansson.h>
#include <math.h>
#include <time.h>

#include "harness.h"
#include "helpers.h"
#include "meshlm.h"
#include "model/model.h"
#include "model/vision.h"

#define MLLAMA "tests/data/mllama/"
#define MAX_IMAGES 8

typedef struct image_case {
    char name[32];
    int32_t aspect_ratio_id, n_tiles;
    float *pixels;  /* (NT, 3, S, S), slots >= n_tiles zero */
    float *encoder; /* (NT, T, O) transformers' */
    float *vision;  /* (NT, T, E) transformers' */
} image_case;

static char tmpdir[256];
static mlm_model *model; /* the fixture in the f32 profile */
static const mlm_vision_config *vc;
static int32_t n_tok, n_text_embd;
static int loaded;
static image_case cases[MAX_IMAGES];
static int n_cases;
static int64_t n_pix, n_out, n_proj; /* floats per image */

/* Reads WANT floats of MLLAMA/NAME into DST (which may hold more); 0 on success. */
static int read_into(const char *name, float *dst, size_t want) {
    char path[512];
    snprintf(path, sizeof path, MLLAMA "%s", name);
    float *v = helper_read_f32(path, want);
    if (!v) return -1;
    memcpy(dst, v, want * sizeof *v);
    free(v);
    return 0;
}

static int setup(void) {
    mlm_error err;
    if (helper_load(MLLAMA "hf", "f32", NULL, &model, &err)) {
        printf("  setup: %s\n", err.msg);
        return -1;
    }
    vc = &mlm_model_config(model)->vision;
    n_tok = model->vision.n_tok;
    n_text_embd = mlm_model_config(model)->n_embd;
    const mlm_vision_config *c = vc;
    int64_t tile = (int64_t)c->n_channels * c->image_size * c->image_size;
    n_pix = c->max_tiles * tile;
    n_out = (int64_t)c->max_tiles * n_tok * c->output_dim;
    n_proj = (int64_t)c->max_tiles * n_tok * n_text_embd;
    json_error_t jerr;
    json_t *j = json_load_file(MLLAMA "reference.json", 0, &jerr);
    if (!j) return -1;
    const char *key;
    json_t *im;
    json_object_foreach(json_object_get(j, "images"), key, im) {
        if (n_cases == MAX_IMAGES) break;
        image_case *ic = &cases[n_cases++];
        snprintf(ic->name, sizeof ic->name, "%s", key);
        ic->aspect_ratio_id = (int32_t)json_integer_value(json_object_get(im, "aspect_ratio_id"));
        ic->n_tiles = (int32_t)json_integer_value(json_object_get(im, "num_tiles"));
        ic->pixels = calloc((size_t)n_pix, sizeof(float));
        ic->encoder = malloc((size_t)n_out * sizeof(float));
        ic->vision = malloc((size_t)n_proj * sizeof(float));
        if (!ic->pixels || !ic->encoder || !ic->vision || ic->n_tiles < 1 ||
            ic->n_tiles > c->max_tiles ||
            read_into(json_string_value(json_object_get(im, "pixels_file")), ic->pixels,
                      (size_t)(ic->n_tiles * tile)) ||
            read_into(json_string_value(json_object_get(im, "encoder_file")), ic->encoder,
                      (size_t)n_out) ||
            read_into(json_string_value(json_object_get(im, "vision_file")), ic->vision,
                      (size_t)n_proj)) {
            json_decref(j);
            return -1;
        }
    }
    json_decref(j);
    loaded = 1;
    return n_cases > 0 ? 0 : -1;
}

static void teardown(void) {
    for (int i = 0; i < n_cases; i++) {
        free(cases[i].pixels);
        free(cases[i].encoder);
        free(cases[i].vision);
    }
    mlm_model_free(model);
}

/* max |a - b| and max |b| over the first N values. */
static void diff(const float *a, const float *b, int64_t n, double *dmax, double *rmax) {
    *dmax = *rmax = 0;
    for (int64_t i = 0; i < n; i++) {
        double dd = fabs((double)a[i] - b[i]), r = fabs((double)b[i]);
        if (!(dd <= *dmax)) *dmax = dd; /* NaN sticks */
        if (r > *rmax) *rmax = r;
    }
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The forward of PIXELS; returns the max |diff| / max|ref| of the encoder output against REF
 * over the first n_tiles tiles (the ones the text reads), or -1 on failure. */
static double rel_to(const float *pixels, int32_t aspect, int32_t n_tiles, const float *ref) {
    float *out = malloc((size_t)n_out * sizeof(float));
    mlm_error err;
    double dm = -1, rm = 0;
    if (out && !mlm_vision_encode_ref(model, pixels, aspect, n_tiles, out, NULL, &err))
        diff(out, ref, (int64_t)n_tiles * n_tok * vc->output_dim, &dm, &rm);
    free(out);
    return dm < 0 ? -1 : dm / rm;
}

TEST(config) {
    CHECK(loaded); /* the fixtures are in the repository: missing ones are a failure */
    if (!loaded) return;
    const mlm_vision_config *c = vc;
    const mlm_vision_tower *v = &model->vision;
    CHECK(mlm_model_config(model)->family == MLM_FAMILY_MLLAMA);
    CHECK(c->image_size == 56 && c->patch_size == 14 && v->n_tok == 17 && v->n_tok_pad == 24);
    CHECK(c->n_embd == 32 && c->n_head == 2 && c->n_ff == 128);
    CHECK(c->n_layer == 6 && c->n_global_layer == 2 && c->n_intermediate == 3);
    CHECK(c->output_dim == 128 && n_text_embd == 64 && c->max_tiles == 4);
    CHECK(v->gates[0] != 0 && v->gates[1] != 0 && v->gates[2] != 0);
    CHECK(n_cases == 5);
}

/* The reference (plain loops) and the kernels' encoder, both against transformers: the
 * encoder output of every tile slot (reference) and the projected states of the valid tiles
 * (both), within 1e-4 x max|ref|. */
TEST(matches_transformers) {
    if (!loaded) SKIP("fixtures not loaded");
    float *out = malloc((size_t)n_out * sizeof(float));
    float *proj = malloc((size_t)n_proj * sizeof(float));
    float *fast = malloc((size_t)n_proj * sizeof(float));
    mlm_pool *pool = NULL;
    mlm_error err;
    CHECK_OK(mlm_pool_create(2, &pool, &err), &err);
    CHECK(out && proj && fast);
    for (int i = 0; out && proj && fast && pool && i < n_cases; i++) {
        const image_case *ic = &cases[i];
        double t0 = seconds();
        CHECK_OK(mlm_vision_encode_ref(model, ic->pixels, ic->aspect_ratio_id, ic->n_tiles, out,
                                       proj, &err),
                 &err);
        double t1 = seconds();
        CHECK_OK(mlm_vision_encode(model, ic->pixels, ic->aspect_ratio_id, ic->n_tiles, fast, pool,
                                   &err),
                 &err);
        double t2 = seconds();
        int64_t valid = (int64_t)ic->n_tiles * n_tok * n_text_embd;
        double de, re, dp, rp, df, rf;
        diff(out, ic->encoder, n_out, &de, &re);
        diff(proj, ic->vision, n_proj, &dp, &rp);
        diff(fast, ic->vision, valid, &df, &rf);
        printf("  %-8s id %d, %d tiles: reference encoder %.2e rel, projected %.2e rel (%.1f ms); "
               "kernels projected %.2e rel (%.1f ms)\n",
               ic->name, (int)ic->aspect_ratio_id, (int)ic->n_tiles, de / re, dp / rp,
               1e3 * (t1 - t0), df / rf, 1e3 * (t2 - t1));
        CHECKF(de <= 1e-4 * re, "%s encoder: %.3g > 1e-4 x %.3g", ic->name, de, re);
        CHECKF(dp <= 1e-4 * rp, "%s projected: %.3g > 1e-4 x %.3g", ic->name, dp, rp);
        CHECKF(df <= 1e-4 * rf, "%s kernels: %.3g > 1e-4 x %.3g", ic->name, df, rf);
    }
    mlm_pool_free(pool);
    free(out), free(proj), free(fast);
}

/* The BFP profiles' vision tower (BFP8 matrices, int8 activations) stays close to the f32
 * encoder: the projected states within a few percent. */
TEST(bfp_profile_close) {
    if (!loaded) SKIP("fixtures not loaded");
    mlm_error err;
    mlm_model *perf = NULL;
    helper_load(MLLAMA "hf", "performance", NULL, &perf, &err);
    CHECKF(perf != NULL, "%s", err.msg);
    mlm_pool *pool = NULL;
    CHECK_OK(mlm_pool_create(2, &pool, &err), &err);
    float *fast = malloc((size_t)n_proj * sizeof(float));
    double worst = 0;
    for (int i = 0; perf && pool && fast && i < n_cases; i++) {
        const image_case *ic = &cases[i];
        CHECK_OK(
            mlm_vision_encode(perf, ic->pixels, ic->aspect_ratio_id, ic->n_tiles, fast, pool, &err),
            &err);
        double d, r;
        diff(fast, ic->vision, (int64_t)ic->n_tiles * n_tok * n_text_embd, &d, &r);
        worst = d / r > worst ? d / r : worst;
    }
    printf("  performance profile (BFP8 vision tower): projected states %.3g x max|ref| away\n",
           worst);
    CHECK(worst > 0 && worst < 0.1);
    CHECK_OK(mlm_vision_encode_ref(perf, cases[0].pixels, 1, 1, NULL, fast, &err) ==
                     MLM_ERR_UNSUPPORTED
                 ? MLM_OK
                 : MLM_ERR_INTERNAL,
             &err);
    mlm_pool_free(pool);
    free(fast);
    mlm_model_free(perf);
}

/* Each input must matter: with it wrong, the valid tiles move far past the tolerance. */
TEST(inputs_matter) {
    if (!loaded) SKIP("fixtures not loaded");
    const int32_t n_aspect = vc->n_aspect;
    for (int i = 0; i < n_cases; i++) {
        const image_case *ic = &cases[i];
        int32_t wrong = ic->aspect_ratio_id % n_aspect + 1;
        double r = rel_to(ic->pixels, wrong, ic->n_tiles, ic->encoder);
        printf("  %-8s aspect_ratio_id %d instead of %d: %.3g rel\n", ic->name, (int)wrong,
               (int)ic->aspect_ratio_id, r);
        CHECKF(r > 1e-2, "%s: aspect_ratio_id %d moves the output by only %.3g", ic->name,
               (int)wrong, r);
        int32_t tiles = ic->n_tiles == 1 ? 2 : ic->n_tiles - 1;
        r = rel_to(ic->pixels, ic->aspect_ratio_id, tiles, ic->encoder);
        printf("  %-8s n_tiles %d instead of %d: %.3g rel\n", ic->name, (int)tiles,
               (int)ic->n_tiles, r);
        CHECKF(r > 1e-2, "%s: n_tiles %d moves the output by only %.3g", ic->name, (int)tiles, r);
    }
    // swapped images: two images of the same grid (b_2tile, e_2tile: 1 x 2) exchanged
    const image_case *b = NULL, *e = NULL;
    for (int i = 0; i < n_cases; i++) {
        if (!strcmp(cases[i].name, "b_2tile")) b = &cases[i];
        if (!strcmp(cases[i].name, "e_2tile")) e = &cases[i];
    }
    CHECK(b && e && b->aspect_ratio_id == e->aspect_ratio_id && b->n_tiles == e->n_tiles);
    if (b && e) {
        double r1 = rel_to(e->pixels, b->aspect_ratio_id, b->n_tiles, b->encoder);
        double r2 = rel_to(b->pixels, e->aspect_ratio_id, e->n_tiles, e->encoder);
        printf("  swapped b_2tile / e_2tile pixels: %.3g / %.3g rel\n", r1, r2);
        CHECK(r1 > 1e-2 && r2 > 1e-2);
        // the same pixels with the two tiles exchanged
        const int64_t tile = n_pix / vc->max_tiles;
        float *sw = malloc((size_t)n_pix * sizeof(float));
        CHECK(sw != NULL);
        if (sw) {
            memcpy(sw, b->pixels, (size_t)n_pix * sizeof(float));
            memcpy(sw, b->pixels + tile, (size_t)tile * sizeof(float));
            memcpy(sw + tile, b->pixels, (size_t)tile * sizeof(float));
            double r3 = rel_to(sw, b->aspect_ratio_id, b->n_tiles, b->encoder);
            printf("  b_2tile with its tiles exchanged: %.3g rel\n", r3);
            CHECK(r3 > 1e-2);
            free(sw);
        }
    }
}

TEST(bad_arguments) {
    if (!loaded) SKIP("fixtures not loaded");
    float *out = malloc((size_t)n_out * sizeof(float));
    const float *px = cases[0].pixels;
    mlm_error err;
    mlm_pool *pool = NULL;
    CHECK_OK(mlm_pool_create(1, &pool, &err), &err);
    CHECK(mlm_vision_encode_ref(model, px, 1, 0, out, NULL, &err) == MLM_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "n_tiles 0") != NULL);
    CHECK(mlm_vision_encode_ref(model, px, 1, 5, out, NULL, &err) == MLM_ERR_INVALID_ARG);
    CHECK(mlm_vision_encode_ref(model, px, 9, 1, out, NULL, &err) == MLM_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "aspect_ratio_id 9") != NULL);
    CHECK(mlm_vision_encode_ref(model, px, -1, 1, out, NULL, &err) == MLM_ERR_INVALID_ARG);
    CHECK(mlm_vision_encode_ref(model, NULL, 1, 1, out, NULL, &err) == MLM_ERR_INVALID_ARG);
    CHECK(mlm_vision_encode(model, px, 1, 0, out, pool, &err) == MLM_ERR_INVALID_ARG);
    CHECK(mlm_vision_encode(model, px, 9, 1, out, pool, &err) == MLM_ERR_INVALID_ARG);
    CHECK(mlm_vision_encode(model, px, 1, 1, NULL, pool, &err) == MLM_ERR_INVALID_ARG);
    mlm_pool_free(pool);
    free(out);
}

/* Loads the fixture after EDIT (a shell command run in a copy of it): FORMAT naming N1, N2. */
static void expect_load_fail(const char *edit, const char *n1, const char *n2) {
    char cmd[1024], dir[300];
    snprintf(dir, sizeof dir, "%s/bad", tmpdir);
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r " MLLAMA "hf %s && cd %s && %s", dir, dir, dir,
             edit);
    CHECK(system(cmd) == 0);
    mlm_error err = {0};
    mlm_model *m = NULL;
    helper_load(dir, "f32", NULL, &m, &err);
    CHECKF(!m && err.status == MLM_ERR_FORMAT, "%s: got %s", edit, mlm_status_str(err.status));
    printf("  %s\n", err.msg);
    CHECKF(strstr(err.msg, n1) && (!n2 || strstr(err.msg, n2)), "message '%s' lacks '%s'/'%s'",
           err.msg, n1, n2 ? n2 : "");
    mlm_model_free(m);
}

TEST(load_errors) {
    if (!loaded) SKIP("fixtures not loaded");
    /* a vision MLP width the checkpoint does not have: the tensor and both shapes named */
    expect_load_fail(
        "sed -i '/vision_config/,$ s/\"intermediate_size\": 128,/\"intermediate_size\": "
        "96,/' config.json",
        "vision_model.transformer.layers.0.mlp.fc1.weight", "[96, 32]");
    /* one local layer more than the checkpoint has (and one more intermediate slot) */
    expect_load_fail(
        "sed -i '/vision_config/,$ s/\"num_hidden_layers\": 6,/\"num_hidden_layers\": 7,/' "
        "config.json",
        "vision_model.transformer.layers.6.", NULL);
    /* a missing gate */
    expect_load_fail("sed -i 's/cross_attn_attn_gate/cross_attn_attn_gatX/g' model.safetensors",
                     "language_model.model.layers.1.cross_attn_attn_gate", NULL);
}

int main(void) {
    if (harness_tmpdir(tmpdir, sizeof tmpdir, "vision") != 0) return 1;
    if (setup()) printf("  fixtures under " MLLAMA " could not be loaded\n");
    RUN(config);
    RUN(matches_transformers);
    RUN(bfp_profile_close);
    RUN(inputs_matter);
    RUN(bad_arguments);
    RUN(load_errors);
    teardown();
    harness_rmtree(tmpdir);
    return HARNESS_END();
}
