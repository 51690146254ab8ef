/* tests/unit/test_cli.c: the meshlm command as a user runs it: exit codes (0 ok, 1 runtime,
 * 2 usage), messages that name the file and field, --help for every flag, and token ids
 * against llama.cpp's Llama 3 test vectors. The binary is $MESHLM (default build/meshlm). */
#include <jansson.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static char tmpdir[256];
static char out[1 << 16];

/* Runs "meshlm ARGS" with stderr merged into OUT; returns the exit status. */
static int run(const char *args) { return harness_run_meshlm(args, out, sizeof out); }

#define EXPECT(args, code, needle) HARNESS_EXPECT_MESHLM(out, args, code, needle)

TEST(usage_and_help) {
    EXPECT("", 2, "usage: meshlm");
    EXPECT("--help", 0, "tokenize");
    EXPECT("frobnicate", 2, "unknown command 'frobnicate'");
    EXPECT("--version", 0, "meshlm ");
    const char *info_flags[] = {"--model", "--json", "--help"};
    EXPECT("info --help", 0, "usage: meshlm info");
    for (int i = 0; i < 3; i++) CHECKF(strstr(out, info_flags[i]), "info --help lacks %s", info_flags[i]);
    const char *tok_flags[] = {"--model", "--tokenizer", "--file", "--chat", "--system", "--bos",
                               "--parse-special", "--decode", "--json", "--help"};
    EXPECT("tokenize --help", 0, "usage: meshlm tokenize");
    for (int i = 0; i < 10; i++) CHECKF(strstr(out, tok_flags[i]), "tokenize --help lacks %s", tok_flags[i]);
    EXPECT("info", 2, "-m PATH or --system is required");
    EXPECT("info -m", 2, "-m needs a path");
    EXPECT("tokenize -m tests/data/tokenizer/llama3", 2, "give TEXT");
    EXPECT("tokenize --tokenizer x --frob y", 2, "unknown option '--frob'");
}

TEST(bad_files_exit_1_naming_file_and_field) {
    EXPECT("info -m tests/data/ckpt/evil_os.pth", 1, "os.system");
    CHECK(strstr(out, "evil_os.pth") != NULL);
    EXPECT("info -m tests/data/ckpt/legacy.pth", 1, "legacy");
    EXPECT("info -m /nonexistent/model.safetensors", 1, "/nonexistent/model.safetensors");
    char path[512], args[700];
    snprintf(path, sizeof path, "%s/config.json", tmpdir);
    const char *cfg = "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 8}";
    harness_write_file(path, cfg, strlen(cfg));
    snprintf(args, sizeof args, "info -m %s", tmpdir);
    EXPECT(args, 1, "missing field 'num_hidden_layers'");
    CHECK(strstr(out, "config.json") != NULL);
    snprintf(path, sizeof path, "%s/bad.model", tmpdir);
    harness_write_file(path, "IQ== 0\nnot-base64!! 1\n", 22);
    snprintf(args, sizeof args, "tokenize --tokenizer %s hi", path);
    EXPECT(args, 1, "bad.model");
    CHECKF(strstr(out, "line 2") != NULL, "no line number: %s", out);
    snprintf(path, sizeof path, "%s/trunc.safetensors", tmpdir);
    harness_write_file(path, "\x40\0\0\0\0\0\0\0{\"a\":", 13);
    snprintf(args, sizeof args, "info -m %s", path);
    EXPECT(args, 1, "trunc.safetensors");
}

