/* tools/server/server.h: the state `meshlm serve` shares between its parts: the model, the
 * tokenizer and the scheduler it drives (all borrowed from serve.c, which creates them before
 * the HTTP daemon starts and frees them after it stops), the settings every request reads,
 * the list of live jobs (for draining) and the vision encoder's turn. Everything above `mu`
 * is read-only once the daemon runs; the flags are atomics; the job list is guarded by `mu`,
 * the encoder's turn by `vision_mu`. */
#ifndef MESHLM_SERVER_SERVER_H
#define MESHLM_SERVER_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "meshlm.h"
#include "metrics.h"

#define SRV_MAX_STOP_IDS 32

struct srv_job;

typedef struct srv_server {
    const mlm_model *model;  /* borrowed (serve.c) */
    const mlm_tokenizer *tok; /* borrowed (serve.c) */
    mlm_sched *sched;        /* borrowed (serve.c); thread-safe submit/cancel/stats */
    srv_metrics *metrics;    /* borrowed (serve.c) */
    const char *alias;       /* the model's name in requests and responses (borrowed) */
    const char *model_path;  /* the path as given on the command line (borrowed) */
    const char *api_key;     /* NULL: no authentication (borrowed) */
    int32_t max_seq_len;     /* prompt + completion, as the scheduler was created with */
    int32_t max_logprobs;    /* the scheduler's */
    size_t max_body;         /* request body bytes at most */
    size_t detok_cap;        /* room mlm_detok_push needs: 64 + the longest token */
    int64_t start_time;      /* unix seconds */
    mlm_sampler_params defaults; /* mlm_generation_defaults of the model */
    int32_t stop_base[SRV_MAX_STOP_IDS]; /* the config's stop ids (completions) */
    int32_t n_stop_base;
    int32_t stop_chat[SRV_MAX_STOP_IDS]; /* those plus the chat format's end-of-turn ids */
    int32_t n_stop_chat;
    uint8_t *dry_breakers; /* owned by serve.c: DRY's default sequence breakers (a flag a
                              token), for requests that ask for the loop guard */
    int n_threads;       /* --threads (0: all cores): the vision encoder's threads */
    int32_t draft_max;   /* --draft-ngram's tokens per step (0: no speculation) */
    int reasoning;       /* chat replies of a format that thinks (Qwen3) are split into
                            reasoning_content and content (--reasoning-format auto) */
    int32_t max_images;  /* images per chat request (--max-images; 0: none are taken) */
    int32_t image_token; /* mlm_model_image_token: -1 for a model without vision */

    atomic_int draining; /* set on SIGINT/SIGTERM: new requests get 503 */
    atomic_int aborting; /* set before the daemon stops: waits for the engine give up */

    pthread_mutex_t mu;   /* guards jobs, n_jobs */
    struct srv_job *jobs; /* jobs whose HTTP side is not done (not owned: see job.h) */
    int n_jobs;

    /* The vision encoder runs on the HTTP thread of its request, one image at a time over the
     * whole server: the memory plan holds one encoder's scratch, and the encoder already uses
     * every thread it is given. */
    pthread_mutex_t vision_mu; /* guards vision_busy */
    pthread_cond_t vision_cv;  /* signalled when vision_busy drops */
    int vision_busy;

    /* The vocabulary trie of structured output, built on first use (structured.c). */
    pthread_mutex_t trie_mu; /* guards trie */
    mlm_token_trie *trie;    /* owned */
} srv_server;

#endif
