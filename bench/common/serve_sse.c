/* bench/common/serve_sse.c: bench/serve's reading of a streamed response (see serve.h): body
 * bytes into lines, `data:` lines into events, and a flat scan of each event's JSON for text,
 * usage counts and errors; text events are timed into the request's result. Enough for the
 * chunks `meshlm serve` and llama-server send, not a general SSE or JSON parser. */
#include "serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"

/* What one SSE event said. */
typedef struct event {
    int text;                    /* a non-empty "text" or "content" string */
    long long completion_tokens; /* from a usage object, or -1 */
    long long prompt_tokens;
    int error; /* an "error" member that is not null */
    int done;  /* data: [DONE] */
} event;

static const char *skip_ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
        p++;
    return p;
}

/* Scans a JSON string at P ('"'); returns past its closing quote and its decoded length (an
 * escape counts as one), or NULL when unterminated. */
static const char *scan_string(const char *p, const char *e, size_t *len) {
    size_t n = 0;
    for (p++; p < e; p++, n++) {
        if (*p == '"') {
            *len = n;
            return p + 1;
        }
        if (*p == '\\') {
            if (++p >= e) return NULL;
            if (*p == 'u') p += p + 4 < e ? 4 : 0;
        }
    }
    return NULL;
}

/* A flat walk over one event's JSON that knows which key each value belongs to. Enough for the
 * chunks both servers send; a value is never taken for a key because escapes are honoured. */
static void scan_event(const char *p, size_t n, event *ev) {
    const char *e = p + n;
    char key[32] = "";
    int have_key = 0;
    while ((p = skip_ws(p, e)) < e) {
        char c = *p;
        if (c == '"') {
            const char *s = p;
            size_t len;
            const char *q = scan_string(p, e, &len);
            if (!q) return;
            const char *after = skip_ws(q, e);
            if (after < e && *after == ':') { /* a key */
                size_t kl = (size_t)(q - s - 2);
                if (kl >= sizeof key) kl = sizeof key - 1;
                memcpy(key, s + 1, kl);
                key[kl] = 0;
                have_key = 1;
                p = after + 1;
                continue;
            }
            if (have_key && len && (!strcmp(key, "text") || !strcmp(key, "content"))) ev->text = 1;
            if (have_key && !strcmp(key, "error")) ev->error = 1;
            have_key = 0;
            p = q;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            char *end;
            long long v = strtoll(p, &end, 10);
            if (have_key && !strcmp(key, "completion_tokens")) ev->completion_tokens = v;
            if (have_key && !strcmp(key, "prompt_tokens")) ev->prompt_tokens = v;
            have_key = 0;
            p = end > p ? end : p + 1;
            while (p < e && (*p == '.' || *p == 'e' || *p == 'E' || *p == '+' || *p == '-' ||
                             (*p >= '0' && *p <= '9')))
                p++;
        } else if (c == 't' || c == 'f' || c == 'n') {
            if (have_key && !strcmp(key, "error") && c != 'n') ev->error = 1;
            have_key = 0;
            while (p < e && *p >= 'a' && *p <= 'z')
                p++;
        } else {
            if ((c == '{' || c == '[') && have_key && !strcmp(key, "error")) ev->error = 1;
            have_key = 0;
            p++;
        }
    }
}

static void on_event(sse *s, result *res, stats *st) {
    if (!s->data.n) return;
    const char *d = s->data.p;
    if (!strcmp(d, "[DONE]")) {
        s->done = 1;
    } else {
        event ev = {.completion_tokens = -1, .prompt_tokens = -1};
        scan_event(d, s->data.n, &ev);
        if (ev.error) {
            s->error = 1;
            snprintf(res->why, sizeof res->why, "error event: %.150s", d);
        }
        if (ev.completion_tokens >= 0) res->completion_tokens = ev.completion_tokens;
        if (ev.prompt_tokens >= 0) res->prompt_tokens = ev.prompt_tokens;
        if (ev.text) {
            double t = bench_now();
            if (!res->events)
                res->t_first = t;
            else
                serve_dv_push(&st->itl, t - res->t_last);
            res->t_last = t;
            res->events++;
            if (t < res->deadline) res->window_events++;
        }
    }
    s->data.n = 0;
}

/* Feeds body bytes to the SSE parser. */
void serve_sse_feed(sse *s, const char *p, size_t n, result *res, stats *st) {
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '\n') {
            serve_sb_add(&s->line, p + i, 1);
            continue;
        }
        char *l = s->line.p ? s->line.p : "";
        size_t ln = s->line.n;
        if (ln && l[ln - 1] == '\r') l[--ln] = 0;
        if (!ln) {
            on_event(s, res, st);
        } else if (!strncmp(l, "data:", 5)) {
            const char *v = l + 5 + (l[5] == ' ');
            if (s->data.n) serve_sb_add(&s->data, "\n", 1);
            serve_sb_add(&s->data, v, strlen(v));
        } else if (!strncmp(l, "error:", 6)) { /* not SSE proper; some servers do it */
            s->error = 1;
            snprintf(res->why, sizeof res->why, "%.150s", l);
        }
        s->line.n = 0;
    }
}
