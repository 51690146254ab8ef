/* sample/matcher.c: a document's place in its grammar (sample/grammar.h), moved on byte by
 * byte, and the token mask: the vocabulary trie walked depth first, each edge's byte fed to
 * the state, a subtree dropped as soon as no thread survives its prefix.
 *
 * A thread is a stack of frames (the DOC frame at the bottom, one frame per JSON value being
 * written above it). While walking, stacks are immutable linked lists in a chunked arena:
 * feeding a byte copies only the frames it changes, and a walk step's frames are released
 * when the walk backs out of the edge. Between calls the threads are kept flat (frames by
 * value) and deduplicated; a mask computed for a state is cached under those flat bytes, so a
 * state seen again (the middle of a free string, an object's next key) costs one lookup.
 * Limits: 16 threads (anyOf alternatives alive at once; more are dropped, so a pathological
 * schema can lose a valid continuation, never admit an invalid one) and 48 nested values. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "sample/grammar.h"

#define MAX_THREADS 16
#define MAX_DEPTH 48
#define MAX_WS 20
#define MAX_INT_DIGITS 16 /* G_INT_LIMIT's digits */
#define MAX_FRAC_DIGITS 16
#define MAX_EXP_DIGITS 3
#define CHUNK 4096
#define N_CACHE 8
#define END_OF_TEXT 256 /* the byte fed to ask whether a document may end */

enum fkind { F_DOC, F_OBJ, F_FOBJ, F_ARR, F_STR, F_NUM, F_LIT };

enum phase {
    /* DOC */ D_BEFORE, D_VALUE, D_AFTER, D_SEP,
    /* OBJ */ O_OPEN, O_KEY, O_COLON, O_VAL0, O_VALUE, O_AFTER, O_KEYQ,
    /* FOBJ */ F_OPEN, F_KEY, F_COLON, F_VAL0, F_VALUE, F_AFTER, F_KEYQ,
    /* ARR */ A_FIRST, A_VALUE, A_AFTER, A_NEXT,
    /* STR */ S_BODY, S_UTF8, S_ESC, S_HEX,
    /* NUM */ N_START, N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP,
    /* LIT */ L_BODY
};

/* One value being written. I, J, K by kind: OBJ: I property position, J the chosen property,
 * K/L the key range [K, L) while a key is written, SUB its offset; ARR: I items written, J the
 * items node; STR: I code points, J/K the next continuation byte's range; NUM: I digits of the
 * current part, J 1 for integers, and for an integer with bounds K 1 when negative and V the
 * digits' value (0 otherwise, so unbounded numbers share cached masks); LIT: [I, J) the
 * literals still matching, K bytes matched; DOC: I values written, K bytes of
 * before/after/sep matched. */
typedef struct frame {
    int32_t node;
    uint8_t kind, phase, ws, sub;
    int32_t i, j, k, l;
    int64_t v;
} frame;

typedef struct sframe {
    frame f;
    const struct sframe *up;
    int32_t depth;
} sframe;

typedef struct chunk {
    sframe s[CHUNK];
    struct chunk *next;
} chunk;

/* A set of stacks (a walk step's result). */
typedef struct threads {
    const sframe *t[MAX_THREADS];
    int n;
    int end_ok; /* END_OF_TEXT was accepted */
} threads;

typedef struct cache_entry {
    uint64_t hash;
    unsigned char *key;
    size_t n_key;
    uint32_t *mask;
    int32_t count;
} cache_entry;

struct mlm_matcher {
    const mlm_grammar *g;
    const mlm_token_trie *trie;
    /* the state: N threads of DEPTH[t] frames, bottom first */
    frame st[MAX_THREADS][MAX_DEPTH];
    int32_t depth[MAX_THREADS];
    int n;
    /* the arena: CUR chunk, USED entries of it */
    chunk *first, *cur;
    int32_t used;
    cache_entry cache[N_CACHE];
    int next_cache;
};

// ---- the arena ----

typedef struct mark {
    chunk *c;
    int32_t used;
} mark;

