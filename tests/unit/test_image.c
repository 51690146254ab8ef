/* tests/unit/test_image.c: PNG/JPEG decoding and the Llama 3.2 Vision preprocessing
 * (src/image/) against transformers' MllamaImageProcessorPil and Pillow, from the fixtures
 * of tests/fixtures/make_image_fixtures.py (tests/data/image/): per image, the decoded RGB,
 * the uint8 image after the resize and the float32 pixel_values (every value, by sha256),
 * the grid, id and mask; a table of canvas choices; a table of plain Pillow resizes in both
 * pass orders. Then the bad inputs: empty, unknown, truncated and corrupt files, a header
 * of 100000 x 100000 pixels; each must fail with a status and a message, and nothing may
 * crash or leak (make asan). */
#include <jansson.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "image/codec.h"
#include "image/image.h"
#include "meshlm.h"
#include "sha256.h"

#define DIR "tests/data/image/"

static json_t *load_expected(void) {
    json_error_t jerr;
    json_t *j = json_load_file(DIR "expected.json", 0, &jerr);
    if (!j) printf("  cannot read " DIR "expected.json: %s\n", jerr.text);
    return j;
}

static const char *jstr(const json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}
static long long jint(const json_t *o, const char *k) {
    return json_integer_value(json_object_get(o, k));
}

TEST(over_white_is_pillow) {
    /* Opaque pixels stay, transparent ones turn white, and a few hand-computed values of
       Pillow's integer alpha_composite (128 over white: 40 -> 147, 50 -> 152, 60 -> 157). */
    for (unsigned c = 0; c < 256; c++) {
        CHECK(mlm_image_over_white(c, 255) == c);
        CHECK(mlm_image_over_white(c, 0) == 255);
    }
    CHECK(mlm_image_over_white(40, 128) == 147);
    CHECK(mlm_image_over_white(50, 128) == 152);
    CHECK(mlm_image_over_white(60, 128) == 157);
}

TEST(aspect_ratios) {
    int32_t rc[16][2];
    int32_t n = mlm_mllama_aspect_ratios(4, rc, 16);
    static const int32_t want[8][2] = {{1, 1}, {1, 2}, {1, 3}, {1, 4},
                                       {2, 1}, {2, 2}, {3, 1}, {4, 1}};
    CHECK(n == 8);
    for (int i = 0; i < 8 && i < n; i++)
        CHECK(rc[i][0] == want[i][0] && rc[i][1] == want[i][1]);
    CHECK(mlm_mllama_aspect_ratios(1, rc, 16) == 1);
    CHECK(mlm_mllama_aspect_ratios(16, rc, 16) == 50); /* counts past the cap */
}

/* Digest of the floats as little-endian float32 bytes (x86 is little-endian). */
static void sha_floats(const float *v, size_t n, char hex[65]) {
    sha256_hex(v, n * sizeof *v, hex);
}

/* Checks one fixture image end to end; returns the largest |meshlm - Pillow| of the decoded
 * RGB when Pillow's decode is on disk (JPEGs), else -1. */
