/* format/pickle.c: the restricted unpickler (see pickle.h). A stack machine over the
 * opcodes torch.save uses with protocols 2 and 4, with a mark stack and a memo. Globals are
 * checked against a fixed allow-list as soon as they are read; REDUCE only ever "calls"
 * those few by building value nodes. Every count read from the stream is bounded. */
#include "format/pickle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define MAX_STACK (1 << 20)
#define MAX_MEMO (1 << 22)

struct mlm_pickle {
    pk_value **nodes; /* every node allocated, for freeing */
    int64_t n_nodes, cap_nodes;
};

typedef struct unpickler {
    const char *what;
    const unsigned char *d, *end, *p;
    mlm_pickle *pk;
    pk_value **stack;
    int64_t n_stack, cap_stack;
    int64_t *marks;
    int64_t n_marks, cap_marks;
    pk_value **memo;
    int64_t cap_memo, n_memo; /* n_memo: next MEMOIZE index */
    mlm_error *err;
} unpickler;

// ---- helpers ----

static int grow(void **arr, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return 1;
    int64_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *a = realloc(*arr, (size_t)c * elem);
    if (!a) return 0;
    *arr = a;
    *cap = c;
    return 1;
}

static mlm_status fail(unpickler *u, mlm_status st, const char *msg) {
    return mlm_error_set(u->err, st, "%s: pickle offset %lld: %s", u->what,
                         (long long)(u->p - u->d), msg);
}

static pk_value *node(unpickler *u, pk_kind kind) {
    mlm_pickle *pk = u->pk;
    if (!grow((void **)&pk->nodes, &pk->cap_nodes, pk->n_nodes + 1, sizeof *pk->nodes))
        return NULL;
    pk_value *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    v->kind = kind;
    pk->nodes[pk->n_nodes++] = v;
    return v;
}

static mlm_status push(unpickler *u, pk_value *v) {
    if (!v) return fail(u, MLM_ERR_NOMEM, "out of memory");
    if (u->n_stack >= MAX_STACK) return fail(u, MLM_ERR_FORMAT, "stack too deep");
    if (!grow((void **)&u->stack, &u->cap_stack, u->n_stack + 1, sizeof *u->stack))
        return fail(u, MLM_ERR_NOMEM, "out of memory");
    u->stack[u->n_stack++] = v;
    return MLM_OK;
}

/* The stack position of the last MARK, or -1 after failing. Pops the mark. */
static int64_t pop_mark(unpickler *u) {
    if (u->n_marks == 0) return -1;
    int64_t m = u->marks[--u->n_marks];
    return m <= u->n_stack ? m : -1;
}

static int append_item(pk_value *seq, pk_value *item) {
    if (!grow((void **)&seq->items, &seq->cap, seq->n + 1, sizeof *seq->items)) return 0;
    seq->items[seq->n++] = item;
    return 1;
}

static int need(unpickler *u, size_t n) { return (size_t)(u->end - u->p) >= n; }

static uint64_t le(const unsigned char *p, int n) {
    uint64_t x = 0;
    for (int i = n - 1; i >= 0; i--) x = x << 8 | p[i];
    return x;
}

// ---- globals ----

static const struct {
    const char *name;
    mlm_dtype dtype;
} storages[] = {
    {"BFloat16Storage", MLM_DTYPE_BF16}, {"HalfStorage", MLM_DTYPE_F16},
    {"FloatStorage", MLM_DTYPE_F32},     {"DoubleStorage", MLM_DTYPE_F64},
    {"LongStorage", MLM_DTYPE_I64},      {"IntStorage", MLM_DTYPE_I32},
    {"ShortStorage", MLM_DTYPE_I16},     {"CharStorage", MLM_DTYPE_I8},
    {"ByteStorage", MLM_DTYPE_U8},       {"BoolStorage", MLM_DTYPE_BOOL},
};

static int eq(const char *s, size_t n, const char *lit) {
    return strlen(lit) == n && !memcmp(s, lit, n);
}

