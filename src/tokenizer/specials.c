/* tokenizer/specials.c: the special-token sets of each flavour (see specials.h).
 *
 * Llama 3 names: the Hugging Face tokenizer.json names (meta-llama Llama 3.1/3.2 repos),
 * which are also what tiktoken-based tools built from HF configs use. They differ from
 * llama-models >= 3.2 code only in names, never ids: there 128005 is <|step_id|>, 128011
 * <|image|>, and the reserved tokens are numbered from 2 after 128011 (spec 4.2). */
#include "tokenizer/specials.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define LLAMA3_N_RANKS 128000
#define LLAMA3_N_SPECIAL 256
#define CL100K_N_RANKS 100256

static const char *const LLAMA3_NAMED[] = {
    "<|begin_of_text|>",            /* 128000 */
    "<|end_of_text|>",              /* 128001 */
    "<|reserved_special_token_0|>", /* 128002 */
    "<|reserved_special_token_1|>", /* 128003 */
    "<|finetune_right_pad_id|>",    /* 128004 */
    "<|reserved_special_token_2|>", /* 128005: Meta code calls it <|step_id|> */
    "<|start_header_id|>",          /* 128006 */
    "<|end_header_id|>",            /* 128007 */
    "<|eom_id|>",                   /* 128008 */
    "<|eot_id|>",                   /* 128009 */
    "<|python_tag|>",               /* 128010 */
};
/* 128011.. are <|reserved_special_token_3|> .. <|reserved_special_token_247|>. */

static const struct {
    int32_t id;
    const char *text;
} CL100K[] = {
    {100257, "<|endoftext|>"},  {100258, "<|fim_prefix|>"},  {100259, "<|fim_middle|>"},
    {100260, "<|fim_suffix|>"}, {100276, "<|endofprompt|>"},
};

mlm_tok_flavour mlm_specials_flavour_for(int32_t n_ranks) {
    if (n_ranks == LLAMA3_N_RANKS) return MLM_TOK_LLAMA3;
    if (n_ranks == CL100K_N_RANKS) return MLM_TOK_CL100K;
    return MLM_TOK_PLAIN;
}

void mlm_specials_deinit(mlm_special_set *s) {
    if (!s) return;
    free(s->tok);
    free(s->by_len);
    free(s->names);
    memset(s, 0, sizeof *s);
    s->max_id = -1;
    s->only_first = -1;
}

mlm_status mlm_specials_init(mlm_special_set *s, mlm_tok_flavour flavour, mlm_error *err) {
    memset(s, 0, sizeof *s);
    s->max_id = -1;
    s->only_first = -1;
    int32_t n = 0;
    if (flavour == MLM_TOK_LLAMA3) n = LLAMA3_N_SPECIAL;
    if (flavour == MLM_TOK_CL100K) n = (int32_t)(sizeof CL100K / sizeof CL100K[0]);
    if (n == 0) return MLM_OK;
    const size_t name_max = 40;
    s->tok = calloc((size_t)n, sizeof *s->tok);
    s->names = malloc((size_t)n * name_max);
    if (!s->tok || !s->names) {
        mlm_specials_deinit(s);
        return mlm_error_set(err, MLM_ERR_NOMEM, "tokenizer: out of memory for special tokens");
    }
    char *w = s->names;
    for (int32_t i = 0; i < n; i++) {
        int len;
        if (flavour == MLM_TOK_LLAMA3) {
            const int32_t n_named = (int32_t)(sizeof LLAMA3_NAMED / sizeof LLAMA3_NAMED[0]);
            s->tok[i].id = LLAMA3_N_RANKS + i;
            if (i < n_named)
                len = snprintf(w, name_max, "%s", LLAMA3_NAMED[i]);
            else
                len = snprintf(w, name_max, "<|reserved_special_token_%d|>", i - n_named + 3);
        } else {
            s->tok[i].id = CL100K[i].id;
            len = snprintf(w, name_max, "%s", CL100K[i].text);
        }
        s->tok[i].text = w;
        s->tok[i].len = (size_t)len;
        s->tok[i].flags = MLM_ADDED_SPECIAL;
        s->first[(unsigned char)w[0]] = 1;
        if ((size_t)len > s->max_len) s->max_len = (size_t)len;
        w += len + 1;
    }
    s->n = n;
    s->max_id = s->tok[n - 1].id;
    s->any_flags = MLM_ADDED_SPECIAL;
    return MLM_OK;
}