static int check_image(const json_t *e, double *max_rgb_diff) {
    int failed_before = harness_case_failed;
    const char *file = jstr(e, "file");
    char path[512];
    snprintf(path, sizeof path, DIR "%s", file);
    mlm_error err = {0};
    mlm_rgb_image img;
    mlm_status st = mlm_image_load(path, 0, &img, &err);
    CHECKF(st == MLM_OK, "%s: %s", file, err.msg);
    if (st != MLM_OK) return 0;
    CHECKF(img.width == jint(e, "width") && img.height == jint(e, "height"), "%s: %dx%d", file,
           img.width, img.height);
    char hex[65];
    sha256_hex(img.rgb, (size_t)img.width * img.height * 3, hex);
    int rgb_same = strcmp(hex, jstr(e, "sha256_rgb")) == 0;
    CHECKF(rgb_same, "%s: decoded RGB differs from Pillow's convert_to_rgb", file);

    /* JPEGs: Pillow's decode is stored as PNG; measure the difference pixel by pixel. */
    *max_rgb_diff = -1;
    size_t n = strlen(path);
    if (n > 4 && strcmp(path + n - 4, ".jpg") == 0) {
        char ref_path[520];
        snprintf(ref_path, sizeof ref_path, "%.*s.rgb.png", (int)(n - 4), path);
        mlm_rgb_image ref;
        if (mlm_image_load(ref_path, 0, &ref, &err) == MLM_OK) {
            int d = 0;
            if (ref.width == img.width && ref.height == img.height)
                for (size_t i = 0; i < (size_t)img.width * img.height * 3; i++) {
                    int x = abs((int)img.rgb[i] - (int)ref.rgb[i]);
                    if (x > d) d = x;
                }
            else
                d = 256;
            *max_rgb_diff = d;
            mlm_image_deinit(&ref);
        }
    }

    /* The same bytes through the memory path give the same pixels. */
    size_t len = 0;
    char *bytes = harness_read_file(path, &len);
    mlm_rgb_image mem;
    CHECK_OK(mlm_image_decode(file, bytes, len, 0, &mem, &err), &err);
    CHECK(mem.rgb && memcmp(mem.rgb, img.rgb, (size_t)img.width * img.height * 3) == 0);
    mlm_image_deinit(&mem);
    free(bytes);

    mlm_mllama_image_params p = mlm_mllama_image_default_params();
    mlm_mllama_pixels px;
    mlm_rgb_image rs;
    st = mlm_mllama_preprocess(&img, &p, &px, &rs, &err);
    CHECKF(st == MLM_OK, "%s: %s", file, err.msg);
    if (st != MLM_OK) {
        mlm_image_deinit(&img);
        return 0;
    }
    CHECKF(px.rows == jint(e, "rows") && px.cols == jint(e, "cols"), "%s: grid %dx%d", file,
           px.rows, px.cols);
    CHECKF(px.aspect_ratio_id == jint(e, "aspect_ratio_id"), "%s: id %d, want %lld", file,
           px.aspect_ratio_id, jint(e, "aspect_ratio_id"));
    CHECK(px.n_tiles == jint(e, "num_tiles"));
    const json_t *mask = json_object_get(e, "aspect_ratio_mask");
    CHECK(json_array_size(mask) == 4);
    for (int t = 0; t < 4; t++)
        CHECKF(px.aspect_ratio_mask[t] == json_integer_value(json_array_get(mask, t)),
               "%s: mask[%d]", file, t);
    CHECKF(rs.width == jint(e, "resized_width") && rs.height == jint(e, "resized_height"),
           "%s: resized %dx%d", file, rs.width, rs.height);
    sha256_hex(rs.rgb, (size_t)rs.width * rs.height * 3, hex);
    /* When the decode differs (it should not), the resize cannot match either. */
    CHECKF(strcmp(hex, jstr(e, "sha256_resized")) == 0,
           "%s: the uint8 resized image differs from the processor's", file);
    size_t n_px = (size_t)px.max_tiles * 3 * px.tile_size * px.tile_size;
    size_t n_used = (size_t)px.n_tiles * 3 * px.tile_size * px.tile_size;
    sha_floats(px.pixels, n_used, hex);
    CHECKF(strcmp(hex, jstr(e, "sha256_pixel_values")) == 0,
           "%s: pixel_values differ from the processor's", file);

    /* The empty tiles hold +0.0, as the processor's (which the script asserts). */
    size_t n_nonzero = 0;
    for (size_t i = n_used; i < n_px; i++) {
        uint32_t u;
        memcpy(&u, &px.pixels[i], sizeof u);
        n_nonzero += u != 0;
    }
    CHECKF(n_nonzero == 0, "%s: %zu values of the empty tiles are not +0.0", file, n_nonzero);
    /* Every value of the used tiles against the affine map of meshlm's uint8 canvas, in
       double: the tiling and the padding (within 1e-5). */
    const int T = px.tile_size;
    double affine[3][256];
    for (int c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++)
            affine[c][v] = (v / 255.0 - p.mean[c]) / p.std[c];
    double worst = 0;
    for (int t = 0; t < px.n_tiles; t++)
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < T; y++)
                for (int x = 0; x < T; x++) {
                    int Y = (t / px.cols) * T + y, X = (t % px.cols) * T + x;
                    int v = Y < rs.height && X < rs.width
                                ? rs.rgb[((size_t)Y * rs.width + X) * 3 + c]
                                : 0;
                    double want = affine[c][v];
                    double got = px.pixels[(((size_t)t * 3 + c) * T + y) * T + x];
                    double d = fabs(got - want);
                    if (d > worst) worst = d;
                }
    CHECKF(worst <= 1e-5, "%s: largest difference from the affine map %g", file, worst);
    /* The processor's own floats at the sampled positions. */
    const json_t *samples = json_object_get(e, "samples");
    for (size_t i = 0; i < json_array_size(samples); i++) {
        const json_t *s = json_array_get(samples, i);
        json_int_t at = json_integer_value(json_array_get(s, 0));
        double want = json_number_value(json_array_get(s, 1));
        CHECKF(at >= 0 && (size_t)at < n_px && fabs(px.pixels[at] - want) <= 1e-5,
               "%s: pixel_values[%lld] = %.9g, processor %.9g", file, (long long)at,
               at >= 0 && (size_t)at < n_px ? px.pixels[at] : 0.0, want);
    }
    mlm_image_deinit(&rs);
    mlm_mllama_pixels_deinit(&px);
    mlm_image_deinit(&img);
    return harness_case_failed == failed_before;
}

