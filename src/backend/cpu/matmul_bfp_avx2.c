/* backend/cpu/matmul_bfp_avx2.c: BFP8 / BFP4 weights against int8 activations with AVX2, and
 * (compiled a second time by matmul_bfp_avxvnni.c with MLM_AVXVNNI) with AVX-VNNI.
 *
 * A 32-byte half of a panel vector (tensor/bfp.h) holds 8 rows x 4 columns as signed bytes:
 * lane i of an 8-lane int32 sum is row i. Plain AVX2 multiplies with vpmaddubsw, which wants
 * one unsigned operand and saturates at 16 bits, so it takes |w| and the activations with
 * the weight's sign (|q|, |w| <= 127: no saturation), then vpmaddwd adds pairs; AVX-VNNI
 * uses vpdpbusd on q + 128 with the block sum started at -128 x sum(w), as the AVX-512 kernel
 * does. Either way the block's int32 sum is exact and gets the canonical epilogue
 * (backend.h), so this file agrees bit for bit with the reference. A tile is half a panel (8
 * rows) x T tokens; the block's weights are expanded once for the T tokens. */
#include <immintrin.h>
#include <string.h>

#include "backend/backend.h"
#include "core/cpu.h"
#include "tensor/bfp.h"
#include "tensor/q8.h"

#define INLINE static inline __attribute__((always_inline))
#define TMAX 6

#ifdef MLM_AVXVNNI
#define NAME(f) f##_avxvnni
#else
#define NAME(f) f##_avx2
#endif

/* The half H (rows 8h..8h+7) of block B's 4 weight vectors. */
INLINE void load_block(const uint8_t *grp, int b, int h, int bits, __m256i wv[4]) {
    if (bits == 8) {
        const uint8_t *p = grp + b * 256 + 32 * h;
        _Pragma("GCC unroll 16")
        for (int j = 0; j < 4; j++) wv[j] = _mm256_loadu_si256((const __m256i *)(p + 64 * j));
        return;
    }
    const __m256i m15 = _mm256_set1_epi8(0x0f);
    const __m256i lut = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 0, -1, -2, -3, -4, -5, -6, -7, 0,
                                         1, 2, 3, 4, 5, 6, 7, 0, -1, -2, -3, -4, -5, -6, -7);
    _Pragma("GCC unroll 16")
    for (int k = 0; k < 2; k++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(grp + b * 128 + 64 * k + 32 * h));
        wv[2 * k] = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m15));
        wv[2 * k + 1] = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m15));
    }
}

INLINE __m256 block_scales(const uint8_t *grp, int b, int h, int bits) {
    const uint8_t *e = grp + (bits == 8 ? 1024 : 512) + 16 * b + 8 * h;
    int64_t e8;
    memcpy(&e8, e, 8);
    __m256i ei = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(e8));
    return _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(ei, 23)),
                         _mm256_set1_ps(bits == 8 ? 1.0f / 64 : 1.0f / 4));
}

INLINE __m256i bcast4(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

#ifdef MLM_AVXVNNI
/* The per-block values the token loop shares: the weights and the start -128 x sum(w). */
typedef struct shared { __m256i w[4], start; } shared;
INLINE void prepare(shared *s, const __m256i wv[4]) {
    const __m256i ones = _mm256_set1_epi8(1);
    __m256i sum = _mm256_setzero_si256();
    _Pragma("GCC unroll 16")
    for (int j = 0; j < 4; j++) s->w[j] = wv[j], sum = _mm256_dpbusd_avx_epi32(sum, ones, wv[j]);
    s->start = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sum, 7));
}
/* The exact block sum for one token: U its 16 activations + 128. */
INLINE __m256i block_sum(const shared *s, const uint8_t *u, const int8_t *q) {
    (void)q;
    __m256i acc = s->start;
    _Pragma("GCC unroll 16")
    for (int j = 0; j < 4; j++) acc = _mm256_dpbusd_avx_epi32(acc, bcast4(u + 4 * j), s->w[j]);
    return acc;
}
#else
/* The per-block values the token loop shares: |w|, and w for the signs. */
typedef struct shared { __m256i absw[4], w[4]; } shared;
INLINE void prepare(shared *s, const __m256i wv[4]) {
    _Pragma("GCC unroll 16")
    for (int j = 0; j < 4; j++) s->w[j] = wv[j], s->absw[j] = _mm256_abs_epi8(wv[j]);
}
INLINE __m256i block_sum(const shared *s, const uint8_t *u, const int8_t *q) {
    (void)u;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i acc = _mm256_setzero_si256();
    _Pragma("GCC unroll 16")
    for (int j = 0; j < 4; j++) {
        __m256i sx = _mm256_sign_epi8(bcast4(q + 4 * j), s->w[j]);
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(s->absw[j], sx), ones));
    }
    return acc;
}
#endif

