/* tests/unit/test_gguf.c: the GGUF reader and writer, and mlm_export_gguf against llama.cpp.
 *
 * The export is compared with tests/data/gguf/expected.json, made by
 * tests/fixtures/make_gguf_fixtures.py from llama.cpp's own convert_hf_to_gguf.py run on the
 * same tiny models (the Llama and Phi-3 fixtures with a toy 512-token tokenizer, the embedded
 * default model with the real Llama 3 tokenizer, a one-layer Phi-3 with the Phi-4 tokenizer
 * and zero weights): every key, type and value in order, every tensor's name, shape, ggml type
 * and data bytes (sha256), in f32, f16 and bf16. The reader is checked on files the writer
 * makes, on hand-made files (nested arrays, every value type) and on malformed ones. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "format/writer_safetensors.h"
#include "harness.h"
#include "meshlm.h"
#include "sha256.h"

#define EXPECTED "tests/data/gguf/expected.json"

// ---- hand-made files ----

typedef struct bb {
    unsigned char *p;
    size_t n, cap;
} bb;

static void bb_put(bb *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = 2 * (b->n + n) + 256;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void bb_le(bb *b, uint64_t v, int n) {
    unsigned char x[8];
    for (int i = 0; i < n; i++)
        x[i] = (unsigned char)(v >> (8 * i));
    bb_put(b, x, (size_t)n);
}

static void bb_str(bb *b, const char *s) {
    bb_le(b, strlen(s), 8);
    bb_put(b, s, strlen(s));
}

static void bb_header(bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    bb_put(b, "GGUF", 4);
    bb_le(b, version, 4);
    bb_le(b, n_tensors, 8);
    bb_le(b, n_kv, 8);
}

static void bb_kv_u32(bb *b, const char *key, uint32_t v) {
    bb_str(b, key);
    bb_le(b, MLM_GGUF_U32, 4);
    bb_le(b, v, 4);
}

static void bb_tensor(bb *b, const char *name, int n_dim, const int64_t *ne, uint32_t type,
                      uint64_t offset) {
    bb_str(b, name);
    bb_le(b, (uint64_t)n_dim, 4);
    for (int d = 0; d < n_dim; d++)
        bb_le(b, (uint64_t)ne[d], 8);
    bb_le(b, type, 4);
    bb_le(b, offset, 8);
}

static void bb_pad(bb *b, size_t a) {
    while (b->n % a)
        bb_le(b, 0, 1);
}

static mlm_status open_bb(const bb *b, mlm_gguf **g, mlm_error *err) {
    return mlm_gguf_open_memory(b->p, b->n, "mem.gguf", g, err);
}

/* A valid file: one string pair, two f32 tensors ([4] and [2, 3]). */
static bb valid_file(void) {
    bb b = {0};
    bb_header(&b, 3, 2, 1);
    bb_str(&b, "general.architecture");
    bb_le(&b, MLM_GGUF_STRING, 4);
    bb_str(&b, "llama");
    int64_t ne1[1] = {4}, ne2[2] = {2, 3};
    bb_tensor(&b, "a", 1, ne1, MLM_GGML_F32, 0);
    bb_tensor(&b, "b", 2, ne2, MLM_GGML_F32, 32);
    bb_pad(&b, 32);
    for (int i = 0; i < 8; i++) {
        float f = (float)i;
        bb_put(&b, &f, 4);
    }
    for (int i = 0; i < 6; i++) {
        float f = 10.0f + (float)i;
        bb_put(&b, &f, 4);
    }
    return b;
}

TEST(reader_valid_file) {
    bb b = valid_file();
    mlm_gguf *g;
    mlm_error err;
    CHECK_OK(open_bb(&b, &g, &err), &err);
    if (!g) return;
    CHECK(mlm_gguf_version(g) == 3 && mlm_gguf_alignment(g) == 32);
    CHECK(mlm_gguf_data_offset(g) % 32 == 0);
    const char *s;
    uint64_t len;
    CHECK_OK(mlm_gguf_get_str(g, "general.architecture", &s, &len, &err), &err);
    CHECK(len == 5 && !memcmp(s, "llama", 5));
    const mlm_gguf_tensor *t = mlm_gguf_find_tensor(g, "b");
    CHECK(t && t->n_dim == 2 && t->ne[0] == 2 && t->ne[1] == 3 && t->nbytes == 24 &&
          t->offset == 32);
    CHECK(t && ((const float *)t->data)[5] == 15.0f);
    CHECK(mlm_gguf_get_uint(g, "general.architecture", &len, &err) == MLM_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "mem.gguf") && strstr(err.msg, "is string, not an unsigned integer"));
    CHECK(mlm_gguf_get_str(g, "nope", &s, &len, &err) == MLM_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "no key 'nope'"));
    mlm_gguf_free(g);
    free(b.p);
}

/* Every value type, nested arrays (array of arrays of strings, an empty array), as the spec
 * allows and llama.cpp's writer never makes. */
