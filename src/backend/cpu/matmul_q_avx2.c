/* backend/cpu/matmul_q_avx2.c: native GGUF weights (tensor/qpanel.h) against int8 activations
 * with AVX2 + FMA + F16C, and (compiled a second time by matmul_q_avxvnni.c with MLM_AVXVNNI)
 * with AVX-VNNI.
 *
 * A 32-byte half of a code vector is 8 rows x 4 columns: lane i of an 8-lane int32 sum is
 * row i. AVX-VNNI multiplies as the AVX-512 kernel does (vpdpbusd of unsigned codes against
 * the signed activations, the code offset taken off with the token's column sum). Plain AVX2
 * uses vpmaddubsw, which saturates pairs at 16 bits: codes of 4 to 6 bits go in unsigned (a
 * pair is at most 2 x 63 x 127, and as many pairs are added in 16 bits as stay below 32767),
 * q8_0 and iq4 as |c| against the activations with c's sign (at most 2 x 128 x 127), then
 * vpmaddwd adds pairs. Either way each block's sums are exact and get the canonical epilogue
 * (backend.h), so this file agrees bit for bit with the reference. A tile is half a panel (8
 * rows) x T tokens; 8 or more tokens take whole panels with the codes unpacked once for all
 * of them (panel_tokens; not q8_0 nor the VNNI build); decode reads one panel (both halves) at
 * a time on AMD, two side by side elsewhere (core/cpu.h). */
#include <immintrin.h>
#include <string.h>

#include "backend/backend.h"
#include "core/cpu.h"
#include "tensor/q8.h"
#include "tensor/qpanel.h"

#define INLINE static inline __attribute__((always_inline))
#define TMAX 4
#define PF_BYTES 1024 /* decode: how far ahead of its block each panel stream is prefetched */

#ifdef MLM_AVXVNNI
#define NAME(f) f##_avxvnni
#define VNNI 1
#else
#define NAME(f) f##_avx2
#define VNNI 0
#endif

/* q8_0 and iq4 go in signed (plain AVX2) or as value + 128 (VNNI). */
INLINE int is_signed(mlm_qkind k) {
    return k == MLM_QK_Q8_0 || k == MLM_QK_IQ4_NL || k == MLM_QK_IQ4_XS;
}
INLINE int off_of(mlm_qkind k) { return is_signed(k) ? (VNNI ? 128 : 0) : mlm_qoff(k); }

