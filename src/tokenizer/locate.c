/* tokenizer/locate.c: where a model directory keeps its tokenizer file. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/mapfile.h"
#include "tokenizer/locate.h"

static const char *const CANDIDATES[] = {"tokenizer.model", "original/tokenizer.model",
                                         "tokenizer.json", "vocab.json"};

char *mlm_tokenizer_locate(const char *dir) {
    for (size_t i = 0; i < sizeof CANDIDATES / sizeof CANDIDATES[0]; i++) {
        char *file = mlm_path_join(dir, CANDIDATES[i]);
        if (!file) return NULL;
        int ok = mlm_is_file(file);
        if (ok && i == 3) { /* vocab.json only counts with its merges.txt */
            char *merges = mlm_path_join(dir, "merges.txt");
            ok = merges && mlm_is_file(merges);
            free(merges);
        }
        if (ok) return file;
        free(file);
    }
    return NULL;
}

/* Whether PATH is a regular file starting with "GGUF". */
static int has_gguf_magic(const char *path) {
    if (!mlm_is_file(path)) return 0;
    FILE *f = fopen(path, "rb");
    char m[4];
    int ok = f && fread(m, 1, 4, f) == 4 && memcmp(m, "GGUF", 4) == 0;
    if (f) fclose(f);
    return ok;
}

char *mlm_tokenizer_locate_gguf(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char *best = NULL, *best_name = NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcasecmp(e->d_name + n - 5, ".gguf") != 0) continue;
        if (best_name && strcmp(e->d_name, best_name) >= 0) continue;
        char *path = mlm_path_join(dir, e->d_name);
        char *name = strdup(e->d_name);
        if (path && name && has_gguf_magic(path)) {
            free(best);
            free(best_name);
            best = path;
            best_name = name;
        } else {
            free(path);
            free(name);
        }
    }
    closedir(d);
    free(best_name);
    return best;
}

int mlm_tokenizer_present(const char *path) {
    if (!path) return 0;
    if (!mlm_is_dir(path)) return mlm_is_file(path);
    char *file = mlm_tokenizer_locate(path);
    if (!file) file = mlm_tokenizer_locate_gguf(path);
    int found = file != NULL;
    free(file);
    return found;
}
