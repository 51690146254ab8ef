/* tokenizer/pretok.c: PCRE2 matching for the pre-tokenizer. See pretok.h.
 * Fast path: pcre2_jit_match with the default 32 KiB machine-stack JIT stack and default
 * match limit (10 million steps, which a run of ~10 MB of spaces exceeds). On a resource
 * limit the iterator creates a match context with a JIT stack growing up to JIT_STACK_MAX
 * and the largest limits, and retries; if even that fails it runs the interpreter
 * (heap-based backtracking) for that one match.
 * Split mode runs one level per step: level k splits the current piece of level k - 1
 * (level 0 the whole text), each piece being a subject of its own, so lookarounds never see
 * past it (as tokenizers and llama.cpp match each split separately). */
#include "tokenizer/pretok.h"

#include <string.h>

#include "core/error.h"

#define JIT_STACK_START (64u << 10)
#define JIT_STACK_MAX (256u << 20)

// ---- compiling ----

static mlm_status compile(mlm_pretok_step *s, const char *pattern, uint32_t extra, const char *what,
                          mlm_error *err) {
    int ec;
    PCRE2_SIZE off;
    /* PCRE2_LITERAL takes no UCP (there are no classes to widen). */
    uint32_t opts = extra & PCRE2_LITERAL ? PCRE2_UTF | extra : PCRE2_UTF | PCRE2_UCP | extra;
    s->code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &ec, &off, NULL);
    if (!s->code) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: pattern does not compile at offset %zu: %s",
                             what, (size_t)off, (const char *)msg);
    }
    /* Without JIT (e.g. a platform PCRE2 lacks it) the interpreter gives the same pieces. */
    s->jit = pcre2_jit_compile(s->code, PCRE2_JIT_COMPLETE) == 0;
    return MLM_OK;
}

mlm_status mlm_pretok_init(mlm_pretok *p, const char *pattern, mlm_error *err) {
    memset(p, 0, sizeof *p);
    p->n_steps = 1;
    return compile(&p->step[0], pattern, 0, "pretok", err);
}

mlm_status mlm_pretok_init_steps(mlm_pretok *p, const mlm_pretok_spec *specs, int n,
                                 mlm_error *err) {
    memset(p, 0, sizeof *p);
    p->hf = 1;
    if (n < 0 || n > MLM_PRETOK_MAX_STEPS)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "pretok: %d steps (at most %d)", n,
                             MLM_PRETOK_MAX_STEPS);
    for (int i = 0; i < n; i++) {
        mlm_pretok_step *s = &p->step[i];
        s->behavior = specs[i].behavior;
        s->invert = specs[i].invert;
        p->n_steps = i + 1;
        if (!specs[i].pattern || !specs[i].pattern[0]) continue; /* splits nothing */
        mlm_status st = compile(s, specs[i].pattern, specs[i].literal ? PCRE2_LITERAL : 0,
                                specs[i].where ? specs[i].where : "pretok", err);
        if (st != MLM_OK) {
            mlm_pretok_deinit(p);
            return st;
        }
    }
    return MLM_OK;
}

mlm_status mlm_pretok_init_hf(mlm_pretok *p, const char *pattern, int literal, const char *what,
                              mlm_error *err) {
    if (!pattern || !pattern[0]) return mlm_pretok_init_steps(p, NULL, 0, err);
    mlm_pretok_spec s = {pattern, literal, MLM_SPLIT_ISOLATED, 0, what};
    return mlm_pretok_init_steps(p, &s, 1, err);
}

void mlm_pretok_deinit(mlm_pretok *p) {
    if (!p) return;
    for (int i = 0; i < MLM_PRETOK_MAX_STEPS; i++) {
        pcre2_code_free(p->step[i].code);
        p->step[i].code = NULL;
    }
    p->n_steps = 0;
}

// ---- iterator ----

mlm_status mlm_pretok_iter_init(mlm_pretok_iter *it, const mlm_pretok *p, mlm_error *err) {
    memset(it, 0, sizeof *it);
    it->p = p;
    int n = p->n_steps > 0 ? p->n_steps : 1;
    for (int k = 0; k < n; k++) {
        const pcre2_code *code = k < p->n_steps ? p->step[k].code : NULL;
        it->lv[k].md = code ? pcre2_match_data_create_from_pattern(code, NULL)
                            : pcre2_match_data_create(1, NULL);
        if (!it->lv[k].md)
            return mlm_error_set(err, MLM_ERR_NOMEM, "pretok: out of memory for match data");
    }
    return MLM_OK;
}

void mlm_pretok_iter_deinit(mlm_pretok_iter *it) {
    if (!it) return;
    for (int k = 0; k < MLM_PRETOK_MAX_STEPS; k++) {
        pcre2_match_data_free(it->lv[k].md);
        it->lv[k].md = NULL;
    }
    pcre2_match_context_free(it->mctx);
    pcre2_jit_stack_free(it->stack);
    it->mctx = NULL;
    it->stack = NULL;
}