TEST(fixtures_match_mllama_image_processor) {
    json_t *j = load_expected();
    CHECK(j != NULL);
    if (!j) return;
    const json_t *images = json_object_get(j, "images");
    CHECK(json_array_size(images) >= 30);
    int n_ok = 0, n_jpeg = 0;
    double worst_jpeg = 0;
    for (size_t i = 0; i < json_array_size(images); i++) {
        double d = -1;
        n_ok += check_image(json_array_get(images, i), &d);
        if (d >= 0) {
            n_jpeg++;
            if (d > worst_jpeg) worst_jpeg = d;
        }
    }
    printf("  %d of %zu fixture images match the processor exactly (Pillow %s, transformers "
           "%s); JPEG decode vs Pillow's (libjpeg-turbo %s): largest difference %g over %d "
           "files\n",
           n_ok, json_array_size(images), jstr(json_object_get(j, "versions"), "Pillow"),
           jstr(json_object_get(j, "versions"), "transformers"),
           jstr(json_object_get(j, "versions"), "libjpeg_turbo"), worst_jpeg, n_jpeg);
    json_decref(j);
}

TEST(canvas_table) {
    json_t *j = load_expected();
    if (!j) {
        CHECK(0);
        return;
    }
    const json_t *rows = json_object_get(json_object_get(j, "canvas"), "rows");
    CHECK(json_array_size(rows) >= 100);
    mlm_mllama_image_params p = mlm_mllama_image_default_params();
    mlm_error err;
    int bad = 0;
    for (size_t i = 0; i < json_array_size(rows); i++) {
        const json_t *r = json_array_get(rows, i);
        long long w = json_integer_value(json_array_get(r, 0));
        long long h = json_integer_value(json_array_get(r, 1));
        int32_t gr, gc, id, nw, nh;
        CHECK_OK(mlm_mllama_canvas(w, h, &p, &gr, &gc, &id, &err), &err);
        mlm_mllama_fit_size(w, h, (int64_t)gc * p.tile_size, (int64_t)gr * p.tile_size, p.tile_size,
                            &nw, &nh);
        int ok = id == json_integer_value(json_array_get(r, 2)) &&
                 nw == json_integer_value(json_array_get(r, 3)) &&
                 nh == json_integer_value(json_array_get(r, 4));
        if (!ok && bad++ < 5)
            printf("  %lldx%lld: id %d, %dx%d; processor: id %lld, %lldx%lld\n", w, h, id, nw, nh,
                   json_integer_value(json_array_get(r, 2)),
                   json_integer_value(json_array_get(r, 3)),
                   json_integer_value(json_array_get(r, 4)));
    }
    CHECKF(bad == 0, "%d of %zu sizes differ", bad, json_array_size(rows));
    json_decref(j);
}

