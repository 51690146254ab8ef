/* bench/decode.c: decode and prefill speed of a Llama 3 model in each precision profile, next
 * to the machine's read bandwidth measured in the same run. Prints figures; never fails on
 * speed.
 *
 *   build/bench/decode [MODEL_DIR]
 *
 * Without MODEL_DIR (or $MESHLM_BENCH_MODEL) it writes a synthetic checkpoint with the real
 * config of $MESHLM_BENCH_PRESET (default llama-3.2-1b; llama-3.1-8b works too) in bf16 to
 * /tmp/meshlm-bench/<preset>-bf16 once and reuses it. Environment:
 *   MESHLM_BENCH_PROFILES  comma-separated profiles (default performance,accuracy,bf16; a
 *                          GGUF file also takes native)
 *   MESHLM_BENCH_PREFILL   comma-separated prompt lengths (default 128,512,2048; read in
 *                          steps of 2048, the CLI's --prefill-chunk default; mean of 2 runs)
 *   MESHLM_BENCH_DECODE    decode tokens after a 128-token prompt (default 32)
 *   MESHLM_BENCH_THREADS   comma-separated thread counts for the decode table (default 1 and
 *                          all cores): batch-1 decode of MESHLM_BENCH_DECODE tokens after each
 *                          context depth, next to the read bandwidth of as many threads
 *   MESHLM_BENCH_DEPTHS    comma-separated context depths for that table (default 16,512)
 *   MESHLM_BENCH_BATCH     sequences decoding together for the batched row (default 32; 1
 *                          skips it): each gets a 128-token prompt of its own, then
 *                          MESHLM_BENCH_DECODE steps of one token per sequence on all cores;
 *                          aggregate tok/s next to llama-batched-bench's S_TG on the same file
 *   MESHLM_BENCH_REQUANT   0: a GGUF file is run by llama.cpp only as it is, not requantized
 *                          to Q8_0 too (an 8B's Q8_0 copy is 8.5 GB of disk and minutes)
 *   MESHLM_BENCH_PAIRS     N >= 2 (with LLAMA_BENCH): each cell of the decode table and the
 *                          batched row alternates meshlm and llama.cpp N times on the
 *                          GGUF file MESHLM_BENCH_PAIR_WITH (default: MODEL_DIR when it is a
 *                          .gguf) and reports the medians and the median of the N ratios: on
 *                          a shared machine whose bandwidth moves by 10-30% from minute to
 *                          minute, a ratio of runs taken minutes apart is that noise
 * A profile's weight cache is built by the first load if needed (timed apart); the load time
 * reported is a second, warm load that maps it. Decode tok/s excludes the first decode step,
 * as the demos do; effective GB/s = weight bytes read per token x tok/s.
 *
 * With LLAMA_BENCH=path/to/llama-bench, llama.cpp runs on the same weights (exported to GGUF
 * by meshlm, quantized with llama-quantize --pure) in the same run: Q8_0 (8.5 bits/weight)
 * next to the accuracy profile (BFP8, 8.5 bits/weight), Q4_0 next to performance, with the
 * ratios the issue sets targets for. A GGUF model (MODEL_DIR a .gguf file) is run by meshlm
 * itself in each profile and by llama.cpp as the file is and requantized to Q8_0
 * (llama-quantize --allow-requantize --pure); every profile is compared with both. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/bandwidth.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/llamacpp.h"
#include "common/model.h"
#include "meshlm.h"

/* Runs N tokens of sequence 0 from position START in steps of at most STEP (<= 2048, the last
 * asking for logits); returns seconds, or -1. */
static double run(mlm_exec *e, const int32_t *tokens, int32_t start, int n, int step,
                  float *logits) {
    static int32_t pos[2048], seq[2048];
    static int8_t want[2048];
    double t = bench_now();
    for (int i = 0; i < n; i += step) {
        int k = n - i < step ? n - i : step;
        for (int j = 0; j < k; j++) pos[j] = start + i + j, want[j] = 0;
        want[k - 1] = 1;
        mlm_batch b = {.n = k, .tokens = tokens + start + i, .seq = seq, .pos = pos, .logits = want};
        mlm_error err;
        if (mlm_exec_step(e, &b, logits, &err) != MLM_OK) {
            fprintf(stderr, "bench/decode: %s\n", err.msg);
            return -1;
        }
    }
    return bench_now() - t;
}

