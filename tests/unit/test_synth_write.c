/* tests/unit/test_synth_write.c: synthetic checkpoints written by mlm_synth, and the writers
 * under them. The hidden test presets keep runs small: each output is written, read back with
 * the checkpoint and config readers, and checked for names, shapes and dtypes against the
 * written config, for value statistics, determinism, HF/Meta equivalence (shards merged, q/k
 * rows permuted as transformers' converter does), atomic writes and sharding; the safetensors
 * and PyTorch writers are also driven directly. */
#include <dirent.h>
#include <jansson.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "format/writer_pytorch.h"
#include "format/writer_safetensors.h"
#include "harness.h"
#include "helpers.h"
#include "meshlm.h"
#include "config/config.h"
#include "synth/synth.h"
#include "tensor/dtype.h"

static const char *TOKENIZER = "tests/data/tokenizer/llama3/tokenizer.model";

// ---- checks ----

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
        float *v = helper_tensor_f32(t);
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

// ---- tiny presets written and read back ----

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
                CHECK_OK(
                    helper_synth(presets[pi], out, fmt, dtypes[di], 42, MLM_HF_SHARD_BYTES, &err),
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
                CHECK(helper_count_entries(out, &temps) == (fmt ? 1 + (pi == 1 ? 2 : 1) : 3) &&
                      temps == 0);
                mlm_checkpoint_free(c);
            }
    harness_rmtree(dir);
}

/* tiny-qwen3 and tiny-qwen2 (the Qwen presets' structure at test size) written and read
 * back: the family, Qwen3's per-head q/k norms (head_dim 32, ones), Qwen2's q/k/v biases
 * (std 0.02, not zero), the stand-in tokenizer copied; the folder loads and generates. */
