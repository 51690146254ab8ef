/* backend/cpu/matmul_bfp_avx512.c: BFP8 / BFP4 weights against int8 activations with AVX-512
 * VNNI (F, BW, VL, VNNI).
 *
 * A 64-byte vector of the panel layout (tensor/bfp.h) holds 16 rows x 4 columns as signed
 * bytes, so one vpdpbusd adds 4 products to each of 16 rows' int32 sums: lane i is row i,
 * and no horizontal sum is ever needed. vpdpbusd takes unsigned x signed bytes, so the
 * activations come as q + 128 and each block's sum is started at -128 x (sum of its weights),
 * itself a vpdpbusd of the weights with ones; the block's exact int32 sum then gets the
 * canonical epilogue acc = fma((float)I * ws, d, acc) (backend.h), so every level agrees bit
 * for bit. A tile is one panel (16 rows) x T tokens: the weights of a block are loaded and
 * expanded once (BFP4 nibbles with one shuffle) for T tokens. Decode (1 token) streams the
 * panel once, with software prefetch a few groups ahead. */
#include <immintrin.h>
#include <string.h>

#include "backend/backend.h"
#include "core/cpu.h"
#include "tensor/bfp.h"
#include "tensor/q8.h"

#define INLINE static inline __attribute__((always_inline))
#ifndef PF
#define PF 6
#endif
#define TMAX 12 /* tokens per tile: 12 int32 sums + 12 f32 accumulators + 6 block vectors */

/* The 4 weight vectors (16 rows x 4 columns each) of block B of the group at GRP. */
INLINE void load_block(const uint8_t *grp, int b, int bits, __m512i wv[4]) {
    if (bits == 8) {
        const uint8_t *p = grp + b * 256;
        _Pragma("GCC unroll 16")
        for (int j = 0; j < 4; j++) wv[j] = _mm512_loadu_si512((const void *)(p + 64 * j));
        return;
    }
    const __m512i m15 = _mm512_set1_epi8(0x0f);
    const __m512i lut = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 0, -1, -2, -3, -4, -5, -6, -7));
    _Pragma("GCC unroll 16")
    for (int h = 0; h < 2; h++) {
        __m512i v = _mm512_loadu_si512((const void *)(grp + b * 128 + 64 * h));
        wv[2 * h] = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m15));
        wv[2 * h + 1] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m15));
    }
}

/* Block B's 16 row scales: 2^(e - 127) from the exponent bits, times 2^-(bits - 2). */
INLINE __m512 block_scales(const uint8_t *grp, int b, int bits) {
    const uint8_t *e = grp + (bits == 8 ? 1024 : 512) + 16 * b;
    __m512i ei = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)e));
    return _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(ei, 23)),
                         _mm512_set1_ps(bits == 8 ? 1.0f / 64 : 1.0f / 4));
}

/* -128 x the sum of each row's 16 weights: the start that cancels the +128 of u. */
INLINE __m512i block_start(const __m512i wv[4]) {
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i s = _mm512_setzero_si512();
    _Pragma("GCC unroll 16")
    for (int j = 0; j < 4; j++) s = _mm512_dpbusd_epi32(s, ones, wv[j]);
    return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(s, 7));
}

