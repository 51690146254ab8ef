/* tools/cli/demo_prompts.c: the seeds' prompt files: a JSON list of {"prompt", optional
 * "context", optional "max_length"}. A context is a file (relative to the prompt file's
 * folder) or inline text, clipped to its first max_length characters. Instruct mode wraps a
 * context as the seeds do: "```" + context + "```\n\n" + prompt; plain mode uses the context
 * alone when there is one (the seeds' non-instruct rule). The vision presets' dialog files
 * are a list of {"prompt", optional "image"} (an image file relative to the file's folder). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "demo_vision.h"

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n), d[n] = 0;
    return d;
}

/* Bytes of the first MAX characters (UTF-8 code points) of S (LEN bytes). */
static size_t clip_chars(const char *s, size_t len, long long max) {
    size_t i = 0;
    for (long long c = 0; i < len && c < max; c++) {
        i++;
        while (i < len && ((unsigned char)s[i] & 0xc0) == 0x80) i++;
    }
    return i;
}

/* FILE's JSON list of 1 to 4096 objects, and its folder into FOLDER; NULL after a message. */
static json_t *load_list(const char *file, char *folder, size_t size) {
    json_error_t jerr;
    json_t *j = json_load_file(file, 0, &jerr);
    if (!j) {
        fprintf(stderr, "meshlm demo: %s: %s (line %d)\n", file, jerr.text, jerr.line);
        return NULL;
    }
    if (!json_is_array(j) || json_array_size(j) == 0 || json_array_size(j) > 4096) {
        fprintf(stderr, "meshlm demo: %s: expected a list of 1 to 4096 prompt objects\n", file);
        json_decref(j);
        return NULL;
    }
    snprintf(folder, size, "%s", file);
    char *slash = strrchr(folder, '/');
    if (slash) *slash = 0;
    else
        snprintf(folder, size, ".");
    return j;
}

int demo_prompts_read(const char *file, int instruct, demo_prompt **out, int *n_out) {
    *out = NULL, *n_out = 0;
    char folder[1024];
    json_t *j = load_list(file, folder, sizeof folder);
    if (!j) return 0;
    int n = (int)json_array_size(j), ok = 1;
    demo_prompt *p = calloc((size_t)n, sizeof *p);
    for (int i = 0; ok && p && i < n; i++) {
        json_t *o = json_array_get(j, (size_t)i), *q = json_object_get(o, "prompt");
        json_t *ctx = json_object_get(o, "context"), *ml = json_object_get(o, "max_length");
        mlm_tokens_init(&p[i].ids);
        if (!json_is_object(o) || !json_is_string(q)) {
            fprintf(stderr, "meshlm demo: %s: prompt %d: \"prompt\" must be a string\n", file, i);
            ok = 0;
            break;
        }
        if (json_object_get(o, "image") && !json_is_null(json_object_get(o, "image"))) {
            fprintf(stderr,
                    "meshlm demo: %s: prompt %d has an \"image\": images need a vision "
                    "preset (vision-batch-1, vision-batch-32, vision-batch-4-mixed)\n",
                    file, i);
            ok = 0;
            break;
        }
        if ((ctx && !json_is_string(ctx) && !json_is_null(ctx)) ||
            (ml && !json_is_integer(ml) && !json_is_null(ml)) ||
            (json_is_integer(ml) && json_integer_value(ml) < 1)) {
            fprintf(stderr, "meshlm demo: %s: prompt %d: \"context\" must be a string and "
                            "\"max_length\" a positive integer\n",
                    file, i);
            ok = 0;
            break;
        }
        const char *question = json_string_value(q);
        char *context = NULL;
        size_t clen = 0;
        if (json_is_string(ctx)) {
            const char *c = json_string_value(ctx);
            if (!strncmp(c, "http://", 7) || !strncmp(c, "https://", 8)) {
                fprintf(stderr, "meshlm demo: %s: prompt %d: context %s is a URL; meshlm does not "
                                "download, give a file path\n",
                        file, i, c);
                ok = 0;
                break;
            }
            char path[2048];
            struct stat st;
            snprintf(path, sizeof path, "%s%s%s", c[0] == '/' ? "" : folder, c[0] == '/' ? "" : "/", c);
            int looks_like_path = !strchr(c, '\n') && strlen(c) < 512 &&
                                  (strchr(c, '/') || strstr(c, ".txt"));
            if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                context = tool_read_text(path, &clen);
                if (!context) {
                    ok = 0;
                    break;
                }
            } else if (looks_like_path) {
                fprintf(stderr, "meshlm demo: %s: prompt %d: context file %s not found\n", file, i,
                        path);
                ok = 0;
                break;
            } else {
                clen = strlen(c);
                context = dup_n(c, clen);
            }
            if (context && json_is_integer(ml))
                clen = clip_chars(context, clen, (long long)json_integer_value(ml));
        }
        size_t ql = strlen(question), cap = ql + clen + 16;
        p[i].text = malloc(cap);
        if (!p[i].text) ok = 0;
        else if (context && instruct)
            snprintf(p[i].text, cap, "```%.*s```\n\n%s", (int)clen, context, question);
        else if (context)
            snprintf(p[i].text, cap, "%.*s", (int)clen, context);
        else
            snprintf(p[i].text, cap, "%s", question);
        free(context);
    }
    json_decref(j);
    if (!ok || !p) {
        demo_prompts_free(p, n);
        return 0;
    }
    *out = p, *n_out = n;
    return 1;
}

