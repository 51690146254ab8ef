/* tests/unit/test_synth.c: synthetic checkpoints (mlm_synth) and the writers under them.
 * The hidden test presets keep runs small: each output is written, read back with the
 * checkpoint and config readers, and checked for names, shapes and dtypes against the
 * written config, for value statistics, determinism, HF/Meta equivalence (shards merged,
 * q/k rows permuted as transformers' converter does), atomic writes and sharding. The real
 * presets are checked through their plans (names, shapes, sizes) and their embedded configs
 * against the real files in tests/data/configs, without writing gigabytes. The command's
 * refusals run through $MESHLM (default build/meshlm). */
#include <dirent.h>
#include <jansson.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "format/writer_pytorch.h"
#include "format/writer_safetensors.h"
#include "harness.h"
#include "meshlm.h"
#include "config/config.h"
#include "synth/synth.h"
#include "tensor/dtype.h"

static const char *meshlm;
static const char *TOKENIZER = "tests/data/tokenizer/llama3/tokenizer.model";

// ---- helpers ----

/* Number of directory entries other than . and .., and whether any is a temporary file. */
static int count_entries(const char *dir, int *temps) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    if (temps) *temps = 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        n++;
        if (temps && strstr(e->d_name, ".tmp-")) (*temps)++;
    }
    closedir(d);
    return n;
}

static mlm_status synth(const char *preset, const char *dir, int format, mlm_dtype dtype,
                        uint64_t seed, int64_t max_shard, mlm_error *err) {
    mlm_synth_params p = mlm_synth_default_params();
    p.preset = preset;
    p.out_dir = dir;
    p.format = format;
    p.dtype = dtype;
    p.seed = seed;
    p.max_shard_bytes = max_shard;
    return mlm_synth(&p, err);
}

static float *read_f32(const mlm_tensor_view *t) {
    int64_t n = mlm_tensor_numel(t);
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    mlm_error err;
    if (v && mlm_tensor_to_f32(t, v, n, &err) != MLM_OK) {
        free(v);
        v = NULL;
    }
    return v;
}

static int files_equal(const char *a, const char *b) {
    size_t la = 0, lb = 0;
    char *x = harness_read_file(a, &la), *y = harness_read_file(b, &lb);
    int eq = x && y && la == lb && !memcmp(x, y, la);
    free(x);
    free(y);
    return eq;
}

/* The Llama tensors the config implies, checked against the checkpoint: every one present
 * with its shape and dtype, nothing else. PREFIX is "" or "shard<N>/"; MP splits as 7.1. */
static void check_llama_tensors(const mlm_checkpoint *c, const mlm_config *cfg, int meta, int mp,
                                mlm_dtype dtype) {
    int64_t d = cfg->n_embd, q = (int64_t)cfg->n_head * cfg->head_dim,
            kv = (int64_t)cfg->n_kv_head * cfg->head_dim, f = cfg->n_ff, v = cfg->n_vocab;
    struct {
        const char *hf, *meta;
        int64_t rows, cols;
        int split;
    } layer[9] = {
        {"self_attn.q_proj.weight", "attention.wq.weight", q, d, 1},
        {"self_attn.k_proj.weight", "attention.wk.weight", kv, d, 1},
        {"self_attn.v_proj.weight", "attention.wv.weight", kv, d, 1},
        {"self_attn.o_proj.weight", "attention.wo.weight", d, q, 2},
        {"mlp.gate_proj.weight", "feed_forward.w1.weight", f, d, 1},
        {"mlp.up_proj.weight", "feed_forward.w3.weight", f, d, 1},
        {"mlp.down_proj.weight", "feed_forward.w2.weight", d, f, 2},
        {"input_layernorm.weight", "attention_norm.weight", d, 0, 0},
        {"post_attention_layernorm.weight", "ffn_norm.weight", d, 0, 0},
    };
    int64_t expected = 0;
    int shards = meta ? mp : 1;
    for (int r = 0; r < shards; r++) {
        char prefix[32] = "";
        if (meta && mp > 1) snprintf(prefix, sizeof prefix, "shard%d/", r);
        for (int i = -1; i <= cfg->n_layer; i++) {
            int n = i < 0 || i == cfg->n_layer ? 2 : 9;
            for (int k = 0; k < n; k++) {
                char name[160];
                int64_t rows, cols;
                int split;
                if (i < 0) { /* embedding, LM head */
                    if (k == 1 && cfg->tied_embeddings && !meta) continue;
                    snprintf(name, sizeof name, "%s%s", prefix,
                             k == 0 ? (meta ? "tok_embeddings.weight" : "model.embed_tokens.weight")
                                    : (meta ? "output.weight" : "lm_head.weight"));
                    rows = v, cols = d, split = 1;
                } else if (i == cfg->n_layer) {
                    if (k == 1) continue;
                    snprintf(name, sizeof name, "%s%s", prefix,
                             meta ? "norm.weight" : "model.norm.weight");
                    rows = d, cols = 0, split = 0;
                } else {
                    if (meta)
                        snprintf(name, sizeof name, "%slayers.%d.%s", prefix, i, layer[k].meta);
                    else
                        snprintf(name, sizeof name, "model.layers.%d.%s", i, layer[k].hf);
                    rows = layer[k].rows, cols = layer[k].cols, split = layer[k].split;
                }
                if (meta && mp > 1 && split == 1) rows /= mp;
                if (meta && mp > 1 && split == 2) cols /= mp;
                expected++;
                const mlm_tensor_view *t = mlm_checkpoint_find(c, name);
                CHECKF(t != NULL, "tensor %s missing", name);
                if (!t) continue;
                CHECKF(t->dtype == dtype, "%s: dtype %s", name, mlm_dtype_name(t->dtype));
                CHECKF(t->n_dim == (cols ? 2 : 1) && t->shape[0] == rows &&
                           (!cols || t->shape[1] == cols),
                       "%s: shape [%lld, %lld], want [%lld, %lld]", name, (long long)t->shape[0],
                       (long long)(t->n_dim > 1 ? t->shape[1] : 0), (long long)rows,
                       (long long)cols);
            }
        }
    }
    CHECKF(mlm_checkpoint_n_tensors(c) == expected, "%lld tensors, want %lld",
           (long long)mlm_checkpoint_n_tensors(c), (long long)expected);
}

/* The Phi-3 tensors the config implies (models.md 5.2, HF names; fused qkv_proj rows
 * q | k | v and gate_up_proj rows gate | up), checked against the checkpoint: every one
 * present with its shape and dtype, nothing else. */
static void check_phi3_tensors(const mlm_checkpoint *c, const mlm_config *cfg, mlm_dtype dtype) {
    int64_t d = cfg->n_embd, q = (int64_t)cfg->n_head * cfg->head_dim,
            kv = (int64_t)cfg->n_kv_head * cfg->head_dim, f = cfg->n_ff, v = cfg->n_vocab;
    struct {
        const char *name;
        int64_t rows, cols;
    } layer[6] = {
        {"self_attn.qkv_proj.weight", q + 2 * kv, d},
        {"self_attn.o_proj.weight", d, q},
        {"mlp.gate_up_proj.weight", 2 * f, d},
        {"mlp.down_proj.weight", d, f},
        {"input_layernorm.weight", d, 0},
        {"post_attention_layernorm.weight", d, 0},
    };
    int64_t expected = 0;
    for (int i = -1; i <= cfg->n_layer; i++) {
        int n = i < 0 ? 3 : i == cfg->n_layer ? 0 : 6;
        for (int k = 0; k < n; k++) {
            char name[160];
            int64_t rows = d, cols = 0;
            if (i < 0) {
                static const char *top[3] = {"model.embed_tokens.weight", "lm_head.weight",
                                             "model.norm.weight"};
                snprintf(name, sizeof name, "%s", top[k]);
                if (k < 2) rows = v, cols = d;
            } else {
                snprintf(name, sizeof name, "model.layers.%d.%s", i, layer[k].name);
                rows = layer[k].rows, cols = layer[k].cols;
            }
            expected++;
            const mlm_tensor_view *t = mlm_checkpoint_find(c, name);
            CHECKF(t != NULL, "tensor %s missing", name);
            if (!t) continue;
            CHECKF(t->dtype == dtype, "%s: dtype %s", name, mlm_dtype_name(t->dtype));
            CHECKF(t->n_dim == (cols ? 2 : 1) && t->shape[0] == rows &&
                       (!cols || t->shape[1] == cols),
                   "%s: shape [%lld, %lld], want [%lld, %lld]", name, (long long)t->shape[0],
                   (long long)(t->n_dim > 1 ? t->shape[1] : 0), (long long)rows, (long long)cols);
        }
    }
    CHECKF(mlm_checkpoint_n_tensors(c) == expected, "%lld tensors, want %lld",
           (long long)mlm_checkpoint_n_tensors(c), (long long)expected);
}

