/* bench/grammar.c: what structured output costs per decode step. Runs BATCH requests through
 * the scheduler on MODEL twice, free and constrained by a JSON Schema, and replays each
 * constrained request's tokens through a fresh matcher timing the mask (fill and feed) per
 * token; prints the mask time per step (BATCH masks) next to the step time measured in the
 * same run, and the steps' own slowdown. Prints figures; never fails on speed.
 *
 *   build/bench/grammar [MODEL [PROFILE]]
 *
 * MODEL defaults to $MESHLM_BENCH_MODEL, else the SmolLM2 GGUF in models/ (as `make bench` runs
 * it); PROFILE to the model's default (native for GGUF files, bf16 for bf16 checkpoints).
 * Environment: MESHLM_BENCH_BATCHES (default 1,32), MESHLM_BENCH_TOKENS (default 48 decode
 * tokens a request). The schema asks for an array of exactly 8 small person objects, so the
 * documents are longer than the run and every request decodes all its tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "meshlm.h"

static const char *SCHEMA =
    "{\"type\":\"array\",\"minItems\":8,\"maxItems\":8,\"items\":{\"type\":\"object\","
    "\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":24},\"age\":{\"type\":"
    "\"integer\"},\"city\":{\"enum\":[\"Paris\",\"Oslo\",\"Lima\"]},\"tags\":{\"type\":"
    "\"array\",\"items\":{\"type\":\"string\",\"maxLength\":12},\"maxItems\":3}},"
    "\"required\":[\"name\",\"age\",\"city\",\"tags\"],\"additionalProperties\":false}}";

typedef struct out {
    int32_t tokens[4096];
    int n;
    int done;
} out;

static int on_event(void *user, const mlm_sched_event *ev) {
    out *o = user;
    if (ev->token >= 0 && !ev->is_stop_id && o->n < 4096) o->tokens[o->n++] = ev->token;
    if (ev->finish != MLM_FINISH_NONE) o->done = 1;
    return 0;
}

/* Runs B requests of N tokens (constrained when MATCHERS); seconds per step while all decode
 * (the steps after the first token of every request). */
static double run(const mlm_model *model, const int32_t *prompt, int32_t n_prompt, int B, int N,
                  mlm_matcher **matchers, out *outs, const int32_t *stop, int n_stop) {
    mlm_sched_params sp = mlm_sched_default_params();
    sp.max_batch = B;
    sp.max_seq_len = n_prompt + N + 8;
    sp.prefix_cache = 0;
    sp.prefill_chunk = B * n_prompt;
    mlm_sched *s = NULL;
    mlm_error err = {0};
    if (mlm_sched_create(model, &sp, &s, &err) != MLM_OK) {
        fprintf(stderr, "bench/grammar: %s\n", err.msg);
        exit(1);
    }
    for (int b = 0; b < B; b++) {
        memset(&outs[b], 0, sizeof outs[b]);
        mlm_request_params q = mlm_request_default_params();
        q.prompt = prompt;
        q.n_prompt = n_prompt;
        q.max_new_tokens = N;
        q.sampling.temperature = 1;
        q.sampling.seed = (uint64_t)b + 1;
        q.stop_ids = stop;
        q.n_stop_ids = n_stop;
        q.matcher = matchers ? matchers[b] : NULL;
        q.on_event = on_event;
        q.user = &outs[b];
        uint64_t id;
        if (mlm_sched_submit(s, &q, &id, &err) != MLM_OK) {
            fprintf(stderr, "bench/grammar: %s\n", err.msg);
            exit(1);
        }
    }
    double t0 = 0;
    int steps = 0, live = B;
    while (live) {
        int all_started = 1;
        for (int b = 0; b < B; b++) all_started &= outs[b].n > 0 || outs[b].done;
        if (all_started && t0 == 0) t0 = bench_now();
        int did = 0;
        mlm_sched_step(s, &did, &err);
        if (t0 > 0) steps++;
        live = 0;
        for (int b = 0; b < B; b++) live += !outs[b].done;
    }
    double dt = bench_now() - t0;
    mlm_sched_free(s);
    return steps ? dt / steps : 0;
}

