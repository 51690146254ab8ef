/* tests/fuzz/fuzz_server_tools.c: libFuzzer target for the server's tool-call reply parser
 * (tools/server/toolcall.c): the input is a model's reply, parsed in each chat format against
 * two declared tools. Every call found must name a declared tool with arguments that are a
 * JSON object (the compact text parses back to one), and how much of a growing reply the
 * stream may show must never shrink as the reply grows; the same for the reasoning split of a
 * reply (mlm_chat_split_reasoning: a <think> block's reasoning, then the content). */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "toolcall.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(c)                                                                                 \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const formats[] = {"llama3", "chatml-newline", "chatml"};
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},"
                               "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]",
                               0, NULL);
    REQUIRE(tools);
    const char *text = (const char *)data;
    for (size_t f = 0; f < 3; f++) {
        uint64_t rng = f;
        srv_tool_reply t;
        if (!srv_tools_parse(tools, formats[f], text, size, &rng, &t)) continue;
        for (int k = 0; k < t.n_calls; k++) {
            REQUIRE(srv_tools_declared(tools, t.calls[k].name));
            json_t *a = json_loads(t.calls[k].arguments, 0, NULL);
            REQUIRE(json_is_object(a));
            json_decref(a);
            REQUIRE(strncmp(t.calls[k].id, "call_", 5) == 0);
        }
        srv_tool_reply_deinit(&t);
        size_t prev = 0;
        for (size_t n = 0; n <= size; n += 1 + n / 8) {
            size_t safe = srv_tools_stream_safe(formats[f], text, n);
            REQUIRE(safe <= n && safe >= prev);
            prev = safe;
        }
    }
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