TEST(reader_every_type_and_nesting) {
    bb b = {0};
    bb_header(&b, 3, 0, 15);
    const char *keys[] = {"u8",  "i8",   "u16", "i16", "u32", "i32",
                          "f32", "bool", "u64", "i64", "f64"};
    const uint32_t types[] = {MLM_GGUF_U8,  MLM_GGUF_I8,  MLM_GGUF_U16, MLM_GGUF_I16,
                              MLM_GGUF_U32, MLM_GGUF_I32, MLM_GGUF_F32, MLM_GGUF_BOOL,
                              MLM_GGUF_U64, MLM_GGUF_I64, MLM_GGUF_F64};
    const int sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 8, 8, 8};
    float f32 = -1.5f;
    double f64 = 3.25;
    uint32_t f32b;
    uint64_t f64b;
    memcpy(&f32b, &f32, 4);
    memcpy(&f64b, &f64, 8);
    const uint64_t vals[] = {200,          (uint8_t)-5, 60000, (uint16_t)-300, 4000000000u,
                             (uint32_t)-7, f32b,        1,     UINT64_MAX - 1, (uint64_t)-9,
                             f64b};
    for (int i = 0; i < 11; i++) {
        bb_str(&b, keys[i]);
        bb_le(&b, types[i], 4);
        bb_le(&b, vals[i], sizes[i]);
    }
    /* [["a", "bc"], [], ["def"]] */
    bb_str(&b, "nested");
    bb_le(&b, MLM_GGUF_ARRAY, 4);
    bb_le(&b, MLM_GGUF_ARRAY, 4);
    bb_le(&b, 3, 8);
    bb_le(&b, MLM_GGUF_STRING, 4), bb_le(&b, 2, 8), bb_str(&b, "a"), bb_str(&b, "bc");
    bb_le(&b, MLM_GGUF_STRING, 4), bb_le(&b, 0, 8);
    bb_le(&b, MLM_GGUF_STRING, 4), bb_le(&b, 1, 8), bb_str(&b, "def");
    bb_str(&b, "u16s");
    bb_le(&b, MLM_GGUF_ARRAY, 4), bb_le(&b, MLM_GGUF_U16, 4), bb_le(&b, 3, 8);
    bb_le(&b, 1, 2), bb_le(&b, 2, 2), bb_le(&b, 65535, 2);
    bb_str(&b, "bools");
    bb_le(&b, MLM_GGUF_ARRAY, 4), bb_le(&b, MLM_GGUF_BOOL, 4), bb_le(&b, 2, 8);
    bb_le(&b, 1, 1), bb_le(&b, 0, 1);
    bb_str(&b, "empty");
    bb_le(&b, MLM_GGUF_ARRAY, 4), bb_le(&b, MLM_GGUF_F64, 4), bb_le(&b, 0, 8);
    mlm_gguf *g;
    mlm_error err;
    CHECK_OK(open_bb(&b, &g, &err), &err);
    if (!g) return;
    CHECK(mlm_gguf_n_kv(g) == 15 && mlm_gguf_n_tensors(g) == 0);
    uint64_t u;
    int64_t i64;
    double d;
    int bo;
    CHECK(mlm_gguf_get_uint(g, "u8", &u, &err) == MLM_OK && u == 200);
    CHECK(mlm_gguf_get_int(g, "i8", &i64, &err) == MLM_OK && i64 == -5);
    CHECK(mlm_gguf_get_uint(g, "u16", &u, &err) == MLM_OK && u == 60000);
    CHECK(mlm_gguf_get_int(g, "i16", &i64, &err) == MLM_OK && i64 == -300);
    CHECK(mlm_gguf_get_uint(g, "u32", &u, &err) == MLM_OK && u == 4000000000u);
    CHECK(mlm_gguf_get_int(g, "i32", &i64, &err) == MLM_OK && i64 == -7);
    CHECK(mlm_gguf_get_float(g, "f32", &d, &err) == MLM_OK && d == -1.5);
    CHECK(mlm_gguf_get_bool(g, "bool", &bo, &err) == MLM_OK && bo == 1);
    CHECK(mlm_gguf_get_uint(g, "u64", &u, &err) == MLM_OK && u == UINT64_MAX - 1);
    CHECK(mlm_gguf_get_int(g, "u64", &i64, &err) == MLM_ERR_INVALID_ARG &&
          strstr(err.msg, "int64"));
    CHECK(mlm_gguf_get_int(g, "i64", &i64, &err) == MLM_OK && i64 == -9);
    CHECK(mlm_gguf_get_float(g, "f64", &d, &err) == MLM_OK && d == 3.25);
    const mlm_gguf_value *arr;
    CHECK_OK(mlm_gguf_get_array(g, "nested", &arr, &err), &err);
    CHECK(arr->elem_type == MLM_GGUF_ARRAY && arr->n == 3);
    uint64_t pos = 0;
    mlm_gguf_value e, s;
    const char *want[3][2] = {{"a", "bc"}, {NULL, NULL}, {"def", NULL}};
    for (int i = 0; i < 3; i++) {
        CHECK(mlm_gguf_array_next(arr, &pos, &e) && e.type == MLM_GGUF_ARRAY);
        uint64_t p2 = 0;
        for (uint64_t j = 0; j < e.n; j++) {
            CHECK(mlm_gguf_array_next(&e, &p2, &s) && s.type == MLM_GGUF_STRING);
            CHECK(want[i][j] && s.len == strlen(want[i][j]) && !memcmp(s.str, want[i][j], s.len));
        }
        CHECK(!mlm_gguf_array_next(&e, &p2, &s));
    }
    CHECK(!mlm_gguf_array_next(arr, &pos, &e));
    CHECK(!mlm_gguf_array_get(arr, 0, &e)); /* variable-size elements */
    CHECK_OK(mlm_gguf_get_array(g, "u16s", &arr, &err), &err);
    CHECK(mlm_gguf_array_get(arr, 2, &e) && e.u == 65535 && !mlm_gguf_array_get(arr, 3, &e));
    CHECK_OK(mlm_gguf_get_array(g, "bools", &arr, &err), &err);
    CHECK(mlm_gguf_array_get(arr, 0, &e) && e.u == 1 && mlm_gguf_array_get(arr, 1, &e) && e.u == 0);
    CHECK_OK(mlm_gguf_get_array(g, "empty", &arr, &err), &err);
    pos = 0;
    CHECK(arr->n == 0 && !mlm_gguf_array_next(arr, &pos, &e));
    mlm_gguf_free(g);
    free(b.p);
}

/* Every prefix of a valid file is refused with FORMAT, and never read past. */
TEST(reader_truncated_everywhere) {
    bb b = valid_file();
    int bad = 0;
    for (size_t n = 0; n < b.n; n++) {
        unsigned char *copy = malloc(n ? n : 1);
        memcpy(copy, b.p, n);
        mlm_gguf *g;
        mlm_error err;
        mlm_status st = mlm_gguf_open_memory(copy, n, "cut.gguf", &g, &err);
        if (st != MLM_ERR_FORMAT || !strstr(err.msg, "cut.gguf")) {
            if (bad++ < 3) printf("  prefix %zu: %s: %s\n", n, mlm_status_str(st), err.msg);
        }
        mlm_gguf_free(g);
        free(copy);
    }
    CHECK(bad == 0);
    free(b.p);
}

typedef void (*builder)(bb *b);

