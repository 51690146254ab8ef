/* sample/sample.c: next-token samplers with explicit RNG state (xoshiro256**, seeded by
 * splitmix64), in Hugging Face's order: temperature, top-k, top-p, then one draw from the
 * renormalized distribution. Greedy (temperature 0) is argmax with ties to the lowest id,
 * like torch.argmax. The same seed and logits give the same token on every run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "meshlm.h"
#include "sample/speculative.h"

mlm_sampler_params mlm_sampler_default_params(void) {
    mlm_sampler_params p = {.temperature = 0, .top_k = 0, .top_p = 1, .seed = 0};
    return p;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(uint64_t s[4]) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform double in [0, 1) with 53 random bits. */
static double next_unit(uint64_t s[4]) { return (double)(next_u64(s) >> 11) * 0x1.0p-53; }

mlm_status mlm_sampler_init(mlm_sampler *s, const mlm_sampler_params *params, int32_t n_vocab,
                            mlm_error *err) {
    memset(s, 0, sizeof *s);
    s->params = params ? *params : mlm_sampler_default_params();
    const mlm_sampler_params *p = &s->params;
    if (!(p->temperature >= 0) || !isfinite(p->temperature))
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "sampler: temperature %g must be >= 0",
                             p->temperature);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "sampler: top_p %g must be in (0, 1]",
                             p->top_p);
    if (p->top_k < 0)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "sampler: top_k %d must be >= 0", p->top_k);
    if (n_vocab < 1) return mlm_error_set(err, MLM_ERR_INVALID_ARG, "sampler: empty vocabulary");
    s->n_vocab = n_vocab;
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    s->probs = malloc((size_t)n_vocab * sizeof *s->probs);
    s->idx = malloc((size_t)n_vocab * sizeof *s->idx);
    if (!s->probs || !s->idx) {
        mlm_sampler_deinit(s);
        return mlm_error_set(err, MLM_ERR_NOMEM, "sampler: out of memory");
    }
    return MLM_OK;
}

void mlm_sampler_deinit(mlm_sampler *s) {
    if (!s) return;
    free(s->probs);
    free(s->idx);
    s->probs = NULL;
    s->idx = NULL;
}

static int32_t argmax(const float *logits, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i; /* strict: ties keep the lowest id */
    return best;
}

/* Descending by value, ties by ascending id, so the order is total and reproducible. */
static int cmp_desc(const void *a, const void *b, void *keys) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    float fx = ((const float *)keys)[x], fy = ((const float *)keys)[y];
    if (fx != fy) return fx > fy ? -1 : 1;
    return (x > y) - (x < y);
}

/* Sorts IDX[0..n) by the keys: a small insertion sort for top-k candidates, qsort beyond. */
static void sort_by(int32_t *idx, int32_t n, const float *keys) {
    for (int32_t i = 1; i < n && n <= 64; i++) {
        int32_t v = idx[i], j = i;
        while (j > 0 && (keys[idx[j - 1]] < keys[v] || (keys[idx[j - 1]] == keys[v] && idx[j - 1] > v))) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = v;
    }
    if (n > 64) qsort_r(idx, (size_t)n, sizeof *idx, cmp_desc, (void *)keys);
}

/* The K-th largest of X[0..n) (1-based K; X is reordered): Hoare's quickselect. */
static float kth_largest(float *x, int32_t n, int32_t k) {
    int32_t lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        float pivot = x[lo + (hi - lo) / 2];
        int32_t i = lo, j = hi;
        while (i <= j) {
            while (x[i] > pivot) i++;
            while (x[j] < pivot) j--;
            if (i <= j) {
                float t = x[i];
                x[i++] = x[j];
                x[j--] = t;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else return x[want];
    }
    return x[lo];
}

/* The W best ids by logit into IDX[0..w), descending, ties to the lower id. Small windows:
 * a sorted window over one pass (an id enters only when it beats the window's last); larger
 * ones: the W-th largest value by quickselect on SCRATCH (n floats), the ids above it, then
 * those equal to it in id order, sorted. */
static void top_window(int32_t *idx, int32_t w, const float *logits, int32_t n, float *scratch) {
    if (w > 64 && scratch) {
        memcpy(scratch, logits, (size_t)n * sizeof *scratch);
        float thr = kth_largest(scratch, n, w);
        int32_t m = 0;
        for (int32_t i = 0; i < n; i++)
            if (logits[i] > thr) idx[m++] = i;
        for (int32_t i = 0; i < n && m < w; i++)
            if (logits[i] == thr) idx[m++] = i;
        sort_by(idx, w, logits);
        return;
    }
    for (int32_t i = 0; i < w; i++) idx[i] = i;
    sort_by(idx, w, logits);
    for (int32_t i = w; i < n; i++) {
        int32_t last = idx[w - 1];
        if (logits[i] <= logits[last]) continue;
        int32_t j = w - 1; /* insert i, dropping the last */
        while (j > 0 && logits[idx[j - 1]] < logits[i]) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = i;
    }
}

/* Top-p over the whole vocabulary (no top-k): the nucleus is almost always within the few
 * best tokens, so they are found in windows of 64, 512, 4096 ids before falling back to a
 * full sort. The kept set is that of the full sort (the same sorted prefix); the total mass
 * is summed in id order. Returns the kept count (as kept_set), or 0 to fall back. */
static int32_t top_p_windowed(mlm_sampler *s, const float *logits, double *mass) {
    const mlm_sampler_params *p = &s->params;
    int32_t n = s->n_vocab;
    float max = logits[0];
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > max) max = logits[i];
    double total = 0;
    for (int32_t i = 0; i < n; i++) total += expf((logits[i] - max) / p->temperature);
    for (int32_t w = 64; w <= 4096 && w < n / 2; w *= 8) {
        top_window(s->idx, w, logits, n, s->probs);
        double cum = 0;
        int32_t keep = 0;
        while (keep < w && (keep == 0 || cum < p->top_p * total)) {
            s->probs[keep] = expf((logits[s->idx[keep]] - max) / p->temperature);
            cum += s->probs[keep++];
        }
        if (keep == w && cum < p->top_p * total) continue; /* the nucleus may go on */
        *mass = cum;
        return keep;
    }
    return 0;
}

