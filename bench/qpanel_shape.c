/* bench/qpanel_shape.c: what limits the native AVX-512 kernels' compute on a CPU, measured on
 * a q4_k-shaped 16-row panel held in L1/L2 (no memory traffic): ns per 16-row block of 32
 * columns and token for T = 1, 2, 4, 8 tokens, in four loop shapes over the same work:
 *   - "float epilogue": today's kernels' shape (one panel; each token's 8 activation
 *     broadcasts done for that panel; two dpbusd chains; the per-block float epilogue);
 *   - "integer super-block": llama.cpp's Q4_K x Q8_K idea, integer sums over a 256-column
 *     super-block (sub-scales applied with vpmulld, one float conversion per super-block,
 *     activations with one scale per 256 columns);
 *   - "two panels": each token's broadcasts feed two panels' dpbusd;
 *   - "four chains": today's shape with four independent dpbusd chains per token.
 * A model of the inner loops for choosing the next kernel shape, not meshlm's kernels (those
 * are src/backend/cpu/matmul_q_*.c); the numbers it adds up are not checked. Prints figures;
 * never fails on speed; SKIP without AVX-512 VNNI. Two runs on AMD EPYC Zen 4 (2 cores, a
 * shared machine, 2026-12-06), against the float epilogue: integer super-block 0.79-0.94x
 * (once 1.16x at one token), two panels 0.95-1.22x, four chains 0.93-1.00x at one token and
 * 1.17-1.35x at 2-8: the sums' dependency chains, not the epilogue, are the lead. */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))
#define NB 64 /* blocks of 32 columns: a 2048-column row */
#define TM 8  /* tokens at most */

static uint8_t W[2][NB * 256] __attribute__((aligned(64))); /* two panels' 4-bit codes */
static uint8_t SUB[NB * 32] __attribute__((aligned(64)));   /* per block: 16 sc, 16 mn bytes */
static uint16_t DM[NB / 8 * 32] __attribute__((aligned(64))); /* per super-block: f16 d, dmin */
static int8_t X[TM][NB * 32] __attribute__((aligned(64)));  /* int8 activations */
static float XD[TM][NB], XS[TM][NB], XDK[TM][NB / 8];       /* per-block scale, sum; per 256 */
static int32_t XSI[TM][NB];                                 /* per-block integer sum */

AVX512 static inline __m512i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* Block B's 8 code vectors of panel P (columns 4h..4h+3 in vector h, 16 + 4h.. in 4 + h). */
AVX512 static inline void codes(int p, int b, __m512i wv[8]) {
    const __m512i m15 = _mm512_set1_epi8(15);
    for (int h = 0; h < 4; h++) {
        __m512i v = _mm512_loadu_si512(W[p] + b * 256 + 64 * h);
        wv[h] = _mm512_and_si512(v, m15);
        wv[4 + h] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m15);
    }
}

AVX512 static inline __m512 scale_of(const uint8_t *bytes, __m512 d) {
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)bytes))));
}

AVX512 __attribute__((noinline)) static void float_epilogue(int T, float *out) {
    __m512 acc[TM];
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int g = 0; g < NB / 8; g++) {
        __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(DM + g * 32)));
        __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(DM + g * 32 + 16)));
        for (int b = g * 8; b < g * 8 + 8; b++) {
            __m512i wv[8];
            codes(0, b, wv);
            __m512 sc = scale_of(SUB + b * 32, d), mn = scale_of(SUB + b * 32 + 16, m);
            for (int t = 0; t < T; t++) {
                __m512i i0 = _mm512_setzero_si512(), i1 = _mm512_setzero_si512();
                for (int h = 0; h < 4; h++) {
                    i0 = _mm512_dpbusd_epi32(i0, wv[h], bcast4(X[t] + 32 * b + 4 * h));
                    i1 = _mm512_dpbusd_epi32(i1, wv[4 + h], bcast4(X[t] + 32 * b + 16 + 4 * h));
                }
                __m512 f = _mm512_cvtepi32_ps(_mm512_add_epi32(i0, i1));
                __m512 v = _mm512_fmsub_ps(f, sc, _mm512_mul_ps(_mm512_set1_ps(XS[t][b]), mn));
                acc[t] = _mm512_fmadd_ps(v, _mm512_set1_ps(XD[t][b]), acc[t]);
            }
        }
    }
    for (int t = 0; t < T; t++) _mm512_storeu_ps(out + 16 * t, acc[t]);
}

