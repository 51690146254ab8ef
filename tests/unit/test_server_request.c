/* tests/unit/test_server_request.c: the OpenAI request parser (tools/server/request.c): every
 * field of /v1/chat/completions and /v1/completions bodies, each error with the `param` it
 * names, null meaning absent, prompt lists and token-id prompts, content parts, limits,
 * malformed and non-object JSON, deep and huge inputs, and the error JSON it renders. */
#include <jansson.h>
#include <stdint.h>

#include "../tools/server/dialog.h"
#include "../tools/server/request.h"
#include "harness.h"

static int parse(srv_kind kind, const char *body, srv_request *r, srv_error *e) {
    memset(e, 0, sizeof *e);
    return srv_request_parse(body, strlen(body), kind, r, e);
}

static int all_zero(const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i]) return 0;
    return 1;
}

/* BODY must fail as KIND with a 400 naming PARAM ("" for none) and a message containing
 * NEEDLE; the output struct must be left holding nothing. */
#define EXPECT_FAIL(kind, body, param_, needle)                                                    \
    do {                                                                                           \
        srv_request r_;                                                                            \
        srv_error e_;                                                                              \
        int ok_ = parse(kind, body, &r_, &e_);                                                     \
        CHECKF(!ok_, "accepted: %s", body);                                                        \
        if (!ok_) {                                                                                \
            CHECKF(e_.http == 400, "%s: http %d", body, e_.http);                                  \
            CHECKF(strcmp(e_.type, "invalid_request_error") == 0, "%s: type %s", body, e_.type);   \
            CHECKF(strcmp(e_.param, param_) == 0, "%s: param '%s', want '%s'", body, e_.param,     \
                   param_);                                                                        \
            CHECKF(strstr(e_.message, needle) != NULL, "%s: message '%s' lacks '%s'", body,        \
                   e_.message, needle);                                                            \
            CHECKF(all_zero(&r_, sizeof r_), "%s: output not zeroed on failure", body);            \
        } else {                                                                                   \
            srv_request_deinit(&r_);                                                               \
        }                                                                                          \
    } while (0)

#define CHAT(extra) "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]" extra "}"
#define COMP(extra) "{\"prompt\":\"hi\"" extra "}"

/* Parses BODY as KIND into R, failing the case (and returning) if it is rejected. */
#define EXPECT_OK(kind, body, r)                                                                   \
    srv_error e_##r;                                                                               \
    int ok_##r = parse(kind, body, &r, &e_##r);                                                    \
    CHECKF(ok_##r, "rejected %s: [%s] %s", body, e_##r.param, e_##r.message);                      \
    if (!ok_##r) return

// ---- chat messages ----

TEST(chat_minimal_has_defaults) {
    srv_request r;
    EXPECT_OK(SRV_CHAT, CHAT(""), r);
    CHECK(r.kind == SRV_CHAT);
    CHECK(r.n_messages == 1);
    CHECK(strcmp(r.messages[0].role, "user") == 0);
    CHECK(strcmp(r.messages[0].content, "hi") == 0);
    CHECK(r.model == NULL);
    CHECK(r.prompts == NULL && r.n_prompts == 0);
    CHECK(r.max_tokens == -1);
    CHECK(!r.has_temperature && !r.has_top_p && !r.has_top_k && !r.has_seed);
    CHECK(r.n_stop == 0 && !r.stream && !r.include_usage && !r.logprobs && !r.top_logprobs);
    CHECK(r.presence_penalty == 0 && r.frequency_penalty == 0 && !r.ignore_eos);
    CHECK(r.dry_multiplier == 0 && r.dry_base == 1.75 && r.dry_allowed_length == 2 &&
          r.dry_penalty_last_n == -1); /* llama-server's defaults: the guard off */
    CHECK(r.spec_n_max == -1);   /* the server's --draft-max */
    srv_request_deinit(&r);
    CHECK(all_zero(&r, sizeof r));
}

TEST(chat_roles) {
    srv_request r;
    EXPECT_OK(SRV_CHAT,
              "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},"
              "{\"role\":\"developer\",\"content\":\"d\"},{\"role\":\"user\",\"content\":\"u\"},"
              "{\"role\":\"assistant\",\"content\":\"a\"},{\"role\":\"tool\",\"content\":\"t\"}]}",
              r);
    static const char *want[] = {"system", "system", "user", "assistant", "tool"};
    static const char *text[] = {"s", "d", "u", "a", "t"};
    CHECK(r.n_messages == 5);
    for (int i = 0; i < 5 && i < r.n_messages; i++) {
        CHECKF(strcmp(r.messages[i].role, want[i]) == 0, "role %d: %s", i, r.messages[i].role);
        CHECK(strcmp(r.messages[i].content, text[i]) == 0);
    }
    srv_request_deinit(&r);
    EXPECT_FAIL(SRV_CHAT, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}",
                "messages[0].role", "wizard");
    EXPECT_FAIL(SRV_CHAT, "{\"messages\":[{\"role\":\"User\",\"content\":\"x\"}]}",
                "messages[0].role", "supported values");
    EXPECT_FAIL(SRV_CHAT, "{\"messages\":[{\"role\":1,\"content\":\"x\"}]}", "messages[0].role",
                "expected a string, but got an integer");
    EXPECT_FAIL(SRV_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", "messages[0].role",
                "Missing required parameter");
    EXPECT_FAIL(SRV_CHAT, "{\"messages\":[{\"role\":null,\"content\":\"x\"}]}", "messages[0].role",
                "got null");
}

TEST(chat_content_null_and_missing) {
    srv_request r;
    EXPECT_OK(SRV_CHAT,
              "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},"
              "{\"role\":\"assistant\",\"content\":null},{\"role\":\"assistant\"},"
              "{\"role\":\"user\",\"content\":\"\"}]}",
              r);
    CHECK(r.n_messages == 4);
    CHECK(strcmp(r.messages[1].content, "") == 0);
    CHECK(strcmp(r.messages[2].content, "") == 0);
    CHECK(strcmp(r.messages[3].content, "") == 0);
    srv_request_deinit(&r);
    EXPECT_FAIL(SRV_CHAT,
                "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},"
                "{\"role\":\"user\",\"content\":null}]}",
                "messages[1].content", "Missing required parameter");
    EXPECT_FAIL(SRV_CHAT, "{\"messages\":[{\"role\":\"tool\"}]}", "messages[0].content", "Missing");
    EXPECT_FAIL(SRV_CHAT,
                "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\","
                "\"content\":\"b\"},{\"role\":\"user\",\"content\":5}]}",
                "messages[2].content", "got an integer");
    EXPECT_FAIL(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":{\"text\":\"x\"}}]}",
                "messages[0].content", "expected a string or an array of content parts");
}

TEST(chat_content_parts) {
    srv_request r;
    EXPECT_OK(SRV_CHAT,
              "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
              "\"Hello, \"},{\"type\":\"text\",\"text\":\"world\",\"extra\":1}]},"
              "{\"role\":\"assistant\",\"content\":[]}]}",
              r);
    CHECK(r.n_messages == 2);
    CHECK(strcmp(r.messages[0].content, "Hello, world") == 0);
    CHECK(strcmp(r.messages[1].content, "") == 0);
    srv_request_deinit(&r);
    EXPECT_FAIL(SRV_CHAT,
                "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\","
                "\"content\":[{\"type\":\"text\",\"text\":\"x\"},{\"type\":\"image_url\","
                "\"image_url\":{\"url\":\"http://x\"}}]}]}",
                "messages[1].content[1].image_url.url", "only data: URLs");
    EXPECT_FAIL(SRV_CHAT,
                "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\"}]}]}",
                "messages[0].content[0].type", "input_audio");
    EXPECT_FAIL(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"x\"}]}]}",
                "messages[0].content[0].type", "Missing");
    EXPECT_FAIL(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
                "messages[0].content[0].text", "Missing");
    EXPECT_FAIL(SRV_CHAT,
                "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":7}]}"
                "]}",
                "messages[0].content[0].text", "expected a string");
    EXPECT_FAIL(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[\"x\"]}]}",
                "messages[0].content[0]", "expected an object, but got a string");
    EXPECT_FAIL(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":3}]}]}",
                "messages[0].content[0].type", "expected a string");
}