static mlm_status push_global(unpickler *u, const char *mod, size_t mod_len, const char *name,
                              size_t name_len) {
    pk_value *v = node(u, PK_GLOBAL);
    if (!v) return fail(u, MLM_ERR_NOMEM, "out of memory");
    if (eq(mod, mod_len, "collections") && eq(name, name_len, "OrderedDict")) {
        v->global = PK_G_ORDERED_DICT;
    } else if (eq(mod, mod_len, "torch._utils") && eq(name, name_len, "_rebuild_tensor_v2")) {
        v->global = PK_G_REBUILD_TENSOR_V2;
    } else if (eq(mod, mod_len, "torch._utils") && eq(name, name_len, "_rebuild_parameter")) {
        v->global = PK_G_REBUILD_PARAMETER;
    } else {
        int found = 0;
        if (eq(mod, mod_len, "torch"))
            for (size_t i = 0; i < sizeof storages / sizeof storages[0]; i++)
                if (eq(name, name_len, storages[i].name)) {
                    v->global = PK_G_STORAGE;
                    v->dtype = storages[i].dtype;
                    found = 1;
                }
        if (!found) {
            char msg[300];
            snprintf(msg, sizeof msg,
                     "global '%.*s.%.*s' is not allowed (only collections.OrderedDict, "
                     "torch._utils._rebuild_tensor_v2/_rebuild_parameter and torch.*Storage)",
                     (int)(mod_len > 100 ? 100 : mod_len), mod,
                     (int)(name_len > 100 ? 100 : name_len), name);
            return fail(u, MLM_ERR_UNSUPPORTED, msg);
        }
    }
    return push(u, v);
}

// ---- REDUCE and persistent ids ----

static int int_tuple(const pk_value *t, int64_t *out, int *n) {
    if (t->kind != PK_TUPLE || t->n > MLM_MAX_DIMS) return 0;
    for (int64_t i = 0; i < t->n; i++) {
        if (t->items[i]->kind != PK_INT) return 0;
        out[i] = t->items[i]->i;
    }
    *n = (int)t->n;
    return 1;
}

static mlm_status reduce(unpickler *u) {
    if (u->n_stack < 2) return fail(u, MLM_ERR_FORMAT, "REDUCE on a short stack");
    pk_value *args = u->stack[--u->n_stack], *fn = u->stack[--u->n_stack];
    if (fn->kind != PK_GLOBAL || args->kind != PK_TUPLE)
        return fail(u, MLM_ERR_FORMAT, "REDUCE needs a global and an argument tuple");
    switch (fn->global) {
    case PK_G_ORDERED_DICT:
        if (args->n != 0) return fail(u, MLM_ERR_UNSUPPORTED, "OrderedDict with arguments");
        return push(u, node(u, PK_DICT));
    case PK_G_REBUILD_PARAMETER:
        if (args->n < 1 || args->items[0]->kind != PK_TENSOR)
            return fail(u, MLM_ERR_FORMAT, "_rebuild_parameter needs a tensor");
        return push(u, args->items[0]);
    case PK_G_REBUILD_TENSOR_V2: {
        /* (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata]) */
        if (args->n < 4 || args->items[0]->kind != PK_STORAGE || args->items[1]->kind != PK_INT)
            return fail(u, MLM_ERR_FORMAT, "_rebuild_tensor_v2: bad arguments");
        pk_value *t = node(u, PK_TENSOR);
        if (!t) return fail(u, MLM_ERR_NOMEM, "out of memory");
        int n_size, n_stride;
        if (!int_tuple(args->items[2], t->shape, &n_size) ||
            !int_tuple(args->items[3], t->stride, &n_stride) || n_size != n_stride)
            return fail(u, MLM_ERR_FORMAT,
                        "_rebuild_tensor_v2: size and stride must be int tuples of equal length "
                        "(at most 8 dims)");
        t->storage = args->items[0];
        t->i = args->items[1]->i;
        t->n_dim = n_size;
        t->dtype = t->storage->dtype;
        return push(u, t);
    }
    case PK_G_STORAGE: break;
    }
    return fail(u, MLM_ERR_UNSUPPORTED, "a storage class cannot be called");
}

