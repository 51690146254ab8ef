/* tools/cli/demo.c: `meshlm demo --preset NAME`: the seeds' demo configurations on a model:
 * prompts from the seeds' JSON files, batched prefill and decode of up to 32 users with paged
 * KV (a random disjoint page table per user), repeat batches (rotated for the determinism
 * presets), the special-token guard, the report (per user and the seeds' metrics) and its
 * JSON form with optional targets. The vision presets (Llama 3.2 Vision) run the same way with
 * each user's image bound to its prompt's image token (demo_vision.c). Token accuracy lives
 * in accuracy.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "demo_vision.h"

static void help(void) {
    printf(
        "usage: meshlm demo [--preset NAME] [-m PATH] [options]\n"
        "\n"
        "Runs one of the seed demos' configurations: prompts in, generated text and the\n"
        "demos' metrics out. The model is -m PATH (a model folder or a .gguf file), else\n"
        "$LLAMA_DIR (Meta checkpoint) or $HF_MODEL (local Hugging Face folder), else the\n"
        "default model (SmolLM2, fetched by scripts/setup.sh; the tiny embedded one\n"
        "without it).\n"
        "\n"
        "  --preset NAME              batch-1 (default), batch-32, long-context-16k,\n"
        "                             long-context-32k, long-context-64k, ci-1, ci-32,\n"
        "                             ci-eval-1, ci-eval-32, token-accuracy; on a mesh\n"
        "                             (mpirun) with data-parallel lanes of --batch-size\n"
        "                             users each: DP-4-b1, DP-8-b1, DP-4-b32, ci-b1-DP-2,\n"
        "                             ci-b1-DP-4, ci-b1-DP-8, ci-b1-DP-16, ci-b1-DP-32;\n"
        "                             for Llama 3.2 Vision (the seeds' vision demo: an\n"
        "                             image and a question per user): vision-batch-1,\n"
        "                             vision-batch-32, vision-batch-4-mixed (two of the\n"
        "                             four users text only)\n"
        "  -m, --model PATH           model folder or .gguf file\n"
        "  --input-prompts FILE       prompts (JSON list of {prompt, context, max_length});\n"
        "                             vision presets: {prompt, image}, the image a PNG or\n"
        "                             JPEG file relative to FILE's folder (none: text only)\n"
        "  --instruct 0|1             chat format (contexts wrapped in a fenced block)\n"
        "  --repeat-batches N         run the batch N times\n"
        "  --max-seq-len N            positions per user\n"
        "  --batch-size N             users: 1, 2, 4, 8, 16 or 32\n"
        "  --max-generated-tokens N   tokens per user at most\n"
        "  --paged-attention 0|1      0: each user's pages in order (no random table)\n"
        "  --page-params B,N          KV block size and number of blocks\n"
        "  --sampling-params T,P[,K]  temperature (0 = greedy), top-p, top-k for all users\n"
        "  --stop-at-eos 0|1          stop a user at an end-of-turn / end-of-text token\n"
        "  --reference FILE.refpt     token-accuracy reference (default DIR/reference.refpt,\n"
        "                             or NAME.refpt beside a model file "
        "NAME.gguf)\n" TOOL_PRECISION_HELP "  --report FILE.json         write the report as JSON\n"
        "  --expect FILE.json         targets {\"<preset>\": {\"decode_tps_user\": ..}}: exit 1\n"
        "                             listing any metric more than 5%% short\n"
        "  --threads N                threads (default: all cores)\n"
        "  --prefill-chunk N          prompt tokens per step (default 2048)\n"
        "  --quiet                    no per-user text\n"
        "  -h, --help                 this help\n");
}

static int parse_pair(const char *v, double *a, double *b, double *c) {
    int n = sscanf(v, "%lf,%lf,%lf", a, b, c);
    return n;
}

/* Fills C from the flags; *OWN_PROMPTS tells whether --input-prompts named the prompt file. */
static int parse(int argc, char **argv, demo_config *c, int *own_prompts) {
    memset(c, 0, sizeof *c);
    *own_prompts = 0;
    const char *preset = "batch-1";
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--preset") && i + 1 < argc) preset = argv[i + 1];
    if (!demo_preset(preset, c) && !demo_vision_preset(preset, c)) {
        char names[768] = "";
        for (int k = 0; demo_preset_names[k]; k++)
            snprintf(names + strlen(names), sizeof names - strlen(names), " %s", demo_preset_names[k]);
        for (int k = 0; demo_vision_preset_names[k]; k++)
            snprintf(names + strlen(names), sizeof names - strlen(names), " %s",
                     demo_vision_preset_names[k]);
        return tool_usage("demo", "unknown preset '%s' (presets:%s)", preset, names);
    }
    c->prefill_chunk = 2048;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        long long ll;
        double x, y, z;
#define VALUE()                                                                                    \
    if (!(v = tool_value(argc, argv, &i))) return tool_usage("demo", "%s needs a value", a)
#define INT(lo, hi)                                                                                \
    VALUE();                                                                                       \
    if (!tool_int("demo", a, v, lo, hi, &ll)) return TOOL_USAGE
        if (tool_is_help(a)) {
            help();
            return -1;
        } else if (!strcmp(a, "--preset")) {
            VALUE();
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            VALUE();
            c->model = v;
        } else if (!strcmp(a, "--input-prompts")) {
            VALUE();
            c->prompts = v;
            *own_prompts = 1;
        } else if (!strcmp(a, "--instruct")) {
            INT(0, 1);
            c->instruct = (int)ll;
        } else if (!strcmp(a, "--repeat-batches")) {
            INT(1, 1000);
            c->repeat_batches = (int)ll;
        } else if (!strcmp(a, "--max-seq-len")) {
            INT(2, 1 << 22);
            c->max_seq_len = (int32_t)ll;
        } else if (!strcmp(a, "--batch-size")) {
            INT(1, 32);
            if (ll & (ll - 1))
                return tool_usage("demo", "--batch-size must be 1, 2, 4, 8, 16 or 32, got %lld",
                                  ll);
            c->batch_size = (int32_t)ll;
        } else if (!strcmp(a, "--max-generated-tokens")) {
            INT(1, 1 << 22);
            c->max_generated_tokens = (int32_t)ll;
        } else if (!strcmp(a, "--paged-attention")) {
            INT(0, 1);
            c->paged_attention = (int)ll;
        } else if (!strcmp(a, "--page-params")) {
            VALUE();
            if (parse_pair(v, &x, &y, &z) != 2 || x < 1 || y < 1 || x > 65536 || y > (1 << 24) ||
                x != floor(x) || y != floor(y))
                return tool_usage("demo",
                                  "--page-params is BLOCK_SIZE,MAX_NUM_BLOCKS (positive "
                                  "integers), got '%s'",
                                  v);
            c->block_size = (int32_t)x, c->max_num_blocks = (int32_t)y;
        } else if (!strcmp(a, "--sampling-params")) {
            VALUE();
            int n = parse_pair(v, &x, &y, &z);
            if (n < 2 || x < 0 || x > 100 || y <= 0 || y > 1 || (n == 3 && (z < 0 || z > 1e6)))
                return tool_usage("demo",
                                  "--sampling-params is TEMPERATURE,TOP_P[,TOP_K] with "
                                  "temperature in [0, 100], top-p in (0, 1], top-k >= 0; "
                                  "got '%s'",
                                  v);
            c->temperature = (float)x, c->top_p = (float)y, c->top_k = n == 3 ? (int32_t)z : 0;
            c->per_user_sampling = 0;
        } else if (!strcmp(a, "--stop-at-eos")) {
            INT(0, 1);
            c->stop_at_eos = (int)ll;
        } else if (!strcmp(a, "--reference")) {
            VALUE();
            c->reference = v;
        } else if (!strcmp(a, "--report")) {
            VALUE();
            c->report = v;
        } else if (!strcmp(a, "--expect")) {
            VALUE();
            c->expect = v;
        } else if (!strcmp(a, "--threads")) {
            INT(1, 1024);
            c->n_threads = (int)ll;
        } else if (!strcmp(a, "--prefill-chunk")) {
            INT(1, 1 << 20);
            c->prefill_chunk = (int32_t)ll;
        } else if (!strcmp(a, "--quiet")) {
            c->quiet = 1;
        } else if (tool_is_precision_flag(a)) {
            VALUE();
            if (!tool_precision_flag("demo", a, v, &c->prec)) return TOOL_USAGE;
        } else {
            return tool_usage("demo", "unknown argument '%s'", a);
        }
#undef INT
#undef VALUE
    }
    if (demo_is_vision(c) && !c->instruct)
        return tool_usage("demo",
                          "the vision presets use the chat format (Meta's ChatFormat, as "
                          "the seeds): --instruct 0 is not supported with '%s'",
                          c->preset);
    if (!c->max_num_blocks) /* the vision presets: what the batch needs, unless --page-params */
        c->max_num_blocks = c->batch_size * ((c->max_seq_len + c->block_size - 1) / c->block_size);
    if ((int64_t)c->block_size * (c->max_num_blocks / c->batch_size) < c->max_seq_len)
        return tool_usage(
            "demo",
            "--page-params %d,%d give each of %d users %d blocks = %lld positions, "
            "less than --max-seq-len %d",
            c->block_size, c->max_num_blocks, c->batch_size, c->max_num_blocks / c->batch_size,
            (long long)c->block_size * (c->max_num_blocks / c->batch_size), c->max_seq_len);
    if (c->max_generated_tokens >= c->max_seq_len)
        return tool_usage("demo",
                          "--max-generated-tokens %d leaves no room for a prompt in "
                          "--max-seq-len %d",
                          c->max_generated_tokens, c->max_seq_len);
    return 0;
}

