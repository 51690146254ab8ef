/* tests/unit/test_grammar.c: structured output's grammar and matcher (src/sample/) against
 * Python: for the schemas of tests/data/grammar/cases.json (made by
 * tests/fixtures/make_grammar_fixtures.py), the matcher takes a document's bytes exactly when
 * Python's json parses it and jsonschema validates it. With the real Llama 3 vocabulary the
 * token mask allows every token of the tokenizer's own encoding of each valid document, the
 * masks of a random walk only ever lead to documents the matcher accepts and that end, and a
 * schema outside the subset is refused by its keyword's name. */
#include <jansson.h>

#include "harness.h"
#include "meshlm.h"

#define LLAMA3_TOKENIZER "tests/data/tokenizer/llama3/tokenizer.model"

static json_t *cases(void) {
    json_error_t jerr;
    json_t *c = json_load_file("tests/data/grammar/cases.json", 0, &jerr);
    if (!c) printf("  tests/data/grammar/cases.json: %s\n", jerr.text);
    return c;
}

static size_t unhex(const char *h, char *out) {
    size_t n = strlen(h) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(h + 2 * i, "%2x", &v);
        out[i] = (char)v;
    }
    return n;
}

static mlm_grammar *compile(const json_t *schema) {
    char *text = json_dumps(schema, JSON_COMPACT);
    mlm_grammar *g = NULL;
    mlm_error err = {0};
    mlm_status st = mlm_grammar_compile(text, strlen(text), NULL, &g, &err);
    if (st != MLM_OK) printf("  compile: %s\n", err.msg);
    free(text);
    return g;
}

/* Whether a fresh matcher of G takes all of DOC and may end there. */
static int accepts(const mlm_grammar *g, const char *doc, size_t n) {
    mlm_matcher *m = NULL;
    if (mlm_matcher_create(g, NULL, &m, NULL) != MLM_OK) return -1;
    int ok = mlm_matcher_accept_bytes(m, doc, n) && mlm_matcher_can_end(m);
    mlm_matcher_free(m);
    return ok;
}

TEST(documents_accepted_exactly_when_jsonschema_validates) {
    json_t *all = cases();
    CHECK(all && json_array_size(all) >= 12);
    size_t i, k;
    json_t *c, *d;
    int n_valid = 0, n_invalid = 0;
    char doc[4096];
    json_array_foreach(all, i, c) {
        mlm_grammar *g = compile(json_object_get(c, "schema"));
        CHECKF(g, "%s", json_string_value(json_object_get(c, "name")));
        if (!g) continue;
        json_array_foreach(json_object_get(c, "docs"), k, d) {
            size_t n = unhex(json_string_value(json_object_get(d, "hex")), doc);
            int want = json_is_true(json_object_get(d, "valid"));
            int got = accepts(g, doc, n);
            CHECKF(got == want, "%s doc %zu '%.*s': matcher %d, jsonschema %d",
                   json_string_value(json_object_get(c, "name")), k, (int)n, doc, got, want);
            want ? n_valid++ : n_invalid++;
        }
        mlm_grammar_free(g);
    }
    CHECK(n_valid >= 30 && n_invalid >= 30);
    json_decref(all);
}

TEST(a_refused_byte_leaves_the_state) {
    mlm_grammar *g = NULL;
    const char *s = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
                    "\"required\":[\"a\"],\"additionalProperties\":false}";
    CHECK(mlm_grammar_compile(s, strlen(s), NULL, &g, NULL) == MLM_OK);
    mlm_matcher *m = NULL;
    CHECK(mlm_matcher_create(g, NULL, &m, NULL) == MLM_OK);
    CHECK(mlm_matcher_accept_bytes(m, "{\"a\": 1", 7));
    CHECK(!mlm_matcher_can_end(m));
    CHECK(!mlm_matcher_accept_bytes(m, "2x", 2)); /* '2' fits, 'x' does not: nothing kept */
    CHECK(mlm_matcher_accept_bytes(m, "}", 1));
    CHECK(mlm_matcher_can_end(m));
    CHECK(!mlm_matcher_accept_bytes(m, " ", 1)); /* nothing after the document */
    mlm_matcher_free(m);
    mlm_grammar_free(g);
}

