/* tests/unit/test_pool.c: the worker pool (core/pool.h). Every task of every job runs exactly
 * once and its writes are visible when mlm_pool_run returns, whatever each thread is doing
 * when a job comes: spinning (jobs back to back), yielding or asleep on its futex (jobs
 * milliseconds apart), or running a task long enough that the caller stops pausing and
 * sleeps until a worker wakes it. */
#include <stdatomic.h>
#include <time.h>

#include "core/pool.h"
#include "harness.h"

#define MAX_TASKS 256

typedef struct job {
    _Atomic int runs[MAX_TASKS];
    _Atomic int bad_thread;
    int n_threads;
    long sleep_ns; /* each task sleeps this long */
} job;

static void sleep_ns(long ns) {
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    nanosleep(&ts, NULL);
}

static void task(void *ctx, int64_t i, int thread) {
    job *j = ctx;
    if (thread < 0 || thread >= j->n_threads) atomic_store(&j->bad_thread, 1);
    if (j->sleep_ns) sleep_ns(j->sleep_ns);
    atomic_fetch_add(&j->runs[i], 1);
}

/* Runs N_JOBS jobs of 1..MAX_TASKS tasks on a pool of N_THREADS, GAP_NS apart, each task
 * sleeping TASK_NS; returns the jobs in which some task did not run exactly once. */
static int run_jobs(int n_threads, int n_jobs, long gap_ns, long task_ns) {
    mlm_pool *pool = NULL;
    mlm_error err;
    if (mlm_pool_create(n_threads, &pool, &err) != MLM_OK) {
        printf("  pool: %s\n", err.msg);
        return n_jobs;
    }
    static job j;
    int bad = 0;
    uint32_t seed = 12345;
    for (int g = 0; g < n_jobs; g++) {
        seed = seed * 1103515245u + 12345u;
        int64_t n = 1 + (int64_t)(seed >> 16) % MAX_TASKS;
        for (int i = 0; i < MAX_TASKS; i++) atomic_store(&j.runs[i], 0);
        atomic_store(&j.bad_thread, 0);
        j.n_threads = n_threads, j.sleep_ns = task_ns;
        mlm_pool_run(pool, n, task, &j);
        int ok = !atomic_load(&j.bad_thread);
        for (int64_t i = 0; i < MAX_TASKS; i++) ok &= atomic_load(&j.runs[i]) == (i < n);
        bad += !ok;
        if (gap_ns) sleep_ns(gap_ns);
    }
    mlm_pool_free(pool);
    return bad;
}

TEST(back_to_back_jobs_run_each_task_once) {
    int bad = run_jobs(3, 3000, 0, 0);
    CHECKF(bad == 0, "%d of 3000 jobs ran a task other than once", bad);
}

TEST(jobs_after_the_workers_sleep_run_each_task_once) {
    /* 3 ms apart: past the workers' pauses and yields, so each job wakes them on the futex */
    int bad = run_jobs(3, 40, 3000000L, 0);
    CHECKF(bad == 0, "%d of 40 jobs ran a task other than once", bad);
}

TEST(a_long_task_wakes_the_sleeping_caller) {
    /* 2 ms tasks: the caller, done with its share, pauses past its limit and sleeps until
     * the last worker's task ends */
    int bad = run_jobs(2, 6, 0, 2000000L);
    CHECKF(bad == 0, "%d of 6 jobs ran a task other than once", bad);
}

TEST(a_pool_of_one_runs_tasks_inline) {
    int bad = run_jobs(1, 50, 0, 0);
    CHECKF(bad == 0, "%d of 50 jobs ran a task other than once", bad);
}

int main(void) {
    RUN(back_to_back_jobs_run_each_task_once);
    RUN(jobs_after_the_workers_sleep_run_each_task_once);
    RUN(a_long_task_wakes_the_sleeping_caller);
    RUN(a_pool_of_one_runs_tasks_inline);
    return HARNESS_END();
}
