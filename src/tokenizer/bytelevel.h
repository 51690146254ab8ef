/* tokenizer/bytelevel.h: GPT-2's bytes_to_unicode, the byte <-> character mapping that
 * byte-level BPE files (Hugging Face tokenizer.json, vocab.json/merges.txt) use to spell
 * token bytes as printable text. Bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF stand for
 * themselves; the other 68 bytes, in increasing order, become U+0100, U+0101, ... (so 0x20
 * is U+0120 'Ġ', 0x0A is U+010A 'Ċ'). Pure functions, no state. */
#ifndef MESHLM_TOKENIZER_BYTELEVEL_H
#define MESHLM_TOKENIZER_BYTELEVEL_H

#include <stddef.h>
#include <stdint.h>

/* The code point that stands for byte B. */
uint32_t mlm_bytelevel_char(unsigned char b);

/* The byte code point CP stands for, or -1 when CP is not one of the 256 characters. */
int mlm_bytelevel_byte(uint32_t cp);

/* Decodes the byte-level text S[0..N) (UTF-8) into OUT (room for N bytes: each character
 * gives one byte and takes at least one). Returns the byte count, or -1 when S is not
 * valid UTF-8 or holds a character outside the mapping; then *BAD is the offending byte
 * offset in S and *BAD_CP the code point (0 for invalid UTF-8). */
long mlm_bytelevel_decode(const char *s, size_t n, unsigned char *out, size_t *bad,
                          uint32_t *bad_cp);

#endif
