/* bench/vision.c: Llama 3.2 Vision at full size: load, the vision encoder on a 1-tile and a
 * 4-tile image, the image's cross-attention K/V, time to first token with an image, decode
 * tok/s and peak RSS, next to the machine's read bandwidth measured in the same run (decode
 * reads the weights once a token). The encoder is compute-bound: its GFLOP/s is read against
 * the kernels' own (bench/matmul, which bench/vision.sh runs first). Prints figures; never
 * fails on speed.
 *
 *   build/bench/vision [MODEL_DIR]
 *
 * Without MODEL_DIR (or $MESHLM_BENCH_MODEL) it writes `meshlm synth --preset
 * llama-3.2-11b-vision` (bf16, 21.3 GB) to /tmp/meshlm-bench/llama-3.2-11b-vision-bf16 once and
 * reuses it. Environment: MESHLM_BENCH_PROFILES (default performance), MESHLM_BENCH_DECODE
 * (decode tokens, default 32), MESHLM_BENCH_IMAGES (a 1-tile and a 4-tile image, default
 * prompts/vision/chelsea.jpg and prompts/vision/ocr_notice.png). llama.cpp has no Llama 3.2
 * Vision support (neither its text model with cross-attention nor mtmd's encoders), so there
 * is no llama.cpp figure to put beside these. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/bandwidth.h"
#include "common/clock.h"
#include "common/model.h"
#include "meshlm.h"

static double rss_gb(void) { /* peak resident set so far */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss * 1024 / 1e9;
}

static double rss_now_gb(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
        fclose(f);
    }
    return (double)res * (double)sysconf(_SC_PAGESIZE) / 1e9;
}

/* Multiply-adds of the vision encoder, the projector and the cross-attention K/V for one image
 * of N_TILES tiles (every tile slot runs through the encoder; a pair of tokens is masked only
 * when both are padding). */
static double encoder_macs(const mlm_config *c, int n_tiles) {
    const mlm_vision_config *v = &c->vision;
    double G = v->image_size / v->patch_size, T = G * G + 1, TP = (double)(((int)T + 7) / 8 * 8);
    double L = v->max_tiles * TP, nv = n_tiles * T, D = v->n_embd, F = v->n_ff;
    double layers = v->n_layer + v->n_global_layer;
    double linear = L * (4 * D * D + 2 * D * F);
    double attn = 2 * D * (nv * L + (L - nv) * nv); /* QK^T and PV over the unmasked pairs */
    double patch = v->max_tiles * G * G * v->n_channels * v->patch_size * v->patch_size * D;
    double proj = nv * v->output_dim * c->n_embd;
    return layers * (linear + attn) + patch + proj;
}

static double cross_kv_macs(const mlm_config *c, int n_tiles) {
    double G = c->vision.image_size / c->vision.patch_size, T = G * G + 1;
    return n_tiles * T * c->n_embd * 2.0 * c->n_kv_head * c->head_dim * c->n_cross;
}

typedef struct image_fig {
    int tiles;
    double encode_s, bind_s, prefill_s;
} image_fig;

/* One image: open + encode, bind (cross K/V), prefill of the chat prompt; then decode. */
static int run_image(mlm_model *m, mlm_tokenizer *tok, const char *path, int n_decode,
                     image_fig *fig, double *decode_tps) {
    mlm_error err;
    mlm_image *img = NULL;
    double t0 = bench_now();
    if (mlm_image_open(m, path, &img, &err) || mlm_image_encode(m, img, 0, &err)) {
        fprintf(stderr, "bench/vision: %s\n", err.msg);
        mlm_image_free(img);
        return 1;
    }
    fig->encode_s = bench_now() - t0;
    mlm_image_info info;
    mlm_image_get_info(img, &info);
    fig->tiles = info.n_tiles;
    mlm_chat_part parts[2] = {{NULL, mlm_model_image_token(m)},
                              {"Write a haiku for this image.", 0}};
    mlm_chat_parts msg = {"user", parts, 2};
    mlm_tokens prompt;
    mlm_tokens_init(&prompt);
    mlm_exec_params ep = mlm_exec_default_params();
    ep.max_seq_len = 256;
    ep.max_images = 1;
    mlm_exec *e = NULL;
    int rc = 1;
    if (mlm_tokenizer_encode_chat_parts(tok, &msg, 1, 1, &prompt, &err) ||
        mlm_exec_create(m, &ep, &e, &err)) {
        fprintf(stderr, "bench/vision: %s\n", err.msg);
        goto out;
    }
    int32_t pos = 0;
    while (prompt.ids[pos] != mlm_model_image_token(m))
        pos++;
    double t1 = bench_now();
    if (mlm_exec_seq_set_images(e, 0, &img, &pos, 1, &err)) goto fail;
    double t2 = bench_now();
    int32_t n = (int32_t)prompt.n, seq[256] = {0}, p[256];
    int8_t want[256] = {0};
    for (int32_t i = 0; i < n; i++)
        p[i] = i;
    want[n - 1] = 1;
    float *logits = malloc((size_t)mlm_model_config(m)->n_vocab * sizeof *logits);
    mlm_batch b = {n, prompt.ids, seq, p, want};
    if (mlm_exec_step(e, &b, logits, &err)) {
        free(logits);
        goto fail;
    }
    double t3 = bench_now();
    fig->bind_s = t2 - t1, fig->prefill_s = t3 - t2;
    /* decode: greedy-free fixed tokens (speed does not depend on which), iteration 0 apart */
    double dsum = 0;
    for (int i = 0; i < n_decode; i++) {
        int32_t tk = (int32_t)((i * 7919 + 13) % 128000), ps = n + i;
        int8_t w = 1;
        mlm_batch d = {1, &tk, seq, &ps, &w};
        double ti = bench_now();
        if (mlm_exec_step(e, &d, logits, &err)) {
            free(logits);
            goto fail;
        }
        if (i) dsum += bench_now() - ti;
    }
    *decode_tps = n_decode > 1 && dsum > 0 ? (n_decode - 1) / dsum : 0;
    free(logits);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "bench/vision: %s\n", err.msg);
