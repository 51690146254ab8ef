/* tools/cli/tokenize.c: `meshlm tokenize`: text to token ids with a model's tokenizer,
 * plain or in the model's chat format; --decode turns ids back into text. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void help(void) {
    printf("usage: meshlm tokenize (-m PATH | --tokenizer FILE) [options] [TEXT]\n"
           "\n"
           "Encodes TEXT (or --file) and prints the token ids separated by spaces.\n"
           "\n"
           "  -m, --model PATH       model directory; its tokenizer.model (or\n"
           "                         original/tokenizer.model), tokenizer.json,\n"
           "                         vocab.json + merges.txt, or a .gguf file is used;\n"
           "                         or a .gguf file itself\n"
           "      --tokenizer FILE   a tiktoken BPE file (Llama 3 tokenizer.model), a\n"
           "                         Hugging Face tokenizer.json (Phi-4, SmolLM2) or a GGUF\n"
           "                         file (told apart by their contents)\n"
           "  -f, --file PATH        read the text from PATH ('-' for stdin) instead of TEXT\n"
           "      --chat             wrap the text as one user message in the model's chat\n"
           "                         format, ending with the assistant header (Llama 3:\n"
           "                         Meta's ChatFormat)\n"
           "      --system TEXT      with --chat: a system message before the user message\n"
           "      --bos              prepend the BOS id (plain mode; --chat always has it)\n"
           "      --parse-special    special-token text such as <|eot_id|> becomes its id\n"
           "                         (default: it is encoded as plain text, like Meta's encoder)\n"
           "      --decode           TEXT is a list of ids (\"1,2,3\" or \"1 2 3\"): print\n"
           "                         their text instead\n"
           "      --json             one JSON object: ids, count and each token's text\n"
           "  -h, --help             this help\n");
}

/* Parses "1,2,3" or "1 2 3" into OUT. Returns 0 and prints on a bad id. */
static int parse_ids(const char *s, mlm_tokens *out) {
    while (*s) {
        while (*s == ',' || *s == ' ' || *s == '\n' || *s == '\t') s++;
        if (!*s) break;
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "meshlm tokenize: bad token id at '%.20s'\n", s);
            return 0;
        }
        if (mlm_tokens_push(out, (int32_t)v) != MLM_OK) return 0;
        s = end;
    }
    return 1;
}

static void print_ids(const mlm_tokenizer *tok, const mlm_tokens *ids, int json) {
    if (!json) {
        for (int64_t i = 0; i < ids->n; i++) printf("%s%d", i ? " " : "", ids->ids[i]);
        printf("\n");
        return;
    }
    printf("{\"n_tokens\":%lld,\"ids\":[", (long long)ids->n);
    for (int64_t i = 0; i < ids->n; i++) printf("%s%d", i ? "," : "", ids->ids[i]);
    printf("],\"tokens\":[");
    for (int64_t i = 0; i < ids->n; i++) {
        size_t len = 0;
        const char *b = mlm_tokenizer_token_bytes(tok, ids->ids[i], &len);
        if (i) printf(",");
        tool_json_string(stdout, b ? b : "", b ? len : 0);
    }
    printf("]}\n");
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *text = NULL, *system = NULL;
    int chat = 0, json = 0, decode = 0;
    mlm_encode_params params = mlm_encode_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (tool_is_help(a)) {
            help();
            return TOOL_OK;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--tokenizer")) {
            if (!(model = tool_value(argc, argv, &i)))
                return tool_usage("tokenize", "%s needs a path", a);
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(file = tool_value(argc, argv, &i)))
                return tool_usage("tokenize", "%s needs a path", a);
        } else if (!strcmp(a, "--system")) {
            if (!(system = tool_value(argc, argv, &i)))
                return tool_usage("tokenize", "--system needs text");
        } else if (!strcmp(a, "--chat")) {
            chat = 1;
        } else if (!strcmp(a, "--bos")) {
            params.add_bos = 1;
        } else if (!strcmp(a, "--parse-special")) {
            params.parse_special = 1;
        } else if (!strcmp(a, "--decode")) {
            decode = 1;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (a[0] == '-' && a[1]) {
            return tool_usage("tokenize", "unknown option '%s'", a);
        } else if (text) {
            return tool_usage("tokenize", "give the text as one argument (quote it)");
        } else {
            text = a;
        }
    }
    if (!model) return tool_usage("tokenize", "-m DIR or --tokenizer FILE is required");
    if (!text == !file) return tool_usage("tokenize", "give TEXT or --file PATH (one of them)");
    if (system && !chat) return tool_usage("tokenize", "--system needs --chat");

    size_t len = 0;
    char *owned = NULL;
    if (file) {
        if (!(owned = tool_read_text(file, &len))) return TOOL_RUNTIME;
        text = owned;
    } else {
        len = strlen(text);
    }
    mlm_error err = {0};
    mlm_tokenizer *tok = NULL;
    mlm_tokens ids;
    mlm_tokens_init(&ids);
    int rc = TOOL_OK;
    if (mlm_tokenizer_load(model, &tok, &err) != MLM_OK) {
        rc = tool_fail(&err);
    } else if (decode) {
        char *out = NULL;
        size_t n = 0;
        if (!parse_ids(text, &ids))
            rc = TOOL_RUNTIME;
        else if (mlm_tokenizer_decode(tok, ids.ids, ids.n, &out, &n, &err) != MLM_OK)
            rc = tool_fail(&err);
        else if (json) {
            tool_json_string(stdout, out, n);
            printf("\n");
        } else {
            fwrite(out, 1, n, stdout);
            printf("\n");
        }
        free(out);
    } else {
        mlm_status st;
        if (chat) {
            /* The chat API takes NUL-terminated strings. */
            char *content = malloc(len + 1);
            if (!content) {
                fprintf(stderr, "meshlm: out of memory\n");
                rc = TOOL_RUNTIME;
            } else {
                memcpy(content, text, len);
                content[len] = 0;
                mlm_chat_message msgs[2] = {{"system", system}, {"user", content}};
                st = mlm_tokenizer_encode_chat(tok, system ? msgs : msgs + 1, system ? 2 : 1, 1,
                                               &ids, &err);
                free(content);
                if (st != MLM_OK) rc = tool_fail(&err);
            }
        } else {
            st = mlm_tokenizer_encode(tok, text, len, &params, &ids, &err);
            if (st != MLM_OK) rc = tool_fail(&err);
        }
        if (rc == TOOL_OK) print_ids(tok, &ids, json);
    }
    mlm_tokens_deinit(&ids);
    mlm_tokenizer_free(tok);
    free(owned);
    return rc;
}
