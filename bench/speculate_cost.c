/* bench/speculate_cost.c: the cost model of speculative decoding on full-size shapes, and
 * llama.cpp's llama-speculative on the same pair of files in the same run. Prints figures;
 * never fails on speed.
 *
 *   build/bench/speculate_cost TARGET DRAFT
 *
 * TARGET and DRAFT are models meshlm runs (e.g. `meshlm synth`'s llama-3.1-8b and
 * llama-3.2-1b exported to GGUF and quantized to Q4_K_M by llama-quantize: random weights,
 * so no real acceptance, but the real shapes and bytes). It measures:
 *   - the time to verify k = 1..9 tokens of one sequence in one step (every position's
 *     logits, after a context of MESHLM_BENCH_CONTEXT tokens, default 128) against one
 *     decode step, and the draft's time per token (a one-token step);
 *   - from them the expected speed-up of drafting k tokens a step at acceptance a (each draft
 *     token kept with probability a, independently: Leviathan et al. 2023): a step yields
 *     (1 - a^(k+1)) / (1 - a) tokens and costs k draft steps + one verify of k + 1 tokens;
 *   - end to end, a greedy answer of MESHLM_BENCH_N tokens (default 128) with and without
 *     the draft through the scheduler (what generate, chat and serve run): the same ids, the
 *     speed-up measured, and the one the model predicts from the steps it took;
 *   - with LLAMA_SPECULATIVE=path/to/llama-speculative: llama.cpp on the same files and
 *     prompt, --spec-draft-n-max 8, greedy: its speed and acceptance, and whether its text
 *     equals plain greedy text (llama-completion from the same folder, or $LLAMA_COMPLETION).
 * Environment: MESHLM_BENCH_PROFILE / MESHLM_BENCH_DRAFT_PROFILE (default native for a GGUF
 * file, else performance), MESHLM_BENCH_THREADS (default all cores), MESHLM_BENCH_REPS (rounds
 * of every verify size, the median kept; default 7). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/env.h"
#include "common/model.h"
#include "meshlm.h"

#define MAX_K 9 /* verified tokens per step: draft-max 8 + the last kept token */
#define PROMPT                                                                                     \
    "The history of the printing press begins in the fifteenth century, when Johannes "           \
    "Gutenberg combined movable metal type, oil-based ink and a wooden press adapted from "        \
    "those used for wine. Within fifty years presses had spread to more than two hundred "         \
    "cities across Europe, and the number of books in circulation rose from thousands to "        \
    "millions. Write a short essay on what followed."

