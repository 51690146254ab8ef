/* tools/cli/info.c: `meshlm info`: what a model directory or checkpoint file holds:
 * format, family, config, parameter counts, bytes per dtype, files, tokenizer. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static void help(void) {
    printf("usage: meshlm info -m PATH [--json]\n"
           "       meshlm info --system [--json]\n"
           "\n"
           "Describes a model: PATH is a model directory (HF config.json + *.safetensors, or\n"
           "Meta params.json + consolidated.NN.pth + tokenizer.model), a GGUF file or a folder\n"
           "holding one, or one checkpoint file (.safetensors, .pth/.pt/.refpt zip written by\n"
           "torch.save, model.safetensors.index.json). Prints the detected format and family,\n"
           "the configuration, the parameter count, elements and bytes per type (the file's\n"
           "own: f32, bf16, q4_1, q6_k, ...), the files, and the profile the model runs in by\n"
           "default with the type it gives each weight, and the profile meshlm chat runs it\n"
           "in and why. Nothing is loaded beyond mapping.\n"
           "\n"
           "  -m, --model PATH   model directory or checkpoint file\n"
           "      --system       this machine instead: the CPU, the features it and the OS\n"
           "                     offer, every kernel level (runs here or what is missing,\n"
           "                     and its kernels) and the level models load with\n"
           "                     (MESHLM_KERNELS=amx|avx512|avxvnni|avx2|ref forces one)\n"
           "      --json         one JSON object on stdout instead of text\n"
           "  -h, --help         this help\n");
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

typedef struct info {
    const char *path;
    int have_cfg, have_ckpt, have_tok;
    mlm_config cfg;
    mlm_checkpoint *ckpt;
    mlm_tokenizer *tok;
    int64_t n_params;
    int n_types; /* element types seen, in first-seen order */
    struct {
        const char *name;
        int64_t numel, bytes;
    } types[48];
    const char *profile; /* the default profile and what it turns the weights into */
    char profile_types[1024];
    const char *chat_profile; /* what `meshlm chat` runs it in (tool_chat_profile), and why */
    char chat_why[256];
} info;

static void count_type(info *in, const mlm_tensor_view *t) {
    const char *name = mlm_tensor_type_name(t);
    int i = 0;
    while (i < in->n_types && strcmp(in->types[i].name, name)) i++;
    if (i == in->n_types) {
        if (i == (int)(sizeof in->types / sizeof in->types[0])) return;
        in->types[in->n_types++].name = name;
    }
    in->types[i].numel += mlm_tensor_numel(t);
    in->types[i].bytes += mlm_tensor_nbytes(t);
}

static const char *format_name(const info *in) {
    if (!in->have_ckpt) return in->have_cfg && !strcmp(in->cfg.source, "params.json") ? "meta" : "hf";
    if (mlm_checkpoint_format(in->ckpt) == MLM_CKPT_SAFETENSORS) return "safetensors";
    if (mlm_checkpoint_format(in->ckpt) == MLM_CKPT_GGUF) return "gguf";
    return in->have_cfg && !strcmp(in->cfg.source, "params.json") ? "meta-pth" : "pytorch";
}

/* Llama 3.2 Vision: the cross-attention schedule and the vision tower. */
static void print_vision(const mlm_config *c) {
    printf("cross-attn: %d of the %d layers:", c->n_cross, c->n_layer);
    for (int i = 0; i < c->n_cross; i++) printf(" %d", c->cross_layers[i]);
    printf("; image token %d\n", c->image_token_id);
    const mlm_vision_config *v = &c->vision;
    int per_side = v->image_size / v->patch_size;
    printf("vision:     n_embd %d, %d local + %d global layers, n_head %d, n_ff %d, norm_eps %g\n",
           v->n_embd, v->n_layer, v->n_global_layer, v->n_head, v->n_ff, v->norm_eps);
    printf("            tiles of %d x %d pixels (%d x %d patches of %d), up to %d tiles;\n",
           v->image_size, v->image_size, per_side, per_side, v->patch_size, v->max_tiles);
    printf("            intermediate layers");
    for (int i = 0; i < v->n_intermediate; i++) printf(" %d", v->intermediate[i]);
    printf(", output %d wide; aspect ratios", v->output_dim);
    for (int i = 0; i < v->n_aspect; i++) printf(" %dx%d", v->aspect[i][0], v->aspect[i][1]);
    printf("\n");
}

