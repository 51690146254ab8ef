/* tests/unit/test_bfp.c: BFP8/BFP4 encode/decode against an independent Python
 * implementation of the Tenstorrent spec (tests/data/bfp/cases.json, made by
 * tests/fixtures/make_bfp_fixtures.py): random, wide-range, zero, negative-zero, subnormal,
 * tie-rounding, saturating, equal-exponent and infinite blocks; codes and decoded values
 * bit-exact; packed rows round-trip through the stored layout. */
#include <jansson.h>
#include <stdlib.h>

#include "harness.h"
#include "tensor/bfp.h"

TEST(blocks_match_python_reference) {
    json_error_t jerr;
    json_t *j = json_load_file("tests/data/bfp/cases.json", 0, &jerr);
    CHECK(j != NULL);
    if (!j) return;
    size_t ci;
    json_t *c;
    int n_cases = 0;
    json_array_foreach(json_object_get(j, "cases"), ci, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        float x[16];
        for (int i = 0; i < 16; i++) {
            uint32_t u = (uint32_t)json_integer_value(
                json_array_get(json_object_get(c, "input"), (size_t)i));
            memcpy(&x[i], &u, 4);
        }
        for (int bits = 8; bits >= 4; bits -= 4) {
            json_t *want = json_object_get(c, bits == 8 ? "bfp8" : "bfp4");
            uint8_t exp, codes[16];
            mlm_bfp_encode_block(x, bits, &exp, codes);
            CHECKF(exp == json_integer_value(json_object_get(want, "exp")), "%s bfp%d: exponent %u",
                   name, bits, exp);
            for (int i = 0; i < 16; i++) {
                long long wc =
                    json_integer_value(json_array_get(json_object_get(want, "codes"), (size_t)i));
                uint32_t wd = (uint32_t)json_integer_value(
                    json_array_get(json_object_get(want, "decoded"), (size_t)i));
                float dec = mlm_bfp_decode(exp, codes[i], bits);
                uint32_t du;
                memcpy(&du, &dec, 4);
                CHECKF(codes[i] == wc, "%s bfp%d [%d]: code %u, want %lld", name, bits, i, codes[i],
                       wc);
                CHECKF(du == wd, "%s bfp%d [%d]: decoded 0x%08x, want 0x%08x", name, bits, i, du,
                       wd);
            }
            /* the packed row layout round-trips to the same decoded values */
            uint8_t exps[1], packed[16];
            float back[16];
            mlm_bfp_pack_row(x, 16, bits, exps, packed);
            mlm_bfp_unpack_row(exps, packed, 16, bits, back);
            for (int i = 0; i < 16; i++) {
                float d = mlm_bfp_decode(exp, codes[i], bits);
                CHECK(!memcmp(&back[i], &d, 4));
            }
        }
        n_cases++;
    }
    CHECK(n_cases >= 60);
    json_decref(j);
}

/* The kernels' row layout (groups of 64, nibble-split BFP4) holds the same values: all the
 * fixture's blocks in one row decode to exactly the fixture's decoded values. */
TEST(kernel_rows_hold_the_same_values) {
    json_error_t jerr;
    json_t *j = json_load_file("tests/data/bfp/cases.json", 0, &jerr);
    CHECK(j != NULL);
    if (!j) return;
    json_t *cases = json_object_get(j, "cases");
    int64_t cols = (int64_t)json_array_size(cases) * 16;
    float *x = malloc((size_t)cols * 4), *back = malloc((size_t)cols * 4);
    uint32_t *want = malloc((size_t)cols * 4);
    uint8_t *row = malloc((size_t)mlm_bfp_row_bytes(cols, 8));
    for (int bits = 8; bits >= 4; bits -= 4) {
        for (int64_t k = 0; k < cols; k++) {
            json_t *c = json_array_get(cases, (size_t)(k / 16));
            uint32_t u = (uint32_t)json_integer_value(
                json_array_get(json_object_get(c, "input"), (size_t)(k % 16)));
            memcpy(&x[k], &u, 4);
            want[k] = (uint32_t)json_integer_value(json_array_get(
                json_object_get(json_object_get(c, bits == 8 ? "bfp8" : "bfp4"), "decoded"),
                (size_t)(k % 16)));
        }
        mlm_bfp_encode_row(x, cols, bits, row);
        mlm_bfp_decode_row(row, cols, bits, back);
        int bad = 0;
        for (int64_t k = 0; k < cols; k++) bad += memcmp(&back[k], &want[k], 4) != 0;
        CHECKF(bad == 0, "bfp%d: %d of %lld values differ from the fixture", bits, bad,
               (long long)cols);
        CHECK(mlm_bfp_row_bytes(cols, bits) == (cols + 63) / 64 * (bits == 8 ? 68 : 36));
    }
    free(x), free(back), free(want), free(row);
    json_decref(j);
}

int main(void) {
    RUN(blocks_match_python_reference);
    RUN(kernel_rows_hold_the_same_values);
    return HARNESS_END();
}
