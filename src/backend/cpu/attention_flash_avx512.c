/* backend/cpu/attention_flash_avx512.c: flash attention with AVX-512F, bit for bit the
 * arithmetic of attention_flash_ref.c.
 *
 * Per tile of MLM_ATT_KT entries, the KV head's K rows are decoded once (f32 used as is,
 * bf16 and BFP8 decoded exactly) and transposed, so that a score vector holds 16 entries
 * (lane = entry, one fma chain over d per lane: the reference's order), and the V rows are
 * decoded once; every query and head of the job then reads them. The output accumulators
 * hold 16 values of d per vector (lane = d, one fma chain over the entries). Rows of one
 * query share their valid range, so they are blocked together. Scratch is bounded by the
 * tile and job sizes, whatever the context length. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/exp2.h"
#include "tensor/bfp.h"

#define INLINE static inline __attribute__((always_inline))
#define KT MLM_ATT_KT
_Static_assert(KT == 64, "the tile sum is written for 64 entries");

/* exp2c on 16 lanes, lanes outside VALID 0. */
INLINE __m512 exp2v(__m512 x, __mmask16 valid) {
    valid &= _mm512_cmp_ps_mask(x, _mm512_set1_ps(MLM_EXP2_MIN), _CMP_GE_OQ);
    __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(x, n), p = _mm512_set1_ps(MLM_EXP2_P0);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(MLM_EXP2_P1));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(MLM_EXP2_P2));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(MLM_EXP2_P3));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(MLM_EXP2_P4));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(MLM_EXP2_P5));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(valid, p, _mm512_castsi512_ps(e));
}

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
 * entries (V rows of stride HD). */
INLINE void accumulate(float *o, int nr, const float *alpha, const float *p, const float *v,
                       int hd, int nj, int nd) {
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
        for (int c = 0; c < nd; c++) vj[c] = _mm512_loadu_ps(v + j * hd + 16 * c);
        _Pragma("GCC unroll 4")
        for (int r = 0; r < nr; r++) {
            __m512 pj = _mm512_set1_ps(p[r * KT + j]);
            _Pragma("GCC unroll 8")
            for (int c = 0; c < nd; c++) acc[r][c] = _mm512_fmadd_ps(pj, vj[c], acc[r][c]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int r = 0; r < nr; r++)
        _Pragma("GCC unroll 8")
        for (int c = 0; c < nd; c++) _mm512_storeu_ps(o + r * hd + 16 * c, acc[r][c]);
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
        __m512 p = exp2v(_mm512_sub_ps(sv[v], mnv), k);
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
    const int32_t last = job->q0 + job->n_q; /* entries the last query reads */
    for (int32_t j0 = 0; j0 < last; j0 += KT) {
        int ntile = last - j0 < KT ? last - j0 : KT;
        /* K rows into vt (row major, zero rows past the tile), transposed into kt */
        decode_rows(kv, kv->k, job->blocks, j0, ntile, off, hd, vt);
        if (ntile < KT) memset(vt + ntile * hd, 0, (size_t)((KT - ntile) * hd) * sizeof *vt);
        for (int jb = 0; jb < KT; jb += 16)
            for (int db = 0; db < hd; db += 16) transpose16(vt + jb * hd + db, hd, kt + db * KT + jb, KT);
        decode_rows(kv, kv->v, job->blocks, j0, ntile, off, hd, vt);
        for (int i = 0; i < job->n_q; i++) {
            int32_t n_ctx = job->q0 + i + 1;
            if (n_ctx <= j0) continue;
            int nj = n_ctx - j0 < KT ? n_ctx - j0 : KT, nv = (nj + 15) / 16;
            float *si = s + i * nh * KT, *qi = qs + i * nh * hd, *oi = o + i * nh * hd;
            for (int r = 0; r < nh; r += 4) {
                int nr = nh - r < 4 ? nh - r : 4;
                if (nr == 4 && nv == 4) scores(qi + r * hd, 4, kt, hd, 4, si + r * KT);
                else scores(qi + r * hd, nr, kt, hd, nv, si + r * KT);
            }
            for (int r = 0; r < nh; r++) softmax_row(si + r * KT, nj, &m[i * nh + r], &l[i * nh + r], &alpha[r]);
            /* 16 accumulators a block: 4 rows x 64 columns, 2 x 128, 1 x 256 in two halves */
            for (int c0 = 0; c0 < hd / 16; c0 += 8) {
                int nd = hd / 16 - c0 < 8 ? hd / 16 - c0 : 8, rb = nd <= 4 ? 4 : 2;
                for (int r = 0; r < nh; r += rb) {
                    int nr = nh - r < rb ? nh - r : rb;
                    float *oo = oi + r * hd + 16 * c0, *pp = si + r * KT, *vv = vt + 16 * c0;
                    if (nr == 4 && nd == 4) accumulate(oo, 4, alpha + r, pp, vv, hd, nj, 4);
                    else if (nr == 2 && nd == 8) accumulate(oo, 2, alpha + r, pp, vv, hd, nj, 8);
                    else accumulate(oo, nr, alpha + r, pp, vv, hd, nj, nd);
                }
            }
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

void mlm_attention_flash_avx512(const mlm_attn_job *job, float *scratch) {
    if (job->head_dim % 16 || job->head_dim > MLM_ATT_HD) /* the same arithmetic, scalar */
        mlm_attention_flash_ref(job, scratch);
    else if (job->head_dim == 64) flash(job, scratch, 64);
    else if (job->head_dim == 128) flash(job, scratch, 128);
    else flash(job, scratch, job->head_dim);
}