static void print_text(const info *in) {
    printf("path:       %s\n", in->path);
    int same = in->have_cfg && !strcmp(format_name(in), in->cfg.source);
    printf("format:     %s%s%s\n", format_name(in), in->have_cfg && !same ? " + " : "",
           in->have_cfg && !same ? in->cfg.source : "");
    if (in->have_cfg) {
        const mlm_config *c = &in->cfg;
        printf("family:     %s\n", mlm_family_name(c->family));
        printf("config:     n_embd %d, n_layer %d, n_head %d, n_kv_head %d, head_dim %d, n_ff %d, "
               "n_vocab %d\n",
               c->n_embd, c->n_layer, c->n_head, c->n_kv_head, c->head_dim, c->n_ff, c->n_vocab);
        printf("            norm_eps %g, rope_theta %g, ", c->norm_eps, c->rope_theta);
        if (c->rope_type == MLM_ROPE_LLAMA3)
            printf("rope llama3 (factor %g, low %g, high %g, original ctx %d)", c->rope_factor,
                   c->rope_low_freq_factor, c->rope_high_freq_factor, c->rope_orig_ctx);
        else printf("rope plain");
        printf(", trained ctx %d\n", c->n_ctx_train);
        printf("            tied embeddings %s, bos %d, stop ids", c->tied_embeddings ? "yes" : "no",
               c->bos_id);
        for (int i = 0; i < c->n_stop_ids; i++) printf(" %d", c->stop_ids[i]);
        printf(", pad %d\n", c->pad_id);
        if (c->family == MLM_FAMILY_MLLAMA) print_vision(c);
        printf("params:     %lld (from config%s)\n", (long long)mlm_config_n_params(c),
               c->family == MLM_FAMILY_MLLAMA ? "; the text decoder, the vision tower not counted"
                                                : "");
    }
    if (in->have_ckpt) {
        printf("tensors:    %lld, %lld params\n", (long long)mlm_checkpoint_n_tensors(in->ckpt),
               (long long)in->n_params);
        for (int i = 0; i < in->n_types; i++)
            printf("  %-6s    %lld elements, %lld bytes\n", in->types[i].name,
                   (long long)in->types[i].numel, (long long)in->types[i].bytes);
        for (int i = 0; i < mlm_checkpoint_n_files(in->ckpt); i++) {
            size_t size;
            const char *f = mlm_checkpoint_file(in->ckpt, i, &size);
            printf("file:       %s (%zu bytes)\n", f, size);
        }
        for (int64_t i = 0; i < mlm_checkpoint_n_values(in->ckpt); i++) {
            const char *name = mlm_checkpoint_value_name(in->ckpt, i), *s;
            int64_t v;
            if (mlm_checkpoint_get_int(in->ckpt, name, &v, NULL) == MLM_OK)
                printf("value:      %s = %lld\n", name, (long long)v);
            else if (mlm_checkpoint_get_str(in->ckpt, name, &s, NULL) == MLM_OK)
                printf("value:      %s = \"%s\"\n", name, s);
        }
    } else {
        printf("weights:    none found\n");
    }
    if (in->profile)
        printf("profile:    %s by default, which runs them as: %s\n", in->profile,
               in->profile_types);
    if (in->chat_profile)
        printf("chat:       %s in meshlm chat: %s\n", in->chat_profile, in->chat_why);
    if (in->have_tok) printf("tokenizer:  %d tokens\n", mlm_tokenizer_n_vocab(in->tok));
}

