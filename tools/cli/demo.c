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
        "\n"
        "Speculative decoding: after the plain batches the same users run again, drafting\n"
        "and verifying; the report adds the drafted and accepted tokens, decode speed with\n"
        "and without speculation and its speed-up, and checks that every greedy user's\n"
        "output equals its plain output (one process; not with the vision presets):\n"
        TOOL_DRAFT_HELP
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
    tool_draft_init(&c->draft);
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
        } else if (!strcmp(a, "--draft-ngram")) {
            c->draft.ngram = 1;
        } else if (tool_is_draft_flag(a)) {
            VALUE();
            if (!tool_draft_flag("demo", a, v, &c->draft)) return TOOL_USAGE;
        } else if (tool_is_precision_flag(a)) {
            VALUE();
            if (!tool_precision_flag("demo", a, v, &c->prec)) return TOOL_USAGE;
        } else {
            return tool_usage("demo", "unknown argument '%s'", a);
        }
#undef INT
#undef VALUE
    }
    if (!tool_draft_check("demo", &c->draft)) return TOOL_USAGE;
    if (tool_draft_max(&c->draft) && (demo_is_vision(c) || c->token_accuracy))
        return tool_usage("demo", "--draft-model and --draft-ngram speculate on the text presets, "
                                  "not on '%s'",
                          c->preset);
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

// ---- one run, in steps ----

/* Everything one demo run holds; run_free releases it whatever state it is in. After the
 * lanes are gathered, R counts every lane's batches and the outputs are all of them. */
typedef struct demo_run {
    demo_config c;
    int own_prompts, vision;
    char *dir, *prompt_path; /* owned */
    demo_prompt *prompts;    /* owned (n_prompts) */
    int n_prompts;
    demo_images im; /* owned: the vision presets' images */
    mlm_exec_params xp;
    mlm_model *m;       /* owned */
    mlm_tokenizer *tok; /* owned */
    mlm_exec *e;        /* owned */
    mlm_error err;
    demo_metrics mt;
    demo_vision_metrics vm;
    int B, R;                  /* users per batch, batches */
    mlm_gen_user *users;       /* owned (B) */
    mlm_gen_output *outs;      /* owned (B * R) */
    int *which;                /* owned (B * R): the prompt of each output */
    mlm_sampler_params *sp_of; /* owned (B * R): its sampling */
    int32_t ends[16], n_ends;  /* end-of-turn ids */
    char failures[4096];
    double prefill_s, decode_s, first_s, bind_s;
    int64_t prefill_tokens, decode_tokens, steps;
    mlm_gen_output *spec_outs; /* owned (B * R): the speculative pass's, with a draft */
    demo_spec_stats spec;
} demo_run;

static void run_free(demo_run *r) {
    for (int i = 0; r->outs && i < r->B * r->R; i++)
        mlm_gen_output_deinit(&r->outs[i]);
    for (int i = 0; r->spec_outs && i < r->B * r->R; i++)
        mlm_gen_output_deinit(&r->spec_outs[i]);
    free(r->users), free(r->outs), free(r->which), free(r->sp_of), free(r->spec_outs);
    tool_draft_free(&r->c.draft);
    mlm_exec_free(r->e);
    mlm_tokenizer_free(r->tok);
    mlm_model_free(r->m);
    demo_prompts_free(r->prompts, r->n_prompts);
    demo_images_free(&r->im);
    free(r->dir), free(r->prompt_path);
}