/* The resize-table source, pattern() of make_image_fixtures.py. */
static void fill_pattern(mlm_rgb_image *im, int32_t w, int32_t h) {
    im->width = w;
    im->height = h;
    im->rgb = malloc((size_t)w * h * 3);
    for (uint64_t y = 0; y < (uint64_t)h; y++)
        for (uint64_t x = 0; x < (uint64_t)w; x++)
            for (uint64_t c = 0; c < 3; c++) {
                uint64_t v = (x * 73856093u) ^ (y * 19349663u) ^ (c * 83492791u);
                v = (v * 2654435761u) & 0xffffffffu;
                uint64_t smooth = (x * 3 + y * 5 + c * 60) & 0xff;
                im->rgb[(y * w + x) * 3 + c] =
                    (uint8_t)((x / 8 + y / 8) % 2 == 0 ? v >> 24 : smooth);
            }
}

TEST(resize_table_matches_pillow) {
    json_t *j = load_expected();
    if (!j) {
        CHECK(0);
        return;
    }
    const json_t *resize = json_object_get(j, "resize");
    const json_t *cases = json_object_get(resize, "cases");
    CHECK(json_array_size(cases) >= 50);
    int bad13 = 0, bad12 = 0, n12 = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *c = json_array_get(cases, i);
        const json_t *sz = json_object_get(c, "size");
        int32_t sw = (int32_t)json_integer_value(json_array_get(sz, 0));
        int32_t sh = (int32_t)json_integer_value(json_array_get(sz, 1));
        int32_t dw = (int32_t)json_integer_value(json_array_get(sz, 2));
        int32_t dh = (int32_t)json_integer_value(json_array_get(sz, 3));
        mlm_rgb_image src, out;
        fill_pattern(&src, sw, sh);
        mlm_error err;
        char hex[65];
        CHECK_OK(mlm_image_resize_bilinear(&src, dw, dh, MLM_RESAMPLE_PILLOW13, &out, &err), &err);
        sha256_hex(out.rgb, (size_t)dw * dh * 3, hex);
        if (strcmp(hex, jstr(c, "sha256")) != 0 && bad13++ < 5)
            printf("  Pillow 13 order: %dx%d -> %dx%d differs\n", sw, sh, dw, dh);
        mlm_image_deinit(&out);
        if (json_object_get(c, "sha256_pillow12")) {
            n12++;
            CHECK_OK(
                mlm_image_resize_bilinear(&src, dw, dh, MLM_RESAMPLE_HORIZONTAL_FIRST, &out, &err),
                &err);
            sha256_hex(out.rgb, (size_t)dw * dh * 3, hex);
            if (strcmp(hex, jstr(c, "sha256_pillow12")) != 0 && bad12++ < 5)
                printf("  Pillow 12 order: %dx%d -> %dx%d differs\n", sw, sh, dw, dh);
            mlm_image_deinit(&out);
        }
        mlm_image_deinit(&src);
    }
    CHECKF(bad13 == 0, "%d of %zu resizes differ from Pillow 13", bad13, json_array_size(cases));
    CHECKF(bad12 == 0, "%d of %d resizes differ from Pillow 12", bad12, n12);
    if (n12 == 0) printf("  (no Pillow 12 digests in the fixture: horizontal-first unchecked)\n");
    json_decref(j);
}

// ---- bad inputs ----

