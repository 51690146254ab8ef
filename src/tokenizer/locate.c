/* tokenizer/locate.c: where a model directory keeps its tokenizer file. */
#include <stdlib.h>

#include "core/mapfile.h"
#include "tokenizer/locate.h"

static const char *const CANDIDATES[] = {"tokenizer.model", "original/tokenizer.model"};

char *mlm_tokenizer_locate(const char *dir) {
    for (size_t i = 0; i < sizeof CANDIDATES / sizeof CANDIDATES[0]; i++) {
        char *file = mlm_path_join(dir, CANDIDATES[i]);
        if (!file || mlm_is_file(file)) return file;
        free(file);
    }
    return NULL;
}

int mlm_tokenizer_present(const char *path) {
    if (!path) return 0;
    if (!mlm_is_dir(path)) return mlm_is_file(path);
    char *file = mlm_tokenizer_locate(path);
    int found = file != NULL;
    free(file);
    return found;
}
