/* tools/cli/generate.c: `meshlm generate`: text (and, for Llama 3.2 Vision, images) in,
 * text out. Loads a model and its tokenizer, encodes the images and binds them where the
 * prompt's image tokens are, prefills the prompt (plain or in the chat format), then decodes
 * one token a step with the chosen sampler, streaming UTF-8-safe text to stdout until a stop
 * id or the token limit; prints a stats line to stderr, or everything as one JSON object
 * (with --logprobs, also each generated token's log-probability and the N most likely
 * tokens). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void help(void) {
    printf("usage: meshlm generate [-m PATH] (-p TEXT | --prompt-file FILE | --prompt-ids IDS) "
           "[options]\n"
           "\n"
           "Generates text with a Llama 3 or Phi-4 model. Without -m, SmolLM2-135M-Instruct\n"
           "(" TOOL_DEFAULT_GGUF ", fetched by scripts/setup.sh), else the\n"
           "tiny model embedded in the repository (models/default).\n"
           "\n"
           "  -m, --model PATH         a model folder (config.json or params.json, weights,\n"
           "                           tokenizer), a .gguf file, or a folder holding one\n"
           "  -p, --prompt TEXT        the prompt\n"
           "      --prompt-file FILE   read the prompt from FILE ('-' for stdin)\n"
           "      --prompt-ids IDS     raw token ids instead of text: \"1,2,3\" (no BOS added)\n"
           "      --instruct           wrap the prompt as a user message in the model's chat\n"
           "                           format and end with the assistant header\n"
           "      --system TEXT        with --instruct: a system message first\n"
           "      --image FILE         an image (PNG or JPEG) for a vision model (Llama 3.2\n"
           "                           Vision); repeat for several. Each <|image|> in the\n"
           "                           prompt text marks where the next one goes; without\n"
           "                           markers they go first (with --instruct at the start of\n"
           "                           the user message, else before <|begin_of_text|>, as\n"
           "                           transformers' processor does). With --prompt-ids, each\n"
           "                           image token id binds the next --image in order\n"
           "  -n, --max-new-tokens N   tokens to generate at most (default 128)\n"
           "      --ignore-eos         do not stop at the stop ids: exactly N tokens\n"
           TOOL_DRAFT_HELP
           "      --temperature T      0 = greedy, the default (argmax, ties to the lowest id)\n"
           "      --top-k K            keep the K most likely tokens (0 = off, default)\n"
           "      --top-p P            keep the smallest set with probability mass P (1 = off)\n"
           "      --seed S             RNG seed for sampling (default 0): same seed, same text\n"
           "      --max-seq-len N      KV capacity in tokens, prompt included (default "
           "4096)\n" TOOL_PRECISION_HELP "      --threads N          threads (default: all cores)\n"
           "      --prefill-chunk N    prompt tokens per step (default 2048): longer prompts are\n"
           "                           read in chunks, so step memory does not grow with them\n"
           "      --json               print one JSON object (prompt ids, generated ids, text,\n"
           "                           stop reason, stats) instead of streaming text\n"
           "      --logprobs N         with --json: \"logprobs\", one entry per generated token\n"
           "                           (and one for the stop id that ended the text) with its\n"
           "                           log-probability and the N (0..20) most likely tokens,\n"
           "                           from the raw logits (log-softmax before temperature,\n"
           "                           top-k, top-p): {\"id\",\"logprob\",\"top\":[[id,logprob]]}\n"
           "  -h, --help               this help\n"
           "\n"
           "Generation stops at the model's stop ids (eos ids of config.json /\n"
           "generation_config.json; for Llama 3 <|end_of_text|>, <|eom_id|>, <|eot_id|>) or\n"
           "after --max-new-tokens. The stats line on stderr gives the load time, prompt\n"
           "tokens, time to first token and decode tokens per second.\n");
}

enum { LOGPROBS_MAX = 20 };

typedef struct gen_opts {
    const char *model, *prompt, *prompt_file, *prompt_ids, *system;
    const char *images[MLM_MAX_IMAGES];
    int n_images;
    int instruct, json, n_threads, ignore_eos;
    long long max_new, max_seq_len, prefill_chunk;
    tool_draft draft;
    int logprobs; /* -1: off, else the number of top tokens per entry (0..LOGPROBS_MAX) */
    mlm_sampler_params sp;
    tool_precision prec;
} gen_opts;