AVX512 __attribute__((noinline)) static void integer_superblock(int T, float *out) {
    __m512 acc[TM];
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int g = 0; g < NB / 8; g++) {
        __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(DM + g * 32)));
        __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(DM + g * 32 + 16)));
        __m512i isc[TM], imn[TM];
        for (int t = 0; t < T; t++) isc[t] = imn[t] = _mm512_setzero_si512();
        for (int b = g * 8; b < g * 8 + 8; b++) {
            __m512i wv[8];
            codes(0, b, wv);
            __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(SUB + b * 32)));
            __m512i mn = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(SUB + b * 32 + 16)));
            for (int t = 0; t < T; t++) {
                __m512i i0 = _mm512_setzero_si512(), i1 = _mm512_setzero_si512();
                for (int h = 0; h < 4; h++) {
                    i0 = _mm512_dpbusd_epi32(i0, wv[h], bcast4(X[t] + 32 * b + 4 * h));
                    i1 = _mm512_dpbusd_epi32(i1, wv[4 + h], bcast4(X[t] + 32 * b + 16 + 4 * h));
                }
                isc[t] = _mm512_add_epi32(isc[t], _mm512_mullo_epi32(_mm512_add_epi32(i0, i1), sc));
                imn[t] = _mm512_add_epi32(imn[t], _mm512_mullo_epi32(_mm512_set1_epi32(XSI[t][b]), mn));
            }
        }
        for (int t = 0; t < T; t++) {
            __m512 v = _mm512_fmsub_ps(_mm512_cvtepi32_ps(isc[t]), d,
                                       _mm512_mul_ps(_mm512_cvtepi32_ps(imn[t]), m));
            acc[t] = _mm512_fmadd_ps(v, _mm512_set1_ps(XDK[t][g]), acc[t]);
        }
    }
    for (int t = 0; t < T; t++) _mm512_storeu_ps(out + 16 * t, acc[t]);
}

AVX512 __attribute__((noinline)) static void two_panels(int T, float *out) {
    __m512 acc[2][TM];
    for (int t = 0; t < T; t++) acc[0][t] = acc[1][t] = _mm512_setzero_ps();
    for (int g = 0; g < NB / 8; g++) {
        __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(DM + g * 32)));
        __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(DM + g * 32 + 16)));
        for (int b = g * 8; b < g * 8 + 8; b++) {
            __m512i wa[8], wb[8];
            codes(0, b, wa);
            codes(1, b, wb);
            /* (both panels read the same sub-scales here: a second panel's would add 6 ops) */
            __m512 sc = scale_of(SUB + b * 32, d), mn = scale_of(SUB + b * 32 + 16, m);
            for (int t = 0; t < T; t++) {
                __m512i i0 = _mm512_setzero_si512(), i1 = _mm512_setzero_si512();
                __m512i j0 = _mm512_setzero_si512(), j1 = _mm512_setzero_si512();
                for (int h = 0; h < 4; h++) {
                    __m512i lo = bcast4(X[t] + 32 * b + 4 * h), hi = bcast4(X[t] + 32 * b + 16 + 4 * h);
                    i0 = _mm512_dpbusd_epi32(i0, wa[h], lo);
                    i1 = _mm512_dpbusd_epi32(i1, wa[4 + h], hi);
                    j0 = _mm512_dpbusd_epi32(j0, wb[h], lo);
                    j1 = _mm512_dpbusd_epi32(j1, wb[4 + h], hi);
                }
                __m512 ms = _mm512_mul_ps(_mm512_set1_ps(XS[t][b]), mn), dx = _mm512_set1_ps(XD[t][b]);
                __m512 fa = _mm512_cvtepi32_ps(_mm512_add_epi32(i0, i1));
                __m512 fb = _mm512_cvtepi32_ps(_mm512_add_epi32(j0, j1));
                acc[0][t] = _mm512_fmadd_ps(_mm512_fmsub_ps(fa, sc, ms), dx, acc[0][t]);
                acc[1][t] = _mm512_fmadd_ps(_mm512_fmsub_ps(fb, sc, ms), dx, acc[1][t]);
            }
        }
    }
    for (int t = 0; t < T; t++)
        _mm512_storeu_ps(out + 16 * t, _mm512_add_ps(acc[0][t], acc[1][t]));
}