TEST(chat_messages_errors) {
    EXPECT_FAIL(SRV_CHAT, "{}", "messages", "Missing required parameter: 'messages'");
    EXPECT_FAIL(SRV_CHAT, "{\"messages\":null}", "messages", "Missing");
    EXPECT_FAIL(SRV_CHAT, "{\"prompt\":\"hi\"}", "messages", "Missing");
    EXPECT_FAIL(SRV_CHAT, "{\"messages\":[]}", "messages", "empty array");
    EXPECT_FAIL(SRV_CHAT, "{\"messages\":\"hi\"}", "messages",
                "expected an array, but got a string");
    EXPECT_FAIL(SRV_CHAT, "{\"messages\":{\"role\":\"user\"}}", "messages", "got an object");
    EXPECT_FAIL(SRV_CHAT,
                "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\","
                "\"content\":\"b\"},\"c\"]}",
                "messages[2]", "expected an object");
    EXPECT_FAIL(SRV_CHAT, "{\"messages\":[null]}", "messages[0]", "got null");
}

TEST(extra_keys_ignored) {
    srv_request r;
    EXPECT_OK(SRV_CHAT,
              "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\",\"name\":\"bob\"},"
              "{\"role\":\"assistant\",\"content\":null,\"refusal\":null,\"audio\":{\"id\":\"x\"}}],"
              "\"user\":\"u1\",\"tools\":[],\"response_format\":{\"type\":\"text\"},"
              "\"logit_bias\":{\"5\":1},\"prompt\":7,\"whatever\":[[[{}]]]}",
              r);
    CHECK(r.n_messages == 2);
    CHECK(r.n_prompts == 0);
    srv_request_deinit(&r);
    srv_request c;
    EXPECT_OK(SRV_COMPLETION, COMP(",\"messages\":3,\"echo\":false,\"suffix\":\"x\""), c);
    CHECK(c.n_prompts == 1 && c.n_messages == 0);
    srv_request_deinit(&c);
}

// ---- completion prompts ----

TEST(prompt_string_and_list) {
    srv_request r;
    EXPECT_OK(SRV_COMPLETION, COMP(""), r);
    CHECK(r.kind == SRV_COMPLETION);
    CHECK(r.n_prompts == 1 && strcmp(r.prompts[0].text, "hi") == 0 && r.prompts[0].ids == NULL);
    CHECK(r.messages == NULL && r.n_messages == 0 && r.max_tokens == -1);
    srv_request_deinit(&r);
    srv_request l;
    EXPECT_OK(SRV_COMPLETION, "{\"prompt\":[\"a\",\"\",\"ccc\"]}", l);
    CHECK(l.n_prompts == 3);
    if (l.n_prompts == 3) {
        CHECK(strcmp(l.prompts[0].text, "a") == 0);
        CHECK(strcmp(l.prompts[1].text, "") == 0);
        CHECK(strcmp(l.prompts[2].text, "ccc") == 0);
        CHECK(l.prompts[2].ids == NULL && l.prompts[2].n_ids == 0);
    }
    srv_request_deinit(&l);
}

TEST(prompt_token_ids) {
    srv_request r;
    EXPECT_OK(SRV_COMPLETION, "{\"prompt\":[1,0,2147483647]}", r);
    CHECK(r.n_prompts == 1);
    CHECK(r.prompts[0].text == NULL && r.prompts[0].n_ids == 3);
    CHECK(r.prompts[0].ids[0] == 1 && r.prompts[0].ids[1] == 0 &&
          r.prompts[0].ids[2] == 2147483647);
    srv_request_deinit(&r);
    srv_request l;
    EXPECT_OK(SRV_COMPLETION, "{\"prompt\":[[5,6],[7],[8,9,10]]}", l);
    CHECK(l.n_prompts == 3);
    if (l.n_prompts == 3) {
        CHECK(l.prompts[0].n_ids == 2 && l.prompts[0].ids[1] == 6);
        CHECK(l.prompts[1].n_ids == 1 && l.prompts[1].ids[0] == 7);
        CHECK(l.prompts[2].n_ids == 3 && l.prompts[2].ids[2] == 10 && !l.prompts[2].text);
    }
    srv_request_deinit(&l);
}

TEST(prompt_errors) {
    EXPECT_FAIL(SRV_COMPLETION, "{}", "prompt", "Missing required parameter: 'prompt'");
    EXPECT_FAIL(SRV_COMPLETION, "{\"prompt\":null}", "prompt", "Missing");
    EXPECT_FAIL(SRV_COMPLETION, "{\"prompt\":[]}", "prompt", "empty array");
    EXPECT_FAIL(SRV_COMPLETION, "{\"prompt\":5}", "prompt", "got an integer");
    EXPECT_FAIL(SRV_COMPLETION, "{\"prompt\":{\"a\":1}}", "prompt", "got an object");
    EXPECT_FAIL(SRV_COMPLETION, "{\"prompt\":[[1],[]]}", "prompt[1]", "empty");
    EXPECT_FAIL(SRV_COMPLETION, "{\"prompt\":[[]]}", "prompt[0]", "empty");
    EXPECT_FAIL(SRV_COMPLETION, "{\"prompt\":[1,2,-3]}", "prompt[2]", "got -3");
    EXPECT_FAIL(SRV_COMPLETION, "{\"prompt\":[[1],[2,-1]]}", "prompt[1][1]", "token id");
    EXPECT_FAIL(SRV_COMPLETION, "{\"prompt\":[2147483648]}", "prompt[0]", "2147483648");
    EXPECT_FAIL(SRV_COMPLETION, "{\"prompt\":[1,2.0]}", "prompt[1]", "got a number");
    EXPECT_FAIL(SRV_COMPLETION, "{\"prompt\":[1,\"a\"]}", "prompt[1]", "got a string");
    EXPECT_FAIL(SRV_COMPLETION, "{\"prompt\":[\"a\",1]}", "prompt[1]", "got an integer");
    EXPECT_FAIL(SRV_COMPLETION, "{\"prompt\":[\"a\",[1]]}", "prompt[1]", "got an array");
    EXPECT_FAIL(SRV_COMPLETION, "{\"prompt\":[[1],\"a\"]}", "prompt[1]", "got a string");
    EXPECT_FAIL(SRV_COMPLETION, "{\"prompt\":[[1],[\"a\"]]}", "prompt[1][0]", "got a string");
    EXPECT_FAIL(SRV_COMPLETION, "{\"prompt\":[null]}", "prompt[0]", "got null");
    EXPECT_FAIL(SRV_COMPLETION, "{\"prompt\":[true]}", "prompt[0]", "got a boolean");
    EXPECT_FAIL(SRV_COMPLETION, "{\"prompt\":[1.5]}", "prompt[0]", "got a number");
    EXPECT_FAIL(SRV_COMPLETION, "{\"prompt\":[[[1]]]}", "prompt[0][0]", "got an array");
}