static void m_magic(bb *b) { bb_put(b, "GGUX\3\0\0\0", 8); }
static void m_version1(bb *b) { bb_header(b, 1, 0, 0); }
static void m_version4(bb *b) { bb_header(b, 4, 0, 0); }
static void m_many_kv(bb *b) { bb_header(b, 3, 0, 1ull << 40); }
static void m_many_tensors(bb *b) { bb_header(b, 3, UINT64_MAX, 0); }
static void m_key_len(bb *b) {
    bb_header(b, 3, 0, 1);
    bb_le(b, 1ull << 62, 8);
    bb_put(b, "abcdefgh", 8);
}
static void m_empty_key(bb *b) {
    bb_header(b, 3, 0, 1);
    bb_str(b, "");
    bb_le(b, MLM_GGUF_U8, 4), bb_le(b, 1, 1);
}
static void m_value_type(bb *b) {
    bb_header(b, 3, 0, 1);
    bb_str(b, "k");
    bb_le(b, 13, 4), bb_le(b, 0, 8);
}
static void m_bool(bb *b) {
    bb_header(b, 3, 0, 1);
    bb_str(b, "flag");
    bb_le(b, MLM_GGUF_BOOL, 4), bb_le(b, 2, 1);
}
static void m_array_count(bb *b) {
    bb_header(b, 3, 0, 1);
    bb_str(b, "tokens");
    bb_le(b, MLM_GGUF_ARRAY, 4), bb_le(b, MLM_GGUF_STRING, 4), bb_le(b, 1ull << 59, 8);
    bb_str(b, "x");
}
static void m_array_type(bb *b) {
    bb_header(b, 3, 0, 1);
    bb_str(b, "arr");
    bb_le(b, MLM_GGUF_ARRAY, 4), bb_le(b, 77, 4), bb_le(b, 0, 8);
}
static void m_deep(bb *b) {
    bb_header(b, 3, 0, 1);
    bb_str(b, "deep");
    bb_le(b, MLM_GGUF_ARRAY, 4);
    for (int i = 0; i < 9; i++)
        bb_le(b, MLM_GGUF_ARRAY, 4), bb_le(b, 1, 8);
    bb_le(b, MLM_GGUF_U8, 4), bb_le(b, 0, 8);
}
static void m_dup_key(bb *b) {
    bb_header(b, 3, 0, 2);
    bb_kv_u32(b, "a.b", 1);
    bb_kv_u32(b, "a.b", 2);
}
static void m_align_type(bb *b) {
    bb_header(b, 3, 0, 1);
    bb_str(b, "general.alignment");
    bb_le(b, MLM_GGUF_U64, 4), bb_le(b, 32, 8);
}
static void m_align_pow2(bb *b) {
    bb_header(b, 3, 0, 1);
    bb_kv_u32(b, "general.alignment", 48);
}
static void one_tensor(bb *b, const char *name, int n_dim, const int64_t *ne, uint32_t type,
                       uint64_t offset, size_t data) {
    bb_header(b, 3, 1, 0);
    bb_tensor(b, name, n_dim, ne, type, offset);
    bb_pad(b, 32);
    for (size_t i = 0; i < data; i++)
        bb_le(b, 0, 1);
}
static void m_name_len(bb *b) {
    int64_t ne[1] = {1};
    one_tensor(b, "0123456789012345678901234567890123456789012345678901234567890123", 1, ne,
               MLM_GGML_F32, 0, 32);
}
static void m_dims(bb *b) {
    int64_t ne[5] = {1, 1, 1, 1, 1};
    one_tensor(b, "t", 5, ne, MLM_GGML_F32, 0, 32);
}
static void m_negative(bb *b) {
    int64_t ne[2] = {4, -1};
    one_tensor(b, "t", 2, ne, MLM_GGML_F32, 0, 32);
}
static void m_overflow(bb *b) {
    int64_t ne[4] = {1ll << 32, 1ll << 32, 1, 1};
    one_tensor(b, "t", 4, ne, MLM_GGML_F32, 0, 32);
}
static void m_ggml_type(bb *b) {
    int64_t ne[1] = {4};
    one_tensor(b, "t", 1, ne, 31, 0, 32);
}
static void m_block(bb *b) {
    int64_t ne[1] = {33};
    one_tensor(b, "q", 1, ne, MLM_GGML_Q8_0, 0, 96);
}
static void m_misaligned(bb *b) {
    int64_t ne[1] = {4};
    one_tensor(b, "t", 1, ne, MLM_GGML_F32, 4, 32);
}
static void m_out_of_range(bb *b) {
    int64_t ne[1] = {16};
    one_tensor(b, "big", 1, ne, MLM_GGML_F32, 0, 32);
}
static void m_huge_offset(bb *b) {
    int64_t ne[1] = {4};
    one_tensor(b, "t", 1, ne, MLM_GGML_F32, UINT64_MAX - 31, 32);
}
static void m_overlap(bb *b) {
    int64_t ne[1] = {16};
    bb_header(b, 3, 2, 0);
    bb_tensor(b, "x", 1, ne, MLM_GGML_F32, 0);
    bb_tensor(b, "y", 1, ne, MLM_GGML_F32, 32);
    bb_pad(b, 32);
    for (int i = 0; i < 128; i++)
        bb_le(b, 0, 1);
}
static void m_dup_tensor(bb *b) {
    int64_t ne[1] = {8};
    bb_header(b, 3, 2, 0);
    bb_tensor(b, "w", 1, ne, MLM_GGML_F32, 0);
    bb_tensor(b, "w", 1, ne, MLM_GGML_F32, 32);
    bb_pad(b, 32);
    for (int i = 0; i < 64; i++)
        bb_le(b, 0, 1);
}
static void m_no_data(bb *b) {
    int64_t ne[1] = {8};
    bb_header(b, 3, 1, 0);
    bb_tensor(b, "w", 1, ne, MLM_GGML_F32, 0);
}

