/* tools/cli/accuracy.c: token accuracy in the seeds' terms (tt-demos.md section 5), for
 * `meshlm demo --preset token-accuracy` and `meshlm accuracy`: a reference file (.refpt, as
 * torch.save writes it) holds reference_tokens [1, N] and top5_tokens [N, 5] (row i: the
 * reference model's top 5 for token i + 1), and optionally prompt_len (default N / 2). The
 * first prompt_len tokens are prefilled; then at each step the model's argmax is scored
 * (top-1: equal to the reference's argmax top5[i][0]; top-5: among top5[i]) and the
 * reference's own next token is fed instead (teacher forcing). The scored logits' checksum
 * (FNV-1a over their bytes) is printed too: runs that should agree bit for bit (threads,
 * kernel levels, a mesh) are compared by it. */
#include <stdlib.h>
#include <string.h>

#include "demo.h"

/* FNV-1a over N bytes of P, continuing from H: the logits' checksum, so two runs (one process
 * and a mesh, two kernel levels) can be compared bit for bit. */
static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int demo_token_accuracy(const demo_config *c, const char *model, mlm_model *m, double *top1,
                        double *top5) {
    char path[2048];
    if (c->reference) snprintf(path, sizeof path, "%s", c->reference);
    else {
        /* a model folder's reference.refpt; beside a model file (GGUF), its name with .refpt */
        size_t n = strlen(model);
        if (n > 5 && !strcmp(model + n - 5, ".gguf"))
            snprintf(path, sizeof path, "%.*s.refpt", (int)(n - 5), model);
        else snprintf(path, sizeof path, "%s/reference.refpt", model);
    }
    mlm_checkpoint *ck = NULL;
    mlm_error err = {0};
    if (mlm_checkpoint_open(path, &ck, &err)) {
        fprintf(stderr, "meshlm demo: token accuracy needs a reference (--reference FILE.refpt): %s\n",
                err.msg);
        return TOOL_RUNTIME;
    }
    const mlm_tensor_view *ref = mlm_checkpoint_find(ck, "reference_tokens");
    const mlm_tensor_view *t5 = mlm_checkpoint_find(ck, "top5_tokens");
    int64_t n = ref ? mlm_tensor_numel(ref) : 0, prompt_len = 0;
    if (!ref || !t5 || n < 2 || t5->n_dim != 2 || t5->shape[0] != n || t5->shape[1] != 5) {
        fprintf(stderr, "meshlm demo: %s: needs reference_tokens [1, N] and top5_tokens [N, 5]\n",
                path);
        mlm_checkpoint_free(ck);
        return TOOL_RUNTIME;
    }
    if (mlm_checkpoint_get_int(ck, "prompt_len", &prompt_len, NULL)) prompt_len = n / 2;
    const mlm_config *cfg = mlm_model_config(m);
    int64_t *tokens = malloc((size_t)n * sizeof *tokens), *top = malloc((size_t)n * 5 * sizeof *top);
    int rc = TOOL_OK;
    if (!tokens || !top || mlm_tensor_to_i64(ref, tokens, n, &err) ||
        mlm_tensor_to_i64(t5, top, n * 5, &err)) {
        fprintf(stderr, "meshlm demo: %s: %s\n", path, err.msg[0] ? err.msg : "out of memory");
        rc = TOOL_RUNTIME;
    }
    for (int64_t i = 0; !rc && i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= cfg->n_vocab) {
            fprintf(stderr, "meshlm demo: %s: reference token %lld at %lld is outside the model's "
                            "vocabulary (%d)\n",
                    path, (long long)tokens[i], (long long)i, cfg->n_vocab);
            rc = TOOL_RUNTIME;
        }
    if (!rc && (prompt_len < 1 || prompt_len >= n || prompt_len >= c->max_seq_len)) {
        fprintf(stderr, "meshlm demo: %s: prompt_len %lld must be in [1, %lld) and below "
                        "--max-seq-len %d\n",
                path, (long long)prompt_len, (long long)n, c->max_seq_len);
        rc = TOOL_RUNTIME;
    }
    int64_t steps = n - prompt_len;
    if (steps > c->max_generated_tokens) steps = c->max_generated_tokens;
    if (prompt_len + steps > c->max_seq_len) steps = c->max_seq_len - prompt_len;
    mlm_exec *e = NULL;
    mlm_exec_params xp = mlm_exec_default_params();
    xp.max_seq_len = c->max_seq_len;
    xp.block_size = c->block_size;
    xp.max_num_blocks = c->max_num_blocks;
    xp.n_threads = c->n_threads;
    float *logits = malloc((size_t)cfg->n_vocab * sizeof *logits);
    int32_t *step = malloc((size_t)xp.max_step_tokens * 3 * sizeof *step);
    int8_t *want = calloc((size_t)xp.max_step_tokens, 1);
    if (!rc && (!logits || !step || !want || mlm_exec_create(m, &xp, &e, &err))) {
        rc = err.msg[0] ? tool_fail(&err) : TOOL_RUNTIME;
    }
    int64_t hit1 = 0, hit5 = 0;
    uint64_t sum = 1469598103934665603ull; /* of every scored step's logits */
    /* prefill, in steps */
    for (int64_t i = 0; !rc && i < prompt_len; i += xp.max_step_tokens) {
        int32_t k = (int32_t)(prompt_len - i < xp.max_step_tokens ? prompt_len - i : xp.max_step_tokens);
        int32_t *tk = step, *sq = step + xp.max_step_tokens, *ps = sq + xp.max_step_tokens;
        for (int32_t j = 0; j < k; j++) tk[j] = (int32_t)tokens[i + j], sq[j] = 0, ps[j] = (int32_t)(i + j), want[j] = 0;
        want[k - 1] = i + k == prompt_len;
        mlm_batch b = {.n = k, .tokens = tk, .seq = sq, .pos = ps, .logits = want};
        if (mlm_exec_step(e, &b, logits, &err)) rc = tool_fail(&err);
    }
    for (int64_t s = 0; !rc && s < steps; s++) {
        int64_t at = prompt_len - 1 + s; /* logits now predict token at + 1 */
        int32_t pred = argmax(logits, cfg->n_vocab);
        sum = fnv1a(sum, logits, (size_t)cfg->n_vocab * sizeof *logits);
        hit1 += pred == top[at * 5];
        int in5 = 0;
        for (int k = 0; k < 5; k++) in5 |= pred == top[at * 5 + k];
        hit5 += in5;
        if (s + 1 == steps) break;
        int32_t tk = (int32_t)tokens[at + 1], sq = 0, ps = (int32_t)(at + 1);
        int8_t one = 1;
        mlm_batch b = {.n = 1, .tokens = &tk, .seq = &sq, .pos = &ps, .logits = &one};
        if (mlm_exec_step(e, &b, logits, &err)) rc = tool_fail(&err);
    }
    if (!rc) {
        *top1 = steps ? (double)hit1 / (double)steps : 0;
        *top5 = steps ? (double)hit5 / (double)steps : 0;
        printf("token accuracy: %s, prompt %lld tokens, %lld teacher-forced steps, logits "
               "checksum %016llx\n",
               path, (long long)prompt_len, (long long)steps, (unsigned long long)sum);
    }
    mlm_exec_free(e);
    free(tokens), free(top), free(logits), free(step), free(want);
    mlm_checkpoint_free(ck);
    return rc;
}

int cmd_accuracy(int argc, char **argv) {
    /* `meshlm accuracy ...` is `meshlm demo --preset token-accuracy ...` */
    char **args = malloc((size_t)(argc + 3) * sizeof *args);
    if (!args) return TOOL_RUNTIME;
    args[0] = "demo", args[1] = "--preset", args[2] = "token-accuracy";
    for (int i = 1; i < argc; i++) args[i + 2] = argv[i];
    args[argc + 2] = NULL;
    int rc = cmd_demo(argc + 2, args);
    free(args);
    return rc;
}
