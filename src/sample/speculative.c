/* sample/speculative.c: the acceptance test of speculative sampling (see speculative.h). */
#include "sample/speculative.h"

int32_t mlm_spec_verify(mlm_sampler *s, const float *logits, const float *q, int32_t x,
                        float *scratch) {
    float *p = scratch;
    int32_t n = s->n_vocab;
    mlm_sampler_dist(s, logits, p);
    double u = mlm_sampler_unit(s);
    /* u < P[X] / Q[X], without the division (Q[X] > 0: X was drawn from Q) */
    if (u * (double)q[x] < (double)p[x]) return x;
    double left = 0;
    for (int32_t i = 0; i < n; i++) {
        float r = p[i] - q[i];
        p[i] = r > 0 ? r : 0;
        left += p[i];
    }
    /* P == Q up to rounding (then a rejection is all but impossible): draw from P, where X
     * may come out again, and is then as good as kept */
    if (!(left > 0)) mlm_sampler_dist(s, logits, p);
    return mlm_sampler_draw(s, p);
}