static void print_json(const info *in) {
    printf("{\"path\":");
    tool_json_string(stdout, in->path, strlen(in->path));
    printf(",\"format\":\"%s\"", format_name(in));
    if (in->have_cfg) {
        const mlm_config *c = &in->cfg;
        printf(",\"config_source\":\"%s\",\"family\":\"%s\",\"config\":{\"n_embd\":%d,"
               "\"n_layer\":%d,\"n_head\":%d,\"n_kv_head\":%d,\"head_dim\":%d,\"n_ff\":%d,"
               "\"n_vocab\":%d,\"n_ctx_train\":%d,\"norm_eps\":%g,\"rope_theta\":%g,"
               "\"rope_type\":\"%s\",\"rope_factor\":%g,\"tied_embeddings\":%s,\"bos_id\":%d,"
               "\"pad_id\":%d,\"stop_ids\":[",
               c->source, mlm_family_name(c->family), c->n_embd, c->n_layer, c->n_head,
               c->n_kv_head, c->head_dim, c->n_ff, c->n_vocab, c->n_ctx_train, c->norm_eps,
               c->rope_theta, c->rope_type == MLM_ROPE_LLAMA3 ? "llama3" : "none",
               c->rope_type == MLM_ROPE_LLAMA3 ? c->rope_factor : 1.0,
               c->tied_embeddings ? "true" : "false", c->bos_id, c->pad_id);
        for (int i = 0; i < c->n_stop_ids; i++) printf("%s%d", i ? "," : "", c->stop_ids[i]);
        printf("]");
        if (c->family == MLM_FAMILY_MLLAMA) {
            const mlm_vision_config *v = &c->vision;
            printf(",\"image_token_id\":%d,\"cross_attention_layers\":[", c->image_token_id);
            for (int i = 0; i < c->n_cross; i++) printf("%s%d", i ? "," : "", c->cross_layers[i]);
            printf("],\"vision\":{\"n_embd\":%d,\"n_layer\":%d,\"n_global_layer\":%d,"
                   "\"n_head\":%d,\"n_ff\":%d,\"image_size\":%d,\"patch_size\":%d,"
                   "\"max_tiles\":%d,\"output_dim\":%d,\"norm_eps\":%g,"
                   "\"intermediate_layers\":[",
                   v->n_embd, v->n_layer, v->n_global_layer, v->n_head, v->n_ff, v->image_size,
                   v->patch_size, v->max_tiles, v->output_dim, v->norm_eps);
            for (int i = 0; i < v->n_intermediate; i++) printf("%s%d", i ? "," : "", v->intermediate[i]);
            printf("],\"aspect_ratios\":[");
            for (int i = 0; i < v->n_aspect; i++)
                printf("%s[%d,%d]", i ? "," : "", v->aspect[i][0], v->aspect[i][1]);
            printf("]}");
        }
        printf("},\"params_from_config\":%lld", (long long)mlm_config_n_params(c));
    }
    if (in->have_ckpt) {
        printf(",\"n_tensors\":%lld,\"params\":%lld,\"dtypes\":{",
               (long long)mlm_checkpoint_n_tensors(in->ckpt), (long long)in->n_params);
        for (int i = 0; i < in->n_types; i++)
            printf("%s\"%s\":{\"elements\":%lld,\"bytes\":%lld}", i ? "," : "",
                   in->types[i].name, (long long)in->types[i].numel,
                   (long long)in->types[i].bytes);
        printf("},\"files\":[");
        for (int i = 0; i < mlm_checkpoint_n_files(in->ckpt); i++) {
            size_t size;
            const char *f = mlm_checkpoint_file(in->ckpt, i, &size);
            printf("%s{\"path\":", i ? "," : "");
            tool_json_string(stdout, f, strlen(f));
            printf(",\"bytes\":%zu}", size);
        }
        printf("]");
    }
    if (in->profile) {
        printf(",\"default_profile\":\"%s\",\"profile_types\":", in->profile);
        tool_json_string(stdout, in->profile_types, strlen(in->profile_types));
    }
    if (in->chat_profile) {
        printf(",\"chat_profile\":\"%s\",\"chat_profile_why\":", in->chat_profile);
        tool_json_string(stdout, in->chat_why, strlen(in->chat_why));
    }
    if (in->have_tok) printf(",\"tokenizer_vocab\":%d", mlm_tokenizer_n_vocab(in->tok));
    printf("}\n");
}

