/* tokenizer/pretok.c: PCRE2 matching for the pre-tokenizer. See pretok.h.
 * Fast path: pcre2_jit_match with the default 32 KiB machine-stack JIT stack and default
 * match limit (10 million steps, which a run of ~10 MB of spaces exceeds). On a resource
 * limit the iterator creates a match context with a JIT stack growing up to JIT_STACK_MAX
 * and the largest limits, and retries; if even that fails it runs the interpreter
 * (heap-based backtracking) for that one match. */
#include "tokenizer/pretok.h"

#include "core/error.h"

#define JIT_STACK_START (64u << 10)
#define JIT_STACK_MAX (256u << 20)

static mlm_status compile(mlm_pretok *p, const char *pattern, uint32_t extra, const char *what,
                          mlm_error *err) {
    int ec;
    PCRE2_SIZE off;
    /* PCRE2_LITERAL takes no UCP (there are no classes to widen). */
    uint32_t opts = extra & PCRE2_LITERAL ? PCRE2_UTF | extra : PCRE2_UTF | PCRE2_UCP | extra;
    p->code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &ec, &off, NULL);
    if (!p->code) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return mlm_err_set(err, MLM_ERR_FORMAT, "%s: pattern does not compile at offset %zu: %s",
                           what, (size_t)off, (const char *)msg);
    }
    /* Without JIT (e.g. a platform PCRE2 lacks it) the interpreter gives the same pieces. */
    p->jit = pcre2_jit_compile(p->code, PCRE2_JIT_COMPLETE) == 0;
    return MLM_OK;
}

mlm_status mlm_pretok_init(mlm_pretok *p, const char *pattern, mlm_error *err) {
    p->code = NULL;
    p->jit = 0;
    p->hf = 0;
    return compile(p, pattern, 0, "pretok", err);
}

mlm_status mlm_pretok_init_hf(mlm_pretok *p, const char *pattern, int literal, const char *what,
                              mlm_error *err) {
    p->code = NULL;
    p->jit = 0;
    p->hf = 1;
    if (!pattern || !pattern[0]) return MLM_OK;
    return compile(p, pattern, literal ? PCRE2_LITERAL : 0, what, err);
}

void mlm_pretok_deinit(mlm_pretok *p) {
    if (!p) return;
    pcre2_code_free(p->code);
    p->code = NULL;
}

mlm_status mlm_pretok_iter_init(mlm_pretok_iter *it, const mlm_pretok *p, mlm_error *err) {
    it->p = p;
    it->mctx = NULL;
    it->stack = NULL;
    it->text = NULL;
    it->len = it->pos = 0;
    mlm_pretok_iter_reset(it, NULL, 0);
    it->md = p->code ? pcre2_match_data_create_from_pattern(p->code, NULL)
                     : pcre2_match_data_create(1, NULL);
    if (!it->md) return mlm_err_set(err, MLM_ERR_NOMEM, "pretok: out of memory for match data");
    return MLM_OK;
}

void mlm_pretok_iter_deinit(mlm_pretok_iter *it) {
    if (!it) return;
    pcre2_match_data_free(it->md);
    pcre2_match_context_free(it->mctx);
    pcre2_jit_stack_free(it->stack);
    it->md = NULL;
    it->mctx = NULL;
    it->stack = NULL;
}

void mlm_pretok_iter_reset(mlm_pretok_iter *it, const unsigned char *text, size_t len) {
    it->text = text;
    it->len = len;
    it->pos = 0;
    it->prev_end = it->last_end = it->held_a = it->held_b = 0;
    it->have_last = it->held = 0;
}

/* Whether RC is a resource limit (worth retrying with larger limits), not a real failure. */
static int is_limit(int rc) {
    return rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_MATCHLIMIT ||
           rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT;
}

/* Creates the match context with a large JIT stack and no match limit. */
static int grow(mlm_pretok_iter *it) {
    if (it->mctx) return 0;
    it->mctx = pcre2_match_context_create(NULL);
    it->stack = pcre2_jit_stack_create(JIT_STACK_START, JIT_STACK_MAX, NULL);
    if (!it->mctx || !it->stack) return -1;
    pcre2_jit_stack_assign(it->mctx, NULL, it->stack);
    pcre2_set_match_limit(it->mctx, UINT32_MAX);
    pcre2_set_depth_limit(it->mctx, UINT32_MAX);
    return 0;
}

/* Hugging Face mode runs patterns from files: after growing, its match and depth limits
 * stay proportional to the text (a linear pattern needs a few steps per byte even on
 * megabytes of whitespace), so that catastrophic backtracking ends in an error instead of
 * running for hours. */
static uint32_t hf_limit(size_t len) {
    uint64_t lim = 10000000u + 256u * (uint64_t)len;
    return lim > UINT32_MAX ? UINT32_MAX : (uint32_t)lim;
}

