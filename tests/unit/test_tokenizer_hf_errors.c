/* test_tokenizer_hf_errors.c: malformed and unsupported Hugging Face tokenizer files.
 * Every case starts from a minimal valid tokenizer.json built here (the 256 byte-level
 * characters, "ab" = 256 with the merge "a b", a Split + ByteLevel pre-tokenizer), changes
 * one field, writes it to a temporary file and loads it: the status must be FORMAT or
 * UNSUPPORTED as expected and the message must name the file and the component or field.
 * The same for the vocab.json + merges.txt + tokenizer_config.json layout. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "meshlm.h"
#include "tokenizer/bytelevel.h"

static char g_dir[64]; /* scratch directory for the files */

/* The byte-level spelling of byte B (UTF-8, NUL-terminated). */
static void spell(unsigned char b, char out[4]) {
    uint32_t cp = mlm_bytelevel_char(b);
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

static json_t *base_doc(void) {
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        char s[4];
        spell((unsigned char)b, s);
        json_object_set_new(vocab, s, json_integer(b));
    }
    json_object_set_new(vocab, "ab", json_integer(256));
    json_t *doc = json_pack(
        "{s:s, s:n, s:n, s:[], s:n, s:{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]},"
        " s:n, s:{s:s, s:b, s:b, s:b}, s:{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:o, s:[s]}}",
        "version", "1.0", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer",
        "type", "Sequence", "pretokenizers", "type", "Split", "pattern", "Regex", "\\w+|\\s+|.",
        "behavior", "Isolated", "invert", 0, "type", "ByteLevel", "add_prefix_space", 0,
        "trim_offsets", 1, "use_regex", 0, "post_processor", "decoder", "type", "ByteLevel",
        "add_prefix_space", 1, "trim_offsets", 1, "use_regex", 1, "model", "type", "BPE", "dropout",
        "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 0,
        "byte_fallback", 0, "ignore_merges", 1, "vocab", vocab, "merges", "a b");
    return doc;
}

/* Sets KEY ("x" or "model.x" or "model.vocab.x") of DOC to the JSON text VALUE (NULL:
 * delete the key). */
static void set(json_t *doc, const char *key, const char *value) {
    json_t *obj = doc;
    if (strncmp(key, "model.vocab.", 12) == 0) {
        obj = json_object_get(json_object_get(doc, "model"), "vocab");
        key += 12;
    } else if (strncmp(key, "model.", 6) == 0) {
        obj = json_object_get(doc, "model");
        key += 6;
    }
    if (!value) {
        json_object_del(obj, key);
        return;
    }
    json_error_t je;
    json_t *v = json_loads(value, JSON_DECODE_ANY, &je);
    if (!v) printf("  bad test JSON for %s: %s\n", key, je.text);
    json_object_set_new(obj, key, v);
}

/* Loads TEXT from a file; returns the status, the message in ERR. */
static mlm_status load_text(const char *name, const char *text, size_t len, char *path,
                            mlm_error *err) {
    snprintf(path, 256, "%s/%s", g_dir, name);
    if (harness_write_file(path, text, len) != 0) return MLM_ERR_IO;
    mlm_tokenizer *t = (mlm_tokenizer *)1;
    mlm_status st = mlm_tokenizer_load(path, &t, err);
    if (st == MLM_OK)
        mlm_tokenizer_free(t);
    else
        CHECKF(t == NULL, "%s: handle not NULL after failure", name);
    return st;
}

/* Applies KEY = VALUE to the base document and expects WANT with the file name and every
 * NEEDLE (up to three, NULL-terminated) in the message. */
static void expect(const char *key, const char *value, mlm_status want, const char *n1,
                   const char *n2) {
    json_t *doc = base_doc();
    set(doc, key, value);
    char *text = json_dumps(doc, JSON_COMPACT);
    char path[256];
    mlm_error err = {0};
    mlm_status st = load_text("tokenizer.json", text, strlen(text), path, &err);
    CHECKF(st == want, "%s = %.60s: status %s, want %s (%s)", key, value ? value : "(deleted)",
           mlm_status_str(st), mlm_status_str(want), err.msg);
    CHECKF(st == MLM_OK || strstr(err.msg, path) != NULL, "%s: no file name in '%s'", key, err.msg);
    CHECKF(!n1 || strstr(err.msg, n1), "%s: no '%s' in '%s'", key, n1, err.msg);
    CHECKF(!n2 || strstr(err.msg, n2), "%s: no '%s' in '%s'", key, n2, err.msg);
    free(text);
    json_decref(doc);
}

