/* image/decode.c: format sniffing, dispatch to the PNG and JPEG decoders, decoding from a
 * file, the pixel limit. The decoders themselves are image/png.c and image/jpeg.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/mapfile.h"
#include "image/codec.h"
#include "image/image.h"

static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

mlm_image_format mlm_image_sniff(const void *data, size_t size) {
    const unsigned char *p = data;
    if (size >= 8 && memcmp(p, png_sig, 8) == 0) return MLM_IMAGE_FORMAT_PNG;
    if (size >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff) return MLM_IMAGE_FORMAT_JPEG;
    return MLM_IMAGE_FORMAT_UNKNOWN;
}

/* Names a format we recognise but do not decode, for the message; NULL when unrecognised. */
static const char *known_other(const unsigned char *p, size_t n) {
    if (n >= 6 && (memcmp(p, "GIF87a", 6) == 0 || memcmp(p, "GIF89a", 6) == 0)) return "GIF";
    if (n >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0) return "WebP";
    if (n >= 2 && memcmp(p, "BM", 2) == 0) return "BMP";
    if (n >= 4 && (memcmp(p, "II*\0", 4) == 0 || memcmp(p, "MM\0*", 4) == 0)) return "TIFF";
    if (n >= 12 && memcmp(p + 4, "ftyp", 4) == 0) return "HEIF/AVIF (ISO media)";
    if (n >= 4 && memcmp(p, "\0\0\1\0", 4) == 0) return "ICO";
    if (n >= 12 && memcmp(p, "\0\0\0\x0cjP  ", 8) == 0) return "JPEG 2000";
    if (n >= 2 && p[0] == 0xff && p[1] == 0x0a) return "JPEG XL";
    if (n >= 8 && memcmp(p, png_sig, 4) == 0) return "a damaged PNG signature";
    return NULL;
}

mlm_status mlm_image_alloc_checked(const char *name, const char *what, uint64_t width,
                                   uint64_t height, int64_t max_pixels, mlm_rgb_image *out,
                                   mlm_error *err) {
    if (max_pixels <= 0) max_pixels = MLM_IMAGE_MAX_PIXELS_DEFAULT;
    if (width == 0 || height == 0)
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: %s: header says %llu x %llu pixels", name,
                             what, (unsigned long long)width, (unsigned long long)height);
    /* Both sides are below 2^32 in either format, so the product fits in 64 bits. */
    if (width > (uint64_t)max_pixels || height > (uint64_t)max_pixels ||
        width * height > (uint64_t)max_pixels)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                             "%s: %s: %llu x %llu = %llu pixels exceed the limit of %lld pixels "
                             "(max_pixels)",
                             name, what, (unsigned long long)width, (unsigned long long)height,
                             (unsigned long long)(width * height), (long long)max_pixels);
    if (width > INT32_MAX || height > INT32_MAX)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED, "%s: %s: %llu x %llu: a side over 2^31",
                             name, what, (unsigned long long)width, (unsigned long long)height);
    size_t bytes = (size_t)(width * height) * 3;
    out->rgb = malloc(bytes);
    if (!out->rgb)
        return mlm_error_set(err, MLM_ERR_NOMEM, "%s: %s: out of memory for %zu bytes of pixels",
                             name, what, bytes);
    out->width = (int32_t)width;
    out->height = (int32_t)height;
    return MLM_OK;
}

mlm_status mlm_image_decode(const char *name, const void *data, size_t size, int64_t max_pixels,
                            mlm_rgb_image *out, mlm_error *err) {
    memset(out, 0, sizeof *out);
    if (!name) name = "image";
    if (!data || size == 0)
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: empty (0 bytes): not an image", name);
    const unsigned char *p = data;
    mlm_status st;
    switch (mlm_image_sniff(data, size)) {
    case MLM_IMAGE_FORMAT_PNG:
        st = mlm_image_decode_png(name, p, size, max_pixels, out, err);
        break;
    case MLM_IMAGE_FORMAT_JPEG:
        st = mlm_image_decode_jpeg(name, p, size, max_pixels, out, err);
        break;
    default: {
        char hex[3 * 8 + 1] = {0};
        size_t n = size < 8 ? size : 8, at = 0;
        for (size_t i = 0; i < n; i++)
            at += (size_t)snprintf(hex + at, sizeof hex - at, i ? " %02x" : "%02x", p[i]);
        const char *other = known_other(p, size);
        if (other)
            return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                                 "%s: unsupported image format (first bytes %s: %s); PNG and "
                                 "JPEG are supported",
                                 name, hex, other);
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: unknown image format (%zu bytes, first bytes %s): neither a "
                             "PNG nor a JPEG signature",
                             name, size, hex);
    }
    }
    if (st != MLM_OK) mlm_image_deinit(out);
    return st;
}

mlm_status mlm_image_load(const char *path, int64_t max_pixels, mlm_rgb_image *out,
                          mlm_error *err) {
    memset(out, 0, sizeof *out);
    mlm_mapfile f;
    mlm_status st = mlm_mapfile_open(&f, path, err);
    if (st != MLM_OK) return st;
    st = mlm_image_decode(path, f.data, f.size, max_pixels, out, err);
    mlm_mapfile_close(&f);
    return st;
}

void mlm_image_deinit(mlm_rgb_image *img) {
    if (!img) return;
    free(img->rgb);
    memset(img, 0, sizeof *img);
}