TEST(tiny_qwen_write_read_back) {
    char dir[128];
    CHECK(harness_tmpdir(dir, sizeof dir, "synth") == 0);
    static const char *presets[2] = {"tiny-qwen3", "tiny-qwen2"};
    for (int pi = 0; pi < 2; pi++) {
        char out[256], path[400];
        snprintf(out, sizeof out, "%s/%s", dir, presets[pi]);
        mlm_synth_params p = mlm_synth_default_params();
        p.preset = presets[pi];
        p.out_dir = out;
        p.tokenizer = pi ? "tests/data/qwen/chat/qwen2.5" : "tests/data/qwen/chat/qwen3";
        mlm_error err = {0};
        CHECK_OK(mlm_synth(&p, &err), &err);
        mlm_config cfg;
        CHECK_OK(mlm_config_load(out, &cfg, &err), &err);
        CHECK(cfg.family == (pi ? MLM_FAMILY_QWEN2 : MLM_FAMILY_QWEN3) && cfg.n_vocab == 640 &&
              cfg.head_dim == (pi ? 16 : 32) && cfg.tied_embeddings == pi);
        mlm_checkpoint *c = NULL;
        CHECK_OK(mlm_checkpoint_open(out, &c, &err), &err);
        if (!c) continue;
        for (int l = 0; l < 2; l++) {
            static const char *qwen3[2] = {"q_norm.weight", "k_norm.weight"};
            static const char *qwen2[3] = {"q_proj.bias", "k_proj.bias", "v_proj.bias"};
            for (int k = 0; k < (pi ? 3 : 2); k++) {
                snprintf(path, sizeof path, "model.layers.%d.self_attn.%s", l,
                         pi ? qwen2[k] : qwen3[k]);
                const mlm_tensor_view *t = mlm_checkpoint_find(c, path);
                CHECKF(t && t->n_dim == 1, "%s missing or not 1-D", path);
                if (!t) continue;
                int64_t n = mlm_tensor_numel(t), want = pi ? (k ? 2 : 4) * 16 : 32;
                CHECKF(n == want, "%s: %lld elements, want %lld", path, (long long)n,
                       (long long)want);
                float *v = helper_tensor_f32(t);
                double ss = 0;
                int ones = 1;
                for (int64_t i = 0; v && i < n; i++) {
                    ss += (double)v[i] * v[i];
                    ones &= v[i] == 1.0f;
                }
                if (pi)
                    CHECKF(sqrt(ss / (double)n) > 0.01 && sqrt(ss / (double)n) < 0.04,
                           "%s: rms %g, not about 0.02", path, sqrt(ss / (double)n));
                else
                    CHECKF(ones, "%s: not all ones", path);
                free(v);
            }
        }
        mlm_checkpoint_free(c);
        snprintf(path, sizeof path, "%s/tokenizer_config.json", out);
        CHECK(access(path, R_OK) == 0);
        char args[600], text[4096];
        snprintf(args, sizeof args, "generate -m %s -p Hi --instruct -n 4 --ignore-eos", out);
        CHECKF(harness_run_meshlm(args, text, sizeof text) == 0, "%s: %s", args, text);
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
        CHECK_OK(
            helper_synth("tiny-phi3", out, MLM_SYNTH_HF, dtypes[di], 42, MLM_HF_SHARD_BYTES, &err),
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
        CHECK(helper_count_entries(out, &temps) == 3 && temps == 0);
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
        CHECKF(helper_count_entries(out, &temps) == 3 + n_files && temps == 0, "%d entries",
               helper_count_entries(out, NULL));
        for (int i = 0; i < 3; i++) {
            char src[400], dst[400];
            snprintf(src, sizeof src, "%s/%s", tokdir, names[i]);
            snprintf(dst, sizeof dst, "%s/%s", out, names[i]);
            struct stat sb;
            if (i < n_files)
                CHECKF(helper_files_equal(src, dst), "%s not copied", names[i]);
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
    CHECK(helper_files_equal(path, dst) && helper_count_entries(out, NULL) == 4);
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
    CHECK_OK(helper_synth("tiny-test-mp2", hf, MLM_SYNTH_HF, MLM_DTYPE_BF16, 5, 0, &err), &err);
    CHECK_OK(helper_synth("tiny-test-mp2", meta, MLM_SYNTH_META, MLM_DTYPE_BF16, 5, 0, &err), &err);
    CHECK_OK(helper_synth("tiny-test-mp2", f32, MLM_SYNTH_HF, MLM_DTYPE_F32, 5, 0, &err), &err);
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
            float *hv = helper_tensor_f32(ht), *fv = helper_tensor_f32(ft),
                  *av = helper_tensor_f32(a), *bv = helper_tensor_f32(b);
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
        CHECK_OK(helper_synth("tiny-test-mp2", a, fmt, MLM_DTYPE_BF16, 123, 0, &err), &err);
        CHECK_OK(helper_synth("tiny-test-mp2", b, fmt, MLM_DTYPE_BF16, 123, 0, &err), &err);
        CHECK_OK(helper_synth("tiny-test-mp2", c, fmt, MLM_DTYPE_BF16, 124, 0, &err), &err);
        for (int i = 0; i < 3; i++) {
            char pa[300], pb[300], pc[300];
            snprintf(pa, sizeof pa, "%s/%s", a, files[fmt][i]);
            snprintf(pb, sizeof pb, "%s/%s", b, files[fmt][i]);
            snprintf(pc, sizeof pc, "%s/%s", c, files[fmt][i]);
            CHECKF(helper_files_equal(pa, pb), "%s differs between two runs with one seed", pa);
            int weights = strstr(files[fmt][i], "json") == NULL;
            CHECKF(helper_files_equal(pa, pc) == !weights, "%s: seeds 123 and 124", files[fmt][i]);
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
        CHECK(helper_files_equal(tok, TOKENIZER));
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
        CHECKF(helper_count_entries(dir, &temps) == 1 && temps == 0,
               "%d entries after a failed write", helper_count_entries(dir, NULL));
        /* weights complete (under the limit), the 2.2 MB tokenizer copy fails */
        p.tokenizer = TOKENIZER;
        CHECK(synth_limited(&p, 1 << 20, &err) == MLM_ERR_IO);
        CHECKF(strstr(err.msg, "tokenizer.model"), "%s", err.msg);
        CHECKF(helper_count_entries(dir, &temps) == 1 && temps == 0,
               "%d entries after a late failure: complete files must not be renamed either",
               helper_count_entries(dir, NULL));
        CHECK(helper_files_equal(keep, keep));
    }
    size_t n;
    char *k = harness_read_file(keep, &n);
    CHECK(k && n == 5 && !memcmp(k, "mine\n", 5));
    free(k);
    /* an out_dir below a regular file cannot be created: IO naming it */
    char bad[400];
    snprintf(bad, sizeof bad, "%s/sub", keep);
    mlm_error err = {0};
    CHECK(helper_synth("tiny-test", bad, MLM_SYNTH_HF, MLM_DTYPE_BF16, 1, 0, &err) == MLM_ERR_IO);
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
    CHECK_OK(helper_synth("tiny-test", one, MLM_SYNTH_HF, MLM_DTYPE_BF16, 9, 0, &err), &err);
    CHECK_OK(helper_synth("tiny-test", set, MLM_SYNTH_HF, MLM_DTYPE_BF16, 9, 40000, &err), &err);
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
    CHECKF(helper_count_entries(dir, &temps) == 2 && temps == 0, "%d entries",
           helper_count_entries(dir, NULL));
    harness_rmtree(dir);
}

int main(void) {
    RUN(fewer_layers_write_read_back);
    RUN(tiny_write_read_back);
    RUN(tiny_phi3_write_read_back);
    RUN(tiny_qwen_write_read_back);
    RUN(hf_and_meta_hold_the_same_model);
    RUN(determinism);
    RUN(progress_total_and_tokenizer);
    RUN(failed_writes_leave_nothing);
    RUN(sharded_safetensors_set);
    RUN(writers_direct);
    return HARNESS_END();
}