TEST(reader_malformed) {
    static const struct {
        const char *what;
        builder build;
        mlm_status st;
        const char *msg;
    } cases[] = {
        {"magic", m_magic, MLM_ERR_FORMAT, "bad magic (not a GGUF file)"},
        {"version 1", m_version1, MLM_ERR_UNSUPPORTED, "GGUF version 1 is not supported"},
        {"version 4", m_version4, MLM_ERR_UNSUPPORTED, "GGUF version 4 is not supported"},
        {"kv count", m_many_kv, MLM_ERR_FORMAT, "key-value count 1099511627776 cannot fit"},
        {"tensor count", m_many_tensors, MLM_ERR_FORMAT,
         "tensor count 18446744073709551615 cannot fit"},
        {"key length", m_key_len, MLM_ERR_FORMAT, "key 0: string length 4611686018427387904"},
        {"empty key", m_empty_key, MLM_ERR_FORMAT, "key 0 is empty"},
        {"value type", m_value_type, MLM_ERR_FORMAT, "key 'k': value type 13 unknown"},
        {"bool", m_bool, MLM_ERR_FORMAT, "key 'flag': bool byte 2 is not 0 or 1"},
        {"array count", m_array_count, MLM_ERR_FORMAT,
         "key 'tokens': array of 576460752303423488 string"},
        {"array type", m_array_type, MLM_ERR_FORMAT, "key 'arr': array element type 77 unknown"},
        {"depth", m_deep, MLM_ERR_FORMAT, "key 'deep': arrays nested deeper than 8"},
        {"duplicate key", m_dup_key, MLM_ERR_FORMAT, "duplicate key 'a.b'"},
        {"alignment type", m_align_type, MLM_ERR_FORMAT, "general.alignment must be u32, not u64"},
        {"alignment", m_align_pow2, MLM_ERR_FORMAT, "general.alignment 48 is not a power of two"},
        {"name length", m_name_len, MLM_ERR_FORMAT, "tensor 0: name of 64 bytes (must be 1..63"},
        {"dims", m_dims, MLM_ERR_FORMAT, "tensor 't': 5 dims (at most 4)"},
        {"negative", m_negative, MLM_ERR_FORMAT, "tensor 't': ne[1] = -1 is negative"},
        {"overflow", m_overflow, MLM_ERR_FORMAT, "tensor 't': element count overflows"},
        {"ggml type", m_ggml_type, MLM_ERR_UNSUPPORTED, "tensor 't': ggml type 31 unknown"},
        {"block", m_block, MLM_ERR_FORMAT,
         "tensor 'q': 33 elements per row is not a multiple of q8_0's block of 32"},
        {"misaligned", m_misaligned, MLM_ERR_FORMAT,
         "tensor 't': offset 4 is not a multiple of the alignment 32"},
        {"out of range", m_out_of_range, MLM_ERR_FORMAT,
         "tensor 'big': bytes [0, +64) exceed the data section of 32 bytes"},
        {"huge offset", m_huge_offset, MLM_ERR_FORMAT,
         "tensor 't': bytes [18446744073709551584, +16) exceed"},
        {"overlap", m_overlap, MLM_ERR_FORMAT, "tensors 'x' and 'y' overlap"},
        {"duplicate tensor", m_dup_tensor, MLM_ERR_FORMAT, "duplicate tensor name 'w'"},
        {"no data", m_no_data, MLM_ERR_FORMAT, "the data section should start at offset"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bb b = {0};
        cases[i].build(&b);
        mlm_gguf *g = NULL;
        mlm_error err;
        mlm_status st = open_bb(&b, &g, &err);
        CHECKF(st == cases[i].st && strstr(err.msg, cases[i].msg) && strstr(err.msg, "mem.gguf"),
               "%s: got %s: %s", cases[i].what, mlm_status_str(st), err.msg);
        CHECK(g == NULL);
        mlm_gguf_free(g);
        free(b.p);
    }
    mlm_gguf *g;
    mlm_error err;
    CHECK(mlm_gguf_open("/nonexistent/x.gguf", &g, &err) == MLM_ERR_IO);
    CHECK(strstr(err.msg, "/nonexistent/x.gguf") != NULL);
}

// ---- the writer ----

TEST(writer_round_trip) {
    char dir[64], path[128];
    if (harness_tmpdir(dir, sizeof dir, "gguf")) SKIP("no temporary directory");
    snprintf(path, sizeof path, "%s/w.gguf", dir);
    mlm_gguf_writer *w;
    mlm_error err;
    CHECK_OK(mlm_gguf_writer_create(path, &w, &err), &err);
    CHECK_OK(mlm_gguf_writer_u32(w, "general.alignment", 64, &err), &err);
    CHECK_OK(mlm_gguf_writer_str(w, "general.name", "x y", 3, &err), &err);
    CHECK_OK(mlm_gguf_writer_i32(w, "i", -3, &err), &err);
    CHECK_OK(mlm_gguf_writer_u64(w, "u", 1ull << 40, &err), &err);
    CHECK_OK(mlm_gguf_writer_f32(w, "f", 0.25f, &err), &err);
    CHECK_OK(mlm_gguf_writer_bool(w, "b", 1, &err), &err);
    CHECK_OK(mlm_gguf_writer_arr_begin(w, "s", MLM_GGUF_STRING, 2, &err), &err);
    CHECK_OK(mlm_gguf_writer_arr_str(w, "", 0, &err), &err);
    CHECK_OK(mlm_gguf_writer_arr_str(w, "Ġa b", 5, &err), &err);
    CHECK_OK(mlm_gguf_writer_arr_end(w, &err), &err);
    CHECK_OK(mlm_gguf_writer_arr_begin(w, "n", MLM_GGUF_I32, 3, &err), &err);
    for (int i = 0; i < 3; i++)
        CHECK_OK(mlm_gguf_writer_arr_scalar(w, (uint32_t)(i - 1), &err), &err);
    CHECK_OK(mlm_gguf_writer_arr_end(w, &err), &err);
    int64_t ne_a[2] = {3, 2}, ne_q[1] = {64}, ne_z[1] = {0};
    CHECK_OK(mlm_gguf_writer_tensor(w, "a", MLM_GGML_F32, 2, ne_a, &err), &err);
    CHECK_OK(mlm_gguf_writer_tensor(w, "empty", MLM_GGML_BF16, 1, ne_z, &err), &err);
    CHECK_OK(mlm_gguf_writer_tensor(w, "q", MLM_GGML_Q8_0, 1, ne_q, &err), &err);
    uint64_t total = mlm_gguf_writer_total_bytes(w);
    unsigned char data[24 + 68];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (unsigned char)(i * 7);
    /* pieces that span tensors */
    CHECK_OK(mlm_gguf_writer_write(w, data, 10, &err), &err);
    CHECK_OK(mlm_gguf_writer_write(w, data + 10, 30, &err), &err);
    CHECK_OK(mlm_gguf_writer_write(w, data + 40, sizeof data - 40, &err), &err);
    CHECK(mlm_gguf_writer_write(w, data, 1, &err) == MLM_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "past the last tensor") != NULL);
    CHECK_OK(mlm_gguf_writer_finish(w, &err), &err);
    CHECK(access(path, F_OK) != 0); /* not before commit */
    CHECK_OK(mlm_gguf_writer_commit(w, &err), &err);
    mlm_gguf_writer_free(w);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (uint64_t)sb.st_size == total);
    mlm_gguf *g;
    CHECK_OK(mlm_gguf_open(path, &g, &err), &err);
    if (g) {
        CHECK(mlm_gguf_alignment(g) == 64 && mlm_gguf_data_offset(g) % 64 == 0);
        int64_t i64;
        uint64_t u;
        double d;
        int bo;
        CHECK(mlm_gguf_get_int(g, "i", &i64, &err) == MLM_OK && i64 == -3);
        CHECK(mlm_gguf_get_uint(g, "u", &u, &err) == MLM_OK && u == 1ull << 40);
        CHECK(mlm_gguf_get_float(g, "f", &d, &err) == MLM_OK && d == 0.25);
        CHECK(mlm_gguf_get_bool(g, "b", &bo, &err) == MLM_OK && bo == 1);
        const mlm_gguf_value *arr;
        mlm_gguf_value e;
        uint64_t pos = 0;
        CHECK(mlm_gguf_get_array(g, "s", &arr, &err) == MLM_OK && arr->n == 2);
        CHECK(mlm_gguf_array_next(arr, &pos, &e) && e.len == 0);
        CHECK(mlm_gguf_array_next(arr, &pos, &e) && e.len == 5 && !memcmp(e.str, "Ġa b", 5));
        CHECK(mlm_gguf_get_array(g, "n", &arr, &err) == MLM_OK && mlm_gguf_array_get(arr, 0, &e) &&
              e.i == -1);
        const mlm_gguf_tensor *a = mlm_gguf_find_tensor(g, "a"), *q = mlm_gguf_find_tensor(g, "q");
        const mlm_gguf_tensor *z = mlm_gguf_find_tensor(g, "empty");
        CHECK(a && q && z && a->nbytes == 24 && q->nbytes == 34 * 2 && z->nbytes == 0);
        CHECK(a && q && a->offset == 0 && q->offset % 64 == 0);
        CHECK(a && !memcmp(a->data, data, 24));
        CHECK(q && !memcmp(q->data, data + 24, 68));
        mlm_gguf_free(g);
    }
    harness_rmtree(dir);
}

