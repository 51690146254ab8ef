/* bench/serve.c: a load generator for OpenAI-compatible streaming servers (`meshlm serve`,
 * llama.cpp's llama-server). N client threads each send streamed completions one after another
 * until the deadline (requests in flight then are finished, up to a hard cap of seconds + 60),
 * read the chunked SSE answer and record time to first token, inter-token times and tokens.
 * Prints one summary (or one JSON line); never judges speed. Plain C: POSIX sockets and
 * pthreads, nothing else, so it builds without the library.
 *
 *   build/bench/serve --url http://127.0.0.1:PORT [options]    (--help lists them)
 *
 * Prompts differ per client and request (random common words from a seeded generator, or a
 * window of --prompt-file at a varying offset) so that a prefix cache cannot serve them;
 * --shared-prefix N puts the same N words first in every prompt. Each thread owns its samples;
 * main merges them after joining. Without arguments (as `make bench` runs it) it says so and
 * exits 0. Exit: 0 when at least one request succeeded, 1 otherwise, 2 usage. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"

#define CONNECT_TIMEOUT_S 5.0
#define IDLE_TIMEOUT_S 120.0
#define HARD_CAP_EXTRA_S 60.0
#define DISCONNECT_AFTER 3 /* content events before a --disconnect-every request hangs up */
#define MAX_HEADER_BYTES 65536
#define MAX_ERROR_BODY 512

// ---- options ----

typedef struct opts {
    const char *url, *endpoint, *prompt_file, *model, *api_key, *label;
    long clients, seconds, max_tokens, prompt_words, shared_prefix, disconnect_every, seed;
    int json, ignore_eos;
    double temperature; /* < 0: not sent */
    /* derived */
    char host[256], port[16], path[512], hostport[300];
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char **file_words; /* owned array; the words point into file_text */
    char *file_text;   /* owned */
    size_t n_file_words;
    char *shared; /* owned: the shared preamble with a trailing space, or "" */
} opts;

// clang-format off
static void usage(FILE *f) {
    fprintf(f,
        "usage: serve --url http://HOST:PORT[/PREFIX] [options]\n"
        "\n"
        "Load generator for an OpenAI-compatible server: --clients threads each send streamed\n"
        "requests back to back for --seconds, then one summary: requests, output tokens/s,\n"
        "TTFT, TPOT ((last - first token time) / (tokens - 1)) and inter-token latency.\n"
        "\n"
        "  --url URL                  server base (the API is URL/v1/...)\n"
        "  --clients N                concurrent clients (default 32)\n"
        "  --seconds S                new requests start until S seconds (default 60); those in\n"
        "                             flight are finished; hard stop at S + 60\n"
        "  --max-tokens N             max_tokens per request (default 128)\n"
        "  --prompt-tokens-approx N   words of varying prompt, about one token each (default 256)\n"
        "  --prompt-file F            take the prompt words from F, at varying offsets\n"
        "  --shared-prefix N          the same N words first in every prompt (default 0)\n"
        "  --endpoint completions|chat  /v1/completions (default) or /v1/chat/completions\n"
        "  --disconnect-every K       every Kth request of each client hangs up after %d tokens\n"
        "  --ignore-eos 0|1           send \"ignore_eos\" so every request makes max-tokens (default 1)\n"
        "  --temperature T            sampling temperature (default 0; -1: not sent)\n"
        "  --seed N                   prompt generator seed (default 1)\n"
        "  --model NAME               \"model\" field (default: not sent)\n"
        "  --api-key KEY              Authorization: Bearer KEY\n"
        "  --label TEXT               a name for this run in the summary\n"
        "  --json                     print one JSON line instead of the text summary\n"
        "  -h, --help                 this help\n",
        DISCONNECT_AFTER);
}
// clang-format on

static int bad_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench/serve: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see --help)\n");
    va_end(ap);
    return 2;
}

static int parse_long(const char *flag, const char *v, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "bench/serve: %s '%s': want an integer in [%ld, %ld]\n", flag, v, lo, hi);
        return 0;
    }
    *out = x;
    return 1;
}

