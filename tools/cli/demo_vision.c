/* tools/cli/demo_vision.c: the demo's Llama 3.2 Vision presets, as the seeds'
 * simple_vision_demo.py runs them (batch1, batch32, batch4-trace-with-text-prompts), and what
 * they need beyond the text presets: the distinct image files opened and encoded once each
 * (timed), and the dialogs in Meta's ChatFormat with the image token before the text. The run
 * itself is demo.c's; the dialog files are read in demo_prompts.c. */
#include <stdlib.h>
#include <string.h>

#include "demo_vision.h"

typedef struct vpreset {
    const char *name, *prompts;
    int repeat, rotate;
    int32_t batch;
} vpreset;

/* The seeds' vision demo: max_seq_len 512, max_gen_len 500, greedy, no stop at the end of the
 * turn (its check is disabled), no paged KV cache; dialogs repeated to fill the batch. batch1
 * runs the four dialogs as four batches of one: repeat batches rotated by one slot. */
static const vpreset vpresets[] = {
    {"vision-batch-1", "vision/input_data_vision.json", 4, 1, 1},
    {"vision-batch-32", "vision/input_data_vision.json", 1, 0, 32},
    {"vision-batch-4-mixed", "vision/input_data_vision_mixed.json", 1, 0, 4},
};

const char *const demo_vision_preset_names[] = {"vision-batch-1", "vision-batch-32",
                                                "vision-batch-4-mixed", NULL};

int demo_vision_preset(const char *name, demo_config *c) {
    for (size_t i = 0; i < sizeof vpresets / sizeof *vpresets; i++) {
        const vpreset *p = &vpresets[i];
        if (strcmp(p->name, name)) continue;
        c->preset = p->name;
        c->prompts = p->prompts;
        c->instruct = 1;
        c->repeat_batches = p->repeat;
        c->max_seq_len = 512;
        c->batch_size = p->batch;
        c->max_generated_tokens = 500;
        c->paged_attention = 0;
        /* 0 blocks: the batch's users x max_seq_len, resolved after the flags */
        c->block_size = 32, c->max_num_blocks = 0;
        /* the seeds' vision sampler: argmax at temperature 0 (top-p 0.9 only when sampling) */
        c->temperature = 0, c->top_p = 0.9f, c->top_k = 0;
        c->per_user_sampling = 0;
        c->stop_at_eos = 0;
        c->rotate = p->rotate;
        c->token_accuracy = 0;
        c->dp = 0;
        return 1;
    }
    return 0;
}

int demo_is_vision(const demo_config *c) {
    for (int i = 0; c->preset && demo_vision_preset_names[i]; i++)
        if (!strcmp(c->preset, demo_vision_preset_names[i])) return 1;
    return 0;
}

int demo_images_index(char *const *paths, int n_prompts, demo_images *im) {
    memset(im, 0, sizeof *im);
    im->n_prompts = n_prompts;
    size_t cap = n_prompts > 0 ? (size_t)n_prompts : 1;
    im->path = calloc(cap, sizeof *im->path);
    im->img = calloc(cap, sizeof *im->img);
    im->info = calloc(cap, sizeof *im->info);
    im->open_s = calloc(cap, sizeof *im->open_s);
    im->encode_s = calloc(cap, sizeof *im->encode_s);
    im->of_prompt = calloc(cap, sizeof *im->of_prompt);
    if (!im->path || !im->img || !im->info || !im->open_s || !im->encode_s || !im->of_prompt)
        return 0;
    for (int i = 0; i < n_prompts; i++) {
        im->of_prompt[i] = -1;
        if (!paths[i]) continue;
        int k = 0;
        while (k < im->n && strcmp(im->path[k], paths[i]))
            k++;
        if (k == im->n && !(im->path[im->n++] = strdup(paths[i]))) return 0;
        im->of_prompt[i] = k;
    }
    return 1;
}

mlm_status demo_images_encode(const mlm_model *m, int n_threads, demo_images *im, mlm_error *err) {
    mlm_status st = MLM_OK;
    for (int k = 0; !st && k < im->n; k++) {
        double t0 = tool_now();
        st = mlm_image_open(m, im->path[k], &im->img[k], err);
        double t1 = tool_now();
        if (!st) st = mlm_image_encode(m, im->img[k], n_threads, err);
        im->open_s[k] = t1 - t0, im->encode_s[k] = tool_now() - t1;
        if (!st) mlm_image_get_info(im->img[k], &im->info[k]);
    }
    return st;
}

void demo_images_free(demo_images *im) {
    for (int k = 0; im->path && k < im->n; k++) {
        free(im->path[k]);
        if (im->img) mlm_image_free(im->img[k]);
    }
    free(im->path), free(im->img), free(im->info), free(im->open_s), free(im->encode_s),
        free(im->of_prompt);
    memset(im, 0, sizeof *im);
}

mlm_status demo_vision_tokenize(const mlm_tokenizer *tok, int32_t image_token, demo_prompt *p,
                                int n, const demo_images *im, mlm_error *err) {
    mlm_status st = MLM_OK;
    for (int i = 0; !st && i < n; i++) {
        /* Meta's ChatFormat encodes a message's items in order: <|image|>, then the text */
        mlm_chat_part parts[2] = {{NULL, image_token}, {p[i].text, 0}};
        int has_image = im->of_prompt[i] >= 0;
        mlm_chat_parts msg = {"user", has_image ? parts : parts + 1, has_image ? 2 : 1};
        st = mlm_tokenizer_encode_chat_parts(tok, &msg, 1, 1, &p[i].ids, err);
    }
    return st;
}
