/* tests/unit/test_gguf_quants.c: meshlm's scalar dequantization of ggml types against gguf-py's
 * gguf.quants.dequantize (tests/data/gguf/quants/, made by
 * tests/fixtures/make_gguf_quant_fixtures.py): random blocks with zero, negative, subnormal
 * and extreme f16 scales for every type, inf/NaN/subnormal elements for F32/F16/BF16, and
 * gguf-py-quantized normal data for the 32-element types. Every output float must equal the
 * expected one bit for bit (NaNs included); the first mismatch is reported. */
#include <stdint.h>
#include <stdlib.h>

#include "format/gguf.h"
#include "format/gguf_quants.h"
#include "harness.h"
#include "tensor/qpanel.h"

#define DIR "tests/data/gguf/quants/"

typedef struct {
    const char *name; /* fixture base name */
    uint32_t type;
    uint32_t block, bytes; /* elements and bytes per block (ggml's) */
} quant_case;

static const quant_case cases[] = {
    {"f32", MLM_GGML_T_F32, 1, 4},
    {"f16", MLM_GGML_T_F16, 1, 2},
    {"bf16", MLM_GGML_T_BF16, 1, 2},
    {"q8_0", MLM_GGML_T_Q8_0, 32, 34},
    {"q4_0", MLM_GGML_T_Q4_0, 32, 18},
    {"q4_1", MLM_GGML_T_Q4_1, 32, 20},
    {"q5_0", MLM_GGML_T_Q5_0, 32, 22},
    {"q5_1", MLM_GGML_T_Q5_1, 32, 24},
    {"q2_k", MLM_GGML_T_Q2_K, 256, 84},
    {"q3_k", MLM_GGML_T_Q3_K, 256, 110},
    {"q4_k", MLM_GGML_T_Q4_K, 256, 144},
    {"q5_k", MLM_GGML_T_Q5_K, 256, 176},
    {"q6_k", MLM_GGML_T_Q6_K, 256, 210},
    {"iq4_nl", MLM_GGML_T_IQ4_NL, 32, 18},
    {"iq4_xs", MLM_GGML_T_IQ4_XS, 256, 136},
    {"q8_0_normal", MLM_GGML_T_Q8_0, 32, 34},
    {"q4_0_normal", MLM_GGML_T_Q4_0, 32, 18},
    {"q4_1_normal", MLM_GGML_T_Q4_1, 32, 20},
    {"q5_0_normal", MLM_GGML_T_Q5_0, 32, 22},
    {"q5_1_normal", MLM_GGML_T_Q5_1, 32, 24},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Compares N dequantized floats GOT with the little-endian expected floats WANT bit for bit;
 * reports the first mismatch and the count. */
static void compare(const quant_case *c, size_t shift, const float *got, const char *want,
                    int64_t n) {
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        uint32_t g, w = le32((const unsigned char *)want + 4 * i);
        memcpy(&g, &got[i], 4);
        if (g != w && bad++ == 0) first = i;
    }
    if (!bad) return;
    uint32_t g, w = le32((const unsigned char *)want + 4 * first);
    float wf;
    memcpy(&g, &got[first], 4);
    memcpy(&wf, &w, 4);
    CHECKF(bad == 0,
           "%s (%s, source offset %zu): %lld of %lld differ, first element %lld (block %lld): "
           "meshlm 0x%08x (%.9g), gguf-py 0x%08x (%.9g)",
           c->name, mlm_ggml_type_name(c->type), shift, (long long)bad, (long long)n,
           (long long)first, (long long)(first / c->block), g, (double)got[first], w, (double)wf);
}

/* C's fixture: its raw blocks (*RAW, *N_RAW bytes) and gguf-py's floats (*WANT, *N_WANT
 * bytes), owned by the caller; both NULL, after a failed check, when a file is missing. */
static void read_case(const quant_case *c, char **raw, size_t *n_raw, char **want,
                      size_t *n_want) {
    char path[256];
    snprintf(path, sizeof path, DIR "%s.bin", c->name);
    *raw = harness_read_file(path, n_raw);
    snprintf(path, sizeof path, DIR "%s.f32", c->name);
    *want = harness_read_file(path, n_want);
    CHECKF(*raw && *want, "%s: fixture missing (run tests/fixtures/make_gguf_quant_fixtures.py)",
           c->name);
    if (!*raw || !*want) free(*raw), free(*want), *raw = *want = NULL;
}

/* Dequantizes C's fixture and compares it with the expected floats. The source is copied to
 * SHIFT bytes past a malloc'd address, so that a misaligned tensor is tried too (the
 * dequantizer must not assume any alignment). */
