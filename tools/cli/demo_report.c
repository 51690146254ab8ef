/* tools/cli/demo_report.c: the demo's report: per user the prompt (shortened), its image
 * (vision presets) and the output, then the seeds' metrics (for the vision presets also the
 * vision encoder's time per image and TTFT without it); the same as JSON with --report;
 * --expect targets. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "demo_vision.h"

/* One line of at most MAX characters of S, for the report. */
static void shorten(const char *s, int max, char *out, size_t size) {
    size_t o = 0;
    for (const char *p = s; *p && o + 4 < size && (int)o < max; p++)
        out[o++] = *p == '\n' || *p == '\t' ? ' ' : *p;
    if (strlen(s) > o && o + 4 < size) out[o++] = '.', out[o++] = '.', out[o++] = '.';
    out[o] = 0;
}

static void json_str_field(FILE *f, const char *key, const char *v, int comma) {
    fprintf(f, "\"%s\":", key);
    tool_json_string(f, v ? v : "", v ? strlen(v) : 0);
    if (comma) fputc(',', f);
}

/* Checks the metrics against {"<preset>": {"metric": target, ...}} in FILE with 5% tolerance:
 * rates must reach 95% of the target, times and memory stay under 105%. Returns the number of
 * shortfalls (listed on stderr), or -1 if FILE cannot be read. */
static int check_expect(const char *file, const demo_config *c, const demo_metrics *m,
                        const demo_vision_metrics *vm, double top1, double top5) {
    json_error_t jerr;
    json_t *j = json_load_file(file, 0, &jerr);
    if (!j) {
        fprintf(stderr, "meshlm demo: --expect %s: %s\n", file, jerr.text);
        return -1;
    }
    json_t *t = json_object_get(j, c->preset);
    if (!json_is_object(t)) {
        fprintf(stderr, "meshlm demo: --expect %s has no targets for preset '%s'\n", file, c->preset);
        json_decref(j);
        return -1;
    }
    double per_image = vm && vm->images->n ? vm->encode_s / vm->images->n * 1e3 : -1;
    struct { const char *name; double v; int higher_better;
    } ms[] = {{"ttft_ms", m->ttft_ms, 0},
              {"prefill_tps", m->prefill_tps, 1},
              {"decode_tps_user", m->decode_tps_user, 1},
              {"decode_tps", m->decode_tps, 1},
              {"decode_step_ms", m->step_ms, 0},
              {"peak_memory_gb", m->peak_gb, 0},
              {"top1", top1, 1},
              {"top5", top5, 1},
              {"vision_encode_ms_per_image", per_image, 0},
              {"ttft_text_ms", vm ? vm->ttft_text_ms : -1, 0}};
    int bad = 0;
    const char *key;
    json_t *v;
    json_object_foreach(t, key, v) {
        size_t k = 0;
        while (k < sizeof ms / sizeof *ms && strcmp(ms[k].name, key)) k++;
        if (k == sizeof ms / sizeof *ms || !json_is_number(v) || (k >= 8 && !vm)) {
            fprintf(stderr, "meshlm demo: --expect %s: unknown metric '%s' for '%s'\n", file, key,
                    c->preset);
            bad++;
            continue;
        }
        double want = json_number_value(v), got = ms[k].v;
        int ok = ms[k].higher_better ? got >= 0.95 * want : got <= 1.05 * want;
        if (!ok) {
            fprintf(stderr, "  %s: %.3f, target %.3f (%s, 5%% tolerance)\n", key, got, want,
                    ms[k].higher_better ? "at least" : "at most");
            bad++;
        }
    }
    json_decref(j);
    return bad;
}

/* The file name of image K of VM, for the report's lines. */
static const char *image_name(const demo_vision_metrics *vm, int k) {
    const char *s = strrchr(vm->images->path[k], '/');
    return s ? s + 1 : vm->images->path[k];
}

