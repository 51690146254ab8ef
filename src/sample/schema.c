/* sample/schema.c: JSON Schema text -> mlm_grammar (sample/grammar.h), the subset listed at
 * mlm_grammar_compile in meshlm.h. Each schema object becomes one node; $ref targets are
 * compiled once (a node index reserved first, so recursive schemas close on themselves).
 * A keyword outside the subset is refused by name with its JSON pointer, never ignored:
 * a document that the caller's validator would reject must not be written. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "sample/grammar.h"

#define MAX_DEPTH 64
#define MAX_PROPS 256

typedef struct compiler {
    mlm_grammar *g;
    json_t *root;
    /* $ref targets compiled so far: pointer text -> node */
    char **ref_names;
    int32_t *ref_nodes;
    int32_t n_refs, cap_refs;
    mlm_error *err;
    mlm_status st;
} compiler;

static int fail(compiler *c, mlm_status st, const char *fmt, const char *a, const char *b) {
    if (c->st == MLM_OK) {
        c->st = st;
        mlm_error_set(c->err, st, fmt, a, b);
    }
    return -1;
}

static int nomem(compiler *c) {
    return fail(c, MLM_ERR_NOMEM, "json schema: out of memory%s%s", "", "");
}

/* Grows *P (of *CAP elements of SIZE) to hold N. */
static int grow(void **p, int32_t *cap, int32_t n, size_t size) {
    if (n <= *cap) return 1;
    int32_t nc = *cap ? *cap * 2 : 16;
    while (nc < n) nc *= 2;
    void *q = realloc(*p, (size_t)nc * size);
    if (!q) return 0;
    *p = q;
    *cap = nc;
    return 1;
}

static int32_t new_node(compiler *c, gkind kind) {
    mlm_grammar *g = c->g;
    if (!grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes)) return nomem(c);
    gnode *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->kind = (uint8_t)kind;
    n->min = n->max = -1;
    return g->n_nodes++;
}

static int32_t add_lit(compiler *c, const char *s, size_t len, int32_t val) {
    mlm_grammar *g = c->g;
    if (len > UINT32_MAX / 2 || g->n_pool > UINT32_MAX / 2 - len) return nomem(c);
    while (g->n_pool + len > g->cap_pool) {
        uint32_t nc = g->cap_pool ? g->cap_pool * 2 : 256;
        char *q = realloc(g->pool, nc);
        if (!q) return nomem(c);
        g->pool = q;
        g->cap_pool = nc;
    }
    if (!grow((void **)&g->lits, &g->cap_lits, g->n_lits + 1,
              sizeof *g->lits))
        return nomem(c);
    memcpy(g->pool + g->n_pool, s, len);
    g->lits[g->n_lits] = (glit){g->n_pool, (uint32_t)len, val};
    g->n_pool += (uint32_t)len;
    return g->n_lits++;
}

static int lit_cmp_g(const mlm_grammar *g, const glit *a, const glit *b) {
    uint32_t n = a->len < b->len ? a->len : b->len;
    int r = memcmp(g->pool + a->off, g->pool + b->off, n);
    if (r) return r;
    return a->len < b->len ? -1 : a->len > b->len;
}

/* Sorts literals [lo, lo + n) by bytes (insertion sort: thread-safe, and sets are small or
 * built in order). */
static void sort_lits(mlm_grammar *g, int32_t lo, int32_t n) {
    for (int32_t i = lo + 1; i < lo + n; i++) {
        glit x = g->lits[i];
        int32_t j = i - 1;
        while (j >= lo && lit_cmp_g(g, &g->lits[j], &x) > 0) {
            g->lits[j + 1] = g->lits[j];
            j--;
        }
        g->lits[j + 1] = x;
    }
}

/* A JSON text of V as the document would hold it (compact). */
static int32_t add_value_lit(compiler *c, const json_t *v, int32_t val) {
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) return nomem(c);
    int32_t r = add_lit(c, s, strlen(s), val);
    free(s);
    return r;
}

static int32_t literals_node(compiler *c, const json_t *const *vals, size_t n) {
    int32_t node = new_node(c, GK_LITERALS);
    if (node < 0) return -1;
    int32_t first = c->g->n_lits;
    for (size_t i = 0; i < n; i++)
        if (add_value_lit(c, vals[i], 0) < 0) return -1;
    sort_lits(c->g, first, (int32_t)n);
    c->g->nodes[node].a = first;
    c->g->nodes[node].n = (int32_t)n;
    return node;
}