/* Per-tensor statistics: norms exactly 1; others mean ~0 and std as designed. */
static void check_stats(const mlm_checkpoint *c) {
    for (int64_t i = 0; i < mlm_checkpoint_n_tensors(c); i++) {
        const mlm_tensor_view *t = mlm_checkpoint_tensor(c, i);
        int64_t n = mlm_tensor_numel(t);
        float *v = read_f32(t);
        CHECK(v != NULL);
        if (!v) continue;
        if (strstr(t->name, "norm")) {
            int ones = 1;
            for (int64_t k = 0; k < n; k++)
                ones &= v[k] == 1.0f;
            CHECKF(ones, "%s: not all ones", t->name);
        } else {
            double s = 0, ss = 0, mx = 0;
            for (int64_t k = 0; k < n; k++) {
                s += v[k];
                ss += (double)v[k] * v[k];
                if (fabs(v[k]) > mx) mx = fabs(v[k]);
            }
            double mean = s / (double)n, sd = sqrt(ss / (double)n - mean * mean);
            int emb = strstr(t->name, "embed") || strstr(t->name, "tok_emb") ||
                      (strstr(t->name, "output") && t->shape[0] == 192); /* tied copy (mp2) */
            /* in_features of the canonical tensor: shard widths of row-parallel pieces differ */
            int64_t fan_in = t->shape[1];
            if (strstr(t->name, "shard") && (strstr(t->name, ".wo.") || strstr(t->name, ".w2.")))
                fan_in *= 2;
            double want = emb ? 0.02 : 1 / sqrt((double)fan_in);
            /* sample std of n draws: relative error ~ sqrt(1.7 / n) / 2 (kurtosis 2.7) */
            double tol = 5 * sqrt(1.7 / (double)n) / 2;
            CHECKF(fabs(sd / want - 1) < tol, "%s: std %g, want %g (tol %.3f)", t->name, sd, want,
                   tol);
            CHECKF(fabs(mean) < 5 * want / sqrt((double)n), "%s: mean %g", t->name, mean);
            CHECKF(mx <= 3.47 * want * 1.01, "%s: |max| %g beyond the generator's bound", t->name,
                   mx);
        }
        free(v);
    }
}

// ---- presets and plans ----

