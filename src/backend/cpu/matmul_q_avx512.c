/* backend/cpu/matmul_q_avx512.c: native GGUF weights (tensor/qpanel.h) against int8
 * activations with AVX-512 VNNI (F, BW, VL, VNNI) and F16C.
 *
 * A 64-byte code vector is 16 rows x 4 columns, so one vpdpbusd adds 4 products to each of
 * 16 rows' int32 sums. vpdpbusd takes unsigned x signed bytes: the weights go in as unsigned
 * codes (q8_0's int8 codes + 128, iq4's table values + 128) against the signed activations,
 * and the code offset comes off with the token's exact column sum S (I = sum u * q - off * S).
 * The block's exact integer sums then get the canonical epilogue (backend.h), so every level
 * agrees bit for bit. Prefill runs up to 4 panels (64 rows) x T tokens a K group (8 blocks)
 * at a time, the group's activations packed once for those panels: a block's codes are
 * decoded once for T tokens. Decode (1 token) streams one panel at a time on AMD, 4 side by
 * side elsewhere (core/cpu.h). */
#include <immintrin.h>
#include <string.h>

#include "backend/backend.h"
#include "core/cpu.h"
#include "tensor/q8.h"
#include "tensor/qpanel.h"

#define INLINE static inline __attribute__((always_inline))
#define TMAX 10 /* tokens per tile (q6_k: 8) */
#define PF_BYTES 1024 /* decode: how far ahead of its block each panel stream is prefetched */
#define PF_TILE 2048  /* tiles: the same in a strip's first pass (tile_group; about a q4_k
                         group ahead: 1024 measured level with it on Zen 4, 4096 slower) */
#define GT_MAX 4      /* gemv_t: up to this many tokens stream like decode (see there) */

/* The offset of the unsigned codes this file multiplies (q8_0 and iq4 shifted by +128). */
INLINE int off_of(mlm_qkind k) {
    return k == MLM_QK_Q8_0 || k == MLM_QK_IQ4_NL || k == MLM_QK_IQ4_XS ? 128 : mlm_qoff(k);
}

/* Whether a kind's codes are plain 4-bit nibbles (no table, no high bits). */
INLINE int plain4(mlm_qkind k) {
    return k == MLM_QK_Q4_0 || k == MLM_QK_Q4_1 || k == MLM_QK_Q4_K;
}

/* q6_k: ORs bits 4-5 of 4 code vectors W4 (columns 16hf..16hf + 15) in from their 64 high
 * bytes at HP. */
INLINE void or_q6_high(const uint8_t *hp, __m512i w4[4]) {
    const __m512i m30 = _mm512_set1_epi8(0x30);
    __m512i hv = _mm512_loadu_si512((const void *)hp);
    w4[0] = _mm512_or_si512(w4[0], _mm512_and_si512(_mm512_slli_epi16(hv, 4), m30));
    w4[1] = _mm512_or_si512(w4[1], _mm512_and_si512(_mm512_slli_epi16(hv, 2), m30));
    w4[2] = _mm512_or_si512(w4[2], _mm512_and_si512(hv, m30));
    w4[3] = _mm512_or_si512(w4[3], _mm512_and_si512(_mm512_srli_epi16(hv, 2), m30));
}

/* q6_k: the 4 code vectors of half HF of block BB of group GRP (columns 16hf..16hf + 15), as
 * unsigned bytes: the tile decodes each half when it multiplies it, so fewer vectors are live
 * next to its token sums. */
INLINE void load_q6_half(const uint8_t *grp, const mlm_qgeom *g, int bb, int hf, __m512i w4[4]) {
    const __m512i m15 = _mm512_set1_epi8(0x0f);
    const uint8_t *p = mlm_qpanel_codes(g, grp, bb);
    _Pragma("GCC unroll 4")
    for (int h = 0; h < 4; h++) {
        __m512i v = _mm512_loadu_si512((const void *)(p + 64 * h));
        w4[h] = _mm512_and_si512(hf ? _mm512_srli_epi16(v, 4) : v, m15);
    }
    or_q6_high(p + g->high + 64 * hf, w4);
}