INLINE __m512i bcast4(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* Rows [16 * panel, + NR) for tokens [T0, T0 + T). */
INLINE void tile(float *out, int64_t out_stride, const uint8_t *panel, const mlm_acts *x,
                 int64_t pc, int64_t r, int nr, int64_t t0, int T, int bits) {
    const int64_t gbytes = mlm_bfp_group_bytes(bits), nd = pc / MLM_Q8_BLOCK;
    const uint8_t *u = x->u + t0 * pc;
    const float *d = x->d + t0 * nd;
    __m512 acc[TMAX];
    _Pragma("GCC unroll 16")
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t g = 0; g < pc / MLM_BFP_GROUP; g++) {
        const uint8_t *grp = panel + g * gbytes;
        /* the next groups of this panel's stream (a no-op past its end) */
        _mm_prefetch((const char *)(grp + 4 * gbytes), _MM_HINT_T0);
        _mm_prefetch((const char *)(grp + 4 * gbytes + 512), _MM_HINT_T0);
        if (bits == 8) _mm_prefetch((const char *)(grp + 4 * gbytes + 1024 - 64), _MM_HINT_T0);
        _Pragma("GCC unroll 16")
        for (int b = 0; b < 4; b++) {
            __m512i wv[4];
            load_block(grp, b, bits, wv);
            __m512 ws = block_scales(grp, b, bits);
            __m512i start = block_start(wv);
            const int64_t k = g * MLM_BFP_GROUP + 16 * b;
            /* the 4 steps of every token's block sum side by side: T independent chains */
            __m512i s[TMAX];
            _Pragma("GCC unroll 16")
            for (int t = 0; t < T; t++) s[t] = start;
            _Pragma("GCC unroll 16")
            for (int j = 0; j < 4; j++)
                _Pragma("GCC unroll 16")
                for (int t = 0; t < T; t++)
                    s[t] = _mm512_dpbusd_epi32(s[t], bcast4(u + t * pc + k + 4 * j), wv[j]);
            _Pragma("GCC unroll 16")
            for (int t = 0; t < T; t++) {
                __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(s[t]), ws);
                acc[t] = _mm512_fmadd_ps(p, _mm512_set1_ps(d[t * nd + k / MLM_Q8_BLOCK]), acc[t]);
            }
        }
    }
    const __mmask16 m = (__mmask16)(nr == 16 ? 0xffff : (1u << nr) - 1);
    _Pragma("GCC unroll 16")
    for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(out + (t0 + t) * out_stride + r, m, acc[t]);
}

/* One instance per tile height, so the token loop unrolls with constant trip counts. */
#define TILE_FN(T)                                                                              \
    static void tile_##T(float *out, int64_t os, const uint8_t *panel, const mlm_acts *x,       \
                         int64_t pc, int64_t r, int nr, int64_t t0, int bits) {                 \
        if (bits == 8) tile(out, os, panel, x, pc, r, nr, t0, T, 8);                            \
        else tile(out, os, panel, x, pc, r, nr, t0, T, 4);                                      \
    }
TILE_FN(1)
TILE_FN(2)
TILE_FN(3)
TILE_FN(4)
TILE_FN(5)
TILE_FN(6)
TILE_FN(7)
TILE_FN(8)
TILE_FN(9)
TILE_FN(10)
TILE_FN(11)
TILE_FN(12)

typedef void (*tile_fn)(float *, int64_t, const uint8_t *, const mlm_acts *, int64_t, int64_t,
                        int, int64_t, int);
static const tile_fn tiles[TMAX + 1] = {NULL,   tile_1, tile_2, tile_3,  tile_4,  tile_5, tile_6,
                                        tile_7, tile_8, tile_9, tile_10, tile_11, tile_12};

/* Decode: NP whole panels from row R for one token, read side by side (NP streams: 1 on AMD,
 * 4 elsewhere, core/cpu.h says why; on Zen 4 four streams read bfp8 at 11-13 GB/s from memory
 * on one thread, one at 18-22), each prefetched a few groups ahead, with the same per-row
 * arithmetic as tile(). */