static int parse(int argc, char **argv, gen_opts *o) {
    memset(o, 0, sizeof *o);
    o->max_new = 128;
    o->max_seq_len = 4096;
    o->prefill_chunk = 2048;
    o->logprobs = -1;
    tool_draft_init(&o->draft);
    o->sp = mlm_sampler_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        long long ll;
#define VALUE()                                                                                    \
    if (!(v = tool_value(argc, argv, &i))) return tool_usage("generate", "%s needs a value", a)
        if (tool_is_help(a)) {
            help();
            return -1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            VALUE();
            o->model = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            VALUE();
            o->prompt = v;
        } else if (!strcmp(a, "--prompt-file")) {
            VALUE();
            o->prompt_file = v;
        } else if (!strcmp(a, "--prompt-ids")) {
            VALUE();
            o->prompt_ids = v;
        } else if (!strcmp(a, "--system")) {
            VALUE();
            o->system = v;
        } else if (!strcmp(a, "--instruct")) {
            o->instruct = 1;
        } else if (!strcmp(a, "--image")) {
            VALUE();
            if (o->n_images == MLM_MAX_IMAGES)
                return tool_usage("generate", "--image: at most %d images (MLM_MAX_IMAGES)",
                                  MLM_MAX_IMAGES);
            o->images[o->n_images++] = v;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "--draft-ngram")) {
            o->draft.ngram = 1;
        } else if (tool_is_draft_flag(a)) {
            VALUE();
            if (!tool_draft_flag("generate", a, v, &o->draft)) return TOOL_USAGE;
        } else if (!strcmp(a, "--ignore-eos")) {
            o->ignore_eos = 1;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--max-new-tokens")) {
            VALUE();
            if (!tool_int("generate", a, v, 0, 1 << 24, &o->max_new)) return TOOL_USAGE;
        } else if (!strcmp(a, "--max-seq-len")) {
            VALUE();
            if (!tool_int("generate", a, v, 1, 1 << 24, &o->max_seq_len)) return TOOL_USAGE;
        } else if (!strcmp(a, "--threads")) {
            VALUE();
            if (!tool_int("generate", a, v, 1, 1024, &ll)) return TOOL_USAGE;
            o->n_threads = (int)ll;
        } else if (!strcmp(a, "--logprobs")) {
            VALUE();
            if (!tool_int("generate", a, v, 0, LOGPROBS_MAX, &ll)) return TOOL_USAGE;
            o->logprobs = (int)ll;
        } else if (!strcmp(a, "--prefill-chunk")) {
            VALUE();
            if (!tool_int("generate", a, v, 1, 1 << 20, &o->prefill_chunk)) return TOOL_USAGE;
        } else if (tool_is_sampling_flag(a)) {
            VALUE();
            if (!tool_sampling_flag("generate", a, v, &o->sp)) return TOOL_USAGE;
        } else if (tool_is_precision_flag(a)) {
            VALUE();
            if (!tool_precision_flag("generate", a, v, &o->prec)) return TOOL_USAGE;
        } else {
            return tool_usage("generate", "unknown argument '%s'", a);
        }
#undef VALUE
    }
    int sources = !!o->prompt + !!o->prompt_file + !!o->prompt_ids;
    if (sources != 1)
        return tool_usage("generate", "give exactly one of -p, --prompt-file, --prompt-ids");
    if (o->prompt_ids && o->instruct)
        return tool_usage("generate", "--instruct needs a text prompt, not --prompt-ids");
    if (o->system && !o->instruct) return tool_usage("generate", "--system needs --instruct");
    if (o->logprobs >= 0 && !o->json) return tool_usage("generate", "--logprobs needs --json");
    if (!tool_draft_check("generate", &o->draft)) return TOOL_USAGE;
    return 0;
}