static int cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* `meshlm info --system`: exit 1 when MESHLM_KERNELS names a level this machine lacks. */
static int system_info(int json) {
    mlm_error err = {0};
    const char *chosen = NULL;
    mlm_status st = mlm_kernels_chosen(&chosen, &err);
    if (json) {
        printf("{\"cpu\":");
        tool_json_string(stdout, mlm_cpu_name(), strlen(mlm_cpu_name()));
        printf(",\"cores\":%d,\"features\":", cores());
        tool_json_string(stdout, mlm_cpu_features(), strlen(mlm_cpu_features()));
        printf(",\"levels\":[");
    } else {
        printf("cpu:        %s, %d cores\n", mlm_cpu_name(), cores());
        printf("features:   %s\n", mlm_cpu_features());
        printf("kernel levels, best first:\n");
    }
    for (int i = 0; i < mlm_kernel_levels_count(); i++) {
        mlm_kernel_level l;
        mlm_kernel_level_info(i, &l);
        if (json) {
            printf("%s{\"name\":\"%s\",\"available\":%s", i ? "," : "", l.name,
                   l.available ? "true" : "false");
            if (!l.available) {
                printf(",\"missing\":");
                tool_json_string(stdout, l.missing, strlen(l.missing));
            }
            for (int w = 0; w < l.n_matmul; w++)
                printf(",\"%s\":\"%s\"", l.weight_type[w], l.matmul[w] ? l.matmul[w] : "");
            printf(",\"attention\":\"%s\",\"gelu\":\"%s\"}", l.attention ? l.attention : "",
                   l.gelu ? l.gelu : "");
        } else {
            printf("  %-8s %s\n", l.name, l.available ? "runs here" : l.missing);
            printf("          ");
            for (int w = 0; w < l.n_matmul; w++)
                printf(" %s %s,%s", l.weight_type[w], l.matmul[w], w % 4 == 3 ? "\n          " : "");
            printf(" attention %s, gelu %s\n", l.attention, l.gelu);
        }
    }
    const char *forced = getenv("MESHLM_KERNELS");
    if (json) {
        printf("],\"kernels\":");
        if (st)
            tool_json_string(stdout, err.msg, strlen(err.msg));
        else printf("\"%s\"", chosen);
        printf("}\n");
    } else if (!st) {
        printf("kernels:    %s (%s)\n", chosen,
               forced && *forced ? "forced by MESHLM_KERNELS" : "the best this machine runs");
    }
    return st ? tool_fail(&err) : TOOL_OK;
}

int cmd_info(int argc, char **argv) {
    info in = {0};
    int json = 0, sys = 0;
    for (int i = 1; i < argc; i++) {
        if (tool_is_help(argv[i])) {
            help();
            return TOOL_OK;
        } else if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) {
            if (!(in.path = tool_value(argc, argv, &i)))
                return tool_usage("info", "-m needs a path");
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--system")) {
            sys = 1;
        } else {
            return tool_usage("info", "unknown argument '%s'", argv[i]);
        }
    }
    if (sys && in.path) return tool_usage("info", "give -m PATH or --system, not both");
    if (sys) return system_info(json);
    if (!in.path) return tool_usage("info", "-m PATH or --system is required");
    mlm_error err = {0};
    int dir = is_dir(in.path);
    if (dir) {
        if (mlm_config_load(in.path, &in.cfg, &err) == MLM_OK) in.have_cfg = 1;
        else if (err.status != MLM_ERR_IO)
            return tool_fail(&err); /* present but bad */
    }
    if (!dir || mlm_checkpoint_present(in.path)) {
        if (mlm_checkpoint_open(in.path, &in.ckpt, &err) != MLM_OK) return tool_fail(&err);
        in.have_ckpt = 1;
        for (int64_t i = 0; i < mlm_checkpoint_n_tensors(in.ckpt); i++) {
            const mlm_tensor_view *t = mlm_checkpoint_tensor(in.ckpt, i);
            in.n_params += mlm_tensor_numel(t);
            count_type(&in, t);
        }
    }
    int gguf = in.have_ckpt && mlm_checkpoint_format(in.ckpt) == MLM_CKPT_GGUF;
    if (gguf && !dir) {
        if (mlm_config_load(in.path, &in.cfg, &err) != MLM_OK) {
            mlm_checkpoint_free(in.ckpt);
            return tool_fail(&err);
        }
        in.have_cfg = 1;
    }
    if (in.have_cfg && in.have_ckpt) {
        in.profile = mlm_model_default_profile(in.path);
        if (mlm_profile_types_at(in.path, in.profile, NULL, in.profile_types,
                                 sizeof in.profile_types, &err) != MLM_OK)
            in.profile = NULL;
        else
            in.chat_profile = tool_chat_profile(in.path, in.chat_why, sizeof in.chat_why);
    }
    if (dir && !in.have_cfg && !in.have_ckpt) {
        fprintf(stderr, "meshlm: %s: no config.json, params.json or checkpoint files\n", in.path);
        return TOOL_RUNTIME;
    }
    if ((dir || gguf) && mlm_tokenizer_present(in.path)) {
        if (mlm_tokenizer_load(in.path, &in.tok, &err) != MLM_OK) {
            mlm_checkpoint_free(in.ckpt);
            return tool_fail(&err);
        }
        in.have_tok = 1;
    }
    if (json) print_json(&in);
    else print_text(&in);
    mlm_checkpoint_free(in.ckpt);
    mlm_tokenizer_free(in.tok);
    return TOOL_OK;
}
