/* tools/cli/plan.c: `meshlm plan -m DIR`: the largest context per user that fits this
 * machine's available memory, for each precision profile and demo batch size: weights in the
 * profile's types + the KV cache (the profile's type, every position of every user) + the
 * step scratch, as `meshlm demo` plans before it allocates. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The exec params of a demo-like run with BATCH users (block size 32). */
static mlm_exec_params params_for(int32_t batch) {
    mlm_exec_params xp = mlm_exec_default_params();
    xp.max_seqs = batch;
    xp.block_size = 32;
    xp.max_step_tokens = 512;
    xp.max_step_logits = batch;
    return xp;
}

int cmd_plan(int argc, char **argv) {
    const char *model = NULL;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            printf("usage: meshlm plan [-m DIR]\n\n"
                   "Prints, for each precision profile and batch size (1, 2, 4, 8, 16, 32), the\n"
                   "largest max_seq_len per user whose weights + KV cache + scratch fit the memory\n"
                   "available now (as `meshlm demo` checks before allocating). Without -m, the\n"
                   "embedded default model.\n");
            return CLI_OK;
        } else if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) {
            if (!(model = cli_value(argc, argv, &i))) return cli_usage("plan", "-m needs a value");
        } else {
            return cli_usage("plan", "unknown argument '%s'", argv[i]);
        }
    }
    char *dflt = model ? NULL : cli_default_model("plan");
    if (!model && !(model = dflt)) return cli_usage("plan", "give -m DIR");
    mlm_config cfg;
    mlm_error err = {0};
    if (mlm_config_load(model, &cfg, &err)) {
        free(dflt);
        return cli_fail(&err);
    }
    int32_t cap = cfg.n_ctx_train > 0 ? cfg.n_ctx_train : 131072;
    static const char *profiles[] = {"performance", "accuracy", "bf16"};
    static const int32_t batches[] = {1, 2, 4, 8, 16, 32};
    mlm_exec_params xp = params_for(1);
    mlm_memory_plan now;
    mlm_memory_plan_for(&cfg, "performance", NULL, &xp, &now, NULL);
    printf("%s: %s, %d layers, context up to %d; memory available now %.1f GB\n", model,
           mlm_family_name(cfg.family), cfg.n_layer, cap, now.available / 1e9);
    printf("largest max_seq_len per user (positions):\n%-12s", "profile");
    for (int b = 0; b < 6; b++) printf(" %9s%-2d", "batch ", batches[b]);
    printf("\n");
    for (int p = 0; p < 3; p++) {
        printf("%-12s", profiles[p]);
        cli_precision prec = {.optimizations = profiles[p]};
        for (int b = 0; b < 6; b++) {
            xp = params_for(batches[b]);
            int32_t fit = cli_largest_seq_len(&cfg, &prec, &xp, cap);
            if (fit == 0) printf(" %11s", "no fit");
            else printf(" %11d", fit);
        }
        printf("\n");
    }
    free(dflt);
    return CLI_OK;
}
