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
#include "meshlm.h"
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

static mlm_config cfg;
static mlm_vision vis;
static int loaded;
static image_case cases[MAX_IMAGES];
static int n_cases;
static int64_t n_pix, n_out, n_proj; /* floats per image */

/* Reads WANT floats of DIR/NAME into DST (which may hold more); 0 on success. */
static int read_f32(const char *name, float *dst, size_t want) {
    char path[512];
    snprintf(path, sizeof path, MLLAMA "%s", name);
    size_t n;
    char *buf = harness_read_file(path, &n);
    if (!buf || n != want * 4) {
        printf("  %s: missing or not %zu floats\n", path, want);
        free(buf);
        return -1;
    }
    memcpy(dst, buf, n);
    free(buf);
    return 0;
}

static int setup(void) {
    mlm_error err;
    if (mlm_config_load(MLLAMA "hf", &cfg, &err) ||
        mlm_vision_load(MLLAMA "hf", &cfg, &vis, &err)) {
        printf("  setup: %s\n", err.msg);
        return -1;
    }
    const mlm_vision_config *c = &vis.cfg;
    int64_t tile = (int64_t)c->n_channels * c->image_size * c->image_size;
    n_pix = c->max_tiles * tile;
    n_out = (int64_t)c->max_tiles * vis.n_tok * c->output_dim;
    n_proj = (int64_t)c->max_tiles * vis.n_tok * vis.n_text_embd;
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
            read_f32(json_string_value(json_object_get(im, "pixels_file")), ic->pixels,
                     (size_t)(ic->n_tiles * tile)) ||
            read_f32(json_string_value(json_object_get(im, "encoder_file")), ic->encoder,
                     (size_t)n_out) ||
            read_f32(json_string_value(json_object_get(im, "vision_file")), ic->vision,
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
    mlm_vision_deinit(&vis);
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
    if (out && !mlm_vision_forward(&vis, pixels, aspect, n_tiles, out, NULL, &err))
        diff(out, ref, (int64_t)n_tiles * vis.n_tok * vis.cfg.output_dim, &dm, &rm);
    free(out);
    return dm < 0 ? -1 : dm / rm;
}

TEST(config) {
    CHECK(loaded); /* the fixtures are in the repository: missing ones are a failure */
    if (!loaded) return;
    const mlm_vision_config *c = &vis.cfg;
    CHECK(cfg.family == MLM_FAMILY_MLLAMA);
    CHECK(c->image_size == 56 && c->patch_size == 14 && vis.n_tok == 17 && vis.n_tok_pad == 24);
    CHECK(c->n_embd == 32 && c->n_head == 2 && c->n_ff == 128);
    CHECK(c->n_layer == 6 && c->n_global_layer == 2 && c->n_intermediate == 3);
    CHECK(c->output_dim == 128 && vis.n_text_embd == 64 && c->max_tiles == 4);
    CHECK(vis.pos_gate != 0 && vis.pre_tile_gate != 0 && vis.post_tile_gate != 0);
    CHECK(n_cases == 5);
}

TEST(matches_transformers) {
    if (!loaded) SKIP("fixtures not loaded");
    float *out = malloc((size_t)n_out * sizeof(float));
    float *proj = malloc((size_t)n_proj * sizeof(float));
    CHECK(out && proj);
    for (int i = 0; out && proj && i < n_cases; i++) {
        const image_case *ic = &cases[i];
        mlm_error err;
        double t0 = seconds();
        CHECK_OK(
            mlm_vision_forward(&vis, ic->pixels, ic->aspect_ratio_id, ic->n_tiles, out, proj, &err),
            &err);
        double t1 = seconds();
        double de, re, dp, rp;
        diff(out, ic->encoder, n_out, &de, &re);
        diff(proj, ic->vision, n_proj, &dp, &rp);
        printf("  %-8s id %d, %d tiles: encoder max|diff| %.3g (max|ref| %.3g, %.2e rel), "
               "projected %.3g (max|ref| %.3g, %.2e rel), %.1f ms\n",
               ic->name, (int)ic->aspect_ratio_id, (int)ic->n_tiles, de, re, de / re, dp, rp,
               dp / rp, 1e3 * (t1 - t0));
        CHECKF(de <= 1e-4 * re, "%s encoder: %.3g > 1e-4 x %.3g", ic->name, de, re);
        CHECKF(dp <= 1e-4 * rp, "%s projected: %.3g > 1e-4 x %.3g", ic->name, dp, rp);
    }
    free(out);
    free(proj);
}

/* Each input must matter: with it wrong, the valid tiles move far past the tolerance. */
TEST(inputs_matter) {
    if (!loaded) SKIP("fixtures not loaded");
    const int32_t n_aspect = vis.cfg.n_aspect;
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
        const int64_t tile = n_pix / vis.cfg.max_tiles;
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
    CHECK(mlm_vision_forward(&vis, px, 1, 0, out, NULL, &err) == MLM_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "n_tiles 0") != NULL);
    CHECK(mlm_vision_forward(&vis, px, 1, 5, out, NULL, &err) == MLM_ERR_INVALID_ARG);
    CHECK(mlm_vision_forward(&vis, px, 9, 1, out, NULL, &err) == MLM_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "aspect_ratio_id 9") != NULL);
    CHECK(mlm_vision_forward(&vis, px, -1, 1, out, NULL, &err) == MLM_ERR_INVALID_ARG);
    CHECK(mlm_vision_forward(&vis, NULL, 1, 1, out, NULL, &err) == MLM_ERR_INVALID_ARG);
    CHECK(mlm_vision_forward(&vis, px, 1, 1, NULL, NULL, &err) == MLM_ERR_INVALID_ARG);
    mlm_vision empty = {0};
    CHECK(mlm_vision_forward(&empty, px, 1, 1, out, NULL, &err) == MLM_ERR_INVALID_ARG);
    mlm_vision_deinit(&empty);
    mlm_vision_deinit(NULL);
    free(out);
}

