/* tools/cli/demo_presets.c: the seeds' demo configurations (tt-demos.md section 4), as data. */
#include <string.h>

#include "demo.h"

typedef struct preset {
    const char *name, *prompts;
    int instruct, repeat;
    int32_t seq, batch, gen, block, blocks;
    int eos, rotate, token_accuracy, per_user;
    int dp; /* data-parallel lanes, batch users each (0: 1) */
} preset;

static const preset presets[] = {
    /* name, prompts, instruct, repeat, max_seq_len, batch, gen, page (block, blocks), eos */
    {"batch-1", "input_data_questions_prefill_128.json", 1, 1, 1024, 1, 200, 32, 1024, 1, 0, 0, 0,
     0},
    {"batch-32", "input_data_questions_prefill_128.json", 1, 1, 1024, 32, 200, 32, 1024, 1, 0, 0, 1,
     0},
    {"long-context-16k", "input_data_long_16k.json", 1, 1, 32768, 1, 200, 32, 1024, 1, 0, 0, 0, 0},
    {"long-context-32k", "input_data_long_32k.json", 1, 1, 65536, 1, 200, 64, 1024, 1, 0, 0, 0, 0},
    {"long-context-64k", "input_data_long_64k.json", 1, 1, 131072, 1, 200, 64, 2048, 1, 0, 0, 0, 0},
    {"ci-1", "input_data_questions_prefill_128.json", 1, 1, 8192, 1, 4096, 32, 1024, 0, 0, 0, 0, 0},
    {"ci-32", "input_data_questions_prefill_128.json", 1, 1, 2000, 32, 1024, 64, 1024, 0, 0, 0, 0,
     0},
    {"ci-eval-1", "eval_repeat_prompts_batch1.json", 1, 6, 1024, 1, 200, 32, 1024, 1, 1, 0, 0, 0},
    {"ci-eval-32", "eval_repeat_prompts_batch32.json", 1, 3, 1024, 32, 200, 32, 1024, 1, 1, 0, 0,
     0},
    {"token-accuracy", NULL, 0, 1, 1024, 1, 500, 32, 1024, 1, 0, 1, 0, 0},
    /* data parallel: the page blocks are per lane (page_max_num_blocks_per_dp) */
    {"DP-4-b1", "input_data_questions_prefill_128.json", 1, 1, 1024, 1, 200, 32, 1024, 1, 0, 0, 0,
     4},
    {"DP-8-b1", "input_data_questions_prefill_128.json", 1, 1, 1024, 1, 200, 32, 1024, 1, 0, 0, 0,
     8},
    {"DP-4-b32", "input_data_questions_prefill_128.json", 1, 1, 1024, 32, 200, 32, 1024, 1, 0, 0, 0,
     4},
    {"ci-b1-DP-2", "input_data_questions_prefill_128.json", 1, 1, 8192, 1, 4096, 32, 1024, 0, 0, 0,
     0, 2},
    {"ci-b1-DP-4", "input_data_questions_prefill_128.json", 1, 1, 8192, 1, 4096, 32, 1024, 0, 0, 0,
     0, 4},
    {"ci-b1-DP-8", "input_data_questions_prefill_128.json", 1, 1, 8192, 1, 4096, 32, 1024, 0, 0, 0,
     0, 8},
    {"ci-b1-DP-16", "input_data_questions_prefill_128.json", 1, 1, 8192, 1, 200, 32, 1024, 1, 0, 0,
     0, 16},
    {"ci-b1-DP-32", "input_data_questions_prefill_128.json", 1, 1, 8192, 1, 200, 32, 1024, 1, 0, 0,
     0, 32},
};

const char *const demo_preset_names[] = {"batch-1",
                                         "batch-32",
                                         "long-context-16k",
                                         "long-context-32k",
                                         "long-context-64k",
                                         "ci-1",
                                         "ci-32",
                                         "ci-eval-1",
                                         "ci-eval-32",
                                         "token-accuracy",
                                         "DP-4-b1",
                                         "DP-8-b1",
                                         "DP-4-b32",
                                         "ci-b1-DP-2",
                                         "ci-b1-DP-4",
                                         "ci-b1-DP-8",
                                         "ci-b1-DP-16",
                                         "ci-b1-DP-32",
                                         NULL};

int demo_preset(const char *name, demo_config *c) {
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        const preset *p = &presets[i];
        if (strcmp(p->name, name)) continue;
        c->preset = p->name;
        c->prompts = p->prompts;
        c->instruct = p->instruct;
        c->repeat_batches = p->repeat;
        c->max_seq_len = p->seq;
        c->batch_size = p->batch;
        c->max_generated_tokens = p->gen;
        c->paged_attention = 1;
        c->block_size = p->block;
        c->max_num_blocks = p->blocks;
        /* the seeds' default sampling: temperature 0 (greedy), top-p 0.08, top-k 32 */
        c->temperature = 0, c->top_p = 0.08f, c->top_k = 32;
        c->per_user_sampling = p->per_user;
        c->stop_at_eos = p->eos;
        c->rotate = p->rotate;
        c->token_accuracy = p->token_accuracy;
        c->dp = p->dp;
        return 1;
    }
    return 0;
}