/* Decodes LEN bytes named NAME and checks the call fails with status WANT and a message
 * that names NAME and contains NEEDLE. */
static void expect_fail(const char *name, const void *data, size_t len, int64_t max_pixels,
                        mlm_status want, const char *needle) {
    mlm_error err = {0};
    mlm_rgb_image img;
    memset(&img, 0xab, sizeof img);
    mlm_status st = mlm_image_decode(name, data, len, max_pixels, &img, &err);
    CHECKF(st == want, "%s: status %s, want %s (%s)", name, mlm_status_str(st),
           mlm_status_str(want), err.msg);
    CHECKF(strstr(err.msg, name) != NULL, "%s: message lacks the name: %s", name, err.msg);
    CHECKF(!needle || strstr(err.msg, needle) != NULL, "%s: message lacks '%s': %s", name, needle,
           err.msg);
    CHECK(img.rgb == NULL && img.width == 0 && img.height == 0);
    mlm_image_deinit(&img);
}

/* Offset of the first chunk TAG in a PNG (its length field), or 0. */
static size_t png_chunk(const unsigned char *p, size_t n, const char *tag) {
    size_t at = 8;
    while (at + 12 <= n) {
        uint32_t len = (uint32_t)p[at] << 24 | (uint32_t)p[at + 1] << 16 |
                       (uint32_t)p[at + 2] << 8 | p[at + 3];
        if (memcmp(p + at + 4, tag, 4) == 0) return at;
        at += 12 + (size_t)len;
    }
    return 0;
}

TEST(empty_and_unknown) {
    expect_fail("empty.png", "", 0, 0, MLM_ERR_FORMAT, "empty");
    expect_fail("null.png", NULL, 0, 0, MLM_ERR_FORMAT, "empty");
    expect_fail("hello.txt", "hello, world", 12, 0, MLM_ERR_FORMAT, "unknown image format");
    expect_fail("one.bin", "\x89", 1, 0, MLM_ERR_FORMAT, "unknown image format");
    expect_fail("anim.gif", "GIF89a\x01\x00\x01\x00", 10, 0, MLM_ERR_UNSUPPORTED, "GIF");
    expect_fail("x.webp", "RIFF\x10\0\0\0WEBPVP8 ", 16, 0, MLM_ERR_UNSUPPORTED, "WebP");
    expect_fail("x.bmp", "BM\x36\0\0\0\0\0", 8, 0, MLM_ERR_UNSUPPORTED, "BMP");
    expect_fail("sig.png", "\x89PNG\r\n\x1a\n", 8, 0, MLM_ERR_FORMAT, "truncated");
    expect_fail("soi.jpg", "\xff\xd8\xff", 3, 0, MLM_ERR_FORMAT, "JPEG");
    /* a missing file */
    mlm_error err = {0};
    mlm_rgb_image img;
    CHECK(mlm_image_load(DIR "no-such-file.png", 0, &img, &err) == MLM_ERR_IO);
    CHECK(strstr(err.msg, "no-such-file.png") != NULL);
    /* an empty file on disk */
    char dir[128], path[192];
    CHECK(harness_tmpdir(dir, sizeof dir, "image") == 0);
    snprintf(path, sizeof path, "%s/empty.jpg", dir);
    CHECK(harness_write_file(path, "", 0) == 0);
    CHECK(mlm_image_load(path, 0, &img, &err) == MLM_ERR_FORMAT);
    CHECKF(strstr(err.msg, "empty.jpg") && strstr(err.msg, "empty"), "%s", err.msg);
    harness_rmtree(dir);
}