/* Parses "1,2,3" into IDS (ids below N_VOCAB, or the image token IMAGE). */
static int parse_ids(const char *s, mlm_tokens *ids, int32_t n_vocab, int32_t image) {
    while (*s) {
        while (*s == ',' || *s == ' ') s++;
        if (!*s) break;
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || (v >= n_vocab && v != image)) {
            fprintf(stderr, "meshlm generate: --prompt-ids: '%.20s' is not a token id in [0, %d)\n",
                    s, n_vocab);
            return 0;
        }
        if (mlm_tokens_push(ids, (int32_t)v) != MLM_OK) return 0;
        s = end;
    }
    if (ids->n == 0) fprintf(stderr, "meshlm generate: --prompt-ids is empty\n");
    return ids->n > 0;
}

// ---- logprobs ----

/* One generated token's log-probability and the N most likely tokens at that step. */
typedef struct lp_entry {
    int32_t id;
    double logprob;
    int32_t top_id[LOGPROBS_MAX];
    double top_lp[LOGPROBS_MAX];
} lp_entry;

typedef struct lp_list {
    lp_entry *e; /* owned */
    int64_t n, cap;
} lp_list;

/* Appends the entry of the scheduler's event EV (its token, logprob and top N_TOP). */
static mlm_status lp_push(lp_list *l, const mlm_sched_event *ev, int n_top) {
    if (l->n == l->cap) {
        int64_t cap = l->cap ? l->cap * 2 : 64;
        lp_entry *e = realloc(l->e, (size_t)cap * sizeof *e);
        if (!e) return MLM_ERR_NOMEM;
        l->e = e;
        l->cap = cap;
    }
    lp_entry *e = &l->e[l->n++];
    e->id = ev->token;
    e->logprob = ev->logprob;
    for (int i = 0; i < n_top; i++) {
        e->top_id[i] = i < ev->n_top ? ev->top_ids[i] : -1;
        e->top_lp[i] = i < ev->n_top ? ev->top_logprobs[i] : -INFINITY;
    }
    return MLM_OK;
}

/* A log-probability as a JSON number (-inf, from a -inf logit, as -9999 as OpenAI does). */
static void lp_print(double x) {
    if (!isfinite(x)) x = x > 0 ? 9999 : -9999;
    printf("%.9g", x);
}

static void lp_print_list(const lp_list *l, int n_top) {
    printf(",\"logprobs\":[");
    for (int64_t i = 0; i < l->n; i++) {
        const lp_entry *e = &l->e[i];
        printf("%s{\"id\":%d,\"logprob\":", i ? "," : "", e->id);
        lp_print(e->logprob);
        printf(",\"top\":[");
        for (int j = 0; j < n_top; j++) {
            printf("%s[%d,", j ? "," : "", e->top_id[j]);
            lp_print(e->top_lp[j]);
            printf("]");
        }
        printf("]}");
    }
    printf("]");
}

// ---- images ----

#define IMAGE_MARK "<|image|>"

/* TEXT (LEN bytes) cut at each <|image|> into parts: text pieces (copied into *BUF, one
 * allocation) and the image token IMAGE, with *LEADING the markers before any text. Without
 * markers, N_IMAGES image tokens come first. Returns the part count, -1 out of memory. */
static int image_parts(const char *text, size_t len, int n_images, int32_t image,
                       mlm_chat_part **parts, char **buf, int *leading) {
    size_t ml = strlen(IMAGE_MARK);
    int n_marks = 0;
    for (const char *p = text; (p = memmem(p, len - (size_t)(p - text), IMAGE_MARK, ml)); p += ml)
        n_marks++;
    *parts = calloc((size_t)(2 * n_marks + n_images + 2), sizeof **parts);
    *buf = malloc(len + (size_t)n_marks + 2);
    if (!*parts || !*buf) return -1;
    int n = 0;
    *leading = 0;
    if (!n_marks)
        for (int i = 0; i < n_images; i++)
            (*parts)[n++] = (mlm_chat_part){NULL, image};
    char *w = *buf;
    const char *p = text, *end = text + len;
    while (p < end || (n == 0 && p == end)) {
        const char *m = memmem(p, (size_t)(end - p), IMAGE_MARK, ml);
        const char *stop = m ? m : end;
        if (stop > p) {
            memcpy(w, p, (size_t)(stop - p));
            w[stop - p] = 0;
            (*parts)[n++] = (mlm_chat_part){w, 0};
            w += stop - p + 1;
        }
        if (!m) break;
        if (n == *leading) (*leading)++; /* nothing but markers so far */
        (*parts)[n++] = (mlm_chat_part){NULL, image};
        p = m + ml;
    }
    if (!n_marks) *leading = n_images;
    return n;
}

