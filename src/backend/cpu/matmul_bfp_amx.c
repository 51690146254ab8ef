/* backend/cpu/matmul_bfp_amx.c: BFP8 / BFP4 weights against int8 activations with AMX-INT8
 * tiles for 16 tokens at a time, AVX-512 for the rest.
 *
 * A block of the panel layout (tensor/bfp.h: 16 rows x 16 columns as 4 rows of 64 bytes) is
 * exactly an AMX B tile, and 16 tokens' activations for those 16 columns are an A tile
 * (16 rows of 16 signed bytes, the row stride of the activations). tdpbssd (signed x signed)
 * gives the 16 x 16 exact int32 block sums in one instruction; they are stored and the
 * canonical epilogue (backend.h) adds them to 16 f32 accumulators of 16 rows each, so the
 * results equal every other level's bit for bit. Token counts under 16 (decode) and the
 * last tokens of a batch go to the AVX-512 VNNI kernel, with the same arithmetic. BFP4
 * blocks are expanded to signed bytes (one shuffle per 64 values) before their tile load.
 * Each call loads its own tile configuration (tile state is per thread). */
#include <immintrin.h>
#include <string.h>

#include "backend/backend.h"
#include "tensor/bfp.h"
#include "tensor/q8.h"

#define INLINE static inline __attribute__((always_inline))
#define MAX_ND 1024 /* rows up to 32768 columns use tiles (64 KB of scales on the stack) */

typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* Tiles 0-3: C, 16 tokens x 16 int32; 4-5: A, 16 tokens x 16 bytes; 6-7: B, 4 x 64 bytes. */
static void configure(void) {
    tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    _Pragma("GCC unroll 16")
    for (int i = 0; i < 4; i++) c.rows[i] = 16, c.colsb[i] = 64;
    for (int i = 4; i < 6; i++) c.rows[i] = 16, c.colsb[i] = 16;
    for (int i = 6; i < 8; i++) c.rows[i] = 4, c.colsb[i] = 64;
    _tile_loadconfig(&c);
}

INLINE __m512 block_scales(const uint8_t *grp, int b, int bits) {
    const uint8_t *e = grp + (bits == 8 ? 1024 : 512) + 16 * b;
    __m512i ei = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)e));
    return _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(ei, 23)),
                         _mm512_set1_ps(bits == 8 ? 1.0f / 64 : 1.0f / 4));
}

/* The BFP4 group at GRP as 4 blocks of signed bytes in BFP8's block layout (1024 bytes). */
INLINE void expand4(const uint8_t *grp, uint8_t *dst) {
    const __m512i m15 = _mm512_set1_epi8(0x0f);
    const __m512i lut = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 0, -1, -2, -3, -4, -5, -6, -7));
    _Pragma("GCC unroll 16")
    for (int b = 0; b < 4; b++)
        _Pragma("GCC unroll 16")
        for (int h = 0; h < 2; h++) {
            __m512i v = _mm512_loadu_si512((const void *)(grp + b * 128 + 64 * h));
            _mm512_storeu_si512((void *)(dst + b * 256 + 128 * h), _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m15)));
            _mm512_storeu_si512((void *)(dst + b * 256 + 128 * h + 64),
                                _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m15)));
        }
}

/* Loads the A and B tiles of block K (0..nb-1) and multiplies them into C tile CT. */
#define BLOCK_TDP(CT, AT, BT, k)                                                                \
    do {                                                                                        \
        _tile_loadd(AT, q + (k) * 16, pc);                                                      \
        _tile_loadd(BT, wblock(panel, (k), bits, wexp), 64);                                    \
        _tile_zero(CT);                                                                         \
        _tile_dpbssd(CT, AT, BT);                                                               \
    } while (0)

/* The 256 bytes of block K of a panel as signed bytes (BFP4 expanded into WEXP's slot). */
INLINE const uint8_t *wblock(const uint8_t *panel, int64_t k, int bits, uint8_t (*wexp)[256]) {
    const uint8_t *grp = panel + k / 4 * mlm_bfp_group_bytes(bits);
    if (bits == 8) return grp + (k % 4) * 256;
    const __m512i m15 = _mm512_set1_epi8(0x0f);
    const __m512i lut = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 0, -1, -2, -3, -4, -5, -6, -7));
    uint8_t *dst = wexp[k % 4];
    for (int h = 0; h < 2; h++) {
        __m512i v = _mm512_loadu_si512((const void *)(grp + (k % 4) * 128 + 64 * h));
        _mm512_storeu_si512((void *)(dst + 128 * h), _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m15)));
        _mm512_storeu_si512((void *)(dst + 128 * h + 64),
                            _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m15)));
    }
    return dst;
}

