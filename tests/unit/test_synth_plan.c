/* tests/unit/test_synth_plan.c: the presets of mlm_synth through their plans, without writing
 * gigabytes: the real presets' names, shapes, parameter and shard counts and their embedded
 * configs against the real files in tests/data/configs, phi-4's, plans with fewer layers, and
 * the argument errors; the command's help and refusals run through $MESHLM (default
 * build/meshlm). The vision preset is test_synth_mllama's; what gets written and read back,
 * test_synth_write's. */
#include <jansson.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "format/writer_safetensors.h"
#include "harness.h"
#include "helpers.h"
#include "meshlm.h"
#include "config/config.h"
#include "synth/synth.h"

static const char *meshlm;

// ---- presets and plans ----

TEST(presets_and_argument_errors) {
    CHECK(!strcmp(mlm_synth_presets(), "llama-3.2-1b llama-3.2-3b llama-3.1-8b llama-3.1-70b "
                                       "llama-3.2-11b-vision phi-4 qwen3-0.6b qwen3-1.7b qwen3-4b "
                                       "qwen3-8b qwen3-14b qwen3-32b qwen2.5-0.5b "
                                       "qwen2.5-1.5b-instruct qwen2.5-3b qwen2.5-7b qwen2.5-14b "
                                       "qwen2.5-32b qwen2.5-72b-instruct"));
    mlm_synth_params p = mlm_synth_default_params();
    CHECK(p.format == MLM_SYNTH_HF && p.dtype == MLM_DTYPE_BF16 &&
          p.max_shard_bytes == 5000000000LL);
    mlm_error err = {0};
    int64_t total;
    p.out_dir = "/nonexistent-meshlm-dir";
    p.preset = "llama-9b";
    CHECK(mlm_synth_total_bytes(&p, &total, &err) == MLM_ERR_INVALID_ARG);
    CHECKF(strstr(err.msg, "llama-9b") && strstr(err.msg, "llama-3.2-1b"), "%s", err.msg);
    p.preset = "tiny-test";
    p.format = 7;
    CHECK(mlm_synth(&p, &err) == MLM_ERR_INVALID_ARG && strstr(err.msg, "format"));
    p.format = MLM_SYNTH_META;
    p.dtype = MLM_DTYPE_F16;
    CHECK(mlm_synth(&p, &err) == MLM_ERR_INVALID_ARG && strstr(err.msg, "f16"));
    p.dtype = MLM_DTYPE_BF16;
    p.tokenizer = "/nonexistent/tokenizer.model";
    CHECK(mlm_synth(&p, &err) == MLM_ERR_IO && strstr(err.msg, "/nonexistent/tokenizer.model"));
    p.tokenizer = NULL;
    p.out_dir = NULL;
    CHECK(mlm_synth(&p, &err) == MLM_ERR_INVALID_ARG);
    struct stat sb;
    CHECK(stat("/nonexistent-meshlm-dir", &sb) != 0); /* failed calls create nothing */
}

/* The embedded configs are the real files: JSON-equal to tests/data/configs (the 3B base
 * config is the 3B-Instruct one with eos 128001), and the Meta params give the same dims. */
