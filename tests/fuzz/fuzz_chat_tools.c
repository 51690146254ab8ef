/* tests/fuzz/fuzz_chat_tools.c: libFuzzer target for the library's tool-call reply parser
 * (src/tokenizer/tools_reply.c): the input is a model's reply, parsed in each chat format against
 * two declared tools, and as tools and arguments rendered into a prompt. Every call found must name a declared tool with arguments that are a
 * JSON object (the compact text parses back to one), and how much of a growing reply the
 * stream may show must never shrink as the reply grows; the same for the reasoning split of a
 * reply (mlm_chat_split_reasoning: a <think> block's reasoning, then the content). */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "meshlm.h"
#include "tokenizer/tools.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(c)                                                                                 \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const mlm_chat_kind kinds[] = {MLM_CHAT_LLAMA3, MLM_CHAT_CHATML_NL, MLM_CHAT_CHATML};
    static const char TOOLS[] = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},"
                                "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]";
    json_t *tools = json_loads(TOOLS, 0, NULL);
    REQUIRE(tools);
    const char *text = (const char *)data;
    for (size_t f = 0; f < 3; f++) {
        uint64_t rng = f;
        mlm_tool_reply t;
        mlm_error err;
        if (mlm_tool_reply_parse(kinds[f], TOOLS, text, size, &rng, &t, &err)) continue;
        for (int k = 0; k < t.n_calls; k++) {
            REQUIRE(mlm_tools_declared(tools, t.calls[k].name));
            json_t *a = json_loads(t.calls[k].arguments, 0, NULL);
            REQUIRE(json_is_object(a));
            json_decref(a);
            REQUIRE(strncmp(t.calls[k].id, "call_", 5) == 0);
        }
        REQUIRE(t.n_calls > 0 || (t.content && strlen(t.content) <= size));
        mlm_tool_reply_deinit(&t);
        size_t prev = 0;
        for (size_t n = 0; n <= size; n += 1 + n / 8) {
            size_t safe = mlm_tool_reply_settled(kinds[f], text, n);
            REQUIRE(safe <= n && safe >= prev);
            prev = safe;
        }
    }
    /* the prompt side: the input as the tools array (when it is one) and as a call's
     * arguments, rendered in each format: every message's text is a whole string */
    char *copy = malloc(size + 1);
    REQUIRE(copy);
    memcpy(copy, data, size);
    copy[size] = 0;
    json_t *given = NULL;
    mlm_error err;
    if (mlm_tools_load(copy, &given, &err) != MLM_OK) given = json_incref(tools);
    mlm_tool_call call = {"c", "f", copy};
    mlm_chat_turn turns[4] = {{"system", "S", NULL, NULL, 0},
                              {"user", copy, NULL, NULL, 0},
                              {"assistant", NULL, copy, &call, 1},
                              {"tool", copy, NULL, NULL, 0}};
    for (size_t f = 0; f < 3; f++) {
        mlm_tools_prompt p;
        if (mlm_tools_render(kinds[f], turns, 4, given, "D", &p, &err) != MLM_OK) continue;
        REQUIRE(p.n_msgs >= 3);
        for (int i = 0; i < p.n_msgs; i++)
            REQUIRE(p.msgs[i].role && p.msgs[i].content);
        mlm_tools_prompt_deinit(&p);
    }
    json_decref(given);
    free(copy);
    /* the reasoning split of a reply (mlm_chat_split_reasoning): ordered ranges inside the
     * reply, and as it grows the settled part and the reasoning's start never move back */
    mlm_reasoning_split end, sp;
    mlm_chat_split_reasoning(text, size, 1, &end);
    REQUIRE(end.settled == size && end.content_begin <= size);
    REQUIRE(end.reasoning_begin <= end.reasoning_end && end.reasoning_end <= end.content_begin);
    size_t prev = 0;
    for (size_t n = 0; n <= size; n += 1 + n / 8) {
        mlm_chat_split_reasoning(text, n, 0, &sp);
        REQUIRE(sp.settled <= n && sp.settled >= prev && sp.content_begin <= sp.settled);
        REQUIRE(sp.reasoning_begin <= sp.reasoning_end && sp.reasoning_end <= sp.content_begin);
        REQUIRE(!sp.has_reasoning || (end.has_reasoning && sp.reasoning_begin == end.reasoning_begin));
        prev = sp.settled;
    }
    json_decref(tools);
    return 0;
}