out:
    mlm_exec_free(e);
    mlm_tokens_deinit(&prompt);
    mlm_image_free(img);
    return rc;
}

static int bench_profile(const char *dir, const char *profile, const char **images, double bw,
                         int n_decode) {
    mlm_error err;
    bench_load ld;
    mlm_model *m = bench_load_warm("bench/vision", dir, profile, &ld);
    if (!m) return 1;
    double rss_load = rss_now_gb();
    mlm_tokenizer *tok = NULL;
    if (mlm_tokenizer_load(dir, &tok, &err)) {
        fprintf(stderr, "bench/vision: %s\n", err.msg);
        mlm_model_free(m);
        return 1;
    }
    const mlm_config *c = mlm_model_config(m);
    double bytes = (double)mlm_model_weight_bytes(m);
    printf("%s: %s kernels, KV %s; %.2f GB of weights read per text token\n", profile,
           mlm_model_kernels(m), mlm_dtype_name(mlm_model_kv_dtype(m)), bytes / 1e9);
    if (ld.built) printf("  cache built by the first load    %8.1f s\n", ld.first_s);
    printf("  load (warm, cache mapped)        %8.2f s, RSS %.2f GB\n", ld.load_s, rss_load);
    for (int k = 0; k < 2; k++) {
        image_fig f = {0};
        double tps = 0;
        if (run_image(m, tok, images[k], n_decode, &f, &tps)) continue;
        double macs = encoder_macs(c, f.tiles), xmacs = cross_kv_macs(c, f.tiles);
        printf("  %s (%d tile%s):\n", images[k], f.tiles, f.tiles > 1 ? "s" : "");
        printf("    vision encoder + projector     %8.2f s (%.0f GMAC, %.1f GFLOP/s)\n", f.encode_s,
               macs / 1e9, 2 * macs / f.encode_s / 1e9);
        printf("    cross-attention K/V            %8.2f s (%.0f GMAC, %.1f GFLOP/s)\n", f.bind_s,
               xmacs / 1e9, 2 * xmacs / f.bind_s / 1e9);
        printf("    prefill of the chat prompt     %8.2f s\n", f.prefill_s);
        printf("    TTFT with the image            %8.2f s (encoder + K/V + prefill)\n",
               f.encode_s + f.bind_s + f.prefill_s);
        printf("    decode batch 1                 %8.2f tok/s = %.2f GB/s = %.0f%% of read "
               "bandwidth\n",
               tps, bytes * tps / 1e9, bw > 0 ? 100.0 * bytes * tps / 1e9 / bw : 0);
    }
    printf("  peak RSS                         %8.2f GB\n", rss_gb());
    mlm_tokenizer_free(tok);
    mlm_model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : getenv("MESHLM_BENCH_MODEL");
    if (!dir) dir = bench_synth_model("bench/vision", "llama-3.2-11b-vision");
    if (!dir) return 1;
    const char *profiles =
        getenv("MESHLM_BENCH_PROFILES") ? getenv("MESHLM_BENCH_PROFILES") : "performance";
    const char *images[2] = {"prompts/vision/chelsea.jpg", "prompts/vision/ocr_notice.png"};
    char img_env[512];
    if (getenv("MESHLM_BENCH_IMAGES")) {
        snprintf(img_env, sizeof img_env, "%s", getenv("MESHLM_BENCH_IMAGES"));
        char *comma = strchr(img_env, ',');
        if (comma) *comma = 0, images[0] = img_env, images[1] = comma + 1;
    }
    int n_decode = getenv("MESHLM_BENCH_DECODE") ? atoi(getenv("MESHLM_BENCH_DECODE")) : 32;
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    const char *how = "";
    double bw = bench_read_bandwidth(threads, &how);
    printf("bench/vision: %s, %d threads, %s\n", dir, threads, mlm_cpu_name());
    printf("machine read bandwidth             %8.2f GB/s (1 GiB read, best %s)\n", bw, how);
    printf("llama.cpp: no Llama 3.2 Vision support to compare with (ggml-org/llama.cpp#9643)\n");
    char list[256];
    snprintf(list, sizeof list, "%s", profiles);
    int rc = 0;
    for (char *save, *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save))
        rc |= bench_profile(dir, name, images, bw, n_decode);
    return rc;
}