TEST(real_configs_match_the_files) {
    static const struct {
        const char *preset, *config, *generation;
    } real[] = {
        {"llama-3.2-1b", "Llama-3.2-1B/config.json", "Llama-3.2-1B/generation_config.json"},
        {"llama-3.2-3b", "Llama-3.2-3B-Instruct/config.json",
         "Llama-3.2-1B/generation_config.json"},
        {"llama-3.1-8b", "Llama-3.1-8B/config.json", "Llama-3.1-8B/generation_config.json"},
        {"llama-3.1-70b", "Llama-3.1-70B-Instruct/config.json", NULL},
    };
    for (int i = 0; i < 4; i++) {
        mlm_synth_params p = mlm_synth_default_params();
        p.preset = real[i].preset;
        mlm_synth_plan hf, meta;
        mlm_error err = {0};
        CHECK_OK(mlm_synth_plan_make(&p, &hf, &err), &err);
        p.format = MLM_SYNTH_META;
        CHECK_OK(mlm_synth_plan_make(&p, &meta, &err), &err);
        char path[256];
        snprintf(path, sizeof path, "tests/data/configs/%s", real[i].config);
        json_error_t je;
        json_t *want = json_load_file(path, 0, &je), *got = json_loads(hf.config_json, 0, &je);
        CHECKF(want && got, "%s: %s", path, je.text);
        if (i == 1) json_object_set_new(want, "eos_token_id", json_integer(128001));
        CHECKF(json_equal(want, got), "%s: embedded config.json differs from %s", real[i].preset,
               path);
        json_decref(want);
        json_decref(got);
        got = json_loads(hf.generation_json, 0, &je);
        CHECK(got != NULL);
        if (real[i].generation) {
            snprintf(path, sizeof path, "tests/data/configs/%s", real[i].generation);
            want = json_load_file(path, 0, &je);
            CHECKF(json_equal(want, got), "%s: generation_config.json differs from %s",
                   real[i].preset, path);
            json_decref(want);
        } else {
            CHECK(json_integer_value(json_object_get(got, "bos_token_id")) == 128000 &&
                  json_array_size(json_object_get(got, "eos_token_id")) == 3);
        }
        json_decref(got);
        /* params.json gives the model HF's config describes */
        const mlm_config *a = &hf.cfg;
        mlm_config b;
        got = json_loads(meta.params_json, 0, &je);
        CHECK_OK(mlm_config_from_json("params.json", got, &b, &err), &err);
        json_decref(got);
        CHECKF(a->n_embd == b.n_embd && a->n_layer == b.n_layer && a->n_head == b.n_head &&
                   a->n_kv_head == b.n_kv_head && a->head_dim == b.head_dim && a->n_ff == b.n_ff &&
                   a->n_vocab == b.n_vocab && a->norm_eps == b.norm_eps &&
                   a->rope_theta == b.rope_theta && a->rope_factor == b.rope_factor,
               "%s: params.json and config.json describe different models", real[i].preset);
        mlm_synth_plan_free(&hf);
        mlm_synth_plan_free(&meta);
    }
}

/* Names, shapes, parameter counts and shard counts of the real presets, from their plans. */
TEST(real_preset_plans) {
    static const struct {
        const char *preset;
        int64_t n_params; /* models.md 1.3 */
        int hf_shards;    /* as the HF repos publish them with 5 GB shards */
        int meta_files;
    } real[] = {
        {"llama-3.2-1b", 1235814400LL, 1, 1},
        {"llama-3.2-3b", 3212749824LL, 2, 1},
        {"llama-3.1-8b", 8030261248LL, 4, 1},
        {"llama-3.1-70b", 70553706496LL, 30, 8},
    };
    for (int i = 0; i < 4; i++) {
        for (int fmt = 0; fmt < 2; fmt++) {
            mlm_synth_params p = mlm_synth_default_params();
            p.preset = real[i].preset;
            p.format = fmt;
            p.out_dir = "/nonexistent-meshlm-dir";
            mlm_synth_plan pl;
            mlm_error err = {0};
            CHECK_OK(mlm_synth_plan_make(&p, &pl, &err), &err);
            const mlm_config *c = &pl.cfg;
            int64_t numel = 0, embed_rows = 0;
            for (int64_t k = 0; k < pl.n_tensors; k++) {
                const mlm_synth_tensor *t = &pl.tensors[k];
                numel += t->shape[0] * (t->n_dim == 2 ? t->shape[1] : 1);
                if (strstr(t->name, "embed") || strstr(t->name, "tok_embeddings"))
                    embed_rows += t->shape[0];
            }
            CHECK(embed_rows == c->n_vocab);
            if (fmt == MLM_SYNTH_HF) {
                CHECKF(numel == real[i].n_params, "%s: %lld params", p.preset, (long long)numel);
                CHECK(numel == mlm_config_n_params(c));
                CHECK(pl.n_tensors == 9 * c->n_layer + 2 + !c->tied_embeddings);
                /* HF shard count with the default 5 GB limit, like the published repos */
                mlm_tensor_spec *specs = calloc((size_t)pl.n_tensors, sizeof *specs);
                for (int64_t k = 0; k < pl.n_tensors; k++) {
                    specs[k].name = pl.tensors[k].name;
                    specs[k].dtype = MLM_DTYPE_BF16;
                    specs[k].n_dim = pl.tensors[k].n_dim;
                    specs[k].shape[0] = pl.tensors[k].shape[0];
                    specs[k].shape[1] = pl.tensors[k].shape[1];
                }
                mlm_safetensors_writer *w;
                CHECK_OK(mlm_safetensors_writer_create("/nonexistent-meshlm-dir", "model", specs,
                                                       pl.n_tensors, MLM_HF_SHARD_BYTES, &w, &err),
                         &err);
                CHECKF(mlm_safetensors_writer_n_files(w) == real[i].hf_shards, "%s: %d shards",
                       p.preset, mlm_safetensors_writer_n_files(w));
                int64_t total;
                CHECK_OK(mlm_synth_total_bytes(&p, &total, &err), &err);
                /* bf16 weights + headers, index and the two configs (a few hundred KB) */
                CHECK(total > 2 * numel && total < 2 * numel + (1 << 20));
                CHECK((uint64_t)total > mlm_safetensors_writer_total_bytes(w));
                mlm_safetensors_writer_free(w);
                free(specs);
            } else {
                CHECK(pl.n_files == real[i].meta_files);
                /* Meta always has output.weight (a copy of the embedding when tied) */
                int64_t per_file = 9 * c->n_layer + 3;
                CHECK(pl.n_tensors == per_file * pl.n_files);
                int64_t extra = c->tied_embeddings ? (int64_t)c->n_vocab * c->n_embd : 0;
                int64_t norms = (int64_t)(2 * c->n_layer + 1) * c->n_embd * (pl.n_files - 1);
                CHECK(numel == real[i].n_params + extra + norms);
            }
            if (fmt == MLM_SYNTH_META && pl.n_files == 8) {
                /* models.md 7.1's per-shard shapes for the 70B */
                static const struct {
                    const char *name;
                    int64_t r, c;
                } want[] = {
                    {"tok_embeddings.weight", 16032, 8192},
                    {"layers.0.attention.wq.weight", 1024, 8192},
                    {"layers.0.attention.wk.weight", 128, 8192},
                    {"layers.0.attention.wv.weight", 128, 8192},
                    {"layers.0.attention.wo.weight", 8192, 1024},
                    {"layers.0.feed_forward.w1.weight", 3584, 8192},
                    {"layers.0.feed_forward.w3.weight", 3584, 8192},
                    {"layers.0.feed_forward.w2.weight", 8192, 3584},
                    {"layers.79.attention_norm.weight", 8192, 0},
                    {"norm.weight", 8192, 0},
                    {"output.weight", 16032, 8192},
                };
                for (int r = 0; r < 8; r++)
                    for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
                        int found = 0;
                        for (int64_t k = 0; k < pl.n_tensors; k++) {
                            const mlm_synth_tensor *t = &pl.tensors[k];
                            if (t->file != r || strcmp(t->name, want[w].name)) continue;
                            found = 1;
                            CHECKF(t->shape[0] == want[w].r &&
                                       (!want[w].c || t->shape[1] == want[w].c),
                                   "shard %d %s: [%lld, %lld]", r, t->name, (long long)t->shape[0],
                                   (long long)t->shape[1]);
                        }
                        CHECKF(found, "shard %d lacks %s", r, want[w].name);
                    }
                CHECK(!strcmp(pl.files[7], "consolidated.07.pth"));
            }
            mlm_synth_plan_free(&pl);
        }
    }
}

