/* backend/cpu/attention_flash_avx2.c: flash attention with AVX2 + FMA, bit for bit the
 * arithmetic of attention_flash_ref.c (the AVX-512 kernel's schedule on 8-lane vectors).
 * Per tile of MLM_ATT_KT entries the KV head's K rows are decoded once and transposed (a
 * score vector holds 8 entries, one fma chain over d per lane) and the V rows decoded once
 * for every query and head of the job; output vectors hold 8 values of d (one fma chain over
 * the entries per lane). The tile sum keeps the reference's 16-lane shape as two halves. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/exp2.h"
#include "tensor/bfp.h"

#define INLINE static inline __attribute__((always_inline))
#define KT MLM_ATT_KT
_Static_assert(KT == 64, "the tile sum is written for 64 entries");

/* Lanes of mask LEFT (the first LEFT of 8) as an all-ones/zeros vector. */
INLINE __m256 first_lanes(int left) {
    __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(left), idx));
}

/* exp2c on 8 lanes, lanes outside VALID 0. */
INLINE __m256 exp2v(__m256 x, __m256 valid) {
    valid = _mm256_and_ps(valid, _mm256_cmp_ps(x, _mm256_set1_ps(MLM_EXP2_MIN), _CMP_GE_OQ));
    __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(x, n), p = _mm256_set1_ps(MLM_EXP2_P0);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(MLM_EXP2_P1));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(MLM_EXP2_P2));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(MLM_EXP2_P3));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(MLM_EXP2_P4));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(MLM_EXP2_P5));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(valid, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

INLINE void decode_row(const mlm_paged_kv *kv, const char *e, int64_t off, int hd, float *dst) {
    if (kv->type == MLM_W_F32) {
        memcpy(dst, (const float *)e + off, (size_t)hd * sizeof *dst);
    } else if (kv->type == MLM_W_BF16) {
        const uint16_t *h = (const uint16_t *)e + off;
        for (int d = 0; d < hd; d += 8) {
            __m128i x = _mm_loadu_si128((const __m128i *)(h + d));
            _mm256_storeu_ps(dst + d, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16)));
        }
    } else {
        for (int d = 0; d < hd; d += 8) {
            uint64_t i = (uint64_t)off + (uint64_t)d;
            const uint8_t *g = (const uint8_t *)e + i / MLM_BFP_GROUP * 68;
            unsigned j = (unsigned)(i % MLM_BFP_GROUP);
            int64_t c8;
            memcpy(&c8, g + j, 8);
            __m256i c = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(c8));
            __m256 scale = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_set1_epi32((int)g[64 + j / 16] << 23)),
                                         _mm256_set1_ps(1.0f / 64));
            __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(c, _mm256_set1_epi32(0x7f))), scale);
            __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
            _mm256_storeu_ps(dst + d, _mm256_or_ps(v, _mm256_castsi256_ps(sign)));
        }
    }
}

/* Entries [J0, J0 + N) of POOL as f32 rows of HD into DST, one page lookup per page. */
INLINE void decode_rows(const mlm_paged_kv *kv, const void *pool, const int32_t *blocks,
                        int32_t j0, int n, int64_t off, int hd, float *dst) {
    const uint32_t bs = (uint32_t)kv->block_size;
    for (int j = 0; j < n;) {
        uint32_t idx = (uint32_t)(j0 + j), slot = idx % bs;
        const char *base = (const char *)pool + ((int64_t)blocks[idx / bs] * bs + slot) * kv->row_bytes;
        int run = (int)(bs - slot) < n - j ? (int)(bs - slot) : n - j;
        for (int r = 0; r < run; r++, j++) decode_row(kv, base + r * kv->row_bytes, off, hd, dst + (int64_t)j * hd);
    }
}

/* The 8 x 8 block at SRC (row stride SS) transposed into DST (row stride DS). */
INLINE void transpose8(const float *src, int64_t ss, float *dst, int64_t ds) {
    __m256 r[8], t[8];
    _Pragma("GCC unroll 16")
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + i * ss);
    _Pragma("GCC unroll 16")
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    _Pragma("GCC unroll 16")
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    _Pragma("GCC unroll 16")
    for (int k = 0; k < 4; k++) {
        _mm256_storeu_ps(dst + k * ds, _mm256_permute2f128_ps(r[k], r[k + 4], 0x20));
        _mm256_storeu_ps(dst + (k + 4) * ds, _mm256_permute2f128_ps(r[k], r[k + 4], 0x31));
    }
}

