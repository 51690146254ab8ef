/* exec/draft.h: a draft model for the scheduler's speculative decoding. The drafter has its own
 * executor and paged KV cache, one sequence per scheduler slot, which always holds a prefix of
 * that slot's tokens: it catches up on the tokens it has not seen (a prompt, the tokens a step
 * accepted) before drafting, and the scheduler cuts it back to what verification kept. One
 * call drafts for every speculating sequence together, one batched step per drafted token. */
#ifndef MESHLM_EXEC_DRAFT_H
#define MESHLM_EXEC_DRAFT_H

#include "meshlm.h"

typedef struct mlm_drafter mlm_drafter;

/* One sequence's draft. */
typedef struct mlm_draft_ask {
    int32_t slot;          /* the scheduler's slot: the drafter's sequence */
    const int32_t *tokens; /* the sequence's tokens so far (N_TOKENS >= 1) */
    int32_t n_tokens;
    int32_t max;           /* tokens to draft at most (>= 1) */
    /* NULL: greedy drafts (argmax, ties to the lowest id). Otherwise each draft is drawn from
     * the draft model's distribution under this sampler's temperature, top-k and top-p, with
     * its RNG, and that distribution is written to Q row by row ((max, n_vocab) floats). */
    mlm_sampler *sampler;
    float *q;
    int32_t *out; /* (max) the drafted tokens */
    int32_t n_out;
} mlm_draft_ask;

/* A drafter running DRAFT (borrowed; it must outlive the drafter) for a scheduler of
 * parameters P (defaults resolved): P's slots, sequence length, block size, prompt chunk and
 * threads; a KV pool of P's kv_blocks plus room for every slot's drafted tokens. Drafting
 * stops early where the draft model's most likely token has a probability under P_MIN
 * (llama.cpp's --draft-p-min). INVALID_ARG when DRAFT's vocabulary size differs from
 * N_VOCAB (the target's). */
mlm_status mlm_drafter_create(const mlm_model *draft, const mlm_sched_params *p, int32_t n_vocab,
                              float p_min, mlm_drafter **out, mlm_error *err);
void mlm_drafter_free(mlm_drafter *d);

/* Drafts for N sequences: each ask's OUT gets N_OUT (0..max) tokens. A sequence whose KV
 * cannot be had drafts nothing and starts over next time; a failing step is returned (the
 * asks then hold no drafts). */
mlm_status mlm_drafter_propose(mlm_drafter *d, mlm_draft_ask *asks, int32_t n, mlm_error *err);

/* SLOT's sequence now holds at most its first N tokens (those verification kept); 0 forgets
 * it (a new request in the slot, a preemption). */
void mlm_drafter_keep(mlm_drafter *d, int32_t slot, int32_t n);

#endif