/* phi-4: the embedded config is microsoft/phi-4's config.json; generation_config.json
 * has models.md 5.1's ids; HF only; Phi-3 names and fused shapes (models.md 5.2). */
/* The Qwen presets: config.json byte for byte the file in tests/data/configs (QWEN_SOURCES.md
 * says where each came from), no generation_config.json, the family, the tensors (Qwen2's q/k/v
 * biases, Qwen3's q/k norms) and the parameter count computed from each config.json by
 * HF's shapes (a separate Python reckoning, which also gives the model cards' counts, e.g.
 * Qwen3-8B 8,190,735,360 and Qwen2.5-7B 7,615,616,512); no Meta format. */
TEST(qwen_presets) {
    static const struct {
        const char *preset, *dir;
        int64_t n_params;
    } q[] = {
        {"qwen3-0.6b", "Qwen3-0.6B", 596049920LL},     {"qwen3-1.7b", "Qwen3-1.7B", 1720574976LL},
        {"qwen3-8b", "Qwen3-8B", 8190735360LL},        {"qwen3-14b", "Qwen3-14B", 14768307200LL},
        {"qwen3-32b", "Qwen3-32B", 32762123264LL},     {"qwen2.5-0.5b", "Qwen2.5-0.5B", 494032768LL},
        {"qwen2.5-3b", "Qwen2.5-3B", 3085938688LL},    {"qwen2.5-7b", "Qwen2.5-7B", 7615616512LL},
        {"qwen2.5-14b", "Qwen2.5-14B", 14770033664LL}, {"qwen2.5-32b", "Qwen2.5-32B", 32763876352LL},
        {"qwen3-4b", "Qwen3-4B", 4022468096LL},
        {"qwen2.5-1.5b-instruct", "Qwen2.5-1.5B-Instruct", 1543714304LL},
        {"qwen2.5-72b-instruct", "Qwen2.5-72B-Instruct", 72706203648LL},
    };
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        mlm_synth_params p = mlm_synth_default_params();
        p.preset = q[i].preset;
        p.out_dir = "/nonexistent-meshlm-dir";
        mlm_synth_plan pl;
        mlm_error err = {0};
        CHECK_OK(mlm_synth_plan_make(&p, &pl, &err), &err);
        char path[256];
        snprintf(path, sizeof path, "tests/data/configs/%s/config.json", q[i].dir);
        size_t n;
        char *text = harness_read_file(path, &n);
        CHECKF(text && pl.config_json && strlen(pl.config_json) == n &&
                   !memcmp(text, pl.config_json, n),
               "%s: embedded config.json differs from %s", q[i].preset, path);
        free(text);
        CHECK(pl.generation_json == NULL);
        const mlm_config *c = &pl.cfg;
        int qwen3 = !strncmp(q[i].preset, "qwen3", 5);
        CHECK(c->family == (qwen3 ? MLM_FAMILY_QWEN3 : MLM_FAMILY_QWEN2) && c->qk_norm == qwen3 &&
              c->qkv_bias == !qwen3);
        int64_t numel = 0;
        int n_extra = 0;
        for (int64_t k = 0; k < pl.n_tensors; k++) {
            const mlm_synth_tensor *t = &pl.tensors[k];
            numel += t->shape[0] * (t->n_dim == 2 ? t->shape[1] : 1);
            n_extra += strstr(t->name, "_proj.bias") ||
                       (strstr(t->name, "self_attn.") && strstr(t->name, "_norm.weight"));
        }
        CHECKF(numel == q[i].n_params && numel == mlm_config_n_params(c), "%s: %lld params",
               q[i].preset, (long long)numel);
        CHECK(n_extra == (qwen3 ? 2 : 3) * c->n_layer);
        CHECK(pl.n_tensors == (9 + (qwen3 ? 2 : 3)) * c->n_layer + 2 + !c->tied_embeddings);
        mlm_synth_plan_free(&pl);
        p.format = MLM_SYNTH_META;
        CHECK(mlm_synth_plan_make(&p, &pl, &err) == MLM_ERR_INVALID_ARG);
        CHECKF(strstr(err.msg, "Qwen") && strstr(err.msg, "hf format"), "%s", err.msg);
    }
}