/* The vision lines of the report: the encoder per image and in all, TTFT without it. */
static void print_vision(const demo_vision_metrics *vm) {
    const demo_images *im = vm->images;
    printf("  vision encoder          %10.1f ms for %d image%s (%.1f ms per image; each file "
           "once)\n",
           vm->encode_s * 1e3, im->n, im->n == 1 ? "" : "s",
           im->n ? vm->encode_s / im->n * 1e3 : 0);
    for (int k = 0; k < im->n; k++)
        printf("    %-20.20s  %10.1f ms (%d x %d, %d tile%s, %d tokens; decoded and "
               "preprocessed in %.1f ms)\n",
               image_name(vm, k), im->encode_s[k] * 1e3, im->info[k].width, im->info[k].height,
               im->info[k].n_tiles, im->info[k].n_tiles == 1 ? "" : "s", im->info[k].n_tokens,
               im->open_s[k] * 1e3);
    printf("  image K/V               %10.1f ms (cross-attention keys and values for %d users; "
           "users of one image share them)\n",
           vm->bind_s * 1e3, vm->image_users);
}

/* The speculative pass against the plain one. */
static void print_spec(const demo_config *c, const demo_metrics *mt, const char *failures) {
    if (c->draft.model)
        printf("  speculative decoding    draft model %s, --draft-max %lld\n", c->draft.model,
               c->draft.max);
    else
        printf("  speculative decoding    prompt lookup, --draft-max %lld\n", c->draft.max);
    printf("  drafts                  %10lld drafted, %lld accepted (%.1f %%), %.2f tokens per "
           "step and user\n",
           (long long)mt->drafted, (long long)mt->accepted,
           mt->drafted ? 100.0 * (double)mt->accepted / (double)mt->drafted : 0.0,
           mt->tokens_per_step);
    printf("  decode plain            %10.2f tok/s/user (tokens after each user's first, over the "
           "time after prefill)\n",
           mt->plain_tps_user);
    printf("  decode speculative      %10.2f tok/s/user, %.2fx plain\n", mt->spec_tps_user,
           mt->speedup);
    if (mt->spec_checks)
        printf("  same as plain           %10d greedy outputs compared, %s\n", mt->spec_checks,
               strstr(failures, "speculative decoding") ? "SOME DIFFER" : "all identical");
    if (mt->spec_sampled)
        printf("  sampled                 %10d outputs not compared (speculative sampling keeps "
               "the distribution, not the draws)\n",
               mt->spec_sampled);
}

int demo_report(const demo_config *c, const char *model, const mlm_model *m,
                const demo_metrics *mt, const char *failures, int n_users, char **prompts,
                char **outputs, double top1, double top5) {
    return demo_report_vision(c, model, m, mt, NULL, failures, n_users, prompts, outputs, top1,
                              top5);
}

