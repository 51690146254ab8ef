/* image/jpeg.c: JPEG decoding with libjpeg-turbo from a memory buffer, into 8-bit RGB as
 * Pillow decodes it: libjpeg's default settings (JDCT_ISLOW, fancy upsampling, its own
 * colour-space guess for 3 components), grayscale replicated, 4 components as Adobe
 * (inverted) CMYK converted by Pillow's cmyk2rgb.
 *
 * libjpeg's default error handler exits the process; ours formats the message and longjmps
 * back to the one setjmp in mlm_image_decode_jpeg. Warnings (corrupt entropy data, premature
 * end of file, ...) are errors here: libjpeg would otherwise fill the damage with gray and
 * go on. A progress monitor stops files of more than MAX_SCANS progressive scans, a known way
 * to make a small file cost minutes. Nothing prints. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "core/error.h"
#include "image/codec.h"

#define MAX_SCANS 500

/* Heap-allocated before the setjmp: nothing automatic changes between setjmp and longjmp. */
typedef struct jpeg_job {
    struct jpeg_decompress_struct cinfo; /* first: the callbacks cast cinfo to the job */
    struct jpeg_error_mgr jerr;
    struct jpeg_progress_mgr progress;
    jmp_buf jmp;
    int created; /* jpeg_create_decompress ran */
    int warning; /* the longjmp came from a warning */
    int too_many_scans;
    int code; /* libjpeg's message code */
    char msg[JMSG_LENGTH_MAX];
    JSAMPLE *row; /* owned: one decoded row */
} jpeg_job;

static void error_exit(j_common_ptr cinfo) {
    jpeg_job *j = (jpeg_job *)cinfo;
    j->code = cinfo->err->msg_code;
    (*cinfo->err->format_message)(cinfo, j->msg);
    longjmp(j->jmp, 1);
}

static void emit_message(j_common_ptr cinfo, int level) {
    if (level >= 0) return; /* trace messages */
    jpeg_job *j = (jpeg_job *)cinfo;
    j->warning = 1;
    j->code = cinfo->err->msg_code;
    (*cinfo->err->format_message)(cinfo, j->msg);
    longjmp(j->jmp, 1);
}

static void output_message(j_common_ptr cinfo) { (void)cinfo; }

static void progress_monitor(j_common_ptr cinfo) {
    jpeg_job *j = (jpeg_job *)cinfo;
    if (j->cinfo.input_scan_number > MAX_SCANS) {
        j->too_many_scans = 1;
        longjmp(j->jmp, 1);
    }
}

static mlm_status unwound(const jpeg_job *j, const char *name, mlm_error *err) {
    if (j->too_many_scans)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                             "%s: JPEG: more than %d progressive scans (a decoding cost limit)",
                             name, MAX_SCANS);
    if (j->warning && j->code == JWRN_JPEG_EOF)
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: JPEG: truncated file (%s)", name, j->msg);
    if (j->code == JERR_OUT_OF_MEMORY)
        return mlm_error_set(err, MLM_ERR_NOMEM, "%s: JPEG: %s", name, j->msg);
    if (j->code == JERR_BAD_PRECISION)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED, "%s: JPEG: %s (8-bit samples only)", name,
                             j->msg);
    /* libjpeg's warnings say "Corrupt JPEG data: ..." themselves */
    const char *msg = j->msg, *prefix = "Corrupt JPEG data: ";
    if (strncmp(msg, prefix, strlen(prefix)) == 0) msg += strlen(prefix);
    return mlm_error_set(err, MLM_ERR_FORMAT, "%s: JPEG: corrupt data: %s", name, msg);
}

/* Pillow's MULDIV255: a * b / 255, rounded. */
static inline unsigned muldiv255(unsigned a, unsigned b) {
    unsigned t = a * b + 128;
    return ((t >> 8) + t) >> 8;
}