TEST(phi4_preset) {
    mlm_synth_params p = mlm_synth_default_params();
    p.preset = "phi-4";
    p.out_dir = "/nonexistent-meshlm-dir";
    mlm_synth_plan pl;
    mlm_error err = {0};
    CHECK_OK(mlm_synth_plan_make(&p, &pl, &err), &err);
    json_error_t je;
    json_t *want = json_load_file("tests/data/configs/phi-4/config.json", 0, &je),
           *got = json_loads(pl.config_json, 0, &je);
    CHECKF(want && got, "%s", je.text);
    CHECKF(json_equal(want, got), "phi-4: embedded config.json differs from the real file");
    json_decref(want);
    json_decref(got);
    got = json_loads(pl.generation_json, 0, &je);
    const json_t *eos = json_object_get(got, "eos_token_id");
    CHECK(json_integer_value(json_object_get(got, "bos_token_id")) == 100257 &&
          json_integer_value(json_object_get(got, "pad_token_id")) == 100349 &&
          json_array_size(eos) == 2 && json_integer_value(json_array_get(eos, 0)) == 100265 &&
          json_integer_value(json_array_get(eos, 1)) == 100257);
    json_decref(got);
    const mlm_config *c = &pl.cfg;
    CHECK(c->family == MLM_FAMILY_PHI3 && c->n_embd == 5120 && c->n_layer == 40 &&
          c->n_head == 40 && c->n_kv_head == 10 && c->head_dim == 128 && c->n_ff == 17920 &&
          c->n_vocab == 100352 && !c->tied_embeddings && c->rope_type == MLM_ROPE_NONE &&
          c->rope_theta == 250000.0f && c->pad_id == 100349);
    CHECK(pl.params_json == NULL && pl.n_files == 1);
    /* every tensor of models.md 5.2's table, in plan order: embedding, 6 per layer, norm,
     * lm_head */
    CHECK(pl.n_tensors == 6 * 40 + 3);
    static const struct {
        const char *name;
        int64_t r, c;
    } table[] = {
        {"model.embed_tokens.weight", 100352, 5120},
        {"model.layers.0.self_attn.qkv_proj.weight", 7680, 5120},
        {"model.layers.0.self_attn.o_proj.weight", 5120, 5120},
        {"model.layers.0.mlp.gate_up_proj.weight", 35840, 5120},
        {"model.layers.0.mlp.down_proj.weight", 5120, 17920},
        {"model.layers.0.input_layernorm.weight", 5120, 0},
        {"model.layers.0.post_attention_layernorm.weight", 5120, 0},
    };
    for (size_t k = 0; k < sizeof table / sizeof table[0] && pl.n_tensors > 7; k++) {
        const mlm_synth_tensor *t = &pl.tensors[k];
        CHECKF(!strcmp(t->name, table[k].name) && !strcmp(t->key, t->name) &&
                   t->n_dim == (table[k].c ? 2 : 1) && t->shape[0] == table[k].r &&
                   (!table[k].c || t->shape[1] == table[k].c) && t->qk_head_dim == 0,
               "tensor %zu: %s [%lld, %lld]", k, t->name, (long long)t->shape[0],
               (long long)t->shape[1]);
        /* std 1/sqrt(in_features); 0.02 for the embedding; norms 1 */
        double want_std = !table[k].c ? 0 : k == 0 ? 0.02 : 1 / sqrt((double)table[k].c);
        CHECKF(fabs(t->std - want_std) < 1e-7, "%s: std %g", t->name, t->std);
    }
    if (pl.n_tensors == 243) {
        CHECK(!strcmp(pl.tensors[240].name, "model.layers.39.post_attention_layernorm.weight"));
        CHECK(!strcmp(pl.tensors[241].name, "model.norm.weight") &&
              pl.tensors[241].shape[0] == 5120);
        CHECK(!strcmp(pl.tensors[242].name, "lm_head.weight") &&
              pl.tensors[242].shape[0] == 100352 && pl.tensors[242].shape[1] == 5120);
    }
    int64_t numel = 0;
    for (int64_t k = 0; k < pl.n_tensors; k++)
        numel += pl.tensors[k].shape[0] * (pl.tensors[k].n_dim == 2 ? pl.tensors[k].shape[1] : 1);
    CHECKF(numel == 14659507200LL, "phi-4: %lld params", (long long)numel); /* models.md 5.2 */
    CHECK(numel == mlm_config_n_params(c));
    int64_t total;
    CHECK_OK(mlm_synth_total_bytes(&p, &total, &err), &err);
    CHECK(total > 2 * numel && total < 2 * numel + (1 << 20));
    /* 5 GB shards: 6 files, as microsoft/phi-4 publishes model-0000K-of-00006.safetensors */
    mlm_tensor_spec *specs = calloc((size_t)pl.n_tensors, sizeof *specs);
    for (int64_t k = 0; specs && k < pl.n_tensors; k++)
        specs[k] = (mlm_tensor_spec){pl.tensors[k].name,
                                     MLM_DTYPE_BF16,
                                     pl.tensors[k].n_dim,
                                     {pl.tensors[k].shape[0], pl.tensors[k].shape[1]}};
    mlm_safetensors_writer *w = NULL;
    CHECK_OK(mlm_safetensors_writer_create("/nonexistent-meshlm-dir", "model", specs, pl.n_tensors,
                                           MLM_HF_SHARD_BYTES, &w, &err),
             &err);
    CHECKF(w && mlm_safetensors_writer_n_files(w) == 6, "phi-4: %d shards",
           w ? mlm_safetensors_writer_n_files(w) : -1);
    mlm_safetensors_writer_free(w);
    free(specs);
    mlm_synth_plan_free(&pl);
    /* Meta: refused, saying why */
    p.format = MLM_SYNTH_META;
    CHECK(mlm_synth_plan_make(&p, &pl, &err) == MLM_ERR_INVALID_ARG);
    CHECKF(strstr(err.msg, "phi-4") && strstr(err.msg, "Meta"), "%s", err.msg);
    CHECK(mlm_synth(&p, &err) == MLM_ERR_INVALID_ARG);
    struct stat sb;
    CHECK(stat("/nonexistent-meshlm-dir", &sb) != 0);
}

