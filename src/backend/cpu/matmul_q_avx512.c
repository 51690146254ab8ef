/* backend/cpu/matmul_q_avx512.c: native GGUF weights (tensor/qpanel.h) against int8
 * activations with AVX-512 VNNI (F, BW, VL, VNNI) and F16C.
 *
 * A 64-byte code vector is 16 rows x 4 columns, so one vpdpbusd adds 4 products to each of
 * 16 rows' int32 sums. vpdpbusd takes unsigned x signed bytes: the weights go in as unsigned
 * codes (q8_0's int8 codes + 128, iq4's table values + 128) against the signed activations,
 * and the code offset comes off with the token's exact column sum S (I = sum u * q - off * S).
 * The block's exact integer sums then get the canonical epilogue (backend.h), so every level
 * agrees bit for bit. A tile is one panel (16 rows) x T tokens: a block's codes are decoded
 * once for T tokens. Decode (1 token) streams 4 panels side by side. */
#include <immintrin.h>
#include <string.h>

#include "backend/backend.h"
#include "tensor/q8.h"
#include "tensor/qpanel.h"

#define INLINE static inline __attribute__((always_inline))
#define TMAX 6
#define PF_BYTES 1024 /* decode: how far ahead of its block each panel stream is prefetched */

/* The offset of the unsigned codes this file multiplies (q8_0 and iq4 shifted by +128). */
INLINE int off_of(mlm_qkind k) {
    return k == MLM_QK_Q8_0 || k == MLM_QK_IQ4_NL || k == MLM_QK_IQ4_XS ? 128 : mlm_qoff(k);
}

/* The 8 code vectors of block BB of group GRP (quad h: columns 4h..4h+3), as unsigned bytes. */
INLINE void load_codes(mlm_qkind k, const uint8_t *grp, const mlm_qgeom *g, int bb,
                       __m512i wv[8]) {
    const int bits = mlm_qbits(k);
    if (bits == 8) {
        const uint8_t *p = grp + bb * 512;
        _Pragma("GCC unroll 8")
        for (int h = 0; h < 8; h++)
            wv[h] = _mm512_xor_si512(_mm512_loadu_si512((const void *)(p + 64 * h)),
                                     _mm512_set1_epi8((char)0x80));
        return;
    }
    const __m512i m15 = _mm512_set1_epi8(0x0f);
    const uint8_t *p = grp + bb * 256;
    _Pragma("GCC unroll 4")
    for (int h = 0; h < 4; h++) {
        __m512i v = _mm512_loadu_si512((const void *)(p + 64 * h));
        wv[h] = _mm512_and_si512(v, m15);
        wv[4 + h] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m15);
    }
    if (k == MLM_QK_IQ4_NL || k == MLM_QK_IQ4_XS) {
        const __m512i lut = _mm512_broadcast_i32x4(_mm_setr_epi8(
            1, 24, 45, 63, 79, 93, 106, 118, (char)129, (char)141, (char)153, (char)166,
            (char)181, (char)197, (char)217, (char)241)); /* kv + 128 */
        _Pragma("GCC unroll 8")
        for (int h = 0; h < 8; h++) wv[h] = _mm512_shuffle_epi8(lut, wv[h]);
    } else if (bits == 5) {
        __m512i hb = _mm512_loadu_si512((const void *)(grp + g->high + bb * 64));
        _Pragma("GCC unroll 8")
        for (int h = 0; h < 8; h++) {
            __mmask64 m = _mm512_test_epi8_mask(hb, _mm512_set1_epi8((char)(1 << h)));
            wv[h] = _mm512_mask_add_epi8(wv[h], m, wv[h], _mm512_set1_epi8(16));
        }
    } else if (bits == 6) {
        const __m512i m30 = _mm512_set1_epi8(0x30);
        _Pragma("GCC unroll 2")
        for (int v = 0; v < 2; v++) {
            __m512i hv = _mm512_loadu_si512((const void *)(grp + g->high + bb * 128 + 64 * v));
            wv[4 * v + 0] = _mm512_or_si512(wv[4 * v + 0], _mm512_and_si512(_mm512_slli_epi16(hv, 4), m30));
            wv[4 * v + 1] = _mm512_or_si512(wv[4 * v + 1], _mm512_and_si512(_mm512_slli_epi16(hv, 2), m30));
            wv[4 * v + 2] = _mm512_or_si512(wv[4 * v + 2], _mm512_and_si512(hv, m30));
            wv[4 * v + 3] = _mm512_or_si512(wv[4 * v + 3], _mm512_and_si512(_mm512_srli_epi16(hv, 2), m30));
        }
    }
}