TEST(truncated_png) {
    size_t len;
    unsigned char *png = (unsigned char *)harness_read_file(DIR "rgb_interlaced_41x29.png", &len);
    CHECK(png != NULL);
    if (!png) return;
    /* Every cut: inside the signature, IHDR, IDAT, before and inside IEND. */
    int n_cuts = 0;
    for (size_t cut = 1; cut < len; cut += cut < 64 ? 1 : 97) {
        char name[64];
        snprintf(name, sizeof name, "cut%zu.png", cut);
        expect_fail(name, png, cut, 0, MLM_ERR_FORMAT, cut < 8 ? NULL : "PNG");
        n_cuts++;
    }
    expect_fail("noiend.png", png, len - 12, 0, MLM_ERR_FORMAT, "truncated");
    expect_fail("halfiend.png", png, len - 6, 0, MLM_ERR_FORMAT, "truncated");
    printf("  %d truncations refused\n", n_cuts);
    free(png);
}

TEST(corrupt_png) {
    size_t len;
    unsigned char *png = (unsigned char *)harness_read_file(DIR "rgb_interlaced_41x29.png", &len);
    CHECK(png != NULL);
    if (!png) return;
    size_t idat = png_chunk(png, len, "IDAT");
    CHECK(idat > 0);
    uint32_t n = (uint32_t)png[idat] << 24 | (uint32_t)png[idat + 1] << 16 |
                 (uint32_t)png[idat + 2] << 8 | png[idat + 3];
    unsigned char *bad = malloc(len);
    /* a flipped byte in the compressed data (zlib's checks or the chunk CRC catch it) */
    memcpy(bad, png, len);
    bad[idat + 8 + n / 2] ^= 0x5a;
    expect_fail("flip.png", bad, len, 0, MLM_ERR_FORMAT, "corrupt data");
    /* a wrong CRC on IHDR */
    memcpy(bad, png, len);
    bad[8 + 8 + 13] ^= 1;
    expect_fail("crc.png", bad, len, 0, MLM_ERR_FORMAT, "CRC");
    /* garbage with a valid CRC: the zlib stream is broken */
    memcpy(bad, png, len);
    memset(bad + idat + 8 + 2, 0xff, n / 2);
    harness_put_be32(bad + idat + 8 + n, harness_crc32(bad + idat + 4, 4 + n));
    expect_fail("zlib.png", bad, len, 0, MLM_ERR_FORMAT, "corrupt data");
    /* a bad IHDR: bit depth 3 */
    memcpy(bad, png, len);
    bad[8 + 8 + 8] = 3;
    harness_put_be32(bad + 8 + 8 + 13, harness_crc32(bad + 8 + 4, 17));
    expect_fail("depth3.png", bad, len, 0, MLM_ERR_FORMAT, "corrupt data");
    /* width 0 */
    memcpy(bad, png, len);
    harness_put_be32(bad + 16, 0);
    harness_put_be32(bad + 8 + 8 + 13, harness_crc32(bad + 8 + 4, 17));
    expect_fail("width0.png", bad, len, 0, MLM_ERR_FORMAT, "PNG");
    free(bad);
    free(png);
}

TEST(huge_png_header_fails_fast) {
    /* signature + IHDR 100000 x 100000 RGB + a tiny IDAT + IEND: refused on the header. */
    unsigned char png[8 + 25 + 12 + 12] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    unsigned char *p = png + 8;
    harness_put_be32(p, 13);
    memcpy(p + 4, "IHDR", 4);
    harness_put_be32(p + 8, 100000);
    harness_put_be32(p + 12, 100000);
    p[16] = 8, p[17] = 2, p[18] = 0, p[19] = 0, p[20] = 0;
    harness_put_be32(p + 21, harness_crc32(p + 4, 17));
    p += 25;
    harness_put_be32(p, 0);
    memcpy(p + 4, "IDAT", 4);
    harness_put_be32(p + 8, harness_crc32(p + 4, 4));
    p += 12;
    harness_put_be32(p, 0);
    memcpy(p + 4, "IEND", 4);
    harness_put_be32(p + 8, harness_crc32(p + 4, 4));
    clock_t t0 = clock();
    expect_fail("huge.png", png, sizeof png, 0, MLM_ERR_UNSUPPORTED,
                "100000 x 100000 = 10000000000 pixels exceed the limit of 33554432");
    expect_fail("huge.png", png, sizeof png, 0, MLM_ERR_UNSUPPORTED, "max_pixels");
    double ms = 1000.0 * (double)(clock() - t0) / CLOCKS_PER_SEC;
    CHECKF(ms < 100, "took %.1f ms", ms);
    /* 2^31-1 on a side, and a caller's own limit */
    harness_put_be32(png + 16, 0x7fffffff);
    harness_put_be32(png + 8 + 21, harness_crc32(png + 12, 17));
    expect_fail("side.png", png, sizeof png, 0, MLM_ERR_UNSUPPORTED, "exceed the limit");
    size_t len = 0;
    char *small = harness_read_file(DIR "rgba_64x48.png", &len);
    expect_fail("rgba_64x48.png", small, len, 3071, MLM_ERR_UNSUPPORTED,
                "64 x 48 = 3072 pixels exceed the limit of 3071 pixels");
    mlm_rgb_image img;
    mlm_error err;
    CHECK_OK(mlm_image_decode("rgba_64x48.png", small, len, 3072, &img, &err), &err);
    mlm_image_deinit(&img);
    free(small);
}