/* Scores of NR (<= 2) rows against NV (<= 4) vectors of 8 entries starting at entry J. */
INLINE void scores(const float *qs, int nr, const float *kt, int hd, int j, int nv, float *s) {
    __m256 acc[2][4];
    memset(acc, 0, sizeof acc);
    for (int r = 0; r < nr; r++)
        for (int v = 0; v < nv; v++) acc[r][v] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d++) {
        __m256 k[4];
        memset(k, 0, sizeof k);
        _Pragma("GCC unroll 4")
        for (int v = 0; v < nv; v++) k[v] = _mm256_loadu_ps(kt + d * KT + j + 8 * v);
        _Pragma("GCC unroll 2")
        for (int r = 0; r < nr; r++) {
            __m256 q = _mm256_set1_ps(qs[r * hd + d]);
            _Pragma("GCC unroll 4")
            for (int v = 0; v < nv; v++) acc[r][v] = _mm256_fmadd_ps(q, k[v], acc[r][v]);
        }
    }
    for (int r = 0; r < nr; r++)
        for (int v = 0; v < nv; v++) _mm256_storeu_ps(s + r * KT + j + 8 * v, acc[r][v]);
}

/* Columns [0, 8 ND) (ND <= 4) of O's NR (<= 2) rows = O * alpha, then + p_j v_j. */
INLINE void accumulate(float *o, int nr, const float *alpha, const float *p, const float *v,
                       int hd, int nj, int nd) {
    __m256 acc[2][4];
    memset(acc, 0, sizeof acc);
    _Pragma("GCC unroll 2")
    for (int r = 0; r < nr; r++)
        _Pragma("GCC unroll 4")
        for (int c = 0; c < nd; c++)
            acc[r][c] = _mm256_mul_ps(_mm256_loadu_ps(o + r * hd + 8 * c), _mm256_set1_ps(alpha[r]));
    for (int j = 0; j < nj; j++) {
        __m256 vj[4];
        memset(vj, 0, sizeof vj);
        _Pragma("GCC unroll 4")
        for (int c = 0; c < nd; c++) vj[c] = _mm256_loadu_ps(v + j * hd + 8 * c);
        _Pragma("GCC unroll 2")
        for (int r = 0; r < nr; r++) {
            __m256 pj = _mm256_set1_ps(p[r * KT + j]);
            _Pragma("GCC unroll 4")
            for (int c = 0; c < nd; c++) acc[r][c] = _mm256_fmadd_ps(pj, vj[c], acc[r][c]);
        }
    }
    _Pragma("GCC unroll 2")
    for (int r = 0; r < nr; r++)
        _Pragma("GCC unroll 4")
        for (int c = 0; c < nd; c++) _mm256_storeu_ps(o + r * hd + 8 * c, acc[r][c]);
}

INLINE float hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

INLINE void softmax_row(float *s, int nj, float *m, float *l, float *alpha) {
    __m256 sv[8], mx = _mm256_set1_ps(-INFINITY);
    _Pragma("GCC unroll 16")
    for (int v = 0; v < 8; v++) {
        sv[v] = _mm256_loadu_ps(s + 8 * v);
        __m256 ok = first_lanes(nj - 8 * v);
        mx = _mm256_max_ps(mx, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), sv[v], ok));
    }
    float mt = hmax(mx), mn = *m > mt ? *m : mt;
    *alpha = *m == -INFINITY ? 0.0f : mlm_exp2c(*m - mn);
    __m256 lo = _mm256_setzero_ps(), hi = lo, mnv = _mm256_set1_ps(mn);
    _Pragma("GCC unroll 16")
    for (int v = 0; v < 8; v++) {
        __m256 p = exp2v(_mm256_sub_ps(sv[v], mnv), first_lanes(nj - 8 * v));
        _mm256_storeu_ps(s + 8 * v, p);
        if (v % 2) hi = v == 1 ? p : _mm256_add_ps(hi, p);
        else lo = v == 0 ? p : _mm256_add_ps(lo, p);
    }
    __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    float ts = _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
    *l = *l * *alpha + ts;
    *m = mn;
}