/* The model folder: -m, else $LLAMA_DIR, else $HF_MODEL, else the embedded default. */
static char *model_dir(const demo_config *c) {
    const char *env = getenv("LLAMA_DIR");
    if (c->model) return strdup(c->model);
    if (env && env[0]) return strdup(env);
    env = getenv("HF_MODEL");
    if (env && env[0]) return strdup(env);
    return tool_default_model("demo");
}

/* A random disjoint page table per user, as the seeds build it: a permutation of the pool
 * (seeded, so runs repeat), which the caller cuts into rows of blocks / batch. */
static int32_t *page_tables(int32_t blocks, uint64_t seed) {
    int32_t *perm = malloc((size_t)blocks * sizeof *perm);
    if (!perm) return NULL;
    for (int32_t i = 0; i < blocks; i++) perm[i] = i;
    for (int32_t i = blocks - 1; i > 0; i--) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int32_t j = (int32_t)((seed >> 33) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    return perm;
}

/* The ids that end a turn: the config's stop ids and the chat format's (for ChatML
 * <|im_end|> and <|im_start|>); at most 16 into IDS, the count returned. */
static int32_t end_of_turn_ids(const mlm_tokenizer *tok, const mlm_config *cfg, int32_t *ids) {
    int32_t n = 0;
    for (int i = 0; i < cfg->n_stop_ids && n < 8; i++) ids[n++] = cfg->stop_ids[i];
    return n + mlm_tokenizer_chat_stop_ids(tok, ids + n, 16 - n);
}

/* The special-token guard: the output is read up to its turn boundary (one of the N_ENDS
 * ids ENDS; for ChatML that cuts at <|im_end|> / <|im_start|>, as the Phi-4 seed does); a
 * special token before it fails the run. Returns the offending index or -1. */
static int32_t guard(const mlm_tokenizer *tok, const int32_t *ends, int32_t n_ends,
                     const mlm_gen_output *o) {
    for (int32_t i = 0; i < o->n; i++) {
        for (int32_t k = 0; k < n_ends; k++)
            if (o->tokens[i] == ends[k]) return -1;
        if (mlm_tokenizer_is_special(tok, o->tokens[i])) return i;
    }
    return -1;
}

static char *text_of(const mlm_tokenizer *tok, const int32_t *ids, int32_t n) {
    char *s = NULL;
    size_t len;
    if (mlm_tokenizer_decode(tok, ids, n, &s, &len, NULL)) return strdup("?");
    return s;
}

/* User U of repeat batch R in LANE: the prompt index (the list repeated to fill every lane's
 * batch, shifted by R for ci-eval's rotation) and its sampling, in *SP. */
static int user_of(const demo_config *c, const demo_prompt *prompts, int n_prompts, int lane, int r,
                   int u, mlm_sampler_params *sp) {
    int B = c->batch_size, k = ((c->rotate ? r : 0) + lane * B + u) % n_prompts;
    const mlm_tokens *ids = &prompts[k].ids;
    *sp = mlm_sampler_default_params();
    if (c->per_user_sampling && B > 1) { /* the seeds' batch-32 linspace */
        sp->temperature = (float)u / (float)(B - 1);
        sp->top_p = 0.08f + (1.0f - 0.08f) * (float)u / (float)(B - 1);
        sp->top_k = u + 1;
    } else {
        sp->temperature = c->temperature, sp->top_p = c->top_p, sp->top_k = c->top_k;
    }
    /* seeded by the prompt's tokens: the same prompt samples the same way anywhere */
    uint64_t h = 1469598103934665603ull;
    for (int64_t t = 0; t < ids->n; t++)
        h = (h ^ (uint64_t)(uint32_t)ids->ids[t]) * 1099511628211ull;
    sp->seed = h;
    return k;
}

/* The image pool's tiles for a batch: the most distinct images in any of C's batches (users
 * of one image share its K/V in the executor) times the model's tiles per image (0: no image
 * in any batch). */
static int32_t image_tiles(const demo_config *c, const demo_images *im, int32_t max_tiles) {
    int most = 0;
    unsigned char *seen = calloc((size_t)(im->n > 0 ? im->n : 1), 1);
    for (int r = 0; seen && r < c->repeat_batches; r++) {
        int n = 0;
        memset(seen, 0, (size_t)(im->n > 0 ? im->n : 1));
        for (int u = 0; u < c->batch_size; u++) {
            int k = im->of_prompt[((c->rotate ? r : 0) + u) % im->n_prompts];
            if (k >= 0 && !seen[k]) seen[k] = 1, n++;
        }
        if (n > most) most = n;
    }
    if (!seen) most = c->batch_size; /* out of memory: one image a user, as without sharing */
    free(seen);
    return most * max_tiles;
}

/* The vision presets' refusal of a model without vision (CFG); TOOL_USAGE. */
static int no_vision(const demo_config *c, const char *dir, const mlm_config *cfg) {
    return tool_usage("demo",
                      "preset '%s' needs a vision model (Llama 3.2 Vision, "
                      "MllamaForConditionalGeneration); %s is a %s model without images",
                      c->preset, dir, mlm_family_name(cfg->family));
}

int cmd_demo(int argc, char **argv) {
    demo_config c;
    int own_prompts = 0;
    int rc = parse(argc, argv, &c, &own_prompts);
    if (rc) return rc < 0 ? TOOL_OK : rc;
    int vision = demo_is_vision(&c);
    char *dir = model_dir(&c);
    if (!dir) return TOOL_USAGE;
    tool_precision_resolve(&c.prec, dir);
    if (!c.prec.dp && c.dp > 1) c.prec.dp = c.dp; /* the preset's lanes, unless --dp says */
    if ((c.token_accuracy || vision) && c.prec.dp > 1) {
        free(dir);
        return tool_usage("demo", "%s runs one lane: --dp %d has no lanes to fill",
                          vision ? "a vision preset" : "token accuracy", c.prec.dp);
    }
    /* prompts, before any model work; a preset's file is in the repository's prompts/ */
    demo_prompt *prompts = NULL;
    int n_prompts = 0;
    char *prompt_path = NULL;
    demo_images im = {0};
    if (!c.token_accuracy) {
        if ((own_prompts && strchr(c.prompts, '/')) || !(prompt_path = tool_repo_path("prompts")))
            prompt_path = strdup(c.prompts);
        else {
            char *full = malloc(strlen(prompt_path) + strlen(c.prompts) + 2);
            sprintf(full, "%s/%s", prompt_path, c.prompts);
            free(prompt_path);
            prompt_path = full;
        }
        char **paths = NULL;
        int ok = vision ? demo_prompts_read_vision(prompt_path, &prompts, &paths, &n_prompts)
                        : demo_prompts_read(prompt_path, c.instruct, &prompts, &n_prompts);
        if (ok && vision && !demo_images_index(paths, n_prompts, &im)) {
            fprintf(stderr, "meshlm demo: out of memory\n");
            ok = 0;
        }
        for (int i = 0; paths && i < n_prompts; i++)
            free(paths[i]);
        free(paths);
        if (!ok) {
            demo_prompts_free(prompts, n_prompts);
            demo_images_free(&im);
            free(dir), free(prompt_path);
            return TOOL_RUNTIME;
        }
    }
    mlm_exec_params xp = mlm_exec_default_params();
    xp.max_seqs = c.batch_size;
    xp.max_seq_len = c.max_seq_len;
    xp.block_size = c.block_size;
    xp.max_num_blocks = c.max_num_blocks;
    xp.max_step_tokens = c.prefill_chunk < c.max_seq_len ? c.prefill_chunk : c.max_seq_len;
    if (xp.max_step_tokens < c.batch_size) xp.max_step_tokens = c.batch_size;
    xp.max_step_logits = c.batch_size;
    xp.n_threads = c.n_threads;
    /* images: one a user, the pool for the batch's users with one; the text presets keep none
     * (a vision model runs them text only) */
    xp.max_images = 0;
    mlm_config vcfg;
    if (vision && !mlm_config_load(dir, &vcfg, NULL)) { /* else the loader says what is wrong */
        if (vcfg.image_token_id < 0) {
            rc = no_vision(&c, dir, &vcfg);
            demo_prompts_free(prompts, n_prompts);
            demo_images_free(&im);
            free(dir), free(prompt_path);
            return rc;
        }
        xp.image_tiles = image_tiles(&c, &im, vcfg.vision.max_tiles);
        xp.max_images = xp.image_tiles > 0;
    }
    if (!tool_memory_fits("demo", dir, &c.prec, &xp)) {
        int32_t fit = tool_largest_seq_len(dir, &c.prec, &xp, c.max_seq_len);
        if (fit > 0)
            fprintf(stderr, "  --max-seq-len %d --page-params %d,%d would fit\n", fit, c.block_size,
                    c.batch_size * (fit / c.block_size));
        demo_prompts_free(prompts, n_prompts);
        demo_images_free(&im);
        free(dir), free(prompt_path);
        return TOOL_RUNTIME;
    }
    if (vision && tool_mesh() && tool_mesh()->dp > 1) { /* a mesh preset's lanes (TG) */
        rc = tool_usage("demo", "a vision preset runs one lane, not %d", tool_mesh()->dp);
        demo_prompts_free(prompts, n_prompts);
        demo_images_free(&im);
        free(dir), free(prompt_path);
        return rc;
    }
    double t0 = tool_now();
    mlm_model *m = NULL;
    mlm_tokenizer *tok = NULL;
    mlm_exec *e = NULL;
    mlm_error err = {0};
    mlm_status st = tool_load_model("demo", dir, &c.prec, c.n_threads, &m, &err);
    /* token accuracy works on ids alone: a model without a tokenizer is fine there */
    if (!st && (!c.token_accuracy || mlm_tokenizer_present(dir)))
        st = mlm_tokenizer_load(dir, &tok, &err);
    demo_metrics mt = {0};
    mt.load_s = tool_now() - t0;
    if (st) {
        rc = tool_fail(&err);
    } else if (c.token_accuracy) {
        double top1 = 0, top5 = 0;
        rc = demo_token_accuracy(&c, dir, m, &top1, &top5);
        if (rc == TOOL_OK) {
            struct rusage ru;
            getrusage(RUSAGE_SELF, &ru);
            mt.peak_gb = (double)ru.ru_maxrss * 1024 / 1e9;
            rc = demo_report(&c, dir, m, &mt, "", 0, NULL, NULL, top1, top5);
        }
    } else if (vision && mlm_model_image_token(m) < 0) {
        rc = no_vision(&c, dir, mlm_model_config(m));
    } else {
        const mlm_config *cfg = mlm_model_config(m);
        demo_vision_metrics vm = {0};
        vm.images = &im;
        if (vision) { /* every distinct image once, then the dialogs around the image token */
            st = demo_images_encode(m, c.n_threads, &im, &err);
            for (int k = 0; k < im.n; k++)
                vm.open_s += im.open_s[k], vm.encode_s += im.encode_s[k];
            if (!st)
                st = demo_vision_tokenize(tok, mlm_model_image_token(m), prompts, n_prompts, &im,
                                          &err);
            /* an image prompt is never clipped: it must leave room for a token */
            for (int i = 0; !st && i < n_prompts; i++)
                if (prompts[i].ids.n >= c.max_seq_len) {
                    st = mlm_error_set(&err, MLM_ERR_CAPACITY,
                                       "demo: dialog %d holds %lld tokens, no room left in "
                                       "--max-seq-len %d",
                                       i, (long long)prompts[i].ids.n, c.max_seq_len);
                }
            xp.image_tiles = image_tiles(&c, &im, cfg->vision.max_tiles);
            xp.max_images = xp.image_tiles > 0;
        }
        /* tokenize: chat format for instruct, else plain (BOS for Meta checkpoints only, as the
         * seeds' Meta and HF paths) */
        for (int i = 0; !st && !vision && i < n_prompts; i++) {
            if (c.instruct) {
                mlm_chat_message msg = {"user", prompts[i].text};
                st = mlm_tokenizer_encode_chat(tok, &msg, 1, 1, &prompts[i].ids, &err);
            } else {
                mlm_encode_params ep = mlm_encode_default_params();
                ep.add_bos = !strcmp(cfg->source, "params.json") && mlm_tokenizer_bos_id(tok) >= 0;
                st = mlm_tokenizer_encode(tok, prompts[i].text, strlen(prompts[i].text), &ep,
                                          &prompts[i].ids, &err);
            }
        }
        if (!st) st = mlm_exec_create(m, &xp, &e, &err);
        int32_t ends[16], n_ends = end_of_turn_ids(tok, cfg, ends);
        int32_t n_stops = c.stop_at_eos ? n_ends : 0; /* users stop at the same ids */
        int B = c.batch_size, R = c.repeat_batches;
        const mlm_mesh *mesh = tool_mesh();
        int lane = tool_mesh_lane(), dp = mesh ? mesh->dp : 1;
        mlm_gen_user *users = calloc((size_t)B, sizeof *users);
        mlm_gen_output *outs = calloc((size_t)(B * R), sizeof *outs);
        int *which = calloc((size_t)(B * R), sizeof *which); /* prompt index of each output */
        mlm_sampler_params *sp_of = calloc((size_t)(B * R), sizeof *sp_of);
        char failures[4096] = "";
        double prefill_s = 0, decode_s = 0, first_s = 0, bind_s = 0;
        int64_t prefill_tokens = 0, decode_tokens = 0, steps = 0;
        int32_t max_prefill = c.max_seq_len - c.max_generated_tokens;
        for (int r = 0; !st && r < R; r++) {
            for (int u = 0; u < B; u++) {
                int k = user_of(&c, prompts, n_prompts, lane, r, u, &sp_of[r * B + u]);
                which[r * B + u] = k;
                const mlm_tokens *ids = &prompts[k].ids;
                int64_t n = ids->n, skip = n > max_prefill ? n - max_prefill : 0; /* left-clip */
                users[u].prompt = ids->ids + skip, users[u].n_prompt = (int32_t)(n - skip);
                users[u].max_new_tokens = c.max_generated_tokens;
                if (vision) { /* the whole dialog, and what max_seq_len leaves for the answer */
                    int ki = im.of_prompt[k];
                    users[u].prompt = ids->ids, users[u].n_prompt = (int32_t)n;
                    if (n + c.max_generated_tokens > c.max_seq_len)
                        users[u].max_new_tokens = c.max_seq_len - (int32_t)n;
                    users[u].images = ki >= 0 ? &im.img[ki] : NULL;
                    users[u].n_images = ki >= 0;
                }
                users[u].stop_ids = ends, users[u].n_stop_ids = n_stops;
                users[u].sampling = sp_of[r * B + u];
            }
            int32_t per_user = c.max_num_blocks / B, *perm = NULL;
            const int32_t *pages[32];
            if (c.paged_attention && (perm = page_tables(c.max_num_blocks, 1234 + (uint64_t)r)))
                for (int u = 0; u < B; u++) pages[u] = perm + (size_t)u * per_user;
            mlm_gen_stats gs;
            /* a user's table holds max_num_blocks / batch blocks; it uses what max_seq_len needs */
            int32_t need = (c.max_seq_len + c.block_size - 1) / c.block_size;
            double tg = tool_now();
            st = mlm_exec_generate(e, users, B, perm ? pages : NULL, need < per_user ? need : per_user,
                                   outs + r * B, &gs, &err);
            free(perm);
            if (st) break;
            /* before its prefill generate binds the users' images: their cross-attention K/V */
            bind_s += tool_now() - tg - gs.prefill_s - gs.first_decode_s - gs.decode_s;
            prefill_s += gs.prefill_s, prefill_tokens += gs.prefill_tokens;
            decode_s += gs.decode_s, first_s += gs.first_decode_s;
            decode_tokens += gs.decode_tokens, steps += gs.decode_steps > 0 ? gs.decode_steps - 1 : 0;
        }
        if (st) rc = tool_fail(&err);
        /* DP lanes: every lane's outputs to rank 0, which checks and reports them all */
        demo_lane_stats lanes[64] = {{0}};
        if (!rc && dp > 1) {
            struct rusage ru0;
            getrusage(RUSAGE_SELF, &ru0);
            demo_lane_stats me = {
                prefill_s,      decode_s,      first_s, (double)ru0.ru_maxrss * 1024 / 1e9,
                prefill_tokens, decode_tokens, steps};
            mlm_gen_output *all = calloc((size_t)(dp * B * R), sizeof *all);
            int *which_all = calloc((size_t)(dp * B * R), sizeof *which_all);
            mlm_sampler_params *sp_all = calloc((size_t)(dp * B * R), sizeof *sp_all);
            if (!all || !which_all || !sp_all || dp > 64 ||
                !demo_lanes_gather(mesh, outs, B * R, &me, all, lanes))
                rc = TOOL_RUNTIME;
            for (int l = 0; l < dp; l++)
                for (int r = 0; r < R; r++)
                    for (int u = 0; u < B; u++) {
                        int i = (l * R + r) * B + u;
                        which_all[i] = user_of(&c, prompts, n_prompts, l, r, u, &sp_all[i]);
                    }
            for (int i = 0; i < B * R; i++)
                mlm_gen_output_deinit(&outs[i]);
            free(outs), free(which), free(sp_of);
            outs = all, which = which_all, sp_of = sp_all, R *= dp; /* lanes as more batches */
            prefill_s = decode_s = first_s = 0, prefill_tokens = decode_tokens = steps = 0;
            for (int l = 0; l < dp; l++) {
                const demo_lane_stats *ls = &lanes[l];
                prefill_s += ls->prefill_s, decode_s += ls->decode_s, first_s += ls->first_s;
                prefill_tokens += ls->prefill_tokens, decode_tokens += ls->decode_tokens;
                steps += ls->steps;
                mt.lane_tps[l] = ls->decode_s > 0 ? (double)ls->decode_tokens / ls->decode_s : 0;
                mt.lane_tps_user[l] = ls->decode_s > 0 ? (double)ls->steps / ls->decode_s : 0;
                if (ls->peak_gb > mt.peak_gb) mt.peak_gb = ls->peak_gb;
            }
            mt.n_lanes = dp, mt.tp = mesh->tp;
        }
        /* on a mesh rank 0 checks and reports for every lane and rank */
        int reporter = tool_rank() == 0;
        /* the guard, then determinism: every prompt's outputs identical across repeats */
        for (int i = 0; !rc && reporter && i < B * R; i++) {
            int32_t bad = guard(tok, ends, n_ends, &outs[i]);
            if (bad >= 0) {
                size_t len;
                const char *t = mlm_tokenizer_token_bytes(tok, outs[i].tokens[bad], &len);
                snprintf(failures + strlen(failures), sizeof failures - strlen(failures),
                         "special-token guard: batch %d user %d (prompt %d) generated special "
                         "token %d '%.*s' at output position %d, before the end of its turn\n",
                         i / B, i % B, which[i], outs[i].tokens[bad], (int)(t ? len : 1),
                         t ? t : "?", bad);
            }
        }
        for (int i = 0; !rc && reporter && i < B * R; i++)
            for (int j = i + 1; j < B * R; j++) {
                /* the same prompt tokens with the same sampling must give the same output,
                 * whatever the batch, slot, pages or neighbours */
                const mlm_tokens *pa = &prompts[which[i]].ids, *pb = &prompts[which[j]].ids;
                if (pa->n != pb->n || memcmp(pa->ids, pb->ids, (size_t)pa->n * 4) ||
                    (vision && im.of_prompt[which[i]] != im.of_prompt[which[j]]) ||
                    sp_of[i].temperature != sp_of[j].temperature ||
                    sp_of[i].top_p != sp_of[j].top_p || sp_of[i].top_k != sp_of[j].top_k ||
                    sp_of[i].seed != sp_of[j].seed)
                    continue;
                const mlm_gen_output *a = &outs[i], *b = &outs[j];
                mt.determinism_checks++;
                int32_t d = 0;
                while (d < a->n && d < b->n && a->tokens[d] == b->tokens[d]) d++;
                if (d < a->n || d < b->n)
                    snprintf(failures + strlen(failures), sizeof failures - strlen(failures),
                             "determinism: prompt %d gave different outputs in batch %d slot %d "
                             "and batch %d slot %d: first difference at token %d (%d vs %d)\n",
                             which[i], i / B, i % B, j / B, j % B, d, d < a->n ? a->tokens[d] : -1,
                             d < b->n ? b->tokens[d] : -1);
                break; /* compare each output with the next one of the same prompt */
            }
        if (!rc && reporter) {
            struct rusage ru;
            getrusage(RUSAGE_SELF, &ru);
            mt.ttft_ms = prefill_s / (B * R) * 1e3;
            mt.prefill_tps = prefill_s > 0 ? (double)prefill_tokens / prefill_s : 0;
            mt.decode_tps_user = decode_s > 0 ? (double)steps / decode_s : 0;
            mt.decode_tps = decode_s > 0 ? (double)decode_tokens / decode_s : 0;
            mt.step_ms = steps > 0 ? decode_s / (double)steps * 1e3 : 0;
            double own_gb = (double)ru.ru_maxrss * 1024 / 1e9;
            if (own_gb > mt.peak_gb) mt.peak_gb = own_gb; /* lanes: the largest rank's */
            if (mt.n_lanes > 1) { /* the lanes run at once: their rates add up */
                mt.decode_tps = 0;
                for (int l = 0; l < mt.n_lanes; l++)
                    mt.decode_tps += mt.lane_tps[l];
                /* prefill: each lane's prompts in its own time, side by side */
                mt.prefill_tps =
                    prefill_s > 0 ? (double)prefill_tokens / (prefill_s / mt.n_lanes) : 0;
            }
            int *image_of = calloc((size_t)(B * R), sizeof *image_of);
            if (vision && image_of) { /* TTFT as the seeds' vision demo: per batch, with vision */
                double with = vm.open_s + vm.encode_s + bind_s + prefill_s;
                mt.ttft_ms = with / R * 1e3;
                mt.prefill_tps = with > 0 ? (double)prefill_tokens / with : 0;
                vm.bind_s = bind_s;
                vm.ttft_text_ms = prefill_s / R * 1e3;
                vm.prefill_text_tps = prefill_s > 0 ? (double)prefill_tokens / prefill_s : 0;
                for (int i = 0; i < B * R; i++)
                    vm.image_users += (image_of[i] = im.of_prompt[which[i]]) >= 0;
                vm.image_of_output = image_of;
            }
            char **ptext = calloc((size_t)(B * R), sizeof *ptext);
            char **otext = calloc((size_t)(B * R), sizeof *otext);
            for (int i = 0; ptext && otext && i < B * R; i++) {
                ptext[i] = strdup(prompts[which[i]].text);
                otext[i] = text_of(tok, outs[i].tokens, outs[i].n);
            }
            rc = demo_report_vision(&c, dir, m, &mt, vision && image_of ? &vm : NULL, failures,
                                    B * R, ptext, otext, -1, -1);
            free(image_of);
            for (int i = 0; ptext && otext && i < B * R; i++) free(ptext[i]), free(otext[i]);
            free(ptext), free(otext);
        }
        for (int i = 0; i < B * R; i++) mlm_gen_output_deinit(&outs[i]);
        free(users), free(outs), free(which), free(sp_of);
    }
    mlm_exec_free(e);
    mlm_tokenizer_free(tok);
    mlm_model_free(m);
    demo_prompts_free(prompts, n_prompts);
    demo_images_free(&im);
    free(dir), free(prompt_path);
    return rc;
}