/* Splits http://HOST[:PORT][/PREFIX] and resolves HOST once. */
static int parse_url(opts *o) {
    const char *u = o->url;
    if (strncmp(u, "http://", 7)) return bad_usage("--url '%s': only http:// is supported", u);
    u += 7;
    const char *slash = strchr(u, '/');
    size_t hp = slash ? (size_t)(slash - u) : strlen(u);
    const char *hs = u, *he, *ps = NULL;
    if (*u == '[') { /* [v6]:port */
        hs = u + 1;
        he = memchr(u, ']', hp);
        if (!he) return bad_usage("--url '%s': no ']'", o->url);
        if (he + 1 < u + hp && he[1] == ':') ps = he + 2;
    } else {
        he = memchr(u, ':', hp);
        if (he)
            ps = he + 1;
        else
            he = u + hp;
    }
    size_t hl = (size_t)(he - hs), pl = ps ? (size_t)(u + hp - ps) : 0;
    if (!hl || hl >= sizeof o->host || pl >= sizeof o->port)
        return bad_usage("--url '%s': bad host or port", o->url);
    memcpy(o->host, hs, hl);
    o->host[hl] = 0;
    if (ps && pl) {
        memcpy(o->port, ps, pl);
        o->port[pl] = 0;
    } else {
        strcpy(o->port, "80");
    }
    snprintf(o->hostport, sizeof o->hostport, "%.*s", (int)hp, u);
    /* PREFIX without a trailing slash; "/v1" already there is not doubled */
    char prefix[256] = "";
    if (slash) snprintf(prefix, sizeof prefix, "%s", slash);
    size_t n = strlen(prefix);
    while (n && prefix[n - 1] == '/')
        prefix[--n] = 0;
    if (n >= 3 && !strcmp(prefix + n - 3, "/v1")) prefix[n -= 3] = 0;
    snprintf(o->path, sizeof o->path, "%s/v1/%s", prefix,
             strcmp(o->endpoint, "chat") ? "completions" : "chat/completions");

    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
    int rc = getaddrinfo(o->host, o->port, &hints, &res);
    if (rc) {
        fprintf(stderr, "bench/serve: %s:%s: %s\n", o->host, o->port, gai_strerror(rc));
        return 1;
    }
    memcpy(&o->addr, res->ai_addr, res->ai_addrlen);
    o->addrlen = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
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

typedef struct sbuf {
    char *p; /* owned */
    size_t n, cap;
} sbuf;

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

static int sb_add(sbuf *b, const char *s, size_t n) {
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
static int sb_json(sbuf *b, const char *s) {
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
        if (!sb_add(b, esc, strlen(esc))) return 0;
    }
    return 1;
}

/* The prompt of request REQ of client CLIENT: the shared preamble, then words that differ. */
static int make_prompt(const opts *o, long client, long req, sbuf *out) {
    out->n = 0;
    if (!sb_add(out, o->shared, strlen(o->shared))) return 0;
    uint64_t r = mix64(mix64((uint64_t)o->seed) ^ mix64(((uint64_t)client << 32) ^ (uint64_t)req));
    if (o->n_file_words) {
        size_t at = (size_t)(r % o->n_file_words);
        for (long i = 0; i < o->prompt_words && (size_t)i < o->n_file_words; i++) {
            const char *w = o->file_words[(at + (size_t)i) % o->n_file_words];
            if ((i && !sb_add(out, " ", 1)) || !sb_add(out, w, strlen(w))) return 0;
        }
    } else {
        for (long i = 0; i < o->prompt_words; i++) {
            r = mix64(r);
            const char *w = WORDS[r % N_WORDS];
            if ((i && !sb_add(out, " ", 1)) || !sb_add(out, w, strlen(w))) return 0;
        }
    }
    return 1;
}

static int load_prompt_file(opts *o) {
    FILE *f = fopen(o->prompt_file, "rb");
    if (!f) {
        fprintf(stderr, "bench/serve: --prompt-file %s: %s\n", o->prompt_file, strerror(errno));
        return 0;
    }
    sbuf b = {0};
    char tmp[65536];
    size_t k;
    while ((k = fread(tmp, 1, sizeof tmp, f)) > 0)
        if (!sb_add(&b, tmp, k)) break;
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

static int make_shared(opts *o) {
    sbuf b = {0};
    if (!sb_add(&b, "", 0)) return 0;
    uint64_t r = 0x5eed;
    for (long i = 0; i < o->shared_prefix; i++) {
        r = mix64(r);
        if (!sb_add(&b, WORDS[r % N_WORDS], strlen(WORDS[r % N_WORDS])) || !sb_add(&b, " ", 1))
            return 0;
    }
    o->shared = b.p;
    return 1;
}

static int make_body(const opts *o, const char *prompt, sbuf *out) {
    out->n = 0;
    int ok = sb_add(out, "{", 1);
    if (o->model)
        ok =
            ok && sb_add(out, "\"model\":\"", 9) && sb_json(out, o->model) && sb_add(out, "\",", 2);
    if (!strcmp(o->endpoint, "chat"))
        ok = ok && sb_printf(out, "\"messages\":[{\"role\":\"user\",\"content\":\"") &&
             sb_json(out, "Write a long story with these words: ") && sb_json(out, prompt) &&
             sb_add(out, "\"}],", 4);
    else
        ok =
            ok && sb_add(out, "\"prompt\":\"", 10) && sb_json(out, prompt) && sb_add(out, "\",", 2);
    ok = ok && sb_printf(out,
                         "\"max_tokens\":%ld,\"stream\":true,"
                         "\"stream_options\":{\"include_usage\":true}",
                         o->max_tokens);
    if (o->ignore_eos) ok = ok && sb_printf(out, ",\"ignore_eos\":true");
    if (o->temperature >= 0) ok = ok && sb_printf(out, ",\"temperature\":%g", o->temperature);
    return ok && sb_add(out, "}", 1);
}

// ---- samples ----

typedef struct dvec {
    double *v; /* owned */
    size_t n, cap;
} dvec;

static void dv_push(dvec *d, double x) {
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 256;
        double *t = realloc(d->v, cap * sizeof *t);
        if (!t) return; /* a lost sample, not a wrong one */
        d->v = t;
        d->cap = cap;
    }
    d->v[d->n++] = x;
}

static void dv_append(dvec *d, const dvec *s) {
    for (size_t i = 0; i < s->n; i++)
        dv_push(d, s->v[i]);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile P of D (sorted in place); NAN when empty. */
static double pct(dvec *d, double p) {
    if (!d->n) return NAN;
    qsort(d->v, d->n, sizeof *d->v, cmp_double);
    size_t k = (size_t)ceil(p / 100.0 * (double)d->n);
    return d->v[k ? k - 1 : 0];
}

static double mean(const dvec *d) {
    double s = 0;
    for (size_t i = 0; i < d->n; i++)
        s += d->v[i];
    return d->n ? s / (double)d->n : NAN;
}

typedef struct stats {
    long ok, errors, disconnects, unfinished;
    long long tokens, tokens_ok, prompt_tokens, n_prompt_usage; /* tokens: ok + hung up */
    long long window_events;   /* content events of any request before the deadline */
    dvec ttft, tpot, itl, e2e; /* seconds */
    char first_error[256];
} stats;

// ---- one streamed request ----

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

typedef struct result {
    double t0, t_first, t_last, t_end;
    double deadline; /* in: events after it are not in the window */
    long window_events;
    long events;                 /* content events */
    long long completion_tokens; /* usage, or -1 */
    long long prompt_tokens;     /* usage, or -1 */
    char why[200];
} result;

/* The SSE state of one response: lines gathered into events (`data:` lines joined). */
typedef struct sse {
    sbuf line, data;
    int done, error;
} sse;

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
                dv_push(&st->itl, t - res->t_last);
            res->t_last = t;
            res->events++;
            if (t < res->deadline) res->window_events++;
        }
    }
    s->data.n = 0;
}

