/* tools/common/util.c: error and usage reporting, option values, JSON strings, file input. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/tool.h"

int tool_fail(const mlm_error *err) {
    const char *msg = err->msg[0] ? err->msg : mlm_status_str(err->status);
    if (tool_world_size() > 1) /* on a mesh: each rank says what failed, with its rank */
        fprintf(tool_err_stream(), "meshlm (rank %d of %d): %s\n", tool_rank(), tool_world_size(),
                msg);
    else
        fprintf(stderr, "meshlm: %s\n", msg);
    return TOOL_RUNTIME;
}

int tool_usage(const char *cmd, const char *fmt, ...) {
    tool_mesh_alike(); /* every rank parses the same flags */
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "meshlm %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'meshlm %s --help'.\n", cmd);
    return TOOL_USAGE;
}

int tool_is_help(const char *arg) { return !strcmp(arg, "-h") || !strcmp(arg, "--help"); }

const char *tool_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) return NULL;
    return argv[++*i];
}

void tool_json_string(FILE *out, const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', out);
    for (size_t i = 0; i < len;) {
        unsigned c = p[i];
        size_t n = tool_utf8_len(p + i, len - i);
        if (n == 0) {
            fputs("\\ufffd", out);
            i++;
            continue;
        }
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", out);
        else if (c == '\r')
            fputs("\\r", out);
        else if (c == '\t')
            fputs("\\t", out);
        else if (c < 0x20 || c == 0x7f)
            fprintf(out, "\\u%04x", c);
        else
            fwrite(p + i, 1, n, out);
        i += n;
    }
    fputc('"', out);
}

char *tool_read_text(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "meshlm: %s: cannot open\n", path);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        char *b = realloc(buf, cap *= 2);
        if (!b) free(buf);
        buf = b;
    }
    int bad = ferror(f);
    if (f != stdin) fclose(f);
    if (!buf || bad) {
        fprintf(stderr, "meshlm: %s: %s\n", path, buf ? "read error" : "out of memory");
        free(buf);
        return NULL;
    }
    buf[n] = 0; /* n < cap: the loop stops on a short read */
    *len = n;
    return buf;
}

int tool_int(const char *cmd, const char *flag, const char *s, long long lo, long long hi,
             long long *out) {
    char *end;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || end == s || *end || errno || v < lo || v > hi) {
        tool_usage(cmd, "%s needs an integer in [%lld, %lld], got '%s'", flag, lo, hi, s ? s : "");
        return 0;
    }
    *out = v;
    return 1;
}

int tool_float(const char *cmd, const char *flag, const char *s, double lo, double hi,
               double *out) {
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || end == s || *end || errno || !isfinite(v) || v < lo || v > hi) {
        tool_usage(cmd, "%s needs a number in [%g, %g], got '%s'", flag, lo, hi, s ? s : "");
        return 0;
    }
    *out = v;
    return 1;
}

int tool_sampling_flag(const char *cmd, const char *flag, const char *value,
                       mlm_sampler_params *sp) {
    double d;
    long long ll;
    if (!strcmp(flag, "--temperature")) {
        if (!tool_float(cmd, flag, value, 0, 100, &d)) return 0;
        sp->temperature = (float)d;
    } else if (!strcmp(flag, "--top-p")) {
        if (!tool_float(cmd, flag, value, 1e-6, 1, &d)) return 0;
        sp->top_p = (float)d;
    } else if (!strcmp(flag, "--top-k")) {
        if (!tool_int(cmd, flag, value, 0, 1 << 24, &ll)) return 0;
        sp->top_k = (int32_t)ll;
    } else {
        if (!tool_int(cmd, flag, value, 0, (long long)1 << 62, &ll)) return 0;
        sp->seed = (uint64_t)ll;
    }
    return 1;
}

char *tool_default_model(const char *cmd) {
    char *p = tool_repo_path(TOOL_DEFAULT_GGUF);
    if (p) return p;
    p = tool_repo_path("models/default");
    if (p)
        fprintf(stderr,
                "meshlm %s: no -m given and %s is absent (scripts/setup.sh fetches it); "
                "using the tiny embedded model models/default, which babbles\n",
                cmd, TOOL_DEFAULT_GGUF);
    else
        fprintf(stderr,
                "meshlm %s: no -m given, and neither %s nor the embedded models/default "
                "is beside the build folder\n",
                cmd, TOOL_DEFAULT_GGUF);
    return p;
}

void tool_precision_resolve(tool_precision *p, const char *dir) {
    if (!p->optimizations) p->optimizations = mlm_model_default_profile(dir);
}

/* Chat's rule: the most precise profile whose weights a token reads stay under what decodes
 * TOOL_CHAT_TOKS tokens a second at a low TOOL_CHAT_BANDWIDTH: a fast reader takes 5-7
 * tokens a second, so the answer still streams 4x faster than anyone reads on a laptop with
 * one memory channel. Fixed numbers, not this machine's speed: every machine picks the same
 * profile, so gives the same answer. */
#define TOOL_CHAT_BANDWIDTH 10e9 /* bytes a second */
#define TOOL_CHAT_TOKS 25.0

const char *tool_chat_profile(const char *dir, char *why, size_t size) {
    const double budget = TOOL_CHAT_BANDWIDTH / TOOL_CHAT_TOKS, GB = 1e9;
    const char *dflt = mlm_model_default_profile(dir);
    static const char *const precise[] = {"f32", "bf16"};
    double bf16 = -1;
    for (int i = 0; i < 2; i++) {
        mlm_memory_plan plan;
        if (mlm_memory_plan_at(dir, 1, precise[i], NULL, NULL, &plan, NULL)) continue;
        if (plan.weights <= budget) {
            snprintf(why, size,
                     "the most precise profile whose weights (%.2f GB) stay under the %.2f GB a "
                     "token that decodes %.0f tok/s at %.0f GB/s",
                     plan.weights / GB, budget / GB, TOOL_CHAT_TOKS, TOOL_CHAT_BANDWIDTH / GB);
            return precise[i];
        }
        bf16 = plan.weights / GB;
    }
    if (bf16 >= 0)
        snprintf(why, size,
                 "the model's default: bf16 weights (%.2f GB) are over the %.2f GB a token that "
                 "decodes %.0f tok/s at %.0f GB/s",
                 bf16, budget / GB, TOOL_CHAT_TOKS, TOOL_CHAT_BANDWIDTH / GB);
    else
        snprintf(why, size, "the model's default");
    return dflt;
}

char *tool_repo_path(const char *rel) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = 0;
    for (int up = 0; up < 2; up++) { /* strip the file name, then its directory (build/) */
        char *slash = strrchr(exe, '/');
        if (!slash) return NULL;
        *slash = 0;
    }
    size_t len = strlen(exe) + strlen(rel) + 2;
    char *path = malloc(len);
    if (!path) return NULL;
    snprintf(path, len, "%s/%s", exe, rel);
    struct stat st;
    if (stat(path, &st) != 0) {
        free(path);
        return NULL;
    }
    return path;
}

double tool_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