/* The canonical epilogue of block K for the 16 tokens: C holds its int32 sums. */
INLINE void epilogue(__m512 acc[16], const int32_t (*c)[16], const uint8_t *panel, int64_t k,
                     const float *dl, int bits) {
    const uint8_t *grp = panel + k / 4 * mlm_bfp_group_bytes(bits);
    __m512 ws = block_scales(grp, (int)(k % 4), bits);
    const float *dk = dl + k / 2 * 16; /* the 16 tokens' scales of these columns */
    _Pragma("GCC unroll 16")
    for (int t = 0; t < 16; t++) {
        __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512((const void *)c[t])), ws);
        acc[t] = _mm512_fmadd_ps(p, _mm512_set1_ps(dk[t]), acc[t]);
    }
}

/* Rows [R, R + NR) of one panel for the 16 tokens from T0. Blocks go in pairs through two
 * pairs of C tiles, so the tile unit multiplies pair p + 2 while the vector unit adds up
 * pair p. DL holds the 16 tokens' activation scales by column block (pc / 32 x 16). */
INLINE void tile16(float *out, int64_t out_stride, const uint8_t *panel, const int8_t *q,
                   const float *dl, int64_t pc, int64_t r, int nr, int64_t t0, int bits) {
    const int64_t nb = pc / 16; /* blocks, a multiple of 4 */
    _Alignas(64) int32_t c[4][16][16];
    _Alignas(64) uint8_t wexp[4][256];
    __m512 acc[16];
    _Pragma("GCC unroll 16")
    for (int t = 0; t < 16; t++) acc[t] = _mm512_setzero_ps();
    BLOCK_TDP(0, 4, 6, 0);
    BLOCK_TDP(1, 5, 7, 1);
    BLOCK_TDP(2, 4, 6, 2);
    BLOCK_TDP(3, 5, 7, 3);
    for (int64_t k = 0; k < nb; k += 4) {
        _tile_stored(0, c[0], 64);
        _tile_stored(1, c[1], 64);
        if (k + 4 < nb) {
            BLOCK_TDP(0, 4, 6, k + 4);
            BLOCK_TDP(1, 5, 7, k + 5);
        }
        epilogue(acc, (const int32_t(*)[16])c[0], panel, k, dl, bits);
        epilogue(acc, (const int32_t(*)[16])c[1], panel, k + 1, dl, bits);
        _tile_stored(2, c[2], 64);
        _tile_stored(3, c[3], 64);
        if (k + 4 < nb) {
            BLOCK_TDP(2, 4, 6, k + 6);
            BLOCK_TDP(3, 5, 7, k + 7);
        }
        epilogue(acc, (const int32_t(*)[16])c[2], panel, k + 2, dl, bits);
        epilogue(acc, (const int32_t(*)[16])c[3], panel, k + 3, dl, bits);
    }
    const __mmask16 m = (__mmask16)(nr == 16 ? 0xffff : (1u << nr) - 1);
    _Pragma("GCC unroll 16")
    for (int t = 0; t < 16; t++) _mm512_mask_storeu_ps(out + (t0 + t) * out_stride + r, m, acc[t]);
}

static void tile16_8(float *out, int64_t os, const uint8_t *panel, const int8_t *q,
                     const float *dl, int64_t pc, int64_t r, int nr, int64_t t0) {
    tile16(out, os, panel, q, dl, pc, r, nr, t0, 8);
}

static void tile16_4(float *out, int64_t os, const uint8_t *panel, const int8_t *q,
                     const float *dl, int64_t pc, int64_t r, int nr, int64_t t0) {
    tile16(out, os, panel, q, dl, pc, r, nr, t0, 4);
}

/* BFP4 panels whose rows are at most this many columns are expanded once per call into BFP8's
 * layout (codes as signed bytes, exponents + 4: 2^(e + 4 - 127) / 64 = 2^(e - 127) / 4, the
 * same scale), so the token tiles reuse them; wider ones expand block by block. */
#define EXPAND_COLS 8192
#define EXPAND_PANELS 4 /* the forward pass hands out 64 rows a task */

