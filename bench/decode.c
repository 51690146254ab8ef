/* bench/decode.c: decode and prefill speed of a Llama 3 model next to the machine's read
 * bandwidth measured in the same run. Prints figures; never fails on speed.
 *
 *   build/bench/decode [MODEL_DIR]
 *
 * Without MODEL_DIR (or $MESHLM_BENCH_MODEL) it writes a synthetic llama-3.2-1b bf16
 * checkpoint (the real config, random weights) to /tmp/meshlm-bench/llama-3.2-1b-bf16 once
 * and reuses it. Environment: MESHLM_BENCH_PREFILL (prompt length, default 512),
 * MESHLM_BENCH_DECODE (tokens, default 64), MESHLM_BENCH_CTX (KV capacity, default 4096). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "meshlm.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && atoi(v) > 0 ? atoi(v) : dflt;
}

/* Read bandwidth: all threads sum a 1 GiB buffer (far larger than the caches) with eight
 * independent integer accumulators, so the adds keep up with memory; best of 5. */
static double read_bandwidth_gbs(void) {
    size_t n = (size_t)1 << 27; /* 2^27 uint64 = 1 GiB */
    uint64_t *buf = malloc(n * sizeof *buf);
    if (!buf) return 0;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) buf[i] = i;
    double best = 0;
    uint64_t sink = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t = now();
        uint64_t total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total)
        for (size_t i = 0; i < n; i += 8) {
            uint64_t s0 = buf[i], s1 = buf[i + 1], s2 = buf[i + 2], s3 = buf[i + 3];
            uint64_t s4 = buf[i + 4], s5 = buf[i + 5], s6 = buf[i + 6], s7 = buf[i + 7];
            total += ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
        }
        t = now() - t;
        sink += total;
        double gbs = (double)(n * sizeof *buf) / t / 1e9;
        if (gbs > best) best = gbs;
    }
    free(buf);
    if (sink == 42) printf(" "); /* keep the sums alive */
    return best;
}

static void progress(void *ctx, int64_t done, int64_t total) {
    (void)ctx;
    if (done == total || done % (256 << 20) < (1 << 20))
        fprintf(stderr, "\rsynth: %lld / %lld MB", (long long)(done >> 20), (long long)(total >> 20));
    if (done == total) fprintf(stderr, "\n");
}

static const char *default_model(void) {
    static const char *dir = "/tmp/meshlm-bench/llama-3.2-1b-bf16";
    char cfg[256];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    struct stat st;
    if (stat(cfg, &st) == 0) return dir;
    mkdir("/tmp/meshlm-bench", 0755);
    mlm_synth_params p = mlm_synth_default_params();
    p.preset = "llama-3.2-1b";
    p.out_dir = dir;
    p.dtype = MLM_DTYPE_BF16;
    p.progress = progress;
    mlm_error err;
    if (mlm_synth(&p, &err) != MLM_OK) {
        fprintf(stderr, "bench/decode: synth failed: %s\n", err.msg);
        return NULL;
    }
    return dir;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : getenv("MESHLM_BENCH_MODEL");
    if (!dir) dir = default_model();
    if (!dir) return 1;
    int n_prefill = env_int("MESHLM_BENCH_PREFILL", 512), n_decode = env_int("MESHLM_BENCH_DECODE", 64);
    int ctx = env_int("MESHLM_BENCH_CTX", 4096);
    if (n_prefill + n_decode + 1 > ctx) ctx = n_prefill + n_decode + 1;

    double bw = read_bandwidth_gbs();
    mlm_error err;
    mlm_model *m = NULL;
    double t = now();
    if (mlm_model_load(dir, NULL, &m, &err) != MLM_OK) {
        fprintf(stderr, "bench/decode: %s\n", err.msg);
        return 1;
    }
    double load_s = now() - t;
    const mlm_config *c = mlm_model_config(m);
    mlm_exec_params ep = mlm_exec_default_params();
    ep.max_seq_len = ctx;
    ep.max_step_tokens = 512;
    mlm_exec *e = NULL;
    if (mlm_exec_create(m, &ep, &e, &err) != MLM_OK) {
        fprintf(stderr, "bench/decode: %s\n", err.msg);
        return 1;
    }
    int32_t *tokens = malloc((size_t)ctx * sizeof *tokens), *pos = malloc((size_t)ctx * sizeof *pos);
    int32_t *seq = calloc((size_t)ctx, sizeof *seq);
    int8_t *want = calloc((size_t)ctx, 1);
    float *logits = malloc((size_t)c->n_vocab * sizeof *logits);
    for (int i = 0; i < ctx; i++) {
        tokens[i] = (int32_t)((i * 7919 + 13) % c->n_vocab);
        pos[i] = i;
    }
    /* prefill */
    t = now();
    for (int i = 0; i < n_prefill; i += 512) {
        int n = n_prefill - i < 512 ? n_prefill - i : 512;
        want[n - 1] = i + n == n_prefill;
        mlm_batch b = {.n = n, .tokens = tokens + i, .seq = seq, .pos = pos + i, .logits = want};
        if (mlm_exec_step(e, &b, logits, &err) != MLM_OK) {
            fprintf(stderr, "bench/decode: %s\n", err.msg);
            return 1;
        }
        want[n - 1] = 0;
    }
    double prefill_s = now() - t;
    /* decode: one token a step (the first step is timed apart, as the demos do) */
    double t_first = 0;
    t = now();
    for (int i = 0; i < n_decode; i++) {
        int8_t one = 1;
        mlm_batch b = {.n = 1, .tokens = tokens + n_prefill + i, .seq = seq, .pos = pos + n_prefill + i,
                       .logits = &one};
        if (mlm_exec_step(e, &b, logits, &err) != MLM_OK) {
            fprintf(stderr, "bench/decode: %s\n", err.msg);
            return 1;
        }
        if (i == 0) t_first = now();
    }
    double decode_s = now() - t_first;
    double tps = n_decode > 1 ? (n_decode - 1) / decode_s : 0;
    double bytes = (double)mlm_model_weight_bytes(m);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("bench/decode: %s (%s kernels, bf16 weights, f32 KV, %d threads)\n", dir,
           mlm_model_kernels(m), threads);
    printf("  machine read bandwidth          %8.2f GB/s (sum over a 1 GiB buffer, best of 5)\n", bw);
    printf("  load                            %8.2f s\n", load_s);
    printf("  prefill %4d tokens              %8.1f tok/s (%.2f s)\n", n_prefill,
           n_prefill / prefill_s, prefill_s);
    printf("  decode batch 1, %3d tokens       %8.2f tok/s\n", n_decode, tps);
    printf("  weight bytes per token          %8.1f MB\n", bytes / 1e6);
    printf("  effective weight read           %8.2f GB/s = %.0f%% of read bandwidth\n",
           bytes * tps / 1e9, bw > 0 ? 100.0 * bytes * tps / 1e9 / bw : 0);
    printf("  peak RSS                        %8.2f GB (KV capacity %d tokens)\n",
           (double)ru.ru_maxrss / 1e6 * 1.024, ctx);
    free(tokens), free(pos), free(seq), free(want), free(logits);
    mlm_exec_free(e);
    mlm_model_free(m);
    return 0;
}