// ---- fewer layers ----

/* JSON text A equals B but for KEY, which A has as N. */
static int json_equal_but(const char *a, const char *b, const char *key, int n) {
    json_error_t je;
    json_t *x = json_loads(a, 0, &je), *y = json_loads(b, 0, &je);
    int eq = x && y && json_integer_value(json_object_get(x, key)) == n && json_object_get(y, key);
    if (eq) json_object_set(x, key, json_object_get(y, key));
    eq = eq && json_equal(x, y);
    json_decref(x);
    json_decref(y);
    return eq;
}

/* Plans with fewer layers: every shape the preset's, N layers, configs saying N; the bytes
 * are the full plan's less the layers left out. Refusals name the preset's count. */
TEST(fewer_layers_plans) {
    static const struct {
        const char *preset;
        int32_t keep, all;
    } cases[] = {{"llama-3.2-1b", 1, 16}, {"llama-3.1-70b", 2, 80}, {"phi-4", 3, 40}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int fmt = 0; fmt < (strcmp(cases[i].preset, "phi-4") ? 2 : 1); fmt++) {
            mlm_synth_params p = mlm_synth_default_params();
            p.preset = cases[i].preset;
            p.format = fmt;
            p.out_dir = "/nonexistent-meshlm-dir";
            mlm_synth_plan full, few;
            mlm_error err = {0};
            CHECK_OK(mlm_synth_plan_make(&p, &full, &err), &err);
            CHECK_OK(mlm_synth_plan_make_layers(&p, cases[i].keep, &few, &err), &err);
            if (!full.tensors || !few.tensors) continue;
            CHECK(full.cfg.n_layer == cases[i].all && few.cfg.n_layer == cases[i].keep);
            /* the same model but for n_layer */
            mlm_config a = full.cfg, b = few.cfg;
            a.n_layer = b.n_layer = 0;
            CHECKF(!memcmp(&a, &b, sizeof a), "%s: configs differ beyond n_layer", p.preset);
            CHECK(few.n_files == full.n_files);
            if (fmt == MLM_SYNTH_HF) {
                CHECKF(json_equal_but(few.config_json, full.config_json, "num_hidden_layers",
                                      cases[i].keep),
                       "%s: config.json:\n%s", p.preset, few.config_json);
                CHECK(few.generation_json == full.generation_json);
            } else {
                CHECKF(json_equal_but(few.params_json, full.params_json, "n_layers", cases[i].keep),
                       "%s: params.json: %s", p.preset, few.params_json);
            }
            /* the full plan's tensors in its order, less those of layers >= keep */
            int64_t k = 0, bad = 0;
            for (int64_t j = 0; j < full.n_tensors; j++) {
                const mlm_synth_tensor *t = &full.tensors[j];
                const char *l = strstr(t->name, "layers.");
                if (l && atoi(l + 7) >= cases[i].keep) continue;
                const mlm_synth_tensor *u = k < few.n_tensors ? &few.tensors[k] : NULL;
                if (!u || memcmp(t, u, sizeof *t)) bad++;
                k++;
            }
            CHECKF(bad == 0 && k == few.n_tensors, "%s: %lld of %lld tensors differ", p.preset,
                   (long long)bad, (long long)few.n_tensors);
            int64_t per_layer = 0, t_full, t_few, t_one;
            for (int64_t j = 0; j < full.n_tensors; j++)
                if (strstr(full.tensors[j].name, "layers.0.")) {
                    const mlm_synth_tensor *t = &full.tensors[j];
                    per_layer += 2 * t->shape[0] * (t->n_dim == 2 ? t->shape[1] : 1);
                }
            CHECK_OK(mlm_synth_total_bytes(&p, &t_full, &err), &err);
            CHECK_OK(mlm_synth_total_bytes_layers(&p, cases[i].keep, &t_few, &err), &err);
            CHECK_OK(mlm_synth_total_bytes_layers(&p, cases[i].all, &t_one, &err), &err);
            CHECK(t_one == t_full);
            /* headers shrink too: under 1 KB per tensor left out (Meta: zip entries, pickle) */
            int64_t cut = (cases[i].all - cases[i].keep) * per_layer,
                    slack = (full.n_tensors - few.n_tensors) * 1024;
            CHECKF(t_few < t_full - cut && t_few > t_full - cut - slack,
                   "%s: %lld bytes, full %lld, layers cut %lld", p.preset, (long long)t_few,
                   (long long)t_full, (long long)cut);
            /* out of range */
            CHECK(mlm_synth_total_bytes_layers(&p, cases[i].all + 1, &t_few, &err) ==
                  MLM_ERR_INVALID_ARG);
            char want[64];
            snprintf(want, sizeof want, "has %d layers", (int)cases[i].all);
            CHECKF(strstr(err.msg, want) && strstr(err.msg, p.preset), "%s", err.msg);
            mlm_synth_plan_free(&full);
            mlm_synth_plan_free(&few);
            CHECK(mlm_synth_plan_make_layers(&p, -1, &few, &err) == MLM_ERR_INVALID_ARG);
        }
    /* all layers: the embedded texts themselves */
    mlm_synth_params p = mlm_synth_default_params();
    p.preset = "llama-3.1-70b";
    p.format = MLM_SYNTH_META;
    mlm_synth_plan pl;
    mlm_error err = {0};
    CHECK_OK(mlm_synth_plan_make_layers(&p, 80, &pl, &err), &err);
    CHECK(pl.params_owned == NULL && strstr(pl.params_json, "\"n_layers\": 80,"));
    mlm_synth_plan_free(&pl);
}

