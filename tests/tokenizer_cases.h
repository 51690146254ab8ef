/* tests/tokenizer_cases.h: reading the tokenizer fixtures the tokenizer tests share: a corpus
 * of cases separated by a marker (tests/data/tokenizer/edge_cases.bin and the books' slices)
 * and .out files of expected ids, one line of " id id ..." per case. */
#ifndef MESHLM_TESTS_TOKENIZER_CASES_H
#define MESHLM_TESTS_TOKENIZER_CASES_H

#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "meshlm.h"

typedef struct cases {
    char *buf;   /* owned file contents */
    char **text; /* (n) borrowed from buf */
    size_t *len; /* (n) */
    int n;
} cases;

/* Splits a file of "case SEP case SEP ..." into cases. Returns 0 on success. */
static inline int read_cases(const char *path, const char *sep, cases *c) {
    memset(c, 0, sizeof *c);
    size_t n;
    c->buf = harness_read_file(path, &n);
    if (!c->buf) return -1;
    size_t sl = strlen(sep), pos = 0;
    int cap = 0;
    while (pos < n) {
        char *hit = memmem(c->buf + pos, n - pos, sep, sl);
        if (!hit) break;
        if (c->n == cap) {
            cap = cap ? 2 * cap : 64;
            c->text = realloc(c->text, (size_t)cap * sizeof *c->text);
            c->len = realloc(c->len, (size_t)cap * sizeof *c->len);
        }
        c->text[c->n] = c->buf + pos;
        c->len[c->n] = (size_t)(hit - (c->buf + pos));
        c->n++;
        pos = (size_t)(hit - c->buf) + sl;
    }
    return 0;
}

static inline void free_cases(cases *c) {
    free(c->buf);
    free(c->text);
    free(c->len);
}

/* A .out file: one line per case, " id id ...". */
typedef struct id_lines {
    mlm_tokens *line; /* (n) owned */
    int n;
} id_lines;

static inline int read_id_lines(const char *path, id_lines *out) {
    memset(out, 0, sizeof *out);
    char *buf = harness_read_file(path, NULL);
    if (!buf) return -1;
    int cap = 0;
    for (char *p = buf, *nl; (nl = strchr(p, '\n')) != NULL; p = nl + 1) {
        *nl = 0;
        if (out->n == cap) {
            cap = cap ? 2 * cap : 64;
            out->line = realloc(out->line, (size_t)cap * sizeof *out->line);
        }
        mlm_tokens *t = &out->line[out->n++];
        mlm_tokens_init(t);
        for (char *q = p, *end;; q = end) {
            long v = strtol(q, &end, 10);
            if (end == q) break;
            mlm_tokens_push(t, (int32_t)v);
        }
    }
    free(buf);
    return 0;
}

static inline void free_id_lines(id_lines *l) {
    for (int i = 0; i < l->n; i++)
        mlm_tokens_deinit(&l->line[i]);
    free(l->line);
}

#endif
