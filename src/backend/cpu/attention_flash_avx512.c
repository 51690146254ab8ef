/* backend/cpu/attention_flash_avx512.c: flash attention with AVX-512F, bit for bit the
 * arithmetic of attention_flash_ref.c, in either mode of mlm_attn_job.
 *
 * Causal jobs: per tile of MLM_ATT_KT entries, the KV head's K rows are decoded once (f32
 * used as is, bf16 and BFP8 decoded exactly) and transposed, so that a score vector holds 16
 * entries (lane = entry, one fma chain over d per lane: the reference's order), and the V
 * rows are decoded once; every query and head of the job then reads them. Rows of one query
 * share their valid range, so they are blocked together.
 * Non-causal jobs: every row reads the same entries, so a score vector holds 16 rows (lane =
 * (query, head), again one fma chain over d per lane) and the K rows need no transpose; one
 * K load feeds 16 rows, the softmax runs across lanes, and f32 V rows are read in place.
 * In both, the output accumulators hold 16 values of d per vector (lane = d, one fma chain
 * over the entries), blocked 4 rows x up to 80 columns so that one V load feeds 4 rows; the
 * next tile's rows are prefetched (one head's values are a short run in each entry). Scratch
 * is bounded by the tile and job sizes, whatever the context length. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/attention_prefetch.h"
#include "backend/cpu/exp2_avx512.h"
#include "tensor/bfp.h"

#define INLINE static inline __attribute__((always_inline))
#define KT MLM_ATT_KT
_Static_assert(KT == 64, "the tile sum is written for 64 entries");

/* Values [OFF, OFF + HD) of the entry at E as f32 into DST. */
INLINE void decode_row(const mlm_paged_kv *kv, const char *e, int64_t off, int hd, float *dst) {
    if (kv->type == MLM_W_F32) {
        memcpy(dst, (const float *)e + off, (size_t)hd * sizeof *dst);
    } else if (kv->type == MLM_W_BF16) {
        const uint16_t *h = (const uint16_t *)e + off;
        for (int d = 0; d < hd; d += 16) {
            __m256i x = _mm256_loadu_si256((const __m256i *)(h + d));
            _mm512_storeu_ps(dst + d, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16)));
        }
    } else { /* BFP8: 16 values share an exponent; mag x (2^(e - 127) x 2^-6), sign bit 7 */
        for (int d = 0; d < hd; d += 16) {
            uint64_t i = (uint64_t)off + (uint64_t)d;
            const uint8_t *g = (const uint8_t *)e + i / MLM_BFP_GROUP * 68;
            unsigned j = (unsigned)(i % MLM_BFP_GROUP);
            __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(g + j)));
            __m512i ex = _mm512_set1_epi32((int)g[64 + j / 16]);
            __m512 scale = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(ex, 23)),
                                         _mm512_set1_ps(1.0f / 64));
            __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(c, _mm512_set1_epi32(0x7f))), scale);
            __m512i sign = _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24);
            _mm512_storeu_ps(dst + d, _mm512_or_ps(v, _mm512_castsi512_ps(sign)));
        }
    }
}

/* Entries [J0, J0 + N) of POOL, values [OFF, OFF + HD) each, as f32 rows of HD into DST; the
 * page of each entry is looked up once per page, not per entry. */
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

