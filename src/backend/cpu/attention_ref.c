/* backend/cpu/attention_ref.c: the KV store, and naive attention over a paged KV cache (f32,
 * bf16 or BFP8 entries; f32 math, softmax with max subtraction and expf, BFP8 values decoded
 * exactly): the oracle the flash kernels are tested against (attention_flash_ref.c defines
 * their exact arithmetic). */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "tensor/bfp.h"
#include "tensor/dtype.h"

void mlm_kv_store(const mlm_paged_kv *kv, const int32_t *blocks, int32_t idx, const float *k_row,
                  const float *v_row) {
    size_t off = mlm_kv_entry_offset(kv, blocks, idx);
    if (kv->type == MLM_W_BFP8) {
        mlm_bfp_encode_row(k_row, kv->row, 8, (uint8_t *)kv->k + off);
        mlm_bfp_encode_row(v_row, kv->row, 8, (uint8_t *)kv->v + off);
    } else if (kv->type == MLM_W_BF16) {
        uint16_t *k = (uint16_t *)((char *)kv->k + off), *v = (uint16_t *)((char *)kv->v + off);
        for (int64_t i = 0; i < kv->row; i++) {
            k[i] = mlm_f32_to_bf16(k_row[i]);
            v[i] = mlm_f32_to_bf16(v_row[i]);
        }
    } else {
        memcpy((char *)kv->k + off, k_row, (size_t)kv->row * 4);
        memcpy((char *)kv->v + off, v_row, (size_t)kv->row * 4);
    }
}

/* Value I of an entry at BASE. */
static inline float load(const void *base, mlm_wtype type, int64_t i) {
    if (type == MLM_W_F32) return ((const float *)base)[i];
    if (type == MLM_W_BF16) return mlm_bf16_to_f32(((const uint16_t *)base)[i]);
    const uint8_t *g = (const uint8_t *)base + i / MLM_BFP_GROUP * 68;
    int j = (int)(i % MLM_BFP_GROUP);
    return mlm_bfp_decode(g[64 + j / 16], g[j], 8);
}

void mlm_attention_naive(float *out, const float *q, const mlm_paged_kv *kv, const int32_t *blocks,
                       int32_t n_ctx, int n_head, int n_kv_head, int head_dim, float *scratch) {
    int group = n_head / n_kv_head;
    float scale = 1.0f / sqrtf((float)head_dim);
    for (int h = 0; h < n_head; h++) {
        const float *qh = q + (int64_t)h * head_dim;
        int64_t kv_off = (int64_t)(h / group) * head_dim;
        float max = -INFINITY;
        for (int32_t j = 0; j < n_ctx; j++) {
            const char *k = (const char *)kv->k + mlm_kv_entry_offset(kv, blocks, j);
            float s = 0;
            for (int d = 0; d < head_dim; d++) s += qh[d] * load(k, kv->type, kv_off + d);
            s *= scale;
            scratch[j] = s;
            if (s > max) max = s;
        }
        float sum = 0;
        for (int32_t j = 0; j < n_ctx; j++) {
            scratch[j] = expf(scratch[j] - max);
            sum += scratch[j];
        }
        float *oh = out + (int64_t)h * head_dim;
        for (int d = 0; d < head_dim; d++) oh[d] = 0;
        for (int32_t j = 0; j < n_ctx; j++) {
            const char *v = (const char *)kv->v + mlm_kv_entry_offset(kv, blocks, j);
            float p = scratch[j] / sum;
            for (int d = 0; d < head_dim; d++) oh[d] += p * load(v, kv->type, kv_off + d);
        }
    }
}
