/* tools/cli/plan.c: `meshlm plan -m DIR`: the largest context per user that fits this
 * machine's available memory, for each precision profile and demo batch size: weights in the
 * profile's types + the KV cache (the profile's type, every position of every user) + the
 * step scratch (+ for Llama 3.2 Vision one image per user), as `meshlm demo` plans before it
 * allocates. */
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
    tool_precision mesh_flags = {0};
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (tool_is_help(argv[i])) {
            printf(
                "usage: meshlm plan [-m DIR] [--mesh M | --tp N [--dp M]]\n\n"
                "Prints, for each precision profile and batch size (1, 2, 4, 8, 16, 32), the\n"
                "largest max_seq_len per user whose weights + KV cache + scratch fit the memory\n"
                "available now (as `meshlm demo` checks before allocating). Without -m, the\n"
                "embedded default model.\n\n"
                "  --mesh M          for one rank of mesh M (N150, N300, T3K, TG): its shard\n"
                "                    of the weights and its KV heads, on a machine like this\n"
                "                    one (a batch is one lane's users); no mpirun needed\n"
                "  --tp N, --dp M    the same for TP N ranks per lane, M lanes\n");
            return TOOL_OK;
        } else if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) {
            if (!(model = tool_value(argc, argv, &i)))
                return tool_usage("plan", "-m needs a value");
        } else if (!strcmp(argv[i], "--mesh") || !strcmp(argv[i], "--tp") ||
                   !strcmp(argv[i], "--dp")) {
            const char *a = argv[i];
            if (!(v = tool_value(argc, argv, &i))) return tool_usage("plan", "%s needs a value", a);
            if (!tool_mesh_flag("plan", a, v, &mesh_flags)) return TOOL_USAGE;
        } else {
            return tool_usage("plan", "unknown argument '%s'", argv[i]);
        }
    }
    char *dflt = model ? NULL : tool_default_model("plan");
    if (!model && !(model = dflt)) return tool_usage("plan", "give -m DIR");
    mlm_config cfg;
    mlm_error err = {0};
    if (mlm_config_load(model, &cfg, &err)) {
        free(dflt);
        return tool_fail(&err);
    }
    int32_t cap = cfg.n_ctx_train > 0 ? cfg.n_ctx_train : 131072;
    mlm_mesh mesh = {.tp = 1, .dp = 1, .devices = 1};
    if (mesh_flags.mesh || mesh_flags.tp || mesh_flags.dp) {
        /* the mesh as it would run: a world of exactly its devices */
        int devices = mesh_flags.mesh ? mlm_mesh_devices(mesh_flags.mesh)
                                      : (mesh_flags.tp ? mesh_flags.tp : 1) *
                                            (mesh_flags.dp ? mesh_flags.dp : 1);
        if (mlm_mesh_resolve(mesh_flags.mesh, mesh_flags.tp, mesh_flags.dp, &cfg, devices, 0, &mesh,
                             &err)) {
            free(dflt);
            fprintf(stderr, "meshlm plan: %s\n", err.msg);
            return TOOL_RUNTIME;
        }
    }
    /* a GGUF file's own types first (its default), then the others */
    int gguf = !strcmp(mlm_model_default_profile(model), "native");
    const char *profiles[] = {"native", "performance", "accuracy", "bf16"};
    int n_prof = 4, first = gguf ? 0 : 1;
    static const int32_t batches[] = {1, 2, 4, 8, 16, 32};
    mlm_exec_params xp = params_for(1);
    mlm_memory_plan now;
    mlm_memory_plan_tp(&cfg, mesh.tp, "performance", NULL, &xp, &now, NULL);
    printf("%s: %s, %d layers, context up to %d; memory available now %.1f GB\n", model,
           mlm_family_name(cfg.family), cfg.n_layer, cap, now.available / 1e9);
    if (cfg.family == MLM_FAMILY_MLLAMA)
        printf("images (Llama 3.2 Vision): each user holds one image of up to %d tiles; counted "
               "below: %.2f GB for batch 1 (its image K/V, the vision encoder's scratch and one "
               "image's states)\n",
               cfg.vision.max_tiles, now.images / 1e9);
    if (mesh.devices > 1) {
        printf("mesh %s: %d ranks, TP %d x DP %d; one rank holds 1/%d of the heads and MLP "
               "columns and its KV heads. Per rank, on a machine like this one:\n",
               mesh.name[0] ? mesh.name : "--tp/--dp", mesh.devices, mesh.tp, mesh.dp, mesh.tp);
        for (int p = first; p < n_prof; p++) {
            mlm_memory_plan one, k1;
            mlm_exec_params x1 = params_for(1);
            x1.max_seq_len = 1024, x1.max_num_blocks = 0;
            if (mlm_memory_plan_at(model, mesh.tp, profiles[p], NULL, &x1, &one, &err) ||
                mlm_memory_plan_at(model, 1, profiles[p], NULL, &x1, &k1, &err)) {
                printf("  %-12s %s\n", profiles[p], err.msg);
                continue;
            }
            printf("  %-12s weights %6.2f GB of %6.2f GB, KV %6.1f MB per 1K positions per user\n",
                   profiles[p], one.weights / 1e9, k1.weights / 1e9, one.kv / 1e6);
        }
    }
    printf("largest max_seq_len per user (positions)%s:\n%-12s",
           mesh.devices > 1 ? ", per rank" : "", "profile");
    for (int b = 0; b < 6; b++) printf(" %9s%-2d", "batch ", batches[b]);
    printf("\n");
    for (int p = first; p < n_prof; p++) {
        printf("%-12s", profiles[p]);
        tool_precision prec = {.optimizations = profiles[p], .tp = mesh.tp};
        for (int b = 0; b < 6; b++) {
            xp = params_for(batches[b]);
            int32_t fit = tool_largest_seq_len(model, &prec, &xp, cap);
            if (fit == 0) printf(" %11s", "no fit");
            else printf(" %11d", fit);
        }
        printf("\n");
    }
    free(dflt);
    return TOOL_OK;
}