TEST(load_errors) {
    if (!loaded) SKIP("fixtures not loaded");
    mlm_error err;
    mlm_vision v;
    // a config whose MLP width disagrees with the checkpoint: FORMAT naming tensor and shapes
    mlm_config c = cfg;
    c.vision.n_ff = 96;
    CHECK(mlm_vision_load(MLLAMA "hf", &c, &v, &err) == MLM_ERR_FORMAT);
    printf("  n_ff 96: %s\n", err.msg);
    CHECK(strstr(err.msg, "'vision_model.transformer.layers.0.mlp.fc1.weight'") != NULL);
    CHECK(strstr(err.msg, "[128, 32]") != NULL && strstr(err.msg, "[96, 32]") != NULL);
    CHECK(v.data == NULL && v.local == NULL);
    // one local layer more than the checkpoint has
    c = cfg;
    c.vision.n_layer = 7;
    CHECK(mlm_vision_load(MLLAMA "hf", &c, &v, &err) == MLM_ERR_FORMAT);
    printf("  n_layer 7: %s\n", err.msg);
    CHECK(strstr(err.msg, "vision_model.transformer.layers.6.") != NULL);
    // a text width the projector does not have
    c = cfg;
    c.n_embd = 48;
    CHECK(mlm_vision_load(MLLAMA "hf", &c, &v, &err) == MLM_ERR_FORMAT);
    CHECK(strstr(err.msg, "multi_modal_projector.weight") != NULL);
    // not an mllama config; a missing directory
    c = cfg;
    c.family = MLM_FAMILY_LLAMA3;
    CHECK(mlm_vision_load(MLLAMA "hf", &c, &v, &err) == MLM_ERR_INVALID_ARG);
    CHECK(mlm_vision_load(MLLAMA "no-such-dir", &cfg, &v, &err) != MLM_OK);
}

int main(void) {
    if (setup()) printf("  fixtures under " MLLAMA " could not be loaded\n");
    RUN(config);
    RUN(matches_transformers);
    RUN(inputs_matter);
    RUN(bad_arguments);
    RUN(load_errors);
    teardown();
    return HARNESS_END();
}