/* The 8 code vectors of block BB of group GRP (quad h: columns 4h..4h+3), as unsigned bytes.
 * HI16 (plain 4-bit kinds only): columns 16-31 are left in their high nibble, 16 times the
 * code, saving a shift per vector; their sums are then 16 times the codes' (see gemv). */
INLINE void load_codes(mlm_qkind k, const uint8_t *grp, const mlm_qgeom *g, int bb,
                       __m512i wv[8], int hi16) {
    const int bits = mlm_qbits(k);
    if (bits == 8) {
        const uint8_t *p = mlm_qpanel_codes(g, grp, bb);
        _Pragma("GCC unroll 8")
        for (int h = 0; h < 8; h++)
            wv[h] = _mm512_xor_si512(_mm512_loadu_si512((const void *)(p + 64 * h)),
                                     _mm512_set1_epi8((char)0x80));
        return;
    }
    const __m512i m15 = _mm512_set1_epi8(0x0f);
    const uint8_t *p = mlm_qpanel_codes(g, grp, bb);
    _Pragma("GCC unroll 4")
    for (int h = 0; h < 4; h++) {
        __m512i v = _mm512_loadu_si512((const void *)(p + 64 * h));
        wv[h] = _mm512_and_si512(v, m15);
        wv[4 + h] = hi16 && plain4(k) ? _mm512_andnot_si512(m15, v)
                                      : _mm512_and_si512(_mm512_srli_epi16(v, 4), m15);
    }
    if (k == MLM_QK_IQ4_NL || k == MLM_QK_IQ4_XS) {
        const __m512i lut = _mm512_broadcast_i32x4(_mm_setr_epi8(
            1, 24, 45, 63, 79, 93, 106, 118, (char)129, (char)141, (char)153, (char)166,
            (char)181, (char)197, (char)217, (char)241)); /* kv + 128 */
        _Pragma("GCC unroll 8")
        for (int h = 0; h < 8; h++) wv[h] = _mm512_shuffle_epi8(lut, wv[h]);
    } else if (bits == 5) {
        __m512i hb = _mm512_loadu_si512((const void *)(mlm_qpanel_codes(g, grp, bb) + g->high));
        _Pragma("GCC unroll 8")
        for (int h = 0; h < 8; h++) {
            __mmask64 m = _mm512_test_epi8_mask(hb, _mm512_set1_epi8((char)(1 << h)));
            wv[h] = _mm512_mask_add_epi8(wv[h], m, wv[h], _mm512_set1_epi8(16));
        }
    } else if (bits == 6) {
        or_q6_high(p + g->high, wv);
        or_q6_high(p + g->high + 64, wv + 4);
    }
}

/* The 16 rows' f16 d and m (types with a min) of block BB's unit, as floats: once per group
 * for the types with one d per group. */
INLINE void load_dm(mlm_qkind k, const uint8_t *grp, const mlm_qgeom *g, int bb, __m512 *d,
                    __m512 *m) {
    int unit = g->units == 1 ? 0 : bb;
    *d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(grp + g->d + unit * 32)));
    *m = mlm_qhas_min(k) ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(grp + g->m + unit * 32)))
                         : _mm512_setzero_ps();
}

/* Block BB's 16 row scales (S1: q6_k's columns 16-31) and mins, as qpanel.h's mlm_qblock,
 * from its D and M. */