/* The prompt of a vision model: the text's parts in the chat format (--instruct) or plain, as
 * transformers' MllamaProcessor builds it: leading images, <|begin_of_text|>, then the text
 * pieces (each encoded on its own) and the images between them. */
static mlm_status vision_prompt(const gen_opts *o, const mlm_tokenizer *tok, int32_t image,
                                const char *text, size_t len, mlm_tokens *out, mlm_error *err) {
    mlm_chat_part *parts = NULL;
    char *buf = NULL;
    int leading = 0, n = image_parts(text, len, o->n_images, image, &parts, &buf, &leading);
    mlm_status st = n < 0 ? mlm_error_set(err, MLM_ERR_NOMEM, "generate: out of memory") : MLM_OK;
    if (!st && o->instruct) {
        mlm_chat_part sys = {o->system, 0};
        mlm_chat_parts msgs[2] = {{"system", &sys, 1}, {"user", parts, n}};
        st = mlm_tokenizer_encode_chat_parts(tok, o->system ? msgs : msgs + 1, o->system ? 2 : 1, 1,
                                             out, err);
    } else if (!st) {
        mlm_encode_params ep = mlm_encode_default_params();
        for (int i = 0; i < leading && !st; i++)
            st = mlm_tokens_push(out, image);
        if (!st && mlm_tokenizer_bos_id(tok) >= 0)
            st = mlm_tokens_push(out, mlm_tokenizer_bos_id(tok));
        for (int i = leading; i < n && !st; i++)
            st = parts[i].text ? mlm_tokenizer_encode(tok, parts[i].text, strlen(parts[i].text),
                                                      &ep, out, err)
                               : mlm_tokens_push(out, image);
        if (st == MLM_ERR_NOMEM) mlm_error_set(err, st, "generate: out of memory");
    }
    free(parts);
    free(buf);
    return st;
}

/* Opens and encodes the --image files for M into IMGS (o->n_images, the caller frees them),
 * after checking that PROMPT holds as many image tokens; *VISION_S gets the encoder's time. */
static mlm_status open_images(const gen_opts *o, const mlm_model *m, const mlm_tokens *prompt,
                              mlm_image **imgs, double *vision_s, mlm_error *err) {
    int32_t n = 0, image = mlm_model_image_token(m);
    for (int64_t i = 0; i < prompt->n; i++) n += prompt->ids[i] == image;
    if (n != o->n_images)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "generate: the prompt holds %d image tokens (id %d), --image gave %d "
                             "images",
                             n, image, o->n_images);
    double t0 = tool_now();
    mlm_status st = MLM_OK;
    for (int i = 0; i < o->n_images && !st; i++) {
        st = mlm_image_open(m, o->images[i], &imgs[i], err);
        if (!st) st = mlm_image_encode(m, imgs[i], o->n_threads, err);
    }
    *vision_s = tool_now() - t0;
    return st;
}

// ---- generation ----

/* Everything one run holds; gen_free releases it all, whatever state it is in. */
typedef struct gen_state {
    mlm_model *model;
    mlm_tokenizer *tok;
    mlm_sched *sched;
    mlm_tokens prompt, out;
    mlm_image *imgs[MLM_MAX_IMAGES];
    lp_list lp; /* with --logprobs */
    char *text; /* generated text for --json */
    size_t text_len, text_cap;
    char *default_model;
    tool_draft draft; /* the options' --draft-* and the draft model, loaded */
    /* the run, filled by on_event */
    const gen_opts *o;
    mlm_detok dt;
    mlm_finish finish;
    mlm_status st;  /* a failure inside the callback (out of memory) */
    mlm_error *err;
    double t_first; /* when the first token (or the stop id) came */
} gen_state;

