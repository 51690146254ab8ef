/* sample/grammar.h: the compiled form of a JSON Schema (schema.c builds it, matcher.c walks it
 * byte by byte, trie.c walks it with the vocabulary to mask tokens).
 *
 * A grammar is a flat table of nodes, each one kind of JSON value; children are node indices,
 * so $ref cycles (a tree whose children are trees) are plain back edges. The matcher keeps a
 * stack of frames, one per value being written, and a set of such stacks (threads) for anyOf
 * alternatives that the bytes have not yet told apart. Literal sets (enum, const, true, false,
 * null, the property keys an object may write next) are sorted byte strings: the literals
 * that match a prefix are a contiguous range, so a frame holds [lo, hi) and an offset. */
#ifndef MESHLM_SAMPLE_GRAMMAR_H
#define MESHLM_SAMPLE_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "meshlm.h"

typedef enum gkind {
    GK_ANY = 0,     /* any JSON value */
    GK_OBJECT,      /* declared properties, in their order, optional ones skippable */
    GK_FREE_OBJECT, /* any keys, any values */
    GK_ARRAY,
    GK_STRING,
    GK_NUMBER,
    GK_INTEGER,
    GK_LITERALS, /* one of a set of JSON texts */
    GK_ANYOF
} gkind;

typedef struct gnode {
    uint8_t kind;
    int32_t a, n;     /* OBJECT: first keyset, properties; ARRAY: items node (a);
                         LITERALS: first literal, count; ANYOF: first alternative, count */
    int64_t min, max; /* ARRAY: minItems / maxItems; STRING: minLength / maxLength (code
                         points); -1: none. INTEGER: the bounds, within +-G_INT_LIMIT */
} gnode;

/* The largest integer part the matcher writes (16 digits, llama.cpp's bound). */
#define G_INT_LIMIT 9999999999999999

/* A literal: LEN bytes at POOL + OFF; VAL: an object key's property index. */
typedef struct glit {
    uint32_t off, len;
    int32_t val;
} glit;

/* The keys an object may write at property position p: literals [lit, lit + n) (sorted),
 * CLOSE: whether '}' may come (no required property at p or later). */
typedef struct gkeys {
    int32_t lit, n;
    int32_t close;
} gkeys;

/* An object's property p: its value's node. */
typedef struct gprop {
    int32_t node;
} gprop;

struct mlm_grammar {
    gnode *nodes;
    int32_t n_nodes, cap_nodes;
    glit *lits;
    int32_t n_lits, cap_lits;
    char *pool;
    uint32_t n_pool, cap_pool;
    gkeys *keys;
    int32_t n_keys, cap_keys;
    gprop *props;
    int32_t n_props, cap_props;
    int32_t *alts;
    int32_t n_alts, cap_alts;
    int32_t root;
    /* the document: BEFORE value AFTER, MIN..MAX times, SEP between (wrap) */
    char *before, *after, *sep;
    uint32_t n_before, n_after, n_sep;
    int32_t min_values, max_values;
};

/* The continuation bytes UTF-8 lead byte C announces (1 to 3), with the range [*LO, *HI] of
 * the first of them (no overlong forms, no surrogates, nothing past U+10FFFF); 0 when C leads
 * no well-formed character (trie.c). */
int g_utf8_lead(unsigned c, unsigned *lo, unsigned *hi);

/* Node 0 of every grammar is GK_ANY and node 1 the literals false, null, true (what an
 * untyped value may be). */
#define G_NODE_ANY 0
#define G_NODE_WORDS 1

/* A trie of token bytes: node 0 is the root; node i's children are edges [first[i],
 * first[i] + count[i]) (bytes EBYTE, target nodes ETO, in byte order); TOK[i] is the first
 * token whose bytes end at node i (-1: none), the trie's NEXT_TOK chaining tokens with the
 * same bytes. */
typedef struct gtrie {
    int32_t n_nodes;
    int32_t *first, *count, *tok;
    uint8_t *ebyte;
    int32_t *eto;
} gtrie;

/* The vocabulary for masks: ALL tokens (special ones left out), and apart the "plain" ones,
 * whose bytes a JSON string may hold as they are (no '"', '\\' or control byte; whole UTF-8
 * characters): PLAIN_CP[id] is such a token's length in code points (-1: not plain), PLAIN
 * the mask of all of them, ODD the trie of the other tokens. Inside a string the plain
 * tokens are decided by their length alone and only ODD is walked. */
struct mlm_token_trie {
    int32_t n_vocab;
    gtrie all, odd;
    int32_t *next_tok;  /* (n_vocab) */
    const char **bytes; /* (n_vocab) borrowed from the tokenizer; NULL: left out */
    uint32_t *len;      /* (n_vocab) */
    int16_t *plain_cp;  /* (n_vocab) */
    int32_t max_plain_cp;
    uint32_t *plain;    /* ((n_vocab + 31) / 32) */
    int32_t n_plain;
};

#endif