int demo_prompts_read_vision(const char *file, demo_prompt **out, char ***images, int *n_out) {
    *out = NULL, *images = NULL, *n_out = 0;
    char folder[1024];
    json_t *j = load_list(file, folder, sizeof folder);
    if (!j) return 0;
    int n = (int)json_array_size(j), ok = 1;
    demo_prompt *p = calloc((size_t)n, sizeof *p);
    char **img = calloc((size_t)n, sizeof *img);
    ok = p && img;
    for (int i = 0; ok && i < n; i++) {
        json_t *o = json_array_get(j, (size_t)i), *q = json_object_get(o, "prompt");
        json_t *im = json_object_get(o, "image");
        mlm_tokens_init(&p[i].ids);
        const char *bad = !json_is_object(o) || !json_is_string(q) ? "\"prompt\" must be a string"
                          : im && !json_is_string(im) && !json_is_null(im)
                              ? "\"image\" must be a file name"
                          : json_object_get(o, "context")
                              ? "dialogs are {\"prompt\", \"image\"}; \"context\" is for the text "
                                "presets"
                              : NULL;
        if (bad) {
            fprintf(stderr, "meshlm demo: %s: dialog %d: %s\n", file, i, bad);
            ok = 0;
            break;
        }
        if (!(p[i].text = strdup(json_string_value(q)))) ok = 0;
        if (!ok || !json_is_string(im)) continue;
        const char *f = json_string_value(im);
        if (!strncmp(f, "http://", 7) || !strncmp(f, "https://", 8)) {
            fprintf(stderr,
                    "meshlm demo: %s: dialog %d: image %s is a URL; meshlm does not "
                    "download, give a file path\n",
                    file, i, f);
            ok = 0;
            break;
        }
        size_t cap = strlen(folder) + strlen(f) + 2;
        if (!(img[i] = malloc(cap))) {
            ok = 0;
            break;
        }
        snprintf(img[i], cap, "%s%s%s", f[0] == '/' ? "" : folder, f[0] == '/' ? "" : "/", f);
        struct stat st;
        if (stat(img[i], &st) != 0 || !S_ISREG(st.st_mode)) {
            fprintf(stderr, "meshlm demo: %s: dialog %d: image file %s not found\n", file, i,
                    img[i]);
            ok = 0;
        }
    }
    json_decref(j);
    if (!ok) {
        if (!p || !img) fprintf(stderr, "meshlm demo: %s: out of memory\n", file);
        demo_prompts_free(p, p ? n : 0);
        for (int i = 0; img && i < n; i++)
            free(img[i]);
        free(img);
        return 0;
    }
    *out = p, *images = img, *n_out = n;
    return 1;
}

void demo_prompts_free(demo_prompt *p, int n) {
    for (int i = 0; p && i < n; i++) {
        free(p[i].text);
        mlm_tokens_deinit(&p[i].ids);
    }
    free(p);
}