// ---- the command ----

static char out[1 << 16];

#define EXPECT(args, code, needle) HARNESS_EXPECT_MESHLM(out, args, code, needle)

/* Every listed preset has a tokenizer source whose path is in this tree (a file, or a
 * directory holding the file it names); the Qwen families take their own stand-ins. */
TEST(preset_tokenizers) {
    char list[1024];
    snprintf(list, sizeof list, "%s", mlm_synth_presets());
    int n = 0;
    for (char *save = NULL, *name = strtok_r(list, " ", &save); name;
         name = strtok_r(NULL, " ", &save), n++) {
        mlm_synth_tokenizer t;
        CHECKF(mlm_synth_preset_tokenizer(name, &t), "%s: no tokenizer source", name);
        char path[512];
        snprintf(path, sizeof path, "%s%s%s", t.rel, t.need ? "/" : "", t.need ? t.need : "");
        CHECKF(access(path, R_OK) == 0, "%s: %s is missing", name, path);
    }
    CHECK(n == 19);
    mlm_synth_tokenizer t;
    CHECK(mlm_synth_preset_tokenizer("qwen3-8b", &t) && !strcmp(t.env, "MESHLM_QWEN_TOKENIZER") &&
          strstr(t.rel, "qwen/chat/qwen3"));
    CHECK(mlm_synth_preset_tokenizer("qwen2.5-7b", &t) && strstr(t.rel, "qwen/chat/qwen2.5"));
    CHECK(mlm_synth_preset_tokenizer("llama-3.1-8b", &t) && t.need == NULL);
    CHECK(!mlm_synth_preset_tokenizer("no-such-preset", &t) && !mlm_synth_preset_tokenizer(NULL, &t));
}