int demo_report_vision(const demo_config *c, const char *model, const mlm_model *m,
                       const demo_metrics *mt, const demo_vision_metrics *vm, const char *failures,
                       int n_users, char **prompts, char **outputs, double top1, double top5) {
    const mlm_config *cfg = mlm_model_config(m);
    if (!c->quiet)
        for (int i = 0; i < n_users; i++) {
            char p[200], o[400];
            shorten(prompts[i], 120, p, sizeof p);
            shorten(outputs[i], 300, o, sizeof o);
            int k = vm ? vm->image_of_output[i] : -1;
            if (vm)
                printf("user %d (batch %d)\n  image:  %s\n  prompt: %s\n  output: %s\n",
                       i % c->batch_size, i / c->batch_size, k >= 0 ? image_name(vm, k) : "(none)",
                       p, o);
            else if (mt->n_lanes > 1) /* lanes come as batches: lane-major, then repeat batch */
                printf("user %d (lane %d, batch %d)\n  prompt: %s\n  output: %s\n",
                       i % c->batch_size, i / c->batch_size / c->repeat_batches,
                       i / c->batch_size % c->repeat_batches, p, o);
            else
                printf("user %d (batch %d)\n  prompt: %s\n  output: %s\n", i % c->batch_size,
                       i / c->batch_size, p, o);
        }
    printf("\n== %s: %s, %s profile, %s kernels, batch %d, max_seq_len %d\n", c->preset, model,
           mlm_model_profile(m), mlm_model_kernels(m), c->batch_size, c->max_seq_len);
    printf("  load                    %10.2f s\n", mt->load_s);
    if (top1 >= 0) {
        printf("  token accuracy top-1    %10.2f %%\n", top1 * 100);
        printf("  token accuracy top-5    %10.2f %%\n", top5 * 100);
    } else if (vm) {
        print_vision(vm);
        printf("  TTFT                    %10.1f ms (a batch: vision encoder + image K/V + "
               "prefill, as the seeds' prefill_forward)\n",
               mt->ttft_ms);
        printf("  TTFT without vision     %10.1f ms (a batch's prefill alone)\n", vm->ttft_text_ms);
        printf("  prefill                 %10.1f tok/s (%.1f tok/s without vision)\n",
               mt->prefill_tps, vm->prefill_text_tps);
    } else {
        printf("  TTFT                    %10.1f ms\n", mt->ttft_ms);
        printf("  prefill                 %10.1f tok/s\n", mt->prefill_tps);
    }
    if (top1 < 0) {
        printf("  decode                  %10.2f tok/s/user\n", mt->decode_tps_user);
        printf("  decode total            %10.2f tok/s\n", mt->decode_tps);
        printf("  decode step (mean)      %10.2f ms\n", mt->step_ms);
        if (mt->n_lanes > 1) {
            printf("  data-parallel lanes     %10d lanes of TP %d, decode tok/s per lane:",
                   mt->n_lanes, mt->tp);
            for (int l = 0; l < mt->n_lanes; l++)
                printf(" %.2f", mt->lane_tps[l]);
            printf("\n");
        }
    }
    printf("  peak memory             %10.2f GB\n", mt->peak_gb);
    if (mt->determinism_checks)
        printf("  determinism             %10d pairs of outputs of one prompt compared, %s\n",
               mt->determinism_checks, strstr(failures, "determinism") ? "SOME DIFFER" : "all identical");
    if (mt->spec) print_spec(c, mt, failures);
    if (failures[0]) fprintf(stderr, "%s", failures);
    int rc = failures[0] ? TOOL_RUNTIME : TOOL_OK;
    if (c->report) {
        char tmp[1200];
        snprintf(tmp, sizeof tmp, "%s.tmp", c->report);
        FILE *f = fopen(tmp, "w");
        if (!f) {
            perror(tmp);
            return TOOL_RUNTIME;
        }
        fputc('{', f);
        json_str_field(f, "preset", c->preset, 1);
        json_str_field(f, "model", model, 1);
        fprintf(f, "\"family\":\"%s\",", mlm_family_name(cfg->family));
        json_str_field(f, "optimizations", mlm_model_profile(m), 1);
        json_str_field(f, "kernels", mlm_model_kernels(m), 1);
        fprintf(f, "\"batch_size\":%d,\"max_seq_len\":%d,\"max_generated_tokens\":%d,"
                   "\"repeat_batches\":%d,\"instruct\":%d,\"stop_at_eos\":%d,"
                   "\"page_params\":[%d,%d],\"paged_attention\":%d,"
                   "\"sampling\":{\"temperature\":%g,\"top_p\":%g,\"top_k\":%d,\"per_user\":%d},",
                c->batch_size, c->max_seq_len, c->max_generated_tokens, c->repeat_batches,
                c->instruct, c->stop_at_eos, c->block_size, c->max_num_blocks, c->paged_attention,
                c->temperature, c->top_p, c->top_k, c->per_user_sampling);
        fprintf(f, "\"metrics\":{\"load_s\":%.3f,\"ttft_ms\":%.3f,\"prefill_tps\":%.3f,"
                   "\"decode_tps_user\":%.4f,\"decode_tps\":%.4f,\"decode_step_ms\":%.3f,"
                   "\"peak_memory_gb\":%.3f,\"determinism_checks\":%d",
                mt->load_s, mt->ttft_ms, mt->prefill_tps, mt->decode_tps_user, mt->decode_tps,
                mt->step_ms, mt->peak_gb, mt->determinism_checks);
        if (mt->n_lanes > 1) {
            fprintf(f, ",\"lanes\":%d,\"tp\":%d,\"lane_decode_tps\":[", mt->n_lanes, mt->tp);
            for (int l = 0; l < mt->n_lanes; l++)
                fprintf(f, "%s%.4f", l ? "," : "", mt->lane_tps[l]);
            fprintf(f, "],\"lane_decode_tps_user\":[");
            for (int l = 0; l < mt->n_lanes; l++)
                fprintf(f, "%s%.4f", l ? "," : "", mt->lane_tps_user[l]);
            fputc(']', f);
        }
        if (top1 >= 0) fprintf(f, ",\"top1\":%.5f,\"top5\":%.5f", top1, top5);
        if (mt->spec) {
            fprintf(f, ",\"speculative\":{");
            json_str_field(f, "method", c->draft.model ? "draft-model" : "prompt-lookup", 1);
            if (c->draft.model) json_str_field(f, "draft_model", c->draft.model, 1);
            fprintf(f,
                    "\"draft_max\":%lld,\"draft_tokens\":%lld,\"draft_accepted\":%lld,"
                    "\"tokens_per_step\":%.4f,\"plain_decode_tps_user\":%.4f,"
                    "\"decode_tps_user\":%.4f,\"speedup\":%.4f,\"compared\":%d,"
                    "\"sampled\":%d}",
                    c->draft.max, (long long)mt->drafted, (long long)mt->accepted,
                    mt->tokens_per_step, mt->plain_tps_user, mt->spec_tps_user, mt->speedup,
                    mt->spec_checks, mt->spec_sampled);
        }
        if (vm) {
            const demo_images *im = vm->images;
            fprintf(f,
                    ",\"n_images\":%d,\"image_users\":%d,\"image_open_ms\":%.3f,"
                    "\"vision_encode_ms\":%.3f,\"vision_encode_ms_per_image\":%.3f,"
                    "\"image_kv_ms\":%.3f,\"ttft_text_ms\":%.3f,\"prefill_text_tps\":%.3f",
                    im->n, vm->image_users, vm->open_s * 1e3, vm->encode_s * 1e3,
                    im->n ? vm->encode_s / im->n * 1e3 : 0, vm->bind_s * 1e3, vm->ttft_text_ms,
                    vm->prefill_text_tps);
            fprintf(f, "},\"images\":[");
            for (int k = 0; k < im->n; k++) {
                fprintf(f, "%s{", k ? "," : "");
                json_str_field(f, "file", im->path[k], 1);
                fprintf(f,
                        "\"width\":%d,\"height\":%d,\"tiles\":%d,\"tokens\":%d,"
                        "\"open_ms\":%.3f,\"encode_ms\":%.3f}",
                        im->info[k].width, im->info[k].height, im->info[k].n_tiles,
                        im->info[k].n_tokens, im->open_s[k] * 1e3, im->encode_s[k] * 1e3);
            }
            fputc(']', f);
        } else {
            fputc('}', f);
        }
        fprintf(f, ",\"users\":[");
        for (int i = 0; i < n_users; i++) {
            fprintf(f, "%s{\"batch\":%d,\"slot\":%d,", i ? "," : "", i / c->batch_size,
                    i % c->batch_size);
            json_str_field(f, "prompt", prompts[i], 1);
            if (vm && vm->image_of_output[i] >= 0)
                json_str_field(f, "image", vm->images->path[vm->image_of_output[i]], 1);
            else if (vm)
                fprintf(f, "\"image\":null,");
            json_str_field(f, "output", outputs[i], 0);
            fputc('}', f);
        }
        fprintf(f, "],");
        json_str_field(f, "failures", failures, 0);
        fprintf(f, "}\n");
        if (fclose(f) != 0 || rename(tmp, c->report) != 0) {
            perror(c->report);
            return TOOL_RUNTIME;
        }
    }
    if (c->expect) {
        int bad = check_expect(c->expect, c, mt, vm, top1, top5);
        if (bad) {
            if (bad > 0) fprintf(stderr, "meshlm demo: %d target(s) of %s not met\n", bad, c->expect);
            rc = TOOL_RUNTIME;
        }
    }
    return rc;
}