/* One search from byte AT: the PCRE2 return code (ovector in it->md). */
static int search(mlm_pretok_iter *it, size_t at, mlm_status *st, mlm_error *err) {
    const pcre2_code *code = it->p->code;
    int rc;
    *st = MLM_OK;
    if (it->mctx && it->p->hf) {
        pcre2_set_match_limit(it->mctx, hf_limit(it->len));
        pcre2_set_depth_limit(it->mctx, hf_limit(it->len));
    }
    if (it->p->jit)
        rc = pcre2_jit_match(code, it->text, it->len, at, 0, it->md, it->mctx);
    else
        rc = pcre2_match(code, it->text, it->len, at, PCRE2_NO_UTF_CHECK, it->md, it->mctx);
    if (is_limit(rc) && !it->mctx) {
        if (grow(it) != 0) {
            *st = mlm_err_set(err, MLM_ERR_NOMEM, "pretok: out of memory for a JIT stack");
            return rc;
        }
        if (it->p->hf) {
            pcre2_set_match_limit(it->mctx, hf_limit(it->len));
            pcre2_set_depth_limit(it->mctx, hf_limit(it->len));
        }
        if (it->p->jit) rc = pcre2_jit_match(code, it->text, it->len, at, 0, it->md, it->mctx);
    }
    if (is_limit(rc))
        rc = pcre2_match(code, it->text, it->len, at, PCRE2_NO_JIT | PCRE2_NO_UTF_CHECK, it->md,
                         it->mctx);
    if (is_limit(rc) && it->p->hf) {
        *st = mlm_err_set(err, MLM_ERR_UNSUPPORTED,
                          "pretok: the pattern needs more than %u match steps at byte %zu of a "
                          "%zu-byte text (catastrophic backtracking)",
                          (unsigned)hf_limit(it->len), at, it->len);
    } else if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(rc, msg, sizeof msg);
        *st = mlm_err_set(err, MLM_ERR_INTERNAL, "pretok: matching at byte %zu failed: %s", at,
                          (const char *)msg);
    }
    return rc;
}

/* Length of the UTF-8 character at P (valid UTF-8, at least one byte). */
static size_t char_len(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

/* Hugging Face mode. Matches come from Oniguruma's find_iter rule: search from it->pos;
 * an empty match ending where the previous match ended is dropped and the search moves
 * one character on. Each match [s, e) yields the gap [prev_end, s) then the match itself,
 * empty ones left out (tokenizers' Pattern::find_matches, then empty splits dropped). */
static mlm_status next_hf(mlm_pretok_iter *it, size_t *start, size_t *end, int *found,
                          mlm_error *err) {
    if (it->held) {
        it->held = 0;
        *start = it->held_a;
        *end = it->held_b;
        *found = 1;
        return MLM_OK;
    }
    while (it->p->code && it->pos <= it->len) {
        mlm_status st;
        int rc = search(it, it->pos, &st, err);
        if (st != MLM_OK) return st;
        if (rc == PCRE2_ERROR_NOMATCH) break;
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(it->md);
        size_t s = ov[0], e = ov[1];
        if (e < s || e > it->len)
            return mlm_err_set(err, MLM_ERR_UNSUPPORTED,
                               "pretok: the pattern's match at byte %zu ends before it starts "
                               "(\\K in a lookaround is not supported)",
                               s);
        if (s == e && it->have_last && it->last_end == e) {
            it->pos += it->pos < it->len ? char_len(it->text[it->pos]) : 1;
            continue;
        }
        it->pos = e;
        it->last_end = e;
        it->have_last = 1;
        size_t gap_a = it->prev_end;
        it->prev_end = e;
        if (s > gap_a) {
            if (e > s) {
                it->held = 1;
                it->held_a = s;
                it->held_b = e;
            }
            *start = gap_a;
            *end = s;
            *found = 1;
            return MLM_OK;
        }
        if (e > s) {
            *start = s;
            *end = e;
            *found = 1;
            return MLM_OK;
        }
    }
    it->pos = it->len + 1;
    if (it->prev_end < it->len) {
        *start = it->prev_end;
        *end = it->len;
        it->prev_end = it->len;
        *found = 1;
    }
    return MLM_OK;
}

mlm_status mlm_pretok_next(mlm_pretok_iter *it, size_t *start, size_t *end, int *found,
                           mlm_error *err) {
    *found = 0;
    if (it->p->hf) return next_hf(it, start, end, found, err);
    if (it->pos >= it->len) return MLM_OK;
    mlm_status st;
    int rc = search(it, it->pos, &st, err);
    if (st != MLM_OK) return st;
    if (rc == PCRE2_ERROR_NOMATCH) {
        it->pos = it->len;
        return MLM_OK;
    }
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(it->md);
    if (ov[1] <= ov[0]) {
        /* The pattern cannot match empty; guard the loop anyway. */
        return mlm_err_set(err, MLM_ERR_INTERNAL, "pretok: empty match at byte %zu", (size_t)ov[0]);
    }
    *start = ov[0];
    *end = ov[1];
    it->pos = ov[1];
    *found = 1;
    return MLM_OK;
}