/* Half HF (rows 8hf..8hf+7) of block BB's 8 code vectors, as the product below takes them. */
INLINE void load_codes(mlm_qkind k, const uint8_t *grp, const mlm_qgeom *g, int bb, int hf,
                       __m256i wv[8]) {
    const int bits = mlm_qbits(k);
    if (bits == 8) {
        const uint8_t *p = mlm_qpanel_codes(g, grp, bb) + 32 * hf;
        _Pragma("GCC unroll 8")
        for (int h = 0; h < 8; h++) {
            wv[h] = _mm256_loadu_si256((const __m256i *)(p + 64 * h));
            if (VNNI) wv[h] = _mm256_xor_si256(wv[h], _mm256_set1_epi8((char)0x80));
        }
        return;
    }
    const __m256i m15 = _mm256_set1_epi8(0x0f);
    const uint8_t *p = mlm_qpanel_codes(g, grp, bb) + 32 * hf;
    _Pragma("GCC unroll 4")
    for (int h = 0; h < 4; h++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(p + 64 * h));
        wv[h] = _mm256_and_si256(v, m15);
        wv[4 + h] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m15);
    }
    if (k == MLM_QK_IQ4_NL || k == MLM_QK_IQ4_XS) {
        const __m128i kv = VNNI ? _mm_setr_epi8(1, 24, 45, 63, 79, 93, 106, 118, (char)129,
                                                (char)141, (char)153, (char)166, (char)181,
                                                (char)197, (char)217, (char)241)
                                : _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13,
                                                25, 38, 53, 69, 89, 113);
        const __m256i lut = _mm256_broadcastsi128_si256(kv);
        _Pragma("GCC unroll 8")
        for (int h = 0; h < 8; h++) wv[h] = _mm256_shuffle_epi8(lut, wv[h]);
    } else if (bits == 5) {
        __m256i hb = _mm256_loadu_si256((const __m256i *)(mlm_qpanel_codes(g, grp, bb) + g->high + 32 * hf));
        _Pragma("GCC unroll 8")
        for (int h = 0; h < 8; h++) {
            __m256i bit = _mm256_and_si256(hb, _mm256_set1_epi8((char)(1 << h)));
            bit = h < 4 ? _mm256_slli_epi16(bit, 4 - h) : _mm256_srli_epi16(bit, h - 4);
            wv[h] = _mm256_or_si256(wv[h], bit);
        }
    } else if (bits == 6) {
        const __m256i m30 = _mm256_set1_epi8(0x30);
        _Pragma("GCC unroll 2")
        for (int v = 0; v < 2; v++) {
            __m256i hv = _mm256_loadu_si256((const __m256i *)(mlm_qpanel_codes(g, grp, bb) + g->high + 64 * v + 32 * hf));
            wv[4 * v + 0] = _mm256_or_si256(wv[4 * v + 0], _mm256_and_si256(_mm256_slli_epi16(hv, 4), m30));
            wv[4 * v + 1] = _mm256_or_si256(wv[4 * v + 1], _mm256_and_si256(_mm256_slli_epi16(hv, 2), m30));
            wv[4 * v + 2] = _mm256_or_si256(wv[4 * v + 2], _mm256_and_si256(hv, m30));
            wv[4 * v + 3] = _mm256_or_si256(wv[4 * v + 3], _mm256_and_si256(_mm256_srli_epi16(hv, 2), m30));
        }
    }
}

INLINE __m256 cvt8(const uint8_t *p, int is_signed8) {
    int64_t v;
    memcpy(&v, p, 8);
    __m128i b = _mm_cvtsi64_si128(v);
    return _mm256_cvtepi32_ps(is_signed8 ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b));
}

/* Half HF (rows 8hf..8hf+7) of the f16 d and m (types with a min) of block BB's unit, as
 * floats: once per group for the types with one d per group. */
INLINE void load_dm(mlm_qkind k, const uint8_t *grp, const mlm_qgeom *g, int bb, int hf,
                    __m256 *d, __m256 *m) {
    int unit = g->units == 1 ? 0 : bb;
    *d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(grp + g->d + unit * 32 + 16 * hf)));
    *m = mlm_qhas_min(k)
             ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(grp + g->m + unit * 32 + 16 * hf)))
             : _mm256_setzero_ps();
}

/* Half HF of block BB's row scales and mins (qpanel.h's mlm_qblock) from its D and M. */
INLINE void load_scales(mlm_qkind k, const uint8_t *grp, const mlm_qgeom *g, int bb, int hf,
                        __m256 d, __m256 m, __m256 *s0, __m256 *s1, __m256 *mn) {
    const uint8_t *sub = grp + g->subs + bb * 16 * mlm_qsub_bytes(k) + 8 * hf;
    *s0 = *s1 = d;
    *mn = _mm256_setzero_ps();
    if (mlm_qhas_min(k)) {
        if (k == MLM_QK_Q4_1 || k == MLM_QK_Q5_1) {
            *mn = _mm256_xor_ps(m, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)));
        } else {
            *s0 = _mm256_mul_ps(d, cvt8(sub, 0));
            *mn = _mm256_mul_ps(m, cvt8(sub + 16, 0));
        }
    } else if (k == MLM_QK_Q6_K) {
        *s0 = _mm256_mul_ps(d, cvt8(sub, 1));
        *s1 = _mm256_mul_ps(d, cvt8(sub + 16, 1));
    } else if (k == MLM_QK_IQ4_XS) {
        *s0 = _mm256_mul_ps(d, cvt8(sub, 1));
    }
}

