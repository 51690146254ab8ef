/* backend/cpu/attention_ref.c: scalar attention over a paged KV cache (f32 or bf16 entries)
 * and the KV store. Reference for SIMD versions; f32 math, softmax with max subtraction. */
#include <math.h>
#include <string.h>

#include "backend/backend.h"

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

void mlm_kv_store(const mlm_paged_kv *kv, const int32_t *blocks, int32_t idx, const float *k_row,
                  const float *v_row) {
    size_t off = mlm_kv_entry_offset(kv, blocks, idx);
    if (kv->bf16) {
        uint16_t *k = (uint16_t *)((char *)kv->k + off), *v = (uint16_t *)((char *)kv->v + off);
        for (int64_t i = 0; i < kv->row; i++) {
            k[i] = f32_to_bf16(k_row[i]);
            v[i] = f32_to_bf16(v_row[i]);
        }
    } else {
        memcpy((char *)kv->k + off, k_row, (size_t)kv->row * 4);
        memcpy((char *)kv->v + off, v_row, (size_t)kv->row * 4);
    }
}

static inline float load(const void *base, int bf16, int64_t i) {
    return bf16 ? bf16_to_f32(((const uint16_t *)base)[i]) : ((const float *)base)[i];
}

void mlm_attention_ref(float *out, const float *q, const mlm_paged_kv *kv, const int32_t *blocks,
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
            for (int d = 0; d < head_dim; d++) s += qh[d] * load(k, kv->bf16, kv_off + d);
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
            for (int d = 0; d < head_dim; d++) oh[d] += p * load(v, kv->bf16, kv_off + d);
        }
    }
}
