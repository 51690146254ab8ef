/* sample/trie.c: the vocabulary's bytes as tries (sample/grammar.h), built once per tokenizer
 * for the token masks of structured output: one of every token (special and empty ones, and
 * any over 1024 bytes, left out), one of the tokens that are not plain string text, and the plain ones' lengths. Tokens
 * with the same bytes share a node (chained). Built with linked children, then laid out
 * breadth first with each node's edges contiguous, in byte order. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "sample/grammar.h"

/* Longer tokens are left out: the mask's walk recurses once per byte of a token. */
#define MAX_TOKEN_BYTES 1024

/* build-time node: first child, next sibling, the byte leading here, the first token */
typedef struct bnode {
    int32_t child, sibling, tok;
    uint8_t byte;
} bnode;

typedef struct builder {
    bnode *nodes;
    int32_t n, cap;
} builder;

static void gtrie_free(gtrie *t) {
    free(t->first);
    free(t->count);
    free(t->tok);
    free(t->ebyte);
    free(t->eto);
}

void mlm_token_trie_free(mlm_token_trie *t) {
    if (!t) return;
    gtrie_free(&t->all);
    gtrie_free(&t->odd);
    free(t->next_tok);
    free(t->bytes);
    free(t->len);
    free(t->plain_cp);
    free(t->plain);
    free(t);
}

/* The child of node P by byte B, made when missing (-1: out of memory). */
static int32_t child_of(builder *b, int32_t p, uint8_t byte) {
    int32_t prev = -1, c = b->nodes[p].child;
    while (c >= 0 && b->nodes[c].byte < byte) prev = c, c = b->nodes[c].sibling;
    if (c >= 0 && b->nodes[c].byte == byte) return c;
    if (b->n == b->cap) {
        int32_t nc = b->cap * 2;
        bnode *q = realloc(b->nodes, (size_t)nc * sizeof *q);
        if (!q) return -1;
        b->nodes = q, b->cap = nc;
    }
    int32_t k = b->n++;
    b->nodes[k] = (bnode){.child = -1, .sibling = c, .tok = -1, .byte = byte};
    if (prev < 0) b->nodes[p].child = k;
    else b->nodes[prev].sibling = k;
    return k;
}

/* Token ID (LEN bytes at S) into B; 0 when out of memory. */
static int insert(builder *b, int32_t *next_tok, int32_t id, const char *s, uint32_t len) {
    int32_t p = 0;
    for (uint32_t i = 0; i < len && p >= 0; i++) p = child_of(b, p, (uint8_t)s[i]);
    if (p < 0) return 0;
    next_tok[id] = b->nodes[p].tok;
    b->nodes[p].tok = id;
    return 1;
}

/* Lays B out into T breadth first; 0 when out of memory. */
static int lay_out(const builder *b, gtrie *t) {
    int32_t n = b->n;
    t->n_nodes = n;
    t->first = malloc((size_t)n * sizeof *t->first);
    t->count = calloc((size_t)n, sizeof *t->count);
    t->tok = malloc((size_t)n * sizeof *t->tok);
    t->ebyte = malloc((size_t)n * sizeof *t->ebyte);
    t->eto = malloc((size_t)n * sizeof *t->eto);
    int32_t *queue = malloc((size_t)n * sizeof *queue);
    if (!t->first || !t->count || !t->tok || !t->ebyte || !t->eto || !queue) {
        free(queue);
        return 0;
    }
    /* queue[k]: the build node laid out as node k */
    int32_t head = 0, tail = 1, edges = 0;
    queue[0] = 0;
    while (head < tail) {
        int32_t bn = queue[head], me = head;
        head++;
        t->tok[me] = b->nodes[bn].tok;
        t->first[me] = edges;
        for (int32_t c = b->nodes[bn].child; c >= 0; c = b->nodes[c].sibling) {
            t->ebyte[edges] = b->nodes[c].byte;
            t->eto[edges] = tail;
            queue[tail++] = c;
            edges++;
            t->count[me]++;
        }
    }
    free(queue);
    return 1;
}

/* The code points of S (LEN bytes) when a JSON string may hold them as they are: no '"', no
 * '\\', no byte below 0x20, whole well-formed UTF-8 characters; else -1. */