// ---- numeric options ----

TEST(max_tokens) {
    srv_request r;
    EXPECT_OK(SRV_CHAT, CHAT(",\"max_tokens\":5"), r);
    CHECK(r.max_tokens == 5);
    srv_request_deinit(&r);
    srv_request f;
    EXPECT_OK(SRV_COMPLETION, COMP(",\"max_tokens\":7.0"), f);
    CHECK(f.max_tokens == 7);
    srv_request_deinit(&f);
    srv_request b;
    EXPECT_OK(SRV_CHAT, CHAT(",\"max_completion_tokens\":9,\"max_tokens\":3"), b);
    CHECK(b.max_tokens == 9);
    srv_request_deinit(&b);
    srv_request n;
    EXPECT_OK(SRV_CHAT, CHAT(",\"max_tokens\":null,\"max_completion_tokens\":null"), n);
    CHECK(n.max_tokens == -1);
    srv_request_deinit(&n);
    srv_request m;
    EXPECT_OK(SRV_CHAT, CHAT(",\"max_tokens\":4,\"max_completion_tokens\":null"), m);
    CHECK(m.max_tokens == 4);
    srv_request_deinit(&m);
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"max_tokens\":0"), "max_tokens", "got 0");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"max_tokens\":-5"), "max_tokens", ">= 1");
    EXPECT_FAIL(SRV_COMPLETION, COMP(",\"max_tokens\":5.5"), "max_tokens", "expected an integer");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"max_tokens\":\"5\""), "max_tokens", "got a string");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"max_tokens\":true"), "max_tokens", "got a boolean");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"max_tokens\":5,\"max_completion_tokens\":0"),
                "max_completion_tokens", "got 0");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"max_tokens\":1e300"), "max_tokens", "expected an integer");
}

TEST(temperature_top_p_top_k) {
    srv_request r;
    EXPECT_OK(SRV_CHAT, CHAT(",\"temperature\":0,\"top_p\":1,\"top_k\":-1"), r);
    CHECK(r.has_temperature && r.temperature == 0);
    CHECK(r.has_top_p && r.top_p == 1);
    CHECK(r.has_top_k && r.top_k == -1);
    srv_request_deinit(&r);
    srv_request s;
    EXPECT_OK(SRV_COMPLETION, COMP(",\"temperature\":2,\"top_p\":0.25,\"top_k\":0"), s);
    CHECK(s.temperature == 2 && s.top_p == 0.25 && s.top_k == 0 && s.has_top_k);
    srv_request_deinit(&s);
    srv_request t;
    EXPECT_OK(SRV_CHAT, CHAT(",\"temperature\":0.7,\"top_k\":40"), t);
    CHECK_NEAR(t.temperature, 0.7, 1e-12);
    CHECK(t.top_k == 40 && !t.has_top_p);
    srv_request_deinit(&t);
    srv_request u;
    EXPECT_OK(SRV_CHAT, CHAT(",\"temperature\":null,\"top_p\":null,\"top_k\":null"), u);
    CHECK(!u.has_temperature && !u.has_top_p && !u.has_top_k);
    srv_request_deinit(&u);
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"temperature\":2.01"), "temperature", "[0, 2]");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"temperature\":-0.1"), "temperature", "got -0.1");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"temperature\":\"hot\""), "temperature",
                "expected a number, but got a string");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"top_p\":0"), "top_p", "(0, 1]");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"top_p\":1.5"), "top_p", "got 1.5");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"top_p\":[1]"), "top_p", "got an array");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"top_k\":-2"), "top_k", "got -2");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"top_k\":2.5"), "top_k", "expected an integer");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"top_k\":false"), "top_k", "got a boolean");
}

TEST(seed_and_penalties) {
    srv_request r;
    EXPECT_OK(SRV_CHAT, CHAT(",\"seed\":42,\"presence_penalty\":-2,\"frequency_penalty\":2"), r);
    CHECK(r.has_seed && r.seed == 42);
    CHECK(r.presence_penalty == -2 && r.frequency_penalty == 2);
    srv_request_deinit(&r);
    srv_request s;
    EXPECT_OK(SRV_CHAT, CHAT(",\"seed\":-1"), s);
    CHECK(s.has_seed && s.seed == UINT64_MAX);
    srv_request_deinit(&s);
    srv_request t;
    EXPECT_OK(SRV_COMPLETION, COMP(",\"seed\":-9223372036854775808"), t);
    CHECK(t.seed == (uint64_t)1 << 63);
    srv_request_deinit(&t);
    srv_request u;
    EXPECT_OK(SRV_COMPLETION, COMP(",\"seed\":9223372036854775807,\"presence_penalty\":0.5"), u);
    CHECK(u.seed == (uint64_t)INT64_MAX && u.presence_penalty == 0.5);
    srv_request_deinit(&u);
    srv_request v;
    EXPECT_OK(SRV_CHAT, CHAT(",\"seed\":null,\"presence_penalty\":null"), v);
    CHECK(!v.has_seed && v.seed == 0 && v.presence_penalty == 0);
    srv_request_deinit(&v);
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"seed\":\"1\""), "seed", "expected an integer");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"seed\":1.5"), "seed", "got a number");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"presence_penalty\":2.5"), "presence_penalty", "[-2, 2]");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"frequency_penalty\":-3"), "frequency_penalty", "got -3");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"frequency_penalty\":{}"), "frequency_penalty", "got an object");
    srv_request w;
    EXPECT_OK(SRV_CHAT,
              CHAT(",\"dry_multiplier\":0.8,\"dry_base\":2,\"dry_allowed_length\":3,"
                   "\"dry_penalty_last_n\":64"),
              w);
    CHECK(w.dry_multiplier == 0.8 && w.dry_base == 2 && w.dry_allowed_length == 3 &&
          w.dry_penalty_last_n == 64);
    srv_request_deinit(&w);
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"dry_multiplier\":-1"), "dry_multiplier", "[0, 5]");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"dry_base\":0.5"), "dry_base", "[1, 4]");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"dry_allowed_length\":0"), "dry_allowed_length", "got 0");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"dry_penalty_last_n\":-2"), "dry_penalty_last_n", "got -2");
    srv_request x;
    EXPECT_OK(SRV_CHAT, CHAT(",\"speculative.n_max\":0"), x);
    CHECK(x.spec_n_max == 0);
    srv_request_deinit(&x);
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"speculative.n_max\":65"), "speculative.n_max", "got 65");
    /* jansson rejects integers beyond int64: a malformed body, not a wrap-around */
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"seed\":18446744073709551616"), "", "parse");
}

