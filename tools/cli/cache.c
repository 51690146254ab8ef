/* tools/cli/cache.c: `meshlm cache`: build a model's weight cache ahead of time, list the
 * caches in a folder (with whether each still matches its model), or remove them. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void help(void) {
    printf("usage: meshlm cache -m DIR [--optimizations P] [--decoder-config F]\n"
           "       meshlm cache --list [-m DIR]\n"
           "       meshlm cache --clear [-m DIR] [--optimizations P]\n"
           "\n"
           "The first run of a model in a BFP profile (performance, accuracy) converts its\n"
           "checkpoint into one cache file; later runs map that file. This command builds it\n"
           "ahead of time (or checks it: a stale, truncated or corrupt cache is rebuilt).\n"
           "\n"
           "  -m, --model DIR          model directory\n" TOOL_PRECISION_HELP
           "      --list               list the cache files of DIR's cache folder (without -m:\n"
           "                           $MESHLM_CACHE or the user cache folder), with size, model,\n"
           "                           profile and whether each still matches its model\n"
           "      --clear              remove the cache files of DIR (only those of profile P\n"
           "                           when --optimizations is given); without -m, every cache\n"
           "                           file in $MESHLM_CACHE or the user cache folder\n"
           "  -h, --help               this help\n"
           "\n"
           "Cache location: $MESHLM_CACHE if set, else DIR/meshlm-cache, else (DIR read-only)\n"
           "$XDG_CACHE_HOME/meshlm or ~/.cache/meshlm. A file is named\n"
           "<model>.<profile>.<id>.mlmc; its key holds the model's file sizes and mtimes, the\n"
           "profile's types, the mesh and the format version. On a mesh (under mpirun, with\n"
           "--mesh or --tp) each rank builds its own shard's file in the folder of the mesh\n"
           "of that many devices: N300/ (TP 2), T3K/ (TP 8), TG/ (TP 32), TPn/ otherwise,\n"
           "named <model>.<profile>.<id>.rank<r>of<n>.mlmc; DP lanes share them.\n");
}

static int list_or_clear(const char *model, int clear, const char *only_profile) {
    char dirs[1][1024];
    int n_dirs;
    mlm_error err = {0};
    if (mlm_cache_dirs(model, dirs, &n_dirs, &err)) return tool_fail(&err);
    char real[PATH_MAX] = "";
    if (model && !realpath(model, real)) {
        fprintf(stderr, "meshlm cache: %s: no such model folder\n", model);
        return TOOL_RUNTIME;
    }
    mlm_cache_entry *list;
    int n;
    if (mlm_cache_list(dirs[0], &list, &n, &err)) return tool_fail(&err);
    int shown = 0, rc = TOOL_OK;
    double total = 0;
    for (int i = 0; i < n; i++) {
        const mlm_cache_entry *c = &list[i];
        if (model && strcmp(c->model, real)) continue;
        if (only_profile && strcmp(c->profile, only_profile)) continue;
        shown++;
        total += (double)c->bytes;
        if (clear) {
            if (unlink(c->path) != 0) {
                perror(c->path);
                rc = TOOL_RUNTIME;
            } else {
                printf("removed %s (%.2f GB)\n", c->path, c->bytes / 1e9);
            }
        } else {
            char shard[48] = "";
            if (c->tp_size > 1)
                snprintf(shard, sizeof shard, "  TP shard %d of %d", c->tp_rank, c->tp_size);
            printf("%s\n  %.2f GB  %s%s  %s  %s%s%s\n", c->path, c->bytes / 1e9,
                   c->profile[0] ? c->profile : "?", shard, c->model[0] ? c->model : "?",
                   c->valid ? "valid" : "INVALID", c->valid ? "" : ": ", c->valid ? "" : c->why);
        }
    }
    if (!shown) printf("no cache files in %s%s\n", dirs[0], model ? " for this model" : "");
    else printf("%d file%s, %.2f GB%s\n", shown, shown == 1 ? "" : "s", total / 1e9,
                clear ? " removed" : "");
    free(list);
    return rc;
}

int cmd_cache(int argc, char **argv) {
    const char *model = NULL;
    int list = 0, clear = 0, profile_given = 0;
    tool_precision prec = {.optimizations = "performance"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (tool_is_help(a)) {
            help();
            return TOOL_OK;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = tool_value(argc, argv, &i)))
                return tool_usage("cache", "%s needs a value", a);
        } else if (!strcmp(a, "--list")) {
            list = 1;
        } else if (!strcmp(a, "--clear")) {
            clear = 1;
        } else if (tool_is_precision_flag(a)) {
            if (!(v = tool_value(argc, argv, &i)))
                return tool_usage("cache", "%s needs a value", a);
            if (!tool_precision_flag("cache", a, v, &prec)) return TOOL_USAGE;
            profile_given |= !strcmp(a, "--optimizations") || !strcmp(a, "--dtype");
        } else {
            return tool_usage("cache", "unknown argument '%s'", a);
        }
    }
    if (list && clear) return tool_usage("cache", "give --list or --clear, not both");
    if (list || clear) return list_or_clear(model, clear, profile_given ? prec.optimizations : NULL);
    if (!model) return tool_usage("cache", "give -m DIR (or --list / --clear)");
    if (!strcmp(prec.optimizations, "bf16") || !strcmp(prec.optimizations, "f32")) {
        fprintf(stderr, "meshlm cache: the %s profile maps the checkpoint directly; only "
                        "performance, accuracy and native have a cache\n",
                prec.optimizations);
        return TOOL_USAGE;
    }
    double t0 = tool_now();
    mlm_model *m = NULL;
    mlm_error err = {0};
    if (tool_load_model("cache", model, &prec, 0, &m, &err)) return tool_fail(&err);
    printf("%s %s (%s, %.2f GB of weights per token) in %.2f s\n",
           mlm_model_cache_built(m) ? "built" : "valid, mapped", mlm_model_cache_path(m),
           mlm_model_profile(m), mlm_model_weight_bytes(m) / 1e9, tool_now() - t0);
    mlm_model_free(m);
    return TOOL_OK;
}