static int32_t compile(compiler *c, json_t *s, const char *path, int depth);

static int32_t add_alt(compiler *c, int32_t node) {
    mlm_grammar *g = c->g;
    if (!grow((void **)&g->alts, &g->cap_alts, g->n_alts + 1, sizeof *g->alts)) return nomem(c);
    g->alts[g->n_alts++] = node;
    return node;
}

/* An ANYOF node over the nodes NODES[0..n). */
static int32_t anyof_of(compiler *c, const int32_t *nodes, int32_t n) {
    if (n == 1) return nodes[0];
    int32_t node = new_node(c, GK_ANYOF);
    if (node < 0) return -1;
    int32_t first = c->g->n_alts;
    for (int32_t i = 0; i < n; i++)
        if (add_alt(c, nodes[i]) < 0) return -1;
    c->g->nodes[node].a = first;
    c->g->nodes[node].n = n;
    return node;
}

/* Non-negative integer keyword KEY of S into *OUT (-1 when absent). */
static int count_kw(compiler *c, json_t *s, const char *key, const char *path, int64_t *out) {
    json_t *v = json_object_get(s, key);
    *out = -1;
    if (!v) return 1;
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        fail(c, MLM_ERR_INVALID_ARG, "json schema: '%s' at '%s' must be a non-negative integer",
             key, path);
        return 0;
    }
    *out = json_integer_value(v);
    return 1;
}

static int32_t object_node(compiler *c, json_t *s, const char *path, int depth) {
    json_t *props = json_object_get(s, "properties");
    json_t *req = json_object_get(s, "required");
    json_t *ap = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props))
        return fail(c, MLM_ERR_INVALID_ARG, "json schema: 'properties' at '%s' must be an object%s",
                    path, "");
    if (req && !json_is_array(req))
        return fail(c, MLM_ERR_INVALID_ARG, "json schema: 'required' at '%s' must be an array%s",
                    path, "");
    if (ap && !json_is_boolean(ap) && !json_is_object(ap))
        return fail(c, MLM_ERR_INVALID_ARG,
                    "json schema: 'additionalProperties' at '%s' must be a boolean or a schema%s",
                    path, "");
    size_t np = props ? json_object_size(props) : 0, nr = req ? json_array_size(req) : 0;
    if (np == 0 && nr == 0 && !json_is_false(ap)) return new_node(c, GK_FREE_OBJECT);
    /* names: the declared properties in order, then required ones not declared (any value) */
    const char **names = calloc(np + nr + 1, sizeof *names);
    json_t **schemas = calloc(np + nr + 1, sizeof *schemas);
    char *required = calloc(np + nr + 1, 1);
    int32_t *nodes = calloc(np + nr + 1, sizeof *nodes);
    int32_t node = -1;
    if (!names || !schemas || !required || !nodes) {
        node = nomem(c);
        goto done;
    }
    size_t n = 0;
    const char *key;
    json_t *sub;
    json_object_foreach(props, key, sub) {
        names[n] = key;
        schemas[n++] = sub;
    }
    for (size_t i = 0; i < nr; i++) {
        json_t *r = json_array_get(req, i);
        if (!json_is_string(r)) {
            node = fail(c, MLM_ERR_INVALID_ARG,
                        "json schema: 'required' at '%s' must list strings%s", path, "");
            goto done;
        }
        size_t k = 0;
        while (k < n && strcmp(names[k], json_string_value(r)) != 0) k++;
        if (k == n) {
            names[n] = json_string_value(r);
            schemas[n++] = NULL;
        }
        required[k] = 1;
    }
    if (n > MAX_PROPS) {
        node = fail(c, MLM_ERR_UNSUPPORTED,
                    "json schema: more than 256 properties at '%s'%s", path, "");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        char sub_path[512];
        snprintf(sub_path, sizeof sub_path, "%s/properties/%s", path, names[i]);
        nodes[i] = schemas[i] ? compile(c, schemas[i], sub_path, depth + 1) : new_node(c, GK_ANY);
        if (nodes[i] < 0) goto done;
    }
    node = new_node(c, GK_OBJECT);
    if (node < 0) goto done;
    mlm_grammar *g = c->g;
    int32_t first_prop = g->n_props, first_keys = g->n_keys;
    if (!grow((void **)&g->props, &g->cap_props, g->n_props + (int32_t)n, sizeof *g->props) ||
        !grow((void **)&g->keys, &g->cap_keys, g->n_keys + (int32_t)n + 1, sizeof *g->keys)) {
        node = nomem(c);
        goto done;
    }
    for (size_t i = 0; i < n; i++) g->props[g->n_props++].node = nodes[i];
    for (size_t p = 0; p <= n; p++) {
        /* keys allowed at position p: p .. the first required at or after p */
        int32_t first = g->n_lits;
        size_t end = p;
        while (end < n && !required[end]) end++;
        int close = end == n;
        if (end < n) end++;
        for (size_t k = p; k < end; k++) {
            json_t *name = json_string(names[k]);
            if (!name) {
                node = nomem(c);
                goto done;
            }
            int32_t l = add_value_lit(c, name, (int32_t)(first_prop + (int32_t)k));
            json_decref(name);
            if (l < 0) {
                node = -1;
                goto done;
            }
        }
        sort_lits(g, first, g->n_lits - first);
        g->keys[g->n_keys++] = (gkeys){first, g->n_lits - first, close};
    }
    g->nodes[node].a = first_keys;
    g->nodes[node].n = (int32_t)n;
    g->nodes[node].min = first_prop;
