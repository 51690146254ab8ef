/* tokenizer/locate.h: finding the tokenizer file inside a model directory. */
#ifndef MESHLM_TOKENIZER_LOCATE_H
#define MESHLM_TOKENIZER_LOCATE_H

/* The malloc'd path of DIR's tokenizer file, first found of: tokenizer.model,
 * original/tokenizer.model (tiktoken), tokenizer.json (Hugging Face), vocab.json when
 * merges.txt is beside it (the older Hugging Face layout); NULL when there is none (or on
 * allocation failure). */
char *mlm_tokenizer_locate(const char *dir);

/* When DIR has none of those, mlm_tokenizer_load uses the vocabulary of its GGUF file
 * (mlm_gguf_find_in_dir in format/gguf.h). */

#endif