TEST(n_is_one_to_eight) {
    srv_request r;
    EXPECT_OK(SRV_CHAT, CHAT(",\"n\":8"), r);
    CHECK(r.n == 8);
    srv_request_deinit(&r);
    srv_request s;
    EXPECT_OK(SRV_COMPLETION, COMP(",\"n\":null"), s);
    CHECK(s.n == 1);
    srv_request_deinit(&s);
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"n\":9"), "n", "[1, 8]");
    EXPECT_FAIL(SRV_COMPLETION, COMP(",\"n\":0"), "n", "got 0");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"n\":\"1\""), "n", "expected an integer");
}

#define TOOL(name) "{\"type\":\"function\",\"function\":{\"name\":\"" name "\",\"parameters\":{\"type\":\"object\"}}}"

TEST(tools_and_tool_choice) {
    srv_request r;
    EXPECT_OK(SRV_CHAT, CHAT(",\"tools\":[" TOOL("get_weather") "," TOOL("b-2") "],"
                             "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"b-2\"}},"
                             "\"parallel_tool_calls\":false"), r);
    CHECK(r.n_tools == 2 && r.tool_choice == SRV_TOOLS_NAMED && strcmp(r.tool_choice_name, "b-2") == 0);
    CHECK(r.parallel_tool_calls == 0);
    srv_request_deinit(&r);
    srv_request s;
    EXPECT_OK(SRV_CHAT, CHAT(",\"tools\":[],\"tool_choice\":\"none\""), s);
    CHECK(s.tools == NULL && s.tool_choice == SRV_TOOLS_NONE && s.parallel_tool_calls == 1);
    srv_request_deinit(&s);
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"tools\":{}"), "tools", "expected an array");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"tools\":[{\"type\":\"code\"}]"), "tools[0].type", "function");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"tools\":[" TOOL("a b") "]"), "tools[0].function.name", "1 to 64");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":[]}}]"),
                "tools[0].function.parameters", "an object");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"tool_choice\":\"required\""), "tool_choice", "no 'tools'");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"tools\":[" TOOL("f") "],\"tool_choice\":\"always\""), "tool_choice", "'required'");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"tools\":[" TOOL("f") "],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}"),
                "tool_choice", "'g' is not in 'tools'");
}

TEST(tool_calls_and_tool_messages) {
    srv_request r;
    EXPECT_OK(SRV_CHAT,
              "{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"},{\"role\":\"assistant\","
              "\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":"
              "{\"name\":\"get\",\"arguments\":\"{\\\"city\\\": \\\"Oslo\\\"}\"}}]},{\"role\":\"tool\","
              "\"tool_call_id\":\"call_1\",\"content\":\"-3 C\"}]}",
              r);
    CHECK(r.n_messages == 3 && r.messages[1].n_tool_calls == 1);
    CHECK(strcmp(r.messages[1].tool_calls[0].name, "get") == 0);
    CHECK(strcmp(r.messages[1].tool_calls[0].arguments, "{\"city\": \"Oslo\"}") == 0);
    CHECK(strcmp(r.messages[2].tool_call_id, "call_1") == 0);
    srv_request_deinit(&r);
    EXPECT_FAIL(SRV_CHAT, "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\",\"tool_call_id\":5}]}",
                "messages[0].tool_call_id", "a string");
    EXPECT_FAIL(SRV_CHAT,
                "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\","
                "\"arguments\":\"{oops\"}}]}]}",
                "messages[0].tool_calls[0].function.arguments", "JSON object");
}

/* A request's dialog through the library (srv_chat_encode): what the chat template refuses
 * comes back as a 400 whose param is the field the library's message names. */
TEST(chat_encode_names_the_field) {
    mlm_tokenizer *tok = NULL;
    mlm_error err;
    CHECK_OK(mlm_tokenizer_load("tests/data/tokenizer/llama3", &tok, &err), &err);
    if (!tok) return;
    srv_request r;
    srv_error e = {0};
    mlm_tokens ids;
    mlm_tokens_init(&ids);
    const char *two = "{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"},{\"role\":"
                      "\"assistant\",\"content\":null,\"tool_calls\":["
                      "{\"id\":\"a\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}},"
                      "{\"id\":\"b\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}],"
                      "\"tools\":[" TOOL("f") "]}";
    EXPECT_OK(SRV_CHAT, two, r);
    CHECK(srv_chat_encode(tok, "m", &r, &ids, &e) == 0);
    CHECKF(e.http == 400 && strcmp(e.param, "messages[1].tool_calls") == 0, "%d '%s' %s", e.http,
           e.param, e.message);
    r.tool_choice = SRV_TOOLS_NONE; /* the tools not shown: the calls are not written */
    CHECK(srv_chat_encode(tok, "m", &r, &ids, &e) == 1 && ids.n > 0);
    srv_request_deinit(&r);
    srv_request r2;
    EXPECT_OK(SRV_CHAT, "{\"messages\":[{\"role\":\"system\",\"content\":\"x\"}],\"tools\":[" TOOL("f") "]}",
              r2);
    memset(&e, 0, sizeof e);
    CHECK(srv_chat_encode(tok, "m", &r2, &ids, &e) == 0);
    CHECKF(e.http == 400 && strcmp(e.param, "messages") == 0, "%d '%s' %s", e.http, e.param,
           e.message);
    srv_request_deinit(&r2);
    mlm_tokens_deinit(&ids);
    mlm_tokenizer_free(tok);
}

/* reasoning_content on assistant messages (vLLM's newer "reasoning" too; others ignored)
 * and chat_template_kwargs.enable_thinking. */
TEST(reasoning_and_thinking) {
    srv_request r;
    EXPECT_OK(SRV_CHAT,
              "{\"messages\":[{\"role\":\"user\",\"content\":\"q\",\"reasoning_content\":\"u\"},"
              "{\"role\":\"assistant\",\"content\":\"a\",\"reasoning_content\":\"why\"},"
              "{\"role\":\"assistant\",\"content\":\"b\",\"reasoning\":\"how\"},"
              "{\"role\":\"assistant\",\"content\":\"c\",\"reasoning_content\":null}],"
              "\"chat_template_kwargs\":{\"enable_thinking\":false,\"other\":1}}",
              r);
    CHECK(r.n_messages == 4 && !r.messages[0].reasoning && !r.messages[3].reasoning);
    CHECK(r.messages[1].reasoning && strcmp(r.messages[1].reasoning, "why") == 0);
    CHECK(r.messages[2].reasoning && strcmp(r.messages[2].reasoning, "how") == 0);
    CHECK(r.thinking == MLM_THINK_OFF);
    srv_request_deinit(&r);
    srv_request r2;
    EXPECT_OK(SRV_CHAT, CHAT(",\"chat_template_kwargs\":{\"enable_thinking\":true}"), r2);
    CHECK(r2.thinking == MLM_THINK_ON);
    srv_request_deinit(&r2);
    srv_request r3;
    EXPECT_OK(SRV_CHAT, CHAT(""), r3);
    CHECK(r3.thinking == MLM_THINK_DEFAULT);
    srv_request_deinit(&r3);
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"chat_template_kwargs\":[]"), "chat_template_kwargs",
                "an object");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"chat_template_kwargs\":{\"enable_thinking\":\"no\"}"),
                "chat_template_kwargs.enable_thinking", "a boolean");
    EXPECT_FAIL(SRV_CHAT,
                "{\"messages\":[{\"role\":\"assistant\",\"content\":\"a\",\"reasoning_content\":3}]}",
                "messages[0].reasoning_content", "a string");
}

