/* core/pool.h: a pool of persistent worker threads for the forward pass. The caller runs a
 * job of N tasks with the workers: tasks are handed out one at a time (first come, first
 * served), so a thread that the OS delays holds back at most the task it is running. Idle
 * workers spin briefly, then yield their core for a while, then sleep on a futex, so an
 * otherwise busy machine loses no more than its share (pool.c has the measurements). Not
 * reentrant: one job at a time, from one thread of control. Owns its threads; mlm_pool_free
 * joins them. */
#ifndef MESHLM_CORE_POOL_H
#define MESHLM_CORE_POOL_H

#include <stdint.h>

#include "meshlm.h"

typedef struct mlm_pool mlm_pool;

/* Runs task TASK of a job; THREAD is 0 for the caller and 1..n-1 for the workers (for
 * per-thread scratch). */
typedef void (*mlm_task_fn)(void *ctx, int64_t task, int thread);

/* A pool of N_THREADS threads in all: the caller and N_THREADS - 1 workers. */
mlm_status mlm_pool_create(int n_threads, mlm_pool **out, mlm_error *err);
void mlm_pool_free(mlm_pool *pool);
int mlm_pool_threads(const mlm_pool *pool);

/* Runs FN(CTX, i, thread) for every i in [0, N_TASKS) and returns when all have finished.
 * With one task, or a pool of one thread, the caller runs everything itself. */
void mlm_pool_run(mlm_pool *pool, int64_t n_tasks, mlm_task_fn fn, void *ctx);

/* Online CPUs this process may run on (sched_getaffinity), at least 1. */
int mlm_cpu_count(void);

#endif
