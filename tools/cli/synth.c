/* tools/cli/synth.c: `meshlm synth`: writes a checkpoint with a real model's configuration
 * and random weights (mlm_synth), after checking that the output directory is empty (or
 * --force) and that its filesystem has room; a progress line goes to stderr. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cli.h"

/* GB that PRESET writes in bf16 with its first N_LAYER layers (0: all). */
static double preset_gb(const char *preset, int32_t n_layer) {
    mlm_synth_params p = mlm_synth_default_params();
    p.preset = preset;
    p.out_dir = ".";
    p.n_layer = n_layer;
    int64_t bytes = 0;
    mlm_synth_total_bytes(&p, &bytes, NULL);
    return (double)bytes / 1e9;
}

static void help(void) {
    printf("usage: meshlm synth --preset NAME --out DIR [--format hf|meta] [--dtype bf16|f32]\n"
           "                    [--layers N] [--seed S] [--force]\n"
           "\n"
           "Writes a checkpoint that has the exact configuration of a real model and random\n"
           "weights: approximately normal, std 0.02 for the embedding and 1/sqrt(in_features)\n"
           "for the projections, RMSNorm weights 1; llama-3.2-11b-vision also LayerNorm weights\n"
           "1, biases std 0.02, class, positional and tile embeddings std 0.1, and every gate\n"
           "0.5 +- 0.1 (nonzero, so images matter). The same seed gives the same bytes, and the\n"
           "hf and meta formats of one seed hold the same model. Memory stays a few MB.\n"
           "\n"
           "  --preset NAME   the model (required); bf16 sizes, all layers and one layer:\n");
    const char *list = mlm_synth_presets();
    while (*list) {
        size_t n = strcspn(list, " ");
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)n, list);
        printf("                    %-20s (%.1f GB; %.2f GB a layer)\n", name,
               preset_gb(name, 0), preset_gb(name, 2) - preset_gb(name, 1));
        list += n + (list[n] == ' ');
    }
    printf("                  (qwen3-*, qwen2.5-*: the real config.json texts; no\n"
           "                  generation_config.json, none having been found to copy;\n"
           "                  qwen2.5-* are the base models' configs)\n"
           "  --out DIR       output directory (required); created if missing, and it must be\n"
           "                  empty unless --force\n"
           "  --format FMT    hf (default): config.json, generation_config.json and\n"
           "                  model.safetensors, or 5 GB shards model-0000K-of-0000N.safetensors\n"
           "                  + model.safetensors.index.json, as Hugging Face publishes them\n"
           "                  (phi-4: Phi3ForCausalLM names, fused qkv_proj and gate_up_proj;\n"
           "                  llama-3.2-11b-vision: MllamaForConditionalGeneration names, and\n"
           "                  preprocessor_config.json);\n"
           "                  meta: params.json + consolidated.NN.pth (torch.save zips; 8 shards\n"
           "                  for llama-3.1-70b; llama-3.2-11b-vision: consolidated.pth), as\n"
           "                  Meta publishes them; Llama presets only (Phi-4 and Qwen have no\n"
           "                  Meta-format checkpoint)\n"
           "  --dtype T       bf16 (default) or f32\n"
           "  --layers N      only the first N layers (1 to the preset's count; default all):\n"
           "                  every shape stays the preset's and config.json / params.json say\n"
           "                  N, so a big model's paths run on a small machine (llama-3.1-70b\n"
           "                  --layers 2: %.1f GB, 8 Meta shards still). llama-3.2-11b-vision:\n"
           "                  the first N of its 40 decoder layers, cross-attention layers among\n"
           "                  them kept, and the whole vision tower (--layers 5: 4 self- and 1\n"
           "                  cross-attention layer, %.1f GB); the meta format takes N = 5, 10,\n"
           "                  ..., 40 only, as Meta places cross-attention layers by their count\n"
           "  --seed S        random seed, an integer in [0, 2^64) (default 0)\n"
           "  --force         write into a non-empty DIR (files of the same names are replaced)\n"
           "  -h, --help      this help\n"
           "\n"
           "The tokenizer is copied into DIR. Llama presets: tokenizer.model from the file\n"
           "$MESHLM_TOKENIZER, else from the source tree the binary was built in\n"
           "(tests/data/tokenizer/llama3/tokenizer.model). phi-4: tokenizer.json,\n"
           "tokenizer_config.json and special_tokens_map.json from the directory\n"
           "$MESHLM_PHI4_TOKENIZER, else from the source tree (tests/data/tokenizer/phi4/).\n"
           "Qwen presets: tokenizer.json and tokenizer_config.json from the directory\n"
           "$MESHLM_QWEN_TOKENIZER (a real Qwen folder), else a stand-in from the source tree\n"
           "(tests/data/qwen/chat/qwen3/ or qwen2.5/): Qwen's pre-tokenizer, NFC, special\n"
           "tokens and real chat template over a 612-token vocabulary, so text runs through\n"
           "every path but is not split as Qwen's 151k vocabulary splits it.\n"
           "Without one a warning is printed and DIR gets no tokenizer.\n"
           "Free space is checked (statvfs) before writing. Files are written under temporary\n"
           "names and renamed when all are complete: a failure leaves no partial file.\n",
           preset_gb("llama-3.1-70b", 2), preset_gb("llama-3.2-11b-vision", 5));
}