/* Feeds body bytes to the SSE parser. */
static void sse_feed(sse *s, const char *p, size_t n, result *res, stats *st) {
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '\n') {
            sb_add(&s->line, p + i, 1);
            continue;
        }
        char *l = s->line.p ? s->line.p : "";
        size_t ln = s->line.n;
        if (ln && l[ln - 1] == '\r') l[--ln] = 0;
        if (!ln) {
            on_event(s, res, st);
        } else if (!strncmp(l, "data:", 5)) {
            const char *v = l + 5 + (l[5] == ' ');
            if (s->data.n) sb_add(&s->data, "\n", 1);
            sb_add(&s->data, v, strlen(v));
        } else if (!strncmp(l, "error:", 6)) { /* not SSE proper; some servers do it */
            s->error = 1;
            snprintf(res->why, sizeof res->why, "%.150s", l);
        }
        s->line.n = 0;
    }
}

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
        sb_add(&head, r->buf + r->pos, r->len - r->pos);
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
                    sb_add(&sizeline, p, take);
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
                if (errbody.n < MAX_ERROR_BODY) sb_add(&errbody, p, take);
                continue;
            }
            sse_feed(&s, p, take, res, st);
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
            sse_feed(&s, "\n\n", 2, res, st); /* a last event without its blank line */
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