/* The prompts, before any model work; a preset's file is in the repository's prompts/. */
static int read_prompts(demo_run *r) {
    const demo_config *c = &r->c;
    if ((r->own_prompts && strchr(c->prompts, '/')) ||
        !(r->prompt_path = tool_repo_path("prompts")))
        r->prompt_path = strdup(c->prompts);
    else {
        char *full = malloc(strlen(r->prompt_path) + strlen(c->prompts) + 2);
        sprintf(full, "%s/%s", r->prompt_path, c->prompts);
        free(r->prompt_path);
        r->prompt_path = full;
    }
    char **paths = NULL;
    int ok = r->vision
                 ? demo_prompts_read_vision(r->prompt_path, &r->prompts, &paths, &r->n_prompts)
                 : demo_prompts_read(r->prompt_path, c->instruct, &r->prompts, &r->n_prompts);
    if (ok && r->vision && !demo_images_index(paths, r->n_prompts, &r->im)) {
        fprintf(stderr, "meshlm demo: out of memory\n");
        ok = 0;
    }
    for (int i = 0; paths && i < r->n_prompts; i++)
        free(paths[i]);
    free(paths);
    return ok ? TOOL_OK : TOOL_RUNTIME;
}

/* The executor's parameters, and the check that the model fits with them. */
static int plan(demo_run *r) {
    const demo_config *c = &r->c;
    mlm_exec_params *xp = &r->xp;
    *xp = mlm_exec_default_params();
    xp->max_seqs = c->batch_size;
    xp->max_seq_len = c->max_seq_len;
    xp->block_size = c->block_size;
    xp->max_num_blocks = c->max_num_blocks;
    xp->max_step_tokens = c->prefill_chunk < c->max_seq_len ? c->prefill_chunk : c->max_seq_len;
    if (xp->max_step_tokens < c->batch_size) xp->max_step_tokens = c->batch_size;
    xp->max_step_logits = c->batch_size;
    xp->n_threads = c->n_threads;
    /* images: one a user, the pool for the batch's users with one; the text presets keep none
     * (a vision model runs them text only) */
    xp->max_images = 0;
    mlm_config vcfg;
    if (r->vision && !mlm_config_load(r->dir, &vcfg, NULL)) { /* else the loader says why */
        if (vcfg.image_token_id < 0) return no_vision(c, r->dir, &vcfg);
        xp->image_tiles = image_tiles(c, &r->im, vcfg.vision.max_tiles);
        xp->max_images = xp->image_tiles > 0;
    }
    if (!tool_memory_fits("demo", r->dir, &c->prec, xp, &c->draft)) {
        int32_t fit = tool_largest_seq_len(r->dir, &c->prec, xp, c->max_seq_len);
        if (fit > 0)
            fprintf(stderr, "  --max-seq-len %d --page-params %d,%d would fit\n", fit,
                    c->block_size, c->batch_size * (fit / c->block_size));
        return TOOL_RUNTIME;
    }
    if (r->vision && tool_mesh() && tool_mesh()->dp > 1) /* a mesh preset's lanes (TG) */
        return tool_usage("demo", "a vision preset runs one lane, not %d", tool_mesh()->dp);
    return TOOL_OK;
}

/* The prompts' tokens: the vision dialogs around the image token (every distinct image
 * encoded once), or the chat format for instruct, else plain (BOS for Meta checkpoints only,
 * as the seeds' Meta and HF paths). */
