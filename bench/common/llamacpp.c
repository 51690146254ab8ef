/* bench/llamacpp.c: running llama.cpp's llama-bench on meshlm's GGUF export (see llamacpp.h). */
#include "llamacpp.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/gguf.h"
#include "meshlm.h"

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static int sh(const char *cmd) {
    fprintf(stderr, "+ %s\n", cmd);
    return system(cmd);
}

/* Bytes a decode step reads: every tensor, less the embedding when an output tensor exists
 * (only one embedding row is read then). */
static double decode_bytes(const char *gguf_path) {
    mlm_gguf *g;
    mlm_error err;
    if (mlm_gguf_open(gguf_path, &g, &err)) return 0;
    double total = 0;
    int has_output = mlm_gguf_find_tensor(g, "output.weight") != NULL;
    for (int64_t i = 0; i < mlm_gguf_n_tensors(g); i++) {
        const mlm_gguf_tensor *t = mlm_gguf_tensor_at(g, i);
        if (has_output && !strcmp(t->name, "token_embd.weight")) continue;
        total += (double)t->nbytes;
    }
    mlm_gguf_free(g);
    return total;
}

/* Runs llama-bench's command CMD (with -o json) and returns its array of result rows (the
 * caller frees it), or NULL after a message. */
static json_t *bench_rows(const char *cmd) {
    fprintf(stderr, "+ %s\n", cmd);
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    json_error_t jerr;
    json_t *j = json_loadf(p, 0, &jerr);
    pclose(p);
    if (json_is_array(j)) return j;
    fprintf(stderr, "bench: llama-bench gave no JSON (%s)\n", jerr.text);
    json_decref(j);
    return NULL;
}

/* The llama.cpp tool NAME next to $LLAMA_BENCH (or $ENV when set) into OUT. */
static void tool_path(const char *name, const char *env, char *out, size_t size) {
    if (getenv(env)) {
        snprintf(out, size, "%s", getenv(env));
        return;
    }
    snprintf(out, size, "%s", getenv("LLAMA_BENCH"));
    char *slash = strrchr(out, '/');
    snprintf(slash ? slash + 1 : out, size - (size_t)(slash ? slash + 1 - out : 0), "%s", name);
}