/* The 16 x 16 block at SRC (row stride SS) transposed into DST (row stride DS). */
INLINE void transpose16(const float *src, int64_t ss, float *dst, int64_t ds) {
    __m512 r[16], t[16];
    _Pragma("GCC unroll 16")
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * ss);
    _Pragma("GCC unroll 16")
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    _Pragma("GCC unroll 16")
    for (int i = 0; i < 16; i += 4)
        _Pragma("GCC unroll 16")
        for (int k = 0; k < 2; k++) {
            r[i + k] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + k]), _mm512_castps_pd(t[i + k + 2])));
            r[i + k + 2] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + k]), _mm512_castps_pd(t[i + k + 2])));
        }
    _Pragma("GCC unroll 16")
    for (int i = 0; i < 16; i += 8)
        _Pragma("GCC unroll 16")
        for (int k = 0; k < 4; k++) {
            t[i + k] = _mm512_shuffle_f32x4(r[i + k], r[i + k + 4], 0x88);
            t[i + k + 4] = _mm512_shuffle_f32x4(r[i + k], r[i + k + 4], 0xdd);
        }
    _Pragma("GCC unroll 16")
    for (int k = 0; k < 8; k++) {
        r[k] = _mm512_shuffle_f32x4(t[k], t[k + 8], 0x88);
        r[k + 8] = _mm512_shuffle_f32x4(t[k], t[k + 8], 0xdd);
    }
    /* r[k] now holds column c(k) of the block: the unpack stages interleave the order */
    static const int col[16] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
    _Pragma("GCC unroll 16")
    for (int k = 0; k < 16; k++) _mm512_storeu_ps(dst + col[k] * ds, r[k]);
}

/* Scores of NR rows (query vectors QS, stride HD) against the transposed tile KT_ (HD x KT)
 * for NV vectors of 16 entries into S (stride KT). */
INLINE void scores(const float *qs, int nr, const float *kt, int hd, int nv, float *s) {
    __m512 acc[4][4];
    memset(acc, 0, sizeof acc);
    for (int r = 0; r < nr; r++)
        for (int v = 0; v < nv; v++) acc[r][v] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d++) {
        __m512 k[4];
        memset(k, 0, sizeof k);
        _Pragma("GCC unroll 4")
        for (int v = 0; v < nv; v++) k[v] = _mm512_loadu_ps(kt + d * KT + 16 * v);
        _Pragma("GCC unroll 4")
        for (int r = 0; r < nr; r++) {
            __m512 q = _mm512_set1_ps(qs[r * hd + d]);
            _Pragma("GCC unroll 4")
            for (int v = 0; v < nv; v++) acc[r][v] = _mm512_fmadd_ps(q, k[v], acc[r][v]);
        }
    }
    for (int r = 0; r < nr; r++)
        for (int v = 0; v < nv; v++) _mm512_storeu_ps(s + r * KT + 16 * v, acc[r][v]);
}

/* Columns [0, 16 ND) of O's NR rows (stride HD) = O * alpha, then + p_j v_j for the NJ
 * entries (V rows of stride VS); row r's p_j is at P[r * PR + j * PJ]. */
