/* tests/unit/test_demo_vision.c: `meshlm demo`'s vision presets (the seeds'
 * simple_vision_demo.py) end to end on a small Llama 3.2 Vision model written at test time
 * (mlm_synth's hidden preset tiny-mllama-llama3: random weights, the real Llama 3 tokenizer),
 * with the bundled images and dialogs of prompts/vision/. The weights are random, so runs are
 * compared with each other, never with fixed text: batch-32 gives every user what its dialog
 * gets alone, the image changes the answer, the mixed preset's text-only users get what
 * `meshlm generate --instruct` gets, the report has the vision figures, and a text model is
 * refused. Random weights may generate a special token: the guard's failure (exit 1) is
 * accepted here and nothing else. */
#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "meshlm.h"

enum { T = 8 }; /* tokens per user */

static char out[1 << 17], tmp[256], model[320];

#define EXPECT(args, code, needle) HARNESS_EXPECT_MESHLM(out, args, code, needle)

static const char *const dialog_images[4] = {"chelsea.jpg", "coffee.jpg", "ocr_notice.png",
                                             "astronaut.jpg"};

/* Runs the demo with ARGS (after -m MODEL) and --report NAME, and returns the report. Exit 1
 * is accepted only for the special-token guard (random weights), every failure line its. */
static json_t *demo(const char *args, const char *name) {
    char cmd[1600], path[400];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    remove(path);
    snprintf(cmd, sizeof cmd, "demo -m %s --max-generated-tokens %d --quiet --report %s %s", model,
             T, path, args);
    int rc = harness_run_meshlm(cmd, out, sizeof out);
    CHECKF(rc == 0 || rc == 1, "meshlm %s: exit %d: %.600s", cmd, rc, out);
    json_error_t jerr;
    json_t *r = json_load_file(path, 0, &jerr);
    CHECKF(r != NULL, "%s: %s; output: %.600s", path, jerr.text, out);
    if (!r) return json_object();
    const char *f = json_string_value(json_object_get(r, "failures"));
    CHECKF(f && (rc == 1) == (f[0] != 0), "exit %d, failures '%s'", rc, f ? f : "?");
    for (const char *line = f; line && *line;
         line = strchr(line, '\n') ? strchr(line, '\n') + 1 : "")
        CHECKF(!strncmp(line, "special-token guard:", 20), "%s: failure %.200s", args, line);
    return r;
}

static double metric(json_t *r, const char *name) {
    return json_number_value(json_object_get(json_object_get(r, "metrics"), name));
}