#define MAX_T 4 /* thread counts in the decode table */
#define MAX_D 4 /* context depths in the decode table */

typedef struct figures {
    double decode_tps, bytes, prefill_tps[16];
    double at[MAX_T][MAX_D]; /* decode tok/s by thread count and context depth */
    double batch_tps;        /* aggregate decode tok/s of the batched row */
    /* paired with llama.cpp (MESHLM_BENCH_PAIRS): its medians and the median ratios */
    int pairs;
    double l_at[MAX_T][MAX_D], r_at[MAX_T][MAX_D], l_batch, r_batch;
} figures;

/* Alternation with llama.cpp: the file, and how many pairs (0: none). */
typedef struct pairing {
    const char *path;
    int n;
} pairing;

#define MAX_PAIRS 16

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* N alternating pairs of meshlm (M) and llama.cpp (L) figures: the medians of each and of
 * the N ratios M / L into *MED_M, *MED_L, *MED_R (M and L are reordered). */
static void pair_medians(double *m, double *l, int n, double *med_m, double *med_l,
                         double *med_r) {
    double r[MAX_PAIRS];
    for (int k = 0; k < n; k++) r[k] = l[k] > 0 ? m[k] / l[k] : 0;
    *med_r = median(r, n), *med_m = median(m, n), *med_l = median(l, n);
}

/* Sequences of the batched row (MESHLM_BENCH_BATCH, default 32; 1 skips it). */
static int batch_size(void) {
    return getenv("MESHLM_BENCH_BATCH") ? atoi(getenv("MESHLM_BENCH_BATCH")) : 32;
}

/* The decode table's rows: thread counts, context depths, each count's read bandwidth. */
typedef struct table {
    int thr[MAX_T], n_thr, depth[MAX_D], n_depth;
    double bw[MAX_T];
} table;