static mlm_status tokenize(demo_run *r) {
    const demo_config *c = &r->c;
    const mlm_config *cfg = mlm_model_config(r->m);
    mlm_status st = MLM_OK;
    if (r->vision) {
        st = demo_images_encode(r->m, c->n_threads, &r->im, &r->err);
        for (int k = 0; k < r->im.n; k++)
            r->vm.open_s += r->im.open_s[k], r->vm.encode_s += r->im.encode_s[k];
        if (!st)
            st = demo_vision_tokenize(r->tok, mlm_model_image_token(r->m), r->prompts, r->n_prompts,
                                      &r->im, &r->err);
        /* an image prompt is never clipped: it must leave room for a token */
        for (int i = 0; !st && i < r->n_prompts; i++)
            if (r->prompts[i].ids.n >= c->max_seq_len)
                st = mlm_error_set(&r->err, MLM_ERR_CAPACITY,
                                   "demo: dialog %d holds %lld tokens, no room left in "
                                   "--max-seq-len %d",
                                   i, (long long)r->prompts[i].ids.n, c->max_seq_len);
        r->xp.image_tiles = image_tiles(c, &r->im, cfg->vision.max_tiles);
        r->xp.max_images = r->xp.image_tiles > 0;
        return st;
    }
    for (int i = 0; !st && i < r->n_prompts; i++) {
        demo_prompt *p = &r->prompts[i];
        if (c->instruct) {
            mlm_chat_message msg = {"user", p->text};
            st = mlm_tokenizer_encode_chat(r->tok, &msg, 1, 1, &p->ids, &r->err);
        } else {
            mlm_encode_params ep = mlm_encode_default_params();
            ep.add_bos = !strcmp(cfg->source, "params.json") && mlm_tokenizer_bos_id(r->tok) >= 0;
            st = mlm_tokenizer_encode(r->tok, p->text, strlen(p->text), &ep, &p->ids, &r->err);
        }
    }
    return st;
}

/* Batch B's users in r->users: this lane's prompts, left-clipped to leave room for the
 * answer (r->which and r->sp_of record each one's prompt and sampling). */
static void fill_users(demo_run *r, int b) {
    const demo_config *c = &r->c;
    int B = r->B;
    int32_t n_stops = c->stop_at_eos ? r->n_ends : 0; /* users stop at the same ids */
    int lane = tool_mesh_lane();
    int32_t max_prefill = c->max_seq_len - c->max_generated_tokens;
    for (int u = 0; u < B; u++) {
        mlm_gen_user *us = &r->users[u];
        int k = user_of(c, r->prompts, r->n_prompts, lane, b, u, &r->sp_of[b * B + u]);
        r->which[b * B + u] = k;
        const mlm_tokens *ids = &r->prompts[k].ids;
        int64_t n = ids->n, skip = n > max_prefill ? n - max_prefill : 0; /* left-clip */
        us->prompt = ids->ids + skip, us->n_prompt = (int32_t)(n - skip);
        us->max_new_tokens = c->max_generated_tokens;
        if (r->vision) { /* the whole dialog, and what max_seq_len leaves for the answer */
            int ki = r->im.of_prompt[k];
            us->prompt = ids->ids, us->n_prompt = (int32_t)n;
            if (n + c->max_generated_tokens > c->max_seq_len)
                us->max_new_tokens = c->max_seq_len - (int32_t)n;
            us->images = ki >= 0 ? &r->im.img[ki] : NULL;
            us->n_images = ki >= 0;
        }
        us->stop_ids = r->ends, us->n_stop_ids = n_stops;
        us->sampling = r->sp_of[b * B + u];
    }
}

/* The batches: each one's users, a random disjoint page table per user, one
 * mlm_exec_generate. */
static mlm_status run_batches(demo_run *r) {
    const demo_config *c = &r->c;
    int B = r->B;
    mlm_status st = MLM_OK;
    for (int b = 0; !st && b < r->R; b++) {
        fill_users(r, b);
        int32_t per_user = c->max_num_blocks / B, *perm = NULL;
        const int32_t *pages[32];
        if (c->paged_attention && (perm = page_tables(c->max_num_blocks, 1234 + (uint64_t)b)))
            for (int u = 0; u < B; u++)
                pages[u] = perm + (size_t)u * per_user;
        mlm_gen_stats gs;
        /* a user's table holds max_num_blocks / batch blocks; it uses what max_seq_len needs */
        int32_t need = (c->max_seq_len + c->block_size - 1) / c->block_size;
        double tg = tool_now();
        st = mlm_exec_generate(r->e, r->users, B, perm ? pages : NULL,
                               need < per_user ? need : per_user, r->outs + b * B, &gs, &r->err);
        free(perm);
        if (st) break;
        /* before its prefill generate binds the users' images: their cross-attention K/V */
        r->bind_s += tool_now() - tg - gs.prefill_s - gs.first_decode_s - gs.decode_s;
        r->prefill_s += gs.prefill_s, r->prefill_tokens += gs.prefill_tokens;
        r->decode_s += gs.decode_s, r->first_s += gs.first_decode_s;
        r->decode_tokens += gs.decode_tokens;
        r->steps += gs.decode_steps > 0 ? gs.decode_steps - 1 : 0;
    }
    return st;
}