INLINE void flash(const mlm_attn_job *job, float *scratch, int hd) {
    const mlm_paged_kv *kv = job->kv;
    const int nh = job->n_hh, R = job->n_q * nh;
    const int64_t off = (int64_t)job->kv_head * hd;
    float *kt = scratch, *vt = kt + hd * KT, *qs = vt + KT * hd, *s = qs + R * hd,
          *o = s + R * KT, *m = o + R * hd, *l = m + R, alpha[MLM_ATT_HH];
    const float c = MLM_LOG2E / sqrtf((float)hd);
    for (int i = 0; i < job->n_q; i++)
        for (int hh = 0; hh < nh; hh++) {
            const float *qr = job->q + i * job->q_stride + (int64_t)(job->kv_head * job->group + job->hh0 + hh) * hd;
            float *qd = qs + (i * nh + hh) * hd;
            for (int d = 0; d < hd; d++) qd[d] = qr[d] * c;
        }
    memset(o, 0, (size_t)(R * hd) * sizeof *o);
    _Pragma("GCC unroll 16")
    for (int r = 0; r < R; r++) m[r] = -INFINITY, l[r] = 0;
    const int32_t last = job->q0 + job->n_q;
    for (int32_t j0 = 0; j0 < last; j0 += KT) {
        int ntile = last - j0 < KT ? last - j0 : KT;
        decode_rows(kv, kv->k, job->blocks, j0, ntile, off, hd, vt);
        if (ntile < KT) memset(vt + ntile * hd, 0, (size_t)((KT - ntile) * hd) * sizeof *vt);
        for (int jb = 0; jb < KT; jb += 8)
            for (int db = 0; db < hd; db += 8) transpose8(vt + jb * hd + db, hd, kt + db * KT + jb, KT);
        decode_rows(kv, kv->v, job->blocks, j0, ntile, off, hd, vt);
        for (int i = 0; i < job->n_q; i++) {
            int32_t n_ctx = job->q0 + i + 1;
            if (n_ctx <= j0) continue;
            int nj = n_ctx - j0 < KT ? n_ctx - j0 : KT, nv = (nj + 7) / 8;
            float *si = s + i * nh * KT, *qi = qs + i * nh * hd, *oi = o + i * nh * hd;
            for (int r = 0; r < nh; r += 2) {
                int nr = nh - r < 2 ? nh - r : 2;
                for (int v0 = 0; v0 < nv; v0 += 4) {
                    int n4 = nv - v0 < 4 ? nv - v0 : 4;
                    if (nr == 2 && n4 == 4) scores(qi + r * hd, 2, kt, hd, 8 * v0, 4, si + r * KT);
                    else scores(qi + r * hd, nr, kt, hd, 8 * v0, n4, si + r * KT);
                }
            }
            for (int r = 0; r < nh; r++) softmax_row(si + r * KT, nj, &m[i * nh + r], &l[i * nh + r], &alpha[r]);
            for (int c0 = 0; c0 < hd / 8; c0 += 4) {
                int nd = hd / 8 - c0 < 4 ? hd / 8 - c0 : 4;
                for (int r = 0; r < nh; r += 2) {
                    int nr = nh - r < 2 ? nh - r : 2;
                    float *oo = oi + r * hd + 8 * c0, *pp = si + r * KT, *vv = vt + 8 * c0;
                    if (nr == 2 && nd == 4) accumulate(oo, 2, alpha + r, pp, vv, hd, nj, 4);
                    else accumulate(oo, nr, alpha + r, pp, vv, hd, nj, nd);
                }
            }
        }
    }
    for (int i = 0; i < job->n_q; i++)
        for (int hh = 0; hh < nh; hh++) {
            int r = i * nh + hh;
            float inv = 1.0f / l[r], *orow = job->out + i * job->out_stride + (int64_t)(job->kv_head * job->group + job->hh0 + hh) * hd;
            for (int d = 0; d < hd; d += 8)
                _mm256_storeu_ps(orow + d, _mm256_mul_ps(_mm256_loadu_ps(o + r * hd + d), _mm256_set1_ps(inv)));
        }
}

void mlm_attention_flash_avx2(const mlm_attn_job *job, float *scratch) {
    if (job->head_dim % 8 || job->head_dim > MLM_ATT_HD) /* the same arithmetic, scalar */
        mlm_attention_flash_ref(job, scratch);
    else if (job->head_dim == 64) flash(job, scratch, 64);
    else if (job->head_dim == 128) flash(job, scratch, 128);
    else flash(job, scratch, job->head_dim);
}
