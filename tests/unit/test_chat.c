/* tests/unit/test_chat.c: `meshlm chat` on the embedded default model (real Llama 3
 * tokenizer and chat format, tiny weights), greedy, and on SmolLM2 (ChatML with newlines, a
 * template's own system message, answers ending at <|im_end|>) when it has been fetched.
 * Through a pipe, with the loop guard off (--dry-multiplier 0): every reply equals the
 * library's own greedy generation (mlm_exec_generate, a fresh prefill of the whole dialog's
 * tokens) for the dialog so far; each turn prefills
 * only the new user message and the generation prompt (counted by encoding the full dialog
 * minus the previous one) plus the tokens the last answer left; /reset, /system, --system;
 * dropping the oldest turns when the context is full; bad input; setup.sh's main job with no
 * options (chat's profile rule and loop guard) answers as the model card does. Through a pseudo-terminal:
 * Ctrl-C stops an answer, which stays in the conversation, closed, and the program goes on;
 * Ctrl-C at the prompt and Ctrl-D quit. The binary is $MESHLM (default build/meshlm). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "harness.h"
#include "meshlm.h"

#define MODEL "models/default"
#define PROFILE "bf16"
/* the library's greedy: the profile named, the loop guard off */
#define PLAIN " --optimizations " PROFILE " --dry-multiplier 0"
#define SMOLLM2 "models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

static char tmpdir[256];
static char out[1 << 16];

/* A model as the library runs it, for the independent computation. */
typedef struct lm {
    mlm_model *model;
    mlm_tokenizer *tok;
    mlm_exec *exec;
    mlm_tokens close; /* what ends an assistant message in the format, as its docs say */
} lm;
static lm tiny, smol;

/* Loads DIR in the bf16 profile; 0 with the reason printed if it cannot. */
static int lm_load(lm *m, const char *dir) {
    mlm_error err = {0};
    mlm_model_params mp = mlm_model_default_params();
    mp.optimizations = PROFILE;
    mp.use_cache = 0;
    mlm_exec_params ep = mlm_exec_default_params();
    ep.max_seq_len = 4096;
    mlm_tokens_init(&m->close);
    if (mlm_model_load(dir, &mp, &m->model, &err) || mlm_tokenizer_load(dir, &m->tok, &err) ||
        mlm_exec_create(m->model, &ep, &m->exec, &err)) {
        printf("cannot load %s: %s\n", dir, err.msg);
        return 0;
    }
    const char *fmt = mlm_tokenizer_chat_format(m->tok);
    if (fmt && !strcmp(fmt, "llama3")) {
        mlm_tokens_push(&m->close, mlm_tokenizer_special_id(m->tok, "<|eot_id|>"));
    } else if (fmt && !strcmp(fmt, "chatml-newline")) {
        mlm_encode_params p = mlm_encode_default_params();
        mlm_tokens_push(&m->close, mlm_tokenizer_special_id(m->tok, "<|im_end|>"));
        mlm_tokenizer_encode(m->tok, "\n", 1, &p, &m->close, &err);
    }
    return m->close.n > 0;
}

static void lm_free(lm *m) {
    mlm_exec_free(m->exec);
    mlm_tokenizer_free(m->tok);
    mlm_model_free(m->model);
    mlm_tokens_deinit(&m->close);
}

static const char *meshlm(void) { return getenv("MESHLM") ? getenv("MESHLM") : "build/meshlm"; }

#define EXPECT(args, code, needle) HARNESS_EXPECT_MESHLM(out, args, code, needle)