/* Offset of the first JPEG marker M (0xffM), or 0. */
static size_t jpeg_marker(const unsigned char *p, size_t n, unsigned char m) {
    for (size_t i = 2; i + 1 < n; i++)
        if (p[i] == 0xff && p[i + 1] == m) return i;
    return 0;
}

TEST(bad_jpeg) {
    size_t len;
    unsigned char *jpg = (unsigned char *)harness_read_file(DIR "jpeg420_96x64.jpg", &len);
    CHECK(jpg != NULL);
    if (!jpg) return;
    int n_cuts = 0;
    for (size_t cut = 3; cut < len; cut += cut < 40 ? 1 : 61) {
        char name[64];
        snprintf(name, sizeof name, "cut%zu.jpg", cut);
        expect_fail(name, jpg, cut, 0, MLM_ERR_FORMAT, "JPEG");
        n_cuts++;
    }
    expect_fail("half.jpg", jpg, len / 2, 0, MLM_ERR_FORMAT, "truncated");
    expect_fail("noeoi.jpg", jpg, len - 2, 0, MLM_ERR_FORMAT, "truncated");
    printf("  %d truncations refused\n", n_cuts);

    unsigned char *bad = malloc(len);
    size_t sos = jpeg_marker(jpg, len, 0xda);
    size_t sof = jpeg_marker(jpg, len, 0xc0);
    CHECK(sos > 0 && sof > 0);
    /* entropy-coded data overwritten with a marker-like pattern */
    memcpy(bad, jpg, len);
    for (size_t i = sos + 40; i < sos + 240 && i + 2 < len; i += 2)
        bad[i] = 0xff, bad[i + 1] = 0xd3;
    expect_fail("entropy.jpg", bad, len, 0, MLM_ERR_FORMAT, "corrupt data");
    /* random bytes in the scan */
    memcpy(bad, jpg, len);
    uint32_t s = 12345;
    for (size_t i = sos + 30; i < len - 2; i++) {
        s = s * 1103515245u + 12345u;
        bad[i] = (unsigned char)(s >> 16);
    }
    expect_fail("noise.jpg", bad, len, 0, MLM_ERR_FORMAT, NULL);
    /* SOF with 0 components */
    memcpy(bad, jpg, len);
    bad[sof + 9] = 0;
    expect_fail("comp0.jpg", bad, len, 0, MLM_ERR_FORMAT, "JPEG");
    /* 12-bit precision */
    memcpy(bad, jpg, len);
    bad[sof + 4] = 12;
    expect_fail("bits12.jpg", bad, len, 0, MLM_ERR_UNSUPPORTED, "precision");
    /* 65000 x 65000 in the SOF: refused once the header is read, before decoding */
    memcpy(bad, jpg, len);
    bad[sof + 5] = 0xfd, bad[sof + 6] = 0xe8, bad[sof + 7] = 0xfd, bad[sof + 8] = 0xe8;
    clock_t t0 = clock();
    expect_fail("huge.jpg", bad, len, 0, MLM_ERR_UNSUPPORTED,
                "65000 x 65000 = 4225000000 pixels exceed the limit of 33554432 pixels");
    double ms = 1000.0 * (double)(clock() - t0) / CLOCKS_PER_SEC;
    CHECKF(ms < 100, "took %.1f ms", ms);
    /* not a JPEG after the SOI */
    memcpy(bad, jpg, len);
    memset(bad + 2, 0x00, 64);
    expect_fail("junk.jpg", bad, len, 0, MLM_ERR_FORMAT, "JPEG");
    free(bad);
    free(jpg);
}

