/* tests/fuzz/fuzz_gguf.c: libFuzzer target for the GGUF reader: the input is one .gguf file.
 * Whatever it accepts is walked completely: every value (arrays of arrays included, through
 * the typed getters and the array walkers) and every byte of every tensor, so that a view
 * reaching outside the input shows under ASan. */
#include <stdint.h>
#include <stdlib.h>

#include "format/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

static void walk(const mlm_gguf_value *v, int depth) {
    if (v->type == MLM_GGUF_STRING) {
        for (uint64_t i = 0; i < v->len; i++)
            sink += (unsigned char)v->str[i];
        return;
    }
    if (v->type != MLM_GGUF_ARRAY) {
        sink += v->u + (uint64_t)v->i + (uint64_t)(v->f == v->f);
        return;
    }
    uint64_t pos = 0, n = 0;
    mlm_gguf_value e;
    while (mlm_gguf_array_next(v, &pos, &e)) {
        walk(&e, depth + 1);
        n++;
    }
    if (n != v->n) abort(); /* the walker must agree with the validated count */
    if (v->n && mlm_gguf_array_get(v, v->n - 1, &e)) sink += e.u;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mlm_gguf *g;
    mlm_error err;
    if (mlm_gguf_open_memory(data, size, "fuzz.gguf", &g, &err) != MLM_OK) return 0;
    for (int64_t i = 0; i < mlm_gguf_n_kv(g); i++) {
        const mlm_gguf_kv *kv = mlm_gguf_kv_at(g, i);
        walk(&kv->value, 0);
        if (i >= 64) continue; /* the look-ups are linear: keep a run fast */
        uint64_t u;
        int64_t s;
        double d;
        int b;
        const char *str;
        const mlm_gguf_value *arr;
        mlm_gguf_get_uint(g, kv->key, &u, &err);
        mlm_gguf_get_int(g, kv->key, &s, &err);
        mlm_gguf_get_float(g, kv->key, &d, &err);
        mlm_gguf_get_bool(g, kv->key, &b, &err);
        mlm_gguf_get_str(g, kv->key, &str, &u, &err);
        mlm_gguf_get_array(g, kv->key, &arr, &err);
    }
    for (int64_t i = 0; i < mlm_gguf_n_tensors(g); i++) {
        const mlm_gguf_tensor *t = mlm_gguf_tensor_at(g, i);
        if (mlm_gguf_find_tensor(g, t->name) != t) abort();
        const unsigned char *p = t->data;
        for (uint64_t k = 0; k < t->nbytes; k++)
            sink += p[k];
    }
    mlm_gguf_free(g);
    return 0;
}
