/* tests/unit/test_checkpoint.c: the checkpoint readers against files written by real
 * torch.save, Python's zipfile and safetensors (tests/data/ckpt, made by
 * tests/fixtures/make_checkpoint_fixtures.py), and against malformed inputs. */
#include <jansson.h>
#include <stdint.h>
#include <unistd.h>

#include "harness.h"
#include "format/pickle.h"
#include "meshlm.h"

#define CKPT "tests/data/ckpt/"

static char tmpdir[256];

static const char *tmp_path(const char *name) {
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", tmpdir, name);
    return buf;
}

/* Every tensor of REF must be in GOT with the same dtype, shape and exactly equal values. */
static void check_same_tensors(const mlm_checkpoint *ref, const mlm_checkpoint *got,
                               int64_t expect_n) {
    mlm_error err;
    CHECKF(mlm_checkpoint_n_tensors(ref) == expect_n, "ref has %lld tensors",
           (long long)mlm_checkpoint_n_tensors(ref));
    for (int64_t i = 0; i < mlm_checkpoint_n_tensors(ref); i++) {
        const mlm_tensor_view *a = mlm_checkpoint_tensor(ref, i);
        const mlm_tensor_view *b = mlm_checkpoint_find(got, a->name);
        CHECKF(b != NULL, "tensor '%s' missing", a->name);
        if (!b) continue;
        CHECKF(a->dtype == b->dtype && a->n_dim == b->n_dim, "'%s': dtype/rank differ", a->name);
        for (int d = 0; d < a->n_dim && d < b->n_dim; d++)
            CHECKF(a->shape[d] == b->shape[d], "'%s': shape[%d] %lld vs %lld", a->name, d,
                   (long long)a->shape[d], (long long)b->shape[d]);
        int64_t n = mlm_tensor_numel(a);
        int is_int = a->dtype == MLM_DTYPE_I64 || a->dtype == MLM_DTYPE_I32 ||
                     a->dtype == MLM_DTYPE_U8;
        size_t es = is_int ? sizeof(int64_t) : sizeof(float);
        void *va = calloc((size_t)n + 1, es), *vb = calloc((size_t)n + 1, es);
        if (is_int) {
            CHECK_OK(mlm_tensor_to_i64(a, va, n, &err), &err);
            CHECK_OK(mlm_tensor_to_i64(b, vb, n, &err), &err);
        } else {
            CHECK_OK(mlm_tensor_to_f32(a, va, n, &err), &err);
            CHECK_OK(mlm_tensor_to_f32(b, vb, n, &err), &err);
        }
        CHECKF(!memcmp(va, vb, (size_t)n * es), "'%s': values differ", a->name);
        free(va);
        free(vb);
    }
}

static void check_pth_against_safetensors(const char *pth, int64_t expect_n) {
    mlm_error err;
    mlm_checkpoint *ref = NULL, *got = NULL;
    CHECK_OK(mlm_checkpoint_open(CKPT "tensors.safetensors", &ref, &err), &err);
    CHECK_OK(mlm_checkpoint_open(pth, &got, &err), &err);
    if (ref && got) {
        CHECK(mlm_checkpoint_format(got) == MLM_CKPT_PYTORCH);
        CHECK(mlm_checkpoint_format(ref) == MLM_CKPT_SAFETENSORS);
        if (expect_n == 13) {
            CHECK(mlm_checkpoint_n_tensors(ref) == 13);
            check_same_tensors(ref, got, 13);
        } else { /* got is a subset: compare each of its tensors against ref */
            CHECK(mlm_checkpoint_n_tensors(got) == expect_n);
            check_same_tensors(got, ref, expect_n);
        }
    }
    mlm_checkpoint_free(ref);
    mlm_checkpoint_free(got);
}