TEST(response_format) {
    srv_request r;
    EXPECT_OK(SRV_COMPLETION, COMP(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                                   "{\"name\":\"x\",\"schema\":{\"type\":\"integer\"},\"strict\":true}}"), r);
    CHECK(r.format == SRV_FORMAT_JSON_SCHEMA && json_is_object(r.schema));
    srv_request_deinit(&r);
    srv_request s;
    EXPECT_OK(SRV_CHAT, CHAT(",\"response_format\":{\"type\":\"json_object\"}"), s);
    CHECK(s.format == SRV_FORMAT_JSON_OBJECT && !s.schema);
    srv_request_deinit(&s);
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"response_format\":{\"type\":\"yaml\"}"), "response_format.type", "'json_schema'");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"response_format\":{\"type\":\"json_schema\"}"), "response_format.json_schema", "Missing");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":3}}"),
                "response_format.json_schema.schema", "an object");
}

// ---- streaming, stop, flags, logprobs ----

TEST(stream_and_options) {
    srv_request r;
    EXPECT_OK(SRV_CHAT, CHAT(",\"stream\":true,\"stream_options\":{\"include_usage\":true}"), r);
    CHECK(r.stream && r.include_usage);
    srv_request_deinit(&r);
    srv_request s;
    EXPECT_OK(SRV_COMPLETION, COMP(",\"stream\":true,\"stream_options\":{}"), s);
    CHECK(s.stream && !s.include_usage);
    srv_request_deinit(&s);
    srv_request t;
    EXPECT_OK(SRV_CHAT, CHAT(",\"stream\":false,\"stream_options\":null"), t);
    CHECK(!t.stream && !t.include_usage);
    srv_request_deinit(&t);
    srv_request u;
    EXPECT_OK(SRV_CHAT,
              CHAT(",\"stream\":true,\"stream_options\":{\"include_usage\":null,"
                   "\"continuous_usage_stats\":true}"),
              u);
    CHECK(u.stream && !u.include_usage);
    srv_request_deinit(&u);
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"stream_options\":{\"include_usage\":true}"), "stream_options",
                "'stream' is true");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"stream\":false,\"stream_options\":{}"), "stream_options",
                "stream");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"stream\":true,\"stream_options\":true"), "stream_options",
                "expected an object");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"stream\":true,\"stream_options\":{\"include_usage\":1}"),
                "stream_options.include_usage", "expected a boolean, but got an integer");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"stream\":\"yes\""), "stream", "expected a boolean");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"stream\":1"), "stream", "got an integer");
}

TEST(stop_sequences) {
    srv_request r;
    EXPECT_OK(SRV_CHAT, CHAT(",\"stop\":\"\\n\\n\""), r);
    CHECK(r.n_stop == 1 && strcmp(r.stop[0], "\n\n") == 0);
    srv_request_deinit(&r);
    srv_request s;
    EXPECT_OK(SRV_COMPLETION, COMP(",\"stop\":[\"a\",\"bb\",\"ccc\",\"d\"]"), s);
    CHECK(s.n_stop == 4);
    if (s.n_stop == 4)
        CHECK(strcmp(s.stop[0], "a") == 0 && strcmp(s.stop[1], "bb") == 0 &&
              strcmp(s.stop[2], "ccc") == 0 && strcmp(s.stop[3], "d") == 0);
    srv_request_deinit(&s);
    srv_request t;
    EXPECT_OK(SRV_CHAT, CHAT(",\"stop\":[\"\",\"x\",\"\"]"), t);
    CHECK(t.n_stop == 1 && strcmp(t.stop[0], "x") == 0);
    srv_request_deinit(&t);
    srv_request u;
    EXPECT_OK(SRV_CHAT, CHAT(",\"stop\":\"\""), u);
    CHECK(u.n_stop == 0);
    srv_request_deinit(&u);
    srv_request v;
    EXPECT_OK(SRV_CHAT, CHAT(",\"stop\":[]"), v);
    CHECK(v.n_stop == 0);
    srv_request_deinit(&v);
    srv_request w;
    EXPECT_OK(SRV_CHAT, CHAT(",\"stop\":null"), w);
    CHECK(w.n_stop == 0);
    srv_request_deinit(&w);
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]"), "stop",
                "at most 4 stop sequences, but got 5");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"stop\":[\"a\",2]"), "stop[1]", "expected a string");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"stop\":[\"a\",\"b\",null]"), "stop[2]", "got null");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"stop\":7"), "stop", "a string or an array of strings");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"stop\":{\"a\":1}"), "stop", "got an object");
}

TEST(model_and_ignore_eos) {
    srv_request r;
    EXPECT_OK(SRV_CHAT, CHAT(",\"model\":\"llama-3\",\"ignore_eos\":true"), r);
    CHECK(r.model && strcmp(r.model, "llama-3") == 0);
    CHECK(r.ignore_eos == 1);
    srv_request_deinit(&r);
    srv_request s;
    EXPECT_OK(SRV_COMPLETION, COMP(",\"model\":null,\"ignore_eos\":false"), s);
    CHECK(s.model == NULL && s.ignore_eos == 0);
    srv_request_deinit(&s);
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"model\":5"), "model", "expected a string, but got an integer");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"ignore_eos\":\"true\""), "ignore_eos", "expected a boolean");
}

TEST(chat_logprobs) {
    srv_request r;
    EXPECT_OK(SRV_CHAT, CHAT(",\"logprobs\":true,\"top_logprobs\":5"), r);
    CHECK(r.logprobs == 1 && r.top_logprobs == 5);
    srv_request_deinit(&r);
    srv_request s;
    EXPECT_OK(SRV_CHAT, CHAT(",\"logprobs\":true"), s);
    CHECK(s.logprobs == 1 && s.top_logprobs == 0);
    srv_request_deinit(&s);
    srv_request t;
    EXPECT_OK(SRV_CHAT, CHAT(",\"logprobs\":false,\"top_logprobs\":null"), t);
    CHECK(t.logprobs == 0 && t.top_logprobs == 0);
    srv_request_deinit(&t);
    srv_request u;
    EXPECT_OK(SRV_CHAT, CHAT(",\"logprobs\":true,\"top_logprobs\":20"), u);
    CHECK(u.top_logprobs == 20);
    srv_request_deinit(&u);
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"top_logprobs\":2"), "top_logprobs", "'logprobs' set to true");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"logprobs\":false,\"top_logprobs\":0"), "top_logprobs",
                "logprobs");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"logprobs\":true,\"top_logprobs\":21"), "top_logprobs",
                "[0, 20]");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"logprobs\":true,\"top_logprobs\":-1"), "top_logprobs", "got -1");
    EXPECT_FAIL(SRV_CHAT, CHAT(",\"logprobs\":3"), "logprobs", "expected a boolean");
}

