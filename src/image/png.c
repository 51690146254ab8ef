/* image/png.c: PNG decoding with libpng from a memory buffer, into 8-bit RGB as Pillow opens
 * the file and transformers' convert_to_rgb converts it.
 *
 * libpng hands us the samples as stored (only sub-byte samples unpacked to one byte each, and
 * Adam7 passes merged); the conversion is ours, so that every Pillow rule is visible here:
 *   gray 1/2/4/8 bit: scaled to 0..255 (x255, x85, x17, x1); 16 bit: clipped, v > 255 -> 255
 *     (Pillow's "I;16" -> RGB), so a 16-bit grayscale file comes out nearly white, as there;
 *   RGB, RGBA, gray+alpha at 16 bits: the high byte;
 *   palette: entries past PLTE are black, alpha from tRNS (255 past it);
 *   tRNS on gray/RGB: a pixel is transparent when its converted 8-bit value equals the tRNS
 *     value's low byte (Pillow's convert_transparent; 1-bit: 0 or 255);
 *   alpha: composited over white (mlm_image_over_white).
 * libpng's errors and ours (truncation, limits) unwind with png_longjmp to the one setjmp in
 * mlm_image_decode_png; its warnings are ignored (nothing prints). */
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "image/codec.h"

/* Everything a longjmp must release or report: heap-allocated before the setjmp, so that no
 * automatic variable changes between setjmp and longjmp. */
typedef struct png_job {
    const unsigned char *data;
    size_t size, pos;
    int truncated;   /* read_fn ran out of bytes */
    size_t want;     /* how many it wanted then */
    char msg[256];   /* libpng's error message */
    png_bytep raw;   /* owned: the whole stored image (interlaced files) */
    png_bytep *rows; /* owned: row pointers into raw */
    png_bytep row;   /* owned: one stored row (non-interlaced files) */
} png_job;

static void read_fn(png_structp png, png_bytep out, size_t n) {
    png_job *c = png_get_io_ptr(png);
    if (n > c->size - c->pos) {
        c->truncated = 1;
        c->want = n;
        png_error(png, "truncated");
    }
    memcpy(out, c->data + c->pos, n);
    c->pos += n;
}

static void error_fn(png_structp png, png_const_charp msg) {
    png_job *c = png_get_error_ptr(png);
    snprintf(c->msg, sizeof c->msg, "%s", msg ? msg : "unknown error");
    png_longjmp(png, 1);
}

static void warning_fn(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg;
}

/* What the conversion needs besides the row. */
typedef struct png_fmt {
    int ctype, depth;
    uint32_t width;
    int has_trns;
    unsigned trns[3];    /* gray/RGB tRNS as compared (low byte; 1-bit gray: 0 or 255) */
    uint8_t pal[256][4]; /* palette RGBA */
} png_fmt;

/* Sample I of a row as Pillow's 8-bit value: the high byte at 16 bits. */
static inline unsigned hi8(const png_byte *row, int depth, size_t i) {
    return depth == 16 ? row[2 * i] : row[i];
}

static void convert_row(const png_fmt *f, const png_byte *row, uint8_t *out) {
    uint32_t w = f->width;
    switch (f->ctype) {
    case PNG_COLOR_TYPE_GRAY:
        for (uint32_t x = 0; x < w; x++) {
            unsigned v;
            if (f->depth == 16)
                v = row[2 * x] ? 255 : row[2 * x + 1];
            else if (f->depth == 8)
                v = row[x];
            else if (f->depth == 4)
                v = row[x] * 17u;
            else if (f->depth == 2)
                v = row[x] * 85u;
            else
                v = row[x] ? 255 : 0;
            if (f->has_trns && v == f->trns[0]) v = 255; /* alpha 0 over white */
            out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = (uint8_t)v;
        }
        break;
    case PNG_COLOR_TYPE_RGB:
        for (uint32_t x = 0; x < w; x++) {
            unsigned r = hi8(row, f->depth, 3 * (size_t)x),
                     g = hi8(row, f->depth, 3 * (size_t)x + 1),
                     b = hi8(row, f->depth, 3 * (size_t)x + 2);
            if (f->has_trns && r == f->trns[0] && g == f->trns[1] && b == f->trns[2])
                r = g = b = 255;
            out[3 * x] = (uint8_t)r;
            out[3 * x + 1] = (uint8_t)g;
            out[3 * x + 2] = (uint8_t)b;
        }
        break;
    case PNG_COLOR_TYPE_PALETTE:
        for (uint32_t x = 0; x < w; x++) {
            const uint8_t *e = f->pal[row[x]];
            for (int k = 0; k < 3; k++)
                out[3 * x + k] = mlm_image_over_white(e[k], e[3]);
        }
        break;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
        for (uint32_t x = 0; x < w; x++) {
            uint8_t v = mlm_image_over_white(hi8(row, f->depth, 2 * (size_t)x),
                                             hi8(row, f->depth, 2 * (size_t)x + 1));
            out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = v;
        }
        break;
    default: /* PNG_COLOR_TYPE_RGB_ALPHA */
        for (uint32_t x = 0; x < w; x++) {
            unsigned a = hi8(row, f->depth, 4 * (size_t)x + 3);
            for (int k = 0; k < 3; k++)
                out[3 * x + k] = mlm_image_over_white(hi8(row, f->depth, 4 * (size_t)x + k), a);
        }
        break;
    }
}