void mlm_pretok_iter_reset(mlm_pretok_iter *it, const unsigned char *text, size_t len) {
    it->text = text;
    it->len = len;
    it->pos = 0;
    it->top_done = 0;
    for (int k = 0; k < MLM_PRETOK_MAX_STEPS; k++)
        it->lv[k].active = 0;
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

/* Split mode runs patterns from files: after growing, its match and depth limits stay
 * proportional to the text (a linear pattern needs a few steps per byte even on megabytes
 * of whitespace), so that catastrophic backtracking ends in an error instead of running
 * for hours. */
static uint32_t hf_limit(size_t len) {
    uint64_t lim = 10000000u + 256u * (uint64_t)len;
    return lim > UINT32_MAX ? UINT32_MAX : (uint32_t)lim;
}

/* One search of step S in SUBJ[0..LEN) from byte AT: the PCRE2 return code (ovector in MD). */
static int search(mlm_pretok_iter *it, const mlm_pretok_step *s, pcre2_match_data *md,
                  const unsigned char *subj, size_t len, size_t at, mlm_status *st,
                  mlm_error *err) {
    int rc, hf = it->p->hf;
    *st = MLM_OK;
    if (it->mctx && hf) {
        pcre2_set_match_limit(it->mctx, hf_limit(len));
        pcre2_set_depth_limit(it->mctx, hf_limit(len));
    }
    if (s->jit)
        rc = pcre2_jit_match(s->code, subj, len, at, 0, md, it->mctx);
    else
        rc = pcre2_match(s->code, subj, len, at, PCRE2_NO_UTF_CHECK, md, it->mctx);
    if (is_limit(rc) && !it->mctx) {
        if (grow(it) != 0) {
            *st = mlm_error_set(err, MLM_ERR_NOMEM, "pretok: out of memory for a JIT stack");
            return rc;
        }
        if (hf) {
            pcre2_set_match_limit(it->mctx, hf_limit(len));
            pcre2_set_depth_limit(it->mctx, hf_limit(len));
        }
        if (s->jit) rc = pcre2_jit_match(s->code, subj, len, at, 0, md, it->mctx);
    }
    if (is_limit(rc))
        rc = pcre2_match(s->code, subj, len, at, PCRE2_NO_JIT | PCRE2_NO_UTF_CHECK, md, it->mctx);
    if (is_limit(rc) && hf) {
        *st = mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                            "pretok: the pattern needs more than %u match steps at byte %zu of a "
                            "%zu-byte text (catastrophic backtracking)",
                            (unsigned)hf_limit(len), at, len);
    } else if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(rc, msg, sizeof msg);
        *st = mlm_error_set(err, MLM_ERR_INTERNAL, "pretok: matching at byte %zu failed: %s", at,
                            (const char *)msg);
    }
    return rc;
}

/* Length of the UTF-8 character at P (valid UTF-8, at least one byte). */
static size_t char_len(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

// ---- split mode ----

static void level_start(mlm_pretok_level *l, size_t a, size_t b) {
    l->active = 1;
    l->base = a;
    l->end = b;
    l->pos = l->prev_end = l->last_end = a;
    l->have_last = l->raw_done = l->held = 0;
    l->pend = l->pend_match = l->prev_match = 0;
}

/* The next segment of step K in its piece: *M = 1 for a match (possibly empty), 0 for a
 * gap. Returns 0 when the piece is covered. Matches follow Oniguruma's find_iter: an
 * empty match ending where the previous match ended is dropped and the search moves one
 * character on (tokenizers' SysRegex, then Pattern::find_matches). */
static int raw_next(mlm_pretok_iter *it, int k, size_t *a, size_t *b, int *m, mlm_status *st,
                    mlm_error *err) {
    mlm_pretok_level *l = &it->lv[k];
    const mlm_pretok_step *s = &it->p->step[k];
    *st = MLM_OK;
    if (l->held) {
        l->held = 0;
        *a = l->held_a;
        *b = l->held_b;
        *m = 1;
        return 1;
    }
    if (l->raw_done) return 0;
    const unsigned char *subj = it->text + l->base;
    size_t n = l->end - l->base;
    /* tokenizers matches nothing in an empty piece (one empty gap, dropped later). */
    while (s->code && n > 0 && l->pos <= l->end) {
        int rc = search(it, s, l->md, subj, n, l->pos - l->base, st, err);
        if (*st != MLM_OK) return 0;
        if (rc == PCRE2_ERROR_NOMATCH) break;
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(l->md);
        if (ov[1] < ov[0] || ov[1] > n) {
            *st = mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                                "pretok: the pattern's match at byte %zu ends before it starts "
                                "(\\K in a lookaround is not supported)",
                                (size_t)ov[0]);
            return 0;
        }
        size_t ms = l->base + ov[0], me = l->base + ov[1];
        if (ms == me && l->have_last && l->last_end == me) {
            l->pos += l->pos < l->end ? char_len(it->text[l->pos]) : 1;
            continue;
        }
        l->pos = me;
        l->last_end = me;
        l->have_last = 1;
        size_t gap = l->prev_end;
        l->prev_end = me;
        *m = 1;
        if (ms > gap) {
            l->held = 1;
            l->held_a = ms;
            l->held_b = me;
            *m = 0;
            *a = gap;
            *b = ms;
            return 1;
        }
        *a = ms;
        *b = me;
        return 1;
    }
    l->raw_done = 1;
    if (l->prev_end < l->end) {
        *a = l->prev_end;
        *b = l->end;
        *m = 0;
        l->prev_end = l->end;
        return 1;
    }
    return 0;
}