/* The CLI's ids for llama.cpp's Llama 3 vector cases equal the .out lines. */
TEST(tokenize_matches_llamacpp_vectors) {
    size_t ni, no;
    char *inp = harness_read_file("tests/data/llamacpp/ggml-vocab-llama-bpe.gguf.inp", &ni);
    char *exp = harness_read_file("tests/data/llamacpp/ggml-vocab-llama-bpe.gguf.out", &no);
    CHECK(inp && exp);
    if (!inp || !exp) {
        free(inp);
        free(exp);
        return;
    }
    const char *sep = "\n__ggml_vocab_test__\n";
    char *p = inp, *line = exp;
    int n_cases = 0;
    char path[512], args[700];
    snprintf(path, sizeof path, "%s/case.txt", tmpdir);
    while (*p) {
        char *end = strstr(p, sep);
        if (!end) break;
        harness_write_file(path, p, (size_t)(end - p));
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        snprintf(args, sizeof args, "tokenize --tokenizer tests/data/tokenizer/llama3/tokenizer.model -f %s", path);
        int rc = run(args);
        char *o = out;
        while (*o == ' ') o++;
        size_t ol = strlen(o);
        if (ol && o[ol - 1] == '\n') o[--ol] = 0;
        const char *want = line;
        while (*want == ' ') want++;
        CHECKF(rc == 0 && !strcmp(o, want), "case %d: got '%s' want '%s'", n_cases, o, want);
        n_cases++;
        p = end + strlen(sep);
        line = nl ? nl + 1 : line + strlen(line);
    }
    CHECK(n_cases == 44);
    free(inp);
    free(exp);
}

TEST(json_outputs_parse) {
    EXPECT("info --json -m tests/data/ckpt/tensors.safetensors", 0, "\"n_tensors\"");
    json_error_t jerr;
    json_t *j = json_loads(out, 0, &jerr);
    CHECKF(j != NULL, "info --json is not JSON: %s", jerr.text);
    CHECK(json_is_integer(json_object_get(j, "params")) && json_is_array(json_object_get(j, "files")));
    json_decref(j);
    EXPECT("tokenize --json --tokenizer tests/data/tokenizer/llama3/tokenizer.model 'Hello world'", 0,
           "\"ids\"");
    j = json_loads(out, 0, &jerr);
    CHECKF(j != NULL, "tokenize --json is not JSON: %s", jerr.text);
    CHECK(json_array_size(json_object_get(j, "ids")) == json_array_size(json_object_get(j, "tokens")));
    json_decref(j);
    /* --decode gives the text back */
    EXPECT("tokenize --decode --tokenizer tests/data/tokenizer/llama3/tokenizer.model '9906 1917'", 0,
           "Hello world");
    EXPECT("tokenize --decode --tokenizer tests/data/tokenizer/llama3/tokenizer.model '9906,999999'", 1,
           "999999");
}