/* Runs "meshlm chat ARGS" with INPUT on stdin; stdout and stderr into malloc'd strings. */
static int run_chat(const char *args, const char *input, char **sout, char **serr) {
    char in[400], o[400], e[400], cmd[2048];
    snprintf(in, sizeof in, "%s/in.txt", tmpdir);
    snprintf(o, sizeof o, "%s/out.txt", tmpdir);
    snprintf(e, sizeof e, "%s/err.txt", tmpdir);
    harness_write_file(in, input, strlen(input));
    snprintf(cmd, sizeof cmd, "%s chat %s < %s > %s 2> %s", meshlm(), args, in, o, e);
    int st = system(cmd);
    *sout = harness_read_file(o, NULL);
    *serr = harness_read_file(e, NULL);
    if (!*sout) *sout = calloc(1, 1);
    if (!*serr) *serr = calloc(1, 1);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// ---- the independent computation ----

/* What chat's stderr says about one answer (--verbose), and a drop notice before it. */
typedef struct turn_stats {
    int turn, dropped;
    long long prefilled, n_new, generated, context, max;
    char stop[32];
} turn_stats;

static int parse_stats(const char *err, turn_stats *ts, int max) {
    int n = 0, dropped = 0;
    for (const char *l = err; *l && n < max;) {
        const char *d = strstr(l, "dropped the oldest ");
        const char *nl = strchr(l, '\n');
        if (d && (!nl || d < nl)) dropped = atoi(d + strlen("dropped the oldest "));
        turn_stats t = {0};
        if (sscanf(l,
                   "[turn %d: prefilled %lld tokens (%lld new) in %*f s, generated %lld tokens, "
                   "%*f tok/s, context %lld/%lld, stop: %31[^]]",
                   &t.turn, &t.prefilled, &t.n_new, &t.generated, &t.context, &t.max,
                   t.stop) == 7) {
            t.dropped = dropped;
            dropped = 0;
            ts[n++] = t;
        }
        if (!nl) break;
        l = nl + 1;
    }
    return n;
}

static void push_all(mlm_tokens *t, const int32_t *ids, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        mlm_tokens_push(t, ids[i]);
}

/* The library's greedy answer to the dialog tokens SEQ, stop id included; its text into
 * TEXT; the stop id, or -1 when it ran to MAX_NEW. */
static int32_t greedy(const lm *m, const mlm_tokens *seq, int32_t max_new, mlm_tokens *gen,
                      char *text, size_t cap) {
    mlm_tokenizer *tok = m->tok;
    int32_t stop[8];
    int32_t n_stop = mlm_tokenizer_chat_stop_ids(tok, stop, 8);
    mlm_gen_user u = {.prompt = seq->ids,
                      .n_prompt = (int32_t)seq->n,
                      .sampling = mlm_sampler_default_params(),
                      .max_new_tokens = max_new,
                      .stop_ids = stop,
                      .n_stop_ids = n_stop};
    mlm_gen_output o = {0};
    mlm_gen_stats st;
    mlm_error err = {0};
    CHECK_OK(mlm_exec_generate(m->exec, &u, 1, NULL, 0, &o, &st, &err), &err);
    push_all(gen, o.tokens, o.n);
    mlm_detok dt;
    mlm_detok_init(&dt);
    size_t len = 0, n;
    for (int32_t i = 0; i < o.n - o.stopped; i++) {
        CHECK(mlm_detok_push(&dt, tok, o.tokens[i], text + len, cap - len, &n, &err) == MLM_OK);
        len += n;
    }
    len += mlm_detok_flush(&dt, text + len, cap - len);
    text[len] = 0;
    int32_t stopped = o.stopped ? o.tokens[o.n - 1] : -1;
    mlm_gen_output_deinit(&o);
    return stopped;
}

/* The conversation as the test computes it: messages (system first, if any) and the tokens
 * that chat's executor sequence should hold. */
typedef struct dialog {
    mlm_chat_message msgs[64];
    char *owned[64];
    int n;
    mlm_tokens seq;
    int64_t turn_at[32];
    int n_turns;
    int64_t n_head, pending; /* tokens at the end of SEQ not yet in chat's KV */
    int fresh;               /* no turn yet */
} dialog;

static void dialog_reset(const lm *m, dialog *d, const char *system) {
    for (int i = 0; i < d->n; i++)
        free(d->owned[i]);
    d->n = d->n_turns = 0;
    if (system) {
        d->owned[0] = strdup(system);
        d->msgs[d->n++] = (mlm_chat_message){"system", d->owned[0]};
    }
    mlm_error err;
    d->seq.n = 0;
    CHECK_OK(mlm_tokenizer_encode_chat(m->tok, d->msgs, d->n, 0, &d->seq, &err), &err);
    d->n_head = d->pending = d->seq.n;
    d->fresh = 1;
}

static void dialog_add(dialog *d, const char *role, const char *text) {
    d->owned[d->n] = strdup(text);
    d->msgs[d->n] = (mlm_chat_message){role, d->owned[d->n]};
    d->n++;
}

/* Runs chat with ARGS (which must include -v -n MAX_NEW --max-seq-len MAX_SEQ and M's model)
 * on the input LINES and checks every reply and every turn's stats against the dialog computed
 * here. The first reply into FIRST (if not NULL). Returns the number of turns that dropped
 * old ones. The drop rule is checked for formats whose empty dialog is the head (Llama 3). */
static int check_chat(const lm *m, const char *args, const char *system, const char *const *lines,
                      int n_lines, int32_t max_new, int64_t max_seq, char *first, size_t cap) {
    mlm_tokenizer *tok = m->tok;
    char input[4096] = "", *sout, *serr;
    for (int i = 0; i < n_lines; i++)
        snprintf(input + strlen(input), sizeof input - strlen(input), "%s\n", lines[i]);
    int rc = run_chat(args, input, &sout, &serr);
    CHECKF(rc == 0, "chat %s: exit %d: %s", args, rc, serr);
    turn_stats ts[32];
    int n_ts = parse_stats(serr, ts, 32), t = 0, n_drops = 0;
    dialog d = {0};
    mlm_tokens_init(&d.seq);
    dialog_reset(m, &d, system);
    static char expect[1 << 16];
    size_t exp_len = 0;
    mlm_error err;
    for (int i = 0; i < n_lines; i++) {
        const char *l = lines[i];
        if (!strcmp(l, "/reset")) {
            char *sys = d.n && !strcmp(d.msgs[0].role, "system") ? strdup(d.msgs[0].content) : NULL;
            dialog_reset(m, &d, sys);
            free(sys);
            continue;
        }
        if (!strncmp(l, "/system", 7)) {
            dialog_reset(m, &d, l[7] ? l + 8 : NULL);
            continue;
        }
        CHECKF(t < n_ts, "chat %s: no stats line for turn %d: %s", args, t + 1, serr);
        if (t >= n_ts) break;
        /* the new part: the full dialog's encoding minus the previous dialog's */
        mlm_tokens prev, full, part;
        mlm_tokens_init(&prev);
        mlm_tokens_init(&full);
        mlm_tokens_init(&part);
        dialog_add(&d, "user", l);
        CHECK_OK(mlm_tokenizer_encode_chat(tok, d.msgs, d.n - 1, 0, &prev, &err), &err);
        CHECK_OK(mlm_tokenizer_encode_chat(tok, d.msgs, d.n, 1, &full, &err), &err);
        CHECK(full.n > prev.n && (!prev.n || !memcmp(full.ids, prev.ids, (size_t)prev.n * 4)));
        push_all(&part, full.ids + prev.n, full.n - prev.n);
        /* the oldest turns go while the dialog, the part and room for an answer overflow */
        int64_t room = (max_new < max_seq / 2 ? max_new : max_seq / 2) + m->close.n, k = 0;
        while (k < d.n_turns && d.n_head + d.seq.n - d.turn_at[k] + part.n + room > max_seq)
            k++;
        CHECKF(ts[t].dropped == k, "turn %d: dropped %d turns, want %lld", t + 1, ts[t].dropped,
               (long long)k);
        if (k > 0) {
            n_drops++;
            int64_t cut = d.turn_at[k] - d.n_head;
            memmove(d.seq.ids + d.n_head, d.seq.ids + d.turn_at[k],
                    (size_t)(d.seq.n - d.turn_at[k]) * 4);
            d.seq.n -= cut;
            for (int j = (int)k; j < d.n_turns; j++)
                d.turn_at[j - k] = d.turn_at[j] - cut;
            d.n_turns -= (int)k;
            int old = !strcmp(d.msgs[0].role, "system"); /* the oldest user message */
            for (int j = old; j < old + 2 * k; j++)
                free(d.owned[j]);
            memmove(d.msgs + old, d.msgs + old + 2 * k,
                    (size_t)(d.n - old - 2 * k) * sizeof *d.msgs);
            memmove(d.owned + old, d.owned + old + 2 * k,
                    (size_t)(d.n - old - 2 * k) * sizeof *d.owned);
            d.n -= (int)(2 * k);
            d.pending = d.seq.n;
        }
        d.turn_at[d.n_turns++] = d.seq.n;
        push_all(&d.seq, part.ids, part.n);
        /* a first turn reads the dialog's whole encoding (with Llama 3 the head is BOS; a
         * template's default system message goes with the first message); later ones only
         * the new part and what the last answer left */
        if (d.fresh)
            CHECKF(ts[t].prefilled == full.n, "turn %d: prefilled %lld, want %lld", t + 1,
                   ts[t].prefilled, (long long)full.n);
        else
            CHECKF(ts[t].n_new == part.n && ts[t].prefilled == part.n + d.pending,
                   "turn %d: prefilled %lld (%lld new), want %lld (%lld new)", t + 1,
                   ts[t].prefilled, ts[t].n_new, (long long)(part.n + d.pending),
                   (long long)part.n);
        d.fresh = 0;
        /* the answer: greedy from a fresh prefill of the whole sequence */
        mlm_tokens gen;
        mlm_tokens_init(&gen);
        char text[8192];
        int32_t stop = greedy(m, &d.seq, max_new, &gen, text, sizeof text);
        push_all(&d.seq, gen.ids, gen.n);
        /* the answer ends closed: the closing after a cut, its rest after its first token */
        int64_t from = stop < 0 ? 0 : stop == m->close.ids[0] ? 1 : m->close.n;
        push_all(&d.seq, m->close.ids + from, m->close.n - from);
        d.pending = 1 + m->close.n - from;
        if (first && t == 0) snprintf(first, cap, "%s", text);
        CHECKF(ts[t].generated == gen.n && ts[t].context == d.seq.n,
               "turn %d: generated %lld, context %lld; want %lld, %lld", t + 1, ts[t].generated,
               ts[t].context, (long long)gen.n, (long long)d.seq.n);
        dialog_add(&d, "assistant", text);
        exp_len += (size_t)snprintf(expect + exp_len, sizeof expect - exp_len, "%s\n", text);
        mlm_tokens_deinit(&gen);
        mlm_tokens_deinit(&prev);
        mlm_tokens_deinit(&full);
        mlm_tokens_deinit(&part);
        t++;
    }
    CHECKF(t == n_ts, "chat %s: %d stats lines for %d turns", args, n_ts, t);
    CHECKF(!strcmp(sout, expect),
           "chat %s: replies differ from the library's greedy ones:\n"
           "got  '%.400s'\nwant '%.400s'",
           args, sout, expect);
    dialog_reset(m, &d, NULL);
    mlm_tokens_deinit(&d.seq);
    free(sout);
    free(serr);
    return n_drops;
}

// ---- through a pipe ----

/* What encoding [ANCHOR, MSG] adds to encoding [ANCHOR] (GEN: with the generation prompt):
 * a message's share of a dialog, the way chat encodes turns. */
static const mlm_chat_message ANCHOR = {"user", "x"};

static void share(mlm_tokenizer *tok, mlm_chat_message msg, int gen, const mlm_tokens *anchor,
                  int64_t drop, mlm_tokens *dst) {
    mlm_chat_message two[2] = {ANCHOR, msg};
    mlm_tokens t;
    mlm_tokens_init(&t);
    mlm_error err;
    CHECK_OK(mlm_tokenizer_encode_chat(tok, two, 2, gen, &t, &err), &err);
    CHECK(t.n >= anchor->n && !memcmp(t.ids, anchor->ids, (size_t)anchor->n * 4));
    if (t.n >= anchor->n + drop) push_all(dst, t.ids + anchor->n + drop, t.n - anchor->n - drop);
    mlm_tokens_deinit(&t);
}

/* Chat's tokens for a dialog, built turn by turn (a head, then each message's share, the
 * answer's tokens as the dialog encodes them), equal the whole dialog's encoding, with and
 * without a system message. */
static void check_incremental(mlm_tokenizer *tok, const char *name) {
    mlm_chat_message m[] = {{"system", "Be brief."},
                            {"user", "Hello there"},
                            {"assistant", "the earth, and I"},
                            {"user", "How are you?"}};
    mlm_error err;
    mlm_tokens anchor, gen, whole, built;
    mlm_tokens_init(&anchor);
    mlm_tokens_init(&gen);
    CHECK_OK(mlm_tokenizer_encode_chat(tok, &ANCHOR, 1, 0, &anchor, &err), &err);
    CHECK_OK(mlm_tokenizer_encode_chat(tok, &ANCHOR, 1, 1, &gen, &err), &err);
    int64_t n_gen = gen.n - anchor.n; /* the generation prompt */
    for (int sys = 0; sys < 2; sys++) {
        mlm_tokens_init(&whole);
        mlm_tokens_init(&built);
        CHECK_OK(mlm_tokenizer_encode_chat(tok, m + !sys, 4 - !sys, 1, &whole, &err), &err);
        if (sys) {
            CHECK_OK(mlm_tokenizer_encode_chat(tok, m, 1, 0, &built, &err), &err);
        } else { /* the anchor's dialog less the anchor's share */
            mlm_tokens x;
            mlm_tokens_init(&x);
            share(tok, ANCHOR, 0, &anchor, 0, &x);
            CHECK(x.n <= anchor.n && !memcmp(anchor.ids + anchor.n - x.n, x.ids, (size_t)x.n * 4));
            push_all(&built, anchor.ids, anchor.n - x.n);
            mlm_tokens_deinit(&x);
        }
        share(tok, m[1], 1, &anchor, 0, &built);
        share(tok, m[2], 0, &anchor, n_gen, &built); /* the answer after its prompt */
        share(tok, m[3], 1, &anchor, 0, &built);
        CHECKF(built.n == whole.n && !memcmp(built.ids, whole.ids, (size_t)whole.n * 4),
               "%s, %s system message: %lld tokens built, %lld in the whole dialog", name,
               sys ? "a" : "no", (long long)built.n, (long long)whole.n);
        mlm_tokens_deinit(&whole);
        mlm_tokens_deinit(&built);
    }
    mlm_tokens_deinit(&anchor);
    mlm_tokens_deinit(&gen);
}

TEST(incremental_encoding_equals_whole_dialog) {
    check_incremental(tiny.tok, "llama3");
    mlm_tokenizer *phi4 = NULL;
    mlm_error err;
    CHECK_OK(mlm_tokenizer_load("tests/data/tokenizer/phi4", &phi4, &err), &err);
    if (phi4) check_incremental(phi4, "phi-4 chatml");
    mlm_tokenizer_free(phi4);
    mlm_tokenizer *smol_tok = NULL;
    if (access(SMOLLM2, R_OK) == 0) {
        CHECK_OK(mlm_tokenizer_load(SMOLLM2, &smol_tok, &err), &err);
        if (smol_tok) check_incremental(smol_tok, "smollm2 chatml-newline");
        mlm_tokenizer_free(smol_tok);
    }
}

TEST(two_turns_prefill_only_the_new_message) {
    const char *lines[] = {"Hello there", "How are you?"};
    check_chat(&tiny, "-m " MODEL PLAIN " -v -n 24 --max-seq-len 4096", NULL,
               lines, 2, 24, 4096, NULL, 0);
}

TEST(reset_and_system) {
    const char *lines[] = {
        "Hello there", "/reset",       "Hello there", "/system You are a pirate.",
        "Hello there", "How are you?", "/system",     "Hello there"};
    check_chat(&tiny, "-m " MODEL PLAIN " -v -n 16 --max-seq-len 1024", NULL,
               lines, 8, 16, 1024, NULL, 0);
    const char *two[] = {"Hello there", "/reset", "How are you?"};
    check_chat(&tiny,
               "-m " MODEL PLAIN " -v -n 16 --max-seq-len 1024 "
               "--system 'You are a pirate.'",
               "You are a pirate.", two, 3, 16, 1024, NULL, 0);
    /* after /reset the same message gets the first turn's reply (the default profile) */
    char *o, *e;
    CHECK(run_chat("-m " MODEL " -n 10", "Hello there\n/reset\nHello there\n", &o, &e) == 0);
    size_t n = strlen(o);
    CHECKF(n > 2 && n % 2 == 0 && !strncmp(o, o + n / 2, n / 2), "'%s'", o);
    CHECK(strstr(e, "[turn") == NULL); /* quiet without -v */
    free(o);
    free(e);
}

TEST(full_context_drops_oldest_turns) {
    const char *lines[] = {"Hello there",        "How are you?", "Tell me a story",
                           "What is your name?", "Goodbye",      "Thanks"};
    int drops =
        check_chat(&tiny, "-m " MODEL PLAIN " -v -n 16 --max-seq-len 96",
                   NULL, lines, 6, 16, 96, NULL, 0);
    CHECKF(drops >= 2, "only %d turns dropped old ones", drops);
    /* with a system message, which always stays */
    drops = check_chat(&tiny,
                       "-m " MODEL PLAIN
                       " -v -n 16 --max-seq-len 96 --system 'Be brief.'",
                       "Be brief.", lines, 6, 16, 96, NULL, 0);
    CHECK(drops >= 2);
    char *o, *e;
    run_chat("-m " MODEL " -n 16 --max-seq-len 96",
             "Hello there\nHow are you?\nTell me a story\nGoodbye\n", &o, &e);
    CHECKF(strstr(e, "context full") && strstr(e, "dropped the oldest 1 turn"), "%s", e);
    free(o);
    free(e);
}

TEST(a_message_too_long_is_refused_and_chat_goes_on) {
    char *o, *e;
    int rc = run_chat("-m " MODEL " -n 4 --max-seq-len 24",
                      "one two three four five six seven eight nine ten eleven twelve thirteen "
                      "fourteen fifteen sixteen seventeen eighteen nineteen twenty\nHi\n",
                      &o, &e);
    CHECKF(rc == 1 && strstr(e, "does not fit in --max-seq-len 24"), "exit %d: %s", rc, e);
    CHECKF(o[0] == '\n' && strlen(o) > 2 && o[strlen(o) - 1] == '\n', "'%s'", o);
    free(o);
    free(e);
}

TEST(bad_input_fails) {
    EXPECT("chat --frob", 2, "unknown argument '--frob'");
    EXPECT("chat -m", 2, "-m needs a value");
    EXPECT("chat -m " MODEL " -n 0", 2, "-n needs an integer");
    EXPECT("chat -m " MODEL " --temperature -1", 2, "--temperature");
    EXPECT("chat -m " MODEL " --optimizations fast", 2, "--optimizations is");
    EXPECT("chat -m " MODEL " --dry-multiplier -0.5", 2, "--dry-multiplier");
    EXPECT("chat -m " MODEL " --dry-base 0.5", 2, "--dry-base");
    EXPECT("chat -m " MODEL " --dry-allowed-length 0", 2, "--dry-allowed-length");
    EXPECT("chat -m " MODEL " --dry-last-n -2", 2, "--dry-last-n");
    EXPECT("chat -m /nonexistent/model < /dev/null", 1, "/nonexistent/model");
    EXPECT("chat -m tests/data/llama/gqa4_hd64_tied_r32/hf < /dev/null", 1, "gqa4_hd64_tied_r32");
    /* a model whose tokenizer has no chat format: cl100k (GPT-4's) next to the default weights */
    char dir[300], args[1600];
    snprintf(dir, sizeof dir, "%s/nochat", tmpdir);
    snprintf(args, sizeof args,
             "mkdir -p %s && cp " MODEL "/config.json %s/ && ln -sf \"$PWD/" MODEL
             "/model.safetensors\" %s/ && cp tests/data/tokenizer/cl100k_base.tiktoken "
             "%s/tokenizer.model",
             dir, dir, dir, dir);
    CHECK(system(args) == 0);
    snprintf(args, sizeof args, "chat -m %s < /dev/null", dir);
    EXPECT(args, 1, "no chat format");
    CHECK(strstr(out, dir) != NULL);
    const char *flags[] = {
        "--model",   "--system", "--max-new-tokens", "--temperature",   "--top-k",
        "--top-p",   "--seed",   "--max-seq-len",    "--optimizations", "--threads",
        "--verbose", "/reset",   "/system",          "/exit",           "Ctrl-C",
        "--dry-multiplier", "--dry-base", "--dry-allowed-length", "--dry-last-n"};
    EXPECT("chat --help", 0, "usage: meshlm chat");
    for (size_t k = 0; k < sizeof flags / sizeof *flags; k++)
        CHECKF(strstr(out, flags[k]), "chat --help lacks %s", flags[k]);
    EXPECT("--help", 0, "chat");
    /* unknown commands are refused, without a reply line */
    char *o, *e;
    CHECK(run_chat("-m " MODEL " -n 4", "/frob\n\n   \n", &o, &e) == 0);
    CHECK(o[0] == 0 && strstr(e, "unknown command '/frob'"));
    free(o);
    free(e);
}

/* Without -m: SmolLM2 when fetched, else the embedded model, when the binary sits in a
 * build folder of this repository. */
TEST(default_model) {
    char *o1, *e1, *o2, *e2;
    const char *dflt = access(SMOLLM2, R_OK) == 0 ? "-m " SMOLLM2 " -n 8" : "-m " MODEL " -n 8";
    int rc = run_chat("-n 8", "Hello there\n", &o1, &e1);
    run_chat(dflt, "Hello there\n", &o2, &e2);
    if (rc == 2) {
        CHECKF(strstr(e1, "no -m given"), "%s", e1);
        printf("  note: %s is outside the repository; only '%s' checked\n", meshlm(), dflt);
    } else {
        CHECKF(rc == 0 && !strcmp(o1, o2), "exit %d: '%s' vs '%s' (%s)", rc, o1, o2, dflt);
    }
    free(o1);
    free(e1);
    free(o2);
    free(e2);
}

/* The real default model (when scripts/get-model.sh has fetched it): its ChatML with
 * newlines and a template's own system message, answers that end at <|im_end|>. */
TEST(smollm2_answers_end_at_im_end) {
    if (access(SMOLLM2, R_OK) != 0) SKIP("%s is absent (scripts/get-model.sh fetches it)", SMOLLM2);
    CHECK(lm_load(&smol, SMOLLM2));
    if (!smol.exec) return;
    const char *lines[] = {"What is the capital of France?", "And of Germany?", "/reset",
                           "What is the capital of France?"};
    char first[8192] = "";
    check_chat(&smol, "-m " SMOLLM2 PLAIN " -v -n 32 --max-seq-len 512", NULL,
               lines, 4, 32, 512, first, sizeof first);
    /* the model card's check */
    CHECKF(!strcmp(first, "The capital of France is Paris."), "'%s'", first);
}

/* A model that thinks (a tiny Qwen3 with Qwen3's template, tests/data/qwen/chat/think_model):
 * the first answer is transformers' greedy reply to the template's prompt, <think> block
 * included (expected.json, tests/fixtures/make_qwen_chat_fixtures.py); with --no-think the
 * reply to the prompt that closes an empty block; a second turn follows the first closed
 * ("<|im_end|>" then "\n", as the template writes between turns). */
#define THINK "tests/data/qwen/chat/think_model"
TEST(qwen3_thinks) {
    json_error_t jerr;
    json_t *want = json_load_file(THINK "/expected.json", 0, &jerr);
    CHECKF(want, "%s", jerr.text);
    if (!want) return;
    const char *modes[2] = {"on", "off"};
    for (int k = 0; k < 2; k++) {
        char args[256], input[256], *o, *e;
        snprintf(args, sizeof args, "-m " THINK " --dry-multiplier 0 -n 16 -v%s",
                 k ? " --no-think" : "");
        const char *user = json_string_value(json_object_get(want, "user"));
        snprintf(input, sizeof input, "%s\n%s\n", user, user);
        int rc = run_chat(args, input, &o, &e);
        const json_t *w = json_object_get(want, modes[k]);
        const char *text = json_string_value(json_object_get(w, "text"));
        size_t n = strlen(text);
        /* both turns answer the same: the model's next token depends on the last one only */
        CHECKF(rc == 0 && !strncmp(o, text, n) && o[n] == '\n' && !strncmp(o + n + 1, text, n),
               "thinking %s: exit %d, '%s' vs '%s' (%s)", modes[k], rc, o, text, e);
        turn_stats ts[2];
        int nt = parse_stats(e, ts, 2);
        /* a turn holds the prompt, the answer (<|im_end|> included) and the closing's "\n" */
        CHECKF(nt == 2 &&
                   ts[0].generated == (long long)json_array_size(json_object_get(w, "ids")) &&
                   ts[0].context == ts[0].prefilled + ts[0].generated + 1 &&
                   ts[1].context == 2 * ts[0].context,
               "thinking %s: %d turns, prefilled %lld, generated %lld, context %lld then %lld "
               "(%s)", modes[k], nt, nt ? ts[0].prefilled : -1, nt ? ts[0].generated : -1,
               nt ? ts[0].context : -1, nt > 1 ? ts[1].context : -1, e);
        free(o);
        free(e);
    }
    json_decref(want);
}

/* --tools: the first turn's prompt is the template's dialog of the user message with the
 * tools (transformers' apply_chat_template of Qwen3's template, in
 * tests/data/qwen/chat/prompts.json: its token count); /tool gives a result as the template's
 * <tool_response> turn and gets an answer; bad tools and Llama 3 are refused by name. */
TEST(tools_in_the_prompt) {
    json_error_t jerr;
    json_t *doc = json_load_file("tests/data/qwen/chat/prompts.json", 0, &jerr), *p, *want = NULL;
    CHECKF(doc, "%s", jerr.text);
    size_t i;
    json_array_foreach(doc, i, p) {
        const char *name = json_string_value(json_object_get(p, "name"));
        const char *tmpl = json_string_value(json_object_get(p, "template"));
        if (name && tmpl && !strcmp(name, "tools_one_tool") && !strcmp(tmpl, "qwen3")) want = p;
    }
    CHECKF(want, "prompts.json has no qwen3 tools_one_tool");
    if (!want) {
        json_decref(doc);
        return;
    }
    char tools[400], args[600], input[256], *o, *e;
    snprintf(tools, sizeof tools, "%s/tools.json", tmpdir);
    CHECK(json_dump_file(json_object_get(want, "tools"), tools, JSON_COMPACT) == 0);
    const char *user = json_string_value(
        json_object_get(json_array_get(json_object_get(want, "messages"), 0), "content"));
    snprintf(args, sizeof args, "-m " THINK " --dry-multiplier 0 -n 8 -v --tools %s", tools);
    snprintf(input, sizeof input, "%s\n/tool 22 C\n", user);
    int rc = run_chat(args, input, &o, &e);
    turn_stats ts[2];
    int nt = parse_stats(e, ts, 2);
    long long n_ids = json_integer_value(json_object_get(want, "n_ids"));
    CHECKF(rc == 0 && nt == 2 && ts[0].prefilled == n_ids,
           "exit %d, %d turns, prefilled %lld, the template's dialog has %lld ids (%s)", rc, nt,
           nt ? ts[0].prefilled : -1, n_ids, e);
    /* the tool turn: "<|im_start|>user\n<tool_response>\n22 C\n</tool_response><|im_end|>\n"
     * and the generation prompt: more than the result's own tokens, read after the answer */
    CHECKF(nt == 2 && ts[1].n_new > 8 && ts[1].context > ts[0].context, "%s", e);
    free(o);
    free(e);
    /* tools that are no JSON array; a model whose template cannot keep them */
    harness_write_file(tools, "{\"type\": 1}", 12);
    rc = run_chat(args, "hi\n", &o, &e);
    CHECKF(rc != 0 && strstr(e, "tools.json") && strstr(e, "not a JSON array"), "exit %d: %s", rc, e);
    free(o);
    free(e);
    snprintf(args, sizeof args, "-m " MODEL " -n 4 --tools %s", tools);
    rc = run_chat(args, "hi\n", &o, &e);
    CHECKF(rc != 0 && strstr(e, "Llama 3"), "exit %d: %s", rc, e);
    free(o);
    free(e);
    /* /tool without --tools: a notice, no turn */
    rc = run_chat("-m " THINK " --dry-multiplier 0 -n 4", "/tool x\n", &o, &e);
    CHECKF(rc == 0 && strstr(e, "/tool needs --tools") && !*o, "exit %d: '%s' %s", rc, o, e);
    free(o);
    free(e);
    json_decref(doc);
}

/* The main job of scripts/setup.sh: the question with no options on the default model. Chat's
 * rule picks bf16 for SmolLM2-135M (0.27 GB of bf16 weights, under 0.4 GB) and its loop guard
 * is on; the answer is the model card's, short, closed at the end of the turn. */
TEST(main_job_answers_right) {
    if (access(SMOLLM2, R_OK) != 0) SKIP("%s is absent (scripts/get-model.sh fetches it)", SMOLLM2);
    char *o, *e;
    int rc = run_chat("-m " SMOLLM2 " -v", "What is the capital of France?\n", &o, &e);
    CHECKF(rc == 0, "exit %d: %s", rc, e);
    CHECKF(!strcmp(o, "The capital of France is Paris.\n"), "'%s'", o);
    CHECKF(strstr(e, "profile bf16: the most precise profile") && strstr(e, "loop guard DRY") &&
               strstr(e, "stop: end of turn"),
           "%s", e);
    free(o);
    free(e);
    /* the tiny embedded model: f32 fits the rule's budget too; --dry-multiplier 0 says off */
    rc = run_chat("-m " MODEL " -v -n 4 --dry-multiplier 0", "Hello\n", &o, &e);
    CHECKF(rc == 0 && strstr(e, "profile f32: the most precise profile") &&
               strstr(e, "loop guard off"),
           "exit %d: %s", rc, e);
    free(o);
    free(e);
    /* a flag overrides the rule */
    rc = run_chat("-m " MODEL " -v -n 4 --optimizations bf16", "Hello\n", &o, &e);
    CHECKF(rc == 0 && strstr(e, "profile bf16: named by --optimizations"), "exit %d: %s", rc, e);
    free(o);
    free(e);
}

// ---- through a pseudo-terminal ----

typedef struct pty {
    int fd;
    pid_t pid;
    char buf[1 << 17];
    size_t len;
} pty;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Starts "meshlm chat ARGS" on a new pseudo-terminal; 0 with the reason in WHY if none. */
static int pty_start(pty *p, const char *args, char *why, size_t cap) {
    p->len = 0;
    p->buf[0] = 0;
    p->fd = posix_openpt(O_RDWR | O_NOCTTY);
    if (p->fd < 0 || grantpt(p->fd) || unlockpt(p->fd) || !ptsname(p->fd)) {
        snprintf(why, cap, "no pseudo-terminal (posix_openpt: %s)", strerror(errno));
        if (p->fd >= 0) close(p->fd);
        return 0;
    }
    char slave[256], cmd[1024];
    snprintf(slave, sizeof slave, "%s", ptsname(p->fd));
    snprintf(cmd, sizeof cmd, "exec %s chat %s", meshlm(), args);
    p->pid = fork();
    if (p->pid == 0) {
        setsid();
        int s = open(slave, O_RDWR);
        if (s < 0) _exit(126);
        ioctl(s, TIOCSCTTY, 0);
        dup2(s, 0);
        dup2(s, 1);
        dup2(s, 2);
        if (s > 2) close(s);
        close(p->fd);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return p->pid > 0;
}

/* Reads until the output after offset FROM contains NEEDLE (or, NEEDLE NULL, MIN_BYTES
 * bytes) or SECONDS pass; the offset just past the match, or 0. */
static size_t pty_wait(pty *p, size_t from, const char *needle, size_t min_bytes, double seconds) {
    double end = now_s() + seconds;
    for (;;) {
        if (needle) {
            char *m = strstr(p->buf + from, needle);
            if (m) return (size_t)(m - p->buf) + strlen(needle);
        } else if (p->len >= from + min_bytes) {
            return p->len;
        }
        double left = end - now_s();
        if (left <= 0) return 0;
        struct pollfd pf = {.fd = p->fd, .events = POLLIN};
        if (poll(&pf, 1, (int)(left * 1000) + 1) <= 0) continue;
        ssize_t n = read(p->fd, p->buf + p->len, sizeof p->buf - 1 - p->len);
        if (n <= 0) return 0; /* the child closed the terminal */
        p->len += (size_t)n;
        p->buf[p->len] = 0;
        if (p->len + 1 >= sizeof p->buf) p->len = from = 0; /* keep reading a long answer */
    }
}

static void pty_send(pty *p, const char *s) {
    CHECK(write(p->fd, s, strlen(s)) == (ssize_t)strlen(s));
}

/* Waits up to SECONDS for the child to exit; its exit status, or -1 (then it is killed). */
static int pty_exit(pty *p, double seconds) {
    double end = now_s() + seconds;
    int st = 0;
    while (now_s() < end) {
        char drain[4096];
        struct pollfd pf = {.fd = p->fd, .events = POLLIN};
        if (poll(&pf, 1, 20) > 0 && read(p->fd, drain, sizeof drain) <= 0) usleep(10000);
        if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
            close(p->fd);
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        }
    }
    kill(p->pid, SIGKILL);
    waitpid(p->pid, &st, 0);
    close(p->fd);
    return -1;
}

TEST(terminal_ctrl_c_stops_an_answer_not_the_program) {
    static pty p;
    char why[256];
    /* -n far beyond what streams before the Ctrl-C: answers run until it comes */
    if (!pty_start(&p, "-m " MODEL " -v -n 100000 --max-seq-len 16384", why, sizeof why))
        SKIP("%s", why);
    size_t at = pty_wait(&p, 0, "> ", 0, 60);
    CHECKF(at && strstr(p.buf, "/help for commands"), "no banner and prompt: '%s'", p.buf);
    if (!at) {
        pty_exit(&p, 0);
        return;
    }
    for (int turn = 1; turn <= 2; turn++) {
        const char *msg = turn == 1 ? "Hello there\n" : "How are you?\n";
        pty_send(&p, msg);
        size_t echo = pty_wait(&p, at, turn == 1 ? "Hello there\r\n" : "How are you?\r\n", 0, 30);
        size_t streamed = echo ? pty_wait(&p, echo, NULL, 40, 60) : 0; /* the answer streams */
        CHECKF(streamed, "turn %d: no answer streamed: '%.300s'", turn, p.buf + at);
        pty_send(&p, "\x03");
        char want[64];
        snprintf(want, sizeof want, "[turn %d: prefilled", turn);
        size_t stats = streamed ? pty_wait(&p, streamed, want, 0, 60) : 0;
        size_t stop = stats ? pty_wait(&p, stats, "stop: interrupted]", 0, 10) : 0;
        CHECKF(stop, "turn %d: the answer was not interrupted: '%.300s'", turn, p.buf + at);
        int st;
        CHECKF(waitpid(p.pid, &st, WNOHANG) == 0, "turn %d: Ctrl-C ended the program", turn);
        at = stop ? pty_wait(&p, stop, "> ", 0, 10) : 0;
        CHECKF(at, "turn %d: no prompt after the interrupted answer", turn);
        if (!at) break;
        if (turn == 2) {
            /* the interrupted first answer stayed, closed: turn 2 read its last token and
             * <|eot_id|> besides the new message */
            long long pre, n_new;
            CHECK(sscanf(p.buf + stats - strlen(want), "[turn 2: prefilled %lld tokens (%lld new)",
                         &pre, &n_new) == 2 &&
                  pre == n_new + 2);
        }
    }
    if (at) pty_send(&p, "/exit\n");
    CHECKF(pty_exit(&p, 30) == 0, "/exit did not end the program with status 0");

    /* Ctrl-C at the prompt quits, and so does Ctrl-D */
    const char *keys[] = {"\x03", "\x04"};
    for (int k = 0; k < 2; k++) {
        if (!pty_start(&p, "-m " MODEL, why, sizeof why)) SKIP("%s", why);
        at = pty_wait(&p, 0, "> ", 0, 60);
        CHECK(at);
        pty_send(&p, keys[k]);
        CHECKF(pty_exit(&p, 30) == 0, "%s at the prompt did not quit", k ? "Ctrl-D" : "Ctrl-C");
    }
}

int main(void) {
    if (harness_tmpdir(tmpdir, sizeof tmpdir, "chat") != 0) return 1;
    if (!lm_load(&tiny, MODEL)) {
        printf("0 passed, 1 failed, 0 skipped\n");
        return 1;
    }
    RUN(incremental_encoding_equals_whole_dialog);
    RUN(two_turns_prefill_only_the_new_message);
    RUN(reset_and_system);
    RUN(full_context_drops_oldest_turns);
    RUN(a_message_too_long_is_refused_and_chat_goes_on);
    RUN(bad_input_fails);
    RUN(default_model);
    RUN(smollm2_answers_end_at_im_end);
    RUN(qwen3_thinks);
    RUN(tools_in_the_prompt);
    RUN(main_job_answers_right);
    RUN(terminal_ctrl_c_stops_an_answer_not_the_program);
    lm_free(&tiny);
    lm_free(&smol);
    harness_rmtree(tmpdir);
    return HARNESS_END();
}
