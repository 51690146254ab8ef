/* tools/cli/chat.c: `meshlm chat`: a conversation in the model's chat format (Llama 3,
 * ChatML), on the scheduler the server runs (one request per turn). The dialog lives as token
 * ids: a turn encodes only the new user message and the generation prompt, and submits the
 * whole dialog, whose KV the prefix cache still holds (full blocks and the last turn's tail),
 * so only the new tokens are computed; the answer streams to stdout until an end-of-turn id.
 * Ctrl-C stops an answer (at the prompt it quits); a turn that would not fit in the context
 * drops the oldest turns and reads the rest again (a new cache salt, as /reset). With stdin not
 * a terminal: one message a line in, one reply a line out, notices on stderr. The chat struct
 * owns every buffer it points to; the model, tokenizer and scheduler are freed by
 * chat_deinit. On a mesh rank 0 reads the messages and leads; the other ranks follow. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define CHAT_COMMANDS                                                                              \
    "  /tool TEXT      a tool's result for the model's call (with --tools), then its answer\n"       \
    "  /reset          forget the conversation (the system message stays)\n"                       \
    "  /system [TEXT]  set the system message (none without TEXT) and reset\n"                     \
    "  /help           these commands\n"                                                           \
    "  /exit, /quit    quit (also Ctrl-D; Ctrl-C stops an answer)\n"

/* The loop guard's strength in chat: the value DRY's author suggests and llama.cpp's and
 * text-generation-webui's docs recommend (their samplers default to off, as meshlm's
 * generate and server do; chat is where a person reads the output). */
#define CHAT_DRY_MULTIPLIER 0.8f

// clang-format off
static void help(void) {
    printf("usage: meshlm chat [-m PATH] [options]\n"
           "\n"
           "Talks with a model in its chat format (Llama 3, ChatML), keeping the conversation\n"
           "in the KV cache: a turn reads only the new message. Without -m, SmolLM2-135M-Instruct\n"
           "(" TOOL_DEFAULT_GGUF ", fetched by scripts/setup.sh), else\n"
           "the tiny model embedded in the repository (models/default), which babbles.\n"
           "\n"
           "  -m, --model PATH         a model folder or .gguf file whose tokenizer has a chat\n"
           "                           format\n"
           "      --system TEXT        a system message at the start of the conversation\n"
           "      --tools FILE         OpenAI-style tools (a JSON array of {\"type\": \"function\",\n"
           "                           \"function\": {name, description, parameters}}) shown to\n"
           "                           the model as its chat template shows them (ChatML forms:\n"
           "                           in the system message); a call in an answer is named on\n"
           "                           stderr, and /tool TEXT gives the model its result\n"
           "      --no-think           a model that thinks (Qwen3) answers at once: each\n"
           "                           answer starts after an empty <think></think> block, as\n"
           "                           its template's enable_thinking=False writes (in a\n"
           "                           terminal a <think> block is shown dimmed; Qwen3 also\n"
           "                           reads /think and /no_think in a message)\n"
           "  -n, --max-new-tokens N   tokens per answer at most (default 512)\n"
           "      --temperature T      0 = greedy, the default (argmax, ties to the lowest id)\n"
           "      --top-k K            keep the K most likely tokens (0 = off, default)\n"
           "      --top-p P            keep the smallest set with probability mass P (1 = off)\n"
           "      --seed S             RNG seed for sampling (default 0): every answer samples\n"
           "                           from it, as a server request with that seed does\n"
           "      --max-seq-len N      context in tokens, the whole conversation (default 4096)\n"
           "      --dry-multiplier M   the loop guard, llama.cpp's DRY sampler: a token that would\n"
           "                           extend a stretch already said loses M * base^(length -\n"
           "                           allowed length) from its logit (default 0.8; 0 = off,\n"
           "                           plain greedy or sampling). It looks over the whole\n"
           "                           conversation; \"\\n\" \":\" \"\\\"\" \"*\" and the format's own\n"
           "                           tags break a stretch\n"
           "      --dry-base B         growth per repeated token (default 1.75)\n"
           "      --dry-allowed-length N  repeats this long are free (default 2)\n"
           "      --dry-last-n N       tokens looked back over (-1 = all, the default)\n"
           TOOL_DRAFT_HELP
           "                           (-v shows drafted and accepted tokens per answer)\n"
           TOOL_PRECISION_HELP
           "      --threads N          threads (default: all cores)\n"
           "  -v, --verbose            a stats line per answer on stderr: tokens prefilled (of\n"
           "                           them new), tokens generated, speed, context used\n"
           "  -h, --help               this help\n"
           "\n"
           "In a terminal: a \"> \" prompt; a line ending in '\\' continues on the next one.\n"
           "Ctrl-C stops an answer, which stays in the conversation as far as it got; Ctrl-C at\n"
           "the prompt, Ctrl-D or /exit quits. Commands:\n"
           CHAT_COMMANDS
           "\n"
           "When stdin is not a terminal: one message per line, and one reply per message on\n"
           "stdout followed by a newline (empty lines and commands give none); no prompt.\n"
           "\n"
           "Answers stop at the chat format's end-of-turn ids, after -n tokens or at the end of\n"
           "the context. When a message plus room for an answer (-n tokens, at most half the\n"
           "context) would not fit in --max-seq-len, the oldest turns are dropped (a notice on\n"
           "stderr) and the rest is read again. Exit status 1 if a message did not fit at all.\n"
           "\n"
           "Without --optimizations chat picks its own profile: the most precise of f32 and bf16\n"
           "whose weights are under 0.4 GB (25 tok/s even at 10 GB/s, 4x reading speed), else\n"
           "the model's default; -v and meshlm info say which and why. The same rule on every\n"
           "machine, so the same answers.\n");
}