/* Rows [R, R + NR) (NR <= 8, half H of the panel) for tokens [T0, T0 + T). */
INLINE void tile(float *out, int64_t out_stride, const uint8_t *panel, int h, const mlm_acts *x,
                 int64_t pc, int64_t r, int nr, int64_t t0, int T, int bits) {
    const int64_t gbytes = mlm_bfp_group_bytes(bits), nd = pc / MLM_Q8_BLOCK;
    __m256 acc[TMAX];
    _Pragma("GCC unroll 16")
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t g = 0; g < pc / MLM_BFP_GROUP; g++) {
        const uint8_t *grp = panel + g * gbytes;
        _mm_prefetch((const char *)(grp + 4 * gbytes + 32 * h), _MM_HINT_T0);
        _Pragma("GCC unroll 16")
        for (int b = 0; b < 4; b++) {
            __m256i wv[4];
            load_block(grp, b, h, bits, wv);
            shared s;
            prepare(&s, wv);
            __m256 ws = block_scales(grp, b, h, bits);
            const int64_t k = g * MLM_BFP_GROUP + 16 * b;
            _Pragma("GCC unroll 16")
            for (int t = 0; t < T; t++) {
                const int64_t at = (t0 + t) * pc + k;
                __m256i isum = block_sum(&s, x->u ? x->u + at : NULL, x->q + at);
                __m256 p = _mm256_mul_ps(_mm256_cvtepi32_ps(isum), ws);
                acc[t] = _mm256_fmadd_ps(p, _mm256_set1_ps(x->d[(t0 + t) * nd + k / MLM_Q8_BLOCK]),
                                         acc[t]);
            }
        }
    }
    _Pragma("GCC unroll 16")
    for (int t = 0; t < T; t++) {
        float *o = out + (t0 + t) * out_stride + r;
        if (nr == 8) {
            _mm256_storeu_ps(o, acc[t]);
        } else {
            float tmp[8];
            _mm256_storeu_ps(tmp, acc[t]);
            memcpy(o, tmp, (size_t)nr * sizeof *o);
        }
    }
}

#define TILE_FN(T)                                                                              \
    static void tile_##T(float *out, int64_t os, const uint8_t *panel, int h, const mlm_acts *x, \
                         int64_t pc, int64_t r, int nr, int64_t t0, int bits) {                 \
        if (bits == 8) tile(out, os, panel, h, x, pc, r, nr, t0, T, 8);                         \
        else tile(out, os, panel, h, x, pc, r, nr, t0, T, 4);                                   \
    }
TILE_FN(1)
TILE_FN(2)
TILE_FN(3)
TILE_FN(4)
TILE_FN(5)
TILE_FN(6)

typedef void (*tile_fn)(float *, int64_t, const uint8_t *, int, const mlm_acts *, int64_t,
                        int64_t, int, int64_t, int);
static const tile_fn tiles[TMAX + 1] = {NULL, tile_1, tile_2, tile_3, tile_4, tile_5, tile_6};

/* Decode: NP whole panels from row R for one token (1 on AMD, 2 elsewhere: core/cpu.h says
 * why), both halves of each group while its lines are in L1, with the per-row arithmetic of
 * tile(). */
