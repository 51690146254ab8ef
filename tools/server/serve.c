/* tools/server/serve.c: `meshlm serve`: flags, loading the model and tokenizer, the scheduler
 * and the engine thread that steps it, the HTTP daemon (http.c), and an orderly stop on
 * SIGINT/SIGTERM: stop accepting, let running requests finish (up to --drain-timeout), cancel
 * the rest, stop the engine, free everything. The engine loop knows nothing of HTTP: it only
 * waits for work and steps the scheduler, so another front end could drive it. cmd_serve owns
 * everything it creates and frees it all before returning. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/tool.h"
#include "http.h"
#include "job.h"
#include "metrics.h"
#include "server.h"

// clang-format off
static void help(void) {
    printf("usage: meshlm serve [-m PATH] [options]\n"
           "\n"
           "Serves a model over HTTP with the OpenAI API: POST /v1/chat/completions,\n"
           "POST /v1/completions (streamed with \"stream\": true), GET /v1/models, GET /health,\n"
           "GET /metrics (Prometheus), POST /tokenize, POST /detokenize, and a chat page at\n"
           "GET /. Requests run together with continuous batching; they may ask for JSON-schema\n"
           "output (response_format), tool calls (tools) and up to 8 choices (n); chat\n"
           "requests may carry images for Llama 3.2 Vision models. Without\n"
           "-m, SmolLM2-135M-Instruct (" TOOL_DEFAULT_GGUF "), else the tiny\n"
           "model embedded in the repository (models/default).\n"
           "\n"
           "  -m, --model PATH         a model folder or .gguf file\n"
           "      --host ADDR          address to listen on (default 127.0.0.1)\n"
           "      --port N             port (default 8080; 0 = any free port)\n"
           "      --api-key KEY        require \"Authorization: Bearer KEY\" on /v1/* (default:\n"
           "                           $MESHLM_API_KEY, else none)\n"
           "      --alias NAME         the model's name in the API (default: the path's base name)\n"
           "      --max-batch N        sequences running at once (default 32)\n"
           "      --max-seq-len N      tokens per sequence, prompt included (default 4096, at most\n"
           "                           the model's context length)\n"
           "      --kv-blocks N        KV cache blocks (default: max-batch x max-seq-len / block)\n"
           "      --block-size N       tokens per KV block (default 16)\n"
           "      --prefill-chunk N    prompt tokens per step over all sequences (default 256)\n"
           "      --max-queue N        waiting requests before 503 (default 64)\n"
           "      --no-prefix-cache    do not share KV blocks between requests by prefix\n"
           "      --reasoning-format F auto (default): a model that thinks (Qwen3's template)\n"
           "                           gets its <think> block back as reasoning_content,\n"
           "                           streamed too; none: left in content as written\n"
           TOOL_DRAFT_HELP
           "                           Every request speculates; its \"speculative.n_max\" caps\n"
           "                           its drafts (0 turns them off)\n"
           TOOL_PRECISION_HELP
           "      --threads N          threads (default: all cores); the vision encoder uses\n"
           "                           as many\n"
           "      --max-images N       images per chat request, for Llama 3.2 Vision models\n"
           "                           (default 1, at most 16; 0 refuses images). Images come\n"
           "                           as image_url parts with base64 data: URLs\n"
           "                           (data:image/png;base64,... or image/jpeg); the server\n"
           "                           fetches no http(s) URL\n"
           "      --image-tiles N      the image K/V pool, in tiles (Llama 3.2 Vision: 560 x 560\n"
           "                           pixels, 1 to 4 an image); a request waits for free tiles\n"
           "                           (default 0: 4 requests' images: min(max-batch, 4) x\n"
           "                           max-images x the model's max)\n"
           "      --max-body-bytes N   largest request body (default 8 MiB: base64 takes 4/3 of\n"
           "                           an image's bytes, so about 6 MiB of images in all)\n"
           "      --timeout S          idle connection timeout in seconds (default 60)\n"
           "      --drain-timeout S    on SIGINT/SIGTERM, seconds to let running requests finish\n"
           "                           before cancelling them (default 30)\n"
           "  -h, --help               this help\n"
           "\n"
           "Prints \"meshlm serve: listening on http://HOST:PORT (model NAME)\" when ready.\n");
}
// clang-format on

typedef struct serve_opts {
    const char *model, *host, *api_key, *alias;
    long long port, max_batch, max_seq_len, kv_blocks, block_size, prefill_chunk, max_queue;
    long long threads, max_body, timeout, drain_timeout, max_images, image_tiles;
    int max_seq_len_given, no_prefix_cache, no_reasoning;
    tool_draft draft;
    tool_precision prec;
} serve_opts;

static int parse(int argc, char **argv, serve_opts *o) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->max_batch = 32;
    o->max_seq_len = 4096;
    o->block_size = 16;
    o->prefill_chunk = 256;
    o->max_queue = 64;
    o->max_body = 8 << 20;
    o->timeout = 60;
    o->drain_timeout = 30;
    o->max_images = 1;
    tool_draft_init(&o->draft);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        struct {
            const char *flag;
            long long *dst, lo, hi;
        } ints[] = {{"--port", &o->port, 0, 65535},
                    {"--max-batch", &o->max_batch, 1, 4096},
                    {"--max-seq-len", &o->max_seq_len, 2, 1 << 24},
                    {"--kv-blocks", &o->kv_blocks, 1, 1 << 26},
                    {"--block-size", &o->block_size, 1, 4096},
                    {"--prefill-chunk", &o->prefill_chunk, 1, 1 << 20},
                    {"--max-queue", &o->max_queue, 0, 1 << 20},
                    {"--threads", &o->threads, 1, 1024},
                    {"--max-body-bytes", &o->max_body, 1, 1ll << 32},
                    {"--timeout", &o->timeout, 1, 86400},
                    {"--drain-timeout", &o->drain_timeout, 0, 86400},
                    {"--max-images", &o->max_images, 0, MLM_MAX_IMAGES},
                    {"--image-tiles", &o->image_tiles, 0, 1 << 20}};
        int n_ints = (int)(sizeof ints / sizeof ints[0]), k = 0;
        while (k < n_ints && strcmp(a, ints[k].flag)) k++;
#define VALUE()                                                                                    \
    if (!(v = tool_value(argc, argv, &i))) return tool_usage("serve", "%s needs a value", a)
        if (tool_is_help(a)) {
            help();
            return -1;
        } else if (k < n_ints) {
            VALUE();
            if (!tool_int("serve", a, v, ints[k].lo, ints[k].hi, ints[k].dst)) return TOOL_USAGE;
            if (ints[k].dst == &o->max_seq_len) o->max_seq_len_given = 1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            VALUE();
            o->model = v;
        } else if (!strcmp(a, "--host")) {
            VALUE();
            o->host = v;
        } else if (!strcmp(a, "--api-key")) {
            VALUE();
            o->api_key = v;
        } else if (!strcmp(a, "--alias")) {
            VALUE();
            if (!*v) return tool_usage("serve", "--alias must not be empty");
            o->alias = v;
        } else if (!strcmp(a, "--no-prefix-cache")) {
            o->no_prefix_cache = 1;
        } else if (!strcmp(a, "--reasoning-format")) {
            VALUE();
            if (strcmp(v, "auto") != 0 && strcmp(v, "none") != 0)
                return tool_usage("serve", "--reasoning-format takes auto or none, not '%s'", v);
            o->no_reasoning = !strcmp(v, "none");
        } else if (!strcmp(a, "--draft-ngram")) {
            o->draft.ngram = 1;
        } else if (tool_is_draft_flag(a)) {
            VALUE();
            if (!tool_draft_flag("serve", a, v, &o->draft)) return TOOL_USAGE;
        } else if (tool_is_precision_flag(a)) {
            VALUE();
            if (!tool_precision_flag("serve", a, v, &o->prec)) return TOOL_USAGE;
        } else {
            return tool_usage("serve", "unknown argument '%s'", a);
        }
#undef VALUE
    }
    if (!o->api_key) {
        const char *env = getenv("MESHLM_API_KEY");
        if (env && *env) o->api_key = env;
    }
    if (o->api_key && !*o->api_key) return tool_usage("serve", "--api-key must not be empty");
    return tool_draft_check("serve", &o->draft) ? 0 : TOOL_USAGE;
}

/* The base name of PATH, a trailing '/' stripped (malloc'd). */
static char *base_name(const char *path) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    char *s = malloc(n - b + 1);
    if (s) {
        memcpy(s, path + b, n - b);
        s[n - b] = 0;
    }
    return s;
}