/* The speculative pass: the plain executor freed, the draft loaded, the same batches through
 * a scheduler that drafts and verifies. */
static mlm_status run_spec(demo_run *r) {
    mlm_exec_free(r->e);
    r->e = NULL;
    demo_spec *d = NULL;
    mlm_status st = tool_draft_load("demo", &r->c.draft, r->tok, r->c.n_threads, &r->err);
    if (!st) st = demo_spec_create(&r->c, r->m, r->xp.max_step_tokens, &d, &r->err);
    if (!st && !(r->spec_outs = calloc((size_t)(r->B * r->R), sizeof *r->spec_outs)))
        st = mlm_error_set(&r->err, MLM_ERR_NOMEM, "demo: out of memory");
    for (int b = 0; !st && b < r->R; b++) {
        fill_users(r, b);
        st = demo_spec_batch(d, r->users, r->B, r->spec_outs + b * r->B, &r->spec, &r->err);
    }
    demo_spec_free(d);
    return st;
}

/* DP lanes: every lane's outputs to rank 0, which then holds them all as more batches. */
static int gather_lanes(demo_run *r) {
    const mlm_mesh *mesh = tool_mesh();
    int dp = mesh ? mesh->dp : 1, B = r->B, R = r->R, rc = TOOL_OK;
    if (dp <= 1) return TOOL_OK;
    demo_lane_stats lanes[64] = {{0}};
    struct rusage ru0;
    getrusage(RUSAGE_SELF, &ru0);
    demo_lane_stats me = {
        r->prefill_s,      r->decode_s,      r->first_s, (double)ru0.ru_maxrss * 1024 / 1e9,
        r->prefill_tokens, r->decode_tokens, r->steps};
    mlm_gen_output *all = calloc((size_t)(dp * B * R), sizeof *all);
    int *which_all = calloc((size_t)(dp * B * R), sizeof *which_all);
    mlm_sampler_params *sp_all = calloc((size_t)(dp * B * R), sizeof *sp_all);
    if (!all || !which_all || !sp_all || dp > 64 ||
        !demo_lanes_gather(mesh, r->outs, B * R, &me, all, lanes))
        rc = TOOL_RUNTIME;
    for (int l = 0; l < dp; l++)
        for (int b = 0; b < R; b++)
            for (int u = 0; u < B; u++) {
                int i = (l * R + b) * B + u;
                which_all[i] = user_of(&r->c, r->prompts, r->n_prompts, l, b, u, &sp_all[i]);
            }
    for (int i = 0; i < B * R; i++)
        mlm_gen_output_deinit(&r->outs[i]);
    free(r->outs), free(r->which), free(r->sp_of);
    r->outs = all, r->which = which_all, r->sp_of = sp_all, r->R *= dp; /* lanes as batches */
    r->prefill_s = r->decode_s = r->first_s = 0;
    r->prefill_tokens = r->decode_tokens = r->steps = 0;
    demo_metrics *mt = &r->mt;
    for (int l = 0; l < dp; l++) {
        const demo_lane_stats *ls = &lanes[l];
        r->prefill_s += ls->prefill_s, r->decode_s += ls->decode_s, r->first_s += ls->first_s;
        r->prefill_tokens += ls->prefill_tokens, r->decode_tokens += ls->decode_tokens;
        r->steps += ls->steps;
        mt->lane_tps[l] = ls->decode_s > 0 ? (double)ls->decode_tokens / ls->decode_s : 0;
        mt->lane_tps_user[l] = ls->decode_s > 0 ? (double)ls->steps / ls->decode_s : 0;
        if (ls->peak_gb > mt->peak_gb) mt->peak_gb = ls->peak_gb;
    }
    mt->n_lanes = dp, mt->tp = mesh->tp;
    return rc;
}