/* Block BB's 16 row scales (S1: q6_k's columns 16-31) and mins, as qpanel.h's mlm_qblock. */
INLINE void load_scales(mlm_qkind k, const uint8_t *grp, const mlm_qgeom *g, int bb,
                        __m512 *s0, __m512 *s1, __m512 *mn) {
    int unit = g->units == 1 ? 0 : bb;
    __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(grp + g->d + unit * 32)));
    const uint8_t *sub = grp + g->subs + bb * 16 * mlm_qsub_bytes(k);
    *s0 = *s1 = d;
    *mn = _mm512_setzero_ps();
    if (mlm_qhas_min(k)) {
        __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(grp + g->m + unit * 32)));
        if (k == MLM_QK_Q4_1 || k == MLM_QK_Q5_1) {
            *mn = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(m),
                                                       _mm512_set1_epi32((int)0x80000000u)));
        } else {
            __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)sub));
            __m512i mi = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(sub + 16)));
            *s0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc));
            *mn = _mm512_mul_ps(m, _mm512_cvtepi32_ps(mi));
        }
    } else if (k == MLM_QK_Q6_K) {
        *s0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)sub))));
        *s1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(sub + 16)))));
    } else if (k == MLM_QK_IQ4_XS) {
        *s0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)sub))));
    }
}

INLINE __m512i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* The block value v (backend.h) from the unsigned sums I0, I1 (columns 0-15, 16-31) and the
 * token's column sums. */
INLINE __m512 block_value(mlm_qkind k, __m512i i0, __m512i i1, int s0, int s1, __m512 sc0,
                          __m512 sc1, __m512 mn) {
    const int off = off_of(k);
    if (k == MLM_QK_Q6_K) {
        i0 = _mm512_sub_epi32(i0, _mm512_set1_epi32(off * s0));
        i1 = _mm512_sub_epi32(i1, _mm512_set1_epi32(off * s1));
        return _mm512_fmadd_ps(_mm512_cvtepi32_ps(i1), sc1,
                               _mm512_mul_ps(_mm512_cvtepi32_ps(i0), sc0));
    }
    __m512i i = _mm512_add_epi32(i0, i1);
    if (off) i = _mm512_sub_epi32(i, _mm512_set1_epi32(off * (s0 + s1)));
    if (mlm_qhas_min(k))
        return _mm512_fmsub_ps(_mm512_cvtepi32_ps(i), sc0,
                               _mm512_mul_ps(_mm512_set1_ps((float)(s0 + s1)), mn));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(i), sc0);
}

/* Rows [R, R + NR) of one panel for tokens [T0, T0 + T). */
INLINE void tile(mlm_qkind k, float *out, int64_t out_stride, const uint8_t *panel,
                 const mlm_qgeom *g, const mlm_acts *x, int64_t pc, int64_t r, int nr, int64_t t0,
                 int T) {
    const int64_t nd = pc / MLM_Q8_BLOCK, ns = pc / 16;
    const int8_t *q = x->q + t0 * pc;
    const float *d = x->d + t0 * nd;
    const int16_t *s16 = x->s + t0 * ns; /* the tokens' sums per 16 columns */
    __m512 acc[TMAX];
    _Pragma("GCC unroll 8")
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t gi = 0; gi < g->n_groups; gi++) {
        const uint8_t *grp = panel + gi * g->group_bytes;
        _mm_prefetch((const char *)(grp + 2 * g->group_bytes), _MM_HINT_T0);
        for (int bb = 0; bb < g->g; bb++) {
            const int64_t b = gi * g->g + bb;
            __m512i wv[8];
            load_codes(k, grp, g, bb, wv);
            __m512 sc0, sc1, mn;
            load_scales(k, grp, g, bb, &sc0, &sc1, &mn);
            __m512i i0[TMAX], i1[TMAX];
            _Pragma("GCC unroll 8")
            for (int t = 0; t < T; t++) i0[t] = i1[t] = _mm512_setzero_si512();
            _Pragma("GCC unroll 4")
            for (int h = 0; h < 4; h++)
                _Pragma("GCC unroll 8")
                for (int t = 0; t < T; t++) {
                    i0[t] = _mm512_dpbusd_epi32(i0[t], wv[h], bcast4(q + t * pc + 32 * b + 4 * h));
                    i1[t] = _mm512_dpbusd_epi32(i1[t], wv[4 + h], bcast4(q + t * pc + 32 * b + 16 + 4 * h));
                }
            _Pragma("GCC unroll 8")
            for (int t = 0; t < T; t++) {
                __m512 v = block_value(k, i0[t], i1[t], s16[t * ns + 2 * b], s16[t * ns + 2 * b + 1],
                                       sc0, sc1, mn);
                acc[t] = _mm512_fmadd_ps(v, _mm512_set1_ps(d[t * nd + b]), acc[t]);
            }
        }
    }
    const __mmask16 m = (__mmask16)(nr == 16 ? 0xffff : (1u << nr) - 1);
    _Pragma("GCC unroll 8")
    for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(out + (t0 + t) * out_stride + r, m, acc[t]);
}