/* generate on the transformers fixture: the CLI's greedy ids equal generate()'s. */
TEST(generate_greedy_and_errors) {
    json_error_t jerr;
    json_t *ref = json_load_file("tests/data/llama/gqa4_hd64_tied_r32/reference.json", 0, &jerr);
    CHECK(ref != NULL);
    if (!ref) return;
    json_t *greedy = json_object_get(ref, "greedy");
    char ids[512] = "", args[1024];
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(greedy, "prompt"), i, v)
        snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%lld", i ? "," : "",
                 (long long)json_integer_value(v));
    snprintf(args, sizeof args,
             "generate -m tests/data/llama/gqa4_hd64_tied_r32/hf --dtype f32 -n 16 --json "
             "--prompt-ids %s",
             ids);
    EXPECT(args, 0, "\"generated_ids\"");
    json_t *got = json_loads(out, 0, &jerr);
    CHECKF(got != NULL, "generate --json is not JSON: %s", out);
    json_t *gen = json_object_get(got, "generated_ids");
    CHECK(json_array_size(gen) == 16);
    for (size_t k = 0; k < json_array_size(gen); k++)
        CHECK(json_integer_value(json_array_get(gen, k)) ==
              json_integer_value(json_array_get(json_object_get(greedy, "generated"), k)));
    json_decref(got);
    json_decref(ref);
    const char *flags[] = {"--model", "--prompt", "--prompt-file", "--prompt-ids", "--instruct",
                           "--system", "--max-new-tokens", "--temperature", "--top-k", "--top-p",
                           "--seed", "--max-seq-len", "--optimizations", "--decoder-config",
                           "--threads", "--json"};
    EXPECT("generate --help", 0, "usage: meshlm generate");
    for (size_t k = 0; k < sizeof flags / sizeof *flags; k++)
        CHECKF(strstr(out, flags[k]), "generate --help lacks %s", flags[k]);
    EXPECT("generate -m tests/data/llama/gqa4_hd64_tied_r32/hf --prompt-ids 1,2,3,4,5,6 "
           "--max-seq-len 4",
           1, "--max-seq-len is 4");
    EXPECT("generate -m tests/data/llama/gqa4_hd64_tied_r32/hf --prompt-ids 1,99999", 2, "99999");
    EXPECT("generate -m tests/data/llama/gqa4_hd64_tied_r32/hf -p hi --temperature -1", 2,
           "--temperature");
    EXPECT("generate -m tests/data/ckpt -p hi", 1, "tests/data/ckpt");
    EXPECT("generate -m tests/data/llama/gqa4_hd64_tied_r32/hf", 2, "exactly one of");
    /* Phi-4 in bf16 (29 GB of weights) is refused before loading on a machine with less
     * memory, naming the parts; elsewhere the config-only folder fails at the checkpoint. */
    EXPECT("generate -m tests/data/configs/phi-4 -p hi --optimizations bf16", 1,
           "tests/data/configs/phi-4");
    CHECKF((strstr(out, "weights 29.3 GB in the bf16 profile") &&
            strstr(out, "--optimizations accuracy would fit")) ||
               strstr(out, "no checkpoint"),
           "%s", out);
    /* the default profile (performance) fits: the config-only folder fails at the checkpoint */
    EXPECT("generate -m tests/data/configs/phi-4 -p hi", 1, "no checkpoint");
    /* ... but not beside a bf16 draft of itself (29 GB more), on a machine under 40 GB */
    EXPECT("generate -m tests/data/configs/phi-4 -p hi --draft-model tests/data/configs/phi-4 "
           "--draft-optimizations bf16",
           1, "tests/data/configs/phi-4");
    CHECKF((strstr(out, "and --draft-model tests/data/configs/phi-4 needs 31.") &&
            strstr(out, "in all")) ||
               strstr(out, "no checkpoint"),
           "%s", out);
}

/* The embedded default model (no -m) generates what transformers generated from it. */
TEST(default_model_matches_transformers) {
    json_error_t jerr;
    json_t *ref = json_load_file("models/default/reference.json", 0, &jerr);
    CHECK(ref != NULL);
    if (!ref) return;
    char args[512];
    json_t *gen = json_object_get(ref, "generated");
    snprintf(args, sizeof args, "generate -m models/default -p '%s' -n %zu --json --optimizations bf16",
             json_string_value(json_object_get(ref, "prompt_text")), json_array_size(gen));
    EXPECT(args, 0, "\"generated_ids\"");
    json_t *got = json_loads(out, 0, &jerr);
    CHECKF(got != NULL, "not JSON: %s", out);
    json_t *ids = json_object_get(got, "generated_ids"), *pids = json_object_get(got, "prompt_ids");
    CHECK(json_equal(pids, json_object_get(ref, "prompt")));
    CHECKF(json_equal(ids, gen), "generated ids differ from transformers'");
    CHECK(!strcmp(json_string_value(json_object_get(got, "text")),
                  json_string_value(json_object_get(ref, "generated_text"))));
    json_decref(got);
    json_decref(ref);
    /* streaming text mode prints the same text and a stats line */
    snprintf(args, sizeof args, "generate -m models/default -p 'It was a dark and stormy night' -n 8 --seed 3 "
                                "--temperature 0.8 --top-p 0.9");
    EXPECT(args, 0, "decode");
    CHECK(strstr(out, "TTFT") != NULL);
}

int main(void) {
    if (harness_tmpdir(tmpdir, sizeof tmpdir, "cli") != 0) return 1;
    RUN(usage_and_help);
    RUN(bad_files_exit_1_naming_file_and_field);
    RUN(tokenize_matches_llamacpp_vectors);
    RUN(json_outputs_parse);
    RUN(generate_greedy_and_errors);
    RUN(default_model_matches_transformers);
    harness_rmtree(tmpdir);
    return HARNESS_END();
}