int g_utf8_lead(unsigned c, unsigned *lo, unsigned *hi) {
    *lo = 0x80, *hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) return 1;
    if (c == 0xE0) return *lo = 0xA0, 2;
    if (c == 0xED) return *hi = 0x9F, 2;
    if (c >= 0xE1 && c <= 0xEF) return 2;
    if (c == 0xF0) return *lo = 0x90, 3;
    if (c >= 0xF1 && c <= 0xF3) return 3;
    if (c == 0xF4) return *hi = 0x8F, 3;
    return 0;
}

static int32_t plain_length(const unsigned char *s, uint32_t len) {
    int32_t cp = 0;
    for (uint32_t i = 0; i < len;) {
        unsigned c = s[i], lo, hi;
        if (c < 0x20 || c == '"' || c == '\\') return -1;
        uint32_t need = c < 0x80 ? 0 : (uint32_t)g_utf8_lead(c, &lo, &hi);
        if (c >= 0x80 && need == 0) return -1;
        if (i + 1 + need > len) return -1;
        for (uint32_t k = 1; k <= need; k++) {
            unsigned d = s[i + k];
            if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xBF)) return -1;
        }
        i += 1 + need;
        cp++;
    }
    return cp;
}

mlm_status mlm_token_trie_create(const mlm_tokenizer *tok, mlm_token_trie **out,
                                 mlm_error *err) {
    *out = NULL;
    int32_t V = mlm_tokenizer_n_vocab(tok);
    mlm_token_trie *t = calloc(1, sizeof *t);
    builder all = {malloc((size_t)(1 << 16) * sizeof(bnode)), 1, 1 << 16};
    builder odd = {malloc((size_t)(1 << 14) * sizeof(bnode)), 1, 1 << 14};
    if (!t || !all.nodes || !odd.nodes || V < 1) goto nomem;
    all.nodes[0] = odd.nodes[0] = (bnode){.child = -1, .sibling = -1, .tok = -1};
    t->n_vocab = V;
    t->next_tok = malloc((size_t)V * sizeof *t->next_tok);
    t->bytes = calloc((size_t)V, sizeof *t->bytes);
    t->len = calloc((size_t)V, sizeof *t->len);
    t->plain_cp = malloc((size_t)V * sizeof *t->plain_cp);
    t->plain = calloc(((size_t)V + 31) / 32, sizeof *t->plain);
    int32_t *odd_next = malloc((size_t)V * sizeof *odd_next);
    if (!t->next_tok || !t->bytes || !t->len || !t->plain_cp || !t->plain || !odd_next) {
        free(odd_next);
        goto nomem;
    }
    for (int32_t id = 0; id < V; id++) {
        size_t len = 0;
        const char *b = mlm_tokenizer_token_bytes(tok, id, &len);
        t->next_tok[id] = -1;
        t->plain_cp[id] = -1;
        if (!b || len == 0 || len > MAX_TOKEN_BYTES || mlm_tokenizer_is_special(tok, id)) continue;
        t->bytes[id] = b, t->len[id] = (uint32_t)len;
        int32_t cp = plain_length((const unsigned char *)b, (uint32_t)len);
        int ok = insert(&all, t->next_tok, id, b, (uint32_t)len);
        if (cp >= 0) {
            t->plain_cp[id] = (int16_t)cp;
            t->plain[id >> 5] |= 1u << (id & 31);
            t->n_plain++;
            if (cp > t->max_plain_cp) t->max_plain_cp = cp;
        } else {
            ok = ok && insert(&odd, odd_next, id, b, (uint32_t)len);
        }
        if (!ok) {
            free(odd_next);
            goto nomem;
        }
    }
    /* the same bytes are plain or not alike, so odd's chains are all's chains */
    free(odd_next);
    if (!lay_out(&all, &t->all) || !lay_out(&odd, &t->odd)) goto nomem;
    free(all.nodes);
    free(odd.nodes);
    *out = t;
    return MLM_OK;
nomem:
    free(all.nodes);
    free(odd.nodes);
    mlm_token_trie_free(t);
    return mlm_error_set(err, MLM_ERR_NOMEM, "token trie: out of memory");
}
