/* bench/tokenize.c: single-thread encode throughput on two books, in MB/s (best of several
 * runs), for the Llama 3 tokenizer (tiktoken file) side by side with tiktoken's
 * encode_ordinary, and for Phi-4's Hugging Face tokenizer.json side by side with Hugging
 * Face tokenizers' Tokenizer.encode (split_special_tokens, like meshlm's default), each when
 * its Python package imports (run through popen, same file, timed the same way). Prints
 * figures only: it never fails on speed, only when the data cannot be read.
 * Run from the repository root (make bench does). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "meshlm.h"

#define LLAMA3 "tests/data/tokenizer/llama3/tokenizer.model"
#define PHI4 "tests/data/tokenizer/phi4/tokenizer.json"
#define RUNS 15

static const char *const BOOKS[] = {"tests/data/text/frankenstein.txt",
                                    "tests/data/text/tale-of-two-cities.txt"};
#define N_BOOKS (sizeof BOOKS / sizeof BOOKS[0])

/* The tiktoken side: same file, Meta's pattern, encode_ordinary timed like ours. */
static const char PY_TIKTOKEN[] =
    "import sys, time, tiktoken\n"
    "from tiktoken.load import load_tiktoken_bpe\n"
    "pat = r\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+\"\n"
    "enc = tiktoken.Encoding(name='llama3', pat_str=pat, "
    "mergeable_ranks=load_tiktoken_bpe(sys.argv[1]),"
    " special_tokens={})\n"
    "runs = int(sys.argv[2])\n"
    "for path in sys.argv[3:]:\n"
    "    text = open(path, encoding='utf-8').read()\n"
    "    n = len(text.encode('utf-8'))\n"
    "    best = 1e9\n"
    "    for _ in range(runs):\n"
    "        t0 = time.perf_counter(); ids = enc.encode_ordinary(text); t1 = time.perf_counter()\n"
    "        best = min(best, t1 - t0)\n"
    "    print('%.3f %d' % (n / best / 1e6, len(ids)))\n";

/* The Hugging Face side: tokenizers on the same tokenizer.json, one thread. */
static const char PY_TOKENIZERS[] =
    "import os, sys, time\n"
    "os.environ['RAYON_NUM_THREADS'] = '1'\n"
    "os.environ['TOKENIZERS_PARALLELISM'] = 'false'\n"
    "from tokenizers import Tokenizer\n"
    "tok = Tokenizer.from_file(sys.argv[1])\n"
    "tok.encode_special_tokens = True\n"
    "runs = int(sys.argv[2])\n"
    "for path in sys.argv[3:]:\n"
    "    text = open(path, encoding='utf-8').read()\n"
    "    n = len(text.encode('utf-8'))\n"
    "    best = 1e9\n"
    "    for _ in range(runs):\n"
    "        t0 = time.perf_counter(); ids = tok.encode(text, add_special_tokens=False).ids\n"
    "        t1 = time.perf_counter(); best = min(best, t1 - t0)\n"
    "    print('%.3f %d' % (n / best / 1e6, len(ids)))\n";

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) *len = (size_t)n;
    return buf;
}

/* Runs the Python script PY (needing package PKG) on MODEL and every book; fills MBPS and
 * N_IDS. Returns 0 on success, -1 when the package or the run is unavailable. */
static int run_python(const char *pkg, const char *py, const char *model, double *mbps,
                      int64_t *n_ids) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "python3 -c 'import %s' >/dev/null 2>&1", pkg);
    if (system(cmd) != 0) return -1;
    char script[] = "/tmp/meshlm_bench_tokenize_XXXXXX";
    int fd = mkstemp(script);
    if (fd < 0) return -1;
    size_t len = strlen(py);
    ssize_t w = write(fd, py, len);
    close(fd);
    if (w != (ssize_t)len) {
        unlink(script);
        return -1;
    }
    snprintf(cmd, sizeof cmd, "python3 %s %s %d %s %s 2>&1", script, model, RUNS, BOOKS[0],
             BOOKS[1]);
    FILE *p = popen(cmd, "r");
    int ok = p != NULL;
    for (size_t i = 0; ok && i < N_BOOKS; i++) {
        long long n = 0;
        if (fscanf(p, "%lf %lld", &mbps[i], &n) != 2) ok = 0;
        n_ids[i] = n;
    }
    if (p) pclose(p);
    unlink(script);
    return ok ? 0 : -1;
}