INLINE __m256i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* A block's 8 activation quads (columns 4h..4h+3 at Q) each broadcast to every lane. */
INLINE void bcast_quads(const int8_t *q, int n, __m256i *qb) {
    _Pragma("GCC unroll 8")
    for (int h = 0; h < n; h++) qb[h] = bcast4(q + 4 * h);
}

#if !VNNI
/* Unsigned codes WV (4 quads, 16 columns) against the broadcast activations QB, each 16-bit
 * pair sum weighted by W's pair (vpmaddwd) into int32 lanes: pairs of at most 2 x (2^bits - 1)
 * x 127 added in 16 bits 4, 4, 2 at a time (4-, 5-, 6-bit codes). */
INLINE __m256i dot16_pairs(mlm_qkind k, const __m256i *wv, const __m256i *qb, __m256i w) {
    const int per = mlm_qbits(k) == 6 ? 2 : 4;
    __m256i s = _mm256_setzero_si256();
    _Pragma("GCC unroll 4")
    for (int h = 0; h < 4; h += per) {
        __m256i p = _mm256_maddubs_epi16(wv[h], qb[h]);
        _Pragma("GCC unroll 4")
        for (int j = 1; j < per; j++)
            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(wv[h + j], qb[h + j]));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(p, w));
    }
    return s;
}
#endif

/* The exact int32 sum over 4 quads (16 columns) of codes WV against broadcast activations QB. */
INLINE __m256i dot16_b(mlm_qkind k, const __m256i *wv, const __m256i *qb) {
#if VNNI
    __m256i s = _mm256_setzero_si256();
    _Pragma("GCC unroll 4")
    for (int h = 0; h < 4; h++) s = _mm256_dpbusd_avx_epi32(s, wv[h], qb[h]);
    (void)k;
    return s;
#else
    const __m256i ones = _mm256_set1_epi16(1);
    if (is_signed(k)) {
        __m256i s = _mm256_setzero_si256();
        _Pragma("GCC unroll 4")
        for (int h = 0; h < 4; h++) {
            __m256i p =
                _mm256_maddubs_epi16(_mm256_abs_epi8(wv[h]), _mm256_sign_epi8(qb[h], wv[h]));
            s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
        }
        return s;
    }
    return dot16_pairs(k, wv, qb, ones);
#endif
}

/* The same with the activations at Q. */
INLINE __m256i dot16(mlm_qkind k, const __m256i *wv, const int8_t *q) {
    __m256i qb[4];
    bcast_quads(q, 4, qb);
    return dot16_b(k, wv, qb);
}

#if !VNNI
/* A k-quant's sub-scale bytes SUB of rows 8hf..8hf+7 as vpmaddwd's 16-bit pairs: row i's
 * byte in both halves of int32 lane i. */
INLINE __m256i sub_pairs(const uint8_t *sub) {
    int64_t v;
    memcpy(&v, sub, 8);
    const __m256i idx = _mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1,
                                         4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
    return _mm256_shuffle_epi8(_mm256_set1_epi64x(v), idx);
}

/* q4_k, q5_k: the exact int32 sum I over the block's 32 columns times each row's sub-scale
 * (SC, sub_pairs), |I sc| < 2^22. 4-bit codes add all 8 pairs in 16 bits (8 x 2 x 15 x 128
 * < 2^15) in a tree, 5-bit ones 4 at a time (dot16_pairs). */
