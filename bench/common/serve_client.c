/* bench/common/serve_client.c: bench/serve's clients (see serve.h): the prompts that differ
 * per client and request (random common words from a seeded generator, or a window of
 * --prompt-file at a varying offset) after the shared preamble, the request body, and one
 * streamed request over a plain socket: connect, send, read the status line and headers, then
 * the chunked or sized body fed to the SSE parser, with idle and hard-stop timeouts. */
#include "serve.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

#define CONNECT_TIMEOUT_S 5.0
#define IDLE_TIMEOUT_S 120.0
#define MAX_HEADER_BYTES 65536
#define MAX_ERROR_BODY 512

// ---- text buffers ----

static int sb_grow(sbuf *b, size_t add) {
    if (b->n + add + 1 <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->n + add + 1)
        cap *= 2;
    char *t = realloc(b->p, cap);
    if (!t) return 0;
    b->p = t;
    b->cap = cap;
    return 1;
}

int serve_sb_add(sbuf *b, const char *s, size_t n) {
    if (!sb_grow(b, n)) return 0;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 1;
}

static int sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0 || !sb_grow(b, (size_t)k)) return 0;
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
    return 1;
}

/* Appends S as a JSON string body (no quotes). */
int serve_sb_json(sbuf *b, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\')
            esc[0] = '\\', esc[1] = (char)c, esc[2] = 0;
        else if (c == '\n')
            strcpy(esc, "\\n");
        else if (c == '\t')
            strcpy(esc, "\\t");
        else if (c < 0x20)
            snprintf(esc, sizeof esc, "\\u%04x", c);
        else
            esc[0] = (char)c, esc[1] = 0;
        if (!serve_sb_add(b, esc, strlen(esc))) return 0;
    }
    return 1;
}

// ---- prompts ----

/* Common English words: SmolLM2's and Llama's tokenizers give most of them one token with the
 * leading space, so N words are roughly N prompt tokens (the summary reports the real count
 * when the server sends usage). */
static const char *const WORDS[] = {
    "the",     "of",      "and",      "to",      "in",       "is",      "was",     "for",
    "that",    "with",    "as",       "on",      "by",       "from",    "at",      "his",
    "her",     "they",    "this",     "which",   "or",       "an",      "are",     "be",
    "had",     "not",     "but",      "one",     "first",    "new",     "time",    "year",
    "city",    "world",   "school",   "house",   "water",    "river",   "music",   "family",
    "people",  "state",   "war",      "game",    "film",     "book",    "team",    "life",
    "work",    "name",    "land",     "light",   "night",    "day",     "road",    "king",
    "church",  "town",    "club",     "line",    "field",    "party",   "power",   "story",
    "art",     "war",     "sea",      "hill",    "north",    "south",   "east",    "west",
    "small",   "large",   "old",      "young",   "long",     "short",   "high",    "low",
    "early",   "late",    "great",    "good",    "black",    "white",   "red",     "green",
    "blue",    "gold",    "open",     "free",    "local",    "public",  "major",   "united",
    "second",  "third",   "last",     "next",    "made",     "found",   "known",   "began",
    "became",  "built",   "played",   "won",     "took",     "gave",    "left",    "moved",
    "called",  "named",   "used",     "held",    "wrote",    "said",    "show",    "album",
    "song",    "band",    "group",    "army",    "police",   "court",   "law",     "money",
    "market",  "trade",   "bank",     "church",  "garden",   "forest",  "island",  "bridge",
    "tower",   "castle",  "village",  "valley",  "mountain", "station", "railway", "country",
    "region",  "county",  "district", "member",  "leader",   "player",  "coach",   "father",
    "mother",  "son",     "daughter", "brother", "friend",   "doctor",  "teacher", "student",
    "writer",  "artist",  "horse",    "dog",     "bird",     "fish",    "tree",    "flower",
    "stone",   "fire",    "wind",     "rain",    "snow",     "summer",  "winter",  "spring",
    "morning", "evening", "history",  "science", "system",   "company", "service", "program",
    "report",  "season",  "series",   "number",  "part",     "place",   "point",   "end",
    "side",    "way",     "home",     "ship",    "car",      "train",   "plane",   "door",
    "window",  "table",   "letter",   "paper",   "voice",    "heart",   "mind",    "body",
    "face",    "hand",    "eye",      "word",    "idea",     "plan",    "rule",    "order",
    "change",  "move",    "turn",     "return",  "start",    "stop",    "run",     "walk",
    "read",    "write",   "speak",    "hear",    "see",      "look",    "find",    "keep",
    "bring",   "carry",   "hold",     "build",   "break",    "grow",    "fall",    "rise",
    "quiet",   "bright",  "dark",     "warm",    "cold",     "deep",    "wide",    "strong",
    "simple",
};
#define N_WORDS (sizeof WORDS / sizeof WORDS[0])

