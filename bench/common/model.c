/* bench/common/model.c: the synthetic checkpoint and the two timed loads (see model.h). */
#include "model.h"

#include <stdio.h>
#include <sys/stat.h>

#include "clock.h"

static void progress(void *ctx, int64_t done, int64_t total) {
    (void)ctx;
    if (done == total || done % (256 << 20) < (1 << 20))
        fprintf(stderr, "\rsynth: %lld / %lld MB", (long long)(done >> 20),
                (long long)(total >> 20));
    if (done == total) fprintf(stderr, "\n");
}

const char *bench_synth_model(const char *tag, const char *preset) {
    static char dir[256];
    snprintf(dir, sizeof dir, "/tmp/meshlm-bench/%s-bf16", preset);
    char cfg[300];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    struct stat st;
    if (stat(cfg, &st) == 0) return dir;
    mkdir("/tmp/meshlm-bench", 0755);
    mlm_synth_params p = mlm_synth_default_params();
    p.preset = preset;
    p.out_dir = dir;
    p.dtype = MLM_DTYPE_BF16;
    p.progress = progress;
    p.tokenizer = "tests/data/tokenizer/llama3/tokenizer.model"; /* for the GGUF export */
    mlm_error err;
    if (mlm_synth(&p, &err) != MLM_OK) {
        fprintf(stderr, "%s: synth failed: %s\n", tag, err.msg);
        return NULL;
    }
    return dir;
}

mlm_model *bench_load_warm(const char *tag, const char *dir, const char *profile, bench_load *out) {
    mlm_model_params mp = mlm_model_default_params();
    mp.optimizations = profile;
    mlm_error err;
    mlm_model *m = NULL;
    double t = bench_now();
    if (mlm_model_load(dir, &mp, &m, &err) != MLM_OK) {
        fprintf(stderr, "%s: %s\n", tag, err.msg);
        return NULL;
    }
    out->first_s = bench_now() - t;
    out->built = mlm_model_cache_built(m);
    mlm_model_free(m);
    t = bench_now();
    if (mlm_model_load(dir, &mp, &m, &err) != MLM_OK) {
        fprintf(stderr, "%s: %s\n", tag, err.msg);
        return NULL;
    }
    out->load_s = bench_now() - t;
    return m;
}