TEST(completion_logprobs) {
    srv_request r;
    EXPECT_OK(SRV_COMPLETION, COMP(",\"logprobs\":3"), r);
    CHECK(r.logprobs == 1 && r.top_logprobs == 3);
    srv_request_deinit(&r);
    srv_request s;
    EXPECT_OK(SRV_COMPLETION, COMP(",\"logprobs\":0"), s);
    CHECK(s.logprobs == 1 && s.top_logprobs == 0);
    srv_request_deinit(&s);
    srv_request t;
    EXPECT_OK(SRV_COMPLETION, COMP(",\"logprobs\":null,\"top_logprobs\":9"), t);
    CHECK(t.logprobs == 0 && t.top_logprobs == 0);
    srv_request_deinit(&t);
    EXPECT_FAIL(SRV_COMPLETION, COMP(",\"logprobs\":21"), "logprobs", "got 21");
    EXPECT_FAIL(SRV_COMPLETION, COMP(",\"logprobs\":-1"), "logprobs", "[0, 20]");
    EXPECT_FAIL(SRV_COMPLETION, COMP(",\"logprobs\":true"), "logprobs", "expected an integer");
}

TEST(everything_at_once) {
    srv_request r;
    EXPECT_OK(SRV_CHAT,
              "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},"
              "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}],"
              "\"max_completion_tokens\":64,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":20,"
              "\"seed\":7,\"stop\":[\"END\"],\"stream\":true,\"stream_options\":"
              "{\"include_usage\":true},\"logprobs\":true,\"top_logprobs\":2,"
              "\"presence_penalty\":0.1,\"frequency_penalty\":-0.1,\"n\":1,\"ignore_eos\":true}",
              r);
    CHECK(strcmp(r.model, "m") == 0 && r.n_messages == 2);
    CHECK(strcmp(r.messages[0].role, "system") == 0 && strcmp(r.messages[1].content, "hi") == 0);
    CHECK(r.max_tokens == 64 && r.temperature == 0.5 && r.top_p == 0.9 && r.top_k == 20);
    CHECK(r.seed == 7 && r.n_stop == 1 && r.stream && r.include_usage);
    CHECK(r.logprobs && r.top_logprobs == 2 && r.ignore_eos);
    CHECK_NEAR(r.presence_penalty, 0.1, 1e-12);
    CHECK_NEAR(r.frequency_penalty, -0.1, 1e-12);
    srv_request_deinit(&r);
}

// ---- malformed input ----

TEST(malformed_json) {
    const char *bad[] = {"",
                         " ",
                         "{",
                         "{\"messages\":",
                         "{\"messages\":[}",
                         "{}}",
                         "{} x",
                         "{'a':1}",
                         "{\"a\":1,}",
                         "nul",
                         "{\"a\":1,\"a\":2}",
                         "{\"prompt\":\"\\u0000\"}",
                         "{\"prompt\":\"\xff\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        EXPECT_FAIL(SRV_CHAT, bad[i], "", "could not parse the JSON body");
        EXPECT_FAIL(SRV_COMPLETION, bad[i], "", "could not parse");
    }
    /* a NUL byte inside the body is not the end of it */
    srv_request r;
    srv_error e;
    CHECK(!srv_request_parse("{\"prompt\":\"a\"}\0junk", 19, SRV_COMPLETION, &r, &e));
    CHECK(srv_request_parse("{\"prompt\":\"a\"}\0junk", 14, SRV_COMPLETION, &r, &e));
    srv_request_deinit(&r);
    CHECK(!srv_request_parse(NULL, 0, SRV_CHAT, &r, &e) && e.http == 400);
    CHECK(!srv_request_parse("{", 1, SRV_CHAT, &r, NULL)); /* E may be NULL */
}

TEST(non_object_json) {
    const char *bad[] = {"[]", "[{\"messages\":[]}]", "\"hi\"", "1", "2.5", "null", "true"};
    const char *name[] = {"an array", "an array", "a string", "an integer",
                          "a number", "null",     "a boolean"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        EXPECT_FAIL(SRV_CHAT, bad[i], "", "must be a JSON object");
        EXPECT_FAIL(SRV_COMPLETION, bad[i], "", name[i]);
    }
}

TEST(deep_and_huge_inputs) {
    enum { DEEP = 100000 };
    char *deep = malloc(2 * DEEP + 64);
    memset(deep, '[', DEEP);
    memset(deep + DEEP, ']', DEEP);
    deep[2 * DEEP] = 0;
    EXPECT_FAIL(SRV_CHAT, deep, "", "could not parse");
    /* moderately deep nesting in an unknown field is ignored */
    int d = 500, at = 0;
    at += sprintf(deep + at, "{\"x\":");
    for (int i = 0; i < d; i++)
        deep[at++] = '[';
    for (int i = 0; i < d; i++)
        deep[at++] = ']';
    sprintf(deep + at, ",\"prompt\":\"p\"}");
    srv_request r;
    EXPECT_OK(SRV_COMPLETION, deep, r);
    srv_request_deinit(&r);
    free(deep);

    enum { N_MSG = 20000, N_IDS = 200000, BIG = 1 << 20 };
    char *big = malloc((size_t)N_IDS * 8 + BIG + 256);
    at = sprintf(big, "{\"messages\":[");
    for (int i = 0; i < N_MSG; i++)
        at += sprintf(big + at, "%s{\"role\":\"%s\",\"content\":\"m%d\"}", i ? "," : "",
                      i % 2 ? "assistant" : "user", i);
    sprintf(big + at, "]}");
    srv_request m;
    EXPECT_OK(SRV_CHAT, big, m);
    CHECK(m.n_messages == N_MSG);
    CHECK(strcmp(m.messages[N_MSG - 1].content, "m19999") == 0);
    srv_request_deinit(&m);

    at = sprintf(big, "{\"prompt\":[");
    for (int i = 0; i < N_IDS; i++)
        at += sprintf(big + at, "%s%d", i ? "," : "", i);
    sprintf(big + at, "]}");
    srv_request p;
    EXPECT_OK(SRV_COMPLETION, big, p);
    CHECK(p.n_prompts == 1 && p.prompts[0].n_ids == N_IDS);
    CHECK(p.prompts[0].ids[N_IDS - 1] == N_IDS - 1);
    srv_request_deinit(&p);
    /* the same with a bad id at the very end: everything built so far is freed (ASan) */
    sprintf(big + at, ",-1]}");
    EXPECT_FAIL(SRV_COMPLETION, big, "prompt[200000]", "got -1");

    at = sprintf(big, "{\"prompt\":\"");
    memset(big + at, 'a', BIG);
    sprintf(big + at + BIG, "\"}");
    srv_request s;
    EXPECT_OK(SRV_COMPLETION, big, s);
    CHECK(strlen(s.prompts[0].text) == BIG);
    srv_request_deinit(&s);
    free(big);
}