static void gen_free(gen_state *g) {
    free(g->lp.e);
    free(g->text);
    mlm_sched_free(g->sched);
    tool_draft_free(&g->draft);
    for (int i = 0; i < MLM_MAX_IMAGES; i++) mlm_image_free(g->imgs[i]);
    mlm_tokens_deinit(&g->prompt);
    mlm_tokens_deinit(&g->out);
    mlm_tokenizer_free(g->tok);
    mlm_model_free(g->model);
    free(g->default_model);
}

static void emit(gen_state *g, const char *buf, size_t n) {
    if (!g->o->json) {
        fwrite(buf, 1, n, stdout);
        fflush(stdout);
        return;
    }
    if (g->text_len + n + 1 > g->text_cap) {
        size_t cap = (g->text_len + n + 1) * 2;
        char *t = realloc(g->text, cap);
        if (!t) return;
        g->text = t;
        g->text_cap = cap;
    }
    memcpy(g->text + g->text_len, buf, n);
    g->text_len += n;
}

/* The scheduler's events for the one request: stream the text, keep ids and logprobs. */
static int on_event(void *user, const mlm_sched_event *ev) {
    gen_state *g = user;
    if (ev->token >= 0) {
        if (!g->out.n && !g->t_first) g->t_first = tool_now();
        if (g->o->logprobs >= 0 && lp_push(&g->lp, ev, g->o->logprobs) != MLM_OK) {
            g->st = mlm_error_set(g->err, MLM_ERR_NOMEM, "out of memory for --logprobs");
            return 1;
        }
        if (!ev->is_stop_id) {
            if (mlm_tokens_push(&g->out, ev->token) != MLM_OK) {
                g->st = mlm_error_set(g->err, MLM_ERR_NOMEM, "generate: out of memory");
                return 1;
            }
            char buf[1024];
            size_t n = 0;
            if (!g->tok)
                n = (size_t)snprintf(buf, sizeof buf, "%s%d", g->out.n > 1 ? " " : "", ev->token);
            else if (mlm_detok_push(&g->dt, g->tok, ev->token, buf, sizeof buf, &n, g->err))
                n = 0;
            emit(g, buf, n);
        }
    }
    if (ev->finish) {
        g->finish = ev->finish;
        if (ev->finish == MLM_FINISH_ERROR && !g->st)
            g->st = mlm_error_set(g->err, MLM_ERR_INTERNAL, "%s", ev->error ? ev->error : "step failed");
    }
    return 0;
}

/* The stop ids: the config's; with --instruct also the chat format's end-of-turn tokens (a
 * base model's config names only its end of text; ChatML also ends an answer at
 * <|im_start|>). None with --ignore-eos. Returns the count. */
static int32_t stop_ids(const gen_state *g, int32_t *ids, int32_t cap) {
    const mlm_config *c = mlm_model_config(g->model);
    int32_t n = 0;
    if (g->o->ignore_eos) return 0;
    for (int i = 0; i < c->n_stop_ids && n < cap; i++) ids[n++] = c->stop_ids[i];
    if (g->o->instruct && g->tok) {
        int32_t k = mlm_tokenizer_chat_stop_ids(g->tok, ids + n, cap - n); /* how many there are */
        n += k < cap - n ? k : cap - n;
    }
    return n;
}

/* The scheduler for one request: one sequence, prompts read --prefill-chunk tokens a step. */
static mlm_sched_params sched_params(const gen_opts *o) {
    mlm_sched_params sp = mlm_sched_default_params();
    sp.max_batch = 1;
    sp.max_queue = 1;
    sp.max_seq_len = (int32_t)(o->max_seq_len > 2 ? o->max_seq_len : 2); /* the prompt check
                                                                          names a shorter one */
    sp.block_size = 64;
    sp.prefill_chunk = (int32_t)(o->prefill_chunk < o->max_seq_len ? o->prefill_chunk : o->max_seq_len);
    sp.prefix_cache = 0; /* one request: nothing to share */
    sp.n_threads = o->n_threads;
    sp.max_images = o->n_images;
    sp.image_tiles = 0;
    sp.lead = tool_mesh() && tool_mesh()->tp > 1;
    tool_draft_params(&o->draft, &sp);
    return sp;
}

