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

mlm_status mlm_pretok_init(mlm_pretok *p, const char *pattern, mlm_error *err) {
    p->code = NULL;
    p->jit = 0;
    int ec;
    PCRE2_SIZE off;
    p->code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec,
                            &off, NULL);
    if (!p->code) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return mlm_err_set(err, MLM_ERR_FORMAT,
                           "pretok: pattern does not compile at offset %zu: %s", (size_t)off,
                           (const char *)msg);
    }
    /* Without JIT (e.g. a platform PCRE2 lacks it) the interpreter gives the same pieces. */
    p->jit = pcre2_jit_compile(p->code, PCRE2_JIT_COMPLETE) == 0;
    return MLM_OK;
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
    it->md = pcre2_match_data_create_from_pattern(p->code, NULL);
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

mlm_status mlm_pretok_next(mlm_pretok_iter *it, size_t *start, size_t *end, int *found,
                           mlm_error *err) {
    *found = 0;
    if (it->pos >= it->len) return MLM_OK;
    const pcre2_code *code = it->p->code;
    int rc;
    if (it->p->jit)
        rc = pcre2_jit_match(code, it->text, it->len, it->pos, 0, it->md, it->mctx);
    else
        rc = pcre2_match(code, it->text, it->len, it->pos, PCRE2_NO_UTF_CHECK, it->md, it->mctx);
    if (is_limit(rc) && !it->mctx) {
        if (grow(it) != 0)
            return mlm_err_set(err, MLM_ERR_NOMEM, "pretok: out of memory for a JIT stack");
        if (it->p->jit) rc = pcre2_jit_match(code, it->text, it->len, it->pos, 0, it->md, it->mctx);
    }
    if (is_limit(rc))
        rc = pcre2_match(code, it->text, it->len, it->pos, PCRE2_NO_JIT | PCRE2_NO_UTF_CHECK,
                         it->md, it->mctx);
    if (rc == PCRE2_ERROR_NOMATCH) {
        it->pos = it->len;
        return MLM_OK;
    }
    if (rc < 0) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return mlm_err_set(err, MLM_ERR_INTERNAL, "pretok: matching at byte %zu failed: %s",
                           it->pos, (const char *)msg);
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