AVX512 __attribute__((noinline)) static void four_chains(int T, float *out) {
    __m512 acc[TM];
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int g = 0; g < NB / 8; g++) {
        __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(DM + g * 32)));
        __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(DM + g * 32 + 16)));
        for (int b = g * 8; b < g * 8 + 8; b++) {
            __m512i wv[8];
            codes(0, b, wv);
            __m512 sc = scale_of(SUB + b * 32, d), mn = scale_of(SUB + b * 32 + 16, m);
            for (int t = 0; t < T; t++) {
                const int8_t *x = X[t] + 32 * b;
                __m512i a[4];
                a[0] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[0], bcast4(x));
                a[1] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[1], bcast4(x + 4));
                a[2] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[4], bcast4(x + 16));
                a[3] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[5], bcast4(x + 20));
                a[0] = _mm512_dpbusd_epi32(a[0], wv[2], bcast4(x + 8));
                a[1] = _mm512_dpbusd_epi32(a[1], wv[3], bcast4(x + 12));
                a[2] = _mm512_dpbusd_epi32(a[2], wv[6], bcast4(x + 24));
                a[3] = _mm512_dpbusd_epi32(a[3], wv[7], bcast4(x + 28));
                __m512i s = _mm512_add_epi32(_mm512_add_epi32(a[0], a[1]), _mm512_add_epi32(a[2], a[3]));
                __m512 v = _mm512_fmsub_ps(_mm512_cvtepi32_ps(s), sc,
                                           _mm512_mul_ps(_mm512_set1_ps(XS[t][b]), mn));
                acc[t] = _mm512_fmadd_ps(v, _mm512_set1_ps(XD[t][b]), acc[t]);
            }
        }
    }
    for (int t = 0; t < T; t++) _mm512_storeu_ps(out + 16 * t, acc[t]);
}

typedef void (*shape_fn)(int, float *);

/* The best of 5 runs of about 200,000 block-tokens: ns per 16-row block and token. */
static double time_shape(shape_fn fn, int T, int panels) {
    static float out[2 * 16 * TM];
    int calls = 200000 / NB / T / panels * NB;
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = bench_now();
        for (int i = 0; i < calls; i++) fn(T, out);
        double ns = (bench_now() - t0) / calls / NB / T / panels * 1e9;
        if (ns < best) best = ns;
    }
    return best;
}

int main(void) {
    if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bw")) {
        printf("SKIP: bench/qpanel_shape needs AVX-512 VNNI and BW\n");
        return 0;
    }
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < NB * 256; i++) W[p][i] = (uint8_t)(i * 37 + 11 + p);
    for (int i = 0; i < NB * 32; i++) SUB[i] = (uint8_t)((i * 13) & 63);
    for (int i = 0; i < NB / 8 * 32; i++) DM[i] = (uint16_t)(0x2000 + (i & 15));
    for (int t = 0; t < TM; t++) {
        for (int i = 0; i < NB * 32; i++) X[t][i] = (int8_t)((i * 7 + t) % 255 - 127);
        for (int b = 0; b < NB; b++) XD[t][b] = 0.01f, XS[t][b] = 3.0f, XSI[t][b] = 3;
        for (int g = 0; g < NB / 8; g++) XDK[t][g] = 0.01f;
    }
    printf("bench/qpanel_shape: ns per 16-row block of 32 columns and token (L1/L2-resident q4_k)\n");
    printf("tokens  float epilogue  integer super-block  two panels  four chains\n");
    for (int T = 1; T <= TM; T *= 2) {
        double a = time_shape(float_epilogue, T, 1), b = time_shape(integer_superblock, T, 1);
        double c = time_shape(two_panels, T, 2), d = time_shape(four_chains, T, 1);
        printf("%6d  %14.3f  %12.3f (%.2fx)  %5.3f (%.2fx)  %5.3f (%.2fx)\n", T, a, b, a / b, c,
               a / c, d, a / d);
    }
    return 0;
}