done:
    free(names);
    free(schemas);
    free(required);
    free(nodes);
    return node;
}

static int32_t array_node(compiler *c, json_t *s, const char *path, int depth) {
    json_t *items = json_object_get(s, "items");
    int64_t lo, hi;
    if (!count_kw(c, s, "minItems", path, &lo) || !count_kw(c, s, "maxItems", path, &hi)) return -1;
    char sub_path[512];
    snprintf(sub_path, sizeof sub_path, "%s/items", path);
    int32_t item = items ? compile(c, items, sub_path, depth + 1) : new_node(c, GK_ANY);
    if (item < 0) return -1;
    if (hi >= 0 && lo > hi)
        return fail(c, MLM_ERR_INVALID_ARG, "json schema: minItems > maxItems at '%s'%s", path, "");
    int32_t node = new_node(c, GK_ARRAY);
    if (node < 0) return -1;
    c->g->nodes[node].a = item;
    c->g->nodes[node].min = lo < 0 ? 0 : lo;
    c->g->nodes[node].max = hi;
    return node;
}

static int32_t string_node(compiler *c, json_t *s, const char *path) {
    int64_t lo, hi;
    if (!count_kw(c, s, "minLength", path, &lo) || !count_kw(c, s, "maxLength", path, &hi)) return -1;
    if (hi >= 0 && lo > hi)
        return fail(c, MLM_ERR_INVALID_ARG, "json schema: minLength > maxLength at '%s'%s", path,
                    "");
    if (lo > INT32_MAX || hi > INT32_MAX)
        return fail(c, MLM_ERR_UNSUPPORTED, "json schema: a string length over 2^31 at '%s'%s",
                    path, "");
    int32_t node = new_node(c, GK_STRING);
    if (node < 0) return -1;
    c->g->nodes[node].min = lo < 0 ? 0 : lo;
    c->g->nodes[node].max = hi;
    return node;
}

/* The integer bound keywords, in the order integer_node reads them. */
static const char *const BOUND_KW[] = {"minimum", "maximum", "exclusiveMinimum",
                                       "exclusiveMaximum"};

/* The first bound keyword S holds (NULL: none). */
static const char *bound_kw(json_t *s) {
    for (size_t i = 0; i < sizeof BOUND_KW / sizeof BOUND_KW[0]; i++)
        if (json_object_get(s, BOUND_KW[i])) return BOUND_KW[i];
    return NULL;
}

/* An integer node with S's bounds, [min, max] within what 16 digits write (+-G_INT_LIMIT:
 * none). A real bound rounds inward (minimum 1.5 -> 2). */