#define UNSUP MLM_ERR_UNSUPPORTED
#define FMT MLM_ERR_FORMAT

TEST(base_is_valid) {
    json_t *doc = base_doc();
    char *text = json_dumps(doc, JSON_COMPACT);
    char path[256];
    mlm_error err = {0};
    CHECK_OK(load_text("tokenizer.json", text, strlen(text), path, &err), &err);
    mlm_tokenizer *t = NULL;
    CHECK_OK(mlm_tokenizer_load(path, &t, &err), &err);
    mlm_tokens ids;
    mlm_tokens_init(&ids);
    CHECK_OK(mlm_tokenizer_encode(t, "abab x", 6, NULL, &ids, &err), &err);
    CHECK(ids.n == 4 && ids.ids[0] == 256 && ids.ids[1] == 256 && ids.ids[2] == ' ' &&
          ids.ids[3] == 'x');
    CHECK(mlm_tokenizer_chat_format(t) == NULL && mlm_tokenizer_chat_stop_ids(t, NULL, 0) == 0);
    mlm_tokens_deinit(&ids);
    mlm_tokenizer_free(t);
    free(text);
    json_decref(doc);
    /* Harmless variants load too. */
    expect("normalizer", "{\"type\":\"Sequence\",\"normalizers\":[]}", MLM_OK, NULL, NULL);
    expect("model.merges", "[[\"a\",\"b\"]]", MLM_OK, NULL, NULL);
    expect("model.merges", "[\"a b\",\"a b\"]", MLM_OK, NULL, NULL);
    expect("model.type", NULL, MLM_OK, NULL, NULL); /* older files: BPE from its fields */
    expect("model.dropout", "0", MLM_OK, NULL, NULL);
    expect("decoder", "null", MLM_OK, NULL, NULL);
    expect("added_tokens", "[{\"id\":257,\"content\":\"\"}]", MLM_OK, NULL, NULL);
}