static const char *profile_for(const char *path, const char *env) {
    const char *v = getenv(env);
    if (v && v[0]) return v;
    size_t n = strlen(path);
    return n > 5 && !strcmp(path + n - 5, ".gguf") ? "native" : "performance";
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median seconds of REPS steps of K tokens of sequence 0 at positions CTX.. (all asking for
 * logits), each cut back to CTX after; the context is prefilled first. T[k-1] for k = 1..MAX_K. */
static int verify_times(const mlm_model *m, int ctx, int max_k, int reps, int n_threads,
                        double *t) {
    mlm_exec_params ep = mlm_exec_default_params();
    ep.max_seqs = 1;
    ep.max_seq_len = ctx + MAX_K + 1;
    ep.max_step_tokens = ctx > MAX_K ? ctx : MAX_K;
    ep.max_step_logits = MAX_K;
    ep.n_threads = n_threads;
    mlm_exec *e = NULL;
    mlm_error err;
    int32_t V = mlm_model_config(m)->n_vocab;
    int32_t *tok = malloc((size_t)(ctx + MAX_K) * sizeof *tok);
    int32_t *pos = malloc((size_t)(ctx + MAX_K) * sizeof *pos);
    int32_t *seq = calloc((size_t)(ctx + MAX_K), sizeof *seq);
    int8_t *want = malloc((size_t)(ctx + MAX_K));
    float *logits = malloc((size_t)MAX_K * (size_t)V * sizeof *logits);
    int ok = tok && pos && seq && want && logits && !mlm_exec_create(m, &ep, &e, &err);
    for (int i = 0; ok && i < ctx + MAX_K; i++)
        tok[i] = 1000 + (int32_t)((i * 7919u) % (unsigned)(V - 2000)), pos[i] = i, want[i] = 0;
    if (ok) {
        want[ctx - 1] = 1;
        mlm_batch b = {.n = ctx, .tokens = tok, .seq = seq, .pos = pos, .logits = want};
        ok = !mlm_exec_step(e, &b, logits, &err);
        want[ctx - 1] = 0;
    }
    /* every size once per round, so that the machine's slow spells fall on all of them */
    double *runs = malloc((size_t)(reps * max_k) * sizeof *runs);
    for (int r = -1; ok && runs && r < reps; r++) /* round -1 warms up */
        for (int k = 1; ok && k <= max_k; k++) {
            memset(want + ctx, 1, (size_t)k);
            mlm_batch b = {.n = k, .tokens = tok + ctx, .seq = seq, .pos = pos + ctx, .logits = want + ctx};
            double t0 = bench_now();
            ok = !mlm_exec_step(e, &b, logits, &err);
            if (r >= 0) runs[(k - 1) * reps + r] = bench_now() - t0;
            ok = ok && !mlm_exec_seq_truncate(e, 0, ctx, &err);
        }
    for (int k = 1; ok && runs && k <= max_k; k++) {
        qsort(runs + (k - 1) * reps, (size_t)reps, sizeof *runs, cmp_double);
        t[k - 1] = runs[(k - 1) * reps + reps / 2];
    }
    if (!ok && e) fprintf(stderr, "bench/speculate_cost: %s\n", err.msg);
    if (!e && !ok) fprintf(stderr, "bench/speculate_cost: cannot run the model\n");
    mlm_exec_free(e);
    free(tok), free(pos), free(seq), free(want), free(logits), free(runs);
    return ok;
}

/* Tokens a step yields with K drafts each kept with probability A. */
static double tokens_per_step(int k, double a) {
    double p = 1;
    for (int i = 0; i <= k; i++) p *= a;
    return (1 - p) / (1 - a);
}

typedef struct answer {
    int32_t ids[1024];
    int n;
    double first, end; /* when the first token came, when the last did */
} answer;

static int on_event(void *user, const mlm_sched_event *ev) {
    answer *a = user;
    if (ev->token >= 0 && a->n < 1024) {
        if (!a->n) a->first = bench_now();
        a->ids[a->n++] = ev->token;
        a->end = bench_now();
    }
    return 0;
}

/* A greedy answer of N tokens to PROMPT (N_PROMPT ids) through a scheduler, drafting with
 * DRAFT (NULL: plain); the decode time is from the first token to the last. */
static int answer_with(const mlm_model *m, const mlm_model *draft, const int32_t *prompt,
                       int n_prompt, int n, int n_threads, answer *a, mlm_sched_stats *stats) {
    mlm_sched_params sp = mlm_sched_default_params();
    sp.max_batch = 1;
    sp.max_seq_len = n_prompt + n + 16;
    sp.prefill_chunk = n_prompt;
    sp.prefix_cache = 0;
    sp.n_threads = n_threads;
    sp.max_images = 0;
    sp.max_draft = draft ? 8 : 0;
    sp.draft_model = draft;
    mlm_sched *s = NULL;
    mlm_error err;
    memset(a, 0, sizeof *a);
    mlm_status st = mlm_sched_create(m, &sp, &s, &err);
    mlm_request_params q = mlm_request_default_params();
    q.prompt = prompt, q.n_prompt = n_prompt, q.max_new_tokens = n;
    q.sampling.temperature = 0;
    q.draft.max = sp.max_draft;
    q.on_event = on_event, q.user = a;
    uint64_t id;
    if (!st) st = mlm_sched_submit(s, &q, &id, &err);
    for (int did = 1; !st && did;)
        st = mlm_sched_step(s, &did, &err);
    if (!st) mlm_sched_get_stats(s, stats);
    if (st) fprintf(stderr, "bench/speculate_cost: %s\n", err.msg);
    mlm_sched_free(s);
    return !st;
}

/* Runs CMD, its stdout into OUT (at most CAP - 1 bytes); whether it succeeded. */
static int capture(const char *cmd, char *out, size_t cap) {
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    return pclose(p) == 0;
}

/* The number after KEY in TEXT (or -1). */
static double after(const char *text, const char *key) {
    const char *s = strstr(text, key);
    return s ? atof(s + strlen(key)) : -1;
}

/* The generated text in llama.cpp's stdout: what follows the prompt. */
static const char *generated(const char *out) {
    const char *s = strstr(out, "Write a short essay on what followed.");
    return s ? s + strlen("Write a short essay on what followed.") : out;
}

static void llama_side(const char *target, const char *draft, int n, int n_threads) {
    const char *spec = getenv("LLAMA_SPECULATIVE");
    if (!spec || !spec[0]) {
        printf("\nllama.cpp: set LLAMA_SPECULATIVE=path/to/llama-speculative to run it beside\n");
        return;
    }
    char completion[1024];
    const char *c = getenv("LLAMA_COMPLETION");
    if (c && c[0])
        snprintf(completion, sizeof completion, "%s", c);
    else {
        snprintf(completion, sizeof completion, "%s", spec);
        char *slash = strrchr(completion, '/');
        snprintf(slash ? slash + 1 : completion, sizeof completion - (size_t)(slash ? slash + 1 - completion : 0),
                 "llama-completion");
    }
    static char out_spec[1 << 16], out_plain[1 << 16], log_spec[1 << 16], log_plain[1 << 16];
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "'%s' -m '%s' -md '%s' -p '%s' -n %d --temp 0 --ignore-eos --spec-draft-n-max 8 -t %d -td %d "
             "-c 1024 2>/tmp/meshlm-spec-llama-spec.log",
             spec, target, draft, PROMPT, n, n_threads, n_threads);
    int ok = capture(cmd, out_spec, sizeof out_spec);
    FILE *f = fopen("/tmp/meshlm-spec-llama-spec.log", "r");
    size_t m = f ? fread(log_spec, 1, sizeof log_spec - 1, f) : 0;
    log_spec[m] = 0;
    if (f) fclose(f);
    snprintf(cmd, sizeof cmd,
             "'%s' -m '%s' -p '%s' -n %d --temp 0 --ignore-eos -t %d -no-cnv --no-display-prompt "
             "-c 1024 </dev/null 2>/tmp/meshlm-spec-llama-plain.log",
             completion, target, PROMPT, n, n_threads);
    int ok2 = capture(cmd, out_plain, sizeof out_plain);
    f = fopen("/tmp/meshlm-spec-llama-plain.log", "r");
    m = f ? fread(log_plain, 1, sizeof log_plain - 1, f) : 0;
    log_plain[m] = 0;
    if (f) fclose(f);
    /* "decoded N tokens in X seconds, speed: Y t/s" (the line before is the prompt's) */
    const char *dec = strstr(log_spec, "decoded ");
    double spec_tps = dec ? after(dec, "speed:") : -1, accept = after(log_spec, "accept    =");
    /* the plain run's decode rate: "eval time = X ms / N runs (... , Y tokens per second)",
     * not the "prompt eval time" line */
    double plain_tps = -1;
    for (const char *ev = strstr(log_plain, "eval time ="); ev; ev = strstr(ev + 1, "eval time ="))
        if (ev - log_plain < 7 || strncmp(ev - 7, "prompt ", 7)) {
            const char *pt = strstr(ev, "per token,");
            if (pt) plain_tps = atof(pt + 10);
            break;
        }
    printf("\nllama.cpp on the same files, prompt and threads, %d greedy tokens, draft-max 8:\n", n);
    if (!ok || spec_tps < 0) {
        printf("  llama-speculative failed (its log: /tmp/meshlm-spec-llama-spec.log)\n");
        return;
    }
    printf("  llama-speculative  %8.2f tok/s, %.1f %% of drafts accepted\n", spec_tps, accept);
    if (!ok2 || plain_tps < 0) {
        printf("  %s failed: no plain text to compare with (its log: "
               "/tmp/meshlm-spec-llama-plain.log)\n",
               completion);
        return;
    }
    /* llama-completion stops at n tokens; llama-speculative may pass n by a few */
    const char *a = generated(out_spec), *b = out_plain;
    size_t la = strlen(a), lb = strlen(b), same = 0;
    while (same < la && same < lb && a[same] == b[same]) same++;
    printf("  llama-completion   %8.2f tok/s plain (%.2fx with the draft)\n", plain_tps,
           spec_tps / plain_tps);
    printf("  greedy text        %s (the first %zu of %zu bytes agree)\n",
           same >= lb || same >= la ? "equals plain greedy text" : "DIFFERS from plain greedy text",
           same, lb);
}

