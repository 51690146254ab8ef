/* tools/server/job.h: one HTTP generation request while it runs: its choices (one scheduler
 * request each), the text and logprobs the engine callback gathers for them, and the
 * mutex/condvar the HTTP thread waits on. The engine callback only copies data (detokenizes,
 * matches stop strings, records logprobs) and signals; it does no I/O and never blocks on
 * anything but the job's own mutex, which HTTP threads hold only briefly.
 *
 * Ownership: a job is freed when its reference count reaches 0: one reference for the HTTP
 * side (dropped by srv_job_release) and one for each submitted choice until its final event.
 * The job owns a chat request's images (the scheduler borrows them until the final events),
 * so they are freed with it on every path. Never call mlm_sched_cancel while holding a job's
 * mutex. */
#ifndef MESHLM_SERVER_JOB_H
#define MESHLM_SERVER_JOB_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "meshlm.h"
#include "request.h"
#include "server.h"

/* One generated token: its place in the choice's text (bytes [off, off + len), code points
 * from cp_off) and, with logprobs, its log-probability (the top ones live in the choice). */
typedef struct srv_tok {
    int32_t id;
    float logprob;
    size_t off, len;
    int64_t cp_off;
} srv_tok;

typedef struct srv_choice {
    struct srv_job *job; /* borrowed back pointer */
    int index;
    uint64_t id;    /* the scheduler's id; 0 until submitted */
    int submitted;  /* holds a reference until done */
    int done;       /* the final event arrived */
    mlm_detok detok;
    char *text;     /* owned; LEN bytes of output text (a stop string cut off), CAP allocated */
    size_t len, cap;
    size_t safe;    /* bytes of TEXT that can be shown: the rest may begin a stop string */
    int cut;        /* a stop string matched: TEXT ends before it, later tokens are ignored */
    int64_t n_cp;   /* code points in TEXT */
    srv_tok *toks;  /* owned; N_TOKS tokens that gave text (stop ids are not listed) */
    int64_t n_toks, cap_toks;
    int32_t *top_ids; /* owned; with top_k > 0: TOP_K per token, N_TOP[i] of them valid */
    float *top_lp;
    int8_t *n_top;
    mlm_finish finish;
    char error[256];  /* MLM_FINISH_ERROR: the scheduler's message */
    int32_t n_prompt, n_cached, n_generated;
    int64_t n_events; /* token events, stop ids included */
    double t_submit, t_first, t_last;
    /* HTTP side only (streaming): what has been sent */
    size_t sent;
    int64_t toks_sent;
    int finish_sent;
} srv_choice;

typedef struct srv_job {
    srv_server *srv;     /* borrowed */
    pthread_mutex_t mu;  /* guards the choices' engine-written fields, refs, n_done */
    pthread_cond_t cv;   /* signalled on every event */
    int refs;
    int n_choices;
    int n_per_prompt;    /* the request's n: choices I .. I + n - 1 share a prompt */
    srv_choice *choices; /* owned, N_CHOICES */
    int n_submitted, n_done;
    int logprobs;        /* 0: none; 1: record logprobs with TOP_K alternatives */
    int top_k;
    char *stop[4];       /* owned copies of the stop strings */
    size_t stop_len[4];
    int n_stop;
    srv_kind kind;
    int reasoning;       /* a chat reply's <think> block is reasoning_content (server.h) */
    int stream, include_usage;
    char id[48];         /* "chatcmpl-<hex>" / "cmpl-<hex>" */
    int64_t created;
    int fd;              /* the client's socket, for disconnect checks (-1: unknown) */
    double t_start;      /* when set (> 0): the choices' latencies count from it (an image
                            request's arrival, before its images are encoded) */
    mlm_image **images;  /* owned, N_IMAGES (Llama 3.2 Vision); freed with the job */
    int n_images;
    int cancelled;               /* srv_job_cancel ran: later submissions are refused */
    /* structured output and tool calls (structured.c) */
    mlm_grammar *grammar;        /* owned; NULL: free text */
    mlm_matcher **matchers;      /* owned, N_CHOICES (NULL entries without a grammar) */
    char *tools;                 /* owned: the request's tools as JSON text when calls are
                                    parsed from the replies (tool_choice not none) */
    mlm_chat_kind tool_kind;     /* the chat format the calls are written in; MLM_CHAT_NONE:
                                    replies are not parsed for calls */
    uint64_t rng;                /* for the calls' ids */
    struct srv_job *next, *prev; /* in srv->jobs while the HTTP side holds it */
} srv_job;

/* A job for request R (its kind, stream flags, stop strings and logprobs) with N_CHOICES
 * choices, listed in SRV's live jobs. NULL when out of memory. */
srv_job *srv_job_create(srv_server *srv, const srv_request *r, int n_choices);

/* Submits choice I with REQ's prompt, limits, sampling and images (its callback and user are
 * set here). On success the choice holds a reference until its final event. The scheduler's
 * status otherwise (CAPACITY, INVALID_ARG with ERR's message); CANCELLED when the job was
 * cancelled before (the server stopping while the images were encoded). */
mlm_status srv_job_submit(srv_job *job, int i, mlm_request_params *req, mlm_error *err);

/* Cancels every submitted choice that has not finished (final events follow) and refuses
 * later submissions. */
void srv_job_cancel(srv_job *job);

/* Waits until choice I has its first event (its prompt is computed) or has finished. Returns
 * 1 then; 0 when the client went away (every choice is cancelled) or the server is stopping. */
int srv_job_wait_started(srv_job *job, int i);

/* Waits until every submitted choice has finished. Returns 1 then; 0 when the client went
 * away (every choice is cancelled) or the server is stopping. */
int srv_job_wait(srv_job *job);

/* The HTTP side is done with JOB: unfinished choices are cancelled, the job leaves the live
 * list and is freed once the last final event has arrived. NULL is a no-op. */
void srv_job_release(srv_job *job);

/* Cancels every live job of SRV (shutdown). */
void srv_jobs_cancel_all(srv_server *srv);
/* Live jobs (HTTP side not done). */
int srv_jobs_count(srv_server *srv);

/* Whether the peer of socket FD has closed it (a pending request byte does not count). */
int srv_fd_closed(int fd);
/* Waits on J's condition variable (J->mu held) until signalled or MS milliseconds pass. */
void srv_job_wait_ms(srv_job *j, int ms);

/* Seconds from a monotonic clock. */
double srv_now(void);

#endif