/* The first position where A and B differ (one ending before the other counts), -1 if none. */
static int32_t first_difference(const mlm_gen_output *a, const mlm_gen_output *b) {
    int32_t d = 0;
    while (d < a->n && d < b->n && a->tokens[d] == b->tokens[d])
        d++;
    return d < a->n || d < b->n ? d : -1;
}

/* O's token at D, or -1 past its end. */
static int32_t token_at(const mlm_gen_output *o, int32_t d) { return d < o->n ? o->tokens[d] : -1; }

/* The special-token guard, then determinism: every prompt's outputs identical across
 * repeats. Failures go into r->failures. */
static void check_outputs(demo_run *r) {
    int n = r->B * r->R, B = r->B;
    char *f = r->failures;
    size_t cap = sizeof r->failures;
    for (int i = 0; i < n; i++) {
        int32_t bad = guard(r->tok, r->ends, r->n_ends, &r->outs[i]);
        if (bad < 0) continue;
        size_t len;
        const char *t = mlm_tokenizer_token_bytes(r->tok, r->outs[i].tokens[bad], &len);
        snprintf(f + strlen(f), cap - strlen(f),
                 "special-token guard: batch %d user %d (prompt %d) generated special "
                 "token %d '%.*s' at output position %d, before the end of its turn\n",
                 i / B, i % B, r->which[i], r->outs[i].tokens[bad], (int)(t ? len : 1), t ? t : "?",
                 bad);
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            /* the same prompt tokens with the same sampling must give the same output,
             * whatever the batch, slot, pages or neighbours */
            const mlm_tokens *pa = &r->prompts[r->which[i]].ids, *pb = &r->prompts[r->which[j]].ids;
            const mlm_sampler_params *si = &r->sp_of[i], *sj = &r->sp_of[j];
            if (pa->n != pb->n || memcmp(pa->ids, pb->ids, (size_t)pa->n * 4) ||
                (r->vision && r->im.of_prompt[r->which[i]] != r->im.of_prompt[r->which[j]]) ||
                si->temperature != sj->temperature || si->top_p != sj->top_p ||
                si->top_k != sj->top_k || si->seed != sj->seed)
                continue;
            const mlm_gen_output *a = &r->outs[i], *b = &r->outs[j];
            r->mt.determinism_checks++;
            int32_t d = first_difference(a, b);
            if (d >= 0)
                snprintf(f + strlen(f), cap - strlen(f),
                         "determinism: prompt %d gave different outputs in batch %d slot %d "
                         "and batch %d slot %d: first difference at token %d (%d vs %d)\n",
                         r->which[i], i / B, i % B, j / B, j % B, d, token_at(a, d),
                         token_at(b, d));
            break; /* compare each output with the next one of the same prompt */
        }
    for (int i = 0; r->spec_outs && i < n; i++) {
        if (r->sp_of[i].temperature > 0) { /* a draw of the same distribution, not the same draw */
            r->mt.spec_sampled++;
            continue;
        }
        const mlm_gen_output *a = &r->outs[i], *b = &r->spec_outs[i];
        r->mt.spec_checks++;
        int32_t d = first_difference(a, b);
        if (d >= 0)
            snprintf(f + strlen(f), cap - strlen(f),
                     "speculative decoding: batch %d user %d (prompt %d) differs from plain "
                     "decoding at token %d (%d vs %d)\n",
                     i / B, i % B, r->which[i], d, token_at(b, d), token_at(a, d));
    }
}