TEST(the_wrap_counts_values) {
    mlm_grammar *g = NULL;
    mlm_grammar_wrap w = {"<a>", "</a>", "\n", 1, 2};
    CHECK(mlm_grammar_compile("{\"type\":\"integer\"}", 18, &w, &g, NULL) == MLM_OK);
    static const struct {
        const char *doc;
        int ok;
    } docs[] = {{"<a>1</a>", 1}, {"<a>1</a>\n<a>-20</a>", 1}, {"<a>1</a>\n<a>2</a>\n<a>3</a>", 0},
                {"", 0},         {"<a>1</a>\n", 0},           {"<a>x</a>", 0}};
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++)
        CHECKF(accepts(g, docs[i].doc, strlen(docs[i].doc)) == docs[i].ok, "'%s'", docs[i].doc);
    mlm_grammar_free(g);
}

TEST(json_object_mode_takes_any_object) {
    mlm_grammar *g = NULL;
    CHECK(mlm_grammar_compile(NULL, 0, NULL, &g, NULL) == MLM_OK);
    static const char *yes[] = {"{}", "{\"a\": [1, {\"b\": null}, \"x\", -0.5e3, true]}",
                                "{ \"k\" : { } }"};
    static const char *no[] = {"[]", "1", "\"s\"", "{\"a\"}", "{\"a\": tru}", "{\"a\": 1,}"};
    for (size_t i = 0; i < 3; i++) CHECKF(accepts(g, yes[i], strlen(yes[i])) == 1, "%s", yes[i]);
    for (size_t i = 0; i < 6; i++) CHECKF(accepts(g, no[i], strlen(no[i])) == 0, "%s", no[i]);
    mlm_grammar_free(g);
}

TEST(keywords_outside_the_subset_are_refused_by_name) {
    static const char *kw[] = {"pattern", "multipleOf", "oneOf", "allOf", "not", "uniqueItems",
                               "patternProperties", "prefixItems"};
    for (size_t i = 0; i < sizeof kw / sizeof kw[0]; i++) {
        char s[256];
        snprintf(s, sizeof s, "{\"type\":\"object\",\"properties\":{\"x\":{\"%s\":1}}}", kw[i]);
        mlm_grammar *g = NULL;
        mlm_error err = {0};
        mlm_status st = mlm_grammar_compile(s, strlen(s), NULL, &g, &err);
        CHECKF(st == MLM_ERR_UNSUPPORTED && strstr(err.msg, kw[i]) &&
                   strstr(err.msg, "#/properties/x"),
               "%s: %d %s", kw[i], st, err.msg);
        mlm_grammar_free(g);
    }
    mlm_grammar *g = NULL;
    mlm_error err = {0};
    CHECK(mlm_grammar_compile("{\"$ref\":\"#/$defs/missing\"}", 25, NULL, &g, &err) ==
          MLM_ERR_INVALID_ARG);
    CHECK(mlm_grammar_compile("{\"type\":", 8, NULL, &g, &err) == MLM_ERR_INVALID_ARG);
    CHECK(g == NULL);
}

/* Integer bounds are read beside "type": "integer" only; elsewhere they are refused by
 * name, and bounds no 16-digit integer meets are an error. */