INLINE void gemv(float *out, const uint8_t *panel0, int64_t pbytes, const mlm_acts *x,
                 int64_t pc, int64_t r, int bits, int NP) {
    const int64_t gbytes = mlm_bfp_group_bytes(bits);
    __m256 acc[2][2];
    _Pragma("GCC unroll 2")
    for (int p = 0; p < NP; p++) acc[p][0] = acc[p][1] = _mm256_setzero_ps();
    for (int64_t g = 0; g < pc / MLM_BFP_GROUP; g++)
        _Pragma("GCC unroll 2")
        for (int p = 0; p < NP; p++) {
            const uint8_t *grp = panel0 + p * pbytes + g * gbytes;
            for (int64_t c = 0; c < gbytes; c += 64) _mm_prefetch((const char *)(grp + 4 * gbytes + c), _MM_HINT_T0);
            _Pragma("GCC unroll 4")
            for (int b = 0; b < 4; b++) {
                const int64_t k = g * MLM_BFP_GROUP + 16 * b;
                __m256 d = _mm256_set1_ps(x->d[k / MLM_Q8_BLOCK]);
                _Pragma("GCC unroll 2")
                for (int h = 0; h < 2; h++) {
                    __m256i wv[4];
                    load_block(grp, b, h, bits, wv);
                    shared s;
                    prepare(&s, wv);
                    __m256i isum = block_sum(&s, x->u ? x->u + k : NULL, x->q + k);
                    __m256 pr = _mm256_mul_ps(_mm256_cvtepi32_ps(isum), block_scales(grp, b, h, bits));
                    acc[p][h] = _mm256_fmadd_ps(pr, d, acc[p][h]);
                }
            }
        }
    _Pragma("GCC unroll 2")
    for (int p = 0; p < NP; p++)
        _Pragma("GCC unroll 2")
        for (int h = 0; h < 2; h++) _mm256_storeu_ps(out + r + 16 * p + 8 * h, acc[p][h]);
}

static void gemv_8(float *out, const uint8_t *panel0, int64_t pbytes, const mlm_acts *x,
                   int64_t pc, int64_t r, int np) {
    if (np == 1) gemv(out, panel0, pbytes, x, pc, r, 8, 1);
    else gemv(out, panel0, pbytes, x, pc, r, 8, 2);
}

static void gemv_4(float *out, const uint8_t *panel0, int64_t pbytes, const mlm_acts *x,
                   int64_t pc, int64_t r, int np) {
    if (np == 1) gemv(out, panel0, pbytes, x, pc, r, 4, 1);
    else gemv(out, panel0, pbytes, x, pc, r, 4, 2);
}

static void matmul_bfp(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                       int64_t r0, int64_t r1, int bits) {
    const int64_t pc = mlm_q8_cols(x->cols), pbytes = mlm_bfp_panel_bytes(x->cols, bits);
    const int np = x->n == 1 ? mlm_cpu_decode_panels(2) : 0;
    if (np) /* decode: whole panels, one or two at a time */
        for (; r0 + np * MLM_BFP_ROWS <= r1; r0 += np * MLM_BFP_ROWS) {
            const uint8_t *panel = (const uint8_t *)w + r0 / MLM_BFP_ROWS * pbytes;
            if (bits == 8) gemv_8(out, panel, pbytes, x, pc, r0, np);
            else gemv_4(out, panel, pbytes, x, pc, r0, np);
        }
    for (int64_t r = r0; r < r1; r += 8) {
        const uint8_t *panel = (const uint8_t *)w + r / MLM_BFP_ROWS * pbytes;
        int h = (int)(r % MLM_BFP_ROWS) / 8, nr = r1 - r < 8 ? (int)(r1 - r) : 8;
        for (int64_t t = 0; t < x->n; t += TMAX) {
            int T = x->n - t < TMAX ? (int)(x->n - t) : TMAX;
            tiles[T](out, out_stride, panel, h, x, pc, r, nr, t, bits);
        }
    }
}

void NAME(mlm_matmul_bfp8_q8)(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                              int64_t r0, int64_t r1) {
    matmul_bfp(out, out_stride, w, x, r0, r1, 8);
}

void NAME(mlm_matmul_bfp4_q8)(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                              int64_t r0, int64_t r1) {
    matmul_bfp(out, out_stride, w, x, r0, r1, 4);
}
