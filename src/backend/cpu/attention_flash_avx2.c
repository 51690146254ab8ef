/* backend/cpu/attention_flash_avx2.c: flash attention with AVX2 + FMA, bit for bit the
 * arithmetic of attention_flash_ref.c (the AVX-512 kernel's schedules on 8-lane vectors).
 * Causal jobs: per tile of MLM_ATT_KT entries the KV head's K rows are decoded once and
 * transposed (a score vector holds 8 entries, one fma chain over d per lane) and the V rows
 * decoded once for every query and head of the job. Non-causal jobs: every row reads the same
 * entries, so a score vector holds 8 rows (lane = (query, head)), K rows are read as they
 * are, the softmax runs across lanes and f32 V rows are read in place. Output vectors hold 8
 * values of d (one fma chain over the entries per lane). A causal job of one query (decode)
 * runs as the non-causal job reading the same entries. The tile sum keeps the reference's
 * 16-lane shape. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/attention_prefetch.h"
#include "backend/cpu/exp2_avx2.h"
#include "tensor/bfp.h"

#define INLINE static inline __attribute__((always_inline))
#define KT MLM_ATT_KT
_Static_assert(KT == 64, "the tile sum is written for 64 entries");

/* Lanes of mask LEFT (the first LEFT of 8) as an all-ones/zeros vector. */
INLINE __m256 first_lanes(int left) {
    __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(left), idx));
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

/* Columns [0, 8 ND) (ND <= 4) of O's NR (<= 2) rows = O * alpha, then + p_j v_j for the NJ
 * entries (V rows of stride VS); row r's p_j is at P[r * PR + j * PJ]. */
INLINE void accumulate(float *o, int nr, const float *alpha, const float *p, int pr, int pj,
                       const float *v, int64_t vs, int hd, int nj, int nd) {
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
        for (int c = 0; c < nd; c++) vj[c] = _mm256_loadu_ps(v + j * vs + 8 * c);
        _Pragma("GCC unroll 2")
        for (int r = 0; r < nr; r++) {
            __m256 pv = _mm256_set1_ps(p[r * pr + j * pj]);
            _Pragma("GCC unroll 4")
            for (int c = 0; c < nd; c++) acc[r][c] = _mm256_fmadd_ps(pv, vj[c], acc[r][c]);
        }
    }
    _Pragma("GCC unroll 2")
    for (int r = 0; r < nr; r++)
        _Pragma("GCC unroll 4")
        for (int c = 0; c < nd; c++) _mm256_storeu_ps(o + r * hd + 8 * c, acc[r][c]);
}

/* The output update of NR rows (P's row r at P + r * PR, entry j at + j * PJ; V rows of
 * stride VS) over all of HD, in blocks of 2 rows x 32 columns. */