TEST(unsupported_components) {
    expect("model.type", "\"WordPiece\"", UNSUP, "model", "WordPiece");
    expect("model.type", "\"Unigram\"", UNSUP, "model", "Unigram");
    expect("model.type", "\"WordLevel\"", UNSUP, "model", "WordLevel");
    expect("model.dropout", "0.1", UNSUP, "model", "dropout");
    expect("model.continuing_subword_prefix", "\"##\"", UNSUP, "model",
           "continuing_subword_prefix");
    expect("model.end_of_word_suffix", "\"</w>\"", UNSUP, "model", "end_of_word_suffix");
    /* NFC (Qwen2's) loads, alone or as a one-step Sequence; other normalizers do not */
    expect("normalizer", "{\"type\":\"NFC\"}", MLM_OK, NULL, NULL);
    expect("normalizer", "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"}]}", MLM_OK,
           NULL, NULL);
    expect("normalizer", "{\"type\":\"NFKC\"}", UNSUP, "normalizer", "NFKC");
    expect("normalizer", "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Lowercase\"}]}",
           UNSUP, "normalizer", "Lowercase");
    expect("normalizer",
           "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},{\"type\":\"Lowercase\"}]}",
           UNSUP, "normalizer", "Sequence");
    expect("pre_tokenizer", "null", UNSUP, "pre_tokenizer", "null");
    expect("pre_tokenizer", "{\"type\":\"Whitespace\"}", UNSUP, "pre_tokenizer", "Whitespace");
    expect("pre_tokenizer",
           "{\"type\":\"Metaspace\",\"replacement\":\"_\",\"prepend_scheme\":\"always\"}", UNSUP,
           "pre_tokenizer", "Metaspace");
    /* Digits, every Split behavior, invert and ByteLevel(use_regex) after a Split load now
     * (test_tokenizer_gguf.c checks them against tokenizers); these stay refused. */
    expect(
        "pre_tokenizer",
        "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Punctuation\",\"behavior\":"
        "\"Isolated\"},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}",
        UNSUP, "pre_tokenizer.pretokenizers[0]", "Punctuation");
    expect("pre_tokenizer",
           "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
           "\"a\"},\"behavior\":\"Shuffled\",\"invert\":false},{\"type\":\"ByteLevel\","
           "\"add_prefix_space\":false,\"use_regex\":false}]}",
           UNSUP, "pre_tokenizer.pretokenizers[0]", "Shuffled");
    expect("pre_tokenizer",
           "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"ByteLevel\","
           "\"add_prefix_space\":false,\"use_regex\":false},{\"type\":\"Digits\","
           "\"individual_digits\":true}]}",
           UNSUP, "pre_tokenizer", "Sequence of 2");
    expect("pre_tokenizer",
           "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
           "\"a\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
           "\"add_prefix_space\":true,\"use_regex\":true}]}",
           UNSUP, "pre_tokenizer.pretokenizers[1]", "add_prefix_space");
    expect("pre_tokenizer",
           "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\"},{\"type\":"
           "\"ByteLevel\",\"add_prefix_space\":false}]}",
           FMT, "pre_tokenizer.pretokenizers[0]", "individual_digits");
    expect("pre_tokenizer",
           "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"ByteLevel\",\"add_prefix_space\":"
           "false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false}]}",
           UNSUP, "pre_tokenizer", "Sequence of 2");
    expect("pre_tokenizer",
           "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
           "\"\\\\h+|\\\\s\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
           "\"add_prefix_space\":false,\"use_regex\":false}]}",
           UNSUP, "pre_tokenizer.pretokenizers[0].pattern", "Oniguruma");
    expect("decoder", "{\"type\":\"WordPiece\",\"prefix\":\"##\"}", UNSUP, "decoder", "WordPiece");
    expect("post_processor", "{\"type\":\"RobertaProcessing\"}", UNSUP, "post_processor",
           "RobertaProcessing");
    expect("post_processor",
           "{\"type\":\"TemplateProcessing\",\"single\":[{\"Sequence\":{\"id\":\"A\"}},"
           "{\"SpecialToken\":{\"id\":\"ab\"}}],\"special_tokens\":{\"ab\":{\"ids\":[256]}}}",
           UNSUP, "post_processor", "after");
    expect("post_processor",
           "{\"type\":\"Sequence\",\"processors\":[{\"type\":\"ByteLevel\"},{\"type\":"
           "\"BertProcessing\"}]}",
           UNSUP, "post_processor.processors[1]", "BertProcessing");
    expect("version", "\"2.0\"", UNSUP, "version", "2.0");
}

