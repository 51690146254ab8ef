/* tokenizer/bytelevel.c: GPT-2 bytes_to_unicode and its inverse (see bytelevel.h). */
#include "tokenizer/bytelevel.h"

#include "tokenizer/utf8.h"

/* Bytes that stand for themselves. */
static int printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t mlm_bytelevel_char(unsigned char b) {
    if (printable(b)) return b;
    /* Index among the 68 remapped bytes: 0x00-0x20 (33), 0x7F-0xA0 (34), 0xAD (1). */
    if (b <= 0x20) return 0x100u + b;
    if (b <= 0xA0) return 0x100u + 33 + (b - 0x7Fu);
    return 0x100u + 67; /* 0xAD */
}

int mlm_bytelevel_byte(uint32_t cp) {
    if (cp < 0x100) return printable(cp) ? (int)cp : -1;
    uint32_t k = cp - 0x100;
    if (k < 33) return (int)k;
    if (k < 67) return (int)(0x7F + (k - 33));
    if (k == 67) return 0xAD;
    return -1;
}

long mlm_bytelevel_decode(const char *s, size_t n, unsigned char *out, size_t *bad,
                          uint32_t *bad_cp) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    long o = 0;
    while (i < n) {
        size_t used;
        if (mlm_utf8_next(p + i, n - i, &used) != MLM_UTF8_CHAR) {
            *bad = i;
            *bad_cp = 0;
            return -1;
        }
        uint32_t cp = mlm_utf8_cp(p + i, used);
        int b = mlm_bytelevel_byte(cp);
        if (b < 0) {
            *bad = i;
            *bad_cp = cp;
            return -1;
        }
        out[o++] = (unsigned char)b;
        i += used;
    }
    return o;
}