static mark arena_mark(const mlm_matcher *m) { return (mark){m->cur, m->used}; }
static void arena_release(mlm_matcher *m, mark k) { m->cur = k.c, m->used = k.used; }

static sframe *arena_new(mlm_matcher *m) {
    if (m->used == CHUNK) {
        if (!m->cur->next) {
            chunk *c = malloc(sizeof *c);
            if (!c) return NULL;
            c->next = NULL;
            m->cur->next = c;
        }
        m->cur = m->cur->next;
        m->used = 0;
    }
    return &m->cur->s[m->used++];
}

/* UP with F pushed on it; NULL when out of room (the byte is then refused). */
static const sframe *push(mlm_matcher *m, const sframe *up, const frame *f) {
    int32_t d = up ? up->depth + 1 : 1;
    if (d > MAX_DEPTH) return NULL;
    sframe *s = arena_new(m);
    if (!s) return NULL;
    s->f = *f;
    s->up = up;
    s->depth = d;
    return s;
}

static void emit(threads *o, const sframe *s) {
    if (s && o->n < MAX_THREADS) o->t[o->n++] = s;
}

// ---- feeding one byte ----

static int is_ws(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }
static int is_hex(int c) {
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static void feed(mlm_matcher *m, const sframe *s, int c, threads *o);

/* F (the top of S, changed) replaces S's top. */
static void emit_top(mlm_matcher *m, const sframe *s, const frame *f, threads *o) {
    emit(o, push(m, s->up, f));
}

/* Whitespace in a gap of F: counted, at most MAX_WS. */
static void gap(mlm_matcher *m, const sframe *s, frame f, threads *o) {
    if (f.ws >= MAX_WS) return;
    f.ws++;
    emit_top(m, s, &f, o);
}

/* S with its top frame told that its child value is complete. */
static const sframe *child_done(mlm_matcher *m, const sframe *s) {
    frame f = s->f;
    f.ws = 0;
    switch (f.phase) {
    case D_VALUE: f.phase = D_AFTER, f.k = 0; break;
    case O_VALUE: f.phase = O_AFTER; break;
    case F_KEY: f.phase = F_COLON; break;
    case F_VALUE: f.phase = F_AFTER; break;
    case A_VALUE: f.phase = A_AFTER, f.i++; break;
    default: return NULL;
    }
    return push(m, s->up, &f);
}

/* The value at the top of S is complete and C is its last byte. */
static void done_with(mlm_matcher *m, const sframe *s, threads *o) {
    emit(o, child_done(m, s->up));
}

/* The value at the top of S was complete before C: C goes to its parent. */
static void done_before(mlm_matcher *m, const sframe *s, int c, threads *o) {
    const sframe *p = child_done(m, s->up);
    if (p) feed(m, p, c, o);
}

/* A value of NODE starts with byte C on top of UP (whose top frame waits for it). */
static void start(mlm_matcher *m, int32_t node, const sframe *up, int c, threads *o) {
    const mlm_grammar *g = m->g;
    const gnode *n = &g->nodes[node];
    frame f = {.node = node};
    switch ((gkind)n->kind) {
    case GK_ANYOF:
        for (int32_t k = 0; k < n->n; k++) start(m, g->alts[n->a + k], up, c, o);
        return;
    case GK_ANY:
        if (c == '{') {
            f.kind = F_FOBJ, f.phase = F_OPEN;
            emit(o, push(m, up, &f));
        } else if (c == '[') {
            f.kind = F_ARR, f.phase = A_FIRST, f.j = G_NODE_ANY;
            emit(o, push(m, up, &f));
        } else if (c == '"') {
            f.kind = F_STR, f.phase = S_BODY;
            emit(o, push(m, up, &f));
        } else if (c == '-' || is_digit(c)) {
            f.kind = F_NUM, f.phase = N_START;
            const sframe *s = push(m, up, &f);
            if (s) feed(m, s, c, o);
        } else if (c == 't' || c == 'f' || c == 'n') {
            start(m, G_NODE_WORDS, up, c, o);
        }
        return;
    case GK_OBJECT:
        if (c != '{') return;
        f.kind = F_OBJ, f.phase = O_OPEN;
        emit(o, push(m, up, &f));
        return;
    case GK_FREE_OBJECT:
        if (c != '{') return;
        f.kind = F_FOBJ, f.phase = F_OPEN;
        emit(o, push(m, up, &f));
        return;
    case GK_ARRAY:
        if (c != '[') return;
        f.kind = F_ARR, f.phase = A_FIRST, f.j = n->a;
        emit(o, push(m, up, &f));
        return;
    case GK_STRING:
        if (c != '"') return;
        f.kind = F_STR, f.phase = S_BODY;
        emit(o, push(m, up, &f));
        return;
    case GK_NUMBER:
    case GK_INTEGER: {
        if (c != '-' && !is_digit(c)) return;
        f.kind = F_NUM, f.phase = N_START, f.j = n->kind == GK_INTEGER;
        const sframe *s = push(m, up, &f);
        if (s) feed(m, s, c, o);
        return;
    }
    case GK_LITERALS: {
        f.kind = F_LIT, f.phase = L_BODY, f.i = n->a, f.j = n->a + n->n, f.k = 0;
        const sframe *s = push(m, up, &f);
        if (s) feed(m, s, c, o);
        return;
    }
    }
}

/* Narrows the sorted literals [*LO, *HI) to those whose byte at OFF is C. */
static int narrow(const mlm_grammar *g, int32_t *lo, int32_t *hi, int32_t off, int c) {
    int32_t a = *lo, b = *hi;
    while (a < b && (g->lits[a].len <= (uint32_t)off ||
                     (unsigned char)g->pool[g->lits[a].off + off] != c))
        a++;
    int32_t e = a;
    while (e < b && g->lits[e].len > (uint32_t)off &&
           (unsigned char)g->pool[g->lits[e].off + off] == c)
        e++;
    *lo = a, *hi = e;
    return a < e;
}

static void feed_doc(mlm_matcher *m, const sframe *s, int c, threads *o) {
    const mlm_grammar *g = m->g;
    frame f = s->f;
    switch (f.phase) {
    case D_BEFORE:
        if ((uint32_t)f.k < g->n_before) {
            if (c != (unsigned char)g->before[f.k]) return;
            f.k++;
            emit_top(m, s, &f, o);
            return;
        }
        f.phase = D_VALUE;
        const sframe *p = push(m, s->up, &f);
        if (p) start(m, g->root, p, c, o);
        return;
    case D_AFTER:
        if ((uint32_t)f.k < g->n_after) {
            if (c != (unsigned char)g->after[f.k]) return;
            f.k++;
            emit_top(m, s, &f, o);
            return;
        }
        if (c == END_OF_TEXT) {
            if (f.i + 1 >= g->min_values) o->end_ok = 1;
            return;
        }
        if (f.i + 1 >= g->max_values) return;
        f.i++, f.k = 0;
        if (g->n_sep == 0) {
            f.phase = D_BEFORE;
            const sframe *q = push(m, s->up, &f);
            if (q) feed(m, q, c, o);
            return;
        }
        f.phase = D_SEP;
        __attribute__((fallthrough)); /* the byte is the separator's first */
    case D_SEP:
        if (c != (unsigned char)g->sep[f.k]) return;
        if ((uint32_t)++f.k == g->n_sep) f.phase = D_BEFORE, f.k = 0;
        emit_top(m, s, &f, o);
        return;
    }
}

/* A key's byte C: the range narrows; the closing quote chooses the property. */
static void key_byte(mlm_matcher *m, const sframe *s, frame f, int c, threads *o) {
    const mlm_grammar *g = m->g;
    if (!narrow(g, &f.k, &f.l, f.sub, c)) return;
    f.sub++;
    if (g->lits[f.k].len == f.sub) { /* a whole key (keys end in '"': none is a prefix) */
        f.j = g->lits[f.k].val;
        f.i = f.j - (int32_t)g->nodes[f.node].min + 1;
        f.phase = O_COLON, f.ws = 0;
    }
    emit_top(m, s, &f, o);
}

/* Opens a key at the object's position: its keyset's whole range after '"'. */
static void key_open(mlm_matcher *m, const sframe *s, frame f, int c, threads *o) {
    const gkeys *ks = &m->g->keys[m->g->nodes[f.node].a + f.i];
    if (c != '"' || ks->n == 0) return;
    f.phase = O_KEY, f.k = ks->lit, f.l = ks->lit + ks->n, f.sub = 0;
    key_byte(m, s, f, c, o);
}

static void feed_obj(mlm_matcher *m, const sframe *s, int c, threads *o) {
    const mlm_grammar *g = m->g;
    frame f = s->f;
    const gkeys *ks = &g->keys[g->nodes[f.node].a + f.i];
    switch (f.phase) {
    case O_OPEN:
    case O_AFTER:
        if (is_ws(c)) { gap(m, s, f, o); return; }
        if (c == '}' && ks->close) { done_with(m, s, o); return; }
        if (f.phase == O_OPEN) { key_open(m, s, f, c, o); return; }
        if (c == ',' && ks->n > 0) {
            f.phase = O_KEYQ, f.ws = 0;
            emit_top(m, s, &f, o);
        }
        return;
    case O_KEYQ:
        if (is_ws(c)) { gap(m, s, f, o); return; }
        { key_open(m, s, f, c, o); return; }
    case O_KEY: { key_byte(m, s, f, c, o); return; }
    case O_COLON:
        if (is_ws(c)) { gap(m, s, f, o); return; }
        if (c != ':') return;
        f.phase = O_VAL0, f.ws = 0;
        emit_top(m, s, &f, o);
        return;
    case O_VAL0: {
        if (is_ws(c)) { gap(m, s, f, o); return; }
        f.phase = O_VALUE, f.ws = 0;
        const sframe *p = push(m, s->up, &f);
        if (p) start(m, g->props[f.j].node, p, c, o);
        return;
    }
    }
}

static void feed_fobj(mlm_matcher *m, const sframe *s, int c, threads *o) {
    frame f = s->f;
    switch (f.phase) {
    case F_OPEN:
    case F_AFTER:
    case F_KEYQ:
        if (is_ws(c)) { gap(m, s, f, o); return; }
        if (c == '}' && f.phase != F_KEYQ) { done_with(m, s, o); return; }
        if (c == ',' && f.phase == F_AFTER) {
            f.phase = F_KEYQ, f.ws = 0;
            emit_top(m, s, &f, o);
            return;
        }
        if (c == '"' && f.phase != F_AFTER) {
            f.phase = F_KEY, f.ws = 0;
            const sframe *p = push(m, s->up, &f);
            frame k = {.node = G_NODE_ANY, .kind = F_STR, .phase = S_BODY};
            emit(o, p ? push(m, p, &k) : NULL);
        }
        return;
    case F_COLON:
        if (is_ws(c)) { gap(m, s, f, o); return; }
        if (c != ':') return;
        f.phase = F_VAL0, f.ws = 0;
        emit_top(m, s, &f, o);
        return;
    case F_VAL0: {
        if (is_ws(c)) { gap(m, s, f, o); return; }
        f.phase = F_VALUE, f.ws = 0;
        const sframe *p = push(m, s->up, &f);
        if (p) start(m, G_NODE_ANY, p, c, o);
        return;
    }
    }
}

static void feed_arr(mlm_matcher *m, const sframe *s, int c, threads *o) {
    const gnode *n = &m->g->nodes[s->f.node];
    int64_t lo = n->min < 0 ? 0 : n->min, hi = n->max;
    frame f = s->f;
    if (is_ws(c) && f.phase != A_VALUE) { gap(m, s, f, o); return; }
    switch (f.phase) {
    case A_FIRST:
        if (c == ']') {
            if (lo == 0) done_with(m, s, o);
            return;
        }
        if (hi == 0) return;
        __attribute__((fallthrough)); /* the first item's first byte */
    case A_NEXT: {
        f.phase = A_VALUE, f.ws = 0;
        const sframe *p = push(m, s->up, &f);
        if (p) start(m, f.j, p, c, o);
        return;
    }
    case A_AFTER:
        if (c == ']' && f.i >= lo) { done_with(m, s, o); return; }
        if (c == ',' && (hi < 0 || f.i < hi)) {
            f.phase = A_NEXT, f.ws = 0;
            emit_top(m, s, &f, o);
        }
        return;
    }
}

/* A string's byte. Lengths count code points, an escape as one. */
static void feed_str(mlm_matcher *m, const sframe *s, int c, threads *o) {
    const gnode *n = &m->g->nodes[s->f.node];
    int64_t lo = n->min < 0 ? 0 : n->min, hi = n->max;
    frame f = s->f;
    int room = hi < 0 || f.i < hi;
    switch (f.phase) {
    case S_BODY:
        if (c == '"') {
            if (f.i >= lo) done_with(m, s, o);
            return;
        }
        if (c == END_OF_TEXT || c < 0x20 || !room) return;
        if (c == '\\') {
            f.phase = S_ESC;
        } else if (c < 0x80) {
            f.i++;
        } else {
            /* UTF-8: the lead byte fixes how many continuation bytes follow, and the range of
             * the first */
            unsigned a, b;
            int need = g_utf8_lead((unsigned)c, &a, &b);
            if (!need) return;
            f.phase = S_UTF8, f.sub = (uint8_t)need, f.j = (int32_t)a, f.k = (int32_t)b;
            f.i++;
        }
        emit_top(m, s, &f, o);
        return;
    case S_UTF8:
        if (c < f.j || c > f.k) return;
        f.j = 0x80, f.k = 0xBF;
        if (--f.sub == 0) f.phase = S_BODY;
        emit_top(m, s, &f, o);
        return;
    case S_ESC:
        if (c == 'u') {
            f.phase = S_HEX, f.sub = 4;
        } else if (c != END_OF_TEXT && strchr("\"\\/bfnrt", c) && c) {
            f.phase = S_BODY, f.i++;
        } else {
            return;
        }
        emit_top(m, s, &f, o);
        return;
    case S_HEX:
        if (!is_hex(c)) return;
        if (--f.sub == 0) f.phase = S_BODY, f.i++;
        emit_top(m, s, &f, o);
        return;
    }
}

/* Whether NODE bounds its integers more tightly than 16 digits do. */
static int bounded(const gnode *n) {
    return n->kind == GK_INTEGER && (n->min > -G_INT_LIMIT || n->max < G_INT_LIMIT);
}

/* Whether [A, B] meets NODE's bounds. */
static int meets(const gnode *n, int64_t a, int64_t b) {
    return a <= n->max && b >= n->min;
}

/* Whether the integer F has begun can still end inside NODE's bounds: it is its digits'
 * value now, or that value followed by 1 to 16 - I more digits. */
static int int_reachable(const gnode *n, const frame *f) {
    if (f->phase == N_START) return 1;
    if (f->phase == N_MINUS) return meets(n, -G_INT_LIMIT, 0);
    if (f->phase == N_ZERO) return meets(n, 0, 0);
    int64_t p = f->v, scale = 1;
    for (int d = f->i; d <= MAX_INT_DIGITS; d++, p *= 10, scale *= 10) {
        int64_t a = p, b = p + scale - 1; /* magnitudes */
        if (f->k ? meets(n, -b, -a) : meets(n, a, b)) return 1;
    }
    return 0;
}

/* Whether the integer F has written is inside NODE's bounds. */
static int int_inside(const gnode *n, const frame *f) {
    int64_t x = f->phase == N_ZERO ? 0 : f->k ? -f->v : f->v;
    return meets(n, x, x);
}

/* A number's byte: -? (0 | [1-9][0-9]{0,15}) (. [0-9]{1,16})? ([eE] [+-]? [0-9]{1,3})?, no
 * fraction or exponent for integers. Any other byte ends a complete number and goes on. */
static void feed_num(mlm_matcher *m, const sframe *s, int c, threads *o) {
    frame f = s->f;
    int integer = f.j;
    const gnode *n = &m->g->nodes[f.node];
    int bound = integer && bounded(n);
    switch (f.phase) {
    case N_START:
    case N_MINUS:
        if (c == '-' && f.phase == N_START) f.phase = N_MINUS, f.k = bound;
        else if (c == '0') f.phase = N_ZERO;
        else if (is_digit(c)) f.phase = N_INT, f.i = 1, f.v = bound ? c - '0' : 0;
        else return;
        break;
    case N_ZERO:
    case N_INT:
        if (is_digit(c) && f.phase == N_INT && f.i < MAX_INT_DIGITS) {
            f.i++;
            if (bound) f.v = f.v * 10 + (c - '0');
        } else if (c == '.' && !integer) {
            f.phase = N_DOT;
        } else if ((c == 'e' || c == 'E') && !integer) {
            f.phase = N_E;
        } else {
            if (!is_digit(c) && (!bound || int_inside(n, &f))) done_before(m, s, c, o);
            return;
        }
        break;
    case N_DOT:
        if (!is_digit(c)) return;
        f.phase = N_FRAC, f.i = 1;
        break;
    case N_FRAC:
        if (is_digit(c) && f.i < MAX_FRAC_DIGITS) {
            f.i++;
        } else if (c == 'e' || c == 'E') {
            f.phase = N_E;
        } else {
            if (!is_digit(c)) done_before(m, s, c, o);
            return;
        }
        break;
    case N_E:
    case N_ESIGN:
        if ((c == '+' || c == '-') && f.phase == N_E) f.phase = N_ESIGN;
        else if (is_digit(c)) f.phase = N_EXP, f.i = 1;
        else return;
        break;
    case N_EXP:
        if (is_digit(c) && f.i < MAX_EXP_DIGITS) {
            f.i++;
            break;
        }
        if (!is_digit(c)) done_before(m, s, c, o);
        return;
    }
    if (bound && !int_reachable(n, &f)) return;
    emit_top(m, s, &f, o);
}

/* A literal's byte: the range narrows; a literal already whole may also end before C. */
static void feed_lit(mlm_matcher *m, const sframe *s, int c, threads *o) {
    const mlm_grammar *g = m->g;
    frame f = s->f;
    if (g->lits[f.i].len == (uint32_t)f.k) done_before(m, s, c, o);
    if (c == END_OF_TEXT || !narrow(g, &f.i, &f.j, f.k, c)) return;
    f.k++;
    emit_top(m, s, &f, o);
}

static void feed(mlm_matcher *m, const sframe *s, int c, threads *o) {
    switch (s->f.kind) {
    case F_DOC: feed_doc(m, s, c, o); return;
    case F_OBJ:
        if (c != END_OF_TEXT) feed_obj(m, s, c, o);
        return;
    case F_FOBJ:
        if (c != END_OF_TEXT) feed_fobj(m, s, c, o);
        return;
    case F_ARR:
        if (c != END_OF_TEXT) feed_arr(m, s, c, o);
        return;
    case F_STR: feed_str(m, s, c, o); return;
    case F_NUM: feed_num(m, s, c, o); return;
    case F_LIT: feed_lit(m, s, c, o); return;
    }
}

// ---- the kept state ----

/* The kept threads as stacks in the arena (emptied first). */
static void load(mlm_matcher *m, threads *o) {
    m->cur = m->first, m->used = 0;
    o->n = 0, o->end_ok = 0;
    for (int t = 0; t < m->n; t++) {
        const sframe *s = NULL;
        for (int32_t d = 0; d < m->depth[t]; d++) s = push(m, s, &m->st[t][d]);
        emit(o, s);
    }
}

/* Keeps the threads of O (deduplicated, bottom first). */
static void store(mlm_matcher *m, const threads *o) {
    m->n = 0;
    for (int t = 0; t < o->n; t++) {
        int32_t d = o->t[t]->depth;
        frame *dst = m->st[m->n];
        int32_t k = d;
        for (const sframe *s = o->t[t]; s; s = s->up) dst[--k] = s->f;
        int dup = 0;
        for (int u = 0; u < m->n && !dup; u++)
            dup = m->depth[u] == d && memcmp(m->st[u], dst, (size_t)d * sizeof *dst) == 0;
        if (!dup) m->depth[m->n++] = d;
    }
}

static void feed_all(mlm_matcher *m, const threads *in, int c, threads *out) {
    out->n = 0, out->end_ok = 0;
    for (int t = 0; t < in->n; t++) feed(m, in->t[t], c, out);
}

mlm_status mlm_matcher_create(const mlm_grammar *g, const mlm_token_trie *t, mlm_matcher **out,
                              mlm_error *err) {
    *out = NULL;
    mlm_matcher *m = calloc(1, sizeof *m);
    chunk *c = malloc(sizeof *c);
    if (!m || !c) {
        free(m);
        free(c);
        return mlm_error_set(err, MLM_ERR_NOMEM, "matcher: out of memory");
    }
    c->next = NULL;
    m->g = g, m->trie = t;
    m->first = m->cur = c;
    m->n = 1, m->depth[0] = 1;
    m->st[0][0] = (frame){.node = -1, .kind = F_DOC, .phase = D_BEFORE};
    *out = m;
    return MLM_OK;
}

void mlm_matcher_free(mlm_matcher *m) {
    if (!m) return;
    for (chunk *c = m->first; c;) {
        chunk *n = c->next;
        free(c);
        c = n;
    }
    for (int i = 0; i < N_CACHE; i++) {
        free(m->cache[i].key);
        free(m->cache[i].mask);
    }
    free(m);
}

int mlm_matcher_accept_bytes(mlm_matcher *m, const char *bytes, size_t len) {
    /* fed on copies, kept only when every byte was taken */
    frame (*save)[MAX_DEPTH] = malloc(sizeof m->st);
    if (!save) return 0;
    int32_t save_depth[MAX_THREADS], save_n = m->n;
    memcpy(save, m->st, sizeof m->st);
    memcpy(save_depth, m->depth, sizeof m->depth);
    int ok = 1;
    for (size_t i = 0; i < len && ok; i++) {
        threads in, out;
        load(m, &in);
        feed_all(m, &in, (unsigned char)bytes[i], &out);
        if (out.n == 0) ok = 0;
        else store(m, &out);
    }
    if (!ok) {
        memcpy(m->st, save, sizeof m->st);
        memcpy(m->depth, save_depth, sizeof m->depth);
        m->n = save_n;
    }
    free(save);
    return ok;
}

int mlm_matcher_accept_token(mlm_matcher *m, int32_t id) {
    const mlm_token_trie *t = m->trie;
    if (!t || id < 0 || id >= t->n_vocab || !t->bytes[id]) return 0;
    return mlm_matcher_accept_bytes(m, t->bytes[id], t->len[id]);
}

int mlm_matcher_can_end(const mlm_matcher *m) {
    mlm_matcher *mm = (mlm_matcher *)m; /* the arena is scratch; the state is not changed */
    threads in, out;
    load(mm, &in);
    feed_all(mm, &in, END_OF_TEXT, &out);
    return out.end_ok;
}

// ---- the mask ----

static void walk(mlm_matcher *m, const gtrie *t, int32_t node, const threads *th, uint32_t *mask,
                 int32_t *count) {
    const int32_t *next_tok = m->trie->next_tok;
    int32_t e0 = t->first[node], ne = t->count[node];
    for (int32_t e = e0; e < e0 + ne; e++) {
        mark k = arena_mark(m);
        threads out;
        feed_all(m, th, t->ebyte[e], &out);
        if (out.n) {
            int32_t child = t->eto[e];
            for (int32_t id = t->tok[child]; id >= 0; id = next_tok[id]) {
                mask[id >> 5] |= 1u << (id & 31);
                (*count)++;
            }
            walk(m, t, child, &out, mask, count);
        }
        arena_release(m, k);
    }
}

/* Inside a string (every thread's top frame in its body): the plain tokens that fit the room
 * left (the most any thread has), then a walk of the others. -1 when not inside a string. */
static int32_t string_mask(mlm_matcher *m, const threads *in, uint32_t *mask) {
    const mlm_token_trie *t = m->trie;
    int64_t room = 0;
    for (int k = 0; k < in->n; k++) {
        const frame *f = &in->t[k]->f;
        if (f->kind != F_STR || f->phase != S_BODY) return -1;
        int64_t hi = m->g->nodes[f->node].max;
        int64_t r = hi < 0 ? INT64_MAX : hi - f->i;
        if (r > room) room = r;
    }
    size_t words = ((size_t)t->n_vocab + 31) / 32;
    int32_t count = 0;
    if (room >= t->max_plain_cp) {
        memcpy(mask, t->plain, words * sizeof *mask);
        count = t->n_plain;
    } else {
        memset(mask, 0, words * sizeof *mask);
        for (int32_t id = 0; id < t->n_vocab; id++)
            if (t->plain_cp[id] >= 0 && t->plain_cp[id] <= room) {
                mask[id >> 5] |= 1u << (id & 31);
                count++;
            }
    }
    walk(m, &t->odd, 0, in, mask, &count);
    return count;
}

/* The kept state's bytes, for the cache (into BUF of CAP; returns the length). */
static size_t state_key(const mlm_matcher *m, unsigned char *buf, size_t cap) {
    size_t n = 0;
    for (int t = 0; t < m->n; t++) {
        size_t b = (size_t)m->depth[t] * sizeof(frame);
        if (n + sizeof(int32_t) + b > cap) return 0;
        memcpy(buf + n, &m->depth[t], sizeof(int32_t));
        memcpy(buf + n + sizeof(int32_t), m->st[t], b);
        n += sizeof(int32_t) + b;
    }
    return n;
}

static uint64_t fnv(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

int32_t mlm_matcher_fill_mask(mlm_matcher *m, uint32_t *mask) {
    const mlm_token_trie *t = m->trie;
    size_t words = ((size_t)t->n_vocab + 31) / 32;
    static _Thread_local unsigned char key[sizeof(frame) * MAX_DEPTH * MAX_THREADS + 64 * 4];
    size_t n_key = state_key(m, key, sizeof key);
    uint64_t h = fnv(key, n_key);
    for (int i = 0; i < N_CACHE; i++) {
        cache_entry *c = &m->cache[i];
        if (c->mask && c->hash == h && c->n_key == n_key && memcmp(c->key, key, n_key) == 0) {
            memcpy(mask, c->mask, words * sizeof *mask);
            return c->count;
        }
    }
    threads in;
    load(m, &in);
    int32_t count = string_mask(m, &in, mask);
    if (count < 0) {
        memset(mask, 0, words * sizeof *mask);
        count = 0;
        walk(m, &t->all, 0, &in, mask, &count);
    }
    /* keep it */
    cache_entry *c = &m->cache[m->next_cache];
    unsigned char *kc = realloc(c->key, n_key ? n_key : 1);
    uint32_t *mc = c->mask ? c->mask : malloc(words * sizeof *mc);
    if (kc) c->key = kc;
    if (kc && mc) {
        memcpy(kc, key, n_key);
        memcpy(mc, mask, words * sizeof *mc);
        c->mask = mc, c->n_key = n_key, c->hash = h, c->count = count;
        m->next_cache = (m->next_cache + 1) % N_CACHE;
    } else if (mc != c->mask) {
        free(mc);
    }
    return count;
}

int32_t mlm_matcher_n_vocab(const mlm_matcher *m) { return m && m->trie ? m->trie->n_vocab : 0; }