/* Panel P (BFP4, PC padded columns) as a BFP8-layout panel at DST; 0 if an exponent would
 * overflow (then the caller expands block by block). */
static int expand_panel(const uint8_t *panel, int64_t pc, uint8_t *dst) {
    for (int64_t g = 0; g < pc / MLM_BFP_GROUP; g++) {
        const uint8_t *src = panel + g * 576;
        uint8_t *o = dst + g * 1088;
        expand4(src, o);
        for (int e = 0; e < 64; e++) {
            if (src[512 + e] > 251) return 0;
            o[1024 + e] = (uint8_t)(src[512 + e] + 4);
        }
    }
    return 1;
}

static void matmul_bfp(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                       int64_t r0, int64_t r1, int bits) {
    const int64_t pc = mlm_q8_cols(x->cols), pbytes = mlm_bfp_panel_bytes(x->cols, bits);
    const int64_t nd = pc / MLM_Q8_BLOCK;
    const int64_t n16 = nd <= MAX_ND ? x->n / 16 * 16 : 0;
    if (n16 && bits == 4 && pc <= EXPAND_COLS && r1 - r0 <= EXPAND_PANELS * MLM_BFP_ROWS && n16 >= 32) {
        /* several token tiles: expand the panels once, then run the BFP8 tiles over them */
        _Alignas(64) uint8_t wide[EXPAND_PANELS * (EXPAND_COLS / MLM_BFP_GROUP) * 1088];
        const int64_t wbytes = mlm_bfp_panel_bytes(x->cols, 8);
        int ok = 1;
        for (int64_t r = r0; r < r1 && ok; r += MLM_BFP_ROWS)
            ok = expand_panel((const uint8_t *)w + r / MLM_BFP_ROWS * pbytes, pc,
                              wide + (r - r0) / MLM_BFP_ROWS * wbytes);
        if (ok) {
            mlm_acts head = *x;
            head.n = n16;
            /* the expanded panels start at row r0: shift the output so rows line up */
            matmul_bfp(out + r0, out_stride, wide, &head, 0, r1 - r0, 8);
            if (n16 < x->n) {
                mlm_acts rest = *x;
                rest.n = x->n - n16;
                rest.q = x->q + n16 * pc, rest.u = x->u + n16 * pc, rest.d = x->d + n16 * nd;
                mlm_matmul_bfp4_q8_avx512(out + n16 * out_stride, out_stride, w, &rest, r0, r1);
            }
            return;
        }
    }
    if (n16) {
        configure();
        float dl[16 * MAX_ND]; /* a token tile's scales, by column block */
        for (int64_t t = 0; t < n16; t += 16) {
            for (int64_t b = 0; b < nd; b++)
                for (int i = 0; i < 16; i++) dl[b * 16 + i] = x->d[(t + i) * nd + b];
            for (int64_t r = r0; r < r1; r += MLM_BFP_ROWS) {
                const uint8_t *panel = (const uint8_t *)w + r / MLM_BFP_ROWS * pbytes;
                int nr = r1 - r < MLM_BFP_ROWS ? (int)(r1 - r) : MLM_BFP_ROWS;
                if (bits == 8) tile16_8(out, out_stride, panel, x->q + t * pc, dl, pc, r, nr, t);
                else tile16_4(out, out_stride, panel, x->q + t * pc, dl, pc, r, nr, t);
            }
        }
        _tile_release();
    }
    if (n16 < x->n) { /* the rest, with the same arithmetic on AVX-512 */
        mlm_acts rest = *x;
        rest.n = x->n - n16;
        rest.q = x->q + n16 * pc, rest.u = x->u + n16 * pc, rest.d = x->d + n16 * (pc / MLM_Q8_BLOCK);
        if (bits == 8) mlm_matmul_bfp8_q8_avx512(out + n16 * out_stride, out_stride, w, &rest, r0, r1);
        else mlm_matmul_bfp4_q8_avx512(out + n16 * out_stride, out_stride, w, &rest, r0, r1);
    }
}

void mlm_matmul_bfp8_q8_amx(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                            int64_t r0, int64_t r1) {
    matmul_bfp(out, out_stride, w, x, r0, r1, 8);
}

void mlm_matmul_bfp4_q8_amx(float *out, int64_t out_stride, const void *w, const mlm_acts *x,
                            int64_t r0, int64_t r1) {
    matmul_bfp(out, out_stride, w, x, r0, r1, 4);
}