TEST(pth_protocol2_equals_safetensors) { check_pth_against_safetensors(CKPT "tensors.pth", 13); }
TEST(pth_protocol4_equals_safetensors) {
    check_pth_against_safetensors(CKPT "tensors_p4.pth", 13);
}
TEST(pth_zip64_equals_safetensors) { check_pth_against_safetensors(CKPT "zip64.pth", 13); }
TEST(pth_dotted_folder_name) { check_pth_against_safetensors(CKPT "weird.name.v2.pth", 3); }
TEST(pth_buffer_saved_archive_folder) {
    check_pth_against_safetensors(CKPT "buffer_saved.pth", 3);
}

TEST(pth_views_are_zero_copy_with_strides) {
    mlm_error err;
    mlm_checkpoint *c = NULL;
    CHECK_OK(mlm_checkpoint_open(CKPT "tensors.pth", &c, &err), &err);
    if (!c) return;
    const mlm_tensor_view *wo = mlm_checkpoint_find(c, "layers.0.attention.wo.weight");
    const mlm_tensor_view *x = mlm_checkpoint_find(c, "shared.x");
    const mlm_tensor_view *y = mlm_checkpoint_find(c, "shared.y");
    CHECK(wo && x && y);
    if (wo && x && y) {
        /* torch's transposed view: strides as torch reports them, not a copy */
        CHECK(wo->n_dim == 2 && wo->stride[0] == 1 && wo->stride[1] == 4);
        /* shared storage: y starts 4 elements after x in the same mapped record */
        CHECK((const char *)y->data - (const char *)x->data == 4 * 4);
        size_t fsize;
        const char *fpath = mlm_checkpoint_file(c, 0, &fsize);
        CHECK(fpath && !strcmp(fpath, CKPT "tensors.pth"));
    }
    mlm_checkpoint_free(c);
}

TEST(sharded_safetensors_equals_single_file) {
    mlm_error err;
    mlm_checkpoint *ref = NULL, *got = NULL, *dir = NULL;
    CHECK_OK(mlm_checkpoint_open(CKPT "sharded_all.safetensors", &ref, &err), &err);
    CHECK_OK(mlm_checkpoint_open(CKPT "sharded/model.safetensors.index.json", &got, &err), &err);
    CHECK_OK(mlm_checkpoint_open(CKPT "sharded", &dir, &err), &err);
    if (ref && got && dir) {
        CHECK(mlm_checkpoint_n_files(got) == 2);
        CHECK(mlm_checkpoint_n_tensors(got) == 7 && mlm_checkpoint_n_tensors(dir) == 7);
        check_same_tensors(ref, got, 7);
        check_same_tensors(ref, dir, 7);
    }
    mlm_checkpoint_free(ref);
    mlm_checkpoint_free(got);
    mlm_checkpoint_free(dir);
}

/* A Meta directory of consolidated.NN.pth shards: each shard's tensors under "shard<N>/". */
TEST(meta_consolidated_shards) {
    char dir[300], cmd[1200];
    snprintf(dir, sizeof dir, "%s/meta", tmpdir);
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s && cp " CKPT "tensors.pth %s/consolidated.00.pth && cp " CKPT
             "tensors_p4.pth %s/consolidated.01.pth",
             dir, dir, dir);
    CHECK(system(cmd) == 0);
    mlm_error err;
    mlm_checkpoint *c = NULL, *ref = NULL;
    CHECK(mlm_checkpoint_present(dir));
    CHECK_OK(mlm_checkpoint_open(dir, &c, &err), &err);
    CHECK_OK(mlm_checkpoint_open(CKPT "tensors.safetensors", &ref, &err), &err);
    if (c && ref) {
        CHECK(mlm_checkpoint_n_files(c) == 2 && mlm_checkpoint_n_tensors(c) == 26);
        for (int shard = 0; shard < 2; shard++)
            for (int64_t i = 0; i < mlm_checkpoint_n_tensors(ref); i++) {
                char name[300];
                snprintf(name, sizeof name, "shard%d/%s", shard, mlm_checkpoint_tensor(ref, i)->name);
                const mlm_tensor_view *t = mlm_checkpoint_find(c, name);
                CHECKF(t != NULL, "%s missing", name);
                if (t) CHECK(t->dtype == mlm_checkpoint_tensor(ref, i)->dtype);
            }
    }
    mlm_checkpoint_free(c);
    mlm_checkpoint_free(ref);
}