// ---- signals ----

/* The write end of the self-pipe. A signal handler gets no context argument, so this one
 * file-scope variable is how it reaches cmd_serve; it is set once before the handlers are
 * installed and only read by them. */
static int sig_pipe_w = -1;

static void on_signal(int sig) {
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (sig_pipe_w >= 0 && write(sig_pipe_w, &b, 1) < 0) { /* full: a stop is pending anyway */
    }
    errno = saved;
}

static int install_signals(int pipe_fds[2]) {
    if (pipe(pipe_fds)) return 0;
    for (int i = 0; i < 2; i++) {
        fcntl(pipe_fds[i], F_SETFL, fcntl(pipe_fds[i], F_GETFL) | O_NONBLOCK);
        fcntl(pipe_fds[i], F_SETFD, FD_CLOEXEC);
    }
    sig_pipe_w = pipe_fds[1];
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
    return 1;
}

/* Waits up to MS milliseconds (-1: for ever) for a signal; returns 1 if one came. (The
 * signal itself interrupts poll with EINTR before its byte can be read: wait on.) */
static int wait_signal(int fd, int ms) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    double end = tool_now() + ms / 1e3;
    int r;
    for (;;) {
        int left = ms < 0 ? -1 : (int)((end - tool_now()) * 1e3);
        if (ms >= 0 && left < 0) left = 0;
        r = poll(&p, 1, left);
        if (r >= 0 || errno != EINTR) break;
    }
    if (r <= 0) return 0;
    unsigned char buf[16];
    while (read(fd, buf, sizeof buf) > 0) {
    }
    return 1;
}