/* The seeds' metrics from the batches' times, then the report (text and JSON). */
static int report(demo_run *r) {
    demo_metrics *mt = &r->mt;
    int B = r->B, R = r->R;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    mt->ttft_ms = r->prefill_s / (B * R) * 1e3;
    mt->prefill_tps = r->prefill_s > 0 ? (double)r->prefill_tokens / r->prefill_s : 0;
    mt->decode_tps_user = r->decode_s > 0 ? (double)r->steps / r->decode_s : 0;
    mt->decode_tps = r->decode_s > 0 ? (double)r->decode_tokens / r->decode_s : 0;
    mt->step_ms = r->steps > 0 ? r->decode_s / (double)r->steps * 1e3 : 0;
    if (r->spec_outs) { /* both passes alike: tokens after each user's first, per user */
        const demo_spec_stats *ss = &r->spec;
        int64_t after_first = 0;
        for (int i = 0; i < B * R; i++)
            after_first += r->outs[i].n - 1;
        double plain_s = r->first_s + r->decode_s;
        mt->spec = 1;
        mt->plain_tps_user = plain_s > 0 ? (double)after_first / B / plain_s : 0;
        mt->spec_tps_user = ss->decode_s > 0 ? (double)ss->decode_tokens / B / ss->decode_s : 0;
        mt->speedup = mt->plain_tps_user > 0 ? mt->spec_tps_user / mt->plain_tps_user : 0;
        mt->tokens_per_step =
            ss->decode_steps > 0 ? (double)ss->decode_tokens / B / (double)ss->decode_steps : 0;
        mt->drafted = ss->drafted, mt->accepted = ss->accepted;
    }
    double own_gb = (double)ru.ru_maxrss * 1024 / 1e9;
    if (own_gb > mt->peak_gb) mt->peak_gb = own_gb; /* lanes: the largest rank's */
    if (mt->n_lanes > 1) {                          /* the lanes run at once: their rates add up */
        mt->decode_tps = 0;
        for (int l = 0; l < mt->n_lanes; l++)
            mt->decode_tps += mt->lane_tps[l];
        /* prefill: each lane's prompts in its own time, side by side */
        mt->prefill_tps =
            r->prefill_s > 0 ? (double)r->prefill_tokens / (r->prefill_s / mt->n_lanes) : 0;
    }
    demo_vision_metrics *vm = &r->vm;
    int *image_of = calloc((size_t)(B * R), sizeof *image_of);
    if (r->vision && image_of) { /* TTFT as the seeds' vision demo: per batch, with vision */
        double with = vm->open_s + vm->encode_s + r->bind_s + r->prefill_s;
        mt->ttft_ms = with / R * 1e3;
        mt->prefill_tps = with > 0 ? (double)r->prefill_tokens / with : 0;
        vm->bind_s = r->bind_s;
        vm->ttft_text_ms = r->prefill_s / R * 1e3;
        vm->prefill_text_tps = r->prefill_s > 0 ? (double)r->prefill_tokens / r->prefill_s : 0;
        for (int i = 0; i < B * R; i++)
            vm->image_users += (image_of[i] = r->im.of_prompt[r->which[i]]) >= 0;
        vm->image_of_output = image_of;
    }
    char **ptext = calloc((size_t)(B * R), sizeof *ptext);
    char **otext = calloc((size_t)(B * R), sizeof *otext);
    for (int i = 0; ptext && otext && i < B * R; i++) {
        ptext[i] = strdup(r->prompts[r->which[i]].text);
        otext[i] = text_of(r->tok, r->outs[i].tokens, r->outs[i].n);
    }
    int rc = demo_report_vision(&r->c, r->dir, r->m, mt, r->vision && image_of ? vm : NULL,
                                r->failures, B * R, ptext, otext, -1, -1);
    free(image_of);
    for (int i = 0; ptext && otext && i < B * R; i++)
        free(ptext[i]), free(otext[i]);
    free(ptext), free(otext);
    return rc;
}