TEST(refpt_values_and_tensors) {
    mlm_error err;
    mlm_checkpoint *c = NULL;
    json_error_t jerr;
    json_t *j = json_load_file(CKPT "ref_values.json", 0, &jerr);
    CHECK(j != NULL);
    CHECK_OK(mlm_checkpoint_open(CKPT "ref.refpt", &c, &err), &err);
    if (!c || !j) {
        mlm_checkpoint_free(c);
        json_decref(j);
        return;
    }
    int64_t prompt_len = -1;
    CHECK_OK(mlm_checkpoint_get_int(c, "prompt_len", &prompt_len, &err), &err);
    CHECK(prompt_len == json_integer_value(json_object_get(j, "prompt_len")));
    const char *key;
    json_t *val;
    json_object_foreach(json_object_get(j, "metadata"), key, val) {
        char name[128];
        snprintf(name, sizeof name, "metadata.%s", key);
        const char *s = NULL;
        CHECK_OK(mlm_checkpoint_get_str(c, name, &s, &err), &err);
        CHECKF(s && !strcmp(s, json_string_value(val)), "%s", name);
    }
    const char *names[] = {"reference_tokens", "top5_tokens"};
    for (int k = 0; k < 2; k++) {
        const mlm_tensor_view *t = mlm_checkpoint_find(c, names[k]);
        json_t *rows = json_object_get(j, names[k]);
        CHECK(t && t->dtype == MLM_DTYPE_I64 && t->n_dim == 2);
        if (!t) continue;
        CHECK(t->shape[0] == (int64_t)json_array_size(rows));
        int64_t n = mlm_tensor_numel(t);
        int64_t *v = malloc((size_t)n * sizeof *v);
        CHECK_OK(mlm_tensor_to_i64(t, v, n, &err), &err);
        size_t r, cidx;
        json_t *row, *cell;
        int64_t i = 0, bad = 0;
        json_array_foreach(rows, r, row) {
            json_array_foreach(row, cidx, cell) bad += i < n && v[i++] != json_integer_value(cell);
        }
        CHECK(i == n && bad == 0);
        free(v);
    }
    int64_t i64;
    CHECK(mlm_checkpoint_get_int(c, "metadata.model", &i64, &err) == MLM_ERR_INVALID_ARG);
    mlm_checkpoint_free(c);
    json_decref(j);
}

// ---- bad input ----

/* Opens PATH expecting status WANT and a message containing each of the NEEDLES. */
static void expect_fail(const char *path, mlm_status want, const char *n1, const char *n2) {
    mlm_error err = {0};
    mlm_checkpoint *c = (mlm_checkpoint *)1;
    mlm_status st = mlm_checkpoint_open(path, &c, &err);
    CHECKF(st == want, "%s: got %s (%s), want %s", path, mlm_status_str(st), err.msg,
           mlm_status_str(want));
    CHECK(c == NULL);
    if (n1) CHECKF(strstr(err.msg, n1) != NULL, "message '%s' lacks '%s'", err.msg, n1);
    if (n2) CHECKF(strstr(err.msg, n2) != NULL, "message '%s' lacks '%s'", err.msg, n2);
}

TEST(pickle_other_globals_refused) {
    expect_fail(CKPT "evil_global.pth", MLM_ERR_UNSUPPORTED, "evil_global.pth", "datetime");
    expect_fail(CKPT "evil_os.pth", MLM_ERR_UNSUPPORTED, "evil_os.pth", "os.system");
    expect_fail(CKPT "legacy.pth", MLM_ERR_UNSUPPORTED, "legacy.pth", "legacy");
}

/* Writes a safetensors file with header HDR followed by DATA_LEN zero bytes. */
static const char *write_st(const char *name, const char *hdr, size_t data_len) {
    const char *path = tmp_path(name);
    size_t n = strlen(hdr);
    unsigned char *buf = calloc(1, 8 + n + data_len);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, hdr, n);
    harness_write_file(path, buf, 8 + n + data_len);
    free(buf);
    return path;
}

