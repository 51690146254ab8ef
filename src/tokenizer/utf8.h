/* tokenizer/utf8.h: UTF-8 validation and repair, the way Python decodes with errors="replace".
 * An invalid sequence is replaced by U+FFFD per maximal subpart (Unicode 15, section 3.9):
 * a lead byte followed by as many bytes as still form a valid prefix counts as one error;
 * every other stray byte counts as one. Used by the encoder (repair before pre-tokenizing)
 * and by the streaming detokenizer (which holds a valid prefix that runs off the end).
 * Pure functions, no allocation except mlm_utf8_repair's output. */
#ifndef MESHLM_TOKENIZER_UTF8_H
#define MESHLM_TOKENIZER_UTF8_H

#include <stddef.h>
#include <stdint.h>

#include "meshlm.h"

/* The UTF-8 encoding of U+FFFD. */
#define MLM_UTF8_REPLACEMENT "\xEF\xBF\xBD"

typedef enum mlm_utf8_step {
    MLM_UTF8_CHAR = 0, /* a whole valid character of *USED bytes */
    MLM_UTF8_INVALID,  /* a maximal invalid subpart of *USED bytes (>= 1): one U+FFFD */
    MLM_UTF8_TRUNCATED /* all N bytes are a valid but incomplete prefix (N < needed) */
} mlm_utf8_step;

/* Classifies the sequence starting at P (N >= 1 bytes available). */
mlm_utf8_step mlm_utf8_next(const unsigned char *p, size_t n, size_t *used);

/* The code point of the whole valid character P[0..USED) (as mlm_utf8_next found it). */
static inline uint32_t mlm_utf8_cp(const unsigned char *p, size_t used) {
    if (used == 1) return p[0];
    uint32_t cp = p[0] & (0x7Fu >> used);
    for (size_t k = 1; k < used; k++)
        cp = cp << 6 | (p[k] & 0x3Fu);
    return cp;
}

/* Length of the longest valid UTF-8 prefix of P[0..N) (N when the whole buffer is valid). */
size_t mlm_utf8_valid_prefix(const unsigned char *p, size_t n);

/* Writes the repaired form of P[0..N) (each invalid subpart, and a truncated tail, becoming
 * U+FFFD) into a malloc'd buffer *OUT of length *OUT_LEN (owned by the caller).
 * NOMEM on allocation failure. */
mlm_status mlm_utf8_repair(const unsigned char *p, size_t n, unsigned char **out, size_t *out_len,
                           mlm_error *err);

#endif