// clang-format on

typedef struct chat_opts {
    const char *model, *system, *tools; /* TOOLS: --tools FILE */
    int n_threads, verbose;
    long long max_new, max_seq_len;
    mlm_sampler_params sp;
    mlm_dry_params dry; /* breakers filled by chat_init */
    mlm_chat_thinking thinking; /* --no-think: MLM_THINK_OFF */
    tool_draft draft;
    tool_precision prec;
} chat_opts;

static int parse(int argc, char **argv, chat_opts *o) {
    memset(o, 0, sizeof *o);
    o->max_new = 512;
    o->max_seq_len = 4096;
    o->sp = mlm_sampler_default_params();
    o->dry = mlm_dry_default_params();
    o->dry.multiplier = CHAT_DRY_MULTIPLIER;
    tool_draft_init(&o->draft);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        long long ll;
#define VALUE()                                                                                    \
    if (!(v = tool_value(argc, argv, &i))) return tool_usage("chat", "%s needs a value", a)
        if (tool_is_help(a)) {
            help();
            return -1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            VALUE();
            o->model = v;
        } else if (!strcmp(a, "--system")) {
            VALUE();
            o->system = v;
        } else if (!strcmp(a, "--tools")) {
            VALUE();
            o->tools = v;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            o->verbose = 1;
        } else if (!strcmp(a, "--no-think")) {
            o->thinking = MLM_THINK_OFF;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--max-new-tokens")) {
            VALUE();
            if (!tool_int("chat", a, v, 1, 1 << 24, &o->max_new)) return TOOL_USAGE;
        } else if (!strcmp(a, "--max-seq-len")) {
            VALUE();
            if (!tool_int("chat", a, v, 8, 1 << 24, &o->max_seq_len)) return TOOL_USAGE;
        } else if (!strcmp(a, "--threads")) {
            VALUE();
            if (!tool_int("chat", a, v, 1, 1024, &ll)) return TOOL_USAGE;
            o->n_threads = (int)ll;
        } else if (!strcmp(a, "--dry-multiplier") || !strcmp(a, "--dry-base")) {
            VALUE();
            double d;
            if (!tool_float("chat", a, v, !strcmp(a, "--dry-base"), 1e6, &d)) return TOOL_USAGE;
            *(!strcmp(a, "--dry-base") ? &o->dry.base : &o->dry.multiplier) = (float)d;
        } else if (!strcmp(a, "--dry-allowed-length") || !strcmp(a, "--dry-last-n")) {
            VALUE();
            int last_n = !strcmp(a, "--dry-last-n");
            if (!tool_int("chat", a, v, last_n ? -1 : 1, 1 << 24, &ll)) return TOOL_USAGE;
            *(last_n ? &o->dry.last_n : &o->dry.allowed_length) = (int32_t)ll;
        } else if (!strcmp(a, "--draft-ngram")) {
            o->draft.ngram = 1;
        } else if (tool_is_draft_flag(a)) {
            VALUE();
            if (!tool_draft_flag("chat", a, v, &o->draft)) return TOOL_USAGE;
        } else if (tool_is_sampling_flag(a)) {
            VALUE();
            if (!tool_sampling_flag("chat", a, v, &o->sp)) return TOOL_USAGE;
        } else if (tool_is_precision_flag(a)) {
            VALUE();
            if (!tool_precision_flag("chat", a, v, &o->prec)) return TOOL_USAGE;
        } else {
            return tool_usage("chat", "unknown argument '%s'", a);
        }
#undef VALUE
    }
    return tool_draft_check("chat", &o->draft) ? 0 : TOOL_USAGE;
}

// ---- the conversation ----

/* The only process state, as signals need it: Ctrl-C sets the flag, which the answer loop
 * reads, and writes a byte to the pipe, which wakes the wait for input (the signal may run
 * on any thread, e.g. an executor's worker, so it cannot be relied on to interrupt it). */
static volatile sig_atomic_t interrupted;
static int sigpipe[2] = {-1, -1};

static void on_sigint(int sig) {
    (void)sig;
    int saved = errno;
    interrupted = 1;
    ssize_t n = write(sigpipe[1], "", 1); /* when full, a wake-up is pending anyway */
    (void)n;
    errno = saved;
}

static void clear_interrupt(void) {
    char b[64];
    while (read(sigpipe[0], b, sizeof b) > 0) {
    }
    interrupted = 0;
}