TEST(safetensors_bad_input) {
    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    mlm_error err;
    mlm_checkpoint *c = NULL;
    CHECK_OK(mlm_checkpoint_open(write_st("ok.safetensors", ok, 8), &c, &err), &err);
    mlm_checkpoint_free(c);
    expect_fail(write_st("short.safetensors", ok, 4), MLM_ERR_FORMAT, "'a'", "exceed");
    expect_fail(write_st("shape.safetensors",
                         "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8),
                MLM_ERR_FORMAT, "'a'", "needs 12 bytes");
    expect_fail(write_st("dtype.safetensors",
                         "{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8),
                MLM_ERR_UNSUPPORTED, "unknown dtype 'Q7'", "dtype.safetensors");
    expect_fail(write_st("missing.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8),
                MLM_ERR_FORMAT, "data_offsets", NULL);
    expect_fail(write_st("overlap.safetensors",
                         "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                         8),
                MLM_ERR_FORMAT, "overlap", NULL);
    expect_fail(write_st("dup.safetensors",
                         "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                         8),
                MLM_ERR_FORMAT, "dup.safetensors", "duplicate");
    expect_fail(write_st("json.safetensors", "{\"a\": [1, 2", 0), MLM_ERR_FORMAT, "invalid JSON",
                "line 1");
    /* header length past the end of the file */
    unsigned char big[16] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}'};
    harness_write_file(tmp_path("hdrlen.safetensors"), big, sizeof big);
    expect_fail(tmp_path("hdrlen.safetensors"), MLM_ERR_FORMAT, "header length", "exceeds");
    /* wrong magic: not a JSON header at all */
    harness_write_file(tmp_path("magic.safetensors"), "\x02\0\0\0\0\0\0\0xx", 10);
    expect_fail(tmp_path("magic.safetensors"), MLM_ERR_FORMAT, "magic", NULL);
    harness_write_file(tmp_path("tiny.safetensors"), "abc", 3);
    expect_fail(tmp_path("tiny.safetensors"), MLM_ERR_FORMAT, "too short", NULL);
    expect_fail(tmp_path("does-not-exist.safetensors"), MLM_ERR_IO, "cannot open", NULL);
}

TEST(sharded_index_bad_input) {
    const char *evil = "{\"weight_map\": {\"x\": \"../etc/passwd\"}}";
    harness_write_file(tmp_path("model.safetensors.index.json"), evil, strlen(evil));
    expect_fail(tmp_path("model.safetensors.index.json"), MLM_ERR_FORMAT, "weight_map['x']",
                NULL);
    const char *idx = "{\"weight_map\": {\"zz\": \"ok.safetensors\"}}";
    harness_write_file(tmp_path("idx2.index.json"), idx, strlen(idx));
    expect_fail(tmp_path("idx2.index.json"), MLM_ERR_FORMAT, "'zz'", "not there");
}

/* Copies the first LEN bytes of SRC (or all with one byte changed at FLIP) to tmp NAME. */
static const char *mutate(const char *src, const char *name, size_t len, long flip_at,
                          unsigned char flip_to) {
    size_t n;
    char *buf = harness_read_file(src, &n);
    if (!buf) return "missing-source";
    if (len > n) len = n;
    if (flip_at >= 0 && (size_t)flip_at < len) buf[flip_at] = (char)flip_to;
    harness_write_file(tmp_path(name), buf, len);
    free(buf);
    return tmp_path(name);
}

TEST(pth_bad_input) {
    size_t n;
    char *buf = harness_read_file(CKPT "tensors.pth", &n);
    CHECK(buf != NULL);
    if (!buf) return;
    free(buf);
    /* truncated: the central directory is gone */
    expect_fail(mutate(CKPT "tensors.pth", "trunc.pth", n / 2, -1, 0), MLM_ERR_FORMAT,
                "trunc.pth", "end-of-central-directory");
    /* wrong magic */
    expect_fail(mutate(CKPT "tensors.pth", "magic.pth", n, 0, 'X'), MLM_ERR_FORMAT, "magic.pth",
                "not a zip");
    /* every truncation point and many single-byte corruptions fail cleanly or load */
    for (size_t cut = 0; cut < n; cut += 97) {
        mlm_error err;
        mlm_checkpoint *c = NULL;
        mlm_status st = mlm_checkpoint_open(mutate(CKPT "tensors.pth", "cut.pth", cut, -1, 0), &c,
                                            &err);
        CHECKF(st != MLM_OK && c == NULL, "truncated at %zu loaded", cut);
        mlm_checkpoint_free(c);
    }
    for (size_t at = 0; at < n; at += 13) {
        mlm_error err;
        mlm_checkpoint *c = NULL;
        mlm_status st = mlm_checkpoint_open(mutate(CKPT "tensors.pth", "flip.pth", n, (long)at,
                                                   0xff),
                                            &c, &err);
        CHECK((st == MLM_OK) == (c != NULL));
        CHECK(st == MLM_OK || err.msg[0] != 0);
        mlm_checkpoint_free(c);
    }
}

static mlm_status unpickle(const char *bytes, size_t n, mlm_error *err) {
    mlm_pickle *p = NULL;
    const pk_value *root;
    mlm_status st = mlm_pickle_load("test.pkl", (const unsigned char *)bytes, n, &p, &root, err);
    mlm_pickle_free(p);
    return st;
}

TEST(pickle_opcodes_outside_the_subset) {
    mlm_error err;
    /* protocol-0 STRING opcode */
    CHECK(unpickle("\x80\x02S'a'\n.", 9, &err) == MLM_ERR_UNSUPPORTED);
    CHECKF(strstr(err.msg, "opcode 0x53") && strstr(err.msg, "test.pkl"), "%s", err.msg);
    /* builtins.eval via STACK_GLOBAL */
    const char sg[] = "\x80\x04\x8c\x08" "builtins" "\x8c\x04" "eval" "\x93.";
    CHECK(unpickle(sg, sizeof sg - 1, &err) == MLM_ERR_UNSUPPORTED);
    CHECKF(strstr(err.msg, "builtins.eval") != NULL, "%s", err.msg);
    /* truncated string, missing STOP, memo get before put, empty stack */
    CHECK(unpickle("\x80\x02X\xff\x00\x00\x00ab", 9, &err) == MLM_ERR_FORMAT);
    CHECK(unpickle("\x80\x02}", 3, &err) == MLM_ERR_FORMAT);
    CHECK(unpickle("\x80\x02h\x05.", 5, &err) == MLM_ERR_FORMAT);
    CHECK(unpickle("\x80\x02R.", 4, &err) == MLM_ERR_FORMAT);
    CHECK(unpickle("\x80\x02u.", 4, &err) == MLM_ERR_FORMAT);
    /* a well-formed dict of an int passes */
    const char ok[] = "\x80\x02}q\x00X\x01\x00\x00\x00" "a" "K\x05s.";
    CHECK_OK(unpickle(ok, sizeof ok - 1, &err), &err);
}

int main(void) {
    if (harness_tmpdir(tmpdir, sizeof tmpdir, "ckpt") != 0) return 1;
    RUN(pth_protocol2_equals_safetensors);
    RUN(pth_protocol4_equals_safetensors);
    RUN(pth_zip64_equals_safetensors);
    RUN(pth_dotted_folder_name);
    RUN(pth_buffer_saved_archive_folder);
    RUN(pth_views_are_zero_copy_with_strides);
    RUN(sharded_safetensors_equals_single_file);
    RUN(meta_consolidated_shards);
    RUN(refpt_values_and_tensors);
    RUN(pickle_other_globals_refused);
    RUN(safetensors_bad_input);
    RUN(sharded_index_bad_input);
    RUN(pth_bad_input);
    RUN(pickle_opcodes_outside_the_subset);
    harness_rmtree(tmpdir);
    return HARNESS_END();
}