INLINE void update_rows(float *o, int nr, const float *alpha, const float *p, int pr, int pj,
                        const float *v, int64_t vs, int hd, int nj) {
    for (int c0 = 0; c0 < hd / 8; c0 += 4) {
        int nd = hd / 8 - c0 < 4 ? hd / 8 - c0 : 4;
        for (int r = 0; r < nr; r += 2) {
            int n = nr - r < 2 ? nr - r : 2;
            float *oo = o + r * hd + 8 * c0;
            const float *pp = p + r * pr, *vv = v + 8 * c0;
            if (n == 2 && nd == 4) accumulate(oo, 2, alpha + r, pp, pr, pj, vv, vs, hd, nj, 4);
            else accumulate(oo, n, alpha + r, pp, pr, pj, vv, vs, hd, nj, nd);
        }
    }
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
        __m256 p = mlm_exp2_avx2(_mm256_sub_ps(sv[v], mnv), first_lanes(nj - 8 * v));
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

// ---- causal jobs: lanes = entries ----

INLINE void causal(const mlm_attn_job *job, float *scratch, int hd) {
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
        if (last - j0 > KT) { /* the next tile's rows, whose runs the hardware misses */
            int pn = last - j0 - KT < KT ? last - j0 - KT : KT;
            mlm_att_prefetch_rows(kv, kv->k, job->blocks, j0 + KT, pn, off, hd);
            mlm_att_prefetch_rows(kv, kv->v, job->blocks, j0 + KT, pn, off, hd);
        }
        decode_rows(kv, kv->k, job->blocks, j0, ntile, off, hd, vt);
        if (ntile < KT) memset(vt + ntile * hd, 0, (size_t)((KT - ntile) * hd) * sizeof *vt);
        for (int jb = 0; jb < KT; jb += 8)
            for (int db = 0; db < hd; db += 8) transpose8(vt + jb * hd + db, hd, kt + db * KT + jb, KT);
        decode_rows(kv, kv->v, job->blocks, j0, ntile, off, hd, vt);
        for (int i = 0; i < job->n_q; i++) {
            int32_t end = job->q0 + i + 1; /* entries query i reads */
            if (end <= j0) continue;
            int nj = end - j0 < KT ? end - j0 : KT, nv = (nj + 7) / 8;
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
            update_rows(oi, nh, alpha, si, KT, 1, vt, hd, hd, nj);
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

// ---- non-causal jobs: lanes = rows ----

/* Scores of 8 rows (q' transposed: QT[d * 8 + lane]) against the K rows KR (stride HD) of 8
 * entries, into ST[jj * 8 + lane]: each lane one fma chain over d. */
INLINE void nc_scores(const float *qt, const float *kr, int hd, float *st) {
    __m256 acc[8];
    _Pragma("GCC unroll 8")
    for (int jj = 0; jj < 8; jj++) acc[jj] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d++) {
        __m256 q = _mm256_loadu_ps(qt + d * 8);
        _Pragma("GCC unroll 8")
        for (int jj = 0; jj < 8; jj++) acc[jj] = _mm256_fmadd_ps(q, _mm256_set1_ps(kr[jj * hd + d]), acc[jj]);
    }
    _Pragma("GCC unroll 8")
    for (int jj = 0; jj < 8; jj++) _mm256_storeu_ps(st + jj * 8, acc[jj]);
}

/* nc_scores for a job of at most 4 rows (a GQA group of 4 or fewer heads, one query), 16
 * entries at once: lanes 0-3 hold entry 2p's rows and lanes 4-7 entry 2p + 1's (QT's lanes 4-7
 * a copy of 0-3), each K value spread over its half by one in-lane permute of
 * [k_2p[d..d+3] | k_2p+1[d..d+3]]: 2.5 vector ops per 8 used lanes where nc_scores spends 2 per
 * 4. Each lane is the same fma chain over d; ST gets nc_scores's layout, lanes 4-7 zero. */
INLINE void nc_scores_pairs(const float *qt, const float *kr, int hd, float *st) {
    __m256 acc[8];
    _Pragma("GCC unroll 8")
    for (int p = 0; p < 8; p++) acc[p] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d += 4) {
        const __m256 q0 = _mm256_loadu_ps(qt + d * 8), q1 = _mm256_loadu_ps(qt + (d + 1) * 8),
                     q2 = _mm256_loadu_ps(qt + (d + 2) * 8), q3 = _mm256_loadu_ps(qt + (d + 3) * 8);
        _Pragma("GCC unroll 8")
        for (int p = 0; p < 8; p++) {
            const float *k0 = kr + 2 * p * hd + d, *k1 = k0 + hd;
            __m256 x = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(k0)),
                                            _mm_loadu_ps(k1), 1);
            acc[p] = _mm256_fmadd_ps(q0, _mm256_permute_ps(x, 0x00), acc[p]);
            acc[p] = _mm256_fmadd_ps(q1, _mm256_permute_ps(x, 0x55), acc[p]);
            acc[p] = _mm256_fmadd_ps(q2, _mm256_permute_ps(x, 0xaa), acc[p]);
            acc[p] = _mm256_fmadd_ps(q3, _mm256_permute_ps(x, 0xff), acc[p]);
        }
    }
    _Pragma("GCC unroll 8")
    for (int p = 0; p < 8; p++) {
        _mm256_storeu_ps(st + 2 * p * 8, _mm256_blend_ps(acc[p], _mm256_setzero_ps(), 0xf0));
        _mm256_storeu_ps(st + (2 * p + 1) * 8, _mm256_permute2f128_ps(acc[p], acc[p], 0x81));
    }
}

/* P[j] of the tile (8 rows), 0 past NJ. */
INLINE __m256 nc_p(const float *st, int j, int nj) {
    return j < nj ? _mm256_loadu_ps(st + j * 8) : _mm256_setzero_ps();
}

/* The tile's softmax update of 8 rows at once (lane = row): ST holds the scores of NJ entries
 * (ST[j * 8 + lane]) and gets their p_j; M and L are the rows' running max and sum; ALPHA
 * gets the rows' rescale factors. The reference's scalar steps, lane by lane. */
