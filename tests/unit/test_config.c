/* tests/unit/test_config.c: the config reader against Hugging Face transformers'
 * reading of the same real config files (tests/data/configs/expected.json, made by
 * tests/fixtures/make_config_fixtures.py), Meta params.json against the HF config of the
 * same model size, and malformed configs. */
#include <jansson.h>
#include <unistd.h>

#include "harness.h"
#include "meshlm.h"

#define CFG "tests/data/configs/"

static char tmpdir[256];

static int64_t jint(const json_t *o, const char *k) { return json_integer_value(json_object_get(o, k)); }
static double jnum(const json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

TEST(hf_configs_match_transformers) {
    json_error_t jerr;
    json_t *root = json_load_file(CFG "expected.json", 0, &jerr);
    CHECK(root != NULL);
    if (!root) return;
    const char *name;
    json_t *e;
    int n = 0;
    json_object_foreach(json_object_get(root, "models"), name, e) {
        char dir[256];
        snprintf(dir, sizeof dir, CFG "%s", name);
        mlm_config c;
        mlm_error err;
        CHECK_OK(mlm_config_load(dir, &c, &err), &err);
        const char *arch = json_string_value(json_object_get(e, "architecture"));
        CHECKF(c.family == (!strcmp(arch, "Phi3ForCausalLM") ? MLM_FAMILY_PHI3 : MLM_FAMILY_LLAMA3),
               "%s: family", name);
        CHECKF(c.n_embd == jint(e, "n_embd") && c.n_layer == jint(e, "n_layer") &&
                   c.n_head == jint(e, "n_head") && c.n_kv_head == jint(e, "n_kv_head") &&
                   c.head_dim == jint(e, "head_dim") && c.n_ff == jint(e, "n_ff") &&
                   c.n_vocab == jint(e, "n_vocab") && c.n_ctx_train == jint(e, "n_ctx_train"),
               "%s: dims", name);
        CHECKF(c.norm_eps == (float)jnum(e, "norm_eps") &&
                   c.rope_theta == (float)jnum(e, "rope_theta"),
               "%s: eps/theta", name);
        const json_t *factor = json_object_get(e, "rope_factor");
        if (json_is_null(factor)) {
            CHECKF(c.rope_type == MLM_ROPE_NONE, "%s: rope type", name);
        } else {
            CHECKF(c.rope_type == MLM_ROPE_LLAMA3 && c.rope_factor == (float)jnum(e, "rope_factor") &&
                       c.rope_low_freq_factor == (float)jnum(e, "rope_low_freq_factor") &&
                       c.rope_high_freq_factor == (float)jnum(e, "rope_high_freq_factor") &&
                       c.rope_orig_ctx == jint(e, "rope_orig_ctx"),
                   "%s: rope scaling", name);
        }
        CHECKF(c.tied_embeddings == json_is_true(json_object_get(e, "tied_embeddings")),
               "%s: tied", name);
        CHECKF(c.bos_id == jint(e, "bos_id") && c.pad_id == jint(e, "pad_id"), "%s: bos/pad",
               name);
        const json_t *stops = json_object_get(e, "stop_ids");
        CHECKF(c.n_stop_ids == (int)json_array_size(stops), "%s: %d stop ids", name, c.n_stop_ids);
        for (int i = 0; i < c.n_stop_ids && i < (int)json_array_size(stops); i++)
            CHECK(c.stop_ids[i] == json_integer_value(json_array_get(stops, (size_t)i)));
        CHECKF(mlm_config_n_params(&c) == jint(e, "n_params"), "%s: %lld params vs %lld", name,
               (long long)mlm_config_n_params(&c), (long long)jint(e, "n_params"));
        n++;
    }
    CHECK(n >= 7);
    json_decref(root);
}

/* Llama 3.2 Vision's config.json read as transformers' MllamaConfig reads it: the text
 * decoder, its cross-attention layers, the image token, the vision tower, and the text
 * decoder's parameter count of a meta-device MllamaForConditionalGeneration; a model of that
 * family is refused by the loader with a message (not run yet), and bad vision fields name
 * the field. */
TEST(mllama_config_matches_transformers) {
    json_error_t jerr;
    json_t *root = json_load_file(CFG "expected.json", 0, &jerr);
    CHECK(root != NULL);
    if (!root) return;
    const char *name;
    json_t *e;
    int n = 0;
    json_object_foreach(json_object_get(root, "vision_models"), name, e) {
        char dir[256];
        snprintf(dir, sizeof dir, CFG "%s", name);
        mlm_config c;
        mlm_error err;
        CHECK_OK(mlm_config_load(dir, &c, &err), &err);
        CHECKF(c.family == MLM_FAMILY_MLLAMA && !strcmp(mlm_family_name(c.family), "mllama"),
               "%s: family", name);
        CHECKF(c.n_embd == jint(e, "n_embd") && c.n_layer == jint(e, "n_layer") &&
                   c.n_head == jint(e, "n_head") && c.n_kv_head == jint(e, "n_kv_head") &&
                   c.n_ff == jint(e, "n_ff") && c.n_vocab == jint(e, "n_vocab") &&
                   c.rope_theta == (float)jnum(e, "rope_theta") &&
                   c.rope_factor == (float)jnum(e, "rope_factor") && c.pad_id == jint(e, "pad_id"),
               "%s: text dims", name);
        const json_t *x = json_object_get(e, "cross_attention_layers");
        CHECKF(c.n_cross == (int)json_array_size(x), "%s: %d cross layers", name, c.n_cross);
        for (int i = 0; i < c.n_cross && i < (int)json_array_size(x); i++)
            CHECK(c.cross_layers[i] == json_integer_value(json_array_get(x, (size_t)i)));
        CHECK(c.image_token_id == jint(e, "image_token_id"));
        const json_t *stops = json_object_get(e, "stop_ids");
        CHECK(c.n_stop_ids == (int)json_array_size(stops));
        const json_t *v = json_object_get(e, "vision");
        const mlm_vision_config *vc = &c.vision;
        CHECKF(vc->n_embd == jint(v, "n_embd") && vc->n_ff == jint(v, "n_ff") &&
                   vc->n_layer == jint(v, "n_layer") &&
                   vc->n_global_layer == jint(v, "n_global_layer") &&
                   vc->n_head == jint(v, "n_head") && vc->image_size == jint(v, "image_size") &&
                   vc->patch_size == jint(v, "patch_size") && vc->max_tiles == jint(v, "max_tiles") &&
                   vc->output_dim == jint(v, "output_dim") &&
                   vc->norm_eps == (float)jnum(v, "norm_eps"),
               "%s: vision dims", name);
        const json_t *il = json_object_get(v, "intermediate_layers"), *ar = json_object_get(v, "aspect_ratios");
        CHECK(vc->n_intermediate == (int)json_array_size(il));
        for (int i = 0; i < vc->n_intermediate && i < (int)json_array_size(il); i++)
            CHECK(vc->intermediate[i] == json_integer_value(json_array_get(il, (size_t)i)));
        CHECK(vc->n_aspect == (int)json_array_size(ar));
        for (int i = 0; i < vc->n_aspect && i < (int)json_array_size(ar); i++) {
            const json_t *pr = json_array_get(ar, (size_t)i);
            CHECK(vc->aspect[i][0] == json_integer_value(json_array_get(pr, 0)) &&
                  vc->aspect[i][1] == json_integer_value(json_array_get(pr, 1)));
        }
        CHECKF(mlm_config_n_params(&c) == jint(e, "n_params_text"), "%s: %lld text params vs %lld",
               name, (long long)mlm_config_n_params(&c), (long long)jint(e, "n_params_text"));
        n++;
    }
    CHECK(n >= 1);
    json_decref(root);
    /* bad vision fields name the field */
    static const struct {
        const char *json, *want;
    } bad[] = {
        {"{\"architectures\":[\"MllamaForConditionalGeneration\"],\"text_config\":{}}", "vision_config"},
        {"{\"architectures\":[\"MllamaForConditionalGeneration\"],\"image_token_index\":9,"
         "\"text_config\":{\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
         "\"intermediate_size\":128,\"vocab_size\":16,\"rms_norm_eps\":1e-5,"
         "\"cross_attention_layers\":[1,5]},\"vision_config\":{}}", "cross_attention_layers"},
        {"{\"architectures\":[\"MllamaForConditionalGeneration\"],\"image_token_index\":9,"
         "\"text_config\":{\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
         "\"intermediate_size\":128,\"vocab_size\":16,\"rms_norm_eps\":1e-5,"
         "\"cross_attention_layers\":[1]},\"vision_config\":{\"hidden_size\":32,"
         "\"intermediate_size\":64,\"num_hidden_layers\":2,\"num_global_layers\":1,"
         "\"attention_heads\":2,\"image_size\":30,\"patch_size\":14,\"max_num_tiles\":4,"
         "\"vision_output_dim\":64,\"intermediate_layers_indices\":[1],"
         "\"supported_aspect_ratios\":[[1,1]]}}", "image_size 30 is not a multiple of patch_size"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char dir[128], path[160];
        CHECK(harness_tmpdir(dir, sizeof dir, "mllama") == 0);
        snprintf(path, sizeof path, "%s/config.json", dir);
        FILE *f = fopen(path, "w");
        if (!f) continue;
        fputs(bad[i].json, f);
        fclose(f);
        mlm_config c;
        mlm_error err = {0};
        CHECK(mlm_config_load(dir, &c, &err) == MLM_ERR_FORMAT);
        CHECKF(strstr(err.msg, bad[i].want) != NULL, "case %zu: %s", i, err.msg);
    }
}

/* Meta's params.json (FFN size by Meta's formula) must agree with HF's config.json for the
 * same architecture: Llama 3 8B/70B have the 3.1 shapes. */
TEST(meta_params_agree_with_hf_config) {
    const char *pairs[][2] = {{"Meta-Llama-3-8B-Instruct", "Llama-3.1-8B-Instruct"},
                              {"Meta-Llama-3-70B-Instruct", "Llama-3.1-70B-Instruct"}};
    for (int i = 0; i < 2; i++) {
        char a[256], b[256];
        snprintf(a, sizeof a, CFG "%s", pairs[i][0]);
        snprintf(b, sizeof b, CFG "%s", pairs[i][1]);
        mlm_config m, h;
        mlm_error err;
        CHECK_OK(mlm_config_load(a, &m, &err), &err);
        CHECK_OK(mlm_config_load(b, &h, &err), &err);
        CHECK(!strcmp(m.source, "params.json") && !strcmp(h.source, "config.json"));
        CHECKF(m.n_ff == h.n_ff, "%s: n_ff %d vs %d", pairs[i][0], m.n_ff, h.n_ff);
        CHECK(m.n_embd == h.n_embd && m.n_layer == h.n_layer && m.n_head == h.n_head &&
              m.n_kv_head == h.n_kv_head && m.head_dim == h.head_dim && m.n_vocab == h.n_vocab);
        CHECK(m.norm_eps == h.norm_eps && m.rope_theta == h.rope_theta);
        CHECK(m.family == MLM_FAMILY_LLAMA3 && m.rope_type == MLM_ROPE_NONE); /* Llama 3.0 */
    }
}

static void write_tmp(const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    harness_write_file(path, text, strlen(text));
}

static void expect_bad(const char *json, mlm_status want, const char *needle) {
    write_tmp("config.json", json);
    mlm_config c;
    mlm_error err = {0};
    mlm_status st = mlm_config_load(tmpdir, &c, &err);
    CHECKF(st == want, "got %s: %s", mlm_status_str(st), err.msg);
    CHECKF(strstr(err.msg, needle) && strstr(err.msg, "config.json"), "message '%s' lacks '%s'",
           err.msg, needle);
}

#define BASE "\"architectures\":[\"LlamaForCausalLM\"],\"num_hidden_layers\":2,"                \
             "\"num_attention_heads\":4,\"intermediate_size\":64,\"vocab_size\":100,"            \
             "\"rms_norm_eps\":1e-5"

TEST(bad_configs_name_the_field) {
    mlm_config c;
    mlm_error err;
    write_tmp("config.json", "{" BASE ",\"hidden_size\":32}");
    CHECK_OK(mlm_config_load(tmpdir, &c, &err), &err);
    expect_bad("{" BASE "}", MLM_ERR_FORMAT, "missing field 'hidden_size'");
    expect_bad("{" BASE ",\"hidden_size\":\"32\"}", MLM_ERR_FORMAT,
               "field 'hidden_size' must be an integer");
    expect_bad("{" BASE ",\"hidden_size\":-32}", MLM_ERR_FORMAT, "'hidden_size' = -32");
    expect_bad("{" BASE ",\"hidden_size\":32,\"num_key_value_heads\":3}", MLM_ERR_FORMAT,
               "not a multiple");
    expect_bad("{" BASE ",\"hidden_size\":32,\"rope_scaling\":{\"rope_type\":\"yarn\"}}",
               MLM_ERR_UNSUPPORTED, "rope_type 'yarn'");
    expect_bad("{" BASE ",\"hidden_size\":32,\"rope_scaling\":{\"rope_type\":\"llama3\"}}",
               MLM_ERR_FORMAT, "missing field 'factor'");
    expect_bad("{" BASE ",\"hidden_size\":32,\"eos_token_id\":[1,\"x\"]}", MLM_ERR_FORMAT,
               "eos_token_id");
    expect_bad("{" BASE ",\"hidden_size\":32,\"eos_token_id\":1000}", MLM_ERR_FORMAT,
               "outside the vocab");
    expect_bad("{\"architectures\":[\"GPT2LMHeadModel\"]}", MLM_ERR_UNSUPPORTED,
               "GPT2LMHeadModel");
    /* Qwen: a configured window unused is ignored (transformers ignores it); one in use is
     * refused, since every layer here attends to the whole context */
#define QWEN2 "\"architectures\":[\"Qwen2ForCausalLM\"],\"hidden_size\":32,\"num_hidden_layers\":2," \
              "\"num_attention_heads\":4,\"intermediate_size\":64,\"vocab_size\":100,"              \
              "\"rms_norm_eps\":1e-6,\"sliding_window\":4096"
    write_tmp("config.json", "{" QWEN2 ",\"use_sliding_window\":false}");
    CHECK_OK(mlm_config_load(tmpdir, &c, &err), &err);
    CHECK(c.family == MLM_FAMILY_QWEN2 && c.qkv_bias && !c.qk_norm);
    expect_bad("{" QWEN2 ",\"use_sliding_window\":true}", MLM_ERR_UNSUPPORTED,
               "use_sliding_window");
#undef QWEN2
    expect_bad("{\"hidden_size\": 32,", MLM_ERR_FORMAT, "invalid JSON");
    expect_bad("[1, 2]", MLM_ERR_FORMAT, "must be a JSON object");
    /* generation_config.json is checked too */
    write_tmp("config.json", "{" BASE ",\"hidden_size\":32}");
    write_tmp("generation_config.json", "{\"eos_token_id\": \"2\"}");
    mlm_status st = mlm_config_load(tmpdir, &c, &err);
    CHECK(st == MLM_ERR_FORMAT && strstr(err.msg, "generation_config.json") &&
          strstr(err.msg, "eos_token_id"));
    char gen[512];
    snprintf(gen, sizeof gen, "%s/generation_config.json", tmpdir);
    unlink(gen);
    /* Meta params.json */
    char cfg[512];
    snprintf(cfg, sizeof cfg, "%s/config.json", tmpdir);
    unlink(cfg);
    write_tmp("params.json", "{\"dim\": 64, \"n_layers\": 2, \"vocab_size\": 10}");
    st = mlm_config_load(tmpdir, &c, &err);
    CHECK(st == MLM_ERR_FORMAT && strstr(err.msg, "params.json") && strstr(err.msg, "n_heads"));
    char params[512];
    snprintf(params, sizeof params, "%s/params.json", tmpdir);
    unlink(params);
    st = mlm_config_load(tmpdir, &c, &err);
    CHECK(st == MLM_ERR_IO && strstr(err.msg, "no config.json or params.json"));
}

int main(void) {
    if (harness_tmpdir(tmpdir, sizeof tmpdir, "config") != 0) return 1;
    RUN(hf_configs_match_transformers);
    RUN(meta_params_agree_with_hf_config);
    RUN(mllama_config_matches_transformers);
    RUN(bad_configs_name_the_field);
    harness_rmtree(tmpdir);
    return HARNESS_END();
}