static void read_format(png_structp png, png_infop info, png_fmt *f) {
    png_uint_32 w, h;
    int depth, ctype, interlace;
    png_get_IHDR(png, info, &w, &h, &depth, &ctype, &interlace, NULL, NULL);
    memset(f, 0, sizeof *f);
    f->ctype = ctype;
    f->depth = depth;
    f->width = w;
    for (int i = 0; i < 256; i++)
        f->pal[i][3] = 255; /* black, opaque past PLTE */
    if (ctype == PNG_COLOR_TYPE_PALETTE) {
        png_colorp plte = NULL;
        int n_plte = 0;
        if (png_get_PLTE(png, info, &plte, &n_plte) != 0 && plte) {
            for (int i = 0; i < n_plte && i < 256; i++) {
                f->pal[i][0] = plte[i].red;
                f->pal[i][1] = plte[i].green;
                f->pal[i][2] = plte[i].blue;
            }
        }
    }
    png_bytep alpha = NULL;
    int n_trns = 0;
    png_color_16p color = NULL;
    if (png_get_tRNS(png, info, &alpha, &n_trns, &color) == 0) return;
    if (ctype == PNG_COLOR_TYPE_PALETTE) {
        for (int i = 0; alpha && i < n_trns && i < 256; i++)
            f->pal[i][3] = alpha[i];
    } else if (color && (ctype == PNG_COLOR_TYPE_GRAY || ctype == PNG_COLOR_TYPE_RGB)) {
        f->has_trns = 1;
        if (ctype == PNG_COLOR_TYPE_GRAY) {
            f->trns[0] = depth == 1 ? (color->gray ? 255u : 0u) : (color->gray & 0xffu);
        } else {
            f->trns[0] = color->red & 0xffu;
            f->trns[1] = color->green & 0xffu;
            f->trns[2] = color->blue & 0xffu;
        }
    }
}

static mlm_status unwound(const png_job *j, const char *name, mlm_error *err) {
    if (j->truncated)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: PNG: truncated file: needed %zu more bytes at offset %zu of %zu",
                             name, j->want, j->pos, j->size);
    return mlm_error_set(err, MLM_ERR_FORMAT, "%s: PNG: corrupt data: %s", name, j->msg);
}

/* The decoding proper; libpng's errors longjmp out of it to mlm_image_decode_png. Returns a
 * status for the errors that are ours (limits, memory). */
static mlm_status decode(png_structp png, png_infop info, png_job *j, png_fmt *fmt,
                         const char *name, int64_t max_pixels, mlm_rgb_image *out, mlm_error *err) {
    png_set_read_fn(png, j, read_fn);
    /* We check the pixel count ourselves, with our own message, before allocating. */
    png_set_user_limits(png, PNG_UINT_31_MAX, PNG_UINT_31_MAX);
    png_read_info(png, info);
    read_format(png, info, fmt);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    int interlaced = png_get_interlace_type(png, info) != PNG_INTERLACE_NONE;
    mlm_status st = mlm_image_alloc_checked(name, "PNG", w, h, max_pixels, out, err);
    if (st != MLM_OK) return st;
    if (fmt->depth < 8) png_set_packing(png);
    (void)png_set_interlace_handling(png);
    png_read_update_info(png, info);
    size_t rowbytes = png_get_rowbytes(png, info);
    if (rowbytes == 0 || rowbytes > SIZE_MAX / h)
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: PNG: bad row size %zu", name, rowbytes);
    if (interlaced) {
        /* Adam7 needs the whole stored image before any row is final. */
        j->raw = malloc(rowbytes * h);
        j->rows = malloc(h * sizeof *j->rows);
        if (!j->raw || !j->rows)
            return mlm_error_set(err, MLM_ERR_NOMEM, "%s: PNG: out of memory for %zu bytes", name,
                                 rowbytes * h);
        for (png_uint_32 y = 0; y < h; y++)
            j->rows[y] = j->raw + y * rowbytes;
        png_read_image(png, j->rows);
        for (png_uint_32 y = 0; y < h; y++)
            convert_row(fmt, j->rows[y], out->rgb + (size_t)y * w * 3);
    } else {
        if (!(j->row = malloc(rowbytes)))
            return mlm_error_set(err, MLM_ERR_NOMEM, "%s: PNG: out of memory", name);
        for (png_uint_32 y = 0; y < h; y++) {
            png_read_row(png, j->row, NULL);
            convert_row(fmt, j->row, out->rgb + (size_t)y * w * 3);
        }
    }
    /* The rest of the file: the end of the compressed stream (its checksum) and IEND. */
    png_read_end(png, NULL);
    return MLM_OK;
}

mlm_status mlm_image_decode_png(const char *name, const unsigned char *data, size_t size,
                                int64_t max_pixels, mlm_rgb_image *out, mlm_error *err) {
    png_job *j = calloc(1, sizeof *j);
    png_fmt *fmt = malloc(sizeof *fmt);
    png_structp png = NULL;
    png_infop info = NULL;
    mlm_status st = MLM_ERR_NOMEM;
    if (j && fmt) png = png_create_read_struct(PNG_LIBPNG_VER_STRING, j, error_fn, warning_fn);
    if (png) info = png_create_info_struct(png);
    if (!info) {
        st = mlm_error_set(err, MLM_ERR_NOMEM, "%s: PNG: cannot create a decoder", name);
    } else {
        j->data = data;
        j->size = size;
        /* j, fmt, png, info, out and the arguments do not change after this point. */
        if (setjmp(png_jmpbuf(png)) == 0)
            st = decode(png, info, j, fmt, name, max_pixels, out, err);
        else
            st = unwound(j, name, err);
    }
    if (png) png_destroy_read_struct(&png, info ? &info : NULL, NULL);
    if (j) {
        free(j->raw);
        free(j->rows);
        free(j->row);
    }
    free(j);
    free(fmt);
    if (st != MLM_OK) mlm_image_deinit(out);
    return st;
}