static const char *str(json_t *o, const char *key) {
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static json_t *user(json_t *r, size_t i) { return json_array_get(json_object_get(r, "users"), i); }

static const char *output(json_t *r, size_t i) {
    const char *s = json_string_value(json_object_get(user(r, i), "output"));
    return s ? s : "(none)";
}

/* The base name of user I's image, or "" for a text-only user. */
static const char *image_of(json_t *r, size_t i) {
    const char *s = json_string_value(json_object_get(user(r, i), "image"));
    const char *b = s ? strrchr(s, '/') : NULL;
    return b ? b + 1 : s ? s : "";
}

static json_t *batch1; /* vision-batch-1: the four dialogs, each alone */

TEST(batch1_report) {
    batch1 = demo("--preset vision-batch-1", "b1.json");
    CHECK(strstr(out, "vision encoder") && strstr(out, "TTFT without vision"));
    json_t *r = batch1;
    CHECK(!strcmp(str(r, "preset"), "vision-batch-1") && !strcmp(str(r, "family"), "mllama"));
    CHECK(json_integer_value(json_object_get(r, "max_seq_len")) == 512);
    CHECK(json_integer_value(json_object_get(r, "batch_size")) == 1);
    CHECK(json_integer_value(json_object_get(r, "repeat_batches")) == 4);
    CHECK(json_integer_value(json_object_get(r, "stop_at_eos")) == 0);
    CHECK(json_number_value(json_object_get(json_object_get(r, "sampling"), "temperature")) == 0);
    static const char *ms[] = {"ttft_ms",         "prefill_tps",      "decode_tps_user",
                               "decode_tps",      "vision_encode_ms", "vision_encode_ms_per_image",
                               "image_open_ms",   "image_kv_ms",      "ttft_text_ms",
                               "prefill_text_tps"};
    for (size_t i = 0; i < sizeof ms / sizeof *ms; i++)
        CHECKF(metric(r, ms[i]) > 0, "metric %s = %g", ms[i], metric(r, ms[i]));
    CHECK(metric(r, "n_images") == 4 && metric(r, "image_users") == 4);
    /* TTFT holds the encoder (the seeds' prefill_forward does); per batch of one here */
    CHECK(metric(r, "ttft_ms") > metric(r, "ttft_text_ms"));
    CHECK(metric(r, "prefill_tps") < metric(r, "prefill_text_tps"));
    CHECK_NEAR(metric(r, "vision_encode_ms_per_image") * 4, metric(r, "vision_encode_ms"), 0.01);
    json_t *imgs = json_object_get(r, "images");
    CHECK(json_array_size(imgs) == 4);
    for (size_t k = 0; k < json_array_size(imgs); k++) {
        json_t *im = json_array_get(imgs, k);
        int64_t tiles = json_integer_value(json_object_get(im, "tiles"));
        CHECK(tiles >= 1 && tiles <= 4 && json_integer_value(json_object_get(im, "tokens")) > 0);
        CHECK(json_number_value(json_object_get(im, "encode_ms")) > 0);
    }
    /* four batches of one user: dialog r in batch r, as the seeds' batch1 runs them */
    CHECK(json_array_size(json_object_get(r, "users")) == 4);
    for (size_t i = 0; i < 4; i++) {
        CHECKF(!strcmp(image_of(r, i), dialog_images[i]), "batch %zu: image %s", i, image_of(r, i));
        CHECK(json_integer_value(json_object_get(user(r, i), "batch")) == (json_int_t)i);
    }
}

/* 32 users (the dialogs 8 times) give each user what its dialog gets alone. */
TEST(batch32_equals_alone) {
    json_t *r = demo("--preset vision-batch-32", "b32.json");
    CHECK(json_array_size(json_object_get(r, "users")) == 32);
    CHECK(metric(r, "determinism_checks") == 28 && metric(r, "image_users") == 32);
    CHECK(metric(r, "n_images") == 4); /* each file encoded once for its 8 users */
    for (size_t u = 0; u < 32; u++) {
        CHECK(!strcmp(image_of(r, u), dialog_images[u % 4]));
        CHECKF(!strcmp(output(r, u), output(batch1, u % 4)), "user %zu: '%s' alone, '%s' in 32", u,
               output(batch1, u % 4), output(r, u));
    }
    json_decref(r);
}

/* The image matters: the dialogs' answers differ, a dialog's answer changes with another
 * image, and the same image from another path (relative to the dialog file) gives the same. */
TEST(image_matters) {
    int same = 1;
    for (size_t i = 1; i < 4; i++)
        same &= !strcmp(output(batch1, 0), output(batch1, i));
    CHECK(!same);
    char cwd[256], file[400], args[800], dir[400];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    snprintf(dir, sizeof dir, "%s/img", tmp);
    mkdir(dir, 0755);
    char copy[600];
    snprintf(copy, sizeof copy, "cp prompts/vision/chelsea.jpg %s/cat.jpg", dir);
    CHECK(system(copy) == 0);
    snprintf(file, sizeof file, "%s/swap.json", tmp);
    char abs[600];
    snprintf(abs, sizeof abs, "%s/prompts/vision/astronaut.jpg", cwd);
    json_t *d =
        json_pack("[{s:s, s:s}, {s:s, s:s}]", "prompt", "Write a haiku for this image.", "image",
                  "img/cat.jpg", "prompt", "Write a haiku for this image.", "image", abs);
    CHECK(d && json_dump_file(d, file, 0) == 0);
    json_decref(d);
    snprintf(args, sizeof args, "--preset vision-batch-4-mixed --batch-size 2 --input-prompts %s",
             file);
    json_t *r = demo(args, "swap-report.json");
    CHECKF(!strcmp(output(r, 0), output(batch1, 0)), "cat.jpg: '%s', chelsea.jpg: '%s'",
           output(r, 0), output(batch1, 0));
    CHECKF(strcmp(output(r, 1), output(batch1, 0)), "dialog 0 with astronaut.jpg: '%s' again",
           output(r, 1));
    CHECK(metric(r, "n_images") == 2);
    json_decref(r);
}

/* The mixed batch: text-only users get what `generate --instruct` gets, image users what
 * their dialog gets alone. */
TEST(mixed_text_users_equal_generate) {
    json_t *r = demo("--preset vision-batch-4-mixed", "b4.json");
    CHECK(json_array_size(json_object_get(r, "users")) == 4);
    CHECK(metric(r, "n_images") == 2 && metric(r, "image_users") == 2);
    static const char *texts[2] = {"Write a haiku.", "What is for dinner?"};
    for (size_t u = 0; u < 2; u++) {
        CHECK(json_is_null(json_object_get(user(r, u), "image")));
        char args[800];
        snprintf(args, sizeof args,
                 "generate -m %s --instruct -p \"%s\" -n %d --temperature 0 --ignore-eos --json",
                 model, texts[u], T);
        int rc = harness_run_meshlm(args, out, sizeof out);
        CHECKF(rc == 0, "meshlm %s: exit %d: %.400s", args, rc, out);
        json_t *g =
            json_loads(strchr(out, '{') ? strchr(out, '{') : out, JSON_DISABLE_EOF_CHECK, NULL);
        const char *want = g ? json_string_value(json_object_get(g, "text")) : NULL;
        CHECKF(want && !strcmp(want, output(r, u)), "'%s': generate '%s', demo '%s'", texts[u],
               want ? want : "?", output(r, u));
        json_decref(g);
    }
    for (size_t u = 2; u < 4; u++) {
        CHECK(!strcmp(image_of(r, u), dialog_images[u]));
        CHECK(!strcmp(output(r, u), output(batch1, u)));
    }
    json_decref(r);
}

/* A vision model runs the text presets text only; a text model is refused by the vision
 * presets; bad dialogs fail before any compute. */
TEST(refusals_and_text_presets) {
    char args[800], file[400];
    json_t *r = demo("--preset batch-1", "text.json");
    CHECK(json_array_size(json_object_get(r, "users")) == 1 && metric(r, "decode_tps") > 0);
    CHECK(json_object_get(json_object_get(r, "metrics"), "vision_encode_ms") == NULL);
    json_decref(r);
    EXPECT("demo -m models/default --preset vision-batch-1", 2, "needs a vision model");
    EXPECT("demo -m models/default --preset vision-batch-4-mixed", 2, "without images");
    snprintf(args, sizeof args, "demo -m %s --preset vision-batch-32 --instruct 0", model);
    EXPECT(args, 2, "chat format");
    snprintf(args, sizeof args, "demo -m %s --input-prompts prompts/vision/input_data_vision.json",
             model);
    EXPECT(args, 1, "images need a vision preset");
    snprintf(file, sizeof file, "%s/bad.json", tmp);
    const char *missing = "[{\"prompt\": \"q\", \"image\": \"no/such.png\"}]";
    harness_write_file(file, missing, strlen(missing));
    snprintf(args, sizeof args, "demo -m %s --preset vision-batch-1 --input-prompts %s", model,
             file);
    EXPECT(args, 1, "image file");
    const char *typed = "[{\"prompt\": \"q\", \"image\": 3}]";
    harness_write_file(file, typed, strlen(typed));
    EXPECT(args, 1, "\"image\" must be a file name");
    const char *notimg = "[{\"prompt\": \"q\", \"image\": \"bad.json\"}]";
    harness_write_file(file, notimg, strlen(notimg));
    EXPECT(args, 1, "bad.json");
}

int main(void) {
    if (harness_tmpdir(tmp, sizeof tmp, "demo-vision")) return 1;
    snprintf(model, sizeof model, "%s/model", tmp);
    mlm_synth_params sp = mlm_synth_default_params();
    sp.preset = "tiny-mllama-llama3";
    sp.out_dir = model;
    sp.tokenizer = "tests/data/tokenizer/llama3/tokenizer.model";
    mlm_error err = {0};
    if (mlm_synth(&sp, &err)) {
        printf("mlm_synth: %s\n", err.msg);
        return 1;
    }
    RUN(batch1_report);
    RUN(batch32_equals_alone);
    RUN(image_matters);
    RUN(mixed_text_users_equal_generate);
    RUN(refusals_and_text_presets);
    json_decref(batch1);
    harness_rmtree(tmp);
    return HARNESS_END();
}