INLINE void nc_softmax(float *st, int nj, float *m, float *l, float *alpha) {
    __m256 mt = _mm256_set1_ps(-INFINITY);
    for (int j = 0; j < nj; j++) {
        __m256 sj = _mm256_loadu_ps(st + j * 8); /* (s > mt ? s : mt), as the reference */
        mt = _mm256_blendv_ps(mt, sj, _mm256_cmp_ps(sj, mt, _CMP_GT_OQ));
    }
    __m256 mo = _mm256_loadu_ps(m);
    __m256 mn = _mm256_blendv_ps(mt, mo, _mm256_cmp_ps(mo, mt, _CMP_GT_OQ));
    __m256 a = mlm_exp2_avx2(_mm256_sub_ps(mo, mn),
                             _mm256_cmp_ps(mo, _mm256_set1_ps(-INFINITY), _CMP_NEQ_UQ));
    __m256 all = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    for (int j = 0; j < nj; j++)
        _mm256_storeu_ps(st + j * 8,
                         mlm_exp2_avx2(_mm256_sub_ps(_mm256_loadu_ps(st + j * 8), mn), all));
    /* the tile sum: lane x of the reference is entries x, 16 + x, 32 + x, 48 + x; then lanes
     * x + 8, x + 4, x + 2, x + 1 are folded in */
    __m256 sum[8];
    _Pragma("GCC unroll 8")
    for (int x = 0; x < 8; x++) {
        __m256 lo = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(nc_p(st, x, nj), nc_p(st, 16 + x, nj)),
                                                nc_p(st, 32 + x, nj)), nc_p(st, 48 + x, nj));
        __m256 hi = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(nc_p(st, 8 + x, nj), nc_p(st, 24 + x, nj)),
                                                nc_p(st, 40 + x, nj)), nc_p(st, 56 + x, nj));
        sum[x] = _mm256_add_ps(lo, hi);
    }
    _Pragma("GCC unroll 4")
    for (int w = 4; w >= 1; w /= 2)
        _Pragma("GCC unroll 4")
        for (int x = 0; x < w; x++) sum[x] = _mm256_add_ps(sum[x], sum[x + w]);
    _mm256_storeu_ps(l, _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(l), a), sum[0]));
    _mm256_storeu_ps(m, mn);
    _mm256_storeu_ps(alpha, a);
}

/* Every row of the job reads entries [0, N_CTX): the rows (query, head) are the lanes of the
 * score vectors, 8 a chunk, so K rows are read as they are (no transpose) and the softmax
 * runs across lanes without reductions. Rows past R in the last chunk are zero and dropped.
 * K is decoded 16 entries at a time (once for all chunks); f32 V rows are read in place when
 * the tile lies in one page. */