static int by_id(const void *a, const void *b) {
    int32_t x = ((const mlm_special *)a)->id, y = ((const mlm_special *)b)->id;
    return (x > y) - (x < y);
}

typedef struct len_key {
    size_t len;
    int32_t id, index;
} len_key;

static int by_len_desc(const void *a, const void *b) {
    const len_key *x = a, *y = b;
    if (x->len != y->len) return x->len < y->len ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Fills S->by_len from S->tok. NOMEM. */
static mlm_status order_by_len(mlm_special_set *s, int32_t n, mlm_error *err) {
    s->by_len = malloc((size_t)n * sizeof *s->by_len);
    len_key *k = malloc((size_t)n * sizeof *k);
    if (!s->by_len || !k) {
        free(k);
        return mlm_error_set(err, MLM_ERR_NOMEM, "tokenizer: out of memory");
    }
    for (int32_t i = 0; i < n; i++)
        k[i] = (len_key){s->tok[i].len, s->tok[i].id, i};
    qsort(k, (size_t)n, sizeof *k, by_len_desc);
    for (int32_t i = 0; i < n; i++)
        s->by_len[i] = k[i].index;
    free(k);
    return MLM_OK;
}

mlm_status mlm_specials_build(mlm_special_set *s, const mlm_special_def *defs, int32_t n,
                              mlm_error *err) {
    memset(s, 0, sizeof *s);
    s->max_id = -1;
    s->only_first = -1;
    if (n <= 0) return MLM_OK;
    size_t total = 0;
    for (int32_t i = 0; i < n; i++)
        total += defs[i].len + 1;
    s->tok = calloc((size_t)n, sizeof *s->tok);
    s->names = malloc(total);
    if (!s->tok || !s->names) {
        mlm_specials_deinit(s);
        return mlm_error_set(err, MLM_ERR_NOMEM, "tokenizer: out of memory for %d added tokens",
                             (int)n);
    }
    char *w = s->names;
    for (int32_t i = 0; i < n; i++) {
        memcpy(w, defs[i].text, defs[i].len);
        w[defs[i].len] = 0;
        s->tok[i] = (mlm_special){defs[i].id, w, defs[i].len, defs[i].flags};
        s->first[(unsigned char)w[0]] = 1;
        if (defs[i].len > s->max_len) s->max_len = defs[i].len;
        s->any_flags |= defs[i].flags;
        w += defs[i].len + 1;
    }
    qsort(s->tok, (size_t)n, sizeof *s->tok, by_id);
    if (order_by_len(s, n, err) != MLM_OK) {
        mlm_specials_deinit(s);
        return MLM_ERR_NOMEM;
    }
    s->only_first = (unsigned char)s->tok[0].text[0];
    for (int32_t i = 1; i < n; i++)
        if ((unsigned char)s->tok[i].text[0] != s->only_first) s->only_first = -1;
    s->n = n;
    s->max_id = s->tok[n - 1].id;
    return MLM_OK;
}

const mlm_special *mlm_specials_by_id(const mlm_special_set *s, int32_t id) {
    int32_t lo = 0, hi = s->n;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (s->tok[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->n && s->tok[lo].id == id ? &s->tok[lo] : NULL;
}

const mlm_special *mlm_specials_by_text(const mlm_special_set *s, const char *text, size_t len) {
    for (int32_t i = 0; i < s->n; i++)
        if (s->tok[i].len == len && memcmp(s->tok[i].text, text, len) == 0) return &s->tok[i];
    return NULL;
}

const mlm_special *mlm_specials_find(const mlm_special_set *s, const unsigned char *p, size_t n,
                                     size_t *at) {
    if (s->n == 0) return NULL;
    for (size_t i = 0; i < n; i++) {
        if (!s->first[p[i]]) continue;
        const mlm_special *best = NULL;
        for (int32_t k = 0; k < s->n; k++) {
            const mlm_special *t = &s->tok[k];
            if (t->len <= n - i && memcmp(t->text, p + i, t->len) == 0 &&
                (!best || t->len > best->len))
                best = t;
        }
        if (best) {
            *at = i;
            return best;
        }
    }
    return NULL;
}
