/* bench/common/serve.h: the parts of bench/serve, the load generator for OpenAI-compatible
 * streaming servers, and what they share: the options, a growing text buffer, the samples and
 * per-client statistics, one request's result and the SSE state of its response.
 * bench/serve.c reads the options and runs the clients; serve_client.c makes the prompts and
 * requests and reads each response; serve_sse.c turns a response body into events;
 * serve_stats.c keeps the samples and prints the summary. Each client thread owns its stats;
 * main merges them after joining. Only bench/serve calls these (every bench links them). */
#ifndef MESHLM_BENCH_SERVE_H
#define MESHLM_BENCH_SERVE_H

#include <pthread.h>
#include <stddef.h>
#include <sys/socket.h>

#define DISCONNECT_AFTER 3 /* content events before a --disconnect-every request hangs up */

// ---- options ----

typedef struct opts {
    const char *url, *endpoint, *prompt_file, *model, *api_key, *label;
    long clients, seconds, max_tokens, prompt_words, shared_prefix, disconnect_every, seed;
    int json, ignore_eos;
    double temperature; /* < 0: not sent */
    const char *response_format; /* JSON text sent as "response_format" (NULL: none) */
    /* derived */
    char host[256], port[16], path[512], hostport[300];
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char **file_words; /* owned array; the words point into file_text */
    char *file_text;   /* owned */
    size_t n_file_words;
    char *shared; /* owned: the shared preamble with a trailing space, or "" */
} opts;

// ---- text buffers ----

typedef struct sbuf {
    char *p; /* owned */
    size_t n, cap;
} sbuf;

/* Appends N bytes of S to B (kept NUL-terminated); 0 when out of memory. */
int serve_sb_add(sbuf *b, const char *s, size_t n);

/* Appends S as a JSON string body (no quotes). */
int serve_sb_json(sbuf *b, const char *s);

// ---- samples and statistics ----

typedef struct dvec {
    double *v; /* owned */
    size_t n, cap;
} dvec;

/* Appends X to D; a sample is lost (never a wrong one kept) when out of memory. */
void serve_dv_push(dvec *d, double x);

typedef struct stats {
    long ok, errors, disconnects, unfinished;
    long long tokens, tokens_ok, prompt_tokens, n_prompt_usage; /* tokens: ok + hung up */
    long long window_events;   /* content events of any request before the deadline */
    dvec ttft, tpot, itl, e2e; /* seconds */
    char first_error[256];
} stats;

/* Adds S's counts and samples to ALL and frees S's samples. */
void serve_stats_merge(stats *all, stats *s);

/* Frees S's samples. */
void serve_stats_free(stats *s);

/* Prints the summary of ALL (its samples sorted in place) for a run of WALL seconds, DRAIN of
 * them after the deadline: text, or one JSON line with --json. */
void serve_report(const opts *o, stats *all, double wall, double drain);

// ---- one streamed request ----

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

/* Feeds N body bytes at P to the SSE parser S: each complete event updates RES (and ST's
 * inter-token samples). */
void serve_sse_feed(sse *s, const char *p, size_t n, result *res, stats *st);

// ---- prompts and clients ----

/* Reads --prompt-file into O's words; 0 after a message on stderr. */
int serve_load_prompt_file(opts *o);

/* O's shared preamble (--shared-prefix words and a space each, or ""); 0 when out of memory. */
int serve_make_shared(opts *o);

typedef struct client {
    const opts *o;
    long id;
    double deadline, hard_stop;
    stats st;
    pthread_t th;
} client;

/* A client thread (ARG: its client): requests one after another until its deadline. */
void *serve_client_main(void *arg);

#endif