static int32_t integer_node(compiler *c, json_t *s, const char *path) {
    int64_t lo = -G_INT_LIMIT, hi = G_INT_LIMIT;
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(s, BOUND_KW[i]);
        if (!v) continue;
        if (!json_is_number(v) || !isfinite(json_number_value(v)))
            return fail(c, MLM_ERR_INVALID_ARG,
                        "json schema: '%s' at '%s' must be a finite number", BOUND_KW[i], path);
        int is_min = i == 0 || i == 2, exclusive = i >= 2;
        int64_t n;
        if (json_is_integer(v)) { /* clamped first, so that +-1 cannot overflow */
            n = json_integer_value(v);
            n = n < -G_INT_LIMIT - 1 ? -G_INT_LIMIT - 1 : n > G_INT_LIMIT + 1 ? G_INT_LIMIT + 1 : n;
            if (exclusive) n += is_min ? 1 : -1;
        } else { /* a real rounds inward */
            double x = json_number_value(v);
            x = x < -1e17 ? -1e17 : x > 1e17 ? 1e17 : x;
            double r = is_min ? (exclusive ? floor(x) + 1 : ceil(x))
                              : (exclusive ? ceil(x) - 1 : floor(x));
            n = (int64_t)r;
        }
        if (is_min && n > lo) lo = n;
        if (!is_min && n < hi) hi = n;
    }
    if (lo > hi)
        return fail(c, MLM_ERR_INVALID_ARG,
                    "json schema: no integer of at most 16 digits fits the bounds at '%s'%s",
                    path, "");
    int32_t node = new_node(c, GK_INTEGER);
    if (node < 0) return -1;
    c->g->nodes[node].min = lo;
    c->g->nodes[node].max = hi;
    return node;
}

/* The node of one type name. */
static int32_t type_node(compiler *c, json_t *s, const char *t, const char *path, int depth) {
    if (strcmp(t, "object") == 0) return object_node(c, s, path, depth);
    if (strcmp(t, "array") == 0) return array_node(c, s, path, depth);
    if (strcmp(t, "string") == 0) return string_node(c, s, path);
    if (strcmp(t, "number") == 0) {
        const char *b = bound_kw(s);
        if (b)
            return fail(c, MLM_ERR_UNSUPPORTED,
                        "json schema: '%s' at '%s' is supported on type 'integer' only, not "
                        "'number'",
                        b, path);
        return new_node(c, GK_NUMBER);
    }
    if (strcmp(t, "integer") == 0) return integer_node(c, s, path);
    if (strcmp(t, "boolean") == 0) {
        json_t *v[2] = {json_false(), json_true()};
        return literals_node(c, (const json_t *const *)v, 2);
    }
    if (strcmp(t, "null") == 0) {
        json_t *v[1] = {json_null()};
        return literals_node(c, (const json_t *const *)v, 1);
    }
    return fail(c, MLM_ERR_INVALID_ARG, "json schema: unknown type '%s' at '%s'", t, path);
}

/* "#", "#/$defs/NAME", "#/definitions/NAME" -> the node (compiled on first use). */
static int32_t ref_node(compiler *c, const char *ref, const char *path, int depth) {
    for (int32_t i = 0; i < c->n_refs; i++)
        if (strcmp(c->ref_names[i], ref) == 0) return c->ref_nodes[i];
    json_t *target = NULL;
    if (strcmp(ref, "#") == 0) {
        target = c->root;
    } else if (strncmp(ref, "#/$defs/", 8) == 0 || strncmp(ref, "#/definitions/", 14) == 0) {
        const char *defs = ref[2] == '$' ? "$defs" : "definitions";
        const char *name = ref + (ref[2] == '$' ? 8 : 14);
        target = json_object_get(json_object_get(c->root, defs), name);
        if (!target)
            return fail(c, MLM_ERR_INVALID_ARG, "json schema: $ref '%s' at '%s' names no definition",
                        ref, path);
    } else {
        return fail(c, MLM_ERR_UNSUPPORTED,
                    "json schema: $ref '%s' at '%s': only '#', '#/$defs/...' and "
                    "'#/definitions/...' are supported",
                    ref, path);
    }
    /* reserve: an ANYOF of one alternative, patched once the target is compiled */
    int32_t node = new_node(c, GK_ANYOF);
    if (node < 0) return -1;
    if (!grow((void **)&c->ref_names, &c->cap_refs, c->n_refs + 1, sizeof *c->ref_names) ||
        !(c->ref_nodes = realloc(c->ref_nodes, (size_t)c->cap_refs * sizeof *c->ref_nodes)))
        return nomem(c);
    if (!(c->ref_names[c->n_refs] = strdup(ref))) return nomem(c);
    c->ref_nodes[c->n_refs++] = node;
    int32_t body = compile(c, target, ref, depth + 1);
    if (body < 0) return -1;
    int32_t first = c->g->n_alts;
    if (add_alt(c, body) < 0) return -1;
    c->g->nodes[node].a = first;
    c->g->nodes[node].n = 1;
    return node;
}

