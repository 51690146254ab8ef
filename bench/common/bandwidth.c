/* bench/common/bandwidth.c: the read-bandwidth probe (see bandwidth.h). One stream per thread
 * under-measures machines whose cores need several misses in flight to fill the memory bus
 * (decode, which reads several weight streams at once, beat it), so the probe also reads
 * S separate streams per thread, S = 2, 4, 8, and reports the best. The buffer sits on
 * transparent huge pages wherever the weight cache does (core/mapfile.h): on a 2-core Zen 4 VM
 * one thread read 4 KB pages a sixth slower (28-29 GB/s against 34), so the probe would
 * understate what decode can reach. */
#include "bandwidth.h"

#include <emmintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "clock.h"
#include "core/mapfile.h"

typedef struct part {
    const uint64_t *p;
    size_t n; /* uint64 words */
    int streams;
    uint64_t sum;
} part;

static void *read_part(void *arg) {
    part *pt = arg;
    if (pt->streams == 1) { /* the plain sum, two cache lines per step in eight vector adds:
                                on a Zen 4 VM a scalar sum (its accumulators kept in memory)
                                or one line a step read 21-23 GB/s on one core, this 30-34 */
        __m128i a[8];
        for (int k = 0; k < 8; k++) a[k] = _mm_setzero_si128();
        for (size_t i = 0; i + 16 <= pt->n; i += 16)
            for (int k = 0; k < 8; k++)
                a[k] = _mm_add_epi64(a[k], _mm_load_si128((const __m128i *)(pt->p + i) + k));
        uint64_t out[2], total = 0;
        for (int k = 0; k < 8; k++) {
            memcpy(out, &a[k], sizeof out);
            total += out[0] + out[1];
        }
        pt->sum = total;
        return NULL;
    }
    /* S streams over S equal slices, 64 bytes of each per step */
    size_t len = pt->n / (size_t)pt->streams / 8 * 8;
    __m128i acc[8];
    for (int k = 0; k < 8; k++) acc[k] = _mm_setzero_si128();
    for (size_t i = 0; i < len; i += 8)
        for (int s = 0; s < pt->streams; s++) {
            const __m128i *q = (const __m128i *)(pt->p + (size_t)s * len + i);
            acc[(2 * s) % 8] = _mm_add_epi64(acc[(2 * s) % 8], _mm_add_epi64(_mm_load_si128(q), _mm_load_si128(q + 1)));
            acc[(2 * s + 1) % 8] = _mm_add_epi64(acc[(2 * s + 1) % 8], _mm_add_epi64(_mm_load_si128(q + 2), _mm_load_si128(q + 3)));
        }
    uint64_t out[2], total = 0;
    for (int k = 0; k < 8; k++) {
        memcpy(out, &acc[k], sizeof out);
        total += out[0] + out[1];
    }
    pt->sum = total;
    return NULL;
}

static double run(const uint64_t *buf, size_t n, int n_threads, int streams) {
    part parts[64];
    pthread_t th[64];
    if (n_threads > 64) n_threads = 64;
    size_t per = n / (size_t)n_threads / 64 * 64;
    double t = bench_now();
    for (int i = 0; i < n_threads; i++) {
        parts[i] = (part){buf + (size_t)i * per, per, streams, 0};
        if (i) pthread_create(&th[i], NULL, read_part, &parts[i]);
    }
    read_part(&parts[0]);
    for (int i = 1; i < n_threads; i++) pthread_join(th[i], NULL);
    t = bench_now() - t;
    uint64_t sink = 0;
    for (int i = 0; i < n_threads; i++) sink += parts[i].sum;
    if (sink == 42) t += 1e-12; /* keep the sums alive */
    return (double)(per * (size_t)n_threads * sizeof *buf) / t / 1e9;
}

void *bench_weights_alloc(size_t bytes) {
    const size_t huge = (size_t)2 << 20;
    size_t n = (bytes + huge - 1) / huge * huge;
    void *p = aligned_alloc(huge, n ? n : huge);
    if (!p) return NULL;
    if (mlm_mapfile_memory_wanted(n)) madvise(p, n, MADV_HUGEPAGE);
    memset(p, 0, n);
    return p;
}

double bench_read_bandwidth(int n_threads, const char **how) {
    static const char *names[] = {"1 stream/thread", "2 streams/thread", "4 streams/thread",
                                  "8 streams/thread"};
    size_t n = (size_t)1 << 27; /* 1 GiB of uint64 */
    uint64_t *buf = bench_weights_alloc(n * sizeof *buf);
    if (!buf) return 0;
    for (size_t i = 0; i < n; i++) buf[i] = i;
    double best = 0;
    int which = 0;
    for (int k = 0; k < 4; k++)
        for (int rep = 0; rep < 3; rep++) {
            double g = run(buf, n, n_threads, 1 << k);
            if (g > best) best = g, which = k;
        }
    free(buf);
    if (how) *how = names[which];
    return best;
}
