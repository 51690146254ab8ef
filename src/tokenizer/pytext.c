/* tokenizer/pytext.c: text as Python writes it (pytext.h): a growing string, json.dumps as
 * transformers' templates call it (ensure_ascii=False; indent and separators as given; reals
 * as repr writes them), and str.strip's whitespace. */
#include "tokenizer/pytext.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- a growing string ----

void mlm_sb_add(mlm_sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

void mlm_sb_str(mlm_sbuf *b, const char *s) { mlm_sb_add(b, s, strlen(s)); }

/* The string built (malloc'd, "" when nothing was added), or NULL when out of memory. */
char *mlm_sb_take(mlm_sbuf *b) {
    if (!b->oom && !b->s) mlm_sb_add(b, "", 0);
    if (b->oom) {
        free(b->s);
        b->s = NULL;
    }
    char *s = b->s;
    memset(b, 0, sizeof *b);
    return s;
}

// ---- JSON as Python writes it ----

/* S (N bytes) as a JSON string the way json.dumps(ensure_ascii=False) escapes it. */
void mlm_py_string(mlm_sbuf *b, const char *s, size_t n) {
    mlm_sb_add(b, "\"", 1);
    size_t run = 0; /* bytes copied as they are, pending */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = c == '"'    ? "\\\""
                          : c == '\\' ? "\\\\"
                          : c == '\n' ? "\\n"
                          : c == '\r' ? "\\r"
                          : c == '\t' ? "\\t"
                          : c == '\b' ? "\\b"
                          : c == '\f' ? "\\f"
                                      : NULL;
        if (!esc && c >= 0x20) continue;
        mlm_sb_add(b, s + run, i - run);
        run = i + 1;
        char u[8];
        if (!esc) {
            snprintf(u, sizeof u, "\\u%04x", c);
            esc = u;
        }
        mlm_sb_str(b, esc);
    }
    mlm_sb_add(b, s + run, n - run);
    mlm_sb_add(b, "\"", 1);
}

/* X as Python's repr(float) writes it: the fewest significant digits that read back as X,
 * in positional form when the decimal exponent is in [-5, 15] (with ".0" when integral),
 * else as d[.ddd]e+XX / e-XX. */
static void py_float(char out[48], double x) {
    if (x == 0) {
        strcpy(out, signbit(x) ? "-0.0" : "0.0");
        return;
    }
    if (isnan(x) || isinf(x)) { /* jansson holds neither; Python's json writes these */
        strcpy(out, isnan(x) ? "NaN" : x < 0 ? "-Infinity" : "Infinity");
        return;
    }
    char e[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    /* e is "[-]d[.ddd]e[+-]XX": take its digits and exponent */
    char digits[24];
    int nd = 0, neg = e[0] == '-';
    const char *c = e + neg;
    for (; *c && *c != 'e'; c++)
        if (*c != '.') digits[nd++] = *c;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = 0;
    int exp10 = atoi(c + 1), decpt = exp10 + 1;
    char *o = out;
    if (neg) *o++ = '-';
    if (decpt <= -4 || decpt > 16) {
        o += sprintf(o, "%c", digits[0]);
        if (nd > 1) o += sprintf(o, ".%s", digits + 1);
        sprintf(o, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    } else if (decpt <= 0) {
        o += sprintf(o, "0.");
        for (int i = 0; i < -decpt; i++)
            *o++ = '0';
        strcpy(o, digits);
    } else if (decpt < nd) {
        memcpy(o, digits, (size_t)decpt);
        o += decpt;
        sprintf(o, ".%s", digits + decpt);
    } else {
        o += sprintf(o, "%s", digits);
        for (int i = nd; i < decpt; i++)
            *o++ = '0';
        strcpy(o, ".0");
    }
}

typedef struct dump_style {
    int indent; /* < 0: on one line */
    const char *item_sep, *key_sep;
} dump_style;

static void newline(mlm_sbuf *b, const dump_style *st, int level) {
    if (st->indent < 0) return;
    mlm_sb_add(b, "\n", 1);
    for (int i = 0; i < st->indent * level; i++)
        mlm_sb_add(b, " ", 1);
}

static void dump(mlm_sbuf *b, const json_t *v, const dump_style *st, int level) {
    char num[48];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        if (json_object_size(v) == 0) {
            mlm_sb_str(b, "{}");
            return;
        }
        mlm_sb_add(b, "{", 1);
        const char *key;
        json_t *item;
        int first = 1;
        json_object_foreach((json_t *)v, key, item) {
            if (!first) mlm_sb_str(b, st->item_sep);
            first = 0;
            newline(b, st, level + 1);
            mlm_py_string(b, key, strlen(key));
            mlm_sb_str(b, st->key_sep);
            dump(b, item, st, level + 1);
        }
        newline(b, st, level);
        mlm_sb_add(b, "}", 1);
        return;
    }
    case JSON_ARRAY: {
        if (json_array_size(v) == 0) {
            mlm_sb_str(b, "[]");
            return;
        }
        mlm_sb_add(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) mlm_sb_str(b, st->item_sep);
            newline(b, st, level + 1);
            dump(b, json_array_get(v, i), st, level + 1);
        }
        newline(b, st, level);
        mlm_sb_add(b, "]", 1);
        return;
    }
    case JSON_STRING: mlm_py_string(b, json_string_value(v), json_string_length(v)); return;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        mlm_sb_str(b, num);
        return;
    case JSON_REAL:
        py_float(num, json_real_value(v));
        mlm_sb_str(b, num);
        return;
    case JSON_TRUE: mlm_sb_str(b, "true"); return;
    case JSON_FALSE: mlm_sb_str(b, "false"); return;
    case JSON_NULL: mlm_sb_str(b, "null"); return;
    }
}

