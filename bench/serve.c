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
 * exits 0. Exit: 0 when at least one request succeeded, 1 otherwise, 2 usage.
 * This file reads the options and runs the clients; the clients, the SSE reading and the
 * statistics are bench/common/serve_client.c, serve_sse.c and serve_stats.c (serve.h). */
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/serve.h"

#define HARD_CAP_EXTRA_S 60.0

// ---- options ----

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
        "  --response-format JSON     sent as \"response_format\" (structured output)\n"
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
        } else if (!strcmp(a, "--response-format")) {
            o.response_format = v;
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
    if ((o.prompt_file && !serve_load_prompt_file(&o)) || !serve_make_shared(&o)) return 1;
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
        if (pthread_create(&cs[i].th, &attr, serve_client_main, &cs[i])) {
            fprintf(stderr, "bench/serve: could not start client %ld\n", i);
            break;
        }
        started++;
    }
    pthread_attr_destroy(&attr);
    stats all = {0};
    for (long i = 0; i < started; i++) {
        pthread_join(cs[i].th, NULL);
        serve_stats_merge(&all, &cs[i].st);
    }
    double t_end = bench_now();
    serve_report(&o, &all, t_end - t0, t_end > deadline ? t_end - deadline : 0);
    serve_stats_free(&all);
    free(cs);
    free(o.file_words);
    free(o.file_text);
    free(o.shared);
    return all.ok > 0 && started == o.clients ? 0 : 1;
}