static int known_keyword(const char *k) {
    static const char *const KW[] = {
        "type", "properties", "required", "additionalProperties", "items", "enum", "const",
        "anyOf", "minItems", "maxItems", "minLength", "maxLength", "$ref", "$defs",
        "definitions", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
        /* annotations */
        "title", "description", "default", "examples", "format", "$schema", "$id", "$comment",
        "deprecated", "readOnly", "writeOnly"};
    for (size_t i = 0; i < sizeof KW / sizeof KW[0]; i++)
        if (strcmp(k, KW[i]) == 0) return 1;
    return 0;
}

static int32_t compile(compiler *c, json_t *s, const char *path, int depth) {
    if (depth > MAX_DEPTH)
        return fail(c, MLM_ERR_UNSUPPORTED, "json schema: nesting deeper than 64 at '%s'%s", path,
                    "");
    if (json_is_true(s)) return new_node(c, GK_ANY);
    if (json_is_false(s))
        return fail(c, MLM_ERR_INVALID_ARG, "json schema: 'false' at '%s' allows no value%s",
                    path, "");
    if (!json_is_object(s))
        return fail(c, MLM_ERR_INVALID_ARG, "json schema: the schema at '%s' is not an object%s",
                    path, "");
    const char *key;
    json_t *v;
    json_object_foreach(s, key, v) {
        if (!known_keyword(key))
            return fail(c, MLM_ERR_UNSUPPORTED,
                        "json schema: keyword '%s' at '%s' is not supported", key, path);
    }
    json_t *ref = json_object_get(s, "$ref");
    const char *bound = bound_kw(s);
    if (bound && (!json_object_get(s, "type") || ref || json_object_get(s, "const") ||
                  json_object_get(s, "enum") || json_object_get(s, "anyOf")))
        return fail(c, MLM_ERR_UNSUPPORTED,
                    "json schema: '%s' at '%s' is supported only beside \"type\": \"integer\" "
                    "(without $ref, const, enum or anyOf)",
                    bound, path);
    if (ref) {
        if (!json_is_string(ref))
            return fail(c, MLM_ERR_INVALID_ARG, "json schema: '$ref' at '%s' must be a string%s",
                        path, "");
        return ref_node(c, json_string_value(ref), path, depth);
    }
    json_t *cv = json_object_get(s, "const");
    if (cv) return literals_node(c, (const json_t *const *)&cv, 1);
    json_t *ev = json_object_get(s, "enum");
    if (ev) {
        if (!json_is_array(ev) || json_array_size(ev) == 0)
            return fail(c, MLM_ERR_INVALID_ARG,
                        "json schema: 'enum' at '%s' must be a non-empty array%s", path, "");
        size_t n = json_array_size(ev);
        const json_t **vals = malloc(n * sizeof *vals);
        if (!vals) return nomem(c);
        for (size_t i = 0; i < n; i++) vals[i] = json_array_get(ev, i);
        int32_t node = literals_node(c, (const json_t *const *)vals, n);
        free(vals);
        return node;
    }
    json_t *any = json_object_get(s, "anyOf");
    json_t *type = json_object_get(s, "type");
    if (any) {
        if (!json_is_array(any) || json_array_size(any) == 0)
            return fail(c, MLM_ERR_INVALID_ARG,
                        "json schema: 'anyOf' at '%s' must be a non-empty array%s", path, "");
        if (type || json_object_get(s, "properties") || json_object_get(s, "items"))
            return fail(c, MLM_ERR_UNSUPPORTED,
                        "json schema: 'anyOf' at '%s' beside '%s' is not supported (put the "
                        "keyword inside each alternative)",
                        path, type ? "type" : json_object_get(s, "items") ? "items" : "properties");
        size_t n = json_array_size(any);
        int32_t *nodes = malloc(n * sizeof *nodes);
        if (!nodes) return nomem(c);
        int32_t node = 0;
        for (size_t i = 0; i < n && node >= 0; i++) {
            char sub_path[512];
            snprintf(sub_path, sizeof sub_path, "%s/anyOf/%zu", path, i);
            node = nodes[i] = compile(c, json_array_get(any, i), sub_path, depth + 1);
        }
        if (node >= 0) node = anyof_of(c, nodes, (int32_t)n);
        free(nodes);
        return node;
    }
    if (!type) { /* untyped: what its keywords imply, else any value */
        if (json_object_get(s, "properties") || json_object_get(s, "required") ||
            json_object_get(s, "additionalProperties"))
            return object_node(c, s, path, depth);
        if (json_object_get(s, "items") || json_object_get(s, "minItems") ||
            json_object_get(s, "maxItems"))
            return array_node(c, s, path, depth);
        if (json_object_get(s, "minLength") || json_object_get(s, "maxLength"))
            return string_node(c, s, path);
        return new_node(c, GK_ANY);
    }
    if (json_is_string(type)) return type_node(c, s, json_string_value(type), path, depth);
    if (!json_is_array(type) || json_array_size(type) == 0)
        return fail(c, MLM_ERR_INVALID_ARG,
                    "json schema: 'type' at '%s' must be a string or a non-empty array%s", path,
                    "");
    size_t n = json_array_size(type);
    int32_t nodes[8];
    if (n > 8)
        return fail(c, MLM_ERR_INVALID_ARG, "json schema: 'type' at '%s' lists too many types%s",
                    path, "");
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(type, i);
        if (!json_is_string(t))
            return fail(c, MLM_ERR_INVALID_ARG, "json schema: 'type' at '%s' must list strings%s",
                        path, "");
        if ((nodes[i] = type_node(c, s, json_string_value(t), path, depth)) < 0) return -1;
    }
    return anyof_of(c, nodes, (int32_t)n);
}