/* Installs the handler; 0 if the pipe cannot be made. */
static int catch_sigint(void) {
    if (pipe(sigpipe) != 0) return 0;
    for (int i = 0; i < 2; i++) {
        fcntl(sigpipe[i], F_SETFL, fcntl(sigpipe[i], F_GETFL) | O_NONBLOCK);
        fcntl(sigpipe[i], F_SETFD, FD_CLOEXEC);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGINT, &sa, NULL) == 0;
}

typedef struct chat {
    const chat_opts *o;
    mlm_model *model;      /* owned */
    mlm_tokenizer *tok;    /* owned */
    mlm_sched *sched;      /* owned: one request at a time */
    const mlm_config *cfg; /* borrowed from the model */
    char *system;          /* owned, or NULL: the system message */
    mlm_tokens conv;       /* the dialog: head (BOS, system message), then the turns */
    mlm_tokens turns;      /* not ids: where each turn (user part + answer) starts in conv */
    mlm_tokens anchor;     /* the dialog of one user message ANCHOR (see encode_after) */
    mlm_tokens nosys;      /* the head without a system message (Llama 3: BOS; SmolLM2: its
                              template's own system message) */
    mlm_tokens close;      /* what closes an assistant message (Llama 3: <|eot_id|>; ChatML
                              with newlines: <|im_end|> "\n") */
    int64_t n_head;
    int32_t stop[8], n_stop;
    uint8_t *breakers; /* owned: the loop guard's sequence breakers (one flag a token) */
    uint64_t salt; /* the prefix cache's salt: a new one when the dialog starts over */
    tool_draft draft; /* --draft-* and the draft model, loaded (rank 0) */
    int turn_no;   /* answers since the last reset */
    int32_t think_open, think_close; /* a model that thinks, on a terminal: its <think> and
                                        </think> ids, the block between shown dimmed; else -1 */
    char *tools;      /* owned: --tools' JSON text, in every encoding of the dialog; or NULL */
    uint64_t call_rng; /* the ids of calls found in answers */
} chat;

static mlm_status append(mlm_tokens *t, const int32_t *ids, int64_t n) {
    mlm_status st = MLM_OK;
    for (int64_t i = 0; !st && i < n; i++)
        st = mlm_tokens_push(t, ids[i]);
    return st;
}

/* A message's share of a dialog's tokens is what encoding [ANCHOR, message] adds to
 * encoding [ANCHOR]: the anchor takes what only a dialog's start gets (Llama 3's BOS, a
 * template's default system message when the first message is not a system one, the tools). */
static const mlm_chat_turn ANCHOR = {"user", "x", NULL, NULL, 0};

/* Encodes the dialog MSGS[0, N) (with the tools) and appends to OUT what follows PREFIX's
 * tokens in it; UNSUPPORTED when it does not start with them. */
static mlm_status encode_after(const chat *c, const mlm_chat_turn *msgs, int n, int gen,
                               const mlm_tokens *prefix, mlm_tokens *out, mlm_error *err) {
    mlm_tokens all;
    mlm_tokens_init(&all);
    mlm_chat_dialog d = {msgs, n, c->tools, gen, c->o->thinking};
    mlm_status st = mlm_tokenizer_encode_dialog(c->tok, &d, &all, err);
    int64_t k = prefix->n;
    if (!st && (all.n < k || (k && memcmp(all.ids, prefix->ids, (size_t)k * sizeof *all.ids))))
        st = mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                           "chat: the chat format does not encode a dialog message by message, so "
                           "turns cannot be added to it one at a time");
    if (!st) st = append(out, all.ids + k, all.n - k);
    mlm_tokens_deinit(&all);
    return st;
}

static int64_t turn_start(const chat *c, int64_t k) {
    return k < c->turns.n ? c->turns.ids[k] : c->conv.n;
}

/* Starts a new conversation with SYSTEM (NULL: none), which the chat takes over. CAPACITY,
 * and the old conversation kept, when the system message leaves no room for a turn. */
static mlm_status reset(chat *c, char *system, mlm_error *err) {
    mlm_tokens head, none = {0};
    mlm_tokens_init(&head);
    mlm_chat_turn m = {"system", system, NULL, NULL, 0};
    mlm_status st = system ? encode_after(c, &m, 1, 0, &none, &head, err)
                           : append(&head, c->nosys.ids, c->nosys.n);
    if (!st && head.n + c->close.n + 8 > c->o->max_seq_len) {
        st = mlm_error_set(err, MLM_ERR_CAPACITY,
                           "the system message is %lld tokens: too long for --max-seq-len %lld",
                           (long long)head.n, c->o->max_seq_len);
    }
    if (st) {
        free(system);
        mlm_tokens_deinit(&head);
        return st;
    }
    free(c->system);
    c->system = system;
    c->conv.n = c->turns.n = 0;
    st = append(&c->conv, head.ids, head.n);
    c->n_head = c->conv.n;
    c->salt++; /* nothing of the old dialog is read from the cache */
    c->turn_no = 0;
    mlm_tokens_deinit(&head);
    return st;
}

static void chat_deinit(chat *c) {
    free(c->system);
    free(c->tools);
    free(c->breakers);
    mlm_tokens_deinit(&c->conv);
    mlm_tokens_deinit(&c->turns);
    mlm_tokens_deinit(&c->anchor);
    mlm_tokens_deinit(&c->nosys);
    mlm_tokens_deinit(&c->close);
    mlm_sched_free(c->sched);
    tool_draft_free(&c->draft);
    mlm_tokenizer_free(c->tok);
    mlm_model_free(c->model);
}