TEST(malformed_fields) {
    expect("model", NULL, FMT, "model", NULL);
    expect("model.vocab", NULL, FMT, "vocab", NULL);
    expect("model.merges", NULL, FMT, "merges", NULL);
    expect("model.vocab", "[1,2]", FMT, "vocab", "object");
    expect("model.merges", "\"a b\"", FMT, "merges", "array");
    expect("model.ignore_merges", "\"yes\"", FMT, "model", "ignore_merges");
    /* merges */
    expect("model.merges", "[\"a b c\"]", FMT, "model.merges[0]", "one space");
    expect("model.merges", "[\"ab\"]", FMT, "model.merges[0]", "one space");
    expect("model.merges", "[\"a b\", \"a zz\"]", FMT, "model.merges[1]", "zz");
    expect("model.merges", "[\"b a\"]", FMT, "model.merges[0]", "merged token");
    expect("model.merges", "[5]", FMT, "model.merges[0]", "integer");
    expect("model.merges", "[[\"a\"]]", FMT, "model.merges[0]", "pair");
    expect("model.merges", "[\"\\u4e2d b\"]", FMT, "model.merges[0]", "U+4E2D");
    /* vocabulary entries */
    expect("model.vocab.zz", "\"x\"", FMT, "model.vocab", "zz");
    expect("model.vocab.ab", "999", FMT, "model.vocab", "999");
    expect("model.vocab.ab", "-1", FMT, "model.vocab", "-1");
    expect("model.vocab.zz", "5", FMT, "model.vocab", "id 5");
    expect("model.vocab.\xe4\xb8\xad", "257", FMT, "model.vocab", "U+4E2D");
    expect("model.vocab.A", NULL, FMT, "model.vocab", "ids must be"); /* id 65 missing */
    /* added tokens */
    expect("added_tokens", "{}", FMT, "added_tokens", "array");
    expect("added_tokens", "[{\"id\":257}]", FMT, "added_tokens[0]", "content");
    expect("added_tokens", "[{\"content\":\"<x>\"}]", FMT, "added_tokens[0]", "id");
    expect("added_tokens", "[{\"id\":300,\"content\":\"<x>\",\"special\":true}]", FMT,
           "added_tokens[0]", "257");
    expect("added_tokens", "[{\"id\":257,\"content\":\"<x>\"},{\"id\":258,\"content\":\"<x>\"}]",
           FMT, "added_tokens[1]", "twice");
    expect("added_tokens", "[{\"id\":257,\"content\":\"<x>\",\"lstrip\":1}]", FMT,
           "added_tokens[0]", "lstrip");
    char long_token[1200];
    snprintf(long_token, sizeof long_token, "[{\"id\":257,\"content\":\"%01100d\"}]", 7);
    expect("added_tokens", long_token, FMT, "added_tokens[0]", "over the limit");
    /* pre-tokenizer and post-processor fields */
    expect("pre_tokenizer",
           "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
           "\"(a\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
           "\"add_prefix_space\":false,\"use_regex\":false}]}",
           FMT, "pre_tokenizer", "does not compile");
    expect("pre_tokenizer", "{\"type\":\"ByteLevel\",\"use_regex\":true}", FMT, "pre_tokenizer",
           "add_prefix_space");
    expect("pre_tokenizer", "{\"type\":\"Sequence\"}", FMT, "pre_tokenizer", "pretokenizers");
    expect("pre_tokenizer", "[1]", FMT, "pre_tokenizer", "object");
    expect("post_processor",
           "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}},"
           "{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{\"<s>\":{\"ids\":[9999]}}}",
           FMT, "post_processor", "9999");
    expect("post_processor",
           "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}},"
           "{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{}}",
           FMT, "post_processor", "<s>");
}

TEST(not_json) {
    char path[256];
    mlm_error err = {0};
    CHECK(load_text("broken.json", "{\"model\": ", 10, path, &err) == FMT);
    CHECK(strstr(err.msg, path) && strstr(err.msg, "invalid JSON"));
    CHECK(load_text("array.json", "[1, 2]", 6, path, &err) == FMT);
    CHECK(strstr(err.msg, path) && strstr(err.msg, "top level"));
    CHECK(load_text("empty.json", " {}", 3, path, &err) == FMT);
    CHECK(strstr(err.msg, path) && strstr(err.msg, "model"));
}

/* A pattern from a file that backtracks catastrophically ends in an error, not a hang. */
TEST(catastrophic_pattern) {
    json_t *doc = base_doc();
    set(doc, "pre_tokenizer",
        "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
        "\"(a|aa)+\\\\d\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
        "\"add_prefix_space\":false,\"use_regex\":false}]}");
    char *text = json_dumps(doc, JSON_COMPACT);
    char path[256];
    mlm_error err = {0};
    CHECK_OK(load_text("tokenizer.json", text, strlen(text), path, &err), &err);
    mlm_tokenizer *t = NULL;
    CHECK_OK(mlm_tokenizer_load(path, &t, &err), &err);
    char in[64];
    memset(in, 'a', 60);
    in[60] = 'c';
    mlm_tokens ids;
    mlm_tokens_init(&ids);
    CHECK(t && mlm_tokenizer_encode(t, in, 61, NULL, &ids, &err) == UNSUP);
    CHECKF(strstr(err.msg, "catastrophic") != NULL, "%s", err.msg);
    CHECK_OK(mlm_tokenizer_encode(t, "aa1", 3, NULL, &ids, &err), &err); /* still usable */
    mlm_tokens_deinit(&ids);
    mlm_tokenizer_free(t);
    free(text);
    json_decref(doc);
}