TEST(failure_frees_partial_request) {
    /* each fails late, after strings and arrays were allocated; ASan's leak check sees them */
    EXPECT_FAIL(SRV_CHAT,
                "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
                "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"b\"}]}],"
                "\"stop\":[\"x\",\"y\"],\"logprobs\":false,\"top_logprobs\":1}",
                "top_logprobs", "logprobs");
    EXPECT_FAIL(SRV_COMPLETION, "{\"prompt\":[\"a\",\"b\",\"c\",3]}", "prompt[3]", "string");
    EXPECT_FAIL(SRV_COMPLETION, "{\"prompt\":[[1,2],[3],[4,\"x\"]]}", "prompt[2][1]", "integer");
    EXPECT_FAIL(SRV_COMPLETION, "{\"prompt\":\"p\",\"model\":\"m\",\"stop\":[\"a\",\"b\",5]}",
                "stop[2]", "string");
    EXPECT_FAIL(SRV_CHAT,
                "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\"}]}",
                "messages[1].content", "Missing");
}

// ---- errors out ----

TEST(error_json) {
    srv_error e;
    CHECK(srv_fail(&e, 400, "invalid_request_error", "messages[0].role", NULL, "bad \"%s\"\n",
                   "x") == 0);
    CHECK(e.http == 400 && strcmp(e.param, "messages[0].role") == 0 && e.code[0] == 0);
    char *s = srv_error_json(&e);
    CHECK(s != NULL);
    json_error_t jerr;
    json_t *j = s ? json_loads(s, 0, &jerr) : NULL;
    CHECK(j != NULL);
    json_t *err = json_object_get(j, "error");
    CHECK(json_is_object(err) && json_object_size(j) == 1 && json_object_size(err) == 4);
    CHECK(strcmp(json_string_value(json_object_get(err, "message")), "bad \"x\"\n") == 0);
    CHECK(strcmp(json_string_value(json_object_get(err, "type")), "invalid_request_error") == 0);
    CHECK(strcmp(json_string_value(json_object_get(err, "param")), "messages[0].role") == 0);
    CHECK(json_is_null(json_object_get(err, "code")));
    CHECK(json_object_get(err, "http") == NULL && strchr(s, '\n') == NULL); /* compact */
    json_decref(j);
    free(s);

    srv_fail(&e, 503, "server_error", "", "overloaded", "busy");
    s = srv_error_json(&e);
    j = json_loads(s, 0, &jerr);
    err = json_object_get(j, "error");
    CHECK(json_is_null(json_object_get(err, "param")));
    CHECK(strcmp(json_string_value(json_object_get(err, "code")), "overloaded") == 0);
    json_decref(j);
    free(s);

    /* a message cut inside a UTF-8 character, and stray bytes, still give valid JSON */
    char longmsg[600];
    memset(longmsg, 'a', sizeof longmsg);
    memcpy(longmsg + 510, "\xc3\xa9", 2); /* é across the 511-byte limit */
    longmsg[599] = 0;
    srv_fail(&e, 400, "invalid_request_error", NULL, NULL, "%s", longmsg);
    CHECK(strlen(e.message) == 511);
    s = srv_error_json(&e);
    CHECK(s && (j = json_loads(s, 0, &jerr)) != NULL);
    json_decref(j);
    free(s);
    srv_fail(&e, 400, "invalid_request_error", "\xff", NULL, "x\x80y");
    s = srv_error_json(&e);
    CHECK(s && (j = json_loads(s, 0, &jerr)) != NULL);
    CHECK(j && strcmp(json_string_value(json_object_get(json_object_get(j, "error"), "message")),
                      "x?y") == 0);
    json_decref(j);
    free(s);
}

TEST(parse_error_roundtrips_as_json) {
    srv_request r;
    srv_error e;
    const char *body = "{\"messages\":[{\"role\":\"\xc3\xa9\\\"\\n\",\"content\":\"x\"}]}";
    CHECK(!parse(SRV_CHAT, body, &r, &e));
    char *s = srv_error_json(&e);
    json_error_t jerr;
    json_t *j = s ? json_loads(s, 0, &jerr) : NULL;
    CHECK(j != NULL);
    json_t *err = json_object_get(j, "error");
    CHECK(strcmp(json_string_value(json_object_get(err, "param")), "messages[0].role") == 0);
    CHECK(strstr(json_string_value(json_object_get(err, "message")), "\xc3\xa9\"\n") != NULL);
    json_decref(j);
    free(s);
}

TEST(deinit_is_safe) {
    srv_request r;
    memset(&r, 0, sizeof r);
    srv_request_deinit(&r);
    srv_request_deinit(&r);
    srv_request_deinit(NULL);
    CHECK(all_zero(&r, sizeof r));
    srv_error e;
    CHECK(parse(SRV_COMPLETION, COMP(",\"stop\":[\"a\"],\"model\":\"m\""), &r, &e));
    srv_request_deinit(&r);
    CHECK(all_zero(&r, sizeof r));
    srv_request_deinit(&r);
}

/* A chat body whose one user message has the content parts PARTS (JSON text). */
#define IMG_BODY(parts) "{\"messages\":[{\"role\":\"user\",\"content\":[" parts "]}]}"
#define IMG(url) "{\"type\":\"image_url\",\"image_url\":{\"url\":\"" url "\"}}"
#define TXT(t) "{\"type\":\"text\",\"text\":\"" t "\"}"

TEST(chat_image_parts) {
    srv_request r;
    /* "foobar" and "fo" in base64; parts in order, text joined, bytes decoded */
    EXPECT_OK(
        SRV_CHAT,
        "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\","
        "\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":"
        "\"data:image/png;base64,Zm9vYmFy\",\"detail\":\"low\"}},"
        "{\"type\":\"text\",\"text\":\"Hi \"},"
        "{\"type\":\"image_url\",\"image_url\":{\"url\":\"DATA:Image/JPEG;x=y;BASE64,Zm8=\"}},"
        "{\"type\":\"text\",\"text\":\"there\"}]}]}",
        r);
    CHECK(r.n_images == 2);
    CHECK(r.messages[0].n_parts == 0 && r.messages[0].parts == NULL);
    const srv_message *m = &r.messages[1];
    CHECK(m->n_parts == 4 && m->n_images == 2);
    CHECK(strcmp(m->content, "Hi there") == 0);
    CHECK(m->parts[0].text == NULL && m->parts[0].n_image == 6 &&
          memcmp(m->parts[0].image, "foobar", 6) == 0);
    CHECK(m->parts[1].text && strcmp(m->parts[1].text, "Hi ") == 0 && !m->parts[1].image);
    CHECK(m->parts[2].n_image == 2 && memcmp(m->parts[2].image, "fo", 2) == 0);
    CHECK(m->parts[3].text && strcmp(m->parts[3].text, "there") == 0);
    srv_request_deinit(&r);
    /* text-only lists keep their parts too, and no images */
    srv_request t;
    EXPECT_OK(SRV_CHAT, IMG_BODY(TXT("a") "," TXT("b")), t);
    CHECK(t.n_images == 0 && t.messages[0].n_parts == 2 && t.messages[0].n_images == 0);
    CHECK(strcmp(t.messages[0].content, "ab") == 0);
    srv_request_deinit(&t);
    /* MIME line breaks inside the base64 are skipped */
    srv_request w;
    EXPECT_OK(SRV_CHAT, IMG_BODY(IMG("data:image/png;base64,Zm9v\\r\\nYmFy\\n")), w);
    CHECK(w.messages[0].parts[0].n_image == 6);
    srv_request_deinit(&w);
}