TEST(presets_and_argument_errors) {
    CHECK(!strcmp(mlm_synth_presets(), "llama-3.2-1b llama-3.2-3b llama-3.1-8b llama-3.1-70b "
                                       "llama-3.2-11b-vision phi-4"));
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

/* tiny presets written with one layer of two: the config says 1, the checkpoint holds
 * exactly the tensors of a 1-layer model, bit-equal to those of the 2-layer write. */
TEST(fewer_layers_write_read_back) {
    char dir[128];
    CHECK(harness_tmpdir(dir, sizeof dir, "synth") == 0);
    const char *presets[2] = {"tiny-test", "tiny-test-mp2"};
    for (int pi = 0; pi < 2; pi++)
        for (int fmt = 0; fmt < 2; fmt++) {
            char one[256], two[256];
            snprintf(one, sizeof one, "%s/%s-%d-1", dir, presets[pi], fmt);
            snprintf(two, sizeof two, "%s/%s-%d-2", dir, presets[pi], fmt);
            mlm_synth_params p = mlm_synth_default_params();
            p.preset = presets[pi];
            p.format = fmt;
            p.seed = 9;
            p.out_dir = one;
            mlm_error err = {0};
            CHECK_OK(mlm_synth_layers(&p, 1, &err), &err);
            p.out_dir = two;
            CHECK_OK(mlm_synth(&p, &err), &err);
            mlm_config cfg;
            CHECK_OK(mlm_config_load(one, &cfg, &err), &err);
            CHECK(cfg.n_layer == 1 && cfg.n_embd == 64 && cfg.n_ff == 192 && cfg.n_vocab == 384);
            mlm_checkpoint *a = NULL, *b = NULL;
            CHECK_OK(mlm_checkpoint_open(one, &a, &err), &err);
            CHECK_OK(mlm_checkpoint_open(two, &b, &err), &err);
            if (!a || !b) continue;
            check_llama_tensors(a, &cfg, fmt, pi == 1 ? 2 : 1, MLM_DTYPE_BF16);
            int same = 1;
            for (int64_t i = 0; i < mlm_checkpoint_n_tensors(a); i++) {
                const mlm_tensor_view *t = mlm_checkpoint_tensor(a, i),
                                      *u = mlm_checkpoint_find(b, t->name);
                same &= u && mlm_tensor_nbytes(t) == mlm_tensor_nbytes(u) &&
                        !memcmp(t->data, u->data, (size_t)mlm_tensor_nbytes(t));
            }
            CHECKF(same, "%s: a tensor of the 1-layer write differs from the 2-layer one", one);
            mlm_checkpoint_free(a);
            mlm_checkpoint_free(b);
        }
    harness_rmtree(dir);
}

/* phi-4: the embedded config is microsoft/phi-4's config.json; generation_config.json
 * has models.md 5.1's ids; HF only; Phi-3 names and fused shapes (models.md 5.2). */
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

// ---- llama-3.2-11b-vision ----

static const char *MLLAMA_FIXTURE = "tests/data/mllama_synth.json";

static int64_t t_numel(const mlm_synth_tensor *t) {
    int64_t n = 1;
    for (int k = 0; k < t->n_dim; k++)
        n *= t->shape[k];
    return n;
}

/* Whether plan tensor T has NAME and the shape of the JSON list SHAPE. */
static int same_name_shape(const mlm_synth_tensor *t, const char *name, const json_t *shape) {
    if (strcmp(t->name, name) || (size_t)t->n_dim != json_array_size(shape)) return 0;
    for (int k = 0; k < t->n_dim; k++)
        if (t->shape[k] != json_integer_value(json_array_get(shape, (size_t)k))) return 0;
    return 1;
}

/* One element of T as f32. */
static float elem(const mlm_synth_tensor *t, uint64_t seed, int64_t i) {
    float v;
    mlm_synth_fill(t, seed, MLM_DTYPE_F32, i, 1, &v);
    return v;
}

/* The HF element (row-major index) that Meta element I of M holds, by the rules of
 * transformers' converter written out here: q/k rows of self-attention permuted
 * (view(heads, hd/2, 2, d).transpose(1, 2)), learnable_embedding = embed_tokens' rows from
 * n_vocab, everything else element for element (conv1 [D, 588] = patch_embedding
 * [D, 3, 14, 14]). Not for the tile tables. */
static int64_t meta_to_hf(const mlm_synth_tensor *m, const mlm_config *c, int64_t i) {
    int64_t cols = m->n_dim == 1 ? 1 : t_numel(m) / m->shape[0];
    int64_t r = i / cols, col = i % cols;
    if (strstr(m->name, "text_model.layers.") &&
        (strstr(m->name, ".wq.weight") || strstr(m->name, ".wk.weight"))) {
        int64_t hd = c->head_dim, h = r / hd, rem = r % hd;
        r = h * hd + (rem % 2) * (hd / 2) + rem / 2;
    }
    if (strstr(m->name, "learnable_embedding")) r += c->n_vocab;
    return r * cols + col;
}

/* The Meta element (or -1: a zero) that element I of HF tile table H takes, by
 * models.md 6.7 (verified against transformers' precompute in tile_map_matches_transformers). */
static int64_t tile_to_meta(const mlm_synth_tensor *h, const mlm_vision_config *v, int64_t i) {
    int64_t cols = h->shape[1], block = cols / v->max_tiles;
    int64_t a = i / cols, t = (i % cols) / block, rem = i % block;
    if (a < 1 || a > v->n_aspect) return -1;
    int64_t rows = v->aspect[a - 1][0], cc = v->aspect[a - 1][1];
    if (t >= rows * cc) return -1;
    return ((t / cc) * v->max_tiles + t % cc) * block + rem;
}

/* HF = fixture list HF (first SKIP entries: FULL's), Meta likewise; every Meta tensor holds
 * the HF tensor the converter makes of it. Returns the plan's HF parameter count. */
static int64_t check_mllama_plans(const json_t *full, const json_t *var, int32_t layers) {
    mlm_synth_params p = mlm_synth_default_params();
    p.preset = "llama-3.2-11b-vision";
    p.seed = 77;
    mlm_synth_plan hf, meta;
    mlm_error err = {0};
    CHECK_OK(mlm_synth_plan_make_layers(&p, layers, &hf, &err), &err);
    p.format = MLM_SYNTH_META;
    CHECK_OK(mlm_synth_plan_make_layers(&p, layers, &meta, &err), &err);
    if (!hf.tensors || !meta.tensors) return 0;
    const json_t *lists[2] = {json_object_get(var, "hf"), json_object_get(var, "meta")};
    const char *skips[2] = {"hf_skip", "meta_skip"};
    const mlm_synth_plan *plans[2] = {&hf, &meta};
    for (int f = 0; f < 2; f++) {
        const json_t *flist = json_object_get(full, f ? "meta" : "hf");
        int64_t skip = json_integer_value(json_object_get(var, skips[f]));
        int64_t n = skip + (int64_t)json_array_size(lists[f]), bad = 0;
        CHECKF(plans[f]->n_tensors == n, "layers %d %s: %lld tensors, transformers %lld",
               (int)layers, f ? "meta" : "hf", (long long)plans[f]->n_tensors, (long long)n);
        for (int64_t k = 0; k < n && k < plans[f]->n_tensors; k++) {
            const json_t *e = k < skip ? json_array_get(flist, (size_t)k)
                                       : json_array_get(lists[f], (size_t)(k - skip));
            const mlm_synth_tensor *t = &plans[f]->tensors[k];
            if (!same_name_shape(t, json_string_value(json_array_get(e, 0)),
                                 json_array_get(e, 1))) {
                if (bad++ < 3)
                    printf("  layers %d tensor %lld: %s, transformers %s\n", (int)layers,
                           (long long)k, t->name, json_string_value(json_array_get(e, 0)));
            }
        }
        CHECKF(bad == 0, "layers %d %s: %lld tensors differ in name, shape or order", (int)layers,
               f ? "meta" : "hf", (long long)bad);
    }
    /* same model: every Meta tensor holds (elements of) the HF tensor it becomes */
    const mlm_config *c = &hf.cfg;
    const mlm_vision_config *v = &c->vision;
    int64_t skip = json_integer_value(json_object_get(var, "meta_skip")), bad = 0, pairs = 0,
            zeros = 0;
    for (int64_t k = skip; k < meta.n_tensors && k - skip < (int64_t)json_array_size(lists[1]);
         k++) {
        const json_t *e = json_array_get(lists[1], (size_t)(k - skip));
        int64_t hi = json_integer_value(json_array_get(e, 2));
        if (hi < 0 || hi >= hf.n_tensors) continue;
        const mlm_synth_tensor *m = &meta.tensors[k], *h = &hf.tensors[hi];
        CHECKF(!strcmp(m->key, h->key), "%s: canonical %s, HF %s: %s", m->name, m->key, h->name,
               h->key);
        pairs++;
        int64_t nm = t_numel(m), nh = t_numel(h);
        /* elements at both ends and at a stride through the tensor */
        for (int64_t s = 0; s < 64; s++) {
            int64_t i = s < 8 ? s : s < 16 ? nm - 1 - (s - 8) : (nm / 48) * (s - 16) + s;
            if (h->tile_block) {
                i = s < 8 ? s : s < 16 ? nh - 1 - (s - 8) : (nh / 48) * (s - 16) + s * 7;
                if (i < 0 || i >= nh) continue;
                int64_t mi = tile_to_meta(h, v, i);
                float hv = elem(h, 77, i), mv = mi < 0 ? 0.0f : elem(m, 77, mi);
                zeros += mi < 0;
                if (hv != mv || (mi >= 0 && mv == 0)) bad++;
                continue;
            }
            if (i < 0 || i >= nm) continue;
            if (elem(m, 77, i) != elem(h, 77, meta_to_hf(m, c, i))) bad++;
        }
    }
    CHECKF(bad == 0, "layers %d: %lld sampled Meta elements differ from their HF ones", (int)layers,
           (long long)bad);
    CHECK(pairs == (int64_t)json_array_size(lists[1]) && (skip > 0 || zeros > 0));
    /* the tile tables through every aspect ratio and tile: the first and last element of each
     * tile block of each row, Meta's or zero */
    if (layers == 0)
        for (int64_t k = 0; k < hf.n_tensors; k++) {
            const mlm_synth_tensor *h = &hf.tensors[k], *m = NULL;
            if (!h->tile_block) continue;
            for (int64_t j = 0; j < meta.n_tensors; j++)
                if (!strcmp(meta.tensors[j].name, h->key)) m = &meta.tensors[j];
            CHECKF(m && m->n_dim == 4, "%s: no Meta table %s", h->name, h->key);
            if (!m) continue;
            int64_t nz = 0, nv = 0;
            for (int64_t a = 0; a < h->shape[0]; a++)
                for (int64_t t = 0; t < v->max_tiles; t++)
                    for (int end = 0; end < 2; end++) {
                        int64_t i =
                            a * h->shape[1] + t * h->tile_block + (end ? h->tile_block - 1 : 0);
                        int64_t mi = tile_to_meta(h, v, i);
                        float hv = elem(h, 77, i);
                        if (mi < 0) {
                            nz++;
                            CHECKF(hv == 0, "%s[%lld]: %g, want 0", h->name, (long long)i, hv);
                        } else {
                            nv++;
                            CHECKF(hv == elem(m, 77, mi) && hv != 0, "%s[%lld]", h->name,
                                   (long long)i);
                        }
                    }
            /* row 0 and the tiles past rows x cols: 4 + (3 + 2 + 1 + 0 + 2 + 0 + 1 + 0) = 13 */
            CHECKF(nz == 2 * 13 && nv == 2 * 23, "%s: %lld zero and %lld Meta blocks", h->name,
                   (long long)nz, (long long)nv);
        }
    int64_t numel = 0;
    for (int64_t k = 0; k < hf.n_tensors; k++)
        numel += t_numel(&hf.tensors[k]);
    /* configs: config.json has the kept layers, params.json the converter's view of them */
    json_error_t je;
    json_t *got = json_loads(hf.config_json, 0, &je), *tc = json_object_get(got, "text_config");
    const json_t *ct = json_object_get(var, "converter_text_config");
    CHECK(json_equal(json_object_get(tc, "num_hidden_layers"),
                     json_object_get(ct, "num_hidden_layers")));
    CHECK(json_equal(json_object_get(tc, "cross_attention_layers"),
                     json_object_get(ct, "cross_attention_layers")));
    json_decref(got);
    got = json_loads(meta.params_json, 0, &je);
    CHECKF(json_equal(got, json_object_get(var, "params")), "params.json: %s", meta.params_json);
    json_decref(got);
    CHECK(c->n_layer == json_integer_value(json_object_get(ct, "num_hidden_layers")));
    CHECK(meta.n_files == 1 && !strcmp(meta.files[0], "consolidated.pth"));
    mlm_synth_plan_free(&hf);
    mlm_synth_plan_free(&meta);
    return numel;
}

/* The plans of llama-3.2-11b-vision (all layers, --layers 5 and 10) against
 * transformers 4.46.3 (tests/fixtures/make_mllama_synth_fixture.py): HF names, shapes and
 * order = MllamaForConditionalGeneration's state_dict, parameter count = its
 * num_parameters(); Meta names and shapes = what transformers' converter loads strictly into
 * that model; each Meta tensor holds the HF tensor the converter makes of it (sampled); the
 * embedded configs = the real ones. */
TEST(mllama_plans_match_transformers) {
    json_error_t je;
    json_t *fx = json_load_file(MLLAMA_FIXTURE, 0, &je);
    CHECKF(fx != NULL, "%s: %s", MLLAMA_FIXTURE, je.text);
    if (!fx) return;
    const json_t *vars = json_object_get(fx, "variants"), *full = json_array_get(vars, 0);
    for (size_t i = 0; i < json_array_size(vars); i++) {
        const json_t *var = json_array_get(vars, i);
        int32_t layers = (int32_t)json_integer_value(json_object_get(var, "layers"));
        int64_t numel = check_mllama_plans(full, var, layers);
        int64_t want = json_integer_value(json_object_get(var, "n_params"));
        CHECKF(numel == want, "layers %d: %lld parameters, transformers %lld", (int)layers,
               (long long)numel, (long long)want);
    }
    mlm_synth_params p = mlm_synth_default_params();
    p.preset = "llama-3.2-11b-vision";
    mlm_synth_plan pl;
    mlm_error err = {0};
    CHECK_OK(mlm_synth_plan_make(&p, &pl, &err), &err);
    if (!pl.tensors) {
        json_decref(fx);
        return;
    }
    /* config.json: the real file's text (the 90B one with 11B dims; same bytes as on the Hub) */
    json_t *got = json_loads(pl.config_json, 0, &je);
    CHECK(json_equal(got, json_object_get(fx, "config")));
    CHECK((json_int_t)strlen(pl.config_json) ==
          json_integer_value(json_object_get(fx, "config_bytes")));
    json_decref(got);
    got = json_loads(pl.preprocessor_json, 0, &je);
    CHECKF(json_equal(got, json_object_get(fx, "preprocessor")), "%s", pl.preprocessor_json);
    json_decref(got);
    got = json_loads(pl.generation_json, 0, &je);
    CHECK(!strcmp(json_string_value(json_object_get(got, "transformers_version")), "4.45.0.dev0"));
    json_object_del(got, "transformers_version");
    CHECKF(json_equal(got, json_object_get(fx, "generation")), "%s", pl.generation_json);
    json_decref(got);
    const mlm_config *c = &pl.cfg;
    CHECK(c->family == MLM_FAMILY_MLLAMA && c->n_layer == 40 && c->n_cross == 8 &&
          c->cross_layers[0] == 3 && c->cross_layers[7] == 38 && c->n_embd == 4096 &&
          c->n_ff == 14336 && c->n_vocab == 128256 && c->image_token_id == 128256 &&
          c->vision.n_embd == 1280 && c->vision.image_size == 560 && c->n_stop_ids == 3);
    /* 5 GB shards: 5 files, as the Hub publishes model-0000K-of-00005.safetensors */
    mlm_tensor_spec *specs = calloc((size_t)pl.n_tensors, sizeof *specs);
    for (int64_t k = 0; specs && k < pl.n_tensors; k++) {
        specs[k] = (mlm_tensor_spec){pl.tensors[k].name, MLM_DTYPE_BF16, pl.tensors[k].n_dim, {0}};
        for (int d = 0; d < pl.tensors[k].n_dim; d++)
            specs[k].shape[d] = pl.tensors[k].shape[d];
    }
    mlm_safetensors_writer *w = NULL;
    CHECK_OK(mlm_safetensors_writer_create("/nonexistent-meshlm-dir", "model", specs, pl.n_tensors,
                                           MLM_HF_SHARD_BYTES, &w, &err),
             &err);
    CHECKF(w && mlm_safetensors_writer_n_files(w) == 5, "%d shards",
           w ? mlm_safetensors_writer_n_files(w) : -1);
    mlm_safetensors_writer_free(w);
    free(specs);
    /* every gate nonzero: mean 0.5, std 0.1, so within (0.15, 0.85) */
    int gates = 0, bad = 0;
    for (int64_t k = 0; k < pl.n_tensors; k++) {
        const mlm_synth_tensor *t = &pl.tensors[k];
        const char *last = strrchr(t->name, '.') + 1;
        if (strcmp(last, "gate") && strcmp(last, "gate_attn") && strcmp(last, "gate_ffn") &&
            !strstr(last, "_gate"))
            continue;
        gates++;
        float g = elem(t, 3, 0);
        bad += !(t_numel(t) == 1 && g > 0.15f && g < 0.85f);
    }
    CHECKF(gates == 2 * 8 + 2 * 8 + 3 && bad == 0, "%d gates, %d out of range", gates, bad);
    int64_t total;
    p.out_dir = "/nonexistent-meshlm-dir";
    CHECK_OK(mlm_synth_total_bytes(&p, &total, &err), &err);
    CHECK(total > 2 * 10670220835LL && total < 2 * 10670220835LL + (1 << 20));
    mlm_synth_plan_free(&pl);
    json_decref(fx);
}

/* The HF tile tables are transformers' pre_compute_positional_embedding of the Meta ones:
 * element for element (Meta [4, 4, P, D] of 2 x 3 and 1 x 3 per tile in the fixture). */
TEST(tile_map_matches_transformers) {
    json_error_t je;
    json_t *fx = json_load_file(MLLAMA_FIXTURE, 0, &je);
    CHECKF(fx != NULL, "%s: %s", MLLAMA_FIXTURE, je.text);
    if (!fx) return;
    mlm_synth_params p = mlm_synth_default_params();
    p.preset = "llama-3.2-11b-vision";
    mlm_synth_plan pl;
    mlm_error err = {0};
    CHECK_OK(mlm_synth_plan_make(&p, &pl, &err), &err);
    const mlm_synth_tensor *proto = NULL;
    for (int64_t k = 0; pl.tensors && k < pl.n_tensors; k++)
        if (pl.tensors[k].tile_block) proto = &pl.tensors[k];
    CHECK(proto != NULL);
    const json_t *maps = json_object_get(fx, "tile_map");
    for (size_t i = 0; proto && i < json_array_size(maps); i++) {
        const json_t *mp = json_array_get(maps, i), *ms = json_object_get(mp, "meta_shape"),
                     *hs = json_object_get(mp, "hf_shape"), *hv = json_object_get(mp, "hf");
        int64_t pdim = json_integer_value(json_array_get(ms, 2)),
                d = json_integer_value(json_array_get(ms, 3));
        mlm_synth_tensor h = *proto, m = {0};
        snprintf(h.key, sizeof h.key, "tile-map-test");
        h.shape[0] = json_integer_value(json_array_get(hs, 0));
        h.shape[1] = json_integer_value(json_array_get(hs, 1));
        h.tile_block = pdim * d;
        m = h;
        m.tile_block = 0;
        m.n_dim = 4;
        m.shape[0] = m.shape[1] = 4;
        m.shape[2] = pdim;
        m.shape[3] = d;
        m.full_cols = 4 * pdim * d;
        int64_t nh = h.shape[0] * h.shape[1], nm = 16 * pdim * d;
        CHECK((size_t)nh == json_array_size(hv));
        float *a = malloc((size_t)nh * sizeof *a), *b = malloc((size_t)nm * sizeof *b);
        mlm_synth_fill(&h, 5, MLM_DTYPE_F32, 0, nh, a);
        mlm_synth_fill(&m, 5, MLM_DTYPE_F32, 0, nm, b);
        int bad = 0;
        for (int64_t k = 0; k < nh; k++) {
            int64_t id = json_integer_value(json_array_get(hv, (size_t)k));
            bad += id == 0 ? a[k] != 0 : a[k] != b[id - 1] || a[k] == 0;
            bad += tile_to_meta(&h, &pl.cfg.vision, k) != id - 1;
        }
        CHECKF(bad == 0, "tile map P %lld D %lld: %d elements differ from transformers'",
               (long long)pdim, (long long)d, bad);
        free(a);
        free(b);
    }
    mlm_synth_plan_free(&pl);
    json_decref(fx);
}

/* --layers for the vision preset: HF takes any count (config says it, cross-attention layers
 * below it kept); Meta only counts whose cross-attention layers are where Meta's schedule
 * puts them (multiples of 5), others refused naming the ones that work. */
TEST(mllama_fewer_layers) {
    mlm_synth_params p = mlm_synth_default_params();
    p.preset = "llama-3.2-11b-vision";
    p.out_dir = "/nonexistent-meshlm-dir";
    mlm_error err = {0};
    int64_t total;
    for (int32_t n = 1; n <= 41; n++) {
        p.format = MLM_SYNTH_HF;
        mlm_status st = mlm_synth_total_bytes_layers(&p, n, &total, &err);
        CHECKF(n <= 40 ? st == MLM_OK : st == MLM_ERR_INVALID_ARG, "hf --layers %d: %s", (int)n,
               err.msg);
        p.format = MLM_SYNTH_META;
        st = mlm_synth_total_bytes_layers(&p, n, &total, &err);
        int ok = n % 5 == 0 && n <= 40;
        CHECKF(ok ? st == MLM_OK : st == MLM_ERR_INVALID_ARG, "meta --layers %d: %s", (int)n,
               err.msg);
        if (!ok && n <= 40)
            CHECKF(strstr(err.msg, "Meta format") &&
                       strstr(err.msg, "5, 10, 15, 20, 25, 30, 35, 40") &&
                       strstr(err.msg, "llama-3.2-11b-vision"),
                   "%s", err.msg);
        if (n == 4)
            CHECKF(strstr(err.msg, "3 self-attention and 1 cross-attention layers (HF layers "
                                   "[3])") &&
                       strstr(err.msg, "at HF layers [2]"),
                   "%s", err.msg);
        if (n == 3) CHECKF(strstr(err.msg, "no cross-attention layer"), "%s", err.msg);
        if (n == 41) CHECKF(strstr(err.msg, "has 40 layers"), "%s", err.msg);
    }
    /* --layers 4 in HF: cross layer 3 kept, config says so; no Meta form */
    mlm_synth_plan pl;
    p.format = MLM_SYNTH_HF;
    CHECK_OK(mlm_synth_plan_make_layers(&p, 4, &pl, &err), &err);
    CHECK(pl.cfg.n_layer == 4 && pl.cfg.n_cross == 1 && pl.cfg.cross_layers[0] == 3);
    CHECK(strstr(pl.config_json, "\"cross_attention_layers\": [\n      3\n    ],"));
    mlm_synth_plan_free(&pl);
    CHECK_OK(mlm_synth_plan_make_layers(&p, 3, &pl, &err), &err);
    CHECK(pl.cfg.n_layer == 3 && pl.cfg.n_cross == 0 &&
          strstr(pl.config_json, "\"cross_attention_layers\": [],"));
    mlm_synth_plan_free(&pl);
}

/* tiny-mllama written and read back in both formats and dtypes: every tensor (4-D ones
 * too) with its shape and dtype; HF and Meta hold one model (elements mapped as
 * transformers' converter maps them, the tile tables' zeros included); values as designed;
 * --layers 3 (the one Meta count below 6) bit-equal to the full write's tensors. */
TEST(tiny_mllama_write_read_back) {
    char dir[128];
    CHECK(harness_tmpdir(dir, sizeof dir, "synth") == 0);
    mlm_dtype dtypes[2] = {MLM_DTYPE_BF16, MLM_DTYPE_F32};
    for (int di = 0; di < 2; di++) {
        mlm_checkpoint *ck[2] = {NULL, NULL};
        mlm_synth_plan plans[2];
        memset(plans, 0, sizeof plans);
        for (int fmt = 0; fmt < 2; fmt++) {
            char out[256];
            snprintf(out, sizeof out, "%s/m-%d-%d", dir, fmt, di);
            mlm_error err = {0};
            CHECK_OK(synth("tiny-mllama", out, fmt, dtypes[di], 21, MLM_HF_SHARD_BYTES, &err),
                     &err);
            mlm_synth_params p = mlm_synth_default_params();
            p.preset = "tiny-mllama";
            p.format = fmt;
            p.dtype = dtypes[di];
            p.seed = 21;
            CHECK_OK(mlm_synth_plan_make(&p, &plans[fmt], &err), &err);
            CHECK_OK(mlm_checkpoint_open(out, &ck[fmt], &err), &err);
            if (!ck[fmt] || !plans[fmt].tensors) continue;
            int temps;
            CHECK(count_entries(out, &temps) == (fmt ? 2 : 4) && temps == 0);
            mlm_config cfg;
            CHECK_OK(mlm_config_load(out, &cfg, &err), &err);
            if (!fmt) {
                CHECK(cfg.family == MLM_FAMILY_MLLAMA && cfg.n_layer == 6 && cfg.n_cross == 2 &&
                      cfg.cross_layers[1] == 4 && cfg.vision.n_embd == 32);
            } else if (cfg.family == MLM_FAMILY_MLLAMA) {
                /* params.json (Meta's keys + meshlm's vision_* ones) gives config.json's model */
                const mlm_config *h = &plans[0].cfg;
                CHECK(cfg.n_layer == h->n_layer && cfg.n_cross == h->n_cross &&
                      !memcmp(cfg.cross_layers, h->cross_layers, sizeof cfg.cross_layers) &&
                      cfg.n_ff == h->n_ff && cfg.n_embd == h->n_embd &&
                      cfg.rope_factor == h->rope_factor && cfg.vision.n_embd == h->vision.n_embd &&
                      cfg.vision.n_layer == h->vision.n_layer &&
                      cfg.vision.output_dim == h->vision.output_dim &&
                      cfg.vision.n_aspect == h->vision.n_aspect &&
                      !memcmp(cfg.vision.aspect, h->vision.aspect, sizeof cfg.vision.aspect));
            } else {
                printf("  note: this build reads an mllama params.json as %s; the Meta config "
                       "check was not exercised\n",
                       mlm_family_name(cfg.family));
            }
            CHECK(mlm_checkpoint_n_tensors(ck[fmt]) == plans[fmt].n_tensors);
            for (int64_t k = 0; k < plans[fmt].n_tensors; k++) {
                const mlm_synth_tensor *t = &plans[fmt].tensors[k];
                const mlm_tensor_view *v = mlm_checkpoint_find(ck[fmt], t->name);
                CHECKF(v && v->dtype == dtypes[di] && v->n_dim == t->n_dim, "%s", t->name);
                for (int d = 0; v && d < t->n_dim; d++)
                    CHECK(v->shape[d] == t->shape[d]);
                if (!v) continue;
                /* values: ones, or within the generator's bound around the mean (zeros in
                 * tile tables) */
                float *x = read_f32(v);
                int64_t n = mlm_tensor_numel(v), out_of = 0;
                for (int64_t i = 0; x && i < n; i++)
                    out_of +=
                        t->std == 0 ? x[i] != 1.0f : fabsf(x[i] - t->mean) > 3.47f * t->std * 1.01f;
                CHECKF(x && out_of == 0, "%s: %lld values out of range", t->name,
                       (long long)out_of);
                free(x);
            }
        }
        if (!ck[0] || !ck[1]) goto next;
        /* one model: each Meta tensor's elements in the HF file */
        const mlm_config *c = &plans[0].cfg;
        int64_t bad = 0, zeros = 0, compared = 0;
        for (int64_t k = 0; k < plans[1].n_tensors; k++) {
            const mlm_synth_tensor *m = &plans[1].tensors[k], *h = NULL;
            for (int64_t j = 0; j < plans[0].n_tensors; j++)
                if (!strcmp(plans[0].tensors[j].key, m->key)) h = &plans[0].tensors[j];
            CHECKF(h != NULL, "%s: no HF tensor holds %s", m->name, m->key);
            if (!h) continue;
            float *mv = read_f32(mlm_checkpoint_find(ck[1], m->name)),
                  *hv = read_f32(mlm_checkpoint_find(ck[0], h->name));
            if (h->tile_block) {
                for (int64_t i = 0; i < t_numel(h); i++) {
                    int64_t mi = tile_to_meta(h, &c->vision, i);
                    zeros += mi < 0;
                    bad += mi < 0 ? hv[i] != 0 : hv[i] != mv[mi];
                }
            } else {
                for (int64_t i = 0; i < t_numel(m); i++)
                    bad += mv[i] != hv[meta_to_hf(m, c, i)];
            }
            compared++;
            free(mv);
            free(hv);
        }
        /* every Meta tensor but the learnable rows maps to its own HF one */
        CHECKF(bad == 0 && compared == plans[1].n_tensors && zeros > 0,
               "%lld elements differ (%lld tensors compared)", (long long)bad, (long long)compared);
    next:
        for (int fmt = 0; fmt < 2; fmt++) {
            mlm_checkpoint_free(ck[fmt]);
            mlm_synth_plan_free(&plans[fmt]);
        }
    }
    /* --layers 3: 2 self + 1 cross, the same tensors as the full write */
    for (int fmt = 0; fmt < 2; fmt++) {
        char out[256], full[256];
        snprintf(out, sizeof out, "%s/l3-%d", dir, fmt);
        snprintf(full, sizeof full, "%s/m-%d-0", dir, fmt);
        mlm_synth_params p = mlm_synth_default_params();
        p.preset = "tiny-mllama";
        p.format = fmt;
        p.seed = 21;
        p.out_dir = out;
        mlm_error err = {0};
        CHECK_OK(mlm_synth_layers(&p, 3, &err), &err);
        char four[300];
        snprintf(four, sizeof four, "%s-4", out);
        p.out_dir = four; /* 4 layers: HF only (Meta's schedule puts the cross layer at 2) */
        CHECK(mlm_synth_layers(&p, 4, &err) == (fmt ? MLM_ERR_INVALID_ARG : MLM_OK));
        mlm_checkpoint *a = NULL, *b = NULL;
        CHECK_OK(mlm_checkpoint_open(out, &a, &err), &err);
        CHECK_OK(mlm_checkpoint_open(full, &b, &err), &err);
        if (!a || !b) continue;
        int same = 1, n_cross = 0;
        for (int64_t i = 0; i < mlm_checkpoint_n_tensors(a); i++) {
            const mlm_tensor_view *t = mlm_checkpoint_tensor(a, i),
                                  *u = mlm_checkpoint_find(b, t->name);
            n_cross += strstr(t->name, "cross_attn.q_proj") ||
                       strstr(t->name, "cross_attention_layers.0.attention.wq");
            same &= u && mlm_tensor_nbytes(t) == mlm_tensor_nbytes(u) &&
                    !memcmp(t->data, u->data, (size_t)mlm_tensor_nbytes(t));
        }
        CHECKF(same && n_cross == 1, "%s: differs from the 6-layer write", out);
        if (fmt == 0) {
            mlm_config cfg;
            CHECK_OK(mlm_config_load(out, &cfg, &err), &err);
            CHECK(cfg.n_layer == 3 && cfg.n_cross == 1 && cfg.cross_layers[0] == 1);
        } else {
            char params[300];
            snprintf(params, sizeof params, "%s/params.json", out);
            size_t len;
            char *text = harness_read_file(params, &len);
            CHECKF(text && strstr(text, "\"n_layers\": 2,") &&
                       strstr(text, "\"vision_num_cross_attention_layers\": 1,"),
                   "%s", text ? text : "(none)");
            free(text);
        }
        mlm_checkpoint_free(a);
        mlm_checkpoint_free(b);
    }
    harness_rmtree(dir);
}

// ---- tiny presets written and read back ----

TEST(tiny_write_read_back) {
    char dir[128];
    CHECK(harness_tmpdir(dir, sizeof dir, "synth") == 0);
    const char *presets[2] = {"tiny-test", "tiny-test-mp2"};
    mlm_dtype dtypes[2] = {MLM_DTYPE_BF16, MLM_DTYPE_F32};
    for (int pi = 0; pi < 2; pi++)
        for (int fmt = 0; fmt < 2; fmt++)
            for (int di = 0; di < 2; di++) {
                char out[256];
                snprintf(out, sizeof out, "%s/%s-%d-%d", dir, presets[pi], fmt, di);
                mlm_error err = {0};
                CHECK_OK(synth(presets[pi], out, fmt, dtypes[di], 42, MLM_HF_SHARD_BYTES, &err),
                         &err);
                mlm_config cfg;
                CHECK_OK(mlm_config_load(out, &cfg, &err), &err);
                CHECK(!strcmp(cfg.source, fmt ? "params.json" : "config.json"));
                CHECK(cfg.n_embd == 64 && cfg.n_layer == 2 && cfg.n_head == 4 &&
                      cfg.n_kv_head == 2 && cfg.head_dim == 16 && cfg.n_ff == 192 &&
                      cfg.n_vocab == 384);
                if (!fmt) CHECK(cfg.tied_embeddings == (pi == 1));
                mlm_checkpoint *c;
                CHECK_OK(mlm_checkpoint_open(out, &c, &err), &err);
                if (!c) continue;
                CHECK(mlm_checkpoint_format(c) == (fmt ? MLM_CKPT_PYTORCH : MLM_CKPT_SAFETENSORS));
                CHECK(mlm_checkpoint_n_files(c) == (fmt && pi == 1 ? 2 : 1));
                check_llama_tensors(c, &cfg, fmt, pi == 1 ? 2 : 1, dtypes[di]);
                check_stats(c);
                int temps;
                CHECK(count_entries(out, &temps) == (fmt ? 1 + (pi == 1 ? 2 : 1) : 3) &&
                      temps == 0);
                mlm_checkpoint_free(c);
            }
    harness_rmtree(dir);
}

/* tiny-phi3 (Phi-4's structure at test size) written and read back: family phi3, fused
 * shapes, value statistics, phi-4's stop-id layout; its tokenizer is a directory. */
TEST(tiny_phi3_write_read_back) {
    char dir[128], tokdir[256], path[400];
    CHECK(harness_tmpdir(dir, sizeof dir, "synth") == 0);
    mlm_dtype dtypes[2] = {MLM_DTYPE_BF16, MLM_DTYPE_F32};
    for (int di = 0; di < 2; di++) {
        char out[256];
        snprintf(out, sizeof out, "%s/phi3-%d", dir, di);
        mlm_error err = {0};
        CHECK_OK(synth("tiny-phi3", out, MLM_SYNTH_HF, dtypes[di], 42, MLM_HF_SHARD_BYTES, &err),
                 &err);
        mlm_config cfg;
        CHECK_OK(mlm_config_load(out, &cfg, &err), &err);
        CHECK(cfg.family == MLM_FAMILY_PHI3 && !strcmp(cfg.source, "config.json"));
        CHECK(cfg.n_embd == 64 && cfg.n_layer == 2 && cfg.n_head == 4 && cfg.n_kv_head == 1 &&
              cfg.head_dim == 16 && cfg.n_ff == 96 && cfg.n_vocab == 384 && !cfg.tied_embeddings &&
              cfg.rope_type == MLM_ROPE_NONE && cfg.rope_theta == 250000.0f &&
              cfg.n_ctx_train == 16384);
        /* generation_config.json's eos list (phi-4's layout: eos, then bos) */
        CHECK(cfg.bos_id == 1 && cfg.pad_id == 383 && cfg.n_stop_ids == 2 && cfg.stop_ids[0] == 2 &&
              cfg.stop_ids[1] == 1);
        mlm_checkpoint *c = NULL;
        CHECK_OK(mlm_checkpoint_open(out, &c, &err), &err);
        if (!c) continue;
        CHECK(mlm_checkpoint_format(c) == MLM_CKPT_SAFETENSORS && mlm_checkpoint_n_files(c) == 1);
        check_phi3_tensors(c, &cfg, dtypes[di]);
        const mlm_tensor_view *qkv = mlm_checkpoint_find(
                                  c, "model.layers.1.self_attn.qkv_proj.weight"),
                              *gu =
                                  mlm_checkpoint_find(c, "model.layers.0.mlp.gate_up_proj.weight");
        CHECK(qkv && qkv->shape[0] == 4 * 16 + 2 * 16 && qkv->shape[1] == 64);
        CHECK(gu && gu->shape[0] == 2 * 96 && gu->shape[1] == 64);
        CHECK(mlm_config_n_params(&cfg) ==
              384 * 64 * 2 + 64 + 2 * (96 * 64 + 64 * 64 + 192 * 64 + 64 * 96 + 2 * 64));
        check_stats(c);
        int temps;
        CHECK(count_entries(out, &temps) == 3 && temps == 0);
        mlm_checkpoint_free(c);
    }
    /* The tokenizer: a directory; tokenizer.json required, the other two when present. */
    snprintf(tokdir, sizeof tokdir, "%s/tok", dir);
    CHECK(mkdir(tokdir, 0755) == 0);
    static const char *names[3] = {"tokenizer.json", "tokenizer_config.json",
                                   "special_tokens_map.json"};
    mlm_synth_params p = mlm_synth_default_params();
    p.preset = "tiny-phi3";
    p.tokenizer = tokdir;
    mlm_error err = {0};
    char out[256];
    snprintf(out, sizeof out, "%s/with-tok", dir);
    p.out_dir = out;
    CHECK(mlm_synth(&p, &err) == MLM_ERR_IO); /* empty directory: no tokenizer.json */
    CHECKF(strstr(err.msg, "tokenizer.json") && strstr(err.msg, tokdir), "%s", err.msg);
    for (int n_files = 1; n_files <= 3; n_files += 2) {
        for (int i = 0; i < n_files; i++) {
            char text[64];
            int len = snprintf(text, sizeof text, "{\"file\": %d}\n", i);
            snprintf(path, sizeof path, "%s/%s", tokdir, names[i]);
            harness_write_file(path, text, (size_t)len);
        }
        snprintf(out, sizeof out, "%s/with-tok-%d", dir, n_files);
        p.out_dir = out;
        int64_t total;
        CHECK_OK(mlm_synth_total_bytes(&p, &total, &err), &err);
        CHECK_OK(mlm_synth(&p, &err), &err);
        int temps;
        CHECKF(count_entries(out, &temps) == 3 + n_files && temps == 0, "%d entries",
               count_entries(out, NULL));
        for (int i = 0; i < 3; i++) {
            char src[400], dst[400];
            snprintf(src, sizeof src, "%s/%s", tokdir, names[i]);
            snprintf(dst, sizeof dst, "%s/%s", out, names[i]);
            struct stat sb;
            if (i < n_files)
                CHECKF(files_equal(src, dst), "%s not copied", names[i]);
            else
                CHECKF(stat(dst, &sb) != 0, "%s copied though absent", names[i]);
        }
    }
    /* a file where the directory belongs: refused, naming it */
    snprintf(path, sizeof path, "%s/tokenizer.json", tokdir);
    p.tokenizer = path;
    snprintf(out, sizeof out, "%s/file-tok", dir);
    p.out_dir = out;
    CHECK(mlm_synth(&p, &err) == MLM_ERR_INVALID_ARG);
    CHECKF(strstr(err.msg, "directory") && strstr(err.msg, path), "%s", err.msg);
    struct stat sb;
    CHECK(stat(out, &sb) != 0);
    /* Llama presets take a directory holding tokenizer.model as well as the file itself */
    char llama_tok[300];
    snprintf(llama_tok, sizeof llama_tok, "%s/llama-tok", dir);
    CHECK(mkdir(llama_tok, 0755) == 0);
    snprintf(path, sizeof path, "%s/tokenizer.model", llama_tok);
    harness_write_file(path, "dGVzdA== 0\n", 11);
    p = mlm_synth_default_params();
    p.preset = "tiny-test";
    p.tokenizer = llama_tok;
    snprintf(out, sizeof out, "%s/llama-dir-tok", dir);
    p.out_dir = out;
    CHECK_OK(mlm_synth(&p, &err), &err);
    char dst[400];
    snprintf(dst, sizeof dst, "%s/tokenizer.model", out);
    CHECK(files_equal(path, dst) && count_entries(out, NULL) == 4);
    harness_rmtree(dir);
}

/* HF and Meta of one seed are one model: Meta shards merged (rows for column-parallel,
 * columns for row-parallel weights), wq/wk rows permuted to HF order (transformers'
 * permute: view(heads, hd/2, 2, d).transpose(1, 2)), and bf16 equals f32 rounded. */
TEST(hf_and_meta_hold_the_same_model) {
    char dir[128], hf[256], meta[256], f32[256];
    CHECK(harness_tmpdir(dir, sizeof dir, "synth") == 0);
    snprintf(hf, sizeof hf, "%s/hf", dir);
    snprintf(meta, sizeof meta, "%s/meta", dir);
    snprintf(f32, sizeof f32, "%s/f32", dir);
    mlm_error err = {0};
    CHECK_OK(synth("tiny-test-mp2", hf, MLM_SYNTH_HF, MLM_DTYPE_BF16, 5, 0, &err), &err);
    CHECK_OK(synth("tiny-test-mp2", meta, MLM_SYNTH_META, MLM_DTYPE_BF16, 5, 0, &err), &err);
    CHECK_OK(synth("tiny-test-mp2", f32, MLM_SYNTH_HF, MLM_DTYPE_F32, 5, 0, &err), &err);
    mlm_checkpoint *h = NULL, *m = NULL, *f = NULL;
    CHECK_OK(mlm_checkpoint_open(hf, &h, &err), &err);
    CHECK_OK(mlm_checkpoint_open(meta, &m, &err), &err);
    CHECK_OK(mlm_checkpoint_open(f32, &f, &err), &err);
    if (!h || !m || !f) return;
    static const struct {
        const char *meta, *hf;
        int split, qk_heads;
    } map[] = {
        {"attention.wq.weight", "self_attn.q_proj.weight", 0, 4},
        {"attention.wk.weight", "self_attn.k_proj.weight", 0, 2},
        {"attention.wv.weight", "self_attn.v_proj.weight", 0, 0},
        {"attention.wo.weight", "self_attn.o_proj.weight", 1, 0},
        {"feed_forward.w1.weight", "mlp.gate_proj.weight", 0, 0},
        {"feed_forward.w2.weight", "mlp.down_proj.weight", 1, 0},
        {"feed_forward.w3.weight", "mlp.up_proj.weight", 0, 0},
        {"attention_norm.weight", "input_layernorm.weight", -1, 0},
        {"ffn_norm.weight", "post_attention_layernorm.weight", -1, 0},
    };
    int compared = 0, bad = 0;
    for (int i = -1; i < 2; i++)
        for (size_t k = 0; k < (i < 0 ? 3 : 9); k++) {
            char mn[128], hn[128];
            int split, heads = 0;
            if (i < 0) {
                const char *g[3][2] = {{"tok_embeddings.weight", "model.embed_tokens.weight"},
                                       {"output.weight", "model.embed_tokens.weight"}, /* tied */
                                       {"norm.weight", "model.norm.weight"}};
                snprintf(mn, sizeof mn, "%s", g[k][0]);
                snprintf(hn, sizeof hn, "%s", g[k][1]);
                split = k == 2 ? -1 : 0;
            } else {
                snprintf(mn, sizeof mn, "layers.%d.%s", i, map[k].meta);
                snprintf(hn, sizeof hn, "model.layers.%d.%s", i, map[k].hf);
                split = map[k].split;
                heads = map[k].qk_heads;
            }
            const mlm_tensor_view *ht = mlm_checkpoint_find(h, hn),
                                  *ft = mlm_checkpoint_find(f, hn);
            char s0[140], s1[140];
            snprintf(s0, sizeof s0, "shard0/%s", mn);
            snprintf(s1, sizeof s1, "shard1/%s", mn);
            const mlm_tensor_view *a = mlm_checkpoint_find(m, s0), *b = mlm_checkpoint_find(m, s1);
            CHECKF(ht && ft && a && b, "%s / %s missing", hn, mn);
            if (!ht || !ft || !a || !b) continue;
            float *hv = read_f32(ht), *fv = read_f32(ft), *av = read_f32(a), *bv = read_f32(b);
            int64_t rows = ht->shape[0], cols = ht->n_dim == 2 ? ht->shape[1] : 1;
            for (int64_t r = 0; r < rows; r++)
                for (int64_t c = 0; c < cols; c++) {
                    /* merged Meta element (r, c) */
                    int64_t mr = r, half;
                    float mv;
                    if (split == 0) {
                        half = rows / 2;
                        mv = (r < half ? av : bv)[(r % half) * cols + c];
                    } else if (split == 1) {
                        half = cols / 2;
                        mv = (c < half ? av : bv)[r * half + c % half];
                    } else {
                        mv = av[r * cols + c];
                        CHECK(bv[r * cols + c] == mv); /* replicated norms */
                    }
                    /* HF row of merged Meta row mr: permute(w) = view(h, hd/2, 2, d).T(1,2) */
                    int64_t hr = mr;
                    if (heads) {
                        int64_t hd = rows / heads, hh = mr / hd, rem = mr % hd;
                        hr = hh * hd + (rem % 2) * (hd / 2) + rem / 2;
                    }
                    float want = hv[hr * cols + c];
                    if (mv != want) bad++;
                    /* bf16 = f32 rounded to nearest even */
                    uint32_t u;
                    memcpy(&u, &fv[hr * cols + c], 4);
                    uint32_t rnd = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u;
                    float fr;
                    memcpy(&fr, &rnd, 4);
                    if (fr != want) bad++;
                }
            compared++;
            free(hv);
            free(fv);
            free(av);
            free(bv);
        }
    CHECKF(bad == 0, "%d elements differ", bad);
    CHECK(compared == 21);
    mlm_checkpoint_free(h);
    mlm_checkpoint_free(m);
    mlm_checkpoint_free(f);
    harness_rmtree(dir);
}

/* Same seed: the same bytes in every file; another seed: other weights, same configs. */
TEST(determinism) {
    char dir[128];
    CHECK(harness_tmpdir(dir, sizeof dir, "synth") == 0);
    const char *files[2][3] = {{"model.safetensors", "config.json", "generation_config.json"},
                               {"consolidated.00.pth", "consolidated.01.pth", "params.json"}};
    for (int fmt = 0; fmt < 2; fmt++) {
        char a[256], b[256], c[256];
        snprintf(a, sizeof a, "%s/a%d", dir, fmt);
        snprintf(b, sizeof b, "%s/b%d", dir, fmt);
        snprintf(c, sizeof c, "%s/c%d", dir, fmt);
        mlm_error err = {0};
        CHECK_OK(synth("tiny-test-mp2", a, fmt, MLM_DTYPE_BF16, 123, 0, &err), &err);
        CHECK_OK(synth("tiny-test-mp2", b, fmt, MLM_DTYPE_BF16, 123, 0, &err), &err);
        CHECK_OK(synth("tiny-test-mp2", c, fmt, MLM_DTYPE_BF16, 124, 0, &err), &err);
        for (int i = 0; i < 3; i++) {
            char pa[300], pb[300], pc[300];
            snprintf(pa, sizeof pa, "%s/%s", a, files[fmt][i]);
            snprintf(pb, sizeof pb, "%s/%s", b, files[fmt][i]);
            snprintf(pc, sizeof pc, "%s/%s", c, files[fmt][i]);
            CHECKF(files_equal(pa, pb), "%s differs between two runs with one seed", pa);
            int weights = strstr(files[fmt][i], "json") == NULL;
            CHECKF(files_equal(pa, pc) == !weights, "%s: seeds 123 and 124", files[fmt][i]);
        }
    }
    harness_rmtree(dir);
}

/* The progress callback counts up to the total, which is what lands on disk; the
 * tokenizer is copied byte for byte. */
typedef struct prog {
    int64_t last, total, calls;
    int monotonic;
} prog;

static void on_progress(void *ctx, int64_t done, int64_t total) {
    prog *p = ctx;
    if (done < p->last || done > total) p->monotonic = 0;
    p->last = done;
    p->total = total;
    p->calls++;
}

TEST(progress_total_and_tokenizer) {
    char dir[128], out[256];
    CHECK(harness_tmpdir(dir, sizeof dir, "synth") == 0);
    for (int fmt = 0; fmt < 2; fmt++) {
        snprintf(out, sizeof out, "%s/o%d", dir, fmt);
        prog pr = {.monotonic = 1};
        mlm_synth_params p = mlm_synth_default_params();
        p.preset = "tiny-test";
        p.out_dir = out;
        p.format = fmt;
        p.dtype = MLM_DTYPE_F32;
        p.tokenizer = TOKENIZER;
        p.progress = on_progress;
        p.progress_ctx = &pr;
        mlm_error err = {0};
        int64_t total;
        CHECK_OK(mlm_synth_total_bytes(&p, &total, &err), &err);
        CHECK_OK(mlm_synth(&p, &err), &err);
        CHECK(pr.monotonic && pr.calls > 2 && pr.last == total && pr.total == total);
        int64_t on_disk = 0;
        DIR *d = opendir(out);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            char path[600];
            struct stat sb;
            snprintf(path, sizeof path, "%s/%s", out, e->d_name);
            if (e->d_name[0] != '.' && stat(path, &sb) == 0) on_disk += sb.st_size;
        }
        if (d) closedir(d);
        CHECKF(on_disk == total, "on disk %lld, total %lld", (long long)on_disk, (long long)total);
        char tok[300];
        snprintf(tok, sizeof tok, "%s/tokenizer.model", out);
        CHECK(files_equal(tok, TOKENIZER));
        mlm_tokenizer *t = NULL;
        CHECK_OK(mlm_tokenizer_load(out, &t, &err), &err);
        CHECK(t && mlm_tokenizer_n_vocab(t) == 128256);
        mlm_tokenizer_free(t);
    }
    harness_rmtree(dir);
}