// ---- the vocab.json + merges.txt layout ----

/* Writes the base vocabulary as vocab.json, MERGES as merges.txt and CONFIG (or none) as
 * tokenizer_config.json into a fresh subdirectory; loads it and returns the status. */
static mlm_status load_legacy(const char *sub, const char *merges, const char *config, char *dir,
                              mlm_error *err) {
    snprintf(dir, 256, "%s/%s", g_dir, sub);
    char path[320];
    snprintf(path, sizeof path, "mkdir -p '%s'", dir);
    if (system(path) != 0) return MLM_ERR_IO;
    json_t *doc = base_doc();
    char *vocab = json_dumps(json_object_get(json_object_get(doc, "model"), "vocab"), JSON_COMPACT);
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    harness_write_file(path, vocab, strlen(vocab));
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    harness_write_file(path, merges, strlen(merges));
    if (config) {
        snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
        harness_write_file(path, config, strlen(config));
    }
    free(vocab);
    json_decref(doc);
    mlm_tokenizer *t = (mlm_tokenizer *)1;
    mlm_status st = mlm_tokenizer_load(dir, &t, err);
    if (st == MLM_OK) mlm_tokenizer_free(t);
    return st;
}

TEST(legacy_layout_errors) {
    char dir[256];
    mlm_error err = {0};
    CHECK_OK(load_legacy("ok", "#version: 0.2\na b\n", NULL, dir, &err), &err);
    CHECK_OK(load_legacy("crlf", "#version: 0.2\r\na b\r\n", "{\"add_bos_token\":true}", dir, &err),
             &err);
    CHECK(load_legacy("class", "a b\n", "{\"tokenizer_class\":\"Qwen2Tokenizer\"}", dir, &err) ==
          UNSUP);
    CHECK(strstr(err.msg, "Qwen2Tokenizer") && strstr(err.msg, "tokenizer_config.json"));
    CHECK(load_legacy("line", "#version: 0.2\na b\na b c\n", NULL, dir, &err) == FMT);
    CHECK(strstr(err.msg, "merges.txt") && strstr(err.msg, "line 3"));
    CHECK(load_legacy("blank", "a b\n\na b\n", NULL, dir, &err) == FMT);
    CHECK(strstr(err.msg, "merges.txt") && strstr(err.msg, "line 2"));
    CHECK(load_legacy("unknown", "a q\nq b\n", NULL, dir, &err) == FMT);
    CHECK(strstr(err.msg, "merges.txt") && strstr(err.msg, "line 1"));
    CHECK(load_legacy("id", "a b\n",
                      "{\"added_tokens_decoder\":{\"300\":{\"content\":\"<x>\",\"special\":true}}}",
                      dir, &err) == FMT);
    CHECK(strstr(err.msg, "added_tokens_decoder['300']") && strstr(err.msg, "257"));
    CHECK(load_legacy("key", "a b\n", "{\"added_tokens_decoder\":{\"x\":{\"content\":\"<x>\"}}}",
                      dir, &err) == FMT);
    CHECK(strstr(err.msg, "added_tokens_decoder") && strstr(err.msg, "'x'"));
    CHECK(load_legacy("bos", "a b\n", "{\"add_bos_token\":true,\"bos_token\":null}", dir, &err) ==
          FMT);
    CHECK(strstr(err.msg, "bos_token"));
    CHECK(load_legacy("cfg", "a b\n", "[]", dir, &err) == FMT);
    CHECK(strstr(err.msg, "tokenizer_config.json"));
}

int main(void) {
    if (harness_tmpdir(g_dir, sizeof g_dir, "tokhf-bad") != 0) {
        printf("cannot make a scratch directory\n0 passed, 1 failed, 0 skipped\n");
        return 1;
    }
    RUN(base_is_valid);
    RUN(unsupported_components);
    RUN(malformed_fields);
    RUN(not_json);
    RUN(catastrophic_pattern);
    RUN(legacy_layout_errors);
    harness_rmtree(g_dir);
    return HARNESS_END();
}