INLINE void accumulate(float *o, int nr, const float *alpha, const float *p, int pr, int pj,
                       const float *v, int64_t vs, int hd, int nj, int nd) {
    __m512 acc[4][8];
    memset(acc, 0, sizeof acc);
    _Pragma("GCC unroll 4")
    for (int r = 0; r < nr; r++)
        _Pragma("GCC unroll 8")
        for (int c = 0; c < nd; c++)
            acc[r][c] = _mm512_mul_ps(_mm512_loadu_ps(o + r * hd + 16 * c), _mm512_set1_ps(alpha[r]));
    for (int j = 0; j < nj; j++) {
        __m512 vj[8];
        memset(vj, 0, sizeof vj);
        _Pragma("GCC unroll 8")
        for (int c = 0; c < nd; c++) vj[c] = _mm512_loadu_ps(v + j * vs + 16 * c);
        _Pragma("GCC unroll 4")
        for (int r = 0; r < nr; r++) {
            __m512 pv = _mm512_set1_ps(p[r * pr + j * pj]);
            _Pragma("GCC unroll 8")
            for (int c = 0; c < nd; c++) acc[r][c] = _mm512_fmadd_ps(pv, vj[c], acc[r][c]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int r = 0; r < nr; r++)
        _Pragma("GCC unroll 8")
        for (int c = 0; c < nd; c++) _mm512_storeu_ps(o + r * hd + 16 * c, acc[r][c]);
}

/* The common shapes of accumulate, each compiled on its own: inlined into the kernels, the
 * loop shares the registers with what they keep live, and V loads get folded into every FMA
 * instead of one load feeding a column of the block. */
static __attribute__((noinline)) void accumulate_4x4(float *o, const float *alpha,
                                                     const float *p, int pr, int pj,
                                                     const float *v, int64_t vs, int hd, int nj) {
    accumulate(o, 4, alpha, p, pr, pj, v, vs, hd, nj, 4);
}
static __attribute__((noinline)) void accumulate_4x5(float *o, const float *alpha,
                                                     const float *p, int pr, int pj,
                                                     const float *v, int64_t vs, int hd, int nj) {
    accumulate(o, 4, alpha, p, pr, pj, v, vs, hd, nj, 5);
}
static __attribute__((noinline)) void accumulate_2x8(float *o, const float *alpha,
                                                     const float *p, int pr, int pj,
                                                     const float *v, int64_t vs, int hd, int nj) {
    accumulate(o, 2, alpha, p, pr, pj, v, vs, hd, nj, 8);
}

/* The output update of NR rows (P's row r at P + r * PR, entry j at + j * PJ; V rows of
 * stride VS) over all of HD: 16 accumulators or more a block (4 rows x 64 or 80 columns,
 * 2 x 128, 1 x 256 in halves), each V load feeding every row of the block. */
INLINE void update_rows(float *o, int nr, const float *alpha, const float *p, int pr, int pj,
                        const float *v, int64_t vs, int hd, int nj) {
    for (int c0 = 0; c0 < hd / 16; c0 += 8) {
        int nd = hd / 16 - c0 < 8 ? hd / 16 - c0 : 8, rb = nd <= 5 ? 4 : 2;
        for (int r = 0; r < nr; r += rb) {
            int n = nr - r < rb ? nr - r : rb;
            float *oo = o + r * hd + 16 * c0;
            const float *pp = p + r * pr, *vv = v + 16 * c0;
            if (n == 4 && nd == 4) accumulate_4x4(oo, alpha + r, pp, pr, pj, vv, vs, hd, nj);
            else if (n == 4 && nd == 5) accumulate_4x5(oo, alpha + r, pp, pr, pj, vv, vs, hd, nj);
            else if (n == 2 && nd == 8) accumulate_2x8(oo, alpha + r, pp, pr, pj, vv, vs, hd, nj);
            else accumulate(oo, n, alpha + r, pp, pr, pj, vv, vs, hd, nj, nd);
        }
    }
}

/* The tile's softmax update of one row: S holds its scores for NJ entries (16 x NV slots). */
INLINE void softmax_row(float *s, int nj, float *m, float *l, float *alpha) {
    __m512 sv[4];
    __m512 mx = _mm512_set1_ps(-INFINITY);
    _Pragma("GCC unroll 16")
    for (int v = 0; v < 4; v++) {
        int left = nj - 16 * v;
        __mmask16 k = left >= 16 ? 0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
        sv[v] = _mm512_loadu_ps(s + 16 * v);
        mx = _mm512_mask_max_ps(mx, k, mx, sv[v]);
    }
    float mt = _mm512_reduce_max_ps(mx), mn = *m > mt ? *m : mt;
    *alpha = *m == -INFINITY ? 0.0f : mlm_exp2c(*m - mn);
    __m512 lane = _mm512_setzero_ps(), mnv = _mm512_set1_ps(mn);
    _Pragma("GCC unroll 16")
    for (int v = 0; v < 4; v++) {
        int left = nj - 16 * v;
        __mmask16 k = left >= 16 ? 0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
        __m512 p = mlm_exp2_avx512(_mm512_sub_ps(sv[v], mnv), k);
        _mm512_storeu_ps(s + 16 * v, p);
        lane = v ? _mm512_add_ps(lane, p) : p;
    }
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(lane),
                              _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(lane), 1)));
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
    const int32_t last = job->q0 + job->n_q; /* entries the last query reads */
    for (int32_t j0 = 0; j0 < last; j0 += KT) {
        int ntile = last - j0 < KT ? last - j0 : KT;
        /* K rows into vt (row major, zero rows past the tile), transposed into kt */
        decode_rows(kv, kv->k, job->blocks, j0, ntile, off, hd, vt);
        if (ntile < KT) memset(vt + ntile * hd, 0, (size_t)((KT - ntile) * hd) * sizeof *vt);
        for (int jb = 0; jb < KT; jb += 16)
            for (int db = 0; db < hd; db += 16) transpose16(vt + jb * hd + db, hd, kt + db * KT + jb, KT);
        decode_rows(kv, kv->v, job->blocks, j0, ntile, off, hd, vt);
        if (last - j0 > KT) {
            int next = last - j0 - KT < KT ? last - j0 - KT : KT;
            mlm_att_prefetch_rows(kv, kv->k, job->blocks, j0 + KT, next, off, hd);
            mlm_att_prefetch_rows(kv, kv->v, job->blocks, j0 + KT, next, off, hd);
        }
        for (int i = 0; i < job->n_q; i++) {
            int32_t end = job->q0 + i + 1; /* entries query i reads */
            if (end <= j0) continue;
            int nj = end - j0 < KT ? end - j0 : KT, nv = (nj + 15) / 16;
            float *si = s + i * nh * KT, *qi = qs + i * nh * hd, *oi = o + i * nh * hd;
            for (int r = 0; r < nh; r += 4) {
                int nr = nh - r < 4 ? nh - r : 4;
                if (nr == 4 && nv == 4) scores(qi + r * hd, 4, kt, hd, 4, si + r * KT);
                else scores(qi + r * hd, nr, kt, hd, nv, si + r * KT);
            }
            for (int r = 0; r < nh; r++) softmax_row(si + r * KT, nj, &m[i * nh + r], &l[i * nh + r], &alpha[r]);
            update_rows(oi, nh, alpha, si, KT, 1, vt, hd, hd, nj);
        }
    }
    for (int i = 0; i < job->n_q; i++)
        for (int hh = 0; hh < nh; hh++) {
            int r = i * nh + hh;
            float inv = 1.0f / l[r], *orow = job->out + i * job->out_stride + (int64_t)(job->kv_head * job->group + job->hh0 + hh) * hd;
            for (int d = 0; d < hd; d += 16)
                _mm512_storeu_ps(orow + d, _mm512_mul_ps(_mm512_loadu_ps(o + r * hd + d), _mm512_set1_ps(inv)));
        }
}