/* Parses a comma-separated list of positive integers into OUT (at most MAX). */
static int parse_list(const char *s, int *out, int max) {
    int n = 0;
    for (const char *p = s; *p && n < max;) {
        int v = atoi(p);
        if (v > 0) out[n++] = v;
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    return n;
}

/* Batch-1 decode tok/s of sequence 0 after a DEPTH-token prompt: N_DECODE steps, the first
 * excluded (as the demos do); 0 on failure. */
static double decode_after(mlm_exec *e, const int32_t *tokens, int depth, int n_decode,
                           float *logits) {
    mlm_error err;
    if (mlm_exec_seq_reset(e, 0, 0, &err) != MLM_OK) return 0;
    if (run(e, tokens, 0, depth, 2048, logits) < 0 || run(e, tokens, depth, 1, 1, logits) < 0)
        return 0;
    double s = 0;
    for (int i = 1; i < n_decode; i++) {
        double t = run(e, tokens, depth + i, 1, 1, logits);
        if (t < 0) return 0;
        s += t;
    }
    return n_decode > 1 && s > 0 ? (n_decode - 1) / s : 0;
}

#define BATCH_PROMPT 128 /* each sequence's prompt in the batched row */

/* Aggregate decode tok/s of N_SEQS sequences stepping together: each gets its own
 * BATCH_PROMPT-token prompt (as many per step as fit in 2048 tokens), then N_DECODE steps of
 * one token per sequence; the first step is excluded, as in decode_after. 0 on failure. */
static double decode_batched(const mlm_model *m, int n_seqs, int n_decode, int n_vocab) {
    mlm_exec_params ep = mlm_exec_default_params();
    ep.max_seqs = n_seqs;
    ep.max_seq_len = BATCH_PROMPT + n_decode + 1;
    ep.max_step_tokens = 2048;
    mlm_exec *e = NULL;
    mlm_error err;
    if (mlm_exec_create(m, &ep, &e, &err) != MLM_OK) {
        fprintf(stderr, "bench/decode: %s\n", err.msg);
        return 0;
    }
    int cap = n_seqs * BATCH_PROMPT;
    int32_t *tok = malloc((size_t)cap * sizeof *tok), *seq = malloc((size_t)cap * sizeof *seq),
            *pos = malloc((size_t)cap * sizeof *pos);
    int8_t *want = malloc((size_t)cap);
    float *logits = malloc((size_t)n_seqs * (size_t)n_vocab * sizeof *logits);
    double s = -1;
    if (!tok || !seq || !pos || !want || !logits) goto done;
    int per_step = 2048 / BATCH_PROMPT;
    for (int first = 0; first < n_seqs; first += per_step) {
        int n = 0;
        for (int q = first; q < n_seqs && q < first + per_step; q++)
            for (int i = 0; i < BATCH_PROMPT; i++, n++) {
                tok[n] = (int32_t)((q * 7919 + i * 104729 + 13) % n_vocab);
                seq[n] = q, pos[n] = i, want[n] = i == BATCH_PROMPT - 1;
            }
        mlm_batch b = {.n = n, .tokens = tok, .seq = seq, .pos = pos, .logits = want};
        if (mlm_exec_step(e, &b, logits, &err) != MLM_OK) goto fail;
    }
    s = 0;
    for (int step = 0; step < n_decode; step++) {
        for (int q = 0; q < n_seqs; q++) {
            tok[q] = (int32_t)((q * 31 + step * 17 + 5) % n_vocab);
            seq[q] = q, pos[q] = BATCH_PROMPT + step, want[q] = 1;
        }
        mlm_batch b = {.n = n_seqs, .tokens = tok, .seq = seq, .pos = pos, .logits = want};
        double t = bench_now();
        if (mlm_exec_step(e, &b, logits, &err) != MLM_OK) goto fail;
        if (step > 0) s += bench_now() - t;
    }
    goto done;
fail:
    fprintf(stderr, "bench/decode: %s\n", err.msg);
    s = -1;
done:
    free(tok), free(seq), free(pos), free(want), free(logits);
    mlm_exec_free(e);
    return s > 0 ? (double)n_seqs * (n_decode - 1) / s : 0;
}

static int bench_profile(const char *dir, const char *profile, double bw, const int *prefills,
                         int n_prefills, int n_decode, const table *tb, const pairing *pr,
                         figures *fig) {
    mlm_error err;
    bench_load ld;
    mlm_model *m = bench_load_warm("bench/decode", dir, profile, &ld);
    if (!m) return 1;
    const mlm_config *c = mlm_model_config(m);
    int ctx = 128 + n_decode + 1;
    for (int i = 0; i < n_prefills; i++) ctx = prefills[i] > ctx ? prefills[i] : ctx;
    for (int i = 0; i < tb->n_depth; i++)
        ctx = tb->depth[i] + n_decode + 1 > ctx ? tb->depth[i] + n_decode + 1 : ctx;
    mlm_exec_params ep = mlm_exec_default_params();
    ep.max_seq_len = ctx;
    ep.max_step_tokens = 2048; /* meshlm's --prefill-chunk default */
    mlm_exec *e = NULL;
    if (mlm_exec_create(m, &ep, &e, &err) != MLM_OK) {
        fprintf(stderr, "bench/decode: %s\n", err.msg);
        mlm_model_free(m);
        return 1;
    }
    int32_t *tokens = malloc((size_t)ctx * sizeof *tokens);
    float *logits = malloc((size_t)c->n_vocab * sizeof *logits);
    for (int i = 0; i < ctx; i++) tokens[i] = (int32_t)((i * 7919 + 13) % c->n_vocab);
    double bytes = (double)mlm_model_weight_bytes(m);
    printf("%s: %s kernels, KV %s; %.1f MB of weights per token\n", profile, mlm_model_kernels(m),
           mlm_dtype_name(mlm_model_kv_dtype(m)), bytes / 1e6);
    if (ld.built) printf("  cache built by the first load  %8.2f s\n", ld.first_s);
    printf("  load (%s)%*s %8.3f s\n", mlm_model_cache_path(m)[0] ? "cache mapped" : "checkpoint",
           mlm_model_cache_path(m)[0] ? 16 : 18, "", ld.load_s);
    /* decode after a 128-token prompt */
    double tps = decode_after(e, tokens, 128, n_decode, logits);
    printf("  decode batch 1                 %8.2f tok/s = %.2f GB/s = %.0f%% of read bandwidth\n",
           tps, bytes * tps / 1e9, bw > 0 ? 100.0 * bytes * tps / 1e9 / bw : 0);
    fig->decode_tps = tps, fig->bytes = bytes;
    for (int i = 0; i < n_prefills; i++) {
        double s = 0; /* the mean of two runs, as llama-bench -r 2 reports */
        for (int rep = 0; rep < 2 && s >= 0; rep++) {
            mlm_exec_seq_reset(e, 0, 0, &err);
            double r = run(e, tokens, 0, prefills[i], 2048, logits);
            s = r < 0 ? -1 : s + r / 2;
        }
        printf("  prefill %5d tokens            %8.1f tok/s (%.2f s, mean of 2)\n", prefills[i],
               s > 0 ? prefills[i] / s : 0, s);
        fig->prefill_tps[i] = s > 0 ? prefills[i] / s : 0;
    }
    mlm_exec_free(e);
    for (int ti = 0; ti < tb->n_thr; ti++) {
        ep.n_threads = tb->thr[ti];
        if (mlm_exec_create(m, &ep, &e, &err) != MLM_OK) {
            fprintf(stderr, "bench/decode: %s\n", err.msg);
            break;
        }
        decode_after(e, tokens, 16, 8, logits); /* warm-up: the new executor's first touches */
        for (int di = 0; di < tb->n_depth; di++) {
            double at = fig->at[ti][di] = decode_after(e, tokens, tb->depth[di], n_decode, logits);
            if (pr->n) { /* alternate: meshlm (the run above first), llama.cpp, meshlm, ... */
                double mt[MAX_PAIRS], l[MAX_PAIRS];
                for (int k = 0; k < pr->n; k++) {
                    mt[k] = k ? decode_after(e, tokens, tb->depth[di], n_decode, logits) : at;
                    l[k] = llamacpp_decode(pr->path, tb->thr[ti], tb->depth[di], n_decode);
                }
                pair_medians(mt, l, pr->n, &fig->at[ti][di], &fig->l_at[ti][di],
                             &fig->r_at[ti][di]);
                at = fig->at[ti][di];
                fig->pairs = pr->n;
            }
            printf("  decode after %5d, %d thread%s  %8.2f tok/s = %.2f GB/s = %.0f%% of %d-thread read bandwidth\n",
                   tb->depth[di], tb->thr[ti], tb->thr[ti] > 1 ? "s" : " ", at, bytes * at / 1e9,
                   tb->bw[ti] > 0 ? 100.0 * bytes * at / 1e9 / tb->bw[ti] : 0, tb->thr[ti]);
        }
        mlm_exec_free(e);
    }
    int n_batch = batch_size();
    if (n_batch > 1) {
        fig->batch_tps = decode_batched(m, n_batch, n_decode, c->n_vocab);
        if (pr->n) {
            int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
            double mb[MAX_PAIRS], l[MAX_PAIRS];
            for (int k = 0; k < pr->n; k++) {
                mb[k] = k ? decode_batched(m, n_batch, n_decode, c->n_vocab) : fig->batch_tps;
                l[k] = llamacpp_batched_decode(pr->path, threads, n_batch, BATCH_PROMPT, n_decode);
            }
            pair_medians(mb, l, pr->n, &fig->batch_tps, &fig->l_batch, &fig->r_batch);
        }
        printf("  decode batch %2d, all threads    %8.2f tok/s in all (%.2f per sequence)\n",
               n_batch, fig->batch_tps, fig->batch_tps / n_batch);
    }
    free(tokens), free(logits);
    mlm_model_free(m);
    return 0;
}

/* The decode table of profile WHAT measured in alternation with llama.cpp on PATH. */
static void paired_table(const char *path, const char *what, const table *tb, const figures *f) {
    printf("meshlm %s against llama.cpp on %s, medians of %d alternating pairs\n", what, path,
           f->pairs);
    for (int ti = 0; ti < tb->n_thr; ti++)
        for (int di = 0; di < tb->n_depth; di++)
            printf("  decode after %5d, %d thread%s  llama.cpp %8.2f tok/s, meshlm %8.2f: %.2fx\n",
                   tb->depth[di], tb->thr[ti], tb->thr[ti] > 1 ? "s" : " ", f->l_at[ti][di],
                   f->at[ti][di], f->r_at[ti][di]);
    if (f->l_batch > 0)
        printf("  decode batch %2d, %d threads     llama-batched-bench %8.2f tok/s, meshlm %8.2f: %.2fx\n",
               batch_size(), (int)sysconf(_SC_NPROCESSORS_ONLN), f->l_batch, f->batch_tps, f->r_batch);
}

/* llama.cpp on the GGUF file PATH at each thread count and depth of the table, next to F
 * (unless F's table was paired: paired_table). */
static void compare_table(const char *path, const char *what, const table *tb, int n_decode,
                          const figures *f) {
    if (f->pairs) return; /* the decode table was measured in alternation: printed apart */
    for (int ti = 0; ti < tb->n_thr; ti++)
        for (int di = 0; di < tb->n_depth; di++) {
            double l = llamacpp_decode(path, tb->thr[ti], tb->depth[di], n_decode);
            printf("  decode after %5d, %d thread%s  llama.cpp %8.2f tok/s, meshlm %s %8.2f: %.2fx\n",
                   tb->depth[di], tb->thr[ti], tb->thr[ti] > 1 ? "s" : " ", l, what,
                   f->at[ti][di], l > 0 ? f->at[ti][di] / l : 0);
        }
    int n_batch = batch_size();
    if (n_batch > 1 && f->batch_tps > 0) {
        int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
        double l = llamacpp_batched_decode(path, threads, n_batch, BATCH_PROMPT, n_decode);
        printf("  decode batch %2d, %d threads     llama-batched-bench %8.2f tok/s, meshlm %s %8.2f: %.2fx\n",
               n_batch, threads, l, what, f->batch_tps, l > 0 ? f->batch_tps / l : 0);
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* each figure as it comes, also into a file: runs are long */
    const char *dir = argc > 1 ? argv[1] : getenv("MESHLM_BENCH_MODEL");
    if (!dir)
        dir = bench_synth_model("bench/decode", getenv("MESHLM_BENCH_PRESET")
                                                    ? getenv("MESHLM_BENCH_PRESET")
                                                    : "llama-3.2-1b");
    if (!dir) return 1;
    const char *profiles = getenv("MESHLM_BENCH_PROFILES") ? getenv("MESHLM_BENCH_PROFILES")
                                                           : "performance,accuracy,bf16";
    const char *pf = getenv("MESHLM_BENCH_PREFILL") ? getenv("MESHLM_BENCH_PREFILL") : "128,512,2048";
    int prefills[16], n_decode = bench_env_int("MESHLM_BENCH_DECODE", 32);
    int n_prefills = parse_list(pf, prefills, 16);
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    const char *how = "";
    double bw = bench_read_bandwidth(threads, &how);
    printf("bench/decode: %s, %d threads\n", dir, threads);
    printf("machine read bandwidth           %8.2f GB/s (1 GiB read, best %s)\n", bw, how);
    table tb = {0};
    char dflt[32];
    snprintf(dflt, sizeof dflt, threads > 1 ? "1,%d" : "%d", threads);
    tb.n_thr = parse_list(getenv("MESHLM_BENCH_THREADS") ? getenv("MESHLM_BENCH_THREADS") : dflt,
                          tb.thr, MAX_T);
    tb.n_depth = parse_list(getenv("MESHLM_BENCH_DEPTHS") ? getenv("MESHLM_BENCH_DEPTHS") : "16,512",
                            tb.depth, MAX_D);
    for (int ti = 0; ti < tb.n_thr; ti++) {
        tb.bw[ti] = tb.thr[ti] == threads ? bw : bench_read_bandwidth(tb.thr[ti], &how);
        printf("read bandwidth, %d thread%s       %8.2f GB/s\n", tb.thr[ti], tb.thr[ti] > 1 ? "s" : " ",
               tb.bw[ti]);
    }
    char list[256];
    snprintf(list, sizeof list, "%s", profiles);
    size_t dl = strlen(dir);
    pairing pr = {getenv("MESHLM_BENCH_PAIR_WITH"), bench_env_int("MESHLM_BENCH_PAIRS", 1)};
    if (!pr.path && dl > 5 && !strcmp(dir + dl - 5, ".gguf")) pr.path = dir;
    if (pr.n > MAX_PAIRS) pr.n = MAX_PAIRS;
    if (pr.n < 2 || !pr.path || !getenv("LLAMA_BENCH")) pr.n = 0;
    int rc = 0;
    figures perf = {0}, acc = {0}, bf = {0}, other = {0};
    const char *other_name = "other"; /* the last profile not named above (native, f32) */
    for (char *save, *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        int named = !strcmp(name, "performance") || !strcmp(name, "accuracy") || !strcmp(name, "bf16");
        if (!named) other_name = name;
        rc |= bench_profile(dir, name, bw, prefills, n_prefills, n_decode, &tb, &pr,
                            !strcmp(name, "performance") ? &perf
                            : !strcmp(name, "accuracy")  ? &acc
                            : !strcmp(name, "bf16")      ? &bf
                                                         : &other);
    }
    const figures *all[4] = {&perf, &acc, &bf, &other};
    const char *all_names[4] = {"performance", "accuracy", "bf16", other_name};
    for (int o = 0; o < 4; o++)
        if (all[o]->pairs) paired_table(pr.path, all_names[o], &tb, all[o]);
    if (getenv("LLAMA_BENCH") && dl > 5 && !strcmp(dir + dl - 5, ".gguf")) {
        const char *q[2] = {"file", "Q8_0"};
        const figures *ours[4] = {&perf, &acc, &bf, &other};
        const char *names[4] = {"performance", "accuracy", "bf16", other_name};
        int n_q = getenv("MESHLM_BENCH_REQUANT") && !strcmp(getenv("MESHLM_BENCH_REQUANT"), "0") ? 1 : 2;
        for (int k = 0; k < n_q; k++) {
            llamacpp_result r = llamacpp_measure(dir, q[k], threads, prefills, n_prefills, n_decode);
            if (!r.ok) continue;
            printf("llama.cpp %s (llama-bench, %d threads); %.1f MB read per token\n",
                   k ? "requantized to Q8_0" : "on the file as it is", threads,
                   r.bytes_per_token / 1e6);
            printf("  decode batch 1                 %8.2f tok/s = %.2f GB/s\n", r.decode_tps,
                   r.bytes_per_token * r.decode_tps / 1e9);
            for (int i = 0; i < n_prefills; i++)
                printf("  prefill %5d tokens            %8.1f tok/s\n", prefills[i], r.prefill_tps[i]);
            for (int o = 0; o < 4; o++) {
                const figures *f = ours[o];
                if (f->decode_tps <= 0) continue;
                printf("  meshlm %s / this: decode %.2fx", names[o], f->decode_tps / r.decode_tps);
                for (int i = 0; i < n_prefills; i++)
                    printf(", prefill %d %.2fx", prefills[i],
                           r.prefill_tps[i] > 0 ? f->prefill_tps[i] / r.prefill_tps[i] : 0);
                printf("\n");
                compare_table(r.path, names[o], &tb, n_decode, f);
            }
        }
    } else if (getenv("LLAMA_BENCH")) {
        /* equal bits: Q8_0 and BFP8 (8.5 bits), BF16 and bf16; Q4_0 (4.5) next to performance */
        const char *q[3] = {"Q8_0", "Q4_0", "bf16"};
        const figures *ours[3] = {&acc, &perf, &bf};
        const char *names[3] = {"accuracy", "performance", "bf16"};
        for (int k = 0; k < 3; k++) {
            if (ours[k]->decode_tps <= 0) continue; /* that profile was not measured */
            llamacpp_result r = llamacpp_measure(dir, q[k], threads, prefills, n_prefills, n_decode);
            if (!r.ok) continue;
            const figures *f = ours[k];
            printf("llama.cpp %s (llama-bench, same weights, %d threads); %.1f MB read per token\n",
                   q[k], threads, r.bytes_per_token / 1e6);
            printf("  decode batch 1                 %8.2f tok/s = %.2f GB/s = %.0f%% of read bandwidth\n",
                   r.decode_tps, r.bytes_per_token * r.decode_tps / 1e9,
                   bw > 0 ? 100.0 * r.bytes_per_token * r.decode_tps / 1e9 / bw : 0);
            for (int i = 0; i < n_prefills; i++)
                printf("  prefill %5d tokens            %8.1f tok/s\n", prefills[i], r.prefill_tps[i]);
            if (f->decode_tps <= 0) continue;
            printf("  meshlm %s / llama.cpp %s: decode %.2fx tok/s, %.2fx effective bytes/s",
                   names[k], q[k], f->decode_tps / r.decode_tps,
                   f->decode_tps * f->bytes / (r.decode_tps * r.bytes_per_token));
            for (int i = 0; i < n_prefills; i++)
                printf(", prefill %d %.2fx", prefills[i],
                       r.prefill_tps[i] > 0 ? f->prefill_tps[i] / r.prefill_tps[i] : 0);
            printf("\n");
            compare_table(r.path, names[k], &tb, n_decode, f);
        }
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("peak RSS                         %8.2f GB\n", (double)ru.ru_maxrss / 1e6 * 1.024);
    return rc;
}