static void check_case(const quant_case *c, size_t shift) {
    size_t n_raw = 0, n_want = 0;
    char *raw, *want;
    read_case(c, &raw, &n_raw, &want, &n_want);
    int64_t n = (int64_t)(n_raw / c->bytes) * c->block;
    if (raw && want) {
        int fits = n > 0 && n_raw % c->bytes == 0 && n_want == (size_t)n * 4;
        CHECKF(fits, "%s: %zu raw bytes and %zu expected bytes are not whole blocks of %u x %u",
               c->name, n_raw, n_want, c->block, c->bytes);
        unsigned char *src = malloc(n_raw + shift);
        float *got = malloc((size_t)n * sizeof(float));
        if (fits && src && got) {
            memcpy(src + shift, raw, n_raw);
            mlm_ggml_dequantize(c->type, src + shift, n, got);
            compare(c, shift, got, want, n);
        }
        free(src);
        free(got);
    }
    free(raw);
    free(want);
}

TEST(every_type_matches_gguf_py_bit_for_bit) {
    for (int i = 0; i < N_CASES; i++)
        check_case(&cases[i], 0);
}

TEST(misaligned_source_gives_the_same_bits) {
    for (int i = 0; i < N_CASES; i++)
        check_case(&cases[i], 1);
}

/* The block geometry used above is the GGUF reader's, so a file's tensor sizes agree. */
TEST(block_sizes_agree_with_the_gguf_reader) {
    for (int i = 0; i < N_CASES; i++) {
        uint32_t be = 0, bb = 0;
        CHECK(mlm_ggml_type_block(cases[i].type, &be, &bb));
        CHECKF(be == cases[i].block && bb == cases[i].bytes, "%s: reader says %u x %u bytes",
               cases[i].name, be, bb);
        CHECK(mlm_ggml_can_dequantize(cases[i].type));
    }
}

TEST(other_types_are_refused) {
    /* Q4_2/Q4_3 (removed), Q8_1, Q8_K, IQ2_XXS .. IQ2_S but IQ4_NL/IQ4_XS, I8..F64, TQ1_0,
     * TQ2_0, MXFP4, unknown */
    static const uint32_t no[] = {4,  5,  9,  15, 16, 17, 18, 19, 21, 22,   24,
                                  25, 26, 27, 28, 29, 31, 34, 35, 39, 40, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        CHECKF(!mlm_ggml_can_dequantize(no[i]), "type %u accepted", no[i]);
}

/* The native types' panels (tensor/qpanel.h) hold the file's values unchanged: each fixture,
 * read as rows of 256 (or 32) values, repacked and decoded, gives gguf-py's floats bit for
 * bit; and so does every column cut a K chunk can make (32 columns on, or a whole super-block
 * on). */
TEST(native_panels_keep_gguf_py_values) {
    for (int i = 0; i < N_CASES; i++) {
        const quant_case *c = &cases[i];
        int kind = mlm_ggml_qkind(c->type);
        if (kind < 0) continue;
        size_t n_raw = 0, n_want = 0;
        char *raw, *want;
        read_case(c, &raw, &n_raw, &want, &n_want);
        int64_t row = 512, n_rows = (int64_t)(n_raw / c->bytes) * c->block / row; /* 512 values a row */
        for (int64_t c0 = 0; raw && want && c0 < row; c0 += c->block == 256 ? 128 : 96) {
            int64_t cols = row - c0, row_bytes = row / c->block * c->bytes;
            if (!mlm_qpanel_fits((mlm_qkind)kind, c0, cols)) continue;
            uint8_t *w = calloc(1, (size_t)mlm_qpanel_bytes((mlm_qkind)kind, n_rows, cols));
            float *got = malloc((size_t)cols * 4);
            int64_t bad = 0;
            for (int64_t r = 0; r < n_rows; r++)
                mlm_ggml_qpanel_row(c->type, raw + r * row_bytes, c0, cols, r, w);
            for (int64_t r = 0; r < n_rows; r++) {
                mlm_qpanel_decode_row((mlm_qkind)kind, w, cols, r, got);
                bad += memcmp(got, want + (r * row + c0) * 4, (size_t)cols * 4) != 0;
            }
            CHECKF(bad == 0, "%s: columns from %lld: %lld of %lld rows differ from gguf-py",
                   c->name, (long long)c0, (long long)bad, (long long)n_rows);
            free(w), free(got);
        }
        free(raw), free(want);
    }
}

int main(void) {
    RUN(every_type_matches_gguf_py_bit_for_bit);
    RUN(misaligned_source_gives_the_same_bits);
    RUN(block_sizes_agree_with_the_gguf_reader);
    RUN(other_types_are_refused);
    RUN(native_panels_keep_gguf_py_values);
    return HARNESS_END();
}