INLINE void noncausal(const mlm_attn_job *job, float *scratch, int hd) {
    const mlm_paged_kv *kv = job->kv;
    const int nh = job->n_hh, R = job->n_q * nh, RP = (R + 7) / 8 * 8;
    const int64_t off = (int64_t)job->kv_head * hd;
    const int32_t n_ctx = job->n_ctx;
    const uint32_t bs = (uint32_t)kv->block_size;
    /* K rows of 16 entries; V rows of the tile (when decoded); q' of chunk c at qt + c * 8 *
     * hd as (hd, 8); scores and p of chunk c at st + c * 8 * KT as (KT, 8); o rows; m, l */
    float *kr = scratch, *vr = kr + KT * hd, *qt = vr + KT * hd, *st = qt + RP * hd,
          *o = st + RP * KT, *m = o + RP * hd, *l = m + RP, alpha[8];
    const float c = MLM_LOG2E / sqrtf((float)hd);
    memset(qt, 0, (size_t)(RP * hd) * sizeof *qt);
    for (int r = 0; r < R; r++) {
        int i = r / nh, h = job->kv_head * job->group + job->hh0 + r % nh;
        const float *qrow = job->q + i * job->q_stride + (int64_t)h * hd;
        float *q = qt + (r / 8) * 8 * hd + r % 8;
        for (int d = 0; d < hd; d++) q[d * 8] = qrow[d] * c;
    }
    const int pairs = R <= 4; /* nc_scores_pairs (hd is a multiple of 8): lanes 4-7 copy 0-3 */
    if (pairs)
        for (int d = 0; d < hd; d++) memcpy(qt + d * 8 + 4, qt + d * 8, 4 * sizeof *qt);
    memset(o, 0, (size_t)(RP * hd) * sizeof *o);
    for (int r = 0; r < RP; r++) m[r] = -INFINITY, l[r] = 0;
    for (int32_t j0 = 0; j0 < n_ctx; j0 += KT) {
        int nj = n_ctx - j0 < KT ? n_ctx - j0 : KT, nb = (nj + 15) / 16;
        int next = n_ctx - j0 - KT < KT ? n_ctx - j0 - KT : KT; /* entries of the next tile */
        for (int b = 0; b < nb; b++) {
            int n = nj - 16 * b < 16 ? nj - 16 * b : 16;
            /* the next tile's rows, a quarter at a time so the requests overlap the work */
            if (next > 16 * b) {
                int pn = next - 16 * b < 16 ? next - 16 * b : 16;
                mlm_att_prefetch_rows(kv, kv->k, job->blocks, j0 + KT + 16 * b, pn, off, hd);
                mlm_att_prefetch_rows(kv, kv->v, job->blocks, j0 + KT + 16 * b, pn, off, hd);
            }
            decode_rows(kv, kv->k, job->blocks, j0 + 16 * b, n, off, hd, kr);
            if (n < 16) memset(kr + n * hd, 0, (size_t)((16 - n) * hd) * sizeof *kr);
            if (pairs) {
                nc_scores_pairs(qt, kr, hd, st + 16 * b * 8);
                continue;
            }
            for (int c0 = 0; c0 < RP; c0 += 8)
                for (int h8 = 0; h8 < 16 && h8 < n; h8 += 8)
                    nc_scores(qt + c0 * hd, kr + h8 * hd, hd, st + c0 * KT + (16 * b + h8) * 8);
        }
        const float *v = vr;
        int64_t vs = hd;
        if (kv->type == MLM_W_F32 && (uint32_t)j0 % bs + (uint32_t)nj <= bs) {
            /* the tile lies in one page: its f32 V rows are read in place */
            v = (const float *)((const char *)kv->v + mlm_kv_entry_offset(kv, job->blocks, j0)) + off;
            vs = kv->row_bytes / 4;
        } else {
            decode_rows(kv, kv->v, job->blocks, j0, nj, off, hd, vr);
        }
        for (int c0 = 0; c0 < RP; c0 += 8) {
            float *sc = st + c0 * KT;
            nc_softmax(sc, nj, m + c0, l + c0, alpha);
            int nr = R - c0 < 8 ? R - c0 : 8;
            update_rows(o + c0 * hd, nr, alpha, sc, 1, 8, v, vs, hd, nj);
        }
    }
    for (int r = 0; r < R; r++) {
        int i = r / nh, h = job->kv_head * job->group + job->hh0 + r % nh;
        float inv = 1.0f / l[r], *orow = job->out + i * job->out_stride + (int64_t)h * hd;
        for (int d = 0; d < hd; d += 8)
            _mm256_storeu_ps(orow + d, _mm256_mul_ps(_mm256_loadu_ps(o + r * hd + d), _mm256_set1_ps(inv)));
    }
}

void mlm_attention_flash_avx2(const mlm_attn_job *job, float *scratch) {
    int hd = job->head_dim;
    if (hd % 8 || hd > MLM_ATT_HD) /* the same arithmetic, scalar */
        mlm_attention_flash_ref(job, scratch);
    else if (job->n_ctx > 0 || job->n_q == 1) {
        /* One query (decode) reads entries 0..q0 as a non-causal job of q0 + 1 entries does,
         * in the same tiles and arithmetic: its heads in the lanes, no K tile transposed, the
         * next tile's rows prefetched a quarter at a time (AMD Zen 3, bench/attention's decode
         * table: level at 512 entries, 0.86-0.92x the time at 4096); a group of 4 or fewer
         * heads scores two entries a vector (nc_scores_pairs: 0.81x the time with the KV in
         * the caches, 0.83-0.93x with it evicted, alternating builds, the 1B's shape) */
        mlm_attn_job one = *job;
        if (!one.n_ctx) one.n_ctx = job->q0 + 1;
        job = &one;
        if (hd == 64) noncausal(job, scratch, 64);
        else if (hd == 80) noncausal(job, scratch, 80); /* the vision encoder */
        else if (hd == 128) noncausal(job, scratch, 128);
        else noncausal(job, scratch, hd);
    } else {
        if (hd == 64) causal(job, scratch, 64);
        else if (hd == 80) causal(job, scratch, 80);
        else if (hd == 128) causal(job, scratch, 128);
        else causal(job, scratch, hd);
    }
}
