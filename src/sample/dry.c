/* sample/dry.c: DRY ("don't repeat yourself"), the loop guard of llama.cpp, koboldcpp and
 * text-generation-webui: a token that would extend a repeat of an earlier stretch of the
 * sequence loses multiplier * base^(length - allowed_length) from its logit, where length
 * is the number of tokens already repeated. The repeat a token would extend is the longest
 * suffix of the sequence that also ends just before an earlier occurrence of that token;
 * suffixes are cut at the last sequence breaker (a token whose text holds "\n", ":", ...,
 * or a special token), and a breaker itself is never penalized. Greedy stays greedy: the
 * penalty only moves logits, deterministically. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "meshlm.h"

mlm_dry_params mlm_dry_default_params(void) {
    mlm_dry_params p = {.multiplier = 0, .base = 1.75f, .allowed_length = 2, .last_n = -1};
    return p;
}

mlm_status mlm_dry_check(const mlm_dry_params *p, mlm_error *err) {
    if (!isfinite(p->multiplier) || p->multiplier < 0)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "dry: multiplier %g must be >= 0",
                             p->multiplier);
    if (!isfinite(p->base) || p->base < 1)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "dry: base %g must be >= 1", p->base);
    if (p->allowed_length < 1)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "dry: allowed_length %d must be >= 1",
                             p->allowed_length);
    if (p->last_n < -1)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "dry: last_n %d must be -1 (the whole sequence) or >= 0", p->last_n);
    return MLM_OK;
}

static int breaks(const mlm_dry_params *p, int32_t t, int32_t n_vocab) {
    return p->breakers && t >= 0 && t < n_vocab && p->breakers[t];
}

typedef struct repeat {
    int32_t token, len;
} repeat;

static int by_token(const void *a, const void *b) {
    const repeat *x = a, *y = b;
    return x->token != y->token ? (x->token > y->token) - (x->token < y->token)
                                : (x->len > y->len) - (x->len < y->len);
}

mlm_status mlm_dry_apply(const mlm_dry_params *p, const int32_t *tokens, int32_t n,
                         float *logits, int32_t n_vocab, mlm_error *err) {
    if (p->multiplier == 0 || p->last_n == 0) return MLM_OK;
    if (p->last_n > 0 && n > p->last_n) tokens += n - p->last_n, n = p->last_n;
    if (n <= p->allowed_length) return MLM_OK;
    /* a repeat may not reach back past the last breaker */
    int32_t limit = n;
    for (int32_t i = n - 1; i >= 0; i--)
        if (breaks(p, tokens[i], n_vocab)) {
            limit = n - 1 - i;
            break;
        }
    if (limit < p->allowed_length) return MLM_OK;
    repeat *hits = malloc((size_t)n * sizeof *hits);
    if (!hits) return mlm_error_set(err, MLM_ERR_NOMEM, "dry: out of memory");
    /* for every earlier position E: how many tokens ending at E equal those ending the
     * sequence (at most LIMIT); the token after E would extend that repeat by one */
    const int32_t *last = tokens + n - 1;
    int32_t n_hits = 0;
    for (int32_t e = n - 2; e >= 0; e--) {
        int32_t len = 0;
        while (len < limit && len <= e && tokens[e - len] == last[-len]) len++;
        int32_t next = tokens[e + 1];
        if (len >= p->allowed_length && next >= 0 && next < n_vocab && !breaks(p, next, n_vocab))
            hits[n_hits++] = (repeat){next, len};
    }
    /* each token loses the penalty of the longest repeat it would extend; exponents are
     * clamped so that base^exponent stays a float (llama.cpp's bound) */
    qsort(hits, (size_t)n_hits, sizeof *hits, by_token);
    int32_t max_exp = p->base > 1.000001f ? (int32_t)(88.7228391f / logf(p->base)) : 0;
    for (int32_t i = 0; i < n_hits; i++) {
        if (i + 1 < n_hits && hits[i + 1].token == hits[i].token) continue;
        int32_t x = hits[i].len - p->allowed_length;
        if (max_exp > 0 && x > max_exp) x = max_exp;
        float *l = &logits[hits[i].token];
        *l = (float)((double)*l - (double)p->multiplier * pow((double)p->base, x));
    }
    free(hits);
    return MLM_OK;
}

mlm_status mlm_dry_breakers(const mlm_tokenizer *tok, const char *const *strs, int32_t n,
                            uint8_t *out, mlm_error *err) {
    static const char *const defaults[] = {"\n", ":", "\"", "*"};
    if (!strs) strs = defaults, n = (int32_t)(sizeof defaults / sizeof *defaults);
    int32_t n_vocab = mlm_tokenizer_n_vocab(tok);
    for (int32_t i = 0; i < n; i++)
        if (!strs[i] || !strs[i][0])
            return mlm_error_set(err, MLM_ERR_INVALID_ARG, "dry: sequence breaker %d is empty", i);
    for (int32_t t = 0; t < n_vocab; t++) {
        size_t len = 0;
        const char *b = mlm_tokenizer_token_bytes(tok, t, &len);
        out[t] = mlm_tokenizer_is_special(tok, t);
        for (int32_t i = 0; i < n && !out[t] && b; i++)
            out[t] = memmem(b, len, strs[i], strlen(strs[i])) != NULL;
    }
    return MLM_OK;
}