static mlm_status persistent_id(unpickler *u) {
    if (u->n_stack < 1) return fail(u, MLM_ERR_FORMAT, "BINPERSID on an empty stack");
    pk_value *pid = u->stack[--u->n_stack];
    /* ('storage', storage_type, key, location, numel) */
    if (pid->kind != PK_TUPLE || pid->n != 5 || pid->items[0]->kind != PK_STR ||
        !eq(pid->items[0]->s, pid->items[0]->len, "storage") ||
        pid->items[1]->kind != PK_GLOBAL || pid->items[1]->global != PK_G_STORAGE ||
        pid->items[2]->kind != PK_STR || pid->items[4]->kind != PK_INT || pid->items[4]->i < 0)
        return fail(u, MLM_ERR_UNSUPPORTED,
                    "persistent id is not ('storage', torch.<X>Storage, key, location, numel)");
    pk_value *s = node(u, PK_STORAGE);
    if (!s) return fail(u, MLM_ERR_NOMEM, "out of memory");
    s->dtype = pid->items[1]->dtype;
    s->s = pid->items[2]->s;
    s->len = pid->items[2]->len;
    s->i = pid->items[4]->i;
    return push(u, s);
}

// ---- the opcode loop ----

static mlm_status memo_put(unpickler *u, uint64_t idx) {
    if (u->n_stack < 1) return fail(u, MLM_ERR_FORMAT, "memo put on an empty stack");
    /* A writer numbers memo entries as it goes, so an index is below the stream length;
     * bounding it so keeps a 5-byte input from allocating a huge memo. */
    if (idx >= MAX_MEMO || idx >= (uint64_t)(u->end - u->d))
        return fail(u, MLM_ERR_FORMAT, "memo index too large");
    int64_t old = u->cap_memo;
    if (!grow((void **)&u->memo, &u->cap_memo, (int64_t)idx + 1, sizeof *u->memo))
        return fail(u, MLM_ERR_NOMEM, "out of memory");
    for (int64_t i = old; i < u->cap_memo; i++) u->memo[i] = NULL;
    u->memo[idx] = u->stack[u->n_stack - 1];
    return MLM_OK;
}

static mlm_status memo_get(unpickler *u, uint64_t idx) {
    if ((int64_t)idx >= u->cap_memo || !u->memo[idx])
        return fail(u, MLM_ERR_FORMAT, "memo get of an unset index");
    return push(u, u->memo[idx]);
}

/* Collects the items above the last mark into a new sequence node of KIND. */
static mlm_status collect(unpickler *u, pk_kind kind, int64_t from) {
    pk_value *t = node(u, kind);
    if (!t) return fail(u, MLM_ERR_NOMEM, "out of memory");
    for (int64_t i = from; i < u->n_stack; i++)
        if (!append_item(t, u->stack[i])) return fail(u, MLM_ERR_NOMEM, "out of memory");
    u->n_stack = from;
    return push(u, t);
}

static mlm_status push_str(unpickler *u, uint64_t len) {
    if (!need(u, len)) return fail(u, MLM_ERR_FORMAT, "string runs past the end");
    pk_value *v = node(u, PK_STR);
    if (!v) return fail(u, MLM_ERR_NOMEM, "out of memory");
    v->s = (const char *)u->p;
    v->len = (size_t)len;
    u->p += len;
    return push(u, v);
}

static mlm_status push_int(unpickler *u, int64_t x) {
    pk_value *v = node(u, PK_INT);
    if (v) v->i = x;
    return push(u, v);
}

/* Adds items[from..] pairwise (or one by one) to the container below them. */
static mlm_status add_items(unpickler *u, int64_t from, int pairs) {
    if (from < 1) return fail(u, MLM_ERR_FORMAT, "no container below the items");
    pk_value *c = u->stack[from - 1];
    if (c->kind != (pairs ? PK_DICT : PK_LIST))
        return fail(u, MLM_ERR_FORMAT, pairs ? "SETITEM(S) on a non-dict" : "APPEND(S) on a non-list");
    if (pairs && (u->n_stack - from) % 2)
        return fail(u, MLM_ERR_FORMAT, "odd number of dict items");
    for (int64_t i = from; i < u->n_stack; i++)
        if (!append_item(c, u->stack[i])) return fail(u, MLM_ERR_NOMEM, "out of memory");
    u->n_stack = from;
    return MLM_OK;
}