TEST(preprocess_bad_args) {
    mlm_mllama_image_params p = mlm_mllama_image_default_params();
    mlm_mllama_pixels px;
    mlm_error err;
    mlm_rgb_image none = {0};
    CHECK(mlm_mllama_preprocess(&none, &p, &px, NULL, &err) == MLM_ERR_INVALID_ARG);
    CHECK(px.pixels == NULL);
    mlm_rgb_image one;
    fill_pattern(&one, 3, 2);
    p.max_tiles = 17;
    CHECK(mlm_mllama_preprocess(&one, &p, &px, NULL, &err) == MLM_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "max_tiles") != NULL);
    p = mlm_mllama_image_default_params();
    p.std[1] = 0;
    CHECK(mlm_mllama_preprocess(&one, &p, &px, NULL, &err) == MLM_ERR_INVALID_ARG);
    mlm_rgb_image out;
    CHECK(mlm_image_resize_bilinear(&one, 0, 5, MLM_RESAMPLE_PILLOW13, &out, &err) ==
          MLM_ERR_INVALID_ARG);
    CHECK(out.rgb == NULL);
    /* a 1 x 1 image: one tile, resized to 560 x 560 */
    p = mlm_mllama_image_default_params();
    mlm_rgb_image dot;
    fill_pattern(&dot, 1, 1);
    CHECK_OK(mlm_mllama_preprocess(&dot, &p, &px, NULL, &err), &err);
    CHECK(px.aspect_ratio_id == 1 && px.resized_width == 560 && px.resized_height == 560);
    mlm_mllama_pixels_deinit(&px);
    mlm_mllama_pixels_deinit(&px); /* twice is harmless */
    mlm_image_deinit(&dot);
    mlm_image_deinit(&one);
}

TEST(four_tile_speed) {
    /* A 4000 x 3000 photo-sized image to the 2 x 2 canvas (1120 x 840). Printed, not
       judged (speed is for bench/). */
    mlm_rgb_image big;
    fill_pattern(&big, 4000, 3000);
    mlm_mllama_image_params p = mlm_mllama_image_default_params();
    mlm_mllama_pixels px;
    mlm_error err;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    CHECK_OK(mlm_mllama_preprocess(&big, &p, &px, NULL, &err), &err);
    clock_gettime(CLOCK_MONOTONIC, &b);
    CHECK(px.aspect_ratio_id == 6 && px.resized_width == 1120 && px.resized_height == 840);
    printf("  4000x3000 -> 2x2 tiles (resize + normalize): %.1f ms\n",
           (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6);
    mlm_mllama_pixels_deinit(&px);
    mlm_image_deinit(&big);
}

int main(void) {
    RUN(over_white_is_pillow);
    RUN(aspect_ratios);
    RUN(fixtures_match_mllama_image_processor);
    RUN(canvas_table);
    RUN(resize_table_matches_pillow);
    RUN(empty_and_unknown);
    RUN(truncated_png);
    RUN(corrupt_png);
    RUN(huge_png_header_fails_fast);
    RUN(bad_jpeg);
    RUN(preprocess_bad_args);
    RUN(four_tile_speed);
    return HARNESS_END();
}