// ---- atomic writes ----

/* Runs mlm_synth with files limited to LIMIT bytes (RLIMIT_FSIZE: writes past it fail
 * with EFBIG). */
static mlm_status synth_limited(mlm_synth_params *p, rlim_t limit, mlm_error *err) {
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = limit;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    mlm_status st = mlm_synth(p, err);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    return st;
}

/* A failure in the middle of the weights, or after them (the tokenizer copy), leaves no
 * final file and no temporary file; files already in the directory stay. The message names
 * the file that failed. */
TEST(failed_writes_leave_nothing) {
    char dir[128], keep[300];
    CHECK(harness_tmpdir(dir, sizeof dir, "synth") == 0);
    snprintf(keep, sizeof keep, "%s/keep.txt", dir);
    harness_write_file(keep, "mine\n", 5);
    for (int fmt = 0; fmt < 2; fmt++) {
        mlm_synth_params p = mlm_synth_default_params();
        p.preset = "tiny-test";
        p.out_dir = dir;
        p.format = fmt;
        p.dtype = MLM_DTYPE_F32; /* weights ~590 KB */
        mlm_error err = {0};
        CHECK(synth_limited(&p, 100000, &err) == MLM_ERR_IO);
        const char *name = fmt ? "consolidated.00.pth" : "model.safetensors";
        CHECKF(strstr(err.msg, name) && strstr(err.msg, dir) && !strstr(err.msg, ".tmp-"),
               "message does not name the final file: %s", err.msg);
        int temps;
        CHECKF(count_entries(dir, &temps) == 1 && temps == 0, "%d entries after a failed write",
               count_entries(dir, NULL));
        /* weights complete (under the limit), the 2.2 MB tokenizer copy fails */
        p.tokenizer = TOKENIZER;
        CHECK(synth_limited(&p, 1 << 20, &err) == MLM_ERR_IO);
        CHECKF(strstr(err.msg, "tokenizer.model"), "%s", err.msg);
        CHECKF(count_entries(dir, &temps) == 1 && temps == 0,
               "%d entries after a late failure: complete files must not be renamed either",
               count_entries(dir, NULL));
        CHECK(files_equal(keep, keep));
    }
    size_t n;
    char *k = harness_read_file(keep, &n);
    CHECK(k && n == 5 && !memcmp(k, "mine\n", 5));
    free(k);
    /* an out_dir below a regular file cannot be created: IO naming it */
    char bad[400];
    snprintf(bad, sizeof bad, "%s/sub", keep);
    mlm_error err = {0};
    CHECK(synth("tiny-test", bad, MLM_SYNTH_HF, MLM_DTYPE_BF16, 1, 0, &err) == MLM_ERR_IO);
    CHECKF(strstr(err.msg, "keep.txt"), "%s", err.msg);
    harness_rmtree(dir);
}