INLINE __m256i dot32_sc(mlm_qkind k, const __m256i *wv, const int8_t *q, __m256i sc) {
    if (mlm_qbits(k) == 4) {
        __m256i p[4];
        _Pragma("GCC unroll 4")
        for (int h = 0; h < 4; h++)
            p[h] = _mm256_add_epi16(_mm256_maddubs_epi16(wv[h], bcast4(q + 4 * h)),
                                    _mm256_maddubs_epi16(wv[4 + h], bcast4(q + 16 + 4 * h)));
        __m256i t = _mm256_add_epi16(_mm256_add_epi16(p[0], p[1]), _mm256_add_epi16(p[2], p[3]));
        return _mm256_madd_epi16(t, sc);
    }
    __m256i qb[8];
    bcast_quads(q, 8, qb);
    return _mm256_add_epi32(dot16_pairs(k, wv, qb, sc), dot16_pairs(k, wv + 4, qb + 4, sc));
}
#endif

/* The exact integer I - OFF * S as a float: I < 2^20 and OFF * S < 2^19 in magnitude, so the
 * conversion, the product and the difference are all exact. S is read as a broadcast. */
INLINE __m256 minus_off(__m256i i, int off, const float *s) {
    __m256 f = _mm256_cvtepi32_ps(i);
    return off ? _mm256_fnmadd_ps(_mm256_set1_ps((float)off), _mm256_set1_ps(*s), f) : f;
}

/* The block value v (backend.h) from the sums I0, I1 of columns 0-15 and 16-31 and the
 * token's sums S16[0], S16[1] of them and S32 of all 32. */
INLINE __m256 block_value(mlm_qkind k, __m256i i0, __m256i i1, const float *s16,
                          const float *s32, __m256 sc0, __m256 sc1, __m256 mn) {
    const int off = off_of(k);
    if (k == MLM_QK_Q6_K)
        return _mm256_fmadd_ps(minus_off(i1, off, s16 + 1), sc1,
                               _mm256_mul_ps(minus_off(i0, off, s16), sc0));
    __m256 f = minus_off(_mm256_add_epi32(i0, i1), off, s32);
    if (mlm_qhas_min(k)) return _mm256_fmsub_ps(f, sc0, _mm256_mul_ps(_mm256_set1_ps(*s32), mn));
    return _mm256_mul_ps(f, sc0);
}

INLINE void store_rows(float *dst, int nr, __m256 v) {
    if (nr >= 8) {
        _mm256_storeu_ps(dst, v);
        return;
    }
    float tmp[8];
    _mm256_storeu_ps(tmp, v);
    memcpy(dst, tmp, (size_t)nr * sizeof(float));
}

