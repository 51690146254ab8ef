/* core/pool.c: the worker pool (see pool.h).
 *
 * A job lives in one of two slots (job g in slot g % 2) so the caller can publish the next
 * job while a late worker still looks at the last one. Task claims go through one 64-bit
 * word per slot holding (generation, next task index): a worker claims with a CAS that
 * names the generation it read the job for, so a worker that was asleep through a job never
 * runs a task of a newer job with an older job's function. The caller waits only for the
 * tasks to finish (a count), never for the workers to notice. */
#include "core/pool.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PAUSE() _mm_pause()
#else
#define PAUSE() ((void)0)
#endif

/* How long threads wait before sleeping on a futex (a wake-up is a system call for the waker
 * and tens of microseconds for the sleeper on a virtual machine). Measured on AMD Zen 4 (EPYC
 * 9004, 2 cores, a pause there is 25 ns), decode on two threads, alternating runs:
 *   a worker between jobs: SPINS pauses (5 us), then up to YIELDS sched_yield calls (about
 *     0.5 ms on an idle core), then sleep. The caller's own work between products (norms,
 *     activation quantization) outlasts 5 us, so the 8B's worker slept and was woken about
 *     200 times a token; yielding keeps it awake through them (230 context switches in 32
 *     tokens instead of 6,600) while a busy core still gets its share: with `yes` on one of
 *     the two cores, pausing 500 us instead of yielding cost 25% of decode speed (1B Q4_K_M,
 *     32 -> 24.7 tok/s), yielding nothing (31.4);
 *   the caller waiting for the workers' last tasks: CALLER_SPINS pauses (0.5 ms), then sleep.
 *     Its wait is on the critical path of every product, and the worker it waits for is
 *     running, so pausing costs nothing a busy core needs (1B: 45 -> 53 tok/s quiet, level
 *     with `yes`). */
#define SPINS 200
#define YIELDS 1000
#define CALLER_SPINS 20000

typedef struct slot {
    _Atomic uint64_t claim; /* generation << 32 | next task index */
    _Atomic(mlm_task_fn) fn;
    _Atomic(void *) ctx;
    _Atomic int64_t n_tasks;
} slot;

typedef struct worker {
    mlm_pool *pool;
    int index;
    pthread_t th;
} worker;

struct mlm_pool {
    int n_threads;
    worker *workers;
    slot slots[2];
    _Atomic uint32_t gen;       /* the latest job's generation; workers sleep on it */
    _Atomic uint32_t remaining; /* tasks of the current job not finished; the caller sleeps on it */
    _Atomic int caller_sleeps, workers_sleep, stop;
};

static void futex_wait(_Atomic uint32_t *addr, uint32_t expected) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr, int n) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* Runs tasks of job GEN (in slot S) until none are left. */
static void work(mlm_pool *p, slot *s, uint32_t gen, int thread) {
    mlm_task_fn fn = atomic_load(&s->fn);
    void *ctx = atomic_load(&s->ctx);
    int64_t n = atomic_load(&s->n_tasks);
    uint64_t c = atomic_load(&s->claim);
    for (;;) {
        if ((uint32_t)(c >> 32) != gen || (int64_t)(uint32_t)c >= n) return;
        if (!atomic_compare_exchange_weak(&s->claim, &c, c + 1)) continue;
        fn(ctx, (int64_t)(uint32_t)c, thread);
        if (atomic_fetch_sub(&p->remaining, 1) == 1 && atomic_load(&p->caller_sleeps))
            futex_wake(&p->remaining, 1);
        c = atomic_load(&s->claim);
    }
}

static void *worker_main(void *arg) {
    worker *w = arg;
    mlm_pool *p = w->pool;
    uint32_t seen = atomic_load(&p->gen);
    for (;;) {
        uint32_t g = atomic_load(&p->gen);
        for (int i = 0; g == seen && i < SPINS; i++) {
            PAUSE();
            g = atomic_load(&p->gen);
        }
        for (int i = 0; g == seen && i < YIELDS; i++) {
            sched_yield();
            g = atomic_load(&p->gen);
        }
        if (g == seen) {
            atomic_fetch_add(&p->workers_sleep, 1);
            g = atomic_load(&p->gen);
            if (g == seen && !atomic_load(&p->stop)) futex_wait(&p->gen, seen);
            atomic_fetch_sub(&p->workers_sleep, 1);
            g = atomic_load(&p->gen);
        }
        if (atomic_load(&p->stop)) return NULL;
        if (g == seen) continue;
        seen = g;
        work(p, &p->slots[g & 1], g, w->index);
    }
}

int mlm_cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

mlm_status mlm_pool_create(int n_threads, mlm_pool **out, mlm_error *err) {
    *out = NULL;
    if (n_threads < 1) n_threads = 1;
    mlm_pool *p = calloc(1, sizeof *p);
    if (!p) return mlm_error_set(err, MLM_ERR_NOMEM, "thread pool: out of memory");
    p->n_threads = n_threads;
    p->workers = calloc((size_t)n_threads, sizeof *p->workers);
    if (!p->workers) {
        free(p);
        return mlm_error_set(err, MLM_ERR_NOMEM, "thread pool: out of memory");
    }
    for (int i = 1; i < n_threads; i++) {
        p->workers[i].pool = p;
        p->workers[i].index = i;
        int rc = pthread_create(&p->workers[i].th, NULL, worker_main, &p->workers[i]);
        if (rc) {
            p->n_threads = i; /* join the ones started */
            mlm_pool_free(p);
            return mlm_error_set(err, MLM_ERR_INTERNAL,
                                 "thread pool: cannot start thread %d of %d: %s", i, n_threads,
                                 strerror(rc));
        }
    }
    *out = p;
    return MLM_OK;
}

void mlm_pool_free(mlm_pool *p) {
    if (!p) return;
    atomic_store(&p->stop, 1);
    atomic_fetch_add(&p->gen, 1);
    futex_wake(&p->gen, p->n_threads);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->workers[i].th, NULL);
    free(p->workers);
    free(p);
}

int mlm_pool_threads(const mlm_pool *p) { return p ? p->n_threads : 1; }

void mlm_pool_run(mlm_pool *p, int64_t n_tasks, mlm_task_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int64_t i = 0; i < n_tasks; i++) fn(ctx, i, 0);
        return;
    }
    uint32_t g = atomic_load(&p->gen) + 1;
    slot *s = &p->slots[g & 1];
    /* the claim word first: a late worker of an older job in this slot now fails its CAS */
    atomic_store(&s->claim, (uint64_t)g << 32);
    atomic_store(&s->fn, fn);
    atomic_store(&s->ctx, ctx);
    atomic_store(&s->n_tasks, n_tasks);
    atomic_store(&p->remaining, (uint32_t)n_tasks);
    atomic_store(&p->gen, g);
    if (atomic_load(&p->workers_sleep)) futex_wake(&p->gen, p->n_threads);
    work(p, s, g, 0);
    uint32_t left = atomic_load(&p->remaining);
    for (int i = 0; left && i < CALLER_SPINS; i++) {
        PAUSE();
        left = atomic_load(&p->remaining);
    }
    while (left) {
        atomic_store(&p->caller_sleeps, 1);
        left = atomic_load(&p->remaining);
        if (left) futex_wait(&p->remaining, left);
        atomic_store(&p->caller_sleeps, 0);
        left = atomic_load(&p->remaining);
    }
}