llamacpp_result llamacpp_measure(const char *dir, const char *qtype, int n_threads,
                                 const int *prefills, int n_prefills, int n_gen) {
    llamacpp_result r = {0};
    const char *bench = getenv("LLAMA_BENCH");
    if (!bench) return r;
    char quant[1024], src[1024], dst[1024], cmd[4096];
    tool_path("llama-quantize", "LLAMA_QUANTIZE", quant, sizeof quant);
    size_t dl = strlen(dir);
    int gguf = dl > 5 && !strcmp(dir + dl - 5, ".gguf");
    if (gguf) {
        /* a GGUF model: "file" is the file itself, other types are requantized from it */
        const char *base = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
        snprintf(src, sizeof src, "%s", dir);
        if (!strcmp(qtype, "file")) snprintf(dst, sizeof dst, "%s", dir);
        else {
            mkdir("/tmp/meshlm-bench", 0755);
            snprintf(dst, sizeof dst, "/tmp/meshlm-bench/%.*s.%s.gguf", (int)strlen(base) - 5, base,
                     qtype);
        }
        if (!exists(dst)) {
            snprintf(cmd, sizeof cmd, "'%s' --allow-requantize --pure '%s' '%s' %s %d > /dev/null 2>&1",
                     quant, src, dst, qtype, n_threads);
            if (sh(cmd) != 0 || !exists(dst)) {
                fprintf(stderr, "bench: %s failed\n", quant);
                return r;
            }
        }
    } else {
        snprintf(src, sizeof src, "%s/meshlm-export.bf16.gguf", dir);
        snprintf(dst, sizeof dst, "%s/meshlm-export.%s.gguf", dir, qtype);
    }
    if (!gguf && !exists(dst)) {
        if (!exists(src)) {
            mlm_error err;
            fprintf(stderr, "bench: exporting %s to %s\n", dir, src);
            if (mlm_export_gguf(dir, src, MLM_DTYPE_BF16, &err)) {
                fprintf(stderr, "bench: GGUF export failed: %s\n", err.msg);
                return r;
            }
        }
        snprintf(cmd, sizeof cmd, "'%s' --pure '%s' '%s' %s %d > /dev/null 2>&1", quant, src, dst,
                 qtype, n_threads);
        if (sh(cmd) != 0 || !exists(dst)) {
            fprintf(stderr, "bench: %s failed\n", quant);
            return r;
        }
    }
    r.bytes_per_token = decode_bytes(dst);
    snprintf(r.path, sizeof r.path, "%s", dst);
    char plist[256] = "";
    for (int i = 0; i < n_prefills; i++)
        snprintf(plist + strlen(plist), sizeof plist - strlen(plist), "%s%d", i ? "," : "", prefills[i]);
    snprintf(cmd, sizeof cmd, "'%s' -m '%s' -t %d -p %s -n %d -fa 0,1 -r 2 -o json 2>/dev/null",
             bench, dst, n_threads, plist, n_gen);
    json_t *j = bench_rows(cmd);
    if (!j) return r;
    size_t i;
    json_t *row;
    json_array_foreach(j, i, row) {
        int np = (int)json_integer_value(json_object_get(row, "n_prompt"));
        int ng = (int)json_integer_value(json_object_get(row, "n_gen"));
        double ts = json_number_value(json_object_get(row, "avg_ts"));
        /* rows with flash attention off and on: the better of the two */
        if (ng > 0 && np == 0 && ts > r.decode_tps) r.decode_tps = ts;
        for (int k = 0; k < n_prefills; k++)
            if (ng == 0 && np == prefills[k] && ts > r.prefill_tps[k]) r.prefill_tps[k] = ts;
    }
    json_decref(j);
    r.ok = r.decode_tps > 0;
    return r;
}

double llamacpp_decode(const char *path, int n_threads, int depth, int n_gen) {
    const char *bench = getenv("LLAMA_BENCH");
    if (!bench) return 0;
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' -m '%s' -t %d -p 0 -n %d -d %d -fa 0,1 -r 2 -o json 2>/dev/null",
             bench, path, n_threads, n_gen, depth);
    json_t *j = bench_rows(cmd);
    double best = 0;
    size_t i;
    json_t *row;
    json_array_foreach(j, i, row) {
        double ts = json_number_value(json_object_get(row, "avg_ts"));
        if (json_integer_value(json_object_get(row, "n_gen")) > 0 && ts > best) best = ts;
    }
    json_decref(j);
    return best;
}

double llamacpp_batched_decode(const char *path, int n_threads, int n_seqs, int n_prompt,
                               int n_gen) {
    if (!getenv("LLAMA_BENCH")) return 0;
    char tool[1024], cmd[4096];
    tool_path("llama-batched-bench", "LLAMA_BATCHED_BENCH", tool, sizeof tool);
    int ctx = n_seqs * (n_prompt + n_gen) + 64;
    snprintf(cmd, sizeof cmd,
             "'%s' -m '%s' -t %d -c %d -b 2048 -ub 512 -npp %d -ntg %d -npl %d "
             "--output-format jsonl 2>/dev/null",
             tool, path, n_threads, ctx, n_prompt, n_gen, n_seqs);
    fprintf(stderr, "+ %s\n", cmd);
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    double best = 0;
    char line[4096];
    while (fgets(line, sizeof line, p)) {
        json_error_t jerr;
        json_t *row = json_loads(line, 0, &jerr);
        double ts = json_number_value(json_object_get(row, "speed_tg"));
        if (ts > best) best = ts;
        json_decref(row);
    }
    pclose(p);
    return best;
}