// ---- the writers ----

/* A small HF shard limit gives a set that reads back as the single file does. */
TEST(sharded_safetensors_set) {
    char dir[128], one[256], set[256], index[300];
    CHECK(harness_tmpdir(dir, sizeof dir, "synth") == 0);
    snprintf(one, sizeof one, "%s/one", dir);
    snprintf(set, sizeof set, "%s/set", dir);
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", set);
    mlm_error err = {0};
    CHECK_OK(synth("tiny-test", one, MLM_SYNTH_HF, MLM_DTYPE_BF16, 9, 0, &err), &err);
    CHECK_OK(synth("tiny-test", set, MLM_SYNTH_HF, MLM_DTYPE_BF16, 9, 40000, &err), &err);
    mlm_checkpoint *a = NULL, *b = NULL;
    CHECK_OK(mlm_checkpoint_open(one, &a, &err), &err);
    CHECK_OK(mlm_checkpoint_open(set, &b, &err), &err);
    if (!a || !b) return;
    int n_files = mlm_checkpoint_n_files(b);
    CHECKF(n_files == 9, "%d shards", n_files);
    int seen[16] = {0};
    for (int i = 0; i < n_files && n_files <= 16; i++) {
        size_t size;
        const char *f = mlm_checkpoint_file(b, i, &size);
        int k = 0, of = 0;
        const char *base = strrchr(f, '/') + 1;
        CHECKF(sscanf(base, "model-%05d-of-%05d.safetensors", &k, &of) == 2 && of == n_files &&
                   k >= 1 && k <= n_files &&
                   strlen(base) == strlen("model-00001-of-00009.safetensors"),
               "shard file %s", base);
        if (k >= 1 && k <= 16) seen[k - 1]++;
        /* header length + 8 is a multiple of 8, and each shard stays under the limit
         * unless it holds a single larger tensor (the 48 KB embedding) */
        size_t hl;
        char *bytes = harness_read_file(f, &hl);
        uint64_t h = 0;
        for (int j = 7; j >= 0; j--)
            h = h << 8 | (unsigned char)bytes[j];
        CHECK((8 + h) % 8 == 0 && bytes[8 + h - 1] != 0);
        CHECK(size - 8 - h <= 40000 || size - 8 - h == 384 * 64 * 2);
        free(bytes);
    }
    for (int k = 0; k < n_files && n_files <= 16; k++)
        CHECK(seen[k] == 1);
    CHECK(mlm_checkpoint_n_tensors(a) == mlm_checkpoint_n_tensors(b));
    for (int64_t i = 0; i < mlm_checkpoint_n_tensors(a); i++) {
        const mlm_tensor_view *x = mlm_checkpoint_tensor(a, i),
                              *y = mlm_checkpoint_find(b, x->name);
        CHECKF(y && x->dtype == y->dtype && mlm_tensor_numel(x) == mlm_tensor_numel(y) &&
                   !memcmp(x->data, y->data, (size_t)mlm_tensor_numel(x) * 2),
               "%s differs", x->name);
    }
    json_error_t je;
    json_t *ix = json_load_file(index, 0, &je);
    CHECK(ix != NULL);
    json_int_t total =
        json_integer_value(json_object_get(json_object_get(ix, "metadata"), "total_size"));
    mlm_config cfg;
    CHECK_OK(mlm_config_load(one, &cfg, &err), &err);
    CHECK(total == 2 * mlm_config_n_params(&cfg)); /* the tensor bytes, bf16 */
    CHECK(json_object_size(json_object_get(ix, "weight_map")) ==
          (size_t)mlm_checkpoint_n_tensors(a));
    json_decref(ix);
    mlm_checkpoint_free(a);
    mlm_checkpoint_free(b);
    harness_rmtree(dir);
}