INLINE void load_scales(mlm_qkind k, const uint8_t *grp, const mlm_qgeom *g, int bb, __m512 d,
                        __m512 m, __m512 *s0, __m512 *s1, __m512 *mn) {
    const uint8_t *sub = grp + g->subs + bb * 16 * mlm_qsub_bytes(k);
    *s0 = *s1 = d;
    *mn = _mm512_setzero_ps();
    if (mlm_qhas_min(k)) {
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

/* The exact integer I - OFF * S as a float, S a token's column sum (a float holding an exact
 * integer, |S| <= 4064): I < 2^20 and OFF * S < 2^19 in magnitude, so the conversion, the
 * product and the difference are all exact. S is read as a broadcast. */
INLINE __m512 minus_off(__m512i i, int off, const float *s) {
    __m512 f = _mm512_cvtepi32_ps(i);
    return off ? _mm512_fnmadd_ps(_mm512_set1_ps((float)off), _mm512_set1_ps(*s), f) : f;
}

/* The same float from the product OS = OFF * S as an int32 (the tile's packed activations):
 * the offset comes off as an integer, with no multiply (on AMD Zen 4 the float multiplies
 * share the two ports of vpdpbusd; the tile's q6_k measured 5% faster). */
INLINE __m512 minus_off_int(__m512i i, int off, const int32_t *os) {
    return _mm512_cvtepi32_ps(off ? _mm512_sub_epi32(i, _mm512_set1_epi32(*os)) : i);
}

/* The block value v (backend.h) of a kind other than q6_k from F, the exact float of the
 * block's sum over its 32 columns less the offset term (minus_off), and the token's sum S32 of
 * those columns. */
INLINE __m512 block_value(mlm_qkind k, __m512 f, const float *s32, __m512 sc0, __m512 mn) {
    if (mlm_qhas_min(k)) return _mm512_fmsub_ps(f, sc0, _mm512_mul_ps(_mm512_set1_ps(*s32), mn));
    return _mm512_mul_ps(f, sc0);
}

/* q6_k's block value from the unsigned sums I0, I1 of columns 0-15 and 16-31 and the token's
 * sums S16[0], S16[1] of them. */
INLINE __m512 block_value_q6k(__m512i i0, __m512i i1, const float *s16, __m512 sc0, __m512 sc1) {
    const int off = off_of(MLM_QK_Q6_K);
    return _mm512_fmadd_ps(minus_off(i1, off, s16 + 1), sc1,
                           _mm512_mul_ps(minus_off(i0, off, s16), sc0));
}

/* A group of blocks' activations for the T tokens of a tile, packed so one pointer reaches
 * every token at a constant offset: per block, the T tokens' 32 codes, then per block the
 * floats d (T), S32 (T) and S16 (2T), and the int32 offset products OFF * S of S32 (T) and
 * S16 (2T). */
typedef struct packed {
    int8_t q[8 * TMAX * 32];
    float f[8 * TMAX * 4];
    int32_t o[8 * TMAX * 3];
} packed;

/* Packs blocks [B0, B0 + NB) of tokens [T0, T0 + T) into P, for codes of offset OFF. */
INLINE void pack(packed *p, const mlm_acts *x, int64_t pc, int64_t t0, int T, int64_t b0,
                 int nb, int off) {
    const int64_t nd = pc / MLM_Q8_BLOCK, ns = mlm_q8_sums_len(x->cols);
    for (int bb = 0; bb < nb; bb++)
        for (int t = 0; t < T; t++) {
            const int64_t tok = t0 + t, b = b0 + bb;
            _mm256_storeu_si256((__m256i *)(p->q + (bb * T + t) * 32),
                                _mm256_loadu_si256((const __m256i *)(x->q + tok * pc + 32 * b)));
            float *f = p->f + bb * 4 * T;
            const float *st = x->s + tok * ns;
            f[t] = x->d[tok * nd + b];
            f[T + t] = st[pc / 16 + b];
            f[2 * T + 2 * t] = st[2 * b];
            f[2 * T + 2 * t + 1] = st[2 * b + 1];
            if (off) {
                int32_t *o = p->o + bb * 3 * T;
                o[t] = off * (int32_t)f[T + t];
                o[T + 2 * t] = off * (int32_t)f[2 * T + 2 * t];
                o[T + 2 * t + 1] = off * (int32_t)f[2 * T + 2 * t + 1];
            }
        }
}

/* One group GRP of a panel for the T tokens packed in P: ACC (T x 16 floats, this panel's
 * sums so far) gets the group's blocks in order. Kinds other than q6_k add a block's two
 * halves in one int32 sum (the same integer), so 10 tokens fit the registers; q6_k does its
 * halves one after the other for its two scales, 8 tokens at a time. PF: the strip's first
 * pass over the tokens, the one that reads the panel from memory; each block then prefetches
 * its share of the panel PF_TILE bytes ahead (without it, on Zen 4, that pass waited on memory:
 * q4_k and q6_k tiles 12-20% slower from memory than from the caches at 32 tokens, 40% at 8). */
INLINE void tile_group(mlm_qkind k, float *accp, const uint8_t *grp, const mlm_qgeom *g,
                       const packed *p, int T, int pf) {
    const int q6 = k == MLM_QK_Q6_K;
    const int64_t share = mlm_qpanel_block_share(g);
    __m512 acc[TMAX];
    _Pragma("GCC unroll 10")
    for (int t = 0; t < T; t++) acc[t] = _mm512_loadu_ps(accp + 16 * t);
    for (int bb = 0; bb < g->g; bb++) {
        const int8_t *qb = p->q + bb * T * 32;
        const float *fb = p->f + bb * 4 * T;
        const int32_t *ob = p->o + bb * 3 * T;
        if (pf)
            for (int64_t c = 0; c < share; c += 64)
                _mm_prefetch((const char *)(grp + bb * share + PF_TILE + c), _MM_HINT_T0);
        __m512 dd, dm, sc0, sc1, mn;
        load_dm(k, grp, g, bb, &dd, &dm);
        load_scales(k, grp, g, bb, dd, dm, &sc0, &sc1, &mn);
        __m512i is[TMAX];
        _Pragma("GCC unroll 10")
        for (int t = 0; t < T; t++) is[t] = _mm512_setzero_si512();
        if (q6) { /* columns 0-15 first, kept as the float I0 * s0, then 16-31; each half's
                     codes decoded when it is multiplied, so fewer vectors are live */
            __m512 lo[TMAX];
            __m512i w4[4];
            load_q6_half(grp, g, bb, 0, w4);
            _Pragma("GCC unroll 4")
            for (int h = 0; h < 4; h++)
                _Pragma("GCC unroll 10")
                for (int t = 0; t < T; t++)
                    is[t] = _mm512_dpbusd_epi32(is[t], w4[h], bcast4(qb + t * 32 + 4 * h));
            _Pragma("GCC unroll 10")
            for (int t = 0; t < T; t++) {
                lo[t] = _mm512_mul_ps(minus_off_int(is[t], off_of(k), ob + T + 2 * t), sc0);
                is[t] = _mm512_setzero_si512();
            }
            load_q6_half(grp, g, bb, 1, w4);
            _Pragma("GCC unroll 4")
            for (int h = 0; h < 4; h++)
                _Pragma("GCC unroll 10")
                for (int t = 0; t < T; t++)
                    is[t] = _mm512_dpbusd_epi32(is[t], w4[h], bcast4(qb + t * 32 + 16 + 4 * h));
            _Pragma("GCC unroll 10")
            for (int t = 0; t < T; t++) {
                __m512 v = _mm512_fmadd_ps(minus_off_int(is[t], off_of(k), ob + T + 2 * t + 1),
                                           sc1, lo[t]);
                acc[t] = _mm512_fmadd_ps(v, _mm512_set1_ps(fb[t]), acc[t]);
            }
            continue;
        }
        __m512i wv[8];
        load_codes(k, grp, g, bb, wv, 0);
        _Pragma("GCC unroll 4")
        for (int h = 0; h < 4; h++)
            _Pragma("GCC unroll 10")
            for (int t = 0; t < T; t++) {
                is[t] = _mm512_dpbusd_epi32(is[t], wv[h], bcast4(qb + t * 32 + 4 * h));
                is[t] = _mm512_dpbusd_epi32(is[t], wv[4 + h], bcast4(qb + t * 32 + 16 + 4 * h));
            }
        _Pragma("GCC unroll 10")
        for (int t = 0; t < T; t++) {
            __m512 v = block_value(k, minus_off_int(is[t], off_of(k), ob + t), fb + T + t, sc0, mn);
            acc[t] = _mm512_fmadd_ps(v, _mm512_set1_ps(fb[t]), acc[t]);
        }
    }
    _Pragma("GCC unroll 10")
    for (int t = 0; t < T; t++) _mm512_storeu_ps(accp + 16 * t, acc[t]);
}

/* Rows [R0, R1) (at most 4 panels) for tokens [T0, T0 + T), group by group: each group's
 * activations are packed once for all the panels. */
INLINE void tile(mlm_qkind k, float *out, int64_t out_stride, const uint8_t *w,
                 const mlm_qgeom *g, const mlm_acts *x, int64_t pc, int64_t r0, int64_t r1,
                 int64_t t0, int T) {
    float acc[4][TMAX * 16];
    packed p;
    const int np = (int)((r1 - r0 + MLM_QP_ROWS - 1) / MLM_QP_ROWS);
    memset(acc, 0, sizeof acc);
    for (int64_t gi = 0; gi < g->n_groups; gi++) {
        pack(&p, x, pc, t0, T, gi * g->g, g->g, off_of(k));
        for (int i = 0; i < np; i++) {
            const uint8_t *grp = w + (r0 / MLM_QP_ROWS + i) * g->panel_bytes + gi * g->group_bytes;
            _mm_prefetch((const char *)(grp + g->group_bytes), _MM_HINT_T0);
            tile_group(k, acc[i], grp, g, &p, T, t0 == 0);
        }
    }
    for (int i = 0; i < np; i++) {
        int64_t r = r0 + i * MLM_QP_ROWS;
        int nr = r1 - r < MLM_QP_ROWS ? (int)(r1 - r) : MLM_QP_ROWS;
        /* a masked vector store: a 64-byte memcpy call per token and panel cost 4% of
         * batch-32 decode (perf, Zen 4) */
        __mmask16 m = (__mmask16)((1u << nr) - 1);
        for (int t = 0; t < T; t++)
            _mm512_mask_storeu_ps(out + (t0 + t) * out_stride + r, m,
                                  _mm512_loadu_ps(acc[i] + 16 * t));
    }
}

/* Decode: NP whole panels from row R for one token, read side by side (NP streams: 1 on AMD,
 * 4 elsewhere, core/cpu.h says why), each prefetched a block's share of lines at a time. */
INLINE void gemv(mlm_qkind k, int NP, float *out, const uint8_t *panel0, const mlm_qgeom *g,
                 const mlm_acts *x, int64_t r) {
    const int64_t pc = mlm_q8_cols(x->cols);
    __m512 acc[4];
    _Pragma("GCC unroll 4")
    for (int p = 0; p < NP; p++) acc[p] = _mm512_setzero_ps();
    const int64_t slice = mlm_qpanel_block_share(g);
    for (int64_t gi = 0; gi < g->n_groups; gi++) {
        __m512 dd[4], dm[4];
        _Pragma("GCC unroll 4")
        for (int p = 0; p < NP; p++) { /* one d (and m) for the group, or per block below */
            dd[p] = dm[p] = _mm512_setzero_ps();
            if (g->units == 1)
                load_dm(k, panel0 + p * g->panel_bytes + gi * g->group_bytes, g, 0, &dd[p], &dm[p]);
        }
        for (int bb = 0; bb < g->g; bb++) {
            /* each stream PF_BYTES ahead of this block, a block's share of lines at a time */
            mlm_qpanel_prefetch(panel0, g, NP, gi, bb, slice, PF_BYTES);
            const int64_t b = gi * g->g + bb;
            __m512i xv[8];
            _Pragma("GCC unroll 8")
            for (int h = 0; h < 8; h++) xv[h] = bcast4(x->q + 32 * b + 4 * h);
            const __m512 d = _mm512_set1_ps(x->d[b]);
            _Pragma("GCC unroll 4")
            for (int p = 0; p < NP; p++) {
                const uint8_t *grp = panel0 + p * g->panel_bytes + gi * g->group_bytes;
                __m512i wv[8];
                load_codes(k, grp, g, bb, wv, 1);
                if (g->units != 1) load_dm(k, grp, g, bb, &dd[p], &dm[p]);
                __m512 sc0, sc1, mn;
                load_scales(k, grp, g, bb, dd[p], dm[p], &sc0, &sc1, &mn);
                __m512i i0 = _mm512_setzero_si512(), i1 = _mm512_setzero_si512();
                _Pragma("GCC unroll 4")
                for (int h = 0; h < 4; h++) {
                    i0 = _mm512_dpbusd_epi32(i0, wv[h], xv[h]);
                    i1 = _mm512_dpbusd_epi32(i1, wv[4 + h], xv[4 + h]);
                }
                /* 16 times the sum from the high nibbles: exactly divided back */
                if (plain4(k)) i1 = _mm512_srai_epi32(i1, 4);
                const float *s32 = x->s + pc / 16 + b;
                __m512 v = k == MLM_QK_Q6_K
                               ? block_value_q6k(i0, i1, x->s + 2 * b, sc0, sc1)
                               : block_value(k, minus_off(_mm512_add_epi32(i0, i1), off_of(k), s32),
                                             s32, sc0, mn);
                acc[p] = _mm512_fmadd_ps(v, d, acc[p]);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int p = 0; p < NP; p++) _mm512_storeu_ps(out + r + 16 * p, acc[p]);
}

/* A few tokens (speculative verification, a handful of sequences): decode's streaming, one
 * panel at a time prefetched as gemv does, each block's codes and scales decoded once for the
 * T tokens and the T sums kept in registers. The tile below reads its 4 panels a group at a
 * time with no prefetch beyond the next line, which is what prefill's 10-token tiles can
 * afford: at 2-4 tokens it waited on memory (2 tokens cost 1.6-1.8x one on AMD Zen 4, the
 * weights from memory, bench/matmul's MESHLM_BENCH_VERIFY). Each token's sums are the tile's
 * and gemv's, in the same order: the same bits. */
INLINE void gemv_t(mlm_qkind k, int T, float *out, int64_t out_stride, const uint8_t *panel,
                   const mlm_qgeom *g, const mlm_acts *x, int64_t t0, int64_t r) {
    const int64_t pc = mlm_q8_cols(x->cols), nd = pc / MLM_Q8_BLOCK, ns = mlm_q8_sums_len(x->cols);
    __m512 acc[GT_MAX];
    _Pragma("GCC unroll 8")
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    const int64_t slice = mlm_qpanel_block_share(g);
    for (int64_t gi = 0; gi < g->n_groups; gi++) {
        const uint8_t *grp = panel + gi * g->group_bytes;
        __m512 dd = _mm512_setzero_ps(), dm = _mm512_setzero_ps();
        if (g->units == 1) load_dm(k, grp, g, 0, &dd, &dm);
        for (int bb = 0; bb < g->g; bb++) {
            mlm_qpanel_prefetch(panel, g, 1, gi, bb, slice, PF_BYTES);
            const int64_t b = gi * g->g + bb;
            __m512i wv[8];
            load_codes(k, grp, g, bb, wv, 0);
            if (g->units != 1) load_dm(k, grp, g, bb, &dd, &dm);
            __m512 sc0, sc1, mn;
            load_scales(k, grp, g, bb, dd, dm, &sc0, &sc1, &mn);
            _Pragma("GCC unroll 8")
            for (int t = 0; t < T; t++) {
                const int8_t *xq = x->q + (t0 + t) * pc + 32 * b;
                const float *st = x->s + (t0 + t) * ns;
                __m512i i0 = _mm512_setzero_si512(), i1 = _mm512_setzero_si512();
                _Pragma("GCC unroll 4")
                for (int h = 0; h < 4; h++) {
                    i0 = _mm512_dpbusd_epi32(i0, wv[h], bcast4(xq + 4 * h));
                    i1 = _mm512_dpbusd_epi32(i1, wv[4 + h], bcast4(xq + 16 + 4 * h));
                }
                const float *s32 = st + pc / 16 + b;
                __m512 v = k == MLM_QK_Q6_K
                               ? block_value_q6k(i0, i1, st + 2 * b, sc0, sc1)
                               : block_value(k, minus_off(_mm512_add_epi32(i0, i1), off_of(k), s32),
                                             s32, sc0, mn);
                acc[t] = _mm512_fmadd_ps(v, _mm512_set1_ps(x->d[(t0 + t) * nd + b]), acc[t]);
            }
        }
    }
    _Pragma("GCC unroll 8")
    for (int t = 0; t < T; t++) _mm512_storeu_ps(out + (t0 + t) * out_stride + r, acc[t]);
}

/* Whole panels from R0 for tokens [T0, T0 + T) by gemv_t, T a constant for each case. */
INLINE int64_t gemv_panels(mlm_qkind k, int T, float *out, int64_t out_stride, const void *w,
                           const mlm_qgeom *g, const mlm_acts *x, int64_t t0, int64_t r0,
                           int64_t r1) {
    for (; r0 + MLM_QP_ROWS <= r1; r0 += MLM_QP_ROWS) {
        const uint8_t *panel = (const uint8_t *)w + r0 / MLM_QP_ROWS * g->panel_bytes;
        switch (T) {
        case 2: gemv_t(k, 2, out, out_stride, panel, g, x, t0, r0); break;
        case 3: gemv_t(k, 3, out, out_stride, panel, g, x, t0, r0); break;
        default: gemv_t(k, GT_MAX, out, out_stride, panel, g, x, t0, r0);
        }
    }
    return r0;
}

INLINE void matmul_q(mlm_qkind k, float *out, int64_t out_stride, const void *w,
                     const mlm_acts *x, int64_t r0, int64_t r1) {
    const int64_t pc = mlm_q8_cols(x->cols);
    const mlm_qgeom g = mlm_qpanel_geom(k, x->cols);
    const int tmax = k == MLM_QK_Q6_K ? 8 : TMAX;
    const int np = x->n == 1 ? mlm_cpu_decode_panels(4) : 0;
    if (np == 1) /* decode: whole panels, one or four at a time */
        for (; r0 + MLM_QP_ROWS <= r1; r0 += MLM_QP_ROWS)
            gemv(k, 1, out, (const uint8_t *)w + r0 / MLM_QP_ROWS * g.panel_bytes, &g, x, r0);
    else if (np)
        for (; r0 + 4 * MLM_QP_ROWS <= r1; r0 += 4 * MLM_QP_ROWS)
            gemv(k, 4, out, (const uint8_t *)w + r0 / MLM_QP_ROWS * g.panel_bytes, &g, x, r0);
    else if (x->n <= GT_MAX) /* a few tokens: whole panels streamed, the rest in tiles */
        r0 = gemv_panels(k, (int)x->n, out, out_stride, w, &g, x, 0, r0, r1);
    for (int64_t r = r0; r < r1; r += 4 * MLM_QP_ROWS) { /* strips of up to 4 panels */
        const int64_t re = r + 4 * MLM_QP_ROWS < r1 ? r + 4 * MLM_QP_ROWS : r1;
        /* the tokens in near-equal tiles (32: 4 of 8, not 10 + 10 + 10 + 2) */
        const int64_t nt = (x->n + tmax - 1) / tmax;
        for (int64_t i = 0, t0 = 0, T; i < nt; i++, t0 += T)
            switch (T = x->n / nt + (i < x->n % nt)) {
            case 1: tile(k, out, out_stride, w, &g, x, pc, r, re, t0, 1); break;
            case 2: tile(k, out, out_stride, w, &g, x, pc, r, re, t0, 2); break;
            case 3: tile(k, out, out_stride, w, &g, x, pc, r, re, t0, 3); break;
            case 4: tile(k, out, out_stride, w, &g, x, pc, r, re, t0, 4); break;
            case 5: tile(k, out, out_stride, w, &g, x, pc, r, re, t0, 5); break;
            case 6: tile(k, out, out_stride, w, &g, x, pc, r, re, t0, 6); break;
            case 7: tile(k, out, out_stride, w, &g, x, pc, r, re, t0, 7); break;
            case 8: tile(k, out, out_stride, w, &g, x, pc, r, re, t0, 8); break;
            case 9: tile(k, out, out_stride, w, &g, x, pc, r, re, t0, 9); break;
            default: tile(k, out, out_stride, w, &g, x, pc, r, re, t0, TMAX);
            }
    }
}

#define Q_AVX512(T, t, _)                                                                       \
    void mlm_matmul_##t##_q8_avx512(float *out, int64_t out_stride, const void *w,              \
                                    const mlm_acts *x, int64_t r0, int64_t r1) {                \
        matmul_q((mlm_qkind)(MLM_W_##T - MLM_W_Q8_0), out, out_stride, w, x, r0, r1);           \
    }
MLM_NATIVE_TYPES(Q_AVX512, _)