/* Reads --tools into C. Llama 3's template puts the tools into the first user message, which
 * a dialog built turn by turn (and cut from the front when full) cannot keep: refused. */
static mlm_status load_tools(chat *c, mlm_error *err) {
    if (mlm_tokenizer_chat_kind(c->tok) == MLM_CHAT_LLAMA3)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                             "--tools: Llama 3's chat template puts the tools into the first "
                             "user message, which chat cannot keep while it drops old turns; "
                             "'meshlm serve' takes tools for it");
    size_t len = 0;
    if (!(c->tools = tool_read_text(c->o->tools, &len)))
        return mlm_error_set(err, MLM_ERR_IO, "--tools: cannot read %s", c->o->tools);
    mlm_tokens t;
    mlm_tokens_init(&t);
    mlm_chat_dialog d = {&ANCHOR, 1, c->tools, 1, MLM_THINK_DEFAULT};
    mlm_status st = mlm_tokenizer_encode_dialog(c->tok, &d, &t, err); /* checks the JSON */
    mlm_tokens_deinit(&t);
    if (st) {
        char msg[MLM_ERROR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return mlm_error_set(err, st, "%s: %s", c->o->tools, msg);
    }
    c->call_rng = 0x6d65736c6dull; /* ids need only differ within a conversation */
    return MLM_OK;
}

/* Loads everything; the tokenizer first, so that a model without a chat format is refused
 * before its weights are read. */
static mlm_status chat_init(chat *c, const chat_opts *o, const mlm_sched_params *sp,
                            mlm_error *err) {
    memset(c, 0, sizeof *c);
    c->o = o;
    mlm_tokens_init(&c->conv);
    mlm_tokens_init(&c->turns);
    mlm_tokens_init(&c->anchor);
    mlm_tokens_init(&c->nosys);
    mlm_tokens_init(&c->close);
    mlm_status st = mlm_tokenizer_load(o->model, &c->tok, err);
    if (!st && !mlm_tokenizer_chat_format(c->tok)) {
        st = mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                           "%s: the tokenizer has no chat format (meshlm knows Llama 3's and "
                           "ChatML's); 'meshlm generate' takes plain prompts",
                           o->model);
    }
    if (!st && o->tools) st = load_tools(c, err);
    if (!st) st = tool_load_model("chat", o->model, &o->prec, o->n_threads, &c->model, err);
    if (st) return st;
    mlm_sched_params p = *sp;
    int mesh = tool_mesh() && tool_mesh()->tp > 1;
    p.lead = mesh && tool_rank() == 0; /* rank 0 leads, the others follow (cmd_chat) */
    c->draft = o->draft; /* rank 0 drafts; the others verify what it sends */
    if (!(mesh && tool_rank() > 0) && (st = tool_draft_load("chat", &c->draft, c->tok, o->n_threads, err)))
        return st;
    tool_draft_params(&c->draft, &p);
    if ((st = mlm_sched_create(c->model, &p, &c->sched, err))) return st;
    if (mesh && tool_rank() > 0) return MLM_OK;
    c->cfg = mlm_model_config(c->model);
    if (o->dry.multiplier != 0) {
        if (!(c->breakers = malloc((size_t)mlm_tokenizer_n_vocab(c->tok))))
            return mlm_error_set(err, MLM_ERR_NOMEM, "out of memory");
        st = mlm_dry_breakers(c->tok, NULL, 0, c->breakers, err);
        if (st) return st;
    }
    c->n_stop = mlm_tokenizer_chat_stop_ids(c->tok, c->stop, 8);
    int dim = mlm_tokenizer_chat_thinks(c->tok) && isatty(1);
    c->think_open = dim ? mlm_tokenizer_special_id(c->tok, "<think>") : -1;
    c->think_close = dim ? mlm_tokenizer_special_id(c->tok, "</think>") : -1;
    if (c->n_stop > 8) c->n_stop = 8;
    /* the head without a system message: the anchor's dialog less the anchor's share; the
     * closing: what an empty answer adds to the generation prompt when a user message
     * follows it (as the last message, a template that thinks would write an empty <think>
     * block into it) */
    mlm_tokens gen, share, mid;
    mlm_tokens_init(&gen);
    mlm_tokens_init(&share);
    mlm_tokens_init(&mid);
    mlm_chat_turn m[2] = {ANCHOR, ANCHOR};
    st = encode_after(c, &ANCHOR, 1, 0, &c->nosys, &c->anchor, err); /* nosys is empty here */
    if (!st) st = encode_after(c, m, 2, 0, &c->anchor, &share, err);
    int64_t n_nosys = c->anchor.n - share.n;
    if (!st && (n_nosys < 0 || (share.n && memcmp(c->anchor.ids + n_nosys, share.ids,
                                                  (size_t)share.n * sizeof *share.ids))))
        st = mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                           "chat: the chat format encodes a message differently at the start");
    if (!st) st = append(&c->nosys, c->anchor.ids, n_nosys);
    mlm_chat_turn m3[3] = {ANCHOR, {"assistant", "", NULL, NULL, 0}, ANCHOR};
    /* the plain generation prompt */
    const mlm_chat_dialog go = {&ANCHOR, 1, c->tools, 1, MLM_THINK_DEFAULT};
    if (!st) st = mlm_tokenizer_encode_dialog(c->tok, &go, &gen, err);
    if (!st) st = encode_after(c, m3, 3, 0, &gen, &mid, err); /* the closing, then the share */
    int64_t n_close = mid.n - share.n;
    if (!st && (n_close < 1 || memcmp(mid.ids + n_close, share.ids,
                                      (size_t)share.n * sizeof *share.ids)))
        st = mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                           "chat: the chat format does not close an answer");
    if (!st) st = append(&c->close, mid.ids, n_close);
    mlm_tokens_deinit(&gen);
    mlm_tokens_deinit(&share);
    mlm_tokens_deinit(&mid);
    char *sys = !st && o->system ? strdup(o->system) : NULL;
    if (!st && o->system && !sys) st = mlm_error_set(err, MLM_ERR_NOMEM, "out of memory");
    if (!st) st = reset(c, sys, err);
    return st;
}

