/* tokenizer/added.c: Hugging Face added-token matching (see added.h). The matcher is a
 * plain scan: at each position whose byte starts some token, the longest token of the
 * pass that matches there wins (aho-corasick LeftmostLongest gives the same matches);
 * scanning resumes after the raw match, whatever happens to it afterwards, as the
 * automaton's iterator does. */
#include "tokenizer/added.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tokenizer/utf8.h"

void mlm_added_splits_deinit(mlm_added_splits *l) {
    if (!l) return;
    free(l->v);
    memset(l, 0, sizeof *l);
}

static mlm_status push(mlm_added_splits *l, int32_t id, size_t a, size_t b, mlm_error *err) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        mlm_added_split *v = realloc(l->v, cap * sizeof *v);
        if (!v) return mlm_error_set(err, MLM_ERR_NOMEM, "tokenizer: out of memory for splits");
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (mlm_added_split){id, a, b};
    return MLM_OK;
}

// ---- Unicode helpers ----

int mlm_is_white_space(uint32_t cp) {
    if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    if (cp < 0x85) return 0;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

size_t mlm_ws_prefix(const unsigned char *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t used;
        if (mlm_utf8_next(p + i, n - i, &used) != MLM_UTF8_CHAR) break;
        if (!mlm_is_white_space(mlm_utf8_cp(p + i, used))) break;
        i += used;
    }
    return i;
}

/* Start of the character that ends P[0..N) (N > 0, valid UTF-8). */
static size_t last_char(const unsigned char *p, size_t n) {
    size_t i = n - 1;
    while (i > 0 && (p[i] & 0xC0) == 0x80 && n - i < 4)
        i--;
    return i;
}

size_t mlm_ws_suffix(const unsigned char *p, size_t n) {
    size_t end = n;
    while (end > 0) {
        size_t i = last_char(p, end), used;
        if (mlm_utf8_next(p + i, end - i, &used) != MLM_UTF8_CHAR || i + used != end) break;
        if (!mlm_is_white_space(mlm_utf8_cp(p + i, used))) break;
        end = i;
    }
    return end;
}

/* Whether the character at P[0..N) (one whole character) is a word character. */
static int is_word(const mlm_pretok *word, pcre2_match_data *md, const unsigned char *p, size_t n) {
    return pcre2_match(word->step[0].code, p, n, 0, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, md,
                       NULL) >= 0;
}

// ---- matching ----

/* The longest token of the pass starting at P[0..N), or NULL. */
static const mlm_special *longest_at(const mlm_special_set *s, unsigned pass,
                                     const unsigned char *p, size_t n) {
    const mlm_special *best = NULL;
    for (int32_t k = 0; k < s->n; k++) {
        const mlm_special *t = &s->tok[k];
        if ((t->flags & MLM_ADDED_NORMALIZED) != pass) continue;
        if (t->len <= n && (!best || t->len > best->len) && memcmp(t->text, p, t->len) == 0)
            best = t;
    }
    return best;
}

mlm_status mlm_added_find(const mlm_special_set *s, const mlm_pretok *word,
                          const unsigned char *text, size_t len, unsigned normalized_pass,
                          int parse_special, mlm_added_splits *out, mlm_error *err) {
    pcre2_match_data *md = NULL;
    if ((s->any_flags & MLM_ADDED_SINGLE_WORD) && word && word->n_steps > 0 && word->step[0].code) {
        md = pcre2_match_data_create(1, NULL);
        if (!md) return mlm_error_set(err, MLM_ERR_NOMEM, "tokenizer: out of memory");
    }
    mlm_status st = MLM_OK;
    size_t offset = 0, i = 0;
    while (i < len && st == MLM_OK) {
        if (!s->first[text[i]]) {
            /* Phi-4's added tokens all start with '<': jump to the next one. */
            const unsigned char *hit =
                s->only_first >= 0 ? memchr(text + i, s->only_first, len - i) : NULL;
            i = s->only_first >= 0 ? (hit ? (size_t)(hit - text) : len) : i + 1;
            continue;
        }
        const mlm_special *t = longest_at(s, normalized_pass, text + i, len - i);
        if (!t) {
            i++;
            continue;
        }
        size_t start = i, stop = i + t->len;
        i = stop;
        if ((t->flags & MLM_ADDED_SPECIAL) && !parse_special) continue;
        if ((t->flags & MLM_ADDED_SINGLE_WORD) && md) {
            int left = start > 0 && is_word(word, md, text + last_char(text, start),
                                            start - last_char(text, start));
            size_t used = 0;
            if (stop < len) mlm_utf8_next(text + stop, len - stop, &used);
            int right = stop < len && is_word(word, md, text + stop, used);
            if (left || right) continue;
        }
        if (t->flags & MLM_ADDED_LSTRIP) {
            size_t ns = mlm_ws_suffix(text, start);
            start = ns > offset ? ns : offset;
        }
        if (t->flags & MLM_ADDED_RSTRIP) stop += mlm_ws_prefix(text + stop, len - stop);
        if (offset < start) st = push(out, -1, offset, start, err);
        if (st == MLM_OK) st = push(out, t->id, start, stop, err);
        offset = stop;
    }
    if (st == MLM_OK && offset < len) st = push(out, -1, offset, len, err);
    pcre2_match_data_free(md);
    return st;
}

// ---- llama.cpp's partition ----

mlm_status mlm_added_partition(const mlm_special_set *s, const unsigned char *text, size_t len,
                               int parse_special, mlm_added_splits *out, mlm_added_splits *tmp,
                               mlm_error *err) {
    out->n = 0;
    mlm_status st = len ? push(out, -1, 0, len, err) : MLM_OK;
    for (int32_t k = 0; k < s->n && st == MLM_OK; k++) {
        const mlm_special *t = &s->tok[s->by_len[k]];
        if ((t->flags & MLM_ADDED_SPECIAL) && !parse_special) continue;
        /* Most tokens do not occur at all: one search of the whole text skips them. */
        if (t->len > len || !memmem(text, len, t->text, t->len)) continue;
        tmp->n = 0;
        for (size_t i = 0; i < out->n && st == MLM_OK; i++) {
            mlm_added_split sp = out->v[i];
            if (sp.id >= 0) {
                st = push(tmp, sp.id, sp.a, sp.b, err);
                continue;
            }
            size_t a = sp.a;
            const unsigned char *hit;
            while (st == MLM_OK && sp.b - a >= t->len &&
                   (hit = memmem(text + a, sp.b - a, t->text, t->len)) != NULL) {
                size_t h = (size_t)(hit - text);
                if (h > a) st = push(tmp, -1, a, h, err);
                if (st == MLM_OK) st = push(tmp, t->id, h, h + t->len, err);
                a = h + t->len;
            }
            if (st == MLM_OK && a < sp.b) st = push(tmp, -1, a, sp.b, err);
        }
        mlm_added_splits swap = *out;
        *out = *tmp;
        *tmp = swap;
    }
    return st;
}