/* The ids a draw at temperature > 0 chooses from, in S's scratch: IDX[0..m) and their
 * weights PROBS[0..m) (exp of logit / temperature, less the largest), *MASS their sum in
 * that order; returns m. HF's order: temperature, then top-k, then top-p. */
static int32_t kept_set(mlm_sampler *s, const float *logits, double *mass) {
    const mlm_sampler_params *p = &s->params;
    int32_t n = s->n_vocab;
    if (p->top_p < 1 && (p->top_k == 0 || p->top_k >= n)) {
        int32_t m = top_p_windowed(s, logits, mass);
        if (m > 0) return m;
    }
    /* Candidates: all ids, or the top k (by logit; ties to lower ids, like torch.topk in
     * practice). Selection keeps a sorted window instead of sorting the whole vocabulary. */
    int32_t m = n;
    if (p->top_k > 0 && p->top_k < n) {
        m = p->top_k;
        top_window(s->idx, m, logits, n, s->probs);
    } else {
        for (int32_t i = 0; i < n; i++) s->idx[i] = i;
        if (p->top_p < 1) sort_by(s->idx, n, logits);
    }
    /* Softmax of logits / temperature over the candidates, in double for the sums. */
    float max = logits[s->idx[0]];
    for (int32_t i = 1; i < m; i++)
        if (logits[s->idx[i]] > max) max = logits[s->idx[i]];
    double sum = 0;
    for (int32_t i = 0; i < m; i++) {
        float e = expf((logits[s->idx[i]] - max) / p->temperature);
        s->probs[i] = e;
        sum += e;
    }
    /* top-p: the smallest prefix (candidates sorted by probability) whose mass reaches p;
     * HF keeps a token while the mass before it is below p, and always keeps the first. */
    if (p->top_p < 1) {
        double cum = 0;
        int32_t keep = 0;
        while (keep < m && (keep == 0 || cum < p->top_p * sum)) cum += s->probs[keep++];
        m = keep;
        sum = cum;
    }
    *mass = sum;
    return m;
}

int32_t mlm_sampler_sample(mlm_sampler *s, const float *logits) {
    if (s->params.temperature == 0) return argmax(logits, s->n_vocab);
    double mass;
    int32_t m = kept_set(s, logits, &mass);
    double r = next_unit(s->rng) * mass, acc = 0;
    for (int32_t i = 0; i < m; i++) {
        acc += s->probs[i];
        if (r < acc) return s->idx[i];
    }
    return s->idx[m - 1];
}

void mlm_sampler_dist(mlm_sampler *s, const float *logits, float *p) {
    int32_t n = s->n_vocab;
    memset(p, 0, (size_t)n * sizeof *p);
    if (s->params.temperature == 0) {
        p[argmax(logits, n)] = 1;
        return;
    }
    double mass;
    int32_t m = kept_set(s, logits, &mass);
    for (int32_t i = 0; i < m; i++) p[s->idx[i]] = (float)(s->probs[i] / mass);
}

int32_t mlm_sampler_draw(mlm_sampler *s, const float *p) {
    int32_t n = s->n_vocab, last = 0;
    double total = 0;
    for (int32_t i = 0; i < n; i++) total += p[i];
    double r = next_unit(s->rng) * total, acc = 0;
    for (int32_t i = 0; i < n; i++) {
        if (p[i] <= 0) continue;
        acc += p[i];
        last = i;
        if (r < acc) return i;
    }
    return last;
}

double mlm_sampler_unit(mlm_sampler *s) { return next_unit(s->rng); }

int32_t mlm_logprobs(const float *logits, int32_t n_vocab, int32_t token, int32_t k,
                     double *logprob, int32_t *top_ids, double *top_logprobs) {
    float max = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++)
        if (logits[i] > max) max = logits[i];
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - (double)max);
    double lse = (double)max + log(sum);
    *logprob = (double)logits[token] - lse;
    if (k > n_vocab) k = n_vocab;
    if (k <= 0) return 0;
    top_window(top_ids, k, logits, n_vocab, NULL);
    for (int32_t i = 0; i < k; i++) top_logprobs[i] = (double)logits[top_ids[i]] - lse;
    return k;
}