// ---- non-causal jobs: lanes = rows ----

/* Scores of 16 rows (q' transposed: QT[d * 16 + lane]) against the K rows KR (stride HD) of
 * 16 entries, into ST[jj * 16 + lane]: each lane one fma chain over d, one K load (a
 * broadcast) feeding the 16 rows. */
INLINE void nc_scores(const float *qt, const float *kr, int hd, float *st) {
    __m512 acc[16];
    _Pragma("GCC unroll 16")
    for (int jj = 0; jj < 16; jj++) acc[jj] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d++) {
        __m512 q = _mm512_loadu_ps(qt + d * 16);
        _Pragma("GCC unroll 16")
        for (int jj = 0; jj < 16; jj++) acc[jj] = _mm512_fmadd_ps(q, _mm512_set1_ps(kr[jj * hd + d]), acc[jj]);
    }
    _Pragma("GCC unroll 16")
    for (int jj = 0; jj < 16; jj++) _mm512_storeu_ps(st + jj * 16, acc[jj]);
}

/* The tile's softmax update of 16 rows at once (lane = row): ST holds the scores of NJ
 * entries (ST[j * 16 + lane]) and gets their p_j; M and L are the rows' running max and sum;
 * ALPHA gets the rows' rescale factors. The reference's scalar steps, lane by lane. */