typedef struct progress_state {
    double start, last;
    int tty, last_tenth;
} progress_state;

static void on_progress(void *ctx, int64_t done, int64_t total) {
    progress_state *ps = ctx;
    double now = tool_now(), secs = now - ps->start;
    int tenth = total > 0 ? (int)(10 * done / total) : 10;
    if (ps->tty ? (now - ps->last < 0.25 && done < total) : tenth == ps->last_tenth) return;
    ps->last = now;
    ps->last_tenth = tenth;
    double mb = (double)done / 1e6, rate = secs > 0 ? mb / secs : 0;
    fprintf(stderr, "%ssynth: %.1f / %.1f MB (%d%%), %.0f MB/s%s", ps->tty ? "\r" : "", mb,
            (double)total / 1e6, total > 0 ? (int)(100 * done / total) : 100, rate,
            ps->tty ? "  " : "\n");
    fflush(stderr);
}

/* 1 if DIR exists and holds anything, 0 if it is empty or missing, -1 if it is unreadable. */
static int dir_nonempty(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : -1;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d)))
        found = strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return found;
}

/* Free bytes on the filesystem that DIR (or its nearest existing parent) is on; -1 unknown. */
static int64_t free_bytes(const char *dir) {
    char *p = strdup(dir);
    if (!p) return -1;
    struct statvfs vs;
    int64_t r = -1;
    for (;;) {
        if (statvfs(p, &vs) == 0) {
            r = (int64_t)vs.f_bavail * (int64_t)vs.f_frsize;
            break;
        }
        char *slash = strrchr(p, '/');
        if (!slash) {
            if (strcmp(p, ".") && statvfs(".", &vs) == 0)
                r = (int64_t)vs.f_bavail * (int64_t)vs.f_frsize;
            break;
        }
        if (slash == p) {
            p[1] = 0;
            if (statvfs(p, &vs) == 0) r = (int64_t)vs.f_bavail * (int64_t)vs.f_frsize;
            break;
        }
        *slash = 0;
    }
    free(p);
    return r;
}

/* The malloc'd tokenizer path for PRESET (mlm_synth_preset_tokenizer says where it comes
 * from), or NULL after a warning. A directory counts only once the file it must hold
 * (tokenizer.json) is there. */
static char *find_tokenizer(const char *preset, const char *out_dir) {
    mlm_synth_tokenizer t;
    if (!mlm_synth_preset_tokenizer(preset, &t)) return NULL;
    const mlm_synth_tokenizer *ts = &t;
    char *tok = NULL;
    const char *env = getenv(ts->env);
    if (env && *env) {
        char *file = ts->need ? malloc(strlen(env) + strlen(ts->need) + 2) : strdup(env);
        if (file && ts->need) sprintf(file, "%s/%s", env, ts->need);
        struct stat sb;
        if (file && stat(file, &sb) == 0 && S_ISREG(sb.st_mode))
            tok = strdup(env);
        else
            fprintf(stderr, "meshlm: warning: %s=%s is not %s\n", ts->env, env,
                    ts->need ? "a directory holding tokenizer.json" : "a file");
        free(file);
    }
    if (!tok) {
        char rel[512];
        snprintf(rel, sizeof rel, "%s%s%s", ts->rel, ts->need ? "/" : "", ts->need ? ts->need : "");
        tok = tool_repo_path(rel);
        if (tok && ts->need) *strrchr(tok, '/') = 0; /* pass the directory */
    }
    if (!tok)
        fprintf(stderr, "meshlm: warning: no %s found (set %s); %s will have no tokenizer\n",
                ts->what, ts->env, out_dir);
    return tok;
}

static int parse_seed(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-' || *s == '+') return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || errno) return 0;
    *out = v;
    return 1;
}

