/* sample/speculative.h: what speculative sampling needs of a sampler (the scheduler's draft
 * model verifies sampled drafts with it): the distribution mlm_sampler_sample draws from, as
 * dense probabilities, a draw from such a vector, and the acceptance test that keeps the
 * target's distribution exactly (Leviathan et al. 2023; Chen et al. 2023). */
#ifndef MESHLM_SAMPLE_SPECULATIVE_H
#define MESHLM_SAMPLE_SPECULATIVE_H

#include "meshlm.h"

/* P (n_vocab floats) = the probabilities mlm_sampler_sample gives each id for LOGITS under
 * S's temperature, top-k and top-p (0 outside the kept set; one-hot at the argmax for
 * temperature 0). Uses S's scratch, not its RNG. */
void mlm_sampler_dist(mlm_sampler *s, const float *logits, float *p);
/* An id drawn from P (n_vocab non-negative floats, not all 0) with S's RNG. */
int32_t mlm_sampler_draw(mlm_sampler *s, const float *p);
/* A uniform double in [0, 1) from S's RNG. */
double mlm_sampler_unit(mlm_sampler *s);

/* Verifies draft token X, drawn from Q (the draft model's distribution under S's parameters),
 * against the target's LOGITS: with P the target's distribution (mlm_sampler_dist, into
 * SCRATCH, n_vocab floats), X is kept with probability min(1, P[X] / Q[X]); otherwise the
 * token is drawn from max(0, P - Q) renormalized, which never gives X. Either way the result
 * is distributed as P, and it is X exactly when X is kept. */
int32_t mlm_spec_verify(mlm_sampler *s, const float *logits, const float *q, int32_t x,
                        float *scratch);

#endif