static void convert_row(const JSAMPLE *in, int n_comp, uint32_t w, uint8_t *out) {
    if (n_comp == 1) {
        for (uint32_t x = 0; x < w; x++)
            out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = in[x];
    } else if (n_comp == 3) {
        memcpy(out, in, (size_t)w * 3);
    } else {
        /* Adobe CMYK is stored inverted (Pillow's "CMYK;I"): C = 255 - sample, and
           255 - K = the K sample. Then cmyk2rgb: R = (255 - K) - C * (255 - K) / 255. */
        for (uint32_t x = 0; x < w; x++) {
            const JSAMPLE *p = in + 4 * (size_t)x;
            unsigned nk = p[3];
            for (int k = 0; k < 3; k++)
                out[3 * x + k] = (uint8_t)(nk - muldiv255(255u - p[k], nk));
        }
    }
}

/* The decoding proper; libjpeg's errors and warnings longjmp out of it. Returns a status for
 * the errors that are ours (limits, memory, unsupported layouts). */
static mlm_status decode(jpeg_job *j, const char *name, const unsigned char *data, size_t size,
                         int64_t max_pixels, mlm_rgb_image *out, mlm_error *err) {
    j_decompress_ptr cinfo = &j->cinfo;
    jpeg_create_decompress(cinfo);
    j->created = 1;
    j->progress.progress_monitor = progress_monitor;
    cinfo->progress = &j->progress;
    jpeg_mem_src(cinfo, data, (unsigned long)size);
    if (jpeg_read_header(cinfo, TRUE) != JPEG_HEADER_OK)
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: JPEG: tables only, no image", name);
    int n = cinfo->num_components;
    if (n != 1 && n != 3 && n != 4)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                             "%s: JPEG: %d components (1, 3 or 4 are supported)", name, n);
    mlm_status st = mlm_image_alloc_checked(name, "JPEG", cinfo->image_width, cinfo->image_height,
                                            max_pixels, out, err);
    if (st != MLM_OK) return st;
    cinfo->out_color_space = n == 1 ? JCS_GRAYSCALE : n == 3 ? JCS_RGB : JCS_CMYK;
    jpeg_start_decompress(cinfo);
    if (cinfo->output_width != (JDIMENSION)out->width ||
        cinfo->output_height != (JDIMENSION)out->height || cinfo->output_components != n)
        return mlm_error_set(err, MLM_ERR_INTERNAL,
                             "%s: JPEG: output %ux%ux%d for a %dx%dx%d image", name,
                             cinfo->output_width, cinfo->output_height, cinfo->output_components,
                             out->width, out->height, n);
    j->row = malloc((size_t)out->width * (size_t)n);
    if (!j->row) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: JPEG: out of memory", name);
    while (cinfo->output_scanline < cinfo->output_height) {
        JSAMPROW rows[1] = {j->row};
        size_t y = cinfo->output_scanline;
        if (jpeg_read_scanlines(cinfo, rows, 1) != 1)
            return mlm_error_set(err, MLM_ERR_FORMAT, "%s: JPEG: no data for row %zu", name, y);
        convert_row(j->row, n, (uint32_t)out->width, out->rgb + y * (size_t)out->width * 3);
    }
    /* Reads up to EOI: damage or truncation after the last row is caught too. */
    jpeg_finish_decompress(cinfo);
    return MLM_OK;
}

mlm_status mlm_image_decode_jpeg(const char *name, const unsigned char *data, size_t size,
                                 int64_t max_pixels, mlm_rgb_image *out, mlm_error *err) {
    if (size > (unsigned long)-1)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED, "%s: JPEG: %zu bytes is too large", name,
                             size);
    jpeg_job *j = calloc(1, sizeof *j);
    if (!j) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: JPEG: out of memory", name);
    j->cinfo.err = jpeg_std_error(&j->jerr);
    j->jerr.error_exit = error_exit;
    j->jerr.emit_message = emit_message;
    j->jerr.output_message = output_message;
    mlm_status st;
    /* j, out and the arguments do not change after this point. */
    if (setjmp(j->jmp) == 0)
        st = decode(j, name, data, size, max_pixels, out, err);
    else
        st = unwound(j, name, err);
    if (j->created) jpeg_destroy_decompress(&j->cinfo);
    free(j->row);
    free(j);
    if (st != MLM_OK) mlm_image_deinit(out);
    return st;
}