int cmd_synth(int argc, char **argv) {
    mlm_synth_params p = mlm_synth_default_params();
    int force = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (tool_is_help(a)) {
            help();
            return TOOL_OK;
        } else if (!strcmp(a, "--preset")) {
            if (!(p.preset = tool_value(argc, argv, &i)))
                return tool_usage("synth", "--preset needs a name (%s)", mlm_synth_presets());
        } else if (!strcmp(a, "--out")) {
            if (!(p.out_dir = tool_value(argc, argv, &i)))
                return tool_usage("synth", "--out needs a directory");
        } else if (!strcmp(a, "--format")) {
            v = tool_value(argc, argv, &i);
            if (v && !strcmp(v, "hf"))
                p.format = MLM_SYNTH_HF;
            else if (v && !strcmp(v, "meta"))
                p.format = MLM_SYNTH_META;
            else
                return tool_usage("synth", "--format needs hf or meta, got '%s'", v ? v : "");
        } else if (!strcmp(a, "--dtype")) {
            v = tool_value(argc, argv, &i);
            if (v && !strcmp(v, "bf16"))
                p.dtype = MLM_DTYPE_BF16;
            else if (v && !strcmp(v, "f32"))
                p.dtype = MLM_DTYPE_F32;
            else
                return tool_usage("synth", "--dtype needs bf16 or f32, got '%s'", v ? v : "");
        } else if (!strcmp(a, "--seed")) {
            v = tool_value(argc, argv, &i);
            if (!parse_seed(v, &p.seed))
                return tool_usage("synth", "--seed needs an integer in [0, 2^64), got '%s'",
                                  v ? v : "");
        } else if (!strcmp(a, "--layers")) {
            long long n;
            if (!tool_int("synth", "--layers", tool_value(argc, argv, &i), 1, 1000000, &n))
                return TOOL_USAGE;
            p.n_layer = (int32_t)n;
        } else if (!strcmp(a, "--force")) {
            force = 1;
        } else {
            return tool_usage("synth", "unknown option '%s'", a);
        }
    }
    if (!p.preset)
        return tool_usage("synth", "--preset NAME is required (%s)", mlm_synth_presets());
    if (!p.out_dir || !*p.out_dir) return tool_usage("synth", "--out DIR is required");
    /* Hidden test presets are for the tests; the command offers the real ones, and the hidden
     * ones too with MESHLM_TEST_PRESETS=1 (the shell tests' small models). */
    size_t n = strlen(p.preset);
    const char *list = mlm_synth_presets(), *hit = strstr(list, p.preset);
    const char *test = getenv("MESHLM_TEST_PRESETS");
    if (!(test && !strcmp(test, "1")) &&
        (!hit || (hit != list && hit[-1] != ' ') || (hit[n] != ' ' && hit[n] != 0)))
        return tool_usage("synth", "unknown preset '%s' (presets: %s)", p.preset, list);
    /* Arguments that do not fit together (phi-4 in the Meta format) are usage errors. */
    mlm_error err = {0};
    int64_t total;
    if (mlm_synth_total_bytes(&p, &total, &err) == MLM_ERR_INVALID_ARG)
        return tool_usage("synth", "%s", err.msg + (strncmp(err.msg, "synth: ", 7) ? 0 : 7));

    struct stat sb;
    if (stat(p.out_dir, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "meshlm: %s: exists and is not a directory\n", p.out_dir);
        return TOOL_RUNTIME;
    }
    int ne = dir_nonempty(p.out_dir);
    if (ne < 0) {
        fprintf(stderr, "meshlm: %s: cannot read the directory: %s\n", p.out_dir, strerror(errno));
        return TOOL_RUNTIME;
    }
    if (ne && !force) {
        fprintf(stderr,
                "meshlm: %s is not empty; refusing to write a checkpoint into it (use --force to "
                "write anyway: files of the same names are replaced)\n",
                p.out_dir);
        return TOOL_RUNTIME;
    }

    char *tok = find_tokenizer(p.preset, p.out_dir);
    p.tokenizer = tok;
    if (mlm_synth_total_bytes(&p, &total, &err)) {
        free(tok);
        return tool_fail(&err);
    }
    char layers[32] = "";
    if (p.n_layer) snprintf(layers, sizeof layers, " --layers %d", (int)p.n_layer);
    int64_t avail = free_bytes(p.out_dir);
    if (avail >= 0 && avail < total) {
        fprintf(stderr,
                "meshlm: %s: not enough free space: %s%s needs %.1f MB (%lld bytes), the "
                "filesystem has %.1f MB (%lld bytes) free\n",
                p.out_dir, p.preset, layers, (double)total / 1e6, (long long)total,
                (double)avail / 1e6, (long long)avail);
        free(tok);
        return TOOL_RUNTIME;
    }

    progress_state ps = {.start = tool_now(), .tty = isatty(2), .last_tenth = -1};
    p.progress = on_progress;
    p.progress_ctx = &ps;
    mlm_status st = mlm_synth(&p, &err);
    if (ps.tty) fputc('\n', stderr);
    free(tok);
    if (st) return tool_fail(&err);
    double secs = tool_now() - ps.start;
    fprintf(stderr, "synth: wrote %s%s (%s, %s, seed %llu) to %s: %.1f MB in %.1f s (%.0f MB/s)\n",
            p.preset, layers, p.format == MLM_SYNTH_META ? "meta" : "hf", mlm_dtype_name(p.dtype),
            (unsigned long long)p.seed, p.out_dir, (double)total / 1e6, secs,
            secs > 0 ? (double)total / 1e6 / secs : 0);
    return TOOL_OK;
}