/* The prompt's tokens, from --prompt-ids, or the text (plain, --instruct, or with images).
 * TOOL_USAGE / TOOL_RUNTIME after a message, or 0 with *ST the status. */
static int encode_prompt(gen_state *g, mlm_status *st, mlm_error *err) {
    const gen_opts *o = g->o;
    const mlm_config *cfg = mlm_model_config(g->model);
    int32_t image = mlm_model_image_token(g->model);
    if (o->n_images && image < 0) {
        fprintf(stderr, "meshlm generate: --image: the model (%s) takes no images\n",
                mlm_family_name(cfg->family));
        return TOOL_USAGE;
    }
    if (o->prompt_ids) return parse_ids(o->prompt_ids, &g->prompt, cfg->n_vocab, image) ? 0 : TOOL_USAGE;
    size_t len = 0;
    char *owned = NULL;
    const char *text = o->prompt;
    if (o->prompt_file) {
        if (!(owned = tool_read_text(o->prompt_file, &len))) return TOOL_RUNTIME;
        text = owned;
    } else {
        len = strlen(text);
    }
    if (image >= 0) {
        *st = vision_prompt(o, g->tok, image, text, len, &g->prompt, err);
    } else if (o->instruct) {
        char *content = malloc(len + 1);
        if (content) {
            memcpy(content, text, len);
            content[len] = 0;
            mlm_chat_message msgs[2] = {{"system", o->system}, {"user", content}};
            *st = mlm_tokenizer_encode_chat(g->tok, o->system ? msgs : msgs + 1, o->system ? 2 : 1,
                                            1, &g->prompt, err);
            free(content);
        } else {
            *st = mlm_error_set(err, MLM_ERR_NOMEM, "generate: out of memory");
        }
    } else {
        mlm_encode_params ep = mlm_encode_default_params();
        ep.add_bos = mlm_tokenizer_bos_id(g->tok) >= 0;
        *st = mlm_tokenizer_encode(g->tok, text, len, &ep, &g->prompt, err);
    }
    free(owned);
    return 0;
}

/* Submits the prompt as one request and steps the scheduler until it ends. */
static mlm_status run(gen_state *g, int32_t max_new, mlm_error *err) {
    int32_t stops[16];
    mlm_request_params q = mlm_request_default_params();
    q.prompt = g->prompt.ids;
    q.n_prompt = (int32_t)g->prompt.n;
    q.max_new_tokens = max_new;
    q.sampling = g->o->sp;
    q.stop_ids = stops;
    q.n_stop_ids = stop_ids(g, stops, 16);
    q.logprobs = g->o->logprobs;
    q.draft.max = tool_draft_max(&g->o->draft);
    q.images = g->imgs;
    q.n_images = g->o->n_images;
    q.on_event = on_event;
    q.user = g;
    g->err = err;
    mlm_detok_init(&g->dt);
    uint64_t id;
    mlm_status st = mlm_sched_submit(g->sched, &q, &id, err);
    while (!st && !g->finish) {
        int did = 0;
        st = mlm_sched_step(g->sched, &did, err);
    }
    if (g->tok) {
        char buf[1024];
        emit(g, buf, mlm_detok_flush(&g->dt, buf, sizeof buf));
    }
    return st ? st : g->st;
}

