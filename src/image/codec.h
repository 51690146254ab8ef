/* image/codec.h: what the PNG and JPEG decoders share with image/decode.c. Internal to
 * src/image/. Each decoder fills an mlm_rgb_image (pixels owned by it) or returns an error whose
 * message starts with NAME; on failure nothing stays allocated. */
#ifndef MESHLM_IMAGE_CODEC_H
#define MESHLM_IMAGE_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "image/image.h"

mlm_status mlm_image_decode_png(const char *name, const unsigned char *data, size_t size,
                                int64_t max_pixels, mlm_rgb_image *out, mlm_error *err);
mlm_status mlm_image_decode_jpeg(const char *name, const unsigned char *data, size_t size,
                                 int64_t max_pixels, mlm_rgb_image *out, mlm_error *err);

/* Checks a header's WIDTH x HEIGHT (as read, possibly huge) against MAX_PIXELS and allocates
 * the RGB buffer of OUT. FORMAT for a zero side, UNSUPPORTED over the limit (the message
 * names both), NOMEM. WHAT is "PNG" or "JPEG". */
mlm_status mlm_image_alloc_checked(const char *name, const char *what, uint64_t width,
                                   uint64_t height, int64_t max_pixels, mlm_rgb_image *out,
                                   mlm_error *err);

/* One channel C with alpha A composited over opaque white, as Pillow's
 * Image.alpha_composite(white, im) computes it (AlphaComposite.c: 7 extra bits of precision,
 * rounded divisions by 255). */
static inline uint8_t mlm_image_over_white(unsigned c, unsigned a) {
    if (a == 0) return 255;
    const unsigned precision = 7, dst_a = 255, dst_c = 255;
    unsigned blend = dst_a * (255 - a);
    unsigned outa255 = a * 255 + blend;
    unsigned coef1 = a * 255 * 255 * (1u << precision) / outa255;
    unsigned coef2 = 255 * (1u << precision) - coef1;
    unsigned tmp = c * coef1 + dst_c * coef2 + (0x80u << precision);
    return (uint8_t)(((tmp >> 8) + tmp) >> 8 >> precision);
}

#endif