/* Rows [R, R + NR) (NR <= 8, half HF of a panel) for tokens [T0, T0 + T). */
INLINE void tile(mlm_qkind k, float *out, int64_t out_stride, const uint8_t *panel,
                 const mlm_qgeom *g, const mlm_acts *x, int64_t pc, int64_t r, int nr, int hf,
                 int64_t t0, int T) {
    const int64_t nd = pc / MLM_Q8_BLOCK, ns = mlm_q8_sums_len(x->cols);
    const int8_t *q = x->q + t0 * pc;
    const float *d = x->d + t0 * nd;
    const float *s = x->s + t0 * ns; /* the tokens' sums per 16 columns, then per 32 */
    __m256 acc[TMAX];
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    const int64_t slice = mlm_qpanel_block_share(g);
    for (int64_t gi = 0; gi < g->n_groups; gi++) {
        const uint8_t *grp = panel + gi * g->group_bytes;
        for (int bb = 0; bb < g->g; bb++) {
            /* the first half streams the panel as decode does (the second finds it cached) */
            if (!hf) mlm_qpanel_prefetch(panel, g, 1, gi, bb, slice, PF_BYTES);
            const int64_t b = gi * g->g + bb;
            __m256i wv[8];
            load_codes(k, grp, g, bb, hf, wv);
            __m256 dd, dm, sc0, sc1, mn;
            load_dm(k, grp, g, bb, hf, &dd, &dm);
            load_scales(k, grp, g, bb, hf, dd, dm, &sc0, &sc1, &mn);
            _Pragma("GCC unroll 4")
            for (int t = 0; t < T; t++) {
                const int8_t *qt = q + t * pc + 32 * b;
                __m256i i0 = dot16(k, wv, qt), i1 = dot16(k, wv + 4, qt + 16);
                const float *st = s + t * ns;
                __m256 v = block_value(k, i0, i1, st + 2 * b, st + pc / 16 + b, sc0, sc1, mn);
                acc[t] = _mm256_fmadd_ps(v, _mm256_set1_ps(d[t * nd + b]), acc[t]);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) store_rows(out + (t0 + t) * out_stride + r, nr, acc[t]);
}

#if !VNNI
/* Tokens [T0, T0 + NT) (PANEL_TOKENS_MIN or more), one whole panel at row R (AVX2 without
 * VNNI). The codes and scales of KC blocks at a time are unpacked once into a buffer that stays
 * in L1 (11 KB) and serve every token, and each token's activation broadcasts serve both halves
 * of the panel: the half-panel tile (above) unpacks a block again for every 4 tokens and
 * broadcasts per 8 rows, and ran at 35-45% of what the vector pipes could issue (AMD Zen 3).
 * Each row still takes its blocks in order from 0 (the sums run through OUT between chunks,
 * exact in f32), so the bits are the tile's. */
#define KC 16
/* Fewer tokens than this take the tile: the unpacked buffer's stores and loads cost more than
 * unpacking again until about 8 tokens (q4_k from memory: 0.71x at 2 tokens, 0.79x at 4, level
 * at 8, 1.12x at 16; q6_k gains from 4). q8_0 has nothing to unpack and stays (0.88-0.95x). */
#define PANEL_TOKENS_MIN 8
#define PANEL_TOKENS 32 /* tokens per group: a group's int8 activations, 64 KB at 2048 columns */
INLINE void panel_tokens(mlm_qkind k, float *out, int64_t out_stride, const uint8_t *panel,
                         const mlm_qgeom *g, const mlm_acts *x, int64_t r, int64_t t0, int64_t nt) {
    const int64_t pc = mlm_q8_cols(x->cols), nd = pc / MLM_Q8_BLOCK, ns = mlm_q8_sums_len(x->cols);
    const int64_t nb = g->n_groups * g->g, slice = mlm_qpanel_block_share(g);
    __m256i codes[KC][2][8];
    __m256 scl[KC][2][3]; /* sc0, sc1, mn of each half */
    for (int64_t b0 = 0; b0 < nb; b0 += KC) {
        const int nk = nb - b0 < KC ? (int)(nb - b0) : KC;
        for (int j = 0; j < nk; j++) {
            const int64_t gi = (b0 + j) / g->g;
            const int bb = (int)((b0 + j) % g->g);
            const uint8_t *grp = panel + gi * g->group_bytes;
            mlm_qpanel_prefetch(panel, g, 1, gi, bb, slice, PF_BYTES);
            for (int hf = 0; hf < 2; hf++) {
                __m256 dd, dm;
                load_codes(k, grp, g, bb, hf, codes[j][hf]);
                load_dm(k, grp, g, bb, hf, &dd, &dm);
                load_scales(k, grp, g, bb, hf, dd, dm, &scl[j][hf][0], &scl[j][hf][1],
                            &scl[j][hf][2]);
            }
        }
        /* the next chunk's bytes (whole groups: KC is a multiple of g), spread over the tokens */
        const int64_t next = (b0 + KC) / g->g * g->group_bytes;
        const int64_t lines = next < g->panel_bytes ? KC / g->g * g->group_bytes / 64 : 0;
        for (int64_t i = 0, t = t0; i < nt; i++, t++) {
            for (int64_t l = i * lines / nt; l < (i + 1) * lines / nt; l++)
                __builtin_prefetch(panel + next + 64 * l, 0, 2);
            float *o = out + t * out_stride + r;
            const int8_t *q = x->q + t * pc;
            const float *d = x->d + t * nd, *st = x->s + t * ns;
            __m256 acc[2];
            for (int hf = 0; hf < 2; hf++)
                acc[hf] = b0 ? _mm256_loadu_ps(o + 8 * hf) : _mm256_setzero_ps();
            _Pragma("GCC unroll 2") /* 2-6% (Zen 3): the next block's loads enter sooner */
            for (int j = 0; j < nk; j++) {
                const int64_t b = b0 + j;
                __m256i qb[8];
                bcast_quads(q + 32 * b, 8, qb);
                const __m256 db = _mm256_set1_ps(d[b]);
                _Pragma("GCC unroll 2")
                for (int hf = 0; hf < 2; hf++) { /* the broadcasts serve both halves */
                    const __m256i *c = codes[j][hf];
                    const __m256 *sc = scl[j][hf];
                    __m256 v = block_value(k, dot16_b(k, c, qb), dot16_b(k, c + 4, qb + 4),
                                           st + 2 * b, st + pc / 16 + b, sc[0], sc[1], sc[2]);
                    acc[hf] = _mm256_fmadd_ps(v, db, acc[hf]);
                }
            }
            for (int hf = 0; hf < 2; hf++) _mm256_storeu_ps(o + 8 * hf, acc[hf]);
        }
    }
}
#endif

#if !VNNI
/* Decode, one panel (AMD): half HF of group GI (at GRP) of the panel at PANEL for one token,
 * added to ACC; the first half prefetches the stream (the second finds the group in L1). A
 * half at a time, two blocks an iteration: with both halves in one loop the 16 code vectors
 * spill, and a block's chain (maddubs, madd, convert, fmsub, fma) is long enough that the
 * scheduler runs dry. For q4_k and q5_k the sub-scale multiplies the block's integer sum
 * (dot32_sc): v = I sc d - S32 dmin mn takes the exact product I sc d inside the fmsub either
 * way, so the bits are the canonical ones. On AMD Zen 3, one thread, a 256 x 2048 matrix from
 * the caches, alternating builds: q4_k, q6_k, q4_1 1.13x, q4_0, q5_k 1.08x, q5_0, q5_1 1.11x,
 * iq4_xs 1.05x, iq4_nl level; q8_0 lost 5% and keeps gemv below. From memory: level. */
INLINE __m256 gemv_half(mlm_qkind k, __m256 acc, const uint8_t *panel, const uint8_t *grp,
                        const mlm_qgeom *g, const mlm_acts *x, int64_t gi, int hf) {
    const int64_t pc = mlm_q8_cols(x->cols), slice = mlm_qpanel_block_share(g);
    __m256 dd = _mm256_setzero_ps(), dm = dd;
    if (g->units == 1) load_dm(k, grp, g, 0, hf, &dd, &dm);
    _Pragma("GCC unroll 2")
    for (int bb = 0; bb < g->g; bb++) {
        if (!hf) mlm_qpanel_prefetch(panel, g, 1, gi, bb, slice, PF_BYTES);
        const int64_t b = gi * g->g + bb;
        const int8_t *qb = x->q + 32 * b;
        __m256i wv[8];
        load_codes(k, grp, g, bb, hf, wv);
        if (g->units != 1) load_dm(k, grp, g, bb, hf, &dd, &dm);
        __m256 v;
        if (k == MLM_QK_Q4_K || k == MLM_QK_Q5_K) {
            const uint8_t *sub = grp + g->subs + bb * 16 * mlm_qsub_bytes(k) + 8 * hf;
            __m256 mn = _mm256_mul_ps(dm, cvt8(sub + 16, 0));
            v = _mm256_fmsub_ps(_mm256_cvtepi32_ps(dot32_sc(k, wv, qb, sub_pairs(sub))), dd,
                                _mm256_mul_ps(_mm256_set1_ps(x->s[pc / 16 + b]), mn));
        } else {
            __m256 sc0, sc1, mn;
            load_scales(k, grp, g, bb, hf, dd, dm, &sc0, &sc1, &mn);
            __m256i i0 = dot16(k, wv, qb), i1 = dot16(k, wv + 4, qb + 16);
            v = block_value(k, i0, i1, x->s + 2 * b, x->s + pc / 16 + b, sc0, sc1, mn);
        }
        acc = _mm256_fmadd_ps(v, _mm256_set1_ps(x->d[b]), acc);
    }
    return acc;
}

/* Decode, one panel at row R (gemv_half). */
INLINE void gemv1(mlm_qkind k, float *out, const uint8_t *panel, const mlm_qgeom *g,
                  const mlm_acts *x, int64_t r) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    for (int64_t gi = 0; gi < g->n_groups; gi++) {
        const uint8_t *grp = panel + gi * g->group_bytes;
        a0 = gemv_half(k, a0, panel, grp, g, x, gi, 0);
        a1 = gemv_half(k, a1, panel, grp, g, x, gi, 1);
    }
    _mm256_storeu_ps(out + r, a0);
    _mm256_storeu_ps(out + r + 8, a1);
}
#endif

/* Decode: NP whole panels from row R (2 NP halves side by side) for one token: 1 on AMD, 2
 * elsewhere (core/cpu.h says why). A group's f16 d and m are converted once for its blocks. */
INLINE void gemv(mlm_qkind k, int NP, float *out, const uint8_t *panel0, const mlm_qgeom *g,
                 const mlm_acts *x, int64_t r) {
    const int64_t pc = mlm_q8_cols(x->cols);
    __m256 acc[4];
    _Pragma("GCC unroll 4")
    for (int p = 0; p < 2 * NP; p++) acc[p] = _mm256_setzero_ps();
    const int64_t slice = mlm_qpanel_block_share(g);
    for (int64_t gi = 0; gi < g->n_groups; gi++) {
        __m256 dd[4], dm[4];
        _Pragma("GCC unroll 4")
        for (int p = 0; p < 2 * NP; p++) {
            dd[p] = dm[p] = _mm256_setzero_ps();
            if (g->units == 1)
                load_dm(k, panel0 + (p / 2) * g->panel_bytes + gi * g->group_bytes, g, 0, p % 2,
                        &dd[p], &dm[p]);
        }
        for (int bb = 0; bb < g->g; bb++) {
            /* each stream PF_BYTES ahead of this block, a block's share of lines at a time */
            mlm_qpanel_prefetch(panel0, g, NP, gi, bb, slice, PF_BYTES);
            const int64_t b = gi * g->g + bb;
            __m256 d = _mm256_set1_ps(x->d[b]);
            const int8_t *qb = x->q + 32 * b;
            _Pragma("GCC unroll 4")
            for (int p = 0; p < 2 * NP; p++) {
                const uint8_t *grp = panel0 + (p / 2) * g->panel_bytes + gi * g->group_bytes;
                __m256i wv[8];
                load_codes(k, grp, g, bb, p % 2, wv);
                if (g->units != 1) load_dm(k, grp, g, bb, p % 2, &dd[p], &dm[p]);
                __m256 sc0, sc1, mn;
                load_scales(k, grp, g, bb, p % 2, dd[p], dm[p], &sc0, &sc1, &mn);
                __m256i i0 = dot16(k, wv, qb), i1 = dot16(k, wv + 4, qb + 16);
                __m256 v = block_value(k, i0, i1, x->s + 2 * b, x->s + pc / 16 + b, sc0, sc1, mn);
                acc[p] = _mm256_fmadd_ps(v, d, acc[p]);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int p = 0; p < 2 * NP; p++) _mm256_storeu_ps(out + r + 8 * p, acc[p]);
}

INLINE void matmul_q(mlm_qkind k, float *out, int64_t out_stride, const void *w,
                     const mlm_acts *x, int64_t r0, int64_t r1) {
    const int64_t pc = mlm_q8_cols(x->cols);
    const mlm_qgeom g = mlm_qpanel_geom(k, x->cols);
    const int np = x->n == 1 ? mlm_cpu_decode_panels(2) : 0;
    if (np == 1) /* decode: whole panels, one or two at a time */
        for (; r0 + MLM_QP_ROWS <= r1; r0 += MLM_QP_ROWS) {
            const uint8_t *panel = (const uint8_t *)w + r0 / MLM_QP_ROWS * g.panel_bytes;
#if !VNNI
            if (mlm_qbits(k) != 8) {
                gemv1(k, out, panel, &g, x, r0);
                continue;
            }
#endif
            gemv(k, 1, out, panel, &g, x, r0);
        }
    else if (np)
        for (; r0 + 2 * MLM_QP_ROWS <= r1; r0 += 2 * MLM_QP_ROWS)
            gemv(k, 2, out, (const uint8_t *)w + r0 / MLM_QP_ROWS * g.panel_bytes, &g, x, r0);
#if !VNNI
    else if (x->n >= PANEL_TOKENS_MIN && k != MLM_QK_Q8_0 && r0 % MLM_QP_ROWS == 0) {
        /* whole panels, the tokens in near-equal groups of at most PANEL_TOKENS, each group
         * over all the panels (its activations stay in L2 across them) */
        const int64_t rp = r0 + (r1 - r0) / MLM_QP_ROWS * MLM_QP_ROWS;
        const int64_t ng = (x->n + PANEL_TOKENS - 1) / PANEL_TOKENS;
        for (int64_t i = 0, t0 = 0, nt; i < ng; i++, t0 += nt) {
            nt = x->n / ng + (i < x->n % ng);
            for (int64_t r = r0; r < rp; r += MLM_QP_ROWS) {
                const uint8_t *panel = (const uint8_t *)w + r / MLM_QP_ROWS * g.panel_bytes;
                panel_tokens(k, out, out_stride, panel, &g, x, r, t0, nt);
            }
        }
        r0 = rp;
    }
#endif
    for (int64_t r = r0; r < r1; r += 8) { /* half panels */
        const uint8_t *panel = (const uint8_t *)w + r / MLM_QP_ROWS * g.panel_bytes;
        int nr = r1 - r < 8 ? (int)(r1 - r) : 8, hf = (int)(r % MLM_QP_ROWS / 8);
        /* the tokens in near-equal tiles (30: 4 x 6 + 3 x 2, not 4 x 7 + 2) */
        const int64_t nt = (x->n + TMAX - 1) / TMAX;
        for (int64_t i = 0, t0 = 0, T; i < nt; i++, t0 += T)
            switch (T = x->n / nt + (i < x->n % nt)) {
            case 1: tile(k, out, out_stride, panel, &g, x, pc, r, nr, hf, t0, 1); break;
            case 2: tile(k, out, out_stride, panel, &g, x, pc, r, nr, hf, t0, 2); break;
            case 3: tile(k, out, out_stride, panel, &g, x, pc, r, nr, hf, t0, 3); break;
            default: tile(k, out, out_stride, panel, &g, x, pc, r, nr, hf, t0, TMAX);
            }
    }
}

#define Q_AVX2(T, t, _)                                                                         \
    void NAME(mlm_matmul_##t##_q8)(float *out, int64_t out_stride, const void *w,               \
                                   const mlm_acts *x, int64_t r0, int64_t r1) {                 \
        matmul_q((mlm_qkind)(MLM_W_##T - MLM_W_Q8_0), out, out_stride, w, x, r0, r1);           \
    }
MLM_NATIVE_TYPES(Q_AVX2, _)