/* The stats line (stderr), or the whole result as one JSON object (stdout). */
static void report(const gen_state *g, const char *stop_reason, double load_s, double ttft_ms,
                   double tps, double vision_s) {
    const gen_opts *o = g->o;
    char vision[96] = "", vision_json[96] = "";
    if (o->n_images) {
        snprintf(vision, sizeof vision, " | %d images, vision encoder %.1f ms", o->n_images,
                 vision_s * 1e3);
        snprintf(vision_json, sizeof vision_json, ",\"images\":%d,\"vision_ms\":%.1f", o->n_images,
                 vision_s * 1e3);
    }
    const char *cache = !mlm_model_cache_path(g->model)[0] ? "none"
                        : mlm_model_cache_built(g->model) ? "built"
                                                          : "mapped";
    /* on a mesh: this rank's time in the all-reduces and logit gathers per token */
    char mesh[160] = "", mesh_json[320] = "";
    if (tool_mesh() && tool_mesh()->tp > 1) {
        mlm_comm_stats cs;
        mlm_comm_get_stats(tool_mesh_tp(), &cs);
        int64_t toks = g->prompt.n + g->out.n;
        double per = toks > 0 ? (cs.allreduce_s + cs.gather_s) / (double)toks * 1e3 : 0;
        snprintf(mesh, sizeof mesh, " | TP %d: collectives %.3f ms/token", tool_mesh()->tp, per);
        snprintf(mesh_json, sizeof mesh_json,
                 ",\"tp\":%d,\"allreduce_calls\":%lld,\"allreduce_bytes\":%lld,"
                 "\"allreduce_s\":%.6f,\"gather_calls\":%lld,\"gather_bytes\":%lld,"
                 "\"gather_s\":%.6f",
                 tool_mesh()->tp, (long long)cs.allreduce_calls, (long long)cs.allreduce_bytes,
                 cs.allreduce_s, (long long)cs.gather_calls, (long long)cs.gather_bytes,
                 cs.gather_s);
    }
    mlm_sched_stats ss;
    mlm_sched_get_stats(g->sched, &ss);
    char draft[128] = "", draft_json[96] = "";
    if (tool_draft_max(&o->draft)) {
        snprintf(draft, sizeof draft, " | drafted %lld, accepted %lld (%.0f%%)",
                 (long long)ss.draft_tokens, (long long)ss.draft_accepted,
                 ss.draft_tokens ? 100.0 * (double)ss.draft_accepted / (double)ss.draft_tokens : 0.0);
        snprintf(draft_json, sizeof draft_json, ",\"draft_tokens\":%lld,\"draft_accepted\":%lld",
                 (long long)ss.draft_tokens, (long long)ss.draft_accepted);
    }
    if (!o->json) {
        printf("\n");
        fflush(stdout); /* the text ends before the stats line, also when both are piped */
        fprintf(stderr,
                "[load %.2f s (cache: %s)%s | prompt %lld tokens | TTFT %.1f ms | %lld "
                "tokens, decode %.2f tok/s%s | %s, %s, stop: %s%s]\n",
                load_s, cache, vision, (long long)g->prompt.n, ttft_ms, (long long)g->out.n, tps,
                draft, mlm_model_kernels(g->model), mlm_model_profile(g->model), stop_reason, mesh);
        return;
    }
    printf("{\"prompt_ids\":[");
    for (int64_t i = 0; i < g->prompt.n; i++) printf("%s%d", i ? "," : "", g->prompt.ids[i]);
    printf("],\"generated_ids\":[");
    for (int64_t i = 0; i < g->out.n; i++) printf("%s%d", i ? "," : "", g->out.ids[i]);
    printf("],\"text\":");
    tool_json_string(stdout, g->text ? g->text : "", g->text_len);
    if (o->logprobs >= 0) lp_print_list(&g->lp, o->logprobs);
    printf(",\"stop_reason\":\"%s\",\"stats\":{\"load_s\":%.3f,\"prompt_tokens\":%lld,"
           "\"generated_tokens\":%lld,\"ttft_ms\":%.1f,\"decode_tok_s\":%.2f,"
           "\"kernels\":\"%s\",\"optimizations\":\"%s\",\"cache\":\"%s\"%s%s%s}}\n",
           stop_reason, load_s, (long long)g->prompt.n, (long long)g->out.n, ttft_ms, tps,
           mlm_model_kernels(g->model), mlm_model_profile(g->model), cache, mesh_json,
           vision_json, draft_json);
}