/* Makes room for a turn of N_PART tokens: drops the oldest turns while the dialog, the part
 * and ROOM for the answer exceed the context; what is kept is read again (a new salt). */
static void make_room(chat *c, int64_t n_part, int64_t room) {
    int64_t max = c->o->max_seq_len, k = 0;
    while (k < c->turns.n && c->n_head + c->conv.n - turn_start(c, k) + n_part + room > max)
        k++;
    if (k == 0) return;
    int64_t from = turn_start(c, k), cut = from - c->n_head, was = c->conv.n;
    memmove(c->conv.ids + c->n_head, c->conv.ids + from,
            (size_t)(c->conv.n - from) * sizeof *c->conv.ids);
    c->conv.n -= cut;
    for (int64_t i = k; i < c->turns.n; i++)
        c->turns.ids[i - k] = c->turns.ids[i] - (int32_t)cut;
    c->turns.n -= k;
    fprintf(stderr,
            "meshlm chat: context full (%lld tokens so far + %lld for this turn + %lld for the "
            "answer > --max-seq-len %lld): dropped the oldest %lld turn%s; the %lld "
            "tokens kept are read again\n",
            (long long)was, (long long)n_part, (long long)room, (long long)max, (long long)k,
            k == 1 ? "" : "s", (long long)c->conv.n);
    c->salt++;
}

#define DIM "\033[2m" /* SGR faint: a thinking model's reasoning */
#define UNDIM "\033[0m"

/* One answer as the scheduler's events bring it. */
typedef struct answer {
    chat *c;
    mlm_detok dt;
    int64_t n_gen;   /* tokens sampled, an end-of-turn id included */
    int32_t last;    /* the last one */
    int stop_id;     /* it was an end-of-turn id */
    int interrupted; /* Ctrl-C during the answer */
    int dimmed;      /* inside a <think> block shown dimmed */
    int nomem;
    char *text; /* with --tools: the answer's text so far (owned), LEN bytes */
    size_t len, cap;
    mlm_finish finish;
    int32_t n_prompt, n_cached;
    double t_first; /* when the first token came */
    char error[MLM_ERROR_MSG_MAX];
} answer;

/* Appends N bytes to A's text; 0 (A->nomem set) when out of memory. */
static int add_text(answer *a, const char *s, size_t n) {
    if (a->len + n + 1 > a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 256;
        while (cap < a->len + n + 1)
            cap *= 2;
        char *p = realloc(a->text, cap);
        if (!p) return !(a->nomem = 1);
        a->text = p, a->cap = cap;
    }
    memcpy(a->text + a->len, s, n);
    a->text[a->len += n] = 0;
    return 1;
}

/* The tool calls in a finished answer A (its reasoning left out), named on stderr. */
static mlm_status report_calls(chat *c, const answer *a, mlm_error *err) {
    mlm_reasoning_split sp = {0};
    if (mlm_tokenizer_chat_thinks(c->tok)) mlm_chat_split_reasoning(a->text, a->len, 1, &sp);
    mlm_tool_reply r;
    mlm_status st = mlm_tool_reply_parse(mlm_tokenizer_chat_kind(c->tok), c->tools,
                                         a->text + sp.content_begin, a->len - sp.content_begin,
                                         &c->call_rng, &r, err);
    if (st) return st;
    for (int32_t k = 0; k < r.n_calls; k++)
        fprintf(stderr, "meshlm chat: tool call %s: %s(%s)\n", r.calls[k].id, r.calls[k].name,
                r.calls[k].arguments);
    if (r.n_calls) fprintf(stderr, "meshlm chat: /tool TEXT gives the model a result\n");
    mlm_tool_reply_deinit(&r);
    return MLM_OK;
}