static uint64_t mix64(uint64_t x) { /* splitmix64 */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The prompt of request REQ of client ID: the shared preamble, then words that differ. */
static int make_prompt(const opts *o, long id, long req, sbuf *out) {
    out->n = 0;
    if (!serve_sb_add(out, o->shared, strlen(o->shared))) return 0;
    uint64_t r = mix64(mix64((uint64_t)o->seed) ^ mix64(((uint64_t)id << 32) ^ (uint64_t)req));
    if (o->n_file_words) {
        size_t at = (size_t)(r % o->n_file_words);
        for (long i = 0; i < o->prompt_words && (size_t)i < o->n_file_words; i++) {
            const char *w = o->file_words[(at + (size_t)i) % o->n_file_words];
            if ((i && !serve_sb_add(out, " ", 1)) || !serve_sb_add(out, w, strlen(w))) return 0;
        }
    } else {
        for (long i = 0; i < o->prompt_words; i++) {
            r = mix64(r);
            const char *w = WORDS[r % N_WORDS];
            if ((i && !serve_sb_add(out, " ", 1)) || !serve_sb_add(out, w, strlen(w))) return 0;
        }
    }
    return 1;
}

int serve_load_prompt_file(opts *o) {
    FILE *f = fopen(o->prompt_file, "rb");
    if (!f) {
        fprintf(stderr, "bench/serve: --prompt-file %s: %s\n", o->prompt_file, strerror(errno));
        return 0;
    }
    sbuf b = {0};
    char tmp[65536];
    size_t k;
    while ((k = fread(tmp, 1, sizeof tmp, f)) > 0)
        if (!serve_sb_add(&b, tmp, k)) break;
    fclose(f);
    o->file_text = b.p;
    size_t cap = 0;
    for (char *save = NULL, *w = b.p ? strtok_r(b.p, " \t\r\n", &save) : NULL; w;
         w = strtok_r(NULL, " \t\r\n", &save)) {
        if (o->n_file_words == cap) {
            cap = cap ? cap * 2 : 4096;
            char **t = realloc(o->file_words, cap * sizeof *t);
            if (!t) return 0;
            o->file_words = t;
        }
        o->file_words[o->n_file_words++] = w;
    }
    if (!o->n_file_words) {
        fprintf(stderr, "bench/serve: --prompt-file %s: no words\n", o->prompt_file);
        return 0;
    }
    return 1;
}

int serve_make_shared(opts *o) {
    sbuf b = {0};
    if (!serve_sb_add(&b, "", 0)) return 0;
    uint64_t r = 0x5eed;
    for (long i = 0; i < o->shared_prefix; i++) {
        r = mix64(r);
        if (!serve_sb_add(&b, WORDS[r % N_WORDS], strlen(WORDS[r % N_WORDS])) ||
            !serve_sb_add(&b, " ", 1))
            return 0;
    }
    o->shared = b.p;
    return 1;
}

static int make_body(const opts *o, const char *prompt, sbuf *out) {
    out->n = 0;
    int ok = serve_sb_add(out, "{", 1);
    if (o->model)
        ok = ok && serve_sb_add(out, "\"model\":\"", 9) && serve_sb_json(out, o->model) &&
             serve_sb_add(out, "\",", 2);
    if (!strcmp(o->endpoint, "chat"))
        ok = ok && sb_printf(out, "\"messages\":[{\"role\":\"user\",\"content\":\"") &&
             serve_sb_json(out, "Write a long story with these words: ") &&
             serve_sb_json(out, prompt) && serve_sb_add(out, "\"}],", 4);
    else
        ok = ok && serve_sb_add(out, "\"prompt\":\"", 10) && serve_sb_json(out, prompt) &&
             serve_sb_add(out, "\",", 2);
    ok = ok && sb_printf(out,
                         "\"max_tokens\":%ld,\"stream\":true,"
                         "\"stream_options\":{\"include_usage\":true}",
                         o->max_tokens);
    if (o->ignore_eos) ok = ok && sb_printf(out, ",\"ignore_eos\":true");
    if (o->temperature >= 0) ok = ok && sb_printf(out, ",\"temperature\":%g", o->temperature);
    if (o->response_format)
        ok = ok && sb_printf(out, ",\"response_format\":") &&
             serve_sb_add(out, o->response_format, strlen(o->response_format));
    return ok && serve_sb_add(out, "}", 1);
}

// ---- one streamed request ----

typedef struct reader {
    int fd;
    double hard_stop;
    char buf[16384];
    size_t len, pos;
    int eof;
} reader;

/* Refills R->buf (whose bytes are all consumed); 1 data, 0 EOF, -1 error/timeout, -2 hard stop. */
static int fill(reader *r, const char **why) {
    r->pos = r->len = 0; /* callers have consumed the buffer */
    double idle_until = bench_now() + IDLE_TIMEOUT_S;
    for (;;) {
        double t = bench_now();
        if (t >= r->hard_stop) return -2;
        if (t >= idle_until) {
            *why = "no data for 120 s";
            return -1;
        }
        struct pollfd pf = {.fd = r->fd, .events = POLLIN};
        int k = poll(&pf, 1, 1000);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            *why = "poll failed";
            return -1;
        }
        if (!k) continue;
        ssize_t got = recv(r->fd, r->buf + r->len, sizeof r->buf - r->len, 0);
        if (got < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (got < 0) {
            *why = strerror(errno);
            return -1;
        }
        if (!got) {
            r->eof = 1;
            return 0;
        }
        r->len += (size_t)got;
        return 1;
    }
}

static int connect_to(const opts *o, const char **why) {
    int fd = socket(o->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *why = strerror(errno);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    if (connect(fd, (const struct sockaddr *)&o->addr, o->addrlen) < 0 && errno != EINPROGRESS) {
        *why = strerror(errno);
        close(fd);
        return -1;
    }
    struct pollfd pf = {.fd = fd, .events = POLLOUT};
    int k;
    do
        k = poll(&pf, 1, (int)(CONNECT_TIMEOUT_S * 1000));
    while (k < 0 && errno == EINTR);
    int err = 0;
    socklen_t el = sizeof err;
    if (k <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err) {
        *why = k == 0 ? "connect timed out (5 s)" : strerror(err ? err : errno);
        close(fd);
        return -1;
    }
    return fd;
}

static int send_all(int fd, const char *p, size_t n, double hard_stop) {
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return 0;
        if (bench_now() >= hard_stop) return 0;
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        poll(&pf, 1, 1000);
    }
    return 1;
}

typedef enum outcome { OK, FAILED, HUNG_UP, UNFINISHED } outcome;

static const char *find_header(const char *h, const char *name) {
    size_t nl = strlen(name);
    for (const char *p = strstr(h, "\r\n"); p; p = strstr(p + 2, "\r\n")) {
        if (!strncasecmp(p + 2, name, nl) && p[2 + nl] == ':') {
            const char *v = p + 3 + nl;
            while (*v == ' ' || *v == '\t')
                v++;
            return v;
        }
    }
    return NULL;
}

/* Sends one request and reads its stream; HANG_UP_AFTER > 0 closes after that many events. */
static outcome one_request(const opts *o, const char *req, size_t req_len, long hang_up_after,
                           double hard_stop, result *res, stats *st) {
    const char *why = NULL;
    res->t0 = bench_now();
    int fd = connect_to(o, &why);
    if (fd < 0) {
        snprintf(res->why, sizeof res->why, "connect %.100s: %.80s", o->hostport, why);
        return FAILED;
    }
    outcome out = FAILED;
    reader *r = calloc(1, sizeof *r);
    sse s = {0};
    if (!r) {
        snprintf(res->why, sizeof res->why, "out of memory");
        goto done;
    }
    r->fd = fd;
    r->hard_stop = hard_stop;
    if (!send_all(fd, req, req_len, hard_stop)) {
        snprintf(res->why, sizeof res->why, "send: %s", strerror(errno));
        goto done;
    }

    /* status line and headers */
    sbuf head = {0};
    char *eoh = NULL;
    while (!eoh) {
        int k = fill(r, &why);
        if (k == -2) {
            out = UNFINISHED;
            free(head.p);
            goto done;
        }
        if (k <= 0) {
            snprintf(res->why, sizeof res->why, "no response header: %s",
                     k == 0 ? "connection closed" : why);
            free(head.p);
            goto done;
        }
        serve_sb_add(&head, r->buf + r->pos, r->len - r->pos);
        r->pos = r->len;
        eoh = head.p ? strstr(head.p, "\r\n\r\n") : NULL;
        if (!eoh && head.n > MAX_HEADER_BYTES) {
            snprintf(res->why, sizeof res->why, "response header over %d bytes", MAX_HEADER_BYTES);
            free(head.p);
            goto done;
        }
    }
    eoh[2] = 0; /* the header block keeps its last CRLF for find_header */
    size_t body_at = (size_t)(eoh + 4 - head.p);
    int status = 0;
    sscanf(head.p, "HTTP/%*d.%*d %d", &status);
    const char *te = find_header(head.p, "Transfer-Encoding");
    const char *cl = find_header(head.p, "Content-Length");
    int chunked = te && !strncasecmp(te, "chunked", 7);
    long long remaining = cl && !chunked ? strtoll(cl, NULL, 10) : -1;
    /* the bytes after the header go back in front of the reader's buffer */
    size_t extra = head.n - body_at;
    if (extra > sizeof r->buf) extra = sizeof r->buf;
    memcpy(r->buf, head.p + body_at, extra);
    r->pos = 0;
    r->len = extra;
    free(head.p);

    sbuf errbody = {0};
    /* chunked decoding: SIZE line, DATA, CRLF, ... 0 CRLF (trailers) CRLF */
    enum { SIZE, DATA, DATA_END, TRAILER, END } cs = SIZE;
    long long chunk_left = 0;
    sbuf sizeline = {0};
    int hung_up = 0;
    for (;;) {
        while (r->pos < r->len && cs != END && !hung_up) {
            const char *p = r->buf + r->pos;
            size_t avail = r->len - r->pos, take = avail;
            if (chunked) {
                if (cs == SIZE || cs == DATA_END || cs == TRAILER) {
                    const char *nl = memchr(p, '\n', avail);
                    take = nl ? (size_t)(nl - p) + 1 : avail;
                    serve_sb_add(&sizeline, p, take);
                    r->pos += take;
                    if (!nl) continue;
                    if (cs == SIZE) {
                        chunk_left = strtoll(sizeline.p, NULL, 16);
                        cs = chunk_left > 0 ? DATA : TRAILER;
                    } else if (cs == DATA_END) {
                        cs = SIZE;
                    } else if (sizeline.n <= 2) {
                        cs = END;
                    }
                    sizeline.n = 0;
                    continue;
                }
                if ((long long)take > chunk_left) take = (size_t)chunk_left;
                chunk_left -= (long long)take;
                if (!chunk_left) cs = DATA_END;
            } else if (remaining >= 0) {
                if ((long long)take > remaining) take = (size_t)remaining;
                remaining -= (long long)take;
                if (!remaining) cs = END;
            }
            r->pos += take;
            if (status != 200) {
                if (errbody.n < MAX_ERROR_BODY) serve_sb_add(&errbody, p, take);
                continue;
            }
            serve_sse_feed(&s, p, take, res, st);
            if (hang_up_after > 0 && res->events >= hang_up_after) hung_up = 1;
        }
        if (hung_up || cs == END || (status == 200 && (s.done || s.error))) break;
        if (r->eof) break;
        int k = fill(r, &why);
        if (k == -2) {
            out = UNFINISHED;
            goto body_done;
        }
        if (k < 0) {
            snprintf(res->why, sizeof res->why, "stream broken: %s", why);
            goto body_done;
        }
    }
    res->t_end = bench_now();
    if (status != 200) {
        char *b = errbody.p ? errbody.p : "";
        for (char *c = b; *c; c++)
            if (*c == '\n' || *c == '\r') *c = ' ';
        snprintf(res->why, sizeof res->why, "HTTP %d: %.150s", status, b);
    } else if (hung_up) {
        out = HUNG_UP;
    } else {
        if (s.line.n || s.data.n) {
            serve_sse_feed(&s, "\n\n", 2, res, st); /* a last event without its blank line */
        }
        if (s.error) {
            /* RES->why says which event */
        } else if (!s.done) {
            snprintf(res->why, sizeof res->why, "stream ended without [DONE] after %ld events",
                     res->events);
        } else if (!res->events) {
            snprintf(res->why, sizeof res->why, "stream had no text");
        } else {
            out = OK;
        }
    }
body_done:
    free(errbody.p);
    free(sizeline.p);
done:
    free(s.line.p);
    free(s.data.p);
    free(r);
    close(fd);
    return out;
}

// ---- clients ----

void *serve_client_main(void *arg) {
    client *c = arg;
    const opts *o = c->o;
    sbuf prompt = {0}, body = {0}, req = {0};
    for (long n = 0; bench_now() < c->deadline; n++) {
        if (!make_prompt(o, c->id, n, &prompt) || !make_body(o, prompt.p, &body)) break;
        req.n = 0;
        sb_printf(&req,
                  "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                  "Accept: text/event-stream\r\nContent-Length: %zu\r\nConnection: close\r\n",
                  o->path, o->hostport, body.n);
        if (o->api_key) sb_printf(&req, "Authorization: Bearer %s\r\n", o->api_key);
        serve_sb_add(&req, "\r\n", 2);
        serve_sb_add(&req, body.p, body.n);
        long hang =
            o->disconnect_every > 0 && (n + 1) % o->disconnect_every == 0 ? DISCONNECT_AFTER : 0;
        result res = {.completion_tokens = -1, .prompt_tokens = -1, .deadline = c->deadline};
        outcome out = one_request(o, req.p, req.n, hang, c->hard_stop, &res, &c->st);
        stats *st = &c->st;
        st->window_events += res.window_events;
        if (out == OK) {
            long long toks = res.completion_tokens > 0 ? res.completion_tokens : res.events;
            st->ok++;
            st->tokens += toks;
            st->tokens_ok += toks;
            serve_dv_push(&st->ttft, res.t_first - res.t0);
            serve_dv_push(&st->e2e, res.t_end - res.t0);
            if (toks > 1) serve_dv_push(&st->tpot, (res.t_last - res.t_first) / (double)(toks - 1));
            if (res.prompt_tokens >= 0)
                st->prompt_tokens += res.prompt_tokens, st->n_prompt_usage++;
        } else if (out == HUNG_UP) {
            st->disconnects++;
            st->tokens += res.events;
        } else if (out == UNFINISHED) {
            st->unfinished++;
            break;
        } else {
            st->errors++;
            if (!st->first_error[0])
                snprintf(st->first_error, sizeof st->first_error, "%s", res.why);
            /* a server that refuses at once must not be hammered in a tight loop */
            struct timespec ts = {0, 100 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    free(prompt.p);
    free(body.p);
    free(req.p);
    return NULL;
}
