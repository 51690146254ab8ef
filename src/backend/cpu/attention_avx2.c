/* backend/cpu/attention_avx2.c: attention of one query token over paged KV with AVX2 + FMA.
 * Same math as attention_ref.c (f32 scores, softmax with max subtraction, weighted sum of
 * values). Per KV head, tiles of 32 entries are read once for the whole GQA group: f32 rows
 * are used in place, bf16 and BFP8 rows decoded exactly into a small f32 tile. Scores are
 * 8-lane dot products; each output element sums p_j * v_j over the entries in order in a
 * register, carried from tile to tile, so tiling does not change the result. head_dim not a
 * multiple of 16 (or above 256, or a GQA group wider than 16) falls back to the reference. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "tensor/bfp.h"

#define INLINE static inline __attribute__((always_inline))
#define MAX_GROUP 16
#define MAX_HD 256
#define TILE 32

INLINE float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Values [off, off + hd) of the entry at E as f32: in place for f32, else decoded into DST. */
INLINE const float *row_f32(const mlm_paged_kv *kv, const char *e, int64_t off, int hd,
                            float *dst) {
    if (kv->type == MLM_W_F32) return (const float *)e + off;
    if (kv->type == MLM_W_BF16) {
        const uint16_t *h = (const uint16_t *)e + off;
        for (int d = 0; d < hd; d += 8) {
            __m128i x = _mm_loadu_si128((const __m128i *)(h + d));
            _mm256_storeu_ps(dst + d, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16)));
        }
        return dst;
    }
    /* BFP8: 16 values share an exponent; value = mag * 2^(exp - 133), sign from bit 7 */
    const __m128i m7 = _mm_set1_epi8(0x7f);
    const __m256i sbit = _mm256_set1_epi32((int)0x80000000u);
    for (int d = 0; d < hd; d += 16) {
        int64_t i = off + d;
        const uint8_t *g = (const uint8_t *)e + i / MLM_BFP_GROUP * 68;
        int j = (int)(i % MLM_BFP_GROUP);
        __m128i c = _mm_loadu_si128((const __m128i *)(g + j));
        __m256 scale = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_set1_epi32((int)g[64 + j / 16] << 23)),
                                     _mm256_set1_ps(1.0f / 64));
        __m128i mag = _mm_and_si128(c, m7);
        for (int h = 0; h < 2; h++) {
            __m128i mh = h ? _mm_srli_si128(mag, 8) : mag, ch = h ? _mm_srli_si128(c, 8) : c;
            __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(mh)), scale);
            __m256i sg = _mm256_and_si256(_mm256_cvtepi8_epi32(ch), sbit);
            _mm256_storeu_ps(dst + d + 8 * h, _mm256_or_ps(v, _mm256_castsi256_ps(sg)));
        }
    }
    return dst;
}

/* Rows of entries [J0, J0 + TILE) (clipped at N_CTX) of POOL as f32 into ROWS, decoded into
 * TILE where needed; returns how many. */
INLINE int load_tile(const mlm_paged_kv *kv, const void *pool, const int32_t *blocks, int32_t j0,
                     int32_t n_ctx, int64_t off, int hd, float *tile, const float **rows) {
    int nj = n_ctx - j0 < TILE ? n_ctx - j0 : TILE;
    for (int jj = 0; jj < nj; jj++)
        rows[jj] = row_f32(kv, (const char *)pool + mlm_kv_entry_offset(kv, blocks, j0 + jj), off,
                           hd, tile + jj * hd);
    return nj;
}

void mlm_attention_avx2(float *out, const float *q, const mlm_paged_kv *kv, const int32_t *blocks,
                        int32_t n_ctx, int n_head, int n_kv_head, int head_dim, float *scratch) {
    int group = n_head / n_kv_head, hd = head_dim;
    if (hd % 16 || hd > MAX_HD || group > MAX_GROUP) {
        mlm_attention_ref(out, q, kv, blocks, n_ctx, n_head, n_kv_head, head_dim, scratch);
        return;
    }
    float scale = 1.0f / sqrtf((float)hd);
    float tile[TILE * MAX_HD] __attribute__((aligned(32)));
    const float *rows[TILE];
    for (int g = 0; g < n_kv_head; g++) {
        int64_t off = (int64_t)g * hd;
        const float *qg = q + off * group; /* the group's query heads, one after another */
        float *og = out + off * group;
        /* scores: s[hh * n_ctx + j] */
        for (int32_t j0 = 0; j0 < n_ctx; j0 += TILE) {
            int nj = load_tile(kv, kv->k, blocks, j0, n_ctx, off, hd, tile, rows);
            for (int hh = 0; hh < group; hh++) {
                const float *qh = qg + hh * hd;
                for (int jj = 0; jj < nj; jj++) {
                    __m256 acc = _mm256_setzero_ps();
                    for (int d = 0; d < hd; d += 8)
                        acc = _mm256_fmadd_ps(_mm256_loadu_ps(qh + d), _mm256_loadu_ps(rows[jj] + d), acc);
                    scratch[(int64_t)hh * n_ctx + j0 + jj] = hsum(acc) * scale;
                }
            }
        }
        /* softmax numerators; the division by the sum is folded into p below */
        float inv[MAX_GROUP];
        for (int hh = 0; hh < group; hh++) {
            float *s = scratch + (int64_t)hh * n_ctx, max = -INFINITY, sum = 0;
            for (int32_t j = 0; j < n_ctx; j++) max = s[j] > max ? s[j] : max;
            for (int32_t j = 0; j < n_ctx; j++) {
                s[j] = expf(s[j] - max);
                sum += s[j];
            }
            inv[hh] = 1.0f / sum;
        }
        memset(og, 0, (size_t)(group * hd) * sizeof *og);
        for (int32_t j0 = 0; j0 < n_ctx; j0 += TILE) {
            int nj = load_tile(kv, kv->v, blocks, j0, n_ctx, off, hd, tile, rows);
            for (int hh = 0; hh < group; hh++) {
                const float *s = scratch + (int64_t)hh * n_ctx + j0;
                float *oh = og + hh * hd;
                for (int c0 = 0; c0 < hd / 8; c0 += 16) {
                    int nc = hd / 8 - c0 < 16 ? hd / 8 - c0 : 16;
                    __m256 o[16];
                    for (int c = 0; c < nc; c++) o[c] = _mm256_loadu_ps(oh + (c0 + c) * 8);
                    for (int jj = 0; jj < nj; jj++) {
                        __m256 p = _mm256_set1_ps(s[jj] * inv[hh]);
                        for (int c = 0; c < nc; c++)
                            o[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(rows[jj] + (c0 + c) * 8), o[c]);
                    }
                    for (int c = 0; c < nc; c++) _mm256_storeu_ps(oh + (c0 + c) * 8, o[c]);
                }
            }
        }
    }
}