/* tests/data/configs/NAME/config.json copied into DIR; 0 when it cannot be. */
static int copy_config(const char *name, const char *dir) {
    char path[400];
    snprintf(path, sizeof path, "tests/data/configs/%s/config.json", name);
    size_t n;
    char *text = harness_read_file(path, &n);
    snprintf(path, sizeof path, "%s/config.json", dir);
    int ok = text && harness_write_file(path, text, n) == 0;
    free(text);
    return ok;
}

/* `meshlm plan` answers from a Qwen folder's config.json alone, for every size the presets
 * have: each profile gets a row; Qwen2.5-0.5B's 2 KV heads take TP 2, not TP 4. */
TEST(plan_answers_for_qwen) {
    static const char *dirs[] = {"Qwen3-0.6B",   "Qwen3-1.7B",  "Qwen3-4B",   "Qwen3-8B",
                                 "Qwen3-14B",    "Qwen3-32B",   "Qwen2.5-0.5B",
                                 "Qwen2.5-1.5B-Instruct",       "Qwen2.5-3B", "Qwen2.5-7B",
                                 "Qwen2.5-14B",  "Qwen2.5-72B-Instruct",      "Qwen2.5-32B"};
    char tmp[128], args[512];
    CHECK(harness_tmpdir(tmp, sizeof tmp, "plan") == 0);
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        CHECK(copy_config(dirs[i], tmp));
        snprintf(args, sizeof args, "plan -m %s", tmp);
        EXPECT(args, 0, "bf16");
        CHECKF(strstr(out, dirs[i][4] == '3' ? "qwen3," : "qwen2,") && strstr(out, "performance"),
               "%s: %s", dirs[i], out);
    }
    /* the last folder is Qwen2.5-32B (8 KV heads): TP 8 */
    snprintf(args, sizeof args, "plan -m %s --tp 8", tmp);
    EXPECT(args, 0, "TP 8 x DP 1");
    CHECK(copy_config("Qwen2.5-0.5B", tmp));
    snprintf(args, sizeof args, "plan -m %s --tp 4", tmp);
    EXPECT(args, 1, "does not divide the model's 2 KV heads");
    snprintf(args, sizeof args, "plan -m %s --tp 2", tmp);
    EXPECT(args, 0, "TP 2 x DP 1");
    harness_rmtree(tmp);
}

