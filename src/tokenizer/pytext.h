/* tokenizer/pytext.h: text as Python writes it, for prompts that must equal a Jinja
 * template's rendering byte for byte (tools.c): a growing string, json.dumps with its
 * separators, escapes and float repr, and str.strip's Unicode whitespace. */
#ifndef MESHLM_TOKENIZER_PYTEXT_H
#define MESHLM_TOKENIZER_PYTEXT_H

#include <jansson.h>
#include <stddef.h>

/* A growing string: S owned and NUL-terminated when not NULL; after a failed allocation OOM is
 * set and everything added later is dropped. Zero-initialised is empty. */
typedef struct mlm_sbuf {
    char *s;
    size_t n, cap;
    int oom;
} mlm_sbuf;

void mlm_sb_add(mlm_sbuf *b, const char *s, size_t n);
void mlm_sb_str(mlm_sbuf *b, const char *s);
/* The string built (malloc'd, "" when nothing was added; B is emptied), NULL when out of
 * memory. */
char *mlm_sb_take(mlm_sbuf *b);

/* S (N bytes) as a JSON string the way json.dumps(ensure_ascii=False) escapes it, into B. */
void mlm_py_string(mlm_sbuf *b, const char *s, size_t n);
/* V as Python's json.dumps(v, ensure_ascii=False, indent=INDENT, separators=(ITEM_SEP,
 * KEY_SEP)) writes it, a malloc'd string (NULL when out of memory or V is NULL): INDENT < 0
 * is None (all on one line), else a newline and INDENT spaces per level; key order as V
 * holds it; strings with \" \\ \n \r \t \b \f escaped, other control characters as \u00xx,
 * everything else (non-ASCII included) as it is; integers as they are; reals as Python's
 * repr (the shortest text that reads back, "1.0", "1e+16", "1.5e-07"); true, false, null.
 * transformers' tojson is this with separators (", ", ": "), or (",", ": ") with an indent. */
char *mlm_py_dumps(const json_t *v, int indent, const char *item_sep, const char *key_sep);

/* json.dumps(V) with the default separators (", ", ": ") into B: transformers' `v | tojson`. */
void mlm_py_tojson(mlm_sbuf *b, const json_t *v);

/* The byte length of the White_Space character (str.isspace) at S (N bytes), or 0. */
size_t mlm_py_space_len(const unsigned char *s, size_t n);
/* The first index from I on (below N) that is not whitespace. */
size_t mlm_py_skip_space(const char *s, size_t i, size_t n);
/* The end of S[START, END) without its trailing whitespace. */
size_t mlm_py_rstrip_end(const char *s, size_t start, size_t end);
/* S trimmed (Jinja's trim, Python's str.strip) into B. */
void mlm_py_add_trimmed(mlm_sbuf *b, const char *s);

#endif