// ---- the engine loop ----

typedef struct engine {
    mlm_sched *sched; /* borrowed */
    atomic_int quit;
    pthread_t thread;
} engine;

static void *engine_main(void *arg) {
    engine *e = arg;
    while (!atomic_load(&e->quit)) {
        mlm_sched_wait(e->sched, 50);
        int did = 0;
        mlm_error err = {0};
        if (mlm_sched_step(e->sched, &did, &err) != MLM_OK) {
            /* a scheduler bug (step failures end their requests and return OK): say so, and
             * do not spin on it */
            fprintf(stderr, "meshlm serve: scheduler: %s\n", err.msg);
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

// ---- setup and teardown ----

/* The largest token's bytes, for mlm_detok_push's buffer. */
static size_t longest_token(const mlm_tokenizer *tok) {
    size_t best = 0;
    int32_t n = mlm_tokenizer_n_vocab(tok);
    for (int32_t i = 0; i < n; i++) {
        size_t len = 0;
        if (mlm_tokenizer_token_bytes(tok, i, &len) && len > best) best = len;
    }
    return best;
}

static void add_stop(int32_t *ids, int32_t *n, int32_t id) {
    for (int32_t i = 0; i < *n; i++)
        if (ids[i] == id) return;
    if (*n < SRV_MAX_STOP_IDS) ids[(*n)++] = id;
}

static void stop_ids(srv_server *srv, const mlm_config *cfg) {
    for (int32_t i = 0; i < cfg->n_stop_ids; i++) {
        add_stop(srv->stop_base, &srv->n_stop_base, cfg->stop_ids[i]);
        add_stop(srv->stop_chat, &srv->n_stop_chat, cfg->stop_ids[i]);
    }
    int32_t ids[SRV_MAX_STOP_IDS];
    int32_t n = mlm_tokenizer_chat_stop_ids(srv->tok, ids, SRV_MAX_STOP_IDS);
    for (int32_t i = 0; i < n && i < SRV_MAX_STOP_IDS; i++) add_stop(srv->stop_chat, &srv->n_stop_chat, ids[i]);
}

/* Runs until a signal, then drains and stops. */
static void serve_until_signal(srv_server *srv, srv_http *h, int sig_fd, double drain_s) {
    while (!wait_signal(sig_fd, -1)) {
    }
    atomic_store(&srv->draining, 1);
    srv_http_quiesce(h);
    int n = srv_jobs_count(srv);
    if (n) fprintf(stderr, "meshlm serve: stopping: %d request(s) running, waiting up to %.0f s "
                   "(again to stop now)\n", n, drain_s);
    double end = tool_now() + drain_s;
    while (srv_jobs_count(srv) > 0 && tool_now() < end)
        if (wait_signal(sig_fd, 50)) break;
    srv_jobs_cancel_all(srv);
    /* cancelled streams end with an error event: give them a moment to get it out */
    end = tool_now() + 5;
    while (srv_jobs_count(srv) > 0 && tool_now() < end)
        wait_signal(sig_fd, 20);
    atomic_store(&srv->aborting, 1);
}

// ---- one run, in steps ----

/* Everything `meshlm serve` holds; serve_free releases it whatever state it is in. */
typedef struct serve_run {
    serve_opts o;
    char *default_model, *alias; /* owned */
    mlm_sched_params sp;
    tool_draft draft; /* the options' --draft-* and the draft model, loaded */
    mlm_error err;
    mlm_model *model;   /* owned */
    mlm_tokenizer *tok; /* owned */
    mlm_sched *sched;   /* owned */
    srv_metrics metrics;
    srv_server srv;
    engine eng;
    int engine_started, pipe_fds[2];
    srv_http *http;    /* owned */
    sigset_t old_mask; /* the signal mask before SIGINT/SIGTERM were blocked */
    int masked;
} serve_run;

static void serve_init(serve_run *r) {
    memset(r, 0, sizeof *r);
    r->pipe_fds[0] = r->pipe_fds[1] = -1;
    srv_metrics_init(&r->metrics);
    pthread_mutex_init(&r->srv.mu, NULL);
    pthread_mutex_init(&r->srv.vision_mu, NULL);
    pthread_mutex_init(&r->srv.trie_mu, NULL);
    pthread_cond_init(&r->srv.vision_cv, NULL);
}

static void serve_free(serve_run *r) {
    atomic_store(&r->srv.aborting, 1);
    srv_http_stop(r->http); /* every connection closed: the HTTP side of every job is released */
    if (r->engine_started) {
        atomic_store(&r->eng.quit, 1);
        mlm_sched_wake(r->sched);
        pthread_join(r->eng.thread, NULL);
    }
    mlm_sched_free(r->sched); /* final events for anything left free the last jobs */
    tool_draft_free(&r->draft);
    if (r->masked) pthread_sigmask(SIG_SETMASK, &r->old_mask, NULL);
    if (r->pipe_fds[0] >= 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_DFL;
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        sig_pipe_w = -1;
        close(r->pipe_fds[0]);
        close(r->pipe_fds[1]);
    }
    mlm_token_trie_free(r->srv.trie); /* after the scheduler: its matchers borrowed it */
    pthread_mutex_destroy(&r->srv.trie_mu);
    free(r->srv.dry_breakers);
    mlm_tokenizer_free(r->tok);
    mlm_model_free(r->model);
    srv_metrics_deinit(&r->metrics);
    pthread_mutex_destroy(&r->srv.mu);
    pthread_cond_destroy(&r->srv.vision_cv);
    pthread_mutex_destroy(&r->srv.vision_mu);
    free(r->alias);
    free(r->default_model);
}

/* The scheduler's parameters (the context no longer than the model's), and the check that
 * the model fits with the executor they give. */
static int plan(serve_run *r) {
    serve_opts *o = &r->o;
    r->alias = o->alias ? NULL : base_name(o->model);
    tool_precision_resolve(&o->prec, o->model);
    mlm_config cfg;
    int have_cfg = mlm_config_load(o->model, &cfg, NULL) == MLM_OK;
    if (have_cfg && cfg.n_ctx_train > 0 && o->max_seq_len > cfg.n_ctx_train) {
        if (o->max_seq_len_given)
            fprintf(stderr,
                    "meshlm serve: --max-seq-len %lld is over the model's context length "
                    "%d; using %d\n",
                    o->max_seq_len, cfg.n_ctx_train, cfg.n_ctx_train);
        o->max_seq_len = cfg.n_ctx_train;
    }
    mlm_sched_params *sp = &r->sp;
    *sp = mlm_sched_default_params();
    sp->max_batch = (int32_t)o->max_batch;
    sp->max_seq_len = (int32_t)o->max_seq_len;
    sp->kv_blocks = (int32_t)o->kv_blocks;
    sp->block_size = (int32_t)o->block_size;
    sp->prefill_chunk = (int32_t)o->prefill_chunk;
    sp->max_queue = (int32_t)o->max_queue;
    sp->prefix_cache = !o->no_prefix_cache;
    sp->n_threads = (int)o->threads;
    sp->max_images = (int32_t)o->max_images;
    sp->image_tiles = (int32_t)o->image_tiles;
    tool_draft_params(&o->draft, sp);
    mlm_exec_params xp; /* what the scheduler's executor will hold, for the memory check */
    mlm_sched_exec_params(have_cfg ? &cfg : NULL, sp, &xp);
    if ((!o->alias && !r->alias) || !tool_memory_fits("serve", o->model, &o->prec, &xp, &o->draft))
        return TOOL_RUNTIME;
    if (o->prec.dp > 1)
        return tool_usage("serve",
                          "--dp %d: one TP group serves (rank 0 answers HTTP); "
                          "data-parallel lanes are for meshlm demo",
                          o->prec.dp);
    return TOOL_OK;
}

/* On a mesh's other ranks: hold the shards and follow rank 0's steps until it stops. They
 * leave signals to rank 0 (mpirun forwards them to every rank): its drain decides when
 * they end. */
static int follow(serve_run *r) {
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    mlm_status st = mlm_sched_create(r->model, &r->sp, &r->sched, &r->err);
    if (!st) st = mlm_sched_follow(r->sched, &r->err);
    return st ? tool_fail(&r->err) : TOOL_OK;
}

/* The tokenizer, the sampling defaults, the scheduler and the server's fixed state. Threads
 * started from here on (the executor's workers, the engine, MHD's) keep SIGINT and SIGTERM
 * blocked, so that only the main thread is interrupted by them; serve() unblocks them once
 * everything runs, and a signal that came meanwhile is taken then. */
static mlm_status start(serve_run *r) {
    const serve_opts *o = &r->o;
    srv_server *srv = &r->srv;
    mlm_status st = mlm_tokenizer_load(o->model, &r->tok, &r->err);
    if (!st && mlm_generation_defaults(o->model, &srv->defaults, &r->err) != MLM_OK) {
        fprintf(stderr, "meshlm serve: %s (using temperature 1, top_p 1)\n", r->err.msg);
        srv->defaults = mlm_sampler_default_params();
        srv->defaults.temperature = 1;
    }
    sigset_t stop_sigs;
    sigemptyset(&stop_sigs);
    sigaddset(&stop_sigs, SIGINT);
    sigaddset(&stop_sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_sigs, &r->old_mask);
    r->masked = 1;
    r->draft = o->draft;
    if (!st && !(st = tool_draft_load("serve", &r->draft, r->tok, (int)o->threads, &r->err))) {
        tool_draft_params(&r->draft, &r->sp);
        st = mlm_sched_create(r->model, &r->sp, &r->sched, &r->err);
    }
    if (st) return st;
    srv->model = r->model;
    srv->tok = r->tok;
    srv->sched = r->sched;
    srv->metrics = &r->metrics;
    srv->alias = o->alias ? o->alias : r->alias;
    srv->model_path = o->model;
    srv->api_key = o->api_key;
    srv->max_seq_len = mlm_sched_get_params(r->sched)->max_seq_len;
    srv->max_logprobs = mlm_sched_get_params(r->sched)->max_logprobs;
    srv->max_body = (size_t)o->max_body;
    srv->detok_cap = 64 + longest_token(r->tok);
    srv->start_time = (int64_t)time(NULL);
    srv->n_threads = (int)o->threads;
    srv->max_images = (int32_t)o->max_images;
    srv->draft_max = tool_draft_max(&o->draft);
    srv->reasoning = !o->no_reasoning && mlm_tokenizer_chat_thinks(srv->tok);
    srv->image_token = mlm_model_image_token(r->model);
    stop_ids(srv, mlm_model_config(r->model));
    if (!(srv->dry_breakers = malloc((size_t)mlm_tokenizer_n_vocab(r->tok))))
        return mlm_error_set(&r->err, MLM_ERR_NOMEM, "out of memory");
    return mlm_dry_breakers(r->tok, NULL, 0, srv->dry_breakers, &r->err);
}

/* The engine thread, the signal pipe and the HTTP listener; then serving until a signal. */
static int serve(serve_run *r) {
    const serve_opts *o = &r->o;
    r->eng.sched = r->sched;
    if (pthread_create(&r->eng.thread, NULL, engine_main, &r->eng)) {
        fprintf(stderr, "meshlm serve: cannot start the engine thread\n");
        return TOOL_RUNTIME;
    }
    r->engine_started = 1;
    if (!install_signals(r->pipe_fds)) {
        fprintf(stderr, "meshlm serve: cannot create a pipe: %s\n", strerror(errno));
        return TOOL_RUNTIME;
    }
    srv_http_params hp = {
        .host = o->host, .port = (int)o->port, .timeout_s = (int)o->timeout, .max_conns = 512};
    int port = 0;
    if (srv_http_start(&r->srv, &hp, &r->http, &port, &r->err)) {
        fprintf(stderr, "meshlm serve: %s\n", r->err.msg);
        return TOOL_RUNTIME;
    }
    int v6 = strchr(o->host, ':') != NULL;
    printf("meshlm serve: listening on http://%s%s%s:%d (model %s)\n", v6 ? "[" : "", o->host,
           v6 ? "]" : "", port, r->srv.alias);
    fflush(stdout);
    pthread_sigmask(SIG_SETMASK, &r->old_mask, NULL);
    serve_until_signal(&r->srv, r->http, r->pipe_fds[0], (double)o->drain_timeout);
    return TOOL_OK;
}

int cmd_serve(int argc, char **argv) {
    serve_run r;
    serve_init(&r);
    int rc = parse(argc, argv, &r.o);
    if (rc) {
        serve_free(&r);
        return rc < 0 ? TOOL_OK : rc;
    }
    if (!r.o.model && !(r.o.model = r.default_model = tool_default_model("serve"))) rc = TOOL_USAGE;
    if (!rc) rc = plan(&r);
    mlm_status st = MLM_OK;
    if (!rc)
        st = tool_load_model("serve", r.o.model, &r.o.prec, (int)r.o.threads, &r.model, &r.err);
    /* on a mesh rank 0 serves and leads each step; the other ranks follow it */
    if (!rc && !st && tool_mesh() && tool_mesh()->tp > 1) r.sp.lead = tool_rank() == 0;
    if (!rc && !st && tool_mesh() && tool_mesh()->tp > 1 && tool_rank() > 0)
        rc = follow(&r);
    else if (!rc) {
        if (!st) st = start(&r);
        rc = st ? tool_fail(&r.err) : serve(&r);
    }
    serve_free(&r);
    if (!rc && !(tool_mesh() && tool_rank() > 0)) fprintf(stderr, "meshlm serve: stopped\n");
    return rc;
}
