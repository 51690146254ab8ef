/* tokenizer/locate.h: finding the tokenizer file inside a model directory. */
#ifndef MESHLM_TOKENIZER_LOCATE_H
#define MESHLM_TOKENIZER_LOCATE_H

/* The malloc'd path of DIR's tokenizer file, first found of: tokenizer.model,
 * original/tokenizer.model (tiktoken), tokenizer.json (Hugging Face), vocab.json when
 * merges.txt is beside it (the older Hugging Face layout); NULL when there is none (or on
 * allocation failure). */
char *mlm_tokenizer_locate(const char *dir);

/* The malloc'd path of the GGUF file in DIR whose vocabulary mlm_tokenizer_load uses when
 * DIR has none of the files above: of the files named *.gguf that start with the GGUF
 * magic, the first by name (bytewise). NULL when there is none. */
char *mlm_tokenizer_locate_gguf(const char *dir);

#endif
