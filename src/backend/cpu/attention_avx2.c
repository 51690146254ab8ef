/* backend/cpu/attention_avx2.c: attention of one query token over paged KV with AVX2 + FMA.
 * Same math as attention_ref.c (f32 scores, softmax with max subtraction, weighted sum of
 * values): per query head, 8-lane dot products for the scores, then the value rows summed
 * into head_dim/8 register accumulators. head_dim not a multiple of 8 (or a GQA group wider
 * than 16) falls back to the reference. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "backend/backend.h"

#define INLINE static inline __attribute__((always_inline))
#define MAX_GROUP 16

INLINE __m256 load8(const void *base, int bf16, int64_t i) {
    if (!bf16) return _mm256_loadu_ps((const float *)base + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)base + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

INLINE float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

INLINE const char *entry(const mlm_paged_kv *kv, const void *pool, const int32_t *blocks,
                         int32_t j) {
    return (const char *)pool + mlm_kv_entry_offset(kv, blocks, j);
}

void mlm_attention_avx2(float *out, const float *q, const mlm_paged_kv *kv, const int32_t *blocks,
                        int32_t n_ctx, int n_head, int n_kv_head, int head_dim, float *scratch) {
    int group = n_head / n_kv_head;
    if (head_dim % 8 || group > MAX_GROUP) {
        mlm_attention_ref(out, q, kv, blocks, n_ctx, n_head, n_kv_head, head_dim, scratch);
        return;
    }
    float scale = 1.0f / sqrtf((float)head_dim);
    int bf16 = kv->bf16;
    size_t es = bf16 ? 2 : 4;
    for (int g = 0; g < n_kv_head; g++) {
        int64_t kv_off = (int64_t)g * head_dim;
        for (int hh = 0; hh < group; hh++) {
            int h = g * group + hh;
            const float *qh = q + (int64_t)h * head_dim;
            float max = -INFINITY;
            for (int32_t j = 0; j < n_ctx; j++) {
                const char *k = entry(kv, kv->k, blocks, j) + (size_t)kv_off * es;
                __m256 acc = _mm256_setzero_ps();
                for (int d = 0; d < head_dim; d += 8)
                    acc = _mm256_fmadd_ps(_mm256_loadu_ps(qh + d), load8(k, bf16, d), acc);
                float s = hsum(acc) * scale;
                scratch[j] = s;
                if (s > max) max = s;
            }
            float sum = 0;
            for (int32_t j = 0; j < n_ctx; j++) {
                scratch[j] = expf(scratch[j] - max);
                sum += scratch[j];
            }
            float inv = 1.0f / sum;
            float *oh = out + (int64_t)h * head_dim;
            __m256 o[16];
            int nd = head_dim / 8 < 16 ? head_dim / 8 : 16;
            for (int c0 = 0; c0 < head_dim / 8; c0 += nd) {
                int nc = head_dim / 8 - c0 < nd ? head_dim / 8 - c0 : nd;
                for (int c = 0; c < nc; c++) o[c] = _mm256_setzero_ps();
                for (int32_t j = 0; j < n_ctx; j++) {
                    const char *v = entry(kv, kv->v, blocks, j) + (size_t)kv_off * es;
                    __m256 p = _mm256_set1_ps(scratch[j] * inv);
                    for (int c = 0; c < nc; c++)
                        o[c] = _mm256_fmadd_ps(p, load8(v, bf16, (c0 + c) * 8), o[c]);
                }
                for (int c = 0; c < nc; c++) _mm256_storeu_ps(oh + (c0 + c) * 8, o[c]);
            }
        }
    }
}