TEST(writer_errors) {
    char dir[64], path[128];
    if (harness_tmpdir(dir, sizeof dir, "gguf")) SKIP("no temporary directory");
    snprintf(path, sizeof path, "%s/e.gguf", dir);
    mlm_gguf_writer *w;
    mlm_error err;
    CHECK_OK(mlm_gguf_writer_create(path, &w, &err), &err);
    CHECK_OK(mlm_gguf_writer_u32(w, "k", 1, &err), &err);
    CHECK(mlm_gguf_writer_u32(w, "k", 2, &err) == MLM_ERR_INVALID_ARG &&
          strstr(err.msg, "'k' added twice"));
    CHECK(mlm_gguf_writer_u32(w, "general.alignment", 24, &err) == MLM_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "power of two") != NULL);
    CHECK_OK(mlm_gguf_writer_arr_begin(w, "a", MLM_GGUF_I32, 2, &err), &err);
    CHECK(mlm_gguf_writer_arr_str(w, "x", 1, &err) == MLM_ERR_INVALID_ARG);
    CHECK(mlm_gguf_writer_u32(w, "inside", 1, &err) == MLM_ERR_INVALID_ARG);
    CHECK_OK(mlm_gguf_writer_arr_scalar(w, 1, &err), &err);
    CHECK(mlm_gguf_writer_arr_end(w, &err) == MLM_ERR_INVALID_ARG &&
          strstr(err.msg, "1 of 2 elements"));
    int64_t ne[1] = {33};
    CHECK(mlm_gguf_writer_tensor(w, "q", MLM_GGML_Q4_0, 1, ne, &err) == MLM_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "whole number of 32-blocks") != NULL);
    ne[0] = 4;
    CHECK(mlm_gguf_writer_tensor(w,
                                 "0123456789012345678901234567890123456789012345678901234567890123",
                                 MLM_GGML_F32, 1, ne, &err) == MLM_ERR_INVALID_ARG);
    CHECK_OK(mlm_gguf_writer_tensor(w, "t", MLM_GGML_F32, 1, ne, &err), &err);
    CHECK(mlm_gguf_writer_tensor(w, "t", MLM_GGML_F32, 1, ne, &err) == MLM_ERR_INVALID_ARG);
    float x[2] = {1, 2};
    CHECK_OK(mlm_gguf_writer_write(w, x, sizeof x, &err), &err);
    CHECK(mlm_gguf_writer_finish(w, &err) == MLM_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "tensor 't': 8 of 16 bytes given") != NULL);
    mlm_gguf_writer_free(w); /* not committed: nothing may be left behind */
    char cmd[256], out[256];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    FILE *p = popen(cmd, "r");
    CHECK(p && fgets(out, sizeof out, p) && atoi(out) == 0);
    if (p) pclose(p);
    /* an unwritable place: IO naming the file */
    CHECK_OK(mlm_gguf_writer_create("/nonexistent-dir/x.gguf", &w, &err), &err);
    CHECK(mlm_gguf_writer_finish(w, &err) == MLM_ERR_IO &&
          strstr(err.msg, "/nonexistent-dir/x.gguf"));
    mlm_gguf_writer_free(w);
    harness_rmtree(dir);
}

// ---- the export against convert_hf_to_gguf.py ----

static int link_into(const char *dir, const char *src_dir, const char *name) {
    char src[PATH_MAX], abs[PATH_MAX], dst[PATH_MAX];
    snprintf(src, sizeof src, "%s/%s", src_dir, name);
    if (!realpath(src, abs)) return 0;
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    return symlink(abs, dst) == 0;
}

/* The all-zero bf16 Phi-3 weights of the phi4tok case (make_gguf_fixtures.py writes the same). */
static mlm_status write_zero_phi3(const char *dir, mlm_error *err) {
    mlm_config c;
    mlm_status st = mlm_config_load(dir, &c, err);
    if (st) return st;
    int64_t h = c.n_embd, v = c.n_vocab, ff = c.n_ff, hd = c.head_dim;
    int64_t qkv = (c.n_head + 2 * c.n_kv_head) * hd;
    enum { MAXT = 64 };
    mlm_tensor_spec t[MAXT];
    static char names[MAXT][96];
    int n = 0;
#define SPEC(nm, r, cc)                                                                            \
    do {                                                                                           \
        snprintf(names[n], sizeof names[n], "%s", nm);                                             \
        t[n] = (mlm_tensor_spec){names[n], MLM_DTYPE_BF16, (cc) != 0 ? 2 : 1, {(r), (cc)}};        \
        n++;                                                                                       \
    } while (0)
    SPEC("lm_head.weight", v, h);
    SPEC("model.embed_tokens.weight", v, h);
    SPEC("model.norm.weight", h, 0);
    for (int l = 0; l < c.n_layer && n + 6 <= MAXT; l++) {
        char nm[96];
        snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l);
        SPEC(nm, h, 0);
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.down_proj.weight", l);
        SPEC(nm, h, ff);
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.gate_up_proj.weight", l);
        SPEC(nm, 2 * ff, h);
        snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l);
        SPEC(nm, h, 0);
        snprintf(nm, sizeof nm, "model.layers.%d.self_attn.o_proj.weight", l);
        SPEC(nm, h, c.n_head * hd);
        snprintf(nm, sizeof nm, "model.layers.%d.self_attn.qkv_proj.weight", l);
        SPEC(nm, qkv, h);
    }
#undef SPEC
    mlm_safetensors_writer *w;
    if ((st = mlm_safetensors_writer_create(dir, "model", t, n, 0, &w, err))) return st;
    static const unsigned char zero[1 << 16];
    uint64_t left = 0;
    for (int i = 0; i < n; i++)
        left += mlm_tensor_spec_bytes(&t[i]);
    while (!st && left) {
        size_t k = left < sizeof zero ? (size_t)left : sizeof zero;
        st = mlm_safetensors_writer_write(w, zero, k, err);
        left -= k;
    }
    if (!st) st = mlm_safetensors_writer_finish(w, err);
    if (!st) st = mlm_safetensors_writer_commit(w, err);
    mlm_safetensors_writer_free(w);
    return st;
}

/* The model directory of CASE: models/default itself, or a scratch directory named as the
 * fixture script named it, with the model's files and the tokenizer linked in. */