int main(int argc, char **argv) {
    const char *path = argc > 1                        ? argv[1]
                       : getenv("MESHLM_BENCH_MODEL") ? getenv("MESHLM_BENCH_MODEL")
                                                      : "models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
    const char *profile = argc > 2 ? argv[2] : NULL;
    const char *batches = getenv("MESHLM_BENCH_BATCHES") ? getenv("MESHLM_BENCH_BATCHES") : "1,32";
    int N = getenv("MESHLM_BENCH_TOKENS") ? atoi(getenv("MESHLM_BENCH_TOKENS")) : 48;
    mlm_error err = {0};
    mlm_tokenizer *tok = NULL;
    mlm_model *model = NULL;
    mlm_model_params mp = mlm_model_default_params();
    mp.optimizations = profile;
    if (mlm_tokenizer_load(path, &tok, &err) || mlm_model_load(path, &mp, &model, &err)) {
        fprintf(stderr, "bench/grammar: %s\n", err.msg);
        return 1;
    }
    double t = bench_now();
    mlm_token_trie *trie = NULL;
    mlm_grammar *g = NULL;
    if (mlm_token_trie_create(tok, &trie, &err) ||
        mlm_grammar_compile(SCHEMA, strlen(SCHEMA), NULL, &g, &err)) {
        fprintf(stderr, "bench/grammar: %s\n", err.msg);
        return 1;
    }
    double t_trie = bench_now() - t;
    int32_t V = mlm_tokenizer_n_vocab(tok);
    mlm_chat_message msg = {"user", "List eight people as JSON."};
    mlm_tokens prompt;
    mlm_tokens_init(&prompt);
    if (mlm_tokenizer_encode_chat(tok, &msg, 1, 1, &prompt, &err)) {
        mlm_encode_params ep = mlm_encode_default_params();
        mlm_tokenizer_encode(tok, msg.content, strlen(msg.content), &ep, &prompt, &err);
    }
    int32_t stop[16];
    int n_stop = mlm_tokenizer_chat_stop_ids(tok, stop, 16);
    if (n_stop > 16) n_stop = 16;
    printf("bench/grammar: %s (%s), vocabulary %d, trie built in %.0f ms, %d decode tokens a "
           "request\n",
           path, profile ? profile : "default profile", V, t_trie * 1e3, N);
    printf("%6s %12s %14s %14s %12s %14s\n", "batch", "step ms", "mask ms/step", "mask/step",
           "max mask ms", "step ms (json)");
    uint32_t *mask = malloc(((size_t)V + 31) / 32 * sizeof *mask);
    for (const char *p = batches; p && *p;) {
        int B = atoi(p);
        p = strchr(p, ',');
        if (p) p++;
        if (B < 1) continue;
        out *outs = calloc((size_t)B, sizeof *outs);
        mlm_matcher **ms = calloc((size_t)B, sizeof *ms);
        double free_step = run(model, prompt.ids, (int32_t)prompt.n, B, N, NULL, outs, NULL, 0);
        for (int b = 0; b < B; b++) mlm_matcher_create(g, trie, &ms[b], &err);
        double json_step = run(model, prompt.ids, (int32_t)prompt.n, B, N, ms, outs, stop, n_stop);
        /* replay: the same masks, timed alone */
        double total = 0, worst = 0;
        long n_tok = 0;
        for (int b = 0; b < B; b++) {
            mlm_matcher *m = NULL;
            mlm_matcher_create(g, trie, &m, &err);
            for (int k = 0; k < outs[b].n; k++) {
                double a = bench_now();
                mlm_matcher_fill_mask(m, mask);
                mlm_matcher_can_end(m);
                mlm_matcher_accept_token(m, outs[b].tokens[k]);
                double d = bench_now() - a;
                total += d;
                worst = d > worst ? d : worst;
                n_tok++;
            }
            mlm_matcher_free(m);
            mlm_matcher_free(ms[b]);
        }
        double per_step = n_tok ? total / n_tok * B : 0;
        printf("%6d %12.2f %14.3f %13.1f%% %12.3f %14.2f\n", B, free_step * 1e3, per_step * 1e3,
               free_step > 0 ? 100 * per_step / free_step : 0, worst * 1e3, json_step * 1e3);
        free(outs);
        free(ms);
    }
    free(mask);
    mlm_tokens_deinit(&prompt);
    mlm_grammar_free(g);
    mlm_token_trie_free(trie);
    mlm_model_free(model);
    mlm_tokenizer_free(tok);
    return 0;
}