/* Token accuracy: teacher-forced against the reference, then its report. */
static int token_accuracy(demo_run *r) {
    double top1 = 0, top5 = 0;
    int rc = demo_token_accuracy(&r->c, r->dir, r->m, &top1, &top5);
    if (rc != TOOL_OK) return rc;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    r->mt.peak_gb = (double)ru.ru_maxrss * 1024 / 1e9;
    return demo_report(&r->c, r->dir, r->m, &r->mt, "", 0, NULL, NULL, top1, top5);
}

/* After the flags: prompts, plan, load, then token accuracy or the batches, their checks
 * and the report (on a mesh rank 0 checks and reports for every lane and rank). */
static int demo(demo_run *r) {
    demo_config *c = &r->c;
    r->vision = demo_is_vision(c);
    if (!(r->dir = model_dir(c))) return TOOL_USAGE;
    tool_precision_resolve(&c->prec, r->dir);
    if (!c->prec.dp && c->dp > 1) c->prec.dp = c->dp; /* the preset's lanes, unless --dp says */
    if ((c->token_accuracy || r->vision) && c->prec.dp > 1)
        return tool_usage("demo", "%s runs one lane: --dp %d has no lanes to fill",
                          r->vision ? "a vision preset" : "token accuracy", c->prec.dp);
    int rc = c->token_accuracy ? TOOL_OK : read_prompts(r);
    if (!rc) rc = plan(r);
    if (rc) return rc;
    if (tool_draft_max(&c->draft) && tool_mesh())
        return tool_usage("demo", "--draft-model and --draft-ngram run on one process (generate "
                                  "and serve take them on a mesh)");
    double t0 = tool_now();
    mlm_status st = tool_load_model("demo", r->dir, &c->prec, c->n_threads, &r->m, &r->err);
    /* token accuracy works on ids alone: a model without a tokenizer is fine there */
    if (!st && (!c->token_accuracy || mlm_tokenizer_present(r->dir)))
        st = mlm_tokenizer_load(r->dir, &r->tok, &r->err);
    r->mt.load_s = tool_now() - t0;
    if (st) return tool_fail(&r->err);
    if (c->token_accuracy) return token_accuracy(r);
    if (r->vision && mlm_model_image_token(r->m) < 0)
        return no_vision(c, r->dir, mlm_model_config(r->m));
    r->vm.images = &r->im;
    r->B = c->batch_size, r->R = c->repeat_batches;
    r->users = calloc((size_t)r->B, sizeof *r->users);
    r->outs = calloc((size_t)(r->B * r->R), sizeof *r->outs);
    r->which = calloc((size_t)(r->B * r->R), sizeof *r->which);
    r->sp_of = calloc((size_t)(r->B * r->R), sizeof *r->sp_of);
    if (!r->users || !r->outs || !r->which || !r->sp_of) {
        mlm_error_set(&r->err, MLM_ERR_NOMEM, "demo: out of memory");
        return tool_fail(&r->err);
    }
    st = tokenize(r);
    if (!st) st = mlm_exec_create(r->m, &r->xp, &r->e, &r->err);
    r->n_ends = end_of_turn_ids(r->tok, mlm_model_config(r->m), r->ends);
    if (!st) st = run_batches(r);
    if (!st && tool_draft_max(&c->draft)) st = run_spec(r);
    if (st) return tool_fail(&r->err);
    if ((rc = gather_lanes(r)) || tool_rank() != 0) return rc;
    check_outputs(r);
    return report(r);
}

int cmd_demo(int argc, char **argv) {
    demo_run r;
    memset(&r, 0, sizeof r);
    int rc = parse(argc, argv, &r.c, &r.own_prompts);
    if (rc) return rc < 0 ? TOOL_OK : rc;
    rc = demo(&r);
    run_free(&r);
    return rc;
}