static int case_dir(const char *tmp, const char *name, const json_t *c, char *dir, size_t cap) {
    const char *src = json_string_value(json_object_get(c, "source"));
    const char *base = json_string_value(json_object_get(c, "basename"));
    const char *tok = json_string_value(json_object_get(c, "tokenizer"));
    if (!strcmp(tok, "llama3")) {
        snprintf(dir, cap, "%s", src);
        return 1;
    }
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s/%s", tmp, name);
    if ((size_t)snprintf(dir, cap, "%s/%s", parent, base) >= cap) return 0;
    if (mkdir(parent, 0755) || mkdir(dir, 0755)) return 0;
    int ok = link_into(dir, src, "config.json") && link_into(dir, src, "generation_config.json");
    if (strcmp(name, "phi4tok")) ok = ok && link_into(dir, src, "model.safetensors");
    if (!strcmp(tok, "toy") || !strcmp(tok, "toyq")) {
        const char *t = !strcmp(tok, "toy") ? "tests/data/gguf/tok512" : "tests/data/gguf/tok512q";
        ok = ok && link_into(dir, t, "tokenizer.json") && link_into(dir, t, "tokenizer_config.json");
    } else if (!strcmp(tok, "phi4")) {
        const char *p4 = "tests/data/tokenizer/phi4";
        ok = ok && link_into(dir, p4, "tokenizer.json") &&
             link_into(dir, p4, "tokenizer_config.json") &&
             link_into(dir, p4, "special_tokens_map.json");
    }
    if (ok && !strcmp(name, "phi4tok")) {
        mlm_error err;
        if (write_zero_phi3(dir, &err) != MLM_OK) {
            printf("  %s\n", err.msg);
            ok = 0;
        }
    }
    return ok;
}

