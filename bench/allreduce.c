/* bench/allreduce.c: the mesh's collectives by themselves, under mpirun: meshlm's fixed-order
 * all-reduce (mlm_comm_allreduce_sum) of one decode token's hidden state for the real models'
 * widths (2048: 1B, 3072: 3B, 4096: 8B, 5120: Phi-4, 8192: 70B) and of a prefill chunk, and
 * the all-gather of the K-chunk partials of wo and w2 that the exact mesh runs instead (issue
 * 22: every chunk's partial to every rank, summed there in chunk order), and
 * the gather of one token's logits (128256 / TP floats per rank), each after a barrier so no
 * rank waits for another's compute. Prints microseconds per call (median of the runs) and
 * the bytes each rank sends. Alone it says how to run it and exits 0.
 *
 *   mpirun -np 2 build/bench/allreduce [--iters 2000] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "meshlm.h"

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int iters = 2000;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--iters")) iters = atoi(argv[++i]);
    if (iters < 10) iters = 10;
    mlm_comm *w = NULL;
    mlm_error err = {0};
    if (mlm_comm_world(&w, &err)) {
        fprintf(stderr, "allreduce: %s\n", err.msg);
        return 1;
    }
    int rank = mlm_comm_rank(w), size = mlm_comm_size(w);
    if (size == 1) {
        printf("bench/allreduce: one process; run it as mpirun -np 2 build/bench/allreduce\n");
        mlm_comm_free(w);
        return 0;
    }
    static const int widths[] = {2048, 3072, 4096, 5120, 8192, 2048 * 256};
    float *buf = malloc((size_t)2048 * 256 * sizeof *buf);
    double *t = malloc((size_t)iters * sizeof *t);
    if (!buf || !t) return 1;
    if (rank == 0)
        printf("== bench/allreduce: %d ranks (%s), %d calls each, median us per call\n", size,
               mlm_comm_kind(w), iters);
    for (size_t k = 0; k < sizeof widths / sizeof *widths; k++) {
        int n = widths[k], its = n > 100000 ? iters / 20 : iters;
        for (int i = 0; i < its; i++) {
            for (int j = 0; j < n; j += 97)
                buf[j] = (float)(rank + i + j);
            mlm_comm_barrier(w, NULL);
            double t0 = bench_now();
            if (mlm_comm_allreduce_sum(w, buf, n, &err)) mlm_comm_abort(w, 1);
            t[i] = (bench_now() - t0) * 1e6; /* us */
        }
        qsort(t, (size_t)its, sizeof *t, cmp);
        if (rank == 0)
            printf("  all-reduce %7d floats (%s) %9.1f us, %zu bytes sent per rank\n", n,
                   n > 100000 ? "a 256-token prefill of 2048" : "one token's hidden state",
                   t[its / 2], (size_t)n * 4 * 2 * (size_t)(size - 1) / (size_t)size);
    }
    /* What the exact mesh runs after wo and w2 instead of the all-reduce: every rank's K-chunk
     * partials to every rank (8 chunks for Llama 3, 10 for Phi-4, split over the ranks), for
     * one decode token and a 256-token prefill of the 1B */
    static const struct {
        int width, tokens, chunks;
        const char *what;
    } parts[] = {{2048, 1, 8, "1B"}, {4096, 1, 8, "8B"}, {5120, 1, 10, "Phi-4"},
                 {8192, 1, 8, "70B"}, {2048, 256, 8, "1B, 256-token prefill"}};
    size_t pmax = (size_t)2048 * 256 * 8;
    float *pall = malloc(pmax * sizeof *pall), *pmine = malloc(pmax * sizeof *pmine);
    size_t *pcounts = malloc((size_t)size * sizeof *pcounts);
    if (!pall || !pmine || !pcounts) return 1;
    memset(pmine, 0, pmax * sizeof *pmine);
    for (size_t k = 0; k < sizeof parts / sizeof *parts; k++) {
        if (parts[k].chunks % size) continue; /* TP must divide the chunks */
        size_t mine = (size_t)parts[k].width * (size_t)parts[k].tokens * (size_t)(parts[k].chunks / size);
        int its = parts[k].tokens > 1 ? iters / 20 : iters;
        for (int r = 0; r < size; r++) pcounts[r] = mine * sizeof(float);
        for (int i = 0; i < its; i++) {
            mlm_comm_barrier(w, NULL);
            double t0 = bench_now();
            if (mlm_comm_allgatherv(w, pmine, pall, pcounts, &err)) mlm_comm_abort(w, 1);
            t[i] = (bench_now() - t0) * 1e6; /* us */
        }
        qsort(t, (size_t)its, sizeof *t, cmp);
        if (rank == 0)
            printf("  all-gather of %d chunks' partials (%s, %d x %d) %9.1f us, %zu bytes sent "
                   "per rank\n",
                   parts[k].chunks, parts[k].what, parts[k].tokens, parts[k].width, t[its / 2],
                   mine * 4 * (size_t)(size - 1));
    }
    free(pall), free(pmine), free(pcounts);
    /* one token's logits: each rank's vocabulary slice to every rank */
    int V = 128256, part = (V + size - 1) / size;
    size_t *counts = malloc((size_t)size * sizeof *counts);
    float *all = malloc((size_t)part * (size_t)size * sizeof *all);
    for (int r = 0; r < size; r++)
        counts[r] = (size_t)part * sizeof(float);
    for (int i = 0; i < iters; i++) {
        mlm_comm_barrier(w, NULL);
        double t0 = bench_now();
        if (mlm_comm_allgatherv(w, buf, all, counts, &err)) mlm_comm_abort(w, 1);
        t[i] = (bench_now() - t0) * 1e6; /* us */
    }
    qsort(t, (size_t)iters, sizeof *t, cmp);
    if (rank == 0)
        printf("  gather of one token's logits (%d of 128256 per rank) %9.1f us\n", part,
               t[iters / 2]);
    free(buf), free(t), free(counts), free(all);
    mlm_comm_free(w);
    return 0;
}
