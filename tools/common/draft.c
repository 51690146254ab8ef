/* tools/common/draft.c: the speculative decoding flags generate, chat and serve share, and
 * loading a draft model beside the model (see tool.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/tool.h"

void tool_draft_init(tool_draft *d) {
    memset(d, 0, sizeof *d);
    d->max = 8;
    d->p_min = mlm_sched_default_params().draft_p_min;
}

int tool_draft_flag(const char *cmd, const char *flag, const char *value, tool_draft *d) {
    if (!strcmp(flag, "--draft-model")) {
        d->model = value;
        return 1;
    }
    if (!strcmp(flag, "--draft-optimizations")) {
        tool_precision p = {0};
        if (!tool_precision_flag(cmd, "--optimizations", value, &p)) return 0;
        d->optimizations = p.optimizations;
        return 1;
    }
    if (!strcmp(flag, "--draft-max")) return tool_int(cmd, flag, value, 1, 64, &d->max);
    if (!strcmp(flag, "--draft-p-min")) {
        double v;
        if (!tool_float(cmd, flag, value, 0, 1, &v)) return 0;
        d->p_min = (float)v;
        return 1;
    }
    return tool_usage(cmd, "unknown speculative decoding flag '%s'", flag), 0;
}

int tool_draft_check(const char *cmd, const tool_draft *d) {
    if (d->model && d->ngram) {
        tool_usage(cmd, "--draft-model and --draft-ngram exclude each other (pick one)");
        return 0;
    }
    if (!d->model && (d->optimizations || d->p_min != mlm_sched_default_params().draft_p_min)) {
        tool_usage(cmd, "--draft-optimizations and --draft-p-min need --draft-model");
        return 0;
    }
    return 1;
}

void tool_draft_params(const tool_draft *d, mlm_sched_params *sp) {
    sp->max_draft = tool_draft_max(d);
    sp->draft_model = d->model_loaded;
    sp->draft_p_min = d->p_min;
}

/* Every id's bytes equal in A and B, and the same count. */
static int same_vocab(const mlm_tokenizer *a, const mlm_tokenizer *b, int32_t *differs) {
    int32_t n = mlm_tokenizer_n_vocab(a);
    *differs = -1;
    if (n != mlm_tokenizer_n_vocab(b)) return 0;
    for (int32_t i = 0; i < n; i++) {
        size_t la, lb;
        const char *ta = mlm_tokenizer_token_bytes(a, i, &la), *tb = mlm_tokenizer_token_bytes(b, i, &lb);
        if (!ta != !tb || la != lb || (ta && memcmp(ta, tb, la))) {
            *differs = i;
            return 0;
        }
    }
    return 1;
}

mlm_status tool_draft_load(const char *cmd, tool_draft *d, const mlm_tokenizer *tok, int n_threads,
                           mlm_error *err) {
    if (!d->model) return MLM_OK;
    if (tok && mlm_tokenizer_present(d->model)) {
        mlm_tokenizer *dt = NULL;
        mlm_status st = mlm_tokenizer_load(d->model, &dt, err);
        if (st) return st;
        int32_t differs;
        int same = same_vocab(tok, dt, &differs);
        int32_t nd = mlm_tokenizer_n_vocab(dt);
        mlm_tokenizer_free(dt);
        if (!same)
            return differs < 0 ? mlm_error_set(err, MLM_ERR_INVALID_ARG,
                                               "--draft-model %s: its tokenizer has %d tokens, the "
                                               "model's %d (a draft must share the tokenizer)",
                                               d->model, nd, mlm_tokenizer_n_vocab(tok))
                               : mlm_error_set(err, MLM_ERR_INVALID_ARG,
                                               "--draft-model %s: token %d differs from the "
                                               "model's (a draft must share the tokenizer)",
                                               d->model, differs);
    }
    tool_precision p = {.optimizations = d->optimizations};
    tool_precision_resolve(&p, d->model);
    mlm_status st = tool_load_whole(cmd, d->model, &p, n_threads, &d->model_loaded, err);
    if (st) {
        char msg[MLM_ERROR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return mlm_error_set(err, st, "--draft-model: %s", msg);
    }
    return MLM_OK;
}

void tool_draft_free(tool_draft *d) {
    mlm_model_free(d->model_loaded);
    d->model_loaded = NULL;
}