static const char *value_type_of(const char *t) {
    static const char *const map[][2] = {{"str", "string"}, {"uint32", "u32"}, {"int32", "i32"},
                                         {"f32", "f32"},    {"bool", "bool"},  {"arr", "array"},
                                         {"uint64", "u64"}, {"int64", "i64"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(map[i][0], t)) return map[i][1];
    return "?";
}

/* Compares one key-value pair with its expected [key, type, value]; returns 1 when equal. */
static int same_kv(const mlm_gguf_kv *kv, const json_t *e, char *why, size_t cap) {
    const char *key = json_string_value(json_array_get(e, 0));
    const char *type = json_string_value(json_array_get(e, 1));
    const json_t *val = json_array_get(e, 2);
    const mlm_gguf_value *v = &kv->value;
    char hex[65];
    if (strcmp(kv->key, key)) {
        snprintf(why, cap, "key '%s', expected '%s'", kv->key, key);
        return 0;
    }
    if (strcmp(mlm_gguf_type_name(v->type), value_type_of(type))) {
        snprintf(why, cap, "'%s' is %s, expected %s", key, mlm_gguf_type_name(v->type), type);
        return 0;
    }
    int ok = 1;
    switch (v->type) {
    case MLM_GGUF_STRING:
        sha256_hex(v->str, v->len, hex);
        ok = (json_int_t)v->len == json_integer_value(json_object_get(val, "len")) &&
             !strcmp(hex, json_string_value(json_object_get(val, "sha256")));
        snprintf(why, cap, "'%s' = '%.*s' (%llu bytes), expected '%s'", key,
                 (int)(v->len < 80 ? v->len : 80), v->str, (unsigned long long)v->len,
                 json_string_value(json_object_get(val, "value"))
                     ? json_string_value(json_object_get(val, "value"))
                     : "(long)");
        break;
    case MLM_GGUF_F32: {
        float f = (float)v->f;
        uint32_t bits;
        memcpy(&bits, &f, 4);
        ok = (json_int_t)bits == json_integer_value(json_object_get(val, "bits"));
        snprintf(why, cap, "'%s' = %.9g, expected %.9g", key, v->f,
                 json_number_value(json_object_get(val, "value")));
        break;
    }
    case MLM_GGUF_BOOL:
        ok = (int)v->u == json_is_true(val);
        snprintf(why, cap, "'%s' = %d, expected %d", key, (int)v->u, json_is_true(val));
        break;
    case MLM_GGUF_ARRAY: {
        const char *elem = json_string_value(json_object_get(val, "elem"));
        sha256_hex(v->data, v->size - 12, hex);
        ok = (json_int_t)v->n == json_integer_value(json_object_get(val, "n")) &&
             !strcmp(mlm_gguf_type_name(v->elem_type), !strcmp(elem, "string")  ? "string"
                                                       : !strcmp(elem, "int32") ? "i32"
                                                                                : elem) &&
             !strcmp(hex, json_string_value(json_object_get(val, "sha256")));
        snprintf(why, cap, "'%s': %llu x %s, expected %lld x %s (or different contents)", key,
                 (unsigned long long)v->n, mlm_gguf_type_name(v->elem_type),
                 (long long)json_integer_value(json_object_get(val, "n")), elem);
        break;
    }
    default:
        ok = json_is_integer(val) && (v->type == MLM_GGUF_I32 || v->type == MLM_GGUF_I64
                                          ? v->i == json_integer_value(val)
                                          : (json_int_t)v->u == json_integer_value(val));
        snprintf(why, cap, "'%s' = %lld, expected %lld", key,
                 (long long)(v->type == MLM_GGUF_I32 ? v->i : (int64_t)v->u),
                 (long long)json_integer_value(val));
    }
    return ok;
}

/* The export of case NAME in DTYPE at PATH against the expected summary C. */
static void compare(const char *name, const char *dtype, const char *path, const json_t *c) {
    mlm_gguf *g;
    mlm_error err;
    CHECK_OK(mlm_gguf_open(path, &g, &err), &err);
    if (!g) return;
    const json_t *kv = json_object_get(c, "kv"), *tensors = json_object_get(c, "tensors");
    const json_t *dt = json_object_get(json_object_get(c, "dtypes"), dtype);
    int64_t fta = json_integer_value(json_object_get(c, "file_type_at"));
    int bad = 0;
    CHECKF(mlm_gguf_n_kv(g) == (int64_t)json_array_size(kv) + 1, "%s/%s: %lld keys, expected %zu",
           name, dtype, (long long)mlm_gguf_n_kv(g), json_array_size(kv) + 1);
    for (int64_t i = 0; i < mlm_gguf_n_kv(g) && bad < 5; i++) {
        const mlm_gguf_kv *k = mlm_gguf_kv_at(g, i);
        char why[512];
        if (i == fta) {
            int ok = !strcmp(k->key, "general.file_type") && k->value.type == MLM_GGUF_U32 &&
                     (json_int_t)k->value.u == json_integer_value(json_object_get(dt, "file_type"));
            CHECKF(ok, "%s/%s: key %lld is '%s', expected general.file_type", name, dtype,
                   (long long)i, k->key);
            bad += !ok;
            continue;
        }
        const json_t *e = json_array_get(kv, (size_t)(i < fta ? i : i - 1));
        if (!e) break;
        int ok = same_kv(k, e, why, sizeof why);
        CHECKF(ok, "%s/%s: key %lld: %s", name, dtype, (long long)i, why);
        bad += !ok;
    }
    CHECKF(mlm_gguf_n_tensors(g) == (int64_t)json_array_size(tensors),
           "%s/%s: %lld tensors, expected %zu", name, dtype, (long long)mlm_gguf_n_tensors(g),
           json_array_size(tensors));
    const json_t *types = json_object_get(dt, "types"), *shas = json_object_get(dt, "sha256");
    for (int64_t i = 0;
         i < mlm_gguf_n_tensors(g) && i < (int64_t)json_array_size(tensors) && bad < 10; i++) {
        const mlm_gguf_tensor *t = mlm_gguf_tensor_at(g, i);
        const json_t *e = json_array_get(tensors, (size_t)i), *ne = json_array_get(e, 1);
        const char *ename = json_string_value(json_array_get(e, 0));
        int ok = !strcmp(t->name, ename) && t->n_dim == (int)json_array_size(ne);
        for (int d = 0; ok && d < t->n_dim; d++)
            ok = t->ne[d] == json_integer_value(json_array_get(ne, (size_t)d));
        CHECKF(ok, "%s/%s: tensor %lld is '%s' (%d dims), expected '%s'", name, dtype, (long long)i,
               t->name, t->n_dim, ename);
        char hex[65];
        sha256_hex(t->data, t->nbytes, hex);
        int same_type = (json_int_t)t->type == json_integer_value(json_array_get(types, (size_t)i));
        int same_data = !strcmp(hex, json_string_value(json_array_get(shas, (size_t)i)));
        CHECKF(same_type && same_data, "%s/%s: tensor '%s': %s, %s", name, dtype, t->name,
               same_type ? "same type" : "other type", same_data ? "same bytes" : "other bytes");
        bad += !ok || !same_type || !same_data;
    }
    mlm_gguf_free(g);
}

/* Exports every case of the summary file EXPECTED_FILE and compares; returns the count. */
static int export_cases(const char *expected_file) {
    json_error_t je;
    json_t *exp = json_load_file(expected_file, 0, &je);
    CHECKF(exp, "%s: %s", expected_file, je.text);
    if (!exp) return 0;
    char tmp[64];
    if (harness_tmpdir(tmp, sizeof tmp, "gguf-export")) {
        json_decref(exp);
        CHECKF(0, "no temporary directory");
        return 0;
    }
    const char *name;
    json_t *c;
    int n_cases = 0;
    json_object_foreach(json_object_get(exp, "cases"), name, c) {
        char dir[PATH_MAX];
        CHECKF(case_dir(tmp, name, c, dir, sizeof dir), "%s: cannot build %s", name, dir);
        static const char *const dtypes[3] = {"f32", "f16", "bf16"};
        static const mlm_dtype dts[3] = {MLM_DTYPE_F32, MLM_DTYPE_F16, MLM_DTYPE_BF16};
        for (int d = 0; d < 3; d++) {
            char out[PATH_MAX];
            snprintf(out, sizeof out, "%s/%s-%s.gguf", tmp, name, dtypes[d]);
            mlm_error err;
            mlm_status st = mlm_export_gguf(dir, out, dts[d], &err);
            CHECKF(st == MLM_OK, "%s/%s: %s", name, dtypes[d], err.msg);
            if (st == MLM_OK) compare(name, dtypes[d], out, c);
            unlink(out);
        }
        n_cases++;
    }
    json_decref(exp);
    harness_rmtree(tmp);
    return n_cases;
}

TEST(export_matches_convert_hf_to_gguf) { CHECK(export_cases(EXPECTED) == 6); }

/* Qwen2 (q/k/v biases, tied and untied) and Qwen3 (q/k norms, head_dim 64 and 32): the
 * summary a later llama.cpp's convert wrote (make_gguf_fixtures.py --qwen). */
TEST(export_qwen_matches_convert_hf_to_gguf) {
    CHECK(export_cases("tests/data/gguf/expected_qwen.json") == 4);
}

static int same_value(const mlm_gguf_value *x, const mlm_gguf_value *y) {
    if (x->type != y->type || x->size != y->size) return 0;
    if (x->type == MLM_GGUF_STRING) return x->len == y->len && !memcmp(x->str, y->str, x->len);
    if (x->type == MLM_GGUF_ARRAY)
        return x->elem_type == y->elem_type && x->n == y->n &&
               !memcmp(x->data, y->data, x->size - 12);
    return x->u == y->u && x->i == y->i && (x->f == y->f || (x->f != x->f && y->f != y->f));
}

/* A directory with the files NAMES of SRC and the toy tokenizer linked in. */
static int toy_dir(const char *dir, const char *src, const char *const *names) {
    if (mkdir(dir, 0755)) return 0;
    int ok = link_into(dir, "tests/data/gguf/tok512", "tokenizer.json") &&
             link_into(dir, "tests/data/gguf/tok512", "tokenizer_config.json");
    for (; ok && *names; names++)
        ok = link_into(dir, src, *names);
    return ok;
}

/* Meta consolidated checkpoints (one shard, two model-parallel shards) export to the same
 * file as their Hugging Face twins: the loader puts q/k in HF order, the export puts them back
 * in Meta's. Only general.name (the directory's name) differs. */
TEST(export_meta_equals_hf) {
    static const char *const hf_files[] = {"config.json", "generation_config.json",
                                           "model.safetensors", NULL};
    static const char *const meta_files[] = {"params.json", "consolidated.00.pth", NULL};
    static const char *const meta2_files[] = {"params.json", "consolidated.00.pth",
                                              "consolidated.01.pth", NULL};
    static const struct {
        const char *fixture, *meta;
        const char *const *files;
    } cases[] = {{"gqa4_hd64_tied_r32", "meta", meta_files},
                 {"mha_hd128_untied_r8", "meta", meta_files},
                 {"mha_hd128_untied_r8", "meta2", meta2_files}};
    char tmp[64];
    if (harness_tmpdir(tmp, sizeof tmp, "gguf-meta")) SKIP("no temporary directory");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char src[128], hf[160], meta[160], a[192], b[192];
        mlm_error err;
        snprintf(hf, sizeof hf, "%s/hf%zu", tmp, i);
        snprintf(meta, sizeof meta, "%s/meta%zu", tmp, i);
        snprintf(src, sizeof src, "tests/data/llama/%s/hf", cases[i].fixture);
        CHECK(toy_dir(hf, src, hf_files));
        snprintf(src, sizeof src, "tests/data/llama/%s/%s", cases[i].fixture, cases[i].meta);
        CHECK(toy_dir(meta, src, cases[i].files));
        snprintf(a, sizeof a, "%s/a.gguf", tmp);
        snprintf(b, sizeof b, "%s/b.gguf", tmp);
        CHECK_OK(mlm_export_gguf(hf, a, MLM_DTYPE_BF16, &err), &err);
        CHECK_OK(mlm_export_gguf(meta, b, MLM_DTYPE_BF16, &err), &err);
        mlm_gguf *ga = NULL, *gb = NULL;
        CHECK_OK(mlm_gguf_open(a, &ga, &err), &err);
        CHECK_OK(mlm_gguf_open(b, &gb, &err), &err);
        if (!ga || !gb) {
            mlm_gguf_free(ga);
            mlm_gguf_free(gb);
            continue;
        }
        CHECK(mlm_gguf_n_kv(ga) == mlm_gguf_n_kv(gb) &&
              mlm_gguf_n_tensors(ga) == mlm_gguf_n_tensors(gb));
        for (int64_t k = 0; k < mlm_gguf_n_kv(ga) && k < mlm_gguf_n_kv(gb); k++) {
            const mlm_gguf_kv *x = mlm_gguf_kv_at(ga, k), *y = mlm_gguf_kv_at(gb, k);
            if (!strcmp(x->key, "general.name")) continue;
            CHECKF(!strcmp(x->key, y->key) && same_value(&x->value, &y->value),
                   "%s/%s: key '%s' vs '%s'", cases[i].fixture, cases[i].meta, x->key, y->key);
        }
        for (int64_t t = 0; t < mlm_gguf_n_tensors(ga) && t < mlm_gguf_n_tensors(gb); t++) {
            const mlm_gguf_tensor *x = mlm_gguf_tensor_at(ga, t), *y = mlm_gguf_tensor_at(gb, t);
            CHECKF(!strcmp(x->name, y->name) && x->nbytes == y->nbytes &&
                       !memcmp(x->data, y->data, x->nbytes),
                   "%s/%s: tensor '%s' differs from '%s'", cases[i].fixture, cases[i].meta, x->name,
                   y->name);
        }
        mlm_gguf_free(ga);
        mlm_gguf_free(gb);
    }
    harness_rmtree(tmp);
}