/* Decode: 4 whole panels from row R for one token, read side by side. */
INLINE void gemv4(mlm_qkind k, float *out, const uint8_t *panel0, const mlm_qgeom *g,
                  const mlm_acts *x, int64_t r) {
    __m512 acc[4];
    _Pragma("GCC unroll 4")
    for (int p = 0; p < 4; p++) acc[p] = _mm512_setzero_ps();
    const int64_t slice = (g->group_bytes / g->g + 63) / 64 * 64; /* a block's share */
    for (int64_t gi = 0; gi < g->n_groups; gi++) {
        for (int bb = 0; bb < g->g; bb++) {
            /* each stream PF_BYTES ahead of this block, a block's share of lines at a time */
            _Pragma("GCC unroll 4")
            for (int p = 0; p < 4; p++) {
                const uint8_t *ahead = panel0 + p * g->panel_bytes + gi * g->group_bytes +
                                       bb * slice + PF_BYTES;
                for (int64_t c = 0; c < slice; c += 64)
                    _mm_prefetch((const char *)(ahead + c), _MM_HINT_T0);
            }
            const int64_t b = gi * g->g + bb;
            __m512i xv[8];
            _Pragma("GCC unroll 8")
            for (int h = 0; h < 8; h++) xv[h] = bcast4(x->q + 32 * b + 4 * h);
            __m512 d = _mm512_set1_ps(x->d[b]);
            _Pragma("GCC unroll 4")
            for (int p = 0; p < 4; p++) {
                const uint8_t *grp = panel0 + p * g->panel_bytes + gi * g->group_bytes;
                __m512i wv[8];
                load_codes(k, grp, g, bb, wv);
                __m512 sc0, sc1, mn;
                load_scales(k, grp, g, bb, &sc0, &sc1, &mn);
                __m512i i0 = _mm512_setzero_si512(), i1 = _mm512_setzero_si512();
                _Pragma("GCC unroll 4")
                for (int h = 0; h < 4; h++) {
                    i0 = _mm512_dpbusd_epi32(i0, wv[h], xv[h]);
                    i1 = _mm512_dpbusd_epi32(i1, wv[4 + h], xv[4 + h]);
                }
                __m512 v = block_value(k, i0, i1, x->s[2 * b], x->s[2 * b + 1], sc0, sc1, mn);
                acc[p] = _mm512_fmadd_ps(v, d, acc[p]);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int p = 0; p < 4; p++) _mm512_storeu_ps(out + r + 16 * p, acc[p]);
}

INLINE void matmul_q(mlm_qkind k, float *out, int64_t out_stride, const void *w,
                     const mlm_acts *x, int64_t r0, int64_t r1) {
    const int64_t pc = mlm_q8_cols(x->cols);
    const mlm_qgeom g = mlm_qpanel_geom(k, x->cols);
    if (x->n == 1) /* decode: whole panels four at a time */
        for (; r0 + 4 * MLM_QP_ROWS <= r1; r0 += 4 * MLM_QP_ROWS)
            gemv4(k, out, (const uint8_t *)w + r0 / MLM_QP_ROWS * g.panel_bytes, &g, x, r0);
    for (int64_t r = r0; r < r1; r += MLM_QP_ROWS) {
        const uint8_t *panel = (const uint8_t *)w + r / MLM_QP_ROWS * g.panel_bytes;
        int nr = r1 - r < MLM_QP_ROWS ? (int)(r1 - r) : MLM_QP_ROWS;
        for (int64_t t0 = 0; t0 < x->n; t0 += TMAX)
            switch (x->n - t0 < TMAX ? x->n - t0 : TMAX) {
            case 1: tile(k, out, out_stride, panel, &g, x, pc, r, nr, t0, 1); break;
            case 2: tile(k, out, out_stride, panel, &g, x, pc, r, nr, t0, 2); break;
            case 3: tile(k, out, out_stride, panel, &g, x, pc, r, nr, t0, 3); break;
            case 4: tile(k, out, out_stride, panel, &g, x, pc, r, nr, t0, 4); break;
            case 5: tile(k, out, out_stride, panel, &g, x, pc, r, nr, t0, 5); break;
            default: tile(k, out, out_stride, panel, &g, x, pc, r, nr, t0, TMAX);
            }
    }
}

#define Q_AVX512(T, t, _)                                                                       \
    void mlm_matmul_##t##_q8_avx512(float *out, int64_t out_stride, const void *w,              \
                                    const mlm_acts *x, int64_t r0, int64_t r1) {                \
        matmul_q((mlm_qkind)(MLM_W_##T - MLM_W_Q8_0), out, out_stride, w, x, r0, r1);           \
    }
MLM_NATIVE_TYPES(Q_AVX512, _)