TEST(integer_bounds_are_read_beside_type_integer_only) {
    static const struct {
        const char *schema;
        mlm_status st;
        const char *word;
    } cases[] = {
        {"{\"type\":\"integer\",\"minimum\":-3,\"exclusiveMaximum\":7.5}", MLM_OK, NULL},
        {"{\"type\":[\"integer\",\"null\"],\"maximum\":0}", MLM_OK, NULL},
        {"{\"type\":\"number\",\"minimum\":0}", MLM_ERR_UNSUPPORTED, "minimum"},
        {"{\"type\":[\"integer\",\"number\"],\"maximum\":1}", MLM_ERR_UNSUPPORTED, "maximum"},
        {"{\"exclusiveMinimum\":0}", MLM_ERR_UNSUPPORTED, "exclusiveMinimum"},
        {"{\"type\":\"integer\",\"enum\":[1,2],\"minimum\":2}", MLM_ERR_UNSUPPORTED, "minimum"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4.5}", MLM_ERR_INVALID_ARG, "bounds"},
        {"{\"type\":\"integer\",\"minimum\":1e17}", MLM_ERR_INVALID_ARG, "16 digits"},
        {"{\"type\":\"integer\",\"maximum\":\"9\"}", MLM_ERR_INVALID_ARG, "maximum"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mlm_grammar *g = NULL;
        mlm_error err = {0};
        mlm_status st = mlm_grammar_compile(cases[i].schema, strlen(cases[i].schema), NULL, &g, &err);
        CHECKF(st == cases[i].st && (!cases[i].word || strstr(err.msg, cases[i].word)), "%s: %d %s",
               cases[i].schema, st, err.msg);
        mlm_grammar_free(g);
    }
    /* the bounds round inward: minimum -3, exclusiveMaximum 7.5 -> [-3, 7] */
    mlm_grammar *g = NULL;
    mlm_error err = {0};
    const char *s = cases[0].schema;
    CHECK(mlm_grammar_compile(s, strlen(s), NULL, &g, &err) == MLM_OK);
    static const char *yes[] = {"-3", "-0", "0", "7"}, *no[] = {"-4", "8", "-30", "70", "7.0"};
    for (size_t i = 0; i < 4; i++) CHECKF(accepts(g, yes[i], strlen(yes[i])) == 1, "%s", yes[i]);
    for (size_t i = 0; i < 5; i++) CHECKF(accepts(g, no[i], strlen(no[i])) == 0, "%s", no[i]);
    mlm_grammar_free(g);
}

static int bit(const uint32_t *mask, int32_t id) { return (mask[id >> 5] >> (id & 31)) & 1; }

TEST(the_mask_allows_the_tokenizers_own_encoding) {
    mlm_tokenizer *tok = NULL;
    if (mlm_tokenizer_load(LLAMA3_TOKENIZER, &tok, NULL) != MLM_OK) {
        printf("  cannot load %s\n", LLAMA3_TOKENIZER);
        harness_case_failed = 1;
        return;
    }
    mlm_token_trie *trie = NULL;
    CHECK(mlm_token_trie_create(tok, &trie, NULL) == MLM_OK);
    int32_t V = mlm_tokenizer_n_vocab(tok);
    uint32_t *mask = malloc(((size_t)V + 31) / 32 * 4);
    json_t *all = cases();
    size_t i, k;
    json_t *c, *d;
    char doc[4096];
    int checked = 0;
    json_array_foreach(all, i, c) {
        mlm_grammar *g = compile(json_object_get(c, "schema"));
        json_array_foreach(json_object_get(c, "docs"), k, d) {
            if (!g || !json_is_true(json_object_get(d, "valid"))) continue;
            size_t n = unhex(json_string_value(json_object_get(d, "hex")), doc);
            mlm_tokens ids = {0};
            mlm_encode_params ep = mlm_encode_default_params();
            CHECK(mlm_tokenizer_encode(tok, doc, n, &ep, &ids, NULL) == MLM_OK);
            mlm_matcher *m = NULL;
            CHECK(mlm_matcher_create(g, trie, &m, NULL) == MLM_OK);
            int ok = 1;
            for (int32_t t = 0; t < ids.n && ok; t++) {
                int32_t count = mlm_matcher_fill_mask(m, mask);
                ok = count > 0 && bit(mask, ids.ids[t]) && mlm_matcher_accept_token(m, ids.ids[t]);
                CHECKF(ok, "%s doc %zu: token %d (%d of %d) refused", json_string_value(json_object_get(c, "name")),
                       k, ids.ids[t], t, (int)ids.n);
            }
            CHECK(!ok || mlm_matcher_can_end(m));
            checked++;
            mlm_matcher_free(m);
            mlm_tokens_deinit(&ids);
        }
        mlm_grammar_free(g);
    }
    CHECK(checked >= 30);
    json_decref(all);
    free(mask);
    mlm_token_trie_free(trie);
    mlm_tokenizer_free(tok);
}

/* Random walks through the masks: every document ends (bounded strings) and is accepted. */
TEST(random_walks_through_the_masks_end_in_documents) {
    mlm_tokenizer *tok = NULL;
    if (mlm_tokenizer_load(LLAMA3_TOKENIZER, &tok, NULL) != MLM_OK) {
        harness_case_failed = 1;
        return;
    }
    mlm_token_trie *trie = NULL;
    CHECK(mlm_token_trie_create(tok, &trie, NULL) == MLM_OK);
    int32_t V = mlm_tokenizer_n_vocab(tok);
    uint32_t *mask = malloc(((size_t)V + 31) / 32 * 4);
    int32_t *allowed = malloc((size_t)V * sizeof *allowed);
    json_t *all = cases();
    size_t i;
    json_t *c;
    uint64_t rng = 12345;
    json_array_foreach(all, i, c) {
        mlm_grammar *g = compile(json_object_get(c, "schema"));
        for (int walk = 0; walk < 3 && g; walk++) {
            mlm_matcher *m = NULL, *check = NULL;
            CHECK(mlm_matcher_create(g, trie, &m, NULL) == MLM_OK);
            CHECK(mlm_matcher_create(g, NULL, &check, NULL) == MLM_OK);
            int steps = 0, ended = 0;
            while (steps < 400 && !ended) {
                int32_t count = mlm_matcher_fill_mask(m, mask), n = 0;
                for (int32_t id = 0; id < V; id++)
                    if (bit(mask, id)) allowed[n++] = id;
                CHECK(n == count);
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                /* end when allowed, one time in four, or when nothing else may come */
                if (mlm_matcher_can_end(m) && (n == 0 || (rng >> 60) < 4)) {
                    ended = 1;
                    break;
                }
                if (n == 0) break;
                int32_t id = allowed[(rng >> 33) % (uint64_t)n];
                size_t len = 0;
                const char *b = mlm_tokenizer_token_bytes(tok, id, &len);
                CHECK(mlm_matcher_accept_token(m, id));
                CHECK(mlm_matcher_accept_bytes(check, b, len));
                steps++;
            }
            CHECKF(ended && mlm_matcher_can_end(check), "%s walk %d: %d steps, ended %d",
                   json_string_value(json_object_get(c, "name")), walk, steps, ended);
            mlm_matcher_free(m);
            mlm_matcher_free(check);
        }
        mlm_grammar_free(g);
    }
    json_decref(all);
    free(mask);
    free(allowed);
    mlm_token_trie_free(trie);
    mlm_tokenizer_free(tok);
}

int main(void) {
    RUN(documents_accepted_exactly_when_jsonschema_validates);
    RUN(a_refused_byte_leaves_the_state);
    RUN(the_wrap_counts_values);
    RUN(json_object_mode_takes_any_object);
    RUN(keywords_outside_the_subset_are_refused_by_name);
    RUN(integer_bounds_are_read_beside_type_integer_only);
    RUN(the_mask_allows_the_tokenizers_own_encoding);
    RUN(random_walks_through_the_masks_end_in_documents);
    return HARNESS_END();
}