INLINE void gemv(float *out, const uint8_t *panel0, int64_t pbytes, const mlm_acts *x,
                 int64_t pc, int64_t r, int bits, int NP) {
    const int64_t gbytes = mlm_bfp_group_bytes(bits);
    __m512 acc[4];
    _Pragma("GCC unroll 4")
    for (int p = 0; p < NP; p++) acc[p] = _mm512_setzero_ps();
    for (int64_t g = 0; g < pc / MLM_BFP_GROUP; g++) {
        _Pragma("GCC unroll 4")
        for (int p = 0; p < NP; p++) {
            const uint8_t *ahead = panel0 + p * pbytes + (g + PF) * gbytes;
            _Pragma("GCC unroll 17")
            for (int64_t c = 0; c < gbytes; c += 64) _mm_prefetch((const char *)(ahead + c), _MM_HINT_T0);
        }
        _Pragma("GCC unroll 4")
        for (int b = 0; b < 4; b++) {
            const int64_t k = g * MLM_BFP_GROUP + 16 * b;
            __m512i xv[4];
            _Pragma("GCC unroll 4")
            for (int j = 0; j < 4; j++) xv[j] = bcast4(x->u + k + 4 * j);
            __m512 d = _mm512_set1_ps(x->d[k / MLM_Q8_BLOCK]);
            _Pragma("GCC unroll 4")
            for (int p = 0; p < NP; p++) {
                const uint8_t *grp = panel0 + p * pbytes + g * gbytes;
                __m512i wv[4];
                load_block(grp, b, bits, wv);
                __m512i s = block_start(wv);
                _Pragma("GCC unroll 4")
                for (int j = 0; j < 4; j++) s = _mm512_dpbusd_epi32(s, xv[j], wv[j]);
                __m512 pr = _mm512_mul_ps(_mm512_cvtepi32_ps(s), block_scales(grp, b, bits));
                acc[p] = _mm512_fmadd_ps(pr, d, acc[p]);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int p = 0; p < NP; p++) _mm512_storeu_ps(out + r + 16 * p, acc[p]);
}

static void gemv_8(float *out, const uint8_t *panel0, int64_t pbytes, const mlm_acts *x,
                   int64_t pc, int64_t r, int np) {
    if (np == 1) gemv(out, panel0, pbytes, x, pc, r, 8, 1);
    else gemv(out, panel0, pbytes, x, pc, r, 8, 4);
}

static void gemv_4(float *out, const uint8_t *panel0, int64_t pbytes, const mlm_acts *x,
                   int64_t pc, int64_t r, int np) {
    if (np == 1) gemv(out, panel0, pbytes, x, pc, r, 4, 1);
    else gemv(out, panel0, pbytes, x, pc, r, 4, 4);
}

static void matmul_bfp(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                       int64_t r0, int64_t r1, int bits) {
    const int64_t pc = mlm_q8_cols(x->cols), pbytes = mlm_bfp_panel_bytes(x->cols, bits);
    const int np = x->n == 1 ? mlm_cpu_decode_panels(4) : 0;
    if (np) /* decode: whole panels, one or four at a time */
        for (; r0 + np * MLM_BFP_ROWS <= r1; r0 += np * MLM_BFP_ROWS) {
            const uint8_t *panel = (const uint8_t *)w + r0 / MLM_BFP_ROWS * pbytes;
            if (bits == 8) gemv_8(out, panel, pbytes, x, pc, r0, np);
            else gemv_4(out, panel, pbytes, x, pc, r0, np);
        }
    for (int64_t r = r0; r < r1; r += MLM_BFP_ROWS) {
        const uint8_t *panel = (const uint8_t *)w + r / MLM_BFP_ROWS * pbytes;
        int nr = r1 - r < MLM_BFP_ROWS ? (int)(r1 - r) : MLM_BFP_ROWS;
        for (int64_t t = 0; t < x->n; t += TMAX) {
            int T = x->n - t < TMAX ? (int)(x->n - t) : TMAX;
            tiles[T](out, out_stride, panel, x, pc, r, nr, t, bits);
        }
    }
}

void mlm_matmul_bfp8_q8_avx512(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                               int64_t r0, int64_t r1) {
    matmul_bfp(out, out_stride, w, x, r0, r1, 8);
}

void mlm_matmul_bfp4_q8_avx512(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                               int64_t r0, int64_t r1) {
    matmul_bfp(out, out_stride, w, x, r0, r1, 4);
}