static int on_event(void *user, const mlm_sched_event *ev) {
    answer *a = user;
    chat *c = a->c;
    if (ev->token >= 0) {
        if (!a->n_gen) a->t_first = tool_now();
        a->n_gen++;
        a->last = ev->token;
        if (mlm_tokens_push(&c->conv, ev->token)) {
            a->nomem = 1;
            return 1;
        }
        if (ev->is_stop_id) {
            a->stop_id = 1;
        } else {
            char buf[1024];
            size_t n = 0;
            mlm_error e;
            if (mlm_detok_push(&a->dt, c->tok, ev->token, buf, sizeof buf, &n, &e) != MLM_OK) n = 0;
            if (ev->token == c->think_open) fputs(DIM, stdout), a->dimmed = 1;
            fwrite(buf, 1, n, stdout);
            if (c->tools && !add_text(a, buf, n)) return 1;
            if (ev->token == c->think_close && a->dimmed) fputs(UNDIM, stdout), a->dimmed = 0;
            fflush(stdout);
            if (interrupted) {
                a->interrupted = 1;
                return 1;
            }
        }
    }
    if (ev->finish) {
        a->finish = ev->finish;
        a->n_prompt = ev->n_prompt, a->n_cached = ev->n_cached;
        if (ev->finish == MLM_FINISH_ERROR)
            snprintf(a->error, sizeof a->error, "%s", ev->error ? ev->error : "step failed");
    }
    return 0;
}

/* One message (a user's, or a tool result with ROLE "tool"): room, then the whole dialog as
 * one request (only its new tokens are computed), the answer streamed to stdout and closed in
 * the dialog, its tool calls named. *REJECTED when the message cannot fit even alone. */
static mlm_status turn(chat *c, const char *role, const char *text, int *rejected,
                       mlm_error *err) {
    const chat_opts *o = c->o;
    mlm_chat_turn m[2] = {ANCHOR, {role, text, NULL, NULL, 0}};
    mlm_tokens part;
    mlm_tokens_init(&part);
    mlm_status st = encode_after(c, m, 2, 1, &c->anchor, &part, err);
    int64_t max = o->max_seq_len, n_close = c->close.n;
    int64_t room = (o->max_new < max / 2 ? o->max_new : max / 2) + n_close;
    if (!st && c->n_head + part.n + 1 + n_close > max) {
        fprintf(stderr,
                "meshlm chat: the message is %lld tokens; with the system message (%lld) and an "
                "answer it does not fit in --max-seq-len %lld\n",
                (long long)part.n, (long long)c->n_head, (long long)max);
        *rejected = 1;
        mlm_tokens_deinit(&part);
        return MLM_OK;
    }
    if (!st) make_room(c, part.n, room);
    if (!st) st = mlm_tokens_push(&c->turns, (int32_t)c->conv.n);
    if (!st) st = append(&c->conv, part.ids, part.n);
    int64_t n_new = part.n;
    mlm_tokens_deinit(&part);
    if (st) return st;

    /* the answer ends at an end-of-turn id, -n tokens, or where the closing still fits */
    int64_t cap = max - c->conv.n - n_close;
    answer a = {.c = c};
    mlm_detok_init(&a.dt);
    mlm_request_params q = mlm_request_default_params();
    q.prompt = c->conv.ids; /* copied: the answer's tokens are appended to conv as they come */
    q.n_prompt = (int32_t)c->conv.n;
    q.max_new_tokens = (int32_t)(o->max_new < cap ? o->max_new : cap);
    q.sampling = o->sp;
    q.dry = o->dry;
    q.dry.breakers = c->breakers;
    q.draft.max = tool_draft_max(&o->draft);
    q.stop_ids = c->stop;
    q.n_stop_ids = c->n_stop;
    q.cache_salt = c->salt;
    q.on_event = on_event;
    q.user = &a;
    double t0 = tool_now();
    uint64_t id;
    int cancelled = 0;
    mlm_sched_stats before, after;
    mlm_sched_get_stats(c->sched, &before);
    st = mlm_sched_submit(c->sched, &q, &id, err);
    while (!st && !a.finish) {
        if (interrupted && !a.n_gen && !cancelled) { /* Ctrl-C while the dialog is read */
            mlm_sched_cancel(c->sched, id);
            cancelled = 1;
        }
        int did = 0;
        st = mlm_sched_step(c->sched, &did, err);
    }
    if (!st && a.nomem) st = mlm_error_set(err, MLM_ERR_NOMEM, "out of memory");
    if (!st && a.finish == MLM_FINISH_ERROR)
        st = mlm_error_set(err, MLM_ERR_BACKEND, "%s", a.error);
    double t1 = a.n_gen ? a.t_first : tool_now();
    const char *why = a.stop_id                     ? "end of turn"
                      : a.interrupted || cancelled  ? "interrupted"
                      : a.n_gen >= o->max_new       ? "length"
                      : a.n_gen >= q.max_new_tokens ? "context"
                                                    : "length";
    int stopped = a.stop_id ? 1 + (a.last == c->close.ids[0]) : 0; /* 2: the closing's first */
    clear_interrupt();
    char buf[1024];
    fwrite(buf, 1, mlm_detok_flush(&a.dt, buf, sizeof buf), stdout);
    if (a.dimmed) fputs(UNDIM, stdout); /* an answer cut off while thinking */
    /* the closing, or its rest after its first token, ends the answer; with the last token
     * sampled it waits for the next turn's prefill */
    if (!st && stopped != 1)
        st = append(&c->conv, c->close.ids + (stopped == 2), c->close.n - (stopped == 2));
    fputc('\n', stdout);
    fflush(stdout);
    if (!st && c->tools && a.text) st = report_calls(c, &a, err);
    free(a.text);
    double t2 = tool_now();
    c->turn_no++;
    mlm_sched_get_stats(c->sched, &after);
    char draft[128] = "";
    int64_t drafted = after.draft_tokens - before.draft_tokens,
            accepted = after.draft_accepted - before.draft_accepted;
    if (tool_draft_max(&o->draft))
        snprintf(draft, sizeof draft, " | drafted %lld, accepted %lld (%.0f%%), %.2f tokens a step",
                 (long long)drafted, (long long)accepted,
                 drafted ? 100.0 * (double)accepted / (double)drafted : 0.0,
                 after.steps > before.steps ? (double)a.n_gen / (double)(after.steps - before.steps)
                                            : 0.0);
    if (o->verbose)
        fprintf(stderr,
                "[turn %d: prefilled %lld tokens (%lld new) in %.3f s, generated %lld tokens, "
                "%.1f tok/s, context %lld/%lld, stop: %s%s]\n",
                c->turn_no, (long long)(a.n_prompt - a.n_cached), (long long)n_new, t1 - t0,
                (long long)a.n_gen, t2 > t1 ? (double)a.n_gen / (t2 - t1) : 0.0,
                (long long)c->conv.n, (long long)max, why, draft);
    return st;
}