INLINE void nc_softmax(float *st, int nj, float *m, float *l, float *alpha) {
    __m512 mt = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < nj; j++) mt = _mm512_max_ps(_mm512_loadu_ps(st + j * 16), mt);
    __m512 mo = _mm512_loadu_ps(m), mn = _mm512_max_ps(mo, mt);
    __m512 a = mlm_exp2_avx512(_mm512_sub_ps(mo, mn),
                               _mm512_cmp_ps_mask(mo, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ));
    /* the tile sum: lane x of the reference is entries x, 16 + x, 32 + x, 48 + x */
    __m512 lane[16];
    _Pragma("GCC unroll 16")
    for (int x = 0; x < 16; x++) lane[x] = _mm512_setzero_ps();
    for (int v = 0; v < 4; v++)
        _Pragma("GCC unroll 16")
        for (int x = 0; x < 16; x++) {
            int j = 16 * v + x;
            __m512 p =
                j < nj ? mlm_exp2_avx512(_mm512_sub_ps(_mm512_loadu_ps(st + j * 16), mn), 0xffff)
                       : _mm512_setzero_ps();
            if (j < nj) _mm512_storeu_ps(st + j * 16, p);
            lane[x] = v ? _mm512_add_ps(lane[x], p) : p;
        }
    _Pragma("GCC unroll 16")
    for (int w = 8; w >= 1; w /= 2)
        _Pragma("GCC unroll 16")
        for (int x = 0; x < w; x++) lane[x] = _mm512_add_ps(lane[x], lane[x + w]);
    _mm512_storeu_ps(l, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(l), a), lane[0]));
    _mm512_storeu_ps(m, mn);
    _mm512_storeu_ps(alpha, a);
}

/* Every row of the job reads entries [0, N_CTX): the rows (query, head) are the lanes of the
 * score vectors, 16 a chunk, so K rows are read as they are (no transpose) and the softmax
 * runs across lanes without reductions. Rows past R in the last chunk are zero and dropped.
 * What a tile touches is kept small: K is decoded 16 entries at a time (once for all chunks),
 * and f32 V rows are read in place when the tile lies in one page. */
INLINE void noncausal(const mlm_attn_job *job, float *scratch, int hd) {
    const mlm_paged_kv *kv = job->kv;
    const int nh = job->n_hh, R = job->n_q * nh, RP = (R + 15) / 16 * 16;
    const int64_t off = (int64_t)job->kv_head * hd;
    const int32_t n_ctx = job->n_ctx;
    const uint32_t bs = (uint32_t)kv->block_size;
    /* K rows of 16 entries; V rows of the tile (when decoded); q' of chunk c at qt + c * 16 *
     * hd as (hd, 16); scores and p of chunk c at st + c * 16 * KT as (KT, 16); o rows; m, l */
    float *kr = scratch, *vr = kr + KT * hd, *qt = vr + KT * hd, *st = qt + RP * hd,
          *o = st + RP * KT, *m = o + RP * hd, *l = m + RP, alpha[16];
    const float c = MLM_LOG2E / sqrtf((float)hd);
    memset(qt, 0, (size_t)(RP * hd) * sizeof *qt);
    for (int r = 0; r < R; r++) {
        int i = r / nh, h = job->kv_head * job->group + job->hh0 + r % nh;
        const float *qrow = job->q + i * job->q_stride + (int64_t)h * hd;
        float *q = qt + (r / 16) * 16 * hd + r % 16;
        for (int d = 0; d < hd; d++) q[d * 16] = qrow[d] * c;
    }
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
            for (int c0 = 0; c0 < RP; c0 += 16) nc_scores(qt + c0 * hd, kr, hd, st + c0 * KT + b * 16 * 16);
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
        for (int c0 = 0; c0 < RP; c0 += 16) {
            float *sc = st + c0 * KT;
            nc_softmax(sc, nj, m + c0, l + c0, alpha);
            int nr = R - c0 < 16 ? R - c0 : 16;
            update_rows(o + c0 * hd, nr, alpha, sc, 1, 16, v, vs, hd, nj);
        }
    }
    for (int r = 0; r < R; r++) {
        int i = r / nh, h = job->kv_head * job->group + job->hh0 + r % nh;
        float inv = 1.0f / l[r], *orow = job->out + i * job->out_stride + (int64_t)h * hd;
        for (int d = 0; d < hd; d += 16)
            _mm512_storeu_ps(orow + d, _mm512_mul_ps(_mm512_loadu_ps(o + r * hd + d), _mm512_set1_ps(inv)));
    }
}

void mlm_attention_flash_avx512(const mlm_attn_job *job, float *scratch) {
    int hd = job->head_dim;
    if (hd % 16 || hd > MLM_ATT_HD) /* the same arithmetic, scalar */
        mlm_attention_flash_ref(job, scratch);
    else if (job->n_ctx > 0) {
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