TEST(export_errors) {
    char tmp[64], out[128];
    if (harness_tmpdir(tmp, sizeof tmp, "gguf-err")) SKIP("no temporary directory");
    snprintf(out, sizeof out, "%s/x.gguf", tmp);
    mlm_error err;
    /* the fixture models have no tokenizer: a GGUF without one is refused */
    CHECK(mlm_export_gguf("tests/data/llama/gqa4_hd64_tied_r32/hf", out, MLM_DTYPE_F16, &err) ==
          MLM_ERR_IO);
    CHECK(strstr(err.msg, "tests/data/llama/gqa4_hd64_tied_r32/hf has no tokenizer") != NULL);
    CHECK(mlm_export_gguf("models/default", out, MLM_DTYPE_I8, &err) == MLM_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "dtype i8 is not f32, f16 or bf16") != NULL);
    CHECK(mlm_export_gguf("/nonexistent/model", out, MLM_DTYPE_F16, &err) == MLM_ERR_IO);
    CHECK(mlm_export_gguf("models/default", "/nonexistent-dir/x.gguf", MLM_DTYPE_F16, &err) ==
          MLM_ERR_IO);
    CHECK(strstr(err.msg, "/nonexistent-dir/x.gguf") != NULL);
    CHECK(access(out, F_OK) != 0);
    /* a pre-tokenizer llama.cpp has no name for */
    char dir[128];
    snprintf(dir, sizeof dir, "%s/m", tmp);
    CHECK(mkdir(dir, 0755) == 0);
    const char *src = "tests/data/llama/gqa4_hd64_tied_r32/hf";
    CHECK(link_into(dir, src, "config.json") && link_into(dir, src, "model.safetensors"));
    size_t len;
    char *tj = harness_read_file("tests/data/gguf/tok512/tokenizer.json", &len);
    CHECK(tj != NULL);
    if (tj) {
        char *p = strstr(tj, "{1,3}");
        CHECK(p != NULL);
        if (p) p[3] = '4'; /* \\p{N}{1,4}: a valid regex, but not Llama 3's */
        char path[160];
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        CHECK(harness_write_file(path, tj, len) == 0);
        mlm_status st = mlm_export_gguf(dir, out, MLM_DTYPE_F16, &err);
        CHECKF(st == MLM_ERR_UNSUPPORTED && strstr(err.msg, "has no llama.cpp name"), "%s: %s",
               mlm_status_str(st), err.msg);
        free(tj);
    }
    harness_rmtree(tmp);
}

TEST(cli_export) {
    char tmp[64], args[512], out[4096];
    if (harness_tmpdir(tmp, sizeof tmp, "gguf-cli")) SKIP("no temporary directory");
    CHECK(harness_run_meshlm("export --help", out, sizeof out) == 0 && strstr(out, "--gguf OUT"));
    CHECK(harness_run_meshlm("export -m models/default", out, sizeof out) == 2);
    CHECK(strstr(out, "--gguf OUT is required") != NULL);
    snprintf(args, sizeof args, "export -m models/default --gguf %s/a.gguf --dtype q4", tmp);
    CHECK(harness_run_meshlm(args, out, sizeof out) == 2 && strstr(out, "--dtype must be"));
    snprintf(args, sizeof args, "export -m tests/data/phi3/gqa4_hd32/hf --gguf %s/a.gguf", tmp);
    CHECK(harness_run_meshlm(args, out, sizeof out) == 1 && strstr(out, "has no tokenizer"));
    /* auto: models/default is bf16, so the export is bf16 (file type 32) */
    snprintf(args, sizeof args, "export -m models/default --gguf %s/d.gguf", tmp);
    CHECKF(harness_run_meshlm(args, out, sizeof out) == 0, "%s", out);
    char path[128];
    snprintf(path, sizeof path, "%s/d.gguf", tmp);
    mlm_gguf *g;
    mlm_error err;
    CHECK_OK(mlm_gguf_open(path, &g, &err), &err);
    uint64_t ft = 99;
    if (g) CHECK(mlm_gguf_get_uint(g, "general.file_type", &ft, &err) == MLM_OK && ft == 32);
    mlm_gguf_free(g);
    harness_rmtree(tmp);
}

int main(void) {
    RUN(reader_valid_file);
    RUN(reader_every_type_and_nesting);
    RUN(reader_truncated_everywhere);
    RUN(reader_malformed);
    RUN(writer_round_trip);
    RUN(writer_errors);
    RUN(export_matches_convert_hf_to_gguf);
    RUN(export_qwen_matches_convert_hf_to_gguf);
    RUN(export_meta_equals_hf);
    RUN(export_errors);
    RUN(cli_export);
    return HARNESS_END();
}
