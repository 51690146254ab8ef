/* model/forward.h: the decoder forward pass, called by the executor. */
#ifndef MESHLM_MODEL_FORWARD_H
#define MESHLM_MODEL_FORWARD_H

#include "core/pool.h"
#include "model/model.h"

/* One step's tokens as the forward pass needs them: token ids, positions (for RoPE), and
 * for each token its sequence's page table and its entry index in that sequence's KV
 * (pos - the sequence's start position). WANT_LOGITS may be NULL (no logits). */
typedef struct mlm_fwd_batch {
    int32_t n;
    const int32_t *tokens;
    const int32_t *pos;
    const int32_t *const *blocks;
    const int32_t *kv_idx;
    const int8_t *want_logits;
    /* Llama 3.2 Vision: per token the image K/V its cross-attention layers read, in XKV (one
     * pool per cross layer): XBLOCKS[i] the page table from the first tile it sees, XN[i] the
     * entries it sees (0: none; the token then passes those layers unchanged, as Meta's
     * reference does). XN NULL: no token sees an image. */
    const mlm_paged_kv *xkv;
    const int32_t *const *xblocks;
    const int32_t *xn;
} mlm_fwd_batch;

/* Bytes of scratch mlm_forward needs for up to MAX_TOKENS tokens, MAX_LOGITS of them asking
 * for logits, on a pool of N_THREADS threads (the same whatever the context length), for one
 * rank of TP (1: the whole model C). */
size_t mlm_forward_scratch_size(const mlm_config *c, int tp, int32_t max_tokens, int32_t max_logits,
                                int n_threads);

/* Runs the model on batch B: stores each token's K/V in KV[layer] and writes one row of
 * n_vocab logits per token that asked, in batch order, to LOGITS. The caller guarantees that
 * every page the batch touches exists and that the sizes fit the scratch. POOL runs the
 * jobs (NULL: the caller alone). Under TP every rank of the model's communicator calls it
 * with the same batch; each computes its heads and MLP columns, and all get all the logits.
 * Fails only when the communicator does (BACKEND). */
mlm_status mlm_forward(const mlm_model *m, const mlm_fwd_batch *b, const mlm_paged_kv *kv,
                       void *scratch, mlm_pool *pool, float *logits, mlm_error *err);

/* Llama 3.2 Vision: the cross-attention keys and values of N vision states X (N, n_embd:
 * an image's projected states) for every cross layer, stored as entries ENTRY0.. of the page
 * table BLOCKS in XKV[the layer's kv_layer] (K RMSNormed per head, no RoPE; models.md 6.5).
 * Runs in chunks of MAX_TOKENS rows on the step scratch of mlm_forward_scratch_size(...,
 * MAX_TOKENS, ...). */
void mlm_forward_cross_kv(const mlm_model *m, const float *x, int64_t n, const mlm_paged_kv *xkv,
                          const int32_t *blocks, int32_t entry0, int32_t max_tokens, void *scratch,
                          mlm_pool *pool);

#endif