/* The writers directly: mixed dtypes, 0-dim and empty tensors, pieces spanning tensors,
 * and their refusals. */
TEST(writers_direct) {
    char dir[128], path[300];
    CHECK(harness_tmpdir(dir, sizeof dir, "synth") == 0);
    mlm_tensor_spec t[5] = {
        {"a.weight", MLM_DTYPE_F32, 2, {3, 5}},  {"b", MLM_DTYPE_BF16, 1, {7}},
        {"scalar", MLM_DTYPE_I64, 0, {0}},       {"empty", MLM_DTYPE_F32, 2, {0, 4}},
        {"c.bias", MLM_DTYPE_I32, 3, {2, 1, 3}},
    };
    unsigned char data[60 + 14 + 8 + 0 + 24];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (unsigned char)(i * 37 + 11);
    /* keep the float tensor's bytes finite: small integers */
    float af[15];
    for (int i = 0; i < 15; i++)
        af[i] = (float)i - 7.5f;
    memcpy(data, af, 60);
    uint16_t bf[7] = {0x3F80, 0xBF80, 0x4000, 0, 0x8000, 0x3E80, 0x4120};
    memcpy(data + 60, bf, 14);
    int64_t sc = -123456789012LL;
    memcpy(data + 74, &sc, 8);
    mlm_error err = {0};
    for (int kind = 0; kind < 2; kind++) {
        mlm_safetensors_writer *sw = NULL;
        mlm_pytorch_writer *pw = NULL;
        snprintf(path, sizeof path, "%s/w%d.pth", dir, kind);
        if (kind == 0)
            CHECK_OK(mlm_safetensors_writer_create(dir, "w0", t, 5, 0, &sw, &err), &err);
        else
            CHECK_OK(mlm_pytorch_writer_create(path, t, 5, &pw, &err), &err);
        if (!sw && !pw) continue;
        /* pieces of 1, 2, 3, ... bytes: every boundary falls somewhere inside one */
        size_t off = 0;
        for (size_t k = 1; off < sizeof data; k++) {
            size_t n = k < sizeof data - off ? k : sizeof data - off;
            CHECK_OK(sw ? mlm_safetensors_writer_write(sw, data + off, n, &err)
                        : mlm_pytorch_writer_write(pw, data + off, n, &err),
                     &err);
            off += n;
        }
        unsigned char extra = 0;
        CHECK((sw ? mlm_safetensors_writer_write(sw, &extra, 1, &err)
                  : mlm_pytorch_writer_write(pw, &extra, 1, &err)) == MLM_ERR_INVALID_ARG);
        CHECK_OK(sw ? mlm_safetensors_writer_finish(sw, &err) : mlm_pytorch_writer_finish(pw, &err),
                 &err);
        uint64_t total =
            sw ? mlm_safetensors_writer_total_bytes(sw) : mlm_pytorch_writer_total_bytes(pw);
        CHECK_OK(sw ? mlm_safetensors_writer_commit(sw, &err) : mlm_pytorch_writer_commit(pw, &err),
                 &err);
        mlm_safetensors_writer_free(sw);
        mlm_pytorch_writer_free(pw);
        if (kind == 0) snprintf(path, sizeof path, "%s/w0.safetensors", dir);
        struct stat sb;
        CHECK(stat(path, &sb) == 0 && (uint64_t)sb.st_size == total);
        if (kind == 1) {
            /* every record 64-byte aligned: the reader's views land on multiples of 64 */
        }
        mlm_checkpoint *c = NULL;
        CHECK_OK(mlm_checkpoint_open(path, &c, &err), &err);
        if (!c) continue;
        CHECK(mlm_checkpoint_n_tensors(c) == 5);
        size_t boff = 0;
        for (int i = 0; i < 5; i++) {
            const mlm_tensor_view *v = mlm_checkpoint_find(c, t[i].name);
            CHECKF(v && v->dtype == t[i].dtype && v->n_dim == t[i].n_dim, "%s", t[i].name);
            if (!v) continue;
            for (int d = 0; d < t[i].n_dim; d++)
                CHECK(v->shape[d] == t[i].shape[d]);
            size_t nb = (size_t)mlm_tensor_numel(v) * mlm_dtype_size(v->dtype);
            CHECKF(!nb || !memcmp(v->data, data + boff, nb), "%s: bytes differ", t[i].name);
            if (kind == 1 && nb)
                CHECK(((const char *)v->data - (const char *)mlm_checkpoint_tensor(c, 0)->data) %
                          64 ==
                      0);
            boff += nb;
        }
        mlm_checkpoint_free(c);
    }
    /* refusals: missing bytes, duplicate names, no storage class; a discarded writer leaves
     * nothing behind */
    mlm_safetensors_writer *sw;
    mlm_pytorch_writer *pw;
    CHECK_OK(mlm_safetensors_writer_create(dir, "short", t, 5, 0, &sw, &err), &err);
    CHECK_OK(mlm_safetensors_writer_write(sw, data, 10, &err), &err);
    CHECK(mlm_safetensors_writer_finish(sw, &err) == MLM_ERR_INVALID_ARG &&
          strstr(err.msg, "a.weight"));
    mlm_safetensors_writer_free(sw);
    snprintf(path, sizeof path, "%s/short.pth", dir);
    CHECK_OK(mlm_pytorch_writer_create(path, t, 5, &pw, &err), &err);
    CHECK_OK(mlm_pytorch_writer_write(pw, data, 70, &err), &err);
    CHECK(mlm_pytorch_writer_finish(pw, &err) == MLM_ERR_INVALID_ARG && strstr(err.msg, "data/1"));
    mlm_pytorch_writer_free(pw);
    mlm_tensor_spec dup[2] = {{"x", MLM_DTYPE_F32, 1, {2}}, {"x", MLM_DTYPE_F32, 1, {2}}};
    CHECK(mlm_safetensors_writer_create(dir, "dup", dup, 2, 0, &sw, &err) == MLM_ERR_INVALID_ARG);
    CHECK(mlm_pytorch_writer_create(path, dup, 2, &pw, &err) == MLM_ERR_INVALID_ARG);
    int temps;
    CHECKF(count_entries(dir, &temps) == 2 && temps == 0, "%d entries", count_entries(dir, NULL));
    harness_rmtree(dir);
}

// ---- the command ----

static char out[1 << 16];

#define EXPECT(args, code, needle) HARNESS_EXPECT_MESHLM(out, args, code, needle)

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
        CHECK(count_entries(dir, NULL) == 1);
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
    RUN(phi4_preset);
    RUN(mllama_plans_match_transformers);
    RUN(tile_map_matches_transformers);
    RUN(mllama_fewer_layers);
    RUN(tiny_mllama_write_read_back);
    RUN(fewer_layers_plans);
    RUN(fewer_layers_write_read_back);
    RUN(tiny_write_read_back);
    RUN(tiny_phi3_write_read_back);
    RUN(hf_and_meta_hold_the_same_model);
    RUN(determinism);
    RUN(progress_total_and_tokenizer);
    RUN(failed_writes_leave_nothing);
    RUN(sharded_safetensors_set);
    RUN(writers_direct);
    RUN(command_help_and_refusals);
    return HARNESS_END();
}
