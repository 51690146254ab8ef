/* tools/cli/demo_vision.h: the demo's Llama 3.2 Vision presets (the seeds'
 * simple_vision_demo.py), shared between demo.c, demo_vision.c, demo_prompts.c and
 * demo_report.c: the presets, the dialog files ({"prompt", "image"}), the images (each distinct
 * file opened and encoded once, bound to every user whose dialog names it), the prompts in
 * Meta's ChatFormat with the image token first, and the report's vision figures. */
#ifndef MESHLM_CLI_DEMO_VISION_H
#define MESHLM_CLI_DEMO_VISION_H

#include "demo.h"

/* The vision presets' names, NULL-terminated, and filling CFG from one (0 if NAME is none). */
extern const char *const demo_vision_preset_names[];
int demo_vision_preset(const char *name, demo_config *cfg);
/* Whether CFG came from a vision preset. */
int demo_is_vision(const demo_config *cfg);

/* Reads FILE: a JSON list of dialogs {"prompt": TEXT, optional "image": FILE} (the image path
 * relative to FILE's folder, checked to exist). *OUT gets the texts (ids empty), *IMAGES one
 * malloc'd path per dialog or NULL for a text-only one (both N entries). 0 after a message
 * naming the file, the dialog and the field. demo_prompts.c. */
int demo_prompts_read_vision(const char *file, demo_prompt **out, char ***images, int *n);

/* The images of a run: the distinct files of the dialogs, each opened and encoded once. */
typedef struct demo_images {
    int n;                /* distinct files */
    char **path;          /* (n) owned copies */
    mlm_image **img;      /* (n) owned; NULL until demo_images_encode */
    mlm_image_info *info; /* (n) after demo_images_encode */
    double *open_s;       /* (n) decoding and preprocessing (mlm_image_open), per image */
    double *encode_s;     /* (n) the vision encoder and projector (mlm_image_encode) */
    int *of_prompt;       /* (n_prompts) index into path of each dialog's image, -1: text only */
    int n_prompts;
} demo_images;

/* Indexes the dialogs' image paths PATHS (N_PROMPTS entries, NULL: text only) into IM.
 * 0 when out of memory. */
int demo_images_index(char *const *paths, int n_prompts, demo_images *im);
/* Opens and encodes every image of IM for M with N_THREADS threads, timing each. */
mlm_status demo_images_encode(const mlm_model *m, int n_threads, demo_images *im, mlm_error *err);
void demo_images_free(demo_images *im);

/* Tokenizes the N dialogs P into P[i].ids in Meta's ChatFormat, one user message whose
 * content is the image token (for dialogs with an image, IM->of_prompt >= 0) and then the
 * text, and an open assistant header (mlm_tokenizer_encode_chat_parts). */
mlm_status demo_vision_tokenize(const mlm_tokenizer *tok, int32_t image_token, demo_prompt *p,
                                int n, const demo_images *im, mlm_error *err);

/* The vision figures of a run, for the report. TTFT as the seeds' vision demo times it: a
 * batch's prefill_forward, which holds the vision encoder, averaged over the batches. */
typedef struct demo_vision_metrics {
    const demo_images *images;  /* borrowed */
    double open_s, encode_s;    /* all images: decoding + preprocessing, the encoder */
    double bind_s;              /* generate's set-up before prefill: the images' cross-attention
                                   K/V into the executor's pool (all batches) */
    double ttft_text_ms;        /* a batch's prefill alone (no encoder, no image K/V) */
    double prefill_text_tps;    /* prompt tokens / that prefill time */
    int image_users;            /* users with an image, all batches */
    const int *image_of_output; /* (n_users) image index of each output, -1: text only */
} demo_vision_metrics;

/* demo_report with VM's figures (VM NULL: demo_report itself). demo_report.c. */
int demo_report_vision(const demo_config *c, const char *model, const mlm_model *m,
                       const demo_metrics *mt, const demo_vision_metrics *vm, const char *failures,
                       int n_users, char **prompts, char **outputs, double top1, double top5);

#endif