static mlm_status step(unpickler *u, int *done) {
    unsigned char op = *u->p++;
    switch (op) {
    case 0x80: /* PROTO */
        if (!need(u, 1) || *u->p > 5) return fail(u, MLM_ERR_UNSUPPORTED, "bad protocol");
        u->p++;
        return MLM_OK;
    case 0x95: /* FRAME */
        if (!need(u, 8)) return fail(u, MLM_ERR_FORMAT, "truncated FRAME");
        u->p += 8;
        return MLM_OK;
    case 'c': { /* GLOBAL "module\nname\n" */
        const unsigned char *a = memchr(u->p, '\n', (size_t)(u->end - u->p));
        const unsigned char *b = a ? memchr(a + 1, '\n', (size_t)(u->end - a - 1)) : NULL;
        if (!b) return fail(u, MLM_ERR_FORMAT, "truncated GLOBAL");
        const char *mod = (const char *)u->p, *name = (const char *)a + 1;
        size_t ml = (size_t)(a - u->p), nl = (size_t)(b - a - 1);
        u->p = b + 1;
        return push_global(u, mod, ml, name, nl);
    }
    case 0x93: { /* STACK_GLOBAL */
        if (u->n_stack < 2) return fail(u, MLM_ERR_FORMAT, "STACK_GLOBAL on a short stack");
        pk_value *name = u->stack[--u->n_stack], *mod = u->stack[--u->n_stack];
        if (mod->kind != PK_STR || name->kind != PK_STR)
            return fail(u, MLM_ERR_FORMAT, "STACK_GLOBAL needs two strings");
        return push_global(u, mod->s, mod->len, name->s, name->len);
    }
    case 'q': /* BINPUT */
        if (!need(u, 1)) return fail(u, MLM_ERR_FORMAT, "truncated BINPUT");
        return memo_put(u, *u->p++);
    case 'r': /* LONG_BINPUT */
        if (!need(u, 4)) return fail(u, MLM_ERR_FORMAT, "truncated LONG_BINPUT");
        u->p += 4;
        return memo_put(u, le(u->p - 4, 4));
    case 0x94: /* MEMOIZE */
        return memo_put(u, (uint64_t)u->n_memo++);
    case 'h': /* BINGET */
        if (!need(u, 1)) return fail(u, MLM_ERR_FORMAT, "truncated BINGET");
        return memo_get(u, *u->p++);
    case 'j': /* LONG_BINGET */
        if (!need(u, 4)) return fail(u, MLM_ERR_FORMAT, "truncated LONG_BINGET");
        u->p += 4;
        return memo_get(u, le(u->p - 4, 4));
    case '(': /* MARK */
        if (!grow((void **)&u->marks, &u->cap_marks, u->n_marks + 1, sizeof *u->marks))
            return fail(u, MLM_ERR_NOMEM, "out of memory");
        if (u->n_marks >= MAX_STACK) return fail(u, MLM_ERR_FORMAT, "too many marks");
        u->marks[u->n_marks++] = u->n_stack;
        return MLM_OK;
    case ')': return push(u, node(u, PK_TUPLE));
    case '}': return push(u, node(u, PK_DICT));
    case ']': return push(u, node(u, PK_LIST));
    case 't':
    case 'l':
    case 'd': { /* TUPLE, LIST, DICT from the mark */
        int64_t m = pop_mark(u);
        if (m < 0) return fail(u, MLM_ERR_FORMAT, "no MARK");
        if (op != 'd') return collect(u, op == 't' ? PK_TUPLE : PK_LIST, m);
        if ((u->n_stack - m) % 2) return fail(u, MLM_ERR_FORMAT, "odd number of dict items");
        return collect(u, PK_DICT, m);
    }
    case 0x85:
    case 0x86:
    case 0x87: { /* TUPLE1..3 */
        int64_t k = op - 0x84;
        if (u->n_stack < k) return fail(u, MLM_ERR_FORMAT, "TUPLEn on a short stack");
        return collect(u, PK_TUPLE, u->n_stack - k);
    }
    case 'J':
        if (!need(u, 4)) return fail(u, MLM_ERR_FORMAT, "truncated BININT");
        u->p += 4;
        return push_int(u, (int32_t)(uint32_t)le(u->p - 4, 4));
    case 'K':
        if (!need(u, 1)) return fail(u, MLM_ERR_FORMAT, "truncated BININT1");
        return push_int(u, *u->p++);
    case 'M':
        if (!need(u, 2)) return fail(u, MLM_ERR_FORMAT, "truncated BININT2");
        u->p += 2;
        return push_int(u, (int64_t)le(u->p - 2, 2));
    case 0x8a: { /* LONG1: n bytes, little-endian two's complement */
        if (!need(u, 1)) return fail(u, MLM_ERR_FORMAT, "truncated LONG1");
        int n = *u->p++;
        if (n > 8) return fail(u, MLM_ERR_UNSUPPORTED, "integer wider than 64 bits");
        if (!need(u, (size_t)n)) return fail(u, MLM_ERR_FORMAT, "truncated LONG1");
        uint64_t x = n ? le(u->p, n) : 0;
        if (n > 0 && n < 8 && (u->p[n - 1] & 0x80)) x |= ~0ull << (8 * n);
        u->p += n;
        return push_int(u, (int64_t)x);
    }
    case 'X':
    case 0x8c:
    case 0x8d: { /* BINUNICODE (u32 len), SHORT_BINUNICODE (u8), BINUNICODE8 (u64) */
        int w = op == 'X' ? 4 : op == 0x8c ? 1 : 8;
        if (!need(u, (size_t)w)) return fail(u, MLM_ERR_FORMAT, "truncated string length");
        uint64_t len = le(u->p, w);
        u->p += w;
        return push_str(u, len);
    }
    case 'G': { /* BINFLOAT, big-endian */
        if (!need(u, 8)) return fail(u, MLM_ERR_FORMAT, "truncated BINFLOAT");
        uint64_t bits = 0;
        for (int i = 0; i < 8; i++) bits = bits << 8 | u->p[i];
        u->p += 8;
        pk_value *v = node(u, PK_FLOAT);
        if (v) memcpy(&v->f, &bits, 8);
        return push(u, v);
    }
    case 0x88:
    case 0x89: {
        pk_value *v = node(u, PK_BOOL);
        if (v) v->i = op == 0x88;
        return push(u, v);
    }
    case 'N': return push(u, node(u, PK_NONE));
    case 'R': return reduce(u);
    case 'Q': return persistent_id(u);
    case 'b': { /* BUILD: only the state of a dict subclass (OrderedDict._metadata) */
        if (u->n_stack < 2) return fail(u, MLM_ERR_FORMAT, "BUILD on a short stack");
        u->n_stack--;
        if (u->stack[u->n_stack - 1]->kind != PK_DICT)
            return fail(u, MLM_ERR_UNSUPPORTED, "BUILD on something other than a dict");
        return MLM_OK;
    }
    case 's': return add_items(u, u->n_stack - 2, 1);
    case 'a': return add_items(u, u->n_stack - 1, 0);
    case 'u':
    case 'e': {
        int64_t m = pop_mark(u);
        if (m < 0) return fail(u, MLM_ERR_FORMAT, "no MARK");
        return add_items(u, m, op == 'u');
    }
    case '0': /* POP */
        if (u->n_stack < 1) return fail(u, MLM_ERR_FORMAT, "POP on an empty stack");
        u->n_stack--;
        return MLM_OK;
    case '.':
        if (u->n_stack != 1) return fail(u, MLM_ERR_FORMAT, "STOP with a stack not of one value");
        *done = 1;
        return MLM_OK;
    default: {
        char msg[64];
        snprintf(msg, sizeof msg, "opcode 0x%02x is not supported", op);
        u->p--;
        return fail(u, MLM_ERR_UNSUPPORTED, msg);
    }
    }
}

mlm_status mlm_pickle_load(const char *what, const unsigned char *d, size_t n, mlm_pickle **out,
                           const pk_value **root, mlm_error *err) {
    *out = NULL;
    *root = NULL;
    unpickler u = {.what = what, .d = d, .end = d + n, .p = d, .err = err};
    u.pk = calloc(1, sizeof *u.pk);
    if (!u.pk) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", what);
    mlm_status st = MLM_OK;
    int done = 0;
    while (!done && st == MLM_OK) {
        if (u.p >= u.end) st = fail(&u, MLM_ERR_FORMAT, "truncated (no STOP)");
        else st = step(&u, &done);
    }
    if (st == MLM_OK) {
        *root = u.stack[0];
        *out = u.pk;
    } else {
        mlm_pickle_free(u.pk);
    }
    free(u.stack);
    free(u.marks);
    free(u.memo);
    return st;
}

void mlm_pickle_free(mlm_pickle *p) {
    if (!p) return;
    for (int64_t i = 0; i < p->n_nodes; i++) {
        free(p->nodes[i]->items);
        free(p->nodes[i]);
    }
    free(p->nodes);
    free(p);
}
