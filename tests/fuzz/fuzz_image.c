/* tests/fuzz/fuzz_image.c: libFuzzer target for image decoding (PNG with libpng, JPEG with
 * libjpeg-turbo, our error handlers and conversions) and the mllama preprocessing behind it:
 * the input is one image file. What decodes is read back whole and preprocessed: with a
 * small tile (28 pixels) for speed, and with the real 560-pixel parameters for one input in
 * eight. A pixel limit of 2^20 keeps each run cheap. */
#include <stdint.h>
#include <stdlib.h>

#include "image/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mlm_rgb_image img;
    mlm_error err;
    if (mlm_image_decode("fuzz", data, size, (int64_t)1 << 20, &img, &err) != MLM_OK) {
        if (img.rgb || img.width || img.height) abort(); /* a failure leaves the image empty */
        return 0;
    }
    size_t n = (size_t)img.width * (size_t)img.height * 3;
    for (size_t i = 0; i < n; i++)
        sink += img.rgb[i];
    mlm_mllama_image_params p = mlm_mllama_image_default_params();
    if (size % 8 != 0) p.tile_size = 28;
    mlm_mllama_pixels px;
    mlm_rgb_image rs;
    if (mlm_mllama_preprocess(&img, &p, &px, &rs, &err) == MLM_OK) {
        if (px.aspect_ratio_id < 1 || px.aspect_ratio_id > 8 || px.n_tiles < 1 || px.n_tiles > 4 ||
            rs.width > px.cols * p.tile_size || rs.height > px.rows * p.tile_size)
            abort();
        size_t n_px = (size_t)px.max_tiles * 3 * p.tile_size * p.tile_size;
        for (size_t i = 0; i < n_px; i += 97)
            sink += px.pixels[i] > 0.0f;
        sink += px.pixels[n_px - 1] == 0.0f;
        mlm_image_deinit(&rs);
        mlm_mllama_pixels_deinit(&px);
    }
    mlm_image_deinit(&img);
    return 0;
}