TEST(chat_image_errors) {
    const char *url = "messages[0].content[0].image_url.url";
    EXPECT_FAIL(SRV_CHAT, IMG_BODY(IMG("https://example.com/a.png")), url, "only data: URLs");
    EXPECT_FAIL(SRV_CHAT, IMG_BODY(IMG("file:///etc/passwd")), url, "fetches nothing");
    EXPECT_FAIL(SRV_CHAT, IMG_BODY(IMG("data:image/png;base64,Zm9v*mFy")), url,
                "bad base64 at offset 4");
    EXPECT_FAIL(SRV_CHAT, IMG_BODY(IMG("data:image/png;base64,Zm9-YmFy")), url, "'-'");
    EXPECT_FAIL(SRV_CHAT, IMG_BODY(IMG("data:image/png;base64,Zm9vY")), url, "incomplete");
    EXPECT_FAIL(SRV_CHAT, IMG_BODY(IMG("data:image/png;base64,Zg")), url, "incomplete");
    EXPECT_FAIL(SRV_CHAT, IMG_BODY(IMG("data:image/png;base64,Zg==Zg==")), url, "bad base64");
    EXPECT_FAIL(SRV_CHAT, IMG_BODY(IMG("data:image/png;base64,")), url, "no image bytes");
    EXPECT_FAIL(SRV_CHAT, IMG_BODY(IMG("data:text/plain;base64,Zm9v")), url, "image/*");
    EXPECT_FAIL(SRV_CHAT, IMG_BODY(IMG("data:;base64,Zm9v")), url, "text/plain");
    EXPECT_FAIL(SRV_CHAT, IMG_BODY(IMG("data:image/png,foo")), url, "only base64");
    EXPECT_FAIL(SRV_CHAT, IMG_BODY(IMG("data:image/png;base64")), url, "','");
    EXPECT_FAIL(
        SRV_CHAT,
        IMG_BODY(TXT("x") "," IMG(
            "data:image/png;base64,Zm9v") ","
                                          "{\"type\":\"image_url\",\"image_url\":{\"url\":7}}"),
        "messages[0].content[2].image_url.url", "expected a string");
    EXPECT_FAIL(SRV_CHAT, IMG_BODY("{\"type\":\"image_url\"}"), "messages[0].content[0].image_url",
                "Missing");
    EXPECT_FAIL(SRV_CHAT,
                IMG_BODY("{\"type\":\"image_url\",\"image_url\":\"data:image/png;base64,Zm9v\"}"),
                "messages[0].content[0].image_url", "expected an object");
    EXPECT_FAIL(SRV_CHAT, IMG_BODY("{\"type\":\"image_url\",\"image_url\":{}}"), url, "Missing");
    EXPECT_FAIL(SRV_CHAT,
                IMG_BODY("{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,"
                         "Zm9v\",\"detail\":1}}"),
                "messages[0].content[0].image_url.detail", "expected a string");
    EXPECT_FAIL(SRV_CHAT,
                "{\"messages\":[{\"role\":\"assistant\",\"content\":[" IMG(
                    "data:image/png;base64,Zm9v") "]}]}",
                "messages[0].content[0]", "user messages only");
}

TEST(base64_decoder) {
    static const char *const enc[] = {"",         "Zg==",     "Zm8=",     "Zm9v",
                                      "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy", " Zm9v\r\nYmFy\n",
                                      "Zh=="}; /* RFC 4648 section 10 */
    static const char *const dec[] = {"",      "f",      "fo",     "foo", "foob",
                                      "fooba", "foobar", "foobar", "f"};
    for (size_t i = 0; i < sizeof enc / sizeof enc[0]; i++) {
        unsigned char out[16];
        size_t n = 99, bad = 0;
        CHECKF(srv_base64_decode(enc[i], strlen(enc[i]), out, &n, &bad), "rejected '%s'", enc[i]);
        CHECKF(n == strlen(dec[i]) && memcmp(out, dec[i], n) == 0, "'%s' -> %zu bytes", enc[i], n);
    }
    static const char *const bad_in[] = {
        "Zg=",  "Zg",       "Z===", "Zm9v=",   "=Zm9",  "Zm-v",
        "Zm_v", "Zg==Zg==", "Zg=a", "Zm9v%3D", "Zg===", "Zm9\tv\v"};
    static const size_t at[] = {3, 2, 1, 4, 0, 2, 2, 4, 3, 4, 4, 5};
    for (size_t i = 0; i < sizeof bad_in / sizeof bad_in[0]; i++) {
        unsigned char out[16];
        size_t n = 0, where = 99;
        CHECKF(!srv_base64_decode(bad_in[i], strlen(bad_in[i]), out, &n, &where), "accepted '%s'",
               bad_in[i]);
        CHECKF(where == at[i], "'%s': bad at %zu, want %zu", bad_in[i], where, at[i]);
    }
}

int main(void) {
    RUN(chat_minimal_has_defaults);
    RUN(chat_roles);
    RUN(chat_content_null_and_missing);
    RUN(chat_content_parts);
    RUN(chat_messages_errors);
    RUN(chat_image_parts);
    RUN(chat_image_errors);
    RUN(base64_decoder);
    RUN(extra_keys_ignored);
    RUN(prompt_string_and_list);
    RUN(prompt_token_ids);
    RUN(prompt_errors);
    RUN(max_tokens);
    RUN(temperature_top_p_top_k);
    RUN(seed_and_penalties);
    RUN(n_is_one_to_eight);
    RUN(tools_and_tool_choice);
    RUN(tool_calls_and_tool_messages);
    RUN(reasoning_and_thinking);
    RUN(response_format);
    RUN(stream_and_options);
    RUN(stop_sequences);
    RUN(model_and_ignore_eos);
    RUN(chat_logprobs);
    RUN(completion_logprobs);
    RUN(chat_encode_names_the_field);
    RUN(everything_at_once);
    RUN(malformed_json);
    RUN(non_object_json);
    RUN(deep_and_huge_inputs);
    RUN(failure_frees_partial_request);
    RUN(error_json);
    RUN(parse_error_roundtrips_as_json);
    RUN(deinit_is_safe);
    return HARNESS_END();
}
