/* tools/server/pytext.h: text as Python writes it, for prompts that must equal a Jinja
 * template's rendering byte for byte (toolcall.c): a growing string, json.dumps with its
 * separators, escapes and float repr (srv_json_dumps is in toolcall.h), and str.strip's
 * Unicode whitespace. */
#ifndef MESHLM_SERVER_PYTEXT_H
#define MESHLM_SERVER_PYTEXT_H

#include <jansson.h>
#include <stddef.h>

/* A growing string: S owned and NUL-terminated when not NULL; after a failed allocation OOM is
 * set and everything added later is dropped. Zero-initialised is empty. */
typedef struct srv_sbuf {
    char *s;
    size_t n, cap;
    int oom;
} srv_sbuf;

void srv_sb_add(srv_sbuf *b, const char *s, size_t n);
void srv_sb_str(srv_sbuf *b, const char *s);
/* The string built (malloc'd, "" when nothing was added; B is emptied), NULL when out of
 * memory. */
char *srv_sb_take(srv_sbuf *b);

/* S (N bytes) as a JSON string the way json.dumps(ensure_ascii=False) escapes it, into B. */
void srv_py_string(srv_sbuf *b, const char *s, size_t n);
/* json.dumps(V) with the default separators (", ", ": ") into B: transformers' `v | tojson`. */
void srv_tojson(srv_sbuf *b, const json_t *v);

/* The byte length of the White_Space character (str.isspace) at S (N bytes), or 0. */
size_t srv_space_len(const unsigned char *s, size_t n);
/* The first index from I on (below N) that is not whitespace. */
size_t srv_skip_space(const char *s, size_t i, size_t n);
/* The end of S[START, END) without its trailing whitespace. */
size_t srv_rstrip_end(const char *s, size_t start, size_t end);
/* S trimmed (Jinja's trim, Python's str.strip) into B. */
void srv_add_trimmed(srv_sbuf *b, const char *s);

#endif
