/* tokenizer/think.c: the <think> blocks of chat formats that think (Qwen3): an assistant
 * message's text as Qwen3's chat template writes it (mlm_chat_think_text, for chat.c), the
 * last user query that decides which messages keep their reasoning, and the split of a
 * reply into reasoning and content (mlm_chat_split_reasoning). Python's str methods the
 * template calls (split, strip('\n'), lstrip('\n'), rstrip('\n')) are spelled out on byte
 * ranges: the separators are ASCII, so byte and character positions agree. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tokenizer/think.h"
#include "tokenizer/tokenizer.h"

#define OPEN "<think>"
#define CLOSE "</think>"
#define TOOL_RESPONSE "<tool_response>"
#define TOOL_RESPONSE_END "</tool_response>"

/* A byte range of a string. */
typedef struct span {
    const char *p;
    size_t n;
} span;

static span strip_nl(span s, int left, int right) {
    while (left && s.n && s.p[0] == '\n')
        s.p++, s.n--;
    while (right && s.n && s.p[s.n - 1] == '\n')
        s.n--;
    return s;
}

/* The last occurrence of NEEDLE in S, or NULL. */
static const char *last_of(span s, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = s.n >= k ? s.n - k + 1 : 0; i-- > 0;)
        if (memcmp(s.p + i, needle, k) == 0) return s.p + i;
    return NULL;
}

static int starts_ends(const char *s, const char *head, const char *tail) {
    size_t n = strlen(s), h = strlen(head), t = strlen(tail);
    return n >= h && n >= t && memcmp(s, head, h) == 0 && memcmp(s + n - t, tail, t) == 0;
}

int mlm_chat_last_query(const mlm_chat_message *msgs, int n) {
    for (int i = n - 1; i >= 0; i--)
        if (strcmp(msgs[i].role, "user") == 0 &&
            !starts_ends(msgs[i].content, TOOL_RESPONSE, TOOL_RESPONSE_END))
            return i;
    return n - 1;
}

mlm_status mlm_chat_think_text(const mlm_chat_message *m, const char *reasoning,
                               int block_allowed, int last, char **out, mlm_error *err) {
    span content = {m->content, strlen(m->content)}, rc = {"", 0};
    if (reasoning) {
        rc = (span){reasoning, strlen(reasoning)};
    } else {
        const char *first = memmem(content.p, content.n, CLOSE, strlen(CLOSE));
        if (first) {
            span before = strip_nl((span){content.p, (size_t)(first - content.p)}, 0, 1);
            const char *open = last_of(before, OPEN);
            if (open) {
                size_t skip = (size_t)(open - before.p) + strlen(OPEN);
                before = (span){before.p + skip, before.n - skip};
            }
            rc = strip_nl(before, 1, 0);
            const char *after = last_of(content, CLOSE) + strlen(CLOSE);
            content = strip_nl((span){after, (size_t)(content.p + content.n - after)}, 1, 0);
        }
    }
    int block = block_allowed && (last || rc.n);
    span r = strip_nl(rc, 1, 1), c = block ? strip_nl(content, 1, 0) : content;
    size_t n = block ? strlen(OPEN "\n") + r.n + strlen("\n" CLOSE "\n\n") + c.n : c.n;
    char *s = malloc(n + 1), *w = s;
    if (!s) return mlm_error_set(err, MLM_ERR_NOMEM, "chat: out of memory");
    if (block) {
        memcpy(w, OPEN "\n", strlen(OPEN "\n")), w += strlen(OPEN "\n");
        memcpy(w, r.p, r.n), w += r.n;
        memcpy(w, "\n" CLOSE "\n\n", strlen("\n" CLOSE "\n\n")), w += strlen("\n" CLOSE "\n\n");
    }
    memcpy(w, c.p, c.n), w += c.n;
    *w = 0;
    *out = s;
    return MLM_OK;
}

int mlm_tokenizer_chat_thinks(const mlm_tokenizer *tok) {
    return tok && tok->chat == MLM_CHAT_CHATML_NL && tok->chat_think;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The length of the longest proper prefix of TAG that ends T[0..N). */
static size_t partial_tag(const char *t, size_t n, const char *tag) {
    size_t k = strlen(tag) - 1;
    for (; k > 0; k--)
        if (k <= n && memcmp(t + n - k, tag, k) == 0) return k;
    return 0;
}

void mlm_chat_split_reasoning(const char *t, size_t n, int final, mlm_reasoning_split *o) {
    const size_t lo = strlen(OPEN), lc = strlen(CLOSE);
    memset(o, 0, sizeof *o);
    size_t w = 0;
    while (w < n && is_space(t[w]))
        w++;
    if (!final && n - w < lo && memcmp(t + w, OPEN, n - w) == 0) return; /* may become <think> */
    if (n - w < lo || memcmp(t + w, OPEN, lo) != 0) {
        o->settled = n; /* no <think> block: all content */
        return;
    }
    o->has_reasoning = 1;
    o->reasoning_begin = w + lo;
    const char *e = memmem(t + w + lo, n - w - lo, CLOSE, lc);
    if (e) {
        o->reasoning_end = (size_t)(e - t);
        o->content_begin = o->reasoning_end + lc;
        o->settled = n;
        return;
    }
    size_t hold = final ? 0 : partial_tag(t + o->reasoning_begin, n - o->reasoning_begin, CLOSE);
    o->reasoning_end = o->content_begin = o->settled = n - hold;
}