/* Times meshlm's default encode of every book with the tokenizer at MODEL. */
static int run_ours(const char *model, double *mbps, int64_t *n_ids, size_t *bytes) {
    mlm_tokenizer *tok = NULL;
    mlm_error err = {0};
    if (mlm_tokenizer_load(model, &tok, &err) != MLM_OK) {
        fprintf(stderr, "bench tokenize: %s\n", err.msg);
        return -1;
    }
    for (size_t b = 0; b < N_BOOKS; b++) {
        char *text = read_all(BOOKS[b], &bytes[b]);
        if (!text) {
            fprintf(stderr, "bench tokenize: cannot read %s\n", BOOKS[b]);
            mlm_tokenizer_free(tok);
            return -1;
        }
        mlm_tokens ids;
        mlm_tokens_init(&ids);
        double best = 1e30;
        for (int r = 0; r < RUNS; r++) {
            ids.n = 0;
            double t0 = bench_now();
            mlm_status st = mlm_tokenizer_encode(tok, text, bytes[b], NULL, &ids, &err);
            double t1 = bench_now();
            if (st != MLM_OK) {
                fprintf(stderr, "bench tokenize: %s: %s\n", BOOKS[b], err.msg);
                return -1;
            }
            if (t1 - t0 < best) best = t1 - t0;
        }
        mbps[b] = (double)bytes[b] / best / 1e6;
        n_ids[b] = ids.n;
        mlm_tokens_deinit(&ids);
        free(text);
    }
    mlm_tokenizer_free(tok);
    return 0;
}

static int bench(const char *title, const char *model, const char *pkg, const char *py,
                 const char *their_name) {
    double ours[N_BOOKS], theirs[N_BOOKS] = {0};
    int64_t n_ours[N_BOOKS], n_theirs[N_BOOKS] = {0};
    size_t bytes[N_BOOKS];
    if (run_ours(model, ours, n_ours, bytes) != 0) return 1;
    int have = run_python(pkg, py, model, theirs, n_theirs) == 0;
    printf("tokenize: %s, single thread, best of %d runs\n", title, RUNS);
    printf("%-26s %8s %9s %12s %15s %7s\n", "text", "MB", "tokens", "meshlm MB/s", their_name,
           "ratio");
    for (size_t b = 0; b < N_BOOKS; b++) {
        const char *name = strrchr(BOOKS[b], '/') + 1;
        if (have)
            printf("%-26s %8.3f %9lld %12.2f %15.2f %6.2fx%s\n", name, (double)bytes[b] / 1e6,
                   (long long)n_ours[b], ours[b], theirs[b], ours[b] / theirs[b],
                   n_theirs[b] == n_ours[b] ? "" : "  (token counts differ!)");
        else
            printf("%-26s %8.3f %9lld %12.2f %15s %7s\n", name, (double)bytes[b] / 1e6,
                   (long long)n_ours[b], ours[b], "n/a", "-");
    }
    if (!have) printf("(%s not available: python3 -c 'import %s' failed)\n", pkg, pkg);
    return 0;
}

int main(void) {
    int rc = bench("Llama 3 tiktoken file, encode (ordinary)", LLAMA3, "tiktoken", PY_TIKTOKEN,
                   "tiktoken MB/s");
    printf("\n");
    rc |= bench("Phi-4 tokenizer.json, encode (split_special_tokens)", PHI4, "tokenizers",
                PY_TOKENIZERS, "tokenizers MB/s");
    return rc;
}