// ---- the prompt loop ----

/* Standard input, read with read(2) and poll(2) beside the signal pipe. */
typedef struct input {
    char *buf; /* owned: bytes read and not yet taken */
    size_t len, cap;
    char *msg; /* owned: the message being returned */
    size_t msg_len, msg_cap;
    int eof;
} input;

static int grow(char **p, size_t *cap, size_t need) {
    if (need <= *cap) return 1;
    size_t c2 = need * 2 > 4096 ? need * 2 : 4096;
    char *b = realloc(*p, c2);
    if (!b) return 0;
    *p = b;
    *cap = c2;
    return 1;
}

/* Appends the next line (without its end of line) to IN->msg; 0 at EOF or on Ctrl-C. */
static int next_line(input *in) {
    for (;;) {
        char *nl = in->len ? memchr(in->buf, '\n', in->len) : NULL;
        if (nl || (in->eof && in->len)) {
            size_t n = nl ? (size_t)(nl - in->buf) : in->len, take = n + (nl != NULL);
            while (n > 0 && in->buf[n - 1] == '\r')
                n--;
            if (!grow(&in->msg, &in->msg_cap, in->msg_len + n + 1)) return 0;
            memcpy(in->msg + in->msg_len, in->buf, n);
            in->msg_len += n;
            in->msg[in->msg_len] = 0;
            memmove(in->buf, in->buf + take, in->len - take);
            in->len -= take;
            return 1;
        }
        if (in->eof || !grow(&in->buf, &in->cap, in->len + 4096)) return 0;
        struct pollfd pf[2] = {{.fd = 0, .events = POLLIN}, {.fd = sigpipe[0], .events = POLLIN}};
        int r = poll(pf, 2, -1);
        if (interrupted) return 0;
        if (r < 0 && errno != EINTR) in->eof = 1;
        if (r <= 0 || !pf[0].revents) continue;
        ssize_t n = read(0, in->buf + in->len, in->cap - in->len);
        if (n > 0)
            in->len += (size_t)n;
        else if (n == 0 || errno != EINTR)
            in->eof = 1;
    }
}

/* Reads one message: a line, or in a terminal lines joined while they end in '\'. NULL at
 * EOF or on Ctrl-C. */
static char *read_message(input *in, int tty) {
    in->msg_len = 0;
    while (next_line(in)) {
        if (!tty || !in->msg_len || in->msg[in->msg_len - 1] != '\\') return in->msg;
        in->msg[in->msg_len - 1] = '\n';
    }
    return NULL;
}

/* A slash command: 0 to go on, 1 to quit, -1 on an error in ERR. */
static int command(chat *c, const char *line, int tty, mlm_error *err) {
    size_t name = strcspn(line, " \t");
    const char *arg = line + name + strspn(line + name, " \t");
#define IS(cmd) (name == strlen(cmd) && !strncmp(line, cmd, name))
    if (IS("/exit") || IS("/quit")) return 1;
    if (IS("/help")) {
        fputs(CHAT_COMMANDS, stderr);
        return 0;
    }
    if (!IS("/reset") && !IS("/system")) {
        fprintf(stderr, "meshlm chat: unknown command '%.*s' (/help lists them)\n", (int)name,
                line);
        return 0;
    }
    /* /reset keeps the system message, /system replaces it (removes it without TEXT) */
    const char *sys = IS("/reset") ? c->system : *arg ? arg : NULL;
    const char *done = IS("/reset") ? "conversation reset"
                       : sys        ? "system message set, conversation reset"
                                    : "system message removed, conversation reset";
#undef IS
    char *text = sys ? strdup(sys) : NULL;
    if (sys && !text) {
        mlm_error_set(err, MLM_ERR_NOMEM, "out of memory");
        return -1;
    }
    if (reset(c, text, err) != MLM_OK) {
        if (err->status != MLM_ERR_CAPACITY) return -1;
        fprintf(stderr, "meshlm chat: %s; the conversation goes on as it was\n", err->msg);
    } else if (tty || c->o->verbose) {
        fprintf(stderr, "meshlm chat: %s\n", done);
    }
    return 0;
}