void mlm_grammar_free(mlm_grammar *g) {
    if (!g) return;
    free(g->nodes);
    free(g->lits);
    free(g->pool);
    free(g->keys);
    free(g->props);
    free(g->alts);
    free(g->before);
    free(g->after);
    free(g->sep);
    free(g);
}

static char *dup_text(const char *s, uint32_t *n) {
    size_t len = s ? strlen(s) : 0;
    char *d = malloc(len + 1);
    if (d) memcpy(d, s ? s : "", len + 1);
    *n = (uint32_t)len;
    return d;
}

mlm_status mlm_grammar_compile(const char *schema, size_t len, const mlm_grammar_wrap *wrap,
                               mlm_grammar **out, mlm_error *err) {
    *out = NULL;
    if (wrap && (wrap->min_values < 1 || wrap->max_values < wrap->min_values))
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "json schema: the wrap's counts must be 1 <= min <= max");
    compiler c = {.err = err};
    c.g = calloc(1, sizeof *c.g);
    if (!c.g) return mlm_error_set(err, MLM_ERR_NOMEM, "json schema: out of memory");
    mlm_grammar *g = c.g;
    g->before = dup_text(wrap ? wrap->before : NULL, &g->n_before);
    g->after = dup_text(wrap ? wrap->after : NULL, &g->n_after);
    g->sep = dup_text(wrap ? wrap->sep : NULL, &g->n_sep);
    g->min_values = wrap ? wrap->min_values : 1;
    g->max_values = wrap ? wrap->max_values : 1;
    if (!g->before || !g->after || !g->sep) {
        mlm_grammar_free(g);
        return mlm_error_set(err, MLM_ERR_NOMEM, "json schema: out of memory");
    }
    json_t *words[3] = {json_false(), json_null(), json_true()};
    if (new_node(&c, GK_ANY) != G_NODE_ANY ||
        literals_node(&c, (const json_t *const *)words, 3) != G_NODE_WORDS) {
        mlm_grammar_free(g);
        return mlm_error_set(err, MLM_ERR_NOMEM, "json schema: out of memory");
    }
    if (!schema) {
        g->root = new_node(&c, GK_FREE_OBJECT);
    } else {
        json_error_t jerr;
        c.root = json_loadb(schema, len, JSON_DECODE_ANY, &jerr);
        if (!c.root) {
            mlm_grammar_free(g);
            return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                                 "json schema: not JSON: %s (line %d, column %d)", jerr.text,
                                 jerr.line, jerr.column);
        }
        g->root = compile(&c, c.root, "#", 0);
    }
    json_decref(c.root);
    for (int32_t i = 0; i < c.n_refs; i++) free(c.ref_names[i]);
    free(c.ref_names);
    free(c.ref_nodes);
    if (g->root < 0 || c.st != MLM_OK) {
        mlm_grammar_free(g);
        return c.st != MLM_OK ? c.st : mlm_error_set(err, MLM_ERR_NOMEM, "json schema: out of memory");
    }
    *out = g;
    return MLM_OK;
}