char *mlm_py_dumps(const json_t *v, int indent, const char *item_sep, const char *key_sep) {
    if (!v) return NULL;
    dump_style st = {indent, item_sep, key_sep};
    mlm_sbuf b = {0};
    dump(&b, v, &st, 0);
    return mlm_sb_take(&b);
}

/* json.dumps(v) with the default separators into B: transformers' `v | tojson`. */
void mlm_py_tojson(mlm_sbuf *b, const json_t *v) {
    char *s = mlm_py_dumps(v, -1, ", ", ": ");
    if (!s) {
        b->oom = 1;
        return;
    }
    mlm_sb_str(b, s);
    free(s);
}

// ---- Python's str.strip ----

/* The byte length of the White_Space character (str.isspace) at S (N bytes), or 0. */
size_t mlm_py_space_len(const unsigned char *s, size_t n) {
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return 1;
    if (c == 0xc2 && n >= 2 && (s[1] == 0x85 || s[1] == 0xa0)) return 2; /* U+0085, U+00A0 */
    if (n < 3) return 0;
    unsigned d = s[1], f = s[2];
    if (c == 0xe1 && d == 0x9a && f == 0x80) return 3; /* U+1680 */
    if (c == 0xe3 && d == 0x80 && f == 0x80) return 3; /* U+3000 */
    if (c == 0xe2 && d == 0x80 && (f <= 0x8a || f == 0xa8 || f == 0xa9 || f == 0xaf))
        return 3;                                      /* U+2000..200A, 2028, 2029, 202F */
    if (c == 0xe2 && d == 0x81 && f == 0x9f) return 3; /* U+205F */
    return 0;
}

size_t mlm_py_skip_space(const char *s, size_t i, size_t n) {
    size_t k;
    while (i < n && (k = mlm_py_space_len((const unsigned char *)s + i, n - i)) > 0)
        i += k;
    return i;
}

/* The end of S[START, END) without its trailing whitespace. */
size_t mlm_py_rstrip_end(const char *s, size_t start, size_t end) {
    while (end > start) {
        size_t i = end - 1;
        while (i > start && ((unsigned char)s[i] & 0xc0) == 0x80)
            i--;
        if (mlm_py_space_len((const unsigned char *)s + i, end - i) != end - i) break;
        end = i;
    }
    return end;
}

/* S trimmed (Jinja's trim) into B. */
void mlm_py_add_trimmed(mlm_sbuf *b, const char *s) {
    size_t n = strlen(s), a = mlm_py_skip_space(s, 0, n);
    mlm_sb_add(b, s + a, mlm_py_rstrip_end(s, a, n) - a);
}