/* Prompts and answers until EOF, /exit or Ctrl-C at the prompt. */
static mlm_status loop(chat *c, int tty, int *rejected, mlm_error *err) {
    input in = {0};
    mlm_status st = MLM_OK;
    for (;;) {
        if (tty) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        char *msg = interrupted ? NULL : read_message(&in, tty);
        if (!msg) {
            if (tty) fputc('\n', stdout);
            break;
        }
        if (!msg[strspn(msg, " \t\n")]) continue;
        int bad = 0;
        const char *role = "user";
        if (!strncmp(msg, "/tool", 5) && (msg[5] == ' ' || msg[5] == '\t' || !msg[5])) {
            role = "tool", msg += 5 + strspn(msg + 5, " \t");
            if (!c->tools) {
                fprintf(stderr, "meshlm chat: /tool needs --tools FILE\n");
                continue;
            }
        } else if (msg[0] == '/') {
            int r = command(c, msg, tty, err);
            if (r < 0) st = err->status;
            if (r) break;
            continue;
        }
        if ((st = turn(c, role, msg, &bad, err))) break;
        if (bad) {
            *rejected = 1;
            if (!tty) fputc('\n', stdout); /* one reply line per message, even an empty one */
        }
    }
    free(in.buf);
    free(in.msg);
    return st;
}

int cmd_chat(int argc, char **argv) {
    chat_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? TOOL_OK : rc;
    char *default_model = NULL;
    if (!o.model) {
        if (!(default_model = tool_default_model("chat"))) return TOOL_USAGE;
        o.model = default_model;
    }
    char why[256] = "named by --optimizations";
    if (!o.prec.optimizations && !o.prec.decoder_config)
        o.prec.optimizations = tool_chat_profile(o.model, why, sizeof why);
    tool_precision_resolve(&o.prec, o.model);
    if (o.prec.dp > 1)
        return tool_usage("chat",
                          "--dp %d: chat runs one user; data-parallel lanes serve "
                          "several (meshlm demo)",
                          o.prec.dp);
    /* one conversation: one sequence, prompts read 2048 tokens a step, the prefix cache
     * keeping the dialog's KV between turns */
    mlm_sched_params sp = mlm_sched_default_params();
    sp.max_batch = 1;
    sp.max_queue = 1;
    sp.max_seq_len = (int32_t)o.max_seq_len;
    sp.block_size = 64;
    sp.prefill_chunk = (int32_t)(o.max_seq_len < 2048 ? o.max_seq_len : 2048);
    sp.n_threads = o.n_threads;
    sp.max_logprobs = 0;
    tool_draft_params(&o.draft, &sp);
    mlm_exec_params xp;
    mlm_sched_exec_params(NULL, &sp, &xp);
    if (!tool_memory_fits("chat", o.model, &o.prec, &xp, &o.draft)) {
        free(default_model);
        return TOOL_RUNTIME;
    }
    chat c;
    mlm_error err = {0};
    double t0 = tool_now();
    mlm_status st = chat_init(&c, &o, &sp, &err);
    int tty = isatty(0), rejected = 0;
    if (!st && tool_mesh() && tool_mesh()->tp > 1 && tool_rank() > 0) { /* follow rank 0 */
        st = mlm_sched_follow(c.sched, &err);
    } else if (!st) {
        char guard[96] = "off (--dry-multiplier 0)";
        if (o.dry.multiplier != 0)
            snprintf(guard, sizeof guard, "DRY (multiplier %g, base %g, allowed length %d)",
                     o.dry.multiplier, o.dry.base, o.dry.allowed_length);
        if (tty || o.verbose)
            fprintf(stderr,
                    "meshlm chat: %s (%s chat format, %s, %s kernels), context %lld tokens%s, "
                    "loaded in %.2f s\n"
                    "meshlm chat: profile %s: %s; loop guard %s\n",
                    o.model, mlm_tokenizer_chat_format(c.tok), mlm_model_profile(c.model),
                    mlm_model_kernels(c.model), o.max_seq_len, c.system ? ", a system message" : "",
                    tool_now() - t0, mlm_model_profile(c.model), why, guard);
        if (tty)
            fprintf(stderr, "/help for commands; Ctrl-C stops an answer; Ctrl-D or /exit quits\n");
        if (!catch_sigint()) fprintf(stderr, "meshlm chat: Ctrl-C will not stop answers\n");
        st = loop(&c, tty, &rejected, &err);
    }
    rc = st ? tool_fail(&err) : rejected ? TOOL_RUNTIME : TOOL_OK;
    chat_deinit(&c);
    free(default_model);
    return rc;
}