/* The next non-empty piece step K makes of its piece (tokenizers' NormalizedString::split
 * folds, streamed with one segment held back); 0 when there is none left. */
static int level_next(mlm_pretok_iter *it, int k, size_t *pa, size_t *pb, mlm_status *st,
                      mlm_error *err) {
    mlm_pretok_level *l = &it->lv[k];
    const mlm_pretok_step *s = &it->p->step[k];
    for (;;) {
        size_t a, b;
        int m;
        if (!raw_next(it, k, &a, &b, &m, st, err)) {
            if (*st != MLM_OK || !l->pend) return 0;
            l->pend = 0;
            if (l->pend_b == l->pend_a) return 0;
            *pa = l->pend_a;
            *pb = l->pend_b;
            return 1;
        }
        if (s->invert) m = !m;
        int join = 0;
        switch (s->behavior) {
        case MLM_SPLIT_ISOLATED:
        case MLM_SPLIT_REMOVED:
            if (b == a || (m && s->behavior == MLM_SPLIT_REMOVED)) continue;
            *pa = a;
            *pb = b;
            return 1;
        case MLM_SPLIT_MERGED_PREV: /* a match after a gap extends that gap's piece */
            join = l->pend && m && !l->prev_match;
            break;
        case MLM_SPLIT_CONTIGUOUS: /* a segment like the one before extends its piece */
            join = l->pend && m == l->prev_match;
            break;
        case MLM_SPLIT_MERGED_NEXT: /* a held match followed by a gap takes that gap in */
            if (l->pend && l->pend_match && !m) {
                l->pend = 0;
                *pa = l->pend_a;
                *pb = b;
                return 1;
            }
            break;
        }
        l->prev_match = m;
        if (join) {
            l->pend_b = b;
            continue;
        }
        int out = l->pend && l->pend_b > l->pend_a;
        size_t oa = l->pend_a, ob = l->pend_b;
        l->pend = 1;
        l->pend_match = m;
        l->pend_a = a;
        l->pend_b = b;
        if (out) {
            *pa = oa;
            *pb = ob;
            return 1;
        }
    }
}

/* The next piece of step K, starting it on the next piece of step K - 1 (or the whole
 * text) whenever its own piece is used up. */
static int next_at(mlm_pretok_iter *it, int k, size_t *a, size_t *b, mlm_status *st,
                   mlm_error *err) {
    mlm_pretok_level *l = &it->lv[k];
    for (;;) {
        if (!l->active) {
            size_t ra = 0, rb = it->len;
            if (k == 0) {
                if (it->top_done) return 0;
                it->top_done = 1;
            } else if (!next_at(it, k - 1, &ra, &rb, st, err)) {
                return 0;
            }
            level_start(l, ra, rb);
        }
        if (level_next(it, k, a, b, st, err)) return 1;
        l->active = 0;
        if (*st != MLM_OK) return 0;
    }
}

mlm_status mlm_pretok_next(mlm_pretok_iter *it, size_t *start, size_t *end, int *found,
                           mlm_error *err) {
    *found = 0;
    mlm_status st = MLM_OK;
    if (it->p->hf) {
        if (it->p->n_steps == 0) {
            if (!it->top_done && it->len > 0) {
                *start = 0;
                *end = it->len;
                *found = 1;
            }
            it->top_done = 1;
            return MLM_OK;
        }
        *found = next_at(it, it->p->n_steps - 1, start, end, &st, err);
        return st;
    }
    if (it->pos >= it->len) return MLM_OK;
    int rc = search(it, &it->p->step[0], it->lv[0].md, it->text, it->len, it->pos, &st, err);
    if (st != MLM_OK) return st;
    if (rc == PCRE2_ERROR_NOMATCH) {
        it->pos = it->len;
        return MLM_OK;
    }
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(it->lv[0].md);
    if (ov[1] <= ov[0]) {
        /* The pattern cannot match empty; guard the loop anyway. */
        return mlm_error_set(err, MLM_ERR_INTERNAL, "pretok: empty match at byte %zu",
                             (size_t)ov[0]);
    }
    *start = ov[0];
    *end = ov[1];
    it->pos = ov[1];
    *found = 1;
    return MLM_OK;
}