int main(int argc, char **argv) {
    if (argc != 3) { /* `make bench` runs every benchmark bare: this one needs its pair */
        printf("SKIP: usage: %s TARGET DRAFT (e.g. an 8B and a 1B Q4_K_M GGUF of one "
               "tokenizer)\n",
               argv[0]);
        return 0;
    }
    const char *target = argv[1], *draft = argv[2];
    int ctx = bench_env_int("MESHLM_BENCH_CONTEXT", 128), reps = bench_env_int("MESHLM_BENCH_REPS", 7);
    int n = bench_env_int("MESHLM_BENCH_N", 128);
    int threads = bench_env_int("MESHLM_BENCH_THREADS", (int)sysconf(_SC_NPROCESSORS_ONLN));
    if (n > 1000) n = 1000;
    const char *tp = profile_for(target, "MESHLM_BENCH_PROFILE");
    const char *dp = profile_for(draft, "MESHLM_BENCH_DRAFT_PROFILE");
    bench_load lt, ld;
    mlm_model *mt = bench_load_warm("bench/speculate_cost", target, tp, &lt);
    mlm_model *md = mt ? bench_load_warm("bench/speculate_cost", draft, dp, &ld) : NULL;
    if (!mt || !md) return 1;
    printf("speculative decoding cost model: %s (%s) verified, %s (%s) drafting; %d threads, "
           "context %d, %s kernels\n",
           target, tp, draft, dp, threads, ctx, mlm_model_kernels(mt));
    double tv[MAX_K], td[2];
    if (!verify_times(mt, ctx, MAX_K, reps, threads, tv) ||
        !verify_times(md, ctx, 2, reps, threads, td))
        return 1;
    double t1 = tv[0];
    printf("\n  verify k tokens in one step, against one decode step (%.1f ms):\n", t1 * 1e3);
    printf("    k:        ");
    for (int k = 1; k <= MAX_K; k++) printf("%7d", k);
    printf("\n    ms:       ");
    for (int k = 1; k <= MAX_K; k++) printf("%7.1f", tv[k - 1] * 1e3);
    printf("\n    x decode: ");
    for (int k = 1; k <= MAX_K; k++) printf("%7.2f", tv[k - 1] / t1);
    printf("\n  draft: %.2f ms a token (%.3f of a decode step); catching up 2 tokens %.2f ms\n",
           td[0] * 1e3, td[0] / t1, td[1] * 1e3);
    static const double acc[] = {0.6, 0.8};
    printf("\n  expected speed-up, drafting k tokens a step (k draft steps + one verify of k+1):\n");
    printf("    k   cost/step   a=0.6: tok/step  speed-up   a=0.8: tok/step  speed-up\n");
    double best[2] = {0};
    int best_k[2] = {0};
    for (int k = 1; k <= MAX_K - 1; k++) {
        double cost = k * td[0] + tv[k];
        printf("    %d   %7.1f ms", k, cost * 1e3);
        for (int i = 0; i < 2; i++) {
            double e = tokens_per_step(k, acc[i]), s = e * t1 / cost;
            printf("          %5.2f     %5.2fx", e, s);
            if (s > best[i]) best[i] = s, best_k[i] = k;
        }
        printf("%s\n", k == 8 ? "   (--draft-max 8, the default)" : "");
    }
    printf("    best: a=0.6 %.2fx at k=%d, a=0.8 %.2fx at k=%d\n", best[0], best_k[0], best[1],
           best_k[1]);

    /* end to end through the scheduler */
    mlm_tokenizer *tok = NULL;
    mlm_tokens ids = {0};
    mlm_error err;
    mlm_encode_params ep = mlm_encode_default_params();
    mlm_status st = mlm_tokenizer_load(target, &tok, &err);
    ep.add_bos = !st && mlm_tokenizer_bos_id(tok) >= 0;
    if (st || mlm_tokenizer_encode(tok, PROMPT, strlen(PROMPT), &ep, &ids, &err)) {
        fprintf(stderr, "bench/speculate_cost: %s\n", err.msg);
        return 1;
    }
    answer plain, spec;
    mlm_sched_stats sp0, ss;
    if (!answer_with(mt, NULL, ids.ids, (int)ids.n, n, threads, &plain, &sp0) ||
        !answer_with(mt, md, ids.ids, (int)ids.n, n, threads, &spec, &ss))
        return 1;
    int same = plain.n == spec.n && !memcmp(plain.ids, spec.ids, (size_t)plain.n * 4);
    double tp_plain = (plain.n - 1) / (plain.end - plain.first);
    double tp_spec = (spec.n - 1) / (spec.end - spec.first);
    /* decode steps after the first token: the prefill step gave it */
    int64_t steps = ss.steps - 1;
    double per_step = steps > 0 ? (double)(spec.n - 1) / (double)steps : 0;
    /* drafts shrink and pause as they miss: the cost of the mean draft D a step, the verify
     * time of D + 1 tokens interpolated */
    double dm = steps > 0 ? (double)ss.draft_tokens / (double)steps : 0;
    int lo = (int)dm < MAX_K - 1 ? (int)dm : MAX_K - 2;
    double tvd = tv[lo] + (dm - lo) * (tv[lo + 1] - tv[lo]);
    double predicted = per_step * t1 / (dm * td[0] + tvd);
    printf("\n  end to end (the scheduler, as generate/chat/serve run it), %d greedy tokens after "
           "the first (the draft's reading of the prompt included):\n",
           n);
    printf("    plain        %8.2f tok/s\n", tp_plain);
    printf("    with draft   %8.2f tok/s = %.2fx plain; %lld drafted, %lld accepted (%.1f %%), "
           "%.2f drafted and %.2f tokens a step (the model predicts %.2fx for that)\n",
           tp_spec, tp_spec / tp_plain, (long long)ss.draft_tokens, (long long)ss.draft_accepted,
           ss.draft_tokens ? 100.0 * (double)ss.draft_accepted / (double)ss.draft_tokens : 0.0,
           dm, per_step, predicted);
    printf("    ids          %s\n", same ? "equal to plain greedy ids" : "DIFFER from plain greedy ids");
    mlm_tokens_deinit(&ids);
    mlm_tokenizer_free(tok);
    mlm_model_free(md);
    mlm_model_free(mt);
    llama_side(target, draft, n, threads);
    return same ? 0 : 1;
}