/* Steps, each of which may end the run: the model and tokenizer, then (on a mesh's other
 * ranks: following rank 0's steps instead) the scheduler, the prompt, the images, the
 * request, the report. */
static int generate(gen_state *g) {
    const gen_opts *o = g->o;
    mlm_error err = {0};
    double t0 = tool_now();
    mlm_status st = tool_load_model("generate", o->model, &o->prec, o->n_threads, &g->model, &err);
    mlm_sched_params sp = sched_params(o); /* after loading: the mesh is joined then */
    /* a mesh's other ranks hold their shards and follow rank 0's steps */
    if (!st && sp.lead && tool_rank() > 0) {
        sp.lead = 0;
        if (!(st = mlm_sched_create(g->model, &sp, &g->sched, &err)))
            st = mlm_sched_follow(g->sched, &err);
        return st ? tool_fail(&err) : TOOL_OK;
    }
    /* Raw ids need no tokenizer: without one, the output is ids too. */
    if (!st && (!o->prompt_ids || mlm_tokenizer_present(o->model)))
        st = mlm_tokenizer_load(o->model, &g->tok, &err);
    g->draft = o->draft;
    if (!st && !(st = tool_draft_load("generate", &g->draft, g->tok, o->n_threads, &err))) {
        tool_draft_params(&g->draft, &sp);
        st = mlm_sched_create(g->model, &sp, &g->sched, &err);
    }
    int rc = st ? 0 : encode_prompt(g, &st, &err);
    if (!st && !rc && g->prompt.n >= o->max_seq_len) {
        fprintf(stderr,
                "meshlm generate: the prompt has %lld tokens, but --max-seq-len is %lld (it "
                "must hold the prompt and at least one new token)\n",
                (long long)g->prompt.n, o->max_seq_len);
        rc = TOOL_RUNTIME;
    }
    double vision_s = 0;
    if (!st && !rc && o->n_images) st = open_images(o, g->model, &g->prompt, g->imgs, &vision_s, &err);
    if (st || rc) return rc ? rc : tool_fail(&err);
    /* generation runs to --max-new-tokens or to the end of the context, whichever is first */
    int64_t room = o->max_seq_len - g->prompt.n;
    int32_t max_new = (int32_t)(o->max_new < room ? o->max_new : room);
    double t_load = tool_now();
    g->t_first = 0;
    if (max_new > 0 && (st = run(g, max_new, &err))) return tool_fail(&err);
    double t_end = tool_now(), t_first = g->t_first ? g->t_first : t_load;
    const char *stop_reason = g->finish == MLM_FINISH_STOP                ? "stop"
                              : max_new < o->max_new && g->out.n == max_new ? "max_seq_len"
                                                                          : "length";
    double dec_s = t_end - t_first;
    double tps = g->out.n > 1 && dec_s > 0 ? (double)(g->out.n - 1) / dec_s : 0;
    report(g, stop_reason, t_load - t0 - vision_s, (t_first - t_load + vision_s) * 1e3, tps,
           vision_s);
    return TOOL_OK;
}

int cmd_generate(int argc, char **argv) {
    gen_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? TOOL_OK : rc;
    gen_state g;
    memset(&g, 0, sizeof g);
    g.o = &o;
    mlm_tokens_init(&g.prompt);
    mlm_tokens_init(&g.out);
    if (!o.model && !(o.model = g.default_model = tool_default_model("generate"))) return TOOL_USAGE;
    tool_precision_resolve(&o.prec, o.model);
    mlm_sched_params sp = sched_params(&o);
    mlm_exec_params xp;
    mlm_sched_exec_params(NULL, &sp, &xp);
    if (o.prec.dp > 1)
        rc = tool_usage("generate",
                        "--dp %d: generate runs one user; data-parallel lanes serve several "
                        "(meshlm demo)",
                        o.prec.dp);
    else if (!tool_memory_fits("generate", o.model, &o.prec, &xp, &o.draft))
        rc = TOOL_RUNTIME;
    else
        rc = generate(&g);
    gen_free(&g);
    return rc;
}
