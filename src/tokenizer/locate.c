/* tokenizer/locate.c: where a model directory keeps its tokenizer file. */
#include <stdlib.h>

#include "core/mapfile.h"
#include "format/gguf.h"
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

int mlm_tokenizer_present(const char *path) {
    if (!path) return 0;
    if (!mlm_is_dir(path)) return mlm_is_file(path);
    char *file = mlm_tokenizer_locate(path);
    if (!file) file = mlm_gguf_find_in_dir(path);
    int found = file != NULL;
    free(file);
    return found;
}