typedef struct client {
    const opts *o;
    long id;
    double deadline, hard_stop;
    stats st;
    pthread_t th;
} client;

static void *client_main(void *arg) {
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
        sb_add(&req, "\r\n", 2);
        sb_add(&req, body.p, body.n);
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
            dv_push(&st->ttft, res.t_first - res.t0);
            dv_push(&st->e2e, res.t_end - res.t0);
            if (toks > 1) dv_push(&st->tpot, (res.t_last - res.t_first) / (double)(toks - 1));
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

// ---- report ----

static void json_num(FILE *f, const char *name, double v, const char *fmt) {
    fprintf(f, ",\"%s\":", name);
    if (isnan(v))
        fprintf(f, "null");
    else
        fprintf(f, fmt, v);
}

static void json_str(FILE *f, const char *name, const char *v) {
    sbuf b = {0};
    sb_add(&b, "", 0);
    sb_json(&b, v ? v : "");
    fprintf(f, ",\"%s\":\"%s\"", name, b.p);
    free(b.p);
}

static void report(const opts *o, stats *all, double wall, double drain) {
    double tps = wall > 0 ? (double)all->tokens / wall : 0;
    double wtps = (double)all->window_events / (double)o->seconds;
    double ttft50 = pct(&all->ttft, 50) * 1e3, ttft99 = pct(&all->ttft, 99) * 1e3;
    double tpot50 = pct(&all->tpot, 50) * 1e3, tpot99 = pct(&all->tpot, 99) * 1e3;
    double itl50 = pct(&all->itl, 50) * 1e3, itl99 = pct(&all->itl, 99) * 1e3;
    double e2e50 = pct(&all->e2e, 50), ttft_mean = mean(&all->ttft) * 1e3;
    double prompt_mean =
        all->n_prompt_usage ? (double)all->prompt_tokens / (double)all->n_prompt_usage : NAN;
    if (o->json) {
        FILE *f = stdout;
        fprintf(f, "{\"bench\":\"serve\"");
        json_str(f, "label", o->label);
        json_str(f, "url", o->url);
        json_str(f, "endpoint", o->endpoint);
        fprintf(f,
                ",\"clients\":%ld,\"seconds\":%ld,\"max_tokens\":%ld,\"prompt_words\":%ld,"
                "\"shared_prefix\":%ld,\"disconnect_every\":%ld,\"requests_ok\":%ld,"
                "\"errors\":%ld,\"disconnects\":%ld,\"unfinished\":%ld,\"output_tokens\":%lld,"
                "\"output_tokens_ok\":%lld",
                o->clients, o->seconds, o->max_tokens, o->prompt_words, o->shared_prefix,
                o->disconnect_every, all->ok, all->errors, all->disconnects, all->unfinished,
                all->tokens, all->tokens_ok);
        json_num(f, "wall_s", wall, "%.3f");
        json_num(f, "drain_s", drain, "%.3f");
        json_num(f, "tokens_per_s", tps, "%.2f");
        json_num(f, "window_tokens_per_s", wtps, "%.2f");
        json_num(f, "prompt_tokens_mean", prompt_mean, "%.1f");
        json_num(f, "ttft_ms_p50", ttft50, "%.2f");
        json_num(f, "ttft_ms_p99", ttft99, "%.2f");
        json_num(f, "ttft_ms_mean", ttft_mean, "%.2f");
        json_num(f, "tpot_ms_p50", tpot50, "%.3f");
        json_num(f, "tpot_ms_p99", tpot99, "%.3f");
        json_num(f, "itl_ms_p50", itl50, "%.3f");
        json_num(f, "itl_ms_p99", itl99, "%.3f");
        json_num(f, "e2e_s_p50", e2e50, "%.3f");
        json_str(f, "first_error", all->first_error);
        fprintf(f, "}\n");
        return;
    }
    printf("bench/serve%s%s: http://%s%s, %ld clients, %ld s (+%.1f s drain), max_tokens %ld, "
           "prompt %ld words%s",
           o->label ? " " : "", o->label ? o->label : "", o->hostport, o->path, o->clients,
           o->seconds, drain, o->max_tokens, o->prompt_words, o->prompt_file ? " (file)" : "");
    if (o->shared_prefix) printf(" + %ld shared", o->shared_prefix);
    if (o->disconnect_every) printf(", disconnect every %ld", o->disconnect_every);
    printf("\n");
    printf("  requests    %ld ok, %ld errors, %ld disconnects, %ld unfinished\n", all->ok,
           all->errors, all->disconnects, all->unfinished);
    if (all->first_error[0]) printf("  first error %s\n", all->first_error);
    printf("  tokens      %lld output", all->tokens);
    if (all->ok) printf(" (%.1f per ok request)", (double)all->tokens_ok / (double)all->ok);
    if (all->disconnects) printf(", %lld of them before hang-ups", all->tokens - all->tokens_ok);
    if (!isnan(prompt_mean)) printf(", %.1f prompt tokens per request", prompt_mean);
    printf("\n");
    printf("  throughput  %.2f output tok/s over %.2f s; %.2f tok/s in the first %ld s (text "
           "events)\n",
           tps, wall, wtps, o->seconds);
    printf("  TTFT        p50 %9.2f ms   p99 %9.2f ms   mean %9.2f ms\n", ttft50, ttft99,
           ttft_mean);
    printf("  TPOT        p50 %9.3f ms   p99 %9.3f ms\n", tpot50, tpot99);
    printf("  ITL         p50 %9.3f ms   p99 %9.3f ms\n", itl50, itl99);
    printf("  latency     p50 %9.3f s\n", e2e50);
}

int main(int argc, char **argv) {
    opts o = {.endpoint = "completions",
              .clients = 32,
              .seconds = 60,
              .max_tokens = 128,
              .prompt_words = 256,
              .seed = 1,
              .ignore_eos = 1,
              .temperature = 0};
    if (argc == 1) {
        printf("bench/serve: no --url; nothing to measure (bench/serve.sh starts the servers)\n");
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) {
            o.json = 1;
            continue;
        }
        if (i + 1 >= argc) return bad_usage("%s needs a value", a);
        const char *v = argv[++i];
        long x;
        if (!strcmp(a, "--url"))
            o.url = v;
        else if (!strcmp(a, "--endpoint"))
            o.endpoint = v;
        else if (!strcmp(a, "--prompt-file"))
            o.prompt_file = v;
        else if (!strcmp(a, "--model"))
            o.model = v;
        else if (!strcmp(a, "--api-key"))
            o.api_key = v;
        else if (!strcmp(a, "--label"))
            o.label = v;
        else if (!strcmp(a, "--clients")) {
            if (!parse_long(a, v, 1, 4096, &o.clients)) return 2;
        } else if (!strcmp(a, "--seconds")) {
            if (!parse_long(a, v, 1, 86400, &o.seconds)) return 2;
        } else if (!strcmp(a, "--max-tokens")) {
            if (!parse_long(a, v, 1, 1 << 20, &o.max_tokens)) return 2;
        } else if (!strcmp(a, "--prompt-tokens-approx")) {
            if (!parse_long(a, v, 1, 1 << 20, &o.prompt_words)) return 2;
        } else if (!strcmp(a, "--shared-prefix")) {
            if (!parse_long(a, v, 0, 1 << 20, &o.shared_prefix)) return 2;
        } else if (!strcmp(a, "--disconnect-every")) {
            if (!parse_long(a, v, 0, 1 << 30, &o.disconnect_every)) return 2;
        } else if (!strcmp(a, "--seed")) {
            if (!parse_long(a, v, 0, 0x7fffffffL, &o.seed)) return 2;
        } else if (!strcmp(a, "--ignore-eos")) {
            if (!parse_long(a, v, 0, 1, &x)) return 2;
            o.ignore_eos = (int)x;
        } else if (!strcmp(a, "--temperature")) {
            char *end;
            o.temperature = strtod(v, &end);
            if (end == v || *end) return bad_usage("--temperature '%s': want a number", v);
        } else {
            return bad_usage("unknown option '%s'", a);
        }
    }
    if (!o.url) return bad_usage("--url is required");
    if (strcmp(o.endpoint, "completions") && strcmp(o.endpoint, "chat"))
        return bad_usage("--endpoint '%s': want completions or chat", o.endpoint);
    int rc = parse_url(&o);
    if (rc) return rc;
    if ((o.prompt_file && !load_prompt_file(&o)) || !make_shared(&o)) return 1;
    signal(SIGPIPE, SIG_IGN);

    client *cs = calloc((size_t)o.clients, sizeof *cs);
    if (!cs) return 1;
    double t0 = bench_now(), deadline = t0 + (double)o.seconds;
    double hard_stop = deadline + HARD_CAP_EXTRA_S;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    long started = 0;
    for (long i = 0; i < o.clients; i++) {
        cs[i] = (client){.o = &o, .id = i, .deadline = deadline, .hard_stop = hard_stop};
        if (pthread_create(&cs[i].th, &attr, client_main, &cs[i])) {
            fprintf(stderr, "bench/serve: could not start client %ld\n", i);
            break;
        }
        started++;
    }
    pthread_attr_destroy(&attr);
    stats all = {0};
    for (long i = 0; i < started; i++) {
        pthread_join(cs[i].th, NULL);
        stats *s = &cs[i].st;
        all.ok += s->ok;
        all.errors += s->errors;
        all.disconnects += s->disconnects;
        all.unfinished += s->unfinished;
        all.tokens += s->tokens;
        all.tokens_ok += s->tokens_ok;
        all.window_events += s->window_events;
        all.prompt_tokens += s->prompt_tokens;
        all.n_prompt_usage += s->n_prompt_usage;
        dv_append(&all.ttft, &s->ttft);
        dv_append(&all.tpot, &s->tpot);
        dv_append(&all.itl, &s->itl);
        dv_append(&all.e2e, &s->e2e);
        if (!all.first_error[0] && s->first_error[0])
            memcpy(all.first_error, s->first_error, sizeof all.first_error);
        free(s->ttft.v);
        free(s->tpot.v);
        free(s->itl.v);
        free(s->e2e.v);
    }
    double t_end = bench_now();
    report(&o, &all, t_end - t0, t_end > deadline ? t_end - deadline : 0);
    free(all.ttft.v);
    free(all.tpot.v);
    free(all.itl.v);
    free(all.e2e.v);
    free(cs);
    free(o.file_words);
    free(o.file_text);
    free(o.shared);
    return all.ok > 0 && started == o.clients ? 0 : 1;
}
