/* tools/cli/main.c: the meshlm command: global flags and subcommand dispatch.
 * Exit status: 0 ok, 1 runtime error (a message names the file, field or limit), 2 usage. */
#include <string.h>

#include "cli.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"accuracy", cmd_accuracy, "token accuracy against a reference (.refpt), teacher forced"},
    {"cache", cmd_cache, "build, list or clear the weight caches of the BFP profiles"},
    {"chat", cmd_chat, "talk with a model in its chat format (keeps the conversation's KV)"},
    {"demo", cmd_demo, "the seed demos: batch-1/32, long context, ci-eval, token accuracy"},
    {"export", cmd_export, "write a model as a GGUF file for llama.cpp"},
    {"generate", cmd_generate, "generate text with a model (the embedded default without -m)"},
    {"plan", cmd_plan, "the largest context that fits this machine, per profile and batch"},
    {"info", cmd_info, "describe a model directory or checkpoint file"},
    {"serve", cmd_serve, "an OpenAI-compatible HTTP server with continuous batching"},
    {"synth", cmd_synth, "write a real model's config with random weights (hf or meta format)"},
    {"tokenize", cmd_tokenize, "text to token ids with a model's tokenizer (chat format too)"},
};

static void usage(FILE *out) {
    fprintf(out,
            "usage: meshlm [--version] [--help] COMMAND [ARGS]\n"
            "\n"
            "meshlm %s: Llama 3 and Phi-4 inference (CPU features: %s)\n"
            "\n"
            "commands:\n",
            mlm_version(), mlm_cpu_features());
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n'meshlm COMMAND --help' documents a command's flags.\n"
                 "Exit status: 0 ok, 1 runtime error, 2 usage error.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return TOOL_USAGE;
    }
    if (tool_is_help(argv[1])) {
        usage(stdout);
        return TOOL_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("meshlm %s\n", mlm_version());
        return TOOL_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) {
            /* under mpirun every rank runs the command; alone this is a no-op */
            if (!tool_mesh_begin()) return TOOL_RUNTIME;
            return tool_mesh_end(commands[i].run(argc - 1, argv + 1));
        }
    fprintf(stderr, "meshlm: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return TOOL_USAGE;
}