TEST(command_help_and_refusals) {
    if (access(meshlm, X_OK) != 0) SKIP("%s is not built", meshlm);
    EXPECT("--help", 0, "synth");
    EXPECT("synth --help", 0, "usage: meshlm synth");
    const char *flags[] = {"--preset",
                           "--out",
                           "--format",
                           "--dtype",
                           "--seed",
                           "--force",
                           "--help",
                           "llama-3.2-1b",
                           "llama-3.1-70b",
                           "MESHLM_TOKENIZER",
                           "phi-4",
                           "(29.3 GB; 0.68 GB a layer)",
                           "MESHLM_PHI4_TOKENIZER",
                           "tests/data/tokenizer/phi4/",
                           "--layers N",
                           "--layers 2: 7.6 GB",
                           "llama-3.2-11b-vision (21.3 GB; 0.44 GB a layer)",
                           "cross-attention layer, 6.1 GB",
                           "consolidated.pth",
                           "preprocessor_config.json"};
    for (int i = 0; i < 20; i++)
        CHECKF(strstr(out, flags[i]), "synth --help lacks %s", flags[i]);
    EXPECT("synth --out /tmp/x", 2, "--preset NAME is required");
    EXPECT("synth --preset llama-3.2-1b", 2, "--out DIR is required");
    EXPECT("synth --preset llama-9b --out /tmp/x", 2, "unknown preset 'llama-9b'");
    EXPECT("synth --preset tiny-test --out /tmp/x", 2, "unknown preset 'tiny-test'");
    EXPECT("synth --preset tiny-phi3 --out /tmp/x", 2, "unknown preset 'tiny-phi3'");
    EXPECT("synth --preset phi-4 --out /nonexistent-meshlm-dir --format meta", 2,
           "'phi-4' has no Meta format");
    EXPECT("synth --preset llama-3.2-1b --out /tmp/x --format gguf", 2, "hf or meta");
    EXPECT("synth --preset llama-3.2-1b --out /tmp/x --dtype f16", 2, "bf16 or f32");
    EXPECT("synth --preset llama-3.2-1b --out /tmp/x --seed -1", 2, "--seed");
    EXPECT("synth --preset llama-3.2-1b --out /tmp/x --frob", 2, "unknown option '--frob'");
    EXPECT("synth --preset llama-3.2-1b --out /tmp/x --layers 0", 2, "--layers needs an integer");
    EXPECT("synth --preset llama-3.2-1b --out /tmp/x --layers two", 2, "--layers");
    EXPECT("synth --preset llama-3.2-1b --out /nonexistent-meshlm-dir --layers 17", 2,
           "'llama-3.2-1b' has 16 layers, so 17 of them cannot be kept");
    EXPECT("synth --preset llama-3.2-11b-vision --out /nonexistent-meshlm-dir --format meta "
           "--layers 4",
           2, "cannot be written in the Meta format");
    CHECK(strstr(out, "5, 10, 15, 20, 25, 30, 35, 40"));
    EXPECT("synth --preset tiny-mllama --out /tmp/x", 2, "unknown preset 'tiny-mllama'");
    char dir[128], args[600], file[300];
    CHECK(harness_tmpdir(dir, sizeof dir, "synth") == 0);
    snprintf(file, sizeof file, "%s/file", dir);
    harness_write_file(file, "x", 1);
    snprintf(args, sizeof args, "synth --preset llama-3.2-1b --out %s", dir);
    EXPECT(args, 1, "is not empty");
    CHECK(strstr(out, "--force") && strstr(out, dir));
    snprintf(args, sizeof args, "synth --preset llama-3.2-1b --out %s", file);
    EXPECT(args, 1, "not a directory");
    /* The free-space check: the 70B (141 GB) is refused wherever it does not fit. */
    struct statvfs vs;
    int64_t total = 0;
    mlm_synth_params p = mlm_synth_default_params();
    p.preset = "llama-3.1-70b";
    p.out_dir = dir;
    mlm_synth_total_bytes(&p, &total, NULL);
    if (statvfs(dir, &vs) == 0 && (int64_t)vs.f_bavail * (int64_t)vs.f_frsize < total) {
        snprintf(args, sizeof args, "synth --preset llama-3.1-70b --out %s/big --force", dir);
        EXPECT(args, 1, "not enough free space");
        CHECK(strstr(out, "141") && strstr(out, "MB"));
        CHECK(helper_count_entries(dir, NULL) == 1);
    } else {
        printf("  note: %s has room for the 70B; the free-space refusal was not exercised\n", dir);
    }
    harness_rmtree(dir);
}

int main(void) {
    meshlm = getenv("MESHLM") ? getenv("MESHLM") : "build/meshlm";
    RUN(presets_and_argument_errors);
    RUN(real_configs_match_the_files);
    RUN(real_preset_plans);
    RUN(qwen_presets);
    RUN(plan_answers_for_qwen);
    RUN(preset_tokenizers);
    RUN(phi4_preset);
    RUN(fewer_layers_plans);
    RUN(command_help_and_refusals);
    return HARNESS_END();
}
